#include "control/daemon_reports.hpp"

#include "control/controller_json.hpp"

namespace haltpolld {

using nlohmann::json;

namespace {

// Wake-latency buckets of the exposition: 1-2-5 steps from 100 ns to 100 ms. Fixed bounds keep the
// Prometheus series stable; the pool's own histogram is much finer.
const std::vector<std::uint64_t>& exposition_bounds() {
  static const std::vector<std::uint64_t> b = [] {
    std::vector<std::uint64_t> v;
    for (std::uint64_t decade = 100; decade <= 100'000'000; decade *= 10)
      for (std::uint64_t m : {1, 2, 5})
        if (decade * m <= 100'000'000) v.push_back(decade * m);
    return v;
  }();
  return b;
}

}  // namespace

json daemon_status_json(const Config& config, const DaemonSnapshot& snapshot, const KernelSignalsStats& kernel_signals,
                        const ShellFacts& facts, const haltpoll::WorkerPool* pool) {
  json s;
  s["version"] = facts.version;
  s["pid"] = facts.pid;
  s["requested_mode"] = to_string(config.mode);
  s["mode"] = to_string(snapshot.mode.mode);
  s["mode_reason"] = snapshot.mode.reason.empty() ? "kernel mode active" : snapshot.mode.reason;
  s["backend"] = facts.backend;
  s["cpus"] = facts.cpus;
  s["uptime_seconds"] = facts.uptime_seconds;
  s["config_file"] = facts.config_file;
  s["kernel"] = to_json(snapshot.kernel);
  {
    // Which kernel signals the daemon has, and why not: the summary of GetStats' kernel_signals.
    const json ks = kernel_signals_to_json(kernel_signals, std::nullopt, false);
    s["kernel_signals"] = {{"available", ks["available"]}, {"reason", ks["reason"]}, {"counters", ks["counters"]},
                           {"cpuidle", ks["cpuidle"]}, {"bpf", ks["bpf"]}};
  }
  json pool_json = nullptr;
  if (pool) {
    json failures = json::array();
    for (const auto& [cpu, why] : pool->pin_failures()) failures.push_back({{"cpu", cpu}, {"reason", why}});
    pool_json = {{"cpus", pool->cpus()}, {"policy", config.pool.policy}, {"window_cap_ns", pool->window_cap_ns()},
                 {"pin_failures", failures}};
  }
  s["pool"] = pool_json;
  s["controller"] = snapshot.controller ? status_to_json(*snapshot.controller) : json(nullptr);
  s["other_writer"] = snapshot.controller ? other_writer_to_json(snapshot.controller->other_writer) : json(nullptr);
  {
    // What decides the polling besides the cap, as the last tick read it.
    const auto& c = snapshot.controller;
    s["polling_overrides"] =
        polling_overrides_to_json(c && c->last_observation ? c->last_observation->kernel.overrides : std::nullopt);
  }
  const ControlServerCounters c = facts.control.value_or(ControlServerCounters{});
  s["control"] = {{"socket", config.socket.path},
                  {"connections", c.connections_open},
                  {"requests_total", c.requests_total},
                  {"rate_limited_total", c.rate_limited_total},
                  {"max_connections", config.socket.max_connections}};
  s["metrics_textfile"] = config.metrics.textfile.empty() ? json(nullptr) : json(config.metrics.textfile);
  if (!facts.textfile_error.empty()) s["metrics_textfile_error"] = facts.textfile_error;
  return s;
}

std::string daemon_status_line(const DaemonSnapshot& snapshot, std::size_t cpus) {
  std::string line = std::string(to_string(snapshot.mode.mode)) + " mode, " + std::to_string(cpus) + " CPUs";
  if (snapshot.controller) line += ", tuner at " + std::to_string(snapshot.controller->tuner.current_ns) + " ns";
  const auto& c = snapshot.controller;
  if (c && c->last_observation && c->last_observation->kernel.overrides) {
    // The one override the cap cannot answer, in the line `systemctl status` shows.
    const std::size_t n = c->last_observation->kernel.overrides->unlimited_cpus().size();
    if (n > 0) line += ", " + std::to_string(n) + (n == 1 ? " CPU polls" : " CPUs poll") + " without limit (QoS)";
  }
  return line;
}

StatsSnapshot daemon_stats(const DaemonSnapshot& snapshot, const FleetSeries& fleet, const KernelSignalsStats& kernel_signals,
                           const ShellFacts& facts, const haltpoll::WorkerPool* pool) {
  StatsSnapshot s;
  s.version = facts.version;
  s.mode = std::string(to_string(snapshot.mode.mode));
  s.backend = facts.backend;
  s.uptime_seconds = facts.uptime_seconds;
  s.monotonic_ns = facts.monotonic_ns;
  s.kernel = snapshot.kernel;
  s.fleet = fleet;
  s.kernel_signals = kernel_signals;
  s.forecast_inputs = forecast_inputs(snapshot.controller ? &*snapshot.controller : nullptr);
  s.tuner_ticks = facts.ticks;
  s.config_reloads = facts.reloads;
  s.config_reload_failures = facts.reload_failures;
  if (facts.control) {
    const ControlServerCounters& c = *facts.control;
    s.control_connections = c.connections_open;
    s.control_connections_total = c.connections_total;
    s.control_requests_total = c.requests_total;
    s.control_errors_total = c.errors_total;
    s.control_rejected_total = c.rejected_total;
  }
  if (pool) {
    s.pin_failures = pool->pin_failures().size();
    for (const haltpoll::WorkerStats& w : pool->all_stats()) s.cpus.push_back(CpuStats::of(w, exposition_bounds()));
    return s;
  }
  for (unsigned cpu : facts.cpus) {
    CpuStats c;
    c.cpu = cpu;
    s.cpus.push_back(c);
  }
  return s;
}

}  // namespace haltpolld
