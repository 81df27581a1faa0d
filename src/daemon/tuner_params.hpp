// The tuner's parameters (TunerParams) and their one table (for_each_tuner_param): each field's
// name, which is its key under "tuner" in haltpolld.json when the table marks it `config`, and the
// bounds it must lie in. The configuration's schema (config.cpp), its parsing, range errors,
// to_json and validation, the controller's status JSON and the documentation checks are all read
// from that table, so a new tuner key is one field here, one line of the table and its
// documentation (docs/hacking.md, "Add a configuration key"). Owned by the configuration, like
// the policy names, so that parsing a file needs nothing of the tuner. Plain values and pure
// functions: nothing to synchronise.
#pragma once

#include "tuner_policy.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

struct TunerParams {
  // THE TUNER'S PARAMETERS: each with its default and the reason for it (docs/tuning.md has the
  // same table with the test that pins each boundary). "decision": it changes what the tuner
  // chooses; the others say what is applied, reported or where the search runs.
  Policy policy = Policy::balanced;
  // static: the value to hold. Not a tuner.* key: the daemon gives it pool.guest_halt_poll_ns.
  std::uint32_t static_ns = 200000;
  // decision (latency): the mean wait per wake-up that halt exits may add (halt share × penalty).
  // 5 µs: a quarter of the real guest's ~20 µs halt exit, at most 25 % of wake-ups may halt.
  std::uint32_t target_wake_latency_ns = 5000;
  // Percentile of the probe latencies reported in status (not a decision input).
  double percentile = 90;
  // decision (budget): the most a single CPU may spend polling, in % of that CPU: a hard limit.
  double max_poll_cpu_percent = 10;
  // Bounds of the value. 0 disables polling; the kernel's default cap is 200000.
  std::uint32_t min_ns = 0;
  std::uint32_t max_ns = 400000;
  // decision: the lowest non-zero rung and the ratio between rungs: 12.5, 25, 50, 100, 200, 400 µs.
  // The real guest's knees (pipe ≥ 30 µs, a database client ≥ 100 µs, a 150 µs timer ≤ 50 µs) each
  // fall between two rungs, so one rung per factor two is enough and a full climb takes 7 ticks.
  std::uint32_t start_ns = 12500;
  double ladder_factor = 2.0;
  // decision (balanced): λ, what a CPU-second of polling costs against a CPU-second of the load's
  // work or of halt exits avoided. 1: polling must buy at least what it burns.
  double min_benefit_ratio = 1.0;
  // decision: a rung is judged once it saw this many idle periods (all CPUs), or after
  // max_dwell_ticks. 1000 periods put the Poisson error of a rate near 3 %.
  std::uint64_t min_periods = 1000;
  std::uint32_t max_dwell_ticks = 3;
  // decision: halts per second (all CPUs) that make polling worth a sweep. An idle guest halts
  // 60-80 times a second; a 150 µs timer 6700, a pipe 33000, Poisson 2000/s about 1900.
  double grow_halts_per_second = 500;
  // decision: z of every interval the tuner decides with (2: about 95 % two-sided).
  double confidence_z = 2.0;
  // decision: the load's own tick-to-tick spread beyond the Poisson noise of its counts, as a
  // relative standard deviation over one second, of its wake-ups and useful wake-ups (the load's
  // speed) and of its halts and poll CPU (which at one cap also move with the governor's own limit
  // resets). The priors of what the change detector learns on the steady ticks. 0.05: the real
  // pipe's wake rate moved ±5 % between 1 s ticks at one cap; 0.3: its halts moved 969 <-> 1549/s
  // and its poll share 15.3 <-> 9.6 % (eval-kernel 2026-12-01).
  double tick_noise = 0.05;
  double governor_noise = 0.3;
  // decision: the change detector's alarm level, CUSUM of the standardised log rates (wake-ups,
  // halts, poll CPU) against the chosen rung, in standard deviations beyond one per tick; one tick
  // adds at most 3, so that a change must show on two ticks. 5: a blip of one tick at 1.6 x the
  // wake rate stays below it, a load switch (>= 2.7 x) crosses it on its second tick.
  double change_threshold = 5.0;
  // decision: a steady load with frequent halts is swept again after this many ticks (10 min at 1 s).
  std::uint32_t resweep_after_ticks = 600;
  // decision: the steal share (% of all guest CPU time) above which the tuner backs off.
  double steal_backoff_percent = 10;
  // Also write guest_halt_poll_grow_start = min(kernel_grow_start_ns, cap / 2) so that a cap
  // below the kernel's grow_start does not collapse to 0 on its first shrink (docs/tuning.md).
  bool manage_grow_start = false;
  // Write guest_halt_poll_grow_start = the cap itself with every cap but 0, and zero the CPUs'
  // poll limits on every climb too, so that a CPU's limit is either 0 or the cap: no limit between
  // them where idle periods longer than the limit and shorter than the cap poll, time out and halt
  // too briefly to grow it (the grow_start trap a database-shaped load falls into at 50000). Off:
  // measured on the simulated guest only (docs/tuning.md, "grow_start"). Excludes manage_grow_start.
  bool grow_start_at_cap = false;
  std::uint32_t kernel_grow_start_ns = 50000;  // the value found on the guest
  // Every lowering of the value also zeroes the CPUs' poll limits (Decision::reset_limits): the
  // governor lowers a CPU's limit only after it halts, so without this a load whose wake-ups all
  // arrive within the old limit keeps polling at it (docs/tuning.md, "A lower cap that never arrives").
  bool reset_limits = true;
  // While steady the tuner needs the eBPF signals (histograms for the shrink prediction) only now
  // and then: the controller attaches the programs for one tick in this many and detaches them
  // otherwise, so a converged closed loop does not pay 150-220 ns per idle event (six per pipe
  // round trip on the real guest). Sweeps and confirmations always have them. 1: always attached.
  std::uint32_t steady_trace_every = 10;
  // The controller carries probe samples over ticks until it has this many.
  std::uint64_t min_latency_samples = 20;

  friend bool operator==(const TunerParams&, const TunerParams&) = default;
};

// Whether a parameter is a key of haltpolld.json ("tuner.<name>", changed live) or only the
// code's (tests, models and the tools set it; the controller's status reports it).
enum class TunerParamUse : bool { internal, config };

// The closed or open interval a numeric parameter must lie in (ignored for the policy and flags).
struct TunerBounds {
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  bool contains(double x) const noexcept { return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi); }
};

inline constexpr double kTunerMaxNs = 100'000'000;  // 100 ms: far beyond any useful poll window
inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// THE TABLE: every field of TunerParams once, in its order: f(name, &TunerParams::member, use,
// bounds). tests/daemon/config_test.cpp fails when a field of TunerParams is missing here.
template <class F>
constexpr void for_each_tuner_param(F&& f) {
  using enum TunerParamUse;
  using B = TunerBounds;
  // clang-format off
  f("policy", &TunerParams::policy, config, B{});
  f("static_ns", &TunerParams::static_ns, internal, B{0, kTunerMaxNs});
  f("target_wake_latency_ns", &TunerParams::target_wake_latency_ns, config, B{100, kTunerMaxNs});
  f("percentile", &TunerParams::percentile, internal, B{0, 100, true, true});
  f("max_poll_cpu_percent", &TunerParams::max_poll_cpu_percent, config, B{0, 100});
  f("min_ns", &TunerParams::min_ns, config, B{0, kTunerMaxNs});
  f("max_ns", &TunerParams::max_ns, config, B{0, kTunerMaxNs});
  f("start_ns", &TunerParams::start_ns, internal, B{1, kTunerMaxNs});
  f("ladder_factor", &TunerParams::ladder_factor, internal, B{1.1, 16});
  f("min_benefit_ratio", &TunerParams::min_benefit_ratio, config, B{0, 1000});
  f("min_periods", &TunerParams::min_periods, internal, B{1, 1e12});
  f("max_dwell_ticks", &TunerParams::max_dwell_ticks, internal, B{1, 1e6});
  f("grow_halts_per_second", &TunerParams::grow_halts_per_second, internal, B{0, kUnbounded});
  f("confidence_z", &TunerParams::confidence_z, internal, B{0, 10, true, false});
  f("tick_noise", &TunerParams::tick_noise, internal, B{0, 10});
  f("governor_noise", &TunerParams::governor_noise, internal, B{0, 10});
  f("change_threshold", &TunerParams::change_threshold, internal, B{0, 1000, true, false});
  f("resweep_after_ticks", &TunerParams::resweep_after_ticks, internal, B{1, 1e9});
  f("steal_backoff_percent", &TunerParams::steal_backoff_percent, internal, B{0, 100, true, false});
  f("manage_grow_start", &TunerParams::manage_grow_start, config, B{});
  f("grow_start_at_cap", &TunerParams::grow_start_at_cap, config, B{});
  f("kernel_grow_start_ns", &TunerParams::kernel_grow_start_ns, internal, B{0, kTunerMaxNs});
  f("reset_limits", &TunerParams::reset_limits, config, B{});
  f("steady_trace_every", &TunerParams::steady_trace_every, config, B{1, 3600});
  f("min_latency_samples", &TunerParams::min_latency_samples, internal, B{1, 1e9});
  // clang-format on
}

// guest_halt_poll_grow_start to write with cap `ns`: with grow_start_at_cap `ns` itself, with
// manage_grow_start min(kernel_grow_start_ns, ns / 2), the kernel's own at 0 with either; empty
// otherwise.
inline std::optional<std::uint32_t> grow_start_for(const TunerParams& p, std::uint32_t ns) noexcept {
  if (!p.manage_grow_start && !p.grow_start_at_cap) return std::nullopt;
  if (ns == 0) return p.kernel_grow_start_ns;
  if (p.grow_start_at_cap) return ns;
  return std::min(p.kernel_grow_start_ns, std::max<std::uint32_t>(ns / 2, 1));
}

// The rungs the sweep measures: min_ns, then start_ns times ladder_factor^k strictly between min_ns
// and max_ns, then max_ns.
inline std::vector<std::uint32_t> ladder_of(const TunerParams& p) {
  std::vector<std::uint32_t> l{p.min_ns};
  for (double v = p.start_ns; v < p.max_ns; v *= p.ladder_factor)
    if (v > p.min_ns) l.push_back(static_cast<std::uint32_t>(v));
  if (p.max_ns > p.min_ns) l.push_back(p.max_ns);
  return l;
}

// The highest rung of `ladder` (ascending) below `ns`, or its bottom one.
inline std::uint32_t rung_below(const std::vector<std::uint32_t>& ladder, std::uint32_t ns) {
  std::uint32_t best = ladder.front();
  for (auto r : ladder)
    if (r < ns) best = r;
  return best;
}

// The parameters' validation, the one the configuration applies after reading (config.cpp) and
// the one code that builds TunerParams itself calls: every field within its bounds, and
// min_ns <= max_ns. Empty when the parameters are coherent, else the field and what is wrong.
struct TunerParamError {
  std::string name;    // the field ("min_ns")
  std::string reason;  // "must not exceed max_ns (1000)"
};
std::optional<TunerParamError> check_tuner_params(const TunerParams& p);
// The same as one line, "min_ns: must not exceed max_ns (1000)"; empty when coherent.
std::string validate(const TunerParams& p);

}  // namespace haltpolld
