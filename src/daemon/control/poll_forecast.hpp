// What enabling halt-polling would buy on a guest whose kernel does not poll (no cpuidle driver is
// registered, so every idle entry halts and the eBPF program on power:cpu_idle counts each one as a
// halt): the idle periods of the last tick the tracepoint counted, replayed through the library's
// haltpoll model (replay_cap, tuning/tuner.hpp) at every rung of the tuner's ladder, give per rung
// the halt exits it would avoid, the polls that would time out and the poll CPU; the balanced
// policy's open-loop objective names the rung the tuner would choose. GetStats carries it as
// `kernel_signals.forecast` (docs/protocol.md). Pure functions of plain values, computed on the
// control thread when a report is asked: no state, no I/O.
//
// Only open-loop effects are visible: a closed loop (a request waits for its reply) speeds up once
// its wake-ups are caught polling, its idle periods shrink and more of them fit under a cap, but a
// guest that does not poll shows only the periods it has now. So the forecast is a lower bound of
// the gain for closed loops and exact in expectation for open ones (arrivals that do not depend on
// the guest's own latency), within the model's error.
#pragma once

#include "signals/kernel_signals.hpp"
#include "tuner_params.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

struct ControllerStatus;
struct KernelSignalsStats;

// The error stated with every forecast: the discrete-event simulator's calibration tolerance against
// the real guest (kCalibrationTolerance, src/sim/des_calibration.hpp), halts/s within 25 % or 200/s
// and poll CPU within 5 points of one CPU. The control layer may not include the simulator's, so the
// numbers are carried here; test_poll_forecast fails when the two disagree.
struct ForecastError {
  double halts_percent = 25;
  double halts_per_s = 200;
  double poll_points = 5;
};
inline constexpr ForecastError kForecastError{};

// The halt-exit penalty the forecast prices a halt at until the daemon has measured its own: what
// the probes read on the real 2-vCPU guest (docs/operations.md, the recording rules).
inline constexpr double kUnmeasuredPenaltyNs = 20000;
// The choice's tie: the cheapest rung whose net is within this share of the best rung's poll CPU
// of the best net.
inline constexpr double kForecastTieShare = 0.05;

// What the forecast needs of the tuner: its ladder, its parameters (grow_start, the balanced
// policy's budget) and the penalty it measured.
struct ForecastInputs {
  std::vector<std::uint32_t> ladder_ns;
  TunerParams params;
  std::optional<double> penalty_ns;  // the daemon's measured halt-exit penalty; empty: unmeasured
};
// From Controller::status() (the live ladder, parameters and penalty); without a Controller the
// default tuner's (an empty ladder_ns stands for Tuner(params).ladder()).
ForecastInputs forecast_inputs(const ControllerStatus* controller);

// One rung, per second of the tick over all CPUs.
struct RungForecast {
  std::uint32_t ns = 0;
  std::uint32_t grow_start_ns = 0;  // the guest_halt_poll_grow_start the replay ran with
  double halts_avoided_per_s = 0;   // periods caught polling: halt exits that would not happen
  double halts_per_s = 0;           // halts left
  // The polls that would time out, at most: the replay counts halts, not which of them followed a
  // poll (a CPU whose limit is 0 halts without one), so this is the lesser of the halts left and
  // the poll time over the shortest non-zero limit, min(grow_start, cap).
  double poll_timeouts_per_s_at_most = 0;
  double poll_cpus = 0;  // CPU-seconds of polling per second, all CPUs
  double poll_cpu_percent_per_cpu = 0;
  double net = 0;           // halts avoided × penalty − poll_cpus (CPU-seconds per second)
  bool acceptable = false;  // within the balanced policy's budget (mean per CPU), or paying for itself
};

struct PollForecast {
  std::string reason;  // why there is none; empty when `rungs` holds the forecast
  std::uint64_t tick = 0;
  std::uint64_t elapsed_ns = 0;
  unsigned cpus = 0;
  // The idle periods replayed (all CPUs, the tick's): count, rate and distribution.
  std::uint64_t periods = 0;
  double periods_per_s = 0;
  double p50_ns = 0, p90_ns = 0, p99_ns = 0;
  double penalty_ns = kUnmeasuredPenaltyNs;
  bool penalty_measured = false;
  double max_poll_cpu_percent = 10;  // the balanced policy's budget the rungs were judged by
  std::vector<RungForecast> rungs;   // the ladder's order
  std::size_t best = 0, chosen = 0;  // indexes into `rungs`
  std::string chosen_reason;

  bool available() const noexcept { return reason.empty() && !rungs.empty(); }
};

// The forecast from one tick's signals, which must carry the eBPF idle-period histograms (else the
// forecast says why it has none). `tick_number` names the tick in the report.
PollForecast forecast_polling(const KernelSignals& tick, std::uint64_t tick_number, const ForecastInputs& in);

// The forecast for a guest whose kernel does not poll (KernelSignals::Counters::tracepoint), from
// the last tick the tracepoint counted; empty on a guest with cpuidle counters, where the tuner
// measures every rung itself.
std::optional<PollForecast> driverless_forecast(const KernelSignalsStats& k, const ForecastInputs& in);

// `kernel_signals.forecast` (docs/protocol.md).
nlohmann::json to_json(const PollForecast& f);

}  // namespace haltpolld
