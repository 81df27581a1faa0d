#include "sim/guest_model.hpp"

#include <algorithm>

namespace haltpolld {

LoadModel LoadModel::pipe() {
  // Two threads hand a byte back and forth: each CPU idles for about the other's run time.
  return {"pipe", {{0.999, 3000, 2000}, {0.001, 0, 2e6}}, 2500};
}
LoadModel LoadModel::timer_150us() {
  return {"timer_150us", {{0.99, 145000, 0}, {0.01, 0, 2e6}}, 5000};
}
LoadModel LoadModel::poisson_server() {
  // Requests at Poisson times, ~8k/s per CPU: exponential gaps with a mean of 100 µs.
  return {"poisson", {{0.99, 0, 100000}, {0.01, 0, 5e6}}, 10000};
}
LoadModel LoadModel::idle_guest() {
  return {"idle", {{1.0, 0, 10e6}}, 3000};
}

SimulatedGuest::SimulatedGuest(LoadModel load, int cpus, GuestModelParams params, std::uint64_t seed)
    : load_(std::move(load)), params_(params), cpus_(static_cast<std::size_t>(std::max(cpus, 1))), rng_(seed) {}

double SimulatedGuest::draw_idle() {
  double total = 0;
  for (const auto& c : load_.idle) total += c.weight;
  std::uniform_real_distribution<double> u(0, total);
  double pick = u(rng_);
  const LoadModel::Component* comp = &load_.idle.back();
  for (const auto& c : load_.idle) {
    if (pick < c.weight) {
      comp = &c;
      break;
    }
    pick -= c.weight;
  }
  double d = comp->fixed_ns;
  if (comp->exp_mean_ns > 0) d += std::exponential_distribution<double>(1.0 / comp->exp_mean_ns)(rng_);
  return std::max(d, 100.0);
}

// drivers/cpuidle/governors/haltpoll.c: adjust_poll_limit(), after a halt only.
void SimulatedGuest::adjust(Cpu& c, std::uint64_t block_ns, std::uint32_t cap) const {
  const haltpoll::HaltpollParams& h = params_.haltpoll;
  if (c.poll_limit < block_ns && block_ns <= cap) {
    std::uint32_t val = c.poll_limit * h.guest_halt_poll_grow;  // 32-bit, as in the kernel
    if (val < h.guest_halt_poll_grow_start) val = h.guest_halt_poll_grow_start;
    if (val > cap) val = cap;
    c.poll_limit = val;
  } else if (block_ns > cap && h.guest_halt_poll_allow_shrink) {
    std::uint32_t val = h.guest_halt_poll_shrink == 0 ? 0 : c.poll_limit / h.guest_halt_poll_shrink;
    if (val < h.guest_halt_poll_grow_start) val = 0;
    c.poll_limit = val;
  }
}

Observation SimulatedGuest::run(std::uint64_t duration_ns, std::uint32_t cap_ns, double percentile) {
  last_.reset();
  std::uniform_real_distribution<double> jitter(0.75, 1.25);
  Observation obs;
  obs.tick = ++tick_;
  obs.elapsed_ns = duration_ns;
  obs.current_ns = cap_ns;
  double max_cpu = 0, sum_cpu = 0;
  std::uint64_t wakes = 0;
  for (std::size_t i = 0; i < cpus_.size(); ++i) {
    Cpu& c = cpus_[i];
    CpuIdleDelta delta;
    delta.cpu = static_cast<int>(i);
    double t = 0;
    while (t < static_cast<double>(duration_ns)) {
      t += load_.busy_ns;
      const double idle = draw_idle();
      const auto idle_ns = static_cast<std::uint64_t>(idle);
      double latency;
      if (c.poll_limit == 0) {
        ++delta.halt_usage;
        delta.halt_ns += idle_ns;
        adjust(c, idle_ns, cap_ns);
        latency = params_.miss_cost_ns;
      } else if (idle_ns <= c.poll_limit) {
        ++delta.poll_usage;
        delta.poll_ns += idle_ns;
        latency = params_.hit_cost_ns;
      } else {
        ++delta.poll_usage;
        delta.poll_ns += c.poll_limit;
        ++delta.halt_usage;
        const std::uint64_t block = idle_ns - c.poll_limit;
        delta.halt_ns += block;
        adjust(c, block, cap_ns);
        latency = params_.miss_cost_ns;
      }
      last_.record(static_cast<std::uint64_t>(latency * jitter(rng_)));
      ++wakes;
      t += idle;
    }
    const double cpu = 100.0 * static_cast<double>(delta.poll_ns) / static_cast<double>(duration_ns);
    max_cpu = std::max(max_cpu, cpu);
    sum_cpu += cpu;
    obs.cpuidle.push_back(delta);
  }
  obs.poll_cpu_percent = max_cpu;
  obs.mean_poll_cpu_percent = sum_cpu / static_cast<double>(cpus_.size());
  obs.total_poll_cpu_percent = sum_cpu;
  obs.wakes_per_second = static_cast<double>(wakes) * 1e9 / static_cast<double>(duration_ns);
  obs.wake_latency_ns = last_.interpolated_percentile(percentile / 100.0);
  obs.latency_samples = last_.count();
  obs.mean_wake_latency_ns = last_.mean();
  obs.steal_percent = params_.steal_percent;
  obs.cpu_source = "model";
  obs.latency_source = "model";
  obs.probes.samples = last_.count();
  obs.probes.p50_ns = last_.interpolated_percentile(0.5);
  obs.probes.p99_ns = last_.interpolated_percentile(0.99);
  obs.probes.at_percentile_ns = *obs.wake_latency_ns;
  return obs;
}

}  // namespace haltpolld
