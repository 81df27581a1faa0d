#!/usr/bin/env python3
"""CPUs of the REAL guest go offline and come back while the real haltpolld senses them: the daemon
in observe mode on this guest's /sys and /proc (eBPF programs attached, 250 ms ticks), CPU 1 taken
offline and put back `--flips` times through /sys/devices/system/cpu/cpu1/online. After each flip
the daemon's GetStats, GetMetrics and GetStatus must hold no negative value and no share above
100 %, the per-CPU kernel-signal table only online CPUs (exactly the online ones once they stay
put), and the pool must report its CPU-1 worker as no longer pinned while CPU 1 is offline (the
kernel moved it); observe mode writes no parameter.

Opt-in only: runs when HALTPOLL_REAL_SYSFS=1, as root, on a guest whose CPU 1 can go offline;
otherwise it prints why and exits 0 without touching anything (faults_cpu_hotplug covers the fake
tree in CI). CPU 1 is put back online at the end whatever happens.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from hotplug_campaign import bad_metrics, bad_numbers, metric_cpus, stats_cpus  # noqa: E402
from real_sysfs_campaign import found_values, read  # noqa: E402

ONLINE = "/sys/devices/system/cpu/cpu1/online"


def set_online(on):
    with open(ONLINE, "w") as f:
        f.write("1" if on else "0")


def why_not():
    if os.environ.get("HALTPOLL_REAL_SYSFS") != "1":
        return "HALTPOLL_REAL_SYSFS=1 not set"
    if os.geteuid() != 0:
        return "not root"
    if read(ONLINE) is None:
        return ONLINE + " does not exist (CPU 1 cannot go offline here)"
    if read("/sys/devices/system/cpu/online") != "0-1":
        return "this campaign expects a guest of exactly CPUs 0-1 online, found %s" % read(
            "/sys/devices/system/cpu/online")
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--flips", type=int, default=4)
    args = ap.parse_args()
    reason = why_not()
    if reason:
        print(json.dumps({"campaign": "real_hotplug", "ran": False, "reason": reason}))
        return 0
    found = found_values()
    summary = {"campaign": "real_hotplug", "ran": True, "flips": 0, "reads": 0, "lost": 0, "failures": []}
    fails = summary["failures"]
    base = tempfile.mkdtemp(prefix="haltpolld-real-hotplug-")
    p = None
    try:
        socket_path = os.path.join(base, "io.haltpolld")
        config = {"mode": "observe", "state_dir": os.path.join(base, "state"),
                  "tuner": {"interval_ms": 250, "sweep_interval_ms": 250, "steady_trace_every": 1},
                  "socket": {"mode": "0600"}}
        config_file = os.path.join(base, "haltpolld.json")
        with open(config_file, "w") as f:
            json.dump(config, f)
        log_path = os.path.join(base, "daemon.log")
        log = open(log_path, "w")
        p = subprocess.Popen([args.daemon, "--config", config_file, "--socket", socket_path, "--sysfs-root", "/"],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "listening on" not in (read(log_path) or "") and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.02)
        if "listening on" not in (read(log_path) or ""):
            fails.append("did not start: " + (read(log_path) or "")[-1500:])
            return harness.finish(summary)

        def look(online):
            c = harness.Client(socket_path)
            try:
                stats = c.call("GetStats").get("parameters", {})
                metrics = c.call("GetMetrics").get("parameters", {}).get("text", "")
                status = c.call("GetStatus").get("parameters", {})
            finally:
                c.close()
            summary["reads"] += 1
            fails.extend(bad_numbers(stats, cpus=2)[:5])
            fails.extend(bad_metrics(metrics)[:5])
            for cpu in stats_cpus(stats):
                if cpu not in online:
                    fails.append("GetStats per-CPU table holds offline CPU %d" % cpu)
            return stats, metrics, status

        for i in range(args.flips):
            set_online(False)
            summary["flips"] += 1
            time.sleep(1.5)
            _, _, status = look([0])
            pins = {f["cpu"]: f["reason"] for f in ((status.get("pool") or {}).get("pin_failures") or [])}
            if 1 not in pins:
                fails.append("flip %d: CPU 1 offline, the pool does not report its worker unpinned: %s" % (i, pins))
            set_online(True)
            summary["flips"] += 1
            time.sleep(1.5)
            stats, metrics, _ = look([0, 1])
            if stats_cpus(stats) != [0, 1]:
                fails.append("flip %d: CPU 1 back, GetStats per-CPU table %s" % (i, stats_cpus(stats)))
            if metric_cpus(metrics) != [0, 1]:
                fails.append("flip %d: CPU 1 back, GetMetrics cpuidle series for %s" % (i, metric_cpus(metrics)))
        p.send_signal(signal.SIGTERM)
        if p.wait(60) != 0:
            fails.append("SIGTERM: exit code not 0")
        log.close()
    finally:
        if read(ONLINE) != "1":
            set_online(True)
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        if found_values() != found:
            summary["lost"] += 1
            fails.append("observe mode changed the parameters: %s -> %s" % (found, found_values()))
        shutil.rmtree(base, ignore_errors=True)
    return harness.finish(summary)


if __name__ == "__main__":
    sys.exit(main())
