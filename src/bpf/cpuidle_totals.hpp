// The cpuidle sysfs counters: the one reader of /devices/system/cpu/cpuN/cpuidle/stateK/
// {name,usage,time} (read_cpuidle_states), which the daemon's Sensors, IdleTrace's search for the
// POLL state and the sums below all use, and those sums over CPUs split into POLL and the other
// states: the kernel's own count that IdleTrace's poll entries and halts are checked against
// (tests/bpf, haltpoll_idle_trace). Read-only, no state: any thread may call them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// One cpuidle state of one CPU, as sysfs counts it.
struct CpuidleState {
  std::string name;           // "POLL", "haltpoll idle", "C1", ...
  std::uint64_t usage = 0;    // entries
  std::uint64_t time_us = 0;  // residency
};

// CPU `cpu`'s states under sysfs_root (the sysfs mount, "/sys"), in state order, up to the first
// state whose name, usage or time cannot be read. Empty when the CPU has no cpuidle states (no
// cpuidle driver) or does not exist.
std::vector<CpuidleState> read_cpuidle_states(const std::string& sysfs_root, unsigned cpu);

struct CpuidleTotals {
  std::uint64_t poll_usage = 0, poll_time_us = 0;  // the POLL state
  std::uint64_t halt_usage = 0, halt_time_us = 0;  // every other state
  unsigned cpus = 0;                               // CPUs with cpuidle states
};

// Sums the states of every CPU under sysfs_root; poll_state is the POLL index (none: everything
// counts as halt).
CpuidleTotals read_cpuidle_totals(const std::string& sysfs_root, std::optional<unsigned> poll_state);

}  // namespace haltpolld
