#include "tuning/prober.hpp"

#include <haltpoll/clock.hpp>
#include <haltpoll/thread_signals.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <random>

namespace haltpolld {

struct Prober::State {
  std::mutex mu;
  std::vector<CpuProbes> window;  // since the last drain
  std::vector<CpuProbes> total;

  CpuProbes* find(std::vector<CpuProbes>& v, int cpu) {
    for (auto& c : v)
      if (c.cpu == cpu) return &c;
    return nullptr;
  }
  void file(int cpu, ProbePath path, std::uint64_t ns) {
    std::lock_guard lock(mu);
    for (auto* v : {&window, &total}) {
      CpuProbes* c = find(*v, cpu);
      if (!c) continue;
      switch (path) {
        case ProbePath::poll_hit: c->poll_hit.record(ns); break;
        case ProbePath::park_path: c->park_path.record(ns); break;
        case ProbePath::queued: ++c->queued; break;
        case ProbePath::rejected: ++c->rejected; break;
      }
    }
  }
};

namespace {

struct ProbeRecord {
  std::uint64_t submitted_ns = 0;
  std::atomic<std::uint64_t> latency_ns{0};
  std::atomic<ProbePath> path{ProbePath::rejected};
  std::atomic<int> halves{0};
};

}  // namespace

Prober::Prober(std::vector<int> cpus, double rate_hz_per_cpu, Submit submit, std::uint64_t seed)
    : cpus_(std::move(cpus)), rate_hz_(rate_hz_per_cpu), submit_(std::move(submit)), seed_(seed),
      state_(std::make_shared<State>()) {
  for (int c : cpus_) {
    state_->window.push_back(CpuProbes{c, {}, {}, 0, 0});
    state_->total.push_back(CpuProbes{c, {}, {}, 0, 0});
  }
}

Prober::~Prober() { stop(); }

void Prober::start() {
  if (thread_.joinable() || cpus_.empty() || !(rate_hz_ > 0) || !submit_) return;
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = false;
  }
  thread_ = std::thread([this] {
    haltpoll::block_async_signals();  // SIGTERM and SIGHUP are the control thread's
    run();
  });
}

void Prober::stop() {
  {
    std::lock_guard lock(stop_mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Prober::run() {
  std::mt19937_64 rng(seed_ ? seed_ : std::random_device{}());
  // The superposition of independent per-CPU Poisson processes is one Poisson process of the summed
  // rate whose events are spread uniformly over the CPUs.
  std::exponential_distribution<double> gap_s(rate_hz_ * static_cast<double>(cpus_.size()));
  std::uniform_int_distribution<std::size_t> pick(0, cpus_.size() - 1);
  auto next = std::chrono::steady_clock::now();
  std::unique_lock lock(stop_mu_);
  while (!stopping_) {
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(gap_s(rng)));
    if (stop_cv_.wait_until(lock, next, [this] { return stopping_; })) break;
    lock.unlock();
    const int cpu = cpus_[pick(rng)];
    auto rec = std::make_shared<ProbeRecord>();
    auto state = state_;
    rec->submitted_ns = static_cast<std::uint64_t>(haltpoll::clock_monotonic_ns());
    const ProbePath path = submit_(cpu, [rec, state, cpu] {
      rec->latency_ns.store(static_cast<std::uint64_t>(haltpoll::clock_monotonic_ns()) - rec->submitted_ns,
                            std::memory_order_relaxed);
      if (rec->halves.fetch_add(1, std::memory_order_acq_rel) == 1)
        state->file(cpu, rec->path.load(std::memory_order_relaxed), rec->latency_ns.load(std::memory_order_relaxed));
    });
    if (path == ProbePath::rejected) {
      state->file(cpu, path, 0);
    } else {
      rec->path.store(path, std::memory_order_relaxed);
      if (rec->halves.fetch_add(1, std::memory_order_acq_rel) == 1)
        state->file(cpu, path, rec->latency_ns.load(std::memory_order_relaxed));
    }
    lock.lock();
    // After a long stall (suspend, heavy contention) do not fire a burst to catch up.
    const auto now = std::chrono::steady_clock::now();
    if (now - next > std::chrono::milliseconds(100)) next = now;
  }
}

std::vector<CpuProbes> Prober::drain() {
  std::lock_guard lock(state_->mu);
  std::vector<CpuProbes> out = state_->window;
  for (auto& c : state_->window) c = CpuProbes{c.cpu, {}, {}, 0, 0};
  return out;
}

std::vector<CpuProbes> Prober::totals() const {
  std::lock_guard lock(state_->mu);
  return state_->total;
}

void HaltExitPenalty::add(const std::vector<CpuProbes>& tick, bool cpus_idle, std::uint64_t now_ns) {
  if (!cpus_idle) return;
  for (const auto& c : tick) {
    park_.merge(c.park_path);
    hit_.merge(c.poll_hit);
  }
  if (park_.count() < kWindow) return;
  const double park = park_.interpolated_percentile(0.5);
  const bool have_hits = hit_.count() >= 8;
  const double hit = have_hits ? hit_.interpolated_percentile(0.5) : 0.0;
  penalty_ = std::max(0.0, park - hit);
  at_ = now_ns;
  source_ = have_hits ? "park-path minus poll-hit p50 of the daemon's probes on idle CPUs (" +
                            std::to_string(park_.count()) + " + " + std::to_string(hit_.count()) + " samples)"
                      : "park-path p50 of the daemon's probes on idle CPUs, no poll-hit samples to subtract: an "
                        "upper bound (" + std::to_string(park_.count()) + " samples)";
  park_.reset();
  hit_.reset();
}

}  // namespace haltpolld
