#!/usr/bin/env python3
"""kill -9 of the real haltpolld while it writes the REAL /sys/module/haltpoll/parameters and the
cpuidle governor of this guest, then recovery by the next start (then SIGTERM) or by the stop path
alone (`haltpolld --restore`); after each, every found value and the found governor must be back.

Opt-in only: runs when HALTPOLL_REAL_SYSFS=1, as root, on a guest whose cpuidle driver is haltpoll;
otherwise it prints why and exits 0 without touching anything (the FUSE campaigns cover the same
gaps on a fake tree in CI). Whatever happens, the values found at the start are written back at
the end (parameters, then the governor), and the summary says whether that guard had to act.

The tuner starts from the found guest_halt_poll_ns, raises it to the static cap and, with the floor
moved over the socket every 120 ms, lowers it again with the governor round trip, so a kill lands
in all kinds of writes; the real kernel cannot be slowed, so which gap each kill hit is not counted.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import harness

PARAMS_DIR = "/sys/module/haltpoll/parameters"
GOVERNOR = "/sys/devices/system/cpu/cpuidle/current_governor"
DRIVER = "/sys/devices/system/cpu/cpuidle/current_driver"
NAMES = ["guest_halt_poll_ns", "guest_halt_poll_grow", "guest_halt_poll_grow_start", "guest_halt_poll_shrink",
         "guest_halt_poll_allow_shrink"]


def read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def found_values():
    v = {n: read(os.path.join(PARAMS_DIR, n)) for n in NAMES}
    v["current_governor"] = read(GOVERNOR)
    return v


def write_back(values):
    """Puts `values` back where they differ; True when something had to be written."""
    acted = False
    for n in NAMES:
        if read(os.path.join(PARAMS_DIR, n)) != values[n]:
            with open(os.path.join(PARAMS_DIR, n), "w") as f:
                f.write(values[n])
            acted = True
    if read(GOVERNOR) != values["current_governor"]:
        with open(GOVERNOR, "w") as f:
            f.write(values["current_governor"])
        acted = True
    return acted


def wait_listening(proc, log_path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if "listening on" in (read(log_path) or ""):
            return True
        time.sleep(0.01)
    return False


def why_not():
    if os.environ.get("HALTPOLL_REAL_SYSFS") != "1":
        return "HALTPOLL_REAL_SYSFS=1 not set"
    if os.geteuid() != 0:
        return "not root"
    if read(DRIVER) != "haltpoll":
        return "the cpuidle driver is %s, not haltpoll" % read(DRIVER)
    if not os.path.isdir(PARAMS_DIR):
        return PARAMS_DIR + " does not exist"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()
    reason = why_not()
    if reason:
        print(json.dumps({"campaign": "real_sysfs", "ran": False, "reason": reason}))
        return 0
    rng = random.Random(args.seed)
    found = found_values()
    summary = {"campaign": "real_sysfs", "ran": True, "seed": args.seed, "found": found, "kills": 0,
               "recovered_by_restart": 0, "recovered_by_restore": 0, "killed_before_any_write": 0,
               "killed_with_cap_changed": 0, "killed_inside_governor_round_trip": 0,
               "lost": 0, "half_written_state_files": 0, "guard_acted": False, "failures": []}
    base = tempfile.mkdtemp(prefix="haltpolld-real-sysfs-")
    try:
        state_dir = os.path.join(base, "state")
        socket_path = os.path.join(base, "io.haltpolld")
        config = harness.kernel_config()
        config["state_dir"] = state_dir
        # A cap other than the found value, so the first tick writes.
        config["pool"]["guest_halt_poll_ns"] = 30000 if found["guest_halt_poll_ns"] != "30000" else 20000
        config_file = os.path.join(base, "haltpolld.json")
        with open(config_file, "w") as f:
            json.dump(config, f)
        cmd = [args.daemon, "--config", config_file, "--socket", socket_path, "--sysfs-root", "/"]
        for i in range(args.kills):
            log_path = os.path.join(base, "daemon.log")
            log = open(log_path, "w")
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            if not wait_listening(p, log_path):
                summary["failures"].append("kill %d: the daemon did not start: %s" % (i, read(log_path)))
            mover = harness.FloorMover(socket_path)
            mover.start()
            time.sleep(rng.uniform(0.0, 1.5))
            at_kill = found_values()
            p.send_signal(signal.SIGKILL)
            if at_kill == found:
                summary["killed_before_any_write"] += 1
            if at_kill["current_governor"] != found["current_governor"]:
                summary["killed_inside_governor_round_trip"] += 1
            if at_kill["guest_halt_poll_ns"] != found["guest_halt_poll_ns"]:
                summary["killed_with_cap_changed"] += 1
            p.wait()
            mover.stop.set()
            mover.join()
            log.close()
            summary["kills"] += 1
            state_file = os.path.join(state_dir, "haltpoll-params.json")
            if os.path.exists(state_file):
                try:
                    with open(state_file) as f:
                        json.load(f)
                except ValueError:
                    summary["half_written_state_files"] += 1
                    summary["failures"].append("kill %d: state file does not parse" % i)
            if i % 2 == 0:
                r = subprocess.run(cmd + ["--restore"], capture_output=True, text=True, timeout=60)
                summary["recovered_by_restore"] += 1
                if r.returncode != 0:
                    summary["failures"].append("kill %d: --restore exited %d: %s" % (i, r.returncode, r.stdout + r.stderr))
            else:
                log = open(log_path, "w")
                q = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
                if not wait_listening(q, log_path):
                    summary["failures"].append("kill %d: the restart did not start: %s" % (i, read(log_path)))
                # The found values are back before the first tick; SIGTERM puts back what it changed.
                q.send_signal(signal.SIGTERM)
                rc = q.wait(60)
                log.close()
                summary["recovered_by_restart"] += 1
                if rc != 0:
                    summary["failures"].append("kill %d: restart then SIGTERM exited %d" % (i, rc))
            now = found_values()
            if now != found:
                summary["lost"] += 1
                summary["failures"].append("kill %d: not put back: %s -> %s" % (i, found, now))
                write_back(found)  # the next round starts from the found values again
            if os.path.exists(socket_path):
                os.unlink(socket_path)
    finally:
        summary["guard_acted"] = write_back(found)
        shutil.rmtree(base, ignore_errors=True)
    summary["after"] = found_values()
    return harness.finish(summary)


if __name__ == "__main__":
    sys.exit(main())
