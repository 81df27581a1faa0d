#!/usr/bin/python3
"""Upgrades: the state file's format carries a version. A file as the previous release (format 1)
wrote it is read and its originals put back; one from a newer format is refused, left byte for
byte, and no parameter is written over the originals it holds, neither by the daemon (which keeps
serving and says why in GetStatus) nor by the stop path (`haltpolld --restore`).

    tests/faults/state_format_campaign.py --daemon build/dev/src/daemon/haltpolld

Prints one JSON object and exits 1 when a check failed. Needs root and /dev/fuse.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# The originals a crashed run saved; the tree holds that run's values.
ORIGINALS = {"guest_halt_poll_ns": "250000", "guest_halt_poll_grow": "3", "guest_halt_poll_grow_start": "40000",
             "guest_halt_poll_shrink": "1", "guest_halt_poll_allow_shrink": "N"}
CHANGED = {"guest_halt_poll_ns": "20000", "guest_halt_poll_grow": "3", "guest_halt_poll_grow_start": "10000",
           "guest_halt_poll_shrink": "1", "guest_halt_poll_allow_shrink": "N", "current_governor": "menu"}


def state_file(version, root):
    # Format 1 exactly as 0.1.0 writes it (SysfsHaltpollParams::save_originals, json::dump(2)).
    j = {"cpuidle_governor": "haltpoll", "params": ORIGINALS, "pid": 4242, "sysfs_root": root, "version": version}
    if version > 1:
        j["written_by"] = "a later haltpolld"
    return json.dumps(j, indent=2) + "\n"


def write_state(t, text):
    path = t.state_file()
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)


def previous_release(binary):
    fails = []
    with harness.tree() as t:
        t.set_found(CHANGED)
        write_state(t, state_file(1, t.mnt + "/"))
        d = harness.Daemon(binary, t, harness.kernel_config(), name="upgraded")
        if not d.wait_for("listening on", 30):
            return ["did not start:\n" + d.output()[-1500:]]
        if "restored the haltpoll parameters saved by pid 4242" not in d.output():
            fails.append("format 1 not restored at start:\n" + d.output()[-1500:])
        d.stop()
        now = t.found()
        want = dict(ORIGINALS, current_governor="haltpoll")
        if now != want:
            fails.append("after the run: %s, want %s" % (now, want))
        if os.path.exists(t.state_file()):
            fails.append("format 1 state file left after the restore")
    return fails


def newer_format(binary):
    fails = []
    with harness.tree() as t:
        t.set_found(dict(CHANGED, current_governor="haltpoll"))
        text = state_file(2, t.mnt + "/")
        write_state(t, text)
        before = t.found()
        t.fs.reset_log()
        d = harness.Daemon(binary, t, harness.kernel_config(), name="newer")
        if not d.wait_for("listening on", 30):
            return ["did not start:\n" + d.output()[-1500:]]
        time.sleep(1.0)  # ten ticks
        status = json.dumps(harness.call(d.socket, "GetStatus"))
        if "version" not in status or "haltpoll-params.json" not in status:
            fails.append("GetStatus does not say the state file's version was refused: " + status[:1500])
        if "version" not in d.output():
            fails.append("the log does not say the state file's version was refused")
        d.stop()
        code, out = harness.restore(binary, d)
        if code != 1 or "version" not in out:
            fails.append("--restore: rc %d (want 1, the reason): %s" % (code, out[-500:]))
        writes = [repr(o) for o in t.fs.snapshot() if o.path.startswith("sys/") or o.path.startswith("state/")]
        if writes:
            fails.append("wrote although the state file was refused: %s" % writes)
        if t.found() != before:
            fails.append("values changed: %s -> %s" % (before, t.found()))
        try:
            with open(t.state_file()) as f:
                if f.read() != text:
                    fails.append("the refused state file was changed")
        except FileNotFoundError:
            fails.append("the refused state file was removed: its originals are lost")
    return fails


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    a = ap.parse_args()
    summary = {"campaign": "state file formats", "checks": {}, "lost": 0, "failures": []}
    for name, check in (("format 1 (previous release) read and restored", previous_release),
                        ("newer format refused, originals kept", newer_format)):
        fails = check(a.daemon)
        summary["checks"][name] = "ok" if not fails else "failed"
        if fails:
            summary["failures"].append({name: fails})
            summary["lost"] += any("lost" in f or "changed" in f for f in fails)
    return harness.finish(summary)


if __name__ == "__main__":
    sys.exit(main())
