// The real guest's edges (signals/edges.hpp), for the shell to hand to the Controller: Sensors on
// `sysfs_root` for `cpus` (empty: the CPUs listed online), with the eBPF signals when
// `kernel_signals` (only on the running kernel's root, "/"), SysfsHaltpollParams keeping the
// originals in `<state_dir>/haltpoll-params.json`, and the system's clocks. The sensors and the
// actuator share one HeldReads (sysfs/file_io.hpp), so that a tick reads current_governor once
// whichever of them asks first. The edges stay the same for the Controller's life: another root,
// state directory or CPU set is another Controller.
#pragma once

#include "signals/edges.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace haltpolld {

// CLOCK_MONOTONIC (haltpoll::clock_monotonic_ns, the clock of the eBPF timestamps) and
// CLOCK_REALTIME (std::chrono::system_clock); safe from any thread.
class SystemClock final : public Clock {
 public:
  std::uint64_t steady_ns() const override;
  std::int64_t unix_ms() const override;
};

GuestEdges sysfs_edges(const std::string& sysfs_root, const std::string& state_dir, std::vector<int> cpus = {},
                       bool kernel_signals = true);

}  // namespace haltpolld
