#!/usr/bin/env bash
# Installs what is missing, builds (release preset) and runs haltpolld in the foreground on the
# shipped default config, in observe mode, with its socket in a user-writable directory.
# Extra arguments go to haltpolld. Stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target haltpolld haltpollctl
# The socket, lock and state file live in a directory only this user can write: the daemon trusts
# its state file only there, and a predictable /tmp name could be planted by another user first.
if [ -n "${XDG_RUNTIME_DIR:-}" ] && [ -d "$XDG_RUNTIME_DIR" ] && [ -O "$XDG_RUNTIME_DIR" ]; then
  rundir="$XDG_RUNTIME_DIR/haltpolld"
  [ -e "$rundir" ] || mkdir -m 0700 "$rundir"
  if [ ! -O "$rundir" ] || [ -L "$rundir" ]; then
    echo "run.sh: $rundir is not a directory of $(id -un); refusing" >&2
    exit 1
  fi
  chmod 0700 "$rundir"
else
  rundir="$(mktemp -d "${TMPDIR:-/tmp}/haltpolld.XXXXXXXX")"
fi
echo "haltpolld: socket $rundir/io.haltpolld — try: build/release/src/ctl/haltpollctl -s $rundir/io.haltpolld status" >&2
exec build/release/src/daemon/haltpolld --config config/haltpolld.json --foreground --mode observe \
  --socket "$rundir/io.haltpolld" "$@"
