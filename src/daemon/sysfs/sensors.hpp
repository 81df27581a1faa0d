// Sensors: the kernel-side inputs of one tick, read from a sysfs/procfs tree rooted at
// `sysfs_root` ("/" in production, a temporary directory in tests). Per CPU, the cpuidle states
// `<root>/sys/devices/system/cpu/cpuN/cpuidle/stateK/{name,usage,time}` are classified by name
// (POLL is the polling state, every other state counts as halt: haltpoll, HLT, C1 ...) and turned
// into per-tick deltas; steal time comes from `<root>/proc/stat`, the aggregate `cpu` line for the
// tick's steal share and each `cpuN` line for that CPU's share and seconds. A guest
// without cpuidle states (no driver registered) yields no poll-CPU signal rather than zeros.
// Each sample also carries what decides the polling besides the cap (KernelSignals::overrides: the
// QoS requests at 0, the governor, offline CPUs; sysfs/polling_overrides.hpp).
// The caller passes the time of each sample, so the class owns no clock; not thread-safe. It is the
// real kernel's KernelSignalSource (signals/edges.hpp).
#pragma once

#include "signals/edges.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

class IdleTrace;
struct IdleTraceSnapshot;
class HeldReads;
class PollingOverridesReader;

struct CpuidleCounters {
  std::uint64_t poll_usage = 0;
  std::uint64_t poll_time_us = 0;
  std::uint64_t halt_usage = 0;
  std::uint64_t halt_time_us = 0;
  std::vector<std::string> state_names;  // in state order, for status
};

// One line of /proc/stat: the aggregate `cpu` line, or one CPU's `cpuN` line.
struct CpuStatTimes {
  int cpu = -1;             // -1: the aggregate line
  std::uint64_t total = 0;  // user+nice+system+idle+iowait+irq+softirq+steal, in USER_HZ
  std::uint64_t steal = 0;
};

struct ProcStatTimes {
  std::uint64_t total = 0;  // user+nice+system+idle+iowait+irq+softirq+steal, in USER_HZ
  std::uint64_t steal = 0;
  std::vector<CpuStatTimes> cpus;  // the `cpuN` lines in file order (online CPUs only)
};

class Sensors final : public KernelSignalSource {
 public:
  // `cpus` empty: the CPUs listed in <root>/sys/devices/system/cpu/online. The set follows that file
  // on every sample: a CPU that goes offline leaves it, one that comes online (back) joins it, the
  // listed ones only when `cpus` is given.
  // `reads`: the tick's held reads, shared with the actuator (sysfs_edges()); null: its own.
  // `dev_root`: where the QoS devices are read (empty: <sysfs_root>/dev; a test on the real root
  // points it at a fake one).
  Sensors(std::string sysfs_root, std::vector<int> cpus, std::shared_ptr<HeldReads> reads = nullptr,
          std::string dev_root = {});
  ~Sensors() override;
  Sensors(const Sensors&) = delete;
  Sensors& operator=(const Sensors&) = delete;

  // Loads the eBPF program (src/bpf) so that each sample also carries the exact poll outcomes, the
  // IPI-skip counts, the per-CPU poll limits and the idle-period histograms. Only for the real
  // kernel: on a fake root the program would describe another machine than the counters, so it
  // is refused there. False (and kernel_signals_missing() says why) when it cannot be loaded;
  // the counters keep working either way.
  bool enable_idle_trace();
  // Detaches the eBPF programs (the idle path then pays nothing for them) or attaches them again;
  // `why` says why they are detached, for status. Meant to be called right after sample(): a
  // tick is reported with the eBPF signals only when the programs were attached from its start
  // (within the milliseconds between a sample and this call) to its end. Returns false when
  // there is no program, or attaching failed (kernel_signals_missing() then says why).
  bool set_idle_trace_attached(bool on, std::string why = {}) override;
  bool idle_trace_attached() const noexcept;
  // Why the eBPF signals are missing ("" when the program runs), and how it attached.
  const std::string& kernel_signals_missing() const noexcept { return bpf_missing_; }
  std::string kernel_signals_status() const;

  std::optional<CpuidleCounters> read_cpuidle(int cpu) const;
  std::optional<ProcStatTimes> read_proc_stat() const;

  // Samples all counters at `now_ns` and returns the deltas since the previous call. The first call
  // only primes the counters (elapsed_ns == 0, no signals).
  Observation sample(std::uint64_t now_ns) override;

  // The CPUs sampled last (at construction: those online then).
  const std::vector<int>& cpus() const noexcept { return cpus_; }
  bool cpuidle_available() const noexcept { return cpuidle_available_; }
  // Why there is no poll-CPU signal, or the state names found ("POLL,haltpoll").
  const std::string& cpuidle_status() const noexcept { return cpuidle_status_; }
  SignalSourceStatus status() const override;

 private:
  // The requested CPUs that are online now (all online CPUs when none were requested); `all`
  // receives the whole online list (empty when the file does not give one).
  std::vector<int> online_cpus(std::optional<std::vector<int>>* all = nullptr) const;

  std::string root_;
  std::vector<int> requested_;
  std::vector<int> cpus_;
  std::map<int, CpuidleCounters> last_idle_;  // the CPUs that had cpuidle states at the last sample
  std::optional<ProcStatTimes> last_stat_;
  std::uint64_t last_ns_ = 0;
  bool primed_ = false;
  bool cpuidle_available_ = false;
  std::string cpuidle_status_;
  std::unique_ptr<PollingOverridesReader> overrides_;
  std::unique_ptr<IdleTrace> trace_;
  std::unique_ptr<IdleTraceSnapshot> last_trace_;
  bool trace_whole_tick_ = false;  // attached since the last sample
  std::string detached_why_;
  std::string bpf_missing_ = "eBPF kernel signals not requested";
};

}  // namespace haltpolld
