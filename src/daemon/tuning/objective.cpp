#include "tuning/objective.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace haltpolld {

namespace {

double seconds_of(std::optional<double> ns) { return ns.value_or(0) / 1e9; }

// Per CPU the credited closed-loop gain of r over b (see objective.hpp) and its variance.
struct CpuGain {
  double gain = 0, var = 0;  // var: Poisson
  double noise_sd = 0;       // the load's own spread (correlated across CPUs)
};
CpuGain cpu_gain(const RungMeasurement& r, const RungMeasurement& b, std::size_t c, double nu = 0) {
  const double wr = r.per_s(r.cpu_periods[c]), wb = b.per_s(b.cpu_periods[c]);
  const double rise = wr - wb;
  if (wb <= 0 || rise <= 0) return {};
  const bool ipi = r.ipi_skipped && b.ipi_skipped;
  const double ur = r.per_s(ipi ? r.cpu_ipi[c] : r.cpu_hits[c]);
  const double ub = b.per_s(ipi ? b.cpu_ipi[c] : b.cpu_hits[c]);
  const double credited = std::min(rise, ur - ub);
  if (credited <= 0) return {};
  const double se_r = r.count_se(r.cpu_periods[c]), se_b = b.count_se(b.cpu_periods[c]);
  // Relative spread nu per second on both rates: the ratio wr / wb moves by nu sqrt(1/Tr + 1/Tb).
  const double rel = nu * std::sqrt(1 / std::max(r.seconds(), 1e-3) + 1 / std::max(b.seconds(), 1e-3));
  return {credited / wb, (se_r * se_r + (wr / wb) * (wr / wb) * se_b * se_b) / (wb * wb), rel * wr / wb};
}

// Log of a rate with a count behind it, and the Poisson variance of that log.
struct LogRate {
  double log = 0, var = 0;
};
LogRate log_rate(const RungMeasurement& m, int signal) {
  const double t = std::max(m.seconds(), 1e-9);
  switch (signal) {
    case 0: return {std::log((m.periods + 1) / t), 1 / (m.periods + 1)};
    case 1: return {std::log((m.halts + 1) / t), 1 / (m.halts + 1)};
    case 3: return {std::log((m.useful() + 1) / t), 1 / (m.useful() + 1)};
    // 1 ms of polling per second (a tenth of a percent of one CPU) is no polling to tell apart:
    // the polls a lowered cap leaves running out must not read as a changed load.
    default: return {std::log(m.poll_ns / t + 1e6), 2 / (m.polls + 1)};
  }
}

}  // namespace

Weights weights_for(const TunerParams& p) {
  Weights w;
  switch (p.policy) {
    case Policy::balanced: w.lambda = p.min_benefit_ratio; break;
    case Policy::budget: w.budget_percent = p.max_poll_cpu_percent; break;
    case Policy::latency:
      w.lambda = 0;
      w.latency_target_ns = p.target_wake_latency_ns;
      break;
    case Policy::static_value: break;
  }
  return w;
}

Score score(const RungMeasurement& r, const RungMeasurement& b, std::optional<double> penalty_ns, const Weights& w,
            const Noise& noise) {
  Score s;
  const double p = seconds_of(penalty_ns);
  const bool ipi = r.ipi_skipped && b.ipi_skipped;
  const double cr = ipi ? *r.ipi_skipped : r.hits, cb = ipi ? *b.ipi_skipped : b.hits;
  s.served = p * (r.per_s(cr) - b.per_s(cb));
  const double ta = std::max(r.seconds(), 1e-3), tb = std::max(b.seconds(), 1e-3);
  double var = p * p * (std::pow(r.count_se(cr), 2) + std::pow(b.count_se(cb), 2));
  double spread = p * noise.load * std::sqrt(std::pow(r.per_s(cr), 2) / ta + std::pow(b.per_s(cb), 2) / tb);
  const std::size_t n = std::min(r.cpu_periods.size(), b.cpu_periods.size());
  s.cpu_net.assign(n, 0.0);
  if (r.ns != b.ns) {
    for (std::size_t c = 0; c < n; ++c) {
      const CpuGain g = cpu_gain(r, b, c, noise.load);
      s.gain += g.gain;
      var += g.var;
      spread += g.noise_sd;
      const double du = r.per_s(ipi ? r.cpu_ipi[c] : r.cpu_hits[c]) - b.per_s(ipi ? b.cpu_ipi[c] : b.cpu_hits[c]);
      s.cpu_net[c] = g.gain + p * du - w.lambda * (r.per_s(r.cpu_poll_ns[c]) - b.per_s(b.cpu_poll_ns[c])) / 1e9;
    }
  }
  const Estimate pr = r.poll(), pb = b.poll();
  s.j.value = s.served + s.gain - w.lambda * (pr.value - pb.value);
  spread += w.lambda * noise.governor * std::sqrt(pr.value * pr.value / ta + pb.value * pb.value / tb);
  s.j.se = r.ns == b.ns ? 0 : std::sqrt(var + w.lambda * w.lambda * (pr.se * pr.se + pb.se * pb.se) + spread * spread);
  s.cost = pr.value + r.halt_rate() * p;
  if (w.budget_percent && r.max_poll_cpu_percent() > *w.budget_percent) s.eligible = false;
  if (w.latency_target_ns && penalty_ns && r.halt_share() * *penalty_ns > *w.latency_target_ns) s.eligible = false;
  return s;
}

std::string describe(const RungMeasurement& r, const Score* sc) {
  std::string s = fmt::format("{} ns: {:.0f} wake-ups/s, {:.0f} halts/s, {:.0f} poll hits/s", r.ns, r.wake_rate(),
                              r.halt_rate(), r.per_s(r.hits));
  if (r.ipi_skipped) s += fmt::format(", {:.0f} IPI-skipped/s", r.per_s(*r.ipi_skipped));
  s += fmt::format(", poll {:.1f}%/CPU (busiest {:.1f}%)", r.mean_poll_cpu_percent(), r.max_poll_cpu_percent());
  if (!r.unlimited_cpus.empty()) {
    std::string ids;
    for (int c : r.unlimited_cpus) ids += (ids.empty() ? "" : ",") + std::to_string(c);
    s += fmt::format(" (CPUs {} left out: they poll without limit whatever the cap)", ids);
  }
  if (sc)
    s += fmt::format(", objective {:.3f} ± {:.3f} CPU-s/s (gain {:.3f}, halt exits avoided {:.3f}, cost {:.3f})",
                     sc->j.value, sc->j.se, sc->gain, sc->served, sc->cost);
  return s;
}

void settle_eligibility(const std::vector<RungMeasurement>& rungs, std::vector<Score>& sc, double z,
                        bool by_halt_share) {
  if (by_halt_share) {
    double fewest = 1;
    for (const auto& r : rungs) fewest = std::min(fewest, r.halt_share());
    for (std::size_t i = 0; i < rungs.size(); ++i)
      sc[i].eligible = rungs[i].halts <= fewest * rungs[i].periods + z * std::sqrt(fewest * rungs[i].periods + 1);
  }
  if (std::any_of(sc.begin(), sc.end(), [](const Score& s) { return s.eligible; })) return;
  std::size_t f = 0;
  for (std::size_t i = 0; i < rungs.size(); ++i)
    if (rungs[i].halt_share() < rungs[f].halt_share()) f = i;
  sc[f].eligible = true;
}

std::optional<ShrinkCandidate> predicted_shrink(const IdlePeriodHistograms& h, const std::vector<std::uint32_t>& ladder,
                                                std::uint32_t current, const TunerParams& p, double poll_se,
                                                double secs, std::uint32_t cpus) {
  const double z = p.confidence_z;
  const CapPrediction here = predict_cap(h, current);
  for (auto r : ladder) {
    if (r >= current) break;
    const std::uint32_t gs = grow_start_for(p, r).value_or(p.kernel_grow_start_ns);
    if (r != 0 && r < 2ULL * gs) continue;
    const CapPrediction c = replay_cap(h, r, gs);
    const double saved = (here.poll_ns - c.poll_ns) / 1e9 / secs;
    if (c.hits < here.hits - z * std::sqrt(here.hits + 1) || saved <= z * poll_se) continue;
    return ShrinkCandidate{r, here.hits > 0 ? 100 * c.hits / here.hits : 100.0, 100 * saved / cpus};
  }
  return std::nullopt;
}

std::string cpus_where(const RungMeasurement& r, const Score& s, bool gain) {
  // A CPU's part is noise below a thousandth of a CPU-second per second.
  constexpr double kFloor = 1e-3;
  std::vector<int> ids;
  for (std::size_t c = 0; c < s.cpu_net.size() && c < r.cpu_ids.size(); ++c)
    if (gain ? s.cpu_net[c] > kFloor : s.cpu_net[c] < -kFloor) ids.push_back(r.cpu_ids[c]);
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

double potential(const RungMeasurement& r, const RungMeasurement& b, std::optional<double> penalty_ns, double z,
                 const Weights& w, const std::vector<std::uint32_t>& above, const IdlePeriodHistograms* periods,
                 double periods_s) {
  const double p = seconds_of(penalty_ns ? penalty_ns : std::optional<double>(kNominalPenaltyNs));
  // The share of caught periods that are remote wake-ups, at most: per CPU, weighted by its halts
  // (the periods a higher cap could catch there), so that a timer's CPUs, whose catches are their
  // own interrupts and skip no IPI, are not credited with the pairs' share on other CPUs.
  const auto share = [z](double ipi, double hits) {
    return hits >= 1 ? std::min(1.0, (ipi + z * std::sqrt(ipi + 1)) / hits) : 1.0;
  };
  double rho = 1;  // without halts nothing is catchable, whatever the share
  if (r.ipi_skipped && r.hits >= 1 && r.halts > 0) {
    double weighted = 0;
    for (std::size_t c = 0; c < r.cpu_halts.size(); ++c)
      weighted += share(r.cpu_ipi[c], r.cpu_hits[c]) * r.cpu_halts[c];
    rho = weighted / r.halts;
  }
  const double halts = r.halt_rate();
  double gains = 0;  // Σ (1 + g_c) over the CPUs
  for (std::size_t c = 0; c < r.cpu_halts.size(); ++c)
    gains += 1 + (c < b.cpu_periods.size() && r.ns != b.ns ? cpu_gain(r, b, c).gain : 0);
  const bool hist = periods && periods_s > 0;
  // What the rung really caught: its polls that ended by a wake-up (the steady-state view at r
  // would count a period of the governor's trap, under the cap but over the limit, as caught).
  double caught = 0;
  if (hist) periods->poll_hit.for_each_bucket([&](std::uint64_t, std::uint64_t n) { caught += static_cast<double>(n); });
  double best = -std::numeric_limits<double>::infinity();
  for (const std::uint32_t ns : above) {
    double catchable = halts, extra_poll = 0;
    if (hist) {
      // Optimistic for a closed loop too: the periods it catches may shrink to nothing once both
      // sides poll; the ones it still does not catch poll the longer cap, then halt.
      const CapPrediction at = predict_cap(*periods, ns);
      catchable = std::min(halts, std::max(0.0, at.hits - caught) / periods_s);
      extra_poll = at.halts * static_cast<double>(ns > r.ns ? ns - r.ns : 0) / 1e9 / periods_s;
    }
    const double x = std::min(0.99, p * rho * catchable);
    best = std::max(best, p * rho * catchable + gains * x / (1 - x) - w.lambda * extra_poll);
    if (!hist) break;  // the same for every rung without the histogram
  }
  return above.empty() ? 0 : best;
}

bool consistent(const RungMeasurement& a, const RungMeasurement& b, double z, const Noise& noise, unsigned which) {
  const double per = 1 / std::max(a.seconds(), 1e-3) + 1 / std::max(b.seconds(), 1e-3);
  for (int s = 0; s < 4; ++s) {
    if (!(which & (1u << s))) continue;
    const double n2 = noise.of(s) * noise.of(s) * per;
    LogRate x = log_rate(a, s), y = log_rate(b, s);
    if (s == 3 && !(a.ipi_skipped && b.ipi_skipped)) {  // useful wake-ups on a common basis: poll hits
      const double ta = std::max(a.seconds(), 1e-9), tb = std::max(b.seconds(), 1e-9);
      x = {std::log((a.hits + 1) / ta), 1 / (a.hits + 1)};
      y = {std::log((b.hits + 1) / tb), 1 / (b.hits + 1)};
    }
    if (std::abs(x.log - y.log) > z * std::sqrt(x.var + y.var + n2)) return false;
  }
  return true;
}

void ChangeDetector::reset(const RungMeasurement& reference, const Noise& noise) {
  ref_ = reference;
  for (int s = 0; s < 3; ++s) {
    if (!learned_) noise2_[s] = noise.of(s) * noise.of(s);
    up_[s] = down_[s] = 0;
  }
  learned_ = true;
}

bool ChangeDetector::update(const RungMeasurement& tick, double threshold) {
  constexpr double kSlack = 1, kMaxStep = 4, kClip = 3, kLearn = 0.1;
  constexpr std::uint32_t kReferenceTicks = 8;
  const double t = std::max(tick.seconds(), 1e-3);
  bool alarm = false;
  for (int s = 0; s < 3; ++s) {
    const LogRate x = log_rate(tick, s), y = log_rate(ref_, s);
    const double poisson = x.var + y.var;
    const double sigma = std::sqrt(poisson + noise2_[s] / t + noise2_[s] / std::max(ref_.seconds(), 1e-3));
    const double zr = (x.log - y.log) / sigma;
    up_[s] = std::max(0.0, up_[s] + std::min(zr, kMaxStep) - kSlack);
    down_[s] = std::max(0.0, down_[s] + std::min(-zr, kMaxStep) - kSlack);
    alarm = alarm || up_[s] > threshold || down_[s] > threshold;
    const double r = std::clamp(zr, -kClip, kClip) * sigma;
    noise2_[s] += kLearn * (std::max(0.0, r * r - poisson) * t - noise2_[s]);
    observed2_[s] += kLearn * (std::max(0.0, r * r - poisson) * t - observed2_[s]);
  }
  ++observations_;
  if (!alarm && ref_.ticks < kReferenceTicks) ref_.merge(tick);
  return alarm;
}

void ChangeDetector::forget_observed() noexcept {
  for (double& o : observed2_) o = 0;
  observations_ = 0;
  learned_ = false;  // the next reference starts from the priors again
}

double ChangeDetector::observed_noise(int signal) const noexcept {
  constexpr double kLearn = 0.1;
  if (observations_ == 0) return 0;
  return std::sqrt(observed2_[signal] / (1 - std::pow(1 - kLearn, static_cast<double>(observations_))));
}

double ChangeDetector::worst() const noexcept {
  double w = 0;
  for (int s = 0; s < 3; ++s) w = std::max({w, up_[s], down_[s]});
  return w;
}

int ChangeDetector::worst_signal() const noexcept {
  int best = 0;
  for (int s = 1; s < 3; ++s)
    if (std::max(up_[s], down_[s]) > std::max(up_[best], down_[best])) best = s;
  return best;
}

Choice cheapest_within_noise(const std::vector<RungMeasurement>& rungs, const std::vector<Score>& sc, double z) {
  Choice c;
  while (c.best + 1 < sc.size() && !sc[c.best].eligible) ++c.best;
  for (std::size_t i = 0; i < sc.size(); ++i)
    if (sc[i].eligible && sc[i].j.value > sc[c.best].j.value) c.best = i;
  const auto equivalent = [&](std::size_t i) {
    return sc[i].eligible && sc[i].j.value >= sc[c.best].j.value - z * std::hypot(sc[i].j.se, sc[c.best].j.se);
  };
  const auto cheaper = [&](std::size_t i, std::size_t than) {
    return sc[i].cost < sc[than].cost || (sc[i].cost == sc[than].cost && rungs[i].ns < rungs[than].ns);
  };
  c.pick = c.best;
  for (std::size_t i = 0; i < sc.size(); ++i)
    if (equivalent(i) && cheaper(i, c.pick)) c.pick = i;
  std::optional<std::size_t> below, above;
  for (std::size_t i = 0; i < sc.size(); ++i) {
    if (rungs[i].ns < rungs[c.pick].ns && (!below || rungs[i].ns > rungs[*below].ns)) below = i;
    if (rungs[i].ns > rungs[c.pick].ns && equivalent(i) && (!above || cheaper(i, *above))) above = i;
  }
  if (sc[c.pick].gain > 0 && below && !equivalent(*below) && above) {
    c.pick = *above;
    c.off_knee = true;
  }
  return c;
}

}  // namespace haltpolld
