// PollingOverridesReader: fills PollingOverrides (signals/polling_overrides.hpp) from the kernel's
// files under the daemon's root, once per sample (Sensors::sample): the global CPU latency QoS
// devices <root>/dev/cpu_dma_latency and <root>/dev/cpu_wakeup_latency (read: 4 bytes, the
// aggregate request as a native-endian s32), each sampled CPU's
// <root>/sys/devices/system/cpu/cpuN/power/pm_qos_resume_latency_us, the cpuidle governor
// (current_governor, through the tick's held reads, which the actuator shares) and the present CPU
// list (<root>/sys/devices/system/cpu/present, against the online list the sensors read). While a
// QoS device reads 0, the processes holding it open are looked for in <root>/proc/*/fd (the walk
// of sysfs/other_writer.hpp): when the value changes and at most every kHolderRescanNs after, since
// a walk of every process is far dearer than the reads.
//
// Everything read is untrusted: a device is read only when it is a character device or a regular
// file (a fake tree), opened without blocking; a value of the wrong size, a malformed number or an
// unreadable file is a reason in the result, never a guess. Not thread-safe: the sensors' thread.
#pragma once

#include "signals/polling_overrides.hpp"
#include "sysfs/file_io.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// How often the holders of a QoS device at 0 are looked for again while it stays at 0.
inline constexpr std::uint64_t kHolderRescanNs = 30'000'000'000;

// The device as read: value (or error) only; holders are the reader's business.
GlobalLatencyQos read_latency_qos_device(const std::string& path, const std::string& device);
// A pm_qos_resume_latency_us file's content (read_small_file's, trimmed); nullopt with `error`
// (errno) when the read failed.
CpuResumeLatency parse_resume_latency(int cpu, const std::optional<std::string>& text, int error);

class PollingOverridesReader {
 public:
  // `root`: the sysfs root ("/" on a real guest); `dev_root`: where the QoS devices are (empty:
  // <root>/dev); `reads`: the tick's held reads (shared with the actuator).
  PollingOverridesReader(std::string root, std::string dev_root, std::shared_ptr<HeldReads> reads);

  // `cpus`: the sampled CPUs; `online`: the whole online list (empty when unknown); `poll_state`:
  // the sampled CPUs whose cpuidle state 0 is POLL; `cpuidle`: some CPU has cpuidle states.
  PollingOverrides read(const std::vector<int>& cpus, const std::optional<std::vector<int>>& online,
                        const std::vector<int>& poll_state, bool cpuidle, std::uint64_t now_ns);

 private:
  struct Watch {
    std::optional<std::int32_t> last_value;
    std::optional<std::uint64_t> scanned_ns;
    std::vector<QosHolder> holders;
    std::string note;
  };
  void holders(GlobalLatencyQos& q, Watch& w, std::uint64_t now_ns);

  std::string root_, dev_root_;
  std::shared_ptr<HeldReads> reads_;
  Watch dma_, wakeup_;
};

}  // namespace haltpolld
