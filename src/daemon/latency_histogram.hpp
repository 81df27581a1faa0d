// LatencyHistogram: a log-linear histogram of nanosecond values (8 buckets per power of two, so a
// percentile is within 12.5 % of the truth) with percentiles and merging. Fixed size, no
// allocation after construction, cheap enough to add to from a worker thread at probe rates.
// A plain value: the owner serialises access (the Prober keeps one per CPU behind a mutex).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>

namespace haltpolld {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 3;
  static constexpr int kSub = 1 << kSubBits;
  static constexpr int kBuckets = 2 * kSub + (64 - kSubBits - 1) * kSub;

  void add(std::uint64_t ns) noexcept {
    ++counts_[static_cast<std::size_t>(index(ns))];
    ++count_;
    sum_ += ns;
  }
  void merge(const LatencyHistogram& o) noexcept {
    for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
  }
  void clear() noexcept { *this = LatencyHistogram{}; }

  std::uint64_t count() const noexcept { return count_; }
  double mean() const noexcept { return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0; }

  // Mean of the samples up to percentile p (bucket midpoints): the mean without the tail that host
  // scheduling delays add on a loaded machine, which no poll window can remove.
  double trimmed_mean(double p) const noexcept {
    if (count_ == 0) return 0;
    const double keep = p / 100.0 * static_cast<double>(count_);
    double seen = 0, sum = 0;
    for (int i = 0; i < kBuckets && seen < keep; ++i) {
      const double c = std::min(static_cast<double>(counts_[static_cast<std::size_t>(i)]), keep - seen);
      if (c <= 0) continue;
      sum += c * (static_cast<double>(lower(i)) + static_cast<double>(upper(i))) / 2.0;
      seen += c;
    }
    return seen > 0 ? sum / seen : 0;
  }

  // Value at percentile p (0..100), interpolated linearly inside the bucket holding that rank so
  // that small shifts of the distribution move the result; 0 when empty.
  double percentile(double p) const noexcept {
    if (count_ == 0) return 0;
    const double rank = p / 100.0 * static_cast<double>(count_);
    double seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      const auto c = static_cast<double>(counts_[static_cast<std::size_t>(i)]);
      if (c > 0 && seen + c >= rank) {
        const double f = (rank - seen) / c;
        return static_cast<double>(lower(i)) + f * static_cast<double>(upper(i) - lower(i));
      }
      seen += c;
    }
    return static_cast<double>(lower(kBuckets - 1));
  }

  // Bucket i covers [lower(i), upper(i)).
  static constexpr int index(std::uint64_t v) noexcept {
    if (v < 2 * kSub) return static_cast<int>(v);
    const int e = std::bit_width(v) - 1;  // >= kSubBits + 1
    const int sub = static_cast<int>((v >> (e - kSubBits)) & (kSub - 1));
    return 2 * kSub + (e - kSubBits - 1) * kSub + sub;
  }
  static constexpr std::uint64_t lower(int i) noexcept {
    if (i < 2 * kSub) return static_cast<std::uint64_t>(i);
    const int e = (i - 2 * kSub) / kSub + kSubBits + 1;
    const auto sub = static_cast<std::uint64_t>((i - 2 * kSub) % kSub);
    return (std::uint64_t{1} << e) + (sub << (e - kSubBits));
  }
  static constexpr std::uint64_t upper(int i) noexcept {
    if (i < 2 * kSub) return static_cast<std::uint64_t>(i) + 1;
    const int e = (i - 2 * kSub) / kSub + kSubBits + 1;
    return lower(i) + (std::uint64_t{1} << (e - kSubBits));
  }
  const std::array<std::uint64_t, kBuckets>& buckets() const noexcept { return counts_; }

 private:
  std::array<std::uint64_t, kBuckets> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
};

}  // namespace haltpolld
