// RungMeasurement: what the kernel's counters said at one value of guest_halt_poll_ns (a rung of
// the tuner's ladder), summed over the ticks measured there, with the uncertainty of every rate:
// a rate is a count over a time, so its standard error follows from the count and the tick
// length (Poisson), and, once a rung has two ticks or more, from their spread, whichever is
// larger. A quarter-second tick and a one-second tick are thereby judged by what each can tell.
// Also what the steady-state and the replayed haltpoll model predict for a cap from an idle-period
// histogram. Plain values and pure functions: nothing to synchronise.
#pragma once

#include "signals/kernel_signals.hpp"

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace haltpolld {

// A value with its standard error.
struct Estimate {
  double value = 0, se = 0;
  double lo(double z) const noexcept { return value - z * se; }
  double hi(double z) const noexcept { return value + z * se; }
};

struct RungMeasurement {
  std::uint32_t ns = 0;
  std::uint32_t ticks = 0;
  std::uint64_t elapsed_ns = 0;
  std::uint32_t cpus = 0;
  double periods = 0, halts = 0, hits = 0, polls = 0, halt_ns = 0, poll_ns = 0;
  std::optional<double> ipi_skipped;  // kept only over a run of ticks that all counted them
  double max_cpu_time = 0;            // per-tick busiest CPU's poll %, × elapsed_ns
  // CPUs left out because the kernel polls without limit there whatever the cap (a latency QoS
  // request of 0: KernelSignals::polls_without_limit): the cap does not decide their polling.
  std::vector<int> unlimited_cpus;
  // Per CPU, in KernelSignals::cpus order (without the unlimited ones); cpu_ids the CPUs' numbers.
  std::vector<int> cpu_ids;
  std::vector<double> cpu_periods, cpu_halts, cpu_halt_ns, cpu_hits, cpu_ipi, cpu_poll_ns;
  // Per-tick rates weighted by the tick's length (Σ t·x, Σ t·x²) of wake-ups, halts, useful
  // wake-ups and poll CPU: the spread between ticks.
  double tick_sum[4] = {}, tick_sq[4] = {};

  void add(const KernelSignals& k);
  void merge(const RungMeasurement& o);  // the same rung measured again
  double seconds() const noexcept { return static_cast<double>(elapsed_ns) / 1e9; }
  double per_s(double v) const noexcept { return elapsed_ns ? v / seconds() : 0; }
  double wake_rate() const noexcept { return per_s(periods); }
  double halt_rate() const noexcept { return per_s(halts); }
  // The share of the idle periods that ended in a halt (1 when there were none).
  double halt_share() const noexcept { return periods > 0 ? halts / periods : 1.0; }
  // Wake-ups served without a halt exit: IPI-skipped when counted, else poll hits.
  double useful() const noexcept { return ipi_skipped ? *ipi_skipped : hits; }
  double useful_rate() const noexcept { return per_s(useful()); }
  double cpu_useful(std::size_t c) const noexcept { return ipi_skipped ? cpu_ipi[c] : cpu_hits[c]; }
  double poll_cpus() const noexcept { return per_s(poll_ns) / 1e9; }  // CPU-seconds per second
  double mean_poll_cpu_percent() const noexcept { return cpus ? 100 * poll_cpus() / cpus : 0; }
  double max_poll_cpu_percent() const noexcept {
    return elapsed_ns ? max_cpu_time / static_cast<double>(elapsed_ns) : 0;
  }

  // The rates with their standard errors. Counts: Poisson; poll time: a sum of `polls` waits of
  // exponential length (relative error sqrt(2 / polls)); both against the spread between ticks.
  Estimate wake() const noexcept { return rate(periods, 0); }
  Estimate halt() const noexcept { return rate(halts, 1); }
  Estimate useful_est() const noexcept { return rate(useful(), 2); }
  Estimate poll() const noexcept;  // CPU-seconds per second
  // The standard error of a rate over this rung's time from a count alone.
  double count_se(double count) const noexcept { return elapsed_ns ? std::sqrt(std::max(count, 1.0)) / seconds() : 0; }

  // Mean halt residency of the load's CPUs: the per-CPU means, the one in the middle by halt count
  // (a quiet CPU's few long halts say nothing about the load's idle periods).
  double mean_halt_ns() const noexcept;

 private:
  Estimate rate(double count, int signal) const noexcept;
  double between_se(int signal) const noexcept;
};

// What the steady-state haltpoll model predicts for one cap over an idle-period distribution:
// with the limit at the cap (halts rare), a period d ≤ cap is a poll hit that polls d, a longer one
// polls the cap and halts. Per second of the histogram's tick.
struct CapPrediction {
  double hits = 0, halts = 0, poll_ns = 0;
};
CapPrediction predict_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns);
// The library's haltpoll model (haltpoll::make_window_policy("haltpoll"), the kernel's
// adjust_poll_limit bit for bit) replayed over the histogram's periods at cap `cap_ns`, from a poll
// limit of 0 — where a lowered cap starts with reset_limits. The periods come in a fixed
// pseudo-random order (a histogram has lost the real one), at most 8000 of them (counts scaled),
// once to warm the limit up and once counted; the result is scaled back to the histogram's counts.
// Unlike predict_cap it sees the governor's trap (wake-ups every t with a limit L < t ≤ 2L: every
// period polls L and halts) and the reset below grow_start.
CapPrediction replay_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns, std::uint32_t grow_start_ns);

}  // namespace haltpolld
