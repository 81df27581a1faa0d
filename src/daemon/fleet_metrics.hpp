// FleetMetrics: collects the FleetSeries of the Prometheus exposition (control/prometheus.hpp) on the control
// thread. record() counts each tick's Decision by action and stamps the last change of the tuner's
// value; refresh() takes everything else from the tick's DaemonSnapshot (control/daemon_snapshot.hpp):
// the cumulative cpuidle counters and /proc/stat steal the tick's Observation was computed from and
// its polling overrides (no file is read again), the effective mode and reason, and the policy, back-off threshold and
// state file's fate from Controller::status(). Kept apart from control/prometheus.cpp so that the writer stays pure
// formatting (the fuzz targets compile it alone). Not thread-safe: one thread calls all.
#pragma once

#include "control/daemon_snapshot.hpp"
#include "control/stats.hpp"
#include "tuning/decision.hpp"

namespace haltpolld {

class FleetMetrics {
 public:
  FleetMetrics();
  void record(const Decision& d);
  void refresh(const DaemonSnapshot& snapshot);
  const FleetSeries& series() const noexcept { return series_; }

 private:
  FleetSeries series_;
};

}  // namespace haltpolld
