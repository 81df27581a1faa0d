#!/bin/sh
# Runs inside the arm64 guest as a oneshot unit after multi-user.target: checks the shipped
# haltpolld.service on an arm64 kernel, prints each result on the console as "VMCHECK: ...", the
# daemon's metrics between markers (promtool runs on the host), and powers the guest off.
# Phase 1 is the real kernel (an arm64 guest with no haltpoll driver: observe, say so); phase 2 a
# fake haltpoll tree on tmpfs where the unit's ReadWritePaths= expects it, in kernel mode, so the
# write and the restore go through the unit's sandbox.
con=/dev/console
log() { echo "VMCHECK: $*" >"$con"; }
fails=0
check() {
  desc="$1"; shift
  if "$@" >/tmp/vmcheck.out 2>&1; then log "ok: $desc"; else
    log "FAIL: $desc"; sed 's/^/VMCHECK:   | /' /tmp/vmcheck.out >"$con"; fails=$((fails + 1)); fi
}
contains() { printf '%s' "$1" | grep -q -- "$2"; }
wait_active() {
  i=0; while [ $i -lt 120 ]; do
    [ "$(systemctl is-active haltpolld)" = active ] && haltpollctl status >/dev/null 2>&1 && return 0
    sleep 1; i=$((i + 1)); done; return 1
}
log "kernel $(uname -r) $(uname -m); CPU features: $(grep -m1 Features /proc/cpuinfo | cut -d: -f2)"
log "cpuidle driver: $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo 'no cpuidle directory')"

# --- phase 1: the real arm64 kernel ---
if [ -d /opt/haltpolld-debs ]; then
  # The operator's path: dpkg installs the packages; dh_installsystemd's postinst enables and starts the unit.
  check "dpkg installs the arm64 packages" dpkg -i /opt/haltpolld-debs/*.deb
  dpkg -l haltpolld libhaltpoll0.1 2>&1 | grep '^ii' | sed 's/^/VMCHECK:   dpkg | /' >"$con"
  check "the package enabled haltpolld.service" systemctl is-enabled haltpolld
  check "the package started haltpolld.service and it answers on /run/haltpolld" wait_active
else
  check "systemd started haltpolld.service at boot and it answers on /run/haltpolld" wait_active
fi
systemctl status --no-pager haltpolld 2>&1 | sed 's/^/VMCHECK:   systemctl | /' >"$con"
st="$(haltpollctl status 2>&1)"; echo "$st" | sed 's/^/VMCHECK:   status | /' >"$con"
check "status says whether the kernel polls" contains "$st" "polling:  \|kernel:   no haltpoll module"
check "the library picked an arm64 wait backend" contains "$st" "backend:  arm64"
check "status names the eBPF program's state (present, or why not)" contains "$st" "eBPF"
# Debian 12's 6.1 verifier refused the histogram index until the program kept it in one register.
check "the arm64 kernel's verifier loads the eBPF program" contains "$st" "eBPF present"
sleep 3
check "stats" haltpollctl stats
check "stats --kernel" haltpollctl stats --kernel
check "decisions" haltpollctl decisions
haltpollctl stats --kernel 2>&1 | grep -i 'ebpf' | sed 's/^/VMCHECK:   stats | /' >"$con"
# Where the kernel's verifier refused the eBPF program, its whole log (the reason is its last line).
if haltpollctl stats --kernel 2>&1 | grep -q "verifier refused"; then
  HALTPOLL_LIBBPF_DEBUG=1 haltpolld record --seconds 1 --output /tmp/record.txt 2>&1 | tail -n 80 |
    sed 's/^/VMCHECK:   verifier | /' >"$con"
fi
echo "VMCHECK-METRICS-BEGIN" >"$con"; haltpollctl metrics >"$con" 2>&1; echo "VMCHECK-METRICS-END" >"$con"
check "metrics" haltpollctl metrics
check "systemctl reload" systemctl reload haltpolld
check "active after reload" wait_active
check "stop is clean" systemctl stop haltpolld
# The daemon's own lines and the kernel's (a seccomp kill is audit type 1326), not systemd's banner,
# which lists +SECCOMP among its features.
j="$(journalctl -b --no-pager -u haltpolld 2>/dev/null; journalctl -b -k --no-pager 2>/dev/null)"
check "no SIGSYS, seccomp kill or EPERM in the journal" sh -c "! printf '%s' \"\$0\" | grep -Ei 'SIGSYS|status=31|type=1326|code=killed|Operation not permitted|EPERM'" "$j"
check "the daemon logged its stop" sh -c "printf '%s' \"\$0\" | grep -q 'stopped'" "$(journalctl -u haltpolld --no-pager)"

# --- phase 2: a fake haltpoll tree, kernel mode, through the unit's sandbox ---
mount -t tmpfs -o mode=0755 tmpfs /sys/module
mkdir -p /sys/module/haltpoll/parameters
p=/sys/module/haltpoll/parameters
echo 123000 >$p/guest_halt_poll_ns; echo 2 >$p/guest_halt_poll_grow; echo 50000 >$p/guest_halt_poll_grow_start
echo 2 >$p/guest_halt_poll_shrink; echo Y >$p/guest_halt_poll_allow_shrink
mount -t tmpfs -o mode=0755 tmpfs /sys/devices/system/cpu/cpuidle
echo haltpoll >/sys/devices/system/cpu/cpuidle/current_driver
echo haltpoll >/sys/devices/system/cpu/cpuidle/current_governor
echo "menu haltpoll" >/sys/devices/system/cpu/cpuidle/available_governors
mkdir -p /etc/systemd/system/haltpolld.service.d
# The static policy writes the configured value at once, whatever the signals.
printf '{"mode": "kernel", "pool": {"guest_halt_poll_ns": 12345}, "tuner": {"policy": "static", "interval_ms": 200}}\n' \
  >/etc/haltpolld/kernel.json
printf '[Service]\nExecStart=\nExecStart=/usr/sbin/haltpolld --config /etc/haltpolld/kernel.json --foreground\n' \
  >/etc/systemd/system/haltpolld.service.d/kernel.conf
systemctl daemon-reload
systemctl start haltpolld
check "kernel mode on the fake tree: active" wait_active
i=0; while [ $i -lt 30 ] && [ "$(cat $p/guest_halt_poll_ns)" = 123000 ]; do sleep 1; i=$((i + 1)); done
log "guest_halt_poll_ns after ${i} s of kernel mode: $(cat $p/guest_halt_poll_ns)"
check "the daemon wrote guest_halt_poll_ns=12345 through the sandbox" sh -c "[ \"\$(cat $p/guest_halt_poll_ns)\" = 12345 ]"
check "SIGTERM stops the service" systemctl stop haltpolld
check "the found value is back after SIGTERM" sh -c "[ \"\$(cat $p/guest_halt_poll_ns)\" = 123000 ]"
check "the found governor is back" sh -c "[ \"\$(cat /sys/devices/system/cpu/cpuidle/current_governor)\" = haltpoll ]"

# --- the library's tests on the guest kernel (the real event stream and CNTFRQ) ---
check "the kernel runs the event stream (HWCAP_EVTSTRM)" sh -c "grep -m1 Features /proc/cpuinfo | grep -qw evtstrm"
for t in /opt/haltpolld-tests/test_*; do
  [ -x "$t" ] || continue
  check "$(basename "$t") on the arm64 kernel" "$t"
  # The barrier's WFE case prints CNTFRQ, the period derived from it and the overshoot it measured.
  grep -a 'CNTFRQ\|WFE waits' /tmp/vmcheck.out | sed 's/^ */VMCHECK:   barrier | /' >"$con"
done
# The rate the kernel's timer runs at (its boot line) is the CNTFRQ the library derived its period from.
khz="$(dmesg 2>/dev/null | sed -n 's/.*arch_timer: cp15 timer(s) running at \([0-9.]*\)MHz.*/\1/p' | head -1)"
lhz="$(/opt/haltpolld-tests/test_barrier '*event stream*' 2>&1 | sed -n 's/.*CNTFRQ \([0-9]*\) Hz.*/\1/p' | head -1)"
log "kernel timer rate ${khz:-?} MHz, CNTFRQ read by the library ${lhz:-?} Hz"
check "the library's CNTFRQ is the kernel's timer rate" sh -c "[ -n \"$khz\" ] && [ -n \"$lhz\" ] && awk -v k=\"$khz\" -v l=\"$lhz\" 'BEGIN { d = k * 1000000 - l; exit !(d < 10000 && d > -10000) }'"

if [ "$fails" = 0 ]; then log "RESULT PASS"; else log "RESULT FAIL ($fails failed)"; fi
systemctl poweroff --no-block
