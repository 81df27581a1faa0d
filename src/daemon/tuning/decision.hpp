// Decision: the tuner's answer to one Observation (signals/observation.hpp), the value to put in
// force plus the reason in words, and what the Controller applied of it. A plain value: no
// threads, no shared state, no ordering contract beyond that of a copied struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace haltpolld {

enum class Action { hold, grow, shrink, set, revert };

// Which of the tuner's rules made a decision (docs/tuning.md, "The rules"): one identifier per
// rule, reported in GetDecisions ("rule"), counted by the metric haltpoll_tuner_rule_decisions_total
// and asserted by the tests (never the reason text, which is for people).
enum class Rule {
  static_value,          // the static policy: the configured value
  no_counters,           // the tick carried no kernel idle counters
  kernel_does_not_poll,  // no cpuidle driver: guest_halt_poll_ns reaches no idle path
  no_cap_reach,          // every CPU polls without limit (a latency QoS request of 0): the cap reaches none
  unsound_tick,          // the tick's counters do not describe one interval (the Controller holds)
  restarted,             // the value in force is not the tuner's: it starts again from it
  steal_backoff,         // the host is contended: one rung down, no growth while it lasts
  nothing_to_win,        // never swept and halts are rare: the bottom rung
  sweep_unswept,         // a busy load never swept: a sweep starts
  sweep_change,          // the change detector fired on the steady rates: a sweep starts
  sweep_periodic,        // resweep_after_ticks passed with frequent halts: a sweep starts
  measuring,             // the rung has not seen enough idle periods yet
  climb,                 // the next rung can still beat the best one: measure it
  chosen,                // the climb stopped: the cheapest rung within the noise of the best
  confirming,            // a chosen or predicted rung is being measured on whole ticks
  confirmed,             // its whole-tick rates agree with what chose it
  confirmation_failed,   // they do not: measured again (a sweep) or reverted (a predicted shrink)
  predicted_shrink,      // the idle-period histogram predicts a cheaper rung that keeps the hits
  budget_overrun,        // budget: the busiest CPU polls over the hard limit
  steady,                // nothing changed: hold
};
inline constexpr Rule kRules[] = {
    Rule::static_value, Rule::no_counters,   Rule::kernel_does_not_poll, Rule::no_cap_reach, Rule::unsound_tick,
    Rule::restarted,    Rule::steal_backoff, Rule::nothing_to_win,       Rule::sweep_unswept,
    Rule::sweep_change, Rule::sweep_periodic, Rule::measuring,           Rule::climb,
    Rule::chosen,       Rule::confirming,    Rule::confirmed,            Rule::confirmation_failed,
    Rule::predicted_shrink, Rule::budget_overrun, Rule::steady};

struct Decision {
  std::uint64_t tick = 0;
  Action action = Action::hold;
  std::uint32_t previous_ns = 0;
  std::uint32_t guest_halt_poll_ns = 0;  // the value to put in force (== previous_ns on hold)
  // guest_halt_poll_grow_start to put in force with it (TunerParams::grow_start_at_cap or
  // manage_grow_start), else empty.
  std::optional<std::uint32_t> grow_start_ns;
  // Lowered with TunerParams::reset_limits: the CPUs' poll limits are to be zeroed too, so that the
  // lower cap reaches the CPUs that never halt (they keep their old limit until they do). Raised
  // from a cap other than 0 with grow_start_at_cap as well, so that no CPU keeps the old cap's.
  bool reset_limits = false;
  Rule rule = Rule::steady;
  std::string reason;

  // The inputs the decision was made on, copied for the decision log.
  std::optional<double> poll_cpu_percent;
  std::optional<double> wake_latency_ns;
  std::optional<double> steal_percent;

  // Filled in by the Controller: whether the value reached the kernel / the pool.
  bool applied_kernel = false;
  bool applied_pool = false;
  bool applied_grow_start = false;
  bool applied_reset = false;  // the poll limits were zeroed (kernel: a governor round trip)

  bool changed() const noexcept { return guest_halt_poll_ns != previous_ns; }
};

const char* to_string(Action a) noexcept;
const char* to_string(Rule r) noexcept;  // "climb", "sweep_change", ... (the enumerator's name)

}  // namespace haltpolld
