#!/usr/bin/python3
"""CPUs come and go: the real haltpolld tunes (kernel mode, budget policy, 100 ms ticks) a fake
guest of four CPUs whose counters move (guest_load.py) while CPUs 1-3 go offline and come back at
random: the online list changes, the cpuidle directory vanishes and comes back counting from zero,
the /proc/stat line vanishes and comes back. Throughout, GetStats, GetMetrics and GetDecisions are
read: no negative value and no share above 100 %; the per-CPU tables (the kernel signals of
GetStats, the cpuidle series of GetMetrics) hold only CPUs that are online, and once the CPUs stay
put they hold exactly the online ones; no decision changes the value from a tick during which a CPU
left or joined (each flip is followed by a tick that held and named it); and SIGTERM puts every
found value back.

    tests/faults/hotplug_campaign.py --daemon build/dev/src/daemon/haltpolld [--seconds 20] [--rounds N]

HALTPOLLD_FAULT_ROUNDS overrides --rounds. The machine's own CPUs are never touched: the daemon's
worker pool runs on them, and what it does when a real CPU goes away is in docs/operations.md.
Prints one JSON object and exits 1 when a check failed.
"""

import argparse
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from guest_load import GuestLoad  # noqa: E402

CPUS = 4


def bad_numbers(j, path="", cpus=CPUS):
    """Negative numbers, NaN, and shares ("percent" in the key) above 100 anywhere in `j` (above
    100 per CPU under an `all` key: those are sums over the CPUs, in % of one CPU)."""
    out = []
    if isinstance(j, dict):
        for k, v in j.items():
            out += bad_numbers(v, path + "/" + str(k), cpus)
    elif isinstance(j, list):
        for i, v in enumerate(j):
            out += bad_numbers(v, "%s[%d]" % (path, i), cpus)
    elif isinstance(j, (int, float)) and not isinstance(j, bool):
        if j != j or j < 0:
            out.append("%s = %r" % (path, j))
        elif "percent" in path.rsplit("/", 1)[-1] and j > (100.0 * cpus if "/all/" in path else 100.0) + 1e-6:
            out.append("%s = %r" % (path, j))
    return out


def stats_cpus(stats):
    """The CPUs of the kernel signals' per-CPU table in GetStats."""
    k = stats.get("kernel_signals") or {}
    return sorted({c["cpu"] for c in k.get("cpus", []) if "cpu" in c})


def metric_cpus(text, name="haltpoll_kernel_poll_entries_total"):
    cpus = set()
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = line[len(name) + 1:line.index("}")]
            for kv in labels.split(","):
                k, _, v = kv.partition("=")
                if k == "cpu":
                    cpus.add(int(v.strip('"')))
    return sorted(cpus)


def bad_metrics(text):
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        value = line.rsplit(" ", 1)[-1]
        try:
            v = float(value)
        except ValueError:
            out.append("unparsable: " + line)
            continue
        if v != v or (v < 0 and "+Inf" not in line):
            out.append(line)
    return out


class Reader(threading.Thread):
    """Reads GetStats, GetMetrics and GetDecisions every 150 ms and checks each answer."""

    def __init__(self, socket_path, load):
        super().__init__(daemon=True)
        self.socket_path = socket_path
        self.load = load
        self.stop_ev = threading.Event()
        self.decisions = {}
        self.fails = []
        self.reads = 0
        self.failed_calls = 0

    def check(self):
        # The tables describe the last tick, sampled up to a tick (a slow one on a loaded machine)
        # before the call: a CPU that went offline since may still be there.
        since_ms = time.time() * 1000 - 2000
        with self.load.lock:
            online_before = set(self.load.online) | {f[2] for f in self.load.flips if f[1] >= since_ms}
        c = harness.Client(self.socket_path, timeout=10)
        try:
            stats = c.call("GetStats").get("parameters", {})
            metrics = c.call("GetMetrics").get("parameters", {}).get("text", "")
            log = c.call("GetDecisions", {"limit": 256}).get("parameters", {}).get("decisions", [])
        finally:
            c.close()
        with self.load.lock:
            online_after = set(self.load.online)
        self.reads += 1
        for b in bad_numbers(stats)[:3]:
            self.fails.append("GetStats: " + b)
        for b in bad_metrics(metrics)[:3]:
            self.fails.append("GetMetrics: " + b)
        for r in log:
            self.decisions[r["tick"]] = r
        # A CPU in a table was online when the answer was read (in the set before or after it).
        seen = set(stats_cpus(stats)) | set(metric_cpus(metrics))
        stray = seen - (online_before | online_after)
        if stray:
            self.fails.append("per-CPU tables hold offline CPUs %s (online %s)" % (sorted(stray), sorted(online_after)))

    def run(self):
        while not self.stop_ev.wait(0.15):
            try:
                self.check()
            except (OSError, ValueError, ConnectionError) as e:
                self.failed_calls += 1
                self.fails.append("a call failed: %r" % e)


def held_for(f, r):
    """Whether decision `r` is a hold that names fault `f` of guest_load.py."""
    why = r["reason"]
    if r["guest_halt_poll_ns"] != r["previous_ns"] or "nothing decided from its rates" not in why:
        return False
    if f[3] in ("offline", "online"):
        return "CPU %d " % f[2] in why or "CPU %d's" % f[2] in why
    if f[3] == "poll burst":
        return "CPU %d polled" % f[2] in why
    return "/proc/stat counted" in why or "went backwards" in why


def check_decisions(decisions, flips, counts, fails, cpus=CPUS):
    """The decision log's checks: no bad number; after each fault of guest_load.py (a flip), within
    3 s, a tick that held and named it: the tick that saw the fault decided nothing from it (were
    it missed, no later tick would name it: only the fault's own tick sees the change); and some
    changes (else nothing was tested). Counts `faults_held`, `changes` and `decisions`."""
    for r in decisions:
        for b in bad_numbers(r, cpus=cpus):
            fails.append("decision %d: %s" % (r["tick"], b))
    last = decisions[-1]["time_ms"] if decisions else 0
    times = [r["time_ms"] for r in decisions]

    def recorded_between(a, b):
        return any(a <= x < b for x in times)

    counts["faults_held"] = 0
    for f in flips:
        if f[1] + 1000 > last:
            continue  # the log ends before the fault's tick could be read
        if f[3] in ("offline", "online"):
            # A CPU that went and came back (or came and went) between two ticks left nothing to see
            # but, coming back, counters that restarted: no tick recorded between the two flips.
            same = [g for g in flips if g[2] == f[2] and g[3] in ("offline", "online")]
            k = same.index(f)
            if k + 1 < len(same) and not recorded_between(f[1], same[k + 1][0]):
                continue
            if k > 0 and not recorded_between(same[k - 1][1], f[0]) and f[3] == "offline":
                continue
        if any(f[0] <= r["time_ms"] <= f[1] + 3000 and held_for(f, r) for r in decisions):
            counts["faults_held"] += 1
        else:
            fails.append("no tick held for the fault (%s, CPU %d) at %d" % (f[3], f[2], f[1]))
    counts["changes"] = sum(r["guest_halt_poll_ns"] != r["previous_ns"] for r in decisions)
    counts["decisions"] = len(decisions)
    if counts["changes"] == 0:
        fails.append("the tuner never changed the value: the campaign tested nothing")


def one_round(binary, seconds, rng):
    fails = []
    counts = {"flips": 0, "faults_held": 0, "changes": 0, "decisions": 0, "reads": 0}
    with harness.tree(cpus=CPUS) as t:
        load = GuestLoad(t.back, CPUS, poll_share=0.30)
        load.start()
        found = t.found()
        d = harness.Daemon(binary, t, harness.kernel_config(policy="budget", max_poll_cpu_percent=10),
                           name="hotplug")
        if not d.wait_for("listening on", 30):
            load.stop()
            return ["did not start:\n" + d.output()[-1500:]], counts
        reader = Reader(d.socket, load)
        reader.start()
        # The CPUs poll 30 %, over the 10 % budget: each time the floor drops the tuner steps down,
        # rung by rung, and each time it rises the value follows.
        mover = harness.FloorMover(d.socket, period=0.7)
        mover.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(rng.uniform(0.25, 0.9))
            cpu = rng.choice([1, 2, 3])
            load.set_online(cpu, cpu not in load.online)
        mover.stop.set()
        mover.join(5)
        # Every CPU back; the tables must then follow exactly.
        for cpu in range(CPUS):
            if cpu not in load.online:
                load.set_online(cpu, True)
        time.sleep(1.5)
        reader.stop_ev.set()
        reader.join(15)
        reader.check()
        c = harness.Client(d.socket)
        stats = c.call("GetStats").get("parameters", {})
        metrics = c.call("GetMetrics").get("parameters", {}).get("text", "")
        status = c.call("GetStatus").get("parameters", {})
        c.close()
        want = list(range(CPUS))
        if stats_cpus(stats) != want:
            fails.append("GetStats per-CPU table %s, online %s" % (stats_cpus(stats), want))
        if metric_cpus(metrics) != want:
            fails.append("GetMetrics cpuidle series for CPUs %s, online %s" % (metric_cpus(metrics), want))
        sensed = (status.get("controller") or status).get("sensors", {}).get("cpus")
        if sensed is not None and sensed != want:
            fails.append("GetStatus sensors.cpus %s, online %s" % (sensed, want))
        load.stop()
        fails += reader.fails[:20]
        decisions = [reader.decisions[k] for k in sorted(reader.decisions)]
        check_decisions(decisions, load.flips, counts, fails)
        counts["flips"] = len(load.flips)
        counts["reads"] = reader.reads
        harness.stop_and_check(d, t, found, fails)
    return fails, counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    rounds = int(os.environ.get("HALTPOLLD_FAULT_ROUNDS", a.rounds))
    rng = random.Random(a.seed)
    summary = {"campaign": "CPUs offline and online during tuning", "rounds": 0, "flips": 0, "faults_held": 0,
               "changes": 0, "decisions": 0, "reads": 0, "lost": 0, "failures": []}
    return harness.run_rounds(summary, rounds, lambda: one_round(a.daemon, a.seconds, rng))


if __name__ == "__main__":
    sys.exit(main())
