#!/usr/bin/env bash
# Builds tests/varlink/go/client.go against the reference Go varlink library as Debian packages it
# (golang-github-varlink-go-dev under /usr/share/gocode: GOPATH mode, offline) and runs it against a
# real haltpolld on a fake haltpoll tree. Exit 77 (skipped) when go or the library is not installed.
# Usage: go_client_test.sh HALTPOLLD_BIN SOURCE_DIR WORK_DIR
set -euo pipefail
daemon="$1"; src="$2"; work="$3"
# shellcheck source=tests/varlink/go_reference.sh
source "$src/tests/varlink/go_reference.sh"
go_reference_env "$work"
go_reference_build "$work" go_client client.go

python3 "$src/tests/fleet/fake_guest.py" "$tmp/root" --cpus 2 --init-only
cat >"$tmp/haltpolld.json" <<JSON
{"mode": "kernel", "sysfs_root": "$tmp/root", "state_dir": "$tmp/state",
 "socket": {"path": "$tmp/io.haltpolld"}, "probe": {"rate_hz": 0},
 "tuner": {"policy": "static", "interval_ms": 500}}
JSON
mkdir -p "$tmp/state"
"$daemon" --config "$tmp/haltpolld.json" --foreground --log-level warn >"$tmp/daemon.log" 2>&1 &
pid=$!
wait_for_socket "$tmp/io.haltpolld" "$pid" "$tmp/daemon.log"
if ! "$work/go_client" "unix:$tmp/io.haltpolld"; then
  echo "--- haltpolld log"; cat "$tmp/daemon.log"; exit 1
fi
kill -0 "$pid" || { echo "FAILED: haltpolld exited during the run"; cat "$tmp/daemon.log"; exit 1; }
