// Observation: what the daemon saw during one tick, already reduced to the few numbers the tuner
// reasons about (a per-CPU poll share, a wake latency at a percentile, a steal share) next to the
// kernel's signals it was reduced from. A source of kernel signals (signals/edges.hpp) fills the
// kernel's part, the Controller adds the pool's counters and the probes. A signal the guest cannot
// provide is an empty optional, never a made-up zero, so that the tuner can say "no poll-CPU
// signal" instead of deciding on nothing. A plain value: no threads, no shared state, no ordering
// contract beyond that of a copied struct.
#pragma once

#include "signals/kernel_signals.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// Probe latencies of one tick, all CPUs merged (per-CPU histograms stay in the Prober).
struct ProbeSummary {
  std::uint64_t samples = 0;    // probes that woke a worker (poll hit + park path)
  std::uint64_t poll_hits = 0;  // the worker was polling: no syscall on the wake path
  std::uint64_t park_path = 0;  // the worker was parked on its futex
  std::uint64_t queued = 0;     // the worker was busy: the sample says nothing about waking
  double p50_ns = 0;
  double p99_ns = 0;
  double at_percentile_ns = 0;  // at TunerParams::percentile
};

struct Observation {
  std::uint64_t tick = 0;
  std::uint64_t elapsed_ns = 0;     // length of the tick the deltas cover
  std::uint32_t current_ns = 0;     // the poll cap in force during the tick

  // Highest per-CPU share of time spent polling, in % of one CPU (the budget is per CPU), and the
  // mean over the CPUs. From cpuidle POLL time, or from the pool's poll_ns when the tuner drives the
  // pool's window instead of the kernel's.
  std::optional<double> poll_cpu_percent;
  std::optional<double> mean_poll_cpu_percent;
  // Sum over the CPUs (% of one CPU): the poll time the host pays for, the cost side of a step.
  std::optional<double> total_poll_cpu_percent;
  // Wake-ups per second over all CPUs (idle exits, or pool wakes), for status and the decision
  // log; the tuner counts the wake-ups it prices from `kernel`.
  std::optional<double> wakes_per_second;

  // Wake latency at TunerParams::percentile, with the number of samples behind it.
  std::optional<double> wake_latency_ns;
  std::uint64_t latency_samples = 0;
  // Mean wake latency of the probes, for status and the decision log (the tuner decides from
  // `kernel` and halt_exit_penalty_ns, not from the probes' latency).
  std::optional<double> mean_wake_latency_ns;

  // Share of all CPU time the host stole from the guest during the tick, in %.
  std::optional<double> steal_percent;

  // Why the tick's counters do not describe one interval of the current CPU set (a CPU went
  // offline or came online, its cpuidle counters restarted, the steal count jumped past what the
  // tick can hold or went backwards); empty when they do. Nothing is decided from such a tick.
  std::string unsound;

  // Where the numbers came from, for the decision log: "cpuidle", "pool", "probes", "model".
  std::string cpu_source;
  std::string latency_source;

  // The halt-exit penalty measured on this guest (Controller: park-path minus poll-hit wake
  // latency of the daemon's own workers on otherwise idle CPUs), its age and how it was taken;
  // empty until measured. The tuner prices the halts a setting avoids with it.
  std::optional<double> halt_exit_penalty_ns;
  std::optional<double> penalty_age_s;
  std::string penalty_source;

  std::vector<CpuIdleDelta> cpuidle;  // empty when the guest has no cpuidle states
  // The cumulative counters the deltas were taken from, as the kernel has them (since boot), so that
  // the fleet series export them unreduced without reading the files a second time: per CPU with
  // cpuidle states, and the aggregate steal of /proc/stat in USER_HZ ticks.
  std::vector<KernelCpuidleCounters> cpuidle_totals;
  std::optional<std::uint64_t> steal_ticks_total;
  // The kernel's signals of the tick, per CPU: the tuner's primary input.
  KernelSignals kernel;
  ProbeSummary probes;
};

}  // namespace haltpolld
