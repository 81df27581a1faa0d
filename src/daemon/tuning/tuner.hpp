// Tuner: the pure decision step of the daemon's loop, Observation → Decision + reason.
// It owns no clock, does no I/O and starts no thread; its state is what it measured at each rung
// of its ladder and where it is in its search. The daemon, the unit tests, the replay tests over
// the real-guest recordings and the closed-loop model therefore run the very same code. Not
// thread-safe: one owner calls it.
//
// It decides from the kernel's own counters (Observation::kernel): per tick the idle periods
// (wake-ups), poll hits, halts and poll time of every CPU, and, when the eBPF reader fills them,
// the remote wake-ups that skipped the IPI and the idle-period histograms. A setting's value is
//   benefit = penalty × (wake-ups it served without a halt exit: IPI-skipped when counted, else
//             poll hits) + the closed loop's gain (its wake rate over the one at the ladder's
//             bottom, minus 1, times the CPUs the load wakes on: a loop twice as fast did one
//             CPU-second more per second on each of its CPUs, the same units as the cost, which
//             sums the poll time of every CPU)
//   cost    = the poll time of all CPUs (CPU-seconds per second)
// with `penalty` the halt-exit penalty the controller measured on this guest (Observation::
// halt_exit_penalty_ns; until it is measured, only the closed-loop term counts).
//
// The search (docs/tuning.md):
//   ladder  min_ns, start_ns × ladder_factor^k up to max_ns, max_ns;
//   sweep   started when halts are frequent and the load's signature (wake rate, halts, poll CPU
//           at the value in force) changed, or was never swept, or `resweep_after_ticks` passed.
//           It measures the bottom rung first (the baseline of the closed-loop gain), then skips
//           the rungs below half the baseline's mean halt residency (the kernel polls only once
//           the cap exceeds the halted periods; with histograms, the rungs predicted to catch no
//           period), then climbs one rung per judged measurement (`min_periods` idle periods or
//           `max_dwell_ticks`) until a rung adds poll CPU without paying, halts have become rare
//           and the wake rate stopped rising, the budget policy's limit is crossed, or max_ns;
//   choose  the policy's best measured rung; a near-tie goes to the lower rung (hysteresis);
//   steady  hold; a budget overrun steps down at once; with histograms, a lower rung predicted
//           to keep the hits at less poll CPU is tried and confirmed by the counters (or reverted).
// Policies: static (the configured value), balanced (most net benefit, within
// max_poll_cpu_percent unless benefit ≥ min_benefit_ratio × cost), budget (most net benefit under
// a hard per-CPU limit), latency (lowest rung whose mean halt-exit wait per wake-up, halts/wake-ups
// × penalty, is within target_wake_latency_ns). Steal above steal_backoff_percent steps down and
// blocks growth.
#pragma once

#include "signals/observation.hpp"
#include "tuner_params.hpp"
#include "tuning/decision.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace haltpolld {

// One rung's kernel counters, summed over the ticks measured at it.
struct RungMeasurement {
  std::uint32_t ns = 0;
  std::uint32_t ticks = 0;
  std::uint64_t elapsed_ns = 0;
  std::uint32_t cpus = 0;
  double periods = 0, halts = 0, hits = 0, halt_ns = 0, poll_ns = 0;
  std::optional<double> ipi_skipped;
  double max_cpu_time = 0;  // per-tick busiest CPU's poll %, × elapsed_ns
  std::vector<double> cpu_halts, cpu_halt_ns, cpu_periods;  // per CPU, in KernelSignals::cpus order

  void add(const KernelSignals& k);
  double per_s(double v) const noexcept { return elapsed_ns ? v * 1e9 / static_cast<double>(elapsed_ns) : 0; }
  double wake_rate() const noexcept { return per_s(periods); }
  // The share of the idle periods that ended in a halt (1 when there were none).
  double halt_share() const noexcept { return periods > 0 ? halts / periods : 1.0; }
  double halt_rate() const noexcept { return per_s(halts); }
  // Wake-ups served without a halt exit: IPI-skipped when counted, else poll hits.
  double useful_rate() const noexcept { return per_s(ipi_skipped ? *ipi_skipped : hits); }
  // The same, counted as `other` can count it: IPI-skipped only when both have it.
  double useful_rate_like(const RungMeasurement& other) const noexcept {
    return per_s(ipi_skipped && other.ipi_skipped ? *ipi_skipped : hits);
  }
  double poll_cpus() const noexcept { return per_s(poll_ns) / 1e9; }  // CPU-seconds per second
  double mean_poll_cpu_percent() const noexcept { return cpus ? 100 * poll_cpus() / cpus : 0; }
  double max_poll_cpu_percent() const noexcept {
    return elapsed_ns ? max_cpu_time / static_cast<double>(elapsed_ns) : 0;
  }
  // Mean halt residency of the CPUs that halt often (a quiet CPU's long halts say nothing about
  // the load's idle periods): the shortest per-CPU mean among CPUs with ≥ 10 % of the halts.
  double mean_halt_ns() const noexcept;
  // The CPUs the load wakes on: those with ≥ 10 % of the idle periods (at least 1). A quiet CPU's
  // housekeeping wake-ups are not part of a loop.
  std::uint32_t load_cpus() const noexcept;
};

// What the steady-state haltpoll model predicts for one cap over an idle-period distribution:
// with the limit at the cap (halts rare), a period d ≤ cap is a poll hit that polls d, a longer one
// polls the cap and halts. Per second of the histogram's tick.
struct CapPrediction {
  double hits = 0, halts = 0, poll_ns = 0;
};
CapPrediction predict_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns);
// The library's haltpoll model (haltpoll::make_window_policy("haltpoll"), the kernel's
// adjust_poll_limit bit for bit) replayed over the histogram's periods at cap `cap_ns`, from a poll
// limit of 0 — where a lowered cap starts with reset_limits. The periods come in a fixed
// pseudo-random order (a histogram has lost the real one), at most 8000 of them (counts scaled),
// once to warm the limit up and once counted; the result is scaled back to the histogram's counts.
// Unlike predict_cap it sees the governor's trap (wake-ups every t with a limit L < t ≤ 2L: every
// period polls L and halts) and the reset below grow_start.
CapPrediction replay_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns, std::uint32_t grow_start_ns);

class Tuner {
 public:
  explicit Tuner(TunerParams params = {}, std::uint32_t initial_ns = 0);

  // One step. `obs.current_ns` is the value that was in force during the tick; the returned
  // Decision says what to put in force next and why.
  Decision decide(const Observation& obs);

  // New parameters (reload): keeps the current value, forgets the measurements.
  void set_params(const TunerParams& params);
  const TunerParams& params() const noexcept { return params_; }
  // Forget everything and start from `ns` (the controller calls it when it learns the value in force).
  void reset(std::uint32_t ns);
  std::uint32_t current_ns() const noexcept { return current_; }
  // Budget policy: the rung whose overrun was seen, not climbed to again until the next sweep.
  std::optional<std::uint32_t> growth_ceiling_ns() const noexcept { return ceiling_; }
  std::vector<std::uint32_t> ladder() const;
  std::string_view phase() const noexcept;
  // Measuring the ladder's rungs one after another (the daemon then ticks at sweep_interval_ms).
  // A confirmation of a predicted shrink is not: it is judged on a whole steady tick, like the
  // signature it is compared with.
  bool sweeping() const noexcept { return phase_ == Phase::sweep; }
  // Whether the next tick should carry the eBPF signals (IdleTrace attached): always while it
  // sweeps or confirms, else on the first steady tick and then one in steady_trace_every.
  bool wants_kernel_trace() const noexcept;
  // The rungs measured by the last (or current) sweep, lowest first.
  const std::vector<RungMeasurement>& sweep_measurements() const noexcept { return measured_; }
  // grow_start to write with cap `ns` (manage_grow_start), else empty.
  std::optional<std::uint32_t> grow_start_for(std::uint32_t ns) const noexcept;

  // The value of a rung under the current penalty (for the reason strings and tests).
  double benefit(const RungMeasurement& r, const RungMeasurement& base) const noexcept;
  // The closed-loop part of the benefit: the wake-rate rise over the baseline, per load CPU.
  double closed_loop_gain(const RungMeasurement& r, const RungMeasurement& base) const noexcept;
  double net(const RungMeasurement& r, const RungMeasurement& base) const noexcept;

 private:
  enum class Phase { steady, sweep, confirm };

  Decision decide_step(const Observation& obs);
  Decision move(Decision d, Action a, std::uint32_t to, std::string reason);
  Decision start_sweep(Decision d, const KernelSignals& k, std::string why);
  Decision continue_sweep(Decision d);
  Decision finish_sweep(Decision d, std::string prefix);
  Decision steady(Decision d, const Observation& obs);
  std::optional<std::size_t> next_rung(std::size_t after) const;
  bool acceptable(const RungMeasurement& r, const RungMeasurement& base) const noexcept;
  // A new load at the value in force, against the signature. `at_once_only`: only a change of
  // twice load_change_factor counts, and the two-tick streak is left alone.
  std::optional<std::string> load_changed(const RungMeasurement& now, bool at_once_only = false);
  std::string describe(const RungMeasurement& r, const RungMeasurement& base) const;
  std::uint32_t rung_below(std::uint32_t ns) const;

  TunerParams params_;
  std::uint32_t current_ = 0;
  Phase phase_ = Phase::steady;
  std::vector<std::uint32_t> ladder_;
  std::vector<RungMeasurement> measured_;  // this sweep's judged rungs, in the order measured
  std::optional<RungMeasurement> at_rung_;  // accumulating at current_
  std::size_t sweep_index_ = 0;             // ladder_ index being measured
  std::optional<RungMeasurement> signature_;  // the converged rung's measurement
  bool signature_steady_ = false;             // taken on a steady tick (not a sweep's)
  std::optional<RungMeasurement> confirm_before_;
  std::uint32_t confirm_from_ = 0;
  std::uint64_t ticks_since_sweep_ = 0;
  std::uint64_t steady_run_ = 0;  // decisions in a row that left the phase steady
  bool swept_ = false;
  int change_streak_ = 0;
  std::optional<std::uint32_t> ceiling_;
  std::uint64_t shrink_block_ticks_ = 0;  // a predicted shrink was reverted: no new one for a while
  std::uint64_t growth_block_ticks_ = 0;  // steal: no sweep for a while
  std::optional<double> penalty_ns_;
  std::optional<IdlePeriodHistograms> periods_;  // the tick's, for rung skipping
  std::string prefix_;  // said before this tick's reason (a restart)
};

}  // namespace haltpolld
