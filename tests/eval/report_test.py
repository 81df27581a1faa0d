#!/usr/bin/env python3
"""scripts/eval-kernel-report.py on made-up rounds whose verdicts are known (ctest label "eval").

The rows are what scripts/eval-kernel.sh writes, with values chosen so that each verdict of the
report's rules is fixed: a policy within the tolerance on every round (met), one far below the best
static (not met), one whose rounds straddle the target (undecided), a static that wins only on the
odd rounds (so the two halves choose different best statics), the cost targets of the timer and
the idle guest, and a load-change run judged over whole phases. Then --check reads the summary back,
and a corrupted summary must fail it. Usage: report_test.py SOURCE_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

SRC = sys.argv[1]
REPORT = os.path.join(SRC, "scripts", "eval-kernel-report.py")
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what)


def row(setting, rnd, load, metric, poll, better, **kw):
    r = {"setting": setting, "round": rnd, "load": load, "seconds": 5.0, "value_before": 0, "value_after": 0,
         "metric": metric, "better": better, "metric_name": "m", "poll_cpu_percent_per_cpu": poll}
    if setting in ("balanced", "budget", "latency"):
        r.update({"daemon_cpu_percent_of_one_cpu": 0.1, "daemon_ok": True, "seconds": 30.0})
    r.update(kw)
    return r


def make_run(d):
    rows = []
    statics = ["static_0", "static_100000", "static_200000"]
    for rnd in (1, 2, 3, 4):
        wob = 1 if rnd % 2 else -1  # a small paired wobble, the same for every setting of a round
        # A throughput load: 200000 is the best on the even rounds, 100000 on the odd ones.
        rows += [row("static_0", rnd, "kv", 100 + wob, 0.0, "higher"),
                 row("static_100000", rnd, "kv", 210 + wob if rnd % 2 else 180 + wob, 29.5, "higher"),
                 row("static_200000", rnd, "kv", 200 + wob, 30.0, "higher"),
                 row("balanced", rnd, "kv", 201 + wob, 30.5, "higher"),
                 row("budget", rnd, "kv", 101 + wob, 0.0, "higher"),
                 # as fast as the best, but 10 points more polling
                 row("latency", rnd, "kv", 205 + wob, 40.0, "higher"),
                 # a diagnostic cell (grow_start at the cap): far ahead, never a best static
                 row("static_100000_gscap", rnd, "kv", 400 + wob, 30.0, "higher")]
        # A latency load (lower is better): balanced straddles the 1.05 target from round to round.
        rows += [row("static_0", rnd, "pingpong", 60.0, 0.0, "lower"),
                 row("static_100000", rnd, "pingpong", 20.0, 20.0, "lower"),
                 row("static_200000", rnd, "pingpong", 20.2, 21.0, "lower"),
                 row("balanced", rnd, "pingpong", [20.0, 24.0, 19.0, 23.0][rnd - 1], 20.0, "lower"),
                 row("budget", rnd, "pingpong", 59.0, 0.0, "lower"),
                 row("latency", rnd, "pingpong", 20.1, 20.5, "lower"),
                 row("static_100000_gscap", rnd, "pingpong", 10.0, 20.0, "lower")]
        # The timer: polling cannot pay; 200000 polls 45 %, balanced never.
        rows += [row("static_0", rnd, "timer", 90 + wob, 0.0, "lower"),
                 row("static_100000", rnd, "timer", 85 + wob, 30.0, "lower"),
                 row("static_200000", rnd, "timer", 70 + wob, 45.0, "lower"),
                 row("balanced", rnd, "timer", 90 + wob, 0.01, "lower"),
                 row("budget", rnd, "timer", 91 + wob, 0.0, "lower"),
                 row("latency", rnd, "timer", 71 + wob, 40.0, "lower"),
                 row("static_100000_gscap", rnd, "timer", 85 + wob, 30.0, "lower")]
        # The idle guest: the daemon's own CPU counts; latency's daemon costs 2 % of a CPU.
        rows += [row(s, rnd, "idle", None, 0.0, None) for s in statics + ["static_100000_gscap"]]
        rows += [row("balanced", rnd, "idle", None, 0.0, None),
                 row("budget", rnd, "idle", None, 0.05, None),
                 row("latency", rnd, "idle", None, 0.0, None, daemon_cpu_percent_of_one_cpu=2.0)]
    with open(os.path.join(d, "loads.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    json.dump({"seed": 7, "loads": "kv pingpong timer idle", "smoke": False, "static_seconds": 5,
               "daemon_seconds": 30, "stop_settings": "balanced",
               "settings": " ".join(statics + ["static_100000_gscap", "balanced", "budget", "latency"])}, open(os.path.join(d, "env.json"), "w"))
    json.dump({"rounds": 4, "stop_reason": "max_rounds", "seed": 7}, open(os.path.join(d, "run.json"), "w"))
    # The load-change run: balanced as fast as 100000 on the pipe, 2 % faster than cap 0's latency on the
    # timer and not polling, 0.9 x on rr; one change at the start of each phase.
    t = 0.0
    with open(os.path.join(d, "change.jsonl"), "w") as ch, open(os.path.join(d, "change-baselines.jsonl"), "w") as b:
        for setting, f in (("balanced", ch), ("static_0", b), ("static_100000", b)):
            t = 0.0
            for phase in ("pipe", "timer", "rr", "idle"):
                for i in range(10):
                    t += 1
                    lat = {"pipe": {"balanced": 8.0 + 0.1 * (i % 3), "static_0": 60.0, "static_100000": 8.0 + 0.1 * (i % 2)},
                           "timer": {"balanced": 88.0 + (i % 3), "static_0": 90.0 + (i % 3), "static_100000": 80.0},
                           "rr": {"balanced": 30.0, "static_0": 50.0, "static_100000": 30.0},
                           "idle": {}}[phase].get(setting)
                    poll = {"static_0": 0.0, "static_100000": 30.0 if phase != "idle" else 0.0}.get(
                        setting, 30.0 if phase in ("pipe", "rr") else 0.0)
                    r = {"setting": setting, "phase": phase, "t_s": t, "seconds": 1.0, "value_ns": 0,
                         "poll_cpu_percent_per_cpu": poll, "latency_us": lat}
                    if phase == "rr":
                        r["throughput_per_s"] = {"balanced": 18000.0 + 100 * (i % 2), "static_0": 12000.0,
                                                 "static_100000": 20000.0 + 100 * (i % 2)}[setting]
                    f.write(json.dumps(r) + "\n")
    open(os.path.join(d, "change.t0_ns"), "w").write("0\n")


def main():
    d = tempfile.mkdtemp(prefix="haltpolld-eval-report-")
    try:
        make_run(d)
        p = subprocess.run([sys.executable, REPORT, d], capture_output=True, text=True)
        expect(p.returncode == 0, f"the report ran (rc {p.returncode}: {p.stderr[-400:]})")
        s = json.load(open(os.path.join(d, "summary.json")))
        t = s["targets"]
        v = lambda load, st: t[load]["settings"][st]["verdict"]  # noqa: E731
        # Cross-fitting: the odd rounds chose 100000 for the even ones, the even rounds 200000 for the odd.
        by = {tuple(c["judges_rounds"]): c["static"] for c in t["kv"]["best_static"]}
        expect(by.get((2, 4)) == "static_100000" and by.get((1, 3)) == "static_200000",
               f"each half chose its best static on the other half: {by}")
        expect(v("kv", "balanced") == "met", f"kv balanced met: {t['kv']['settings']['balanced']}")
        expect(v("kv", "budget") == "not met", "kv budget (0.5 x) not met")
        expect(v("kv", "latency") == "not met", "kv latency (+10 points of poll) not met")
        expect(v("kv", "static_0") == "not met", "kv static_0 not met")
        e = t["kv"]["settings"]["balanced"]
        expect(e["ci"][0] <= e["ratio"] <= e["ci"][1], f"the ratio lies in its interval: {e}")
        expect(v("pingpong", "balanced") == "undecided", f"pingpong balanced undecided: {t['pingpong']['settings']['balanced']}")
        expect(v("pingpong", "latency") == "met", "pingpong latency met")
        expect(v("timer", "balanced") == "met", f"timer balanced met: {t['timer']['settings']['balanced']}")
        expect(v("timer", "static_200000") == "not met", "timer static_200000 (45 % poll) not met")
        expect(v("timer", "static_0") == "met", "timer static_0 met")
        expect(v("idle", "balanced") == "met", "idle balanced met")
        expect(v("idle", "latency") == "not met", "idle latency (the daemon at 2 % of a CPU) not met")
        expect(s["overall"]["balanced"] == "undecided", "balanced's overall verdict waits on pingpong")
        expect(s["no_static_meets_all"] == "yes", f"no static meets them all: {s['no_static_meets_all']}")
        expect(s["undecided_loads"] == ["pingpong"], f"undecided loads: {s['undecided_loads']}")
        p = subprocess.run([sys.executable, REPORT, "--undecided", d], capture_output=True, text=True)
        expect(p.stdout.split() == ["pingpong"], f"--undecided prints pingpong: {p.stdout!r}")
        ch = {c["phase"]: c for c in s["change"]}
        expect(ch["pipe"]["best_static"] == "static_100000" and ch["pipe"]["verdict"] == "met",
               f"change pipe met against 100000: {ch.get('pipe')}")
        expect(ch["rr"]["verdict"] == "not met", f"change rr (0.9 x) not met: {ch.get('rr')}")
        expect(ch["timer"]["verdict"] == "met", f"change timer met: {ch.get('timer')}")
        expect(ch["idle"]["verdict"] == "met", "change idle met")
        expect(os.path.getsize(os.path.join(d, "change.dat")) > 0, "change.dat written")
        p = subprocess.run([sys.executable, REPORT, "--check", d], capture_output=True, text=True)
        expect(p.returncode == 0, f"--check accepts the report's own output: {p.stderr}")
        # A corrupted summary must fail the check.
        s["targets"]["kv"]["settings"]["balanced"]["verdict"] = "probably"
        s["targets"]["timer"]["settings"]["balanced"]["poll_ci"] = [2.0, 1.0]
        json.dump(s, open(os.path.join(d, "summary.json"), "w"))
        p = subprocess.run([sys.executable, REPORT, "--check", d], capture_output=True, text=True)
        expect(p.returncode == 1 and "probably" in p.stderr and "poll_ci" in p.stderr,
               f"--check refuses a corrupted summary: rc {p.returncode}, {p.stderr!r}")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("report_test: all checks passed" if not failures else f"report_test: {len(failures)} check(s) failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
