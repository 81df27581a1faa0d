#!/usr/bin/env bash
# Builds (once, cached) an arm64 Debian 12 root file system with systemd as PID 1 and Debian's arm64
# kernel, from Debian's packages only: mmdebstrap runs the arm64 maintainer scripts under qemu-user
# through binfmt_misc (mounted here if it is not). Prints the path of the cached tarball.
# Usage: image.sh [CACHE_DIR]   (default /var/cache/haltpolld-test)
set -euo pipefail
cache="${1:-${HALTPOLL_ROOTFS_CACHE:-/var/cache/haltpolld-test}}"
# systemd, the daemon's and the client's runtime libraries (libbpf for the eBPF program), the kernel
# (its initramfs has virtio and ext4), and what the checks use.
pkgs="systemd,systemd-sysv,dbus,udev,kmod,procps,linux-image-arm64,libbpf1,libelf1,libfmt9,libspdlog1.10,libsystemd0,libstdc++6"
key="$(echo "bookworm arm64 minbase $pkgs" | sha256sum | cut -c1-16)"
tarball="$cache/arm64-rootfs-$key.tar"
if [ -s "$tarball" ]; then echo "$tarball"; exit 0; fi
mkdir -p "$cache"
[ "$(id -u)" = 0 ] || { echo "image.sh: needs root (mmdebstrap, binfmt_misc)" >&2; exit 1; }
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
  update-binfmts --enable qemu-aarch64 >&2 || update-binfmts --import qemu-aarch64 >&2
fi
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || { echo "image.sh: no binfmt_misc entry for qemu-aarch64 (qemu-user-static)" >&2; exit 1; }
sources=""
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  if [ -s "$f" ] && grep -Eq '^[[:space:]]*(deb|URIs:)' "$f"; then sources="$f"; break; fi
done
[ -n "$sources" ] || { echo "image.sh: no apt sources on the host" >&2; exit 1; }
t0=$SECONDS
echo "building the arm64 root file system into $tarball" >&2
# An initramfs of the few modules a virt guest boots from: Debian's default (MODULES=most) copies
# hundreds of modules one shell command at a time under qemu-user, which takes half an hour here.
# shellcheck disable=SC2016  # the hook's $1 is mmdebstrap's root, expanded by its own shell
mmdebstrap --quiet --architectures=arm64 --variant=minbase --include="$pkgs" \
  --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" && echo MODULES=list >"$1/etc/initramfs-tools/conf.d/haltpolld-vm" && mkdir -p "$1/usr/share/initramfs-tools/modules.d" && printf "virtio_pci\nvirtio_blk\nvirtio_mmio\next4\n" >"$1/usr/share/initramfs-tools/modules.d/haltpolld-vm"' \
  bookworm "$cache/partial-arm64-$key.tar" "$sources" >&2
mv "$cache/partial-arm64-$key.tar" "$tarball"
echo "arm64 root file system built in $((SECONDS - t0)) s" >&2
echo "$tarball"
