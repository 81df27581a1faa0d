#include "tick_state.hpp"

namespace haltpolld {

void TickState::refresh(DaemonSnapshot snapshot) {
  snapshot_ = std::move(snapshot);
  if (snapshot_.controller) {
    // A snapshot after a config change carries the same tick again: record() takes each tick once.
    if (const auto& o = snapshot_.controller->last_observation) kernel_signals_.record(o->tick, o->kernel, o->steal_percent);
    kernel_signals_.cpuidle_status = snapshot_.controller->sensors.cpuidle;
  }
  fleet_.refresh(snapshot_);
}

}  // namespace haltpolld
