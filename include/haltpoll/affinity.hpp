// CPU affinity: the CPUs the calling thread may run on, and pinning the calling thread to one.
//
// affinity_cpus() reads sched_getaffinity for the calling thread, so it follows cgroup cpusets and
// taskset; pin_this_thread() narrows the calling thread's mask to one CPU. Neither touches shared
// state: any thread may call them at any time (a pin affects only the caller).
#pragma once

#include <system_error>
#include <vector>

namespace haltpoll {

// The CPUs of the calling thread's affinity mask, ascending. Throws std::system_error when the
// mask cannot be read.
std::vector<int> affinity_cpus();

// Pins the calling thread to `cpu`. An empty error_code on success; EINVAL for a CPU number
// outside the kernel's mask size or one not in the allowed set, whatever sched_setaffinity says
// otherwise.
std::error_code pin_this_thread(int cpu) noexcept;

}  // namespace haltpoll
