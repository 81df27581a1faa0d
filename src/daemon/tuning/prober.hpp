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
