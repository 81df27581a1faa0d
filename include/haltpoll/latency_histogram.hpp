// LatencyHistogram: a fixed-size log-linear histogram of nanosecond durations, HdrHistogram-like.
// Values 0..15 get an exact bucket each; above that every power-of-two range [2^k, 2^(k+1)) is
// split into 16 linear sub-buckets, so any reported value is within 1/16 (6.25 %) above the true
// one, over the whole 64-bit range, in 976 buckets and without any allocation.
//
// Concurrency contract: record() is meant for ONE writer thread (a pool worker); it uses relaxed
// load+store instead of locked RMWs so that recording costs a few ns. Any thread may read at any
// time (copy, count, percentile, buckets) without locks and without tearing any single counter;
// a reader racing with the writer may see a sample in `count` but not yet in its bucket (or the
// reverse), which percentile() tolerates. reset(), merge() and subtract() are writer-side
// operations too (or for private copies). A copy is a snapshot.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace haltpoll {

class LatencyHistogram {
 public:
  static constexpr unsigned sub_bucket_bits = 4;
  static constexpr std::size_t sub_buckets = std::size_t{1} << sub_bucket_bits;  // 16
  static constexpr std::size_t bucket_count = (64 - sub_bucket_bits + 1) * sub_buckets;  // 976

  struct Bucket {
    std::uint64_t upper_ns;  // inclusive upper bound of the bucket
    std::uint64_t count;
  };

  LatencyHistogram() noexcept = default;
  LatencyHistogram(const LatencyHistogram& other) noexcept { copy_from(other); }
  LatencyHistogram& operator=(const LatencyHistogram& other) noexcept {
    if (this != &other) copy_from(other);
    return *this;
  }

  // Single writer.
  void record(std::uint64_t ns) noexcept {
    bump(buckets_[index_of(ns)], 1);
    bump(count_, 1);
    bump(sum_, ns);
    if (ns > max_.load(std::memory_order_relaxed)) max_.store(ns, std::memory_order_relaxed);
  }

  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }
  std::uint64_t sum_ns() const noexcept { return sum_.load(std::memory_order_relaxed); }
  std::uint64_t max_ns() const noexcept { return max_.load(std::memory_order_relaxed); }
  std::uint64_t mean_ns() const noexcept;
  // Exact mean (sum / count, not truncated to whole ns like mean_ns): a tuner's step may be worth less than 1 ns.
  double mean() const noexcept;
  // Mean of the samples up to quantile q (0..1), from bucket midpoints; drops the tail that host
  // scheduling delays add on a loaded machine and that no poll window can remove. 0 when empty.
  double trimmed_mean(double q) const noexcept;

  // The smallest bucket upper bound at or below which a fraction q (0..1) of the samples lie,
  // clamped to the largest recorded value; 0 when empty. p50 = percentile(0.5), p999 = 0.999.
  std::uint64_t percentile(double q) const noexcept;
  // Like percentile(q), but interpolated linearly inside the bucket holding that rank, so that a
  // small shift of the distribution moves the result instead of jumping a bucket width at a time.
  double interpolated_percentile(double q) const noexcept;

  // Samples <= ns, rounded to bucket granularity (for exporters with fixed `le` bounds: counts
  // every bucket whose upper bound is <= ns).
  std::uint64_t count_at_or_below(std::uint64_t ns) const noexcept;

  // Non-empty buckets in increasing order (for exporters and for printing).
  std::vector<Bucket> buckets() const;
  template <class F>
  void for_each_bucket(F&& f) const {
    for (std::size_t i = 0; i < bucket_count; ++i) {
      std::uint64_t c = buckets_[i].load(std::memory_order_relaxed);
      if (c != 0) f(upper_bound_of(i), c);
    }
  }

  void reset() noexcept;
  void merge(const LatencyHistogram& other) noexcept;
  // Removes an earlier snapshot of this same histogram (saturating at 0): the pool's reset_stats
  // keeps a baseline instead of asking the worker to clear its own counters. max_ns is kept.
  void subtract(const LatencyHistogram& baseline) noexcept;
  // Adds samples known only by bucket (a kernel-side histogram with this same scheme, e.g. the
  // eBPF maps of src/bpf): counts[i] samples to bucket i for i < n (n <= bucket_count), with their
  // exact sum and max. count() grows by the sum of the counts.
  void add_buckets(const std::uint64_t* counts, std::size_t n, std::uint64_t sum_ns, std::uint64_t max_ns) noexcept;

  static constexpr std::size_t index_of(std::uint64_t ns) noexcept {
    if (ns < sub_buckets) return static_cast<std::size_t>(ns);
    unsigned k = 63u - static_cast<unsigned>(__builtin_clzll(ns));  // ns in [2^k, 2^(k+1)), k >= 4
    unsigned shift = k - sub_bucket_bits;
    std::size_t sub = static_cast<std::size_t>(ns >> shift) & (sub_buckets - 1);
    return (static_cast<std::size_t>(k) - sub_bucket_bits + 1) * sub_buckets + sub;
  }
  static constexpr std::uint64_t lower_bound_of(std::size_t index) noexcept {
    if (index < sub_buckets) return index;
    unsigned k = static_cast<unsigned>(index / sub_buckets) + sub_bucket_bits - 1;
    unsigned shift = k - sub_bucket_bits;
    return (sub_buckets + index % sub_buckets) << shift;
  }
  static constexpr std::uint64_t upper_bound_of(std::size_t index) noexcept {
    if (index < sub_buckets) return index;
    unsigned k = static_cast<unsigned>(index / sub_buckets) + sub_bucket_bits - 1;
    return lower_bound_of(index) + ((std::uint64_t{1} << (k - sub_bucket_bits)) - 1);
  }

 private:
  static void bump(std::atomic<std::uint64_t>& a, std::uint64_t by) noexcept {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  void copy_from(const LatencyHistogram& other) noexcept;

  std::array<std::atomic<std::uint64_t>, bucket_count> buckets_{};
  std::atomic<std::uint64_t> count_{0};
  std::atomic<std::uint64_t> sum_{0};
  std::atomic<std::uint64_t> max_{0};
};

}  // namespace haltpoll
