// TickState: what the daemon keeps of its ticks for the clients, so that GetStats and the metrics
// textfile (the hot reads) neither lock the Controller nor read sysfs: the last tick's
// DaemonSnapshot (control/daemon_snapshot.hpp), the fleet series derived from it (FleetMetrics) and
// the kernel signals with their running totals. Not thread-safe: the control thread calls all.
#pragma once

#include "control/daemon_snapshot.hpp"
#include "control/stats.hpp"
#include "fleet_metrics.hpp"
#include "tuning/decision.hpp"

namespace haltpolld {

class TickState {
 public:
  void record(const Decision& d) { fleet_.record(d); }
  // Takes a new snapshot (each tick, and after a config change) and derives the rest from it.
  void refresh(DaemonSnapshot snapshot);
  void reset_totals() { kernel_signals_.totals.reset(); }

  const DaemonSnapshot& snapshot() const noexcept { return snapshot_; }
  const FleetSeries& fleet() const noexcept { return fleet_.series(); }
  const KernelSignalsStats& kernel_signals() const noexcept { return kernel_signals_; }

 private:
  DaemonSnapshot snapshot_;
  FleetMetrics fleet_;
  KernelSignalsStats kernel_signals_;
};

}  // namespace haltpolld
