#include "tuning/tuner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace haltpolld {

const char* to_string(Action a) noexcept {
  switch (a) {
    case Action::hold: return "hold";
    case Action::grow: return "grow";
    case Action::shrink: return "shrink";
    case Action::set: return "set";
    case Action::revert: return "revert";
  }
  return "?";
}

std::string_view to_string(Policy p) noexcept {
  switch (p) {
    case Policy::static_value: return "static";
    case Policy::latency: return "latency";
    case Policy::budget: return "budget";
    case Policy::balanced: return "balanced";
  }
  return "?";
}

std::optional<Policy> policy_from_string(std::string_view s) noexcept {
  if (s == "static") return Policy::static_value;
  if (s == "latency") return Policy::latency;
  if (s == "budget") return Policy::budget;
  if (s == "balanced") return Policy::balanced;
  return std::nullopt;
}

std::string validate(const TunerParams& p) {
  if (p.min_ns > p.max_ns) return "min_ns must not exceed max_ns";
  if (!(p.percentile > 0 && p.percentile < 100)) return "percentile must be in (0, 100)";
  if (!(p.target_wake_latency_ns > 0)) return "target_wake_latency_ns must be > 0";
  if (!(p.max_poll_cpu_percent > 0 && p.max_poll_cpu_percent <= 100))
    return "max_poll_cpu_percent must be in (0, 100]";
  if (!(p.max_grow_factor > 1)) return "max_grow_factor must be > 1";
  if (!(p.max_shrink_factor > 1)) return "max_shrink_factor must be > 1";
  if (p.max_step_ns == 0) return "max_step_ns must be > 0";
  if (!(p.hysteresis >= 0 && p.hysteresis < 1)) return "hysteresis must be in [0, 1)";
  if (!(p.min_relative_gain >= 0 && p.min_relative_gain < 1)) return "min_relative_gain must be in [0, 1)";
  if (!(p.min_benefit_ratio >= 0)) return "min_benefit_ratio must be >= 0";
  if (!(p.steal_backoff_percent > 0)) return "steal_backoff_percent must be > 0";
  return {};
}

namespace {

std::string fmt_ns(double ns) {
  if (ns >= 1e6) return fmt::format("{:.2f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.1f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

std::string fmt_pct(double p) { return fmt::format("{:.1f}%", p); }

}  // namespace

Tuner::Tuner(TunerParams params, std::uint32_t initial_ns) : params_(params) { reset(initial_ns); }

void Tuner::set_params(const TunerParams& params) {
  params_ = params;
  pending_.reset();
  ceiling_.reset();
  ceiling_ticks_left_ = 0;
  shrink_hold_ticks_ = 0;
}

void Tuner::reset(std::uint32_t ns) {
  current_ = ns;
  ticks_since_change_ = 0;
  pending_.reset();
  ceiling_.reset();
  ceiling_ticks_left_ = 0;
  shrink_hold_ticks_ = 0;
}

std::uint32_t Tuner::clamp(std::uint64_t ns) const noexcept {
  return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(ns, params_.min_ns, params_.max_ns));
}

std::uint32_t Tuner::grow_target() const noexcept {
  if (current_ < params_.start_ns) return clamp(std::max(params_.start_ns, params_.min_ns));
  const double by_factor = static_cast<double>(current_) * params_.max_grow_factor;
  const double by_step = static_cast<double>(current_) + params_.max_step_ns;
  return clamp(static_cast<std::uint64_t>(std::min({by_factor, by_step, 4.0e9})));
}

std::uint32_t Tuner::shrink_target(double factor) const noexcept {
  const double f = std::clamp(factor, 1.0, params_.max_shrink_factor);
  const double by_factor = static_cast<double>(current_) / f;
  const double by_step = static_cast<double>(current_) - params_.max_step_ns;
  auto t = static_cast<std::uint64_t>(std::max({by_factor, by_step, 0.0}));
  if (t < params_.start_ns) t = params_.min_ns;
  return clamp(t);
}

Decision Tuner::finish(Decision d, Action a, std::uint32_t to, std::string reason, StepKind kind) {
  d.reason = std::move(reason);
  if (to == current_) {
    d.action = Action::hold;
    d.guest_halt_poll_ns = current_;
    return d;
  }
  d.action = a;
  d.guest_halt_poll_ns = to;
  if (kind != StepKind::none) pending_ = Step{current_, to, kind, mean_lat_, cpu_, total_cpu_};
  else pending_.reset();
  current_ = to;
  ticks_since_change_ = 0;
  return d;
}

Decision Tuner::grow_if_allowed(Decision d, std::string why) {
  if (current_ >= params_.max_ns)
    return finish(std::move(d), Action::hold, current_, why + fmt::format("; at max_ns {}", params_.max_ns));
  const std::uint32_t to = grow_target();
  if (ceiling_ && to >= *ceiling_)
    return finish(std::move(d), Action::hold, current_,
                  why + fmt::format("; growth frozen below {} ns for {} more ticks (it did not pay)", *ceiling_,
                                    ceiling_ticks_left_));
  return finish(std::move(d), Action::grow, to, why + fmt::format("; grow {} -> {} ns", current_, to),
                StepKind::grow);
}

namespace {

// Latency saved per ns of polling: (latency difference × wakes per second) / (poll ns per second).
// Empty when the wake rate is unknown; +inf when the poll time did not move (a free step).
std::optional<double> benefit_ratio(double latency_delta_ns, std::optional<double> wakes_per_second,
                                    std::optional<double> cpu_a, std::optional<double> cpu_b) {
  if (!wakes_per_second || !cpu_a || !cpu_b) return std::nullopt;
  const double poll_fraction = (*cpu_b - *cpu_a) / 100.0;  // CPUs' worth of polling added
  if (poll_fraction <= 0.0005) return std::numeric_limits<double>::infinity();
  return latency_delta_ns * *wakes_per_second / (poll_fraction * 1e9);
}

std::string fmt_ratio(std::optional<double> r) {
  if (!r) return "benefit ratio unknown";
  if (std::isinf(*r)) return "no extra polling";
  return fmt::format("benefit ratio {:.2f}", *r);
}

}  // namespace

Decision Tuner::decide(const Observation& obs) {
  Decision d;
  d.tick = obs.tick;
  d.poll_cpu_percent = obs.poll_cpu_percent;
  d.wake_latency_ns = obs.wake_latency_ns;
  d.steal_percent = obs.steal_percent;

  std::string prefix;
  if (obs.current_ns != current_) {
    // Someone else wrote the value, or the last write failed: start again from what is in force.
    prefix = fmt::format("value in force is {} ns, not {} ns: restarting from it; ", obs.current_ns, current_);
    reset(obs.current_ns);
  }
  d.previous_ns = current_;
  d.guest_halt_poll_ns = current_;

  ++ticks_since_change_;
  if (ceiling_ && ceiling_ticks_left_ > 0 && --ceiling_ticks_left_ == 0) ceiling_.reset();
  if (shrink_hold_ticks_ > 0) --shrink_hold_ticks_;

  lat_.reset();
  if (obs.wake_latency_ns && obs.latency_samples >= params_.min_latency_samples) lat_ = obs.wake_latency_ns;
  mean_lat_.reset();
  if (lat_) mean_lat_ = obs.mean_wake_latency_ns ? obs.mean_wake_latency_ns : lat_;
  cpu_ = obs.poll_cpu_percent;
  total_cpu_ = obs.total_poll_cpu_percent ? obs.total_poll_cpu_percent : obs.poll_cpu_percent;
  const auto& lat = lat_;
  const auto& cpu = cpu_;
  const std::string pct_name = fmt::format("p{:g}", params_.percentile);
  const double budget = params_.max_poll_cpu_percent;
  const double h = params_.hysteresis;

  if (params_.policy == Policy::static_value) {
    const std::uint32_t to = clamp(params_.static_ns);
    return finish(std::move(d), Action::set, to, prefix + fmt::format("static policy: {} ns", to));
  }

  // 1. A contended host comes first: polling guest vCPUs take time from whoever waits for the pCPU.
  if (obs.steal_percent && *obs.steal_percent > params_.steal_backoff_percent) {
    ceiling_ = std::max<std::uint32_t>(current_, 1);
    ceiling_ticks_left_ = params_.regrow_after_ticks;
    return finish(std::move(d), Action::shrink, shrink_target(params_.max_shrink_factor),
                  prefix + fmt::format("host contended: steal {} > {}: back off, growth frozen",
                                       fmt_pct(*obs.steal_percent), fmt_pct(params_.steal_backoff_percent)));
  }

  // 2. Let the last change show its effect before judging it.
  if (pending_ && ticks_since_change_ <= params_.settle_ticks)
    return finish(std::move(d), Action::hold, current_,
                  prefix + fmt::format("settling after {} -> {} ns ({}/{} ticks)", pending_->from, pending_->to,
                                       ticks_since_change_, params_.settle_ticks));

  // 3. Judge the last step by what it bought.
  bool justified_over_budget = false;
  if (pending_ && pending_->latency_before && !lat) {
    // A step is judged on a measurement, never assumed to have paid: wait for the latency signal.
    return finish(std::move(d), Action::hold, current_,
                  prefix + fmt::format("waiting for a latency signal ({} samples < {}) to judge {} -> {} ns",
                                       obs.latency_samples, params_.min_latency_samples, pending_->from,
                                       pending_->to));
  }
  if (pending_) {
    const Step s = *pending_;
    pending_.reset();
    const auto& mlat = mean_lat_;
    const std::string mean_name = obs.mean_wake_latency_ns ? "mean" : pct_name;
    if (s.kind == StepKind::grow && mlat && s.latency_before) {
      const double gain = *s.latency_before - *mlat;
      const double rel = *s.latency_before > 0 ? gain / *s.latency_before : 0;
      const auto ratio = benefit_ratio(gain, obs.wakes_per_second, s.total_cpu_before, total_cpu_);
      const bool paid = rel >= params_.min_relative_gain && (!ratio || *ratio >= params_.min_benefit_ratio);
      const std::string what =
          fmt::format("grow {} -> {} ns: {} {} -> {} ({})", s.from, s.to, mean_name, fmt_ns(*s.latency_before),
                      fmt_ns(*mlat), fmt_ratio(ratio));
      if (!paid) {
        ceiling_ = s.to;
        ceiling_ticks_left_ = params_.regrow_after_ticks;
        return finish(std::move(d), Action::revert, s.from,
                      prefix + what +
                          fmt::format(" did not pay (needs {:.0f}% gain and ratio {:.2f}): back to {} ns, growth "
                                      "frozen for {} ticks",
                                      params_.min_relative_gain * 100, params_.min_benefit_ratio, s.from,
                                      params_.regrow_after_ticks));
      }
      prefix += what + " paid; ";
    } else if ((s.kind == StepKind::probe_down || s.kind == StepKind::target_shrink) && mlat && s.latency_before) {
      const double loss = *mlat - *s.latency_before;
      const double rel = *s.latency_before > 0 ? loss / *s.latency_before : 0;
      const auto ratio = benefit_ratio(loss, obs.wakes_per_second, total_cpu_, s.total_cpu_before);
      bool hurt;
      if (s.kind == StepKind::target_shrink)
        hurt = *lat > params_.target_wake_latency_ns * (1 + h);
      else
        hurt = rel >= params_.min_relative_gain && (!ratio || *ratio >= params_.min_benefit_ratio);
      const std::string what = fmt::format("shrink {} -> {} ns: {} {} -> {} ({})", s.from, s.to, mean_name,
                                           fmt_ns(*s.latency_before), fmt_ns(*mlat), fmt_ratio(ratio));
      if (hurt) {
        shrink_hold_ticks_ = params_.probe_down_after_ticks;
        return finish(std::move(d), Action::revert, s.from,
                      prefix + what + fmt::format(" hurt: polling pays here, back to {} ns", s.from));
      }
      if (s.kind == StepKind::probe_down) {
        // The larger value bought nothing worth its polling: do not grow back to it, keep probing down.
        ceiling_ = s.from;
        ceiling_ticks_left_ = params_.regrow_after_ticks;
        ticks_since_change_ = params_.probe_down_after_ticks;
      }
      prefix += what + " did not hurt; ";
    }
  }
  // A recent probe-down from this very value hurt: its polling pays for itself.
  justified_over_budget = shrink_hold_ticks_ > 0;

  // 4. The policy.
  switch (params_.policy) {
    case Policy::static_value: break;  // handled above
    case Policy::latency: {
      if (!lat)
        return finish(std::move(d), Action::hold, current_,
                      prefix + fmt::format("no latency signal ({} samples < {})", obs.latency_samples,
                                           params_.min_latency_samples));
      const double target = params_.target_wake_latency_ns;
      if (*lat > target * (1 + h))
        return grow_if_allowed(std::move(d),
                               prefix + fmt::format("{} {} > target {}", pct_name, fmt_ns(*lat), fmt_ns(target)));
      if (*lat < target * (1 - h) && current_ > params_.min_ns && shrink_hold_ticks_ == 0)
        return finish(std::move(d), Action::shrink, shrink_target(params_.max_shrink_factor),
                      prefix + fmt::format("{} {} well under target {}: give CPU back", pct_name, fmt_ns(*lat),
                                           fmt_ns(target)),
                      StepKind::target_shrink);
      return finish(std::move(d), Action::hold, current_,
                    prefix + fmt::format("{} {} within target {} +-{:.0f}%", pct_name, fmt_ns(*lat), fmt_ns(target),
                                         h * 100));
    }
    case Policy::budget:
    case Policy::balanced: {
      const bool balanced = params_.policy == Policy::balanced;
      if (!cpu)
        return finish(std::move(d), Action::hold, current_,
                      prefix + "no poll-CPU signal: the budget cannot be checked, not moving");
      if (!balanced && *cpu > budget) {
        ceiling_ = std::max<std::uint32_t>(current_, 1);
        ceiling_ticks_left_ = params_.regrow_after_ticks;
        return finish(std::move(d), Action::shrink, shrink_target(*cpu / budget),
                      prefix + fmt::format("busiest CPU polls {} > budget {}", fmt_pct(*cpu), fmt_pct(budget)));
      }
      if (balanced && *cpu > budget * (1 + h)) {
        if (justified_over_budget)
          return finish(std::move(d), Action::hold, current_,
                        prefix + fmt::format("busiest CPU polls {} > budget {}, but the last step down showed "
                                             "that this polling pays for itself",
                                             fmt_pct(*cpu), fmt_pct(budget)));
        if (!lat) {
          ceiling_ = std::max<std::uint32_t>(current_, 1);
          ceiling_ticks_left_ = params_.regrow_after_ticks;
          return finish(std::move(d), Action::shrink, shrink_target(params_.max_shrink_factor),
                        prefix + fmt::format("busiest CPU polls {} > budget {} and no latency signal shows it pays",
                                             fmt_pct(*cpu), fmt_pct(budget)));
        }
        return finish(std::move(d), Action::shrink, shrink_target(params_.max_shrink_factor),
                      prefix + fmt::format("busiest CPU polls {} > budget {}: step down to see whether it pays",
                                           fmt_pct(*cpu), fmt_pct(budget)),
                      StepKind::probe_down);
      }
      if (*cpu < budget * (1 - h) || (balanced && justified_over_budget)) {
        if (!lat)
          return finish(std::move(d), Action::hold, current_,
                        prefix + fmt::format("poll CPU {} but no latency signal ({} samples < {}): growth cannot "
                                             "be judged",
                                             fmt_pct(*cpu), obs.latency_samples, params_.min_latency_samples));
        const bool can_grow = current_ < params_.max_ns && !(ceiling_ && grow_target() >= *ceiling_);
        if (can_grow || !balanced)
          return grow_if_allowed(std::move(d), prefix + fmt::format("poll CPU {} (budget {}), {} {}", fmt_pct(*cpu),
                                                                    fmt_pct(budget), pct_name, fmt_ns(*lat)));
      }
      if (balanced && lat && current_ > params_.min_ns && shrink_hold_ticks_ == 0 &&
          ticks_since_change_ >= params_.probe_down_after_ticks)
        return finish(std::move(d), Action::shrink, shrink_target(params_.max_shrink_factor),
                      prefix + fmt::format("no change for {} ticks: probe down to see whether {} ns still pays",
                                           ticks_since_change_, current_),
                      StepKind::probe_down);
      return finish(std::move(d), Action::hold, current_,
                    prefix + fmt::format("poll CPU {} (budget {}), {} {}{}", fmt_pct(*cpu), fmt_pct(budget), pct_name,
                                         lat ? fmt_ns(*lat) : std::string("unknown"),
                                         ceiling_ ? fmt::format(", growth frozen below {} ns", *ceiling_)
                                                  : std::string{}));
    }
  }
  return finish(std::move(d), Action::hold, current_, prefix + "hold");
}

}  // namespace haltpolld
