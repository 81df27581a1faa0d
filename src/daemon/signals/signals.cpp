#include "signals/kernel_signals.hpp"

namespace haltpolld {

CpuKernelSignals derive_kernel_signals(const CpuIdleDelta& d) {
  CpuKernelSignals k;
  k.cpu = d.cpu;
  k.poll_entries = d.poll_usage;
  k.poll_ns = d.poll_ns;
  k.halts = d.halt_usage;
  k.halt_ns = d.halt_ns;
  k.poll_misses = std::min(d.poll_usage, d.halt_usage);
  k.poll_hits = d.poll_usage - k.poll_misses;
  return k;
}

}  // namespace haltpolld
