// GetStatus' object, GetStats' snapshot (docs/protocol.md) and the status line as functions of a
// DaemonSnapshot (control/daemon_snapshot.hpp), of what the shell counts (ShellFacts) and of the
// worker pool's own counters: no sysfs, no Controller, no clock here, so that what a client reads
// is decided in one place and the effective mode only by effective_mode().
#pragma once

#include "config.hpp"
#include "control/control_server.hpp"
#include "control/daemon_snapshot.hpp"
#include "control/stats.hpp"

#include <haltpoll/worker_pool.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace haltpolld {

// The process, its counters and the control server's, as plain values taken when a report is asked.
struct ShellFacts {
  std::string version;
  int pid = 0;
  std::string backend;  // the pool's wait backend
  double uptime_seconds = 0;
  std::uint64_t monotonic_ns = 0;  // CLOCK_MONOTONIC when taken
  std::vector<unsigned> cpus;
  std::string config_file;
  std::uint64_t ticks = 0, reloads = 0, reload_failures = 0;
  std::optional<ControlServerCounters> control;  // empty before the server runs
  std::string textfile_error;                    // the metrics textfile's last failure; empty: none
};

// GetStatus. `pool` may be null (no worker pool).
nlohmann::json daemon_status_json(const Config& config, const DaemonSnapshot& snapshot, const KernelSignalsStats& kernel_signals,
                                  const ShellFacts& facts, const haltpoll::WorkerPool* pool);

// The status line for systemd (sd_notify STATUS=): "observe mode, 2 CPUs, tuner at 200000 ns".
std::string daemon_status_line(const DaemonSnapshot& snapshot, std::size_t cpus);

// GetStats and the metrics textfile: the per-CPU pool statistics on the exposition's fixed buckets
// (1-2-5 steps from 100 ns to 100 ms), or empty CPU entries without a pool.
StatsSnapshot daemon_stats(const DaemonSnapshot& snapshot, const FleetSeries& fleet, const KernelSignalsStats& kernel_signals,
                           const ShellFacts& facts, const haltpoll::WorkerPool* pool);

}  // namespace haltpolld
