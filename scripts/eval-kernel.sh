#!/usr/bin/env bash
# Kernel-mode evaluation on a real haltpoll guest: haltpolld's policies against the static ladder, on
# synthetic loads and on real Debian applications, with verdicts decided by bootstrap intervals over
# rounds (docs/performance.md, "Method of the real-guest evaluation"; the targets: docs/tuning.md,
# "Evaluation").
#
# Design
# - Settings: the static ladder guest_halt_poll_ns = 0 30000 50000 75000 100000 200000 400000 and the
#   daemon's policies balanced, budget and latency (haltpolld in kernel mode, every cell its own
#   state directory and socket under a temporary directory). 10000 and 20000 are left out: on this
#   guest 10000 measured as 0 on every load and 20000 ran the pipe 2.5 x slower than the best static
#   and every closed loop below 30000 (2026-12-01), so neither can be the best static nor the static
#   that meets every target; 75000 is in because it is the one value that might (the timer's idle
#   periods are 150 us long, the database's need 100000).
# - Loads (LOADS): the 150 us timer, Poisson 2000/s and the idle guest (where polling cannot pay:
#   their targets are poll CPU and latency against cap 0), and the applications, each server pinned
#   to CPU 1 and its client to CPU 0 with taskset (every tool allows it, as bench_load_rr pins
#   its two ends): sockperf UDP ping-pong (the pipe's shape: one message each way, every wake-up a
#   remote one), redis-server with redis-benchmark GET/SET at 1 and 8 clients (a key-value RPC:
#   replaces bench_load_rr), nginx serving a 512-byte file to wrk over keep-alive at 1 and 16
#   connections, memcached with memcaslap (memaslap of libmemcached-tools) at 1 and 8, and
#   MariaDB with sysbench oltp_read_only at 1 thread (a real database client: replaces the
#   synthetic "db"). The synthetic pipe, rr and db, sockperf with 4 clients and MariaDB with
#   4 threads remain available (LOADS="... pipe rr db sockperf_c4 mariadb_t4"), left out of the
#   default for time. Each server runs as nobody with its own temporary directory, port and
#   configuration on 127.0.0.1, started by this script and stopped after its block; no system
#   service is used.
# - Order: a round runs every load once as a block, the loads in a random order; inside a block
#   every setting once, in a random order (shuf with a random source drawn from SEED, printed at
#   the start: SEED=<n> repeats a run's order). A block starts the load's server, runs its cells
#   and stops it, so that an idle server's timers never run under another load's cells and all
#   settings of a load are measured within minutes of each other.
# - A static cell: the value written, every CPU's poll limit reset (a governor round trip), the
#   load for STATIC_SECONDS (5). A daemon cell: the governor reset, then haltpolld started at the
#   same moment as the load and the whole DAEMON_SECONDS (30) measured: the daemon's start, its
#   search and its probes count, no warm-up is dropped. A static is in force from the first
#   microsecond, so its shorter cell measures the same thing with more noise. sockperf's cell
#   starts when its client starts the test (it sleeps 2 s first) and ends with it; memaslap, which
#   idles a second after its run before printing, runs longer and is stopped after the total of
#   the cell's last second. Poll CPU is the POLL-state residency per CPU over the cell.
# - Rounds: at least MIN_ROUNDS (3); then, while a verdict the run stops on is undecided
#   (`eval-kernel-report.py --undecided`), another round of only the loads whose verdicts are
#   undecided, until MAX_ROUNDS (8) or the time budget BUDGET_MINUTES (90, the whole run: a block
#   is not started if it would end after the budget minus what the load-change run needs).
# - Load change (once per run, judged over whole phases): pipe -> timer -> load_rr -> idle,
#   CHANGE_SECONDS (15) each, in 1 s chunks, the daemon started with the first phase; the statics
#   of CHANGE_SETTINGS through the same chunks as its baseline.
# - kill -9 of a daemon that changed the values, a restart with the same state directory, and a
#   check that the values found are back before its first tick.
# - Time on a 2-vCPU guest, estimated from the cell lengths and the per-cell costs the smoke run
#   measured (about 1 s per static cell and 1.5 s per daemon cell for the reset, the quiet check,
#   the counters, the row and the daemon's start and stop; 2 s per application block, 5 s for
#   MariaDB's; 2.2 s more per sockperf cell): per load 3 x (30 + 1.5) + 7 x (5 + 1) = 136.5 s,
#   11 loads about 25 min a round, 3 rounds 76 min, the load-change run 5 x 62 s x 1.1 = 6 min,
#   MariaDB's data directory and table 0.5 min: about 83 min; what is left of the 90 goes to
#   blocks of undecided loads. The script prints its estimate at the start (EVAL_ESTIMATE=1:
#   only that, for any LOADS and SETTINGS).
# The report (scripts/eval-kernel-report.py) chooses each load's best static on the rounds of one
# parity and judges every setting against it on the rounds of the other (both ways), with a
# bootstrap 95 % interval over rounds, paired by round.
#
# It writes the REAL /sys/module/haltpoll/parameters: it holds /tmp/haltpoll-real-sysfs.lock for its
# whole run and puts back the values it FOUND (not the kernel defaults) in a trap, daemon or not.
# EVAL_SMOKE=1 runs the plumbing on a fake haltpoll tree instead (tests/fleet/fake_guest.py advances
# its counters; the daemon's sysfs_root points at it): tiny cells, one round, every load including
# each application's start, load and stop, the load change, the kill -9 check and the report. It
# refuses a fake root that is / or a real sysfs or procfs, and every write it makes must land under
# the fake root (ctest -L eval runs it: tests/eval).
#
# Usage: scripts/eval-kernel.sh [build_dir] [out_dir]
#   build_dir  a built tree with haltpolld and bench_load_{rr,timer,poisson} (default build/release)
#   out_dir    where results go (default <build_dir>/eval-kernel)
# Env: SEED, LOADS, SETTINGS, MIN_ROUNDS, MAX_ROUNDS, BUDGET_MINUTES, DAEMON_SECONDS, STATIC_SECONDS,
#      CHANGE_SECONDS, CHANGE_SETTINGS, SKIP_CHANGE=1, SKIP_KILL=1, RR_ARGS ("-w 20 -t 10"),
#      DB_ARGS ("-w 60 -t 60"), STOP_SETTINGS (balanced: the settings whose verdicts must be
#      decided, besides "no static value meets them all"), MARIADB_ROWS (10000),
#      EVAL_SMOKE=1 [EVAL_FAKE_ROOT=dir], EVAL_ESTIMATE=1.
#   A setting is a policy (balanced, budget, latency; <policy>_gscap with tuner.grow_start_at_cap),
#   static_<ns>, or a diagnostic static_<ns>_gs (grow_start ns / 2) or static_<ns>_gscap
#   (grow_start ns), which is never a best static.
# Needs a guest whose cpuidle driver is haltpoll (it refuses any other: the parameters would reach
# no idle path), root (not in smoke mode), perf (linux-perf), python3, the applications of
# `scripts/install-deps.sh --eval`, gnuplot for the plot.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC="$(pwd)"
BUILD="${1:-build/release}"
OUT="${2:-$BUILD/eval-kernel}"
SMOKE="${EVAL_SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
  # Tiny cells, one round, every load (the plumbing, not a measurement).
  DEF_LOADS="timer poisson idle pipe rr db sockperf sockperf_c4 redis_c1 redis_c8 nginx_c1 nginx_c16 memcached_c1 memcached_c8 mariadb mariadb_t4"
  DEF_SETTINGS="static_0 static_75000 static_75000_gscap balanced balanced_gscap"
  DEF_DAEMON_S=2 DEF_STATIC_S=1 DEF_MIN_ROUNDS=1 DEF_MAX_ROUNDS=1 DEF_CHANGE_S=2 DEF_QUIET_WAIT=0
  DEF_CHANGE_SETTINGS="balanced static_0 static_400000" DEF_BUDGET=30
else
  DEF_LOADS="timer poisson idle sockperf redis_c1 redis_c8 nginx_c1 nginx_c16 memcached_c1 memcached_c8 mariadb"
  DEF_SETTINGS="static_0 static_30000 static_50000 static_75000 static_100000 static_200000 static_400000 balanced budget latency"
  DEF_DAEMON_S=30 DEF_STATIC_S=5 DEF_MIN_ROUNDS=3 DEF_MAX_ROUNDS=8 DEF_CHANGE_S=15 DEF_QUIET_WAIT=120
  DEF_CHANGE_SETTINGS="balanced static_0 static_50000 static_100000 static_400000" DEF_BUDGET=90
fi
LOADS="${LOADS:-$DEF_LOADS}"
SETTINGS="${SETTINGS:-$DEF_SETTINGS}"
DAEMON_SECONDS="${DAEMON_SECONDS:-$DEF_DAEMON_S}"
STATIC_SECONDS="${STATIC_SECONDS:-$DEF_STATIC_S}"
MIN_ROUNDS="${MIN_ROUNDS:-$DEF_MIN_ROUNDS}"
MAX_ROUNDS="${MAX_ROUNDS:-$DEF_MAX_ROUNDS}"
BUDGET_MINUTES="${BUDGET_MINUTES:-$DEF_BUDGET}"
CHANGE_SECONDS="${CHANGE_SECONDS:-$DEF_CHANGE_S}"
CHANGE_SETTINGS="${CHANGE_SETTINGS:-$DEF_CHANGE_SETTINGS}"
QUIET_WAIT="${QUIET_WAIT:-$DEF_QUIET_WAIT}"
QUIET_IDLE_PERCENT="${QUIET_IDLE_PERCENT:-85}"
STOP_SETTINGS="${STOP_SETTINGS:-balanced}"
RR_ARGS="${RR_ARGS:--w 20 -t 10}"
DB_ARGS="${DB_ARGS:--w 60 -t 60}"
read -r -a RR_ARGV <<< "$RR_ARGS"   # bench_load_rr's options, one word each
read -r -a DB_ARGV <<< "$DB_ARGS"
MARIADB_ROWS="${MARIADB_ROWS:-10000}"
SEED="${SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
NAMES=(guest_halt_poll_ns guest_halt_poll_grow guest_halt_poll_grow_start guest_halt_poll_shrink
       guest_halt_poll_allow_shrink)
T_START=$(date +%s)
IS_ROOT=0
[ "$(id -u)" = 0 ] && IS_ROOT=1

is_policy() { case ${1%%_*} in balanced | budget | latency) return 0 ;; esac; return 1; }
app_of() {
  case $1 in
    sockperf*) echo sockperf ;; redis_*) echo redis ;; nginx_*) echo nginx ;;
    memcached_*) echo memcached ;; mariadb*) echo mariadb ;; *) echo "" ;;
  esac
}

# ---- time: the estimate, and the budget of extra rounds ----
n_pol=0 n_stat=0
for s in $SETTINGS; do if is_policy "$s"; then n_pol=$((n_pol + 1)); else n_stat=$((n_stat + 1)); fi; done
n_change=0
[ "${SKIP_CHANGE:-0}" = 1 ] || n_change=$(wc -w <<< "$CHANGE_SETTINGS")
# block_estimate <load>: seconds, with the per-cell costs the smoke run measured.
block_estimate() {
  local extra=0 cell=0
  case $(app_of "$1") in mariadb) extra=5 ;; "") extra=0 ;; *) extra=2 ;; esac
  # sockperf waits 2 s before its test, memaslap is stopped 0.3 s after its last total.
  case $1 in sockperf*) cell=2.2 ;; memcached*) cell=0.3 ;; esac
  awk -v p=$n_pol -v s=$n_stat -v d="$DAEMON_SECONDS" -v st="$STATIC_SECONDS" -v e=$extra -v c=$cell \
    'BEGIN { printf "%d", p * (d + 1.5 + c) + s * (st + 1 + c) + e }'
}
CHANGE_EST=$(( n_change * (4 * CHANGE_SECONDS + 2) * 11 / 10 ))
round_est=0
for load in $LOADS; do round_est=$(( round_est + $(block_estimate "$load") )); done
echo "eval-kernel: estimate: $(( round_est / 60 )) min a round, $(( (MIN_ROUNDS * round_est + CHANGE_EST + 30) / 60 )) min for the $MIN_ROUNDS rounds at least run and the load-change run; budget $BUDGET_MINUTES min" >&2
[ "${EVAL_ESTIMATE:-0}" != 1 ] || exit 0  # the estimate only


DAEMON="$BUILD/src/daemon/haltpolld"
B="$BUILD/bench"
for bin in "$DAEMON" "$B/bench_load_rr" "$B/bench_load_timer" "$B/bench_load_poisson"; do
  [ -x "$bin" ] || { echo "eval-kernel: $bin missing; build haltpolld and the bench_load_* targets" >&2; exit 1; }
done

# The commands each load needs (scripts/install-deps.sh --eval installs the applications).
load_tools() {
  case $1 in
    pipe) echo perf ;;
    sockperf*) echo sockperf ;;
    redis_*) echo redis-server redis-benchmark ;;
    nginx_*) echo nginx wrk ;;
    memcached_*) echo memcached memcaslap ;;
    mariadb*) echo mariadbd mariadb-install-db mariadb sysbench ;;
  esac
}
PATH="$PATH:/usr/sbin:/sbin"  # nginx and mariadbd
missing=""
for load in $LOADS; do
  for t in $(load_tools "$load"); do command -v "$t" >/dev/null || missing="$missing $t"; done
done
[ "${SKIP_CHANGE:-0}" = 1 ] || command -v perf >/dev/null || missing="$missing perf"
[ -z "$missing" ] || { echo "eval-kernel: missing:$missing (scripts/install-deps.sh --eval; perf: linux-perf)" >&2; exit 1; }

# ---- the tree written: the real /sys, or a fake one (smoke mode) ----
# shellcheck source=scripts/lib/haltpoll-guest.sh
. "$SRC/scripts/lib/haltpoll-guest.sh"
FAKE_GUEST_PID=""
if [ "$SMOKE" = 1 ]; then
  if [ -n "${EVAL_FAKE_ROOT:-}" ]; then
    SYSROOT="$(realpath -m "$EVAL_FAKE_ROOT")"
  else
    SYSROOT="$(mktemp -d /tmp/haltpolld-eval-fake-XXXXXX)"
  fi
  SYSROOT="$(make_fake_root "$SYSROOT" eval-kernel)" || exit 1
  R="$SYSROOT"
else
  [ -z "${EVAL_FAKE_ROOT:-}" ] || { echo "eval-kernel: EVAL_FAKE_ROOT needs EVAL_SMOKE=1" >&2; exit 1; }
  SYSROOT=/
  R=""
fi
P="$R/sys/module/haltpoll/parameters"
CPUIDLE="$R/sys/devices/system/cpu/cpuidle"
G="$CPUIDLE/current_governor"
PROC_STAT="$R/proc/stat"

# sysfs_write <value> <file>: guest_write (scripts/lib) with this run's fake root, empty in a real run.
sysfs_write() {
  guest_write "$R" eval-kernel "$1" "$2"
}

if [ "$SMOKE" != 1 ]; then
  [ "$IS_ROOT" = 1 ] || { echo "eval-kernel: needs root (writes $P)" >&2; exit 1; }
fi
[ -d "$P" ] || { echo "eval-kernel: $P does not exist" >&2; exit 1; }
require_haltpoll_driver "$CPUIDLE" eval-kernel || exit 1
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# Every writer of the real parameters holds this lock for its whole run (tests and scripts alike).
# The smoke run writes none of them and takes no lock.
if [ "$SMOKE" != 1 ]; then
  exec 9>/tmp/haltpoll-real-sysfs.lock
  flock 9
fi
declare -A FOUND
for n in "${NAMES[@]}"; do FOUND[$n]="$(cat "$P/$n")"; done
# The daemon switches the cpuidle governor for a moment (tuner.reset_limits): put it back too.
FOUND_GOV="$(cat "$G")"
echo "eval-kernel: found $(for n in "${NAMES[@]}"; do printf '%s=%s ' "$n" "${FOUND[$n]}"; done)" >&2

DAEMON_PID=""
SERVER_PIDS=()
TMP="$(mktemp -d /tmp/haltpolld-eval-XXXXXX)"
# The applications' own directory: owned by the unprivileged user they run as.
APPS="$(mktemp -d /tmp/haltpolld-eval-apps-XXXXXX)"
APP_UID=65534 APP_GID=65534
[ "$IS_ROOT" = 1 ] && chown "$APP_UID:$APP_GID" "$APPS"
stop_daemon() {
  if [ -n "$DAEMON_PID" ]; then
    kill "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
  fi
}
# stop_servers: the servers this script started, by their process ids (TERM, then KILL after 10 s).
stop_servers() {
  local pid i
  for pid in "${SERVER_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${SERVER_PIDS[@]}"; do
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
  done
  SERVER_PIDS=()
}
# The idle cells of the daemon's policies count its eBPF programs' run time (kernel.bpf_stats_enabled
# for the cell only: it adds two clock reads to every run), found value put back. Not in smoke mode:
# the daemon on a fake tree attaches no program, and the smoke run writes no kernel setting.
BPF_STATS=/proc/sys/kernel/bpf_stats_enabled
FOUND_BPF_STATS=""
[ "$SMOKE" = 1 ] || FOUND_BPF_STATS="$(cat "$BPF_STATS" 2>/dev/null || echo "")"
put_back() {
  for n in "${NAMES[@]}"; do sysfs_write "${FOUND[$n]}" "$P/$n" || true; done
  [ "$(cat "$G")" = "$FOUND_GOV" ] || sysfs_write "$FOUND_GOV" "$G" || true
  [ -z "$FOUND_BPF_STATS" ] || sysfs_write "$FOUND_BPF_STATS" "$BPF_STATS" || true
}
# Summed run time (ns) of haltpolld's eBPF programs (src/bpf/idle_trace.bpf.c), 0 without stats.
bpf_run_ns() {
  bpftool -j prog show 2>/dev/null | python3 -c '
import json, sys
names = {"cpu_idle_btf", "cpu_idle_raw", "limit_btf", "limit_raw", "ipi_btf", "ipi_raw"}
try:
    progs = json.load(sys.stdin)
except ValueError:
    progs = []
print(sum(p.get("run_time_ns", 0) for p in progs if p.get("name") in names))' 2>/dev/null || echo 0
}
# fresh_limits: every CPU's poll limit back to 0 (a governor round trip), so that each cell starts
# as a guest booted with its value would, not with the limits the previous cell's cap left behind
# (a CPU that never halts keeps them: docs/tuning.md, "A lower cap that never arrives").
fresh_limits() {
  [ "$FOUND_GOV" = haltpoll ] || return 0
  { sysfs_write menu "$G" 2>/dev/null && sysfs_write haltpoll "$G"; } || sysfs_write "$FOUND_GOV" "$G" || true
}
restore() {
  local rc=$?
  mkdir -p "$OUT/app-logs" 2>/dev/null || true
  stop_daemon
  stop_servers
  put_back
  local bad=0
  for n in "${NAMES[@]}"; do
    if [ "$(cat "$P/$n")" != "${FOUND[$n]}" ]; then echo "eval-kernel: $n NOT restored" >&2; bad=1; fi
  done
  if [ "$(cat "$G")" != "$FOUND_GOV" ]; then echo "eval-kernel: governor NOT restored" >&2; bad=1; fi
  [ $bad = 0 ] && echo "eval-kernel: haltpoll parameters restored to the values found: $(for n in "${NAMES[@]}"; do printf '%s=%s ' "$n" "$(cat "$P/$n")"; done)" >&2
  if [ -n "$FAKE_GUEST_PID" ]; then kill "$FAKE_GUEST_PID" 2>/dev/null || true; wait "$FAKE_GUEST_PID" 2>/dev/null || true; fi
  # The servers' own logs (not their data) stay with the results.
  (cd "$APPS" && find . -name '*.log' -size -10M -exec cp --parents {} "$OUT/app-logs" \;) 2>/dev/null || true
  rm -rf "$TMP" "$APPS"
  [ "$SMOKE" = 1 ] && [ -z "${EVAL_FAKE_ROOT:-}" ] && rm -rf "$SYSROOT"
  [ $bad = 0 ] || rc=1
  exit $rc
}
trap restore EXIT
trap 'exit 130' INT TERM

if [ "$SMOKE" = 1 ]; then
  # The fake guest's counters advance like the 150 us timer's at the cap the tree holds.
  python3 tests/fleet/fake_guest.py "$SYSROOT" --cpus 2 --profile timer --step 0.25 > "$OUT/fake-guest.log" 2>&1 &
  FAKE_GUEST_PID=$!
fi

NCPU=$(nproc)
# The applications' placement: client on CPU 0, server on CPU 1 (as bench_load_rr), where there are two.
if [ "$NCPU" -ge 2 ]; then CLIENT=(taskset -c 0) SERVER=(taskset -c 1); else CLIENT=() SERVER=(); fi
{
  echo "{\"kernel\":\"$(uname -r)\",\"cpus\":$NCPU,\"smoke\":$([ "$SMOKE" = 1 ] && echo true || echo false),"
  echo "\"sysfs_root\":\"$SYSROOT\",\"seed\":$SEED,"
  echo "\"cpuidle_driver\":\"$(cat "$CPUIDLE/current_driver" 2>/dev/null || echo unreadable)\","
  echo "\"cpuidle_governor\":\"$(cat "$G" 2>/dev/null || cat "$CPUIDLE/current_governor_ro" 2>/dev/null || echo unreadable)\","
  echo "\"cpu_model\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\","
  echo "\"loadavg_at_start\":\"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "\"loads\":\"$LOADS\",\"settings\":\"$SETTINGS\",\"daemon_seconds\":$DAEMON_SECONDS,"
  echo "\"static_seconds\":$STATIC_SECONDS,\"min_rounds\":$MIN_ROUNDS,\"max_rounds\":$MAX_ROUNDS,"
  echo "\"budget_minutes\":$BUDGET_MINUTES,\"stop_settings\":\"$STOP_SETTINGS\","
  echo "\"date\":\"$(date -u +%FT%TZ)\"}"
} > "$OUT/env.json"
echo "eval-kernel: $(tr -d '\n' < "$OUT/env.json")" >&2
echo "eval-kernel: SEED=$SEED (SEED=$SEED repeats this run's order)" >&2

# Per-CPU POLL-state time in µs, "t0 t1 ..." (cpuidle state names; POLL is the polling state).
poll_us() {
  local c d out=""
  for c in "$R"/sys/devices/system/cpu/cpu[0-9]*; do
    [ -d "$c/cpuidle" ] || continue
    for d in "$c"/cpuidle/state*; do
      [ "$(cat "$d/name")" = POLL ] && out="$out $(cat "$d/time")"
    done
  done
  echo "$out"
}
now_ns() { date +%s%N; }
# Idle jiffies of all CPUs (idle + iowait), from /proc/stat (the fake tree's in smoke mode).
idle_jiffies() { awk '/^cpu /{print $5+$6}' "$PROC_STAT"; }
# wait_quiet: haltpoll only acts when a CPU goes idle, so a machine kept busy by others (compiles)
# measures nothing. Waits up to QUIET_WAIT seconds for a quarter of a second in which the CPUs are at
# least QUIET_IDLE_PERCENT idle; proceeds anyway after that (each row records its idle share).
HZ=$(getconf CLK_TCK)
wait_quiet() {
  [ "$QUIET_WAIT" -gt 0 ] || return 0
  local end=$(( $(date +%s) + QUIET_WAIT )) i0 i1
  while :; do
    i0=$(idle_jiffies); sleep 0.25; i1=$(idle_jiffies)
    [ $(( (i1 - i0) * 400 )) -ge $(( QUIET_IDLE_PERCENT * HZ * NCPU )) ] && return 0
    if [ "$(date +%s)" -ge "$end" ]; then
      echo "eval-kernel: warning: CPUs only $(( (i1 - i0) * 400 / (HZ * NCPU) ))% idle after ${QUIET_WAIT}s of waiting; measuring anyway" >&2
      return 0
    fi
  done
}
# The daemon's CPU time in ns, all its threads (schedstat: /proc/<pid>/stat's utime + stime count
# 10 ms jiffies, a third of a percent over a 3 s cell, too coarse for the 0.5 % target).
daemon_cpu_ns() {
  if [ -n "$DAEMON_PID" ]; then
    { cat /proc/"$DAEMON_PID"/task/*/schedstat 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}'
  else
    echo 0
  fi
}
# seed_bytes <tag>: a byte stream fixed by SEED and the tag, shuf's random source.
seed_bytes() { python3 -c 'import random, sys; sys.stdout.buffer.write(random.Random(sys.argv[1]).randbytes(1 << 16))' "$SEED:$1"; }
# shuffled <tag> <word>...: the words in the order SEED and the tag fix.
shuffled() { local tag=$1; shift; shuf --random-source=<(seed_bytes "$tag") -e "$@" | tr '\n' ' '; }

cat > "$TMP/varlink.py" <<'PY'
import json, socket, sys
def call(path, method, params=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(json.dumps({"method": method, "parameters": params or {}}).encode() + b"\0")
    buf = b""
    while not buf.endswith(b"\0"):
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    s.close()
    return json.loads(buf.rstrip(b"\0"))
if __name__ == "__main__":
    print(json.dumps(call(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else None)))
PY
varlink() { python3 "$TMP/varlink.py" "$@"; }

# start_daemon <policy> <tag> [tuner extra] [probe rate] [top-level extra]: kernel mode, private state
# and socket. Returns at once: the cell's load starts with it (wait_socket waits for its socket).
start_daemon() {
  local policy=$1 tag=$2 extra=${3:-} probe=${4:-10} top=${5:-}
  mkdir -p "$TMP/state-$tag"
  cat > "$TMP/haltpolld-$tag.json" <<JSON
{ "mode": "kernel", "sysfs_root": "$SYSROOT", "state_dir": "$TMP/state-$tag",
  "socket": { "path": "$TMP/sock-$tag" }, "probe": { "rate_hz": $probe } $top,
  "tuner": { "policy": "$policy" $extra }, "log": { "level": "info" } }
JSON
  "$DAEMON" -c "$TMP/haltpolld-$tag.json" > "$OUT/daemon-$tag.log" 2>&1 &
  DAEMON_PID=$!
}
wait_socket() {
  for _ in $(seq 100); do [ -S "$TMP/sock-$1" ] && return 0; sleep 0.05; done
  echo "eval-kernel: the daemon did not open its socket (see $OUT/daemon-$1.log)" >&2
  return 1
}

# start_policy <setting> <tag>: the daemon for a setting "<policy>" or "<policy>_trace<N>".
# A suffix _noprobe runs it with probe.rate_hz 0 (no probe tasks on the daemon's workers; the
# halt-exit penalty then stays unmeasured); _gscap with tuner.grow_start_at_cap.
start_policy() {
  local s=$1 probe=10 extra=""
  case $s in *_noprobe) probe=0; s=${s%_noprobe} ;; esac
  case $s in *_gscap) extra=", \"grow_start_at_cap\": true"; s=${s%_gscap} ;; esac
  case $s in *_trace*) extra="$extra, \"steady_trace_every\": ${s##*_trace}"; s=${s%%_trace*} ;; esac
  start_daemon "$s" "$2" "$extra" "$probe"
}

# ---- the applications: each server started unprivileged on loopback, its own directory and port ----
as_app() { if [ "$IS_ROOT" = 1 ]; then setpriv --reuid="$APP_UID" --regid="$APP_GID" --clear-groups "$@"; else "$@"; fi; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_listen <tcp|udp> <port>: until a socket of this machine listens on (is bound to) the port.
wait_listen() {
  local i
  for i in $(seq 200); do
    python3 - "$1" "$2" <<'PY' && return 0
import sys
proto, port = sys.argv[1], int(sys.argv[2])
for path in ("/proc/net/" + proto, "/proc/net/" + proto + "6"):
    try:
        lines = open(path).read().splitlines()[1:]
    except OSError:
        continue
    for l in lines:
        f = l.split()
        if int(f[1].split(":")[1], 16) == port and (proto == "udp" or f[3] == "0A"):
            sys.exit(0)
sys.exit(1)
PY
    sleep 0.05
  done
  echo "eval-kernel: nothing listens on $1 port $2" >&2
  return 1
}
# server <log> <command...>: a server of this block, pinned to the server CPU. Started as a command,
# not through a function, so that setpriv and taskset exec it and $! is the server's own id.
server() {
  local log=$1; shift
  if [ "$IS_ROOT" = 1 ]; then
    setpriv --reuid="$APP_UID" --regid="$APP_GID" --clear-groups "${SERVER[@]}" "$@" > "$log" 2>&1 &
  else
    "${SERVER[@]}" "$@" > "$log" 2>&1 &
  fi
  SERVER_PIDS+=($!)
  echo "$! $*" >> "$OUT/servers.txt"  # the smoke test checks that none outlives the run
}
MARIADB_READY=0
# app_start <app>: the server of a block; sets PORT.
app_start() {
  local d="$APPS/$1"
  as_app mkdir -p "$d"
  PORT=$(free_port)
  case $1 in
    sockperf)
      server "$d/server.log" sockperf server -i 127.0.0.1 -p "$PORT"
      wait_listen udp "$PORT" ;;
    redis)
      server "$d/server.log" redis-server --port "$PORT" --bind 127.0.0.1 --dir "$d" --save "" \
        --appendonly no --daemonize no --logfile "$d/redis.log"
      wait_listen tcp "$PORT" ;;
    nginx)
      as_app mkdir -p "$d/www"
      head -c 512 /dev/zero | tr '\0' x | as_app tee "$d/www/small.html" > /dev/null
      as_app tee "$d/nginx.conf" > /dev/null <<CONF
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log warn;
daemon off;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $d/body; proxy_temp_path $d/proxy; fastcgi_temp_path $d/fastcgi;
  uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;
  keepalive_requests 100000000; keepalive_timeout 120s;
  server { listen 127.0.0.1:$PORT; root $d/www; }
}
CONF
      server "$d/server.log" nginx -p "$d" -c "$d/nginx.conf" -e "$d/error.log"
      wait_listen tcp "$PORT" ;;
    memcached)
      printf 'key\n32 32 1\nvalue\n64 64 1\ncmd\n0 0.1\n1 0.9\n' | as_app tee "$d/memaslap.cnf" > /dev/null
      server "$d/server.log" memcached -l 127.0.0.1 -p "$PORT" -U 0 -t 1 -m 64
      wait_listen tcp "$PORT" ;;
    mariadb)
      # One data directory per run (mariadb-install-db), the table prepared once, on a private
      # socket and port; root reaches it through the socket only, sysbench as sbtest@127.0.0.1.
      [ -d "$d/data" ] || as_app mariadb-install-db --no-defaults --datadir="$d/data" \
        --auth-root-authentication-method=normal --skip-test-db > "$d/install.log" 2>&1
      server "$d/server.log" mariadbd --no-defaults --datadir="$d/data" --socket="$d/sock" --port="$PORT" \
        --bind-address=127.0.0.1 --pid-file="$d/mariadb.pid" --log-error="$d/error.log" \
        --innodb-buffer-pool-size=128M --skip-name-resolve --performance-schema=OFF
      wait_listen tcp "$PORT"
      if [ "$MARIADB_READY" = 0 ]; then
        as_app mariadb --no-defaults --socket="$d/sock" -uroot -e \
          "CREATE DATABASE IF NOT EXISTS sbtest; CREATE USER IF NOT EXISTS sbtest@'127.0.0.1';
           GRANT ALL ON sbtest.* TO sbtest@'127.0.0.1';"
        as_app sysbench oltp_read_only "${SYSBENCH_DB[@]}" --mysql-port="$PORT" prepare > "$d/prepare.log" 2>&1
        MARIADB_READY=1
      fi ;;
  esac
}
SYSBENCH_DB=(--db-driver=mysql --mysql-host=127.0.0.1 --mysql-user=sbtest --tables=1 --table-size="$MARIADB_ROWS")
# redis_chunks <clients> <seconds>: redis-benchmark GET and SET in chunks of a fixed number of
# requests until the seconds are over (it has no duration of its own); one CSV block per chunk.
redis_chunks() {
  local c=$1 end n
  end=$(( $(now_ns) + $2 * 1000000000 ))
  n=$(( c == 1 ? 20000 : 50000 ))
  [ "$SMOKE" = 1 ] && n=2000
  while [ "$(now_ns)" -lt "$end" ]; do
    as_app "${CLIENT[@]}" redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$c" -n "$n" -t set,get -d 64 -r 100000 --csv
  done
}
# pipe_chunks <seconds>: perf's pipe ping-pong in chunks of loops until the seconds are over.
pipe_chunks() {
  local end loops=100000
  end=$(( $(now_ns) + $1 * 1000000000 ))
  [ "$SMOKE" = 1 ] && loops=5000
  while [ "$(now_ns)" -lt "$end" ]; do perf bench sched pipe -l "$loops"; done
}
sockperf_clients() { case $1 in sockperf_c*) echo "${1#sockperf_c}" ;; *) echo 1 ;; esac; }
# load_run <load> <seconds>: the load's client for about that long; its output, parsed by row.py.
load_run() {
  local load=$1 s=$2 i
  case $load in
    timer) "$B/bench_load_timer" -p 150 -d "$s" ;;
    poisson) "$B/bench_load_poisson" -r 2000 -d "$s" ;;
    idle) sleep "$s" ;;
    pipe) pipe_chunks "$s" ;;
    rr) "$B/bench_load_rr" -d "$s" "${RR_ARGV[@]}" ;;
    db) "$B/bench_load_rr" -d "$s" "${DB_ARGV[@]}" ;;
    sockperf*)
      # Line-buffered, each client to its own file: run_cell starts the cell when every client
      # printed "Starting test" (sockperf sleeps 2 s before its test) and ends it at "Test end".
      local pids=()
      for i in $(seq "$(sockperf_clients "$load")"); do
        as_app "${CLIENT[@]}" stdbuf -oL sockperf ping-pong -i 127.0.0.1 -p "$PORT" -t "$s" --full-rtt > "$TMP/sockperf-$i.out" 2>&1 &
        pids+=($!)
      done
      wait "${pids[@]}" || true
      cat "$TMP"/sockperf-*.out; rm -f "$TMP"/sockperf-*.out ;;
    redis_c*) redis_chunks "${load#redis_c}" "$s" ;;
    nginx_c*) as_app "${CLIENT[@]}" wrk -t 1 -c "${load#nginx_c}" -d "${s}s" --latency "http://127.0.0.1:$PORT/small.html" ;;
    memcached_c*)
      # memaslap idles for a second after its run time before it prints its result: it runs
      # longer, printing its totals every second (line-buffered), and totals.py stops it once it
      # printed the s-th, however late that comes on a busy machine.
      local app=()
      [ "$IS_ROOT" = 1 ] && app=(setpriv --reuid="$APP_UID" --regid="$APP_GID" --clear-groups)
      python3 "$TMP/totals.py" "$s" "${app[@]}" "${CLIENT[@]}" stdbuf -oL memcaslap -s "127.0.0.1:$PORT" \
        -F "$APPS/memcached/memaslap.cnf" -T 1 -c "${load#memcached_c}" -t "$((s + 30))s" -S 1s ;;
    mariadb | mariadb_t*)
      local t=1
      [ "$load" = mariadb ] || t=${load#mariadb_t}
      as_app "${CLIENT[@]}" sysbench oltp_read_only "${SYSBENCH_DB[@]}" --mysql-port="$PORT" --threads="$t" --time="$s" run ;;
    *) echo "eval-kernel: unknown load $load" >&2; return 1 ;;
  esac
}

# totals.py <n> <command...>: runs memaslap, passes its output on, and stops it (SIGINT) once it
# printed its n-th per-second total (a "Global" line under "Total Statistics", what row.py reads),
# or n + 20 s after its start when it never does (the row then has no metric and says so). A fixed
# timeout lost a cell whose first total came late while other programs shared the CPUs.
cat > "$TMP/totals.py" <<'PY'
import os, selectors, signal, subprocess, sys, time
n = int(sys.argv[1])
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
deadline = time.monotonic() + n + 20
sel = selectors.DefaultSelector()
sel.register(p.stdout, selectors.EVENT_READ)
seen, in_total, buf = 0, False, b""
while seen < n:
    left = deadline - time.monotonic()
    if left <= 0 or not sel.select(left):
        break
    chunk = os.read(p.stdout.fileno(), 65536)
    if not chunk:
        break
    sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    *lines, buf = (buf + chunk).split(b"\n")
    for line in lines:
        if line.startswith(b"Total Statistics"):
            in_total = True
        elif in_total and line.startswith(b"Global"):
            seen, in_total = seen + 1, False
        elif line.startswith((b"Get Statistics", b"Set Statistics")):
            in_total = False
if p.poll() is None:
    p.send_signal(signal.SIGINT)
try:
    rest = p.communicate(timeout=10)[0]
except subprocess.TimeoutExpired:
    p.kill()
    rest = p.communicate()[0]
sys.stdout.buffer.write(rest)
sys.exit(0 if seen >= n else 1)
PY

# row.py: one JSON line per cell: the load's metric (and which way is better), poll CPU per CPU
# (mean and busiest), the value in force before and after, the idle share, the daemon's CPU.
cat > "$TMP/row.py" <<'PY'
import json, re, sys
(setting, rnd, load, order, out_file, p0, p1, t0, t1, v0, v1, c1, hz, i0, i1, ncpu, stats, b0, b1, daemon_ok,
 run_t0, g0) = sys.argv[1:]
out = open(out_file, errors="replace").read()
secs = (int(t1) - int(t0)) / 1e9
row = {"setting": setting, "round": int(rnd), "load": load, "order": int(order), "seconds": round(secs, 3),
       "start_s": round((int(t0) - int(run_t0)) / 1e9, 1), "value_before": int(v0), "value_after": int(v1),
       "grow_start_before": int(g0),
       "idle_percent_of_all_cpus": round((int(i1) - int(i0)) / int(hz) / secs / int(ncpu) * 100, 1)}


def num(pattern, text, cast=float):
    m = re.search(pattern, text)
    return cast(m.group(1)) if m else None


def wrk_us(text):  # "81.00us", "1.55ms", "2.00s"
    m = re.match(r"([0-9.]+)(us|ms|s)$", text)
    return float(m.group(1)) * {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)] if m else None


metric = better = name = None
if load == "pipe":
    # perf bench sched pipe per chunk: "Total time: 1.234 [sec]" for "-l N" loops.
    loops = [int(x) for x in re.findall(r"Executed (\d+) pipe operations", out)]
    total = [float(x) for x in re.findall(r"Total time: ([0-9.]+) \[sec\]", out)]
    if loops and len(loops) == len(total):
        metric, better, name = sum(total) * 1e6 / sum(loops), "lower", "us/op"
        row["chunks"] = len(loops)
elif load in ("rr", "db", "timer", "poisson"):
    last = [l for l in out.splitlines() if l.startswith("{")]
    d = json.loads(last[-1]) if last else {}
    row.update(d)
    key = {"rr": "throughput_per_s", "db": "throughput_per_s", "timer": "late_p50_us", "poisson": "rtt_p50_us"}[load]
    metric, better, name = d.get(key), ("higher" if load in ("rr", "db") else "lower"), key
elif load.startswith("sockperf"):
    # The whole run (sockperf's [Total Run]: its warm-up included): one round trip outstanding, so
    # the mean RTT is the run time over the messages received, per client, averaged over clients.
    runs = re.findall(r"\[Total Run\] RunTime=([0-9.]+) sec; Warm up time=\d+ msec; SentMessages=\d+; "
                      r"ReceivedMessages=(\d+)", out)
    p50 = [float(x) for x in re.findall(r"percentile 50\.000 =\s*([0-9.]+)", out)]
    if runs and all(int(n) > 0 for _, n in runs):
        metric = sum(float(t) * 1e6 / int(n) for t, n in runs) / len(runs)
        better, name = "lower", "rtt_us"
        row["clients"] = len(runs)
        row["rtt_p50_us_valid_part"] = round(sum(p50) / len(p50), 3) if p50 else None
elif load.startswith("redis"):
    rps = {}
    n_req = t_req = 0.0
    for test, r in re.findall(r'^"(SET|GET)","([0-9.]+)"', out, re.M):
        rps.setdefault(test, []).append(float(r))
    # Every chunk ran the same number of requests per test: ops/s = requests / time spent.
    chunks = min(len(v) for v in rps.values()) if len(rps) == 2 else 0
    if chunks:
        inv = sum(1 / r for v in rps.values() for r in v)
        metric, better, name = 2 * chunks / inv, "higher", "ops_per_s"
        row.update({"chunks": chunks, "set_rps": round(sum(rps["SET"]) / chunks, 1),
                    "get_rps": round(sum(rps["GET"]) / chunks, 1)})
        p50 = [float(x) for x in re.findall(r'^"(?:SET|GET)","[0-9.]+","[0-9.]+","[0-9.]+","([0-9.]+)"', out, re.M)]
        row["latency_p50_us"] = round(sum(p50) / len(p50) * 1e3, 1) if p50 else None
elif load.startswith("nginx"):
    metric, better, name = num(r"Requests/sec:\s*([0-9.]+)", out), "higher", "requests_per_s"
    m = re.search(r"Latency\s+(\S+)\s+(\S+)", out)
    row["latency_avg_us"] = wrk_us(m.group(1)) if m else None
    m = re.search(r"^\s*50%\s+(\S+)", out, re.M)
    row["latency_p50_us"] = wrk_us(m.group(1)) if m else None
    row["socket_errors"] = bool(re.search(r"Socket errors", out))
elif load.startswith("memcached"):
    # memaslap's totals, printed every second: the last "Global" line under "Total Statistics"
    # (seconds since its start, operations).
    total, last = False, None
    for l in out.splitlines():
        if l.startswith("Total Statistics"):
            total = True
        elif total and l.startswith("Global"):
            f = l.split()
            last, total = (int(f[1]), int(f[2])), False
        elif l.startswith(("Get Statistics", "Set Statistics")):
            total = False
    if last and last[0] > 0:
        metric, better, name = last[1] / last[0], "higher", "ops_per_s"
        row["client_seconds"] = last[0]
elif load.startswith("mariadb"):
    metric, better, name = num(r"transactions:\s+\d+\s+\(([0-9.]+) per sec\.\)", out), "higher", "transactions_per_s"
    row["latency_avg_ms"] = num(r"avg:\s+([0-9.]+)", out)
row.update({"metric": metric, "better": better, "metric_name": name})
if load != "idle" and metric is None:
    row["output_tail"] = out[-400:]
a, b = [int(x) for x in p0.split()], [int(x) for x in p1.split()]
per = [(y - x) / 1e4 / secs for x, y in zip(a, b)]
row["poll_cpu_percent_per_cpu"] = round(sum(per) / len(per), 3) if per else None
row["poll_cpu_percent_busiest"] = round(max(per), 3) if per else None
if setting.split("_")[0] in ("balanced", "budget", "latency"):
    row["daemon_cpu_percent_of_one_cpu"] = round(int(c1) / 1e9 / secs * 100, 3)
    row["daemon_ok"] = daemon_ok == "1"
if stats == "1":
    row["bpf_cpu_percent_of_one_cpu"] = round((int(b1) - int(b0)) / 1e9 / secs * 100, 4)
print(json.dumps(row))
PY

# apply_static <setting>: the static value written, limits reset; static_<ns>_gs also writes
# guest_halt_poll_grow_start = ns / 2, static_<ns>_gscap grow_start = ns (a CPU's limit then stands
# at 0 or at the cap: the kernel's way out of the trap at grow_start, docs/simulator.md). Both are
# diagnostic cells, never a candidate for the best static.
apply_static() {
  local s=$1 ns
  ns=${s#static_}; ns=${ns%_gscap}; ns=${ns%_gs}
  sysfs_write "$ns" "$P/guest_halt_poll_ns"
  case $s in
    *_gscap) sysfs_write "$ns" "$P/guest_halt_poll_grow_start" ;;
    *_gs) sysfs_write $((ns / 2)) "$P/guest_halt_poll_grow_start" ;;
  esac
  fresh_limits
}

# marked <text> <count>: load_run gathers the clients' files into cell.out and removes them once
# every client ended, so both are read.
marked() { [ "$(cat "$TMP"/sockperf-*.out "$TMP/cell.out" 2>/dev/null | grep -c "$1" || true)" -ge "$2" ]; }
# wait_marker <text> <count> <pid> <seconds>: until <count> sockperf clients printed the text, as
# long as the clients (<pid>, the cell's load) run and for at most <seconds>: a client that comes
# late on a busy machine is waited for, one that ended without the text is named. (A fixed number
# of tries missed a "Test end" printed just before the clients ended and their files were gathered.)
wait_marker() {
  local end=$(( $(now_ns) + $4 * 1000000000 ))
  while ! marked "$1" "$2"; do
    if ! kill -0 "$3" 2>/dev/null || [ "$(now_ns)" -gt "$end" ]; then
      marked "$1" "$2" && return 0
      echo "eval-kernel: warning: sockperf did not print \"$1\" (clients $(kill -0 "$3" 2>/dev/null && echo running || echo ended)):" >&2
      tail -n 3 "$TMP"/sockperf-*.out "$TMP/cell.out" >&2 2>/dev/null || true
      return 0
    fi
    sleep 0.005
  done
}
sleep_until() { # sleep_until <ns since the epoch>
  local r=$(( $1 - $(now_ns) ))
  [ "$r" -le 0 ] || sleep "$(printf '%d.%09d' $((r / 1000000000)) $((r % 1000000000)))"
}
# run_cell <setting> <round> <load> <order>: one cell; appends its row to loads.jsonl. A daemon cell
# starts the daemon and the load together and measures both from then on; its decisions and status
# are kept per cell.
RUN_T0=$(now_ns)
run_cell() {
  local setting=$1 round=$2 load=$3 order=$4
  local p0 p1 t0 t1 v0 v1 g0 c1=0 i0 i1 b0=0 b1=0 stats=0 secs=$STATIC_SECONDS tag="" ok=1
  put_back
  if is_policy "$setting"; then
    secs=$DAEMON_SECONDS
    tag="$setting-$load-r$round"
    fresh_limits
  else
    apply_static "$setting"
  fi
  wait_quiet
  if [ "$load" = idle ] && [ -n "$tag" ] && [ -n "$FOUND_BPF_STATS" ]; then
    sysfs_write 1 "$BPF_STATS" && stats=1 && b0=$(bpf_run_ns)
  fi
  local lp n
  case $load in
    sockperf*)
      # The cell starts with the test itself, after the client's 2 s of waiting, and ends with it.
      n=$(sockperf_clients "$load")
      rm -f "$TMP"/sockperf-*.out
      load_run "$load" "$secs" > "$TMP/cell.out" 2>&1 &
      lp=$!
      wait_marker "Starting test" "$n" "$lp" 30
      v0=$(cat "$P/guest_halt_poll_ns"); g0=$(cat "$P/guest_halt_poll_grow_start"); p0=$(poll_us); i0=$(idle_jiffies); t0=$(now_ns)
      [ -z "$tag" ] || start_policy "$setting" "$tag"
      sleep_until $(( t0 + secs * 1000000000 - 150000000 ))
      wait_marker "Test end" "$n" "$lp" $(( secs + 30 ))
      t1=$(now_ns); i1=$(idle_jiffies); p1=$(poll_us); v1=$(cat "$P/guest_halt_poll_ns")
      wait "$lp" || true ;;
    *)
      v0=$(cat "$P/guest_halt_poll_ns"); g0=$(cat "$P/guest_halt_poll_grow_start"); p0=$(poll_us); i0=$(idle_jiffies); t0=$(now_ns)
      [ -z "$tag" ] || start_policy "$setting" "$tag"
      load_run "$load" "$secs" > "$TMP/cell.out" 2>&1 || true
      t1=$(now_ns); i1=$(idle_jiffies); p1=$(poll_us); v1=$(cat "$P/guest_halt_poll_ns") ;;
  esac
  if [ -n "$tag" ]; then
    c1=$(daemon_cpu_ns)
    kill -0 "$DAEMON_PID" 2>/dev/null || ok=0
    if [ $ok = 1 ] && wait_socket "$tag"; then
      varlink "$TMP/sock-$tag" io.haltpolld.GetDecisions '{"limit": 1000}' > "$OUT/decisions-$tag.json" || ok=0
      varlink "$TMP/sock-$tag" io.haltpolld.GetStatus > "$OUT/status-$tag.json" || ok=0
    else
      ok=0
    fi
    [ $ok = 1 ] || echo "eval-kernel: warning: the daemon of $tag did not run through its cell (see $OUT/daemon-$tag.log)" >&2
    stop_daemon
  fi
  if [ $stats = 1 ]; then b1=$(bpf_run_ns); sysfs_write "$FOUND_BPF_STATS" "$BPF_STATS"; fi
  python3 "$TMP/row.py" "$setting" "$round" "$load" "$order" "$TMP/cell.out" "$p0" "$p1" "$t0" "$t1" "$v0" "$v1" \
    "$c1" "$HZ" "$i0" "$i1" "$NCPU" "$stats" "$b0" "$b1" "$ok" "$RUN_T0" "$g0" >> "$OUT/loads.jsonl"
}

# run_block <round> <load>: the load's server, every setting once in the order SEED fixes, stopped.
run_block() {
  local round=$1 load=$2 app order=0 s
  app=$(app_of "$load")
  wait_quiet
  [ -z "$app" ] || app_start "$app"
  # shellcheck disable=SC2086  # a list of words, split on purpose
  for s in $(shuffled "r$round-$load" $SETTINGS); do
    order=$((order + 1))
    run_cell "$s" "$round" "$load" "$order"
  done
  stop_servers
  put_back
}

declare -A BLOCK_S
fits() { # fits <load>: whether the load's block ends within the budget, the load-change run reserved
  local est=${BLOCK_S[$1]:-$(block_estimate "$1")}
  [ $(( $(date +%s) - T_START + est + CHANGE_EST )) -le $(( BUDGET_MINUTES * 60 )) ]
}

# ---- 1. the rounds ----
: > "$OUT/loads.jsonl"
round=0
stop_reason="max_rounds"
todo="$LOADS"
while [ $round -lt "$MAX_ROUNDS" ]; do
  if [ $round -ge "$MIN_ROUNDS" ]; then
    todo="$(python3 scripts/eval-kernel-report.py --undecided "$OUT")"
    if [ -z "$todo" ]; then stop_reason="decided"; break; fi
    any=0
    for load in $todo; do fits "$load" && any=1; done
    if [ $any = 0 ]; then stop_reason="budget"; break; fi
  fi
  round=$((round + 1))
  echo "eval-kernel: round $round: $todo" >&2
  # shellcheck disable=SC2086  # a list of words, split on purpose
  for load in $(shuffled "r$round" $todo); do
    if [ $round -gt "$MIN_ROUNDS" ] && ! fits "$load"; then
      echo "eval-kernel: round $round: $load left out (the budget)" >&2
      continue
    fi
    b_t0=$(date +%s)
    echo "eval-kernel: round $round, $load" >&2
    run_block "$round" "$load"
    BLOCK_S[$load]=$(( $(date +%s) - b_t0 ))
  done
done
[ $round -lt "$MAX_ROUNDS" ] || stop_reason="max_rounds"
if [ $round -ge "$MIN_ROUNDS" ] && [ "$stop_reason" = max_rounds ] && [ -z "$(python3 scripts/eval-kernel-report.py --undecided "$OUT")" ]; then
  stop_reason="decided"
fi
echo "{\"rounds\": $round, \"stop_reason\": \"$stop_reason\", \"seed\": $SEED, \"rounds_seconds\": $(( $(date +%s) - T_START ))}" > "$OUT/run.json"
echo "eval-kernel: $round rounds, stopped: $stop_reason" >&2
put_back

# ---- 2. load-change runs: balanced, and the statics through the same chunks ----
# change_run <setting> <file>: the phases in 1 s chunks, one JSON line per chunk.
change_run() {
  local setting=$1 file=$2 phase pend p0 p1 t0 t1 out loops=15000
  [ "$SMOKE" = 1 ] && loops=3000
  : > "$file"
  for phase in pipe timer rr idle; do
    pend=$(( $(now_ns) + CHANGE_SECONDS * 1000000000 ))
    while [ "$(now_ns)" -lt "$pend" ]; do
      p0=$(poll_us); t0=$(now_ns)
      case $phase in
        pipe) out="$(perf bench sched pipe -l $loops 2>/dev/null | tail -n 5)" ;;
        timer) out="$("$B/bench_load_timer" -p 150 -d 1 2>/dev/null)" ;;
        rr) out="$("$B/bench_load_rr" -d 1 "${RR_ARGV[@]}" 2>/dev/null)" ;;
        idle) sleep 1; out="" ;;
      esac
      t1=$(now_ns); p1=$(poll_us)
      python3 - "$setting" "$phase" "$out" "$p0" "$p1" "$T0" "$t0" "$t1" "$(cat "$P/guest_halt_poll_ns")" >> "$file" <<'PY'
import json, re, sys
setting, phase, out, p0, p1, T0, t0, t1, value = sys.argv[1:]
secs = (int(t1) - int(t0)) / 1e9
a, b = [int(x) for x in p0.split()], [int(x) for x in p1.split()]
per = [(y - x) / 1e4 / secs for x, y in zip(a, b)]
row = {"setting": setting, "phase": phase, "t_s": round((int(t1) - int(T0)) / 1e9, 2), "seconds": round(secs, 3),
       "value_ns": int(value), "poll_cpu_percent_per_cpu": round(sum(per) / len(per), 3)}
lat = None
if phase == "pipe":
    m = re.search(r"([0-9.]+) usecs/op", out)
    lat = float(m.group(1)) if m else None
elif phase == "timer" and out:
    lat = json.loads(out.strip().splitlines()[-1])["late_p50_us"]
elif phase == "rr" and out:
    d = json.loads(out.strip().splitlines()[-1])
    lat = d["rtt_p50_us"]
    row["throughput_per_s"] = d["throughput_per_s"]
row["latency_us"] = lat
print(json.dumps(row))
PY
    done
  done
}
if [ "${SKIP_CHANGE:-0}" != 1 ]; then
  : > "$OUT/change-baselines.jsonl"
  : > "$OUT/change.jsonl"
  # shellcheck disable=SC2086  # a list of words, split on purpose
  for s in $(shuffled change $CHANGE_SETTINGS); do
    echo "eval-kernel: load-change run, $s (pipe, timer, load_rr, idle: ${CHANGE_SECONDS}s each)" >&2
    put_back
    wait_quiet
    if is_policy "$s"; then
      fresh_limits
      T0=$(now_ns)
      start_policy "$s" "change-$s"
      change_run "$s" "$TMP/change-$s.jsonl"
      if wait_socket "change-$s"; then
        varlink "$TMP/sock-change-$s" io.haltpolld.GetDecisions '{"limit": 1000}' > "$OUT/decisions-change-$s.json" || true
      fi
      stop_daemon
      if [ "$s" = balanced ]; then
        cp "$TMP/change-$s.jsonl" "$OUT/change.jsonl"
        cp "$OUT/decisions-change-$s.json" "$OUT/decisions-change.json" 2>/dev/null || true
        echo "$T0" > "$OUT/change.t0_ns"
      else
        cat "$TMP/change-$s.jsonl" >> "$OUT/change-baselines.jsonl"
      fi
    else
      apply_static "$s"
      T0=$(now_ns)
      change_run "$s" "$TMP/change-$s.jsonl"
      cat "$TMP/change-$s.jsonl" >> "$OUT/change-baselines.jsonl"
    fi
  done
  put_back
fi

# ---- 3. kill -9, restart with the same state directory: the found values are back before the first tick ----
if [ "${SKIP_KILL:-0}" != 1 ]; then
  echo "eval-kernel: kill -9 and restart" >&2
  # The static policy holds pool.guest_halt_poll_ns, written on the first tick: a value other than
  # the one found, so that the write shows.
  kill_ns=150000
  [ "${FOUND[guest_halt_poll_ns]}" != "$kill_ns" ] || kill_ns=160000
  start_daemon static kill ', "interval_ms": 200' 10 ", \"pool\": { \"guest_halt_poll_ns\": $kill_ns }"
  wait_socket kill
  for _ in $(seq 50); do [ "$(cat "$P/guest_halt_poll_ns")" != "${FOUND[guest_halt_poll_ns]}" ] && break; sleep 0.1; done
  written=$(cat "$P/guest_halt_poll_ns")
  kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true; DAEMON_PID=""
  after_kill=$(cat "$P/guest_halt_poll_ns")
  # Restart in observe mode with the same state directory: recovery happens in start(), before
  # any tick, whatever the mode.
  sed -i 's/"mode": "kernel"/"mode": "observe"/; s/"interval_ms": 200/"interval_ms": 60000, "sweep_interval_ms": 60000/' "$TMP/haltpolld-kill.json"
  rm -f "$TMP/sock-kill"
  "$DAEMON" -c "$TMP/haltpolld-kill.json" > "$OUT/daemon-kill-restart.log" 2>&1 &
  DAEMON_PID=$!
  wait_socket kill || true
  varlink "$TMP/sock-kill" io.haltpolld.GetStatus > "$TMP/kill-status.json" || echo '{}' > "$TMP/kill-status.json"
  restarted=$(cat "$P/guest_halt_poll_ns")
  stop_daemon
  python3 - "$written" "$after_kill" "$restarted" "${FOUND[guest_halt_poll_ns]}" "$TMP/kill-status.json" > "$OUT/kill9.json" <<'PY'
import json, sys
written, after_kill, restarted, found, status = sys.argv[1:]
st = (json.load(open(status)).get("parameters") or {}).get("controller") or {}
ok = written != found and after_kill == written and restarted == found and st.get("ticks") == 0
print(json.dumps({"found": int(found), "written_by_daemon": int(written), "after_kill_9": int(after_kill),
                  "after_restart": int(restarted), "restart_ticks_at_check": st.get("ticks"),
                  "recovery": (st.get("kernel") or {}).get("recovery"),
                  "restore_after_sigkill": "passed" if ok else "FAILED"}))
PY
  cat "$OUT/kill9.json" >&2
  put_back
fi

# ---- summary, targets and plots ----
python3 scripts/eval-kernel-report.py "$OUT"
if command -v gnuplot >/dev/null && [ -s "$OUT/change.dat" ]; then
  gnuplot <<GP
set terminal pngcairo size 1100,900 font ",10" noenhanced
set output "$OUT/load-change.png"
set multiplot layout 3,1 title "haltpolld balanced on a real haltpoll guest: pipe -> 150 us timer -> load_rr -> idle"
set xlabel "s"
set grid
set key top right
set ylabel "guest_halt_poll_ns (us)"
plot "$OUT/change.dat" using 1:2 with steps lw 2 title "value in force"
set ylabel "poll CPU % per CPU"
plot "$OUT/change.dat" using 1:3 with steps lw 2 title "poll CPU"
set ylabel "us"
set logscale y
plot "$OUT/change.dat" using 1:(\$5==0?\$4:1/0) with points pt 7 title "pipe us/op", \
     "" using 1:(\$5==1?\$4:1/0) with points pt 5 title "timer lateness p50", \
     "" using 1:(\$5==2?\$4:1/0) with points pt 9 title "load_rr RTT p50"
unset multiplot
GP
  echo "eval-kernel: plot $OUT/load-change.png" >&2
fi
echo "eval-kernel: results in $OUT" >&2
