#!/usr/bin/env bash
# Builds the Debian packages (haltpolld, libhaltpoll<soname>, libhaltpoll-dev) from a clean copy of the
# tree's files (tracked, plus new ones not ignored: no build directories, no local clutter) with
# `dpkg-buildpackage -us -uc -b`, then runs lintian on the result, which must report no error and no
# warning (overrides, each with its reason, live in debian/*.lintian-overrides).
# Usage: scripts/package.sh [--arch arm64] [OUTDIR]   (default: out/deb, or out/deb-arm64 for --arch;
#   the .deb files and the .changes land there). --arch cross-builds for that Debian architecture
#   (dpkg-buildpackage -a, the build profiles cross and nocheck) with the cross toolchain and the
#   :arm64 libraries of `scripts/install-deps.sh --arm64-vm`.
# On a fresh Debian 12 machine this one command is enough: it first installs what is missing
# (scripts/install-deps.sh: debhelper, dpkg-dev, lintian and the Build-Depends; root or sudo then).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
arch=""
if [ "${1:-}" = --arch ]; then
  arch="${2:?usage: $0 [--arch ARCH] [OUTDIR]}"; shift 2
  [ "$arch" = arm64 ] || { echo "package.sh: only --arch arm64 is set up (the toolchain and :arm64 libraries)" >&2; exit 2; }
  "$src/scripts/install-deps.sh" --arm64-vm
else
  "$src/scripts/install-deps.sh"
fi
out="$(realpath -m "${1:-$src/out/deb${arch:+-$arch}}")"
version="$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)"

# A fixed directory per output directory: ccache (when present) then recognises a rebuild.
work="$out/build"
rm -rf "$work"
mkdir -p "$work/haltpolld-$version"
(cd "$src" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
   [ -e "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf -) | tar -C "$work/haltpolld-$version" -xf -

if command -v ccache >/dev/null; then
  # debhelper points HOME at a scratch directory: name the cache explicitly.
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_DIR="${CCACHE_DIR:-$(ccache -k cache_dir)}" CCACHE_BASEDIR="$work"
fi
export DEB_BUILD_OPTIONS="${DEB_BUILD_OPTIONS:-parallel=$(nproc)}"
t0=$SECONDS
if [ -n "$arch" ]; then
  export DEB_BUILD_OPTIONS="$DEB_BUILD_OPTIONS nocheck"
  (cd "$work/haltpolld-$version" && dpkg-buildpackage -us -uc -b -a"$arch" -Pcross,nocheck)
else
  (cd "$work/haltpolld-$version" && dpkg-buildpackage -us -uc -b)
fi
echo "package: built in $((SECONDS - t0)) s"

rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
mv "$work"/*.deb "$work"/*.changes "$work"/*.buildinfo "$out"/
changes=("$out"/haltpolld_"$version"_*.changes)
if [ "${#changes[@]}" != 1 ] || [ ! -f "${changes[0]}" ]; then echo "package: expected one haltpolld_${version}_*.changes in $out" >&2; exit 1; fi
lintian --fail-on error,warning --display-info --show-overrides "${changes[0]}"
debs=("$out"/*.deb)
echo "package: lintian clean: ${debs[*]##*/}"
rm -rf "$work"
