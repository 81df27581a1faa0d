// Fast draws from the cost distributions (des_sampler.hpp).
#include "sim/des_sampler.hpp"

#include <algorithm>
#include <cmath>

namespace haltpolld::des {

double normal_quantile(double p) noexcept {
  if (p > 0.5) return -normal_quantile(1 - p);
  // Abramowitz & Stegun 26.2.23 (|error| < 4.5e-4) as the start, then Newton steps on
  // Φ(z) = erfc(-z/√2)/2, which double the correct digits each.
  const double t = std::sqrt(-2 * std::log(p));
  double z = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1 + t * (1.432788 + t * (0.189269 + t * 0.001308))));
  const double inv_sqrt2 = 0.70710678118654752440;
  const double inv_sqrt_2pi = 0.39894228040143267794;
  for (int i = 0; i < 8; ++i) {
    const double dz = (0.5 * std::erfc(-z * inv_sqrt2) - p) / (inv_sqrt_2pi * std::exp(-0.5 * z * z));
    z -= dz;
    if (std::abs(dz) <= 1e-15 * std::max(1.0, std::abs(z))) break;
  }
  return z;
}

const ExpTable& ExpTable::get() {
  static const ExpTable table;
  return table;
}

ExpTable::ExpTable() : q_(QuantileTable::cells) {
  for (int i = 0; i < QuantileTable::cells; ++i)
    q_[static_cast<std::size_t>(i)] = static_cast<float>(-std::log1p(-static_cast<double>(i) / QuantileTable::cells));
}

// The outer cells exactly: the normal beyond a = Φ⁻¹(1 - 1/cells) is a + x for x drawn from
// exp(-a·x) and kept with probability exp(-x²/2) (Marsaglia's tail method).
double Sampler::outer(Rng& r, bool lower) const noexcept {
  static const double a = -normal_quantile(1.0 / QuantileTable::cells);
  double x = 0;
  for (;;) {
    x = r.exponential(1) / a;
    if (2 * r.exponential(1) > x * x) break;
  }
  const double z = a + x;
  return std::exp(sigma_ * (lower ? -z : z));
}

const float* SamplerTables::table(double sigma) {
  for (const Table& t : tables_)
    if (t.sigma == sigma) return t.q.get();
  // The normal quantiles are the same for every σ: computed once per process.
  static const std::vector<double> z = [] {
    std::vector<double> v(QuantileTable::cells + 1, 0);
    for (int i = 1; i < QuantileTable::cells; ++i)
      v[static_cast<std::size_t>(i)] = normal_quantile(static_cast<double>(i) / QuantileTable::cells);
    return v;
  }();
  auto q = std::make_unique<float[]>(QuantileTable::cells + 1);
  for (std::size_t i = 1; i < QuantileTable::cells; ++i) q[i] = static_cast<float>(std::exp(sigma * z[i]));
  tables_.push_back(Table{sigma, std::move(q)});
  return tables_.back().q.get();
}

Sampler SamplerTables::sampler(const Dist& d) {
  Sampler s;
  s.median_ = d.median_ns;
  s.fixed_ = round_ns(d.median_ns);
  if (d.sigma > 0 && d.median_ns > 0) {
    s.q_ = table(d.sigma);
    s.sigma_ = d.sigma;
  }
  if (d.tail_p > 0) {
    const double cut = std::min(1.0, d.tail_p) * (1 << QuantileTable::tail_bits);
    s.tail_cut_ = static_cast<std::int64_t>(cut);
    s.tail_frac_ = cut - static_cast<double>(s.tail_cut_);
  }
  s.tail_mean_ = d.tail_mean_ns;
  s.random_ = s.q_ != nullptr || s.tail_cut_ >= 0;
  return s;
}

}  // namespace haltpolld::des
