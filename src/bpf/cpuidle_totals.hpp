// The cpuidle sysfs counters summed over CPUs and split into POLL and the other states: the
// kernel's own count that IdleTrace's poll entries and halts are checked against (tests/bpf,
// haltpoll_idle_trace). Read-only, no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace haltpolld {

struct CpuidleTotals {
  std::uint64_t poll_usage = 0, poll_time_us = 0;  // the POLL state
  std::uint64_t halt_usage = 0, halt_time_us = 0;  // every other state
  unsigned cpus = 0;                               // CPUs with a cpuidle directory
};

// Sums /devices/system/cpu/cpuN/cpuidle/stateK/{usage,time} under sysfs_root; poll_state is the
// POLL index (none: everything counts as halt).
CpuidleTotals read_cpuidle_totals(const std::string& sysfs_root, std::optional<unsigned> poll_state);

}  // namespace haltpolld
