#include "control/stats.hpp"

#include <nlohmann/json.hpp>

#include <limits>

namespace haltpolld {

using nlohmann::json;

json to_json(const KernelHaltpollParams& k) {
  json j = {{"present", k.present}};
  auto put = [&](const char* name, const std::optional<std::uint64_t>& v) { j[name] = v ? json(*v) : json(nullptr); };
  put("guest_halt_poll_ns", k.guest_halt_poll_ns);
  put("guest_halt_poll_grow", k.guest_halt_poll_grow);
  put("guest_halt_poll_shrink", k.guest_halt_poll_shrink);
  put("guest_halt_poll_grow_start", k.guest_halt_poll_grow_start);
  j["guest_halt_poll_allow_shrink"] =
      k.guest_halt_poll_allow_shrink ? json(*k.guest_halt_poll_allow_shrink) : json(nullptr);
  return j;
}

json stats_to_json(const StatsSnapshot& s, std::optional<unsigned> cpu, bool histogram) {
  json cpus = json::array();
  for (const CpuStats& c : s.cpus) {
    if (cpu && c.cpu != *cpu) continue;
    std::uint64_t polls = c.poll_hits + c.poll_misses;
    json lat = {{"count", c.latency_count}, {"sum_ns", c.latency_sum_ns}, {"p50_ns", c.p50_ns},
                {"p90_ns", c.p90_ns},       {"p99_ns", c.p99_ns},         {"p999_ns", c.p999_ns}};
    if (histogram) {
      json b = json::array();
      for (const auto& bucket : c.latency_buckets)
        b.push_back({{"le_ns", bucket.le_ns == std::numeric_limits<std::uint64_t>::max() ? json(nullptr)
                                                                                           : json(bucket.le_ns)},
                     {"count", bucket.count}});
      lat["buckets"] = std::move(b);
    }
    cpus.push_back({{"cpu", c.cpu},
                    {"tasks_run", c.tasks_run},
                    {"task_exceptions", c.task_exceptions},
                    {"poll_hits", c.poll_hits},
                    {"poll_misses", c.poll_misses},
                    {"poll_hit_ratio", polls ? static_cast<double>(c.poll_hits) / static_cast<double>(polls) : 0.0},
                    {"futex_waits", c.futex_waits},
                    {"wakes_without_syscall", c.wakes_without_syscall},
                    {"poll_ns", c.poll_ns},
                    {"window_ns", c.window_ns},
                    {"latency", std::move(lat)}});
  }
  return {{"mode", s.mode},
          {"uptime_seconds", s.uptime_seconds},
          {"monotonic_ns", s.monotonic_ns},
          {"kernel", to_json(s.kernel)},
          {"cpus", std::move(cpus)}};
}

}  // namespace haltpolld
