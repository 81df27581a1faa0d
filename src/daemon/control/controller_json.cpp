#include "control/controller_json.hpp"

#include <cmath>
#include <type_traits>

namespace haltpolld {

using nlohmann::json;

namespace {

json opt(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}
template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}
json text_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

}  // namespace

json to_json(const TunerParams& p) {
  json j = json::object();
  for_each_tuner_param([&](const char* name, auto member, TunerParamUse, const TunerBounds&) {
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(p.*member)>, Policy>)
      j[name] = std::string(to_string(p.*member));
    else
      j[name] = p.*member;
  });
  return j;
}

json decision_to_json(const DecisionRecord& r) {
  const Decision& d = r.decision;
  return {{"tick", d.tick},
          {"time_ms", r.time_ms},
          {"target", r.target},
          {"action", to_string(d.action)},
          {"rule", to_string(d.rule)},
          {"previous_ns", d.previous_ns},
          {"guest_halt_poll_ns", d.guest_halt_poll_ns},
          {"reason", d.reason},
          {"poll_cpu_percent", opt(d.poll_cpu_percent)},
          {"wake_latency_ns", opt(d.wake_latency_ns)},
          {"latency_samples", r.latency_samples},
          {"steal_percent", opt(d.steal_percent)},
          {"applied_kernel", d.applied_kernel},
          {"applied_pool", d.applied_pool},
          {"grow_start_ns", opt(d.grow_start_ns)},
          {"applied_grow_start", d.applied_grow_start},
          {"reset_limits", d.reset_limits},
          {"applied_reset", d.applied_reset},
          {"tuner_phase", r.tuner_phase},
          {"halt_exit_penalty_ns", opt(r.halt_exit_penalty_ns)}};
}

json decisions_to_json(const std::vector<DecisionRecord>& log) {
  json a = json::array();
  for (const auto& r : log) a.push_back(decision_to_json(r));
  return a;
}

json status_to_json(const ControllerStatus& s) {
  json params = json::object();
  for (const auto& [name, value] : s.kernel.params) params[name] = opt(value);
  const auto& k = s.kernel;
  json j;
  j["requested_mode"] = s.kernel_requested ? "kernel" : "observe";
  j["effective_mode"] = s.kernel_effective ? "kernel" : "observe";
  j["kernel_mode_inactive_reason"] = text_or_null(s.kernel_mode_inactive_reason);
  j["tuning_target"] = s.tuning_target;
  j["started"] = s.started;
  j["ticks"] = s.ticks;
  j["interval_ms"] = s.interval_ms;
  j["kernel"] = {{"params_dir", k.params_dir},
                 {"params_present", k.params_present},
                 {"cpuidle_driver", k.cpuidle_driver},
                 {"cpuidle_governor", k.cpuidle_governor},
                 {"haltpoll_active", k.haltpoll_active},
                 {"reason", text_or_null(k.reason)},
                 {"params", params},
                 {"originals_saved", k.originals_saved},
                 {"state_file", k.state_file},
                 {"degraded_reason", text_or_null(k.degraded_reason)},
                 {"recovery", text_or_null(k.recovery)},
                 {"poll_limit_resets", k.poll_limit_resets},
                 {"poll_limit_reset_unavailable", text_or_null(k.poll_limit_reset_unavailable)}};
  json sweep = json::array();
  for (const auto& r : s.tuner.last_sweep)
    sweep.push_back({{"ns", r.ns},
                     {"ticks", r.ticks},
                     {"wake_ups_per_second", r.wake_rate()},
                     {"halts_per_second", r.halt_rate()},
                     {"poll_hits_per_second", r.per_s(r.hits)},
                     {"ipi_skipped_per_second", r.ipi_skipped ? json(r.per_s(*r.ipi_skipped)) : json(nullptr)},
                     {"mean_poll_cpu_percent", r.mean_poll_cpu_percent()},
                     {"max_poll_cpu_percent", r.max_poll_cpu_percent()}});
  const auto& t = s.tuner;
  json penalty = {{"ns", opt(t.penalty_ns)}, {"age_s", t.penalty_age_s ? json(*t.penalty_age_s) : json(nullptr)},
                  {"source", t.penalty_source}};
  j["tuner"] = {{"current_ns", t.current_ns},
                {"phase", t.phase},
                {"ladder_ns", t.ladder_ns},
                {"last_sweep", sweep},
                {"halt_exit_penalty", penalty},
                {"growth_ceiling_ns", opt(t.growth_ceiling_ns)},
                {"choice", {{"gain_cpus", t.gain_cpus}, {"paying_cpus", t.paying_cpus},
                            {"one_cap_for_opposite_needs", !t.gain_cpus.empty() && !t.paying_cpus.empty()}}},
                {"params", to_json(t.params)}};
  j["sensors"] = {{"cpus", s.sensors.cpus},
                  {"cpuidle_available", s.sensors.cpuidle_available},
                  {"cpuidle", s.sensors.cpuidle},
                  {"kernel_signals", s.sensors.kernel_signals},
                  {"kernel_signals_missing", text_or_null(s.sensors.kernel_signals_missing)}};
  if (s.pool) j["pool"] = {{"cpus", s.pool->cpus}, {"window_cap_ns", s.pool->window_cap_ns}};
  else j["pool"] = nullptr;
  if (s.probes.rate_hz_per_cpu) {
    json per = json::array();
    for (const auto& c : s.probes.per_cpu) {
      const auto all = c.all();
      per.push_back({{"cpu", c.cpu},
                     {"samples", all.count()},
                     {"poll_hit", c.poll_hit.count()},
                     {"park_path", c.park_path.count()},
                     {"queued", c.queued},
                     {"rejected", c.rejected},
                     {"poll_hit_p50_ns", c.poll_hit.interpolated_percentile(0.5)},
                     {"park_path_p50_ns", c.park_path.interpolated_percentile(0.5)},
                     {"p50_ns", all.interpolated_percentile(0.5)},
                     {"p99_ns", all.interpolated_percentile(0.99)}});
    }
    j["probes"] = {{"rate_hz_per_cpu", *s.probes.rate_hz_per_cpu}, {"per_cpu", per}};
  } else {
    j["probes"] = {{"rate_hz_per_cpu", 0}, {"reason", s.probes.reason}};
  }
  if (s.last_observation) {
    const auto& o = *s.last_observation;
    j["last_observation"] = {{"tick", o.tick},
                             {"elapsed_ns", o.elapsed_ns},
                             {"current_ns", o.current_ns},
                             {"poll_cpu_percent", opt(o.poll_cpu_percent)},
                             {"mean_poll_cpu_percent", opt(o.mean_poll_cpu_percent)},
                             {"wakes_per_second", opt(o.wakes_per_second)},
                             {"wake_latency_ns", opt(o.wake_latency_ns)},
                             {"latency_samples", o.latency_samples},
                             {"steal_percent", opt(o.steal_percent)},
                             {"cpu_source", o.cpu_source},
                             {"latency_source", o.latency_source},
                             {"probe_poll_hits", o.probes.poll_hits},
                             {"probe_park_path", o.probes.park_path},
                             {"probe_queued", o.probes.queued}};
  } else {
    j["last_observation"] = nullptr;
  }
  j["other_writer"] = other_writer_to_json(s.other_writer);
  return j;
}

json other_writer_to_json(const std::optional<OtherWriter>& w) {
  if (!w) return nullptr;
  return {{"parameter", w->value.parameter},
          {"value", w->value.value},
          {"expected", w->value.expected},
          {"who", w->value.who},
          {"since_unix_ms", w->since_unix_ms}};
}

namespace {

json qos_to_json(const GlobalLatencyQos& q) {
  json holders = json::array();
  for (const auto& h : q.holders) holders.push_back({{"pid", h.pid}, {"comm", h.comm}});
  return {{"device", q.device},          {"present", q.present},
          {"value_us", opt(q.value_us)}, {"error", text_or_null(q.error)},
          {"holders", holders},          {"holders_note", text_or_null(q.holders_note)}};
}

const char* to_string(CpuResumeLatency::State s) {
  switch (s) {
    case CpuResumeLatency::State::absent: return "absent";
    case CpuResumeLatency::State::no_constraint: return "no_constraint";
    case CpuResumeLatency::State::limit: return "limit";
    case CpuResumeLatency::State::zero: return "zero";
    case CpuResumeLatency::State::unreadable: return "unreadable";
  }
  return "?";
}

}  // namespace

json polling_overrides_to_json(const std::optional<PollingOverrides>& o) {
  if (!o) return nullptr;
  json cpus = json::array();
  for (const auto& c : o->cpus) {
    json reasons = json::array();
    for (const auto& r : c.reasons) reasons.push_back({{"source", to_string(r.source)}, {"text", r.text}});
    cpus.push_back({{"cpu", c.cpu},
                    {"polls_without_limit", c.polls_without_limit},
                    {"unknown", c.unknown},
                    {"reasons", reasons},
                    {"unknown_reason", text_or_null(c.unknown_reason)}});
  }
  json resume = json::array();
  for (const auto& r : o->resume)
    resume.push_back({{"cpu", r.cpu},
                      {"state", to_string(r.state)},
                      {"limit_us", r.state == CpuResumeLatency::State::limit ? json(r.limit_us) : json(nullptr)},
                      {"text", text_or_null(r.text)},
                      {"error", text_or_null(r.error)}});
  const std::string summary = o->summary();
  return {{"active", o->any()},
          {"summary", text_or_null(summary)},
          {"unlimited_cpus", o->unlimited_cpus()},
          {"cpus", cpus},
          {"cpu_dma_latency", qos_to_json(o->cpu_dma_latency)},
          {"cpu_wakeup_latency", qos_to_json(o->cpu_wakeup_latency)},
          {"resume_latency", resume},
          {"cpuidle", o->cpuidle},
          {"governor", text_or_null(o->governor)},
          {"governor_error", text_or_null(o->governor_error)},
          {"governor_applies", o->governor_applies()},
          {"offline_cpus", o->offline_cpus},
          {"offline_error", text_or_null(o->offline_error)}};
}

}  // namespace haltpolld
