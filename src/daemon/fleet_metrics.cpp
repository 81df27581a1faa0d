#include "fleet_metrics.hpp"

#include "sysfs/sensors.hpp"

#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

namespace haltpolld {

using nlohmann::json;

FleetMetrics::FleetMetrics() {
  // Every action from the start, so that increase() over a window sees the zeros rise.
  for (Action a : {Action::hold, Action::grow, Action::shrink, Action::set, Action::revert})
    series_.decisions.push_back({to_string(a), 0});
}

void FleetMetrics::record(const Decision& d) {
  const std::string name = to_string(d.action);
  for (auto& c : series_.decisions)
    if (c.action == name) ++c.count;
  if (d.changed())
    series_.last_change_unix_seconds =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void FleetMetrics::refresh(const std::string& sysfs_root, const std::vector<unsigned>& cpus, const json& st) {
  Sensors sensors(sysfs_root, std::vector<int>(cpus.begin(), cpus.end()));
  series_.cpuidle.clear();
  for (int cpu : sensors.cpus()) {
    if (auto c = sensors.read_cpuidle(cpu))
      series_.cpuidle.push_back({static_cast<unsigned>(cpu), c->poll_usage, c->poll_time_us, c->halt_usage, c->halt_time_us});
  }
  series_.steal_seconds.reset();
  if (auto t = sensors.read_proc_stat()) {
    const long hz = ::sysconf(_SC_CLK_TCK);
    if (hz > 0) series_.steal_seconds = static_cast<double>(t->steal) / static_cast<double>(hz);
  }
  auto str = [](const json& j, const char* key) {
    return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  series_.mode = str(st, "effective_mode");
  if (series_.mode.empty()) series_.mode = "observe";
  // The alerts tell a configured observe mode from a kernel mode that failed by this wording.
  if (series_.mode == "kernel") series_.mode_reason.clear();
  else if (str(st, "requested_mode") != "kernel") series_.mode_reason = "observe requested by the configuration";
  else series_.mode_reason = str(st, "kernel_mode_inactive_reason");
  series_.state_file_pending = false;
  series_.tuner_policy.clear();
  series_.steal_backoff_ratio.reset();
  if (!st.is_object()) return;
  if (st.contains("kernel") && st["kernel"].is_object()) {
    const json& k = st["kernel"];
    const std::string file = str(k, "state_file");
    // While this run tunes, its own state file exists too; only one it did not write is pending.
    const bool ours = k.contains("originals_saved") && k["originals_saved"].is_boolean() && k["originals_saved"].get<bool>();
    struct stat sb {};
    series_.state_file_pending = !file.empty() && !ours && ::stat(file.c_str(), &sb) == 0;
  }
  if (st.contains("tuner") && st["tuner"].is_object() && st["tuner"].contains("params") && st["tuner"]["params"].is_object()) {
    const json& p = st["tuner"]["params"];
    series_.tuner_policy = str(p, "policy");
    if (p.contains("steal_backoff_percent") && p["steal_backoff_percent"].is_number())
      series_.steal_backoff_ratio = p["steal_backoff_percent"].get<double>() / 100.0;
  }
}

}  // namespace haltpolld
