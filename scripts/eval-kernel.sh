#!/usr/bin/env bash
# Kernel-mode evaluation on a real haltpoll guest (docs/tuning.md, docs/performance.md "Kernel mode").
#
# 1. The static ladder (guest_halt_poll_ns = 0 ... 400000) and haltpolld's balanced, budget and
#    latency policies (the daemon in kernel mode, its own state directory and socket under a
#    temporary directory), each on `perf bench sched pipe`, bench_load_rr (closed-loop
#    request/response: `rr` a fast RPC, 20 µs of server work and 10 µs of client think time; `db`
#    shaped like the real guest's database client, 60 µs each, whose idle periods need a cap of
#    100 µs where the pipe needs 30 and the timer at most 50), the 150 µs timer, Poisson 2000/s
#    and the idle guest; ROUNDS interleaved rounds. Poll CPU is the POLL-state residency per CPU over each run.
#    A setting <policy>_trace<N> is that policy with tuner.steady_trace_every = N (1: the eBPF
#    programs stay attached while steady, the daemon's behaviour before that key existed), and
#    <policy>..._noprobe the same with probe.rate_hz 0.
# 2. Load-change runs: pipe → timer → load_rr → idle, CHANGE_SECONDS each, in 1 s chunks, with the
#    value in force, the poll CPU and the load's latency per chunk; one run per CHANGE_SETTINGS
#    entry (balanced, and statics run through the same chunks as its baseline), balanced's drawn
#    as a PNG with gnuplot and its decisions kept.
# 3. kill -9 of a daemon that changed the values, a restart with the same state directory, and a
#    check that the values found are back before its first tick.
# It writes the REAL /sys/module/haltpoll/parameters: it holds /tmp/haltpoll-real-sysfs.lock for its
# whole run and puts back the values it FOUND (not the kernel defaults) in a trap, daemon or not.
#
# Usage: scripts/eval-kernel.sh [build_dir] [out_dir]
#   build_dir  a built tree with haltpolld and bench_load_{rr,timer,poisson} (default build/release)
#   out_dir    where results go (default <build_dir>/eval-kernel)
# Env: ROUNDS (2), PIPE_LOOPS (150000: 1.1-1.6 s where polling pays; 50000 took 0.4 s and the same
#      static measured 7.3 and 10.4 us/op in two rounds), LOAD_SECONDS (3), WARM_SECONDS (8: the daemon's time to
#      settle on a load before it is measured), CHANGE_SECONDS (20), SETTINGS (all), LOADS (all),
#      SKIP_CHANGE=1, SKIP_KILL=1, RR_ARGS ("-w 20 -t 10"), DB_ARGS ("-w 60 -t 60"),
#      CHANGE_SETTINGS ("balanced static_100000 static_200000 static_400000").
# Needs root, perf (linux-perf) for the pipe, python3, gnuplot for the plot.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build/release}"
OUT="${2:-$BUILD/eval-kernel}"
ROUNDS="${ROUNDS:-2}"
PIPE_LOOPS="${PIPE_LOOPS:-150000}"
LOAD_SECONDS="${LOAD_SECONDS:-3}"
WARM_SECONDS="${WARM_SECONDS:-8}"
CHANGE_SECONDS="${CHANGE_SECONDS:-20}"
RR_ARGS="${RR_ARGS:--w 20 -t 10}"
DB_ARGS="${DB_ARGS:--w 60 -t 60}"
# static_<ns>_gs: the cap with guest_halt_poll_grow_start = ns / 2 (does a small cap keep polling?).
SETTINGS="${SETTINGS:-static_0 static_10000 static_20000 static_30000 static_50000 static_100000 static_200000 static_400000 static_20000_gs static_30000_gs balanced budget latency}"
LOADS="${LOADS:-pipe rr db timer poisson idle}"
CHANGE_SETTINGS="${CHANGE_SETTINGS:-balanced static_100000 static_200000 static_400000}"
P=/sys/module/haltpoll/parameters
NAMES=(guest_halt_poll_ns guest_halt_poll_grow guest_halt_poll_grow_start guest_halt_poll_shrink
       guest_halt_poll_allow_shrink)

[ "$(id -u)" = 0 ] || { echo "eval-kernel: needs root (writes $P)" >&2; exit 1; }
[ -d "$P" ] || { echo "eval-kernel: $P does not exist" >&2; exit 1; }
DAEMON="$BUILD/src/daemon/haltpolld"
B="$BUILD/bench"
for bin in "$DAEMON" "$B/bench_load_rr" "$B/bench_load_timer" "$B/bench_load_poisson"; do
  [ -x "$bin" ] || { echo "eval-kernel: $bin missing; build haltpolld and the bench_load_* targets" >&2; exit 1; }
done
command -v perf >/dev/null || { echo "eval-kernel: perf (linux-perf) missing" >&2; exit 1; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

# Every writer of the real parameters holds this lock for its whole run (tests and scripts alike).
exec 9>/tmp/haltpoll-real-sysfs.lock
flock 9
declare -A FOUND
for n in "${NAMES[@]}"; do FOUND[$n]="$(cat "$P/$n")"; done
# The daemon switches the cpuidle governor for a moment (tuner.reset_limits): put it back too.
G=/sys/devices/system/cpu/cpuidle/current_governor
FOUND_GOV="$(cat "$G")"
echo "eval-kernel: found $(for n in "${NAMES[@]}"; do printf '%s=%s ' "$n" "${FOUND[$n]}"; done)" >&2

DAEMON_PID=""
TMP="$(mktemp -d /tmp/haltpolld-eval-XXXXXX)"
stop_daemon() {
  if [ -n "$DAEMON_PID" ]; then
    kill "$DAEMON_PID" 2>/dev/null || true
    wait "$DAEMON_PID" 2>/dev/null || true
    DAEMON_PID=""
  fi
}
# The idle cells of the daemon's policies count its eBPF programs' run time (kernel.bpf_stats_enabled
# for the cell only: it adds two clock reads to every run), found value put back.
BPF_STATS=/proc/sys/kernel/bpf_stats_enabled
FOUND_BPF_STATS="$(cat "$BPF_STATS" 2>/dev/null || echo "")"
put_back() {
  for n in "${NAMES[@]}"; do echo "${FOUND[$n]}" > "$P/$n" || true; done
  [ "$(cat "$G")" = "$FOUND_GOV" ] || echo "$FOUND_GOV" > "$G" || true
  [ -z "$FOUND_BPF_STATS" ] || echo "$FOUND_BPF_STATS" > "$BPF_STATS" || true
}
# Summed run time (ns) of haltpolld's eBPF programs (src/bpf/idle_trace.bpf.c), 0 without stats.
bpf_run_ns() {
  bpftool -j prog show 2>/dev/null | python3 -c '
import json, sys
names = {"cpu_idle_btf", "cpu_idle_raw", "limit_btf", "limit_raw", "ipi_btf", "ipi_raw"}
try:
    progs = json.load(sys.stdin)
except ValueError:
    progs = []
print(sum(p.get("run_time_ns", 0) for p in progs if p.get("name") in names))' 2>/dev/null || echo 0
}
# fresh_limits: every CPU's poll limit back to 0 (a governor round trip), so that each cell starts
# as a guest booted with its value would, not with the limits the previous cell's cap left behind
# (a CPU that never halts keeps them: docs/tuning.md, "A lower cap that never arrives").
fresh_limits() {
  [ "$FOUND_GOV" = haltpoll ] || return 0
  echo menu > "$G" 2>/dev/null && echo haltpoll > "$G" || echo "$FOUND_GOV" > "$G" || true
}
restore() {
  local rc=$?
  stop_daemon
  put_back
  local bad=0
  for n in "${NAMES[@]}"; do
    if [ "$(cat "$P/$n")" != "${FOUND[$n]}" ]; then echo "eval-kernel: $n NOT restored" >&2; bad=1; fi
  done
  if [ "$(cat "$G")" != "$FOUND_GOV" ]; then echo "eval-kernel: governor NOT restored" >&2; bad=1; fi
  [ $bad = 0 ] && echo "eval-kernel: haltpoll parameters restored to the values found: $(for n in "${NAMES[@]}"; do printf '%s=%s ' "$n" "$(cat "$P/$n")"; done)" >&2
  rm -rf "$TMP"
  exit $rc
}
trap restore EXIT INT TERM

CPUIDLE=/sys/devices/system/cpu/cpuidle
NCPU=$(nproc)
{
  echo "{\"kernel\":\"$(uname -r)\",\"cpus\":$NCPU,"
  echo "\"cpuidle_driver\":\"$(cat $CPUIDLE/current_driver 2>/dev/null || echo unreadable)\","
  echo "\"cpuidle_governor\":\"$(cat $CPUIDLE/current_governor 2>/dev/null || cat $CPUIDLE/current_governor_ro 2>/dev/null || echo unreadable)\","
  echo "\"cpu_model\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\","
  echo "\"loadavg_at_start\":\"$(cut -d' ' -f1-3 /proc/loadavg)\","
  echo "\"date\":\"$(date -u +%FT%TZ)\"}"
} > "$OUT/env.json"
echo "eval-kernel: $(tr -d '\n' < "$OUT/env.json")" >&2

# Per-CPU POLL-state time in µs, "t0 t1 ..." (cpuidle state names; POLL is the polling state).
poll_us() {
  local c d out=""
  for c in /sys/devices/system/cpu/cpu[0-9]*; do
    [ -d "$c/cpuidle" ] || continue
    for d in "$c"/cpuidle/state*; do
      [ "$(cat "$d/name")" = POLL ] && out="$out $(cat "$d/time")"
    done
  done
  echo "$out"
}
now_ns() { date +%s%N; }
# Idle jiffies of all CPUs (idle + iowait), from /proc/stat.
idle_jiffies() { awk '/^cpu /{print $5+$6}' /proc/stat; }
# wait_quiet: haltpoll only acts when a CPU goes idle, so a machine kept busy by others (compiles)
# measures nothing. Waits up to QUIET_WAIT seconds for a second in which the CPUs are at least
# QUIET_IDLE_PERCENT idle; proceeds anyway after that (each row records its idle share).
QUIET_WAIT="${QUIET_WAIT:-120}"
QUIET_IDLE_PERCENT="${QUIET_IDLE_PERCENT:-85}"
HZ=$(getconf CLK_TCK)
wait_quiet() {
  local end=$(( $(date +%s) + QUIET_WAIT )) i0 i1
  while :; do
    i0=$(idle_jiffies); sleep 1; i1=$(idle_jiffies)
    [ $(( (i1 - i0) * 100 )) -ge $(( QUIET_IDLE_PERCENT * HZ * NCPU )) ] && return 0
    if [ "$(date +%s)" -ge "$end" ]; then
      echo "eval-kernel: warning: CPUs only $(( (i1 - i0) * 100 / (HZ * NCPU) ))% idle after ${QUIET_WAIT}s of waiting; measuring anyway" >&2
      return 0
    fi
  done
}
# The daemon's CPU time in ns, all its threads (schedstat: /proc/<pid>/stat's utime + stime count
# 10 ms jiffies, a third of a percent over a 3 s cell, too coarse for the 0.5 % target).
daemon_cpu_ns() {
  if [ -n "$DAEMON_PID" ]; then
    { cat /proc/"$DAEMON_PID"/task/*/schedstat 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}'
  else
    echo 0
  fi
}

cat > "$TMP/varlink.py" <<'PY'
import json, socket, sys
def call(path, method, params=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(json.dumps({"method": method, "parameters": params or {}}).encode() + b"\0")
    buf = b""
    while not buf.endswith(b"\0"):
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    s.close()
    return json.loads(buf.rstrip(b"\0"))
if __name__ == "__main__":
    print(json.dumps(call(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]) if len(sys.argv) > 3 else None)))
PY
varlink() { python3 "$TMP/varlink.py" "$@"; }

# start_daemon <policy> <tag>: kernel mode, private state and socket; waits for the socket.
start_daemon() {
  local policy=$1 tag=$2 extra=${3:-} probe=${4:-10}
  mkdir -p "$TMP/state-$tag"
  cat > "$TMP/haltpolld-$tag.json" <<JSON
{ "mode": "kernel", "sysfs_root": "/", "state_dir": "$TMP/state-$tag",
  "socket": { "path": "$TMP/sock-$tag" }, "probe": { "rate_hz": $probe },
  "tuner": { "policy": "$policy" $extra }, "log": { "level": "info" } }
JSON
  "$DAEMON" -c "$TMP/haltpolld-$tag.json" > "$OUT/daemon-$tag.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 100); do [ -S "$TMP/sock-$tag" ] && return 0; sleep 0.05; done
  echo "eval-kernel: the daemon did not open its socket (see $OUT/daemon-$tag.log)" >&2
  return 1
}

# start_policy <setting> <tag>: the daemon for a setting "<policy>" or "<policy>_trace<N>".
# A suffix _noprobe runs it with probe.rate_hz 0 (no probe tasks on the daemon's workers; the
# halt-exit penalty then stays unmeasured).
start_policy() {
  local s=$1 probe=10 extra=""
  case $s in *_noprobe) probe=0; s=${s%_noprobe} ;; esac
  case $s in *_trace*) extra=", \"steady_trace_every\": ${s##*_trace}"; s=${s%%_trace*} ;; esac
  start_daemon "$s" "$2" "$extra" "$probe"
}

# load_cmd <load> <seconds>: the command line of a load running about that long (pipe: loops).
load_cmd() {
  case $1 in
    pipe) echo "perf bench sched pipe -l ${3:-$PIPE_LOOPS}" ;;
    rr) echo "$B/bench_load_rr -d $2 $RR_ARGS" ;;
    db) echo "$B/bench_load_rr -d $2 $DB_ARGS" ;;
    timer) echo "$B/bench_load_timer -p 150 -d $2" ;;
    poisson) echo "$B/bench_load_poisson -r 2000 -d $2" ;;
    idle) echo "sleep $2" ;;
  esac
}

# run_load <setting> <round> <load>: one JSON line: the load's result, poll CPU per CPU (mean and
# busiest), the value in force before and after, the daemon's CPU.
run_load() {
  local setting=$1 round=$2 load=$3
  local p0 p1 t0 t1 v0 v1 c0 c1 i0 i1 out b0=0 b1=0 stats=0
  if [ "$load" = idle ] && [ -n "$DAEMON_PID" ] && [ -n "$FOUND_BPF_STATS" ]; then
    echo 1 > "$BPF_STATS" && stats=1 && b0=$(bpf_run_ns)
  fi
  v0=$(cat "$P/guest_halt_poll_ns"); c0=$(daemon_cpu_ns); p0=$(poll_us); i0=$(idle_jiffies); t0=$(now_ns)
  out="$($(load_cmd "$load" "$LOAD_SECONDS") 2>/dev/null | tail -n 5 || true)"
  t1=$(now_ns); i1=$(idle_jiffies); p1=$(poll_us); c1=$(daemon_cpu_ns); v1=$(cat "$P/guest_halt_poll_ns")
  if [ $stats = 1 ]; then b1=$(bpf_run_ns); echo "$FOUND_BPF_STATS" > "$BPF_STATS"; fi
  python3 - "$setting" "$round" "$load" "$out" "$p0" "$p1" "$t0" "$t1" "$v0" "$v1" "$c0" "$c1" "$HZ" "$i0" "$i1" "$NCPU" "$stats" "$b0" "$b1" <<'PY'
import json, re, sys
setting, rnd, load, out, p0, p1, t0, t1, v0, v1, c0, c1, hz, i0, i1, ncpu, stats, b0, b1 = sys.argv[1:]
secs = (int(t1) - int(t0)) / 1e9
row = {"setting": setting, "round": int(rnd), "load": load, "seconds": round(secs, 3),
       "value_before": int(v0), "value_after": int(v1),
       "idle_percent_of_all_cpus": round((int(i1) - int(i0)) / int(hz) / secs / int(ncpu) * 100, 1)}
if load == "pipe":
    m = re.search(r"([0-9.]+) usecs/op", out)
    row["us_per_op"] = float(m.group(1)) if m else None
elif load != "idle":
    row.update(json.loads(out.strip().splitlines()[-1]))
a, b = [int(x) for x in p0.split()], [int(x) for x in p1.split()]
per = [(y - x) / 1e4 / secs for x, y in zip(a, b)]
row["poll_cpu_percent_per_cpu"] = round(sum(per) / len(per), 3) if per else None
row["poll_cpu_percent_busiest"] = round(max(per), 3) if per else None
if setting.split("_")[0] in ("balanced", "budget", "latency"):
    row["daemon_cpu_percent_of_one_cpu"] = round((int(c1) - int(c0)) / 1e9 / secs * 100, 3)
if stats == "1":
    row["bpf_cpu_percent_of_one_cpu"] = round((int(b1) - int(b0)) / 1e9 / secs * 100, 4)
print(json.dumps(row))
PY
}

# warm <load>: run the load for WARM_SECONDS so that the daemon settles on it first.
warm() {
  local load=$1 end
  end=$(( $(date +%s) + WARM_SECONDS ))
  if [ "$load" = pipe ]; then
    while [ "$(date +%s)" -lt "$end" ]; do perf bench sched pipe -l 20000 > /dev/null 2>&1 || true; done
  else
    $(load_cmd "$load" "$WARM_SECONDS") > /dev/null 2>&1 || true
  fi
}

# ---- 1. static ladder and policies × loads, interleaved rounds ----
: > "$OUT/loads.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for s in $SETTINGS; do
    put_back
    case $s in
      static_*)
        ns=${s#static_}; ns=${ns%_gs}
        echo "$ns" > "$P/guest_halt_poll_ns"
        [ "$s" != "${s%_gs}" ] && echo $((ns / 2)) > "$P/guest_halt_poll_grow_start"
        fresh_limits
        echo "eval-kernel: round $round, guest_halt_poll_ns=$ns grow_start=$(cat "$P/guest_halt_poll_grow_start")" >&2
        for load in $LOADS; do wait_quiet; run_load "$s" "$round" "$load" >> "$OUT/loads.jsonl"; done
        ;;
      *)
        echo "eval-kernel: round $round, haltpolld $s" >&2
        fresh_limits
        start_policy "$s" "$s-$round"
        sleep 5  # idle CPUs: the daemon measures the halt-exit penalty
        for load in $LOADS; do
          wait_quiet
          [ "$load" = idle ] && sleep "$WARM_SECONDS" || warm "$load"
          run_load "$s" "$round" "$load" >> "$OUT/loads.jsonl"
        done
        varlink "$TMP/sock-$s-$round" io.haltpolld.GetDecisions '{"limit": 400}' > "$OUT/decisions-$s-$round.json" || true
        varlink "$TMP/sock-$s-$round" io.haltpolld.GetStatus > "$OUT/status-$s-$round.json" || true
        stop_daemon
        ;;
    esac
  done
done
put_back

# ---- 2. load-change runs: balanced, and the statics through the same chunks ----
# change_run <setting> <file>: the phases in 1 s chunks, one JSON line per chunk.
change_run() {
  local setting=$1 file=$2 phase pend p0 p1 t0 t1 out
  : > "$file"
  T0=$(now_ns)
  for phase in pipe timer rr idle; do
    pend=$(( $(now_ns) + CHANGE_SECONDS * 1000000000 ))
    while [ "$(now_ns)" -lt "$pend" ]; do
      p0=$(poll_us); t0=$(now_ns)
      case $phase in
        pipe) out="$(perf bench sched pipe -l 15000 2>/dev/null | tail -n 5)" ;;
        timer) out="$("$B/bench_load_timer" -p 150 -d 1 2>/dev/null)" ;;
        rr) out="$("$B/bench_load_rr" -d 1 $RR_ARGS 2>/dev/null)" ;;
        idle) sleep 1; out="" ;;
      esac
      t1=$(now_ns); p1=$(poll_us)
      python3 - "$setting" "$phase" "$out" "$p0" "$p1" "$T0" "$t0" "$t1" "$(cat "$P/guest_halt_poll_ns")" >> "$file" <<'PY'
import json, re, sys
setting, phase, out, p0, p1, T0, t0, t1, value = sys.argv[1:]
secs = (int(t1) - int(t0)) / 1e9
a, b = [int(x) for x in p0.split()], [int(x) for x in p1.split()]
per = [(y - x) / 1e4 / secs for x, y in zip(a, b)]
row = {"setting": setting, "phase": phase, "t_s": round((int(t1) - int(T0)) / 1e9, 2), "seconds": round(secs, 3),
       "value_ns": int(value), "poll_cpu_percent_per_cpu": round(sum(per) / len(per), 3)}
lat = None
if phase == "pipe":
    m = re.search(r"([0-9.]+) usecs/op", out)
    lat = float(m.group(1)) if m else None
elif phase == "timer" and out:
    lat = json.loads(out.strip().splitlines()[-1])["late_p50_us"]
elif phase == "rr" and out:
    d = json.loads(out.strip().splitlines()[-1])
    lat = d["rtt_p50_us"]
    row["throughput_per_s"] = d["throughput_per_s"]
row["latency_us"] = lat
print(json.dumps(row))
PY
    done
  done
}
if [ "${SKIP_CHANGE:-0}" != 1 ]; then
  : > "$OUT/change-baselines.jsonl"
  for s in $CHANGE_SETTINGS; do
    echo "eval-kernel: load-change run, $s (pipe, timer, load_rr, idle: ${CHANGE_SECONDS}s each)" >&2
    put_back
    wait_quiet
    fresh_limits
    case $s in
      static_*)
        echo "${s#static_}" > "$P/guest_halt_poll_ns"
        change_run "$s" "$TMP/change-$s.jsonl"
        cat "$TMP/change-$s.jsonl" >> "$OUT/change-baselines.jsonl"
        ;;
      *)
        start_policy "$s" "change-$s"
        sleep 5
        if [ "$s" = balanced ]; then
          change_run "$s" "$OUT/change.jsonl"
          varlink "$TMP/sock-change-$s" io.haltpolld.GetDecisions '{"limit": 400}' > "$OUT/decisions-change.json" || true
          echo "$T0" > "$OUT/change.t0_ns"
        else
          change_run "$s" "$TMP/change-$s.jsonl"
          cat "$TMP/change-$s.jsonl" >> "$OUT/change-baselines.jsonl"
        fi
        stop_daemon
        ;;
    esac
  done
  put_back
fi

# ---- 3. kill -9, restart with the same state directory: the found values are back before the first tick ----
if [ "${SKIP_KILL:-0}" != 1 ]; then
  echo "eval-kernel: kill -9 and restart" >&2
  start_daemon static kill ', "interval_ms": 200'
  # The static policy holds pool.guest_halt_poll_ns (200000): written on the first tick.
  for _ in $(seq 50); do [ "$(cat "$P/guest_halt_poll_ns")" != "${FOUND[guest_halt_poll_ns]}" ] && break; sleep 0.1; done
  written=$(cat "$P/guest_halt_poll_ns")
  kill -9 "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true; DAEMON_PID=""
  after_kill=$(cat "$P/guest_halt_poll_ns")
  # Restart in observe mode with the same state directory: recovery happens in start(), before
  # any tick, whatever the mode.
  sed -i 's/"mode": "kernel"/"mode": "observe"/; s/"interval_ms": 200/"interval_ms": 60000/' "$TMP/haltpolld-kill.json"
  "$DAEMON" -c "$TMP/haltpolld-kill.json" > "$OUT/daemon-kill-restart.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 100); do [ -S "$TMP/sock-kill" ] && break; sleep 0.05; done
  varlink "$TMP/sock-kill" io.haltpolld.GetStatus > "$TMP/kill-status.json" || echo '{}' > "$TMP/kill-status.json"
  restarted=$(cat "$P/guest_halt_poll_ns")
  stop_daemon
  python3 - "$written" "$after_kill" "$restarted" "${FOUND[guest_halt_poll_ns]}" "$TMP/kill-status.json" > "$OUT/kill9.json" <<'PY'
import json, sys
written, after_kill, restarted, found, status = sys.argv[1:]
st = (json.load(open(status)).get("parameters") or {}).get("controller") or {}
ok = written != found and after_kill == written and restarted == found and st.get("ticks") == 0
print(json.dumps({"found": int(found), "written_by_daemon": int(written), "after_kill_9": int(after_kill),
                  "after_restart": int(restarted), "restart_ticks_at_check": st.get("ticks"),
                  "recovery": (st.get("kernel") or {}).get("recovery"),
                  "restore_after_sigkill": "passed" if ok else "FAILED"}))
PY
  cat "$OUT/kill9.json" >&2
  put_back
fi

# ---- summary, targets and plots ----
python3 scripts/eval-kernel-report.py "$OUT"
if command -v gnuplot >/dev/null && [ -s "$OUT/change.dat" ]; then
  gnuplot <<GP
set terminal pngcairo size 1100,900 font ",10" noenhanced
set output "$OUT/load-change.png"
set multiplot layout 3,1 title "haltpolld balanced on a real haltpoll guest: pipe -> 150 us timer -> load_rr -> idle"
set xlabel "s"
set grid
set key top right
set ylabel "guest_halt_poll_ns (us)"
plot "$OUT/change.dat" using 1:2 with steps lw 2 title "value in force"
set ylabel "poll CPU % per CPU"
plot "$OUT/change.dat" using 1:3 with steps lw 2 title "poll CPU"
set ylabel "us"
set logscale y
plot "$OUT/change.dat" using 1:(\$5==0?\$4:1/0) with points pt 7 title "pipe us/op", \
     "" using 1:(\$5==1?\$4:1/0) with points pt 5 title "timer lateness p50", \
     "" using 1:(\$5==2?\$4:1/0) with points pt 9 title "load_rr RTT p50"
unset multiplot
GP
  echo "eval-kernel: plot $OUT/load-change.png" >&2
fi
echo "eval-kernel: results in $OUT" >&2
