#!/usr/bin/python3
"""Faults under load: the hostile clients of test_control_server's "128 hostile Watch clients"
(4 uids x 32 connections, each a Watch it never reads with 60 KiB calls pushed behind it; the
per-uid cap and the administrators' reserve hold them to 120) stay connected to the real haltpolld
while it tunes a four-CPU fake guest (guest_load.py, its floor moved over the socket) and the
faults of the other campaigns land on it, in turn: CPUs going offline and coming back, steal
jumping and going backwards, a parameter write refused (EBUSY), the state file removed, the daemon
stopped (SIGSTOP, 3 s) and, between two lives, kill -9 in the middle of a change followed by a new
start (the hostile clients then connect again). Meanwhile root, in the reserved slots, calls
GetStatus, GetStats, GetDecisions and GetMetrics and reads a Watch stream of three events, over and
over. Every one of those calls must be answered (outside the kill), the daemon's VmRSS and VmHWM
must stay under the unit's MemoryMax (128 MiB), and SIGTERM must put every found value back.

    tests/faults/load_campaign.py --daemon build/dev/src/daemon/haltpolld [--seconds 30] [--lives 2]

Needs root (the hostile clients run as uids 60001-60004). Prints one JSON object and exits 1 when a
check failed.
"""

import argparse
import errno
import json
import os
import random
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from fuse_sysfs import PARAMS_DIR  # noqa: E402
from guest_load import GuestLoad  # noqa: E402

CPUS = 4
MEMORY_MAX_KIB = 128 * 1024  # the unit's MemoryMax=128M
UIDS = (60001, 60002, 60003, 60004)


def hostile(path, uid, n):
    """A child that becomes `uid` and holds `n` never-reading Watch connections with 60 KiB calls
    queued behind each; it writes how many it got to a pipe and stays until killed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(w)
        got = os.read(r, 8)
        os.close(r)
        return pid, int(got or b"0")
    try:
        os.close(r)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        watch = json.dumps({"method": "io.haltpolld.Watch", "more": True,
                            "parameters": {"interval_ms": 100, "histogram": True}}).encode() + b"\0"
        big = json.dumps({"method": "io.haltpolld.GetStatus",
                          "parameters": {"junk": "x" * 60000}}).encode() + b"\0"
        socks = []
        for _ in range(n):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(path)
            except OSError:
                s.close()
                continue
            s.setblocking(False)
            try:
                s.send(watch)
                for _ in range(64):
                    if s.send(big) <= 0:
                        break
            except OSError:
                pass
            socks.append(s)
        os.write(w, str(len(socks)).encode())
        while True:
            signal.pause()
    finally:
        os._exit(0)


def memory_kib(pid):
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM"):
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


class Legit(threading.Thread):
    """Root's calls, in the administrators' reserved slots: a connection that calls the four read
    methods and then reads a Watch stream of three events (100 ms apart), again and again. `pause` (held
    by the fault thread around a kill and the restart) keeps them off a daemon that is gone."""

    def __init__(self):
        super().__init__(daemon=True)
        self.socket_path = None
        self.pause = threading.Lock()
        self.stop_ev = threading.Event()
        self.calls = 0
        self.streams = 0
        self.unanswered = []

    def watch(self, c):
        c.send("Watch", {"interval_ms": 100, "count": 3}, more=True)
        for _ in range(3):
            reply = c.recv()
            if "error" in reply:
                raise ValueError(reply["error"])
            if not reply.get("continues"):
                break

    def run(self):
        while not self.stop_ev.is_set():
            with self.pause:
                try:
                    c = harness.Client(self.socket_path, timeout=30)
                    try:
                        for method in ("GetStatus", "GetStats", "GetDecisions", "GetMetrics"):
                            r = c.call(method, {"limit": 16} if method == "GetDecisions" else None)
                            if "error" in r:
                                self.unanswered.append("%s: %s" % (method, r["error"]))
                            self.calls += 1
                        self.watch(c)
                        self.streams += 1
                    finally:
                        c.close()
                except (OSError, ValueError, ConnectionError) as e:
                    self.unanswered.append("%r" % e)
            self.stop_ev.wait(0.1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--seconds", type=float, default=30, help="of faults per life of the daemon")
    ap.add_argument("--lives", type=int, default=2, help="daemons, each after a kill -9 of the last")
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root")
        return 1
    rng = random.Random(a.seed)
    summary = {"campaign": "faults under 120 hostile Watch clients", "lives": 0, "hostile_connections": 0, "connections_held": [],
               "faults": {}, "legit_calls": 0, "watch_streams": 0, "unanswered": 0, "peak_vmrss_kib": 0,
               "peak_vmhwm_kib": 0, "memory_max_kib": MEMORY_MAX_KIB, "lost": 0, "failures": []}
    fails = summary["failures"]
    faults = summary["faults"]

    def count(name):
        faults[name] = faults.get(name, 0) + 1

    children = []
    with harness.tree(cpus=CPUS) as t:
        os.chmod(t.base, 0o755)  # the hostile uids reach the socket in t.run
        load = GuestLoad(t.back, CPUS, poll_share=0.30).start()
        found = t.found()
        cfg = harness.kernel_config(policy="budget", max_poll_cpu_percent=10)
        cfg["socket"] = {"mode": "0666", "idle_timeout_ms": 600000}
        legit = Legit()
        d = None
        try:
            for life in range(a.lives):
                d = harness.Daemon(a.daemon, t, cfg, name="load%d" % life)
                if not d.wait_for("listening on", 30):
                    fails.append("life %d did not start:\n%s" % (life, d.output()[-1500:]))
                    break
                summary["lives"] += 1
                for uid in UIDS:
                    pid, got = hostile(d.socket, uid, 32)
                    children.append(pid)
                    summary["hostile_connections"] += got
                # What the daemon holds of them (the connects all succeed; the daemon refuses past
                # its limits): the per-uid cap and the reserve leave 120, root's own come on top.
                held = harness.call(d.socket, "GetStatus").get("parameters", {}).get("control", {}).get("connections", 0)
                summary["connections_held"].append(held)
                if held < 100:
                    fails.append("life %d: the daemon holds only %d connections of the hostile clients" % (life, held))
                legit.socket_path = d.socket
                if life == 0:
                    legit.start()
                else:
                    legit.pause.release()
                mover = harness.FloorMover(d.socket, period=0.7)
                mover.start()
                end = time.monotonic() + a.seconds
                k = 0
                while time.monotonic() < end:
                    time.sleep(rng.uniform(0.3, 0.8))
                    mem = memory_kib(d.proc.pid)
                    summary["peak_vmrss_kib"] = max(summary["peak_vmrss_kib"], mem.get("VmRSS", 0))
                    summary["peak_vmhwm_kib"] = max(summary["peak_vmhwm_kib"], mem.get("VmHWM", 0))
                    k += 1
                    kind = k % 6
                    if kind in (0, 3):
                        cpu = rng.choice([1, 2, 3])
                        load.set_online(cpu, cpu not in load.online)
                        count("CPU offline/online")
                    elif kind == 1:
                        (load.steal_jump(30) if rng.random() < 0.5 else load.steal_back(50))
                        count("steal jump/backwards")
                    elif kind == 4:
                        t.fs.fail(PARAMS_DIR + "/guest_halt_poll_ns", errno.EBUSY, count=1)
                        count("write refused (EBUSY)")
                    elif kind == 2:
                        try:
                            os.unlink(t.state_file())
                            count("state file removed")
                        except FileNotFoundError:
                            pass  # nothing changed at the moment (observe after a refusal)
                    elif kind == 5 and k % 12 == 5:
                        d.kill(signal.SIGSTOP)
                        time.sleep(3)
                        d.kill(signal.SIGCONT)
                        count("SIGSTOP 3 s")
                mover.stop.set()
                mover.join(5)
                mem = memory_kib(d.proc.pid)
                summary["peak_vmrss_kib"] = max(summary["peak_vmrss_kib"], mem.get("VmRSS", 0))
                summary["peak_vmhwm_kib"] = max(summary["peak_vmhwm_kib"], mem.get("VmHWM", 0))
                t.fs.clear_faults()
                if life + 1 < a.lives:
                    # kill -9 in the middle of a change: once the next write to the tree starts.
                    legit.pause.acquire()
                    n = len(t.fs.snapshot())
                    harness.call(d.socket, "SetConfig", {"config": {"tuner": {"min_ns": 90000}}})
                    t.fs.wait_ops(n + 1, 5)
                    d.kill(signal.SIGKILL)
                    d.wait()
                    t.fs.wait_idle()
                    count("kill -9 mid-change, then a new start")
                    for pid in children:
                        os.kill(pid, signal.SIGKILL)
                        os.waitpid(pid, 0)
                    children = []
            legit.stop_ev.set()
            legit.join(60)
            summary["legit_calls"] = legit.calls
            summary["watch_streams"] = legit.streams
            summary["unanswered"] = len(legit.unanswered)
            fails += ["unanswered: " + u for u in legit.unanswered[:10]]
            if summary["peak_vmrss_kib"] == 0:
                fails.append("the daemon's memory was never read")
            if summary["peak_vmhwm_kib"] >= MEMORY_MAX_KIB:
                fails.append("VmHWM %d KiB reached MemoryMax" % summary["peak_vmhwm_kib"])
            if d is not None:
                harness.stop_and_check(d, t, found, fails)
                summary["lost"] = int(any("not put back" in f for f in fails))
        finally:
            load.stop()
            for pid in children:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    return harness.finish(summary)


if __name__ == "__main__":
    sys.exit(main())
