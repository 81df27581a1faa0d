// bench_hazard: reader and writer costs of the simple hazard pointers against liburcu (memb
// flavour) and std::atomic<std::shared_ptr>. Prints one JSON object; all numbers in one run.
//
//   guard_ns                  Snapshot::read() acquire + release (load, publish, re-check, clear)
//   raw_guard_ns              HazardGuard(p) acquire + release (no re-check)
//   urcu_read_ns              rcu_read_lock + rcu_dereference + rcu_read_unlock
//   atomic_shared_ptr_load_ns std::atomic<std::shared_ptr<T>>::load() + drop
//   synchronize_p50/p99_ns    hazard_synchronize() with one idle (sleeping, registered) reader per CPU
//   synchronize_busy_*        same with one reader per CPU taking guards in a loop
//   urcu_synchronize_*        synchronize_rcu() in the same two setups
//   *_asym_*                  the same hazard numbers in the asymmetric (membarrier) fence mode
#define _LGPL_SOURCE 1  // inline read-side urcu primitives, as a fair baseline

#include "haltpoll/clock.hpp"
#include "haltpoll/hazard.hpp"
#include "haltpoll/snapshot.hpp"
#include "json_writer.hpp"

#include <urcu/urcu-memb.h>

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using haltpoll::monotonic_ns;

struct Params {
  std::uint64_t window_cap_ns = 200'000;
  std::uint64_t grow_start_ns = 50'000;
};

std::atomic<std::uint64_t> sink{0};

int cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return 1;
  }
  return CPU_COUNT(&set);
}

std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Median of `rounds` timed runs of `iterations` calls, in ns per call. Thread CPU time, not wall
// time: the machine is shared, and a preempted loop would otherwise count other processes' time.
double per_op_ns(const std::function<std::uint64_t(std::uint64_t)>& body, std::uint64_t iterations,
                 int rounds = 5) {
  std::vector<double> results;
  for (int r = 0; r < rounds; ++r) {
    const std::int64_t start = thread_cpu_ns();
    sink.fetch_add(body(iterations), std::memory_order_relaxed);
    results.push_back(static_cast<double>(thread_cpu_ns() - start) / static_cast<double>(iterations));
  }
  std::sort(results.begin(), results.end());
  return results[results.size() / 2];
}

struct Percentiles {
  double p50 = 0;
  double p99 = 0;
  std::size_t samples = 0;
};

// Cost of the two clock reads around each timed call (p50), subtracted from the percentiles so
// that a ~20 ns vDSO clock_gettime does not dominate a ~20 ns synchronize. Reported as well.
std::int64_t timer_overhead_ns = 0;

Percentiles percentiles(std::vector<std::int64_t> samples, std::int64_t overhead = timer_overhead_ns) {
  Percentiles p;
  if (samples.empty()) {
    return p;
  }
  std::sort(samples.begin(), samples.end());
  p.samples = samples.size();
  auto net = [overhead](std::int64_t v) { return static_cast<double>(v > overhead ? v - overhead : 0); };
  p.p50 = net(samples[samples.size() / 2]);
  p.p99 = net(samples[samples.size() * 99 / 100]);
  return p;
}

std::int64_t measure_timer_overhead() {
  std::vector<std::int64_t> samples;
  for (int i = 0; i < 20'000; ++i) {
    const std::int64_t start = monotonic_ns();
    samples.push_back(monotonic_ns() - start);
  }
  return static_cast<std::int64_t>(percentiles(std::move(samples), 0).p50);
}

// Times `op` until `max_samples` or `budget` is reached.
template <class Op>
Percentiles time_samples(Op&& op, std::size_t max_samples, std::chrono::milliseconds budget) {
  std::vector<std::int64_t> samples;
  samples.reserve(max_samples);
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (samples.size() < max_samples && std::chrono::steady_clock::now() < deadline) {
    samples.push_back(op());
  }
  return percentiles(std::move(samples));
}

// Readers that exist (slot registered, urcu registered) but sleep: the common case of pool workers
// parked between tasks.
class IdleReaders {
 public:
  explicit IdleReaders(int n, const haltpoll::Snapshot<Params>& snapshot) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, &snapshot] {
        urcu_memb_register_thread();
        sink.fetch_add(snapshot.read()->window_cap_ns, std::memory_order_relaxed);
        {
          std::unique_lock<std::mutex> lock(mutex_);
          ++ready_;
          changed_.notify_all();
          changed_.wait(lock, [this] { return stop_; });
        }
        urcu_memb_unregister_thread();
      });
    }
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this, n] { return ready_ == n; });
  }
  IdleReaders(const IdleReaders&) = delete;
  IdleReaders& operator=(const IdleReaders&) = delete;
  ~IdleReaders() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (auto& t : threads_) {
      t.join();
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int ready_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// One reader per CPU in a tight read loop.
class BusyReaders {
 public:
  BusyReaders(int n, std::function<void(const std::atomic<bool>&)> loop) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, loop] {
        running_.fetch_add(1, std::memory_order_acq_rel);
        loop(stop_);
      });
    }
    while (running_.load(std::memory_order_acquire) < n) {
      std::this_thread::yield();
    }
  }
  BusyReaders(const BusyReaders&) = delete;
  BusyReaders& operator=(const BusyReaders&) = delete;
  ~BusyReaders() {
    stop_.store(true, std::memory_order_relaxed);
    for (auto& t : threads_) {
      t.join();
    }
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> running_{0};
  std::vector<std::thread> threads_;
};

// The published pointer flips between two objects, so writers measure synchronize alone.
Params object_a;
Params object_b;
std::atomic<Params*> hazard_current{&object_a};
Params* urcu_current = &object_a;

std::int64_t hazard_flip_and_synchronize() {
  Params* old = hazard_current.load(std::memory_order_relaxed);
  hazard_current.store(old == &object_a ? &object_b : &object_a, std::memory_order_seq_cst);
  const std::int64_t start = monotonic_ns();
  haltpoll::hazard_synchronize(old);
  return monotonic_ns() - start;
}

std::int64_t urcu_flip_and_synchronize() {
  Params* old = urcu_current;
  rcu_assign_pointer(urcu_current, old == &object_a ? &object_b : &object_a);
  const std::int64_t start = monotonic_ns();
  urcu_memb_synchronize_rcu();
  return monotonic_ns() - start;
}

void hazard_read_loop(const std::atomic<bool>& stop) {
  std::uint64_t sum = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    haltpoll::HazardGuard guard(hazard_current);
    sum += static_cast<const Params*>(guard.get())->window_cap_ns;
  }
  sink.fetch_add(sum, std::memory_order_relaxed);
}

void urcu_read_loop(const std::atomic<bool>& stop) {
  urcu_memb_register_thread();
  std::uint64_t sum = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    urcu_memb_read_lock();
    sum += rcu_dereference(urcu_current)->window_cap_ns;
    urcu_memb_read_unlock();
  }
  urcu_memb_unregister_thread();
  sink.fetch_add(sum, std::memory_order_relaxed);
}

struct HazardNumbers {
  double guard_ns = 0;
  double raw_guard_ns = 0;
  Percentiles idle;
  Percentiles busy;
};

HazardNumbers measure_hazard(int readers, const haltpoll::Snapshot<Params>& snapshot) {
  HazardNumbers n;
  n.guard_ns = per_op_ns(
      [&snapshot](std::uint64_t iterations) {
        std::uint64_t sum = 0;
        for (std::uint64_t i = 0; i < iterations; ++i) {
          auto params = snapshot.read();
          sum += params->window_cap_ns;
        }
        return sum;
      },
      10'000'000);
  n.raw_guard_ns = per_op_ns(
      [](std::uint64_t iterations) {
        std::uint64_t sum = 0;
        for (std::uint64_t i = 0; i < iterations; ++i) {
          haltpoll::HazardGuard guard(&object_a);
          sum += static_cast<const Params*>(guard.get())->window_cap_ns;
        }
        return sum;
      },
      10'000'000);
  {
    IdleReaders idle(readers, snapshot);
    n.idle = time_samples(hazard_flip_and_synchronize, 20'000, std::chrono::milliseconds(1'000));
  }
  {
    BusyReaders busy(readers, hazard_read_loop);
    n.busy = time_samples(hazard_flip_and_synchronize, 20'000, std::chrono::milliseconds(1'500));
  }
  return n;
}

}  // namespace

int main() {
  const int readers = cpu_count();
  (void)monotonic_ns();  // calibrate the clock outside the measurements
  timer_overhead_ns = measure_timer_overhead();
  urcu_memb_register_thread();  // the main thread reads in the urcu_read_ns loop

  haltpoll::Snapshot<Params> snapshot(std::make_unique<Params>());

  const HazardNumbers symmetric = measure_hazard(readers, snapshot);

  const double urcu_read_ns = per_op_ns(
      [](std::uint64_t iterations) {
        std::uint64_t sum = 0;
        for (std::uint64_t i = 0; i < iterations; ++i) {
          urcu_memb_read_lock();
          sum += rcu_dereference(urcu_current)->window_cap_ns;
          urcu_memb_read_unlock();
        }
        return sum;
      },
      10'000'000);

  std::atomic<std::shared_ptr<const Params>> shared{std::make_shared<const Params>()};
  const double atomic_shared_ptr_load_ns = per_op_ns(
      [&shared](std::uint64_t iterations) {
        std::uint64_t sum = 0;
        for (std::uint64_t i = 0; i < iterations; ++i) {
          const std::shared_ptr<const Params> p = shared.load();
          sum += p->window_cap_ns;
        }
        return sum;
      },
      5'000'000);

  Percentiles urcu_idle;
  Percentiles urcu_busy;
  urcu_memb_unregister_thread();  // the writer must not be a registered reader
  {
    IdleReaders idle(readers, snapshot);
    urcu_idle = time_samples(urcu_flip_and_synchronize, 2'000, std::chrono::milliseconds(1'500));
  }
  {
    BusyReaders busy(readers, urcu_read_loop);
    urcu_busy = time_samples(urcu_flip_and_synchronize, 2'000, std::chrono::milliseconds(1'500));
  }

  // The same hazard numbers with the asymmetric fence (switched while no reader or writer runs).
  const bool asym = haltpoll::hazard_set_asymmetric_fence(true);
  HazardNumbers asymmetric;
  if (asym) {
    asymmetric = measure_hazard(readers, snapshot);
    haltpoll::hazard_set_asymmetric_fence(false);
  }

  const auto stats = haltpoll::hazard_stats();
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const auto r1 = [](double v) { return std::round(v * 10) / 10; };
  const auto r2 = [](double v) { return std::round(v * 100) / 100; };
  benchutil::JsonObject()
      .str("bench", "hazard")
      .num("cpus", readers)
      .num("readers", readers)
      .str("clock", haltpoll::clock_source_name())
      .num("timer_overhead_ns", static_cast<double>(timer_overhead_ns))
      .num("guard_ns", r2(symmetric.guard_ns))
      .num("raw_guard_ns", r2(symmetric.raw_guard_ns))
      .num("urcu_read_ns", r2(urcu_read_ns))
      .num("atomic_shared_ptr_load_ns", r2(atomic_shared_ptr_load_ns))
      .num("synchronize_p50_ns", std::round(symmetric.idle.p50))
      .num("synchronize_p99_ns", std::round(symmetric.idle.p99))
      .integer("synchronize_samples", symmetric.idle.samples)
      .num("synchronize_busy_p50_ns", std::round(symmetric.busy.p50))
      .num("synchronize_busy_p99_ns", std::round(symmetric.busy.p99))
      .integer("synchronize_busy_samples", symmetric.busy.samples)
      .num("urcu_synchronize_p50_ns", std::round(urcu_idle.p50))
      .num("urcu_synchronize_p99_ns", std::round(urcu_idle.p99))
      .integer("urcu_synchronize_samples", urcu_idle.samples)
      .num("urcu_synchronize_busy_p50_ns", std::round(urcu_busy.p50))
      .num("urcu_synchronize_busy_p99_ns", std::round(urcu_busy.p99))
      .integer("urcu_synchronize_busy_samples", urcu_busy.samples)
      .boolean("asymmetric_available", asym)
      .num("guard_asym_ns", r2(asymmetric.guard_ns))
      .num("raw_guard_asym_ns", r2(asymmetric.raw_guard_ns))
      .num("synchronize_asym_p50_ns", std::round(asymmetric.idle.p50))
      .num("synchronize_asym_p99_ns", std::round(asymmetric.idle.p99))
      .num("synchronize_asym_busy_p50_ns", std::round(asymmetric.busy.p50))
      .num("synchronize_asym_busy_p99_ns", std::round(asymmetric.busy.p99))
      .num("urcu_over_hazard_synchronize_p50", r1(ratio(urcu_idle.p50, symmetric.idle.p50)))
      .num("urcu_over_hazard_synchronize_busy_p50", r1(ratio(urcu_busy.p50, symmetric.busy.p50)))
      .num("atomic_shared_ptr_over_guard", r1(ratio(atomic_shared_ptr_load_ns, symmetric.guard_ns)))
      .integer("synchronize_waits", stats.synchronize_waits)
      .integer("synchronize_sleeps", stats.synchronize_sleeps)
      .integer("slots_allocated", stats.slots_allocated)
      .print();
  return 0;
}
