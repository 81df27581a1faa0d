"""A fake sysfs tree served through FUSE, for fault injection against the real haltpolld binary.

The tree is a passthrough of a backing directory (made by `populate()`: the haltpoll parameters, the
cpuidle driver and governor, per-CPU cpuidle states, /proc/stat, and a state directory), mounted on
a temporary mount point that the daemon is given as --sysfs-root. What a plain directory cannot do,
the FUSE server does:

- every change (a parameter or governor write, and each step of the state file's write: create,
  write, fsync, rename, unlink) is logged in order (`ops`), with the time it was applied;
- after applying a change it can sleep (`delay_s`), so that a SIGKILL can be aimed at the gap after
  any change: the daemon is blocked in that system call while the change is already made, as with
  the kernel's sysfs, whose stores complete before the writer can die;
- chosen writes can be refused with an errno (`fail()`), a file can turn read-only (`read_only`).

Writes under sys/ have sysfs semantics: a write replaces the whole value (O_TRUNC is ignored, so a
kill between the truncation and the write cannot leave an empty attribute, which sysfs never does).
Under state/ everything is an ordinary file system.

Needs root (a FUSE mount) and Debian's python3-fusepy (module `fusepy`, or `fuse` from PyPI).
"""

import errno
import os
import subprocess
import threading
import time

try:
    from fusepy import FUSE, FuseOSError, Operations, fuse_get_context
except ImportError:  # the PyPI distribution names the module `fuse`
    from fuse import FUSE, FuseOSError, Operations, fuse_get_context

PARAMS = {
    "guest_halt_poll_ns": "200000",
    "guest_halt_poll_grow": "2",
    "guest_halt_poll_grow_start": "50000",
    "guest_halt_poll_shrink": "2",
    "guest_halt_poll_allow_shrink": "Y",
}
PARAMS_DIR = "sys/module/haltpoll/parameters"
CPUIDLE_DIR = "sys/devices/system/cpu/cpuidle"
GOVERNOR = CPUIDLE_DIR + "/current_governor"
STATE_DIR = "state"


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


def populate(back, cpus=2):
    """A haltpoll guest's tree in `back`, with the same found values as tests/support/fake_sysfs.hpp."""
    for name, value in PARAMS.items():
        _write(os.path.join(back, PARAMS_DIR, name), value)
    _write(os.path.join(back, CPUIDLE_DIR, "current_driver"), "haltpoll")
    _write(os.path.join(back, GOVERNOR), "haltpoll")
    _write(os.path.join(back, CPUIDLE_DIR, "available_governors"), "ladder menu haltpoll ")
    _write(os.path.join(back, "sys/devices/system/cpu/online"), "0" if cpus == 1 else "0-%d" % (cpus - 1))
    for c in range(cpus):
        for k, name in enumerate(("POLL", "haltpoll")):
            d = os.path.join(back, "sys/devices/system/cpu/cpu%d/cpuidle/state%d" % (c, k))
            _write(os.path.join(d, "name"), name)
            _write(os.path.join(d, "usage"), "0")
            _write(os.path.join(d, "time"), "0")
    _write(os.path.join(back, "proc/stat"), "cpu  100 0 50 0 0 0 0 0 0 0\ncpu0 50 0 25 0 0 0 0 0 0 0\nintr 0")
    os.makedirs(os.path.join(back, STATE_DIR), mode=0o700, exist_ok=True)
    os.chmod(os.path.join(back, STATE_DIR), 0o700)


class Op:
    __slots__ = ("seq", "kind", "path", "value", "t", "pid")

    def __init__(self, seq, kind, path, value, pid):
        self.seq, self.kind, self.path, self.value, self.pid = seq, kind, path, value, pid
        self.t = time.monotonic()

    def __repr__(self):
        return "%d %s %s %r (pid %d)" % (self.seq, self.kind, self.path, self.value, self.pid)


class FaultFS(Operations):
    def __init__(self, back):
        self.back = os.path.realpath(back)
        self.cv = threading.Condition()
        self.ops = []
        self.delay_s = 0.0
        self.inflight = 0
        self.rules = []  # dicts: path, errno, count, value (None: any)
        self.read_only = set()  # relative paths whose opens for writing get EACCES
        self.refused = []  # (path, value, errno, time) of every refused write

    # -- control, from the harness's threads --------------------------------------------------------
    def reset_log(self):
        with self.cv:
            self.ops = []
            self.refused = []

    def fail(self, rel, err, count=1, value=None):
        """The next `count` changes of `rel` (of `value` only, when given; every file under it when
        it ends with "/") fail with `err`."""
        with self.cv:
            self.rules.append({"path": rel, "errno": err, "count": count, "value": value})

    def clear_faults(self):
        with self.cv:
            self.rules = []
            self.read_only = set()

    def wait_ops(self, n, timeout):
        """Until at least `n` changes were applied; False on timeout."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while len(self.ops) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(left)
            return True

    def wait_idle(self, timeout=10.0):
        """Until no change is being applied or slept after (a killed writer's request included)."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while self.inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(left)
            return True

    def snapshot(self):
        with self.cv:
            return list(self.ops)

    # -- helpers ------------------------------------------------------------------------------------
    def _full(self, path):
        return os.path.join(self.back, path.lstrip("/"))

    @staticmethod
    def _rel(path):
        return path.lstrip("/")

    @staticmethod
    def _sysfs(rel):
        return rel.startswith("sys/")

    def _change(self, kind, rel, value, apply):
        """Applies one change (or refuses it by a rule), logs it, then sleeps the configured delay."""
        pid = self._pid()
        with self.cv:
            for r in self.rules:
                hit = r["path"] == rel or (r["path"].endswith("/") and rel.startswith(r["path"]))
                if hit and r["count"] > 0 and (r["value"] is None or r["value"] == value):
                    r["count"] -= 1
                    self.refused.append((rel, value, r["errno"], time.monotonic()))
                    raise FuseOSError(r["errno"])
            self.inflight += 1
        try:
            result = apply()
            with self.cv:
                self.ops.append(Op(len(self.ops) + 1, kind, rel, value, pid))
                self.cv.notify_all()
                delay = self.delay_s
            if delay > 0:
                time.sleep(delay)
            return result
        finally:
            with self.cv:
                self.inflight -= 1
                self.cv.notify_all()

    @staticmethod
    def _pid():
        return fuse_get_context()[2]

    # -- reads --------------------------------------------------------------------------------------
    def access(self, path, mode):
        if not os.access(self._full(path), mode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path, fh=None):
        st = os.lstat(self._full(path))
        return {k: getattr(st, k) for k in ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink",
                                            "st_size", "st_uid", "st_ino")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._full(path))

    def readlink(self, path):
        return os.readlink(self._full(path))

    def statfs(self, path):
        st = os.statvfs(self._full(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                                            "f_files", "f_flag", "f_frsize", "f_namemax")}

    def open(self, path, flags):
        rel = self._rel(path)
        writing = flags & (os.O_WRONLY | os.O_RDWR)
        if writing and rel in self.read_only:
            with self.cv:
                self.refused.append((rel, None, errno.EACCES, time.monotonic()))
            raise FuseOSError(errno.EACCES)
        if self._sysfs(rel):
            flags &= ~os.O_TRUNC  # sysfs: the write replaces the value
        return os.open(self._full(path), flags & ~(os.O_NOFOLLOW | os.O_NONBLOCK))

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    # -- changes ------------------------------------------------------------------------------------
    def create(self, path, mode, fi=None):
        rel = self._rel(path)
        if self._sysfs(rel):
            raise FuseOSError(errno.EACCES)  # sysfs has no new files
        return self._change("create", rel, None, lambda: os.open(self._full(path), os.O_WRONLY | os.O_CREAT, mode))

    def write(self, path, data, offset, fh):
        rel = self._rel(path)
        value = data.decode(errors="replace").strip()
        if self._sysfs(rel):
            def store():
                os.ftruncate(fh, 0)
                os.pwrite(fh, data, 0)
                return len(data)
            kind = "governor" if rel == GOVERNOR else "param"
            return self._change(kind, rel, value, store)
        return self._change("write", rel, value[:40], lambda: os.pwrite(fh, data, offset))

    def truncate(self, path, length, fh=None):
        rel = self._rel(path)
        if self._sysfs(rel):
            return 0  # O_TRUNC on a sysfs attribute changes nothing
        return self._change("truncate", rel, length, lambda: os.truncate(self._full(path), length))

    def fsync(self, path, datasync, fh):
        return self._change("fsync", self._rel(path), None, lambda: os.fsync(fh))

    def fsyncdir(self, path, datasync, fh):
        return 0

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        return os.close(fh)

    def rename(self, old, new):
        return self._change("rename", self._rel(new), self._rel(old), lambda: os.rename(self._full(old), self._full(new)))

    def unlink(self, path):
        return self._change("unlink", self._rel(path), None, lambda: os.unlink(self._full(path)))

    def mkdir(self, path, mode):
        return self._change("mkdir", self._rel(path), None, lambda: os.mkdir(self._full(path), mode))

    def rmdir(self, path):
        return self._change("rmdir", self._rel(path), None, lambda: os.rmdir(self._full(path)))

    def chmod(self, path, mode):
        return os.chmod(self._full(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._full(path), uid, gid)

    def utimens(self, path, times=None):
        return os.utime(self._full(path), times)


class Mount:
    """Mounts a FaultFS of `back` on `mnt` in a thread; unmounts on exit, whatever happened."""

    def __init__(self, back, mnt):
        self.fs = FaultFS(back)
        self.mnt = os.path.realpath(mnt)
        self.thread = None

    def mounted(self):
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == self.mnt for line in f)

    def __enter__(self):
        if os.path.realpath(self.mnt).startswith("/sys"):
            raise RuntimeError("refusing to mount over " + self.mnt)
        os.makedirs(self.mnt, exist_ok=True)
        self.thread = threading.Thread(
            target=lambda: FUSE(self.fs, self.mnt, foreground=True, nothreads=False, direct_io=True,
                                attr_timeout=0, entry_timeout=0, negative_timeout=0),
            daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.mounted():
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("FUSE mount on %s did not come up" % self.mnt)
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.unmount()
        return False

    def unmount(self):
        if self.mounted():
            subprocess.run(["umount", self.mnt], check=False)
            if self.mounted():
                subprocess.run(["umount", "-l", self.mnt], check=False)
        if self.thread:
            self.thread.join(10)
