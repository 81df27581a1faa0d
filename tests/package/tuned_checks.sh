# shellcheck shell=bash disable=SC2154  # $pid1, $params: the sourcing test's
# Debian's real TuneD (tuned 2.20, its daemon under the namespace's systemd) next to the installed
# haltpolld; sourced by tests/package/package_checks.sh before the purge, with haltpolld running
# the static policy at 12345 ns. The haltpoll parameters are the fake tree mounted at
# /sys/module/haltpoll/parameters, where TuneD's sysfs plugin writes; the rest of /sys and
# /proc/sys are read-only in the namespace, so the host's own tunables are out of TuneD's reach.
# Checked: a profile setting guest_halt_poll_ns (as sap-hana-kvm-guest does) applied after and
# before haltpolld starts, and `tuned-adm off` while it runs: haltpolld writes nothing once the
# other value is in force, says who, and no value is lost; the shipped profile "haltpolld" starts
# haltpolld and lets it tune.
tadm() { ns timeout 60 tuned-adm "$@"; }
ctl_json() { ns haltpollctl --json "$@"; }
py() { ns python3 -c "$1"; }
other_writer_who() { ctl_json status | py 'import json,sys; w=json.load(sys.stdin)["other_writer"]; print(w["who"] if w else "")'; }
# The decisions haltpolld applied to the kernel after Unix time $1 (ms).
kernel_writes_since() {
  ctl_json decisions | py "import json,sys; print(sum(1 for d in json.load(sys.stdin)['decisions'] if d['time_ms'] > $1 and d.get('applied_kernel')))"
}
holds() {  # holds SECONDS VALUE: guest_halt_poll_ns stays VALUE that long
  local n=$(( $1 * 10 ))
  for _ in $(seq "$n"); do [ "$(param guest_halt_poll_ns)" = "$2" ] || return 1; sleep 0.1; done
}

ns test -s /usr/lib/tuned/haltpolld/tuned.conf || fail "the package has no TuneD profile haltpolld"
ns grep -q '^include=virtual-guest' /usr/lib/tuned/haltpolld/tuned.conf || fail "the profile haltpolld does not include virtual-guest"
! ns grep -Eq 'haltpoll/parameters|^[^#]*guest_halt_poll' /usr/lib/tuned/haltpolld/tuned.conf || fail "the profile haltpolld names a haltpoll parameter"
ns systemctl start tuned || fail "systemctl start tuned: $(ns journalctl --no-pager -u tuned -n 20)"
# "No current active profile." (exit 1: none is active yet) once the daemon answers on D-Bus.
wait_for 60 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- timeout 20 tuned-adm active 2>&1 | grep -q 'active profile'" ||
  fail "tuned-adm does not reach the TuneD daemon: $(ns timeout 20 tuned-adm active 2>&1); $(ns systemctl status --no-pager tuned 2>&1 | tail -20); $(ns tail -20 /var/log/tuned/tuned.log 2>&1)"
tadm list | grep -q -- '- haltpolld' || fail "tuned-adm list does not show haltpolld"
# shellcheck disable=SC2016  # dpkg-query's own field syntax
ok "TuneD $(ns dpkg-query -W -f='${Version}' tuned) runs; tuned-adm lists the profile haltpolld"
ns mkdir -p /etc/tuned/haltpoll-test
ns sh -c 'printf "[main]\nsummary=sets guest_halt_poll_ns as sap-hana-kvm-guest does\n\n[sysfs]\n/sys/module/haltpoll/parameters/guest_halt_poll_ns=2400000\n" > /etc/tuned/haltpoll-test/tuned.conf'

# 1. The profile applied while haltpolld tunes: haltpolld yields, says who, writes nothing more.
wait_for 15 tuned || fail "haltpolld is not tuning before TuneD's profile"
tadm profile haltpoll-test || fail "tuned-adm profile haltpoll-test"
wait_for 30 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- cat $params/guest_halt_poll_ns)\" = 2400000 ]" ||
  fail "TuneD did not write guest_halt_poll_ns: $(param guest_halt_poll_ns)"
wait_for 15 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- haltpollctl status | grep -q '^writer: .*TuneD'" ||
  fail "haltpolld did not see TuneD: $(ns haltpollctl status 2>&1)"
who="$(other_writer_who)"
case "$who" in *"'haltpoll-test'"*) ;; *) fail "other_writer.who does not name the profile: $who" ;; esac
since="$(ctl_json status | py 'import json,sys; print(json.load(sys.stdin)["other_writer"]["since_unix_ms"])')"
[ "$(ctl_json status | py 'import json,sys; print(json.load(sys.stdin)["mode"])')" = observe ] || fail "not observe with another writer"
# The metrics are rendered from the tick's snapshot: within a few ticks of the status line.
wait_for 10 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- haltpollctl metrics | grep -q '^haltpoll_other_writer{parameter=\"guest_halt_poll_ns\"} 1\$'" ||
  fail "no haltpoll_other_writer metric: $(ns haltpollctl metrics 2>&1 | grep -E 'other_writer|^haltpoll_up' | head -5)"
holds 5 2400000 || fail "guest_halt_poll_ns changed under TuneD's profile: $(param guest_halt_poll_ns)"
[ "$(kernel_writes_since "$since")" = 0 ] || fail "haltpolld wrote the kernel after TuneD's value appeared"
ok "TuneD after haltpolld: guest_halt_poll_ns=2400000 kept 5 s, haltpolld observes and names it ($who)"

# 2. tuned-adm off while haltpolld runs: TuneD puts back what it found (haltpolld's 12345); haltpolld
# still writes nothing until told, and its stop then puts back the original.
tadm off || fail "tuned-adm off"
wait_for 30 tuned || fail "tuned-adm off did not put back 12345: $(param guest_halt_poll_ns)"
holds 3 12345 || fail "guest_halt_poll_ns changed after tuned-adm off: $(param guest_halt_poll_ns)"
[ "$(kernel_writes_since "$since")" = 0 ] || fail "haltpolld wrote the kernel after tuned-adm off"
ns haltpollctl take-over >/dev/null || fail "haltpollctl take-over"
[ "$(ctl_json status | py 'import json,sys; print(json.load(sys.stdin)["mode"])')" = kernel ] || fail "not kernel mode after take-over"
ns systemctl stop haltpolld
check_originals "TuneD on and off while haltpolld ran, then a stop"
ok "tuned-adm off while haltpolld ran: TuneD put back 12345, no write by haltpolld; after take-over and stop the originals are back"

# 3. The profile applied before haltpolld starts: haltpolld starts yielded, TuneD's off restores.
tadm profile haltpoll-test || fail "tuned-adm profile haltpoll-test (haltpolld stopped)"
wait_for 30 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- cat $params/guest_halt_poll_ns)\" = 2400000 ]" ||
  fail "TuneD did not write guest_halt_poll_ns before haltpolld: $(param guest_halt_poll_ns)"
ns systemctl start haltpolld || fail "systemctl start haltpolld under TuneD's profile"
wait_for 15 sh -c "nsenter --target $pid1 --mount --pid --root --wd=/ -- haltpollctl status | grep -q '^writer: .*owns guest_halt_poll_ns (2400000): TuneD'" ||
  fail "haltpolld started under TuneD's profile did not yield: $(ns haltpollctl status 2>&1)"
holds 5 2400000 || fail "haltpolld changed TuneD's value at start: $(param guest_halt_poll_ns)"
tadm off || fail "tuned-adm off (second)"
wait_for 30 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- cat $params/guest_halt_poll_ns)\" = 200000 ]" ||
  fail "tuned-adm off did not put back 200000: $(param guest_halt_poll_ns)"
ns systemctl stop haltpolld
check_originals "TuneD's profile before haltpolld, tuned-adm off, stop"
ok "TuneD before haltpolld: haltpolld started observing (TuneD owns guest_halt_poll_ns), tuned-adm off restored, nothing lost"

# 4. The shipped profile hands the parameters to haltpolld: TuneD starts it and it tunes.
tadm profile haltpolld || fail "tuned-adm profile haltpolld"
wait_for 30 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- systemctl is-active haltpolld)\" = active ]" ||
  fail "the profile haltpolld did not start haltpolld: $(show ActiveState)"
wait_for 15 tuned || fail "haltpolld started by TuneD does not tune: $(ns haltpollctl status 2>&1 | head -20)"
[ -z "$(other_writer_who)" ] || fail "haltpolld sees another writer under the profile haltpolld: $(other_writer_who)"
ok "tuned-adm profile haltpolld: TuneD started haltpolld, which tunes (guest_halt_poll_ns=12345), no other writer"
tadm off || fail "tuned-adm off (third)"
ns systemctl stop tuned
ns systemctl start haltpolld || fail "systemctl start haltpolld after TuneD"
wait_for 15 tuned || fail "haltpolld not tuning after TuneD stopped"
