// Tuner: the pure decision step of the daemon's loop, Observation → Decision + reason.
// It owns no clock, does no I/O and starts no thread; its only state is what it remembers about
// its own past steps (the last step and how the latency and poll CPU moved across it, a growth
// ceiling learnt when growing stopped paying, tick counters). The daemon, the unit tests and the
// closed-loop simulation therefore run the very same code. Not thread-safe: one owner calls it.
//
// The algorithm (docs/tuning.md explains the defaults):
//   1. steal above `steal_backoff_percent` → shrink one step, freeze growth (the host is contended,
//      and guest polling burns time the host would give to another vCPU);
//   2. wait `settle_ticks` after each change so that the tick being judged saw only the new value;
//   3. judge the last step by its marginal benefit: a grow must save at least `min_benefit_ratio`
//      ns of waiting (mean wake latency × wakes per second) per ns of extra polling and at least
//      `min_relative_gain` of the mean latency, or it is reverted and growth is frozen at that
//      value for `regrow_after_ticks`; an exploratory shrink that lost that much is reverted;
//   4. apply the policy with a hysteresis band of ±`hysteresis` around each target:
//      static   → the configured value;
//      latency  → grow while p(percentile) > target, shrink while it is well below;
//      budget   → shrink while the busiest CPU polls more than the budget (a hard limit), grow
//                 while well under and growing pays;
//      balanced → grow while growing pays; above the budget keep a value only while a step down
//                 measurably hurts (polling that pays for itself may exceed the budget, polling
//                 that does not may not); a periodic exploratory shrink gives back values that
//                 stopped paying.
//   Every step is limited by a factor and an absolute size and clamped to [min_ns, max_ns].
#pragma once

#include "tuning/observation.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace haltpolld {

enum class Policy { static_value, latency, budget, balanced };

struct TunerParams {
  Policy policy = Policy::balanced;
  // static: the value to hold.
  std::uint32_t static_ns = 200000;
  // latency: the wake-latency target at `percentile` (0 < percentile < 100).
  double target_wake_latency_ns = 20000;
  double percentile = 90;
  // budget / balanced: the most a single CPU may spend polling, in % of that CPU.
  double max_poll_cpu_percent = 10;
  // Bounds of the value. 0 disables polling; the kernel's default cap is 200000.
  std::uint32_t min_ns = 0;
  std::uint32_t max_ns = 400000;
  // First non-zero value when growing from 0, and the smallest non-zero value a shrink leaves
  // (below it the tuner goes to min_ns). 10 µs: below that a halt exit costs more than polling saves.
  std::uint32_t start_ns = 10000;
  // Step limits: a step multiplies or divides by at most these factors and moves at most max_step_ns.
  double max_grow_factor = 2.0;
  double max_shrink_factor = 2.0;
  std::uint32_t max_step_ns = 100000;
  // Relative dead band around each target.
  double hysteresis = 0.10;
  // Ticks to wait after a change before the change is judged.
  std::uint32_t settle_ticks = 1;
  // Marginal benefit a grow must show to be kept: the wake latency it saves, summed over the
  // wakes of a second, per ns of extra polling (dimensionless), and a relative latency gain large
  // enough not to be noise. 0.5: a ns of vCPU polling, which the host cannot give to anyone else,
  // must save at least half a ns of waiting on a request path. 10 %: the percentile of a few
  // hundred probe samples moves by about that much from one tick to the next on a steady load.
  double min_benefit_ratio = 0.5;
  double min_relative_gain = 0.10;
  // Ticks for which growth stays frozen after a grow that did not pay (then it is tried again,
  // because the load may have changed).
  std::uint32_t regrow_after_ticks = 30;
  // balanced: ticks without a change after which one exploratory shrink step is tried. A probe
  // costs up to settle_ticks + 1 ticks of worse latency: 120 keeps that under 2 % of the time.
  std::uint32_t probe_down_after_ticks = 120;
  // Steal share (% of all guest CPU time) above which the tuner backs off.
  double steal_backoff_percent = 10;
  // Fewer latency samples than this in a tick: the latency is treated as unknown.
  std::uint64_t min_latency_samples = 20;

  friend bool operator==(const TunerParams&, const TunerParams&) = default;
};

std::string_view to_string(Policy p) noexcept;
std::optional<Policy> policy_from_string(std::string_view s) noexcept;
// Empty when the parameters are coherent, else what is wrong.
std::string validate(const TunerParams& p);

class Tuner {
 public:
  explicit Tuner(TunerParams params = {}, std::uint32_t initial_ns = 0);

  // One step. `obs.current_ns` is the value that was in force during the tick; the returned
  // Decision says what to put in force next and why.
  Decision decide(const Observation& obs);

  // New parameters (reload): keeps the current value, forgets the learnt ceiling and the last step.
  void set_params(const TunerParams& params);
  const TunerParams& params() const noexcept { return params_; }
  // Forget everything and start from `ns` (the controller calls it when it learns the value in force).
  void reset(std::uint32_t ns);
  std::uint32_t current_ns() const noexcept { return current_; }
  std::optional<std::uint32_t> growth_ceiling_ns() const noexcept { return ceiling_; }

 private:
  enum class StepKind { none, grow, probe_down, target_shrink };
  struct Step {
    std::uint32_t from = 0;
    std::uint32_t to = 0;
    StepKind kind = StepKind::none;
    std::optional<double> latency_before;  // mean_lat_ at the step
    std::optional<double> cpu_before;
    std::optional<double> total_cpu_before;
  };

  std::uint32_t clamp(std::uint64_t ns) const noexcept;
  std::uint32_t grow_target() const noexcept;
  std::uint32_t shrink_target(double factor) const noexcept;
  Decision finish(Decision d, Action a, std::uint32_t to, std::string reason, StepKind kind = StepKind::none);
  Decision grow_if_allowed(Decision d, std::string why);

  TunerParams params_;
  std::uint32_t current_ = 0;
  std::uint64_t ticks_since_change_ = 0;
  std::optional<Step> pending_;               // last change, not judged yet
  std::optional<std::uint32_t> ceiling_;      // growth frozen at or above this value
  std::uint64_t ceiling_ticks_left_ = 0;
  std::uint64_t shrink_hold_ticks_ = 0;       // no voluntary shrink after one that hurt
  // Inputs of the tick being decided (set at the top of decide()).
  std::optional<double> lat_;       // at the percentile
  std::optional<double> mean_lat_;  // mean when known, else the percentile: what steps are judged on
  std::optional<double> cpu_;
  std::optional<double> total_cpu_;
};

}  // namespace haltpolld
