# shellcheck shell=bash disable=SC2154  # $work, $root, $pid1, $params: the sourcing test's
# The Debian packages under a real systemd; sourced by tests/systemd/unit_in_systemd_test.sh
# --package DEBDIR once systemd runs in the namespace (it provides ns, show, param, wait_for,
# check_originals, tuned, check_reload, ok, fail, $work, $root, $pid1, $originals). The packages
# sit in the tree's /var/tmp/debs. The unit's own checks (watchdog, kill -9, admin group, eBPF) are the other mode's.
dpkg_ns() { ns env DEBIAN_FRONTEND=noninteractive dpkg "$@"; }
# The tree's paths of the packages matching PATTERN... (expanded here: ns runs no shell).
in_tree() { local p f; for p in "$@"; do for f in "$root"/var/tmp/debs/$p; do echo "${f#"$root"}"; done; done; }

# install: the maintainer scripts enable and start the service
mapfile -t debs < <(in_tree 'libhaltpoll0*_*.deb' 'haltpolld_*.deb')
dpkg_ns -i "${debs[@]}" >"$work/dpkg-install.log" 2>&1 ||
  { cat "$work/dpkg-install.log" >&2; fail "dpkg -i"; }
[ "$(ns systemctl is-enabled haltpolld 2>&1)" = enabled ] || fail "not enabled after install: $(ns systemctl is-enabled haltpolld 2>&1)"
wait_for 15 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- systemctl is-active haltpolld)\" = active ]" ||
  fail "not active after install: $(show ActiveState) $(show SubState) result $(show Result)"
ok "dpkg -i: haltpolld enabled and active (StatusText='$(show StatusText)')"
# shellcheck disable=SC2016  # dpkg-query's own field syntax
ns dpkg-query -W -f='${Conffiles}\n' haltpolld | grep -q /etc/haltpolld/haltpolld.json || fail "the configuration is not a conffile"
{ ns test -s /usr/share/haltpolld/prometheus/haltpolld.rules.yml && ns test -s /usr/share/haltpolld/grafana/haltpolld.json; } ||
  fail "the Prometheus rules or the Grafana dashboard are missing"

# the client answers on the default socket
status="$(ns haltpollctl status 2>&1)" || fail "haltpollctl status: $status"
ns test -S /run/haltpolld/io.haltpolld || fail "no socket /run/haltpolld/io.haltpolld"
ok "haltpollctl status answers on /run/haltpolld ($(echo "$status" | head -1))"

# a second instance by hand is refused by the lock
set +e
manual="$(ns timeout 20 haltpolld --config /etc/haltpolld/haltpolld.json --foreground 2>&1)"; rc=$?
set -e
{ [ "$rc" = 4 ] && echo "$manual" | grep -q "already running"; } || fail "haltpolld by hand while the service runs: exit $rc: $manual"
ok "haltpolld by hand is refused (exit 4): $(echo "$manual" | grep -m1 "already running")"

# a parameter write through the shipped unit's sandbox: the static policy at 12345 ns (restart-only keys)
ns sed -i -e 's/"policy": "balanced"/"policy": "static"/' -e 's/"guest_halt_poll_ns": 200000/"guest_halt_poll_ns": 12345/' \
  /etc/haltpolld/haltpolld.json
ns systemctl restart haltpolld || fail "systemctl restart"
wait_for 15 tuned || fail "the static policy did not write 12345 through the unit: $(ns haltpollctl status 2>&1 | head -20)"
ok "the shipped unit wrote guest_halt_poll_ns=12345 (ProtectSystem=strict, ReadWritePaths=)"

# reload applies a reloadable change
check_reload 1000 700

# upgrade to a newer build of the same files: restarted once, the edited conffile kept, tuning again
old_pid="$(show MainPID)"
up="$work/upgrade"
for deb in "$root"/var/tmp/debs/haltpolld_*.deb "$root"/var/tmp/debs/libhaltpoll0*_*.deb; do
  rm -rf "$up" && mkdir -p "$up"
  dpkg-deb -R "$deb" "$up/pkg"
  version="$(sed -n 's/^Version: //p' "$up/pkg/DEBIAN/control")"
  sed -i "s/^Version: .*/Version: $version+upgradetest/" "$up/pkg/DEBIAN/control"
  sed -i "s/(= $version)/(= $version+upgradetest)/" "$up/pkg/DEBIAN/control"
  name="$(sed -n 's/^Package: //p' "$up/pkg/DEBIAN/control")"
  dpkg-deb --root-owner-group -b "$up/pkg" "$root/var/tmp/debs/up-$name.deb" >/dev/null
done
mapfile -t debs < <(in_tree 'up-libhaltpoll0*.deb' up-haltpolld.deb)
dpkg_ns -i "${debs[@]}" >"$work/dpkg-upgrade.log" 2>&1 ||
  { cat "$work/dpkg-upgrade.log" >&2; fail "dpkg -i (upgrade)"; }
# shellcheck disable=SC2016  # dpkg-query's own field syntax
ns dpkg-query -W -f='${Version}' haltpolld | grep -q '+upgradetest$' || fail "the upgrade is not installed"
wait_for 15 sh -c "[ \"\$(nsenter --target $pid1 --mount --pid --root --wd=/ -- systemctl is-active haltpolld)\" = active ]" ||
  fail "not active after the upgrade: $(show ActiveState)"
[ "$(show MainPID)" != "$old_pid" ] || fail "the upgrade did not restart the daemon (pid $old_pid)"
ns grep -q '"guest_halt_poll_ns": 12345' /etc/haltpolld/haltpolld.json || fail "the upgrade replaced the edited conffile"
wait_for 15 tuned || fail "not tuning after the upgrade"
ok "upgrade: restarted (pid $old_pid -> $(show MainPID)), edited conffile kept, tuning again"

# TuneD next to haltpolld (not with the real parameters: TuneD would then act on the host)
if [ "${HALTPOLL_REAL_SYSFS:-}" != 1 ]; then
  # shellcheck source=tuned_checks.sh
  . "$(dirname "${BASH_SOURCE[0]}")/tuned_checks.sh"
fi

# purge: stopped, the originals back, the package's files and the runtime directory gone
dpkg_ns --purge haltpolld >"$work/dpkg-purge.log" 2>&1 || { cat "$work/dpkg-purge.log" >&2; fail "dpkg --purge"; }
check_originals "after purge"
for f in /usr/sbin/haltpolld /usr/bin/haltpollctl /lib/systemd/system/haltpolld.service /etc/haltpolld \
         /run/haltpolld /usr/share/haltpolld /etc/systemd/system/multi-user.target.wants/haltpolld.service; do
  ns test ! -e "$f" || fail "left after purge: $f"
done
[ "$(show LoadState)" = not-found ] || fail "the unit is still loaded after purge: $(show LoadState) $(show ActiveState)"
ok "purge: the five parameters are the originals again; binaries, unit, configuration, /run/haltpolld gone"
echo "PASS: the Debian packages install, run, reload, upgrade and purge under a real systemd"
