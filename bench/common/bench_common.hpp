// CPU placement helpers shared by the benchmarks that pin threads (bench_barrier, bench_pool,
// bench_handoff_floor).
#pragma once

#include <pthread.h>
#include <sched.h>

#include <vector>

namespace benchutil {

// Pins the calling thread to `cpu`; false if the kernel refused.
inline bool pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// The CPUs of the process's affinity mask, ascending (empty if it cannot be read).
inline std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

}  // namespace benchutil
