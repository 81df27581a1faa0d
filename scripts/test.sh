#!/usr/bin/env bash
# Installs what is missing, builds and runs the test suite of one preset (default: dev).
# Usage: scripts/test.sh [dev|release|asan|tsan|aarch64|aarch64-debug]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-dev}"
case "$preset" in
  aarch64|aarch64-debug) scripts/install-deps.sh --arm64 ;;
  *) scripts/install-deps.sh ;;
esac
jobs="$(nproc)"
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$jobs"
ctest --preset "$preset" -j "$jobs"
