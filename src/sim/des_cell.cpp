// One measurement cell of the discrete-event guest (des_cell.hpp).
#include "sim/des_cell.hpp"

#include <vector>

namespace haltpolld::des {

CellResult run_cell(const Costs& costs, const Workload& load, int cpus, std::uint32_t cap_ns, Ns warmup, Ns duration,
                    std::uint64_t seed, const std::string& metric) {
  GuestConfig cfg;
  cfg.cpus = cpus;
  cfg.costs = costs;
  cfg.params.guest_halt_poll_ns = cap_ns;
  cfg.seed = seed;
  Guest g(cfg, load);
  g.run_until(warmup);
  std::vector<CpuCounters> before;
  for (int c = 0; c < cpus; ++c) before.push_back(g.counters(c));
  // Every metric of that name (a workload built with Workload::add has one per copy).
  auto gather = [&](haltpoll::LatencyHistogram& h) {
    std::uint64_t n = 0;
    for (const auto& m : g.metrics())
      if (m->name == metric) {
        h.merge(m->hist);
        n += m->count;
      }
    return n;
  };
  haltpoll::LatencyHistogram base;
  const std::uint64_t ops0 = gather(base);
  const std::uint64_t ev0 = g.events_processed();
  g.run_until(warmup + duration);

  CellResult r;
  r.seconds = static_cast<double>(duration) / 1e9;
  double poll_ns = 0, halts = 0, entries = 0, skips = 0;
  for (int c = 0; c < cpus; ++c) {
    const CpuCounters& a = g.counters(c);
    const CpuCounters& b = before[static_cast<std::size_t>(c)];
    poll_ns += static_cast<double>(a.time_ns[0] - b.time_ns[0]);
    halts += static_cast<double>(a.usage[1] - b.usage[1]);
    entries += static_cast<double>(a.usage[0] - b.usage[0] + a.usage[1] - b.usage[1]);
    skips += static_cast<double>(a.wake_idle_without_ipi - b.wake_idle_without_ipi);
  }
  r.poll_percent_per_cpu = 100 * poll_ns / (static_cast<double>(duration) * cpus);
  r.halts_per_s = halts / r.seconds;
  r.idle_entries_per_s = entries / r.seconds;
  r.ipi_skips_per_s = skips / r.seconds;
  r.events = g.events_processed() - ev0;
  if (!metric.empty()) {
    haltpoll::LatencyHistogram h;
    r.ops = gather(h) - ops0;
    h.subtract(base);
    r.result_mean_us = h.mean() / 1000;
    r.result_p50_us = h.interpolated_percentile(0.5) / 1000;
    r.result_p99_us = h.interpolated_percentile(0.99) / 1000;
  }
  return r;
}

}  // namespace haltpolld::des
