// PollingOverrides: what decides how this guest polls besides guest_halt_poll_ns, as the kernel had
// it during one tick. The cpuidle governors take a CPU's latency requirement from
// cpuidle_governor_latency_req() (drivers/cpuidle/governor.c): the smallest of the CPU's resume
// latency request (pm_qos_resume_latency_us), the global CPU latency QoS (/dev/cpu_dma_latency)
// and, on kernels that have it, the CPU system wakeup latency QoS (/dev/cpu_wakeup_latency). At a
// requirement of 0 haltpoll_select() returns the POLL state every time, so that CPU polls without
// limit whatever the cap; the cap also reaches nothing while the governor is not haltpoll, and an
// offline CPU does not idle at all. The sysfs layer reads the files (sysfs/polling_overrides.hpp);
// a source that cannot tell (the simulated guest) leaves KernelSignals::overrides empty. It reaches
// the tuner in the Observation: the polling of a CPU that polls without limit is no cost of the
// tuner's setting, since no setting changes it. docs/kernel-signals.md, section 5, names the
// kernel code behind each value. A plain value: no threads, no shared state, no ordering contract
// beyond that of a copied struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// Where a latency requirement of 0 comes from; to_string() gives the metric's `reason` label.
enum class OverrideSource { cpu_dma_latency, cpu_wakeup_latency, resume_latency };
const char* to_string(OverrideSource s) noexcept;

// A process with a QoS device open: it holds a request there (the kernel removes the request when
// the last descriptor closes).
struct QosHolder {
  int pid = 0;
  std::string comm;  // /proc/PID/comm, printable and bounded
};

// One global latency QoS device. Reading it returns the aggregate (the smallest request in force,
// µs) as a native-endian s32; opening it adds a request at the no-constraint default, so the read
// leaves the aggregate as it was unless every request in force is above that default.
struct GlobalLatencyQos {
  std::string device;                    // the kernel's path, "/dev/cpu_dma_latency"
  bool present = false;                  // the device exists under the root
  std::optional<std::int32_t> value_us;  // empty when absent or unreadable
  std::string error;                     // present but no value: why (unreadable, malformed)
  // Looked for only while the value is 0 (a walk of /proc/*/fd): the holders and what the walk
  // could not see; both empty while the value is not 0.
  std::vector<QosHolder> holders;
  std::string holders_note;
};

// A CPU's pm_qos_resume_latency_us as drivers/base/power/sysfs.c shows it: "n/a" is a request of 0
// (no latency at all: the CPU must poll), "0" is no constraint, N > 0 a limit of N µs.
struct CpuResumeLatency {
  enum class State { absent, no_constraint, limit, zero, unreadable };
  int cpu = 0;
  State state = State::absent;
  std::int32_t limit_us = 0;  // State::limit
  std::string text;           // the file as read, printable and bounded (empty when absent)
  std::string error;          // State::unreadable: why
};

// One reason why a CPU polls without limit.
struct OverrideReason {
  OverrideSource source = OverrideSource::cpu_dma_latency;
  std::string text;  // "cpu_dma_latency is 0, held by process 4242 (cyclictest)"
};

// A sampled CPU: whether the kernel polls there whatever the cap, and why; `unknown` when a file
// the answer depends on could not be read (the reasons then say which).
struct CpuPollingOverride {
  int cpu = 0;
  bool polls_without_limit = false;
  bool unknown = false;
  std::vector<OverrideReason> reasons;  // the requests at 0 (empty when not polling without limit)
  std::string unknown_reason;           // unknown: which file, and why
};

struct PollingOverrides {
  GlobalLatencyQos cpu_dma_latency;
  GlobalLatencyQos cpu_wakeup_latency;   // present only on kernels with the CPU system wakeup QoS
  std::vector<CpuResumeLatency> resume;  // per sampled CPU
  std::vector<CpuPollingOverride> cpus;  // per sampled CPU
  bool cpuidle = false;                  // a cpuidle driver runs (the CPUs have cpuidle states)
  std::string governor;                  // current_governor ("" when unreadable)
  std::string governor_error;            // why unreadable
  std::vector<int> offline_cpus;         // present but not online
  std::string offline_error;             // why the present list could not be read

  bool polls_without_limit(int cpu) const noexcept;
  std::vector<int> unlimited_cpus() const;
  // The cap reaches the CPUs: the haltpoll governor runs a cpuidle driver.
  bool governor_applies() const noexcept { return cpuidle && governor == "haltpoll"; }
  // Something decides how this guest polls besides the cap: a CPU polls without limit (or cannot be
  // told), the governor is another one, a CPU is offline, or a file could not be read.
  bool any() const noexcept;
  // One sentence naming each of those, for status, `haltpollctl status` and the log; empty when
  // none is in force.
  std::string summary() const;
};

}  // namespace haltpolld
