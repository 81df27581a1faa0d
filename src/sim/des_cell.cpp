// One measurement cell of the discrete-event guest (des_cell.hpp).
#include "sim/des_cell.hpp"

#include <algorithm>
#include <vector>

namespace haltpolld::des {

CellMeter::CellMeter(const Guest& g, std::string metric) : g_(g), metric_(std::move(metric)), t0_(g.now()) {
  for (int c = 0; c < g.cpus(); ++c) before_.push_back(g.counters(c));
  ops0_ = gather(base_);
  ev0_ = g.events_processed();
}

// Every metric of that name (a workload built with Workload::add has one per copy).
std::uint64_t CellMeter::gather(haltpoll::LatencyHistogram& h) const {
  std::uint64_t n = 0;
  for (const auto& m : g_.metrics())
    if (m->name == metric_) {
      h.merge(m->hist);
      n += m->count;
    }
  return n;
}

CellResult CellMeter::result() const {
  CellResult r;
  const Ns duration = g_.now() - t0_;
  const int cpus = g_.cpus();
  r.seconds = static_cast<double>(duration) / 1e9;
  if (duration <= 0) return r;
  double poll_ns = 0, halts = 0, entries = 0, skips = 0, busiest = 0;
  for (int c = 0; c < cpus; ++c) {
    const CpuCounters& a = g_.counters(c);
    const CpuCounters& b = before_[static_cast<std::size_t>(c)];
    const auto cpu_poll = static_cast<double>(a.time_ns[0] - b.time_ns[0]);
    poll_ns += cpu_poll;
    busiest = std::max(busiest, cpu_poll);
    halts += static_cast<double>(a.usage[1] - b.usage[1]);
    entries += static_cast<double>(a.usage[0] - b.usage[0] + a.usage[1] - b.usage[1]);
    skips += static_cast<double>(a.wake_idle_without_ipi - b.wake_idle_without_ipi);
  }
  r.poll_percent_per_cpu = 100 * poll_ns / (static_cast<double>(duration) * cpus);
  r.poll_percent_busiest = 100 * busiest / static_cast<double>(duration);
  r.halts_per_s = halts / r.seconds;
  r.idle_entries_per_s = entries / r.seconds;
  r.ipi_skips_per_s = skips / r.seconds;
  r.events = g_.events_processed() - ev0_;
  if (!metric_.empty()) {
    haltpoll::LatencyHistogram h;
    r.ops = gather(h) - ops0_;
    h.subtract(base_);
    r.result_mean_us = h.mean() / 1000;
    r.result_p50_us = h.interpolated_percentile(0.5) / 1000;
    r.result_p99_us = h.interpolated_percentile(0.99) / 1000;
  }
  return r;
}

CellResult run_cell(const Costs& costs, const Workload& load, int cpus, std::uint32_t cap_ns, Ns warmup, Ns duration,
                    std::uint64_t seed, const std::string& metric) {
  GuestConfig cfg;
  cfg.cpus = cpus;
  cfg.costs = costs;
  cfg.params.guest_halt_poll_ns = cap_ns;
  cfg.seed = seed;
  Guest g(cfg, load);
  g.set_histograms(false);  // a cell reads the counters and the load's metric only
  g.run_until(warmup);
  const CellMeter meter(g, metric);
  g.run_until(warmup + duration);
  return meter.result();
}

}  // namespace haltpolld::des
