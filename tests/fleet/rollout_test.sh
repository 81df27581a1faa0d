#!/usr/bin/env bash
# The rollout files of docs/operations.md: contrib/fleet/haltpolld.json passes the daemon's own
# --check-config, and the unit with contrib/systemd/haltpolld.service.d/fleet.conf beside it passes
# `systemd-analyze verify` with no complaint about the drop-in, which really replaces ExecStart.
# Usage: rollout_test.sh SOURCE_DIR HALTPOLLD_BIN
set -euo pipefail
src="$1"; bin="$2"
"$bin" --check-config --config "$src/contrib/fleet/haltpolld.json" >/dev/null
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd-analyze not installed: unit check skipped"; exit 77
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/haltpolld.service.d"
# verify wants ExecStart to exist: point it at the binary under test.
sed "s#/usr/sbin/haltpolld#$bin#" "$src/systemd/haltpolld.service" >"$dir/haltpolld.service"
sed "s#/usr/sbin/haltpolld#$bin#" "$src/contrib/systemd/haltpolld.service.d/fleet.conf" >"$dir/haltpolld.service.d/fleet.conf"
out="$(SYSTEMD_LOG_LEVEL=debug systemd-analyze verify --man=no "$dir/haltpolld.service" 2>&1)"
if grep -q 'fleet.conf:' <<<"$out"; then
  echo "$out" | grep 'fleet.conf:' >&2
  echo "FAIL: systemd-analyze complains about the drop-in" >&2; exit 1
fi
grep -q "DropIn Path: $dir/haltpolld.service.d/fleet.conf" <<<"$out" || { echo "FAIL: drop-in not loaded" >&2; exit 1; }
grep -q "Command Line: $bin --config /etc/haltpolld/haltpolld.json --foreground --mode kernel" <<<"$out" ||
  { echo "FAIL: the drop-in's ExecStart is not the one in force" >&2; exit 1; }
echo "PASS: fleet config and drop-in accepted"
