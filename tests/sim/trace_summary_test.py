#!/usr/bin/env python3
"""scripts/trace-summary.py on a hand-made recording whose every figure is known, on malformed ones,
and on the real guest's pipe at cap 0 (tests/data/real-guest), whose shape the model's fit uses.
Usage: trace_summary_test.py SOURCE_DIR"""
import json
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
tool = os.path.join(src, "scripts", "trace-summary.py")
failures = []


def run(*args):
    p = subprocess.run([sys.executable, tool, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    if not cond:
        failures.append(what)


with tempfile.TemporaryDirectory(prefix="haltpolld-trace-summary-") as d:
    # 2 CPUs over 2 s. CPU 0: a poll ended by a wake-up (3 µs), a timed-out poll (20 µs) and its halt
    # (8 µs, grown from 0 to 20000), a halt without a poll (30 µs, shrunk to 0). CPU 1: two polls ended
    # by wake-ups (1 and 5 µs), a last poll with nothing after it (2 µs: ended by a wake-up too). The
    # quantiles take the value at index int(q·n) of the sorted residencies.
    rec = os.path.join(d, "made.txt")
    with open(rec, "w") as f:
        f.write("# haltpolld simulate --guest: made by hand\n"
                "# haltpoll guest_halt_poll_ns=20000 guest_halt_poll_grow_start=50000\n"
                "# cpu state residency_ns | # limit cpu old new grow|shrink\n"
                "0 POLL 3000\n1 POLL 1000\n0 POLL 20000\n1 POLL 5000\n0 halt 8000\n# limit 0 0 20000 grow\n"
                "0 halt 30000\n# limit 0 20000 0 shrink\n1 POLL 2000\n# end: 2.000 s, 7 periods, 2 limit events\n")
    rc, out, err = run("--json", rec)
    check(rc == 0 and err == "", f"made: rc {rc}, {err}")
    r = json.loads(out) if rc == 0 else {}
    want = {"seconds": 2.0, "seconds_from": "# end", "cpus": [0, 1], "cap_ns": 20000,
            "entries_per_s": 2, "polls_per_s": 1, "halts_per_s": 0, "timed_out_share": 0.2,
            "poll_hit_us": [1.0, 3.0, 5.0], "timed_out_poll_us": [20.0, 20.0, 20.0],
            "halt_after_timeout_us": [8.0, 8.0, 8.0], "halt_bare_us": [30.0, 30.0, 30.0],
            "halts_le_10us_share": 0.5, "limit_grows_per_s": 0.2, "limit_shrinks_per_s": 0.2,
            "limit_changes_per_s": 0.5, "limit_to_zero_per_s": 0.2}
    # (7 periods / 2 s / 2 CPUs = 1.75 → 2; 5 polls → 1.25 → 1; 2 halts → 0.5 → 0 by round-half-even)
    for k, v in want.items():
        check(r.get(k) == v, f"made: {k} = {r.get(k)!r}, want {v!r}")

    # --cpu: CPU 1 alone, per its own second count.
    rc, out, err = run("--json", "--cpu", "1", rec)
    r = json.loads(out) if rc == 0 else {}
    check(r.get("cpus") == [1] and r.get("polls_per_s") == 2 and r.get("halts_per_s") == 0
          and r.get("poll_hit_us") == [1.0, 2.0, 5.0] and r.get("limit_grows_per_s") == 0.0,
          f"--cpu 1: {out} {err}")
    rc, out, err = run("--cpu", "7", rec)
    check(rc == 1 and "no idle periods of CPU 7" in err, f"--cpu 7: rc {rc}, {err}")

    # The table: one row per file, with the CPUs it covers.
    rc, out, err = run(rec)
    check(rc == 0 and "| made.txt | 2.00 | 0,1 | 2 | 1 | 0 | 20.00 % | 1.0/3.0/5.0 |" in out, f"table: {out}")

    # Malformed: the file and line, and nothing printed on stdout.
    for name, text, why in [
        ("state", "0 WAIT 100\n# end: 1 s\n", "bad.txt:1: expected 'cpu POLL|halt residency_ns'"),
        ("number", "0 halt 1e5\n# end: 1 s\n", "bad.txt:1: expected numbers in '0 halt 1e5'"),
        ("limit", "0 halt 100\n# limit 0 1 2 up\n# end: 1 s\n", "bad.txt:2: expected '# limit cpu old new grow|shrink'"),
        ("end", "0 halt 100\n# end: soon\n", "unreadable '# end:' line"),
    ]:
        bad = os.path.join(d, "bad.txt")
        with open(bad, "w") as f:
            f.write(text)
        rc, out, err = run(bad)
        check(rc == 1 and why in err and out == "", f"malformed {name}: rc {rc}, out {out!r}, err {err!r}")

    # No length anywhere: refused unless --seconds gives it.
    bare = os.path.join(d, "bare.txt")
    with open(bare, "w") as f:
        f.write("0 halt 5000\n0 halt 15000\n")
    rc, out, err = run(bare)
    check(rc == 1 and "give --seconds" in err, f"no length: rc {rc}, {err}")
    rc, out, err = run("--json", "--seconds", "0.5", bare)
    r = json.loads(out) if rc == 0 else {}
    check(r.get("halts_per_s") == 4 and r.get("seconds_from") == "--seconds", f"--seconds: {out} {err}")

    # The load's wall time beside a recording (LOAD-CAP.wall_us) comes before its `# end:` line.
    beside = os.path.join(d, "made.idle.txt")
    with open(rec) as f, open(beside, "w") as g:
        g.write(f.read())
    with open(os.path.join(d, "made.wall_us"), "w") as f:
        f.write("500000\n")
    rc, out, err = run("--json", beside)
    r = json.loads(out) if rc == 0 else {}
    check(r.get("seconds") == 0.5 and r.get("seconds_from") == "wall_us" and r.get("polls_per_s") == 5,
          f"wall_us: {out} {err}")
    with open(os.path.join(d, "made.wall_us"), "w") as f:
        f.write("soon\n")
    rc, out, err = run(beside)
    check(rc == 1 and "made.wall_us: not a number of microseconds" in err, f"bad wall_us: rc {rc}, {err}")

# The real guest's pipe at cap 0 (xz, its length in pipe-0.wall_us): the halted periods' p10/p50/p90
# that FitInputs holds (src/sim/des_costs.hpp) and the share of halts of 10 µs or less that
# docs/simulator.md quotes.
real = os.path.join(src, "tests", "data", "real-guest", "pipe-0.idle.txt.xz")
rc, out, err = run("--json", real)
r = json.loads(out) if rc == 0 else {}
check(r.get("seconds_from") == "wall_us" and r.get("cpus") == [0], f"real: {out} {err}")
check(r.get("halt_bare_us") == [19.399, 24.296, 34.151], f"real: halts {r.get('halt_bare_us')}")
check(r.get("halts_le_10us_share") == 0.0058, f"real: halts <= 10 us {r.get('halts_le_10us_share')}")
check(r.get("polls_per_s") == 0 and r.get("halts_per_s") == 16779, f"real: rates {out}")

for f in failures:
    print("trace_summary: FAILED:", f, file=sys.stderr)
print("trace_summary:", "ok" if not failures else f"{len(failures)} failed")
sys.exit(1 if failures else 0)
