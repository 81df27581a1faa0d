#!/usr/bin/env python3
"""The simulated evaluation's targets on a short seeded run (docs/tuning.md, "Evaluation").

Runs bench_sim_eval on 2 and 8 vCPUs (one seed, 20 s cells from the daemon's start, a few statics
and balanced) and checks balanced against the best static of the run: the pipe and rr within 5 %
of its result at no more than its poll CPU + 2 points, the database-shaped load under
balanced_gscap (tuner.grow_start_at_cap) at >= 0.97 x at no more than + 3 points, the 150 us timer
and Poisson under 1 % poll CPU per CPU, the idle guest under 0.2 %. Deterministic for the seed;
about 40 s.
  sim_eval_targets.py BENCH_SIM_EVAL WORK_DIR"""
import json
import pathlib
import subprocess
import sys

bench, work = sys.argv[1], pathlib.Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
statics = ["static_0", "static_50000", "static_200000", "static_400000"]
subprocess.run([bench, "--out", str(work), "--cpus", "2,8", "--seeds", "1", "--seconds", "20", "--threads", "2",
                "--loads", "pipe,rr,timer,poisson,idle", "--settings", ",".join(statics + ["balanced"])],
               check=True, stdout=subprocess.DEVNULL)
# The database-shaped load with tuner.grow_start_at_cap (balanced_gscap), in its own directory.
subprocess.run([bench, "--out", str(work / "db"), "--cpus", "2,8", "--seeds", "1", "--seconds", "20", "--threads",
                "2", "--loads", "db", "--settings", ",".join(statics + ["balanced_gscap"])],
               check=True, stdout=subprocess.DEVNULL)
failures = []
for cpus in (2, 8):
    rows = [json.loads(l) for l in (work / f"cpus-{cpus}" / "loads.jsonl").read_text().splitlines() if l]
    at = {(r["load"], r["setting"]): r for r in rows}
    for load, key, higher in (("pipe", "us_per_op", False), ("rr", "throughput_per_s", True)):
        best = (max if higher else min)((at[(load, s)] for s in statics), key=lambda r: r[key])
        b = at[(load, "balanced")]
        ratio = b[key] / best[key]
        ok = ratio >= 0.95 if higher else ratio <= 1.05
        poll_ok = b["poll_cpu_percent_per_cpu"] <= best["poll_cpu_percent_per_cpu"] + 2
        print(f"{cpus} vCPUs {load}: balanced {ratio:.3f} x {best['setting']}, poll "
              f"{b['poll_cpu_percent_per_cpu']:.2f} % against {best['poll_cpu_percent_per_cpu']:.2f} %")
        if not (ok and poll_ok):
            failures.append(f"{cpus} vCPUs {load}")
    # db polls every idle period once out of the trap: 2.0-2.5 points above the best static of the
    # kernel's grow_start in the 60 s evaluation (docs/simulator.md), hence + 3 here.
    db = {r["setting"]: r for r in map(json.loads, (work / "db" / f"cpus-{cpus}" / "loads.jsonl").read_text().splitlines())}
    best = max((db[s] for s in statics), key=lambda r: r["throughput_per_s"])
    b = db["balanced_gscap"]
    ratio = b["throughput_per_s"] / best["throughput_per_s"]
    print(f"{cpus} vCPUs db: balanced_gscap {ratio:.3f} x {best['setting']}, poll "
          f"{b['poll_cpu_percent_per_cpu']:.2f} % against {best['poll_cpu_percent_per_cpu']:.2f} %")
    if ratio < 0.97 or b["poll_cpu_percent_per_cpu"] > best["poll_cpu_percent_per_cpu"] + 3:
        failures.append(f"{cpus} vCPUs db (balanced_gscap)")
    for load, limit in (("timer", 1.0), ("poisson", 1.0), ("idle", 0.2)):
        poll = at[(load, "balanced")]["poll_cpu_percent_per_cpu"]
        print(f"{cpus} vCPUs {load}: balanced polls {poll:.3f} % per CPU (target <= {limit} %)")
        if poll > limit:
            failures.append(f"{cpus} vCPUs {load}")
if failures:
    print("FAILED:", ", ".join(failures))
    sys.exit(1)
print("every target met")
