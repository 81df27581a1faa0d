// gen_traces: deterministic idle-duration traces for `haltpolld simulate` (one duration in ns per
// line). The random numbers come from splitmix64 and hand-written transforms, not from <random>'s
// distributions, so a seed gives the same trace with every standard library (up to the last-bit
// accuracy of the libm functions used in the transforms).
//
//   gen_traces --family bimodal|periodic|heavy-tailed|heavy-tailed-short|bursty [--seed N] [--periods N]
//   gen_traces --list
//
// The families, and why each is in the evaluation:
//   bimodal       i.i.d. mix: 70 % short hand-offs (lognormal, median 4 µs) and 30 % long sleeps
//                 (lognormal, median 1.5 ms): the case the kernel's grow/shrink was built for.
//   periodic      timer-driven work: segments of 10000 periods of one period each (15, 35, 70, 120,
//                 250 µs, ±5 % jitter): haltpoll grows to grow_start and then misses every period
//                 it cannot reach, because it only grows when the *halt* residency exceeds its limit.
//   heavy-tailed  Pareto gaps between requests (x_m = 60 µs, α = 1.0, truncated at 100 ms; about 2k
//                 wakes/s): no typical length, much of the mass just above grow_start where
//                 haltpoll's growth stalls, and a tail that keeps resetting it.
//   heavy-tailed-short
//                 Pareto with x_m = 4 µs, α = 0.8: mostly short hand-offs with a heavy tail. Being
//                 i.i.d. with haltpoll's grow_start already near the best fixed window, it bounds what
//                 any online policy can gain (see docs/performance.md).
//   bursty        phases of a Markov chain — busy (median 3 µs), medium (median 60 µs), quiet
//                 (exponential, mean 2 ms) — each lasting a geometric number of periods: tests how
//                 fast a policy follows a change.
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <iterator>

namespace {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): never 0, so log() is safe.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1p-53; }
  double normal() {
    constexpr double two_pi = 6.283185307179586;
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(two_pi * uniform());
  }
  double lognormal(double median, double sigma) { return median * std::exp(sigma * normal()); }
  double exponential(double mean) { return -mean * std::log(uniform()); }
  double pareto(double xm, double alpha) { return xm / std::pow(uniform(), 1.0 / alpha); }
  // Geometric number of trials with the given mean (>= 1).
  std::uint64_t geometric(double mean) {
    return 1 + static_cast<std::uint64_t>(std::floor(std::log(uniform()) / std::log1p(-1.0 / mean)));
  }

 private:
  std::uint64_t s_;
};

constexpr double us = 1000.0;
constexpr double max_idle_ns = 100e6;  // a 100 ms idle period is as long as anything we care about

void emit(double ns) {
  ns = std::fmin(std::fmax(ns, 100.0), max_idle_ns);  // a wake-up takes at least ~100 ns anyway
  std::printf("%llu\n", static_cast<unsigned long long>(std::llround(ns)));
}

void bimodal(Rng& r, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) emit(r.uniform() < 0.7 ? r.lognormal(4 * us, 0.5) : r.lognormal(1500 * us, 0.7));
}

void periodic(Rng& r, std::uint64_t n) {
  constexpr double periods_us[] = {15, 35, 70, 120, 250};
  constexpr std::uint64_t segment = 10000;
  for (std::uint64_t i = 0; i < n; ++i) {
    const double p = periods_us[(i / segment) % std::size(periods_us)] * us;
    emit(p * (0.95 + 0.1 * r.uniform()));
  }
}

void heavy_tailed(Rng& r, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) emit(r.pareto(60 * us, 1.0));
}

void heavy_tailed_short(Rng& r, std::uint64_t n) {
  for (std::uint64_t i = 0; i < n; ++i) emit(r.pareto(4 * us, 0.8));
}

void bursty(Rng& r, std::uint64_t n) {
  enum Phase { busy, medium, quiet };
  Phase phase = busy;
  std::uint64_t left = r.geometric(3000);
  for (std::uint64_t i = 0; i < n; ++i) {
    if (left-- == 0) {
      // Next phase: any other one, equally likely.
      phase = static_cast<Phase>((phase + 1 + (r.uniform() < 0.5 ? 0 : 1)) % 3);
      left = r.geometric(phase == busy ? 3000 : phase == medium ? 1000 : 300) - 1;
    }
    switch (phase) {
      case busy: emit(r.lognormal(3 * us, 0.6)); break;
      case medium: emit(r.lognormal(60 * us, 0.3)); break;
      case quiet: emit(r.exponential(2000 * us)); break;
    }
  }
}

struct Family {
  const char* name;
  void (*gen)(Rng&, std::uint64_t);
};
constexpr Family families[] = {
    {"bimodal", bimodal}, {"periodic", periodic}, {"heavy-tailed", heavy_tailed},
    {"heavy-tailed-short", heavy_tailed_short}, {"bursty", bursty}};

int usage() {
  std::fprintf(stderr, "usage: gen_traces --family bimodal|periodic|heavy-tailed|heavy-tailed-short|bursty [--seed N] [--periods N]\n"
                       "       gen_traces --list\n");
  return 2;
}

bool parse_u64(const char* s, std::uint64_t& out) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (*s == '\0' || *s == '-' || *end != '\0' || errno != 0) return false;
  out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string_view family;
  std::uint64_t seed = 1, periods = 200000;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--list") {
      for (const auto& f : families) std::printf("%s\n", f.name);
      return 0;
    }
    if (i + 1 >= argc) return usage();
    if (a == "--family") family = argv[++i];
    else if (a == "--seed") { if (!parse_u64(argv[++i], seed)) return usage(); }
    else if (a == "--periods") { if (!parse_u64(argv[++i], periods)) return usage(); }
    else return usage();
  }
  for (const auto& f : families) {
    if (family == f.name) {
      std::printf("# gen_traces --family %s --seed %llu --periods %llu\n", f.name,
                  static_cast<unsigned long long>(seed), static_cast<unsigned long long>(periods));
      Rng rng(seed * 0x2545F4914F6CDD1DULL + 1);
      f.gen(rng, periods);
      return 0;
    }
  }
  return usage();
}
