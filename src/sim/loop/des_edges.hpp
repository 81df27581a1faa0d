// The daemon's guest edges (signals/edges.hpp) implemented by the discrete-event guest
// (sim/des_guest.hpp), so that the daemon's own Controller and Tuner, unmodified, tune a simulated
// guest in virtual time:
//   DesClock    Clock: steady_ns() is the guest's virtual time; unix_ms() a fixed epoch plus it.
//   DesSignals  KernelSignalSource: the deltas of the guest's cpuidle counters (usage, and time
//               truncated to µs as sysfs shows it) and, on ticks the "eBPF programs" were attached
//               for whole, the exact poll outcomes, IPI skips, per-CPU limits, limit grows and
//               shrinks and the four idle-period histograms, as the sysfs Sensors fill them.
//   DesActuator HaltpollActuator: writes the guest's module parameters (a cap change reaches a
//               CPU at its next halt, as in the kernel); reset_poll_limits() is the governor round
//               trip that zeroes every limit; restore() puts back the boot parameters.
// The Controller's halt-exit penalty comes from its probes, which need a worker pool and real
// threads. A simulated guest has neither, so DesSignals carries the penalty instead
// (Observation::halt_exit_penalty_ns, which the Controller keeps when its own probes measured
// nothing): measured once, before the load, the way HaltExitPenalty measures it on an idle
// guest, from simulated probes whose park-path and poll-hit latencies are the guest's halted and
// polling wake-up costs (measure_halt_exit_penalty).
// Single-threaded like the guest: the closed loop (closed_loop.hpp) advances the guest between
// ticks on the thread that ticks the Controller.
#pragma once

#include "signals/edges.hpp"
#include "sim/des_guest.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld::des {

class DesClock final : public Clock {
 public:
  explicit DesClock(const Guest& g, std::int64_t epoch_ms = 1'764'633'600'000) : g_(g), epoch_ms_(epoch_ms) {}
  std::uint64_t steady_ns() const override { return static_cast<std::uint64_t>(g_.now()); }
  std::int64_t unix_ms() const override { return epoch_ms_ + g_.now() / 1'000'000; }

 private:
  const Guest& g_;
  std::int64_t epoch_ms_;
};

struct DesSignalOptions {
  bool ebpf = true;                         // the eBPF reader is loaded (else counters only)
  std::optional<double> halt_exit_penalty;  // as measured before the load (empty: none)
};

class DesSignals final : public KernelSignalSource {
 public:
  DesSignals(const Guest& g, DesSignalOptions o);
  Observation sample(std::uint64_t now_ns) override;
  bool set_idle_trace_attached(bool on, std::string why = {}) override;
  SignalSourceStatus status() const override;

  // Ticks that carried the eBPF signals, for the reports.
  std::uint64_t traced_ticks() const noexcept { return traced_ticks_; }
  std::uint64_t ticks() const noexcept { return ticks_; }
  // The eBPF programs are attached for the next tick.
  bool attached() const noexcept { return o_.ebpf && attached_; }

 private:
  const Guest& g_;
  DesSignalOptions o_;
  bool primed_ = false;
  std::uint64_t last_ns_ = 0;
  std::vector<CpuCounters> last_;
  std::vector<CpuHistograms> last_hist_;
  bool attached_ = true;
  bool whole_ = true;  // attached since the previous sample
  std::string detached_why_;
  std::uint64_t traced_ticks_ = 0, ticks_ = 0;
};

class DesActuator final : public HaltpollActuator {
 public:
  explicit DesActuator(Guest& g);
  KernelHaltpollState detect() const override;
  std::optional<std::string> read(const char* name) const override;
  std::optional<std::uint32_t> read_poll_ns() const override;
  ActuatorResult set_poll_ns(std::uint32_t ns) override;
  ActuatorResult set_grow_start_ns(std::uint32_t ns) override;
  ActuatorResult reset_poll_limits() override;
  ActuatorResult recover() override { return {}; }
  ActuatorResult restore() override;
  bool has_saved_originals() const override { return saved_; }
  const std::string& blocked_reason() const override { return blocked_; }
  std::string recheck_blocked() override { return {}; }
  std::string params_location() const override { return "simulated guest"; }
  std::string originals_location() const override { return "simulated guest (memory)"; }

  std::uint64_t writes() const noexcept { return writes_; }
  std::uint64_t resets() const noexcept { return resets_; }

 private:
  ActuatorResult apply(const haltpoll::HaltpollParams& p);
  Guest& g_;
  haltpoll::HaltpollParams boot_;
  bool saved_ = false;
  std::string blocked_;
  std::uint64_t writes_ = 0, resets_ = 0;
};

// The halt-exit penalty as the Controller's HaltExitPenalty measures it on an otherwise idle guest:
// HaltExitPenalty::kWindow simulated probes per path spread over `cpus`, the park path a draw of
// `costs.wake_halted`, the poll hit a draw of `costs.wake_polling`.
double measure_halt_exit_penalty(const Costs& costs, int cpus, std::uint64_t seed);

}  // namespace haltpolld::des
