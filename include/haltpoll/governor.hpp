// Window governor: decides how long a worker polls before it parks, from the idle periods it saw.
//
// A WindowGovernor owns one WindowPolicy. Before an idle period the worker asks window_ns(); when
// the period ends (a wake-up arrived) it calls record(idle_ns, window_ns) with how long the period
// lasted and the window it polled with: a poll *hit* iff idle_ns <= window_ns. Policies are pure
// state machines: no clocks, no I/O, no threads, no allocation after construction, and record() /
// window_ns() never throw — they sit on the worker's wake-up path.
//
// Policies (make_window_policy spec strings):
//   "haltpoll"     the kernel's cpuidle haltpoll governor (adjust_poll_limit), bit for bit;
//   "adaptive"     ski rental with a learned distribution (see docs/design.md, "Window governor");
//   "static:<ns>"  a fixed window;
//   "oracle"       evaluation only: told the next idle duration through hint_next_idle_ns().
//
// Memory ordering: none. A governor belongs to one worker thread; nothing in it is atomic.
// Whoever changes the cap from another thread (the pool, the tuner) must hand the new value to the
// worker (e.g. through an atomic it reads before calling set_cap_ns on its own thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace haltpoll {

// What a haltpoll parameter measures, for code that checks ranges or prints units.
enum class HaltpollParamKind : std::uint8_t { ns, factor, flag };

// The one table of the kernel's module parameters (drivers/cpuidle/governors/haltpoll.c), same
// names, types and defaults, in the order of that file: X(name, type, default, kind). The struct
// below, for_each_haltpoll_param and the daemon's sysfs reader and actuator are generated from it.
// guest_halt_poll_ns is the cap (ns); grow_start is the limit a growing CPU starts from (ns).
#define HALTPOLL_PARAMS(X)                              \
  X(guest_halt_poll_ns, std::uint32_t, 200000, ns)      \
  X(guest_halt_poll_grow, std::uint32_t, 2, factor)     \
  X(guest_halt_poll_shrink, std::uint32_t, 2, factor)   \
  X(guest_halt_poll_grow_start, std::uint32_t, 50000, ns) \
  X(guest_halt_poll_allow_shrink, bool, true, flag)

struct HaltpollParams {
#define HALTPOLL_PARAMS_FIELD(name, type, value, kind) type name = value;
  HALTPOLL_PARAMS(HALTPOLL_PARAMS_FIELD)
#undef HALTPOLL_PARAMS_FIELD
  friend bool operator==(const HaltpollParams&, const HaltpollParams&) = default;
};

// Calls f(name, &HaltpollParams::member, kind) for each parameter of the table, in its order, for
// code that wants the list as values rather than as a macro.
template <class F>
constexpr void for_each_haltpoll_param(F&& f) {
#define HALTPOLL_PARAMS_VISIT(name, type, value, kind) f(#name, &HaltpollParams::name, HaltpollParamKind::kind);
  HALTPOLL_PARAMS(HALTPOLL_PARAMS_VISIT)
#undef HALTPOLL_PARAMS_VISIT
}

// Knobs of the adaptive policy. The defaults were chosen on the evaluation traces (bench/tools/gen_traces,
// scripts/policy-table.sh) and are explained in docs/design.md.
struct AdaptiveParams {
  // Weight of an idle period halves after this many newer periods. Short enough to follow a phase
  // change within a few dozen wake-ups, long enough that a bimodal mix is seen as a mix.
  std::uint32_t adaptive_half_life = 32;
  // The window is recomputed (O(buckets)) after every miss and at least every this many records.
  std::uint32_t adaptive_recompute_every = 8;
  // Largest share (in per mille) of idle time the expected polling may take, hits included.
  // 1000 = no budget beyond the cap; the tuner lowers it when the CPU budget is tight.
  std::uint32_t adaptive_budget_permille = 1000;
  // A longer window must save at least this much (per mille of the current cost) before the
  // policy moves to it; a little hysteresis keeps the window from flapping between two near-equal
  // candidates.
  std::uint32_t adaptive_hysteresis_permille = 10;
};

struct PolicyParams {
  HaltpollParams haltpoll;
  // What a miss (poll timed out, the worker parked, the wake-up went through the futex) costs
  // beyond the polling itself, in CPU-equivalent ns. The pool measures it; 30 µs is a KVM guest.
  std::uint64_t miss_cost_ns = 30000;
  AdaptiveParams adaptive;
};

// Sets one parameter by name ("guest_halt_poll_ns", ..., "miss_cost_ns", "adaptive_half_life", ...)
// from its text form; bools accept Y/N, 1/0, true/false. Throws std::invalid_argument naming the key
// and the reason (unknown key, not a number, out of range).
void set_policy_param(PolicyParams& params, std::string_view key, std::string_view value);
// The names set_policy_param accepts, in documentation order.
std::vector<std::string> policy_param_names();

class WindowPolicy {
 public:
  WindowPolicy() = default;
  WindowPolicy(const WindowPolicy&) = delete;
  WindowPolicy& operator=(const WindowPolicy&) = delete;
  virtual ~WindowPolicy() = default;

  // Window to poll for in the next idle period, ns (0 = park at once).
  virtual std::uint64_t window_ns() const noexcept = 0;
  // One idle period ended: it lasted idle_ns and was polled with window_ns (hit iff idle_ns <= window_ns).
  virtual void record(std::uint64_t idle_ns, std::uint64_t window_ns) noexcept = 0;
  // Upper bound on the window (the pool's cap; for "haltpoll" it is guest_halt_poll_ns).
  virtual void set_cap_ns(std::uint64_t cap_ns) noexcept = 0;
  virtual std::uint64_t cap_ns() const noexcept = 0;
  // The measured miss cost changed (only cost-aware policies use it).
  virtual void set_miss_cost_ns(std::uint64_t) noexcept {}
  // The length of the coming idle period (only "oracle" uses it).
  virtual void hint_next_idle_ns(std::uint64_t) noexcept {}
  virtual const char* name() const noexcept = 0;
  // All haltpoll module parameters at once (cap, grow, shrink, grow_start, allow_shrink), as a
  // write to /sys/module/haltpoll/parameters does: "haltpoll" keeps its per-CPU limit and applies
  // them at its next adjustment; the other policies take the cap only. Last in the class, so that
  // the slots of the functions above stay where they were.
  virtual void set_haltpoll_params(const HaltpollParams& p) noexcept { set_cap_ns(p.guest_halt_poll_ns); }
};

// The branch the kernel's adjust_poll_limit takes for a halt of block_ns at per-CPU limit
// `limit_ns`: the tracepoint power:guest_halt_poll_ns fires on grow and shrink, also when the value
// does not change.
enum class HaltpollBranch : std::uint8_t { none, grow, shrink };
constexpr HaltpollBranch haltpoll_branch(std::uint64_t limit_ns, std::uint64_t block_ns,
                                         const HaltpollParams& p) noexcept {
  if (block_ns > limit_ns && block_ns <= p.guest_halt_poll_ns) return HaltpollBranch::grow;
  if (block_ns > p.guest_halt_poll_ns && p.guest_halt_poll_allow_shrink) return HaltpollBranch::shrink;
  return HaltpollBranch::none;
}

// spec: "haltpoll" | "adaptive" | "static:<ns>" | "oracle". Throws std::invalid_argument.
std::unique_ptr<WindowPolicy> make_window_policy(std::string_view spec, const PolicyParams& params = {});

// One per worker; owns its policy.
class WindowGovernor {
 public:
  explicit WindowGovernor(std::unique_ptr<WindowPolicy> p);
  explicit WindowGovernor(std::string_view spec, const PolicyParams& params = {});

  std::uint64_t window_ns() const noexcept { return policy_->window_ns(); }
  void record(std::uint64_t idle_ns, std::uint64_t window_ns) noexcept { policy_->record(idle_ns, window_ns); }
  void set_cap_ns(std::uint64_t cap_ns) noexcept { policy_->set_cap_ns(cap_ns); }
  void set_miss_cost_ns(std::uint64_t miss_cost_ns) noexcept { policy_->set_miss_cost_ns(miss_cost_ns); }
  void set_haltpoll_params(const HaltpollParams& p) noexcept { policy_->set_haltpoll_params(p); }
  void hint_next_idle_ns(std::uint64_t idle_ns) noexcept { policy_->hint_next_idle_ns(idle_ns); }
  const WindowPolicy& policy() const noexcept { return *policy_; }

 private:
  std::unique_ptr<WindowPolicy> policy_;
};

}  // namespace haltpoll
