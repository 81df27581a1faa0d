#!/usr/bin/python3
"""Time jumps: the real haltpolld is stopped (SIGSTOP) for 30 s while the fake tree's CPUs poll most
of the time, then continued (SIGCONT). The tick after the gap must decide nothing from rates over
the gap (GetDecisions: a hold that says so, no poll share), the ticks after it measure ordinary
intervals again, and the daemon keeps serving and restores at SIGTERM.

    tests/faults/stopped_campaign.py --daemon build/dev/src/daemon/haltpolld [--seconds 30] [--stops N]

HALTPOLLD_FAULT_STOPS overrides --stops. Prints one JSON object and exits 1 when a check failed.
"""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def one_stop(binary, seconds):
    fails = []
    with harness.tree() as t:
        found = t.found()
        # budget at 10 %: a poll share over the gap above it would make the tuner act on the gap.
        d = harness.Daemon(binary, t, harness.kernel_config(policy="budget", max_poll_cpu_percent=10), name="stopped")
        if not d.wait_for("listening on", 30):
            return ["did not start:\n" + d.output()[-1500:]]
        time.sleep(1.0)
        c = harness.Client(d.socket, timeout=seconds + 30)
        c.call("GetStatus")  # connected before the stop: the connection must survive it
        d.kill(signal.SIGSTOP)
        stopped_at = time.time() * 1000
        # While stopped, every CPU polls 80 % of the time and wakes 1000 times a second.
        for cpu in range(2):
            base = "sys/devices/system/cpu/cpu%d/cpuidle/state0/" % cpu
            t.write(base + "time", str(int(seconds * 0.8 * 1e6)))
            t.write(base + "usage", str(int(seconds * 1000)))
        time.sleep(seconds)
        d.kill(signal.SIGCONT)
        time.sleep(1.0)
        log = c.call("GetDecisions", {"limit": 256}).get("parameters", {}).get("decisions", [])
        c.close()
        after = [r for r in log if r["time_ms"] > stopped_at]
        # A tick stopped half way (sampled before the stop, recorded after the continue) measured an
        # ordinary interval before the stop, in which nothing polled; the next one is the gap's.
        while after and "over the gap" not in after[0]["reason"] and (after[0]["poll_cpu_percent"] or 0) <= 1.0 and \
                len(after) > 1 and "over the gap" in after[1]["reason"]:
            after = after[1:]
        if not after:
            fails.append("no decision after the stop")
        else:
            first = after[0]
            if "over the gap" not in first["reason"] or first["poll_cpu_percent"] is not None or \
                    first["guest_halt_poll_ns"] != first["previous_ns"]:
                fails.append("the first tick after the gap decided from it: %s" % json.dumps(first))
            for r in after[1:]:
                if r["poll_cpu_percent"] is not None and r["poll_cpu_percent"] > 1.0:
                    fails.append("a later tick measured the gap: %s" % json.dumps(r))
                    break
        harness.stop_and_check(d, t, found, fails)
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--stops", type=int, default=1)
    a = ap.parse_args()
    stops = int(os.environ.get("HALTPOLLD_FAULT_STOPS", a.stops))
    summary = {"campaign": "stopped %g s (SIGSTOP, SIGCONT)" % a.seconds, "seconds": a.seconds, "stops": 0,
               "decided_from_gap": 0, "lost": 0, "failures": []}
    for _ in range(stops):
        fails = one_stop(a.daemon, a.seconds)
        summary["stops"] += 1
        summary["decided_from_gap"] += any("decided from it" in f or "measured the gap" in f for f in fails)
        summary["lost"] += any("not put back" in f for f in fails)
        summary["failures"] += fails
    return harness.finish(summary)


if __name__ == "__main__":
    sys.exit(main())
