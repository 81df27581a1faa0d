// The cost of IdleTrace's eBPF program under an idle-heavy load: `perf bench sched pipe -l N` run
// under four variants per round (the order rotated every round, so that drift of a shared machine
// falls on all of them), the medians compared within this one run:
//   - without: no program;
//   - noop: a program that returns at once, attached to power:cpu_idle alone: what enabling the
//     tracepoint and dispatching into BPF costs before the program does anything;
//   - clock: the same plus one bpf_ktime_get_ns, the clock read every cpu_idle event needs for a
//     residency;
//   - with: IdleTrace itself (its three tracepoints).
// Measures:
//   - the load's own cost: µs per pipe round trip per variant, its ratio to `without`, and from the
//     extra time per idle entry the share of one CPU at 100k idle entries/s, the rate of the
//     eBPF overhead target (<= 0.5 % of one CPU). This is the measure that sees everything (dispatch
//     included); on a pipe the idle periods sit in the round trip's critical path.
//   - the dispatch into BPF alone, per event, on a tracepoint this process fires itself
//     (task:task_rename), which needs no idle CPU;
//   - the program's own run time, from the kernel's BPF statistics (BPF_STATS_RUN_TIME, on only
//     during the `with` runs), and the same per-event cost from BPF_PROG_TEST_RUN, which needs no
//     idle CPU.
// Prints one JSON object. Needs root; the caller sets the cap (scripts/kernel-signals-check.sh).
// Usage: bench_bpf_overhead [--loops N] [--runs R]
#include "cpuidle_totals.hpp"
#include "idle_trace.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct ProgStats {
  std::uint64_t run_ns = 0, runs = 0;
};

// The summed run-time statistics of the trace's three programs.
ProgStats idle_trace_prog_stats(const haltpolld::IdleTrace& trace) {
  ProgStats s;
  for (const char* tp : {"cpu_idle", "guest_halt_poll_ns", "sched_wake_idle_without_ipi"}) {
    const int fd = trace.program_fd(tp);
    bpf_prog_info info{};
    __u32 len = sizeof info;
    if (fd >= 0 && bpf_obj_get_info_by_fd(fd, &info, &len) == 0) {
      s.run_ns += info.run_time_ns;
      s.runs += info.run_cnt;
    }
  }
  return s;
}

struct Run {
  double us_per_op = 0, wall_s = 0, idle_entries_per_s = 0;
  double bpf_ns_per_event = 0, bpf_events_per_s = 0, bpf_cpu_share = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

enum class Variant { without, noop, clock, with };
constexpr Variant variants[] = {Variant::without, Variant::noop, Variant::clock, Variant::with};
const char* variant_name(Variant v) {
  switch (v) {
    case Variant::without: return "without";
    case Variant::noop: return "noop";
    case Variant::clock: return "clock";
    default: return "with";
  }
}

// A raw_tp program of two or three instructions: return 0, optionally after reading the clock.
int load_reference_program(bool with_clock) {
  const bpf_insn noop[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},  // r0 = 0
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},                   // exit
  };
  const bpf_insn clock[] = {
      {BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_ktime_get_ns},  // r0 = bpf_ktime_get_ns()
      {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  const int prog = with_clock ? bpf_prog_load(BPF_PROG_TYPE_RAW_TRACEPOINT, "hp_clock", "GPL", clock, 3, nullptr)
                              : bpf_prog_load(BPF_PROG_TYPE_RAW_TRACEPOINT, "hp_noop", "GPL", noop, 2, nullptr);
  if (prog < 0) {
    std::fprintf(stderr, "bench_bpf_overhead: cannot load a reference program: %s\n", std::strerror(errno));
    std::exit(3);
  }
  return prog;
}

Run run_pipe(long loops, Variant variant) {
  Run r;
  const bool with_program = variant == Variant::with;
  std::unique_ptr<haltpolld::IdleTrace> trace;
  int stats_fd = -1, ref_prog = -1, ref_link = -1;
  ProgStats p0;
  if (variant == Variant::noop || variant == Variant::clock) {
    ref_prog = load_reference_program(variant == Variant::clock);
    ref_link = bpf_raw_tracepoint_open("cpu_idle", ref_prog);
    if (ref_link < 0) {
      std::fprintf(stderr, "bench_bpf_overhead: cannot attach a reference program to cpu_idle: %s\n",
                   std::strerror(errno));
      std::exit(3);
    }
  }
  if (with_program) {
    std::string why;
    trace = haltpolld::IdleTrace::open({}, &why);
    if (!trace) {
      std::fprintf(stderr, "bench_bpf_overhead: %s\n", why.c_str());
      std::exit(3);
    }
    stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    if (stats_fd < 0) {
      std::fprintf(stderr, "bench_bpf_overhead: cannot enable BPF run-time statistics: %s\n", std::strerror(errno));
      std::exit(3);
    }
    p0 = idle_trace_prog_stats(*trace);
  }
  const auto c0 = haltpolld::read_cpuidle_totals("/sys", 0);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string cmd = "perf bench sched pipe -l " + std::to_string(loops) + " 2>&1";
  std::FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) {
    std::perror("popen perf");
    std::exit(4);
  }
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    if (std::strstr(line, "usecs/op")) r.us_per_op = std::strtod(line, nullptr);
  }
  if (::pclose(f) != 0 || r.us_per_op <= 0) {
    std::fprintf(stderr, "bench_bpf_overhead: perf bench sched pipe failed (is linux-perf installed?)\n");
    std::exit(4);
  }
  const auto t1 = std::chrono::steady_clock::now();
  const auto c1 = haltpolld::read_cpuidle_totals("/sys", 0);
  r.wall_s = std::chrono::duration<double>(t1 - t0).count();
  r.idle_entries_per_s =
      static_cast<double>((c1.poll_usage + c1.halt_usage) - (c0.poll_usage + c0.halt_usage)) / r.wall_s;
  if (with_program) {
    const ProgStats p1 = idle_trace_prog_stats(*trace);
    const double ns = static_cast<double>(p1.run_ns - p0.run_ns), n = static_cast<double>(p1.runs - p0.runs);
    r.bpf_ns_per_event = n > 0 ? ns / n : 0;
    r.bpf_events_per_s = n / r.wall_s;
    r.bpf_cpu_share = ns / (r.wall_s * 1e9);
    ::close(stats_fd);
  }
  if (ref_link >= 0) ::close(ref_link);
  if (ref_prog >= 0) ::close(ref_prog);
  return r;
}

// The program's cost per cpu_idle event without depending on idle CPUs (a shared machine may have
// none): the raw_tp program run through BPF_PROG_TEST_RUN, alternately as an entry into a halt and
// its exit, the path every real halt takes (counters, two histograms). Kernel run-time statistics
// count only the program body, as they do for the attached program.
// ns per run of `prog` under BPF_PROG_TEST_RUN with run-time statistics on, as a cpu_idle event
// alternating between an entry into a halt (state 1) and its exit.
double test_run_ns(int prog, long events) {
  const int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (stats_fd < 0) {
    std::fprintf(stderr, "bench_bpf_overhead: cannot enable BPF run-time statistics: %s\n", std::strerror(errno));
    std::exit(3);
  }
  auto stats = [&] {
    bpf_prog_info info{};
    __u32 len = sizeof info;
    bpf_obj_get_info_by_fd(prog, &info, &len);
    return ProgStats{info.run_time_ns, info.run_cnt};
  };
  const ProgStats s0 = stats();
  for (long i = 0; i < events; ++i) {
    __u64 args[2] = {i % 2 == 0 ? 1u : 0xffffffffu, 0};
    bpf_test_run_opts opts{};
    opts.sz = sizeof opts;
    opts.ctx_in = args;
    opts.ctx_size_in = sizeof args;
    if (bpf_prog_test_run_opts(prog, &opts) != 0) {
      std::fprintf(stderr, "bench_bpf_overhead: BPF_PROG_TEST_RUN: %s\n", std::strerror(errno));
      std::exit(3);
    }
  }
  const ProgStats s1 = stats();
  ::close(stats_fd);
  return s1.runs > s0.runs ? static_cast<double>(s1.run_ns - s0.run_ns) / static_cast<double>(s1.runs - s0.runs) : 0;
}

// The same for a program that only returns 0: what the statistics themselves add to every run
// (two clock reads), which the attached program does not pay when statistics are off; and for one
// that only calls bpf_ktime_get_ns, the clock read each cpu_idle event needs (the largest part of
// the program's cost on a guest).
double test_run_reference_ns(bool with_clock, long events) {
  const int prog = load_reference_program(with_clock);
  const double ns = test_run_ns(prog, events);
  ::close(prog);
  return ns;
}

// What a raw tracepoint costs per event before any program work: a no-op program on
// task:task_rename, which prctl(PR_SET_NAME) fires once per call in the caller's context (unlike
// sys_enter, attaching it switches no task to a slower syscall path), timed per call with and
// without the program in alternating rounds (thread CPU time); the median difference. Needs no idle CPU: the
// same dispatch (bpf_trace_run: RCU, migrate-disable, the program array) runs for cpu_idle.
double dispatch_ns_per_event(long calls, int rounds) {
  const int prog = load_reference_program(false);
  char old_name[17] = {};
  ::prctl(PR_GET_NAME, old_name);
  // The thread's own CPU time, so that preemption by other work on a shared machine is not counted.
  auto thread_ns = [] {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
  };
  auto time_calls = [&] {
    const double t0 = thread_ns();
    for (long i = 0; i < calls; ++i) ::prctl(PR_SET_NAME, i % 2 ? "hp-bench-a" : "hp-bench-b");
    return (thread_ns() - t0) / static_cast<double>(calls);
  };
  std::vector<double> diffs;
  for (int r = 0; r < rounds; ++r) {
    const double off = time_calls();
    const int link = bpf_raw_tracepoint_open("task_rename", prog);
    if (link < 0) {
      std::fprintf(stderr, "bench_bpf_overhead: cannot attach to task:task_rename: %s\n", std::strerror(errno));
      std::exit(3);
    }
    const double on = time_calls();
    ::close(link);
    diffs.push_back(on - off);
  }
  ::prctl(PR_SET_NAME, old_name);
  ::close(prog);
  return median(diffs);
}

double test_run_ns_per_event(long events) {
  haltpolld::IdleTraceOptions o;
  o.attach = haltpolld::IdleTraceOptions::Attach::raw_tp;
  std::string why;
  auto trace = haltpolld::IdleTrace::open(o, &why);
  if (!trace) {
    std::fprintf(stderr, "bench_bpf_overhead: %s\n", why.c_str());
    std::exit(3);
  }
  const int prog = trace->program_fd("cpu_idle");
  if (prog < 0) {
    std::fprintf(stderr, "bench_bpf_overhead: the raw_tp cpu_idle program is not loaded\n");
    std::exit(3);
  }
  return test_run_ns(prog, events);
}

}  // namespace

int main(int argc, char** argv) {
  long loops = 100000;
  int runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--loops")
      loops = std::atol(argv[i + 1]);
    else if (a == "--runs")
      runs = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_bpf_overhead [--loops N] [--runs R]\n");
      return 2;
    }
  }
  if (loops <= 0 || runs <= 0) {
    std::fprintf(stderr, "usage: bench_bpf_overhead [--loops N] [--runs R]\n");
    return 2;
  }
  constexpr std::size_t nvar = std::size(variants);
  std::vector<double> us[nvar], rate[nvar], ns_per_event, share, events;
  for (int i = 0; i < runs; ++i) {
    for (std::size_t k = 0; k < nvar; ++k) {
      const std::size_t v = (k + static_cast<std::size_t>(i)) % nvar;
      const Run r = run_pipe(loops, variants[v]);
      us[v].push_back(r.us_per_op);
      rate[v].push_back(r.idle_entries_per_s);
      if (variants[v] == Variant::with) {
        ns_per_event.push_back(r.bpf_ns_per_event);
        share.push_back(r.bpf_cpu_share);
        events.push_back(r.bpf_events_per_s);
      }
    }
  }
  const auto& off_us = us[0];
  const auto& on_us = us[nvar - 1];
  const auto& off_rate = rate[0];
  const auto& on_rate = rate[nvar - 1];
  // Per variant: the medians, the ratio to `without`, and the added time per idle entry (the extra
  // µs per round trip over the idle entries per round trip) scaled to 100k entries/s. A round
  // trip's idle periods are in its critical path, so the added latency is the added CPU work there
  // (tracepoint dispatch and program), as an estimate that needs no statistics.
  std::string per_variant;
  const double base_us = median(off_us);
  for (std::size_t v = 0; v < nvar; ++v) {
    const double u = median(us[v]), r = median(rate[v]);
    const double entries_per_op = r * u / 1e6;
    const double extra_ns = entries_per_op > 0 ? (u - base_us) * 1000 / entries_per_op : 0;
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s\"%s\":{\"us_per_op\":%.3f,\"us_per_op_all\":[", v ? "," : "", variant_name(variants[v]), u);
    per_variant += buf;
    for (std::size_t k = 0; k < us[v].size(); ++k) {
      std::snprintf(buf, sizeof buf, "%s%.3f", k ? "," : "", us[v][k]);
      per_variant += buf;
    }
    std::snprintf(buf, sizeof buf,
                  "],\"ratio\":%.4f,\"idle_entries_per_op\":%.3f,\"extra_ns_per_idle_entry\":%.1f,"
                  "\"cpu_percent_at_100k_entries_per_s\":%.4f}",
                  u / base_us, entries_per_op, extra_ns, 100 * extra_ns * 100000.0 / 1e9);
    per_variant += buf;
  }
  const double dispatch_ns = dispatch_ns_per_event(200000, 9);
  const double test_run_ns = test_run_ns_per_event(200000), noop_ns = test_run_reference_ns(false, 200000),
               clock_ns = test_run_reference_ns(true, 200000);
  std::string cap = "unknown";
  std::ifstream("/sys/module/haltpoll/parameters/guest_halt_poll_ns") >> cap;
  const double on_entries = median(on_rate), share_m = median(share);
  std::printf(
      "{\"bench\":\"bpf_overhead\",\"loops\":%ld,\"runs\":%d,\"guest_halt_poll_ns\":\"%s\","
      "\"without\":{\"us_per_op\":%.3f,\"idle_entries_per_s\":%.0f},"
      "\"with\":{\"us_per_op\":%.3f,\"idle_entries_per_s\":%.0f,\"bpf_events_per_s\":%.0f,\"bpf_ns_per_event\":%.1f,"
      "\"bpf_cpu_percent\":%.4f},"
      "\"us_per_op_ratio_with_over_without\":%.4f,\"bpf_cpu_percent_at_100k_entries_per_s\":%.4f,"
      "\"test_run_ns_per_event\":%.1f,\"test_run_noop_ns_per_event\":%.1f,\"test_run_clock_only_ns_per_event\":%.1f,"
      "\"test_run_net_cpu_percent_at_100k_entries_per_s\":%.4f,\"dispatch_ns_per_event\":%.1f,"
      "\"estimate_cpu_percent_at_100k_entries_per_s\":%.4f,\"variants\":{%s}}\n",
      loops, runs, cap.c_str(), median(off_us), median(off_rate), median(on_us), on_entries, median(events),
      median(ns_per_event), 100 * share_m, median(on_us) / median(off_us),
      on_entries > 0 ? 100 * share_m * 100000.0 / on_entries : 0.0, test_run_ns, noop_ns, clock_ns,
      // two events (entry, exit) per idle entry, without what the statistics add
      100 * std::max(0.0, test_run_ns - noop_ns) * 2 * 100000.0 / 1e9, dispatch_ns,
      // dispatch + program body, two events per idle entry
      100 * (std::max(0.0, dispatch_ns) + std::max(0.0, test_run_ns - noop_ns)) * 2 * 100000.0 / 1e9, per_variant.c_str());
  return 0;
}
