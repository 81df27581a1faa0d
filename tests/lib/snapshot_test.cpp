#include "haltpoll/snapshot.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

namespace {

using haltpoll::Snapshot;

std::atomic<int> live_params{0};

// Stands in for the pool's caps and policy parameters; the invariant lets readers detect a torn
// or freed value.
struct Params {
  static constexpr std::uint64_t live_magic = 0x736e'6170'7368'6f74;  // "snapshot"
  explicit Params(std::uint64_t cap) : window_cap_ns(cap), grow_start_ns(cap / 4), check(cap * 3) {
    live_params.fetch_add(1, std::memory_order_relaxed);
  }
  Params(const Params& other)
      : window_cap_ns(other.window_cap_ns), grow_start_ns(other.grow_start_ns), check(other.check) {
    live_params.fetch_add(1, std::memory_order_relaxed);
  }
  Params& operator=(const Params&) = delete;
  ~Params() {
    magic = 0;
    live_params.fetch_sub(1, std::memory_order_relaxed);
  }
  bool consistent() const { return magic == live_magic && check == window_cap_ns * 3; }

  std::uint64_t magic = live_magic;
  std::uint64_t window_cap_ns;
  std::uint64_t grow_start_ns;
  std::uint64_t check;
};

void wait_until(const std::atomic<bool>& flag) {
  while (!flag.load(std::memory_order_acquire)) {
    std::this_thread::yield();
  }
}

}  // namespace

TEST_CASE("read sees the initial value, then each published one", "[snapshot]") {
  const int live_before = live_params.load();
  {
    Snapshot<Params> snapshot(std::make_unique<Params>(200'000));
    CHECK(snapshot.version() == 0);
    {
      auto params = snapshot.read();
      REQUIRE(params);
      CHECK(params->window_cap_ns == 200'000);
      CHECK((*params).grow_start_ns == 50'000);
    }
    snapshot.publish(std::make_unique<Params>(400'000));
    CHECK(snapshot.version() == 1);
    CHECK(snapshot.read()->window_cap_ns == 400'000);
    // The replaced value was freed by publish itself.
    CHECK(live_params.load() == live_before + 1);
  }
  CHECK(live_params.load() == live_before);
}

TEST_CASE("a null value reads as an empty guard", "[snapshot]") {
  Snapshot<Params> snapshot(nullptr);
  {
    auto params = snapshot.read();
    CHECK_FALSE(params);
    CHECK(params.get() == nullptr);
  }
  snapshot.publish(std::make_unique<Params>(5));
  CHECK(snapshot.read()->window_cap_ns == 5);
  snapshot.publish(nullptr);
  CHECK_FALSE(snapshot.read());
}

TEST_CASE("update applies a change to a copy of the current value", "[snapshot]") {
  Snapshot<Params> snapshot(std::make_unique<Params>(100));
  snapshot.update([](Params& p) {
    p.window_cap_ns = 300;
    p.check = 900;
  });
  auto params = snapshot.read();
  CHECK(params->window_cap_ns == 300);
  CHECK(params->grow_start_ns == 25);
  CHECK(params->consistent());
}

TEST_CASE("a reader keeps its value alive across a publish", "[snapshot]") {
  Snapshot<Params> snapshot(std::make_unique<Params>(1'000));
  const int live_before = live_params.load();
  std::atomic<bool> holding{false};
  std::atomic<bool> release{false};
  std::atomic<bool> still_consistent{false};
  std::thread reader([&] {
    auto params = snapshot.read();
    holding.store(true, std::memory_order_release);
    wait_until(release);
    // The publisher has swapped in a new value by now; ours must still be intact.
    still_consistent.store(params->consistent() && params->window_cap_ns == 1'000);
  });
  wait_until(holding);
  std::atomic<bool> published{false};
  std::thread publisher([&] {
    snapshot.publish(std::make_unique<Params>(2'000));
    published.store(true, std::memory_order_release);
  });
  // New readers see the new value while the old one is still held (not yet freed).
  while (snapshot.version() == 0) {
    std::this_thread::yield();
  }
  CHECK(snapshot.read()->window_cap_ns == 2'000);
  CHECK_FALSE(published.load(std::memory_order_acquire));
  CHECK(live_params.load() == live_before + 1);
  release.store(true, std::memory_order_release);
  publisher.join();
  reader.join();
  CHECK(published.load());
  CHECK(still_consistent.load());
  CHECK(live_params.load() == live_before);
}

TEST_CASE("nested reads of two snapshots", "[snapshot]") {
  Snapshot<Params> first(std::make_unique<Params>(10));
  Snapshot<Params> second(std::make_unique<Params>(20));
  auto a = first.read();
  {
    auto b = second.read();
    CHECK(a->window_cap_ns == 10);
    CHECK(b->window_cap_ns == 20);
  }
  CHECK(a->consistent());
}

TEST_CASE("concurrent updates are not lost", "[snapshot]") {
  Snapshot<Params> snapshot(std::make_unique<Params>(0));
  constexpr int per_thread = 500;
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        snapshot.update([](Params& p) {
          p.window_cap_ns += 1;
          p.check = p.window_cap_ns * 3;
        });
      }
    });
  }
  for (auto& t : writers) {
    t.join();
  }
  CHECK(snapshot.read()->window_cap_ns == 2 * per_thread);
  CHECK(snapshot.version() == 2 * per_thread);
}

TEST_CASE("concurrent readers and publishers: consistent values, nothing leaked", "[snapshot]") {
  const int live_before = live_params.load();
  {
    Snapshot<Params> snapshot(std::make_unique<Params>(1));
    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> inconsistent{0};
    std::atomic<std::uint64_t> went_back{0};
    std::atomic<std::uint64_t> reads{0};
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&] {
        std::uint64_t n = 0;
        std::uint64_t last_version = 0;
        while (!stop.load(std::memory_order_relaxed)) {
          const std::uint64_t version = snapshot.version();
          auto params = snapshot.read();
          if (!params->consistent()) {
            inconsistent.fetch_add(1, std::memory_order_relaxed);
          }
          if (version < last_version) {
            went_back.fetch_add(1, std::memory_order_relaxed);
          }
          last_version = version;
          ++n;
        }
        reads.fetch_add(n, std::memory_order_relaxed);
      });
    }
    threads.emplace_back([&] {
      for (std::uint64_t cap = 2; !stop.load(std::memory_order_relaxed); ++cap) {
        snapshot.publish(std::make_unique<Params>(cap));
      }
    });
    threads.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        snapshot.update([](Params& p) {
          p.window_cap_ns += 1'000'000;
          p.check = p.window_cap_ns * 3;
        });
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    stop.store(true);
    for (auto& t : threads) {
      t.join();
    }
    INFO("reads " << reads.load() << ", publishes " << snapshot.version());
    CHECK(inconsistent.load() == 0);
    CHECK(went_back.load() == 0);
    CHECK(reads.load() > 0);
    CHECK(snapshot.version() > 0);
    CHECK(live_params.load() == live_before + 1);  // only the current value is alive
  }
  CHECK(live_params.load() == live_before);
}
