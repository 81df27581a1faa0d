// IdleTrace: the kernel's own view of every CPU's idle periods, from an eBPF program on the
// tracepoints power:cpu_idle, power:guest_halt_poll_ns and sched:sched_wake_idle_without_ipi.
// The program aggregates in kernel maps (counters, and log-linear histograms with the bucket scheme
// of haltpoll::LatencyHistogram, per CPU and outcome); nothing per event crosses into user space
// unless record mode is on. read() copies the maps into a snapshot of CUMULATIVE values since
// open(); the caller diffs two snapshots per tick (IdleCpuStats::minus).
//
// Outcomes, per CPU, decided by the sequence of idle states (the haltpoll governor halts right
// after a poll only when that poll timed out): a POLL period followed by another POLL entry is a
// poll hit; a POLL period followed by a halt is a poll timeout, and the two together form one
// poll-then-halt period; a halt not preceded by a poll is a plain halt. A poll's outcome is known
// at the CPU's next idle entry, so each snapshot may leave one poll per CPU undecided. "Halt" is any
// non-POLL state (the "haltpoll idle" state with the cpuidle-haltpoll driver).
//
// Absence is an error state, never an exception: open() returns nullptr and says why ("kernel
// signals unavailable (EPERM): ..."), and a missing optional tracepoint (guest_halt_poll_ns,
// sched_wake_idle_without_ipi) leaves an IdleTrace without that signal, listed in missing().
// Without HALTPOLL_BUILD_BPF the same API is compiled from idle_trace_fallback.cpp and open()
// always reports "built without eBPF support".
//
// Thread contract: open() and the destructor from one thread; read(), status(), missing() and
// consume() are const and may be called from any one thread at a time (they share the record
// callback state). The kernel writes each CPU's counters inside a sequence count and read() retries
// a CPU whose copy raced with an update, so each CPU's values in a snapshot are mutually consistent
// (histogram totals equal the counters), except on weakly ordered CPUs where the one event in
// progress may be torn (idle_trace_abi.h).
#pragma once

#include <haltpoll/latency_histogram.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

struct IdleTraceOptions {
  // Where cpuidle's state names are read (the POLL state's index); a fake root in tests.
  std::string sysfs_root = "/sys";
  enum class Attach { automatic, tp_btf, raw_tp };
  // automatic: tp_btf where the kernel's BTF describes the tracepoint, else raw_tp; forcing one is
  // for tests.
  Attach attach = Attach::automatic;
  // Record mode: the program also writes every idle period and limit change into a ring buffer of
  // this many bytes (a power of two), drained with consume(). 0 = off.
  std::size_t record_ring_bytes = 0;
};

// One CPU's cumulative values.
struct IdleCpuStats {
  unsigned cpu = 0;
  std::uint64_t idle_entries = 0;   // every idle entry
  std::uint64_t poll_entries = 0;   // entries into POLL
  std::uint64_t poll_hits = 0;      // polls ended by a wake-up
  std::uint64_t poll_timeouts = 0;  // polls followed by a halt
  std::uint64_t halts = 0;          // halt exits (any non-POLL state)
  std::uint64_t poll_ns = 0;        // POLL residency
  std::uint64_t halt_ns = 0;        // halt residency
  std::uint64_t ipi_skipped = 0;    // remote wake-ups of this CPU that needed no IPI (it was polling)
  std::optional<std::uint32_t> poll_limit_ns;  // the governor's per-CPU limit; unknown until its first event
  std::uint64_t limit_events = 0;   // power:guest_halt_poll_ns events: grows + shrinks
  std::uint64_t grows = 0;
  std::uint64_t shrinks = 0;
  std::uint64_t unmatched = 0;      // exits without an entry or entries without an exit (attach mid-period)
  haltpoll::LatencyHistogram poll_hit;        // POLL residency of a poll hit
  haltpoll::LatencyHistogram poll_halt;       // POLL + halt residency of a poll that timed out
  haltpoll::LatencyHistogram halt;            // residency of a halt without a poll before it
  haltpoll::LatencyHistogram halt_residency;  // every halt's residency

  // This minus an earlier snapshot of the same CPU (counters and histograms; poll_limit_ns is this one's).
  IdleCpuStats minus(const IdleCpuStats& earlier) const;
  // Adds another CPU's values (poll_limit_ns: the larger known one).
  void add(const IdleCpuStats& other);
};

struct IdleTraceSnapshot {
  std::uint64_t taken_ns = 0;  // CLOCK_MONOTONIC, the clock of the program's timestamps
  std::vector<IdleCpuStats> cpus;  // one per possible CPU, index = CPU number
  std::uint64_t torn_reads = 0;    // CPUs whose copy still raced with the kernel after the retries
  IdleCpuStats total() const;      // all CPUs added (cpu = 0)
};

// One record-mode event (see docs/kernel-signals.md for the text format `haltpolld record` writes).
struct IdleRecord {
  enum class Kind : std::uint8_t { poll, halt, limit };
  Kind kind = Kind::halt;
  unsigned cpu = 0;
  std::uint64_t ts_ns = 0;         // CLOCK_MONOTONIC at the period's end or the limit change
  std::uint64_t residency_ns = 0;  // poll, halt
  std::uint32_t old_ns = 0, new_ns = 0;  // limit
  bool grow = false;                      // limit
};

class IdleTrace {
 public:
  // nullptr on failure, with *why_not (if given) saying which signal is missing and why. Never throws.
  static std::unique_ptr<IdleTrace> open(const IdleTraceOptions& options, std::string* why_not) noexcept;
  ~IdleTrace();
  IdleTrace(const IdleTrace&) = delete;
  IdleTrace& operator=(const IdleTrace&) = delete;

  // Cumulative values since open(). Throws nothing but std::bad_alloc.
  IdleTraceSnapshot read() const;
  // Which program attached how ("cpu_idle: tp_btf; guest_halt_poll_ns: tp_btf; ..."), the POLL
  // state's index, and what failed.
  const std::string& status() const noexcept;
  // One line per missing optional signal ("power:guest_halt_poll_ns: attach failed (ENOENT)").
  const std::vector<std::string>& missing() const noexcept;
  unsigned possible_cpus() const noexcept;
  // The cpuidle index of POLL, if the driver has one.
  std::optional<unsigned> poll_state() const noexcept;

  // The file descriptor of the loaded program for a tracepoint ("cpu_idle", "guest_halt_poll_ns",
  // "sched_wake_idle_without_ipi"), or -1: for tests and benchmarks that run it through
  // BPF_PROG_TEST_RUN (possible for the raw_tp programs). Owned by the IdleTrace.
  int program_fd(const std::string& tracepoint) const noexcept;

  // Detaches the programs (then the idle path pays nothing and the counters, histograms and
  // limits stop moving) or attaches again the ones open() attached. Attaching forgets every CPU's
  // period in progress and its last known limit (both may have changed unseen): the first exit on
  // each CPU counts as unmatched and the limit is unknown until the governor's next event.
  // Returns 0, or -errno of the first program that failed to attach (the others are attached).
  // Call it from the thread that calls read().
  int set_attached(bool on) noexcept;
  bool attached() const noexcept;

  // Record mode only: hands every record written since the last call to `sink`, in ring order (per
  // CPU in time order; across CPUs in the order the periods ended, within the reservation race).
  // Returns the number of records, or -errno. The sink must not throw.
  long consume(const std::function<void(const IdleRecord&)>& sink) const;
  // Records the ring buffer had no room for.
  std::uint64_t records_dropped() const noexcept;

  struct Impl;

 private:
  explicit IdleTrace(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

// False when the library was built without eBPF (then IdleTrace::open always fails).
bool idle_trace_built_with_bpf() noexcept;

}  // namespace haltpolld
