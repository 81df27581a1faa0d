#!/usr/bin/env bash
# Installs what is missing, builds and runs the test suite of one preset (default: dev).
# Usage: scripts/test.sh [dev|release|asan|tsan|aarch64|aarch64-debug|guest-kinds|arm64-vm]
#   guest-kinds: the dev build's bpf, sysfs and daemon tests once per kind of guest the daemon tells
#   apart, the daemon's fake tree shaped like each (HALTPOLLD_TEST_GUEST=bare|haltpoll|none); the
#   tests on the real kernel assert what holds for this machine's kind, printed first.
#   arm64-vm: the arm64 packages (scripts/package.sh --arch arm64) installed by dpkg in an arm64
#   Debian guest booted under qemu-system-aarch64, with the library's tests (tests/arm64vm; not a
#   CI leg: minutes with the cached image and packages, about an hour to build the image the first
#   time, see the README).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-dev}"
# dev (the README's test command) also installs the evaluation's applications (--eval, none of
# their services started or left enabled), so that ctest's eval_smoke runs scripts/eval-kernel.sh
# with every load and application on every machine instead of skipping without them.
case "$preset" in
  aarch64|aarch64-debug) scripts/install-deps.sh --arm64 ;;
  arm64-vm) scripts/install-deps.sh --arm64-vm ;;
  dev) scripts/install-deps.sh --eval ;;
  *) scripts/install-deps.sh ;;
esac
jobs="$(nproc)"
driver="$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo 'none (no cpuidle directory)')"
echo "this machine's cpuidle driver: ${driver}"
if [[ "$preset" == guest-kinds ]]; then
  cmake --preset dev >/dev/null
  cmake --build --preset dev -j "$jobs"
  for kind in bare haltpoll none; do
    echo "=== daemon, sysfs and bpf tests on a fake tree shaped like: ${kind}"
    HALTPOLLD_TEST_GUEST="$kind" ctest --preset dev -j "$jobs" -L 'daemon|bpf'
  done
  exit 0
fi
if [[ "$preset" == arm64-vm ]]; then
  cmake --preset aarch64-vm >/dev/null
  cmake --build --preset aarch64-vm -j "$jobs" --target test_barrier test_parker \
    test_parking_queue test_governor test_worker_pool test_hazard test_snapshot test_latency_histogram test_version
  # The daemon and the client as operators get them: the arm64 packages, installed by dpkg in the guest.
  scripts/package.sh --arch arm64 out/deb-arm64
  exec tests/arm64vm/arm64_vm_test.sh build/aarch64-vm out/deb-arm64
fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset" -j "$jobs"
