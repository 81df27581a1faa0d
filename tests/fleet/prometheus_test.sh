#!/usr/bin/env bash
# A real Prometheus in the loop: three fake guests, each with haltpolld (kernel mode on its fake
# tree, static policy) and its own node_exporter on loopback; Debian's prometheus scrapes them every
# second and evaluates a copy of contrib/prometheus/haltpolld.rules.yml whose windows and `for:`
# are divided by 60 (minutes become seconds). Queried over the HTTP API:
#   - every recording rule has a value, and the poll-CPU shares are those the fake trees advance;
#   - "waste" (a 150 us timer at a static 200000 ns) fires HaltpollPollingDoesNotPay, and "pays"
#     (a pipe ping-pong at the same value) never even has it pending;
#   - "menu" (kernel mode asked for under the menu governor, a broken state file left behind, 30 %
#     steal, a process holding /dev/cpu_dma_latency at 0) fires HaltpollKernelModeInactive with the
#     reason, HaltpollParametersNotRestored, HaltpollStealAboveBackoff and HaltpollQosForcesPolling;
#   - every query of contrib/grafana/haltpolld.json returns data (check_dashboard.py --prometheus).
set -euo pipefail
: "${RULES:?the rules file (set by CTest)}" "${DASHBOARD:?the dashboard (set by CTest)}"
# shellcheck source=tests/fleet/fleet_lib.sh
. "$(dirname "$0")/fleet_lib.sh"
fleet_setup
t0=$SECONDS

start_guest waste --profile wasteful --cpus 2 --step 0.2
start_guest pays --profile paying --cpus 2 --step 0.2
mkdir -p "$FLEET_TMP/menu/state"
echo '{not json' >"$FLEET_TMP/menu/state/haltpoll-params.json"
start_guest menu --profile idle --cpus 2 --governor menu --steal-ratio 0.3 --cpu-dma-latency 0 \
  --qos-holder 4242:cyclictest --step 0.2

declare -A port
for g in waste pays menu; do
  start_node_exporter "$FLEET_TMP/$g/textfile"
  port[$g]=$EXPORTER_PORT
done

rules="$FLEET_TMP/haltpolld.rules.short.yml"
sed -E 's/\[([0-9]+)m\]/[\1s]/g; s/\[([0-9]+)h\]/[\1m]/g; s/offset ([0-9]+)m/offset \1s/g; s/for: ([0-9]+)m/for: \1s/g' \
  "$RULES" >"$rules"
# Hours became minutes and minutes seconds: as many minute windows as there were hour windows.
if grep -En '\[[0-9]+h\]|offset [0-9]+h|for: [0-9]+[mh]' "$rules" ||
   [ "$(grep -Eo '\[[0-9]+m\]' "$rules" | wc -l)" != "$(grep -Eo '\[[0-9]+h\]' "$RULES" | wc -l)" ]; then
  fail "windows left unshortened"
fi
"$PROMTOOL" check rules "$rules" >/dev/null || fail "the shortened rules do not load"

cat >"$FLEET_TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: ["$rules"]
scrape_configs:
  - job_name: node
    static_configs:
      - targets: ["127.0.0.1:${port[waste]}"]
        labels: {guest: waste}
      - targets: ["127.0.0.1:${port[pays]}"]
        labels: {guest: pays}
      - targets: ["127.0.0.1:${port[menu]}"]
        labels: {guest: menu}
EOF
"$PROMTOOL" check config "$FLEET_TMP/prometheus.yml" >/dev/null || fail "prometheus.yml"
start_prometheus "$FLEET_TMP/prometheus.yml"
echo "prometheus on 127.0.0.1:$PROM_PORT; exporters ${port[*]}"

# count EXPR: number of series in the instant result.
count() { prom_query "$1" | "$PYTHON3" -c 'import json,sys; print(len(json.load(sys.stdin)["data"]["result"]))'; }
# value EXPR: the single result's value.
value() {
  prom_query "$1" | "$PYTHON3" -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if len(r) == 1 else "none")'
}
firing() { [ "$(count "ALERTS{alertstate=\"firing\",$1}")" -ge 1 ]; }

wait_until 60 firing 'alertname="HaltpollPollingDoesNotPay",guest="waste"' ||
  fail "HaltpollPollingDoesNotPay did not fire for waste within 60 s: $(prom_query 'ALERTS')"
echo "HaltpollPollingDoesNotPay firing for waste after $((SECONDS - t0)) s"
wait_until 20 firing 'alertname="HaltpollKernelModeInactive",guest="menu"' || fail "HaltpollKernelModeInactive did not fire for menu"
wait_until 10 firing 'alertname="HaltpollParametersNotRestored",guest="menu"' || fail "HaltpollParametersNotRestored did not fire for menu"
wait_until 20 firing 'alertname="HaltpollStealAboveBackoff",guest="menu"' || fail "HaltpollStealAboveBackoff did not fire for menu"
wait_until 20 firing 'alertname="HaltpollQosForcesPolling",guest="menu",reason="cpu_dma_latency"' ||
  fail "HaltpollQosForcesPolling did not fire for menu: $(prom_query 'haltpoll_polling_override')"

# The reason travels as a label from the daemon to the alert.
reason="$(prom_query 'ALERTS{alertname="HaltpollKernelModeInactive",guest="menu"}' |
  "$PYTHON3" -c 'import json,sys; print(json.load(sys.stdin)["data"]["result"][0]["metric"]["reason"])')"
case "$reason" in *"'menu'"*) ;; *) fail "reason label: $reason" ;; esac

# Silent where they should be: nothing pending or firing for "pays" or "waste" beyond their own.
[ "$(count 'ALERTS{guest="pays"}')" = 0 ] || fail "alerts for pays: $(prom_query 'ALERTS{guest="pays"}')"
[ "$(count 'ALERTS{guest="waste",alertname!="HaltpollPollingDoesNotPay"}')" = 0 ] ||
  fail "unexpected alerts for waste: $(prom_query 'ALERTS{guest="waste"}')"
[ "$(count 'ALERTS{guest="menu",alertname="HaltpollPollingDoesNotPay"}')" = 0 ] || fail "idle menu guest said to waste"

# Every recording rule produces a value.
while read -r r; do
  n="$(count "$r")"
  [ "$n" -ge 1 ] || fail "recording rule $r has no value"
done < <(sed -nE 's/^ *- record: *([^ ]+) *$/\1/p' "$RULES")

# The shares are the fake trees' rates (per CPU: 0.466 s/s waste, 0.196 s/s pays).
check_range() {  # check_range EXPR LOW HIGH
  local v; v="$(value "$1")"
  awk -v v="$v" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "none" && v + 0 >= lo && v + 0 <= hi) }' ||
    fail "$1 = $v, want in [$2, $3]"
  echo "$1 = $v"
}
check_range 'instance:haltpoll_poll_cpu:ratio_rate5m{guest="waste"}' 0.40 0.53
check_range 'instance:haltpoll_poll_cpu:ratio_rate5m{guest="pays"}' 0.16 0.23
check_range 'instance:haltpoll_poll_seconds_per_wake:rate5m{guest="waste"}' 100e-6 180e-6
check_range 'instance:haltpoll_poll_seconds_per_wake:rate5m{guest="pays"}' 0.5e-6 3e-6
check_range 'instance:haltpoll_poll_hit:ratio_rate5m{guest="pays"}' 0.99 1
check_range 'instance:haltpoll_guest_halt_poll_seconds:avg5m{guest="waste"}' 0.0002 0.0002
check_range 'instance:haltpoll_steal:ratio_rate5m{guest="menu"}' 0.25 0.35
check_range 'instance:haltpoll_steal:ratio_rate5m{guest="pays"}' 0 0

# The dashboard's queries, as Grafana would send them for the "waste" guest.
"$PYTHON3" "$FLEET_DIR/check_dashboard.py" "$DASHBOARD" "$RULES" --prometheus "http://127.0.0.1:$PROM_PORT" \
  --var "instance=127.0.0.1:${port[waste]}" --var "cpu=.*" --window 5s || fail "dashboard queries"

echo "PASS in $((SECONDS - t0)) s"
