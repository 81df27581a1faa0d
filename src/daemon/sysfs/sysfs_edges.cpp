#include "sysfs/sysfs_edges.hpp"

#include "sysfs/actuator.hpp"
#include "sysfs/file_io.hpp"
#include "sysfs/sensors.hpp"

#include <haltpoll/clock.hpp>

#include <chrono>

namespace haltpolld {

std::uint64_t SystemClock::steady_ns() const { return static_cast<std::uint64_t>(haltpoll::clock_monotonic_ns()); }

std::int64_t SystemClock::unix_ms() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

GuestEdges sysfs_edges(const std::string& sysfs_root, const std::string& state_dir, std::vector<int> cpus,
                       bool kernel_signals) {
  // One set of held reads for both: a tick reads current_governor once, whoever asks first.
  auto reads = std::make_shared<HeldReads>();
  auto sensors = std::make_shared<Sensors>(sysfs_root, std::move(cpus), reads);
  // The eBPF signals (exact outcomes, IPI skips, per-CPU limits, idle-period histograms) where the
  // kernel allows them; without them the counters alone drive the tuner and status says why.
  if (kernel_signals) sensors->enable_idle_trace();
  return {std::move(sensors), std::make_shared<SysfsHaltpollParams>(sysfs_root, haltpoll_state_file(state_dir), reads),
          std::make_shared<SystemClock>()};
}

}  // namespace haltpolld
