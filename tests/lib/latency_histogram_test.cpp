#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>

#include "haltpoll/latency_histogram.hpp"

using haltpoll::LatencyHistogram;

TEST_CASE("latency histogram: every value falls in its bucket, within 1/16", "[histogram]") {
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200000; ++i) {
    std::uint64_t v = rng() >> (rng() % 64);
    std::size_t idx = LatencyHistogram::index_of(v);
    REQUIRE(idx < LatencyHistogram::bucket_count);
    REQUIRE(LatencyHistogram::lower_bound_of(idx) <= v);
    REQUIRE(v <= LatencyHistogram::upper_bound_of(idx));
    std::uint64_t width = LatencyHistogram::upper_bound_of(idx) - LatencyHistogram::lower_bound_of(idx);
    REQUIRE(width <= LatencyHistogram::lower_bound_of(idx) / 16);
  }
  for (std::uint64_t v = 0; v < 16; ++v) CHECK(LatencyHistogram::upper_bound_of(LatencyHistogram::index_of(v)) == v);
  // Buckets tile the range without gaps.
  for (std::size_t i = 1; i < LatencyHistogram::bucket_count; ++i) {
    REQUIRE(LatencyHistogram::lower_bound_of(i) == LatencyHistogram::upper_bound_of(i - 1) + 1);
  }
  CHECK(LatencyHistogram::upper_bound_of(LatencyHistogram::bucket_count - 1) == ~std::uint64_t{0});
}

TEST_CASE("latency histogram: empty", "[histogram]") {
  LatencyHistogram h;
  CHECK(h.count() == 0);
  CHECK(h.percentile(0.5) == 0);
  CHECK(h.percentile(1.0) == 0);
  CHECK(h.mean_ns() == 0);
  CHECK(h.buckets().empty());
}

TEST_CASE("latency histogram: percentiles of a uniform sample", "[histogram]") {
  LatencyHistogram h;
  for (std::uint64_t v = 1; v <= 10000; ++v) h.record(v);
  CHECK(h.count() == 10000);
  CHECK(h.sum_ns() == 10000 * 10001 / 2);
  CHECK(h.max_ns() == 10000);
  auto near = [](std::uint64_t got, double want) { return got >= want && got <= want * (1 + 1.0 / 16); };
  CHECK(near(h.percentile(0.5), 5000));
  CHECK(near(h.percentile(0.9), 9000));
  CHECK(near(h.percentile(0.99), 9900));
  CHECK(near(h.percentile(0.999), 9990));
  CHECK(h.percentile(1.0) == 10000);  // clamped to the max
  CHECK(h.percentile(0.0) == 1);
  CHECK(h.percentile(-1.0) == 1);
  CHECK(h.percentile(2.0) == 10000);
  std::uint64_t total = 0;
  std::uint64_t last = 0;
  for (const auto& b : h.buckets()) {
    CHECK(b.upper_ns > last);
    last = b.upper_ns;
    total += b.count;
  }
  CHECK(total == 10000);
  CHECK(h.count_at_or_below(15) == 15);
  CHECK(h.count_at_or_below(~std::uint64_t{0}) == 10000);
}

TEST_CASE("latency histogram: single value and zero", "[histogram]") {
  LatencyHistogram h;
  h.record(0);
  CHECK(h.percentile(0.5) == 0);
  h.record(123456789);
  CHECK(h.percentile(1.0) == 123456789);
  CHECK(h.percentile(0.5) == 0);
}

TEST_CASE("latency histogram: copy, merge, subtract, reset", "[histogram]") {
  LatencyHistogram a, b;
  for (int i = 0; i < 100; ++i) a.record(1000);
  for (int i = 0; i < 300; ++i) b.record(100000);
  LatencyHistogram snap = a;
  a.record(5);
  CHECK(snap.count() == 100);
  CHECK(a.count() == 101);

  LatencyHistogram m = a;
  m.merge(b);
  CHECK(m.count() == 401);
  CHECK(m.sum_ns() == 100 * 1000 + 5 + 300 * 100000);
  CHECK(m.max_ns() == 100000);
  CHECK(m.percentile(0.5) >= 100000);
  CHECK(m.percentile(0.2) <= 1000 + 1000 / 16);

  LatencyHistogram all = m;
  m.subtract(b);
  CHECK(m.count() == 101);
  CHECK(m.percentile(0.9) <= 1000 + 1000 / 16);
  LatencyHistogram z = a;
  z.subtract(all);  // a larger baseline saturates at 0 instead of wrapping
  CHECK(z.count() == 0);
  CHECK(z.sum_ns() == 0);
  CHECK(z.percentile(0.5) == 0);

  a.reset();
  CHECK(a.count() == 0);
  CHECK(a.sum_ns() == 0);
  CHECK(a.max_ns() == 0);
  CHECK(a.buckets().empty());
}

TEST_CASE("latency histogram: readers race with the single writer", "[histogram]") {
  LatencyHistogram h;
  std::atomic<bool> done{false};
  std::atomic<int> bad{0};  // Catch2 assertions are not thread-safe: count, check after join
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      LatencyHistogram snap = h;
      std::uint64_t p50 = snap.percentile(0.5), p99 = snap.percentile(0.99);
      if (p50 > p99) bad.fetch_add(1);
      if (snap.count_at_or_below(~std::uint64_t{0}) > h.count() + 1) bad.fetch_add(1);
    }
  });
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) h.record(rng() % 100000);
  done.store(true, std::memory_order_release);
  reader.join();
  CHECK(bad.load() == 0);
  CHECK(h.count() == 200000);
}

TEST_CASE("latency histogram: exact mean, interpolated percentile, trimmed mean", "[histogram]") {
  LatencyHistogram h;
  CHECK(h.mean() == 0);
  CHECK(h.interpolated_percentile(0.5) == 0);
  CHECK(h.trimmed_mean(0.99) == 0);
  h.record(1);
  h.record(2);
  CHECK(h.mean_ns() == 1);  // truncated
  CHECK(h.mean() == 1.5);
  CHECK(h.trimmed_mean(1.0) == 1.5);  // one-value buckets: exact
  CHECK(h.trimmed_mean(0.0) == 0);

  h.reset();
  for (std::uint64_t v = 1; v <= 10000; ++v) h.record(v);
  CHECK(h.mean() == 5000.5);
  CHECK(h.interpolated_percentile(0.5) == Approx(5000).epsilon(1.0 / 16));
  CHECK(h.interpolated_percentile(0.99) == Approx(9900).epsilon(1.0 / 16));
  // 5000 and 5100 share a bucket: percentile() cannot tell them apart, the interpolation can.
  CHECK(h.percentile(0.5) == h.percentile(0.51));
  CHECK(h.interpolated_percentile(0.5) < h.interpolated_percentile(0.51));
  CHECK(h.interpolated_percentile(0.0) == 1);
  CHECK(h.interpolated_percentile(-1.0) == 1);
  CHECK(h.interpolated_percentile(1.0) == 10000);  // clamped to the max
  CHECK(h.interpolated_percentile(2.0) == 10000);
  CHECK(h.trimmed_mean(1.0) == Approx(h.mean()).epsilon(1.0 / 16));

  // The trimmed mean drops the scheduling outliers that dominate the mean.
  LatencyHistogram t;
  for (int i = 0; i < 990; ++i) t.record(2000);
  for (int i = 0; i < 10; ++i) t.record(50'000'000);
  CHECK(t.mean() > 400000);
  CHECK(t.trimmed_mean(0.99) == Approx(2000).epsilon(1.0 / 16));
  CHECK(t.interpolated_percentile(0.9) == Approx(2000).epsilon(1.0 / 16));
  CHECK(t.interpolated_percentile(1.0) == 50'000'000);
  LatencyHistogram one;
  for (int i = 0; i < 10; ++i) one.record(2000);
  CHECK(one.interpolated_percentile(0.9) == 2000);  // never above the largest sample
}
