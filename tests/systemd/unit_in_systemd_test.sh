#!/usr/bin/env bash
# Runs systemd/haltpolld.service under a real systemd: a Debian 12 root file system (mmdebstrap,
# cached), systemd as PID 1 of private PID, mount, UTS, IPC and cgroup namespaces, chrooted into
# that tree; never over the host's own root (systemd-tmpfiles there would empty the host's /tmp).
# Checks that the hardened unit lets the daemon do its job: start with a STATUS=, the watchdog,
# reload, kill -9 -> restore and restart, SIGSTOP -> the watchdog's abort, restore and restart,
# stop -> restore, kill -9 then stop -> restore (the stop path
# alone), the QoS device in the unit's private /dev, the admin group's socket, a textfile
# another user can read, the eBPF signals present where the kernel has BTF and the power
# tracepoints (else a reason in status), and a warning at journal priority.
# The haltpoll parameters are a fake tree on a tmpfs mounted over /sys/module and the cpuidle
# directory inside the namespace, exactly where ReadWritePaths= points; HALTPOLL_REAL_SYSFS=1 uses
# the real ones (under the shared lock, restored on exit).
# With --package DEBDIR it checks the Debian packages instead (package_checks.sh): installed with
# dpkg under the running systemd, enabled and started by their maintainer scripts, upgraded, purged.
# Usage: unit_in_systemd_test.sh [--package DEBDIR] UNIT HALTPOLLD_BIN HALTPOLLCTL_BIN
# Exit 77 (skipped) only where the kernel or the sandbox refuses namespaces, or without root.
set -euo pipefail
deb_dir=""
if [ "${1:-}" = --package ]; then deb_dir="$(realpath "$2")"; shift 2; fi
unit="$1"; daemon_bin="$2"; ctl_bin="$3"
skip() { echo "skipped: $*"; exit 77; }
fail() { echo "FAILED: $*" >&2; dump_journal; exit 1; }
ok() { echo "ok: $*"; }

[ "$(id -u)" = 0 ] || skip "needs root (namespaces, chroot, mounts)"
command -v mmdebstrap >/dev/null || skip "mmdebstrap not installed (scripts/install-deps.sh installs it)"
unshare --pid --fork --mount --uts --ipc --cgroup true 2>/dev/null || skip "unshare of pid/mount/uts/ipc/cgroup namespaces refused here"

# The libraries of the binaries under test, as Debian packages, join the image; the list keys the cache.
pkgs="systemd dbus passwd util-linux"
# The packages' check runs Debian's TuneD next to haltpolld (tests/package/tuned_checks.sh).
[ -n "$deb_dir" ] && pkgs="$pkgs tuned"
for lib in $(ldd "$daemon_bin" "$ctl_bin" | awk '/=> \// {print $3}' | sort -u); do
  p="$(dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true)"
  [ -n "$p" ] && pkgs="$pkgs ${p%%:*}"
done
pkgs="$(echo "$pkgs" | tr ' ' '\n' | sort -u | tr '\n' ',' | sed 's/,$//')"
cache="${HALTPOLL_ROOTFS_CACHE:-/var/cache/haltpolld-test}"
key="$(echo "bookworm minbase $pkgs" | sha256sum | cut -c1-16)"
tarball="$cache/rootfs-$key.tar"
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  # The host's own apt sources: the test reaches only Debian's mirror, as the host's apt does.
  sources=""
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
    if [ -s "$f" ] && grep -Eq '^[[:space:]]*(deb|URIs:)' "$f"; then sources="$f"; break; fi
  done
  [ -n "$sources" ] || fail "no apt sources on the host for mmdebstrap"
  echo "building the root file system ($pkgs) into $tarball"
  t0=$SECONDS
  # The output's format follows its extension: keep ".tar" on the partial file.
  mmdebstrap --quiet --variant=minbase --include="$pkgs" bookworm "$cache/partial-$key.tar" "$sources"
  mv "$cache/partial-$key.tar" "$tarball"
  echo "root file system built in $((SECONDS - t0)) s"
fi

work="$(mktemp -d /var/tmp/haltpolld-systemd-XXXXXX)"
root="$work/root"
pid1=""
cleanup() {
  # Only the systemd this script started, by its PID; its namespace goes with it.
  if [ -n "$pid1" ] && kill -0 "$pid1" 2>/dev/null; then
    kill -KILL "$pid1" 2>/dev/null || true
    wait "$unshare_pid" 2>/dev/null || true
  fi
  [ -n "${real_guard:-}" ] && restore_real
  umount -R "$root" 2>/dev/null || true
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT
mkdir -p "$root"
tar -C "$root" -xf "$tarball"

# --- install the daemon, unit and config into the tree (the packages: after boot, with dpkg) ---
mkdir -p "$root/etc/systemd/system/haltpolld.service.d"
if [ -n "$deb_dir" ]; then
  mkdir -p "$root/var/tmp/debs"
  cp "$deb_dir"/haltpolld_*.deb "$deb_dir"/libhaltpoll0*_*.deb "$root/var/tmp/debs/"
else
  install -m 0755 "$daemon_bin" "$root/usr/sbin/haltpolld"
  install -m 0755 "$ctl_bin" "$root/usr/bin/haltpollctl"
  # The unit is the template of `cmake --install --prefix /usr` (sbin /usr/sbin, bin /usr/bin, config /etc).
  sed -e 's#@HALTPOLLD_SBINDIR@#/usr/sbin#' -e 's#@HALTPOLLD_BINDIR@#/usr/bin#' \
      -e 's#@HALTPOLLD_CONFIG_FILE@#/etc/haltpolld/haltpolld.json#' "$unit" >"$root/etc/systemd/system/haltpolld.service"
  chmod 0644 "$root/etc/systemd/system/haltpolld.service"
  mkdir -p "$root/etc/haltpolld"
fi
mkdir -p "$root/var/lib/prometheus/node-exporter"
if [ -n "$deb_dir" ]; then
  # TuneD starts with no profile (manual mode, none active): the checks choose each one.
  : > "$root/etc/tuned/active_profile"
  echo manual > "$root/etc/tuned/profile_mode"
fi
# A short watchdog so that "alive past 3 x WatchdogSec" takes seconds, not minutes.
# The unit's ConditionVirtualization=vm is false here (systemd sees a container): the empty
# assignment drops the unit's conditions, as an operator's drop-in would in a container.
cat > "$root/etc/systemd/system/haltpolld.service.d/test.conf" <<'CONF'
[Unit]
ConditionVirtualization=
[Service]
WatchdogSec=2s
RestartSec=1s
CONF
if [ -z "$deb_dir" ]; then
# The admin-group setup exactly as docs/operations.md documents it.
cat > "$root/etc/systemd/system/haltpolld.service.d/admin-group.conf" <<'CONF'
[Service]
SupplementaryGroups=haltpoll-admin
CONF
cat > "$root/etc/haltpolld/haltpolld.json" <<'JSON'
{
  "mode": "kernel",
  "socket": {"admin_group": "haltpoll-admin", "mode": "0660"},
  "pool": {"guest_halt_poll_ns": 12345},
  "tuner": {"policy": "static", "interval_ms": 200},
  "metrics": {"textfile": "/var/lib/prometheus/node-exporter/haltpolld.prom"}
}
JSON
fi
chroot "$root" groupadd -r haltpoll-admin
chroot "$root" useradd -M -N -g users -G haltpoll-admin operator1
chroot "$root" useradd -M -N -g users reader1
echo "haltpolld-test" > "$root/etc/hostname"
: > "$root/etc/machine-id"
chroot "$root" systemd-machine-id-setup >/dev/null 2>&1 || true
# Units that would touch the host (kernel tunables, /tmp cleanup, modules, devices, consoles).
for u in systemd-sysctl.service systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service \
         systemd-tmpfiles-clean.service systemd-tmpfiles-clean.timer systemd-modules-load.service \
         systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket systemd-udev-trigger.service \
         systemd-binfmt.service proc-sys-fs-binfmt_misc.automount proc-sys-fs-binfmt_misc.mount \
         systemd-timesyncd.service getty@tty1.service console-getty.service serial-getty@.service getty.target \
         systemd-logind.service systemd-remount-fs.service systemd-firstboot.service systemd-random-seed.service \
         systemd-update-utmp.service systemd-pstore.service systemd-hwdb-update.service sys-kernel-debug.mount \
         sys-kernel-tracing.mount sys-kernel-config.mount sys-fs-fuse-connections.mount dev-hugepages.mount \
         dev-mqueue.mount apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do
  ln -sf /dev/null "$root/etc/systemd/system/$u"
done

params=/sys/module/haltpoll/parameters
originals="guest_halt_poll_ns=200000 guest_halt_poll_grow=2 guest_halt_poll_grow_start=50000 guest_halt_poll_shrink=2 guest_halt_poll_allow_shrink=Y"
if [ "${HALTPOLL_REAL_SYSFS:-}" = 1 ]; then
  [ -d "$params" ] || skip "HALTPOLL_REAL_SYSFS=1 but $params does not exist"
  exec 9>/tmp/haltpoll-real-sysfs.lock
  flock 9
  originals=""
  for f in guest_halt_poll_ns guest_halt_poll_grow guest_halt_poll_grow_start guest_halt_poll_shrink guest_halt_poll_allow_shrink; do
    originals="$originals $f=$(cat "$params/$f")"
  done
  real_guard=1
  restore_real() { for kv in $originals; do echo "${kv#*=}" > "$params/${kv%%=*}" || true; done; }
fi

# The QoS devices the unit binds into its private /dev are fakes in the namespace (stage 2 mounts
# them over the host's nodes): opening the real /dev/cpu_dma_latency adds a request at the
# no-constraint default, which lowers the aggregate if every request in force is above it
# (docs/kernel-signals.md, section 5). The fake holds 777 µs, which status must show under the unit.
for q in cpu_dma_latency cpu_wakeup_latency; do
  python3 -c 'import struct, sys; sys.stdout.buffer.write(struct.pack("=i", 777))' >"$work/qos-$q"
done

# --- boot: stage 2 runs as PID 1 of the new namespaces, mounts the tree and becomes systemd ---
cat > "$work/stage2.sh" <<STAGE2
#!/bin/sh
set -e
mount --make-rprivate /
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
if [ -n "$deb_dir" ] && [ "${HALTPOLL_REAL_SYSFS:-}" != 1 ]; then
  # TuneD runs in this tree: the kernel's files it would tune (sysctls, cpufreq, disks) read-only.
  mount -t sysfs -o ro sysfs "$root/sys"
else
  mount -t sysfs sysfs "$root/sys"
fi
mount --rbind /dev "$root/dev"
for q in cpu_dma_latency cpu_wakeup_latency; do
  if [ -e "$root/dev/\$q" ]; then mount --bind "$work/qos-\$q" "$root/dev/\$q"; fi
done
mount -t tmpfs -o mode=0755 tmpfs "$root/run"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
if [ -n "$deb_dir" ] && [ "${HALTPOLL_REAL_SYSFS:-}" != 1 ]; then
  mount --bind "$root/proc/sys" "$root/proc/sys"
  mount -o remount,bind,ro "$root/proc/sys"
fi
if [ "${HALTPOLL_REAL_SYSFS:-}" != 1 ]; then
  # The fake haltpoll module and cpuidle files, where the unit's ReadWritePaths= expects them.
  mount -t tmpfs -o mode=0755 tmpfs "$root/sys/module"
  mkdir -p "$root$params"
  for kv in $originals; do echo "\${kv#*=}" > "$root$params/\${kv%%=*}"; done
  mount -t tmpfs -o mode=0755 tmpfs "$root/sys/devices/system/cpu/cpuidle"
  echo haltpoll > "$root/sys/devices/system/cpu/cpuidle/current_driver"
  echo haltpoll > "$root/sys/devices/system/cpu/cpuidle/current_governor"
  echo "menu haltpoll" > "$root/sys/devices/system/cpu/cpuidle/available_governors"
fi
export container=haltpolld-test
exec chroot "$root" /lib/systemd/systemd --system --log-target=console --show-status=no </dev/null >"$work/console.log" 2>&1
STAGE2
chmod +x "$work/stage2.sh"
unshare --pid --fork --mount --uts --ipc --cgroup --kill-child "$work/stage2.sh" &
unshare_pid=$!
for _ in $(seq 100); do
  pid1="$(cat /proc/$unshare_pid/task/$unshare_pid/children 2>/dev/null | awk '{print $1}')"
  [ -n "$pid1" ] && break
  sleep 0.1
done
[ -n "$pid1" ] || fail "unshare did not start stage 2"
ns() { nsenter --target "$pid1" --mount --uts --ipc --pid --cgroup --root --wd=/ -- "$@"; }
dump_journal() {
  [ -n "${pid1:-}" ] || return 0
  echo "--- journal of haltpolld ---" >&2
  ns journalctl --no-pager -u haltpolld -n 80 >&2 2>/dev/null || true
  echo "--- console ---" >&2
  tail -40 "$work/console.log" >&2 2>/dev/null || true
}
for _ in $(seq 300); do
  state="$(ns systemctl is-system-running 2>/dev/null || true)"
  case "$state" in running|degraded) break ;; esac
  sleep 0.1
done
case "$state" in running|degraded) ok "systemd booted in the namespace ($state, PID 1 is host pid $pid1)" ;;
  *) fail "systemd did not finish booting: '$state'" ;; esac

show() { ns systemctl show -p "$1" --value haltpolld; }
param() { ns cat "$params/$1"; }
check_originals() {
  for kv in $originals; do
    [ "$(param "${kv%%=*}")" = "${kv#*=}" ] || fail "$1: ${kv%%=*} is $(param "${kv%%=*}"), not ${kv#*=}"
  done
}
wait_for() {  # wait_for SECONDS COMMAND...
  local n=$(( $1 * 10 )); shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
tuned() { [ "$(param guest_halt_poll_ns)" = 12345 ]; }
check_reload() {  # check_reload FROM TO: tuner.interval_ms FROM -> TO in the file, systemctl reload applies it
  ns sed -i "s/\"interval_ms\": $1\b/\"interval_ms\": $2/" /etc/haltpolld/haltpolld.json
  ns systemctl reload haltpolld || fail "systemctl reload"
  wait_for 5 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- haltpollctl config get tuner.interval_ms 2>/dev/null | grep -qx $2" ||
    fail "reload did not apply tuner.interval_ms=$2: $(ns haltpollctl config get tuner.interval_ms 2>&1)"
  ok "systemctl reload applied tuner.interval_ms=$2"
}

if [ -n "$deb_dir" ]; then
  # shellcheck source=../package/package_checks.sh
  . "$(dirname "$0")/../package/package_checks.sh"
  exit 0
fi

# start: active, a STATUS= line, the tuner's value written
ns systemctl start haltpolld || fail "systemctl start"
[ "$(show ActiveState)" = active ] || fail "not active after start"
status_text="$(show StatusText)"
[ -n "$status_text" ] || fail "no STATUS= text"
ok "started: StatusText='$status_text'"
wait_for 10 tuned || fail "the static tuner did not write 12345 (kernel mode): $(ns haltpollctl status 2>&1 | head -20)"
ok "kernel mode wrote guest_halt_poll_ns=12345 through ReadWritePaths="

# the QoS device reaches the daemon through the unit's private /dev (BindReadOnlyPaths=)
qos_value() {
  ns haltpollctl status --json | python3 -c '
import json, sys
q = json.load(sys.stdin)["polling_overrides"]
d = q["cpu_dma_latency"] if q else None
print("no tick yet" if d is None else d["value_us"] if d["value_us"] is not None else "unread: %s" % d["error"])'
}
qos_read() { [ "$(qos_value)" = 777 ]; }
if [ -e /dev/cpu_dma_latency ]; then
  wait_for 10 qos_read || fail "under the unit /dev/cpu_dma_latency reads $(qos_value), not the fake's 777"
  ok "QoS: the unit's private /dev has /dev/cpu_dma_latency (the fake's 777 µs read)"
else
  ok "QoS: this kernel has no /dev/cpu_dma_latency; status says: $(qos_value)"
fi

# the watchdog keeps it alive past 3 x WatchdogSec (2 s here)
main_pid="$(show MainPID)"
sleep 7
{ [ "$(show ActiveState)" = active ] && [ "$(show MainPID)" = "$main_pid" ] && [ "$(show NRestarts)" = 0 ]; } ||
  fail "not the same healthy process after 7 s with WatchdogSec=2s (restarts $(show NRestarts))"
ok "watchdog: same pid $main_pid after 3.5 x WatchdogSec, no restart"

# reload applies a changed file
check_reload 200 300

# the admin group's socket works (the unit may chown it), and others may not change settings
[ "$(ns stat -c %G /run/haltpolld/io.haltpolld)" = haltpoll-admin ] || fail "socket group is $(ns stat -c %G /run/haltpolld/io.haltpolld)"
ns setpriv --reuid=operator1 --regid=users --init-groups haltpollctl reset >/dev/null || fail "operator1 (haltpoll-admin) cannot reset"
if ns setpriv --reuid=reader1 --regid=users --init-groups haltpollctl reset >/dev/null 2>&1; then fail "reader1 (not in the group, not in the socket's group) could reset"; fi
ok "admin group: socket group haltpoll-admin, a member may reset, a non-member may not"

# the textfile is readable by another user despite UMask=0077
wait_for 5 ns test -s /var/lib/prometheus/node-exporter/haltpolld.prom || fail "no textfile"
[ "$(ns stat -c %a /var/lib/prometheus/node-exporter/haltpolld.prom)" = 644 ] || fail "textfile mode $(ns stat -c %a /var/lib/prometheus/node-exporter/haltpolld.prom)"
ns setpriv --reuid=reader1 --regid=users --clear-groups cat /var/lib/prometheus/node-exporter/haltpolld.prom | grep -q haltpoll_info ||
  fail "reader1 cannot read the textfile"
ok "textfile 0644, readable by another user"

# eBPF: the unit grants CAP_BPF and CAP_PERFMON and lets bpf() through its filter, so on a kernel
# with BTF and the power tracepoints (this guest's) the signals must be present under the real unit.
# Only a kernel that lacks them may leave them out, and then status must say why.
bpf_state() {
  ns haltpollctl status --json | python3 -c '
import json, sys
b = json.load(sys.stdin)["kernel_signals"]["bpf"]
print("present" if b["present"] else "missing: %s" % b["missing_reason"])'
}
kernel_has_bpf_signals() {
  [ -r /sys/kernel/btf/vmlinux ] || { bpf_expect_why="no /sys/kernel/btf/vmlinux"; return 1; }
  grep -qw tracefs /proc/filesystems || { bpf_expect_why="no tracefs in this kernel"; return 1; }
  local t
  for t in /sys/kernel/tracing /sys/kernel/debug/tracing; do
    [ -d "$t/events/power/cpu_idle" ] && return 0
  done
  # tracefs not mounted on the host: the tp_btf programs need no tracefs, BTF decides.
  [ ! -d /sys/kernel/tracing/events ] && [ ! -d /sys/kernel/debug/tracing/events ] && return 0
  bpf_expect_why="no power:cpu_idle tracepoint in tracefs"
  return 1
}
bpf_present() { [ "$(bpf_state)" = present ]; }
bpf_expect_why=""
if kernel_has_bpf_signals; then
  wait_for 10 bpf_present ||
    fail "the kernel has BTF and the power tracepoints, but under the unit the eBPF signals are $(bpf_state)"
  ok "eBPF: the kernel signals are present under the real unit (BTF and tracepoints on this kernel)"
else
  state_bpf="$(bpf_state)"
  case "$state_bpf" in
    "missing: None"|"missing: ") fail "eBPF signals missing and status does not say why" ;;
    missing:*) ok "eBPF: this kernel refuses ($bpf_expect_why); status says: ${state_bpf#missing: }" ;;
    *) ok "eBPF: present although the host check expected not ($bpf_expect_why)" ;;
  esac
fi

# kill -9: the unit's stop path (ExecStopPost=haltpolld --restore) puts the originals back with a
# warning, then systemd restarts it
ns systemctl kill --kill-who=main --signal=SIGKILL haltpolld  # kill -9 of the main process (no procps in the tree)
wait_for 15 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- systemctl show -p NRestarts --value haltpolld)\" = 1 ] && [ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- systemctl show -p ActiveState --value haltpolld)\" = active ]" ||
  fail "no restart after kill -9 (NRestarts=$(show NRestarts), $(show ActiveState))"
new_pid="$(show MainPID)"
[ "$new_pid" != "$main_pid" ] || fail "same MainPID after kill -9"
wait_for 10 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- journalctl --no-pager -u haltpolld -p warning | grep -q 'restored the haltpoll parameters saved by pid $main_pid'" ||
  fail "nothing reported restoring the originals saved by pid $main_pid at priority warning"
ok "kill -9: the originals saved by pid $main_pid restored (journalctl -p warning shows it), restarted as pid $new_pid"
wait_for 10 tuned || fail "the restarted instance did not tune again"

# SIGSTOP: a stopped daemon pings no more; after WatchdogSec (2 s here) systemd sends the watchdog's
# SIGABRT with a SIGCONT (nothing else ends a stopped process), the stop path puts the originals
# back, and systemd restarts it
stopped_pid="$new_pid"
t_stop=$SECONDS
ns systemctl kill --kill-who=main --signal=SIGSTOP haltpolld
wait_for 40 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- systemctl show -p NRestarts --value haltpolld)\" = 2 ] && [ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- systemctl show -p ActiveState --value haltpolld)\" = active ]" ||
  fail "a stopped daemon was not restarted by the watchdog (NRestarts=$(show NRestarts), $(show ActiveState))"
new_pid="$(show MainPID)"
[ "$new_pid" != "$stopped_pid" ] || fail "same MainPID after SIGSTOP"
[ $((SECONDS - t_stop)) -ge 2 ] || fail "restarted $((SECONDS - t_stop)) s after SIGSTOP, before WatchdogSec=2s"
wait_for 10 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- journalctl --no-pager -u haltpolld -p warning | grep -q 'restored the haltpoll parameters saved by pid $stopped_pid'" ||
  fail "nothing reported restoring the originals saved by the stopped pid $stopped_pid"
# first: the restore is in the journal before the new instance listens (let alone tunes)
wait_for 10 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- journalctl --no-pager -u haltpolld | grep -q 'haltpolld\[$new_pid\]: listening on'" ||
  fail "the instance restarted after SIGSTOP does not listen"
journal="$(ns journalctl --no-pager -u haltpolld)"
restored_at="$(grep -n "restored the haltpoll parameters saved by pid $stopped_pid" <<<"$journal" | head -1 | cut -d: -f1)"
listening_at="$(grep -n "haltpolld\[$new_pid\]: listening on" <<<"$journal" | head -1 | cut -d: -f1)"
{ [ -n "$restored_at" ] && [ -n "$listening_at" ] && [ "$restored_at" -lt "$listening_at" ]; } ||
  fail "the restore of pid $stopped_pid's originals (journal line $restored_at) does not come before pid $new_pid listens (line $listening_at)"
ok "SIGSTOP: restarted by the watchdog $((SECONDS - t_stop)) s later as pid $new_pid, the originals saved by pid $stopped_pid restored first"
wait_for 10 tuned || fail "the instance restarted by the watchdog did not tune again"

# stop restores exactly the originals; the runtime directory (state) is kept but holds no state file
ns systemctl stop haltpolld
[ "$(show ActiveState)" = inactive ] || fail "not inactive after stop: $(show ActiveState)"
check_originals "after stop"
ns test ! -e /run/haltpolld/haltpoll-params.json || fail "state file left after a clean stop"
ns test ! -e /var/lib/prometheus/node-exporter/haltpolld.prom || fail "textfile left after a clean stop"
ok "stop: all five parameters are the originals again, no state file, no textfile"
# kill -9, then a stop before the restart (RestartSec=2s): no next start, the stop path alone restores
ns systemctl start haltpolld || fail "systemctl start after stop"
wait_for 10 tuned || fail "not tuning after the second start"
ns systemctl kill --kill-who=main --signal=SIGKILL haltpolld
ns systemctl stop haltpolld
# "failed" (the main process died of SIGKILL) or "inactive": either way stopped, nothing running.
case "$(show ActiveState)" in inactive|failed) ;; *) fail "not stopped after kill -9 and stop: $(show ActiveState)" ;; esac
check_originals "after kill -9 and a stop without restart"
ns test ! -e /run/haltpolld/haltpoll-params.json || fail "state file left after kill -9 and a stop"
ok "kill -9 then stop: the stop path alone put all five parameters back"
echo "PASS: the hardened unit runs haltpolld under a real systemd"
