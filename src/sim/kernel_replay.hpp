// Kernel replay: the library's haltpoll model checked against the kernel's own decisions.
//
// A kernel idle recording (`haltpolld record`, or `perf script` of power:cpu_idle and
// power:guest_halt_poll_ns reduced to the same text) holds, per CPU and in time order, every idle
// residency (`cpu POLL|halt ns`) and every adjustment the governor made (`# limit cpu old new
// grow|shrink`). The kernel adjusts a CPU's limit after every halt, with the halt's residency as
// `block_ns` (drivers/cpuidle/governors/haltpoll.c: haltpoll_reflect → adjust_poll_limit), and
// fires the tracepoint on every grow or shrink branch it takes, also when the value stays. The
// replay drives one haltpoll::WindowGovernor("haltpoll") per CPU with the same halts, emits an
// event wherever the model takes a branch, and aligns the two event sequences per CPU (longest
// common subsequence, so one lost or extra event costs one, not everything after it).
//
// Two agreement figures:
//   aligned   — the model runs free from the recording's first state; LCS / kernel events;
//   one_step  — before each halt the model is set to the kernel's limit; the share of halts after
//               which model and kernel take the same branch to the same value. It isolates the
//               rule from the divergence one early disagreement causes in a free run.
// Pure: text in, counts out; single-threaded.
#pragma once

#include "haltpoll/governor.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace haltpolld {

struct LimitEvent {
  std::uint32_t old_ns = 0;
  std::uint32_t new_ns = 0;
  bool grow = false;
  friend bool operator==(const LimitEvent&, const LimitEvent&) = default;
};

struct KernelRecording {
  struct Cpu {
    // One entry per halt, in order: its residency and the kernel's event after it (if any).
    struct Halt {
      std::uint64_t block_ns = 0;
      bool has_event = false;
      LimitEvent event;
    };
    std::vector<Halt> halts;
    std::vector<LimitEvent> events;  // every limit event, in order (also those before the first halt)
    std::uint64_t polls = 0;
    // Idle periods in order: a poll that timed out and its halt are one period (poll + halt).
    std::vector<std::uint64_t> periods;
  };
  std::map<int, Cpu> cpus;
  // From a `# haltpoll key=value ...` header when present, else the defaults with the cap given.
  haltpoll::HaltpollParams params;
  bool params_from_header = false;
};

// Reads a recording; throws TraceError (sim/simulate.hpp) on a malformed line. `cap_ns` is the
// guest_halt_poll_ns in force when the file has no header.
KernelRecording read_kernel_recording(std::istream& in, std::uint32_t cap_ns);

struct ReplayAgreement {
  std::uint64_t kernel_events = 0;
  std::uint64_t model_events = 0;
  std::uint64_t aligned = 0;          // LCS of the two sequences, summed over CPUs
  std::uint64_t halts = 0;
  std::uint64_t one_step_same = 0;    // halts after which model and kernel did the same thing
  std::uint64_t near_cap_disagreements = 0;  // one-step misses whose block_ns was within 1 µs of a threshold
  double aligned_ratio() const noexcept {
    return kernel_events ? static_cast<double>(aligned) / static_cast<double>(std::max(kernel_events, model_events)) : 1.0;
  }
  double one_step_ratio() const noexcept {
    return halts ? static_cast<double>(one_step_same) / static_cast<double>(halts) : 1.0;
  }
};

// `residency_bias_ns` is subtracted from every recorded halt residency before it reaches the model
// (tracepoint timestamps frame the kernel's own measurement from outside).
ReplayAgreement replay_against_kernel(const KernelRecording& rec, std::int64_t residency_bias_ns = 0);

// True when `head` (the first lines of a file) looks like a kernel recording rather than a plain
// duration trace: a `cpu POLL|halt ns` line or a `# limit` / `# haltpoll` line.
bool looks_like_kernel_recording(const std::string& head);

// `haltpolld simulate --policy haltpoll` on a recording: the agreement as JSON.
nlohmann::ordered_json to_json(const ReplayAgreement& a, const KernelRecording& rec, std::int64_t residency_bias_ns);

// Length of the longest common subsequence (Myers' O((N+M)·D) algorithm).
std::uint64_t lcs_length(const std::vector<LimitEvent>& a, const std::vector<LimitEvent>& b);

}  // namespace haltpolld
