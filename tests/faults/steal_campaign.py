#!/usr/bin/python3
"""Steal storms and counters that no tick can hold: the real haltpolld tunes (kernel mode, budget
policy, 100 ms ticks, its floor moved over the socket so that it keeps changing the value) a fake
guest of two CPUs whose counters move (guest_load.py), while
- a steal storm takes 60 % of every CPU for 3 s (a real share: the tuner may back off from it),
- the steal count jumps by 30 s of ticks at once (a host's accounting after a pause or a migration),
- the steal count goes backwards,
- a CPU's POLL time grows by 2 s at once (the residency a tick that comes early sees).
Each glitch must leave a tick held with the reason (no change of the value from a tick that held
it), every share read back (GetStats, GetDecisions) stays within 0-100 % per CPU, and SIGTERM puts
every found value back.

    tests/faults/steal_campaign.py --daemon build/dev/src/daemon/haltpolld [--glitches 3] [--rounds N]

HALTPOLLD_FAULT_ROUNDS overrides --rounds. Prints one JSON object and exits 1 when a check failed.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from guest_load import GuestLoad  # noqa: E402
from hotplug_campaign import bad_numbers, check_decisions  # noqa: E402

CPUS = 2


def one_round(binary, glitches):
    fails = []
    counts = {"storm_ticks": 0, "glitches": 0, "faults_held": 0, "backed_off_from_glitch": 0, "changes": 0,
              "decisions": 0}
    with harness.tree(cpus=CPUS) as t:
        load = GuestLoad(t.back, CPUS, poll_share=0.30).start()
        found = t.found()
        d = harness.Daemon(binary, t, harness.kernel_config(policy="budget", max_poll_cpu_percent=10), name="steal")
        if not d.wait_for("listening on", 30):
            load.stop()
            return ["did not start:\n" + d.output()[-1500:]], counts
        mover = harness.FloorMover(d.socket, period=0.7)
        mover.start()
        c = harness.Client(d.socket)
        decisions = {}

        def collect():
            for r in c.call("GetDecisions", {"limit": 256}).get("parameters", {}).get("decisions", []):
                decisions[r["tick"]] = r
            for b in bad_numbers(c.call("GetStats").get("parameters", {}), cpus=CPUS)[:3]:
                fails.append("GetStats: " + b)

        time.sleep(1.5)
        storm_from = time.time() * 1000
        load.steal_share = 0.6
        for _ in range(6):
            time.sleep(0.5)
            collect()
        load.steal_share = 0.0
        storm_to = time.time() * 1000
        for i in range(glitches):
            for inject in (lambda: load.steal_jump(30), lambda: load.steal_back(50), lambda: load.poll_burst(i % CPUS, 2)):
                time.sleep(0.8)
                inject()
                time.sleep(0.7)
                collect()
        mover.stop.set()
        mover.join(5)
        time.sleep(1.5)
        collect()
        c.close()
        load.stop()
        log = [decisions[k] for k in sorted(decisions)]
        check_decisions(log, load.flips, counts, fails, cpus=CPUS)
        storm = [r for r in log if storm_from + 300 < r["time_ms"] < storm_to and r["steal_percent"] is not None]
        counts["storm_ticks"] = len(storm)
        if not storm or max(r["steal_percent"] for r in storm) < 40:
            fails.append("the storm's steal share was not seen: %s" % [r["steal_percent"] for r in storm][:10])
        counts["glitches"] = len(load.flips)
        # Backing off for steal is right in the storm, and wrong anywhere else: only a glitch was there.
        for r in log:
            if "host contended" in r["reason"] and not storm_from < r["time_ms"] < storm_to + 1000:
                fails.append("backed off for steal outside the storm: %s" % json.dumps(r))
                counts["backed_off_from_glitch"] += 1
        harness.stop_and_check(d, t, found, fails)
    return fails, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--glitches", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    rounds = int(os.environ.get("HALTPOLLD_FAULT_ROUNDS", a.rounds))
    summary = {"campaign": "steal storms, steal jumps and going backwards, polling no tick can hold", "rounds": 0,
               "storm_ticks": 0, "glitches": 0, "faults_held": 0, "backed_off_from_glitch": 0, "changes": 0,
               "decisions": 0, "lost": 0,
               "failures": []}
    return harness.run_rounds(summary, rounds, lambda: one_round(a.daemon, a.glitches))


if __name__ == "__main__":
    sys.exit(main())
