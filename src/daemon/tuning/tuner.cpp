#include "tuning/tuner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace haltpolld {

namespace {

// Ticks without steal above the threshold before growth is allowed again.
constexpr std::uint64_t kStealCooldownTicks = 5;
// Without the baseline's idle-period histogram: rungs under this share of the baseline's mean halt
// are predicted to catch no period (the kernel starts polling only once the cap exceeds the halted
// periods; the real pipe's lie within 0.8-1.4 x their median, real-guest §2).
constexpr double kSkipBelowMeanHalt = 0.5;

}  // namespace

Tuner::Tuner(TunerParams params, std::uint32_t initial_ns) : params_(params), weights_(weights_for(params)) {
  reset(initial_ns);
}

void Tuner::set_params(const TunerParams& params) {
  params_ = params;
  weights_ = weights_for(params);
  reset(current_);
}

void Tuner::reset(std::uint32_t ns) {
  current_ = ns;
  ladder_ = ladder_of(params_);
  phase_ = Phase::steady;
  measured_.clear();
  priors_.clear();
  gain_cpus_.clear();
  paying_cpus_.clear();
  at_rung_.reset();
  base_periods_.reset();
  predicted_from_.reset();
  retried_ = false;
  referenced_ = false;
  decided_ = false;
  ticks_since_sweep_ = 0;
  steady_run_ = 0;
  swept_ = false;
  ceiling_.reset();
  shrink_block_ticks_ = 0;
  growth_block_ticks_ = 0;
}

Noise Tuner::noise() const noexcept {
  // The priors, or what the steady ticks showed of this load's spread when it is larger.
  return {std::max(params_.tick_noise, detector_.observed_noise(0)),
          std::max(params_.governor_noise, std::max(detector_.observed_noise(1), detector_.observed_noise(2)))};
}

Score Tuner::score_of(const RungMeasurement& r, const RungMeasurement& base) const {
  // The objective counts the spread the change detector has learned on this load's steady ticks
  // (none before it has seen one): the priors are for telling a changed load from a noisy one, and
  // would call every rung of a first sweep a tie.
  const Noise learned{detector_.observed_noise(0),
                      std::max(detector_.observed_noise(1), detector_.observed_noise(2))};
  return score(r, base, penalty_ns_, weights_, learned);
}

bool Tuner::same_objective(const RungMeasurement& a, const RungMeasurement& b) const {
  // A rate that moved beyond the noise but leaves the objective where it was (a few halts a second
  // against tens of thousands of wake-ups) changes nothing the choice rests on.
  if (measured_.empty()) return false;
  const Score x = score_of(a, measured_.front()), y = score_of(b, measured_.front());
  return std::abs(x.j.value - y.j.value) <= params_.confidence_z * std::hypot(x.j.se, y.j.se);
}

std::string Tuner::describe(const RungMeasurement& r) const {
  if (measured_.empty() || r.ns == measured_.front().ns) return haltpolld::describe(r);
  const Score sc = score_of(r, measured_.front());
  return haltpolld::describe(r, &sc);
}

bool Tuner::busy(const RungMeasurement& t) const {
  // Never swept, a load that polls already (at the kernel's default 200000) counts by its wake-ups.
  return t.halt().lo(params_.confidence_z) >= params_.grow_halts_per_second ||
         (!swept_ && t.wake().lo(params_.confidence_z) >= params_.grow_halts_per_second);
}

Decision Tuner::move(Decision d, Rule rule, Action a, std::uint32_t to, std::string reason) {
  d.rule = rule;
  d.reason = prefix_ + std::move(reason);
  prefix_.clear();
  d.grow_start_ns = grow_start_for(to);
  if (to == current_) {
    d.action = Action::hold;
    d.guest_halt_poll_ns = current_;
    return d;
  }
  d.action = a;
  d.guest_halt_poll_ns = to;
  // Lowered, the limits must follow (reset_limits); raised with grow_start at the cap, they must
  // leave the previous cap's: a limit of C/2 left by the rung below stays where C's own grow_start
  // would never put it (from 0 the governor goes to the cap at once).
  d.reset_limits = params_.reset_limits && (to < current_ || (params_.grow_start_at_cap && current_ > 0));
  current_ = to;
  at_rung_.reset();
  referenced_ = false;
  return d;
}

std::optional<std::size_t> Tuner::next_rung(std::size_t after) const {
  const RungMeasurement& base = measured_.front();
  // A rung predicted to catch no more periods than the one below it changes nothing, open loop
  // or closed (a closed loop speeds up only once some of its periods are caught).
  const double below = base_periods_ ? predict_cap(*base_periods_, ladder_[after]).hits : 0;
  for (std::size_t i = after + 1; i < ladder_.size(); ++i) {
    if (ceiling_ && ladder_[i] >= *ceiling_) return std::nullopt;
    if (i + 1 == ladder_.size()) return i;  // the top is always tried
    if (base_periods_) {
      if (predict_cap(*base_periods_, ladder_[i]).hits - below <= params_.confidence_z * std::sqrt(below + 1)) continue;
    } else if (ladder_[i] < kSkipBelowMeanHalt * base.mean_halt_ns()) {
      continue;
    }
    return i;
  }
  return std::nullopt;
}

Decision Tuner::start_sweep(Decision d, Rule rule, std::string why, const RungMeasurement& tick) {
  phase_ = Phase::sweep;
  measured_.clear();
  sweep_index_ = 0;
  ceiling_.reset();
  predicted_from_.reset();
  ticks_since_sweep_ = 0;
  base_periods_.reset();
  if (rule != Rule::confirmation_failed) retried_ = false;
  if (rule == Rule::sweep_change || rule == Rule::sweep_unswept) detector_.forget_observed();
  if (current_ == ladder_.front()) {
    if (!tick_detached_) {
      at_rung_ = tick;  // the tick just seen ran at the bottom rung: the baseline's first
      prefix_ = why + "; ";
      return sweep(std::move(d));
    }
    // That tick ran with the eBPF programs detached (a steady one): the rungs are measured with
    // them, and the baseline must be measured the same way, on a tick of the sweep's pace.
    at_rung_.reset();
    return move(std::move(d), rule, Action::hold, current_,
                why + "; sweep: baseline at " + std::to_string(current_) + " ns, on the next tick");
  }
  return move(std::move(d), rule, Action::shrink, ladder_.front(),
              why + fmt::format("; sweep: baseline at {} ns first", ladder_.front()));
}

Decision Tuner::sweep(Decision d) {
  RungMeasurement& m = *at_rung_;
  if (m.periods < static_cast<double>(params_.min_periods) && m.ticks < params_.max_dwell_ticks)
    return move(std::move(d), Rule::measuring, Action::hold, current_,
                fmt::format("sweep: measuring {} ns ({:.0f}/{} idle periods)", current_, m.periods, params_.min_periods));
  if (measured_.empty()) {
    base_periods_ = periods_;
    // The same load as the last sweep's (its baseline agrees): its rungs stay known.
    if (!priors_.empty() && !consistent(priors_.front(), m, params_.confidence_z, noise())) {
      priors_.clear();
      detector_.forget_observed();  // another load than the one the last sweep measured
    }
  }
  for (const auto& p : priors_)
    if (p.ns == m.ns) m.merge(p);
  measured_.push_back(m);
  const std::string seen = "sweep: " + describe(measured_.back());
  std::optional<std::size_t> next;
  if (measured_.size() == 1) {
    if (!busy(m)) return choose(std::move(d), seen + fmt::format("; {:.0f} halts/s: nothing for polling to win",
                                                                  m.halt_rate()));
    next = next_rung(sweep_index_);
  } else {
    const RungMeasurement& base = measured_.front();
    const Score here = score_of(m, base);
    const double z = params_.confidence_z;
    double best = 0;
    for (const auto& r : measured_) {
      const Score s = score_of(r, base);
      if (s.eligible) best = std::max(best, s.j.lo(z));
    }
    std::vector<std::uint32_t> above;
    for (auto i = next_rung(sweep_index_); i; i = next_rung(*i)) above.push_back(ladder_[*i]);
    const double ucb = here.j.hi(z) + potential(m, base, penalty_ns_, z, weights_, above,
                                                periods_ ? &*periods_ : nullptr, periods_s_);
    if (!here.eligible && weights_.budget_percent)
      return choose(std::move(d), seen + fmt::format("; busiest CPU polls {:.1f}% > budget {:.1f}%",
                                                     m.max_poll_cpu_percent(), *weights_.budget_percent));
    if (here.eligible && weights_.latency_target_ns && penalty_ns_)
      return choose(std::move(d), seen + "; meets the latency target");
    if (ucb <= best)
      return choose(std::move(d), seen + fmt::format("; no rung above can reach more than {:.3f}, the best rung "
                                                     "keeps {:.3f}",
                                                     ucb, best));
    next = next_rung(sweep_index_);
  }
  if (!next) return choose(std::move(d), seen + "; top of the ladder");
  sweep_index_ = *next;
  return move(std::move(d), Rule::climb, Action::grow, ladder_[*next], seen + fmt::format("; next {} ns", ladder_[*next]));
}

Decision Tuner::choose(Decision d, std::string why) {
  const RungMeasurement& base = measured_.front();
  const double z = params_.confidence_z;
  std::vector<Score> sc;
  for (const auto& r : measured_) sc.push_back(score_of(r, base));
  settle_eligibility(measured_, sc, z, weights_.latency_target_ns && !penalty_ns_);
  const Choice c = cheapest_within_noise(measured_, sc, z);
  const std::size_t best = c.best, pick = c.pick;
  swept_ = true;
  priors_ = measured_;
  candidate_ = measured_[pick];
  phase_ = Phase::confirm;
  at_rung_.reset();
  const std::uint32_t to = measured_[pick].ns;
  // Which CPUs drove the choice, and which pay for it: one cap serves every CPU.
  gain_cpus_ = cpus_where(measured_[pick], sc[pick], true);
  paying_cpus_ = cpus_where(measured_[pick], sc[pick], false);
  std::string split = c.off_knee ? "; off the knee (the rung below it is not within the noise)" : "";
  if (!gain_cpus_.empty()) split += "; gain on CPUs " + gain_cpus_;
  if (!paying_cpus_.empty()) split += "; CPUs " + paying_cpus_ + " poll there without gain (one cap for every CPU)";
  return move(std::move(d), Rule::chosen, to < current_ ? Action::shrink : Action::grow, to,
              why + fmt::format("; {}: {} ns, the cheapest within the noise of the best ({} ns, {:.3f} ± {:.3f}){}",
                                to_string(params_.policy), to, measured_[best].ns, sc[best].j.value, sc[best].j.se,
                                split));
}

Decision Tuner::confirm(Decision d) {
  const RungMeasurement m = *at_rung_;
  if (m.periods < static_cast<double>(params_.min_periods) && m.ticks < params_.max_dwell_ticks)
    return move(std::move(d), Rule::confirming, Action::hold, current_,
                fmt::format("confirming {} ns ({:.0f}/{} idle periods)", current_, m.periods, params_.min_periods));
  const double z = params_.confidence_z;
  phase_ = Phase::steady;
  Rule rule = Rule::confirmed;
  std::string why = "confirmed on whole ticks: ";
  if (predicted_from_) {
    const std::uint32_t from = *predicted_from_;
    predicted_from_.reset();
    if (!consistent(candidate_, m, z, noise(), kWake | kUseful)) {
      shrink_block_ticks_ = params_.resweep_after_ticks;
      auto out = move(std::move(d), Rule::confirmation_failed, Action::revert, from,
                      fmt::format("predicted shrink did not hold: {}; back to {} ns", describe(m), from));
      detector_.reset(before_prediction_, noise());
      referenced_ = true;
      return out;
    }
  } else if (!consistent(candidate_, m, z, noise()) && !same_objective(candidate_, m)) {
    const std::string against = fmt::format("{} on whole ticks, against {} on its sweep tick", describe(m),
                                            describe(candidate_));
    if (!retried_) {
      // What chose the rung was a sweep tick; the whole ticks disagree. Measured again, with this
      // rung's whole-tick rates in place of its sweep tick, if the baseline still agrees.
      retried_ = true;
      for (auto& p : priors_)
        if (p.ns == m.ns) p = m;
      return start_sweep(std::move(d), Rule::confirmation_failed, against, m);
    }
    // The second disagreement on the same load: its rates move more than the noise model says.
    // The rung chosen on whole ticks stays, measured by them.
    rule = Rule::confirmation_failed;
    why = against + "; again after a new sweep: holding it, its whole ticks as the reference: ";
  }
  retried_ = false;
  detector_.reset(m, noise());
  auto out = move(std::move(d), rule, Action::hold, current_, why + describe(m));
  referenced_ = true;
  return out;
}

Decision Tuner::steady(Decision d, const RungMeasurement& t) {
  if (weights_.budget_percent && t.max_poll_cpu_percent() > *weights_.budget_percent && current_ > ladder_.front()) {
    ceiling_ = current_;
    return move(std::move(d), Rule::budget_overrun, Action::shrink, rung_below(ladder_, current_),
                fmt::format("budget: busiest CPU polls {:.1f}% > {:.1f}%: one rung down, not above {} ns until the "
                            "next sweep",
                            t.max_poll_cpu_percent(), *weights_.budget_percent, current_));
  }
  if (referenced_ && detector_.update(t, params_.change_threshold))
    return start_sweep(std::move(d), Rule::sweep_change,
                       fmt::format("load changed: {} moved {:.1f} standard deviations against {} ns's reference",
                                   kSignalNames[detector_.worst_signal()], detector_.worst(), current_),
                       t);
  if (!referenced_) {
    detector_.reset(t, noise());
    referenced_ = true;
  }
  const bool b = busy(t);
  if (b && growth_block_ticks_ == 0 && !swept_)
    return start_sweep(std::move(d), Rule::sweep_unswept,
                       fmt::format("{:.0f} halts/s, {:.0f} wake-ups/s, not swept yet", t.halt_rate(), t.wake_rate()), t);
  if (b && growth_block_ticks_ == 0 && ticks_since_sweep_ >= params_.resweep_after_ticks)
    return start_sweep(std::move(d), Rule::sweep_periodic,
                       fmt::format("{:.0f} halts/s, last sweep {} ticks ago", t.halt_rate(), ticks_since_sweep_), t);
  if (!swept_ && !b && current_ > ladder_.front())
    return move(std::move(d), Rule::nothing_to_win, Action::shrink, ladder_.front(),
                fmt::format("{:.0f} wake-ups/s, {:.0f} halts/s (< {:.0f}/s): nothing for polling to win, down to {} ns "
                            "until halts are frequent",
                            t.wake_rate(), t.halt_rate(), params_.grow_halts_per_second, ladder_.front()));
  if (periods_ && current_ > ladder_.front() && shrink_block_ticks_ == 0 && t.cpus > 0) {
    // A cheaper rung the histogram predicts to keep the hits (predicted_shrink), confirmed on the
    // next whole tick like a chosen one.
    if (const auto c = predicted_shrink(*periods_, ladder_, current_, params_, t.poll().se, t.seconds(), t.cpus)) {
      candidate_ = t;
      before_prediction_ = detector_.reference();
      predicted_from_ = current_;
      phase_ = Phase::confirm;
      return move(std::move(d), Rule::predicted_shrink, Action::shrink, c->ns,
                  fmt::format("idle-period histogram: {} ns keeps {:.1f}% of the poll hits at {:.1f} points less poll "
                              "CPU per CPU: trying it",
                              c->ns, c->hits_percent, c->saved_points));
    }
  }
  return move(std::move(d), Rule::steady, Action::hold, current_, "steady at " + describe(t));
}

bool Tuner::wants_kernel_trace() const noexcept {
  if (phase_ != Phase::steady || params_.steady_trace_every <= 1) return true;
  return steady_run_ % params_.steady_trace_every == 1;
}

Decision Tuner::decide(const Observation& obs) {
  Decision d = decide_step(obs);
  decided_ = true;
  steady_run_ = phase_ == Phase::steady ? steady_run_ + 1 : 0;
  return d;
}

Decision Tuner::decide_step(const Observation& obs) {
  Decision d;
  d.tick = obs.tick;
  d.poll_cpu_percent = obs.poll_cpu_percent;
  d.wake_latency_ns = obs.wake_latency_ns;
  d.steal_percent = obs.steal_percent;
  // The static policy needs no history: whatever is in force, the configured value.
  if (params_.policy == Policy::static_value) {
    current_ = obs.current_ns;
    d.previous_ns = d.guest_halt_poll_ns = current_;
    const std::uint32_t to = std::clamp(params_.static_ns, params_.min_ns, params_.max_ns);
    return move(std::move(d), Rule::static_value, Action::set, to, fmt::format("static policy: {} ns", to));
  }
  if (obs.current_ns != current_) {
    // Someone else wrote the value, or the last write failed: start again from what is in force.
    const std::uint32_t was = current_;
    reset(obs.current_ns);
    d.previous_ns = d.guest_halt_poll_ns = current_;
    return move(std::move(d), Rule::restarted, Action::hold, current_,
                fmt::format("value in force is {} ns, not {} ns: restarting from it", obs.current_ns, was));
  }
  d.previous_ns = d.guest_halt_poll_ns = current_;
  ++ticks_since_sweep_;
  if (shrink_block_ticks_ > 0) --shrink_block_ticks_;
  if (growth_block_ticks_ > 0) --growth_block_ticks_;
  penalty_ns_ = obs.halt_exit_penalty_ns;
  periods_ = obs.kernel.periods;
  tick_detached_ = !obs.kernel.bpf_detached.empty();
  periods_s_ = static_cast<double>(obs.kernel.elapsed_ns) / 1e9;

  if (obs.kernel.counters == KernelSignals::Counters::tracepoint)
    return move(std::move(d), Rule::kernel_does_not_poll, Action::hold, current_,
                fmt::format("nothing to tune: this guest's kernel does not poll (no cpuidle driver is registered, so "
                            "guest_halt_poll_ns reaches no idle path); {}",
                            kHowToEnableHaltpoll));
  if (!obs.kernel.available())
    return move(std::move(d), Rule::no_counters, Action::hold, current_,
                "no kernel idle counters in this tick: not moving");
  if (obs.steal_percent && *obs.steal_percent > params_.steal_backoff_percent) {
    // A contended host comes first: polling vCPUs take time from whoever waits for the pCPU.
    // Growth stays blocked while the steal lasts and a few ticks after; then the load is swept
    // again (a load counted as swept through a burst of steal ran a whole cell at 0).
    growth_block_ticks_ = kStealCooldownTicks;
    swept_ = false;
    phase_ = Phase::steady;
    predicted_from_.reset();
    auto out = move(std::move(d), Rule::steal_backoff, Action::shrink, rung_below(ladder_, current_),
                    fmt::format("host contended: steal {:.1f}% > {:.1f}%: one rung down, no growth for {} ticks",
                                *obs.steal_percent, params_.steal_backoff_percent, growth_block_ticks_));
    referenced_ = false;
    return out;
  }
  RungMeasurement t;
  t.ns = current_;
  t.add(obs.kernel);
  if (t.cpus == 0)
    return move(std::move(d), Rule::no_cap_reach, Action::hold, current_,
                "every CPU polls without limit, whatever the cap (" +
                    (obs.kernel.overrides ? obs.kernel.overrides->summary() : std::string()) + "): nothing to tune");
  if (phase_ == Phase::steady) return steady(std::move(d), t);
  if (!at_rung_ || at_rung_->ns != current_) {
    at_rung_ = RungMeasurement{};
    at_rung_->ns = current_;
  }
  at_rung_->add(obs.kernel);
  switch (phase_) {
    case Phase::sweep: return sweep(std::move(d));
    case Phase::confirm: return confirm(std::move(d));
    case Phase::steady: return steady(std::move(d), t);
  }
  return d;
}

}  // namespace haltpolld
