"""A guest's moving counters in the fake tree: every CPU online in the tree polls and halts, its
cpuidle counters and its /proc/stat line advance with time, and CPUs can be taken offline and
brought back as a hotplugging kernel shows it. Every file is replaced whole (a temporary renamed
over it), so that the daemon reading through the FUSE mount sees either the old or the new value,
as with the kernel's files.

- offline: the CPU leaves `online`, its cpuidle directory goes (cpuidle-haltpoll unregisters the
  device) and its `cpuN` line leaves /proc/stat, while the aggregate `cpu` line keeps its counts
  (it sums every possible CPU);
- online: the CPU is back in `online` with a new cpuidle directory counting from zero (the device
  is registered again) and its /proc/stat line back where it was.
- steal: `steal_share` of each CPU's time is stolen; `steal_jump()` adds a burst of steal ticks
  that no tick can hold, `steal_back()` moves the count backwards;
- `poll_burst()`: a CPU's POLL time grows by more than any tick can hold at once (what a tick that
  comes early sees: residency counted before the tick).
"""

import os
import threading
import time

CPU_DIR = "sys/devices/system/cpu"
HZ = 100


def _replace(path, text):
    tmp = path + ".tmp-load"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)


def cpu_list(cpus):
    return ",".join(str(c) for c in sorted(cpus))


class GuestLoad:
    def __init__(self, back, cpus, poll_share=0.05, wakes_per_s=2000, steal_share=0.0, period_s=0.02):
        self.back = back
        self.possible = list(range(cpus))
        self.online = set(self.possible)
        self.poll_share = poll_share
        self.wakes_per_s = wakes_per_s
        self.steal_share = steal_share
        self.period_s = period_s
        self.lock = threading.Lock()
        # per CPU: cpuidle counters [poll_usage, poll_us, halt_usage, halt_us]; /proc/stat fields
        self.idle = {c: [0, 0, 0, 0] for c in self.possible}
        self.stat = {c: {"user": 100, "system": 50, "idle": 1000, "steal": 0} for c in self.possible}
        self.ticks = {c: 0.0 for c in self.possible}  # USER_HZ ticks owed, fractions carried
        self.stop_ev = threading.Event()
        self.thread = None
        self.flips = []  # (t0_ms, t1_ms, cpu, "offline"/"online")
        with self.lock:
            for c in self.possible:
                self._write_cpuidle(c)
            self._write_online()
            self._write_stat()

    # -- files --------------------------------------------------------------------------------------
    def _p(self, rel):
        return os.path.join(self.back, rel)

    def _write_online(self):
        _replace(self._p(CPU_DIR + "/online"), cpu_list(self.online))

    def _write_cpuidle(self, c):
        v = self.idle[c]
        for k, (name, usage, t) in enumerate((("POLL", v[0], v[1]), ("haltpoll", v[2], v[3]))):
            d = self._p("%s/cpu%d/cpuidle/state%d" % (CPU_DIR, c, k))
            os.makedirs(d, exist_ok=True)
            _replace(os.path.join(d, "name"), name)
            _replace(os.path.join(d, "usage"), str(usage))
            _replace(os.path.join(d, "time"), str(t))

    @staticmethod
    def _line(name, s):
        return "%s %d 0 %d %d 0 0 0 %d 0 0" % (name, s["user"], s["system"], s["idle"], s["steal"])

    def _write_stat(self):
        agg = {k: sum(self.stat[c][k] for c in self.possible) for k in ("user", "system", "idle", "steal")}
        lines = [self._line("cpu ", agg)] + [self._line("cpu%d" % c, self.stat[c]) for c in sorted(self.online)]
        _replace(self._p("proc/stat"), "\n".join(lines + ["intr 0"]))

    # -- time passing -------------------------------------------------------------------------------
    def advance(self, dt):
        with self.lock:
            for c in sorted(self.online):
                v = self.idle[c]
                wakes = int(self.wakes_per_s * dt)
                v[0] += wakes
                v[1] += int(self.poll_share * dt * 1e6)
                v[2] += wakes // 10
                v[3] += int((1 - self.poll_share) * 0.5 * dt * 1e6)
                self._write_cpuidle(c)
                s = self.stat[c]
                self.ticks[c] += dt * HZ
                ticks = int(self.ticks[c])
                self.ticks[c] -= ticks
                stolen = int(round(ticks * self.steal_share))
                s["steal"] += stolen
                s["user"] += (ticks - stolen) // 2
                s["idle"] += ticks - stolen - (ticks - stolen) // 2
            self._write_stat()

    def _run(self):
        last = time.monotonic()
        while not self.stop_ev.wait(self.period_s):
            now = time.monotonic()
            self.advance(now - last)
            last = now

    def start(self):
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.stop_ev.set()
        if self.thread:
            self.thread.join(5)

    # -- hotplug and steal --------------------------------------------------------------------------
    def set_online(self, cpu, on):
        with self.lock:
            t0 = time.time() * 1000
            d = self._p("%s/cpu%d/cpuidle" % (CPU_DIR, cpu))
            if on:
                self.online.add(cpu)
                self.idle[cpu] = [0, 0, 0, 0]
                self._write_cpuidle(cpu)
                self._write_online()
            else:
                self.online.discard(cpu)
                self._write_online()
                gone = d + ".gone"
                os.rename(d, gone)
                for root, dirs, files in os.walk(gone, topdown=False):
                    for n in files:
                        os.unlink(os.path.join(root, n))
                    for n in dirs:
                        os.rmdir(os.path.join(root, n))
                os.rmdir(gone)
            self._write_stat()
            self.flips.append((t0, time.time() * 1000, cpu, "online" if on else "offline"))

    def steal_jump(self, seconds):
        """Every online CPU's steal count jumps by `seconds` of ticks at once."""
        with self.lock:
            t0 = time.time() * 1000
            for c in self.online:
                self.stat[c]["steal"] += int(seconds * HZ)
            self._write_stat()
            self.flips.append((t0, time.time() * 1000, -1, "steal jump"))

    def steal_back(self, ticks):
        """Every online CPU's steal count goes back by `ticks` (at most to 0)."""
        with self.lock:
            t0 = time.time() * 1000
            for c in self.online:
                self.stat[c]["steal"] = max(0, self.stat[c]["steal"] - ticks)
            self._write_stat()
            self.flips.append((t0, time.time() * 1000, -1, "steal back"))

    def poll_burst(self, cpu, seconds):
        """CPU `cpu`'s POLL time grows by `seconds` at once."""
        with self.lock:
            t0 = time.time() * 1000
            self.idle[cpu][1] += int(seconds * 1e6)
            self._write_cpuidle(cpu)
            self.flips.append((t0, time.time() * 1000, cpu, "poll burst"))
