// The arithmetic on IdleTrace snapshots, shared by the eBPF build and the fallback.
#include "idle_trace.hpp"

namespace haltpolld {
namespace {

// The cumulative counters, for the arithmetic that treats them all alike.
constexpr std::uint64_t IdleCpuStats::*counters[] = {
    &IdleCpuStats::idle_entries, &IdleCpuStats::poll_entries, &IdleCpuStats::poll_hits,
    &IdleCpuStats::poll_timeouts, &IdleCpuStats::halts,        &IdleCpuStats::poll_ns,
    &IdleCpuStats::halt_ns,      &IdleCpuStats::ipi_skipped,  &IdleCpuStats::limit_events,
    &IdleCpuStats::grows,        &IdleCpuStats::shrinks,      &IdleCpuStats::unmatched,
};
constexpr haltpoll::LatencyHistogram IdleCpuStats::*histograms[] = {
    &IdleCpuStats::poll_hit, &IdleCpuStats::poll_halt, &IdleCpuStats::halt, &IdleCpuStats::halt_residency};

}  // namespace

IdleCpuStats IdleCpuStats::minus(const IdleCpuStats& e) const {
  IdleCpuStats d = *this;
  for (auto m : counters) d.*m = this->*m > e.*m ? this->*m - e.*m : 0;
  for (auto h : histograms) (d.*h).subtract(e.*h);
  return d;
}

void IdleCpuStats::add(const IdleCpuStats& o) {
  for (auto m : counters) this->*m += o.*m;
  for (auto h : histograms) (this->*h).merge(o.*h);
  if (o.poll_limit_ns && (!poll_limit_ns || *o.poll_limit_ns > *poll_limit_ns)) poll_limit_ns = o.poll_limit_ns;
}

IdleCpuStats IdleTraceSnapshot::total() const {
  IdleCpuStats t;
  for (const auto& c : cpus) t.add(c);
  return t;
}

}  // namespace haltpolld
