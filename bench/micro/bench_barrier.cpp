// bench_barrier: what the timeout barrier costs next to a raw spin, and how well it keeps time.
//
// 1. One-way hand-off latency between two threads pinned to CPUs 0 and 1: a ping-pong in which each
//    side waits for the other's sequence number, (a) with a raw load loop on a std::atomic (the
//    physical limit) and (b) with cond_load_acquire_timeout; one-way = round trip / 2. Blocks of
//    the two alternate so that drift in the machine's load hits both alike.
// 2. Timeout overshoot (returned - requested, measured with the clock the barrier is given) for
//    10 us, 100 us and 1 ms timeouts on a word that never changes, and clock reads per us of waiting.
//    Each sample is followed by one of a reference loop (`while (clock() < deadline) {}`): the floor
//    of any user-space timed wait on this machine. "quiet" percentiles leave out the samples during
//    which the thread lost its CPU (an involuntary context switch, or a gap over 20 us between two
//    of the barrier's clock reads: the host ran something else on the vCPU).
// Sections 1 and 2 run for the default backend; a short version runs for every other backend.
// Prints one JSON object on stdout. Runtime is bounded (~5-10 s).
#include "bench_common.hpp"
#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"
#include "json_writer.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using haltpoll::BarrierBackend;

using benchutil::pin_to;

// Hardware counter when calibrated (cheaper than the clock, so it disturbs the hand-off less).
struct Stopwatch {
  std::uint64_t ticks_per_ns_q32 = haltpoll::detail::counter_ticks_per_ns_q32();
  std::uint64_t now() const {
#if HALTPOLL_ARCH_X86 || HALTPOLL_ARCH_ARM64
    if (ticks_per_ns_q32 != 0) return haltpoll::arch::native::read_counter();
#endif
    return static_cast<std::uint64_t>(haltpoll::monotonic_ns());
  }
  double ns(std::uint64_t ticks) const {
    return ticks_per_ns_q32 != 0 ? static_cast<double>(ticks) * 4294967296.0 / static_cast<double>(ticks_per_ns_q32)
                                 : static_cast<double>(ticks);
  }
};

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

struct alignas(64) Line {
  std::atomic<std::uint32_t> seq{0};
};

enum class Mode { raw, barrier };

constexpr std::int64_t kHandoffTimeoutNs = 1'000'000'000;
// Tells the partner to leave a block early (the block ran out of time).
constexpr std::uint32_t kStop = 0xFFFFFFFFU;
// Wall-clock cap per hand-off block, so a slow backend (sched_yield on a busy machine) or a
// heavily loaded machine cannot stretch the run.
constexpr std::int64_t kBlockBudgetNs = 200'000'000;

// Returns false when told to stop.
inline bool wait_for(const std::atomic<std::uint32_t>& w, std::uint32_t k, Mode mode) {
  std::uint32_t v;
  if (mode == Mode::raw) {
    do {
      v = w.load(std::memory_order_acquire);
    } while (v != k && v != kStop);
  } else {
    do {
      v = haltpoll::cond_load_acquire_timeout(
          w, [k](std::uint32_t x) { return x == k || x == kStop; }, haltpoll::MonotonicClock{}, kHandoffTimeoutNs);
    } while (v != k && v != kStop);
  }
  return v != kStop;
}

long involuntary_switches() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_nivcsw;
}

struct Handoff {
  std::vector<double> raw;
  std::vector<double> barrier;
};

// `blocks` alternating blocks of `rounds` round trips each, per mode.
Handoff measure_handoff(int blocks, int rounds, const Stopwatch& sw) {
  Handoff out;
  out.raw.reserve(static_cast<std::size_t>(blocks * rounds));
  out.barrier.reserve(static_cast<std::size_t>(blocks * rounds));
  Line ping, pong;
  std::uint32_t seq = 0;
  for (int b = 0; b < 2 * blocks; ++b) {
    const Mode mode = b % 2 == 0 ? Mode::raw : Mode::barrier;
    const std::uint32_t first = seq + 1;
    std::thread partner([&ping, &pong, first, rounds, mode] {
      pin_to(1);
      for (std::uint32_t k = first; k < first + static_cast<std::uint32_t>(rounds); ++k) {
        if (!wait_for(ping.seq, k, mode)) return;
        pong.seq.store(k, std::memory_order_release);
      }
    });
    auto& samples = mode == Mode::raw ? out.raw : out.barrier;
    const std::int64_t block_end = haltpoll::monotonic_ns() + kBlockBudgetNs;
    for (int r = 0; r < rounds; ++r) {
      const std::uint32_t k = ++seq;
      const std::uint64_t t0 = sw.now();
      ping.seq.store(k, std::memory_order_release);
      wait_for(pong.seq, k, mode);
      const std::uint64_t t1 = sw.now();
      if (r >= rounds / 20) samples.push_back(sw.ns(t1 - t0) / 2);  // skip the partner's start-up
      if ((r & 63) == 0 && haltpoll::monotonic_ns() > block_end) {
        ping.seq.store(kStop, std::memory_order_release);
        break;
      }
    }
    partner.join();
    ping.seq.store(0, std::memory_order_relaxed);
    pong.seq.store(0, std::memory_order_relaxed);
  }
  return out;
}

struct Overshoot {
  std::int64_t timeout_ns;
  double p50 = 0, p99 = 0, max = 0;
  double clock_reads_per_us = 0;
  // The same over the samples during which the thread kept its CPU when it mattered: no
  // involuntary context switch (the guest's scheduler) and no gap over 20 us, across the deadline,
  // between two of the barrier's clock reads (which come every <= 2.5 us while it runs; a longer gap
  // means the host ran something else on the vCPU just when the wait should have ended), nor
  // between the call and the first clock reading (which fixes the deadline). A gap in between
  // does not delay the end of the wait and does not count. What the barrier itself does,
  // apart from the machine's scheduling.
  int preempted = 0;         // samples with an involuntary context switch
  int host_interrupted = 0;  // samples whose deadline fell in (or was set after) a gap over 20 us
  double quiet_p50 = 0, quiet_p99 = 0;
  // Return - deadline (the barrier's first clock reading + timeout), quiet samples: what the
  // per-backend bound in barrier.hpp covers. The part before the deadline is fixed (the first
  // batch, before the first reading) is not in it.
  double quiet_past_deadline_p99 = 0;
  double quiet_clock_reads_per_us = 0;
  // The floor for any user-space timed wait here: a bare `while (clock() < deadline) {}` loop,
  // measured in the same run, interleaved with the barrier's samples.
  double reference_p50 = 0, reference_p99 = 0;
};

constexpr std::int64_t kHostGapNs = 20'000;

Overshoot measure_overshoot(std::int64_t timeout_ns, int samples, std::int64_t budget_ns) {
  std::atomic<std::uint32_t> word{0};
  std::uint64_t reads = 0;
  // The barrier's deadline is its first clock reading + timeout_ns, so time lost before that reading
  // (first_gap, from the call) moves the deadline itself; deadline_gap is the gap between the two
  // readings (or the last reading and the return) on either side of the deadline.
  std::int64_t last_read = 0, deadline = 0, deadline_gap = 0, first_gap = 0;
  auto counting_clock = [&]() noexcept {
    ++reads;
    const std::int64_t now = haltpoll::monotonic_ns();
    if (deadline == 0) {
      deadline = now + timeout_ns;
      first_gap = now - last_read;
    } else if (last_read < deadline && now >= deadline) {
      deadline_gap = now - last_read;
    }
    last_read = now;
    return now;
  };
  std::vector<double> over, quiet, quiet_past, reference;
  reference.reserve(static_cast<std::size_t>(samples));
  over.reserve(static_cast<std::size_t>(samples));
  std::int64_t waited = 0, quiet_waited = 0;
  std::uint64_t quiet_reads = 0;
  int preempted = 0, host_interrupted = 0;
  const std::int64_t end = haltpoll::monotonic_ns() + budget_ns;
  for (int i = 0; i < samples && haltpoll::monotonic_ns() < end; ++i) {
    const long sw0 = involuntary_switches();
    const std::uint64_t r0 = reads;
    const std::int64_t t0 = haltpoll::monotonic_ns();
    last_read = t0;
    deadline = 0;
    deadline_gap = 0;
    first_gap = 0;
    haltpoll::cond_load_relaxed_timeout(
        word, [](std::uint32_t v) { return v != 0; }, counting_clock, timeout_ns);
    const std::int64_t t1 = haltpoll::monotonic_ns();
    if (deadline_gap == 0) deadline_gap = t1 - last_read;  // the return came before a reading past it
    const auto o = static_cast<double>(t1 - t0 - timeout_ns);
    over.push_back(o);
    waited += t1 - t0;
    if (involuntary_switches() != sw0) {
      ++preempted;
    } else if (deadline_gap > kHostGapNs || first_gap > kHostGapNs) {
      ++host_interrupted;
    } else {
      quiet.push_back(o);
      quiet_past.push_back(static_cast<double>(t1 - deadline));
      quiet_waited += t1 - t0;
      quiet_reads += reads - r0;
    }
    // The reference loop, right after: same conditions, no barrier.
    const std::int64_t r_start = haltpoll::monotonic_ns();
    std::int64_t r_now = r_start;
    while (r_now - r_start < timeout_ns) r_now = haltpoll::monotonic_ns();
    reference.push_back(static_cast<double>(r_now - r_start - timeout_ns));
  }
  Overshoot o;
  o.timeout_ns = timeout_ns;
  o.max = *std::max_element(over.begin(), over.end());
  o.p50 = percentile(over, 0.50);
  o.p99 = percentile(over, 0.99);
  o.clock_reads_per_us = static_cast<double>(reads) / (static_cast<double>(waited) / 1000.0);
  o.preempted = preempted;
  o.host_interrupted = host_interrupted;
  o.reference_p50 = percentile(reference, 0.50);
  o.reference_p99 = percentile(reference, 0.99);
  o.quiet_p50 = percentile(quiet, 0.50);
  o.quiet_p99 = percentile(quiet, 0.99);
  o.quiet_past_deadline_p99 = percentile(quiet_past, 0.99);
  o.quiet_clock_reads_per_us =
      quiet_waited > 0 ? static_cast<double>(quiet_reads) / (static_cast<double>(quiet_waited) / 1000.0) : 0.0;
  return o;
}

double clock_read_ns() {
  constexpr int kReads = 100000;
  double best = 1e18;
  for (int run = 0; run < 5; ++run) {
    const std::int64_t t0 = haltpoll::monotonic_ns();
    for (int i = 0; i < kReads; ++i) {
      volatile std::int64_t sink = haltpoll::monotonic_ns();
      (void)sink;
    }
    best = std::min(best, static_cast<double>(haltpoll::monotonic_ns() - t0) / kReads);
  }
  return best;
}

struct BackendResult {
  BarrierBackend backend;
  double raw_p50 = 0, raw_p99 = 0, barrier_p50 = 0, barrier_p99 = 0;
  std::size_t raw_samples = 0, barrier_samples = 0;
  std::vector<Overshoot> overshoot;
};

BackendResult run_backend(BarrierBackend b, bool full, const Stopwatch& sw) {
  haltpoll::force_backend(b);
  BackendResult r;
  r.backend = b;
  Handoff h = full ? measure_handoff(10, 20000, sw) : measure_handoff(4, 5000, sw);
  r.raw_samples = h.raw.size();
  r.barrier_samples = h.barrier.size();
  r.raw_p50 = percentile(h.raw, 0.50);
  r.raw_p99 = percentile(h.raw, 0.99);
  r.barrier_p50 = percentile(h.barrier, 0.50);
  r.barrier_p99 = percentile(h.barrier, 0.99);
  const int scale = full ? 1 : 4;
  const std::int64_t budget = full ? 1'000'000'000 : 500'000'000;
  r.overshoot.push_back(measure_overshoot(10'000, 3000 / scale, budget));
  r.overshoot.push_back(measure_overshoot(100'000, 1000 / scale, budget));
  r.overshoot.push_back(measure_overshoot(1'000'000, 300 / scale, budget));
  return r;
}

// Rounded to what the clock can resolve: whole ns, clock reads per µs to 3 decimals.
double r0(double v) { return std::round(v); }
double r3(double v) { return std::round(v * 1000) / 1000; }

std::string overshoot_json(const std::vector<Overshoot>& os) {
  benchutil::JsonObject by_timeout;
  for (const Overshoot& o : os) {
    by_timeout.raw(std::to_string(o.timeout_ns), benchutil::JsonObject()
                                                     .num("p50_ns", r0(o.p50))
                                                     .num("p99_ns", r0(o.p99))
                                                     .num("max_ns", r0(o.max))
                                                     .num("clock_reads_per_us", r3(o.clock_reads_per_us))
                                                     .num("preempted", o.preempted)
                                                     .num("host_interrupted", o.host_interrupted)
                                                     .num("quiet_p50_ns", r0(o.quiet_p50))
                                                     .num("quiet_p99_ns", r0(o.quiet_p99))
                                                     .num("quiet_clock_reads_per_us", r3(o.quiet_clock_reads_per_us))
                                                     .num("reference_p50_ns", r0(o.reference_p50))
                                                     .num("reference_p99_ns", r0(o.reference_p99))
                                                     .num("quiet_past_deadline_p99_ns", r0(o.quiet_past_deadline_p99))
                                                     .done());
  }
  return by_timeout.done();
}

// The backend's stated overshoot bound (barrier.hpp: its wait granularity plus the clock read that
// ends the wait) and whether every timeout's quiet p99 past the deadline kept it; null where there
// is none (sched_yield).
benchutil::JsonObject& add_bound(benchutil::JsonObject& j, const BackendResult& r, double read_ns) {
  const std::int64_t granularity = haltpoll::overshoot_bound_ns(r.backend);
  if (granularity < 0) return j.raw("overshoot_bound_ns", "null").raw("quiet_p99_within_bound", "null");
  const double bound = static_cast<double>(granularity) + read_ns;
  bool within = true;
  for (const Overshoot& o : r.overshoot) within = within && o.quiet_past_deadline_p99 <= bound;
  return j.num("overshoot_bound_ns", r0(bound)).boolean("quiet_p99_within_bound", within);
}

// Steal ticks (time the host ran something else on our vCPUs) on CPUs 0 and 1, and all their ticks:
// the context for a tail that the barrier cannot shorten.
struct CpuTicks {
  unsigned long long steal = 0, total = 0;
};

CpuTicks cpu_ticks() {
  CpuTicks t;
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu0 ", 0) != 0 && line.rfind("cpu1 ", 0) != 0) continue;
    std::istringstream fields(line.substr(5));
    unsigned long long v = 0;
    for (int i = 0; fields >> v; ++i) {
      if (i < 8) t.total += v;  // user..steal; guest time is already inside user
      if (i == 7) t.steal += v;
    }
  }
  return t;
}

// How often the machine itself takes the CPU from us: a loop that only reads the clock for 300 ms
// (no barrier involved), counting the gaps between consecutive readings longer than 20 us. A
// barrier's overshoot tail cannot be shorter than this environment's.
struct Gaps {
  double over_20us_per_s = 0;
  double max_us = 0;
};

Gaps clock_gaps() {
  Gaps g;
  constexpr std::int64_t kRunNs = 300'000'000;
  long count = 0;
  std::int64_t prev = haltpoll::monotonic_ns();
  const std::int64_t end = prev + kRunNs;
  std::int64_t longest = 0;
  while (prev < end) {
    const std::int64_t now = haltpoll::monotonic_ns();
    if (now - prev > 20'000) ++count;
    longest = std::max(longest, now - prev);
    prev = now;
  }
  g.over_20us_per_s = static_cast<double>(count) * 1e9 / kRunNs;
  g.max_us = static_cast<double>(longest) / 1000.0;
  return g;
}

double load_average() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
}

}  // namespace

int main() {
  const bool pinned = pin_to(0) && std::thread::hardware_concurrency() >= 2;
  const Stopwatch sw;
  const BarrierBackend def = haltpoll::default_backend();
  const double read_ns = clock_read_ns();
  const CpuTicks ticks0 = cpu_ticks();
  const Gaps gaps = clock_gaps();

  const BackendResult main_result = run_backend(def, true, sw);
  std::vector<BackendResult> others;
  for (BarrierBackend b : haltpoll::available_backends()) {
    if (b != def) others.push_back(run_backend(b, false, sw));
  }
  haltpoll::force_backend(def);
  const CpuTicks ticks1 = cpu_ticks();
  const double steal_pct = ticks1.total > ticks0.total ? 100.0 * static_cast<double>(ticks1.steal - ticks0.steal) /
                                                             static_cast<double>(ticks1.total - ticks0.total)
                                                       : 0.0;

  // The worst requested timeout is the headline.
  double over_p50 = 0, over_p99 = 0, quiet_p50 = 0, quiet_p99 = 0, ref_p99 = 0;
  for (const Overshoot& o : main_result.overshoot) {
    ref_p99 = std::max(ref_p99, o.reference_p99);
    over_p50 = std::max(over_p50, o.p50);
    over_p99 = std::max(over_p99, o.p99);
    quiet_p50 = std::max(quiet_p50, o.quiet_p50);
    quiet_p99 = std::max(quiet_p99, o.quiet_p99);
  }
  const auto r1 = [](double v) { return std::round(v * 10) / 10; };
  benchutil::JsonObject others_json;
  for (const BackendResult& r : others) {
    benchutil::JsonObject one;
    one.num("raw_spin_p50_ns", r1(r.raw_p50))
        .num("barrier_p50_ns", r1(r.barrier_p50))
        .num("barrier_p99_ns", r1(r.barrier_p99))
        .integer("handoff_samples", r.barrier_samples)
        .raw("overshoot_by_timeout_ns", overshoot_json(r.overshoot));
    others_json.raw(haltpoll::to_string(r.backend), add_bound(one, r, read_ns).done());
  }
  benchutil::JsonObject headline;
  headline.str("bench", "barrier")
      .str("backend", haltpoll::to_string(def))
      .str("clock_source", haltpoll::clock_source_name())
      .boolean("pinned", pinned)
      .num("clock_read_ns", r1(read_ns))
      .num("relaxes_per_us", haltpoll::relaxes_per_us())
      .num("loadavg_1min", std::round(load_average() * 100) / 100)
      .num("steal_pct_cpu01", r1(steal_pct))
      .num("env_gaps_over_20us_per_s", r1(gaps.over_20us_per_s))
      .num("env_gap_max_us", r0(gaps.max_us))
      .num("raw_spin_p50_ns", r1(main_result.raw_p50))
      .num("raw_spin_p99_ns", r1(main_result.raw_p99))
      .num("barrier_p50_ns", r1(main_result.barrier_p50))
      .num("barrier_p99_ns", r1(main_result.barrier_p99))
      .num("barrier_over_raw_p50", r3(main_result.raw_p50 > 0 ? main_result.barrier_p50 / main_result.raw_p50 : 0.0))
      .integer("handoff_samples", main_result.barrier_samples)
      .num("overshoot_p50_ns", r0(over_p50))
      .num("overshoot_p99_ns", r0(over_p99))
      .num("overshoot_quiet_p50_ns", r0(quiet_p50))
      .num("overshoot_quiet_p99_ns", r0(quiet_p99))
      .num("clock_reads_per_us", r3(main_result.overshoot.back().clock_reads_per_us))
      .num("quiet_clock_reads_per_us", r3(main_result.overshoot.back().quiet_clock_reads_per_us))
      .num("overshoot_reference_p99_ns", r0(ref_p99))
      .raw("overshoot_by_timeout_ns", overshoot_json(main_result.overshoot));
  add_bound(headline, main_result, read_ns).raw("other_backends", others_json.done()).print();
  return 0;
}
