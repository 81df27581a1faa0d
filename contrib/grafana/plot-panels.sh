#!/usr/bin/env bash
# Draws the Grafana dashboard's main panels (contrib/grafana/haltpolld.json) as one PNG, from a real
# Prometheus run: three fake guests (tests/fleet/fake_guest.py) with haltpolld in kernel mode on
# their fake trees, one node_exporter each, Prometheus scraping every second with the rules
# shortened as in tests/fleet/prometheus_test.sh (windows / 60). The panels' own PromQL is read
# from the dashboard and run as range queries; gnuplot (Debian: gnuplot-nox) draws them.
#   waste: a 150 us timer at a static guest_halt_poll_ns of 200000 (fires HaltpollPollingDoesNotPay);
#   pays:  a pipe ping-pong at 200000;
#   tuned: the same timer, static 200000 for the first third of the run, then the budget tuner,
#          which it follows (fake_guest.py --profile timer reads the value the daemon writes).
# Usage: contrib/grafana/plot-panels.sh BUILD_DIR OUTPUT.png [SECONDS]   (default 90 s)
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:?build dir, e.g. build/dev}" && pwd)"
out="${2:?output PNG}"
run_s="${3:-90}"
export HALTPOLLD="$build/src/daemon/haltpolld" HALTPOLLCTL="$build/src/ctl/haltpollctl"
NODE_EXPORTER="$(command -v prometheus-node-exporter || true)" PROMETHEUS="$(command -v prometheus || true)"
PYTHON3="$(command -v python3)"
export NODE_EXPORTER PROMETHEUS PYTHON3
command -v gnuplot >/dev/null || { echo "plot-panels: needs gnuplot (scripts/install-deps.sh --extra)" >&2; exit 1; }
. "$src/tests/fleet/fleet_lib.sh"
fleet_setup
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

start_guest waste --profile wasteful --cpus 2 --step 0.2 -- '{"tuner":{"interval_ms":250}}'
start_guest pays --profile paying --cpus 2 --step 0.2 -- '{"tuner":{"interval_ms":250}}'
start_guest tuned --profile timer --cpus 2 --step 0.2 -- '{"tuner":{"interval_ms":250}}'
declare -A port
for g in waste pays tuned; do
  start_node_exporter "$FLEET_TMP/$g/textfile"
  port[$g]=$EXPORTER_PORT
done
sed -E 's/\[([0-9]+)m\]/[\1s]/g; s/\[([0-9]+)h\]/[\1m]/g; s/offset ([0-9]+)m/offset \1s/g; s/for: ([0-9]+)m/for: \1s/g' \
  "$src/contrib/prometheus/haltpolld.rules.yml" >"$FLEET_TMP/rules.yml"
cat >"$FLEET_TMP/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$FLEET_TMP/rules.yml"]
scrape_configs:
  - job_name: node
    static_configs:
      - {targets: ["127.0.0.1:${port[waste]}"], labels: {guest: waste}}
      - {targets: ["127.0.0.1:${port[pays]}"], labels: {guest: pays}}
      - {targets: ["127.0.0.1:${port[tuned]}"], labels: {guest: tuned}}
EOF
start_prometheus "$FLEET_TMP/prometheus.yml"
start_ts="$(date +%s)"
echo "plot-panels: running ${run_s} s (prometheus on 127.0.0.1:$PROM_PORT)" >&2
sleep $((run_s / 3))
"$HALTPOLLCTL" --socket "$FLEET_TMP/tuned/io.haltpolld" config set tuner.policy '"budget"' >/dev/null
sleep $((run_s - run_s / 3))
end_ts="$(date +%s)"

# Range queries of the dashboard's panels; one data file per series ("t value" lines).
"$PYTHON3" - "$src/contrib/grafana/haltpolld.json" "http://127.0.0.1:$PROM_PORT" "$start_ts" "$end_ts" \
  "127.0.0.1:${port[tuned]}" "$FLEET_TMP/dat" <<'PY'
import json, os, sys, urllib.parse, urllib.request
dash, url, start, end, tuned, outdir = sys.argv[1:]
os.makedirs(outdir)
panels = {p["title"]: p for p in json.load(open(dash))["panels"]}
def expr(title, i=0):
    e = panels[title]["targets"][i]["expr"]
    # As Grafana would send them here, with the rules' windows shortened the same way.
    return e.replace("$__rate_interval", "5s").replace("[1m]", "[5s]").replace("$instance", tuned)
want = {
    "fleet_poll": (expr("Poll CPU per guest"), "guest"),
    "fleet_per_wake": (expr("Poll time per wake-up per guest"), "guest"),
    "cpu_poll": (expr("Poll CPU per CPU"), "cpu"),
    "wakes": (expr("Wake-ups, poll hits and halts per CPU", 0), "cpu"),
    "halts": (expr("Wake-ups, poll hits and halts per CPU", 2), "cpu"),
    "value": (expr("Tuner value and poll limit", 0), None),
    "decisions": (json.load(open(dash))["annotations"]["list"][0]["expr"]
                  .replace("[1m]", "[5s]").replace("$instance", tuned), "action"),
    "alerts": ('count(ALERTS{alertstate="firing",alertname="HaltpollPollingDoesNotPay"})', None),
}
for name, (q, label) in want.items():
    args = urllib.parse.urlencode({"query": q, "start": start, "end": end, "step": "1"})
    body = json.load(urllib.request.urlopen(url + "/api/v1/query_range?" + args, timeout=30))
    for r in body["data"]["result"]:
        key = r["metric"].get(label, "all") if label else "all"
        with open("%s/%s.%s" % (outdir, name, key), "w") as f:
            for t, v in r["values"]:
                f.write("%d %s\n" % (int(t) - int(start), v))
PY

d="$FLEET_TMP/dat"
series() {  # series NAME SCALE TITLE_PREFIX: a gnuplot "plot" list over the files of NAME
  local name="$1" scale="$2" prefix="$3" f key list=""
  for f in "$d/$name".*; do
    [ -f "$f" ] || continue
    key="${f##*.}"
    [ "$key" = all ] && key=""
    list+="${list:+, }'$f' using 1:(\$2*$scale) with lines lw 2 title '$prefix$key'"
  done
  echo "${list:-NaN title 'no data'}"
}
switch=$((run_s / 3))
gnuplot <<EOF
set terminal pngcairo size 1400,1050 font "sans,10" noenhanced
set output "$out"
set multiplot layout 3,2 title "haltpolld dashboard panels from a real Prometheus run (fake guests, ${run_s} s, windows /60)"
set grid
set key top right
set xlabel "seconds"
set xrange [0:$run_s]
set yrange [0:*]
set arrow 1 from $switch, graph 0 to $switch, graph 1 nohead dt 2 lc rgb "gray"
set title "Fleet: poll CPU per guest (instance:haltpoll_poll_cpu:ratio_rate5m)"
set ylabel "% of each CPU"
plot $(series fleet_poll 100 "")
set title "Fleet: poll time per wake-up (instance:haltpoll_poll_seconds_per_wake:rate5m)"
set ylabel "us per wake-up"
set yrange [0.001:1000]
set logscale y
plot $(series fleet_per_wake 1e6 ""), 20 with lines dt 3 lc rgb "black" title "halt-exit penalty (20 us)"
unset logscale y
set yrange [0:*]
set title "Guest 'tuned': poll CPU per CPU"
set ylabel "% of the CPU"
plot $(series cpu_poll 100 "cpu ")
set title "Guest 'tuned': wake-ups and halts per CPU"
set ylabel "per second"
set key bottom right
plot $(series wakes 1 "wake-ups cpu "), $(series halts 1 "halts cpu ")
set title "Guest 'tuned': guest_halt_poll_ns in force, tuner decisions (impulses)"
set ylabel "us"
set y2label "decisions in 5 s"
set y2tics
plot $(series value 1e6 "guest_halt_poll_ns"), $(series decisions 1 "decision: " | sed 's/with lines lw 2/axes x1y2 with impulses lw 3/g')
unset y2tics
unset y2label
set key top right
set title "Guests with HaltpollPollingDoesNotPay firing (for: 15 s in this run)"
set ylabel "guests"
set yrange [0:3]
plot $(series alerts 1 "waste, and tuned until tuned")
unset multiplot
EOF
echo "plot-panels: wrote $out" >&2
