#!/usr/bin/env bash
# The textfile path end to end: haltpolld (umask 0077, as under the unit) on a fake guest whose
# cpuidle counters advance writes its textfile; Debian's prometheus-node-exporter, running as its
# own unprivileged user with only the textfile collector, serves it on a loopback port; the scrape
# must carry every haltpoll_* family with the daemon's types and labels, pass `promtool check
# metrics`, and show the counters advancing. A root-only file in the same directory must make the
# exporter report a read error, which shows that the exporter really reads as another user.
set -euo pipefail
# shellcheck source=tests/fleet/fleet_lib.sh
. "$(dirname "$0")/fleet_lib.sh"
fleet_setup

start_guest g1 --profile wasteful --cpus 2 --step 0.2 --cpu-dma-latency 0 --qos-holder 4242:cyclictest
prom="$FLEET_TMP/g1/textfile/haltpolld.prom"
mode="$(stat -c %a "$prom")"
[ "$mode" = 644 ] || fail "textfile mode is $mode, want 644"

start_node_exporter "$FLEET_TMP/g1/textfile"
url="http://127.0.0.1:$EXPORTER_PORT/metrics"
user="$(exporter_user)"
echo "node_exporter on 127.0.0.1:$EXPORTER_PORT as ${user:-$(id -un)}"

scrape1="$FLEET_TMP/scrape1.txt"
curl -sf "$url" >"$scrape1" || fail "scrape failed"
grep -qx 'node_textfile_scrape_error 0' "$scrape1" || fail "the exporter could not read the textfile: $(grep textfile_scrape "$scrape1")"

# Every haltpoll_ family of the file reaches the scrape with the same TYPE.
grep '^# TYPE haltpoll_' "$prom" | sort >"$FLEET_TMP/types.file"
grep '^# TYPE haltpoll_' "$scrape1" | sort >"$FLEET_TMP/types.scrape"
[ -s "$FLEET_TMP/types.file" ] || fail "no haltpoll_ families in the textfile"
diff -u "$FLEET_TMP/types.file" "$FLEET_TMP/types.scrape" >&2 || fail "families or types differ between file and scrape"

expect() {  # expect REGEX: a sample line of the scrape matches
  grep -Eq "$1" "$scrape1" || fail "no line matching /$1/ in the scrape"
}
# The exporter re-formats numbers (Go's shortest float form), so values are matched loosely.
num='[0-9]+(\.[0-9]+)?(e[+-][0-9]+)?'
for m in idle_entries poll_entries halts poll_seconds halt_seconds; do
  for cpu in 0 1; do expect "^haltpoll_kernel_${m}_total\{cpu=\"$cpu\"\} $num$"; done
done
grep -q '^# TYPE haltpoll_kernel_poll_seconds_total counter$' "$scrape1" || fail "poll seconds not a counter"
grep -q '^# TYPE haltpoll_kernel_mode_info gauge$' "$scrape1" || fail "mode_info not a gauge"
grep -q '^# TYPE haltpoll_tuner_decisions_total counter$' "$scrape1" || fail "decisions not a counter"
expect '^haltpoll_kernel_mode_info\{mode="kernel",reason=""\} 1$'
expect '^haltpoll_kernel_mode 1$'
expect '^haltpoll_state_file_pending 0$'
expect '^haltpoll_tuner_info\{policy="static"\} 1$'
for a in hold grow shrink set revert; do expect "^haltpoll_tuner_decisions_total\{action=\"$a\"\} $num$"; done
expect '^haltpoll_kernel_guest_halt_poll_seconds 0\.0002$'
expect "^haltpoll_steal_seconds_total $num$"
# A process holds the fake tree's /dev/cpu_dma_latency at 0: both CPUs poll without limit.
for cpu in 0 1; do expect "^haltpoll_polling_override\{cpu=\"$cpu\",reason=\"cpu_dma_latency\"\} 1$"; done
expect '^haltpoll_polling_unlimited_cpus 2$'
expect '^haltpoll_cpuidle_governor_info\{governor="haltpoll"\} 1$'
grep -q '^# TYPE haltpoll_polling_override gauge$' "$scrape1" || fail "polling_override not a gauge"
expect '^haltpoll_tuner_steal_backoff_ratio 0\.1$'

# The exposition as the exporter serves it lints clean.
grep -E '^(# (HELP|TYPE) )?haltpoll_' "$scrape1" >"$FLEET_TMP/haltpoll.scrape"
lint="$("$PROMTOOL" check metrics <"$FLEET_TMP/haltpoll.scrape" 2>&1)" || fail "promtool check metrics: $lint"
[ -z "$lint" ] || fail "promtool check metrics findings: $lint"

# The socket's GetMetrics serves the same families as the file.
if [ -n "${HALTPOLLCTL:-}" ]; then
  "$HALTPOLLCTL" --socket "$FLEET_TMP/g1/io.haltpolld" metrics | grep '^# TYPE haltpoll_' | sort >"$FLEET_TMP/types.socket"
  diff -u "$FLEET_TMP/types.file" "$FLEET_TMP/types.socket" >&2 || fail "GetMetrics and the textfile differ in families"
fi

# The counters advance between scrapes (the daemon re-reads the tree every tick). Scraped again
# until they have, for up to 30 s: a fixed 1.5 s (three 500 ms ticks) is not much on a loaded machine.
value() { grep -E "^$1 " "$2" | awk '{print $2}'; }
before="$(value 'haltpoll_kernel_poll_entries_total\{cpu="0"\}' "$scrape1")"
ticks_before="$(value 'haltpoll_tuner_ticks_total' "$scrape1")"
scrape2="$FLEET_TMP/scrape2.txt"
advanced() {
  curl -sf "$url" >"$scrape2" || fail "second scrape failed"
  after="$(value 'haltpoll_kernel_poll_entries_total\{cpu="0"\}' "$scrape2")"
  ticks_after="$(value 'haltpoll_tuner_ticks_total' "$scrape2")"
  awk -v a="$after" -v b="$before" -v ta="$ticks_after" -v tb="$ticks_before" 'BEGIN { exit !(a > b && ta > tb) }'
}
deadline=$((SECONDS + 30))
until advanced; do
  [ "$SECONDS" -lt "$deadline" ] || fail "counters did not advance in 30 s: poll entries $before -> $after, tuner ticks $ticks_before -> $ticks_after"
  sleep 0.5
done

# A file only root can read is an error for the exporter's user: the check above was real.
if [ -n "$user" ]; then
  secret="$FLEET_TMP/g1/textfile/root-only.prom"
  (umask 0077; echo 'root_only_metric 1' >"$secret")
  curl -sf "$url" >"$FLEET_TMP/scrape3.txt" || fail "third scrape failed"
  grep -qx 'node_textfile_scrape_error 1' "$FLEET_TMP/scrape3.txt" || fail "exporter read a 0600 root file: not running as $user?"
  rm -f "$secret"
else
  echo "not root: the exporter runs as this user, so the other-user read check is skipped"
fi
echo "PASS: $(grep -c '^haltpoll_' "$scrape1") haltpoll_ samples scraped through node_exporter $( "$NODE_EXPORTER" --version 2>&1 | head -1 | awk '{print $3}')"
