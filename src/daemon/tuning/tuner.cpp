#include "tuning/tuner.hpp"

#include <fmt/format.h>

#include <haltpoll/governor.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

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

namespace {

// Ticks without steal above the threshold before growth is allowed again.
constexpr std::uint64_t kStealCooldownTicks = 5;

std::string fmt_ns(double ns) {
  if (ns >= 1e6) return fmt::format("{:.2f} ms", ns / 1e6);
  if (ns >= 1e3) return fmt::format("{:.1f} us", ns / 1e3);
  return fmt::format("{:.0f} ns", ns);
}

// max(a, b) / min(a, b), +inf when only one is zero.
double factor_between(double a, double b) {
  const double lo = std::min(a, b), hi = std::max(a, b);
  if (lo > 0) return hi / lo;
  return hi > 0 ? std::numeric_limits<double>::infinity() : 1.0;
}

// Idle periods at or below `cap` in a histogram: their count and summed length (bucket bounds).
void add_periods(const haltpoll::LatencyHistogram& h, std::uint32_t cap, CapPrediction& p) {
  h.for_each_bucket([&](std::uint64_t upper_ns, std::uint64_t count) {
    const auto n = static_cast<double>(count);
    if (upper_ns <= cap) {
      p.hits += n;
      p.poll_ns += n * static_cast<double>(upper_ns);
    } else {
      p.halts += n;
      p.poll_ns += n * static_cast<double>(cap);
    }
  });
}

}  // namespace

void RungMeasurement::add(const KernelSignals& k) {
  ++ticks;
  elapsed_ns += k.elapsed_ns;
  cpus = static_cast<std::uint32_t>(k.cpus.size());
  double busiest = 0;
  cpu_halts.resize(std::max(cpu_halts.size(), k.cpus.size()));
  cpu_halt_ns.resize(cpu_halts.size());
  cpu_periods.resize(cpu_halts.size());
  for (std::size_t i = 0; i < k.cpus.size(); ++i) {
    const auto& c = k.cpus[i];
    cpu_halts[i] += static_cast<double>(c.halts);
    cpu_halt_ns[i] += static_cast<double>(c.halt_ns);
    cpu_periods[i] += static_cast<double>(c.idle_periods());
    periods += static_cast<double>(c.idle_periods());
    halts += static_cast<double>(c.halts);
    hits += static_cast<double>(c.poll_hits);
    halt_ns += static_cast<double>(c.halt_ns);
    poll_ns += static_cast<double>(c.poll_ns);
    busiest = std::max(busiest, k.poll_cpu_percent(c));
  }
  // IPI skips are summed only over a run of ticks that all counted them (the eBPF programs are
  // detached on some steady ticks): a partial sum would read as fewer wake-ups served.
  if (auto ipi = k.total_ipi_skipped(); ipi && (ticks == 1 || ipi_skipped))
    ipi_skipped = ipi_skipped.value_or(0) + static_cast<double>(*ipi);
  else
    ipi_skipped.reset();
  max_cpu_time += busiest * static_cast<double>(k.elapsed_ns);
}

std::uint32_t RungMeasurement::load_cpus() const noexcept {
  std::uint32_t n = 0;
  for (double p : cpu_periods) n += p > 0 && p >= 0.1 * periods;
  return std::max<std::uint32_t>(n, 1);
}

double RungMeasurement::mean_halt_ns() const noexcept {
  double best = 0;
  for (std::size_t i = 0; i < cpu_halts.size(); ++i) {
    if (cpu_halts[i] <= 0 || cpu_halts[i] < 0.1 * halts) continue;
    const double m = cpu_halt_ns[i] / cpu_halts[i];
    if (best == 0 || m < best) best = m;
  }
  return best > 0 ? best : (halts > 0 ? halt_ns / halts : 0);
}

CapPrediction predict_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns) {
  CapPrediction p;
  add_periods(h.poll_hit, cap_ns, p);
  add_periods(h.poll_halt, cap_ns, p);
  add_periods(h.halt, cap_ns, p);
  return p;
}

CapPrediction replay_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns, std::uint32_t grow_start_ns) {
  constexpr double kMaxPeriods = 8000;  // ~0.2 ms per rung per tick
  double total = 0;
  auto count = [&](const haltpoll::LatencyHistogram& x) { x.for_each_bucket([&](std::uint64_t, std::uint64_t n) { total += static_cast<double>(n); }); };
  count(h.poll_hit);
  count(h.poll_halt);
  count(h.halt);
  CapPrediction p;
  if (total <= 0) return p;
  const double scale = std::min(1.0, kMaxPeriods / total);
  std::vector<std::uint64_t> periods;
  double carry = 0;  // the fractions rounding drops, carried to the next bucket
  auto expand = [&](const haltpoll::LatencyHistogram& x) {
    x.for_each_bucket([&](std::uint64_t upper_ns, std::uint64_t n) {
      const double want = static_cast<double>(n) * scale + carry;
      const auto k = static_cast<std::uint64_t>(want);
      carry = want - static_cast<double>(k);
      const std::uint64_t mid = upper_ns - upper_ns / 32;  // a bucket spans ~1/16 of its bound
      periods.insert(periods.end(), k, mid);
    });
  };
  expand(h.poll_hit);
  expand(h.poll_halt);
  expand(h.halt);
  std::mt19937_64 rng(0x68616c74);  // fixed: the same histogram always predicts the same
  std::shuffle(periods.begin(), periods.end(), rng);
  haltpoll::PolicyParams params;
  params.haltpoll.guest_halt_poll_ns = cap_ns;
  params.haltpoll.guest_halt_poll_grow_start = grow_start_ns;
  auto policy = haltpoll::make_window_policy("haltpoll", params);
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::uint64_t d : periods) {
      const std::uint64_t w = policy->window_ns();
      if (pass == 1) {
        if (w > 0 && d <= w) {
          p.hits += 1;
          p.poll_ns += static_cast<double>(d);
        } else {
          p.halts += 1;
          p.poll_ns += static_cast<double>(w);
        }
      }
      policy->record(d, w);
    }
  }
  const double back = periods.empty() ? 0 : total / static_cast<double>(periods.size());
  p.hits *= back;
  p.halts *= back;
  p.poll_ns *= back;
  return p;
}

Tuner::Tuner(TunerParams params, std::uint32_t initial_ns) : params_(params) { reset(initial_ns); }

std::vector<std::uint32_t> Tuner::ladder() const {
  std::vector<std::uint32_t> l{params_.min_ns};
  for (double v = params_.start_ns; v < params_.max_ns; v *= params_.ladder_factor)
    if (v > params_.min_ns) l.push_back(static_cast<std::uint32_t>(v));
  if (params_.max_ns > params_.min_ns) l.push_back(params_.max_ns);
  return l;
}

void Tuner::set_params(const TunerParams& params) {
  params_ = params;
  reset(current_);
}

void Tuner::reset(std::uint32_t ns) {
  current_ = ns;
  ladder_ = ladder();
  phase_ = Phase::steady;
  measured_.clear();
  at_rung_.reset();
  signature_.reset();
  confirm_before_.reset();
  ticks_since_sweep_ = 0;
  steady_run_ = 0;
  swept_ = false;
  change_streak_ = 0;
  ceiling_.reset();
  shrink_block_ticks_ = 0;
  growth_block_ticks_ = 0;
}

std::string_view Tuner::phase() const noexcept {
  switch (phase_) {
    case Phase::steady: return "steady";
    case Phase::sweep: return "sweep";
    case Phase::confirm: return "confirm";
  }
  return "?";
}

std::optional<std::uint32_t> Tuner::grow_start_for(std::uint32_t ns) const noexcept {
  if (!params_.manage_grow_start) return std::nullopt;
  if (ns == 0) return params_.kernel_grow_start_ns;
  return std::min(params_.kernel_grow_start_ns, std::max<std::uint32_t>(ns / 2, 1));
}

std::uint32_t Tuner::rung_below(std::uint32_t ns) const {
  std::uint32_t best = ladder_.front();
  for (auto r : ladder_)
    if (r < ns) best = r;
  return best;
}

double Tuner::closed_loop_gain(const RungMeasurement& r, const RungMeasurement& base) const noexcept {
  double gain = base.wake_rate() > 0 ? r.wake_rate() / base.wake_rate() - 1.0 : 0.0;
  if (gain < params_.closed_loop_min_gain) return 0;
  // Polling can speed a loop up only by catching its remote wake-ups: where the IPI-skipped count
  // says polling served almost none (a timer's polls end by its own interrupt), a higher wake rate
  // is the load changing under the sweep (a baseline taken as it started), not a closed loop.
  if (r.ipi_skipped && r.useful_rate() < 0.1 * r.wake_rate()) return 0;
  // Per CPU the loop runs on: the cost sums every CPU's poll time, so a loop over two CPUs that
  // polls 45 % on each must be judged on what it gains on both (eval-kernel's `db` load, shaped
  // like the real guest's database client, ran 1.4-2.4 x faster at 100000 for 45 % per CPU;
  // counted once, its gain fell just short and the sweep chose 0).
  return gain * r.load_cpus();
}

double Tuner::benefit(const RungMeasurement& r, const RungMeasurement& base) const noexcept {
  const double penalty_s = penalty_ns_ ? *penalty_ns_ / 1e9 : 0.0;
  return penalty_s * r.useful_rate() + closed_loop_gain(r, base);
}

double Tuner::net(const RungMeasurement& r, const RungMeasurement& base) const noexcept {
  return benefit(r, base) - r.poll_cpus();
}

bool Tuner::acceptable(const RungMeasurement& r, const RungMeasurement& base) const noexcept {
  if (r.ns == base.ns) return true;
  const bool within = r.max_poll_cpu_percent() <= params_.max_poll_cpu_percent;
  if (params_.policy == Policy::budget) return within;
  return within || benefit(r, base) >= params_.min_benefit_ratio * r.poll_cpus();
}

std::string Tuner::describe(const RungMeasurement& r, const RungMeasurement& base) const {
  std::string s = fmt::format("{} ns: {:.0f} wake-ups/s, {:.0f} halts/s, {:.0f} poll hits/s", r.ns, r.wake_rate(),
                              r.halt_rate(), r.per_s(r.hits));
  if (r.ipi_skipped) s += fmt::format(", {:.0f} IPI-skipped/s", r.per_s(*r.ipi_skipped));
  s += fmt::format(", poll {:.1f}%/CPU (busiest {:.1f}%)", r.mean_poll_cpu_percent(), r.max_poll_cpu_percent());
  if (r.ns != base.ns)
    s += fmt::format(", benefit {:.3f} vs cost {:.3f} CPU-s/s", benefit(r, base), r.poll_cpus());
  return s;
}

Decision Tuner::move(Decision d, Action a, std::uint32_t to, std::string reason) {
  d.reason = prefix_ + reason;
  d.grow_start_ns = grow_start_for(to);
  if (to == current_) {
    d.action = Action::hold;
    d.guest_halt_poll_ns = current_;
    return d;
  }
  d.action = a;
  d.guest_halt_poll_ns = to;
  d.reset_limits = params_.reset_limits && to < current_;
  current_ = to;
  at_rung_.reset();
  return d;
}

std::optional<std::size_t> Tuner::next_rung(std::size_t after) const {
  for (std::size_t i = after + 1; i < ladder_.size(); ++i) {
    if (ceiling_ && ladder_[i] >= *ceiling_) return std::nullopt;
    // With the idle-period histogram: a rung predicted to catch no more periods than the one
    // below it changes nothing, open loop or closed (a closed loop speeds up only once some of its
    // periods are caught). The top rung is always tried.
    if (periods_ && i + 1 < ladder_.size()) {
      const double total = predict_cap(*periods_, ladder_[i]).hits + predict_cap(*periods_, ladder_[i]).halts;
      const double gained = predict_cap(*periods_, ladder_[i]).hits - predict_cap(*periods_, ladder_[i - 1]).hits;
      if (total > 0 && gained < 0.02 * total) continue;
    }
    return i;
  }
  return std::nullopt;
}

Decision Tuner::start_sweep(Decision d, const KernelSignals& k, std::string why) {
  phase_ = Phase::sweep;
  measured_.clear();
  sweep_index_ = 0;
  ceiling_.reset();
  change_streak_ = 0;
  confirm_before_.reset();
  ticks_since_sweep_ = 0;
  if (current_ == ladder_.front()) {
    // The tick just seen already ran at the bottom rung: it is the first tick of the baseline.
    at_rung_ = RungMeasurement{};
    at_rung_->ns = current_;
    at_rung_->add(k);
    prefix_ += why + "; ";
    return continue_sweep(std::move(d));
  }
  return move(std::move(d), Action::shrink, ladder_.front(),
              why + fmt::format("; sweep: baseline at {} ns first", ladder_.front()));
}

Decision Tuner::finish_sweep(Decision d, std::string prefix) {
  const RungMeasurement& base = measured_.front();
  const RungMeasurement* chosen = &base;
  std::string how;
  if (params_.policy == Policy::latency) {
    if (penalty_ns_) {
      const RungMeasurement* best = &base;
      for (const auto& r : measured_) {
        if (r.halt_share() * *penalty_ns_ <= params_.target_wake_latency_ns) {
          best = &r;
          break;
        }
        if (r.halt_share() < best->halt_share()) best = &r;
      }
      chosen = best;
      how = fmt::format("latency: halt-exit wait {} per wake-up (target {}, penalty {})",
                        fmt_ns(chosen->halt_share() * *penalty_ns_), fmt_ns(params_.target_wake_latency_ns),
                        fmt_ns(*penalty_ns_));
    } else {
      for (const auto& r : measured_)
        if (r.halt_share() < chosen->halt_share() * 0.9) chosen = &r;
      how = fmt::format("latency: no measured penalty yet, fewest halts per wake-up ({:.1f}%)", 100 * chosen->halt_share());
    }
  } else {
    double best = net(base, base);
    for (const auto& r : measured_)
      if (acceptable(r, base)) best = std::max(best, net(r, base));
    // A near-tie goes to the cheaper rung: a higher one must pay `hysteresis` of the best rung's
    // own poll CPU more. (Not a share of the best net: a closed loop's net is several CPUs' worth
    // of work, and 10 % of it hid a pipe 35 % slower at 25000 than at 400000.)
    const RungMeasurement* best_rung = &base;
    for (const auto& r : measured_)
      if (acceptable(r, base) && net(r, base) == best) best_rung = &r;
    const double slack = std::max(params_.hysteresis * best_rung->poll_cpus(), 0.005);
    for (const auto& r : measured_) {
      if (acceptable(r, base) && net(r, base) >= best - slack) {
        chosen = &r;
        break;  // measured_ is in increasing ns: the lowest near-best rung
      }
    }
    // A closed loop's rates over one sweep tick swing with its bursts (the pipe restarted in
    // chunks: ±10 % between 250 ms ticks, several CPU-seconds of "gain"), but the share of its
    // wake-ups that halt does not, and each of those halts is a halt exit on the loop's path. So a
    // closed loop is held to the fewest halts measured: the chosen rung is replaced by the lowest
    // acceptable one whose halt share is within 2 x the lowest (or under 0.5 %, where halts cost
    // the loop < 0.3 us per wake-up at a 55 us penalty). The real pipe chose 25000 on its tick
    // (4.3 % of its wake-ups halting, against 0.35 % at 50000) and ran 12.1 us/op against 7.5-9.3
    // at 100000. The histogram's predicted shrinks then look for less poll CPU from there.
    std::string fewer_halts;
    if (closed_loop_gain(*chosen, base) > 0) {
      double fewest = chosen->halt_share();
      for (const auto& r : measured_)
        if (acceptable(r, base) && closed_loop_gain(r, base) > 0) fewest = std::min(fewest, r.halt_share());
      const double limit = std::max(2 * fewest, 0.005);
      if (chosen->halt_share() > limit) {
        for (const auto& r : measured_) {
          if (!acceptable(r, base) || closed_loop_gain(r, base) <= 0 || r.halt_share() > limit) continue;
          fewer_halts = fmt::format("; {} ns instead of {} ns: a closed loop, {:.2f}% of its wake-ups halt against {:.2f}%",
                                 r.ns, chosen->ns, 100 * r.halt_share(), 100 * chosen->halt_share());
          chosen = &r;
          break;
        }
      }
    }
    how = fmt::format("{}: net benefit {:.3f} CPU-s/s (best {:.3f}, budget {:.1f}%/CPU{}){}", to_string(params_.policy),
                      net(*chosen, base), best, params_.max_poll_cpu_percent,
                      penalty_ns_ ? fmt::format(", penalty {}", fmt_ns(*penalty_ns_))
                                  : std::string(", penalty not measured yet: closed-loop gain only"),
                      fewer_halts);
  }
  phase_ = Phase::steady;
  swept_ = true;
  ticks_since_sweep_ = 0;
  signature_ = *chosen;
  signature_steady_ = false;
  const std::uint32_t to = chosen->ns;
  std::string reason = prefix + fmt::format("; sweep done over {} rungs, chose {} ns ({})", measured_.size(), to, how);
  const Action a = to > current_ ? Action::grow : (to < current_ ? Action::shrink : Action::hold);
  return move(std::move(d), a, to, std::move(reason));
}

Decision Tuner::continue_sweep(Decision d) {
  const RungMeasurement& m = *at_rung_;
  if (m.periods < static_cast<double>(params_.min_periods) && m.ticks < params_.max_dwell_ticks)
    return move(std::move(d), Action::hold, current_,
                fmt::format("sweep: measuring {} ns ({:.0f}/{} idle periods, tick {}/{})", current_,
                                       m.periods, params_.min_periods, m.ticks, params_.max_dwell_ticks));
  measured_.push_back(m);
  const RungMeasurement& base = measured_.front();
  std::string prefix = "sweep: " + describe(m, base);
  std::optional<std::size_t> next;
  std::string stop;
  if (measured_.size() == 1) {
    if (base.halt_rate() < params_.grow_halts_per_second) {
      stop = fmt::format("halts rare ({:.0f}/s < {:.0f}/s): nothing to win", base.halt_rate(),
                         params_.grow_halts_per_second);
    } else {
      // The kernel polls only once the cap exceeds the halted periods: rungs far below them
      // cannot start polling (real-guest §2). Half the mean leaves room for the spread.
      const double floor_ns = base.mean_halt_ns() / 2;
      std::size_t i = sweep_index_;
      while ((next = next_rung(i)) && ladder_[*next] < floor_ns && *next + 1 < ladder_.size()) i = *next;
      if (!next) stop = "no rung left to try";
      else if (ladder_[*next] < floor_ns)
        next.reset(), stop = fmt::format("halted periods average {}, beyond the ladder", fmt_ns(base.mean_halt_ns()));
    }
  } else {
    const RungMeasurement& prev = measured_[measured_.size() - 2];
    const RungMeasurement* best = &base;
    for (std::size_t i = 0; i + 1 < measured_.size(); ++i)
      if (acceptable(measured_[i], base) && net(measured_[i], base) > net(*best, base)) best = &measured_[i];
    const bool halts_rare = m.halt_rate() < params_.grow_halts_per_second / 2 || m.halts < 0.01 * m.periods;
    // Still halting on a tenth of its periods, the rung sits below the load's idle periods (or in
    // the governor's trap, L < t <= 2L): polling that does not pay here says nothing about the next
    // rung, which may catch them (the real load_rr at 12500: 7768 halts/s, slower than at 0; at
    // 25000 it ran 1.6 x faster). Only a rung that catches most periods and still does not pay
    // ends the climb.
    const bool halts_frequent = m.halts >= 0.1 * m.periods && m.halt_rate() >= params_.grow_halts_per_second;
    // Polls that catch most periods while almost none of them skipped an IPI end by the CPU's own
    // interrupt (a timer's): no higher rung avoids a remote wake-up, however often it still halts
    // (the real 150 us timer at 200000 halted on 10 % of its periods, and the climb went on to
    // 400000 at 45 % poll CPU).
    const bool open_loop = m.ipi_skipped && m.hits >= 0.5 * m.periods && *m.ipi_skipped < 0.1 * m.hits;
    if (params_.policy == Policy::budget && m.max_poll_cpu_percent() > params_.max_poll_cpu_percent) {
      stop = fmt::format("busiest CPU polls {:.1f}% > budget {:.1f}%", m.max_poll_cpu_percent(),
                         params_.max_poll_cpu_percent);
    } else if (params_.policy == Policy::latency) {
      if (penalty_ns_ && m.periods > 0 && m.halts / m.periods * *penalty_ns_ <= params_.target_wake_latency_ns)
        stop = "meets the latency target";
      else if (halts_rare && m.wake_rate() < prev.wake_rate() * 1.05)
        stop = "halts rare and the wake rate stopped rising";
    } else if (m.mean_poll_cpu_percent() - best->mean_poll_cpu_percent() >= 2 && net(m, base) <= net(*best, base) &&
               m.wake_rate() < prev.wake_rate() * (1 + params_.closed_loop_min_gain) &&
               (!halts_frequent || open_loop)) {
      // A closed loop that is still speeding up may pay one rung higher (its periods shrink once
      // both sides poll); anything else that polls more without paying is the governor's trap or
      // an open load.
      stop = fmt::format("polls {:.1f} points more than {} ns without paying", m.mean_poll_cpu_percent() -
                         best->mean_poll_cpu_percent(), best->ns);
    } else if (halts_rare && m.wake_rate() < prev.wake_rate() * 1.05) {
      stop = "halts rare and the wake rate stopped rising";
    }
    if (stop.empty()) {
      next = next_rung(sweep_index_);
      if (!next) stop = "top of the ladder";
    }
  }
  if (!next) return finish_sweep(std::move(d), prefix + "; " + stop);
  sweep_index_ = *next;
  return move(std::move(d), Action::grow, ladder_[*next], prefix + fmt::format("; next rung {} ns", ladder_[*next]));
}

std::optional<std::string> Tuner::load_changed(const RungMeasurement& t, bool at_once_only) {
  const RungMeasurement& s = *signature_;
  const double f = params_.load_change_factor;
  double worst = 1;
  std::string what;
  auto check = [&](const char* name, double a, double b) {
    const double r = factor_between(a, b);
    if (std::abs(a - b) > 300 && r > f && r > worst) {
      worst = r;
      what = fmt::format("{} {:.0f}/s -> {:.0f}/s", name, b, a);
    }
  };
  check("wake-ups", t.wake_rate(), s.wake_rate());
  // Halts only where they are a real share of the wake-ups: at a converged rung a closed loop
  // halts on 1-2 % of its periods, and that handful moves by half from one tick to the next (the
  // real pipe: 969/s -> 1549/s at 85k wake-ups/s) without anything having changed.
  if (std::max(t.halt_rate(), s.halt_rate()) >= 0.05 * std::max(t.wake_rate(), s.wake_rate()))
    check("halts", t.halt_rate(), s.halt_rate());
  // Poll CPU alone: 10 points and the factor (a limit that the governor resets below grow_start
  // makes a steady load's poll share wander by a third; the real pipe's moved 15.3 % -> 9.6 %).
  const double dcpu = std::abs(t.mean_poll_cpu_percent() - s.mean_poll_cpu_percent());
  const double rcpu = factor_between(t.mean_poll_cpu_percent(), s.mean_poll_cpu_percent());
  if (dcpu > 10 && rcpu > f && what.empty()) {
    worst = rcpu;
    what = fmt::format("poll CPU {:.1f}% -> {:.1f}%/CPU", s.mean_poll_cpu_percent(), t.mean_poll_cpu_percent());
  }
  if (at_once_only) return worst >= 2 * f ? std::optional<std::string>(what) : std::nullopt;
  if (what.empty()) {
    change_streak_ = 0;
    return std::nullopt;
  }
  if (worst >= 2 * f || ++change_streak_ >= 2) return what;
  return std::nullopt;
}

Decision Tuner::steady(Decision d, const Observation& obs) {
  RungMeasurement t;
  t.ns = current_;
  t.add(obs.kernel);
  // The signature a sweep or a confirmation leaves is a sweep tick's (250 ms, taken while the
  // limits were still settling); the first steady tick replaces it, so that a bursty load is not
  // measured against a quarter second of itself (the real pipe in 1 s chunks re-swept 12 times).
  if (!signature_ || signature_->ns != current_ || !signature_steady_) {
    // ...unless the load changed as the sweep ended: replacing the signature by the new load's
    // tick would hide the change until the next resweep (the real timer after the pipe, found 5 s
    // late). A change of twice the factor is no quarter-second wobble.
    if (signature_ && signature_->ns == current_)
      if (auto c = load_changed(t, true)) return start_sweep(std::move(d), obs.kernel, "load changed: " + *c);
    signature_ = t;
    signature_steady_ = true;
  }
  const RungMeasurement& s = *signature_;

  if (params_.policy == Policy::budget && t.max_poll_cpu_percent() > params_.max_poll_cpu_percent &&
      current_ > ladder_.front()) {
    ceiling_ = current_;
    signature_.reset();
    return move(std::move(d), Action::shrink, rung_below(current_),
                fmt::format("budget: busiest CPU polls {:.1f}% > {:.1f}%: one rung down, not above {} ns "
                                       "until the next sweep",
                                       t.max_poll_cpu_percent(), params_.max_poll_cpu_percent, current_));
  }
  if (auto c = load_changed(t)) return start_sweep(std::move(d), obs.kernel, "load changed: " + *c);
  // Never swept: a busy guest is swept even when it halts rarely (a load that already polls at
  // a high cap, as at the kernel's default 200000); only an idle one goes to the bottom.
  const bool busy = t.halt_rate() >= params_.grow_halts_per_second ||
                    (!swept_ && t.wake_rate() >= params_.grow_halts_per_second);
  if (busy && growth_block_ticks_ == 0 && (!swept_ || ticks_since_sweep_ >= params_.resweep_after_ticks))
    return start_sweep(std::move(d), obs.kernel,
                       fmt::format("{:.0f} halts/s{}", t.halt_rate(),
                                   swept_ ? fmt::format(", last sweep {} ticks ago", ticks_since_sweep_)
                                          : std::string(", not swept yet")));
  if (!swept_ && current_ > ladder_.front() && !busy)
    return move(std::move(d), Action::shrink, ladder_.front(),
                fmt::format("{:.0f} wake-ups/s, {:.0f} halts/s (< {:.0f}/s): nothing for polling to win, down to {} "
                            "ns until halts are frequent",
                            t.wake_rate(), t.halt_rate(), params_.grow_halts_per_second, ladder_.front()));
  if (periods_ && current_ > ladder_.front() && shrink_block_ticks_ == 0 && t.cpus > 0) {
    // The library's haltpoll model replayed over the live histogram (from a limit of 0, as
    // reset_limits leaves a lowered cap) against the same histogram at the value in force (its
    // limits converged: the steady-state view, which if anything overstates the hits here): the
    // lowest rung predicted to keep 99 % of the hits at a point less poll CPU per CPU is tried,
    // then confirmed by the counters. Both sides come from one histogram, so they are consistent
    // even where the counters and the eBPF periods differ by a few events.
    const CapPrediction here = predict_cap(*periods_, current_);
    const double scale = 1e9 / static_cast<double>(obs.kernel.elapsed_ns) / 1e9 * 100 / t.cpus;
    for (auto r : ladder_) {
      if (r >= current_) break;
      // Below 2 × grow_start one long period resets a CPU's limit to 0 (the shrink lands under
      // grow_start) and a bursty load keeps halting its way back: on the real guest the pipe,
      // shrunk 400000 -> 25000 on a 99.3 % prediction, re-swept twice in 15 s. Such rungs are
      // left to the sweep's measurements; 0 (no polling) is always a candidate.
      const std::uint32_t gs = grow_start_for(r).value_or(params_.kernel_grow_start_ns);
      if (r != 0 && r < 2ULL * gs) continue;
      const CapPrediction p = replay_cap(*periods_, r, gs);
      const double saved_points = (here.poll_ns - p.poll_ns) * scale;
      if (p.hits >= 0.99 * here.hits && saved_points >= 1.0) {
        confirm_before_ = s;
        confirm_from_ = current_;
        phase_ = Phase::confirm;
        return move(std::move(d), Action::shrink, r,
                    fmt::format("idle-period histogram: {} ns keeps {:.1f}% of the poll hits at {:.1f} "
                                           "points less poll CPU per CPU: trying it",
                                           r, here.hits > 0 ? 100 * p.hits / here.hits : 100.0, saved_points));
      }
    }
  }
  return move(std::move(d), Action::hold, current_, "steady at " + describe(t, t));
}

bool Tuner::wants_kernel_trace() const noexcept {
  if (phase_ != Phase::steady || params_.steady_trace_every <= 1) return true;
  return steady_run_ % params_.steady_trace_every == 1;
}

Decision Tuner::decide(const Observation& obs) {
  Decision d = decide_step(obs);
  steady_run_ = phase_ == Phase::steady ? steady_run_ + 1 : 0;
  return d;
}

Decision Tuner::decide_step(const Observation& obs) {
  Decision d;
  d.tick = obs.tick;
  d.poll_cpu_percent = obs.poll_cpu_percent;
  d.wake_latency_ns = obs.wake_latency_ns;
  d.steal_percent = obs.steal_percent;

  prefix_.clear();
  if (obs.current_ns != current_) {
    // Someone else wrote the value, or the last write failed: start again from what is in force.
    prefix_ = fmt::format("value in force is {} ns, not {} ns: restarting from it; ", obs.current_ns, current_);
    reset(obs.current_ns);
  }
  d.previous_ns = current_;
  d.guest_halt_poll_ns = current_;
  ++ticks_since_sweep_;
  if (shrink_block_ticks_ > 0) --shrink_block_ticks_;
  if (growth_block_ticks_ > 0) --growth_block_ticks_;
  penalty_ns_ = obs.halt_exit_penalty_ns;
  periods_ = obs.kernel.periods;

  if (params_.policy == Policy::static_value) {
    const std::uint32_t to = std::clamp(params_.static_ns, params_.min_ns, params_.max_ns);
    return move(std::move(d), Action::set, to, fmt::format("static policy: {} ns", to));
  }
  if (obs.kernel.counters == KernelSignals::Counters::tracepoint)
    return move(std::move(d), Action::hold, current_,
                fmt::format("nothing to tune: this guest's kernel does not poll (no cpuidle driver is registered, "
                            "so guest_halt_poll_ns reaches no idle path); {}",
                            kHowToEnableHaltpoll));
  if (!obs.kernel.available())
    return move(std::move(d), Action::hold, current_, "no kernel idle counters in this tick: not moving");

  if (obs.steal_percent && *obs.steal_percent > params_.steal_backoff_percent) {
    // A contended host comes first: polling vCPUs take time from whoever waits for the pCPU.
    // Growth stays blocked while the steal lasts and a few ticks after; then the load is swept
    // again (swept_ = false): on the real guest 2 s of 10-29 % steal, as load_rr started, used to
    // block growth for 61 ticks, and with the load's first sweep counted as done it ran the whole
    // cell at 0 (0.52 x its throughput at 200000).
    growth_block_ticks_ = kStealCooldownTicks;
    swept_ = false;
    phase_ = Phase::steady;
    signature_.reset();
    return move(std::move(d), Action::shrink, rung_below(current_),
                fmt::format("host contended: steal {:.1f}% > {:.1f}%: one rung down, no growth for {} ticks",
                                       *obs.steal_percent, params_.steal_backoff_percent, growth_block_ticks_));
  }

  if (!at_rung_ || at_rung_->ns != current_) {
    at_rung_ = RungMeasurement{};
    at_rung_->ns = current_;
  }
  at_rung_->add(obs.kernel);

  switch (phase_) {
    case Phase::sweep: return continue_sweep(std::move(d));
    case Phase::confirm: {
      const RungMeasurement& m = *at_rung_;
      if (m.periods < static_cast<double>(params_.min_periods) && m.ticks < params_.max_dwell_ticks)
        return move(std::move(d), Action::hold, current_,
                    fmt::format("confirming {} ns ({:.0f}/{} idle periods)", current_, m.periods,
                                           params_.min_periods));
      const RungMeasurement& b = *confirm_before_;
      phase_ = Phase::steady;
      const bool slower = m.wake_rate() < 0.9 * b.wake_rate();
      const bool fewer_hits = b.useful_rate_like(m) > 100 && m.useful_rate_like(b) < 0.9 * b.useful_rate_like(m);
      if (slower || fewer_hits) {
        shrink_block_ticks_ = params_.resweep_after_ticks;
        signature_ = b;
        signature_steady_ = false;
        return move(std::move(d), Action::revert, confirm_from_,
                    fmt::format("predicted shrink did not hold: {}; back to {} ns", describe(m, m),
                                           confirm_from_));
      }
      signature_ = m;
      signature_steady_ = false;
      return move(std::move(d), Action::hold, current_,
                  fmt::format("predicted shrink confirmed by the counters: {}", describe(m, m)));
    }
    case Phase::steady: return steady(std::move(d), obs);
  }
  return move(std::move(d), Action::hold, current_, "hold");
}

}  // namespace haltpolld
