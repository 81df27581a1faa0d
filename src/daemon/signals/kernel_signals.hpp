// The kernel's signals of one tick: the cpuidle deltas of each CPU, what they say about its polls
// and halts, and the idle-period histograms of the eBPF program. The bottom of the daemon: the
// sysfs layer fills these values, the tuning layer reads them, the control layer reports them, and
// a simulated guest produces them as well. Plain values: no threads, no shared state, no ordering
// contract beyond that of a copied struct.
#pragma once

#include "signals/polling_overrides.hpp"

#include <haltpoll/latency_histogram.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// cpuidle activity of one CPU during one tick, from stateK/{usage,time} deltas.
struct CpuIdleDelta {
  int cpu = 0;
  std::uint64_t poll_usage = 0;  // entries into the POLL state
  std::uint64_t poll_ns = 0;     // time spent in POLL (the kernel reports µs; stored ×1000)
  std::uint64_t halt_usage = 0;  // entries into the other states (haltpoll / HLT / C1 ...)
  std::uint64_t halt_ns = 0;
};

// The cpuidle counters of one CPU as the kernel reports them, cumulative since boot (unreduced, so
// that Prometheus takes the rates of the fleet series).
struct KernelCpuidleCounters {
  unsigned cpu = 0;
  std::uint64_t poll_entries = 0, poll_us = 0;  // state POLL
  std::uint64_t halts = 0, halt_us = 0;         // every other state
};

// The kernel's own idle accounting of one CPU during one tick. The cpuidle counters are exact
// (entries and residency of the POLL state and of the halt states); the split of the polls into
// hits and misses is exact only when the eBPF program counts outcomes (`outcomes_exact`), and is
// otherwise derived from the counters: under the haltpoll governor a halt follows a poll on the
// same CPU only when that poll timed out, so misses = min(poll entries, halts) and
// hits = poll entries - misses. The derivation counts as a miss every halt that had no poll before
// it (a CPU whose limit is 0, a PM QoS request), so it under-counts hits by at most the number of
// such halts; where both exist the daemon reports the difference (docs/kernel-signals.md).
struct CpuKernelSignals {
  int cpu = 0;
  std::uint64_t poll_entries = 0;
  std::uint64_t poll_ns = 0;
  std::uint64_t halts = 0;
  std::uint64_t halt_ns = 0;
  std::uint64_t poll_hits = 0;    // polls ended by a wake-up (or a local timer)
  std::uint64_t poll_misses = 0;  // polls that timed out and were followed by a halt
  bool outcomes_exact = false;    // hits/misses from eBPF rather than derived
  // eBPF only (empty / 0 when the program is not loaded).
  std::optional<std::uint64_t> ipi_skipped;    // remote wake-ups that found the CPU polling
  std::optional<std::uint32_t> poll_limit_ns;  // the governor's current per-CPU limit
  std::uint64_t limit_grows = 0;
  std::uint64_t limit_shrinks = 0;
  // From this CPU's /proc/stat line (empty without one): the host's steal during the tick, as a
  // share of the CPU's own time and in ns (USER_HZ resolution, 10 ms at 100 Hz).
  std::optional<double> steal_percent;
  std::optional<std::uint64_t> steal_ns;

  // Idle periods: a poll that timed out and the halt after it are one period.
  std::uint64_t idle_periods() const noexcept { return poll_entries + halts - poll_misses; }
};

// Idle-period length distributions of one tick over all CPUs, from the eBPF program.
struct IdlePeriodHistograms {
  haltpoll::LatencyHistogram poll_hit;   // POLL residency of polls ended by a wake-up
  haltpoll::LatencyHistogram poll_halt;  // whole period (poll + halt) of polls that timed out
  haltpoll::LatencyHistogram halt;       // halts without a poll before them
  haltpoll::LatencyHistogram halt_residency;  // every halt's residency (block_ns of the governor)
};

// What makes the kernel of a guest that registered no cpuidle driver poll at all: said wherever the
// daemon reports such a guest (status, decisions), so that the reader learns the remedy where the
// symptom is shown.
inline constexpr const char* kHowToEnableHaltpoll =
    "the cpuidle-haltpoll driver would make it poll: it registers on KVM when the host gives the realtime "
    "hint (KVM_HINTS_REALTIME, QEMU's kvm-hint-dedicated=on, set by KubeVirt for dedicated CPUs) or when the "
    "guest boots with cpuidle_haltpoll.force=1";

struct KernelSignals {
  // Where the per-CPU counts come from. cpuidle: the sysfs counters of the cpuidle states, exact on
  // every tick. tracepoint: the guest registered no cpuidle driver, so there are no such counters and
  // its kernel halts on every idle entry without polling; the eBPF program on power:cpu_idle still
  // counts every idle period, on the ticks it was attached for whole (the others carry no CPUs).
  enum class Counters { cpuidle, tracepoint };
  Counters counters = Counters::cpuidle;
  std::uint64_t elapsed_ns = 0;
  std::vector<CpuKernelSignals> cpus;  // empty when neither cpuidle states nor the tracepoint counted
  std::optional<IdlePeriodHistograms> periods;  // empty without eBPF
  // Why the eBPF signals are missing ("" when present), for status and the decision log.
  std::string bpf_missing;
  // The program is loaded but was detached for (part of) the tick, and why: the eBPF fields are
  // then empty as if missing, but the signals come back when it is attached again.
  std::string bpf_detached;
  // What decides how the guest polls besides the cap (QoS requests at 0, the governor, offline
  // CPUs), read once per tick; empty from a source that cannot tell (the simulated guest).
  std::optional<PollingOverrides> overrides;

  bool available() const noexcept { return !cpus.empty() && elapsed_ns > 0; }
  // The kernel polls on `cpu` whatever the cap (a latency requirement of 0): its poll time is the
  // QoS request's doing, not the cap's, so it is no cost of a setting the tuner weighs.
  bool polls_without_limit(int cpu) const noexcept { return overrides && overrides->polls_without_limit(cpu); }
  double per_second(std::uint64_t n) const noexcept {
    return elapsed_ns ? static_cast<double>(n) * 1e9 / static_cast<double>(elapsed_ns) : 0.0;
  }
  double poll_cpu_percent(const CpuKernelSignals& c) const noexcept {
    return elapsed_ns ? std::min(100.0, 100.0 * static_cast<double>(c.poll_ns) / static_cast<double>(elapsed_ns)) : 0.0;
  }
  // Sums over the CPUs.
  std::uint64_t total(std::uint64_t CpuKernelSignals::*field) const noexcept {
    std::uint64_t t = 0;
    for (const auto& c : cpus) t += c.*field;
    return t;
  }
  std::uint64_t total_idle_periods() const noexcept {
    std::uint64_t t = 0;
    for (const auto& c : cpus) t += c.idle_periods();
    return t;
  }
  // Empty when no CPU has the eBPF count.
  std::optional<std::uint64_t> total_ipi_skipped() const noexcept {
    std::optional<std::uint64_t> t;
    for (const auto& c : cpus)
      if (c.ipi_skipped) t = t.value_or(0) + *c.ipi_skipped;
    return t;
  }
};

// The counters-only kernel signals of one CPU's tick (hits and misses derived, see
// CpuKernelSignals); the eBPF reader overwrites the outcome split where it has exact counts.
CpuKernelSignals derive_kernel_signals(const CpuIdleDelta& d);

}  // namespace haltpolld
