// FleetMetrics: collects the FleetSeries of the Prometheus exposition (control/prometheus.hpp) on the control
// thread. record() counts each tick's Decision by action and stamps the last change of the tuner's
// value; refresh() re-reads the cumulative cpuidle counters and /proc/stat through Sensors (the
// same parsing the tuner's deltas come from) and takes mode, reason, policy, back-off threshold and
// the state file's fate from Controller::status(). Kept apart from control/prometheus.cpp so that the writer
// stays pure formatting (the fuzz targets compile it alone). Not thread-safe: one thread calls all.
#pragma once

#include "control/stats.hpp"
#include "tuning/controller_status.hpp"
#include "tuning/decision.hpp"

#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

class FleetMetrics {
 public:
  FleetMetrics();
  void record(const Decision& d);
  // `controller_status` is Controller::status() (empty without a controller).
  void refresh(const std::string& sysfs_root, const std::vector<unsigned>& cpus,
               const std::optional<ControllerStatus>& controller_status);
  const FleetSeries& series() const noexcept { return series_; }

 private:
  FleetSeries series_;
};

}  // namespace haltpolld
