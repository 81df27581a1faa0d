#!/usr/bin/env bash
# The acceptance checks of the eBPF kernel signals, on a guest whose cpuidle driver is haltpoll:
# under `perf bench sched pipe` at guest_halt_poll_ns = 0, 50000 and 200000,
#   - the program's IPI-skip count vs `perf stat -a -e sched:sched_wake_idle_without_ipi` (within 1 %),
#   - its idle entries vs perf's power:cpu_idle entry events per CPU (perf -A; exits and all counted too),
#   - its poll hits vs the cpuidle-derived hits (POLL usage - halts that followed a poll; see below),
#   - its poll CPU % vs cpuidle's POLL residency over the same window (within 0.5 points),
# then the overhead benchmark at 200000. Prints one JSON line per cap and the benchmark's JSON.
#
# The windows match: the load runs on its own for the whole measurement, perf starts with its
# events disabled (-D -1) and the program's first snapshot is taken, then perf's events are
# enabled through its control FIFO, and after HALTPOLL_CHECK_SECONDS they are disabled before the
# program's last snapshot. So both count the same steady-state interval; what is left is the FIFO
# round trip and a fork (well under a millisecond) at either end.
#
# Changing the cap changes the real machine, so it happens only with HALTPOLL_REAL_SYSFS=1, under
# the shared lock /tmp/haltpoll-real-sysfs.lock, and every haltpoll parameter found is restored on
# every exit (trap). Without it, the checks run once at the current cap.
# Usage: HALTPOLL_REAL_SYSFS=1 scripts/kernel-signals-check.sh [build-dir] (default build/release)
#   HALTPOLL_CHECK_SECONDS (3): the window per cap; HALTPOLL_CHECK_LOOPS (100000) and
#   HALTPOLL_CHECK_RUNS (5): the overhead benchmark's pipe length and rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build/release}"
loops="${HALTPOLL_CHECK_LOOPS:-100000}"
seconds="${HALTPOLL_CHECK_SECONDS:-3}"
params=/sys/module/haltpoll/parameters
param="$params/guest_halt_poll_ns"
names=(guest_halt_poll_ns guest_halt_poll_grow guest_halt_poll_grow_start guest_halt_poll_shrink guest_halt_poll_allow_shrink)

[ "$(id -u)" = 0 ] || { echo "kernel-signals-check: needs root (eBPF, perf -a, the cap)" >&2; exit 2; }
command -v perf >/dev/null || { echo "kernel-signals-check: perf missing (scripts/install-deps.sh installs linux-perf)" >&2; exit 2; }
if [ ! -x "$build/src/bpf/haltpoll_idle_trace" ] || [ ! -x "$build/bench/bench_bpf_overhead" ]; then
  preset="$(basename "$build")"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" --target haltpoll_idle_trace bench_bpf_overhead -j "$(nproc)" >/dev/null
fi
tool="$build/src/bpf/haltpoll_idle_trace"

tmp="$(mktemp -d)"
found=()
load_pid=""
caps=("$(cat "$param")")
if [ "${HALTPOLL_REAL_SYSFS:-0}" = 1 ]; then
  exec 9>/tmp/haltpoll-real-sysfs.lock
  flock 9
  for n in "${names[@]}"; do found+=("$(cat "$params/$n")"); done
  caps=(0 50000 200000)
fi
# Stops the load and restores every parameter found, on every way out (the run's own failures included).
# shellcheck disable=SC2317  # run by the EXIT trap
restore() {
  if [ -n "$load_pid" ]; then kill -- "-$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
  if [ "${#found[@]}" -gt 0 ]; then
    for i in "${!names[@]}"; do echo "${found[$i]}" > "$params/${names[$i]}" || echo "kernel-signals-check: cannot restore ${names[$i]}" >&2; done
  fi
}
trap restore EXIT
trap 'exit 130' INT TERM

status=0
for cap in "${caps[@]}"; do
  [ "${HALTPOLL_REAL_SYSFS:-0}" = 1 ] && echo "$cap" > "$param"
  # The load, in its own process group so that it (perf bench and its two tasks) stops as one.
  setsid perf bench sched pipe -l 2000000000 > /dev/null 2>&1 &
  load_pid=$!
  sleep 0.5
  rm -f "$tmp/ctl" "$tmp/ack"
  mkfifo "$tmp/ctl" "$tmp/ack"
  # perf's events start disabled; the program's window (between its two snapshots) encloses the
  # enable ... disable of perf's, with only the FIFO round trips between them.
  # shellcheck disable=SC2016  # the inner bash expands its own arguments
  perf stat -a -A -x, -o "$tmp/perf.csv" -D -1 --control "fifo:$tmp/ctl,$tmp/ack" \
      -e power:cpu_idle --filter 'state != 4294967295' -e power:cpu_idle --filter 'state == 4294967295' \
      -e power:cpu_idle -e sched:sched_wake_idle_without_ipi \
      -- "$tool" run -- bash -c 'echo enable > "$1"; read -r _ < "$2"; sleep "$3"; echo disable > "$1"; read -r _ < "$2"' \
         window "$tmp/ctl" "$tmp/ack" "$seconds" > "$tmp/bpf.json" 2> "$tmp/perf.err"
  kill -- "-$load_pid" 2>/dev/null || true
  wait "$load_pid" 2>/dev/null || true
  load_pid=""
  # Pass (exit 0) only when the IPI skips agree within 1 % and poll CPU within 0.5 points; the
  # entry comparison is per CPU (perf -A), see docs/kernel-signals.md "perf and power:cpu_idle".
  python3 - "$cap" "$tmp/bpf.json" "$tmp/perf.csv" <<'PY' || status=1
import json, sys
cap, bpf_path, perf_path = sys.argv[1], sys.argv[2], sys.argv[3]
b = json.load(open(bpf_path))
t, sysfs, window = b["total"], b["sysfs"], b["seconds"]
# perf -A -x,: CPU,count,unit,event,... in the order of the -e options, every CPU per event.
groups = {}
for line in open(perf_path):
    f = line.rstrip("\n").split(",")
    if len(f) < 4 or not f[0].startswith("CPU"):
        continue
    cpu, count, event = int(f[0][3:]), int(f[1]) if f[1].isdigit() else 0, f[3]
    seen = groups.setdefault(event, [])
    if not seen or cpu in seen[-1]:
        seen.append({})
    seen[-1][cpu] = count
entries_perf, exits_perf, all_perf = groups["power:cpu_idle"][:3]
ipi_perf = sum(groups["sched:sched_wake_idle_without_ipi"][0].values())
def pct(a, c):
    return 0.0 if a == c else (None if c == 0 else round(100.0 * (a - c) / c, 3))
per_cpu, blind = [], []
for cpu, c in enumerate(b["cpus"]):
    e = entries_perf.get(cpu, 0)
    per_cpu.append({"cpu": cpu, "entries_bpf": c["idle_entries"], "entries_perf": e, "exits_perf": exits_perf.get(cpu, 0),
                    "all_perf": all_perf.get(cpu, 0), "diff_percent": pct(c["idle_entries"], e)})
    if e == 0 and c["idle_entries"] > 0:
        blind.append(cpu)
seen_cpus = [p for p in per_cpu if p["cpu"] not in blind]
ent_bpf_seen = sum(p["entries_bpf"] for p in seen_cpus)
ent_perf_seen = sum(p["entries_perf"] for p in seen_cpus)
ipi_diff = pct(t["ipi_skipped"], ipi_perf)
poll_bpf = 100.0 * t["poll_ns"] / (window * 1e9)
poll_sys = 100.0 * sysfs["poll_time_us"] * 1e3 / (window * 1e9)
halts_without_poll = t["halts"] - t["poll_timeouts"]
# cpuidle cannot tell which halts followed a poll; with the governor's rule (a halt follows a poll
# only when it timed out) the halts that did not are the program's halts_without_poll, so
# derived = POLL usage - (halt usage - halts without a poll). POLL usage - halt usage alone is a
# lower bound (every halt after a poll), exact while no CPU's limit is 0.
derived = sysfs["poll_usage"] - (sysfs["halt_usage"] - halts_without_poll)
idle = t["idle_entries"] > 0
ipi_ok = (ipi_diff is not None and abs(ipi_diff) <= 1) if idle else None
poll_ok = abs(poll_bpf - poll_sys) <= 0.5 if idle else None
if not idle:
    print(f"kernel-signals-check: cap {cap}: no idle periods during the window (CPUs busy with other work)", file=sys.stderr)
print(json.dumps({
    "guest_halt_poll_ns": int(cap), "window_s": window, "idle_entries_per_s": round(t["idle_entries"] / window),
    "ipi_skipped_bpf": t["ipi_skipped"], "ipi_skipped_perf": ipi_perf, "ipi_diff_percent": ipi_diff, "ipi_within_1_percent": ipi_ok,
    "idle_entries_bpf": t["idle_entries"], "cpu_idle_entries_perf": sum(entries_perf.values()),
    "cpu_idle_exits_perf": sum(exits_perf.values()), "cpu_idle_all_perf": sum(all_perf.values()),
    "perf_blind_cpus": blind, "entries_bpf_on_cpus_perf_sees": ent_bpf_seen, "entries_perf_on_cpus_perf_sees": ent_perf_seen,
    "entries_diff_percent_on_cpus_perf_sees": pct(ent_bpf_seen, ent_perf_seen), "entries_per_cpu": per_cpu,
    "poll_entries_bpf": t["poll_entries"], "poll_usage_sysfs": sysfs["poll_usage"], "halts_bpf": t["halts"], "halt_usage_sysfs": sysfs["halt_usage"],
    "poll_cpu_percent_bpf": round(poll_bpf, 3), "poll_cpu_percent_sysfs": round(poll_sys, 3),
    "poll_cpu_diff_points": round(poll_bpf - poll_sys, 3), "poll_cpu_within_0_5_points": poll_ok,
    "poll_hits_bpf": t["poll_hits"], "poll_timeouts_bpf": t["poll_timeouts"], "halts_without_poll_bpf": halts_without_poll,
    "poll_hits_cpuidle_derived": derived, "hits_diff_percent": pct(t["poll_hits"], derived),
    "poll_hits_cpuidle_lower_bound": max(0, sysfs["poll_usage"] - sysfs["halt_usage"]),
}))
sys.exit(0 if ipi_ok and poll_ok else 1)
PY
done

# The overhead target is stated at a cap of 200000; without the opt-in the current cap is used.
[ "${HALTPOLL_REAL_SYSFS:-0}" = 1 ] && echo 200000 > "$param"
"$build/bench/bench_bpf_overhead" --loops "$loops" --runs "${HALTPOLL_CHECK_RUNS:-5}"
exit "$status"
