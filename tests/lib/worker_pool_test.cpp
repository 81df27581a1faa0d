#include <catch2/catch.hpp>

#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "haltpoll/affinity.hpp"
#include "haltpoll/unique_function.hpp"
#include "haltpoll/worker_pool.hpp"

using haltpoll::PoolOptions;
using haltpoll::ShutdownMode;
using haltpoll::SubmitOutcome;
using haltpoll::Task;
using haltpoll::UniqueFunction;
using haltpoll::WorkerPool;
using haltpoll::WorkerStats;
using namespace std::chrono_literals;

namespace {

// The deadline only bounds a failing run: qemu-user at -O0 on a loaded CI machine is 10-50x slower
// than this machine, and a passing run returns as soon as the condition holds.
template <class Pred>
bool eventually(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::sleep_for(100us);
  }
  return true;
}

std::vector<int> my_cpus() { return haltpoll::affinity_cpus(); }

// tasks_run is bumped after the task returns: a task's own side effect (a flag, a count) can be
// seen before its worker has counted it.
std::uint64_t total_tasks_run(const WorkerPool& pool) {
  std::uint64_t n = 0;
  for (const auto& s : pool.all_stats()) n += s.tasks_run;
  return n;
}

// Polling or parked: the worker has done the bookkeeping of its last wake, which follows tasks_run.
bool idle_again(const WorkerStats& s) {
  return s.state == haltpoll::WorkerState::polling || s.state == haltpoll::WorkerState::parked;
}

// Whether thread `tid` of this process is asleep in the kernel, as /proc reports it (S or D).
bool thread_asleep(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto paren = stat.rfind(')');  // the name in parentheses may contain spaces
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  return stat[paren + 2] == 'S' || stat[paren + 2] == 'D';
}

// Waits until thread `tid` has been asleep for `hold` without a break: blocked for good (in a
// join), not for a moment on a lock (the emulator's own locks under qemu-user, TSan's).
bool eventually_blocked(pid_t tid, std::chrono::milliseconds hold = 100ms) {
  auto since = std::chrono::steady_clock::now();
  return eventually([&] {
    const auto now = std::chrono::steady_clock::now();
    if (!thread_asleep(tid)) {
      since = now;
      return false;
    }
    if (now - since >= hold) return true;
    std::this_thread::sleep_for(1ms);
    return false;
  });
}

// n empty tasks, each submitted once the worker is parked again (a window-0 pool): every one
// goes through the futex.
void submit_each_to_a_parked_worker(WorkerPool& pool, int cpu, int n) {
  for (int i = 0; i < n; ++i) {
    REQUIRE(eventually([&] { return pool.stats(cpu).state == haltpoll::WorkerState::parked; }));
    CHECK(pool.submit(cpu, [] {}) == SubmitOutcome::woke_parked);
    REQUIRE(eventually([&] { return pool.stats(cpu).tasks_run == static_cast<std::uint64_t>(i + 1); }));
  }
  // Parked again: the bookkeeping of the last wake (idle period, park_wakes, miss cost) comes
  // after tasks_run and is done only now.
  REQUIRE(eventually([&] { return pool.stats(cpu).state == haltpoll::WorkerState::parked; }));
}

}  // namespace

TEST_CASE("affinity: the mask's CPUs, and pinning the calling thread to one", "[pool][affinity]") {
  const std::vector<int> cpus = haltpoll::affinity_cpus();
  REQUIRE_FALSE(cpus.empty());
  CHECK(std::is_sorted(cpus.begin(), cpus.end()));
  std::error_code ec = std::make_error_code(std::errc::io_error);
  int ran_on = -1;
  std::thread t([&] {
    ec = haltpoll::pin_this_thread(cpus.back());
    ran_on = sched_getcpu();
  });
  t.join();
  CHECK_FALSE(ec);
  CHECK(ran_on == cpus.back());
  CHECK(haltpoll::pin_this_thread(-1) == std::errc::invalid_argument);
  CHECK(haltpoll::pin_this_thread(CPU_SETSIZE) == std::errc::invalid_argument);
}

TEST_CASE("parse_cpu_list: the kernel's CPU list format, as sysfs and the configuration write it", "[affinity]") {
  using haltpoll::parse_cpu_list;
  CHECK(parse_cpu_list("0-3,6") == std::vector<int>{0, 1, 2, 3, 6});
  CHECK(parse_cpu_list("1\n") == std::vector<int>{1});  // /sys/devices/system/cpu/online
  CHECK(parse_cpu_list(" 6,0-1,1 ") == std::vector<int>{0, 1, 6});
  CHECK(parse_cpu_list("8191") == std::vector<int>{haltpoll::kMaxCpuNumber});
  for (const char* bad : {"", " \n", "3-1", "a", "0,", ",0", "0,,1", "-1", "1-", "1-2-3", "+1", "0 ,1", "8192",
                          "0-8192", "99999999999"}) {
    INFO('"' << bad << '"');
    CHECK_FALSE(parse_cpu_list(bad));
  }
}

TEST_CASE("unique function: inline, heap, move-only, empty", "[pool][unique_function]") {
  UniqueFunction<int(int)> empty;
  CHECK_FALSE(empty);
  CHECK_THROWS_AS(empty(1), std::bad_function_call);

  auto owned = std::make_unique<int>(40);
  UniqueFunction<int(int)> small = [p = std::move(owned)](int x) { return *p + x; };
  CHECK(small);
  CHECK(small.is_inline());
  CHECK(small(2) == 42);

  struct Big {
    char pad[200] = {};
    int operator()(int x) const { return x + pad[0] + 1; }
  };
  UniqueFunction<int(int)> big = Big{};
  CHECK_FALSE(big.is_inline());
  CHECK(big(1) == 2);

  UniqueFunction<int(int)> moved = std::move(small);
  CHECK_FALSE(small);  // NOLINT(bugprone-use-after-move): moved-from is empty, by contract
  CHECK(moved(0) == 40);
  moved = std::move(big);
  CHECK(moved(5) == 6);
  moved = nullptr;
  CHECK_FALSE(moved);

  int (*fp)(int) = nullptr;
  UniqueFunction<int(int)> from_null = fp;
  CHECK_FALSE(from_null);

  // Destruction of the stored callable happens exactly once.
  auto counter = std::make_shared<int>(0);
  {
    UniqueFunction<void()> a = [c = counter] { ++*c; };
    UniqueFunction<void()> b = std::move(a);
    b();
    CHECK(counter.use_count() == 2);
  }
  CHECK(counter.use_count() == 1);
  CHECK(*counter == 1);
}

TEST_CASE("pool: the idle period's end stays within it, even when the counters go backwards", "[pool]") {
  using haltpoll::detail::idle_period_end;
  CHECK(idle_period_end(150, 100, 200) == 150);
  CHECK(idle_period_end(50, 100, 200) == 100);   // submitted before the park began
  CHECK(idle_period_end(250, 100, 200) == 200);  // stamped on a CPU whose counter runs ahead
  // Start and wake read on two CPUs with skewed counters: wake < start. Every result must still
  // give an idle length >= 0 (std::clamp(submit, start, wake) was undefined here and returned 50).
  for (const std::int64_t submit : {0, 50, 75, 100, 200}) {
    const std::int64_t end = idle_period_end(submit, 100, 50);
    CHECK(end == 100);
  }
}

TEST_CASE("pool: one worker per CPU of the affinity mask, tasks run on their CPU", "[pool]") {
  PoolOptions every;
  every.latency_sample_every = 1;
  WorkerPool pool(every);
  CHECK(pool.cpus() == my_cpus());
  CHECK(pool.pin_failures().empty());
  std::vector<std::atomic<int>> ran_on(pool.cpus().size());
  for (auto& r : ran_on) r.store(-2);
  for (std::size_t i = 0; i < pool.cpus().size(); ++i) {
    auto outcome = pool.submit(pool.cpus()[i], [&ran_on, i] { ran_on[i].store(sched_getcpu()); });
    CHECK(outcome != SubmitOutcome::rejected);
  }
  for (std::size_t i = 0; i < pool.cpus().size(); ++i) {
    REQUIRE(eventually([&] { return ran_on[i].load() != -2; }));
    CHECK(ran_on[i].load() == pool.cpus()[i]);
  }
  for (int cpu : pool.cpus()) {
    REQUIRE(eventually([&] { return pool.stats(cpu).tasks_run == 1; }));
    WorkerStats s = pool.stats(cpu);
    CHECK(s.cpu == cpu);
    CHECK(s.latency.count() == 1);
    CHECK(s.task_exceptions == 0);
  }
}

TEST_CASE("pool: workers block the process's asynchronous signals, the faults stay deliverable", "[pool]") {
  // A SIGTERM sent to the daemon must reach the thread that waits for it, never a parked worker.
  WorkerPool pool(PoolOptions{});
  std::atomic<int> term{-1}, hup{-1}, segv{-1};
  pool.submit(pool.cpus().front(), [&] {
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, nullptr, &cur);
    hup.store(sigismember(&cur, SIGHUP));
    segv.store(sigismember(&cur, SIGSEGV));
    term.store(sigismember(&cur, SIGTERM));
  });
  REQUIRE(eventually([&] { return term.load() != -1; }));
  CHECK(term.load() == 1);
  CHECK(hup.load() == 1);
  CHECK(segv.load() == 0);
  // The caller's own mask is left as it was.
  sigset_t mine;
  pthread_sigmask(SIG_BLOCK, nullptr, &mine);
  CHECK(sigismember(&mine, SIGTERM) == 0);
}

TEST_CASE("pool: a CPU without a worker is rejected, bad options throw", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  WorkerPool pool(o);
  CHECK(pool.submit(-1, [] {}) == SubmitOutcome::rejected);
  CHECK(pool.submit(100000, [] {}) == SubmitOutcome::rejected);
  CHECK_THROWS_AS(pool.stats(100000), std::out_of_range);

  PoolOptions bad_policy;
  bad_policy.policy = "no-such-policy";
  CHECK_THROWS_AS(WorkerPool(bad_policy), std::invalid_argument);
  PoolOptions twice;
  twice.cpus = {o.cpus[0], o.cpus[0]};
  CHECK_THROWS_AS(WorkerPool(twice), std::invalid_argument);
}

TEST_CASE("pool: a CPU that cannot be pinned is reported, and its worker still runs", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front(), 1000, 5000};  // 1000: not in our mask; 5000: beyond CPU_SETSIZE
  WorkerPool pool(o);
  auto failures = pool.pin_failures();
  REQUIRE(failures.size() == 2);
  CHECK(failures[0].first == 1000);
  CHECK_FALSE(failures[0].second.empty());
  CHECK(failures[1].first == 5000);
  std::atomic<int> ran{0};
  CHECK(pool.submit(1000, [&] { ran.fetch_add(1); }) != SubmitOutcome::rejected);
  CHECK(pool.submit(5000, [&] { ran.fetch_add(1); }) != SubmitOutcome::rejected);
  CHECK(eventually([&] { return ran.load() == 2; }));
}

TEST_CASE("pool: a worker moved off its CPU (the CPU went offline) is reported as unpinned, and still runs",
          "[pool]") {
  const std::vector<int> mine = my_cpus();
  PoolOptions o;
  o.cpus = {mine.front()};
  WorkerPool pool(o);
  const int cpu = o.cpus[0];
  REQUIRE(pool.pin_failures().empty());
  // What the kernel does to a thread pinned to a CPU that goes offline: its affinity becomes the
  // cpuset's CPUs. Done here by the worker itself, on a machine whose CPUs must stay online. With a
  // single CPU in the mask there is nowhere to move it: the pinning is then all there is to check.
  if (mine.size() < 2) return;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c : mine) CPU_SET(c, &all);
  std::atomic<int> rc{-1};
  pool.submit(cpu, [&] { rc = sched_setaffinity(0, sizeof(all), &all) == 0 ? 0 : errno; });
  REQUIRE(eventually([&] { return rc.load() != -1; }));
  REQUIRE(rc.load() == 0);
  auto failures = pool.pin_failures();
  REQUIRE(failures.size() == 1);
  CHECK(failures[0].first == cpu);
  CHECK(failures[0].second.find("no longer pinned") != std::string::npos);
  // The worker goes on serving its queue from wherever the kernel put it.
  std::atomic<int> ran{0};
  pool.submit(cpu, [&] { ran.fetch_add(1); });
  CHECK(eventually([&] { return ran.load() == 1; }));
  // Pinned again (the CPU came back and someone pinned the thread): no longer reported.
  std::atomic<int> again{-1};
  pool.submit(cpu, [&] { again = haltpoll::pin_this_thread(cpu) ? 1 : 0; });
  REQUIRE(eventually([&] { return again.load() != -1; }));
  CHECK(again.load() == 0);
  CHECK(pool.pin_failures().empty());
}

TEST_CASE("pool: exceptions are caught and counted, the worker carries on", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  WorkerPool pool(o);
  const int cpu = o.cpus[0];
  std::atomic<int> after{0};
  pool.submit(cpu, [] { throw std::runtime_error("boom"); });
  pool.submit(cpu, [] { throw 42; });
  pool.submit(cpu, [&] { after.fetch_add(1); });
  REQUIRE(eventually([&] { return after.load() == 1; }));
  REQUIRE(eventually([&] { return pool.stats(cpu).tasks_run == 3; }));
  CHECK(pool.stats(cpu).task_exceptions == 2);
}

TEST_CASE("pool: tasks from one submitter run in order, move-only state travels", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().back()};
  const int cpu = o.cpus[0];
  std::vector<int> order;  // touched only by the worker until shutdown joins it
  WorkerPool pool(o);
  for (int i = 0; i < 1000; ++i) {
    auto boxed = std::make_unique<int>(i);
    pool.submit(cpu, [&order, b = std::move(boxed)] { order.push_back(*b); });
    if (i % 100 == 0) std::this_thread::sleep_for(1ms);  // let the worker catch up: the slot frees
  }
  pool.shutdown(ShutdownMode::drain);
  REQUIRE(order.size() == 1000);
  for (int i = 0; i < 1000; ++i) REQUIRE(order[static_cast<std::size_t>(i)] == i);
  // Both kinds of node were used (the inline slot whenever it was free, heap nodes while it was
  // held), and the order above held across them.
  const WorkerStats s = pool.stats(cpu);
  CHECK(s.slot_tasks >= 1);
  CHECK(s.slot_tasks < 1000);
}

TEST_CASE("pool: a ping-pong between two workers travels in their inline slots", "[pool]") {
  const std::vector<int> cpus = my_cpus();
  REQUIRE(cpus.size() >= 2);  // one worker hopping to itself finds its own slot held
  PoolOptions o;
  o.cpus = {cpus[0], cpus[1]};
  WorkerPool pool(o);
  const int a = cpus[0], b = cpus[1];
  constexpr int hops = 2000;
  std::atomic<int> done{0};
  std::function<void(int)> hop = [&](int left) {
    if (left == 0) {
      done.store(1);
      return;
    }
    const int next = (left % 2 == 0) ? a : b;
    pool.submit(next, [&hop, left] { hop(left - 1); });
  };
  hop(hops);
  REQUIRE(eventually([&] { return done.load() == 1; }));
  // The last hop has set `done`; its worker counts it right after.
  REQUIRE(eventually([&] { return total_tasks_run(pool) == hops; }));
  std::uint64_t run = 0, slot = 0;
  for (const auto& s : pool.all_stats()) {
    run += s.tasks_run;
    slot += s.slot_tasks;
  }
  CHECK(run == hops);
  // A hop finds the slot taken only if its worker was preempted between submitting the next hop
  // and releasing its slot.
  CHECK(slot > run / 2);
}

TEST_CASE("pool: submit without a CPU picks a worker", "[pool]") {
  WorkerPool pool;
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) CHECK(pool.submit([&] { ran.fetch_add(1); }) != SubmitOutcome::rejected);
  CHECK(eventually([&] { return ran.load() == 100; }));
  // Each task counts in `ran` before its worker counts it in tasks_run: wait for the workers' count.
  CHECK(eventually([&] { return total_tasks_run(pool) == 100; }));
}

TEST_CASE("pool: shutdown(drain) runs every accepted task, then rejects", "[pool]") {
  PoolOptions o;
  o.policy = "static:0";  // every wake through the futex: the slow path must drain too
  WorkerPool pool(o);
  std::atomic<int> ran{0};
  int accepted = 0;
  for (int i = 0; i < 500; ++i) {
    for (int cpu : pool.cpus()) {
      if (pool.submit(cpu, [&] {
            ran.fetch_add(1);
            if (ran.load() % 50 == 0) std::this_thread::sleep_for(100us);
          }) != SubmitOutcome::rejected) {
        ++accepted;
      }
    }
  }
  pool.shutdown(ShutdownMode::drain);
  CHECK(ran.load() == accepted);
  CHECK(pool.submit([] {}) == SubmitOutcome::rejected);
  std::uint64_t run = 0, cancelled = 0;
  for (const auto& s : pool.all_stats()) {
    run += s.tasks_run;
    cancelled += s.tasks_cancelled;
  }
  CHECK(run == static_cast<std::uint64_t>(accepted));
  CHECK(cancelled == 0);
  pool.shutdown(ShutdownMode::cancel);  // idempotent
}

TEST_CASE("pool: shutdown from a task throws, even while another thread is shutting down", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  const int cpu = o.cpus[0];
  WorkerPool pool(o);

  std::atomic<int> alone{0};  // 1: threw logic_error, 2: returned or threw something else
  pool.submit(cpu, [&] {
    try {
      pool.shutdown(ShutdownMode::drain);
      alone.store(2);
    } catch (const std::logic_error&) {
      alone.store(1);
    }
  });
  REQUIRE(eventually([&] { return alone.load() != 0; }));
  CHECK(alone.load() == 1);

  // The task waits until another thread's shutdown has begun (its own submit is rejected): that
  // thread now holds the pool's shutdown lock and is joining this worker.
  std::atomic<int> concurrent{0};
  pool.submit(cpu, [&] {
    while (pool.submit(cpu, [] {}) != SubmitOutcome::rejected) std::this_thread::yield();
    try {
      pool.shutdown(ShutdownMode::drain);
      concurrent.store(2);
    } catch (const std::logic_error&) {
      concurrent.store(1);
    }
  });
  std::atomic<bool> joined{false};
  std::thread closer([&] {
    pool.shutdown(ShutdownMode::drain);
    joined.store(true);
  });
  if (!eventually([&] { return joined.load(); })) {
    // A deadlock cannot be unwound (the worker and `closer` wait for each other): report and leave.
    FAIL_CHECK("shutdown from a task deadlocked with a concurrent shutdown");
    std::fflush(nullptr);
    std::_Exit(1);
  }
  closer.join();
  CHECK(concurrent.load() == 1);
}

#if !defined(__SANITIZE_THREAD__)
TEST_CASE("pool: destroying the pool from one of its tasks terminates instead of hanging", "[pool]") {
  // In a child process: the destructor cannot throw, so the logic_error ends it with SIGABRT.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGABRT, SIG_DFL);  // not Catch2's handler: it would report for the child
    alarm(20);                      // a hang ends as SIGALRM, which the parent reports as a failure
    PoolOptions o;
    o.cpus = {my_cpus().front()};
    auto* pool = new WorkerPool(o);
    pool->submit(o.cpus[0], [pool] { delete pool; });
    pause();
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
}
#endif

TEST_CASE("pool: external submitters that retry on rejection race shutdown", "[pool]") {
  // Submitters keep going after their submits start being rejected, as a retrying client would;
  // shutdown must still return, run every accepted task (drain) and none of the rejected ones.
  for (const ShutdownMode mode : {ShutdownMode::drain, ShutdownMode::cancel}) {
    PoolOptions o;
    o.policy = "static:2000";
    WorkerPool pool(o);
    const std::vector<int> cpus = pool.cpus();
    std::atomic<std::uint64_t> accepted{0}, ran{0}, rejected_after_shutdown{0}, accepted_after_shutdown{0};
    std::atomic<bool> shut{false}, stop{false};
    std::vector<std::thread> submitters;
    for (int t = 0; t < 3; ++t) {
      submitters.emplace_back([&, t] {
        for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          const bool after = shut.load(std::memory_order_acquire);
          const auto outcome = pool.submit(cpus[(i + static_cast<unsigned>(t)) % cpus.size()],
                                           [&] { ran.fetch_add(1, std::memory_order_relaxed); });
          if (outcome != SubmitOutcome::rejected) {
            accepted.fetch_add(1, std::memory_order_relaxed);
            if (after) accepted_after_shutdown.fetch_add(1, std::memory_order_relaxed);  // Catch2 asserts are not thread-safe
          } else if (after) {
            rejected_after_shutdown.fetch_add(1, std::memory_order_relaxed);
          }
        }
      });
    }
    std::this_thread::sleep_for(20ms);
    std::atomic<bool> returned{false};
    std::thread closer([&] {
      pool.shutdown(mode);
      shut.store(true, std::memory_order_release);
      returned.store(true);
    });
    const bool ok = eventually([&] { return returned.load(); });
    if (!ok) {
      FAIL_CHECK("shutdown starved by submitters retrying on rejection");
      std::fflush(nullptr);
      std::_Exit(1);
    }
    closer.join();
    REQUIRE(eventually([&] { return rejected_after_shutdown.load() > 100; }));
    stop.store(true);
    for (auto& t : submitters) t.join();
    CHECK(accepted_after_shutdown.load() == 0);
    std::uint64_t stat_runs = 0, cancelled = 0;
    for (const auto& s : pool.all_stats()) {
      stat_runs += s.tasks_run;
      cancelled += s.tasks_cancelled;
    }
    CHECK(stat_runs == ran.load());
    CHECK(stat_runs + cancelled == accepted.load());
    if (mode == ShutdownMode::drain) CHECK(cancelled == 0);
  }
}

TEST_CASE("pool: shutdown(cancel) finishes the running task and destroys the queued ones", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  const int cpu = o.cpus[0];
  WorkerPool pool(o);
  std::atomic<bool> started{false}, release{false};
  std::atomic<int> ran{0};
  auto destroyed = std::make_shared<int>(0);
  pool.submit(cpu, [&] {
    started.store(true);
    while (!release.load()) std::this_thread::sleep_for(100us);
  });
  REQUIRE(eventually([&] { return started.load(); }));
  constexpr int queued = 100;
  for (int i = 0; i < queued; ++i) {
    pool.submit(cpu, [&ran, d = destroyed] { ran.fetch_add(1); });
  }
  std::atomic<pid_t> stopper_tid{0};
  std::thread stopper([&] {
    stopper_tid.store(gettid());
    pool.shutdown(ShutdownMode::cancel);
  });
  int probes = 0;
  REQUIRE(eventually([&] {
    if (pool.submit(cpu, [] {}) == SubmitOutcome::rejected) return true;
    ++probes;
    return false;
  }));
  // shutdown() rejects new work, stores the cancel flag, then blocks joining the worker; released
  // earlier (a fixed pause was too short for a preempted stopper), the task would let the worker
  // run the queue.
  REQUIRE(eventually_blocked(stopper_tid.load()));
  release.store(true);
  stopper.join();
  CHECK(ran.load() == 0);
  CHECK(destroyed.use_count() == 1);  // every queued task was destroyed
  WorkerStats s = pool.stats(cpu);
  CHECK(s.tasks_run == 1);
  CHECK(s.tasks_cancelled == static_cast<std::uint64_t>(queued + probes));
}

TEST_CASE("pool: shutdown(cancel) destroys a task queued in the inline slot", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  const int cpu = o.cpus[0];
  WorkerPool pool(o);
  std::atomic<bool> first_go{false}, second_started{false}, second_go{false};
  std::atomic<int> ran{0};
  // First task: takes the slot and holds it while it runs. Second: a heap node (the slot is held).
  pool.submit(cpu, [&] {
    while (!first_go.load()) std::this_thread::sleep_for(100us);
  });
  pool.submit(cpu, [&] {
    second_started.store(true);
    while (!second_go.load()) std::this_thread::sleep_for(100us);
  });
  first_go.store(true);
  // The worker released the slot before it started the second task: the third takes the slot and
  // waits in the queue.
  REQUIRE(eventually([&] { return second_started.load(); }));
  auto destroyed = std::make_shared<int>(0);
  REQUIRE(pool.submit(cpu, [&ran, d = destroyed] { ran.fetch_add(1); }) == SubmitOutcome::queued);
  std::atomic<pid_t> stopper_tid{0};
  std::thread stopper([&] {
    stopper_tid.store(gettid());
    pool.shutdown(ShutdownMode::cancel);
  });
  REQUIRE(eventually([&] { return pool.submit(cpu, [] {}) == SubmitOutcome::rejected; }));
  REQUIRE(eventually_blocked(stopper_tid.load()));  // past the cancel flag, joining the worker
  second_go.store(true);
  stopper.join();
  CHECK(ran.load() == 0);
  CHECK(destroyed.use_count() == 1);
  const WorkerStats s = pool.stats(cpu);
  CHECK(s.tasks_run == 2);
  CHECK(s.slot_tasks == 2);  // the first task and the cancelled third
  CHECK(s.tasks_cancelled >= 1);
}

TEST_CASE("pool: window cap changes take effect at the next park", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  o.policy = "static:100000";
  const int cpu = o.cpus[0];
  WorkerPool pool(o);
  REQUIRE(eventually([&] { return pool.stats(cpu).window_ns == 100000; }));
  pool.set_window_cap_ns(0);
  CHECK(pool.window_cap_ns() == 0);
  // The worker may be asleep with the old window; a task ends that idle period.
  pool.submit(cpu, [] {});
  REQUIRE(eventually([&] { return pool.stats(cpu).window_ns == 0; }));
  pool.set_window_cap_ns(5000);
  pool.submit(cpu, [] {});
  REQUIRE(eventually([&] { return pool.stats(cpu).window_ns == 5000; }));
}

TEST_CASE("pool: the policy can be switched while running", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  o.policy = "static:0";
  // Not learning from its wakes: one slow wake (a loaded machine, qemu-user) would move the
  // average by 1/16 of its excess and replace the seed this test checks.
  o.measure_miss_cost = false;
  const int cpu = o.cpus[0];
  WorkerPool pool(o);
  CHECK(pool.policy() == "static:0");
  CHECK_THROWS_AS(pool.set_policy("bogus", {}), std::invalid_argument);
  CHECK(pool.policy() == "static:0");
  haltpoll::PolicyParams params;
  params.miss_cost_ns = 12345;
  pool.set_policy("static:7000", params);
  CHECK(pool.policy() == "static:7000");
  CHECK(pool.policy_params().miss_cost_ns == 12345);
  pool.submit(cpu, [] {});  // ends the current idle period
  REQUIRE(eventually([&] { return pool.stats(cpu).window_ns == 7000; }));
  CHECK(pool.stats(cpu).miss_cost_ns == 12345);  // the new parameters seed the measured miss cost
}

TEST_CASE("pool: the latency histogram samples one task in N, every first task after a park", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  const int cpu = o.cpus[0];
  o.latency_sample_every = 0;
  CHECK_THROWS_AS(WorkerPool(o), std::invalid_argument);

  // Polling worker (60 s window): one stamp per 4 submits of this thread, whatever its count
  // stood at (40 is a multiple of 4), plus any submit that found the worker parked.
  o.latency_sample_every = 4;
  o.policy = "static:60000000000";
  {
    WorkerPool pool(o);
    for (int i = 0; i < 40; ++i) {
      pool.submit(cpu, [] {});
      REQUIRE(eventually([&] { return pool.stats(cpu).tasks_run == static_cast<std::uint64_t>(i + 1); }));
    }
    // Idle again (polling, or parked once the 200 us default cap ran out): the last wake's idle
    // period and its hit or miss are counted (after tasks_run).
    REQUIRE(eventually([&] { return idle_again(pool.stats(cpu)); }));
    const WorkerStats s = pool.stats(cpu);
    CHECK(s.latency_sample_every == 4);
    CHECK(s.tasks_run == 40);  // counters stay exact
    CHECK(s.latency.count() >= 10);
    CHECK(s.latency.count() <= 10 + s.poll_misses);
    CHECK(s.poll_hits + s.poll_misses == s.idle_periods);
  }
  // Parked worker (window 0): every task is the first after a park, so every one is stamped even
  // with a sampling rate that would stamp none of these.
  o.latency_sample_every = 1000;
  o.policy = "static:0";
  {
    WorkerPool pool(o);
    submit_each_to_a_parked_worker(pool, cpu, 20);
    const WorkerStats s = pool.stats(cpu);
    CHECK(s.latency.count() == 20);
    CHECK(s.park_wakes == 20);
  }
}

TEST_CASE("pool: poll hits, futex waits and reset_stats", "[pool]") {
  PoolOptions o;
  o.cpus = {my_cpus().front()};
  const int cpu = o.cpus[0];
  {
    o.policy = "static:0";
    WorkerPool pool(o);
    submit_each_to_a_parked_worker(pool, cpu, 20);
    WorkerStats s = pool.stats(cpu);
    CHECK(s.poll_hits == 0);
    CHECK(s.poll_misses >= 20);
    CHECK(s.poll_ns == 0);
    CHECK(s.latency.count() == 20);
    CHECK(s.park_wakes == 20);  // every wake went through the futex and brought a task
    CHECK(s.park_wake_ns > 0);
    CHECK(s.miss_cost_ns > 0);
    const WorkerStats before = pool.stats(cpu);
    pool.reset_stats();
    s = pool.stats(cpu);
    CHECK(s.tasks_run == 0);
    CHECK(s.latency.count() == 0);
    CHECK(s.latency.percentile(0.5) == 0);
    CHECK(s.futex_waits == 0);
    // From the counter table: every counter restarts at 0, every gauge keeps its value (the
    // worker is parked, nothing changes them meanwhile).
    int counters = 0, gauges = 0;
#define CHECK_AFTER_RESET(name, kind, source, help)            \
  if (std::string_view(#kind) == "counter") {                 \
    ++counters;                                               \
    CHECK(s.name == 0);                                       \
  } else {                                                    \
    ++gauges;                                                 \
    CHECK(s.name == before.name);                             \
  }
    HALTPOLL_WORKER_COUNTERS(CHECK_AFTER_RESET)
#undef CHECK_AFTER_RESET
    CHECK(counters == 15);
    CHECK(gauges == 2);
    CHECK(before.miss_cost_ns > 0);
  }
  {
    o.policy = "static:60000000000";  // 60 s: the worker polls until the task comes
    o.window_cap_ns = 60000000000;
    WorkerPool pool(o);
    int polling_wakes = 0;
    for (int i = 0; i < 20; ++i) {
      REQUIRE(eventually([&] {
        WorkerStats st = pool.stats(cpu);
        return st.tasks_run == static_cast<std::uint64_t>(i) && st.state == haltpoll::WorkerState::polling;
      }));
      // Usually the worker is already polling again; a submit that races ahead of its park is
      // "queued" and the worker finds the task on its own.
      auto outcome = pool.submit(cpu, [] {});
      CHECK((outcome == SubmitOutcome::woke_polling || outcome == SubmitOutcome::queued));
      polling_wakes += outcome == SubmitOutcome::woke_polling;
    }
    REQUIRE(eventually([&] { return pool.stats(cpu).tasks_run == 20; }));
    // Idle again: the last wake's hit is counted (after tasks_run).
    REQUIRE(eventually([&] { return idle_again(pool.stats(cpu)); }));
    WorkerStats s = pool.stats(cpu);
    CHECK(s.futex_waits == 0);
    CHECK(s.wakes_without_syscall == static_cast<std::uint64_t>(polling_wakes));
    CHECK(s.poll_hits == static_cast<std::uint64_t>(polling_wakes));
    CHECK(s.poll_ns > 0);
    pool.shutdown(ShutdownMode::drain);  // wakes a polling worker
  }
}

TEST_CASE("pool: randomized stress across policies", "[pool][stress]") {
  // Several threads submit to random CPUs (and tasks submit follow-ups) for a bounded time, under
  // every policy; per-worker state touched only by that worker's tasks is plain memory, so TSan
  // checks the hand-off ordering. Every accepted task must run exactly once.
  const char* policies[] = {"adaptive", "haltpoll", "static:0", "static:2000"};
  for (const char* policy : policies) {
    SECTION(policy) {
      PoolOptions o;
      o.policy = policy;
      WorkerPool pool(o);
      const std::vector<int> cpus = pool.cpus();
      std::vector<std::uint64_t> per_cpu_runs(cpus.size(), 0);  // worker-private
      std::atomic<std::uint64_t> accepted{0}, ran{0};
      const auto stop_at = std::chrono::steady_clock::now() + 400ms;
      std::vector<std::thread> submitters;
      for (int t = 0; t < 3; ++t) {
        submitters.emplace_back([&, t] {
          std::mt19937 rng(static_cast<unsigned>(t) + 99u);
          while (std::chrono::steady_clock::now() < stop_at) {
            std::size_t i = rng() % cpus.size();
            std::size_t j = rng() % cpus.size();
            bool chain = rng() % 4 == 0;
            auto outcome = pool.submit(cpus[i], [&, i, j, chain] {
              ++per_cpu_runs[i];
              ran.fetch_add(1, std::memory_order_relaxed);
              if (chain && pool.submit(cpus[j], [&, j] {
                    ++per_cpu_runs[j];
                    ran.fetch_add(1, std::memory_order_relaxed);
                  }) != SubmitOutcome::rejected) {
                accepted.fetch_add(1, std::memory_order_relaxed);
              }
            });
            if (outcome != SubmitOutcome::rejected) accepted.fetch_add(1, std::memory_order_relaxed);
            if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
          }
        });
      }
      // The control plane changes the cap while the workers run (hazard-pointer snapshot reads).
      std::thread tuner([&] {
        const std::uint64_t caps[] = {0, 1000, 200000};
        for (int i = 0; std::chrono::steady_clock::now() < stop_at; ++i) {
          pool.set_window_cap_ns(caps[i % 3]);
          std::this_thread::sleep_for(5ms);
        }
      });
      for (auto& t : submitters) t.join();
      tuner.join();
      pool.shutdown(ShutdownMode::drain);
      CHECK(ran.load() == accepted.load());
      std::uint64_t sum = 0, stat_runs = 0;
      for (auto r : per_cpu_runs) sum += r;
      for (const auto& s : pool.all_stats()) stat_runs += s.tasks_run;
      CHECK(sum == accepted.load());
      CHECK(stat_runs == accepted.load());
    }
  }
}
