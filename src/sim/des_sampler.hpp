// Fast draws from the cost distributions (des_costs.hpp) for the discrete-event guest's event loop.
//
// A Dist's log-normal body is drawn by inverting its CDF through a table per σ: the quantiles
// exp(σ·Φ⁻¹(i/2048)), linear inside each of the 2048 equal-probability cells, and the two outer cells
// (beyond Φ⁻¹(1/2048) ≈ ±3.3) drawn exactly (Marsaglia's method for the normal's tail). A body costs
// one 64-bit random number, two table loads and a multiply-add, against a polar normal (two to three
// random numbers, a log, a sqrt) and an exp. Every cell keeps its probability exactly; inside a cell
// the density is flat, which moves the mean by less than 2e-4 of itself at σ = 1 (1.3e-5 at σ = 0.5)
// and leaves the quantiles at the cell edges exact. A Dist's exponential tail (probability tail_p)
// and the workload's exponential gaps are drawn likewise through a table of -ln(1 - i/2048), whose
// last cell is ln 2048 plus a new draw (the exponential forgets). σ 0 or a median 0 draws no random
// number; tail_p 0 draws none for the tail.
//
// Deterministic: the tables come from std::exp, std::log and std::erfc at construction and are
// stored as float, so that a last-bit difference between two C libraries almost never reaches a
// table entry; a draw is integer and IEEE arithmetic only, apart from the outer cells (std::log,
// std::exp, as Dist::draw). Dist::draw stays the exact reference (the sampler test compares them).
// Single-threaded: a SamplerTables belongs to one Guest; the samplers it hands out point into it.
#pragma once

#include "sim/des_costs.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace haltpolld::des {

// x rounded to the nearest integer, halves away from zero (std::llround but for x = 0.5 - 2^-54,
// which it takes to 1), without the library call.
inline Ns round_ns(double x) noexcept { return x >= 0 ? static_cast<Ns>(x + 0.5) : -static_cast<Ns>(0.5 - x); }

// The standard normal quantile Φ⁻¹(p), 0 < p < 1, to a few ulp (Newton on std::erfc).
double normal_quantile(double p) noexcept;

// The quantile tables' shape, and how a draw spends its 64 random bits: the top 11 pick the cell,
// the next 32 the place inside it, the low 21 decide the tail (below, Sampler::draw).
struct QuantileTable {
  static constexpr int bits = 11;
  static constexpr int cells = 1 << bits;  // 2048
  static constexpr int tail_bits = 21;
  static int cell(std::uint64_t b) noexcept { return static_cast<int>(b >> (64 - bits)); }
  static double within(std::uint64_t b) noexcept {
    return static_cast<double>(static_cast<std::uint32_t>(b >> tail_bits)) * 0x1.0p-32;
  }
  static std::int64_t tail(std::uint64_t b) noexcept {
    return static_cast<std::int64_t>(b & ((std::uint64_t{1} << tail_bits) - 1));
  }
};

// One exponential of mean 1 through the table of -ln(1 - i/cells). One per process (get()),
// immutable once made.
class ExpTable {
 public:
  static const ExpTable& get();
  double draw(Rng& r) const noexcept {
    double base = 0;
    for (;;) {
      const std::uint64_t b = r.next();
      const int i = QuantileTable::cell(b);
      if (i != QuantileTable::cells - 1) {
        const double lo = q_[static_cast<std::size_t>(i)];
        return base + lo + (q_[static_cast<std::size_t>(i) + 1] - lo) * QuantileTable::within(b);
      }
      base += q_[QuantileTable::cells - 1];  // beyond ln(cells): ln(cells) + a new exponential
    }
  }

 private:
  ExpTable();
  std::vector<float> q_;  // q_[i] = -ln(1 - i / cells), i < cells
};

// A Dist prepared for draws; points into the SamplerTables that made it.
class Sampler {
 public:
  Sampler() = default;
  // The tail is decided by the draw's low 21 bits against tail_p·2^21: below its whole part, a tail;
  // at it, a new uniform against its fraction; so P(tail) is tail_p exactly, independent of the body.
  [[gnu::always_inline]] Ns draw(Rng& r) const noexcept {
    if (!random_) return fixed_;
    const std::uint64_t b = r.next();
    double x = median_;
    if (q_ != nullptr) x *= body(r, b);
    const std::int64_t t = QuantileTable::tail(b);
    if (t <= tail_cut_ && (t < tail_cut_ || r.uniform() < tail_frac_)) x += tail_mean_ * ExpTable::get().draw(r);
    return round_ns(x);
  }

 private:
  friend class SamplerTables;
  double body(Rng& r, std::uint64_t b) const noexcept {
    const int i = QuantileTable::cell(b);
    if (static_cast<unsigned>(i - 1) < QuantileTable::cells - 2u) {
      const double lo = q_[i];
      return lo + (q_[i + 1] - lo) * QuantileTable::within(b);
    }
    return outer(r, i == 0);
  }
  double outer(Rng& r, bool lower) const noexcept;

  bool random_ = false;  // false: every draw is fixed_ (σ 0 or a median 0, and no tail)
  Ns fixed_ = 0;
  double median_ = 0;
  const float* q_ = nullptr;  // exp(σ·Φ⁻¹(i/cells)); null: the body is the median
  double sigma_ = 0;
  std::int64_t tail_cut_ = -1;  // ⌊tail_p·2^21⌋; -1: no tail
  double tail_frac_ = 0;        // tail_p·2^21 - tail_cut_
  double tail_mean_ = 0;
};

// The tables of one guest, one per σ in use.
class SamplerTables {
 public:
  SamplerTables() = default;
  SamplerTables(const SamplerTables&) = delete;
  SamplerTables& operator=(const SamplerTables&) = delete;

  Sampler sampler(const Dist& d);
  // An exponential of this mean.
  double exponential(Rng& r, double mean) const noexcept { return mean * ExpTable::get().draw(r); }

 private:
  const float* table(double sigma);
  struct Table {
    double sigma;
    std::unique_ptr<float[]> q;
  };
  std::vector<Table> tables_;
};

}  // namespace haltpolld::des
