// ControllerStatus and DecisionRecord: what the Controller reports, as plain values. status() and
// decisions() return these; the control layer renders them as JSON (control/controller_json.hpp,
// GetStatus' `controller` object and GetDecisions, docs/protocol.md) and the daemon reads their
// fields directly. Copies taken under the Controller's lock: no shared state, no ordering contract
// beyond that of a copied struct.
#pragma once

#include "signals/edges.hpp"
#include "tuning/decision.hpp"
#include "tuning/prober.hpp"
#include "tuning/tuner.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace haltpolld {

// One tick's decision as the decision log keeps it: the tuner's Decision (with what the Controller
// applied) and the context it was taken in.
struct DecisionRecord {
  Decision decision;
  std::int64_t time_ms = 0;  // Unix time of the tick
  std::string target;        // "kernel", "pool" or "none"
  std::uint64_t latency_samples = 0;
  std::string tuner_phase;
  std::optional<double> halt_exit_penalty_ns;
};

// Another writer of the parameters (HaltpollActuator::foreign_value()) and since when: the
// Controller stopped writing then, until a take-over.
struct OtherWriter {
  ForeignValue value;
  std::int64_t since_unix_ms = 0;
};

struct ControllerStatus {
  bool kernel_requested = false;  // the configured mode is kernel
  bool kernel_effective = false;  // the Controller writes the kernel's parameters
  std::string kernel_mode_inactive_reason;  // empty while kernel mode is active
  std::string tuning_target;
  bool started = false;
  std::uint64_t ticks = 0;
  std::uint32_t interval_ms = 0;

  struct Kernel {
    std::string params_dir;
    bool params_present = false;
    std::string cpuidle_driver, cpuidle_governor;
    bool haltpoll_active = false;
    std::string reason;  // why not active; empty when active
    std::vector<std::pair<std::string, std::optional<std::string>>> params;  // as read; empty: unreadable
    bool originals_saved = false;
    std::string state_file;
    std::string degraded_reason;  // the write failure that turned kernel mode off; empty: none
    std::string recovery;         // what start() put back from an earlier run; empty: nothing
    std::uint64_t poll_limit_resets = 0;       // governor round trips done (tuner.reset_limits)
    std::string poll_limit_reset_unavailable;  // why they failed; empty: none failed
  } kernel;

  struct Tuner {
    std::uint32_t current_ns = 0;
    std::string phase;
    std::vector<std::uint32_t> ladder_ns;
    std::vector<RungMeasurement> last_sweep;
    std::optional<double> penalty_ns;
    std::optional<double> penalty_age_s;
    std::string penalty_source;
    std::optional<std::uint32_t> growth_ceiling_ns;
    std::string gain_cpus, paying_cpus;  // of the last choice (Tuner::gain_cpus, paying_cpus)
    TunerParams params;
  } tuner;

  SignalSourceStatus sensors;

  struct Pool {
    std::vector<int> cpus;
    std::uint64_t window_cap_ns = 0;
  };
  std::optional<Pool> pool;

  struct Probes {
    std::optional<double> rate_hz_per_cpu;  // empty: no prober (then `reason` says why)
    std::vector<CpuProbes> per_cpu;
    std::string reason;
  } probes;

  std::optional<Observation> last_observation;
  std::optional<OtherWriter> other_writer;  // empty: none seen (or taken over since)
};

}  // namespace haltpolld
