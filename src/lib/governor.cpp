// Window policies. Everything on the record()/window_ns() path is noexcept and allocation-free;
// only construction and parameter parsing may throw.
#include "haltpoll/governor.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace haltpoll {
namespace {

constexpr std::uint64_t kNoCap = std::numeric_limits<std::uint64_t>::max();

// ---------------------------------------------------------------------------------------------
// haltpoll: drivers/cpuidle/governors/haltpoll.c, adjust_poll_limit(), after a halt only.
class HaltpollPolicy final : public WindowPolicy {
 public:
  explicit HaltpollPolicy(const HaltpollParams& p) : p_(p) {}

  std::uint64_t window_ns() const noexcept override { return poll_limit_ns_; }

  void record(std::uint64_t idle_ns, std::uint64_t window_ns) noexcept override {
    // A poll hit returns straight to the scheduler: the kernel's reflect() adjusts nothing.
    if (idle_ns <= window_ns) return;
    // The poll timed out and the CPU halted; the governor sees only the halt residency.
    adjust(window_ns == 0 ? idle_ns : idle_ns - window_ns);
  }

  void set_cap_ns(std::uint64_t cap_ns) noexcept override {
    // Like writing the module parameter: the per-CPU limit is left alone until the next adjustment.
    p_.guest_halt_poll_ns = static_cast<std::uint32_t>(std::min<std::uint64_t>(cap_ns, UINT32_MAX));
  }
  void set_haltpoll_params(const HaltpollParams& p) noexcept override { p_ = p; }
  std::uint64_t cap_ns() const noexcept override { return p_.guest_halt_poll_ns; }
  const char* name() const noexcept override { return "haltpoll"; }

 private:
  void adjust(std::uint64_t block_ns) noexcept {
    const std::uint64_t cap = p_.guest_halt_poll_ns;
    if (block_ns > poll_limit_ns_ && block_ns <= cap) {
      // The kernel stores a u64 product into an unsigned int: arithmetic modulo 2^32.
      auto val = static_cast<std::uint32_t>(poll_limit_ns_ * p_.guest_halt_poll_grow);
      if (val < p_.guest_halt_poll_grow_start) val = p_.guest_halt_poll_grow_start;
      if (val > p_.guest_halt_poll_ns) val = p_.guest_halt_poll_ns;
      poll_limit_ns_ = val;
    } else if (block_ns > cap && p_.guest_halt_poll_allow_shrink) {
      auto val = static_cast<std::uint32_t>(poll_limit_ns_);
      if (p_.guest_halt_poll_shrink == 0) {
        val = 0;
      } else {
        val /= p_.guest_halt_poll_shrink;
        if (val < p_.guest_halt_poll_grow_start) val = 0;  // since Linux 6.9
      }
      poll_limit_ns_ = val;
    }
    // Otherwise unchanged; with allow_shrink=N a limit above a lowered cap therefore stays (quirk).
  }

  HaltpollParams p_;
  std::uint64_t poll_limit_ns_ = 0;
};

// ---------------------------------------------------------------------------------------------
class StaticPolicy final : public WindowPolicy {
 public:
  explicit StaticPolicy(std::uint64_t ns) : ns_(ns) {}
  std::uint64_t window_ns() const noexcept override { return std::min(ns_, cap_); }
  void record(std::uint64_t, std::uint64_t) noexcept override {}
  void set_cap_ns(std::uint64_t cap_ns) noexcept override { cap_ = cap_ns; }
  std::uint64_t cap_ns() const noexcept override { return cap_; }
  const char* name() const noexcept override { return "static"; }

 private:
  std::uint64_t ns_;
  std::uint64_t cap_ = kNoCap;
};

// ---------------------------------------------------------------------------------------------
// Offline optimum for the simulator's cost model: a period of d costs d if polled through, and
// miss_cost if the worker parks at once, so knowing d the best window is d when d <= miss_cost, else 0.
class OraclePolicy final : public WindowPolicy {
 public:
  explicit OraclePolicy(std::uint64_t miss_cost_ns) : miss_cost_ns_(miss_cost_ns) {}
  std::uint64_t window_ns() const noexcept override {
    return next_ns_ <= miss_cost_ns_ && next_ns_ <= cap_ ? next_ns_ : 0;
  }
  void record(std::uint64_t, std::uint64_t) noexcept override {}
  void set_cap_ns(std::uint64_t cap_ns) noexcept override { cap_ = cap_ns; }
  std::uint64_t cap_ns() const noexcept override { return cap_; }
  void set_miss_cost_ns(std::uint64_t ns) noexcept override { miss_cost_ns_ = ns; }
  void hint_next_idle_ns(std::uint64_t ns) noexcept override { next_ns_ = ns; }
  const char* name() const noexcept override { return "oracle"; }

 private:
  std::uint64_t miss_cost_ns_;
  std::uint64_t cap_ = kNoCap;
  std::uint64_t next_ns_ = kNoCap;  // no hint yet: park
};

// ---------------------------------------------------------------------------------------------
// adaptive: ski rental against a learned, exponentially decayed distribution of idle durations.
//
// Buckets are log-linear (HdrHistogram style): bucket 0 is [0, 256 ns]; above, each power of two
// 2^m (m = 8..25) is cut into 4 equal parts, so a bucket is at most 25 % wider than its lower edge;
// the last bucket takes everything above 2^26 ns (67 ms). Candidate windows are 0 and the upper
// edges: a window at an upper edge turns every period in that bucket and below into a hit, so the
// expected cost of each candidate is exact for the recorded samples (per-bucket sums are kept).
class AdaptivePolicy final : public WindowPolicy {
 public:
  static constexpr int kMinShift = 8;
  static constexpr int kMaxShift = 26;
  static constexpr int kSub = 4;
  static constexpr std::size_t kFinite = 1 + (kMaxShift - kMinShift) * kSub;  // buckets with an upper edge
  static constexpr std::size_t kBuckets = kFinite + 1;                       // + overflow

  AdaptivePolicy(const AdaptiveParams& a, std::uint64_t cap_ns, std::uint64_t miss_cost_ns)
      : a_(a),
        cap_(cap_ns),
        miss_cost_(static_cast<double>(miss_cost_ns)),
        growth_(std::exp2(1.0 / a.adaptive_half_life)) {}

  std::uint64_t window_ns() const noexcept override { return window_; }

  void record(std::uint64_t idle_ns, std::uint64_t window_ns) noexcept override {
    const std::size_t b = bucket_of(idle_ns);
    // Decay without touching every bucket: new samples weigh growth^t, old ones keep their weight.
    count_[b] += weight_;
    sum_[b] += weight_ * static_cast<double>(idle_ns);
    weight_ *= growth_;
    if (weight_ > 0x1p200) rescale();
    // A miss is the moment a better window pays most; otherwise recompute every few records.
    if (idle_ns > window_ns || ++since_recompute_ >= a_.adaptive_recompute_every) recompute();
  }

  // Cheap when nothing changed, so a worker may re-apply the pool's cap before every period.
  void set_cap_ns(std::uint64_t cap_ns) noexcept override {
    if (cap_ns == cap_) return;
    cap_ = cap_ns;
    recompute();
  }
  std::uint64_t cap_ns() const noexcept override { return cap_; }
  void set_miss_cost_ns(std::uint64_t ns) noexcept override {
    if (static_cast<double>(ns) == miss_cost_) return;
    miss_cost_ = static_cast<double>(ns);
    recompute();
  }
  const char* name() const noexcept override { return "adaptive"; }

  static std::size_t bucket_of(std::uint64_t d) noexcept {
    if (d <= (std::uint64_t{1} << kMinShift)) return 0;
    const std::uint64_t x = d - 1;  // upper edges are inclusive
    const int m = std::bit_width(x) - 1;
    if (m >= kMaxShift) return kFinite;
    const auto sub = static_cast<std::size_t>((x >> (m - 2)) & (kSub - 1));
    return 1 + static_cast<std::size_t>(m - kMinShift) * kSub + sub;
  }
  static constexpr std::uint64_t upper_edge(std::size_t b) noexcept {
    if (b == 0) return std::uint64_t{1} << kMinShift;
    const int m = kMinShift + static_cast<int>((b - 1) / kSub);
    const std::uint64_t s = (b - 1) % kSub;
    return (std::uint64_t{1} << m) + (s + 1) * (std::uint64_t{1} << (m - 2));
  }

 private:
  void rescale() noexcept {
    const double k = 1.0 / weight_;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      count_[i] *= k;
      sum_[i] *= k;
    }
    weight_ = 1.0;
  }

  void recompute() noexcept {
    since_recompute_ = 0;
    double total_count = 0, total_sum = 0;
    for (std::size_t i = 0; i < kBuckets; ++i) {
      total_count += count_[i];
      total_sum += sum_[i];
    }
    if (total_count <= 0) {
      window_ = 0;
      return;
    }
    const double budget = total_sum * a_.adaptive_budget_permille / 1000.0;
    // Window 0: every period parks and pays the miss cost, nothing is polled.
    std::uint64_t best_w = 0;
    double best_cost = total_count * miss_cost_;
    double current_cost = window_ == 0 ? best_cost : -1.0;
    double hit_count = 0, hit_sum = 0;
    for (std::size_t i = 0; i < kFinite; ++i) {
      const std::uint64_t w = upper_edge(i);
      if (w > cap_) break;
      hit_count += count_[i];
      hit_sum += sum_[i];
      const double miss_count = std::max(0.0, total_count - hit_count);
      const double poll = hit_sum + static_cast<double>(w) * miss_count;
      // Expected polling only grows with the window, so the first candidate over budget ends the scan.
      if (a_.adaptive_budget_permille < 1000 && poll > budget) break;
      const double cost = poll + miss_count * miss_cost_;
      if (w == window_) current_cost = cost;
      if (cost < best_cost) {
        best_cost = cost;
        best_w = w;
      }
    }
    // Hysteresis: stay unless the best candidate saves a noticeable share of the current cost.
    if (current_cost >= 0 && current_cost <= best_cost * (1.0 + a_.adaptive_hysteresis_permille / 1000.0)) return;
    window_ = best_w;
  }

  AdaptiveParams a_;
  std::uint64_t cap_;
  double miss_cost_;
  double growth_;
  double weight_ = 1.0;
  std::uint32_t since_recompute_ = 0;
  std::uint64_t window_ = 0;
  std::array<double, kBuckets> count_{};
  std::array<double, kBuckets> sum_{};
};

static_assert(AdaptivePolicy::upper_edge(AdaptivePolicy::kFinite - 1) == std::uint64_t{1} << AdaptivePolicy::kMaxShift);

// ---------------------------------------------------------------------------------------------
std::uint64_t parse_u64(std::string_view key, std::string_view text) {
  std::uint64_t v = 0;
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec == std::errc::invalid_argument || p != end)
    throw std::invalid_argument(std::string(key) + ": \"" + std::string(text) + "\" is not a non-negative integer");
  if (ec == std::errc::result_out_of_range)
    throw std::invalid_argument(std::string(key) + ": " + std::string(text) + " is out of range");
  return v;
}

std::uint32_t parse_u32(std::string_view key, std::string_view text, std::uint32_t lo = 0,
                        std::uint32_t hi = UINT32_MAX) {
  const std::uint64_t v = parse_u64(key, text);
  if (v < lo || v > hi)
    throw std::invalid_argument(std::string(key) + ": " + std::to_string(v) + " is out of range [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<std::uint32_t>(v);
}

bool parse_bool(std::string_view key, std::string_view t) {
  if (t == "Y" || t == "y" || t == "1" || t == "true") return true;
  if (t == "N" || t == "n" || t == "0" || t == "false") return false;
  throw std::invalid_argument(std::string(key) + ": \"" + std::string(t) + "\" is not a boolean (Y/N, 1/0, true/false)");
}

void validate(const PolicyParams& p) {
  const auto& a = p.adaptive;
  if (a.adaptive_half_life < 1) throw std::invalid_argument("adaptive_half_life must be at least 1");
  if (a.adaptive_recompute_every < 1) throw std::invalid_argument("adaptive_recompute_every must be at least 1");
  if (a.adaptive_budget_permille > 1000) throw std::invalid_argument("adaptive_budget_permille must be at most 1000");
}

}  // namespace

void set_policy_param(PolicyParams& params, std::string_view key, std::string_view value) {
  bool found = false;
  for_each_haltpoll_param([&](std::string_view name, auto member, HaltpollParamKind) {
    if (found || key != name) return;
    found = true;
    auto& field = params.haltpoll.*member;
    if constexpr (std::is_same_v<std::remove_reference_t<decltype(field)>, bool>)
      field = parse_bool(key, value);
    else
      field = parse_u32(key, value);
  });
  if (found) return;
  auto& a = params.adaptive;
  if (key == "miss_cost_ns") params.miss_cost_ns = parse_u64(key, value);
  else if (key == "adaptive_half_life") a.adaptive_half_life = parse_u32(key, value, 1, 1u << 20);
  else if (key == "adaptive_recompute_every") a.adaptive_recompute_every = parse_u32(key, value, 1, 1u << 20);
  else if (key == "adaptive_budget_permille") a.adaptive_budget_permille = parse_u32(key, value, 0, 1000);
  else if (key == "adaptive_hysteresis_permille") a.adaptive_hysteresis_permille = parse_u32(key, value, 0, 1000000);
  else {
    std::string known;
    for (const auto& n : policy_param_names()) known += (known.empty() ? "" : ", ") + n;
    throw std::invalid_argument("unknown parameter \"" + std::string(key) + "\" (known: " + known + ")");
  }
}

std::vector<std::string> policy_param_names() {
  std::vector<std::string> names;
  for_each_haltpoll_param([&](const char* name, auto, HaltpollParamKind) { names.emplace_back(name); });
  names.insert(names.end(), {"miss_cost_ns", "adaptive_half_life", "adaptive_recompute_every",
                             "adaptive_budget_permille", "adaptive_hysteresis_permille"});
  return names;
}

std::unique_ptr<WindowPolicy> make_window_policy(std::string_view spec, const PolicyParams& params) {
  validate(params);
  if (spec == "haltpoll") return std::make_unique<HaltpollPolicy>(params.haltpoll);
  // The adaptive policy honours the same cap as the kernel's governor, so that comparisons are fair.
  if (spec == "adaptive")
    return std::make_unique<AdaptivePolicy>(params.adaptive, params.haltpoll.guest_halt_poll_ns, params.miss_cost_ns);
  if (spec == "oracle") return std::make_unique<OraclePolicy>(params.miss_cost_ns);
  constexpr std::string_view static_prefix = "static:";
  if (spec.starts_with(static_prefix)) {
    const std::string_view ns = spec.substr(static_prefix.size());
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(ns.data(), ns.data() + ns.size(), v);
    if (ns.empty() || ec != std::errc{} || p != ns.data() + ns.size())
      throw std::invalid_argument("window policy \"" + std::string(spec) +
                                  "\": static needs a window in ns, e.g. static:50000");
    return std::make_unique<StaticPolicy>(v);
  }
  throw std::invalid_argument("unknown window policy \"" + std::string(spec) +
                              "\" (expected haltpoll, adaptive, static:<ns> or oracle)");
}

WindowGovernor::WindowGovernor(std::unique_ptr<WindowPolicy> p) : policy_(std::move(p)) {
  if (!policy_) throw std::invalid_argument("WindowGovernor: null policy");
}

WindowGovernor::WindowGovernor(std::string_view spec, const PolicyParams& params)
    : WindowGovernor(make_window_policy(spec, params)) {}

}  // namespace haltpoll
