// The guest as the tuning layer sees it: a source of per-tick kernel signals, an actuator for the
// kernel's haltpoll parameters, and a clock. The Controller (tuning/controller.hpp) is written
// against these three interfaces only, so that the same Controller and Tuner run on the real
// kernel (the sysfs layer implements them: Sensors, SysfsHaltpollParams, SystemClock; the shell
// wires them in with sysfs_edges()) and on a simulated guest in virtual time. They say nothing of
// files, paths or eBPF objects: those are the implementation's business.
//
// Threads: an implementation is called from the one thread that owns the Controller (its calls are
// serialised by the Controller's mutex), except the Clock, which may be read from any thread.
#pragma once

#include "signals/observation.hpp"

#include <haltpoll/governor.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// The time of the guest: steady for tick lengths and ages, wall for the decision log's timestamps.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::uint64_t steady_ns() const = 0;
  virtual std::int64_t unix_ms() const = 0;
};

// What a signal source says about itself, for status.
struct SignalSourceStatus {
  std::vector<int> cpus;
  bool cpuidle_available = false;
  std::string cpuidle, kernel_signals;  // the cpuidle states found or why none; how the eBPF signals run
  std::string kernel_signals_missing;   // empty when the eBPF signals are present
};

// The kernel's counters of each tick (what Sensors reads from cpuidle, /proc/stat and eBPF).
class KernelSignalSource {
 public:
  virtual ~KernelSignalSource() = default;
  // The deltas since the previous call, taken at `now_ns` (Clock::steady_ns): Observation::kernel,
  // the cpuidle deltas, the poll CPU and wake rate they imply and the steal share. The first call
  // only primes the counters (elapsed_ns == 0, no signals).
  virtual Observation sample(std::uint64_t now_ns) = 0;
  // Attaches or detaches the per-idle-event tracing (detached, the idle path pays nothing for it);
  // `why` says why it is detached, for status. Called right after sample(): a tick carries the
  // traced signals only when tracing was attached for all of it. False when there is no tracing.
  virtual bool set_idle_trace_attached(bool on, std::string why = {}) = 0;
  virtual SignalSourceStatus status() const = 0;
};

// Whether writing the haltpoll parameters can have any effect here, and why not.
struct KernelHaltpollState {
  bool params_present = false;  // the haltpoll governor's parameters exist
  std::string driver;           // the cpuidle driver ("" when unknown)
  std::string governor;         // the cpuidle governor
  bool active = false;          // writing the parameters changes the idle path
  std::string reason;           // why not active (empty when active)
};

struct ActuatorResult {
  bool ok = true;
  bool written = false;  // something was actually changed
  int error = 0;         // errno of the failure
  std::string message;
};

// A value in force that this run neither wrote nor found: another writer (TuneD, an administrator,
// a second tool) has the parameters now.
struct ForeignValue {
  std::string parameter;  // a parameter of HaltpollActuator::kParams, or "cpuidle_governor"
  std::string value;      // in force
  std::string expected;   // what this run wrote there, or found when it started to write
  std::string who;        // the writer as far as the guest tells, else "unknown writer"
};

// The kernel's haltpoll parameters (the library's table, HALTPOLL_PARAMS) and the per-CPU poll
// limits. Changes are undone by restore(); the originals are kept where they survive a crash, and
// recover() puts back what a run that did not stop cleanly left changed.
class HaltpollActuator {
 public:
  // Every parameter of the library's table.
  static constexpr auto kParams = [] {
#define HALTPOLLD_PARAM_NAME(name, type, value, kind) #name,
    return std::to_array<const char*>({HALTPOLL_PARAMS(HALTPOLLD_PARAM_NAME)});
#undef HALTPOLLD_PARAM_NAME
  }();

  virtual ~HaltpollActuator() = default;

  virtual KernelHaltpollState detect() const = 0;
  // A parameter of kParams as the kernel has it ("200000", "Y"); empty when unreadable.
  virtual std::optional<std::string> read(const char* name) const = 0;
  virtual std::optional<std::uint32_t> read_poll_ns() const = 0;
  // While held, read() and read_poll_ns() return what the first read of each file gave, until this
  // actuator writes it: a tick reads each parameter file once (the Controller holds reads for the
  // tick and the status it leaves behind). Released, every read goes to the kernel again.
  virtual void hold_reads(bool /*on*/) {}

  // Each saves the originals before the first change and changes only what differs.
  virtual ActuatorResult set_poll_ns(std::uint32_t ns) = 0;
  virtual ActuatorResult set_grow_start_ns(std::uint32_t ns) = 0;
  // Puts every CPU's poll limit back to 0, so that a lowered cap reaches the CPUs that never halt.
  virtual ActuatorResult reset_poll_limits() = 0;

  // The originals left by an earlier run that did not stop cleanly: put back (ok=true,
  // written=false and an empty message when there were none).
  virtual ActuatorResult recover() = 0;
  // Puts the saved originals back and forgets them.
  virtual ActuatorResult restore() = 0;
  virtual bool has_saved_originals() const = 0;
  // Why changes are refused for now (originals of an earlier run that could not be put back); empty
  // when they are not. recheck_blocked() looks again and says what changed, empty when nothing did.
  virtual const std::string& blocked_reason() const = 0;
  virtual std::string recheck_blocked() = 0;

  // Another writer. expect_values_in_force() takes the values in force as this run's own (kernel
  // mode starts); from then on each write updates them, and foreign_value() names the first value in
  // force that differs, and who wrote it (looked for only then). yield_to() records that the
  // originals are superseded: nothing is written any more, and restore() and recover() leave the
  // other writer's values in place (they put back only values this run wrote and that are still in
  // force). take_over() makes the values in force the originals of what the other writer changed.
  // An actuator that cannot tell has no other writer.
  virtual void expect_values_in_force() {}
  // A writer that declares the parameters its own before this run writes any (the active TuneD
  // profile names them): kernel mode then starts yielded, with the value in force as both `value`
  // and `expected`. Empty when none does.
  virtual std::optional<ForeignValue> claimed_by_other() { return std::nullopt; }
  virtual std::optional<ForeignValue> foreign_value() { return std::nullopt; }
  virtual ActuatorResult yield_to(const ForeignValue&) { return {}; }
  virtual ActuatorResult take_over() { return {}; }

  // Where the parameters are and where the originals are kept, for status.
  virtual std::string params_location() const = 0;
  virtual std::string originals_location() const = 0;
};

// One guest's edges, as the Controller takes them. Shared pointers so that one object may
// implement several of them (a simulated guest) and a test may keep a handle on a fake.
struct GuestEdges {
  std::shared_ptr<KernelSignalSource> signals;
  std::shared_ptr<HaltpollActuator> actuator;
  std::shared_ptr<const Clock> clock;
};

}  // namespace haltpolld
