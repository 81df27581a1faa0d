// Decision: the tuner's answer to one Observation (signals/observation.hpp), the value to put in
// force plus the reason in words, and what the Controller applied of it. A plain value: no
// threads, no shared state, no ordering contract beyond that of a copied struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace haltpolld {

enum class Action { hold, grow, shrink, set, revert };

struct Decision {
  std::uint64_t tick = 0;
  Action action = Action::hold;
  std::uint32_t previous_ns = 0;
  std::uint32_t guest_halt_poll_ns = 0;  // the value to put in force (== previous_ns on hold)
  // guest_halt_poll_grow_start to put in force with it (TunerParams::manage_grow_start), else empty.
  std::optional<std::uint32_t> grow_start_ns;
  // Lowered with TunerParams::reset_limits: the CPUs' poll limits are to be zeroed too, so that the
  // lower cap reaches the CPUs that never halt (they keep their old limit until they do).
  bool reset_limits = false;
  std::string reason;

  // The inputs the decision was made on, copied for the decision log.
  std::optional<double> poll_cpu_percent;
  std::optional<double> wake_latency_ns;
  std::optional<double> steal_percent;

  // Filled in by the Controller: whether the value reached the kernel / the pool.
  bool applied_kernel = false;
  bool applied_pool = false;
  bool applied_grow_start = false;
  bool applied_reset = false;  // the poll limits were zeroed (kernel: a governor round trip)

  bool changed() const noexcept { return guest_halt_poll_ns != previous_ns; }
};

const char* to_string(Action a) noexcept;

}  // namespace haltpolld
