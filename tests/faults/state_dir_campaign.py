#!/usr/bin/python3
"""The state directory fails: full (ENOSPC), read-only (EROFS), or the state file removed while the
real haltpolld runs. No parameter may be written without a durable record of the originals:
refused at start, the daemon writes nothing and GetStatus says why; removed while running, the
record is written again before the next write, so that a kill -9 then loses nothing.

    tests/faults/state_dir_campaign.py --daemon build/dev/src/daemon/haltpolld [--rounds N]

HALTPOLLD_FAULT_ROUNDS overrides --rounds. Prints one JSON object and exits 1 when a check failed.
"""

import argparse
import errno
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from fuse_sysfs import STATE_DIR  # noqa: E402


def refused_at_start(binary, err, text):
    fails = []
    with harness.tree() as t:
        found = t.found()
        t.fs.fail(STATE_DIR + "/", err, count=10**6)
        d = harness.Daemon(binary, t, harness.kernel_config(), name="statedir")
        if not d.wait_for("listening on", 30):
            return ["did not start:\n" + d.output()[-1500:]]
        time.sleep(1.0)  # ten ticks
        status = json.dumps(harness.call(d.socket, "GetStatus"))
        if text not in status or "save originals" not in status:
            fails.append("GetStatus does not say why (%s): %s" % (text, status[:1500]))
        writes = [repr(o) for o in t.fs.snapshot() if o.path.startswith("sys/")]
        if writes:
            fails.append("wrote without a record of the originals: %s" % writes)
        harness.stop_and_check(d, t, found, fails)
    return fails


def removed_while_running(binary):
    fails = []
    with harness.tree() as t:
        found = t.found()
        d = harness.Daemon(binary, t, harness.kernel_config(), name="statedir")
        if not d.wait_for("listening on", 30) or not d.wait_for("tuner: ", 10):
            return ["no first change:\n" + d.output()[-1500:]]
        time.sleep(0.3)
        os.unlink(t.state_file())
        harness.call(d.socket, "SetConfig", {"config": {"tuner": {"min_ns": 60000}}})
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and t.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") != "60000":
            time.sleep(0.05)
        if t.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") != "60000":
            fails.append("the next value was not written")
        if not os.path.exists(t.state_file()):
            fails.append("written again without a record of the originals")
        d.kill(signal.SIGKILL)
        d.wait()
        code, out = harness.restore(binary, d)
        if code != 0:
            fails.append("--restore: rc %d %s" % (code, out[-500:]))
        if t.found() != found:
            fails.append("after kill -9 and the stop path, not put back: %s -> %s" % (found, t.found()))
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    rounds = int(os.environ.get("HALTPOLLD_FAULT_ROUNDS", a.rounds))
    checks = [("state directory full (ENOSPC)", lambda: refused_at_start(a.daemon, errno.ENOSPC, "No space left on device")),
              ("state directory read-only (EROFS)", lambda: refused_at_start(a.daemon, errno.EROFS, "Read-only file system")),
              ("state file removed while running, then kill -9", lambda: removed_while_running(a.daemon))]
    summary = {"campaign": "the state directory fails", "rounds": rounds, "scenarios": {}, "lost": 0, "failures": []}
    for _ in range(rounds):
        for name, check in checks:
            fails = check()
            s = summary["scenarios"].setdefault(name, {"runs": 0, "failed": 0})
            s["runs"] += 1
            if fails:
                s["failed"] += 1
                summary["failures"].append({name: fails})
                summary["lost"] += any("not put back" in f or "without a record" in f for f in fails)
    return harness.finish(summary)


if __name__ == "__main__":
    sys.exit(main())
