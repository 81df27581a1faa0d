// Prober with a fake executor: samples are tagged by path, queued/rejected are counted, and a
// probe that runs after stop() is harmless.
#include "tuning/prober.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

using namespace haltpolld;
using haltpoll::LatencyHistogram;

namespace {

// Runs submitted tasks on its own thread, claiming a path by turns.
class FakeExecutor {
 public:
  FakeExecutor() : thread_([this] { run(); }) {}
  ~FakeExecutor() {
    {
      std::lock_guard l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  ProbePath submit(int, std::function<void()> task) {
    const int n = count_++;
    const ProbePath path = n % 4 == 0 ? ProbePath::poll_hit
                           : n % 4 == 1 ? ProbePath::park_path
                           : n % 4 == 2 ? ProbePath::queued
                                        : ProbePath::rejected;
    if (path == ProbePath::rejected) return path;
    {
      std::lock_guard l(mu_);
      q_.push_back(std::move(task));
    }
    cv_.notify_one();
    return path;
  }
  // Returns once every task submitted so far has run.
  void wait_idle() {
    std::unique_lock l(mu_);
    idle_cv_.wait(l, [this] { return q_.empty() && !busy_; });
  }

 private:
  void run() {
    std::unique_lock l(mu_);
    for (;;) {
      cv_.wait(l, [this] { return done_ || !q_.empty(); });
      if (q_.empty() && done_) return;
      auto t = std::move(q_.front());
      q_.pop_front();
      busy_ = true;
      l.unlock();
      t();
      l.lock();
      busy_ = false;
      if (q_.empty()) idle_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  bool busy_ = false;
  std::deque<std::function<void()>> q_;
  bool done_ = false;
  std::atomic<int> count_{0};
  std::thread thread_;
};

}  // namespace

TEST_CASE("probes are filed by path per CPU") {
  FakeExecutor ex;
  Prober p({0, 1}, 2000, [&](int cpu, std::function<void()> t) { return ex.submit(cpu, std::move(t)); }, 42);
  p.start();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  p.stop();
  // Probes still queued run after stop() and are filed then; totals() and drain() below must see
  // the same set (a fixed 20 ms pause was not always enough on a loaded sanitizer run).
  ex.wait_idle();
  auto totals = p.totals();
  REQUIRE(totals.size() == 2);
  std::uint64_t hits = 0, parks = 0, queued = 0, rejected = 0;
  for (const auto& c : totals) {
    hits += c.poll_hit.count();
    parks += c.park_path.count();
    queued += c.queued;
    rejected += c.rejected;
  }
  INFO(hits << " " << parks << " " << queued << " " << rejected);
  CHECK(hits > 10);
  CHECK(parks > 10);
  CHECK(queued > 10);
  CHECK(rejected > 10);
  // Both CPUs got probes.
  CHECK(totals[0].all().count() > 0);
  CHECK(totals[1].all().count() > 0);
  auto win = p.drain();
  CHECK(win[0].all().count() + win[1].all().count() == hits + parks);
  auto again = p.drain();
  CHECK(again[0].all().count() + again[1].all().count() == 0);
}

TEST_CASE("a probe that runs after the prober is gone is harmless") {
  std::function<void()> kept;
  std::atomic<bool> have{false};
  {
    Prober p({0}, 5000, [&](int, std::function<void()> t) {
      if (!have.load(std::memory_order_acquire)) {
        kept = std::move(t);
        have.store(true, std::memory_order_release);
      }
      return ProbePath::park_path;
    });
    p.start();
    while (!have.load(std::memory_order_acquire)) std::this_thread::yield();
    p.stop();
  }
  kept();  // must not touch freed memory (ASan checks this)
  SUCCEED();
}

TEST_CASE("zero rate or no CPUs: start does nothing") {
  Prober p({0}, 0, [](int, std::function<void()>) { return ProbePath::poll_hit; });
  p.start();
  CHECK(!p.running());
}

TEST_CASE("latency histogram: percentiles within a bucket's width, trimmed mean drops the tail") {
  LatencyHistogram h;
  for (int i = 1; i <= 1000; ++i) h.record(static_cast<std::uint64_t>(i) * 1000);  // 1..1000 µs
  CHECK(h.count() == 1000);
  CHECK(h.interpolated_percentile(0.5) == Approx(500000).epsilon(0.13));
  CHECK(h.interpolated_percentile(0.99) == Approx(990000).epsilon(0.13));
  CHECK(h.mean() == Approx(500500));
  LatencyHistogram t;
  for (int i = 0; i < 990; ++i) t.record(2000);
  for (int i = 0; i < 10; ++i) t.record(50'000'000);  // scheduling outliers
  CHECK(t.mean() > 400000);
  CHECK(t.trimmed_mean(0.99) < 2500);
  for (std::uint64_t v : {0ull, 1ull, 15ull, 16ull, 17ull, 1000ull, 123456789ull, 1ull << 40}) {
    const std::size_t i = LatencyHistogram::index_of(v);
    CHECK(LatencyHistogram::lower_bound_of(i) <= v);
    CHECK(v <= LatencyHistogram::upper_bound_of(i));
  }
}

TEST_CASE("halt-exit penalty: park path minus poll hit, from idle ticks only") {
  auto tick = [](std::uint64_t park_ns, std::uint64_t hit_ns, int n) {
    CpuProbes c;
    for (int i = 0; i < n; ++i) {
      c.park_path.record(park_ns + static_cast<std::uint64_t>(i % 5) * 100);
      if (hit_ns) c.poll_hit.record(hit_ns);
    }
    return std::vector<CpuProbes>{c};
  };
  HaltExitPenalty p;
  CHECK(!p.penalty_ns());
  CHECK(p.source().find("not measured") != std::string::npos);
  // Busy ticks say nothing about the halt exit, however many samples they hold.
  p.add(tick(90000, 2000, 100), false, 1);
  CHECK(!p.penalty_ns());
  // Idle ticks: 40 µs park path, 2 µs poll hit.
  for (int i = 0; i < 5; ++i) p.add(tick(40000, 2000, 10), true, 10 + static_cast<std::uint64_t>(i));
  REQUIRE(p.penalty_ns());
  CHECK(*p.penalty_ns() == Approx(38000).epsilon(0.08));
  CHECK(p.measured_at_ns().value_or(0) >= 10);
  CHECK(p.source().find("minus poll-hit") != std::string::npos);
  // Later busy ticks keep the value (it ages); new idle ticks without poll hits replace it with an
  // upper bound.
  p.add(tick(90000, 0, 100), false, 100);
  CHECK(*p.penalty_ns() == Approx(38000).epsilon(0.08));
  for (int i = 0; i < 5; ++i) p.add(tick(30000, 0, 10), true, 200);
  CHECK(*p.penalty_ns() == Approx(30200).epsilon(0.08));
  CHECK(p.source().find("upper bound") != std::string::npos);
  CHECK(p.measured_at_ns() == 200u);
}
