// One measurement cell of the discrete-event guest: a workload at a static cap for a while, read
// the way the real-guest evaluations read a guest (cpuidle deltas, the load's own result).
#pragma once

#include "sim/des_guest.hpp"

#include <string>
#include <vector>

namespace haltpolld::des {

struct CellResult {
  double seconds = 0;
  double result_mean_us = 0;  // the metric's mean (µs per round trip, lateness, RTT)
  double result_p50_us = 0;
  double result_p99_us = 0;
  std::uint64_t ops = 0;
  double poll_percent_per_cpu = 0;  // POLL residency over all CPUs / (cpus × time), %
  double poll_percent_busiest = 0;  // the busiest CPU's POLL residency / time, %
  double halts_per_s = 0;           // all CPUs
  double idle_entries_per_s = 0;    // all CPUs
  double ipi_skips_per_s = 0;       // sched_wake_idle_without_ipi, all CPUs
  std::uint64_t events = 0;
};

// Reads a running guest the way the real evaluations read one: the counters and the load's metric
// at construction, the deltas up to now in result(). `metric` names the load's result (every
// metric of that name, one per copy of a load added several times; "" for none).
class CellMeter {
 public:
  CellMeter(const Guest& g, std::string metric);
  CellResult result() const;

 private:
  std::uint64_t gather(haltpoll::LatencyHistogram& h) const;
  const Guest& g_;
  std::string metric_;
  Ns t0_;
  std::vector<CpuCounters> before_;
  haltpoll::LatencyHistogram base_;
  std::uint64_t ops0_, ev0_;
};

// Runs `load` on `cpus` vCPUs with guest_halt_poll_ns = cap for `warmup` then `duration` of virtual
// time and reports the deltas over `duration`; `metric` names the load's result (every metric of that
// name, one per copy of a load added several times; "" for none).
CellResult run_cell(const Costs& costs, const Workload& load, int cpus, std::uint32_t cap_ns, Ns warmup, Ns duration,
                    std::uint64_t seed, const std::string& metric);

}  // namespace haltpolld::des
