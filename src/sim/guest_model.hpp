// SimulatedGuest: a model of a KVM guest running the kernel's haltpoll cpuidle governor, used to
// close the tuner's loop in deterministic tests. An open load draws each CPU's idle periods from a
// distribution; a closed load (`closed_loop`, the pipe and request/response shape) is two CPUs
// handing one token back and forth, so that a CPU's idle period is its partner's run time plus the
// partner's own wake latency: a halted partner makes the periods long, which keeps a small cap from
// ever polling, and once both poll the periods collapse (real-guest README §2). Calibrated from
// tests/data/real-guest/static-curve.jsonl: 44.2 µs per pipe round trip at cap 0 and 6.1 at
// 200000 give 2 × (busy + miss) and 2 × (busy + hit) with busy 1.6 µs, miss 20 µs, hit 1.5 µs
// (plus one wake-up in 10000 that waits 2 ms more). the per-CPU poll_limit follows the kernel's rules exactly (REFERENCE.md §1: poll
// while poll_limit > 0, a timed-out poll is followed by a halt, adjustments happen after a halt
// only, grow ×grow from grow_start up to the cap, shrink ÷shrink with the reset below grow_start,
// and a lowered cap does not clamp an existing poll_limit until the next adjustment). A wake from
// a poll costs `hit_cost_ns`, a wake from a halt `miss_cost_ns` (±25 % jitter). One call to run()
// is one tick: it returns the Observation the daemon's sensors would have produced.
// Deterministic for a given seed; single-threaded; no clocks.
#pragma once

#include "signals/observation.hpp"

#include <haltpoll/governor.hpp>
#include <haltpoll/latency_histogram.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace haltpolld {

// A load as a mixture of idle-period components: with probability `weight`, an idle period of
// `fixed_ns` plus an exponential part with mean `exp_mean_ns`. `busy_ns` is the run time between
// idle periods.
struct LoadModel {
  struct Component {
    double weight = 1;
    double fixed_ns = 0;
    double exp_mean_ns = 0;
  };
  std::string name;
  std::vector<Component> idle;
  double busy_ns = 2000;
  // Two CPUs passing one token (the idle components are ignored); remote wake-ups, so a poll hit
  // skips an IPI. Open loads' wake-ups are their own timers: no IPI to skip.
  bool closed_loop = false;

  // Shapes of the evaluation loads (docs/tuning.md): pipe ping-pong, a 150 µs periodic timer, a
  // Poisson request server at ~4k req/s, and an idle guest. Each has 1 % of long idle periods
  // (other activity: the tick, housekeeping) as a real guest has.
  static LoadModel pipe();
  static LoadModel timer_150us();
  static LoadModel poisson_server();
  static LoadModel idle_guest();
  // `perf bench sched pipe` as a closed loop (calibrated, see above).
  static LoadModel pipe_closed();
};

struct GuestModelParams {
  double hit_cost_ns = 1500;    // wake of a polling vCPU: no IPI, no VM exit
  double miss_cost_ns = 20000;  // wake of a halted vCPU: IPI, VM exit and entry, host scheduling
  // The kernel governor's grow/shrink parameters. Its guest_halt_poll_ns is not read: the cap is
  // run()'s argument, because that is what the tuner changes from tick to tick.
  haltpoll::HaltpollParams haltpoll;
  double steal_percent = 0;
  // Fill Observation::kernel.periods and ipi_skipped as the eBPF reader would.
  bool ebpf = false;
};

class SimulatedGuest {
 public:
  SimulatedGuest(LoadModel load, int cpus, GuestModelParams params = {}, std::uint64_t seed = 1);

  // Simulates `duration_ns` of every CPU with guest_halt_poll_ns = cap_ns and returns the tick's
  // Observation (poll CPU from the POLL residency, wake latency at `percentile` over all wakes).
  Observation run(std::uint64_t duration_ns, std::uint32_t cap_ns, double percentile);

  void set_load(LoadModel load) { load_ = std::move(load); }
  void set_steal_percent(double s) { params_.steal_percent = s; }
  const haltpoll::LatencyHistogram& last_latencies() const noexcept { return last_; }
  // Closed loop: round trips completed in the last run() (the load's throughput).
  std::uint64_t last_round_trips() const noexcept { return round_trips_; }
  std::uint32_t poll_limit_ns(int cpu) const { return cpus_.at(static_cast<std::size_t>(cpu)).poll_limit; }
  // What a cpuidle governor round trip does to the real guest (Decision::reset_limits): every
  // CPU's poll limit back to 0. set_poll_limits(ns) also starts a test where a real guest's CPU
  // can be found: at a limit it reached earlier.
  void set_poll_limits(std::uint32_t ns) {
    for (auto& c : cpus_) c.poll_limit = ns;
  }
  void reset_poll_limits() { set_poll_limits(0); }

 private:
  struct Cpu {
    std::uint32_t poll_limit = 0;
  };
  double draw_idle();
  void adjust(Cpu& c, std::uint64_t block_ns, std::uint32_t cap) const;
  // One idle period of `idle_ns` on `c` (the wake arrives then); returns the wake latency.
  double idle_period(Cpu& c, CpuIdleDelta& delta, CpuKernelSignals& ebpf, IdlePeriodHistograms& h,
                     std::uint64_t idle_ns, std::uint32_t cap, bool remote);
  Observation finish(Observation obs, std::vector<CpuIdleDelta> deltas, std::vector<CpuKernelSignals> ebpf,
                     IdlePeriodHistograms h, std::uint64_t wakes);
  Observation run_closed(std::uint64_t duration_ns, std::uint32_t cap_ns, double percentile);

  LoadModel load_;
  GuestModelParams params_;
  std::vector<Cpu> cpus_;
  std::mt19937_64 rng_;
  haltpoll::LatencyHistogram last_;
  std::uint64_t tick_ = 0;
  std::uint64_t round_trips_ = 0;
  double percentile_ = 90;
};

}  // namespace haltpolld
