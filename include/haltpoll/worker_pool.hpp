// WorkerPool: one worker thread per CPU, pinned, each with its own task queue, Parker and window
// governor. A task submitted to a worker that is polling starts after a cache-line hand-off; one
// submitted to a parked worker pays a futex wake. Each worker learns how long to poll from its
// own idle periods (WindowGovernor), bounded by a cap that can be changed at run time.
//
// Worker loop: take every queued task and run them in submission order, recording submit→start
// latency; when the queue is empty, poll for min(governor window, cap) and then park; tell the
// governor how long the idle period lasted (park to the submit time of the task that ended it)
// and whether the poll hit; on the park path, measure the wake-up penalty (the miss cost).
//
// Concurrency contract:
//  - submit() may be called from any thread, including from tasks; it never blocks.
//  - Everything the submitter wrote before submit() happens-before the task starts (the queue's
//    release push / acquire take, backed by the Parker's own release/acquire pair). Tasks on one
//    worker run one at a time, in the order their pushes took effect; none between workers.
//  - Statistics are written only by their worker (relaxed single-writer atomics) and may be read by
//    any thread at any time without locks; a read is a consistent-enough snapshot (each counter is
//    exact, counters may be from slightly different instants). reset_stats() keeps a baseline on the
//    reader side, so the workers never see it.
//  - shutdown() called from one of the pool's own tasks throws std::logic_error (also while another
//    thread is shutting the pool down); the destructor, which cannot throw, then terminates the
//    process. thread_cpu_ns() must not run concurrently with shutdown.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "haltpoll/governor.hpp"
#include "haltpoll/latency_histogram.hpp"
#include "haltpoll/unique_function.hpp"

namespace haltpoll {

using Task = UniqueFunction<void()>;

struct PoolOptions {
  // CPUs to run a worker on. Empty = every CPU of the calling thread's affinity mask
  // (sched_getaffinity), which follows cgroup cpusets and taskset.
  std::vector<int> cpus;
  // Window policy of every worker: "haltpoll" | "adaptive" | "static:<ns>" (see governor.hpp).
  std::string policy = "adaptive";
  PolicyParams params;
  // Upper bound on any worker's poll window, ns. 200 µs is the kernel's guest_halt_poll_ns default.
  std::uint64_t window_cap_ns = 200000;
  // Feed each worker's governor the park-path wake penalty it measures (an average of wake time
  // minus submit time over its futex wakes) as the miss cost, instead of params.miss_cost_ns,
  // which then only seeds the average. The penalty depends on the machine (≈ 10-60 µs on a KVM
  // guest without host polling, a few µs on bare metal), so measuring beats guessing.
  bool measure_miss_cost = true;
  // The submit→start histogram stamps one task in this many per submitting thread (1 = every
  // task), and always the first task after a park, so that the park path (the wake penalty and
  // the miss cost learnt from it) stays fully measured. Each stamp is two ordered clock reads on
  // the hand-off's path, as much as a whole cache-line hand-off on a fast host (docs/performance.md);
  // one in 16 keeps a p50/p99 over any busy second and costs ~6 % of that. Counters stay exact.
  // Must be >= 1 (std::invalid_argument).
  std::uint32_t latency_sample_every = 16;
};

enum class SubmitOutcome : std::uint8_t {
  rejected,      // the pool is shutting down, or there is no worker for that CPU
  queued,        // the worker was running (or already notified): it will find the task itself
  woke_polling,  // the worker was polling: no system call
  woke_parked,   // the worker was parked: FUTEX_WAKE
};

enum class ShutdownMode : std::uint8_t {
  // Every task accepted before shutdown() began runs to completion; submit() is rejected from the
  // moment shutdown() begins (this includes tasks submitted by the tasks being drained).
  drain,
  // Tasks already running finish; tasks still queued are destroyed without running (counted in
  // tasks_cancelled); submit() is rejected from the moment shutdown() begins.
  cancel,
};

enum class WorkerState : std::uint8_t { running, polling, parked };

// The worker's counters, declared once: X(name, kind, source, help). Everything that lists them
// (the worker's atomics, the snapshot in stats(), reset_stats()'s baseline, and exporters such as
// the daemon's GetStats and Prometheus output) is generated from this table.
//   kind    counter  only grows; reset_stats() subtracts its value at the reset (Prometheus counter)
//           gauge    a current value, never reset (Prometheus gauge)
//   source  worker   a relaxed single-writer atomic of the worker
//           park     the worker's detail::ParkCounters (written by the park algorithm)
// All are std::uint64_t.
#define HALTPOLL_WORKER_COUNTERS(X)                                                                         \
  X(tasks_run, counter, worker, "tasks run")                                                                \
  X(slot_tasks, counter, worker, "tasks (run or cancelled) that came in the worker's inline slot: no allocation") \
  X(task_exceptions, counter, worker, "tasks that threw (caught; the worker carries on)")                  \
  X(tasks_cancelled, counter, worker, "tasks destroyed unrun by shutdown(cancel)")                         \
  X(idle_periods, counter, worker, "parks that waited (poll_hits + poll_misses)")                          \
  X(poll_hits, counter, worker, "idle periods whose wake came while polling")                              \
  X(poll_misses, counter, worker, "idle periods whose window ran out: the worker parked (or was notified just then)") \
  X(futex_waits, counter, park, "FUTEX_WAIT calls (>= poll_misses: spurious wakes)")                       \
  X(futex_errors, counter, park, "FUTEX_WAITs that failed with EPERM, ENOSYS, ... (the worker backs off, see Parker)") \
  X(wakes_without_syscall, counter, park, "submitters that found the worker polling")                      \
  X(poll_ns, counter, worker, "time spent polling, hits and misses, ns")                                   \
  X(wasted_poll_ns, counter, worker, "polling that ended in a park, ns")                                   \
  X(idle_ns, counter, worker, "total length of the idle periods, ns")                                      \
  X(window_ns, gauge, worker, "the window of the worker's latest park, ns")                                \
  X(park_wakes, counter, worker,                                                                            \
    "wakes on the park path (the waker called FUTEX_WAKE) that brought a stamped task: all of them but for " \
    "a park racing the submit's claim")                                                                     \
  X(park_wake_ns, counter, worker, "their total wake-up penalty (wake time - submit time), ns")            \
  X(miss_cost_ns, gauge, worker, "the miss cost the governor uses now, ns")

struct WorkerStats {
  int cpu = -1;
  WorkerState state = WorkerState::running;  // at the time of reading (a hint, for live views)
#define HALTPOLL_WORKER_STATS_FIELD(name, kind, source, help) std::uint64_t name = 0;
  HALTPOLL_WORKER_COUNTERS(HALTPOLL_WORKER_STATS_FIELD)
#undef HALTPOLL_WORKER_STATS_FIELD
  std::uint32_t latency_sample_every = 1;  // PoolOptions::latency_sample_every: `latency` holds a sample
  LatencyHistogram latency;           // submit→start, ns, of the stamped tasks (latency.count() of tasks_run)
};

namespace detail {
// When an idle period that began at start_ns and was seen to end at wake_ns really ended: when the
// work arrived (submit_ns), kept within the period. An unpinned worker can read start and wake on
// two CPUs whose counters disagree, so wake_ns may be the earlier; std::clamp would then be
// undefined, and a negative idle period would wrap to ~2^64 ns in the statistics.
inline std::int64_t idle_period_end(std::int64_t submit_ns, std::int64_t start_ns, std::int64_t wake_ns) noexcept {
  const std::int64_t last = wake_ns > start_ns ? wake_ns : start_ns;
  return submit_ns < start_ns ? start_ns : submit_ns > last ? last : submit_ns;
}
}  // namespace detail

class WorkerPool {
 public:
  // Starts and pins the workers; returns once every worker has tried to pin itself.
  // Throws std::invalid_argument for a bad policy spec, an empty or duplicated CPU list.
  explicit WorkerPool(PoolOptions options = {});
  ~WorkerPool();  // shutdown(ShutdownMode::drain)
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs task on the worker of `cpu`. The task's exceptions are caught and counted.
  SubmitOutcome submit(int cpu, Task task);
  // Picks a worker: a polling one if there is one (cheapest wake), else round robin.
  SubmitOutcome submit(Task task);

  std::vector<int> cpus() const;
  // CPUs whose worker could not be pinned, with the reason; those workers run unpinned. Also, read
  // anew on each call, workers pinned at start whose affinity is no longer their CPU alone: when a
  // CPU goes offline the kernel moves its pinned threads to other CPUs and leaves them unpinned.
  std::vector<std::pair<int, std::string>> pin_failures() const;

  // Throws std::out_of_range for a CPU without a worker.
  WorkerStats stats(int cpu) const;
  std::vector<WorkerStats> all_stats() const;
  void reset_stats();
  // CPU time consumed by the worker thread of `cpu` so far (CLOCK of pthread_getcpuclockid), ns.
  std::uint64_t thread_cpu_ns(int cpu) const;

  // Both take effect at each worker's next park (published as a hazard-pointer Snapshot; the
  // workers never lock). They may block for a moment while a worker finishes reading the old
  // value, so call them from the control plane, not from a task.
  void set_window_cap_ns(std::uint64_t cap_ns);
  std::uint64_t window_cap_ns() const;
  // Switches every worker to a new policy or new parameters; each rebuilds its governor, which
  // forgets what it had learned. Throws std::invalid_argument (and changes nothing) for a bad spec.
  void set_policy(std::string_view policy, const PolicyParams& params);
  std::string policy() const;
  PolicyParams policy_params() const;

  // Idempotent; the first call decides the mode. Returns once every worker thread has exited.
  void shutdown(ShutdownMode mode);

 private:
  struct Worker;
  struct Shared;
  std::unique_ptr<Shared> shared_;
};

}  // namespace haltpoll
