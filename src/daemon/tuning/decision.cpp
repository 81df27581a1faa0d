#include "tuning/decision.hpp"

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

const char* to_string(Rule r) noexcept {
  switch (r) {
#define HALTPOLL_RULE(x) \
  case Rule::x: return #x;
    HALTPOLL_RULE(static_value)
    HALTPOLL_RULE(no_counters)
    HALTPOLL_RULE(kernel_does_not_poll)
    HALTPOLL_RULE(no_cap_reach)
    HALTPOLL_RULE(unsound_tick)
    HALTPOLL_RULE(restarted)
    HALTPOLL_RULE(steal_backoff)
    HALTPOLL_RULE(nothing_to_win)
    HALTPOLL_RULE(sweep_unswept)
    HALTPOLL_RULE(sweep_change)
    HALTPOLL_RULE(sweep_periodic)
    HALTPOLL_RULE(measuring)
    HALTPOLL_RULE(climb)
    HALTPOLL_RULE(chosen)
    HALTPOLL_RULE(confirming)
    HALTPOLL_RULE(confirmed)
    HALTPOLL_RULE(confirmation_failed)
    HALTPOLL_RULE(predicted_shrink)
    HALTPOLL_RULE(budget_overrun)
    HALTPOLL_RULE(steady)
#undef HALTPOLL_RULE
  }
  return "?";
}

}  // namespace haltpolld
