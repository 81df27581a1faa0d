// CPU placement functions shared by the benchmarks that pin threads (bench_barrier, bench_pool,
// bench_handoff_floor): the library's affinity functions with the benchmarks' error convention.
#pragma once

#include <system_error>
#include <vector>

#include "haltpoll/affinity.hpp"

namespace benchutil {

// Pins the calling thread to `cpu`; false if the kernel refused.
inline bool pin_to(int cpu) { return !haltpoll::pin_this_thread(cpu); }

// The CPUs of the process's affinity mask, ascending (empty if it cannot be read).
inline std::vector<int> affinity_cpus() {
  try {
    return haltpoll::affinity_cpus();
  } catch (const std::system_error&) {
    return {};
  }
}

}  // namespace benchutil
