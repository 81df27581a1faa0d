// Tuner: the pure decision step of the daemon's loop, Observation → Decision (a value, the rule
// that chose it, the reason in words). It owns no clock, does no I/O and starts no thread; its
// state is what it measured at each rung of its ladder and where it is in its search. The daemon,
// the unit tests, the replay tests over the real-guest recordings and both simulators therefore
// run the very same code. Not thread-safe: one owner calls it.
//
// It decides from the kernel's own counters (Observation::kernel) with one objective, one choice
// rule and one change detector (objective.hpp; docs/tuning.md, "The rules"):
//   sweep    the bottom rung first (the baseline), then up the ladder, skipping rungs predicted
//            to catch no idle period (the baseline's idle-period histogram; without it, rungs
//            under half the baseline's mean halt), one rung per `min_periods` idle periods (or
//            `max_dwell_ticks`), while the next rung's optimistic objective can beat the best
//            rung's pessimistic one;
//   choose   the cheapest rung (poll time plus halt exits) whose objective is within the noise of
//            the best, among the rungs the policy allows;
//   confirm  that rung on whole ticks: rates consistent with what chose it, or a new sweep that
//            keeps the earlier rungs when the baseline still says it is the same load;
//   steady   hold; the change detector (CUSUM on the wake, halt and poll rates) starts a sweep;
//            with the histograms, a cheaper rung predicted to keep the hits is confirmed like a
//            chosen one (or reverted); budget: an overrun steps down at once; steal backs off.
#pragma once

#include "signals/observation.hpp"
#include "tuner_params.hpp"
#include "tuning/decision.hpp"
#include "tuning/objective.hpp"
#include "tuning/rung.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace haltpolld {

class Tuner {
 public:
  explicit Tuner(TunerParams params = {}, std::uint32_t initial_ns = 0);

  // One step. `obs.current_ns` is the value that was in force during the tick; the returned
  // Decision says what to put in force next, by which rule and why.
  Decision decide(const Observation& obs);

  // New parameters (reload): keeps the current value, forgets the measurements.
  void set_params(const TunerParams& params);
  const TunerParams& params() const noexcept { return params_; }
  // Forget everything and start from `ns` (the controller calls it when it learns the value in force).
  void reset(std::uint32_t ns);
  std::uint32_t current_ns() const noexcept { return current_; }
  // Budget policy: the rung whose overrun was seen, not climbed to again until the next sweep.
  std::optional<std::uint32_t> growth_ceiling_ns() const noexcept { return ceiling_; }
  std::vector<std::uint32_t> ladder() const { return ladder_of(params_); }
  std::string_view phase() const noexcept {
    return phase_ == Phase::sweep ? "sweep" : phase_ == Phase::confirm ? "confirm" : "steady";
  }
  // Measuring the ladder's rungs one after another (the daemon then ticks at sweep_interval_ms).
  // A confirmation is not: it is judged on whole ticks, like the steady rates it is compared with.
  // Before its first decision the tuner wants its first look soon as well.
  bool sweeping() const noexcept { return phase_ == Phase::sweep || !decided_; }
  // Whether the next tick should carry the eBPF signals (IdleTrace attached): always while it
  // sweeps or confirms, else on the first steady tick and then one in steady_trace_every.
  bool wants_kernel_trace() const noexcept;
  // The rungs measured by the last (or current) sweep, baseline first.
  const std::vector<RungMeasurement>& sweep_measurements() const noexcept { return measured_; }
  // grow_start to write with cap `ns` (grow_start_at_cap, manage_grow_start), else empty.
  std::optional<std::uint32_t> grow_start_for(std::uint32_t ns) const noexcept {
    return haltpolld::grow_start_for(params_, ns);
  }
  // The last choice's CPUs whose part of the objective was a gain, and those that poll there
  // without one ("0-3,8"; empty: none): a global cap serving loads with opposite needs shows here.
  const std::string& gain_cpus() const noexcept { return gain_cpus_; }
  const std::string& paying_cpus() const noexcept { return paying_cpus_; }
  // The objective of a measured rung against a baseline under the current penalty.
  Score score_of(const RungMeasurement& r, const RungMeasurement& base) const;

 private:
  enum class Phase { steady, sweep, confirm };

  Decision decide_step(const Observation& obs);
  Decision move(Decision d, Rule rule, Action a, std::uint32_t to, std::string reason);
  Decision start_sweep(Decision d, Rule rule, std::string why, const RungMeasurement& tick);
  Decision sweep(Decision d);
  Decision choose(Decision d, std::string why);
  Decision confirm(Decision d);
  Decision steady(Decision d, const RungMeasurement& t);
  std::optional<std::size_t> next_rung(std::size_t after) const;
  // Whether two measurements of a rung give the same objective within their noise (confirm).
  bool same_objective(const RungMeasurement& a, const RungMeasurement& b) const;
  std::string describe(const RungMeasurement& r) const;
  bool busy(const RungMeasurement& t) const;
  Noise noise() const noexcept;

  TunerParams params_;
  Weights weights_;
  std::uint32_t current_ = 0;
  Phase phase_ = Phase::steady;
  std::vector<std::uint32_t> ladder_;
  std::vector<RungMeasurement> measured_;  // this sweep's judged rungs, baseline first
  std::vector<RungMeasurement> priors_;    // the last sweep's, kept while the baseline agrees
  std::optional<RungMeasurement> at_rung_;  // accumulating at current_
  std::size_t sweep_index_ = 0;             // ladder_ index being measured
  std::optional<IdlePeriodHistograms> base_periods_;  // the baseline's idle periods (rung skipping)
  // Confirming: the measurement that chose the rung in force, and for a predicted shrink the rung
  // to go back to and the steady reference to go back to.
  RungMeasurement candidate_;
  std::optional<std::uint32_t> predicted_from_;
  RungMeasurement before_prediction_;
  bool retried_ = false;  // this load's choice already failed one confirmation

  ChangeDetector detector_;
  bool referenced_ = false;  // the detector has a reference at current_
  std::uint64_t ticks_since_sweep_ = 0;
  std::uint64_t steady_run_ = 0;  // decisions in a row that left the phase steady
  bool swept_ = false;
  std::optional<std::uint32_t> ceiling_;
  std::uint64_t shrink_block_ticks_ = 0;  // a predicted shrink was reverted: no new one for a while
  std::uint64_t growth_block_ticks_ = 0;  // steal: no sweep for a while
  std::optional<double> penalty_ns_;
  std::optional<IdlePeriodHistograms> periods_;  // the tick's
  double periods_s_ = 0;                         // ... over this many seconds
  bool tick_detached_ = false;  // the tick's eBPF programs were loaded but detached
  std::string prefix_;  // said before the reason of this tick's decision (why a sweep started)
  bool decided_ = false;  // a decision since the last reset
  std::string gain_cpus_, paying_cpus_;
};

}  // namespace haltpolld
