#include "tuning/rung.hpp"

#include <haltpoll/governor.hpp>

#include <algorithm>
#include <numeric>
#include <random>

namespace haltpolld {

namespace {

// Idle periods at or below `cap` in a histogram: their count and summed length (bucket bounds).
void add_periods(const haltpoll::LatencyHistogram& h, std::uint32_t cap, CapPrediction& p) {
  h.for_each_bucket([&](std::uint64_t upper_ns, std::uint64_t count) {
    const auto n = static_cast<double>(count);
    if (upper_ns <= cap) {
      p.hits += n;
      p.poll_ns += n * static_cast<double>(upper_ns);
    } else {
      p.halts += n;
      p.poll_ns += n * static_cast<double>(cap);
    }
  });
}

template <class V>
void grow_to(V& v, std::size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace

void RungMeasurement::add(const KernelSignals& in) {
  // The CPUs that poll without limit whatever the cap are none of the cap's doing: left out.
  const KernelSignals* kp = &in;
  KernelSignals limited;
  if (in.overrides) {
    limited = in;
    limited.cpus.clear();
    for (const auto& c : in.cpus) {
      if (!in.polls_without_limit(c.cpu)) limited.cpus.push_back(c);
      else if (std::find(unlimited_cpus.begin(), unlimited_cpus.end(), c.cpu) == unlimited_cpus.end())
        unlimited_cpus.push_back(c.cpu);
    }
    kp = &limited;
  }
  const KernelSignals& k = *kp;
  const std::size_t n = k.cpus.size();
  for (auto* v : {&cpu_periods, &cpu_halts, &cpu_halt_ns, &cpu_hits, &cpu_ipi, &cpu_poll_ns}) grow_to(*v, n);
  grow_to(cpu_ids, n);
  cpus = static_cast<std::uint32_t>(n);
  double busiest = 0, tp = 0, th = 0, tu_hits = 0, tpoll = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& c = k.cpus[i];
    cpu_ids[i] = c.cpu;
    const auto p = static_cast<double>(c.idle_periods());
    cpu_periods[i] += p;
    cpu_halts[i] += static_cast<double>(c.halts);
    cpu_halt_ns[i] += static_cast<double>(c.halt_ns);
    cpu_hits[i] += static_cast<double>(c.poll_hits);
    cpu_ipi[i] += static_cast<double>(c.ipi_skipped.value_or(0));
    cpu_poll_ns[i] += static_cast<double>(c.poll_ns);
    tp += p;
    th += static_cast<double>(c.halts);
    tu_hits += static_cast<double>(c.poll_hits);
    tpoll += static_cast<double>(c.poll_ns);
    polls += static_cast<double>(c.poll_entries);
    halt_ns += static_cast<double>(c.halt_ns);
    busiest = std::max(busiest, k.poll_cpu_percent(c));
  }
  periods += tp;
  halts += th;
  hits += tu_hits;
  poll_ns += tpoll;
  ++ticks;
  elapsed_ns += k.elapsed_ns;
  max_cpu_time += busiest * static_cast<double>(k.elapsed_ns);
  // IPI skips are summed only over a run of ticks that all counted them (the eBPF programs are
  // detached on some steady ticks): a partial sum would read as fewer wake-ups served.
  const auto ipi = k.total_ipi_skipped();
  if (ipi && (ticks == 1 || ipi_skipped)) ipi_skipped = ipi_skipped.value_or(0) + static_cast<double>(*ipi);
  else ipi_skipped.reset();
  const double t = static_cast<double>(k.elapsed_ns) / 1e9;
  if (t <= 0) return;
  const double x[4] = {tp / t, th / t, (ipi ? static_cast<double>(*ipi) : tu_hits) / t, tpoll / 1e9 / t};
  for (int s = 0; s < 4; ++s) {
    tick_sum[s] += t * x[s];
    tick_sq[s] += t * x[s] * x[s];
  }
}

void RungMeasurement::merge(const RungMeasurement& o) {
  const std::size_t n = std::max(cpu_periods.size(), o.cpu_periods.size());
  auto sum = [n](std::vector<double>& a, const std::vector<double>& b) {
    grow_to(a, n);
    for (std::size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  };
  sum(cpu_periods, o.cpu_periods);
  sum(cpu_halts, o.cpu_halts);
  sum(cpu_halt_ns, o.cpu_halt_ns);
  sum(cpu_hits, o.cpu_hits);
  sum(cpu_ipi, o.cpu_ipi);
  sum(cpu_poll_ns, o.cpu_poll_ns);
  if (cpu_ids.size() < o.cpu_ids.size()) cpu_ids = o.cpu_ids;
  cpus = std::max(cpus, o.cpus);
  ipi_skipped = ipi_skipped && o.ipi_skipped ? std::optional<double>(*ipi_skipped + *o.ipi_skipped) : std::nullopt;
  ticks += o.ticks;
  elapsed_ns += o.elapsed_ns;
  periods += o.periods;
  halts += o.halts;
  hits += o.hits;
  polls += o.polls;
  halt_ns += o.halt_ns;
  poll_ns += o.poll_ns;
  max_cpu_time += o.max_cpu_time;
  for (int s = 0; s < 4; ++s) {
    tick_sum[s] += o.tick_sum[s];
    tick_sq[s] += o.tick_sq[s];
  }
}

double RungMeasurement::between_se(int s) const noexcept {
  const double t = seconds();
  if (ticks < 2 || t <= 0) return 0;
  const double mean = tick_sum[s] / t;
  const double var = std::max(0.0, tick_sq[s] / t - mean * mean) * ticks / (ticks - 1.0);
  return std::sqrt(var / ticks);
}

Estimate RungMeasurement::rate(double count, int s) const noexcept {
  return {per_s(count), std::max(count_se(count), between_se(s))};
}

Estimate RungMeasurement::poll() const noexcept {
  const double v = poll_cpus();
  return {v, std::max(v * std::sqrt(2.0 / std::max(polls, 1.0)), between_se(3))};
}

double RungMeasurement::mean_halt_ns() const noexcept {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < cpu_halts.size(); ++i)
    if (cpu_halts[i] > 0) order.push_back(i);
  if (order.empty()) return 0;
  auto mean = [&](std::size_t i) { return cpu_halt_ns[i] / cpu_halts[i]; };
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return mean(a) < mean(b); });
  double seen = 0;
  for (std::size_t i : order) {
    seen += cpu_halts[i];
    if (seen >= halts / 2) return mean(i);
  }
  return mean(order.back());
}

CapPrediction predict_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns) {
  CapPrediction p;
  add_periods(h.poll_hit, cap_ns, p);
  add_periods(h.poll_halt, cap_ns, p);
  add_periods(h.halt, cap_ns, p);
  return p;
}

CapPrediction replay_cap(const IdlePeriodHistograms& h, std::uint32_t cap_ns, std::uint32_t grow_start_ns) {
  constexpr double kMaxPeriods = 8000;  // ~0.2 ms per rung per tick
  double total = 0;
  auto count = [&](const haltpoll::LatencyHistogram& x) {
    x.for_each_bucket([&](std::uint64_t, std::uint64_t n) { total += static_cast<double>(n); });
  };
  count(h.poll_hit);
  count(h.poll_halt);
  count(h.halt);
  CapPrediction p;
  if (total <= 0) return p;
  const double scale = std::min(1.0, kMaxPeriods / total);
  std::vector<std::uint64_t> periods;
  double carry = 0;  // the fractions rounding drops, carried to the next bucket
  auto expand = [&](const haltpoll::LatencyHistogram& x) {
    x.for_each_bucket([&](std::uint64_t upper_ns, std::uint64_t n) {
      const double want = static_cast<double>(n) * scale + carry;
      const auto k = static_cast<std::uint64_t>(want);
      carry = want - static_cast<double>(k);
      const std::uint64_t mid = upper_ns - upper_ns / 32;  // a bucket spans ~1/16 of its bound
      periods.insert(periods.end(), k, mid);
    });
  };
  expand(h.poll_hit);
  expand(h.poll_halt);
  expand(h.halt);
  std::mt19937_64 rng(0x68616c74);  // fixed: the same histogram always predicts the same
  std::shuffle(periods.begin(), periods.end(), rng);
  haltpoll::PolicyParams params;
  params.haltpoll.guest_halt_poll_ns = cap_ns;
  params.haltpoll.guest_halt_poll_grow_start = grow_start_ns;
  auto policy = haltpoll::make_window_policy("haltpoll", params);
  for (int pass = 0; pass < 2; ++pass) {
    for (const std::uint64_t d : periods) {
      const std::uint64_t w = policy->window_ns();
      if (pass == 1) {
        if (w > 0 && d <= w) {
          p.hits += 1;
          p.poll_ns += static_cast<double>(d);
        } else {
          p.halts += 1;
          p.poll_ns += static_cast<double>(w);
        }
      }
      policy->record(d, w);
    }
  }
  const double back = periods.empty() ? 0 : total / static_cast<double>(periods.size());
  p.hits *= back;
  p.halts *= back;
  p.poll_ns *= back;
  return p;
}

}  // namespace haltpolld
