#!/usr/bin/env bash
# Per-cell counters of a real haltpoll guest for the simulator's calibration (docs/simulator.md).
#
# For every (load, static cap) cell, ROUNDS rounds, the caps in a random order within each round
# and the loads in a random order within each cap: the load's result, and over the load's run
# from cpuidle's sysfs counters idle entries/s, polls/s, halts/s and poll CPU per CPU, and from the
# tracepoint sched:sched_wake_idle_without_ipi (counted in the kernel by `perf stat`, no ring
# buffer) the wake-ups of a polling CPU that skipped an IPI. Counting that tracepoint costs the load
# something (the pipe read 7.8-9.1 us/op bare and 11.5 under `perf stat` at 30000 on 2026-12-03), so
# only odd rounds count it ("perf": true); even rounds run the load bare, for its result.
# Each cell starts from fresh per-CPU limits (a governor round trip), as a guest booted with the cap.
# One JSON line per cell on stdout and in OUT.
# Then, for each TRACE_CELLS cell (load:cap), the idle periods and the governor's limit changes of
# one run of the load, `haltpolld record` beside it: OUT.traces/LOAD-CAP.idle.txt with the sysfs
# counters before and after and the load's wall time (LOAD-CAP.wall_us), as ../shared/real-guest/
# traces/ holds them but of every CPU and through eBPF rather than perf (scripts/trace-summary.py
# reads them; docs/simulator.md, "Traces"). The default cells are those the counters cannot judge:
# the loops' knees and the database-shaped load's trap at grow_start.
#
# It writes the REAL /sys/module/haltpoll/parameters: it holds /tmp/haltpoll-real-sysfs.lock for
# its whole run and puts back the values it FOUND, and the governor, in a trap.
# CAL_SMOKE=1 runs the plumbing on a fake haltpoll tree instead (tests/fleet/fake_guest.py, its
# counters standing still; CAL_FAKE_ROOT or a fresh directory): two rounds of tiny cells at caps 0
# and 50000 and two trace cells, every write checked to land under the fake root, the real
# parameters neither written nor locked. The loads, perf and `haltpolld record` run for real (ctest
# label "eval": tests/eval/record_calibration_smoke_test.sh).
#
# Usage: scripts/record-calibration.sh [build_dir] [out.jsonl]
#   build_dir  a built tree with bench_load_{rr,timer,poisson} (default build/dev)
# Env: ROUNDS (4; 0: the traces alone), LOAD_SECONDS (3), PIPE_LOOPS (100000), CAPS, LOADS (pipe rr db timer poisson idle),
#      TRACE_CELLS ("pipe:10000 pipe:20000 rr:10000 rr:20000 db:50000 db:75000 db:100000"; empty:
#      none), HALTPOLLD (build_dir/src/daemon/haltpolld), CAL_SMOKE=1 [CAL_FAKE_ROOT=dir]
# Needs a guest whose cpuidle driver is haltpoll (it refuses any other), root, perf (linux-perf),
# python3.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build/dev}"
OUT="${2:-$BUILD/calibration-counters.jsonl}"
SMOKE="${CAL_SMOKE:-0}"
if [ "$SMOKE" = 1 ]; then
  ROUNDS="${ROUNDS:-2}" LOAD_SECONDS="${LOAD_SECONDS:-0.3}" PIPE_LOOPS="${PIPE_LOOPS:-3000}" CAPS="${CAPS:-0 50000}"
  TRACE_CELLS="${TRACE_CELLS-pipe:10000 db:50000}"
else
  [ -z "${CAL_FAKE_ROOT:-}" ] || { echo "record-calibration: CAL_FAKE_ROOT needs CAL_SMOKE=1" >&2; exit 1; }
fi
ROUNDS="${ROUNDS:-4}"
LOAD_SECONDS="${LOAD_SECONDS:-3}"
PIPE_LOOPS="${PIPE_LOOPS:-100000}"
CAPS="${CAPS:-0 10000 20000 25000 30000 50000 75000 100000 150000 200000 400000}"
LOADS="${LOADS:-pipe rr db timer poisson idle}"
TRACE_CELLS="${TRACE_CELLS-pipe:10000 pipe:20000 rr:10000 rr:20000 db:50000 db:75000 db:100000}"
HALTPOLLD="${HALTPOLLD:-$BUILD/src/daemon/haltpolld}"
# shellcheck source=scripts/lib/haltpoll-guest.sh
. scripts/lib/haltpoll-guest.sh
R=""
if [ "$SMOKE" = 1 ]; then
  R="$(make_fake_root "${CAL_FAKE_ROOT:-$(mktemp -d /tmp/haltpolld-calibration-fake-XXXXXX)}" record-calibration)" || exit 1
fi
P="$R/sys/module/haltpoll/parameters"
CPUIDLE="$R/sys/devices/system/cpu/cpuidle"
G="$CPUIDLE/current_governor"
# put <value> <file>: every write of a parameter or the governor (in smoke mode, under the fake root only).
put() { guest_write "$R" record-calibration "$1" "$2"; }
NAMES=(guest_halt_poll_ns guest_halt_poll_grow guest_halt_poll_grow_start guest_halt_poll_shrink
       guest_halt_poll_allow_shrink)
B="$BUILD/bench"

[ "$(id -u)" = 0 ] || { echo "record-calibration: needs root (writes $P)" >&2; exit 1; }
[ -d "$P" ] || { echo "record-calibration: $P does not exist (no haltpoll driver)" >&2; exit 1; }
require_haltpoll_driver "$CPUIDLE" record-calibration || exit 1
for bin in "$B/bench_load_rr" "$B/bench_load_timer" "$B/bench_load_poisson"; do
  [ -x "$bin" ] || { echo "record-calibration: $bin missing; build the bench_load_* targets" >&2; exit 1; }
done
command -v perf >/dev/null || { echo "record-calibration: perf (linux-perf) missing" >&2; exit 1; }
# The loads load_argv (below) runs; LOADS and TRACE_CELLS name nothing else.
KNOWN_LOADS="pipe rr db timer poisson idle"
is_load() { [[ " $KNOWN_LOADS " == *" $1 "* ]]; }
for load in $LOADS; do
  is_load "$load" || { echo "record-calibration: LOADS: $load: expected one of $KNOWN_LOADS" >&2; exit 1; }
done
for cell in $TRACE_CELLS; do
  if [[ "$cell" != *:* ]] || ! is_load "${cell%%:*}"; then
    echo "record-calibration: TRACE_CELLS: $cell: expected load:cap with a load of $KNOWN_LOADS" >&2; exit 1
  fi
  [[ "${cell#*:}" =~ ^[0-9]+$ ]] || { echo "record-calibration: TRACE_CELLS: $cell: the cap is not a number" >&2; exit 1; }
done
if [ -n "$TRACE_CELLS" ]; then
  [ -x "$HALTPOLLD" ] || { echo "record-calibration: $HALTPOLLD missing (TRACE_CELLS records with it; build haltpolld or set HALTPOLLD)" >&2; exit 1; }
fi

# Every writer of the real parameters holds this lock for its whole run; the smoke run writes none.
if [ "$SMOKE" != 1 ]; then
  exec 9>/tmp/haltpoll-real-sysfs.lock
  flock 9
fi
declare -A FOUND
for n in "${NAMES[@]}"; do FOUND[$n]="$(cat "$P/$n")"; done
FOUND_GOV="$(cat "$G")"
put_back() {
  for n in "${NAMES[@]}"; do put "${FOUND[$n]}" "$P/$n" || true; done
  [ "$(cat "$G")" = "$FOUND_GOV" ] || put "$FOUND_GOV" "$G" || true
}
restore() {
  local rc=$?
  put_back
  for n in "${NAMES[@]}"; do
    [ "$(cat "$P/$n")" = "${FOUND[$n]}" ] || { echo "record-calibration: $n NOT restored" >&2; rc=1; }
  done
  echo "record-calibration: put back $(for n in "${NAMES[@]}"; do printf '%s=%s ' "$n" "$(cat "$P/$n")"; done)governor=$(cat "$G")" >&2
  # A fake root this run made for itself (smoke mode without CAL_FAKE_ROOT) goes with it.
  if [ "$SMOKE" = 1 ] && [ -z "${CAL_FAKE_ROOT:-}" ]; then rm -rf "$R"; fi
  exit $rc
}
trap restore EXIT INT TERM
fresh_limits() {
  [ "$FOUND_GOV" = haltpoll ] || return 0
  { put menu "$G" 2>/dev/null && put haltpoll "$G"; } || put "$FOUND_GOV" "$G" || true
}
# "cpu state usage time_us" of every CPU's cpuidle states.
counters() {
  local c d
  for c in "$R"/sys/devices/system/cpu/cpu[0-9]*; do
    [ -d "$c/cpuidle" ] || continue
    for d in "$c"/cpuidle/state*; do
      echo "${c##*/cpu} $(tr -c "A-Za-z0-9_\n" _ < "$d/name") $(cat "$d/usage") $(cat "$d/time")"
    done
  done
}
# load_argv <load>: the load's command line into LOAD_ARGV, one word an element.
load_argv() {
  case $1 in
    pipe) LOAD_ARGV=(perf bench sched pipe -l "$PIPE_LOOPS") ;;
    rr) LOAD_ARGV=("$B/bench_load_rr" -d "$LOAD_SECONDS" -w 20 -t 10) ;;
    db) LOAD_ARGV=("$B/bench_load_rr" -d "$LOAD_SECONDS" -w 60 -t 60) ;;
    timer) LOAD_ARGV=("$B/bench_load_timer" -p 150 -d "$LOAD_SECONDS") ;;
    poisson) LOAD_ARGV=("$B/bench_load_poisson" -r 2000 -d "$LOAD_SECONDS") ;;
    idle) LOAD_ARGV=(sleep "$LOAD_SECONDS") ;;
    *) echo "record-calibration: unknown load '$1'" >&2; exit 2 ;;
  esac
}
shuffle() { printf '%s\n' "$@" | shuf; }

echo "{\"kernel\":\"$(uname -r)\",\"cpus\":$(nproc),\"cpu_model\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\",\"date\":\"$(date -u +%FT%TZ)\",\"found\":\"$(for n in "${NAMES[@]}"; do printf '%s=%s ' "$n" "${FOUND[$n]}"; done)\",\"loadavg_at_start\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",\"smoke\":$([ "$SMOKE" = 1 ] && echo true || echo false),\"sysfs_root\":\"${R:-/}\"}" > "$OUT.env.json"
: > "$OUT"
TMPD="$(mktemp -d /tmp/record-calibration-XXXXXX)"
for round in $(seq 1 "$ROUNDS"); do
  # shellcheck disable=SC2086  # a list of words, split on purpose
  for cap in $(shuffle $CAPS); do
    put_back
    put "$cap" "$P/guest_halt_poll_ns"
    # shellcheck disable=SC2086  # a list of words, split on purpose
    for load in $(shuffle $LOADS); do
      fresh_limits
      sleep 0.2
      counters > "$TMPD/before"
      t0=$(date +%s%N)
      : > "$TMPD/perf"
      load_argv "$load"
      if [ $((round % 2)) = 1 ]; then
        perf stat -x, -a -e sched:sched_wake_idle_without_ipi -o "$TMPD/perf" -- "${LOAD_ARGV[@]}" > "$TMPD/out" 2>/dev/null || true
      else
        "${LOAD_ARGV[@]}" > "$TMPD/out" 2>/dev/null || true
      fi
      t1=$(date +%s%N)
      counters > "$TMPD/after"
      python3 - "$round" "$cap" "$load" "$t0" "$t1" "$TMPD" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY' | tee -a "$OUT"
import json, re, sys
rnd, cap, load, t0, t1, d, la = sys.argv[1:]
secs = (int(t1) - int(t0)) / 1e9
def read(name):
    out = {}
    for line in open(f"{d}/{name}"):
        cpu, state, usage, time_us = line.split()
        out[(cpu, state)] = (int(usage), int(time_us))
    return out
a, b = read("before"), read("after")
cpus = sorted({c for c, _ in a}, key=int)
n = len(cpus)
polls = sum(b[k][0] - a[k][0] for k in a if k[1] == "POLL")
entries = sum(b[k][0] - a[k][0] for k in a)
poll_us = {c: b[(c, "POLL")][1] - a[(c, "POLL")][1] for c in cpus if (c, "POLL") in a}
ipi = None
for line in open(f"{d}/perf"):
    f = line.strip().split(",")
    if len(f) > 2 and "sched_wake_idle_without_ipi" in line:
        ipi = int(f[0]) if f[0].isdigit() else None
out = open(f"{d}/out").read()
row = {"round": int(rnd), "load": load, "cap": int(cap), "perf": int(rnd) % 2 == 1,
       "seconds": round(secs, 3),
       "idle_entries_per_s": round(entries / secs), "poll_entries_per_s": round(polls / secs),
       "halts_per_s": round((entries - polls) / secs),
       "ipi_skips_per_s": round(ipi / secs) if ipi is not None else None,
       "poll_cpu_percent_per_cpu": round(sum(poll_us.values()) / n / 1e4 / secs, 3),
       "poll_cpu_percent_busiest": round(max(poll_us.values()) / 1e4 / secs, 3),
       "loadavg": float(la)}
if load == "pipe":
    m = re.search(r"([0-9.]+) usecs/op", out)
    row["us_per_op"] = float(m.group(1)) if m else None
elif load != "idle" and out.strip():
    row.update(json.loads(out.strip().splitlines()[-1]))
print(json.dumps(row))
PY
    done
  done
done

# The traces, after the counters' rounds (a recorder attached costs the load 150-220 ns an event).
if [ -n "$TRACE_CELLS" ]; then
  TRACES="$OUT.traces"
  mkdir -p "$TRACES"
  # shellcheck disable=SC2086  # a list of words, split on purpose
  for cell in $(shuffle $TRACE_CELLS); do
    load="${cell%%:*}"
    cap="${cell#*:}"
    base="$TRACES/$load-$cap"
    put_back
    put "$cap" "$P/guest_halt_poll_ns"
    fresh_limits
    sleep 0.2
    counters > "$base.counters.before"
    # Stopped by SIGTERM once the load ends; it writes what it read and renames the file into place.
    "$HALTPOLLD" record --seconds 3600 --output "$base.idle.txt" 2> "$base.record.log" &
    rec=$!
    sleep 1  # its programs attach
    t0=$(date +%s%N)
    load_argv "$load"
    "${LOAD_ARGV[@]}" > "$base.out" 2>/dev/null || true
    t1=$(date +%s%N)
    kill -TERM "$rec" 2>/dev/null || true
    if ! wait "$rec"; then
      echo "record-calibration: haltpolld record failed for $cell: $(tail -1 "$base.record.log")" >&2
    fi
    counters > "$base.counters.after"
    echo $(((t1 - t0) / 1000)) > "$base.wall_us"
    echo "record-calibration: traced $cell: $(grep -c -v '^#' "$base.idle.txt" 2>/dev/null || echo 0) idle periods in $(cat "$base.wall_us") us" >&2
  done
fi
rm -rf "$TMPD"
