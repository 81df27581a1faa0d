// Tuner scenarios: the incidents of the real guest and its evaluations, each a synthetic sequence
// of kernel counters shaped like what was measured (the governor's trap, the closed loops, the
// timer that polls without skipping an IPI, load changes, predicted shrinks, steal), and closed
// loops against the tick-level guest model (src/sim/guest_model.hpp). They are the tuner's
// acceptance suite: what each asserts is what the real guest needed. The rules one by one, at
// their boundaries, are in tuner_rules_test.cpp; the replay of the real recordings in replay_test.cpp.
#include "sim/guest_model.hpp"
#include "tuner_fixtures.hpp"

#include <catch2/catch.hpp>

#include <memory>

using namespace haltpolld;
using namespace haltpolld::test;

TEST_CASE("the governor's trap: a cap that polls and still halts every period is rejected") {
  for (Policy pol : {Policy::balanced, Policy::budget}) {
    TunerParams p;
    p.policy = pol;
    Tuner t(p, 0);
    auto tr = drive(t, timer150, 12, 20000.0);
    INFO(tr.log());
    // The first tick is the baseline; then straight to the first rung above half the halted
    // period (100 µs), which polls 33 % without removing a halt. budget stops there (over its
    // limit); balanced, without the IPI count, cannot rule out that the halts left are a closed
    // loop's remote wake-ups whose speed-up would pay, measures 200 µs, sees it catch the periods
    // and poll 47 % without paying, and goes back to 0.
    CHECK(tr.values[0] == 100000);
    const std::size_t back = pol == Policy::budget ? 1 : 2;
    if (pol == Policy::balanced) CHECK(tr.values[1] == 200000);
    CHECK(tr.values[back] == 0);
    CHECK(tr.changes_after(back + 1) == 0);
    CHECK(tr.decisions[back].rule == Rule::chosen);
  }
}

TEST_CASE("a closed loop's wake-rate rise pays for polling above the budget, without a penalty") {
  Tuner t;  // balanced, budget 10 %
  auto tr = drive(t, db_client, 15);
  INFO(tr.log());
  CHECK(tr.values.back() >= 50000);
  CHECK((tr.decisions.back().rule == Rule::steady || tr.decisions.back().rule == Rule::confirmed));
  // Under a hard budget of 10 % the same load is not allowed to poll 38 %.
  TunerParams p;
  p.policy = Policy::budget;
  Tuner b(p);
  auto tb = drive(b, db_client, 15);
  INFO(tb.log());
  CHECK(tb.values.back() == 0);
}

TEST_CASE("the measured penalty prices the halts a setting avoids; IPI-skipped counts replace poll hits") {
  // An open load: halted periods of 30 µs; from 25 µs on 90 % of them are caught, at 1.5 % poll.
  LoadFn open = [](std::uint32_t cap, int) -> CpuRates {
    if (cap < 25000) return R(5000, 5000, 0, 30);
    return R(5000, 500, 1.5, 10);
  };
  Tuner with_penalty;
  auto a = drive(with_penalty, open, 12, 20000.0);
  INFO(a.log());
  CHECK(a.values.back() >= 25000);
  Tuner without;
  auto b = drive(without, open, 12);
  INFO(b.log());
  CHECK(b.values.back() == 0);  // no penalty, no wake-rate rise: nothing shows it pays
  // The same poll hits ended by the load's own timer skip no IPI: with the eBPF count, no benefit.
  LoadFn local = [&](std::uint32_t cap, int cpu) {
    CpuRates r = open(cap, cpu);
    r.ipi = 0;
    return r;
  };
  Tuner ipi;
  auto c = drive(ipi, local, 12, 20000.0);
  INFO(c.log());
  CHECK(c.values.back() == 0);
}

TEST_CASE("budget: a steady overrun steps one rung down at once and caps the next climbs") {
  TunerParams p;
  p.policy = Policy::budget;
  p.max_poll_cpu_percent = 10;
  // Catches part of the periods at 12.5 µs, polls 5 % at 25 µs and 12 % above: 25000 is best
  // under the budget.
  LoadFn load = [](std::uint32_t cap, int) -> CpuRates {
    if (cap == 0) return R(20000, 20000, 0, 20);
    if (cap <= 12500) return R(25000, 15000, 2, 20);
    if (cap <= 25000) return R(40000, 400, 5, 10);
    return R(42000, 100, 12, 10);
  };
  Tuner t(p, 0);
  auto tr = drive(t, load, 15, 20000.0);
  INFO(tr.log());
  CHECK(tr.values.back() == 25000);
  // Started above the budget, in steady state: down at once.
  Tuner s(p, 50000);
  // A first sweep brings it down; then a later overrun in steady state is cut within one tick.
  auto ts = drive(s, load, 15, 20000.0);
  CHECK(ts.values.back() == 25000);
  LoadFn worse = [](std::uint32_t cap, int) -> CpuRates {
    if (cap == 0) return R(20000, 20000, 0, 20);
    return R(40000, 400, 15, 10);
  };
  auto d = s.decide(synth(25000, worse));
  CHECK(d.action == Action::shrink);
  CHECK(d.guest_halt_poll_ns == 12500);
  CHECK(d.rule == Rule::budget_overrun);
}

TEST_CASE("hysteresis: a noisy steady load sees no change after it converged") {
  std::uint64_t n = 0;
  LoadFn noisy = [&](std::uint32_t cap, int cpu) {
    CpuRates r = db_client(cap, cpu);
    const double f = 1.0 + 0.12 * ((++n % 5) / 4.0 - 0.5);  // ±6 %
    r.periods *= f;
    r.halts *= f;
    r.poll_percent *= f;
    return r;
  };
  Tuner t;
  auto tr = drive(t, noisy, 200);
  INFO(tr.log());
  CHECK(tr.changes_after(10) == 0);
}

TEST_CASE("hysteresis: the real pipe's wandering halts and poll share at a converged rung are not a new load") {
  // eval-kernel's load-change run (2026-12-01): at 25000 the pipe's halts moved 969/s <-> 1549/s
  // and its poll share 15.3 % <-> 9.6 % per CPU from tick to tick at ~85k wake-ups/s; the old
  // signature test re-swept it four times in 20 s.
  std::uint64_t n = 0;
  LoadFn pipe = [&](std::uint32_t cap, int) {
    if (cap < 25000) return R(12000, 12000, 0, 30);
    const bool a = (n++ / 2 / 3) % 2 == 0;  // two CPUs per tick: three ticks of each state
    return a ? R(42000, 480, 15.3, 20) : R(44000, 780, 9.6, 20);
  };
  Tuner t;
  auto tr = drive(t, pipe, 60);
  INFO(tr.log());
  CHECK(tr.values.back() >= 25000);
  CHECK(tr.changes_after(10) == 0);
}

TEST_CASE("a wake-rate rise without skipped IPIs is no closed-loop gain (a baseline taken as the load started)") {
  // eval-kernel 2026-12-01: the timer's sweep measured its baseline on the tick the timer started
  // (2865 wake-ups/s, not 6676), so 200000 looked 2.3 x "faster" and was chosen at 46 % poll CPU,
  // although it skipped 8 IPIs a second.
  for (bool counted : {true, false}) {
    int calls = 0;
    LoadFn starting = [&](std::uint32_t cap, int cpu) {
      CpuRates r = calls++ < 2 ? R(cpu == 0 ? 2800 : 40, cpu == 0 ? 2800 : 40, 0, 140) : timer150(cap, cpu);
      if (counted) r.ipi = 4;
      return r;
    };
    Tuner t;
    auto tr = drive(t, starting, 15);
    INFO("IPI-skipped counted " << counted << "\n" << tr.log());
    if (counted) CHECK(tr.values.back() == 0);
    else CHECK(tr.values.back() > 0);  // fooled: the counters alone cannot tell; why the eBPF count matters
  }
}

TEST_CASE("a near-tie is judged on poll CPU: a closed loop 5 % faster at the higher rung keeps it") {
  // The pipe's sweep (eval-kernel 2026-12-01): 195401 wake-ups/s at 25000 and 205653 at 400000 at
  // about the same poll CPU; the old 10 %-of-net slack chose 25000, which ran 35 % slower.
  LoadFn pipe = [](std::uint32_t cap, int) {
    if (cap == 0) return R(12000, 12000, 0, 30);
    CpuRates r = cap < 50000 ? R(97700, 340, 17.5, 20) : R(102800, 50, 17.9, 20);
    r.ipi = r.periods - r.halts;
    return r;
  };
  Tuner t;
  auto tr = drive(t, pipe, 15, 20000.0);
  INFO(tr.log());
  CHECK(tr.values.back() >= 50000);
}

TEST_CASE("a load change starts a new sweep; a one-tick blip does not") {
  Tuner t;
  auto tr = drive(t, db_client, 12);
  REQUIRE(tr.values.back() >= 50000);
  const std::uint32_t at = tr.values.back();
  // One tick at 1.6 × the wake rate: not a new load.
  LoadFn blip = [](std::uint32_t cap, int cpu) {
    CpuRates r = db_client(cap, cpu);
    r.periods *= 1.6;
    return r;
  };
  auto d = t.decide(synth(at, blip));
  CHECK(d.action == Action::hold);
  d = t.decide(synth(at, db_client));
  CHECK(d.action == Action::hold);
  // The timer replaces it: the wake rate falls ninefold; one tick is not yet a change (a tick
  // adds at most 3 to the detector's sum, so that one burst is not a load), the second starts
  // the sweep, which ends low.
  auto tt = drive(t, timer150, 10, 20000.0);
  INFO(tt.log());
  CHECK(tt.decisions[0].rule == Rule::steady);
  CHECK(tt.decisions[1].rule == Rule::sweep_change);
  CHECK(tt.values.back() == 0);
}

TEST_CASE("histograms: a lower rung predicted to keep the hits is tried, then confirmed or reverted") {
  for (bool holds : {true, false}) {
    // During the sweep (no histograms yet) the loop keeps speeding up to the top rung.
    bool swept = false;
    LoadFn pipe = [&](std::uint32_t cap, int) -> CpuRates {
      if (cap == 0) return R(15000, 15000, 0, 25);
      if (swept && cap < 400000) return holds ? R(50000, 100, 20, 5) : R(20000, 8000, 10, 25);
      const double c = static_cast<double>(cap);
      return R(30000 + c * 0.05, 5000 - c * 0.01, 20 + c / 40000, 25);
    };
    // A guest whose grow_start (12500) lets 25000 survive a long period's shrink (a rung below
    // 2 × grow_start is not a predicted-shrink candidate; a grow_start below the hits' 11 µs would
    // be the governor's trap, which the replay sees).
    TunerParams tp;
    tp.kernel_grow_start_ns = 12500;
    Tuner t(tp, 0);
    auto tr = drive(t, pipe, 12);
    INFO(tr.log());
    REQUIRE(tr.values.back() == 400000);
    swept = true;
    // Now the eBPF histograms arrive (as many hits as the counters count): all within 12 µs, 300
    // long periods a second that each poll 400 µs before halting.
    IdlePeriodHistograms h;
    for (int i = 0; i < 98000; ++i) h.poll_hit.record(2000 + (i % 10) * 1000);
    for (int i = 0; i < 300; ++i) h.poll_halt.record(5'000'000);
    auto with_hist = [&](Observation& o) { o.kernel.periods = h; };
    auto tc = drive(t, pipe, 4, std::nullopt, with_hist);
    INFO(tc.log());
    CHECK(tc.decisions[0].action == Action::shrink);
    CHECK(tc.decisions[0].guest_halt_poll_ns == 25000);
    CHECK(tc.decisions[0].rule == Rule::predicted_shrink);
    if (holds) {
      CHECK(tc.decisions[1].rule == Rule::confirmed);
      CHECK(tc.values.back() == 25000);
    } else {
      CHECK(tc.decisions[1].action == Action::revert);
      CHECK(tc.decisions[1].rule == Rule::confirmation_failed);
      CHECK(tc.values.back() == 400000);
      CHECK(tc.changes_after(2) == 0);  // no second try right away
    }
  }
}

TEST_CASE("histograms: no predicted shrink to a rung below 2 x grow_start, where one long period resets the limit") {
  LoadFn pipe = [](std::uint32_t cap, int) {
    if (cap == 0) return R(15000, 15000, 0, 25);
    const double c = static_cast<double>(cap);
    return R(30000 + c * 0.05, 5000 - c * 0.01, 20 + c / 40000, 25);
  };
  Tuner t;  // grow_start 50000
  REQUIRE(drive(t, pipe, 12).values.back() == 400000);
  IdlePeriodHistograms h;
  for (int i = 0; i < 98000; ++i) h.poll_hit.record(2000 + (i % 10) * 1000);
  for (int i = 0; i < 300; ++i) h.poll_halt.record(5'000'000);
  auto tc = drive(t, pipe, 4, std::nullopt, [&](Observation& o) { o.kernel.periods = h; });
  INFO(tc.log());
  for (const auto& d : tc.decisions)
    if (d.rule == Rule::predicted_shrink) CHECK(d.guest_halt_poll_ns >= 100000);
}

TEST_CASE("a closed loop in the governor's trap at a low rung is climbed past, not given up on") {
  // The real load_rr (eval-kernel 2026-12-01): at 12500 (below grow_start 50000) it polled 12.5 us
  // and halted on 40 % of its periods, slower than at 0; from 25000 on it ran 1.6 x faster.
  LoadFn rr = [](std::uint32_t cap, int) {
    CpuRates r = cap == 0 ? R(12400, 12400, 0, 20) : cap < 25000 ? R(9300, 3900, 3.1, 30) : R(20000, 150, 36, 20);
    // Even at 0 the real guest skipped 11420 IPIs/s (a CPU in the idle loop polls until it halts).
    r.ipi = cap == 0 ? 5710 : r.periods - r.halts;
    return r;
  };
  Tuner t;
  auto tr = drive(t, rr, 15, 23000.0);
  INFO(tr.log());
  CHECK(tr.values.back() >= 25000);
}

TEST_CASE("an open loop's polls end the climb even while it still halts on a tenth of its periods") {
  // The real 150 us timer in the load-change run (eval-kernel 2026-12-01): at 200000 it polled
  // 45 % per CPU, caught 90 % of its periods, still halted on 10 %, and skipped almost no IPI; the
  // climb went on to 400000 before it came back to 0.
  LoadFn timer = [](std::uint32_t cap, int cpu) {
    CpuRates r = cpu == 1 ? R(40, 40, 0, 20000) : cap < 100000 ? R(6676, 6676, 0, 140) : R(6700, 700, 45.5, 100);
    r.ipi = cap == 0 ? 0 : 4;
    return r;
  };
  Tuner t;
  auto tr = drive(t, timer, 10, 20000.0);
  INFO(tr.log());
  for (auto v : tr.values) CHECK(v <= 200000);
  CHECK(tr.values.back() == 0);
  CHECK(tr.changes_after(3) == 0);
}

TEST_CASE("a load that changes as its sweep ends is a load change, not the signature") {
  Tuner t;
  // Converge on the database client; stop at the tick whose decision ends the sweep.
  bool done = false;
  for (int i = 0; i < 20 && !done; ++i)
    done = t.decide(synth(t.current_ns(), db_client)).rule == Rule::chosen;
  REQUIRE(done);
  REQUIRE(t.current_ns() >= 50000);
  // The timer arrives on the very next tick, the one that confirms the choice on a whole tick:
  // it disagrees with what chose the rung, and the load is measured again from the bottom.
  auto tt = drive(t, timer150, 8, 20000.0);
  INFO(tt.log());
  CHECK(tt.decisions[0].rule == Rule::confirmation_failed);
  CHECK(tt.values.back() == 0);
}

TEST_CASE("a predicted shrink is confirmed at the daemon's whole tick, not at the sweep's pace") {
  LoadFn pipe = [](std::uint32_t cap, int) {
    if (cap == 0) return R(15000, 15000, 0, 25);
    const double c = static_cast<double>(cap);
    return R(30000 + c * 0.05, 5000 - c * 0.01, 20 + c / 40000, 25);
  };
  Tuner t;
  auto tr = drive(t, pipe, 2);
  CHECK(t.sweeping());  // the daemon ticks at sweep_interval_ms
  tr = drive(t, pipe, 10);
  REQUIRE(tr.values.back() == 400000);
  REQUIRE(!t.sweeping());
  IdlePeriodHistograms h;
  for (int i = 0; i < 98000; ++i) h.poll_hit.record(2000 + (i % 10) * 1000);
  for (int i = 0; i < 300; ++i) h.poll_halt.record(5'000'000);
  auto tc = drive(t, pipe, 1, std::nullopt, [&](Observation& o) { o.kernel.periods = h; });
  INFO(tc.log());
  REQUIRE(tc.decisions[0].rule == Rule::predicted_shrink);
  CHECK(t.phase() == "confirm");
  // A quarter second of a bursty load's gap would read as a slower loop and revert the shrink
  // (the real pipe in 0.13 s chunks: 12838 wake-ups/s on a 250 ms confirmation tick).
  CHECK(!t.sweeping());
}

TEST_CASE("a closed loop over two CPUs is credited its speed-up on both") {
  // eval-kernel's `db` load (bench_load_rr -w 60 -t 60) on the real guest: client and server on
  // one CPU each, ~9000 wake-ups/s per CPU at 0, the trap at 50000, 1.33 x the wake rate from
  // 100000 on at 45 % poll CPU per CPU. Its gain counted once (0.33) plus 18000 IPI-skipped/s at
  // 28.7 us (0.52) fell short of the 0.9 CPU-s/s of polling and the sweep chose 0.
  LoadFn db = three_rungs(100000, R(9000, 9000, 0, 80), 200, R(8000, 4000, 23, 60), 4000, R(12000, 20, 45, 20), 9000);
  Tuner t;
  auto tr = drive(t, db, 12, 28700.0);
  INFO(tr.log());
  CHECK(tr.values.back() >= 100000);
  CHECK(tr.changes_after(8) == 0);
}

namespace {
// A rung inside a closed loop's knee as the real pipe showed it (eval-kernel 2026-12-01, 250 ms
// sweep ticks of a pipe restarted in chunks): its sweep tick read fast, then on whole ticks it ran
// `slower` x slower than the rungs above the knee, halting on `steady_halts` of its wake-ups.
LoadFn knee_rung_reads_fast_once(std::uint32_t knee, CpuRates at0, double ipi0, CpuRates sweep_tick, double ipi_tick,
                                 CpuRates above, double ipi_above, double slower, double steady_halts) {
  at0.ipi = ipi0;
  sweep_tick.ipi = ipi_tick;
  above.ipi = ipi_above;
  auto visits = std::make_shared<int>(0);
  return [=](std::uint32_t cap, int cpu) {
    if (cap == 0) return at0;
    if (cap >= knee) return above;
    if (cpu == 0) ++*visits;
    if (*visits == 1) return sweep_tick;
    CpuRates r = R(above.periods / slower, above.periods / slower * steady_halts, sweep_tick.poll_percent, 20);
    r.ipi = r.periods - r.halts;
    return r;
  };
}
}  // namespace

TEST_CASE("a closed loop's knee rung that read fast on its sweep tick is measured again, not kept") {
  // The real pipe's sweep: 25000 measured 7 % more wake-ups than 400000 on its tick, with 7 x the
  // halts, and then ran 1.3 x slower than 100000 in steady state. The whole ticks that confirm a
  // choice show it; the sweep that follows keeps them for 25000 and chooses above the knee.
  const LoadFn pipe = knee_rung_reads_fast_once(50000, R(15600, 15600, 0, 30), 76, R(94275, 520, 16.5, 20), 95081,
                                                R(87713, 76, 19.3, 20), 84579, 1.3, 0.04);
  Tuner t;
  auto tr = drive(t, pipe, 30, 55300.0);
  INFO(tr.log());
  CHECK(tr.values.back() >= 50000);
  CHECK(tr.changes_after(20) == 0);
}

TEST_CASE("a closed loop's rung that halts on 4 % of its wake-ups loses to one at 0.35 % that polls 11 points more") {
  // The real pipe, second sweep of the same evaluation: 25000 at 116561 wake-ups/s, 4.3 % halting,
  // 23.8 % poll; 50000 at 107560/s, 0.35 % halting, 34.6 % poll. v2 chose 25000 on its tick and the
  // pipe ran 1.5 x slower there than at 100000; on whole ticks that is what 25000 shows.
  const LoadFn pipe = knee_rung_reads_fast_once(50000, R(9648, 9648, 0, 30), 150, R(58280, 2478, 23.8, 20), 53287,
                                                R(53780, 188, 34.6, 20), 49802, 1.5, 0.043);
  Tuner t;
  auto tr = drive(t, pipe, 30, 20700.0);
  INFO(tr.log());
  CHECK(tr.values.back() >= 50000);
  CHECK(tr.changes_after(20) == 0);
}

TEST_CASE("steal above the threshold steps down and blocks growth") {
  Tuner t(TunerParams{}, 200000);
  Observation o = synth(200000, db_client);
  o.steal_percent = 30;
  auto d = t.decide(o);
  CHECK(d.action == Action::shrink);
  CHECK(d.guest_halt_poll_ns == 100000);
  CHECK(d.rule == Rule::steal_backoff);
}

TEST_CASE("a short burst of steal blocks growth only while it lasts, then the load is swept again") {
  // The real guest (eval-kernel 2026-12-01): 10-29 % steal for two ticks as load_rr started, in
  // the middle of its sweep; growth was blocked for 61 ticks and the load, counted as swept, ran
  // the whole evaluation cell at 0.
  Tuner t;
  auto tr = drive(t, db_client, 2);
  REQUIRE(t.sweeping());
  tr = drive(t, db_client, 2, std::nullopt, [](Observation& o) { o.steal_percent = 28.6; });
  INFO(tr.log());
  CHECK(tr.decisions[0].rule == Rule::steal_backoff);
  CHECK(tr.values.back() < tr.decisions[0].previous_ns);  // stepped down
  auto after = drive(t, db_client, 15);
  INFO(after.log());
  CHECK(after.values.back() >= 50000);
}

TEST_CASE("latency policy: the lowest rung whose halt-exit wait per wake-up meets the target") {
  TunerParams p;
  p.policy = Policy::latency;
  p.target_wake_latency_ns = 3000;  // at 20 µs per halt: at most 15 % of wake-ups may halt
  Tuner t(p, 0);
  // The timer: halting at every cap below 150 µs, so only 200000 meets the target.
  auto tr = drive(t, timer150, 12, 20000.0);
  INFO(tr.log());
  CHECK(tr.values.back() == 200000);
  // Without a measured penalty it still favours latency (fewest halts) and says so.
  Tuner u(p, 0);
  auto tu = drive(u, timer150, 12);
  INFO(tu.log());
  CHECK(tu.values.back() >= 200000);
}

// ---- closed loops against the simulated guest ----

namespace {

struct LoopResult {
  double poll_cpu = 0;      // busiest CPU, mean over the tail
  double us_per_op = 0;     // closed loop: round-trip time over the tail
  std::uint32_t final_ns = 0;
  int changes_in_tail = 0;
};

LoopResult run_loop(LoadModel load, const TunerParams& p, std::uint32_t start, int ticks, int tail,
                    bool ebpf = false, std::uint32_t initial_limit = 0) {
  GuestModelParams gp;
  gp.ebpf = ebpf;
  SimulatedGuest g(std::move(load), 2, gp, 7);
  g.set_poll_limits(initial_limit);
  Tuner t(p, start);
  LoopResult r;
  double trips = 0, secs = 0;
  std::uint32_t last = start;
  for (int i = 0; i < ticks; ++i) {
    Observation o = g.run(200'000'000, t.current_ns(), 90);
    if (ebpf) o.halt_exit_penalty_ns = 20000;
    Decision d = t.decide(o);
    if (d.reset_limits) g.reset_poll_limits();
    if (i >= ticks - tail) {
      r.poll_cpu += *o.poll_cpu_percent / tail;
      trips += static_cast<double>(g.last_round_trips());
      secs += 0.2;
      r.changes_in_tail += d.guest_halt_poll_ns != last;
    }
    last = d.guest_halt_poll_ns;
  }
  r.us_per_op = trips > 0 ? secs * 1e6 / trips : 0;
  r.final_ns = t.current_ns();
  return r;
}

LoopResult run_static(LoadModel load, std::uint32_t ns, int ticks = 20) {
  TunerParams p;
  p.policy = Policy::static_value;
  p.static_ns = ns;
  return run_loop(std::move(load), p, ns, ticks, ticks / 2);
}

}  // namespace

TEST_CASE("model: the closed-loop pipe reproduces the real guest's response (44 vs 6 us/op)") {
  const auto at0 = run_static(LoadModel::pipe_closed(), 0);
  const auto at10 = run_static(LoadModel::pipe_closed(), 10000);
  const auto at200 = run_static(LoadModel::pipe_closed(), 200000);
  INFO("us/op: 0 -> " << at0.us_per_op << ", 10000 -> " << at10.us_per_op << ", 200000 -> " << at200.us_per_op);
  CHECK(at0.us_per_op == Approx(44.2).epsilon(0.15));
  CHECK(at200.us_per_op == Approx(6.1).epsilon(0.2));
  // The knee: a cap below the halted periods stays at the halting speed.
  CHECK(at10.us_per_op > 0.8 * at0.us_per_op);
}

TEST_CASE("model: balanced drives the closed-loop pipe to within 1.15 x of the best static") {
  for (bool ebpf : {false, true}) {
    double best = 1e9;
    for (std::uint32_t ns : {0u, 25000u, 50000u, 100000u, 200000u, 400000u})
      best = std::min(best, run_static(LoadModel::pipe_closed(), ns).us_per_op);
    // From 0, and from the kernel's default 200000 where the loop already polls and rarely halts
    // (a busy guest is swept, not sent to the bottom as an idle one would be).
    for (std::uint32_t start : {0u, 200000u}) {
      const auto r = run_loop(LoadModel::pipe_closed(), TunerParams{}, start, 60, 40, ebpf);
      INFO("ebpf " << ebpf << ", start " << start << ": best static " << best << " us/op; balanced " << r.us_per_op
                   << " us/op at " << r.final_ns << " ns");
      CHECK(r.final_ns >= 25000);
      CHECK(r.us_per_op <= 1.15 * best);
      CHECK(r.changes_in_tail == 0);
    }
  }
}

TEST_CASE("model: the 150 us timer stays at <= 50000 and polls under 3 % under balanced and budget") {
  for (Policy pol : {Policy::balanced, Policy::budget}) {
    for (bool ebpf : {false, true}) {
      TunerParams p;
      p.policy = pol;
      const auto r = run_loop(LoadModel::timer_150us(), p, 200000, 60, 40, ebpf);
      INFO(to_string(pol) << " ebpf " << ebpf << ": poll " << r.poll_cpu << "%, final " << r.final_ns);
      CHECK(r.final_ns <= 50000);
      CHECK(r.poll_cpu <= 3.0);
      CHECK(run_static(LoadModel::timer_150us(), 200000).poll_cpu >= 30);
    }
  }
}

TEST_CASE("model: a lowered cap reaches a CPU that never halts only through reset_limits") {
  // The real guest's pinned 150 us timer once its CPU's limit reached 200000 (measured: 93 % poll,
  // no halt, at cap 200000 and still after the cap went to 20000): every wake-up arrives within
  // the limit, so the CPU never halts and the governor never lowers it (docs/tuning.md).
  const LoadModel pinned{"timer_150us_pinned", {{1.0, 145000, 0}}, 5000};
  for (bool reset : {true, false}) {
    TunerParams p;
    p.reset_limits = reset;
    const auto r = run_loop(pinned, p, 200000, 60, 40, true, 200000);
    INFO("reset_limits " << reset << ": poll " << r.poll_cpu << "%, final " << r.final_ns);
    CHECK(r.final_ns <= 50000);
    if (reset) CHECK(r.poll_cpu <= 3.0);
    else CHECK(r.poll_cpu >= 30.0);  // the fault the reset exists for: the cap moved, the CPU did not
  }
}

TEST_CASE("model: an idle guest polls at most 0.5 % under balanced") {
  const auto r = run_loop(LoadModel::idle_guest(), TunerParams{}, 200000, 60, 40);
  INFO("idle: poll " << r.poll_cpu << "%, final " << r.final_ns);
  CHECK(r.poll_cpu <= 0.5);
  CHECK(r.final_ns == 0);
}


TEST_CASE("replay_cap: the library's haltpoll model over a histogram sees the governor's trap that predict_cap does not") {
  IdlePeriodHistograms timer;
  for (int i = 0; i < 6600; ++i) timer.poll_halt.record(145000 + (i % 10) * 500);
  // Steady state at cap 200000 says every period is a hit; replayed from a limit of 0 the limit
  // grows 50000 -> 100000 and stops there (a 145 us period halts for 45 us < 100000): all halt.
  const auto steady = predict_cap(timer, 200000);
  const auto replayed = replay_cap(timer, 200000, 50000);
  CHECK(steady.hits == Approx(6600).epsilon(0.01));
  CHECK(replayed.hits < 0.01 * 6600);
  CHECK(replayed.halts == Approx(6600).epsilon(0.01));
  CHECK(replayed.poll_ns == Approx(6600 * 100000.0).epsilon(0.02));  // polls 100 us, then halts
  // A few longer periods (250 us: a 150 us halt after a 100 us poll) carry the limit to the cap,
  // where the timer's periods hit.
  IdlePeriodHistograms mixed = timer;
  for (int i = 0; i < 330; ++i) mixed.poll_halt.record(250000);
  const auto m = replay_cap(mixed, 200000, 50000);
  CHECK(m.hits > 0.9 * 6600);
  // Below grow_start the first shrink resets the limit: a 12.5 us cap over 5 ms periods halts.
  IdlePeriodHistograms idle;
  for (int i = 0; i < 100; ++i) idle.halt.record(5'000'000);
  const auto i0 = replay_cap(idle, 12500, 50000);
  CHECK(i0.hits == 0);
  CHECK(i0.halts == Approx(100).epsilon(0.02));
}
