#!/bin/sh
# Checks a generated haltpolld.service (build tree or installed): `systemd-analyze verify` accepts it and
# `systemd-analyze security --offline=yes` scores it at most MAX (2.0 by default).
# Usage: systemd_unit_test.sh UNIT HALTPOLLD_BIN [MAX_SCORE_TIMES_10] [HALTPOLLCTL_BIN]
set -eu
unit="$1"; bin="$2"; max="${3:-20}"; ctl="${4:-$(dirname "$bin")/../ctl/haltpollctl}"
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "systemd-analyze not installed: skipped"; exit 77
fi
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
# verify wants ExecStart, ExecReload and ExecStopPost to exist: point them at the binaries under test (the unit
# names the configured directories, where nothing may be installed yet).
grep -q '^ExecStart=/[^ ]*/haltpolld ' "$unit" || { echo "no absolute ExecStart= in $unit" >&2; exit 1; }
sed -e "s#^ExecStart=/[^ ]*/haltpolld #ExecStart=$bin #" -e "s#^ExecReload=/[^ ]*/haltpollctl #ExecReload=$ctl #" \
    -e "s#^ExecStopPost=/[^ ]*/haltpolld #ExecStopPost=$bin #" "$unit" > "$dir/haltpolld.service"
systemd-analyze verify --man=no "$dir/haltpolld.service"
out="$(systemd-analyze security --offline=yes "$dir/haltpolld.service" 2>&1)" || true
echo "$out" | tail -1
# --threshold counts in tenths: exit status non-zero above it.
systemd-analyze security --offline=yes --threshold="$max" "$dir/haltpolld.service" >/dev/null 2>&1
echo "security score within $max/10"
