#include "haltpoll/latency_histogram.hpp"

#include <algorithm>
#include <cmath>

namespace haltpoll {

static_assert(LatencyHistogram::index_of(~std::uint64_t{0}) == LatencyHistogram::bucket_count - 1);
static_assert(LatencyHistogram::upper_bound_of(LatencyHistogram::bucket_count - 1) == ~std::uint64_t{0});
static_assert(LatencyHistogram::lower_bound_of(LatencyHistogram::index_of(1000)) <= 1000 &&
              LatencyHistogram::upper_bound_of(LatencyHistogram::index_of(1000)) >= 1000);

namespace {
constexpr auto relaxed = std::memory_order_relaxed;

double clamp_quantile(double q) noexcept {
  if (!(q > 0.0)) return 0.0;  // also maps NaN to 0
  return q > 1.0 ? 1.0 : q;
}
}  // namespace

std::uint64_t LatencyHistogram::mean_ns() const noexcept {
  std::uint64_t n = count();
  return n == 0 ? 0 : sum_ns() / n;
}

std::uint64_t LatencyHistogram::percentile(double q) const noexcept {
  // Sum the buckets rather than trusting count_: a reader racing with the writer may see the two
  // disagree by a sample, and the rank must be reachable within the buckets it sums.
  std::uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(relaxed);
  if (total == 0) return 0;
  auto rank = static_cast<std::uint64_t>(std::ceil(clamp_quantile(q) * static_cast<double>(total)));
  rank = std::clamp<std::uint64_t>(rank, 1, total);
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < bucket_count; ++i) {
    seen += buckets_[i].load(relaxed);
    if (seen >= rank) return std::min(upper_bound_of(i), std::max(max_ns(), lower_bound_of(i)));
  }
  return max_ns();
}

double LatencyHistogram::interpolated_percentile(double q) const noexcept {
  std::uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(relaxed);
  if (total == 0) return 0;
  const double rank = clamp_quantile(q) * static_cast<double>(total);
  double seen = 0;
  for (std::size_t i = 0; i < bucket_count; ++i) {
    const auto c = static_cast<double>(buckets_[i].load(relaxed));
    if (c > 0 && seen + c >= rank) {
      // Bucket i holds the integers lower..upper, i.e. the continuous range [lower, upper + 1).
      const auto lower = static_cast<double>(lower_bound_of(i));
      const double width = static_cast<double>(upper_bound_of(i) - lower_bound_of(i)) + 1.0;
      const double v = lower + (rank - seen) / c * width;
      return std::min(v, std::max(static_cast<double>(max_ns()), lower));
    }
    seen += c;
  }
  return static_cast<double>(max_ns());
}

double LatencyHistogram::mean() const noexcept {
  std::uint64_t n = count();
  return n == 0 ? 0.0 : static_cast<double>(sum_ns()) / static_cast<double>(n);
}

double LatencyHistogram::trimmed_mean(double q) const noexcept {
  std::uint64_t total = 0;
  for (const auto& b : buckets_) total += b.load(relaxed);
  const double keep = clamp_quantile(q) * static_cast<double>(total);
  double seen = 0, sum = 0;
  for (std::size_t i = 0; i < bucket_count && seen < keep; ++i) {
    const double c = std::min(static_cast<double>(buckets_[i].load(relaxed)), keep - seen);
    if (c <= 0) continue;
    // Midpoint of the integers lower..upper: exact for the one-value buckets below 16.
    sum += c * (static_cast<double>(lower_bound_of(i)) + static_cast<double>(upper_bound_of(i))) / 2.0;
    seen += c;
  }
  return seen > 0 ? sum / seen : 0.0;
}

std::uint64_t LatencyHistogram::count_at_or_below(std::uint64_t ns) const noexcept {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < bucket_count && upper_bound_of(i) <= ns; ++i) n += buckets_[i].load(relaxed);
  return n;
}

std::vector<LatencyHistogram::Bucket> LatencyHistogram::buckets() const {
  std::vector<Bucket> out;
  for_each_bucket([&](std::uint64_t upper, std::uint64_t c) { out.push_back(Bucket{upper, c}); });
  return out;
}

void LatencyHistogram::reset() noexcept {
  for (auto& b : buckets_) b.store(0, relaxed);
  count_.store(0, relaxed);
  sum_.store(0, relaxed);
  max_.store(0, relaxed);
}

void LatencyHistogram::merge(const LatencyHistogram& other) noexcept {
  for (std::size_t i = 0; i < bucket_count; ++i) bump(buckets_[i], other.buckets_[i].load(relaxed));
  bump(count_, other.count());
  bump(sum_, other.sum_ns());
  max_.store(std::max(max_ns(), other.max_ns()), relaxed);
}

void LatencyHistogram::subtract(const LatencyHistogram& baseline) noexcept {
  auto sat_sub = [](std::atomic<std::uint64_t>& a, std::uint64_t b) {
    std::uint64_t v = a.load(relaxed);
    a.store(v > b ? v - b : 0, relaxed);
  };
  for (std::size_t i = 0; i < bucket_count; ++i) sat_sub(buckets_[i], baseline.buckets_[i].load(relaxed));
  sat_sub(count_, baseline.count());
  sat_sub(sum_, baseline.sum_ns());
}

void LatencyHistogram::add_buckets(const std::uint64_t* counts, std::size_t n, std::uint64_t sum_ns,
                                   std::uint64_t max_ns) noexcept {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < n && i < bucket_count; ++i) {
    if (counts[i] == 0) continue;
    bump(buckets_[i], counts[i]);
    total += counts[i];
  }
  bump(count_, total);
  bump(sum_, sum_ns);
  if (max_ns > max_.load(relaxed)) max_.store(max_ns, relaxed);
}

void LatencyHistogram::copy_from(const LatencyHistogram& other) noexcept {
  for (std::size_t i = 0; i < bucket_count; ++i) buckets_[i].store(other.buckets_[i].load(relaxed), relaxed);
  count_.store(other.count(), relaxed);
  sum_.store(other.sum_ns(), relaxed);
  max_.store(other.max_ns(), relaxed);
}

}  // namespace haltpoll
