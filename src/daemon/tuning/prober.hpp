// Prober: measures the wake latency an arriving request would see, by submitting timestamped
// no-op tasks to each CPU's pool worker at Poisson times (rate `rate_hz` per CPU). Poisson
// arrivals see time averages (PASTA), so the probes sample the workers' states — polling, parked,
// busy — in proportion to the time spent in each. Every sample is tagged by the path the wake
// took (poll hit: the worker was polling, no system call; park path: FUTEX_WAKE) and kept in
// per-CPU histograms; a probe that found its worker busy ("queued") is counted but not recorded.
//
// Threads: one prober thread submits; the pool's workers run the probes. A probe's latency (set by
// the worker) and its path (known to the prober once submit() returns) meet in a small shared
// record: each side publishes its half and bumps a counter with acq_rel, and whichever side comes
// second files the sample under the prober's mutex. The histograms live in a shared state that the
// probes keep alive, so a probe that runs after stop() is harmless. drain()/totals() may be called
// from any thread.
#pragma once

#include <haltpoll/latency_histogram.hpp>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace haltpolld {

enum class ProbePath { rejected, queued, poll_hit, park_path };

struct CpuProbes {
  int cpu = 0;
  haltpoll::LatencyHistogram poll_hit;
  haltpoll::LatencyHistogram park_path;
  std::uint64_t queued = 0;
  std::uint64_t rejected = 0;

  haltpoll::LatencyHistogram all() const {
    haltpoll::LatencyHistogram h = poll_hit;
    h.merge(park_path);
    return h;
  }
};

// HaltExitPenalty: what a wake-up costs when its CPU halted rather than polled, measured on this
// guest from the probes: the park-path wake latency of the daemon's own workers (FUTEX_WAKE, an
// IPI, the halt exit, the host's scheduling of the vCPU) minus their poll-hit latency, taken only
// on ticks when the CPUs were otherwise idle (the load's own scheduling noise moved probe means by
// ±25 % between ticks on the real guest). Without poll-hit samples (the workers' windows shrink to
// 0 on an idle guest) the park-path latency alone is kept and said to be an upper bound. The
// estimate is the median of the last window of idle samples; it keeps its value, and ages, while
// the guest is busy. Pure; not thread-safe.
class HaltExitPenalty {
 public:
  // Samples per estimate: at the default 10 probes/s per CPU, 2 CPUs, 2-3 s of idle guest.
  static constexpr std::uint64_t kWindow = 48;

  void add(const std::vector<CpuProbes>& tick, bool cpus_idle, std::uint64_t now_ns);
  std::optional<double> penalty_ns() const noexcept { return penalty_; }
  std::optional<std::uint64_t> measured_at_ns() const noexcept { return at_; }
  const std::string& source() const noexcept { return source_; }

 private:
  haltpoll::LatencyHistogram park_, hit_;
  std::optional<double> penalty_;
  std::optional<std::uint64_t> at_;
  std::string source_ = "not measured yet (needs otherwise idle CPUs)";
};

class Prober {
 public:
  // Submits `task` to the worker of `cpu` and says which path the wake took.
  using Submit = std::function<ProbePath(int cpu, std::function<void()> task)>;

  Prober(std::vector<int> cpus, double rate_hz_per_cpu, Submit submit, std::uint64_t seed = 0);
  ~Prober();
  Prober(const Prober&) = delete;
  Prober& operator=(const Prober&) = delete;

  void start();
  void stop();  // idempotent; returns once the prober thread has exited
  bool running() const noexcept { return thread_.joinable(); }

  std::vector<CpuProbes> drain();         // samples since the previous drain
  std::vector<CpuProbes> totals() const;  // samples since start
  double rate_hz() const noexcept { return rate_hz_; }
  const std::vector<int>& cpus() const noexcept { return cpus_; }

 private:
  struct State;
  void run();

  std::vector<int> cpus_;
  double rate_hz_;
  Submit submit_;
  std::uint64_t seed_;
  std::shared_ptr<State> state_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace haltpolld
