#include "signals/polling_overrides.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace haltpolld {

const char* to_string(OverrideSource s) noexcept {
  switch (s) {
    case OverrideSource::cpu_dma_latency: return "cpu_dma_latency";
    case OverrideSource::cpu_wakeup_latency: return "cpu_wakeup_latency";
    case OverrideSource::resume_latency: return "pm_qos_resume_latency_us";
  }
  return "?";
}

bool PollingOverrides::polls_without_limit(int cpu) const noexcept {
  return std::any_of(cpus.begin(), cpus.end(),
                     [&](const CpuPollingOverride& c) { return c.cpu == cpu && c.polls_without_limit; });
}

std::vector<int> PollingOverrides::unlimited_cpus() const {
  std::vector<int> out;
  for (const auto& c : cpus)
    if (c.polls_without_limit) out.push_back(c.cpu);
  std::sort(out.begin(), out.end());
  return out;
}

bool PollingOverrides::any() const noexcept {
  const bool cpu_override = std::any_of(cpus.begin(), cpus.end(),
                                        [](const CpuPollingOverride& c) { return c.polls_without_limit || c.unknown; });
  return cpu_override || (cpuidle && !governor_applies()) || !offline_cpus.empty() || !offline_error.empty() ||
         !cpu_dma_latency.error.empty() || !cpu_wakeup_latency.error.empty();
}

namespace {

// "0-2,5": the kernel's CPU list format, for a sentence.
std::string cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + (j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]));
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string PollingOverrides::summary() const {
  std::vector<std::string> parts;
  // CPUs that poll without limit for the same reasons are named together.
  struct Group {
    bool unlimited;
    std::string why;
    std::vector<int> cpus;
  };
  std::vector<Group> groups;
  for (const auto& c : cpus) {
    if (!c.polls_without_limit && !c.unknown) continue;
    std::string why;
    if (c.polls_without_limit)
      for (const auto& r : c.reasons) why += (why.empty() ? "" : "; ") + r.text;
    else why = c.unknown_reason;
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const Group& g) { return g.unlimited == c.polls_without_limit && g.why == why; });
    if (it == groups.end()) groups.push_back({c.polls_without_limit, why, {c.cpu}});
    else it->cpus.push_back(c.cpu);
  }
  for (const auto& g : groups) {
    const bool one = g.cpus.size() == 1;
    parts.push_back(g.unlimited ? fmt::format("{} {} {} without limit whatever the cap ({})", one ? "CPU" : "CPUs",
                                              cpu_list(g.cpus), one ? "polls" : "poll", g.why)
                                : fmt::format("{} {} may poll without limit (haltpolld cannot tell: {})",
                                              one ? "CPU" : "CPUs", cpu_list(g.cpus), g.why));
  }
  // A device's error once: it is already the reason of the CPUs it leaves uncertain.
  for (const GlobalLatencyQos* q : {&cpu_dma_latency, &cpu_wakeup_latency})
    if (!q->error.empty() && std::none_of(groups.begin(), groups.end(),
                                          [&](const Group& g) { return g.why.find(q->error) != std::string::npos; }))
      parts.push_back(q->error);
  if (cpuidle && !governor_applies())
    parts.push_back(
        governor.empty()
            ? "the cpuidle governor cannot be read (" + governor_error + "): the cap may reach nothing"
            : fmt::format("the cpuidle governor is {}, not haltpoll: guest_halt_poll_ns reaches nothing", governor));
  if (!offline_cpus.empty())
    parts.push_back(fmt::format("{} {} offline (present, not online): no idle polling there",
                                offline_cpus.size() == 1 ? "CPU" : "CPUs", cpu_list(offline_cpus)));
  if (!offline_error.empty()) parts.push_back(offline_error);
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

}  // namespace haltpolld
