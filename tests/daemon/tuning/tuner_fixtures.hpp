// Shared fixtures of the tuner's tests (tuner_rules_test.cpp, tuner_scenarios_test.cpp): synthetic
// two-CPU ticks of kernel counters for a load described per cap, a driver that feeds them to a
// Tuner and keeps its decisions, and the real guest's loads as such descriptions.
#pragma once

#include "tuning/tuner.hpp"

#include <algorithm>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace haltpolld::test {

// What one CPU did during a one-second tick at some cap.
struct CpuRates {
  double periods = 0;  // idle periods (wake-ups)
  double halts = 0;    // halts (after a timed-out poll when the cap is > 0)
  double poll_percent = 0;
  double halt_us = 0;  // mean halt residency
  std::optional<double> ipi;
};

inline CpuRates R(double periods, double halts, double poll_percent, double halt_us) {
  CpuRates r;
  r.periods = periods;
  r.halts = halts;
  r.poll_percent = poll_percent;
  r.halt_us = halt_us;
  return r;
}

using LoadFn = std::function<CpuRates(std::uint32_t cap, int cpu)>;

// A load measured at three points, as the real guest's closed loops were: at cap 0, below `knee`
// and from `knee` on, the same on every CPU, each with its IPI-skipped count.
inline LoadFn three_rungs(std::uint32_t knee, CpuRates at0, double ipi0, CpuRates below, double ipi_below, CpuRates above,
                   double ipi_above) {
  at0.ipi = ipi0;
  below.ipi = ipi_below;
  above.ipi = ipi_above;
  return [=](std::uint32_t cap, int) { return cap == 0 ? at0 : cap < knee ? below : above; };
}

inline Observation synth(std::uint32_t cap, const LoadFn& load, std::uint64_t tick = 0) {
  Observation o;
  o.tick = tick;
  o.current_ns = cap;
  o.elapsed_ns = 1'000'000'000;
  o.kernel.elapsed_ns = o.elapsed_ns;
  o.steal_percent = 0;
  double busiest = 0;
  for (int cpu : {0, 1}) {
    const CpuRates r = load(cap, cpu);
    CpuKernelSignals k;
    k.cpu = cpu;
    const auto periods = static_cast<std::uint64_t>(r.periods);
    const auto halts = static_cast<std::uint64_t>(std::min(r.halts, r.periods));
    if (cap > 0 && r.poll_percent > 0) {
      k.poll_entries = periods;
      k.halts = halts;
      k.poll_misses = halts;
      k.poll_hits = periods - halts;
    } else {
      k.halts = periods;
    }
    k.poll_ns = static_cast<std::uint64_t>(r.poll_percent * 1e7);
    k.halt_ns = static_cast<std::uint64_t>(static_cast<double>(k.halts) * r.halt_us * 1000);
    if (r.ipi) k.ipi_skipped = static_cast<std::uint64_t>(*r.ipi);
    busiest = std::max(busiest, o.kernel.poll_cpu_percent(k));
    o.kernel.cpus.push_back(k);
  }
  o.poll_cpu_percent = busiest;
  return o;
}

struct Trace {
  std::vector<std::uint32_t> values;
  std::vector<Decision> decisions;
  std::string log() const {
    std::ostringstream s;
    for (std::size_t i = 0; i < decisions.size(); ++i)
      s << i << ": " << decisions[i].guest_halt_poll_ns << " " << to_string(decisions[i].action) << " ["
        << to_string(decisions[i].rule) << "]: " << decisions[i].reason << "\n";
    return s.str();
  }
  bool any(Rule r) const {
    return std::any_of(decisions.begin(), decisions.end(), [r](const Decision& d) { return d.rule == r; });
  }
  int changes_after(std::size_t from) const {
    int n = 0;
    for (std::size_t i = std::max<std::size_t>(from, 1); i < values.size(); ++i) n += values[i] != values[i - 1];
    return n;
  }
};

inline Trace drive(Tuner& t, const LoadFn& load, int ticks, std::optional<double> penalty = std::nullopt,
            const std::function<void(Observation&)>& edit = {}) {
  Trace tr;
  for (int i = 0; i < ticks; ++i) {
    Observation o = synth(t.current_ns(), load, static_cast<std::uint64_t>(i));
    o.halt_exit_penalty_ns = penalty;
    if (edit) edit(o);
    Decision d = t.decide(o);
    tr.values.push_back(d.guest_halt_poll_ns);
    tr.decisions.push_back(d);
  }
  return tr;
}

// The 150 µs timer of real-guest §4 on CPU 0 (CPU 1 idle): no cap below the period polls, a cap
// between half the period and the period is the governor's trap (poll the cap, time out, halt the
// rest, every period), a cap above it polls through every period. The wake rate never moves.
inline CpuRates timer150(std::uint32_t cap, int cpu) {
  if (cpu == 1) return R(40, 40, 0, 20000);
  if (cap < 100000) return R(6676, 6676, 0, 140);
  if (cap < 150000) return R(6395, 6189, 33.2, 50);
  return R(6699, 54, 46.6, 100);
}

// A request/response client like the real guest's database client: nothing changes below 50 µs
// (its halted periods are ~60 µs), from 50 µs on both sides poll and its wake rate triples.
inline CpuRates db_client(std::uint32_t cap, int) {
  if (cap < 50000) return R(20000, 20000, 0, 60);
  return R(60000, 600, 38, 40);
}

}  // namespace haltpolld::test
