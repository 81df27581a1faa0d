#!/usr/bin/env bash
# Installs what is missing, builds (release preset) and runs haltpolld in the foreground on the
# shipped default config, in observe mode, with its socket in a user-writable directory.
# Extra arguments go to haltpolld. Stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target haltpolld haltpollctl
rundir="${XDG_RUNTIME_DIR:-/tmp/haltpolld-$(id -u)}"
mkdir -p "$rundir"
echo "haltpolld: socket $rundir/io.haltpolld — try: build/release/src/ctl/haltpollctl -s $rundir/io.haltpolld status" >&2
exec build/release/src/daemon/haltpolld --config config/haltpolld.json --foreground --mode observe \
  --socket "$rundir/io.haltpolld" "$@"
