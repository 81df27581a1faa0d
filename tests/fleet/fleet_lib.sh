# shellcheck shell=bash
# Shared by the fleet tests and contrib/grafana/plot-panels.sh (sourced, bash): fake guests whose
# counters advance (fake_guest.py), haltpolld on them, node_exporter and Prometheus on loopback
# ports. Every process started here is recorded and stopped by fleet_cleanup, which the caller
# installs as an EXIT trap. Needs: HALTPOLLD, NODE_EXPORTER, PYTHON3 (and PROMETHEUS for
# start_prometheus) in the environment.

FLEET_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FLEET_PIDS=()
FLEET_TMP=""
# Each server also dies on its own after this long, should the caller be killed past its traps.
FLEET_LIFETIME=(timeout --kill-after=5 "${FLEET_MAX_SECONDS:-300}")

fail() { echo "FAIL: $*" >&2; exit 1; }

fleet_setup() {
  FLEET_TMP="$(mktemp -d /tmp/haltpolld-fleet-XXXXXX)"
  # node_exporter runs as its own user and must reach the textfile directories below this one.
  chmod 0755 "$FLEET_TMP"
  trap fleet_cleanup EXIT
  trap 'exit 1' INT TERM
}

fleet_cleanup() {
  local rc=$?
  local p
  for p in "${FLEET_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${FLEET_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$rc" != 0 ] && [ -n "$FLEET_TMP" ]; then
    local f
    for f in "$FLEET_TMP"/*.log; do [ -f "$f" ] && { echo "--- $f (tail)" >&2; tail -n 20 "$f" >&2; }; done
  fi
  [ -n "$FLEET_TMP" ] && rm -rf "$FLEET_TMP"
  return "$rc"
}

# A loopback port that was free a moment ago (the callers retry when a server loses the race).
free_port() {
  "$PYTHON3" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_until SECONDS COMMAND...: polls COMMAND every 0.2 s until it succeeds or the time is up.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -ge "$deadline" ] && return 1
    sleep 0.2
  done
}

# start_guest NAME FAKE_GUEST_ARGS... -- DAEMON_CONFIG_JSON_FRAGMENT
# A fake tree under $FLEET_TMP/NAME advanced by fake_guest.py, and haltpolld on it (umask 0077 as
# under the unit) writing $FLEET_TMP/NAME/textfile/haltpolld.prom.
start_guest() {
  local name="$1"; shift
  local args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  local extra="${1:-}"
  local g="$FLEET_TMP/$name"
  mkdir -p "$g/state" "$g/textfile"
  chmod 0755 "$g" "$g/textfile"
  "$PYTHON3" "$FLEET_DIR/fake_guest.py" "$g/root" "${args[@]}" --init-only || fail "fake_guest.py $name"
  "${FLEET_LIFETIME[@]}" "$PYTHON3" "$FLEET_DIR/fake_guest.py" "$g/root" "${args[@]}" >"$FLEET_TMP/$name-guest.log" 2>&1 &
  FLEET_PIDS+=("$!")
  "$PYTHON3" - "$g" "$extra" >"$g/haltpolld.json" <<'PY'
import json, sys
g, extra = sys.argv[1], sys.argv[2]
c = {"mode": "kernel", "sysfs_root": g + "/root", "state_dir": g + "/state",
     "socket": {"path": g + "/io.haltpolld"}, "probe": {"rate_hz": 0},
     "tuner": {"policy": "static", "interval_ms": 500},
     "metrics": {"textfile": g + "/textfile/haltpolld.prom"}}
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict): merge(a[k], v)
        else: a[k] = v
merge(c, json.loads(extra) if extra else {})
print(json.dumps(c))
PY
  (umask 0077; exec "${FLEET_LIFETIME[@]}" "$HALTPOLLD" --config "$g/haltpolld.json" --log-level "${FLEET_LOG_LEVEL:-warn}") >"$FLEET_TMP/$name-haltpolld.log" 2>&1 &
  FLEET_PIDS+=($!)
  wait_until 15 test -s "$g/textfile/haltpolld.prom" || fail "haltpolld ($name) wrote no textfile"
}

# The exporter's user: Debian's package creates "prometheus"; the point is that it is not root.
exporter_user() {
  if [ "$(id -u)" = 0 ]; then
    if id prometheus >/dev/null 2>&1; then echo prometheus; else echo nobody; fi
  fi
}

# start_on_free_port NAME READY_PATH COMMAND...: runs COMMAND with each "{port}" replaced by a free
# loopback port, and again on another port when http://127.0.0.1:PORT/READY_PATH does not answer
# (another process took the port first). Sets PORT.
start_on_free_port() {
  local name="$1" ready="$2" port pid
  shift 2
  for _ in 1 2 3 4 5; do
    port="$(free_port)"
    "${FLEET_LIFETIME[@]}" "${@//\{port\}/$port}" >"$FLEET_TMP/$name-$port.log" 2>&1 &
    pid=$!
    FLEET_PIDS+=("$pid")
    if wait_until 20 curl -sf "http://127.0.0.1:$port/$ready"; then
      PORT="$port"
      return 0
    fi
    kill "$pid" 2>/dev/null || true
  done
  fail "$name did not start (logs in $FLEET_TMP)"
}

# start_node_exporter TEXTFILE_DIR: sets EXPORTER_PORT. Only the textfile collector, on loopback.
start_node_exporter() {
  local user cmd=()
  user="$(exporter_user)"
  [ -n "$user" ] && cmd=(setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups --inh-caps=-all)
  start_on_free_port node_exporter metrics "${cmd[@]}" "$NODE_EXPORTER" --web.listen-address="127.0.0.1:{port}" \
    --collector.disable-defaults --collector.textfile --collector.textfile.directory="$1"
  # shellcheck disable=SC2034  # read by the callers
  EXPORTER_PORT="$PORT"
}

# start_prometheus CONFIG_FILE: sets PROM_PORT; storage in the temporary directory.
start_prometheus() {
  start_on_free_port prometheus -/ready "$PROMETHEUS" --config.file="$1" --web.listen-address="127.0.0.1:{port}" \
    --storage.tsdb.path="$FLEET_TMP/tsdb-{port}" --storage.tsdb.retention.time=1h
  PROM_PORT="$PORT"
}

# prom_query EXPR [TIME]: the JSON of an instant query.
prom_query() {
  local args=(--data-urlencode "query=$1")
  [ -n "${2:-}" ] && args+=(--data-urlencode "time=$2")
  curl -sf "http://127.0.0.1:$PROM_PORT/api/v1/query" "${args[@]}"
}
