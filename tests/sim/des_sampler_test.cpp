// The discrete-event guest's prepared samplers (src/sim/des_sampler.hpp) against the exact
// distributions: the normal quantile, the log-normal body through its table and exact outer
// cells, the exponential tail and gaps, and the draws that take no random number.
#include "sim/des_sampler.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace haltpolld::des;

namespace {
double phi(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

std::vector<double> draws(const Sampler& s, Rng& r, int n) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = static_cast<double>(s.draw(r));
  return v;
}

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return sum / static_cast<double>(v.size());
}

double quantile(std::vector<double> v, double q) {
  const auto k = static_cast<std::size_t>(q * static_cast<double>(v.size()));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}
}  // namespace

TEST_CASE("des sampler: the normal quantile inverts the normal CDF", "[des][sampler]") {
  for (double p : {1e-9, 1e-6, 1.0 / 2048, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, 1 - 1.0 / 2048, 1 - 1e-6}) {
    const double z = normal_quantile(p);
    CAPTURE(p, z);
    // Relative to the smaller tail, where the CDF is computed accurately.
    const double tail = std::min(p, 1 - p);
    CHECK(std::abs((p <= 0.5 ? phi(z) : 1 - phi(z)) - tail) <= 1e-12 * tail);
  }
  CHECK(normal_quantile(0.5) == Approx(0).margin(1e-15));
  CHECK(normal_quantile(0.975) == Approx(1.959963984540054).epsilon(1e-13));
}

TEST_CASE("des sampler: a log-normal body has the Dist's mean and quantiles", "[des][sampler]") {
  SamplerTables tables;
  Rng r(42);
  constexpr int n = 400000;
  for (double sigma : {0.2, 0.5, 1.0}) {
    const Dist d{10000, sigma, 0, 0};
    const std::vector<double> v = draws(tables.sampler(d), r, n);
    const double sd = d.median_ns * std::sqrt(std::exp(sigma * sigma) * (std::exp(sigma * sigma) - 1));
    CAPTURE(sigma);
    CHECK(std::abs(mean(v) - d.mean_ns()) <= 4 * sd / std::sqrt(n));
    for (double q : {0.01, 0.1, 0.5, 0.9, 0.99}) {
      CAPTURE(q);
      CHECK(quantile(v, q) == Approx(d.median_ns * std::exp(sigma * normal_quantile(q))).epsilon(0.01));
    }
    // The outer cells, drawn exactly: the share beyond the table's last quantile and their mean.
    const double edge = d.median_ns * std::exp(sigma * normal_quantile(1 - 1.0 / QuantileTable::cells));
    double above = 0, above_sum = 0;
    for (double x : v)
      if (x > edge) ++above, above_sum += x;
    const double p = 1.0 / QuantileTable::cells;
    CHECK(std::abs(above / n - p) <= 4 * std::sqrt(p * (1 - p) / n));
    // E[X | X > edge] for a log-normal: median·e^(σ²/2)·(1 − Φ(a − σ)) / (1 − Φ(a)).
    const double a = normal_quantile(1 - p);
    CHECK(above_sum / above == Approx(d.mean_ns() * (1 - phi(a - sigma)) / p).epsilon(0.05));
  }
}

TEST_CASE("des sampler: the tail comes with probability tail_p and the exponential's mean", "[des][sampler]") {
  SamplerTables tables;
  Rng r(7);
  constexpr int n = 1000000;
  for (double p : {0.01, 3.7e-4}) {
    const Dist d{1000, 0, p, 1e6};
    const std::vector<double> v = draws(tables.sampler(d), r, n);
    double tails = 0, excess = 0;
    for (double x : v)
      if (x > 1000) ++tails, excess += x - 1000;
    CAPTURE(p, tails);
    CHECK(std::abs(tails / n - p) <= 4 * std::sqrt(p * (1 - p) / n));
    CHECK(excess / tails == Approx(1e6).epsilon(5 / std::sqrt(tails)));
  }
}

TEST_CASE("des sampler: exponential gaps, the last cell included", "[des][sampler]") {
  SamplerTables tables;
  Rng r(3);
  constexpr int n = 2000000;
  std::vector<double> v(n);
  for (double& x : v) x = tables.exponential(r, 1000);
  CHECK(std::abs(mean(v) - 1000) <= 4 * 1000 / std::sqrt(n));
  // Beyond ln(cells) means: the last cell, one draw in 2048; the excess is again exponential.
  const double edge = 1000 * std::log(static_cast<double>(QuantileTable::cells));
  double above = 0, excess = 0;
  for (double x : v)
    if (x > edge) ++above, excess += x - edge;
  const double p = 1.0 / QuantileTable::cells;
  CHECK(std::abs(above / n - p) <= 4 * std::sqrt(p * (1 - p) / n));
  CHECK(excess / above == Approx(1000).epsilon(5 / std::sqrt(above)));
  CHECK(quantile(v, 0.5) == Approx(1000 * std::log(2.0)).epsilon(0.01));
}

TEST_CASE("des sampler: a fixed Dist draws no random number; rounding is llround's", "[des][sampler]") {
  SamplerTables tables;
  Rng r(11), untouched(11);
  for (const Dist& d : {Dist::constant(1234.5), Dist{0, 0.5, 0, 0}, Dist{777.4, 0, 0, 1e6}}) {
    const Sampler s = tables.sampler(d);
    CAPTURE(d.median_ns, d.sigma);
    for (int i = 0; i < 3; ++i) CHECK(s.draw(r) == std::llround(d.median_ns));
  }
  CHECK(r.next() == untouched.next());
  for (int i = 0; i < 100000; ++i) {
    const double x = r.uniform() * 1e7;
    REQUIRE(round_ns(x) == std::llround(x));
    REQUIRE(round_ns(-x) == std::llround(-x));
  }
  CHECK(round_ns(2.5) == 3);
  CHECK(round_ns(-2.5) == -3);
}
