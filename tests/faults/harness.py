"""What the fault campaigns share: a FUSE-backed fake tree in a temporary directory, the real haltpolld
started on it as tests/support/daemon_fixture.hpp starts it (--config, --socket, --sysfs-root, a
state directory), a varlink client, and the checks that nothing was lost."""

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import fuse_sysfs
from fuse_sysfs import GOVERNOR, PARAMS, PARAMS_DIR, STATE_DIR

STATE_FILE = STATE_DIR + "/haltpoll-params.json"


class Tree:
    """backing directory + FUSE mount + a run directory (socket, config, logs) outside the mount."""

    def __init__(self, base, cpus=2):
        self.base = base
        self.back = os.path.join(base, "back")
        self.mnt = os.path.join(base, "mnt")
        self.run = os.path.join(base, "run")
        os.makedirs(self.run, mode=0o755)
        fuse_sysfs.populate(self.back, cpus)
        self.mount = fuse_sysfs.Mount(self.back, self.mnt)
        self.fs = self.mount.fs
        self.daemons = []  # every process started on the tree, killed before the unmount

    # The backing files are read directly, never through the mount: the checks must not depend on
    # the FUSE server they check.
    def read(self, rel):
        try:
            with open(os.path.join(self.back, rel)) as f:
                return f.read().strip()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def write(self, rel, value):
        with open(os.path.join(self.back, rel), "w") as f:
            f.write(value + "\n")

    def found(self):
        """Every value the daemon must put back: the five parameters and the governor."""
        v = {name: self.read(PARAMS_DIR + "/" + name) for name in PARAMS}
        v["current_governor"] = self.read(GOVERNOR)
        return v

    def set_found(self, values):
        for name, value in values.items():
            self.write(GOVERNOR if name == "current_governor" else PARAMS_DIR + "/" + name, value)

    def state_file(self):
        return os.path.join(self.back, STATE_FILE)

    def state_file_check(self):
        """None when the state file is absent or whole (a JSON object of version 1 with all five
        parameters), else what is wrong with it."""
        try:
            with open(self.state_file()) as f:
                text = f.read()
        except FileNotFoundError:
            return None
        try:
            j = json.loads(text)
        except ValueError as e:
            return "does not parse: %s (%d bytes)" % (e, len(text))
        if not isinstance(j, dict) or j.get("version") != 1 or sorted(j.get("params", {})) != sorted(PARAMS):
            return "parses but is not a whole state file: %r" % text[:200]
        return None

    def stray_state_files(self):
        d = os.path.join(self.back, STATE_DIR)
        return sorted(n for n in os.listdir(d) if n != "haltpoll-params.json")


@contextlib.contextmanager
def tree(cpus=2):
    base = tempfile.mkdtemp(prefix="haltpolld-faults-")
    t = Tree(base, cpus)
    try:
        with t.mount:
            yield t
    finally:
        for d in t.daemons:
            d.kill(signal.SIGKILL)
            d.wait()
        t.mount.unmount()
        shutil.rmtree(base, ignore_errors=True)


class Daemon:
    """One haltpolld process on the tree, its stderr in a log file."""

    def __init__(self, binary, t, config, name="daemon", extra=()):
        self.t = t
        self.config_file = os.path.join(t.run, "haltpolld.json")
        self.socket = os.path.join(t.run, "io.haltpolld")
        cfg = dict(config)
        cfg["state_dir"] = os.path.join(t.mnt, STATE_DIR)
        with open(self.config_file, "w") as f:
            json.dump(cfg, f)
        self.log_path = os.path.join(t.run, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--config", self.config_file, "--socket", self.socket, "--sysfs-root", t.mnt, *extra],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        t.daemons.append(self)

    def output(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, needle, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.output():
                return True
            if self.proc.poll() is not None:
                return needle in self.output()
            time.sleep(0.01)
        return False

    def kill(self, sig=signal.SIGKILL):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout=60.0):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if self.proc.poll() is not None:
                self.log.close()

    def stop(self, timeout=60.0):
        self.kill(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self.kill(signal.SIGKILL)
            self.wait()
        return rc

    def __del__(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stop_and_check(d, t, found, fails):
    """SIGTERM `d`; a failure in `fails` unless it exits 0 with every `found` value back."""
    if d.stop() != 0:
        fails.append("SIGTERM: exit code not 0")
    now = t.found()
    if now != found:
        fails.append("not put back: %s -> %s" % (found, now))


def run_rounds(summary, rounds, one_round):
    """Runs `one_round()` (-> its failures and a dict of counts) `rounds` times, adding its counts,
    its failures and whether something was not put back into `summary`; the exit code."""
    for _ in range(rounds):
        fails, counts = one_round()
        summary["rounds"] += 1
        for k, v in counts.items():
            summary[k] += v
        summary["lost"] += any("not put back" in f for f in fails)
        summary["failures"] += fails
    return finish(summary)


def finish(summary):
    """Prints the campaign's summary; its exit code (1 when anything failed)."""
    print(json.dumps(summary, indent=2))
    return 0 if not summary["failures"] else 1


def restore(binary, d):
    """The unit's stop path alone (`haltpolld --restore`, its ExecStopPost) for daemon `d`'s
    config, socket and tree: (exit code, its output)."""
    p = subprocess.run([binary, "--config", d.config_file, "--socket", d.socket, "--sysfs-root", d.t.mnt, "--restore"],
                       capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


class Client:
    def __init__(self, path, timeout=30.0):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.buf = b""

    def send(self, method, params=None, more=False):
        msg = {"method": "io.haltpolld." + method, "parameters": params or {}}
        if more:
            msg["more"] = True
        self.s.sendall(json.dumps(msg).encode() + b"\0")

    def recv(self):
        """The next reply (one of a stream's, after send(..., more=True))."""
        while b"\0" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("daemon closed the connection")
            self.buf += chunk
        m, _, self.buf = self.buf.partition(b"\0")
        return json.loads(m)

    def call(self, method, params=None):
        self.send(method, params)
        return self.recv()

    def close(self):
        self.s.close()


def call(path, method, params=None):
    c = Client(path)
    try:
        return c.call(method, params)
    finally:
        c.close()


class FloorMover(threading.Thread):
    """Moves the tuner's floor up and down over the socket every `period` s, so that the tuner keeps
    changing the value (each lowering with a governor round trip). `stop` ends it."""

    def __init__(self, socket_path, period=0.12, floors=(60000, 0)):
        super().__init__(daemon=True)
        self.socket_path = socket_path
        self.period = period
        self.floors = floors
        self.stop = threading.Event()

    def run(self):
        i = 0
        while not self.stop.wait(self.period):
            try:
                call(self.socket_path, "SetConfig", {"config": {"tuner": {"min_ns": self.floors[i % len(self.floors)]}}})
            except (OSError, ValueError):
                pass  # killed under us
            i += 1


def kernel_config(**tuner):
    """Kernel mode with a tuner that changes the value on its first tick (a static cap below the
    found 200000, so a lowering with the governor round trip) and ticks every 100 ms."""
    t = {"interval_ms": 100, "sweep_interval_ms": 100, "policy": "static", "reset_limits": True,
         "manage_grow_start": True}
    t.update(tuner)
    return {"mode": "kernel", "tuner": t, "pool": {"guest_halt_poll_ns": 20000},
            "probe": {"rate_hz": 0}, "socket": {"mode": "0600", "idle_timeout_ms": 600000}}
