// The tuner's one objective, with its uncertainty. For a rung r measured against the sweep's
// baseline b (the bottom rung), in CPU-seconds per second:
//
//   J(r) = P·(U_r − U_b) + G(r) − λ·(C_r − C_b)
//
//   U  wake-ups served without a halt exit: remote wake-ups that skipped the IPI
//      (sched_wake_idle_without_ipi) when the eBPF programs counted them, else poll hits;
//   P  the halt-exit penalty the daemon measured on this guest (0 until measured);
//   G  the closed loop's gain: on each CPU the rise of its wake rate over the baseline's, relative
//      to the baseline's (a loop twice as fast did one more CPU-second of work per second there),
//      credited only up to the rise of that CPU's wake-ups served without an IPI — a loop can
//      speed up only through the wake-ups polling served, so a timer's or an idle CPU's wake rate
//      moving by chance, or a load starting under the baseline, gains nothing;
//   C  the poll time of all CPUs;
//   λ  the policy's price of a CPU-second of polling.
//
// The policies are parameter sets of it (Weights): balanced λ = min_benefit_ratio; budget λ = 1
// with a hard per-CPU poll limit; latency λ = 0 with a limit on the wait that halt exits add per
// wake-up (halt share × P). Every term's standard error comes from the rung's estimates, so two
// rungs are told apart only by more than their noise. The cost of a rung to the host, what "the
// cheapest" means in the choice, is its poll time plus its halt exits priced at P.
//
// `potential(r)` bounds what the next rung up can add to J(r): every halt left at r becoming a
// wake-up served without an IPI, in the share of r's polls that served remote wake-ups on the CPU
// that halted (its upper bound, per CPU weighted by the halts; 1 without a count), plus the
// speed-up a closed loop gets when the time its CPU spends in those halted wake-ups goes. The climb goes on while J(r) + z·se + potential(r) can beat the best
// rung's J − z·se: the governor's trap (the rung polls and still halts), a timer's polls that end
// by its own interrupt, and polling that stopped paying all end it for that one reason.
// Pure functions: nothing to synchronise.
#pragma once

#include "tuner_params.hpp"
#include "tuning/rung.hpp"

#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// The load's own tick-to-tick spread per second beyond Poisson (TunerParams::tick_noise and
// governor_noise): of the load's speed (wake-ups, useful wake-ups) and of what the governor moves
// too (halts, poll CPU).
struct Noise {
  double load = 0.05, governor = 0.3;
  double of(int signal) const noexcept { return signal == 1 || signal == 2 ? governor : load; }
};
struct Weights {
  double lambda = 1;
  std::optional<double> budget_percent;     // busiest CPU's poll %, hard
  std::optional<double> latency_target_ns;  // halt share × penalty, hard
};
Weights weights_for(const TunerParams& p);

struct Score {
  Estimate j;         // the objective
  double gain = 0;    // G, the closed-loop part of j
  double served = 0;  // P·(U_r − U_b), the halt exits avoided
  double cost = 0;    // the host's cost: poll CPU-s/s plus halts × P
  bool eligible = true;
  // Per CPU (the rung's order) its own part: gain + P·(its useful wake-ups' rise) − λ·(its poll
  // time's rise). A global cap for CPUs whose loads want different caps shows as some negative.
  std::vector<double> cpu_net;
};
// "0-3,8" of the CPUs whose part of `s` is positive (gain) or negative (pay), by their numbers.
std::string cpus_where(const RungMeasurement& r, const Score& s, bool gain);

// `penalty_ns` empty: P = 0. A rung is eligible when it keeps the policy's hard limits; the latency
// limit needs P and is left to the tuner without it. The standard error counts the load's own
// spread `noise` next to the Poisson noise of the counts (the same burst moves every CPU, so that
// part is summed over the CPUs as one).
Score score(const RungMeasurement& r, const RungMeasurement& base, std::optional<double> penalty_ns, const Weights& w,
            const Noise& noise = {0, 0});

// The most a rung above r could add to J(r) (above), the largest over the rungs `above`. Without a
// measured penalty the closed-loop part is priced at kNominalPenaltyNs, the real guest's probes'
// halt exit, so that a loop still climbs before the first measurement. With the rung's idle-period
// histogram (`periods`, over `periods_s` seconds) the halts a rung could catch are those the
// steady-state model predicts it to catch (a closed loop speeds up only once some of its periods
// are caught, so this bounds it too), and the extra polling priced by λ is that of the periods it
// would still not catch, which poll the longer cap and halt (the caught ones may shrink to nothing
// once both sides poll); without it, every halt left and no extra polling. A loop's speed-up bound counts the time every CPU spends in
// the halted wake-ups that could go, as if one serial loop ran through all of them.
inline constexpr double kNominalPenaltyNs = 20000;
double potential(const RungMeasurement& r, const RungMeasurement& base, std::optional<double> penalty_ns, double z,
                 const Weights& w, const std::vector<std::uint32_t>& above,
                 const IdlePeriodHistograms* periods = nullptr, double periods_s = 0);

// The choice among a sweep's rungs (`rungs` in any order, `sc` their scores): `best` the eligible
// rung of the highest objective, `pick` the cheapest eligible rung (cost, then the lower cap) whose
// objective lies within z combined standard errors of the best's. Off the knee: when `pick` owes
// its objective partly to a closed loop's gain (G > 0) and the measured rung just below it is not
// within that noise, `pick` is the first rung past the loop's knee, where a sweep tick can flatter
// a rung and which moves from day to day (the real pipe's lay between 20000 and 30000 on
// 2026-12-01, between 10000 and 20000 on 2026-12-03: a loop's own idle periods shorten once it
// polls); then the cheapest equivalent rung above it is picked, when there is one (`off_knee`
// says so). Every rung considered is still within the noise of the best. An open load's periods
// do not depend on the cap, nor does its knee.
struct Choice {
  std::size_t best = 0, pick = 0;
  bool off_knee = false;
};
Choice cheapest_within_noise(const std::vector<RungMeasurement>& rungs, const std::vector<Score>& sc, double z);

// A rung in words for the decision's reason: its rates, its poll CPU, the CPUs the cap does not
// reach, and with `sc` its objective against the sweep's baseline.
std::string describe(const RungMeasurement& r, const Score* sc = nullptr);

// The latency policy without a measured penalty cannot price the wait halt exits add: the rungs
// eligible are then those with the fewest halts per wake-up, within z of their Poisson noise.
// Whatever the policy, when no rung is eligible (a budget or a target out of reach) the rung with
// the fewest halts per wake-up is made so: the choice always has one.
void settle_eligibility(const std::vector<RungMeasurement>& rungs, std::vector<Score>& sc, double z,
                        bool by_halt_share);

// The steady rule's predicted shrink: the library's haltpoll model replayed over the tick's
// idle-period histogram `h` (replay_cap, from a limit of 0 as reset_limits leaves a lowered cap)
// at each rung of `ladder` under `current`, from the bottom, against the same histogram at
// `current` (predict_cap). The first that keeps the hits within z of their Poisson noise and saves
// more poll time than z of the tick's poll-time standard error `poll_se` is the candidate. Rungs
// other than 0 under 2 × their grow_start are left out: there a single long period resets a CPU's
// limit to 0 (the kernel's shrink rule), which a histogram in random order cannot show; the sweep
// measures them instead.
struct ShrinkCandidate {
  std::uint32_t ns = 0;
  double hits_percent = 100;  // of the hits at `current` it keeps
  double saved_points = 0;    // poll CPU per CPU it saves, in percentage points
};
std::optional<ShrinkCandidate> predicted_shrink(const IdlePeriodHistograms& h, const std::vector<std::uint32_t>& ladder,
                                                std::uint32_t current, const TunerParams& p, double poll_se,
                                                double secs, std::uint32_t cpus);

// The signals two measurements are compared on: wake-ups, halts, poll CPU, useful wake-ups.
enum Signal : unsigned { kWake = 1, kHalt = 2, kPoll = 4, kUseful = 8 };
// Whether two measurements describe the same load: each signal of `which` differs in log by at
// most z standard deviations (their counts' Poisson noise plus the noise per second, on both sides).
bool consistent(const RungMeasurement& a, const RungMeasurement& b, double z, const Noise& noise,
                unsigned which = kWake | kHalt | kPoll);

}  // namespace haltpolld

namespace haltpolld {

// The change detector: a two-sided CUSUM per signal (wake-ups, halts, poll CPU) of the tick's log
// rate against the reference's (the chosen rung's confirmed measurement), standardised by the
// counts' Poisson noise and the load's own tick-to-tick spread, which it learns on the steady ticks
// (an average of the squared residuals beyond the Poisson part, starting from tick_noise; a
// residual over 3 σ is learned as 3 σ, so that one switch of load does not teach it that everything
// is noise). A tick adds its standardised residual less 1 (the slack: the detector is tuned to
// shifts of 2 σ and more), at most 3 (so that a change must show on two ticks, and one tick of a
// burst is not a new load); an alarm is a sum over change_threshold. The first ticks after the
// reference join it, so that it is not a single tick's.
class ChangeDetector {
 public:
  // A new reference; the noise learned so far is kept, `noise` is the prior of a detector never set.
  void reset(const RungMeasurement& reference, const Noise& noise);
  // One steady tick at the reference's rung: true when the load changed.
  bool update(const RungMeasurement& tick, double threshold);
  const RungMeasurement& reference() const noexcept { return ref_; }

  double noise(int signal) const noexcept { return std::sqrt(noise2_[signal]); }
  // The spread the steady ticks themselves showed (no prior): 0 before any.
  double observed_noise(int signal) const noexcept;
  // A new load: what the old one's ticks showed says nothing of it.
  void forget_observed() noexcept;
  double worst() const noexcept;  // the largest sum, for the reason text
  int worst_signal() const noexcept;

 private:
  RungMeasurement ref_;
  bool learned_ = false;
  double noise2_[3] = {};
  double observed2_[3] = {};  // the same average started at 0 (bias-corrected by observations_)
  std::uint64_t observations_ = 0;
  double up_[3] = {}, down_[3] = {};
};

inline constexpr const char* kSignalNames[3] = {"wake-ups", "halts", "poll CPU"};

}  // namespace haltpolld
