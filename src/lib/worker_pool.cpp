#include "haltpoll/worker_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <ctime>
#include <latch>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include "haltpoll/affinity.hpp"
#include "haltpoll/clock.hpp"
#include "haltpoll/detail/parking_queue.hpp"
#include "haltpoll/snapshot.hpp"
#include "haltpoll/thread_signals.hpp"

namespace haltpoll {

namespace {

constexpr auto relaxed = std::memory_order_relaxed;

void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
  counter.store(counter.load(relaxed) + by, relaxed);
}

std::uint64_t sat_sub(std::uint64_t a, std::uint64_t b) noexcept { return a > b ? a - b : 0; }

// Heap-allocated per submit, except the one in each worker's queue line (the slot), which is
// reused: claimed by a submitter, released by the worker after the task ran.
struct TaskNode {
  TaskNode* next = nullptr;
  std::int64_t submit_ns = 0;
  Task task;
};

enum StopState : std::uint32_t { running = 0, stop_drain = 1, stop_cancel = 2 };

// Empty string on success.
std::string pin_self_to(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return "cpu number out of range";
  const std::error_code ec = pin_this_thread(cpu);
  return ec ? ec.message() : std::string{};
}

}  // namespace

// Line layout: the queue (queue head, park state and slot bit in one word, polled by the worker,
// then the slot node) starting a line of its own; submitters' in-flight count on another, so that
// a single submitter keeps it in its cache; the worker-written statistics follow.
using TaskQueue = detail::ParkingMpscQueue<TaskNode>;

struct WorkerPool::Worker {
  int cpu = -1;
  std::uint32_t latency_sample_every = 1;  // a copy of the option, for raw_stats()
  alignas(64) TaskQueue queue;
  alignas(64) std::atomic<std::uint32_t> inflight_submits{0};
  alignas(64) std::atomic<std::uint32_t> stop{running};
  std::unique_ptr<WindowGovernor> governor;  // built by the constructor, used by the worker only

  // Pushed (once) by shutdown to wake the worker without a task; never run, never deleted.
  TaskNode wake_node;

  // Written by the worker only: the table's `worker` counters, and the park algorithm's.
  detail::ParkCounters park_counters;
#define HALTPOLL_ATOMIC_worker(name) std::atomic<std::uint64_t> name{0};
#define HALTPOLL_ATOMIC_park(name)
#define HALTPOLL_ATOMIC(name, kind, source, help) HALTPOLL_ATOMIC_##source(name)
  HALTPOLL_WORKER_COUNTERS(HALTPOLL_ATOMIC)
#undef HALTPOLL_ATOMIC
#undef HALTPOLL_ATOMIC_park
#undef HALTPOLL_ATOMIC_worker
  LatencyHistogram latency;

  // Set before the start latch opens, constant afterwards. `id` is what shutdown() compares the
  // caller with: reading `thread` itself would race with another thread's join().
  std::string pin_error;
  pthread_t handle{};
  std::thread::id id;
  std::thread thread;

  // Reader side: the values at the last reset_stats(), guarded by Shared::reset_mutex for writers.
  // Readers copy it under the same mutex; the worker never touches it.
  WorkerStats baseline;

  // A node the worker (or shutdown, after it) is done with: the slot is emptied (the task's
  // captures destroyed) and handed back to submitters, a heap node freed.
  void dispose(TaskNode* node) noexcept {
    if (queue.is_slot(node)) {
      node->task = nullptr;
      queue.release_slot();
      bump(slot_tasks);
    } else {
      delete node;
    }
  }

  WorkerStats raw_stats() const {
    WorkerStats s;
    s.cpu = cpu;
    switch (queue.consumer_state()) {
      case TaskQueue::ConsumerState::polling: s.state = WorkerState::polling; break;
      case TaskQueue::ConsumerState::parked: s.state = WorkerState::parked; break;
      case TaskQueue::ConsumerState::running: s.state = WorkerState::running; break;
    }
#define HALTPOLL_READ_worker(name) s.name = name.load(relaxed);
#define HALTPOLL_READ_park(name) s.name = park_counters.name.load(relaxed);
#define HALTPOLL_READ(name, kind, source, help) HALTPOLL_READ_##source(name)
    HALTPOLL_WORKER_COUNTERS(HALTPOLL_READ)
#undef HALTPOLL_READ
#undef HALTPOLL_READ_park
#undef HALTPOLL_READ_worker
    s.latency_sample_every = latency_sample_every;
    s.latency = latency;
    return s;
  }
};

// What the control plane may change while the workers run. Workers notice a new value through
// the snapshot's version counter (one acquire load per park) and read it under a hazard guard.
struct PoolTuning {
  std::uint64_t window_cap_ns = 0;
  std::string policy;
  PolicyParams params;
  std::uint64_t policy_generation = 0;  // bumped by set_policy: the workers rebuild their governors
};

struct WorkerPool::Shared {
  explicit Shared(PoolOptions o)
      : options(std::move(o)),
        tuning(std::make_unique<PoolTuning>(PoolTuning{options.window_cap_ns, options.policy, options.params, 0})) {}

  PoolOptions options;
  Snapshot<PoolTuning> tuning;
  // Read by every submit (with `options`): apart from the lines written on every submit(Task) or
  // stats() call.
  std::vector<std::unique_ptr<Worker>> workers;  // fixed after construction
  std::atomic<bool> accepting{true};
  // Written by every submit(Task) (one RMW, from any thread): on a line of its own, or each would
  // pull the line that all submitters read `accepting` and `workers` from.
  alignas(64) std::atomic<std::uint64_t> round_robin{0};
  alignas(64) std::mutex shutdown_mutex;
  bool shut_down = false;
  // Opened once every worker has tried to pin itself. Here, not on the constructor's stack: the
  // last count_down() may still be inside its futex wake when the constructor's wait() returns,
  // and the latch must outlive that call.
  std::optional<std::latch> started;
  // Locked (written) by every stats() reader: on shutdown_mutex's line, which no submit reads.
  mutable std::mutex reset_mutex;

  Worker* find(int cpu) const noexcept {
    for (const auto& w : workers) {
      if (w->cpu == cpu) return w.get();
    }
    return nullptr;
  }

  void run_worker(Worker& w);
  // Runs a FIFO list of tasks and frees their nodes (the slot is emptied and released, the wake
  // node skipped); the first one starts at first_start_ns. Returns false if the worker must stop
  // (cancel): the rest of the list has then been destroyed unrun.
  bool run_tasks(Worker& w, TaskNode* list, std::int64_t first_start_ns) noexcept;
  SubmitOutcome submit_to(Worker& w, Task&& task);
};

bool WorkerPool::Shared::run_tasks(Worker& w, TaskNode* list, std::int64_t first_start_ns) noexcept {
  std::int64_t start = first_start_ns;
  while (list != nullptr) {
    TaskNode* node = list;
    list = node->next;
    if (node == &w.wake_node) continue;
    if (w.stop.load(std::memory_order_acquire) == stop_cancel) {
      w.dispose(node);
      bump(w.tasks_cancelled);
      continue;
    }
    // Only a stamped task (see PoolOptions::latency_sample_every) costs a clock read here.
    const bool stamped = node->submit_ns != 0;
    if (stamped && start == 0) start = monotonic_ns();
    const std::uint64_t latency = start > node->submit_ns ? static_cast<std::uint64_t>(start - node->submit_ns) : 0;
    try {
      node->task();
    } catch (...) {
      bump(w.task_exceptions);
    }
    // Recorded after the task, so that what the task hands on (a reply, the next hop) leaves first.
    if (stamped) w.latency.record(latency);
    bump(w.tasks_run);
    w.dispose(node);
    start = 0;
  }
  return w.stop.load(std::memory_order_acquire) != stop_cancel;
}

void WorkerPool::Shared::run_worker(Worker& w) {
  w.pin_error = pin_self_to(w.cpu);
  w.handle = pthread_self();
  w.id = std::this_thread::get_id();
  std::uint64_t cap = 0;
  std::uint64_t tuning_version = ~std::uint64_t{0};
  std::uint64_t policy_generation = 0;
  double miss_cost_avg = static_cast<double>(options.params.miss_cost_ns);
  std::uint64_t miss_cost_set = options.params.miss_cost_ns;
  w.miss_cost_ns.store(miss_cost_set, relaxed);
  started->count_down();

  for (;;) {
    if (TaskNode* list = w.queue.take_all()) {
      if (!run_tasks(w, list, 0)) break;
      continue;
    }
    if (w.stop.load(std::memory_order_acquire) != running) {
      // Every push happened before `stop` was set, but possibly after the take_all above:
      // look once more, and leave only when the queue is final and empty.
      if (TaskNode* list = w.queue.take_all()) {
        if (!run_tasks(w, list, 0)) break;
        continue;
      }
      break;
    }

    if (const std::uint64_t v = tuning.version(); v != tuning_version) {
      tuning_version = v;
      auto t = tuning.read();
      if (t->policy_generation != policy_generation) {
        // set_policy() validated the spec; only allocation can fail here, and then the worker
        // keeps its current governor rather than die.
        try {
          w.governor = std::make_unique<WindowGovernor>(t->policy, t->params);
          policy_generation = t->policy_generation;
          miss_cost_avg = static_cast<double>(t->params.miss_cost_ns);
          miss_cost_set = t->params.miss_cost_ns;
          w.miss_cost_ns.store(miss_cost_set, relaxed);
        } catch (...) {
        }
      }
      cap = t->window_cap_ns;
      w.governor->set_cap_ns(cap);
    }
    WindowGovernor& governor = *w.governor;
    const std::uint64_t window = std::min<std::uint64_t>({governor.window_ns(), cap, INT64_MAX});
    w.window_ns.store(window, relaxed);

    ParkInfo info;
    // No clock read after a poll hit: an unstamped task does not need one, a stamped one takes its
    // own start stamp in run_tasks.
    TaskNode* const list =
        w.queue.wait_take_all(static_cast<std::int64_t>(window), info, w.park_counters, /*stamp_hits=*/false);
    if (info.already_notified) {  // no idle period: a submit raced with the empty check
      if (!run_tasks(w, list, 0)) break;
      continue;
    }

    // The idle period ends when the work arrived (the first task's submit time), not when this
    // worker noticed: on the park path the difference is the wake-up penalty, which is the
    // governor's miss cost and must not be counted twice. (Without a task, e.g. at shutdown, the
    // wake itself is the end; so it is for an unstamped task, whose poll-hit wake time is the
    // poll's last clock reading, at most a barrier batch early.) Read here: running the tasks
    // frees their nodes.
    const bool brought_task = list != &w.wake_node;
    const bool first_stamped = brought_task && list->submit_ns != 0;
    const std::int64_t arrival = first_stamped ? detail::idle_period_end(list->submit_ns, info.start_ns, info.wake_ns)
                                               : std::max(info.wake_ns, info.start_ns);

    // Run what woke us right away, reusing the wake timestamp (when there is one) as the first
    // task's start; the bookkeeping below waits until they are done (it is not on the hand-off's path).
    if (!run_tasks(w, list, info.wake_stamped ? info.wake_ns : 0)) break;

    const auto idle = static_cast<std::uint64_t>(arrival - info.start_ns);
    const auto poll = static_cast<std::uint64_t>(std::max<std::int64_t>(info.poll_ns, 0));
    bump(w.idle_periods);
    bump(w.idle_ns, idle);
    bump(w.poll_ns, poll);
    if (info.poll_hit) {
      bump(w.poll_hits);
      // The barrier may overshoot the window a little; a hit is a hit for the governor.
      governor.record(std::min(idle, window), window);
    } else {
      // The window ran out (the worker parked, or was notified just as it was about to).
      bump(w.poll_misses);
      bump(w.wasted_poll_ns, poll);
      governor.record(std::max(idle, window + 1), window);
      if (first_stamped && info.parked) {
        const auto penalty = static_cast<std::uint64_t>(std::max<std::int64_t>(info.wake_ns - arrival, 0));
        bump(w.park_wakes);
        bump(w.park_wake_ns, penalty);
        if (options.measure_miss_cost) {
          // EWMA with weight 1/16: follows a change within a few dozen misses, ignores one slow wake.
          miss_cost_avg += (static_cast<double>(penalty) - miss_cost_avg) / 16.0;
          const auto avg = static_cast<std::uint64_t>(miss_cost_avg);
          if (avg > miss_cost_set + miss_cost_set / 8 || avg < miss_cost_set - miss_cost_set / 8) {
            miss_cost_set = avg;
            governor.set_miss_cost_ns(avg);
            w.miss_cost_ns.store(avg, relaxed);
          }
        }
      }
    }
  }
}

SubmitOutcome WorkerPool::Shared::submit_to(Worker& w, Task&& task) {
  // Once shutdown has begun, a submit must not touch the count at all: a submitter retrying in a
  // loop would otherwise keep it above zero and starve shutdown's wait for it.
  if (!accepting.load(std::memory_order_relaxed)) return SubmitOutcome::rejected;
  // Announce the submit before checking `accepting` again; shutdown() clears `accepting` and then
  // waits for the count to drop to zero. seq_cst on both sides makes this a Dekker pair: either
  // this load sees false, or shutdown sees the increment and waits for this push (and its wake).
  w.inflight_submits.fetch_add(1, std::memory_order_seq_cst);
  if (!accepting.load(std::memory_order_seq_cst)) {
    w.inflight_submits.fetch_sub(1, std::memory_order_release);
    return SubmitOutcome::rejected;
  }
  // Whether to stamp this task for the latency histogram: a count per submitting thread, so no
  // line is shared for it. The stamp comes before the claim: between the claim and the push the
  // worker's poll may pull the line away, so that window must be a few stores, not a clock read.
  thread_local std::uint32_t until_sample = 1;
  const bool sample = --until_sample == 0;
  if (sample) until_sample = options.latency_sample_every;
  std::int64_t submit_ns = sample ? monotonic_ns() : 0;
  bool parked = false;
  TaskNode* node = w.queue.try_claim_slot(&parked);
  // The first task after a park is always stamped (the park path stays fully measured); the
  // worker sleeps, so this clock read after the claim delays nobody.
  if (!sample && parked) submit_ns = monotonic_ns();
  if (node != nullptr) {
    node->submit_ns = submit_ns;
    node->task = std::move(task);  // noexcept
  } else {
    try {
      node = new TaskNode{nullptr, submit_ns, std::move(task)};
    } catch (...) {
      w.inflight_submits.fetch_sub(1, std::memory_order_release);
      throw;
    }
  }
  const WakePath path = w.queue.push(node);
  w.inflight_submits.fetch_sub(1, std::memory_order_release);
  switch (path) {
    case WakePath::poll:
      return SubmitOutcome::woke_polling;
    case WakePath::futex:
      return SubmitOutcome::woke_parked;
    case WakePath::none:
      break;
  }
  return SubmitOutcome::queued;
}

namespace {
PoolOptions validated(PoolOptions options) {
  if (options.cpus.empty()) options.cpus = affinity_cpus();
  if (options.cpus.empty()) throw std::invalid_argument("WorkerPool: no CPU to run on");
  {
    std::vector<int> sorted = options.cpus;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      throw std::invalid_argument("WorkerPool: a CPU is listed twice");
    }
  }
  if (options.latency_sample_every == 0) {
    throw std::invalid_argument("WorkerPool: latency_sample_every must be at least 1 (1 stamps every task)");
  }
  WindowGovernor check(options.policy, options.params);  // throws std::invalid_argument
  return options;
}
}  // namespace

WorkerPool::WorkerPool(PoolOptions options) : shared_(std::make_unique<Shared>(validated(std::move(options)))) {
  Shared& s = *shared_;

  for (int cpu : s.options.cpus) {
    auto w = std::make_unique<Worker>();
    w->cpu = cpu;
    w->latency_sample_every = s.options.latency_sample_every;
    // Built here so that a bad spec throws from the constructor; the thread start hands it over.
    w->governor = std::make_unique<WindowGovernor>(s.options.policy, s.options.params);
    s.workers.push_back(std::move(w));
  }
  std::latch& started = s.started.emplace(static_cast<std::ptrdiff_t>(s.workers.size()));
  std::size_t launched = 0;
  try {
    for (auto& w : s.workers) {
      Worker& ref = *w;
      ref.thread = std::thread([&s, &ref] {
        block_async_signals();  // the process's signals go to the threads that wait for them
        s.run_worker(ref);
      });
      ++launched;
    }
  } catch (...) {
    // Could not start a thread: stop the ones that did start, then report.
    for (std::size_t i = launched; i < s.workers.size(); ++i) started.count_down();
    s.accepting.store(false);
    for (std::size_t i = 0; i < launched; ++i) {
      s.workers[i]->stop.store(stop_cancel, std::memory_order_release);
      s.workers[i]->queue.push(&s.workers[i]->wake_node);
      s.workers[i]->thread.join();
    }
    throw;
  }
  started.wait();
}

WorkerPool::~WorkerPool() { shutdown(ShutdownMode::drain); }

SubmitOutcome WorkerPool::submit(int cpu, Task task) {
  Worker* w = shared_->find(cpu);
  if (w == nullptr) return SubmitOutcome::rejected;
  return shared_->submit_to(*w, std::move(task));
}

SubmitOutcome WorkerPool::submit(Task task) {
  auto& workers = shared_->workers;
  const std::size_t n = workers.size();
  const std::size_t first = static_cast<std::size_t>(shared_->round_robin.fetch_add(1, relaxed) % n);
  for (std::size_t i = 0; i < n; ++i) {
    Worker& w = *workers[(first + i) % n];
    if (w.queue.consumer_state() == TaskQueue::ConsumerState::polling) return shared_->submit_to(w, std::move(task));
  }
  return shared_->submit_to(*workers[first], std::move(task));
}

std::vector<int> WorkerPool::cpus() const {
  std::vector<int> out;
  for (const auto& w : shared_->workers) out.push_back(w->cpu);
  return out;
}

std::vector<std::pair<int, std::string>> WorkerPool::pin_failures() const {
  std::vector<std::pair<int, std::string>> out;
  for (const auto& w : shared_->workers) {
    if (!w->pin_error.empty()) {
      out.emplace_back(w->cpu, w->pin_error);
      continue;
    }
    // Pinned at start, but a CPU that goes offline takes its threads' pinning with it: the kernel
    // moves a thread whose affinity holds no online CPU to its cpuset's CPUs (and says "no longer
    // affine to cpuN"), and does not pin it back when the CPU returns. Read again on every call.
    cpu_set_t set;
    CPU_ZERO(&set);
    if (!w->thread.joinable() || pthread_getaffinity_np(w->handle, sizeof(set), &set) != 0) continue;
    if (CPU_COUNT(&set) == 1 && CPU_ISSET(w->cpu, &set)) continue;
    std::string cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &set)) continue;
      int last = c;
      while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
      // append() rather than chains of operator+: GCC 12 -O2 reports a false -Wrestrict on those.
      if (!cpus.empty()) cpus.append(",");
      cpus.append(std::to_string(c));
      if (last > c) cpus.append("-").append(std::to_string(last));
      c = last;
    }
    std::string why = "no longer pinned: its affinity is now CPUs ";
    why.append(cpus).append(" (the CPU went offline and the kernel moved the thread)");
    out.emplace_back(w->cpu, std::move(why));
  }
  return out;
}

WorkerStats WorkerPool::stats(int cpu) const {
  const Worker* w = shared_->find(cpu);
  if (w == nullptr) throw std::out_of_range("WorkerPool::stats: no worker on cpu " + std::to_string(cpu));
  WorkerStats s = w->raw_stats();
  std::lock_guard lock(shared_->reset_mutex);
  const WorkerStats& b = w->baseline;
  // Counters count from the last reset; gauges are current values.
#define HALTPOLL_SINCE_RESET_counter(name) s.name = sat_sub(s.name, b.name);
#define HALTPOLL_SINCE_RESET_gauge(name)
#define HALTPOLL_SINCE_RESET(name, kind, source, help) HALTPOLL_SINCE_RESET_##kind(name)
  HALTPOLL_WORKER_COUNTERS(HALTPOLL_SINCE_RESET)
#undef HALTPOLL_SINCE_RESET
#undef HALTPOLL_SINCE_RESET_gauge
#undef HALTPOLL_SINCE_RESET_counter
  s.latency.subtract(b.latency);
  return s;
}

std::vector<WorkerStats> WorkerPool::all_stats() const {
  std::vector<WorkerStats> out;
  out.reserve(shared_->workers.size());
  for (const auto& w : shared_->workers) out.push_back(stats(w->cpu));
  return out;
}

void WorkerPool::reset_stats() {
  std::lock_guard lock(shared_->reset_mutex);
  for (auto& w : shared_->workers) w->baseline = w->raw_stats();
}

std::uint64_t WorkerPool::thread_cpu_ns(int cpu) const {
  const Worker* w = shared_->find(cpu);
  if (w == nullptr) throw std::out_of_range("WorkerPool::thread_cpu_ns: no worker on cpu " + std::to_string(cpu));
  clockid_t id;
  timespec ts{};
  // After shutdown the thread is gone and its clock with it: report 0 rather than fail.
  if (!w->thread.joinable() || pthread_getcpuclockid(w->handle, &id) != 0 || clock_gettime(id, &ts) != 0) return 0;
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

void WorkerPool::set_window_cap_ns(std::uint64_t cap_ns) {
  shared_->tuning.update([cap_ns](PoolTuning& t) { t.window_cap_ns = cap_ns; });
}
std::uint64_t WorkerPool::window_cap_ns() const { return shared_->tuning.read()->window_cap_ns; }

void WorkerPool::set_policy(std::string_view policy, const PolicyParams& params) {
  WindowGovernor check(policy, params);  // throws std::invalid_argument, before anything changes
  shared_->tuning.update([&](PoolTuning& t) {
    t.policy = std::string(policy);
    t.params = params;
    ++t.policy_generation;
  });
}
std::string WorkerPool::policy() const { return shared_->tuning.read()->policy; }
PolicyParams WorkerPool::policy_params() const { return shared_->tuning.read()->params; }

void WorkerPool::shutdown(ShutdownMode mode) {
  Shared& s = *shared_;
  // Before the mutex: while another thread holds it, it is joining this very worker, so a task
  // that waited for it would never return (a deadlock instead of an error).
  const auto self = std::this_thread::get_id();
  for (const auto& w : s.workers) {
    if (w->id == self) throw std::logic_error("WorkerPool::shutdown called from one of its own tasks");
  }
  std::lock_guard lock(s.shutdown_mutex);
  if (s.shut_down) return;
  s.accepting.store(false, std::memory_order_seq_cst);
  for (auto& w : s.workers) {
    // Submitters that got past the `accepting` check finish their push (and its wake); after this
    // no node can enter the queue any more.
    while (w->inflight_submits.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    w->stop.store(mode == ShutdownMode::cancel ? stop_cancel : stop_drain, std::memory_order_release);
    w->queue.push(&w->wake_node);
  }
  for (auto& w : s.workers) {
    w->thread.join();
    // cancel: the worker left whatever was still queued; destroy it here, unrun.
    while (TaskNode* list = w->queue.take_all()) {
      while (list != nullptr) {
        TaskNode* next = list->next;
        if (list != &w->wake_node) {
          w->dispose(list);
          bump(w->tasks_cancelled);
        }
        list = next;
      }
    }
  }
  s.shut_down = true;
}

}  // namespace haltpoll
