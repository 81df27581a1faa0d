#include "control/control_service.hpp"

#include "control/prometheus.hpp"

#include <type_traits>

namespace haltpolld {

using nlohmann::json;
using varlink::Call;
using varlink::Method;
using varlink::Peer;
using varlink::Reply;

namespace {

constexpr const char* kIdlHead = R"(# haltpolld: guest halt-polling measurement and tuning. See docs/protocol.md.
interface io.haltpolld

type LatencyBucket (le_ns: ?int, count: int)
type Latency (count: int, sum_ns: int, p50_ns: int, p90_ns: int, p99_ns: int, p999_ns: int, buckets: ?[]LatencyBucket)
)";
constexpr const char* kIdlTail = R"(
type OtherWriter (parameter: string, value: string, expected: string, who: string, since_unix_ms: int)

error ConfigRefused (path: string, reason: string, file: ?string)
error NoSuchCpu (cpu: int)
error RestartRequired (paths: []string)
error MalformedMessage (reason: string)
error MessageTooLarge (limit: int)
error TooManyConnections (limit: int)
error RateLimited (retry_after_ms: int)
error InternalError (reason: string)
)";

// The IDL: the CpuStats type lists every counter of the library's table (HALTPOLL_WORKER_COUNTERS)
// and KernelParams every parameter of HALTPOLL_PARAMS, so that GetStats and its description cannot
// drift apart.
std::string idl() {
  std::string cpu_stats = "type CpuStats (cpu: int,";
#define HALTPOLLD_IDL_FIELD(name, kind, source, help) cpu_stats += " " #name ": int,";
  HALTPOLL_WORKER_COUNTERS(HALTPOLLD_IDL_FIELD)
#undef HALTPOLLD_IDL_FIELD
  cpu_stats += " poll_hit_ratio: float, latency: Latency)\n";
  std::string kernel_params = "type KernelParams (present: bool";
#define HALTPOLLD_IDL_PARAM(name, type, value, kind) \
  kernel_params += std::is_same_v<type, bool> ? ", " #name ": ?bool" : ", " #name ": ?int";
  HALTPOLL_PARAMS(HALTPOLLD_IDL_PARAM)
#undef HALTPOLLD_IDL_PARAM
  kernel_params += ")\n";
  return std::string(kIdlHead) + cpu_stats + kernel_params + kIdlTail;
}

// Reads an optional non-negative integer parameter; returns false (and sets `err`) when present
// but not an integer in [lo, hi].
bool optional_uint(const json& params, const char* name, std::optional<std::uint64_t>& out, std::uint64_t lo,
                   std::uint64_t hi, Reply& err) {
  auto it = params.find(name);
  if (it == params.end() || it->is_null()) return true;
  bool non_negative_int = it->is_number_unsigned() || (it->is_number_integer() && it->get<std::int64_t>() >= 0);
  if (!non_negative_int || it->get<std::uint64_t>() < lo || it->get<std::uint64_t>() > hi) {
    err = varlink::invalid_parameter(name, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    return false;
  }
  out = it->get<std::uint64_t>();
  return true;
}

bool optional_bool(const json& params, const char* name, bool& out, Reply& err) {
  auto it = params.find(name);
  if (it == params.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    err = varlink::invalid_parameter(name, "expected a boolean");
    return false;
  }
  out = it->get<bool>();
  return true;
}

// Refuses parameters the method does not declare, so that typos are not silently ignored.
bool only_known(const json& params, std::initializer_list<const char*> known, Reply& err) {
  for (auto it = params.begin(); it != params.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok |= it.key() == k;
    if (!ok) {
      err = varlink::invalid_parameter(it.key(), "unknown parameter");
      return false;
    }
  }
  return true;
}

Reply ok(json parameters) {
  Reply r;
  r.parameters = std::move(parameters);
  return r;
}

Reply refused(const ConfigError& e, const std::string& file = {}) {
  json p = {{"path", e.path()}, {"reason", e.reason()}};
  if (!file.empty()) p["file"] = file;
  return varlink::error_reply(errors::config_refused, std::move(p));
}

Reply stats_reply(ControlBackend& backend, const json& params, bool allow_watch_keys) {
  Reply err;
  if (!only_known(params, allow_watch_keys ? std::initializer_list<const char*>{"cpu", "histogram", "interval_ms", "count"}
                                           : std::initializer_list<const char*>{"cpu", "histogram"},
                  err))
    return err;
  std::optional<std::uint64_t> cpu;
  bool histogram = false;
  if (!optional_uint(params, "cpu", cpu, 0, 8191, err) || !optional_bool(params, "histogram", histogram, err)) return err;
  StatsSnapshot s = backend.stats();
  if (cpu) {
    bool found = false;
    for (const auto& c : s.cpus) found |= c.cpu == *cpu;
    if (!found) return varlink::error_reply(errors::no_such_cpu, {{"cpu", *cpu}});
  }
  return ok(stats_to_json(s, cpu ? std::optional<unsigned>(static_cast<unsigned>(*cpu)) : std::nullopt, histogram));
}

}  // namespace

void register_control_interface(varlink::Registry& registry, ControlBackend& backend) {
  registry.describe_interface(kInterface, idl());
  auto name = [](const char* m) { return std::string(kInterface) + "." + m; };
  ControlBackend* b = &backend;

  registry.add(Method{
      .name = name("GetStatus"),
      .signature = "# Version, effective mode and why, wait backend, CPUs, uptime, kernel haltpoll state, which\n"
                   "# kernel signals there are (and why not), tuner, and what decides the polling besides the\n"
                   "# cap (QoS requests at 0, the governor, offline CPUs: polling_overrides).\n"
                   "method GetStatus() -> (version: string, mode: string, mode_reason: string, backend: string,\n"
                   "  cpus: []int, uptime_seconds: float, kernel: KernelParams, kernel_signals: object,\n"
                   "  controller: ?object, other_writer: ?OtherWriter, polling_overrides: ?object)",
      .handler = [b](const Call& c, const Peer&) {
        Reply err;
        if (!only_known(c.parameters, {}, err)) return err;
        return ok(b->status());
      }});
  registry.add(Method{.name = name("GetStats"),
                      .signature =
                      "# Per-CPU worker counters and wake-latency percentiles (buckets with histogram: true), and\n"
                      "# the kernel's idle accounting of the last tick with running totals (kernel_signals).\n"
                      "method GetStats(cpu: ?int, histogram: ?bool) -> (mode: string, uptime_seconds: float,\n"
                      "  monotonic_ns: int, kernel: KernelParams, kernel_signals: object, cpus: []CpuStats)",
                      .handler = [b](const Call& c, const Peer&) { return stats_reply(*b, c.parameters, false); }});
  registry.add(Method{.name = name("Watch"),
                      .signature =
                      "# GetStats every interval_ms (100..60000, default 1000), count times (0 = until the client\n"
                      "# hangs up). Needs \"more\": true.\n"
                      "method Watch(cpu: ?int, histogram: ?bool, interval_ms: ?int, count: ?int) -> (mode: string,\n"
                      "  uptime_seconds: float, monotonic_ns: int, kernel: KernelParams, kernel_signals: object,\n"
                      "  cpus: []CpuStats)",
                      .streaming = true, .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        std::optional<std::uint64_t> interval, count;
                        if (!optional_uint(c.parameters, "interval_ms", interval, kWatchMinIntervalMs, kWatchMaxIntervalMs, err) ||
                            !optional_uint(c.parameters, "count", count, 0, UINT32_MAX, err))
                          return err;
                        Reply r = stats_reply(*b, c.parameters, true);
                        if (r.is_error()) return r;
                        r.continues = !(count && *count > 0 && c.stream_index + 1 >= *count);
                        r.next_after_ms = static_cast<unsigned>(interval.value_or(kWatchDefaultIntervalMs));
                        return r;
                      }});
  registry.add(Method{.name = name("GetConfig"),
                      .signature =
                      "# The running configuration, the file it came from and the keys that need a restart.\n"
                      "method GetConfig() -> (config: object, file: string, restart_only: []string)",
                      .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        if (!only_known(c.parameters, {}, err)) return err;
                        return ok({{"config", to_json(b->config())}, {"file", b->config_file()}, {"restart_only", restart_only_paths()}});
                      }});
  registry.add(Method{.name = name("SetConfig"),
                      .signature =
                      "# Applies a partial configuration (same shape as the file) atomically; not persisted.\n"
                      "method SetConfig(config: object) -> (config: object)",
                      .admin_only = true, .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        if (!only_known(c.parameters, {"config"}, err)) return err;
                        auto it = c.parameters.find("config");
                        if (it == c.parameters.end() || !it->is_object())
                          return varlink::invalid_parameter("config", "expected an object");
                        try {
                          Config running = b->config();
                          Config next = apply_config_json(*it, running);
                          auto diff = restart_only_differences(running, next);
                          if (!diff.empty()) return varlink::error_reply(errors::restart_required, {{"paths", diff}});
                          return ok({{"config", to_json(b->set_config(*it))}});
                        } catch (const ConfigError& e) {
                          return refused(e);
                        }
                      }});
  registry.add(Method{.name = name("Reload"),
                      .signature =
                      "# Re-reads the config file (as SIGHUP does). A refused file leaves the running config.\n"
                      "method Reload() -> (config: object, file: string, restart_required: []string)",
                      .admin_only = true, .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        if (!only_known(c.parameters, {}, err)) return err;
                        try {
                          ReloadResult r = b->reload();
                          return ok({{"config", to_json(r.config)}, {"file", b->config_file()}, {"restart_required", r.restart_required}});
                        } catch (const ConfigError& e) {
                          return refused(e, b->config_file());
                        }
                      }});
  registry.add(Method{.name = name("ResetStats"),
                      .signature = "# Zeroes the per-CPU counters and histograms and the kernel_signals totals.\nmethod ResetStats() -> ()",
                      .admin_only = true, .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        if (!only_known(c.parameters, {}, err)) return err;
                        b->reset_stats();
                        return ok(json::object());
                      }});
  registry.add(Method{.name = name("TakeOver"),
                      .signature =
                      "# Takes the parameters back from another writer: the values in force become the originals\n"
                      "# and kernel mode resumes. took_over is false (with the reason) when there was none.\n"
                      "method TakeOver() -> (took_over: bool, message: string, other_writer: ?OtherWriter)",
                      .admin_only = true, .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        if (!only_known(c.parameters, {}, err)) return err;
                        return ok(b->take_over());
                      }});
  registry.add(Method{.name = name("GetDecisions"),
                      .signature =
                      "# The tuner's latest decisions, newest last (limit: at most this many, default all).\n"
                      "method GetDecisions(limit: ?int) -> (decisions: []object)",
                      .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        std::optional<std::uint64_t> limit;
                        if (!only_known(c.parameters, {"limit"}, err) || !optional_uint(c.parameters, "limit", limit, 0, 1000000, err))
                          return err;
                        return ok({{"decisions", b->decisions(static_cast<std::size_t>(limit.value_or(0)))}});
                      }});
  registry.add(Method{.name = name("GetMetrics"),
                      .signature =
                      "# Prometheus text exposition (format 0.0.4) of every metric.\n"
                      "method GetMetrics() -> (text: string)",
                      .handler = [b](const Call& c, const Peer&) {
                        Reply err;
                        if (!only_known(c.parameters, {}, err)) return err;
                        return ok({{"text", render_prometheus(b->stats())}});
                      }});
}

}  // namespace haltpolld
