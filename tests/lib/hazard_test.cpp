#include "haltpoll/hazard.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace {

using haltpoll::HazardGuard;
using haltpoll::hazard_is_protected;
using haltpoll::hazard_stats;
using haltpoll::hazard_synchronize;

using Clock = std::chrono::steady_clock;

// Spin-wait helper for test hand-offs (no timing assertions are made on it).
void wait_until(const std::atomic<bool>& flag) {
  while (!flag.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
}

struct Node {
  static constexpr std::uint64_t live_magic = 0x6861'7a61'7264'2121;  // "hazard!!"
  explicit Node(std::uint64_t v) : value(v) {}
  ~Node() { magic = 0; }
  std::uint64_t magic = live_magic;
  std::uint64_t value;
};

}  // namespace

TEST_CASE("a guard protects its pointer until it is destroyed", "[hazard]") {
  int object = 0;
  CHECK_FALSE(hazard_is_protected(&object));
  {
    HazardGuard guard(&object);
    CHECK(guard.get() == &object);
    CHECK_FALSE(guard.nested());
    CHECK(hazard_is_protected(&object));
    int other = 0;
    CHECK_FALSE(hazard_is_protected(&other));
  }
  CHECK_FALSE(hazard_is_protected(&object));
  hazard_synchronize(&object);  // nobody holds it: returns at once
  hazard_synchronize(nullptr);
}

TEST_CASE("the atomic overload loads and protects the current value", "[hazard]") {
  int a = 1;
  std::atomic<int*> src{&a};
  HazardGuard guard(src);
  CHECK(guard.get() == &a);
  CHECK(hazard_is_protected(&a));
}

TEST_CASE("nested guards publish the wildcard until the outermost guard dies", "[hazard]") {
  int outer_object = 0;
  int inner_object = 0;
  int unrelated = 0;
  {
    HazardGuard outer(&outer_object);
    CHECK_FALSE(outer.nested());
    CHECK_FALSE(hazard_is_protected(&unrelated));
    {
      HazardGuard inner(&inner_object);
      CHECK(inner.nested());
      CHECK(inner.get() == &inner_object);
      // The wildcard protects everything, including pointers nobody named.
      CHECK(hazard_is_protected(&inner_object));
      CHECK(hazard_is_protected(&outer_object));
      CHECK(hazard_is_protected(&unrelated));
      {
        std::atomic<int*> src{&unrelated};
        HazardGuard third(src);
        CHECK(third.nested());
        CHECK(third.get() == &unrelated);
      }
      CHECK(hazard_is_protected(&unrelated));
    }
    // The inner guard does not clear the slot: the outer one still needs it.
    CHECK(hazard_is_protected(&outer_object));
  }
  CHECK_FALSE(hazard_is_protected(&outer_object));
  CHECK_FALSE(hazard_is_protected(&unrelated));
}

TEST_CASE("synchronize waits for a slow reader and sleeps meanwhile", "[hazard]") {
  Node node(7);
  std::atomic<bool> holding{false};
  std::atomic<bool> leaving{false};
  const auto sleeps_before = hazard_stats().synchronize_sleeps;
  // The reader stays until the writer has slept (or 30 s have passed, which fails the check on
  // synchronize_sleeps below): a fixed 200 ms hold ended before synchronize began whenever this
  // thread was preempted that long after wait_until(), and the writer then had nothing to wait for.
  std::thread reader([&] {
    HazardGuard guard(&node);
    holding.store(true, std::memory_order_release);
    const auto give_up = Clock::now() + std::chrono::seconds(30);
    while (hazard_stats().synchronize_sleeps == sleeps_before && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Held a little longer: a writer that returned after a sleep, guard still held, sees `leaving` false.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    leaving.store(true, std::memory_order_release);
  });
  wait_until(holding);
  const auto start = Clock::now();
  timespec cpu_start{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_start);
  hazard_synchronize(&node);
  timespec cpu_end{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu_end);
  const double waited_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const double cpu_ms = static_cast<double>(cpu_end.tv_sec - cpu_start.tv_sec) * 1e3 +
                        static_cast<double>(cpu_end.tv_nsec - cpu_start.tv_nsec) / 1e6;
  INFO("synchronize waited " << waited_ms << " ms and used " << cpu_ms << " ms of CPU");
  // It returned only after the reader had started leaving its guard section.
  CHECK(leaving.load(std::memory_order_acquire));
  // The reader outlasts the spin and yield phases until the writer sleeps: a writer that never
  // slept waited out the reader's 30 s and fails here.
  CHECK(hazard_stats().synchronize_sleeps > sleeps_before);
  reader.join();
  CHECK_FALSE(hazard_is_protected(&node));
}

TEST_CASE("synchronize waits for a nested reader's wildcard", "[hazard]") {
  int outer_object = 0;
  int retired = 0;
  std::atomic<bool> holding{false};
  std::atomic<bool> release{false};
  std::atomic<bool> released{false};
  std::thread reader([&] {
    HazardGuard outer(&outer_object);
    {
      HazardGuard inner(&retired);  // wildcard
      holding.store(true, std::memory_order_release);
    }
    wait_until(release);
    released.store(true, std::memory_order_release);
  });
  wait_until(holding);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release.store(true, std::memory_order_release);
  });
  hazard_synchronize(&retired);
  CHECK(released.load(std::memory_order_acquire));
  reader.join();
  releaser.join();
}

TEST_CASE("slots are released at thread exit and reused by later threads", "[hazard]") {
  { HazardGuard warm_up(nullptr); }  // this thread's slot exists before the baseline
  const auto before = hazard_stats();
  for (int i = 0; i < 20; ++i) {
    std::thread([] {
      int local = 0;
      HazardGuard guard(&local);
    }).join();
  }
  const auto after = hazard_stats();
  CHECK(after.slots_owned == before.slots_owned);
  CHECK(after.slots_allocated == before.slots_allocated);
}

TEST_CASE("more live threads than one block of slots grows the list, then all are reused", "[hazard]") {
  constexpr int threads = 80;  // more than one block of 64 slots
  const auto before = hazard_stats();
  std::atomic<int> holding{0};
  std::atomic<bool> release{false};
  std::vector<int> objects(threads);
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      HazardGuard guard(&objects[static_cast<std::size_t>(i)]);
      holding.fetch_add(1, std::memory_order_acq_rel);
      wait_until(release);
    });
  }
  while (holding.load(std::memory_order_acquire) < threads) {
    std::this_thread::yield();
  }
  const auto during = hazard_stats();
  CHECK(during.slots_owned >= before.slots_owned + threads);
  CHECK(during.slots_allocated >= static_cast<std::size_t>(threads));
  // Slots in every block are scanned.
  CHECK(hazard_is_protected(&objects.front()));
  CHECK(hazard_is_protected(&objects.back()));
  release.store(true, std::memory_order_release);
  for (auto& t : pool) {
    t.join();
  }
  const auto after = hazard_stats();
  CHECK(after.slots_owned == before.slots_owned);
  CHECK_FALSE(hazard_is_protected(&objects.back()));
  // Another wave fits in the slots that exist now.
  std::vector<std::thread> second;
  for (int i = 0; i < 8; ++i) {
    second.emplace_back([] { HazardGuard guard(nullptr); });
  }
  for (auto& t : second) {
    t.join();
  }
  CHECK(hazard_stats().slots_allocated == after.slots_allocated);
}

namespace {

int exit_test_object = 0;

// Constructed before the thread's first guard, so destroyed after the thread's slot owner: the
// guard it holds is still live when the slot would be released.
struct GuardHolder {
  std::optional<HazardGuard> guard;
};

// Takes a guard from its destructor, after the slot owner is gone.
struct LateGuardTaker {
  bool armed = false;
  ~LateGuardTaker() {
    if (armed) {
      HazardGuard late(&exit_test_object);
    }
  }
};

}  // namespace

TEST_CASE("thread exit with a live slot keeps it safe and leaves nothing protected", "[hazard]") {
  const auto before = hazard_stats();
  std::thread([] {
    thread_local GuardHolder holder;
    holder.guard.emplace(&exit_test_object);  // first guard of the thread
  }).join();
  const auto after = hazard_stats();
  CHECK(after.slots_abandoned == before.slots_abandoned + 1);
  CHECK_FALSE(hazard_is_protected(&exit_test_object));
  hazard_synchronize(&exit_test_object);

  std::thread([] {
    thread_local LateGuardTaker taker;
    taker.armed = true;
    { HazardGuard normal(nullptr); }  // registers the slot (and its owner) after `taker`
  }).join();
  CHECK(hazard_stats().slots_abandoned == after.slots_abandoned + 1);
  CHECK_FALSE(hazard_is_protected(&exit_test_object));
}

TEST_CASE("thread exit while another thread synchronizes", "[hazard]") {
  int object = 0;
  std::atomic<bool> holding{false};
  std::thread reader([&] {
    HazardGuard guard(&object);
    holding.store(true, std::memory_order_release);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  wait_until(holding);
  hazard_synchronize(&object);  // the reader's slot is released while we scan or sleep
  reader.join();
  CHECK_FALSE(hazard_is_protected(&object));
}

namespace {

// Readers dereference whatever they protect; writers replace and retire. ASan reports any
// use-after-free, LeakSanitizer any node not freed; the magic check catches a stale read elsewhere.
void run_retire_stress(std::chrono::milliseconds duration) {
  std::atomic<Node*> current{new Node(0)};
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> bad_reads{0};
  std::atomic<std::uint64_t> reads{0};
  std::atomic<std::uint64_t> writes{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&] {
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        HazardGuard guard(current);
        const auto* node = static_cast<const Node*>(guard.get());
        if (node->magic != Node::live_magic) {
          bad_reads.fetch_add(1, std::memory_order_relaxed);
        }
        if ((n & 7) == 0) {
          HazardGuard nested(current);  // exercise the wildcard under load
          if (static_cast<const Node*>(nested.get())->magic != Node::live_magic) {
            bad_reads.fetch_add(1, std::memory_order_relaxed);
          }
        }
        ++n;
      }
      reads.fetch_add(n, std::memory_order_relaxed);
    });
  }
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        Node* old = current.exchange(new Node(n * 2 + static_cast<std::uint64_t>(w)),
                                     std::memory_order_seq_cst);
        haltpoll::hazard_retire(old);
        ++n;
      }
      writes.fetch_add(n, std::memory_order_relaxed);
    });
  }
  std::this_thread::sleep_for(duration);
  stop.store(true);
  for (auto& t : threads) {
    t.join();
  }
  delete current.load();
  INFO("reads " << reads.load() << ", writes " << writes.load());
  CHECK(bad_reads.load() == 0);
  CHECK(reads.load() > 0);
  CHECK(writes.load() > 0);
}

}  // namespace

TEST_CASE("concurrent readers and retiring writers: no use-after-free, no leak", "[hazard]") {
  run_retire_stress(std::chrono::milliseconds(800));
}

TEST_CASE("the asymmetric fence mode works where membarrier is available", "[hazard]") {
  if (!haltpoll::hazard_set_asymmetric_fence(true)) {
    WARN("membarrier(PRIVATE_EXPEDITED) unavailable here (qemu-user, TSan or old kernel): skipped");
    return;
  }
  run_retire_stress(std::chrono::milliseconds(400));
  CHECK_FALSE(haltpoll::hazard_set_asymmetric_fence(false));
}
