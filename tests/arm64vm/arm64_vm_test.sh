#!/usr/bin/env bash
# Boots an arm64 Debian 12 guest under qemu-system-aarch64 (TCG, the virt machine, -cpu max) with
# Debian's arm64 kernel and systemd as PID 1, installs the arm64 build of haltpolld as the shipped
# unit, lets tests/arm64vm/vmcheck.sh check it from inside, and reads the verdict off the console.
# The root file system is built once from Debian's packages and cached (tests/arm64vm/image.sh).
# Usage: arm64_vm_test.sh [BUILD_DIR] [DEB_DIR]
#   BUILD_DIR  the arm64 build (default build/aarch64-vm; `cmake --build --preset aarch64-vm`): the
#              library's test binaries, and the daemon and client when there is no DEB_DIR
#   DEB_DIR    the arm64 packages (`scripts/package.sh --arch arm64`, out/deb-arm64): the guest
#              installs them with dpkg on its first boot, whose postinst enables and starts the unit
# Env: HALTPOLL_ARM64VM_TIMEOUT (s, default 1500), HALTPOLL_ARM64VM_LOG (where the console log is
# kept on failure, default build/arm64vm-console.log).
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build/aarch64-vm}"
debs="${2:-}"
timeout_s="${HALTPOLL_ARM64VM_TIMEOUT:-1500}"
keep_log="${HALTPOLL_ARM64VM_LOG:-build/arm64vm-console.log}"
t_start=$SECONDS
daemon_bin="$build/src/daemon/haltpolld"; ctl_bin="$build/src/ctl/haltpollctl"
for f in $([ -n "$debs" ] || echo "$daemon_bin $ctl_bin"); do
  [ -x "$f" ] || { echo "FAILED: $f missing: cmake --preset aarch64-vm && cmake --build --preset aarch64-vm" >&2; exit 1; }
  file -b "$f" | grep -q 'ARM aarch64' || { echo "FAILED: $f is not an arm64 binary" >&2; exit 1; }
done
tarball="$(tests/arm64vm/image.sh)"

work="$(mktemp -d /var/tmp/haltpolld-arm64vm-XXXXXX)"
cleanup() { rm -rf --one-file-system "$work"; }
trap cleanup EXIT
tree="$work/root"; mkdir -p "$tree"
tar -C "$tree" -xf "$tarball"
kernel="$(printf '%s\n' "$tree"/boot/vmlinuz-* | sort -V | tail -1)"
initrd="$(printf '%s\n' "$tree"/boot/initrd.img-* | sort -V | tail -1)"
cp "$kernel" "$work/vmlinuz"; cp "$initrd" "$work/initrd"

mkdir -p "$tree/etc/haltpolld" "$tree/opt/haltpolld-tests"
if [ -n "$debs" ]; then
  # The packages, installed by dpkg inside the guest (tests/arm64vm/vmcheck.sh).
  mkdir -p "$tree/opt/haltpolld-debs"
  for p in haltpolld libhaltpoll0.1; do
    f="$(printf '%s\n' "$debs/${p}"_*_arm64.deb | sort -V | tail -1)"
    [ -f "$f" ] || { echo "FAILED: no ${p}_*_arm64.deb in $debs: scripts/package.sh --arch arm64" >&2; exit 1; }
    cp "$f" "$tree/opt/haltpolld-debs/"
  done
else
# The daemon, the client, the shipped unit (as `cmake --install --prefix /usr` makes it) and config.
install -m 0755 "$daemon_bin" "$tree/usr/sbin/haltpolld"
install -m 0755 "$ctl_bin" "$tree/usr/bin/haltpollctl"
sed -e 's#@HALTPOLLD_SBINDIR@#/usr/sbin#' -e 's#@HALTPOLLD_BINDIR@#/usr/bin#' \
    -e 's#@HALTPOLLD_CONFIG_FILE@#/etc/haltpolld/haltpolld.json#' systemd/haltpolld.service.in \
    >"$tree/etc/systemd/system/haltpolld.service"
install -m 0644 config/haltpolld.json "$tree/etc/haltpolld/haltpolld.json"
# Enabled as the package enables it: systemd starts it at boot.
mkdir -p "$tree/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/haltpolld.service "$tree/etc/systemd/system/multi-user.target.wants/"
fi
# The library's tests (the `unit` label), run on the guest's kernel.
find "$build/tests/lib" -maxdepth 1 -type f -name 'test_*' -perm -u+x -exec install -m 0755 {} "$tree/opt/haltpolld-tests/" \;
install -m 0755 tests/arm64vm/vmcheck.sh "$tree/usr/local/sbin/haltpolld-vmcheck"
cat >"$tree/etc/systemd/system/haltpolld-vmcheck.service" <<'UNIT'
[Unit]
Description=haltpolld arm64 checks
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/haltpolld-vmcheck
StandardOutput=journal+console
[Install]
WantedBy=multi-user.target
UNIT
mkdir -p "$tree/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/haltpolld-vmcheck.service "$tree/etc/systemd/system/multi-user.target.wants/"
echo "haltpolld-arm64" >"$tree/etc/hostname"
echo "/dev/vda / ext4 defaults 0 1" >"$tree/etc/fstab"
: >"$tree/etc/machine-id"
# No login prompt on the console the verdict is read from.
ln -sf /dev/null "$tree/etc/systemd/system/serial-getty@ttyAMA0.service"
size_mb=$(( $(du -sm "$tree" | cut -f1) + 600 ))
mke2fs -q -t ext4 -L root -d "$tree" "$work/root.img" "${size_mb}M"

echo "booting the arm64 guest (TCG; up to ${timeout_s} s)"
t_boot=$SECONDS
set +e
timeout "$timeout_s" qemu-system-aarch64 -M virt -cpu max -smp 2 -m 2048 -nographic -no-reboot \
  -kernel "$work/vmlinuz" -initrd "$work/initrd" \
  -append "root=/dev/vda rw console=ttyAMA0 panic=-1 quiet loglevel=3 systemd.show_status=0" \
  -drive if=none,file="$work/root.img",format=raw,id=hd -device virtio-blk-pci,drive=hd \
  -nic none </dev/null >"$work/console.log" 2>&1
rc=$?
set -e
echo "guest ran $((SECONDS - t_boot)) s (qemu exit $rc)"
grep -a 'VMCHECK' "$work/console.log" | grep -av 'VMCHECK-METRICS' || true
verdict=0
grep -aq 'VMCHECK: RESULT PASS' "$work/console.log" || verdict=1
# The metrics the guest printed, through promtool on the host.
if command -v promtool >/dev/null; then
  sed -n '/VMCHECK-METRICS-BEGIN/,/VMCHECK-METRICS-END/p' "$work/console.log" | sed '1d;$d' | tr -d '\r' >"$work/metrics.txt"
  if [ -s "$work/metrics.txt" ] && promtool check metrics <"$work/metrics.txt"; then echo "ok: metrics pass promtool check metrics"
  else echo "FAIL: metrics missing or rejected by promtool"; verdict=1; fi
fi
if [ "$verdict" != 0 ]; then
  mkdir -p "$(dirname "$keep_log")"; cp "$work/console.log" "$keep_log"
  echo "FAILED: the arm64 guest's checks failed; console log kept in $keep_log" >&2
  exit 1
fi
echo "arm64 guest checks passed in $((SECONDS - t_start)) s"
