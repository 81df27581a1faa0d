// CPU affinity: the CPUs the calling thread may run on, pinning the calling thread to one, and
// the kernel's CPU list format that names a set of them.
//
// affinity_cpus() reads sched_getaffinity for the calling thread, so it follows cgroup cpusets and
// taskset; pin_this_thread() narrows the calling thread's mask to one CPU. Neither touches shared
// state: any thread may call them at any time (a pin affects only the caller).
#pragma once

#include <optional>
#include <string_view>
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

// The highest CPU number a list may name: the kernel's NR_CPUS is at most 8192.
inline constexpr int kMaxCpuNumber = 8191;

// The kernel's CPU list format (/sys/devices/system/cpu/online, cpusets, `taskset -c`, the
// daemon's `cpus` key): comma-separated CPU numbers or ranges a-b with a <= b, such as "0-3,6";
// blanks and newlines around the whole list are ignored. The CPUs ascending, each once; empty
// optional for an empty list, a malformed item, or a CPU above kMaxCpuNumber.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);

}  // namespace haltpoll
