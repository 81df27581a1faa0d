#!/usr/bin/env bash
# scripts/lib/haltpoll-guest.sh's require_haltpoll_driver, on fake cpuidle directories: the scripts
# that write the real haltpoll parameters (eval-kernel.sh, record-calibration.sh) measure only a
# guest whose cpuidle driver is haltpoll. Usage: guest_check_test.sh SOURCE_DIR
set -euo pipefail
. "$1/scripts/lib/haltpoll-guest.sh"
work="$(mktemp -d /tmp/haltpolld-guest-check-XXXXXX)"
trap 'rm -rf "$work"' EXIT
fail() { echo "guest_check: FAILED: $*" >&2; exit 1; }

mkdir -p "$work/haltpoll" "$work/none" "$work/acpi" "$work/absent"
echo haltpoll > "$work/haltpoll/current_driver"
echo none > "$work/none/current_driver"
echo acpi_idle > "$work/acpi/current_driver"

require_haltpoll_driver "$work/haltpoll" who 2> "$work/err" || fail "refused a haltpoll guest: $(cat "$work/err")"
[ ! -s "$work/err" ] || fail "a haltpoll guest printed: $(cat "$work/err")"
for d in none acpi; do
  if require_haltpoll_driver "$work/$d" who 2> "$work/err"; then fail "accepted the driver of $d"; fi
  want="$(cat "$work/$d/current_driver")"
  grep -q "^who: the cpuidle driver is '$want', not haltpoll" "$work/err" || fail "$d: $(cat "$work/err")"
  grep -q "cpuidle_haltpoll.force=1" "$work/err" || fail "$d: no way to the driver named"
done
if require_haltpoll_driver "$work/absent" who 2> "$work/err"; then fail "accepted a directory without current_driver"; fi
grep -q "^who: $work/absent/current_driver is unreadable" "$work/err" || fail "absent: $(cat "$work/err")"
echo "guest_check: ok"
