#!/usr/bin/env bash
# The evaluation's plumbing without the real kernel (ctest label "eval"): scripts/eval-kernel.sh in
# smoke mode (EVAL_SMOKE=1) on a fake haltpoll tree, with every load, each application started,
# loaded and stopped, the load-change run, the kill -9 check and the report; then checks what it
# left. Needs the applications of `scripts/install-deps.sh --eval`: exits 77 (skipped), saying
# which, only when one of them is missing. Usage: eval_smoke_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
PATH="$PATH:/usr/sbin:/sbin"
missing=""
for t in redis-server redis-benchmark nginx wrk memcached memcaslap sockperf mariadbd mariadb-install-db mariadb sysbench; do
  command -v "$t" >/dev/null || missing="$missing $t"
done
if [ -n "$missing" ]; then
  echo "eval_smoke: SKIPPED: the evaluation's applications are not installed (missing:$missing);"
  echo "eval_smoke: scripts/install-deps.sh --eval installs them"
  exit 77
fi
work="$(mktemp -d /tmp/haltpolld-eval-smoke-XXXXXX)"
keep=0
trap '[ "$keep" = 1 ] || rm -rf "$work"' EXIT
# A failure keeps the run's directory (its log, every cell's row and output) and names it.
fail() { keep=1; echo "eval_smoke: FAILED: $* (the run's files: $work)" >&2; exit 1; }
fake="$work/fake"
out="$work/results"
# The real parameters, read (never written) before and after, when no evaluation holds their lock.
real=/sys/module/haltpoll/parameters
real_before=""
if [ -d "$real" ] && flock -n /tmp/haltpoll-real-sysfs.lock true 2>/dev/null; then
  real_before="$(cat "$real"/* 2>/dev/null | tr '\n' ' ')"
fi

# The fake root must never be / : the script refuses it before it reads anything.
if EVAL_SMOKE=1 EVAL_FAKE_ROOT=/ bash "$src/scripts/eval-kernel.sh" "$build" "$work/refused" > "$work/refused.log" 2>&1; then
  fail "smoke mode accepted / as its fake root"
fi
grep -q "refuses the fake root /" "$work/refused.log" || fail "no refusal of / (see: $(tail -2 "$work/refused.log"))"
if EVAL_SMOKE=1 EVAL_FAKE_ROOT=/sys bash "$src/scripts/eval-kernel.sh" "$build" "$work/refused" > "$work/refused.log" 2>&1; then
  fail "smoke mode accepted /sys as its fake root"
fi

t0=$SECONDS
if ! EVAL_SMOKE=1 EVAL_FAKE_ROOT="$fake" SEED=1 bash "$src/scripts/eval-kernel.sh" "$build" "$out" > "$work/run.out" 2> "$work/run.err"; then
  tail -40 "$work/run.err" >&2
  fail "scripts/eval-kernel.sh in smoke mode exited non-zero"
fi
echo "eval_smoke: the smoke run took $((SECONDS - t0)) s"
grep -q "haltpoll parameters restored to the values found" "$work/run.err" || fail "the parameters were not put back"
grep -q "warning" "$work/run.err" && { grep warning "$work/run.err" >&2; fail "the run warned"; }

# Every load x setting measured, a metric for every load but idle; the daemon ran through each cell.
python3 - "$out" <<'PY' || fail "the rows"
import json, os, sys
out = sys.argv[1]
env = json.load(open(os.path.join(out, "env.json")))
rows = [json.loads(l) for l in open(os.path.join(out, "loads.jsonl"))]
bad = []
assert env["smoke"] is True and env["sysfs_root"] != "/", env
for load in env["loads"].split():
    for s in env["settings"].split():
        r = [x for x in rows if x["load"] == load and x["setting"] == s]
        if len(r) != 1:
            bad.append(f"{load}/{s}: {len(r)} rows")
            continue
        r = r[0]
        if load != "idle" and not (isinstance(r.get("metric"), (int, float)) and r["metric"] > 0):
            bad.append(f"{load}/{s}: no metric ({r.get('output_tail', '')[-200:]!r})")
        if r.get("poll_cpu_percent_per_cpu") is None:
            bad.append(f"{load}/{s}: no poll CPU")
        # A _gscap static runs with grow_start at its cap; every other cell starts with the tree's
        # 50000 (a policy's _gscap writes its own once its daemon runs, and puts 50000 back).
        want_gs = int(s.split("_")[1]) if s.startswith("static_") and s.endswith("_gscap") else 50000
        if r.get("grow_start_before") != want_gs:
            bad.append(f"{load}/{s}: grow_start {r.get('grow_start_before')} in force, not {want_gs}")
        if s.split("_")[0] in ("balanced", "budget", "latency"):
            if r.get("daemon_ok") is not True:
                bad.append(f"{load}/{s}: the daemon did not run through its cell")
            d = json.load(open(os.path.join(out, f"decisions-{s}-{load}-r1.json")))
            if not isinstance((d.get("parameters") or {}).get("decisions"), list):
                bad.append(f"{load}/{s}: no decisions")
            st = json.load(open(os.path.join(out, f"status-{s}-{load}-r1.json")))
            if "parameters" not in st:
                bad.append(f"{load}/{s}: no status")
            # A policy's _gscap runs the daemon with tuner.grow_start_at_cap, the policy without.
            gscap = (((st.get("parameters") or {}).get("controller") or {}).get("tuner") or {}).get("params", {})
            if gscap.get("grow_start_at_cap") is not s.endswith("_gscap"):
                bad.append(f"{load}/{s}: tuner.grow_start_at_cap {gscap.get('grow_start_at_cap')}")
            # ... and writes grow_start = the cap with every cap but 0, nothing without it.
            for x in (d.get("parameters") or {}).get("decisions") or []:
                ns, gs = x.get("guest_halt_poll_ns"), x.get("grow_start_ns")
                want = (ns if ns else 50000) if s.endswith("_gscap") else None
                if gs != want or (want is not None and x.get("applied_grow_start") is not True):
                    bad.append(f"{load}/{s}: tick {x.get('tick')}: cap {ns} with grow_start {gs}, not {want}")
                    break
ch = [json.loads(l) for l in open(os.path.join(out, "change.jsonl"))]
if sorted({r["phase"] for r in ch}) != ["idle", "pipe", "rr", "timer"]:
    bad.append("the load-change run lacks a phase")
k = json.load(open(os.path.join(out, "kill9.json")))
if k["restore_after_sigkill"] != "passed":
    bad.append(f"kill -9: {k}")
for b in bad:
    print("eval_smoke: " + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
python3 "$src/scripts/eval-kernel-report.py" --check "$out" || fail "the report does not read back its own summary"
grep -q "SMOKE RUN" "$out/summary.md" || fail "summary.md does not say it is a smoke run"

# The fake tree holds the values it was made with; no server outlived the run.
for n in guest_halt_poll_ns=200000 guest_halt_poll_grow=2 guest_halt_poll_grow_start=50000 \
         guest_halt_poll_shrink=2 guest_halt_poll_allow_shrink=Y; do
  [ "$(cat "$fake/sys/module/haltpoll/parameters/${n%%=*}")" = "${n#*=}" ] || fail "fake ${n%%=*} not put back"
done
while read -r pid cmd; do
  if kill -0 "$pid" 2>/dev/null; then fail "server $pid ($cmd) still running"; fi
done < "$out/servers.txt"
[ "$(wc -l < "$out/servers.txt")" -ge 5 ] || fail "fewer servers started than applications"

if [ -n "$real_before" ] && flock -n /tmp/haltpoll-real-sysfs.lock true 2>/dev/null; then
  [ "$(cat "$real"/* 2>/dev/null | tr '\n' ' ')" = "$real_before" ] || fail "the REAL haltpoll parameters changed"
fi
echo "eval_smoke: passed ($(wc -l < "$out/loads.jsonl") cells, $(wc -l < "$out/servers.txt") servers)"
