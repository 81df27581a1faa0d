#!/usr/bin/env bash
# Kernel-mode evaluation (docs/tuning.md, docs/performance.md "Kernel mode").
#
# Runs the evaluation loads on this guest with guest_halt_poll_ns = 0, 50000 and 200000 (the REAL
# /sys/module/haltpoll/parameters, restored on exit by a trap), the closed-loop tuner simulation,
# the daemon on the idle guest (its own CPU, the tuner's decisions), the restore-after-SIGKILL
# integration test on the real files, and draws a PNG with gnuplot.
#
# Usage: scripts/eval-kernel.sh [build_dir] [out_dir]
#   build_dir  a configured and built tree with bench_load_{pipe,timer,poisson}, bench_tuner_sim,
#              haltpolld and test_actuator (default build/release)
#   out_dir    where results go (default <build_dir>/eval-kernel)
# Env: ROUNDS (default 3), PIPE_LOOPS (100000), LOAD_SECONDS (3), IDLE_SECONDS (60).
# Needs root (it writes sysfs), perf (linux-perf) for `perf bench sched pipe` if available, gnuplot.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build/release}"
OUT="${2:-$BUILD/eval-kernel}"
ROUNDS="${ROUNDS:-3}"
PIPE_LOOPS="${PIPE_LOOPS:-100000}"
LOAD_SECONDS="${LOAD_SECONDS:-3}"
IDLE_SECONDS="${IDLE_SECONDS:-60}"
P=/sys/module/haltpoll/parameters
NAMES=(guest_halt_poll_ns guest_halt_poll_grow guest_halt_poll_grow_start guest_halt_poll_shrink
       guest_halt_poll_allow_shrink)
# The values this guest must be left with (the kernel defaults).
declare -A DOC=([guest_halt_poll_ns]=200000 [guest_halt_poll_grow]=2 [guest_halt_poll_grow_start]=50000
                [guest_halt_poll_shrink]=2 [guest_halt_poll_allow_shrink]=Y)

[ "$(id -u)" = 0 ] || { echo "eval-kernel: needs root (writes $P)" >&2; exit 1; }
[ -d "$P" ] || { echo "eval-kernel: $P does not exist" >&2; exit 1; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
for n in "${NAMES[@]}"; do
  v="$(cat "$P/$n")"
  [ "$v" = "${DOC[$n]}" ] || echo "eval-kernel: warning: $n is $v before the run (restoring to ${DOC[$n]} at exit)" >&2
done

DAEMON_PID=""
TMP="$(mktemp -d /tmp/haltpolld-eval-XXXXXX)"
restore() {
  local rc=$?
  [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null || true
  for n in "${NAMES[@]}"; do echo "${DOC[$n]}" > "$P/$n" || true; done
  local bad=0
  for n in "${NAMES[@]}"; do
    if [ "$(cat "$P/$n")" != "${DOC[$n]}" ]; then echo "eval-kernel: $n NOT restored" >&2; bad=1; fi
  done
  [ $bad = 0 ] && echo "eval-kernel: haltpoll parameters restored: $(for n in "${NAMES[@]}"; do printf '%s=%s ' "$n" "$(cat "$P/$n")"; done)" >&2
  rm -rf "$TMP"
  exit $rc
}
trap restore EXIT INT TERM

B="$BUILD/bench"
for bin in "$B/bench_load_pipe" "$B/bench_load_timer" "$B/bench_load_poisson"; do
  [ -x "$bin" ] || { echo "eval-kernel: $bin missing; build the bench targets first" >&2; exit 1; }
done

# ---- environment ----
CPUIDLE=/sys/devices/system/cpu/cpuidle
{
  echo "{\"kernel\":\"$(uname -r)\",\"cpus\":$(nproc),"
  echo "\"cpuidle_driver\":\"$(cat $CPUIDLE/current_driver 2>/dev/null || echo unreadable)\","
  echo "\"cpuidle_governor\":\"$(cat $CPUIDLE/current_governor 2>/dev/null || cat $CPUIDLE/current_governor_ro 2>/dev/null || echo unreadable)\","
  echo "\"cpuidle_states_cpu0\":$( [ -d /sys/devices/system/cpu/cpu0/cpuidle ] && echo true || echo false),"
  echo "\"perf\":$(command -v perf >/dev/null && perf bench sched pipe -l 10 >/dev/null 2>&1 && echo true || echo false),"
  echo "\"cpu_model\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\","
  echo "\"date\":\"$(date -u +%FT%TZ)\"}"
} > "$OUT/env.json"
echo "eval-kernel: $(tr -d '\n' < "$OUT/env.json")" >&2
HAVE_POLL_CPU=0
[ -d /sys/devices/system/cpu/cpu0/cpuidle ] && HAVE_POLL_CPU=1

# Total POLL-state time of all CPUs in µs (0 when there are no cpuidle states).
poll_us() {
  local sum=0 d
  for d in /sys/devices/system/cpu/cpu[0-9]*/cpuidle/state*; do
    [ -f "$d/name" ] || continue
    [ "$(cat "$d/name")" = POLL ] && sum=$((sum + $(cat "$d/time")))
  done
  echo $sum
}
# Busy jiffies (everything but idle and iowait) over all CPUs, from /proc/stat.
busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
now_ns() { date +%s%N; }

# run_load <setting> <round> <name> <command...>: one JSON line with the load's output and the poll
# CPU (% of one CPU, summed over CPUs; null without cpuidle states) and system busy share around it.
run_load() {
  local setting=$1 round=$2 name=$3; shift 3
  local p0 b0 t0 out p1 b1 t1
  p0=$(poll_us); b0=$(busy_jiffies); t0=$(now_ns)
  out="$("$@" 2>/dev/null | tail -n 5)"
  p1=$(poll_us); b1=$(busy_jiffies); t1=$(now_ns)
  python3 - "$setting" "$round" "$name" "$out" "$p0" "$p1" "$b0" "$b1" "$t0" "$t1" "$HAVE_POLL_CPU" "$(nproc)" <<'PY'
import json, re, sys
setting, rnd, name, out, p0, p1, b0, b1, t0, t1, have, ncpu = sys.argv[1:]
secs = (int(t1) - int(t0)) / 1e9
row = {"setting": setting, "round": int(rnd), "load": name, "seconds": round(secs, 3)}
if name == "perf_pipe":
    m = re.search(r"([0-9.]+) usecs/op", out)
    row["us_per_op"] = float(m.group(1)) if m else None
else:
    row.update(json.loads(out.strip().splitlines()[-1]))
row["poll_cpu_percent"] = (int(p1) - int(p0)) / 1e4 / secs if have == "1" else None
row["system_busy_percent_of_all_cpus"] = round((int(b1) - int(b0)) / 100.0 / secs / int(ncpu) * 100, 1)
print(json.dumps(row))
PY
}

# ---- loads × settings, interleaved rounds so that drift on the shared host hits every setting ----
: > "$OUT/loads.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for ns in 0 50000 200000; do
    echo "$ns" > "$P/guest_halt_poll_ns"
    s="static_$ns"
    echo "eval-kernel: round $round, guest_halt_poll_ns=$ns" >&2
    if command -v perf >/dev/null; then
      run_load "$s" "$round" perf_pipe perf bench sched pipe -l "$PIPE_LOOPS" >> "$OUT/loads.jsonl" || true
    fi
    run_load "$s" "$round" load_pipe "$B/bench_load_pipe" -l "$PIPE_LOOPS" >> "$OUT/loads.jsonl"
    run_load "$s" "$round" load_timer "$B/bench_load_timer" -p 150 -d "$LOAD_SECONDS" >> "$OUT/loads.jsonl"
    run_load "$s" "$round" load_poisson "$B/bench_load_poisson" -r 2000 -d "$LOAD_SECONDS" >> "$OUT/loads.jsonl"
  done
done
for n in "${NAMES[@]}"; do echo "${DOC[$n]}" > "$P/$n"; done

# ---- closed-loop simulation of a haltpoll guest (the tuner's behaviour) ----
if [ -x "$B/bench_tuner_sim" ]; then
  "$B/bench_tuner_sim" 600 > "$OUT/tuner_sim.json"
fi

# ---- the daemon on the idle guest: its own CPU and what the tuner decides ----
DAEMON="$BUILD/src/daemon/haltpolld"
if [ -x "$DAEMON" ]; then
  cat > "$TMP/haltpolld.json" <<JSON
{ "mode": "kernel", "state_dir": "$TMP/state", "socket": { "path": "$TMP/io.haltpolld" },
  "probe": { "rate_hz": 10 }, "tuner": { "policy": "balanced", "interval_ms": 1000 },
  "log": { "level": "info" } }
JSON
  "$DAEMON" -c "$TMP/haltpolld.json" > "$OUT/daemon.log" 2>&1 &
  DAEMON_PID=$!
  sleep 2
  if kill -0 "$DAEMON_PID" 2>/dev/null; then
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$DAEMON_PID/stat")
    t0=$(now_ns)
    sleep "$IDLE_SECONDS"
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$DAEMON_PID/stat")
    t1=$(now_ns)
    python3 - "$TMP/io.haltpolld" "$u0" "$s0" "$u1" "$s1" "$t0" "$t1" "$(getconf CLK_TCK)" > "$OUT/daemon_idle.json" <<'PY'
import json, socket, sys
path, u0, s0, u1, s1, t0, t1, hz = sys.argv[1:]
secs = (int(t1) - int(t0)) / 1e9
cpu = (int(u1) + int(s1) - int(u0) - int(s0)) / int(hz) / secs * 100
def call(method, params=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(json.dumps({"method": method, "parameters": params or {}}).encode() + b"\0")
    buf = b""
    while not buf.endswith(b"\0"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    s.close()
    return json.loads(buf.rstrip(b"\0"))
out = {"seconds": round(secs, 1), "daemon_cpu_percent_of_one_cpu": round(cpu, 3)}
try:
    out["status"] = call("io.haltpolld.GetStatus").get("parameters")
    out["decisions_tail"] = call("io.haltpolld.GetDecisions", {"limit": 5}).get("parameters")
except Exception as e:  # the control server is another helper's; report, do not fail
    out["status_error"] = str(e)
print(json.dumps(out, indent=1))
PY
  fi
  kill "$DAEMON_PID" 2>/dev/null || true
  wait "$DAEMON_PID" 2>/dev/null || true
  DAEMON_PID=""
fi

# ---- restore after SIGKILL on the real files (opt-in integration test) ----
TEST_ACT="$BUILD/tests/daemon/test_actuator"
if [ -x "$TEST_ACT" ]; then
  t0=$(now_ns)
  if HALTPOLL_REAL_SYSFS=1 "$TEST_ACT" "real sysfs: restore after SIGKILL (HALTPOLL_REAL_SYSFS=1)" > "$OUT/kill9.txt" 2>&1; then
    echo "{\"restore_after_sigkill\":\"passed\",\"seconds\":$(( ($(now_ns) - t0) / 1000000 ))e-3}" > "$OUT/kill9.json"
  else
    echo "{\"restore_after_sigkill\":\"FAILED\"}" > "$OUT/kill9.json"
  fi
fi

# ---- summary table and plot ----
python3 - "$OUT" <<'PY'
import json, statistics, sys, os
out = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(out, "loads.jsonl")) if l.strip()]
metric = {"perf_pipe": ("us_per_op", "us/op"), "load_pipe": ("us_per_op", "us/op"),
          "load_timer": ("late_p50_us", "lateness p50 us"), "load_poisson": ("rtt_p50_us", "RTT p50 us")}
extra = {"load_timer": ("late_p99_us", "p99"), "load_poisson": ("rtt_p99_us", "p99")}
settings = ["static_0", "static_50000", "static_200000"]
lines = ["| load | metric | " + " | ".join(s.replace("static_", "") for s in settings) + " |",
         "|---|---|" + "---|" * len(settings)]
plot = []
for load, (key, label) in metric.items():
    med = {}
    for s in settings:
        v = [r[key] for r in rows if r["load"] == load and r["setting"] == s and r.get(key) is not None]
        med[s] = statistics.median(v) if v else None
    if all(m is None for m in med.values()):
        continue
    lines.append(f"| {load} | {label} (median of rounds) | " +
                 " | ".join("%.2f" % med[s] if med[s] is not None else "n/a" for s in settings) + " |")
    plot.append((load, [med[s] for s in settings]))
    if load in extra:
        k2, l2 = extra[load]
        m2 = []
        for s in settings:
            v = [r[k2] for r in rows if r["load"] == load and r["setting"] == s]
            m2.append(statistics.median(v) if v else None)
        lines.append(f"| {load} | {l2} us | " + " | ".join("%.2f" % m if m is not None else "n/a" for m in m2) + " |")
pc = [r["poll_cpu_percent"] for r in rows]
lines.append("| all | poll CPU % | " + " | ".join(
    ("n/a (no cpuidle states)" if all(p is None for p in pc) else "see loads.jsonl") for _ in settings) + " |")
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
with open(os.path.join(out, "measured.dat"), "w") as f:
    f.write("setting " + " ".join(p[0] for p in plot) + "\n")
    for i, s in enumerate(settings):
        f.write(s.replace("static_", "") + " " + " ".join("%.3f" % p[1][i] if p[1][i] is not None else "NaN" for p in plot) + "\n")
sim = os.path.join(out, "tuner_sim.json")
if os.path.exists(sim):
    d = json.load(open(sim))
    with open(os.path.join(out, "sim.dat"), "w") as f:
        for load in ["pipe", "timer_150us", "poisson", "idle"]:
            for r in d["rows"]:
                if r["load"] == load:
                    f.write("%s %.3f %.3f %s\n" % (r["setting"], r["poll_cpu_percent"], r["p90_us"], load))
            f.write("\n\n")
    lines2 = ["| load | setting | poll CPU % (busiest CPU) | p50 us | p90 us | mean guest_halt_poll_ns |", "|---|---|---|---|---|---|"]
    for r in d["rows"]:
        lines2.append("| %s | %s | %.2f | %.2f | %.2f | %.0f |" % (r["load"], r["setting"], r["poll_cpu_percent"], r["p50_us"], r["p90_us"], r["mean_guest_halt_poll_ns"]))
    open(os.path.join(out, "sim.md"), "w").write("\n".join(lines2) + "\n")
print("\n".join(lines))
PY

if command -v gnuplot >/dev/null; then
  NCOL=$(head -1 "$OUT/measured.dat" | wc -w)
  gnuplot <<GP
set terminal pngcairo size 1300,520 font ",10" noenhanced
set output "$OUT/kernel-eval.png"
set multiplot layout 1,2
set title "This guest (cpuidle driver none): latency by guest_halt_poll_ns"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "us (median of rounds)"
set xlabel "guest_halt_poll_ns"
set key top left
set key autotitle columnhead
plot for [i=2:$NCOL] "$OUT/measured.dat" using i:xtic(1)
set title "Simulated haltpoll guest (closed loop): p90 wake latency vs poll CPU"
set style data points
set xlabel "poll CPU, busiest vCPU (%)"
set ylabel "p90 wake latency (us)"
set key top right
set xrange [-2:70]
set key noautotitle
set key top center
plot for [b=0:3] "$OUT/sim.dat" index b using 2:3 with points pt 4+2*b ps 1.6 title word("pipe timer_150us poisson idle", b+1), \
     for [b=0:2] "$OUT/sim.dat" index b using 2:3:(stringcolumn(1)) with labels left offset 1,(b-1)*0.9 font ",7" notitle
unset multiplot
GP
  echo "eval-kernel: plot $OUT/kernel-eval.png" >&2
fi
echo "eval-kernel: results in $OUT" >&2
