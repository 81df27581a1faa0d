#!/usr/bin/python3
"""The kernel refuses: the FUSE fake sysfs fails chosen writes of the real haltpolld (EINVAL, EBUSY,
EACCES, a parameter that turned read-only or into a directory, the governor write back to
haltpoll of the limit reset, i.e. half way through the round trip). Each time the daemon must name
the write that failed (log and GetStatus), stop writing, put back what it had changed, keep serving
the socket, and at SIGTERM leave every found value and the found governor.

    tests/faults/refusal_campaign.py --daemon build/dev/src/daemon/haltpolld [--rounds N]

HALTPOLLD_FAULT_ROUNDS overrides --rounds (each round runs every scenario once). Prints one JSON
object (the summary) and exits 1 when a check failed. Needs root and /dev/fuse.
"""

import argparse
import errno
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from fuse_sysfs import GOVERNOR, PARAMS_DIR  # noqa: E402

NS = PARAMS_DIR + "/guest_halt_poll_ns"
GROW_START = PARAMS_DIR + "/guest_halt_poll_grow_start"


def refuse(path, err, value=None, count=1000):
    return lambda t: t.fs.fail(path, err, count=count, value=value)


def read_only(path):
    def f(t):
        t.fs.read_only.add(path)
    return f


def directory(path):
    def f(t):
        full = os.path.join(t.back, path)
        os.unlink(full)
        os.mkdir(full)
    return f


def vanished(t):
    """The whole parameter directory goes (the module unloaded); `put_back` brings it back."""
    os.rename(os.path.join(t.back, PARAMS_DIR), os.path.join(t.back, PARAMS_DIR + ".gone"))


def put_back(t):
    os.rename(os.path.join(t.back, PARAMS_DIR + ".gone"), os.path.join(t.back, PARAMS_DIR))


def S(name, inject, path, errtext, broken=False, after_first_change=False, keeps_tuning=False, repair=None,
      logged=True):
    """A scenario: `inject` makes the write of `path` fail with `errtext`; `broken`: that file (or
    the whole directory) stays unwritable, so its value cannot come back and the state file must
    stay; `after_first_change`: injected once the first change went through, and a new value is
    asked for over the socket; `keeps_tuning`: nothing was changed by the refused write and the
    daemon documents that it goes on tuning (a limit reset refused at its first write); `logged`:
    the log names the failure too (not only GetStatus)."""
    return dict(name=name, inject=inject, path=path, errtext=errtext, broken=broken,
                after_first_change=after_first_change, keeps_tuning=keeps_tuning, repair=repair, logged=logged)


SCENARIOS = [
    S("guest_halt_poll_ns EINVAL", refuse(NS, errno.EINVAL), NS, "Invalid argument"),
    S("guest_halt_poll_ns EBUSY", refuse(NS, errno.EBUSY), NS, "Device or resource busy"),
    S("guest_halt_poll_ns read-only (EACCES)", read_only(NS), NS, "Permission denied"),
    S("guest_halt_poll_ns turned into a directory after a change", directory(NS), NS, "Is a directory", broken=True,
      after_first_change=True),
    # Nothing to refuse: the daemon sees the directory gone when asked for a new value, writes
    # nothing more, and puts the originals back at the stop path once the module is back.
    S("parameter directory vanished after a change (module unloaded)", vanished, PARAMS_DIR, "does not exist",
      broken=True, after_first_change=True, repair=put_back, logged=False),
    # After the cap and the round trip were written: what was changed must come back at once.
    S("guest_halt_poll_grow_start EINVAL after the cap was written", refuse(GROW_START, errno.EINVAL, value="10000"),
      GROW_START, "Invalid argument"),
    S("guest_halt_poll_grow_start EACCES after the cap was written", read_only(GROW_START), GROW_START,
      "Permission denied"),
    # haltpoll -> menu succeeds, menu -> haltpoll is refused (twice: the daemon retries once).
    S("governor write back to haltpoll EBUSY (half way through the round trip)",
      refuse(GOVERNOR, errno.EBUSY, value="haltpoll", count=2), GOVERNOR, "Device or resource busy"),
    S("governor write to menu EINVAL (round trip refused at its first write)",
      refuse(GOVERNOR, errno.EINVAL, value="menu"), GOVERNOR, "Invalid argument", keeps_tuning=True),
]


def run_scenario(binary, t, sc):
    fails = []
    found = t.found()
    path, errtext, broken = sc["path"], sc["errtext"], sc["broken"]
    base = os.path.basename(path)
    t.fs.clear_faults()
    t.fs.delay_s = 0
    if not sc["after_first_change"]:
        sc["inject"](t)
    t.fs.reset_log()
    d = harness.Daemon(binary, t, harness.kernel_config(), name="refused")
    try:
        if not d.wait_for("listening on", 30):
            return ["did not start:\n" + d.output()[-2000:]]
        if sc["after_first_change"]:
            if not d.wait_for("tuner: ", 10) or not t.fs.wait_ops(5, 10):
                return ["no first change:\n" + d.output()[-2000:]]
            time.sleep(0.3)
            sc["inject"](t)
            injected_at = time.monotonic()
            harness.call(d.socket, "SetConfig", {"config": {"tuner": {"min_ns": 60000}}})
        # The refusal: a write the FUSE tree refused, or (for a file that is gone or a directory)
        # the daemon's own word.
        def said():
            if "degraded to observe" in d.output():
                return True
            text = json.dumps(harness.call(d.socket, "GetStatus"))
            return base in text and errtext in text

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not t.fs.refused and not said():
            time.sleep(0.05)
        if t.fs.refused:
            refused_at = t.fs.refused[0][3]
        elif sc["after_first_change"] and said():
            refused_at = injected_at
        else:
            return ["the fault was never hit (no write to %s):\n%s" % (path, d.output()[-1500:])]
        time.sleep(1.0)  # ten more ticks
        # The log and GetStatus name the file and the errno; the socket still answers.
        out = d.output()
        if sc["logged"] and not [line for line in out.splitlines() if base in line and errtext in line]:
            fails.append("the log does not name %s with '%s':\n%s" % (base, errtext, out[-1500:]))
        try:
            text = json.dumps(harness.call(d.socket, "GetStatus"))
            if base not in text or errtext not in text:
                fails.append("GetStatus does not name %s with '%s': %s" % (base, errtext, text[:1500]))
        except (OSError, ValueError) as e:
            fails.append("GetStatus failed: %s" % e)
        ops = t.fs.snapshot()
        now = t.found()
        if sc["keeps_tuning"]:
            # Nothing changed by the refused write; the cap stays in force, the governor untouched.
            if now["current_governor"] != found["current_governor"]:
                fails.append("governor changed: %s" % now["current_governor"])
        else:
            # Stopped writing: nothing after the refusal but found values going back.
            later = [repr(o) for o in ops if o.t > refused_at and o.path.startswith("sys/") and
                     o.value != found.get("current_governor" if o.path == GOVERNOR else o.path[len(PARAMS_DIR) + 1:])]
            if later:
                fails.append("wrote after the refusal: %s" % later)
            # Restored at once, not at the stop: what can be written is back, the rest is in the state file.
            changed = {k: (v, now[k]) for k, v in found.items() if now[k] != v and not broken}
            if not broken and changed:
                fails.append("while running after the refusal, not put back: %s; writes: %s" %
                             (changed, [repr(o) for o in ops]))
            if broken and now["current_governor"] != found["current_governor"]:
                fails.append("governor not put back: %s" % now["current_governor"])
            if broken and not os.path.exists(t.state_file()):
                fails.append("the state file is gone although %s could not be put back" % base)
        n_before = len(t.fs.snapshot())
        time.sleep(0.6)
        extra = [repr(o) for o in t.fs.snapshot()[n_before:] if o.path.startswith("sys/")]
        if extra and not sc["keeps_tuning"]:
            fails.append("still writing after the refusal: %s" % extra)
        try:
            harness.call(d.socket, "GetConfig")
        except (OSError, ValueError) as e:
            fails.append("socket no longer served: %s" % e)
    finally:
        rc = d.stop()
    if rc != 0:
        fails.append("SIGTERM exit code %s" % rc)
    t.fs.clear_faults()
    if sc["repair"]:
        # The file is back (the module reloaded): the stop path alone puts the originals back.
        sc["repair"](t)
        code, out = harness.restore(binary, d)
        if code != 0:
            fails.append("--restore after the repair: rc %d %s" % (code, out[-500:]))
        broken = False
    now = t.found()
    lost = {k: (v, now[k]) for k, v in found.items() if now[k] != v and not (broken and k == base)}
    if os.path.exists(t.state_file()) and not broken:
        fails.append("state file left after the stop")
    if lost:
        fails.append("after SIGTERM, not put back: %s" % lost)
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--only", default=None, help="run the scenarios whose name contains this")
    a = ap.parse_args()
    rounds = int(os.environ.get("HALTPOLLD_FAULT_ROUNDS", a.rounds))
    summary = {"campaign": "the kernel refuses", "rounds": rounds, "scenarios": {}, "lost": 0, "failures": []}
    started = time.monotonic()
    for _ in range(rounds):
        for sc in SCENARIOS:
            name = sc["name"]
            if a.only and a.only not in name:
                continue
            with harness.tree() as t:
                fails = run_scenario(a.daemon, t, sc)
            s = summary["scenarios"].setdefault(name, {"runs": 0, "failed": 0})
            s["runs"] += 1
            if fails:
                s["failed"] += 1
                summary["failures"].append({name: fails})
                if any("not put back" in f for f in fails):
                    summary["lost"] += 1
    summary["seconds"] = round(time.monotonic() - started, 1)
    return harness.finish(summary)


if __name__ == "__main__":
    sys.exit(main())
