#!/usr/bin/env bash
# Builds tests/varlink/go_client against the reference Go varlink library as Debian packages it
# (golang-github-varlink-go-dev under /usr/share/gocode: GOPATH mode, offline) and runs it against a
# real haltpolld on a fake haltpoll tree. Exit 77 (skipped) when go or the library is not installed.
# Usage: go_client_test.sh HALTPOLLD_BIN SOURCE_DIR WORK_DIR
set -euo pipefail
daemon="$1"; src="$2"; work="$3"
gocode=/usr/share/gocode
command -v go >/dev/null || { echo "skipped: go not installed (golang-go; scripts/install-deps.sh)"; exit 77; }
[ -d "$gocode/src/github.com/varlink/go/varlink" ] ||
  { echo "skipped: $gocode has no github.com/varlink/go (golang-github-varlink-go-dev; scripts/install-deps.sh)"; exit 77; }

mkdir -p "$work"
export GOPATH="$gocode" GO111MODULE=off GOFLAGS= GOCACHE="$work/gocache" GOPROXY=off CGO_ENABLED=0
go build -o "$work/go_client" "$src/tests/varlink/go_client/main.go"

tmp="$(mktemp -d)"
pid=""
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
python3 "$src/tests/fleet/fake_guest.py" "$tmp/root" --cpus 2 --init-only
cat >"$tmp/haltpolld.json" <<JSON
{"mode": "kernel", "sysfs_root": "$tmp/root", "state_dir": "$tmp/state",
 "socket": {"path": "$tmp/io.haltpolld"}, "probe": {"rate_hz": 0},
 "tuner": {"policy": "static", "interval_ms": 500}}
JSON
mkdir -p "$tmp/state"
"$daemon" --config "$tmp/haltpolld.json" --foreground --log-level warn >"$tmp/daemon.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$tmp/io.haltpolld" ] && break; sleep 0.1; done
[ -S "$tmp/io.haltpolld" ] || { echo "FAILED: haltpolld did not listen"; cat "$tmp/daemon.log"; exit 1; }
if ! "$work/go_client" "unix:$tmp/io.haltpolld"; then
  echo "--- haltpolld log"; cat "$tmp/daemon.log"; exit 1
fi
kill -0 "$pid" || { echo "FAILED: haltpolld exited during the run"; cat "$tmp/daemon.log"; exit 1; }
