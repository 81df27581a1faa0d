// The daemon's guest edges on the discrete-event guest (des_edges.hpp).
#include "sim/loop/des_edges.hpp"

#include "tuning/prober.hpp"

#include <algorithm>
#include <string>

namespace haltpolld::des {

namespace {
std::uint64_t delta(std::uint64_t now, std::uint64_t before) { return now >= before ? now - before : 0; }
}  // namespace

DesSignals::DesSignals(const Guest& g, DesSignalOptions o) : g_(g), o_(std::move(o)) {}

Observation DesSignals::sample(std::uint64_t now_ns) {
  Observation obs;
  const std::uint64_t elapsed = primed_ ? delta(now_ns, last_ns_) : 0;
  obs.elapsed_ns = elapsed;
  obs.kernel.elapsed_ns = elapsed;
  const auto n = static_cast<std::size_t>(g_.cpus());
  // The eBPF fields only for a tick the programs were attached for whole (as Sensors::sample).
  const bool traced = o_.ebpf && whole_ && attached_;
  whole_ = attached_;
  if (!o_.ebpf) obs.kernel.bpf_missing = "simulated guest without the eBPF reader";
  else if (!traced) obs.kernel.bpf_detached = attached_ ? "eBPF programs attached during the tick" : detached_why_;

  if (primed_ && elapsed > 0) {
    double max_cpu = 0, sum_cpu = 0, wakes = 0;
    IdlePeriodHistograms h;
    for (std::size_t i = 0; i < n; ++i) {
      const int cpu = static_cast<int>(i);
      const CpuCounters& a = g_.counters(cpu);
      const CpuCounters& b = last_[i];
      CpuIdleDelta d;
      d.cpu = cpu;
      d.poll_usage = delta(a.usage[CpuCounters::poll], b.usage[CpuCounters::poll]);
      // sysfs shows µs, truncated; the daemon multiplies its deltas back to ns.
      d.poll_ns = delta(a.time_us(CpuCounters::poll), b.time_us(CpuCounters::poll)) * 1000;
      d.halt_usage = delta(a.usage[CpuCounters::halt], b.usage[CpuCounters::halt]);
      d.halt_ns = delta(a.time_us(CpuCounters::halt), b.time_us(CpuCounters::halt)) * 1000;
      const double pc = std::min(100.0, 100.0 * static_cast<double>(d.poll_ns) / static_cast<double>(elapsed));
      max_cpu = std::max(max_cpu, pc);
      sum_cpu += pc;
      wakes += static_cast<double>(std::max(d.poll_usage, d.halt_usage));
      obs.cpuidle.push_back(d);
      CpuKernelSignals k = derive_kernel_signals(d);
      if (traced) {
        const std::uint64_t timed_out = delta(a.polls_timed_out, b.polls_timed_out);
        k.poll_misses = timed_out;
        k.poll_hits = delta(d.poll_usage, timed_out);
        k.outcomes_exact = true;
        k.ipi_skipped = delta(a.wake_idle_without_ipi, b.wake_idle_without_ipi);
        k.poll_limit_ns = g_.poll_limit_ns(cpu);
        k.limit_grows = delta(a.limit_grow, b.limit_grow);
        k.limit_shrinks = delta(a.limit_shrink, b.limit_shrink);
        const CpuHistograms& ha = g_.histograms(cpu);
        const CpuHistograms& hb = last_hist_[i];
        auto add = [](haltpoll::LatencyHistogram& into, const haltpoll::LatencyHistogram& now,
                      const haltpoll::LatencyHistogram& before) {
          haltpoll::LatencyHistogram d2 = now;
          d2.subtract(before);
          into.merge(d2);
        };
        add(h.poll_hit, ha.poll_hit, hb.poll_hit);
        add(h.poll_halt, ha.poll_halt, hb.poll_halt);
        add(h.halt, ha.halt, hb.halt);
        add(h.halt_residency, ha.halt_residency, hb.halt_residency);
      }
      obs.kernel.cpus.push_back(k);
    }
    if (traced) {
      obs.kernel.periods = std::move(h);
      ++traced_ticks_;
    }
    obs.poll_cpu_percent = max_cpu;
    obs.mean_poll_cpu_percent = sum_cpu / static_cast<double>(n);
    obs.total_poll_cpu_percent = sum_cpu;
    obs.wakes_per_second = wakes * 1e9 / static_cast<double>(elapsed);
    obs.cpu_source = "cpuidle";
    ++ticks_;
  }
  obs.halt_exit_penalty_ns = o_.halt_exit_penalty;
  // The simulated guest has no QoS requests, devices or hotplug to read: kernel.overrides stays
  // empty (the tuner then prices every CPU, as it does on a guest without overrides).

  last_.resize(n);
  last_hist_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    last_[i] = g_.counters(static_cast<int>(i));
    if (o_.ebpf) last_hist_[i] = g_.histograms(static_cast<int>(i));
  }
  last_ns_ = now_ns;
  primed_ = true;
  return obs;
}

bool DesSignals::set_idle_trace_attached(bool on, std::string why) {
  if (!o_.ebpf) return false;
  // As Sensors: the controller attaches right after a sample, so the tick in progress counts
  // as whole (the eBPF counts are deltas from that sample); detached, the next tick is not.
  if (on != attached_) whole_ = on;
  attached_ = on;
  detached_why_ = on ? std::string() : std::move(why);
  return true;
}

SignalSourceStatus DesSignals::status() const {
  SignalSourceStatus s;
  for (int c = 0; c < g_.cpus(); ++c) s.cpus.push_back(c);
  s.cpuidle_available = true;
  s.cpuidle = "states POLL,haltpoll (simulated)";
  s.kernel_signals =
      o_.ebpf ? (attached_ ? "simulated eBPF reader, attached" : "simulated eBPF reader, detached") : "none";
  if (!o_.ebpf) s.kernel_signals_missing = "simulated guest without the eBPF reader";
  return s;
}

DesActuator::DesActuator(Guest& g) : g_(g), boot_(g.params()) {}

KernelHaltpollState DesActuator::detect() const { return KernelHaltpollState{true, "haltpoll", "haltpoll", true, {}}; }

std::optional<std::string> DesActuator::read(const char* name) const {
  std::optional<std::string> out;
  const haltpoll::HaltpollParams& p = g_.params();
  haltpoll::for_each_haltpoll_param([&](const char* n, auto member, haltpoll::HaltpollParamKind kind) {
    if (std::string_view(n) != name) return;
    if (kind == haltpoll::HaltpollParamKind::flag) out = (p.*member) ? "Y" : "N";
    else out = std::to_string(p.*member);
  });
  return out;
}

std::optional<std::uint32_t> DesActuator::read_poll_ns() const { return g_.params().guest_halt_poll_ns; }

ActuatorResult DesActuator::apply(const haltpoll::HaltpollParams& p) {
  ActuatorResult r;
  if (p == g_.params()) return r;
  saved_ = true;
  g_.set_params(p);
  ++writes_;
  r.written = true;
  return r;
}

ActuatorResult DesActuator::set_poll_ns(std::uint32_t ns) {
  haltpoll::HaltpollParams p = g_.params();
  p.guest_halt_poll_ns = ns;
  return apply(p);
}

ActuatorResult DesActuator::set_grow_start_ns(std::uint32_t ns) {
  haltpoll::HaltpollParams p = g_.params();
  p.guest_halt_poll_grow_start = ns;
  return apply(p);
}

ActuatorResult DesActuator::reset_poll_limits() {
  g_.reset_limits();
  ++resets_;
  return ActuatorResult{true, true, 0, {}};
}

ActuatorResult DesActuator::restore() {
  ActuatorResult r;
  if (!saved_) return r;
  r = apply(boot_);
  saved_ = false;
  return r;
}

double measure_halt_exit_penalty(const Costs& costs, int cpus, std::uint64_t seed) {
  Rng rng(seed ^ 0x9e3779b97f4a7c15ULL);
  HaltExitPenalty penalty;
  std::vector<CpuProbes> tick(static_cast<std::size_t>(std::max(cpus, 1)));
  for (std::size_t i = 0; i < tick.size(); ++i) tick[i].cpu = static_cast<int>(i);
  for (std::uint64_t k = 0; !penalty.penalty_ns(); ++k) {
    CpuProbes& c = tick[k % tick.size()];
    c.park_path.record(static_cast<std::uint64_t>(costs.wake_halted.draw(rng)));
    c.poll_hit.record(static_cast<std::uint64_t>(costs.wake_polling.draw(rng)));
    if ((k + 1) % HaltExitPenalty::kWindow == 0) {
      penalty.add(tick, true, k);
      for (CpuProbes& t : tick) t.park_path.reset(), t.poll_hit.reset();
    }
  }
  return *penalty.penalty_ns();
}

}  // namespace haltpolld::des
