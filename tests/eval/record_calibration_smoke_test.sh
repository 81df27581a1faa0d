#!/usr/bin/env bash
# scripts/record-calibration.sh in smoke mode (CAL_SMOKE=1) on a fake haltpoll tree whose parameters
# hold values of its own: two rounds of every load at caps 0 and 50000, then two trace cells with
# `haltpolld record` beside the load (real perf, real eBPF, real loads; the fake tree's counters
# stand still). Checks what it wrote (every cell's row, the perf rounds, the loads' results, the
# traces), that it put back the values it found, that the real parameters were left alone, and that
# it refuses / as a fake root, a fake root outside smoke mode and an unknown load.
# Needs root (perf stat -a, eBPF): exits 77 (skipped), saying so, otherwise.
# Usage: record_calibration_smoke_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
if [ "$(id -u)" != 0 ]; then
  echo "record_calibration_smoke: SKIPPED: needs root (perf stat -a and haltpolld record's eBPF)"
  exit 77
fi
work="$(mktemp -d /tmp/haltpolld-calibration-smoke-XXXXXX)"
keep=0
trap '[ "$keep" = 1 ] || rm -rf "$work"' EXIT
fail() { keep=1; echo "record_calibration_smoke: FAILED: $* (the run's files: $work)" >&2; exit 1; }
script="$src/scripts/record-calibration.sh"
export HALTPOLLD="$build/src/daemon/haltpolld"
real=/sys/module/haltpoll/parameters
real_before=""
if [ -d "$real" ] && flock -n /tmp/haltpoll-real-sysfs.lock true 2>/dev/null; then
  real_before="$(cat "$real"/* 2>/dev/null | tr '\n' ' ')"
fi

# Refusals, each before anything is written.
CAL_SMOKE=1 CAL_FAKE_ROOT=/ bash "$script" "$build" "$work/r.jsonl" > "$work/refused.log" 2>&1 &&
  fail "smoke mode accepted / as its fake root"
grep -q "refuses the fake root /" "$work/refused.log" || fail "no refusal of /: $(tail -2 "$work/refused.log")"
CAL_FAKE_ROOT="$work/x" bash "$script" "$build" "$work/r.jsonl" > "$work/refused.log" 2>&1 &&
  fail "CAL_FAKE_ROOT was accepted without CAL_SMOKE=1"
grep -q "CAL_FAKE_ROOT needs CAL_SMOKE=1" "$work/refused.log" || fail "no refusal of CAL_FAKE_ROOT alone: $(tail -2 "$work/refused.log")"
CAL_SMOKE=1 CAL_FAKE_ROOT="$work/fake-bogus" LOADS="pipe bogus" bash "$script" "$build" "$work/r.jsonl" > "$work/refused.log" 2>&1 &&
  fail "an unknown load was accepted"
grep -q "LOADS: bogus" "$work/refused.log" || fail "no refusal of an unknown load: $(tail -2 "$work/refused.log")"
[ ! -e "$work/r.jsonl" ] || fail "a refused run wrote $work/r.jsonl"

# A fake tree whose parameters are not the defaults: the run must put these back.
fake="$work/fake"
python3 "$src/tests/fleet/fake_guest.py" "$fake" --cpus 2 --init-only
echo 123456 > "$fake/sys/module/haltpoll/parameters/guest_halt_poll_ns"
echo 40000 > "$fake/sys/module/haltpoll/parameters/guest_halt_poll_grow_start"
out="$work/out.jsonl"
t0=$SECONDS
if ! CAL_SMOKE=1 CAL_FAKE_ROOT="$fake" bash "$script" "$build" "$out" > "$work/run.out" 2> "$work/run.err"; then
  tail -20 "$work/run.err" >&2
  fail "scripts/record-calibration.sh in smoke mode exited non-zero"
fi
echo "record_calibration_smoke: the smoke run took $((SECONDS - t0)) s"
{ [ "$(cat "$fake/sys/module/haltpoll/parameters/guest_halt_poll_ns")" = 123456 ] &&
  [ "$(cat "$fake/sys/module/haltpoll/parameters/guest_halt_poll_grow_start")" = 40000 ] &&
  [ "$(cat "$fake/sys/devices/system/cpu/cpuidle/current_governor")" = haltpoll ]; } ||
  fail "the fake tree's values were not put back: $(cat "$fake"/sys/module/haltpoll/parameters/* | tr '\n' ' ')"
grep -q "put back guest_halt_poll_ns=123456 " "$work/run.err" || fail "no put-back line: $(tail -2 "$work/run.err")"
grep -q "NOT restored" "$work/run.err" && fail "a value was not restored: $(grep "NOT restored" "$work/run.err")"

python3 - "$out" "$fake" <<'PY' || fail "the rows and traces"
import json, os, sys
out, fake = sys.argv[1:]
env = json.load(open(out + ".env.json"))
assert env["smoke"] is True and env["sysfs_root"] == fake, env
assert "guest_halt_poll_ns=123456" in env["found"], env["found"]
rows = [json.loads(l) for l in open(out)]
cells = sorted((r["round"], r["load"], r["cap"]) for r in rows)
want = sorted((rnd, load, cap) for rnd in (1, 2) for load in "pipe rr db timer poisson idle".split() for cap in (0, 50000))
assert cells == want, f"cells {cells} != {want}"
bad = []
for r in rows:
    if r["perf"] != (r["round"] == 1):
        bad.append(f"{r['round']} {r['load']} {r['cap']}: perf {r['perf']}")
    if r["round"] == 1 and r["ipi_skips_per_s"] is None:
        bad.append(f"{r['load']} {r['cap']}: perf counted no sched_wake_idle_without_ipi")
    # The pipe runs PIPE_LOOPS round trips (3000: under 0.1 s here); the others LOAD_SECONDS (0.3).
    if not (0 < r["seconds"] < 30 and (r["load"] == "pipe" or r["seconds"] >= 0.27)):
        bad.append(f"{r['load']} {r['cap']}: ran {r['seconds']} s")
    if r["load"] == "pipe" and not (isinstance(r.get("us_per_op"), float) and r["us_per_op"] > 0):
        bad.append(f"pipe {r['cap']}: no us/op")
    if r["load"] in ("rr", "db", "timer", "poisson") and r.get("bench") != {"rr": "load_rr", "db": "load_rr"}.get(r["load"], "load_" + r["load"]):
        bad.append(f"{r['load']} {r['cap']}: no result of its generator ({r.get('bench')})")
assert not bad, bad
traces = out + ".traces"
for cell in ("pipe-10000", "db-50000"):
    base = os.path.join(traces, cell)
    for suffix in (".counters.before", ".counters.after", ".wall_us", ".idle.txt"):
        assert os.path.isfile(base + suffix), base + suffix
    wall_us = int(open(base + ".wall_us").read())
    assert wall_us > 0 and (cell != "db-50000" or wall_us >= 270000), (cell, wall_us)
    lines = open(base + ".idle.txt").read().splitlines()
    periods = [l for l in lines if l and not l.startswith("#")]
    assert lines[0].startswith("# haltpolld record:") and lines[-1].startswith("# end:"), (cell, lines[:1], lines[-1:])
    assert len(periods) > 10, (cell, len(periods))
print(f"record_calibration_smoke: {len(rows)} cells, traces {', '.join(sorted(os.listdir(traces)))}")
PY

if [ -n "$real_before" ] && flock -n /tmp/haltpoll-real-sysfs.lock true 2>/dev/null; then
  [ "$(cat "$real"/* 2>/dev/null | tr '\n' ' ')" = "$real_before" ] || fail "the real parameters changed during the smoke run"
fi
echo "record_calibration_smoke: passed"
