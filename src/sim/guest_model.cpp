#include "sim/guest_model.hpp"

#include "signals/kernel_signals.hpp"

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
LoadModel LoadModel::pipe_closed() {
  LoadModel m{"pipe_closed", {}, 1600};
  m.closed_loop = true;
  return m;
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

double SimulatedGuest::idle_period(Cpu& c, CpuIdleDelta& delta, CpuKernelSignals& ebpf, IdlePeriodHistograms& h,
                                   std::uint64_t idle_ns, std::uint32_t cap, bool remote) {
  std::uniform_real_distribution<double> jitter(0.75, 1.25);
  if (c.poll_limit == 0) {
    ++delta.halt_usage;
    delta.halt_ns += idle_ns;
    h.halt.record(idle_ns);
    h.halt_residency.record(idle_ns);
    adjust(c, idle_ns, cap);
    return params_.miss_cost_ns * jitter(rng_);
  }
  if (idle_ns <= c.poll_limit) {
    ++delta.poll_usage;
    delta.poll_ns += idle_ns;
    h.poll_hit.record(idle_ns);
    if (remote) ebpf.ipi_skipped = ebpf.ipi_skipped.value_or(0) + 1;
    return params_.hit_cost_ns * jitter(rng_);
  }
  ++delta.poll_usage;
  delta.poll_ns += c.poll_limit;
  ++delta.halt_usage;
  const std::uint64_t block = idle_ns - c.poll_limit;
  delta.halt_ns += block;
  h.poll_halt.record(idle_ns);
  h.halt_residency.record(block);
  adjust(c, block, cap);
  return params_.miss_cost_ns * jitter(rng_);
}

Observation SimulatedGuest::finish(Observation obs, std::vector<CpuIdleDelta> deltas,
                                   std::vector<CpuKernelSignals> ebpf, IdlePeriodHistograms h, std::uint64_t wakes) {
  double max_cpu = 0, sum_cpu = 0;
  obs.kernel.elapsed_ns = obs.elapsed_ns;
  for (std::size_t i = 0; i < deltas.size(); ++i) {
    const auto& delta = deltas[i];
    const double cpu = 100.0 * static_cast<double>(delta.poll_ns) / static_cast<double>(obs.elapsed_ns);
    max_cpu = std::max(max_cpu, cpu);
    sum_cpu += cpu;
    CpuKernelSignals k = derive_kernel_signals(delta);
    if (params_.ebpf) k.ipi_skipped = ebpf[i].ipi_skipped.value_or(0);
    obs.kernel.cpus.push_back(k);
  }
  if (params_.ebpf) obs.kernel.periods = std::move(h);
  else obs.kernel.bpf_missing = "model without eBPF";
  obs.cpuidle = std::move(deltas);
  obs.poll_cpu_percent = max_cpu;
  obs.mean_poll_cpu_percent = sum_cpu / static_cast<double>(cpus_.size());
  obs.total_poll_cpu_percent = sum_cpu;
  obs.wakes_per_second = static_cast<double>(wakes) * 1e9 / static_cast<double>(obs.elapsed_ns);
  obs.wake_latency_ns = last_.interpolated_percentile(percentile_ / 100.0);
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

Observation SimulatedGuest::run_closed(std::uint64_t duration_ns, std::uint32_t cap_ns, double percentile) {
  (void)percentile;
  Observation obs;
  obs.tick = ++tick_;
  obs.elapsed_ns = duration_ns;
  obs.current_ns = cap_ns;
  std::vector<CpuIdleDelta> deltas(2);
  std::vector<CpuKernelSignals> ebpf(2);
  IdlePeriodHistograms h;
  deltas[1].cpu = 1;
  if (cpus_.size() < 2) cpus_.resize(2);
  std::uniform_real_distribution<double> jitter(0.75, 1.25);
  // The token is on CPU `a`; the other CPU has been idle since it handed the token over, for its
  // partner's wake latency plus the partner's run time.
  double t = 0, last_latency = params_.miss_cost_ns;
  std::size_t a = 0;
  std::uint64_t wakes = 0;
  round_trips_ = 0;
  while (t < static_cast<double>(duration_ns)) {
    const double busy = load_.busy_ns * jitter(rng_);
    const std::size_t b = 1 - a;
    // One wake-up in 10000 waits 2 ms more (the tick, housekeeping), as on a real guest: the
    // halts after them are what moves a CPU's limit when the cap changes.
    const double extra = std::uniform_real_distribution<double>(0, 1)(rng_) < 0.0001 ? 2e6 : 0;
    const auto idle_ns = static_cast<std::uint64_t>(last_latency + busy + extra);
    const double latency = idle_period(cpus_[b], deltas[b], ebpf[b], h, idle_ns, cap_ns, true);
    last_.record(static_cast<std::uint64_t>(latency));
    ++wakes;
    t += busy + latency + extra;
    last_latency = latency;
    if (b == 0) ++round_trips_;
    a = b;
  }
  return finish(std::move(obs), std::move(deltas), std::move(ebpf), std::move(h), wakes);
}

Observation SimulatedGuest::run(std::uint64_t duration_ns, std::uint32_t cap_ns, double percentile) {
  last_.reset();
  percentile_ = percentile;
  if (load_.closed_loop) return run_closed(duration_ns, cap_ns, percentile);
  Observation obs;
  obs.tick = ++tick_;
  obs.elapsed_ns = duration_ns;
  obs.current_ns = cap_ns;
  std::vector<CpuIdleDelta> deltas(cpus_.size());
  std::vector<CpuKernelSignals> ebpf(cpus_.size());
  IdlePeriodHistograms h;
  std::uint64_t wakes = 0;
  for (std::size_t i = 0; i < cpus_.size(); ++i) {
    deltas[i].cpu = static_cast<int>(i);
    double t = 0;
    while (t < static_cast<double>(duration_ns)) {
      t += load_.busy_ns;
      const double idle = draw_idle();
      const double latency =
          idle_period(cpus_[i], deltas[i], ebpf[i], h, static_cast<std::uint64_t>(idle), cap_ns, false);
      last_.record(static_cast<std::uint64_t>(latency));
      ++wakes;
      t += idle;
    }
  }
  return finish(std::move(obs), std::move(deltas), std::move(ebpf), std::move(h), wakes);
}

}  // namespace haltpolld
