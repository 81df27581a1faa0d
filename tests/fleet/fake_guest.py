#!/usr/bin/env python3
"""A fake guest's sysfs/procfs tree whose cpuidle and steal counters advance like a real load's.

The daemon under test reads the tree as it reads the real one (config key "sysfs_root"); this
script only plays the kernel's part: it creates the files the daemon reads (haltpoll module
parameters, cpuidle driver and governors, per-CPU states POLL and haltpoll, /proc/stat, the present
and online CPU lists, each CPU's pm_qos_resume_latency_us, dev/cpu_dma_latency with the kernel's
s32 and, with --qos-holder, a process in proc/ holding it open) and then,
every --step seconds until killed or --seconds have passed, adds the per-second rates of a
profile to the counters. Each file is replaced by rename, so that a reader never sees half a number.

The profiles are per-CPU rates measured on a real haltpoll guest (docs: ../shared/real-guest/README.md
section 4, cap 200000): "wasteful" is a 150 us timer (polls through nearly every idle period, wake
rate unchanged by polling), "paying" is a pipe ping-pong (short polls that catch wake-ups), "idle"
is an idle guest. "timer" is the 150 us timer again, but following the guest_halt_poll_ns that the
tree holds (a daemon in kernel mode writes it), interpolated between the caps measured on the real
guest: it stops polling at or below 50000 ns and polls through its periods from 200000 ns on.

Usage: fake_guest.py ROOT [--profile P] [--cpus N] [--governor G] [--steal-ratio R]
                          [--cpu-dma-latency US] [--qos-holder PID:COMM] [--resume-latency CPU=TEXT]
                          [--step S] [--seconds T] [--init-only]
"""
import argparse
import os
import signal
import struct
import sys
import time

# What /dev/cpu_dma_latency reads when nothing is requested (PM_QOS_CPU_LATENCY_DEFAULT_VALUE, µs).
NO_LATENCY_CONSTRAINT = 2000000000

# Per CPU per second: POLL entries, POLL time (us), halts, halt time (us).
PROFILES = {
    "wasteful": (3322, 466000, 27, 420000),
    "paying": (136600, 196000, 41, 300000),
    "idle": (8, 10, 37, 990000),
}
# The timer's rates at the measured caps (ns), same columns.
TIMER_BY_CAP = [
    (0, (0, 0, 3338, 950000)),
    (50000, (3, 5, 3335, 950000)),
    (100000, (3198, 332000, 3095, 600000)),
    (200000, (3322, 466000, 27, 480000)),
]
USER_HZ = os.sysconf("SC_CLK_TCK")


def timer_rates(cap):
    for (c0, r0), (c1, r1) in zip(TIMER_BY_CAP, TIMER_BY_CAP[1:]):
        if cap <= c1:
            f = (cap - c0) / (c1 - c0)
            return tuple(a + (b - a) * f for a, b in zip(r0, r1))
    return TIMER_BY_CAP[-1][1]


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.rename(tmp, path)


def write_bytes(root, rel, data):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--profile", choices=sorted(PROFILES) + ["timer"], default="idle")
    ap.add_argument("--cpus", type=int, default=2)
    ap.add_argument("--governor", default="haltpoll")
    ap.add_argument("--poll-ns", default="200000", help="initial guest_halt_poll_ns")
    ap.add_argument("--steal-ratio", type=float, default=0.0, help="share of all CPU time stolen")
    ap.add_argument("--step", type=float, default=0.25)
    ap.add_argument("--seconds", type=float, default=0, help="0: until SIGTERM")
    ap.add_argument("--init-only", action="store_true")
    ap.add_argument("--cpu-dma-latency", type=int, default=NO_LATENCY_CONSTRAINT,
                    help="the aggregate /dev/cpu_dma_latency reads, in us")
    ap.add_argument("--qos-holder", default="", help="PID:COMM of a process holding /dev/cpu_dma_latency open")
    ap.add_argument("--resume-latency", action="append", default=[],
                    help="CPU=TEXT: that CPU's pm_qos_resume_latency_us (n/a, 0 or us); others read 0")
    a = ap.parse_args()
    if not (0 <= a.steal_ratio < 1) or a.cpus < 1 or a.step <= 0:
        sys.exit("fake_guest.py: --steal-ratio must be in [0,1), --cpus >= 1, --step > 0")

    root = a.root
    params = {"guest_halt_poll_ns": a.poll_ns, "guest_halt_poll_grow": "2", "guest_halt_poll_grow_start": "50000",
              "guest_halt_poll_shrink": "2", "guest_halt_poll_allow_shrink": "Y"}
    for name, v in params.items():
        if not os.path.exists(os.path.join(root, "sys/module/haltpoll/parameters", name)):
            write(root, "sys/module/haltpoll/parameters/" + name, v)
    write(root, "sys/devices/system/cpu/cpuidle/current_driver", "haltpoll")
    write(root, "sys/devices/system/cpu/cpuidle/current_governor", a.governor)
    write(root, "sys/devices/system/cpu/cpuidle/available_governors", "ladder menu haltpoll ")
    cpu_list = "0" if a.cpus == 1 else "0-%d" % (a.cpus - 1)
    write(root, "sys/devices/system/cpu/online", cpu_list)
    write(root, "sys/devices/system/cpu/present", cpu_list)
    resume = dict(r.split("=", 1) for r in a.resume_latency)
    for c in range(a.cpus):
        for k, name in enumerate(("POLL", "haltpoll")):
            write(root, "sys/devices/system/cpu/cpu%d/cpuidle/state%d/name" % (c, k), name)
        write(root, "sys/devices/system/cpu/cpu%d/power/pm_qos_resume_latency_us" % c, resume.get(str(c), "0"))
    # The kernel copies its s32 out in the CPU's byte order (little-endian on x86-64 and arm64).
    write_bytes(root, "dev/cpu_dma_latency", struct.pack("=i", a.cpu_dma_latency))
    if a.qos_holder:
        pid, comm = a.qos_holder.split(":", 1)
        write(root, "proc/%s/comm" % pid, comm)
        link = os.path.join(root, "proc", pid, "fd", "3")
        os.makedirs(os.path.dirname(link), exist_ok=True)
        if not os.path.lexists(link):
            os.symlink("/dev/cpu_dma_latency", link)

    counters = [[0, 0, 0, 0] for _ in range(a.cpus)]
    stat = {"user": 0, "idle": 0, "steal": 0}
    rates = PROFILES.get(a.profile)
    cap_file = os.path.join(root, "sys/module/haltpoll/parameters/guest_halt_poll_ns")

    def publish():
        for c, (pu, pt, hu, ht) in enumerate(counters):
            base = "sys/devices/system/cpu/cpu%d/cpuidle/" % c
            write(root, base + "state0/usage", str(int(pu)))
            write(root, base + "state0/time", str(int(pt)))
            write(root, base + "state1/usage", str(int(hu)))
            write(root, base + "state1/time", str(int(ht)))
        write(root, "proc/stat", "cpu  %d 0 0 %d 0 0 0 %d 0 0\nintr 0\n" %
              (stat["user"], stat["idle"], stat["steal"]))

    publish()
    if a.init_only:
        return
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    start = last = time.monotonic()
    while not stop and (a.seconds == 0 or last - start < a.seconds):
        time.sleep(a.step)
        now = time.monotonic()
        dt = now - last
        last = now
        if a.profile == "timer":
            try:
                with open(cap_file) as f:
                    rates = timer_rates(int(f.read().strip() or 0))
            except (OSError, ValueError):
                pass  # a half-written value: keep the last rates
            if rates is None:
                rates = timer_rates(int(a.poll_ns))
        for c in counters:
            for i in range(4):
                c[i] += rates[i] * dt
        ticks = USER_HZ * a.cpus * dt
        stat["steal"] += ticks * a.steal_ratio
        idle_share = min((rates[1] + rates[3]) / 1e6, 1.0)  # POLL counts as idle time, as in the kernel
        stat["idle"] += ticks * (1 - a.steal_ratio) * idle_share
        stat["user"] += ticks * (1 - a.steal_ratio) * (1 - idle_share)
        publish()


if __name__ == "__main__":
    main()
