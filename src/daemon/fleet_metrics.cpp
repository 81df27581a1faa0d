#include "fleet_metrics.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

namespace haltpolld {

FleetMetrics::FleetMetrics() {
  // Every action from the start, so that increase() over a window sees the zeros rise.
  for (Action a : {Action::hold, Action::grow, Action::shrink, Action::set, Action::revert})
    series_.decisions.push_back({to_string(a), 0});
  for (Rule r : kRules) series_.rules.push_back({to_string(r), 0});
}

void FleetMetrics::record(const Decision& d) {
  const std::string name = to_string(d.action);
  for (auto& c : series_.decisions)
    if (c.action == name) ++c.count;
  const std::string rule = to_string(d.rule);
  for (auto& c : series_.rules)
    if (c.action == rule) ++c.count;
  if (d.changed())
    series_.last_change_unix_seconds =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void FleetMetrics::refresh(const DaemonSnapshot& snapshot) {
  const std::optional<ControllerStatus>& st = snapshot.controller;
  const Observation* obs = st && st->last_observation ? &*st->last_observation : nullptr;
  series_.cpuidle.clear();
  series_.steal_seconds.reset();
  series_.polling_overrides.reset();
  if (obs) {
    series_.cpuidle = obs->cpuidle_totals;
    series_.polling_overrides = obs->kernel.overrides;
    const long hz = ::sysconf(_SC_CLK_TCK);
    if (obs->steal_ticks_total && hz > 0) series_.steal_seconds = static_cast<double>(*obs->steal_ticks_total) / static_cast<double>(hz);
  }
  series_.mode = std::string(to_string(snapshot.mode.mode));
  series_.mode_reason = snapshot.mode.reason;
  series_.state_file_pending = false;
  series_.other_writer = st && st->other_writer ? st->other_writer->value.parameter : std::string();
  series_.tuner_policy.clear();
  series_.steal_backoff_ratio.reset();
  if (!st) return;
  // While this run tunes, its own state file exists too; only one it did not write is pending.
  const std::string& file = st->kernel.state_file;
  struct stat sb {};
  series_.state_file_pending = !file.empty() && !st->kernel.originals_saved && ::stat(file.c_str(), &sb) == 0;
  series_.tuner_policy = std::string(to_string(st->tuner.params.policy));
  series_.steal_backoff_ratio = st->tuner.params.steal_backoff_percent / 100.0;
}

}  // namespace haltpolld
