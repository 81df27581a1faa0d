// The daemon's numbers as one plain value (StatsSnapshot) and its JSON form (GetStats/Watch); the
// Prometheus form is in prometheus.hpp. The snapshot is taken on the control thread from the pool's counters
// (which the workers update with relaxed atomics, so a snapshot is per-counter exact but not a
// cross-counter atomic cut) and from the kernel's signals of the last tick, whose per-tick deltas
// KernelSignalTotals sums on the same thread; everything here is pure formatting and arithmetic,
// unit-tested on its own: no file or socket I/O.
#pragma once

#include "control/poll_forecast.hpp"
#include "signals/kernel_signals.hpp"
#include "sysfs/kernel_params.hpp"

#include <haltpoll/worker_pool.hpp>

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace haltpolld {

struct LatencyBucket {
  std::uint64_t le_ns;  // upper bound, inclusive; UINT64_MAX = +Inf
  std::uint64_t count;  // samples in this bucket only (not cumulative)
};

// One CPU's worker in a snapshot: every counter of the library's table HALTPOLL_WORKER_COUNTERS
// (worker_pool.hpp), so that a counter added there reaches GetStats and Prometheus without an edit
// here, plus the latency histogram reduced to percentiles and exposition buckets.
struct CpuStats {
  unsigned cpu = 0;
#define HALTPOLLD_CPU_STATS_FIELD(name, kind, source, help) std::uint64_t name = 0;
  HALTPOLL_WORKER_COUNTERS(HALTPOLLD_CPU_STATS_FIELD)
#undef HALTPOLLD_CPU_STATS_FIELD
  // Submit→start latency (the wake latency of this CPU's worker).
  std::uint64_t latency_count = 0;
  std::uint64_t latency_sum_ns = 0;
  std::uint64_t p50_ns = 0, p90_ns = 0, p99_ns = 0, p999_ns = 0;
  std::vector<LatencyBucket> latency_buckets;

  // The counters of `w` and its histogram, reduced to percentiles and to one bucket per bound of
  // `bounds` (ascending, ns) plus a last +Inf bucket.
  static CpuStats of(const haltpoll::WorkerStats& w, const std::vector<std::uint64_t>& bounds);
};

nlohmann::json to_json(const KernelHaltpollParams& k);

// The series a fleet scrapes beside the pool's: the kernel's cumulative cpuidle counters per CPU
// (KernelCpuidleCounters, signals/kernel_signals.hpp), steal time, and the tuner's and actuator's
// state. Collected by FleetMetrics (fleet_metrics.hpp); here only the plain values to render.

struct FleetSeries {
  std::vector<KernelCpuidleCounters> cpuidle;  // empty when the guest has no cpuidle states
  std::optional<double> steal_seconds;         // /proc/stat aggregate steal, cumulative
  std::string mode = "observe";                // effective mode
  std::string mode_reason;                     // why not kernel mode; empty when kernel mode is active
  std::string tuner_policy;
  bool state_file_pending = false;  // a state file with saved originals that this run has not put back
  std::string other_writer;         // the parameter another writer set (haltpolld stopped writing); empty: none
  struct DecisionCount {
    std::string action;
    std::uint64_t count = 0;
  };
  std::vector<DecisionCount> decisions;  // every action, zeros included; empty: no tuner
  std::vector<DecisionCount> rules;      // every tuner rule (Rule), zeros included; `action` holds its name
  std::optional<double> last_change_unix_seconds;
  std::optional<double> steal_backoff_ratio;
  std::optional<PollingOverrides> polling_overrides;  // the last tick's; empty: not read
};

// The kernel's idle accounting of one CPU summed over every tick since start (or ResetStats).
struct CpuKernelTotals {
  int cpu = 0;
  std::uint64_t idle_entries = 0;  // idle periods: a poll that timed out and its halt count once
  std::uint64_t poll_entries = 0;
  std::uint64_t poll_ns = 0;
  std::uint64_t halts = 0;
  std::uint64_t halt_ns = 0;
  std::uint64_t poll_hits = 0;
  std::uint64_t poll_misses = 0;
  std::optional<std::uint64_t> ipi_skipped;  // empty until a tick carried the eBPF count
  std::uint64_t limit_grows = 0;
  std::uint64_t limit_shrinks = 0;
  std::optional<std::uint64_t> steal_ns;  // this CPU's /proc/stat steal; empty until a tick had it

  CpuKernelTotals& operator+=(const CpuKernelTotals& o) noexcept;
  static CpuKernelTotals of(const CpuKernelSignals& tick) noexcept;  // one tick's counts
};

// Sums the per-tick deltas of KernelSignals: an Observation carries one tick only, while `stats
// --kernel` totals and Prometheus counters need the running sums. Fed once per tick.
class KernelSignalTotals {
 public:
  void add(const KernelSignals& tick);
  void reset();

  std::uint64_t ticks() const noexcept { return ticks_; }
  std::uint64_t elapsed_ns() const noexcept { return elapsed_ns_; }
  const std::vector<CpuKernelTotals>& cpus() const noexcept { return cpus_; }  // by CPU number
  // Merged over the ticks that had them; empty when no tick had eBPF histograms.
  const std::optional<IdlePeriodHistograms>& periods() const noexcept { return periods_; }

 private:
  std::uint64_t ticks_ = 0;
  std::uint64_t elapsed_ns_ = 0;
  std::vector<CpuKernelTotals> cpus_;
  std::optional<IdlePeriodHistograms> periods_;
};

// The kernel's view in a snapshot: the last tick's signals as sampled, and the totals.
struct KernelSignalsStats {
  std::uint64_t tick = 0;  // the controller's tick that `last` is from; 0: none yet
  KernelSignals last;
  std::optional<double> steal_percent;  // all CPUs (per CPU: CpuKernelSignals::steal_percent)
  std::string cpuidle_status;           // the sensors' words: states found, or why there are none
  KernelSignalTotals totals;
  // The last tick that carried per-CPU counts, and its number (0: none yet). On a guest without a
  // cpuidle driver only the ticks the eBPF program was attached for count (one in
  // tuner.steady_trace_every), so the per-CPU rows come from here between them.
  KernelSignals last_counted;
  std::uint64_t last_counted_tick = 0;

  // Takes one tick's signals; a tick already taken (the controller did not tick again) is ignored,
  // so that the totals count every tick exactly once.
  void record(std::uint64_t tick_number, const KernelSignals& signals, std::optional<double> steal);
};

// Mean poll length per hit and per miss of one CPU's tick. The counters give only the mean over
// all polls; a miss lasts the CPU's limit, so with the limit known (eBPF) both follow, and without
// it only a CPU whose polls all hit (or all missed) has an exact split.
struct PollMeans {
  std::optional<double> poll_ns, hit_ns, miss_ns;
};
PollMeans poll_means(const CpuKernelSignals& c);

// Idle-period histogram buckets for the exposition: 1-2-5 bounds from 1 µs to 10 s (idle periods
// of an idle guest last seconds), each bucket its own count, a last one (UINT64_MAX) for the rest.
std::vector<LatencyBucket> idle_period_buckets(const haltpoll::LatencyHistogram& h);

// The "kernel_signals" object of GetStats/Watch (docs/protocol.md); `forecast` is its `forecast`
// (null when empty).
nlohmann::json kernel_signals_to_json(const KernelSignalsStats& k, std::optional<unsigned> cpu, bool histogram,
                                      const std::optional<PollForecast>& forecast = std::nullopt);

struct StatsSnapshot {
  std::string version;
  std::string mode;           // effective mode
  std::string backend;        // wait backend of the pool
  double uptime_seconds = 0;
  std::uint64_t monotonic_ns = 0;  // when taken (CLOCK_MONOTONIC), for client-side rates
  std::vector<CpuStats> cpus;
  KernelHaltpollParams kernel;
  KernelSignalsStats kernel_signals;
  ForecastInputs forecast_inputs;  // the tuner's ladder, parameters and penalty, for kernel_signals.forecast
  std::uint64_t pin_failures = 0;
  std::uint64_t tuner_ticks = 0;
  std::uint64_t config_reloads = 0;
  std::uint64_t config_reload_failures = 0;
  std::uint64_t control_connections = 0;  // open now
  std::uint64_t control_connections_total = 0;
  std::uint64_t control_requests_total = 0;
  std::uint64_t control_errors_total = 0;  // error replies sent
  std::uint64_t control_rejected_total = 0;  // connections refused (limit) or closed (malformed, idle)
  FleetSeries fleet;
};

// GetStats/Watch payload. `cpu` filters to one CPU (the caller checks that it exists);
// `histogram` includes each CPU's buckets and those of the kernel's idle-period histograms. On a
// guest whose kernel does not poll it computes the forecast (driverless_forecast: the idle periods
// replayed at every rung, at most 8000 of them a rung), which the Prometheus form does not need.
nlohmann::json stats_to_json(const StatsSnapshot& s, std::optional<unsigned> cpu, bool histogram);

}  // namespace haltpolld
