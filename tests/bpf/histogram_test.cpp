// The eBPF program's bucket index (idle_trace_abi.h, compiled here by the host compiler from the same
// source the BPF object uses) must be LatencyHistogram's, so that the kernel maps load straight into it.
#include <catch2/catch.hpp>

#include <haltpoll/latency_histogram.hpp>

#include <cstdint>
#include <random>
#include <vector>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
#include "idle_trace_abi.h"
#pragma GCC diagnostic pop

using haltpoll::LatencyHistogram;

TEST_CASE("the eBPF bucket scheme is LatencyHistogram's") {
  STATIC_REQUIRE(HP_HIST_BUCKETS == LatencyHistogram::bucket_count);
  STATIC_REQUIRE(HP_HIST_SUB_BITS == LatencyHistogram::sub_bucket_bits);
  for (std::uint64_t v = 0; v < 200000; ++v) REQUIRE(hp_hist_index(v) == LatencyHistogram::index_of(v));
  for (unsigned k = 0; k < 64; ++k) {
    const std::uint64_t p = std::uint64_t{1} << k;
    for (std::uint64_t v : {p - 1, p, p + 1, p + p / 2, p | (p - 1)}) {
      INFO("value " << v);
      REQUIRE(hp_hist_index(v) == LatencyHistogram::index_of(v));
    }
  }
  std::mt19937_64 rng(42);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t v = rng() >> (rng() % 64);
    INFO("value " << v);
    REQUIRE(hp_hist_index(v) == LatencyHistogram::index_of(v));
  }
  REQUIRE(hp_hist_index(~std::uint64_t{0}) == HP_HIST_BUCKETS - 1);
}

TEST_CASE("a kernel-style bucket array loads into LatencyHistogram with add_buckets") {
  LatencyHistogram direct, loaded;
  std::vector<std::uint64_t> buckets(HP_HIST_BUCKETS, 0);
  std::uint64_t sum = 0, max = 0;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50000; ++i) {
    const std::uint64_t v = 500 + rng() % 400000;
    direct.record(v);
    ++buckets[hp_hist_index(v)];
    sum += v;
    max = std::max(max, v);
  }
  loaded.add_buckets(buckets.data(), buckets.size(), sum, max);
  REQUIRE(loaded.count() == direct.count());
  REQUIRE(loaded.sum_ns() == direct.sum_ns());
  REQUIRE(loaded.max_ns() == direct.max_ns());
  for (double q : {0.1, 0.5, 0.9, 0.99, 0.999}) REQUIRE(loaded.percentile(q) == direct.percentile(q));
  REQUIRE(loaded.buckets().size() == direct.buckets().size());
  // Adding again doubles the counts; a short array touches only its buckets.
  loaded.add_buckets(buckets.data(), 16, 0, 0);
  std::uint64_t small = 0;
  for (std::size_t i = 0; i < 16; ++i) small += buckets[i];
  REQUIRE(loaded.count() == direct.count() + small);
}
