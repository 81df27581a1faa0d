#!/usr/bin/python3
"""Crash at every point of a change: SIGKILL the real haltpolld in each gap of its write sequence
against a FUSE fake sysfs that sleeps after every change it applies, then check that the next
start (then a SIGTERM), or the unit's stop path alone (`haltpolld --restore`, its ExecStopPost),
puts back every found value and the found governor, and that the state file was never half written.

    tests/faults/crash_campaign.py --daemon build/dev/src/daemon/haltpolld [--kills N] [--seed S]

HALTPOLLD_FAULT_KILLS overrides --kills (CI runs 50; the documented full campaign 400). Prints one
JSON object (the summary) on stdout and exits 1 when anything was lost. Needs root and /dev/fuse.
"""

import argparse
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from fuse_sysfs import GOVERNOR, PARAMS_DIR, STATE_DIR  # noqa: E402

DELAY_S = 0.04  # the daemon sleeps this long in each change's system call: the window the kill aims at


def label(op):
    if op.path.startswith(STATE_DIR + "/"):
        if op.kind == "rename":
            return "state file renamed into place"
        if op.kind == "unlink":
            return "state file removed"
        return "state file temporary (%s)" % op.kind
    if op.path == GOVERNOR:
        return "governor -> " + op.value
    return op.path[len(PARAMS_DIR) + 1:]


def random_found(rng):
    """Found values that differ from run to run, so that only putting back what was found passes."""
    return {
        "guest_halt_poll_ns": str(rng.choice([100000, 150000, 200000, 250000, 400000])),
        "guest_halt_poll_grow": str(rng.randint(2, 4)),
        "guest_halt_poll_grow_start": str(rng.choice([30000, 50000, 80000])),
        "guest_halt_poll_shrink": str(rng.randint(0, 3)),
        "guest_halt_poll_allow_shrink": rng.choice(["Y", "N"]),
        "current_governor": "haltpoll",
    }


def reference_sequence(binary, t, config):
    """The changes of one undisturbed first tick for `config` (what each gap lies between)."""
    t.fs.delay_s = 0
    t.fs.reset_log()
    d = harness.Daemon(binary, t, config, name="reference")
    if not d.wait_for("listening on") or not d.wait_for("tuner: ", 10):
        raise RuntimeError("reference daemon did not change the value:\n" + d.output())
    time.sleep(0.3)  # the static policy holds after its first change
    seq = [o for o in t.fs.snapshot()]
    d.stop()
    return [label(o) for o in seq]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args()
    kills = int(os.environ.get("HALTPOLLD_FAULT_KILLS", a.kills))
    seed = a.seed if a.seed is not None else int(time.time())
    rng = random.Random(seed)

    variants = {
        "round trip": harness.kernel_config(reset_limits=True),
        "no round trip": harness.kernel_config(reset_limits=False),
    }
    summary = {"campaign": "crash at every point of a change", "seed": seed, "kills": 0, "delay_ms": DELAY_S * 1000,
               "gaps": {}, "sweep_kills": 0, "recoveries": {"restart": 0, "stop path": 0},
               "lost": 0, "half_written_state_files": 0, "stray_temporary_files": 0, "failures": []}
    started = time.monotonic()
    with harness.tree() as t:
        refs = {name: reference_sequence(a.daemon, t, cfg) for name, cfg in variants.items()}
        summary["sequences"] = refs
        for i in range(kills):
            name = rng.choice(sorted(variants))
            cfg, ref = variants[name], refs[name]
            sweeping = i % 4 == 3
            found = random_found(rng)
            t.set_found(found)
            t.fs.delay_s = DELAY_S
            t.fs.reset_log()
            d = harness.Daemon(a.daemon, t, cfg, name="killed")
            sweeper = None
            if sweeping:
                # Anywhere in a run of changes: past the first one, while the floor moves.
                k = rng.randint(len(ref) + 1, len(ref) * 4)
                if d.wait_for("listening on", 30):
                    sweeper = harness.FloorMover(d.socket)
                    sweeper.start()
            else:
                k = rng.randint(0, len(ref))
            if k == 0:
                time.sleep(rng.uniform(0, 0.3))  # before the first change (start-up, first ticks)
            elif not t.fs.wait_ops(k, 10):
                summary["failures"].append("kill %d: only %d changes within 10 s (wanted %d)" %
                                           (i, len(t.fs.snapshot()), k))
            d.kill(signal.SIGKILL)
            d.wait()
            if sweeper:
                sweeper.stop.set()
                sweeper.join()
            t.fs.wait_idle()
            ops = t.fs.snapshot()
            if sweeping:
                gap = "while sweeping: after " + (label(ops[-1]) if ops else "nothing")
                summary["sweep_kills"] += 1
            else:
                n = len(ops)
                before = label(ops[-1]) if ops else "start"
                after = ref[n] if n < len(ref) else "end of the first change"
                gap = "%s | %s" % (before, after)
            summary["gaps"][gap] = summary["gaps"].get(gap, 0) + 1
            summary["kills"] += 1

            bad = t.state_file_check()
            if bad:
                summary["half_written_state_files"] += 1
                summary["failures"].append("kill %d (%s): state file %s" % (i, gap, bad))

            # Recovery: the next start (then a clean stop), or the unit's stop path alone.
            t.fs.delay_s = 0
            how = "restart" if i % 2 == 0 else "stop path"
            summary["recoveries"][how] += 1
            if how == "restart":
                r = harness.Daemon(a.daemon, t, cfg, name="restarted")
                up = r.wait_for("listening on", 30)
                rc = r.stop()
                note = "" if up and rc == 0 else "restart: up=%s rc=%s\n%s" % (up, rc, r.output()[-2000:])
            else:
                code, out = harness.restore(a.daemon, d)
                note = "" if code == 0 else "--restore: rc=%d %s" % (code, out)
            now = t.found()
            lost = {k2: (v, now[k2]) for k2, v in found.items() if now[k2] != v}
            left = os.path.exists(t.state_file())
            if lost or left or note:
                summary["lost"] += 1 if (lost or left) else 0
                summary["failures"].append("kill %d (%s, %s): lost %s, state file left %s %s" %
                                           (i, gap, how, lost, left, note))
                t.set_found(found)  # the next kill starts clean
                if left:
                    os.unlink(t.state_file())
            if a.verbose:
                print(i, name, how, gap, "lost" if lost else "ok", file=sys.stderr)
        strays = t.stray_state_files()
        summary["stray_temporary_files"] = len(strays)
        if strays:  # each recovery removes those of the kill before it
            summary["failures"].append("temporaries of interrupted state file writes left: %s" % strays)
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["gaps_hit"] = len(summary["gaps"])
    return harness.finish(summary)  # every loss and half-written state file is also a failure


if __name__ == "__main__":
    sys.exit(main())
