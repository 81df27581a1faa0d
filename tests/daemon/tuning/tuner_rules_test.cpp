// Tuner rules one by one: each decision parameter just below and just above its boundary, each
// rule by the identifier it reports (Decision::rule), and the bookkeeping around them (the ladder,
// the IPI-skip sums, the eBPF attach pattern, grow_start, the poll-limit reset). Pure: the `unit`
// label, so the arm64 legs run them too. The incidents are in tuner_scenarios_test.cpp.
#include "tuner_fixtures.hpp"

#include <algorithm>

#include <catch2/catch.hpp>

using namespace haltpolld;
using namespace haltpolld::test;

TEST_CASE("static policy applies the configured value, clamped") {
  TunerParams p;
  p.policy = Policy::static_value;
  p.static_ns = 50000;
  Tuner t(p, 200000);
  auto d = t.decide(synth(200000, timer150));
  CHECK(d.guest_halt_poll_ns == 50000);
  CHECK(d.action == Action::set);
  p.static_ns = 900000;
  t.set_params(p);
  CHECK(t.decide(synth(50000, timer150)).guest_halt_poll_ns == p.max_ns);
}

TEST_CASE("params validation names the problem") {
  TunerParams p;
  CHECK(validate(p).empty());
  p.min_ns = 500000;
  CHECK(validate(p).find("min_ns") != std::string::npos);
  p = {};
  p.ladder_factor = 1.0;
  CHECK(validate(p).find("ladder_factor") != std::string::npos);
  p = {};
  p.min_periods = 0;
  CHECK(validate(p).find("min_periods") != std::string::npos);
}

TEST_CASE("the ladder is geometric from start_ns, bounded by min_ns and max_ns") {
  Tuner t;
  CHECK(t.ladder() == std::vector<std::uint32_t>{0, 12500, 25000, 50000, 100000, 200000, 400000});
  TunerParams p;
  p.min_ns = 20000;
  p.max_ns = 150000;
  Tuner u(p);
  CHECK(u.ladder() == std::vector<std::uint32_t>{20000, 25000, 50000, 100000, 150000});
  // A rung exactly at min_ns or max_ns appears once; min_ns == max_ns is a one-rung ladder.
  p.min_ns = 25000;
  p.max_ns = 100000;
  CHECK(ladder_of(p) == std::vector<std::uint32_t>{25000, 50000, 100000});
  p.max_ns = 25000;
  CHECK(ladder_of(p) == std::vector<std::uint32_t>{25000});
}

TEST_CASE("one rung down is the highest rung strictly below, or the bottom one") {
  const std::vector<std::uint32_t> l = ladder_of(TunerParams{});
  CHECK(rung_below(l, 12500) == 0);
  CHECK(rung_below(l, 12501) == 12500);
  CHECK(rung_below(l, 400000) == 200000);
  CHECK(rung_below(l, 0) == 0);
  CHECK(rung_below(l, 1000000) == 400000);
}

TEST_CASE("the eBPF programs are wanted in sweeps and confirmations, and on one steady tick in steady_trace_every") {
  TunerParams tp;
  tp.steady_trace_every = 5;
  Tuner t(tp, 0);
  // Never swept and busy: the first decision starts a sweep, which wants them on every tick.
  std::vector<bool> want;
  std::vector<bool> sweeping;
  for (int i = 0; i < 40; ++i) {
    t.decide(synth(t.current_ns(), db_client, static_cast<std::uint64_t>(i)));
    want.push_back(t.wants_kernel_trace());
    sweeping.push_back(t.phase() != "steady");  // a sweep and the confirmation of its choice
  }
  std::size_t first_steady = 0;
  for (std::size_t i = 0; i < sweeping.size(); ++i) {
    if (sweeping[i]) {
      CHECK(want[i]);
      first_steady = i + 1;
    }
  }
  REQUIRE(first_steady > 1);
  REQUIRE(first_steady + 12 < want.size());
  // Right after the sweep: attached for the first steady tick (its histogram feeds the shrink
  // prediction), then one tick in five.
  // want[i] is for the tick after decision i; decision first_steady ended the sweep.
  CHECK(want[first_steady]);
  int attached = 0;
  for (std::size_t i = first_steady; i < first_steady + 10; ++i) attached += want[i];
  CHECK(attached == 2);
  for (std::size_t i = first_steady + 1; i < first_steady + 5; ++i) CHECK(!want[i]);
  CHECK(want[first_steady + 5]);

  // 1: always attached.
  tp.steady_trace_every = 1;
  t.set_params(tp);
  for (int i = 0; i < 5; ++i) {
    t.decide(synth(t.current_ns(), db_client, static_cast<std::uint64_t>(100 + i)));
    CHECK(t.wants_kernel_trace());
  }
  tp.steady_trace_every = 0;
  CHECK(validate(tp).find("steady_trace_every") != std::string::npos);
}

TEST_CASE("an IPI-skip sum is kept only over ticks that all counted them") {
  // With the eBPF programs detached on some steady ticks, a rung measured over two ticks of which
  // one had no IPI-skip count would read half the wake-ups served.
  KernelSignals with, without;
  with.elapsed_ns = without.elapsed_ns = 1'000'000'000;
  CpuKernelSignals c;
  c.poll_entries = 10000;
  c.poll_hits = 9000;
  c.poll_misses = 1000;
  c.halts = 1000;
  without.cpus.push_back(c);
  c.ipi_skipped = 8000;
  with.cpus.push_back(c);

  RungMeasurement a;
  a.add(with);
  a.add(with);
  REQUIRE(a.ipi_skipped);
  CHECK(*a.ipi_skipped == 16000);
  a.add(without);
  CHECK(!a.ipi_skipped);
  a.add(with);
  CHECK(!a.ipi_skipped);  // not restarted in the middle of a run
  CHECK(a.useful_rate() == Approx(9000));

  RungMeasurement b;
  b.add(without);
  b.add(with);
  CHECK(!b.ipi_skipped);

  // Compared with a measurement that has them, one without counts poll hits on both sides: the
  // same tick with and without the count is the same load.
  RungMeasurement e;
  e.add(with);
  CHECK(e.useful_rate() == Approx(8000));
  RungMeasurement f;
  f.add(without);
  CHECK(consistent(e, f, 2.0, Noise{0, 0}, kUseful));
  RungMeasurement g;
  KernelSignals fewer = with;
  fewer.cpus[0].ipi_skipped = 4000;
  g.add(fewer);
  CHECK_FALSE(consistent(e, g, 2.0, Noise{0, 0}, kUseful));
}

TEST_CASE("a value changed behind the tuner's back restarts it from that value") {
  Tuner t(TunerParams{}, 0);
  drive(t, db_client, 12);
  auto d = t.decide(synth(25000, db_client));
  CHECK(d.rule == Rule::restarted);
  CHECK(d.action == Action::hold);
  CHECK(d.previous_ns == 25000);
}

TEST_CASE("no kernel counters: hold with the reason") {
  Tuner t(TunerParams{}, 30000);
  Observation o;
  o.current_ns = 30000;
  o.elapsed_ns = 1'000'000'000;
  auto d = t.decide(o);
  CHECK(d.action == Action::hold);
  CHECK(d.guest_halt_poll_ns == 30000);
  CHECK(d.rule == Rule::no_counters);
}

TEST_CASE("a guest whose kernel does not poll: hold, say so and say what would make it poll") {
  Tuner t(TunerParams{}, 200000);
  Observation o;
  o.current_ns = 200000;
  o.elapsed_ns = 1'000'000'000;
  o.kernel.elapsed_ns = o.elapsed_ns;
  o.kernel.counters = KernelSignals::Counters::tracepoint;
  // Frequent halts, which on a haltpoll guest would start a sweep: here no value can change them.
  for (int c = 0; c < 2; ++c) {
    CpuKernelSignals k;
    k.cpu = c;
    k.halts = 30000;
    k.halt_ns = 600'000'000;
    k.outcomes_exact = true;
    o.kernel.cpus.push_back(k);
  }
  for (int tick = 1; tick <= 5; ++tick) {
    o.tick = static_cast<std::uint64_t>(tick);
    auto d = t.decide(o);
    CHECK(d.action == Action::hold);
    CHECK(d.guest_halt_poll_ns == 200000);
    CHECK(d.rule == Rule::kernel_does_not_poll);
    CHECK(d.reason.find(kHowToEnableHaltpoll) != std::string::npos);  // the remedy where the symptom is
  }
  CHECK(!t.sweeping());
  // The same halts from cpuidle counters are a load worth sweeping.
  o.kernel.counters = KernelSignals::Counters::cpuidle;
  o.tick = 6;
  t.decide(o);
  CHECK(t.sweeping());
}

TEST_CASE("grow_start follows a small cap only when managed") {
  TunerParams p;
  Tuner t(p);
  CHECK(!t.grow_start_for(25000));
  p.manage_grow_start = true;
  p.kernel_grow_start_ns = 50000;
  t.set_params(p);
  CHECK(t.grow_start_for(25000) == 12500u);
  CHECK(t.grow_start_for(200000) == 50000u);
  CHECK(t.grow_start_for(0) == 50000u);
}

TEST_CASE("grow_start at the cap: every cap but 0 is its own grow_start") {
  TunerParams p;
  p.grow_start_at_cap = true;
  p.kernel_grow_start_ns = 50000;
  Tuner t(p);
  CHECK(t.grow_start_for(25000) == 25000u);
  CHECK(t.grow_start_for(100000) == 100000u);
  CHECK(t.grow_start_for(1) == 1u);
  CHECK(t.grow_start_for(0) == 50000u);  // no polling: the guest's own
  // Each writes its own grow_start: the configuration refuses both.
  p.manage_grow_start = true;
  CHECK(validate(p).rfind("grow_start_at_cap: excludes manage_grow_start", 0) == 0);
}

TEST_CASE("grow_start at the cap: a raised value resets the limits too, unless it comes from 0") {
  TunerParams p;
  p.policy = Policy::static_value;
  p.grow_start_at_cap = true;
  p.static_ns = 100000;
  Tuner t(p, 50000);
  // Raised from 50000: a CPU left at the old cap's limit would stay there (its halts in the trap
  // are shorter than it): zeroed, its first halt within the new cap puts it at the cap.
  auto d = t.decide(synth(50000, timer150));
  CHECK(d.guest_halt_poll_ns == 100000);
  CHECK(d.grow_start_ns == 100000u);
  CHECK(d.reset_limits);
  // Raised from 0: the limits are 0 already, no governor round trip.
  p.static_ns = 0;
  t.set_params(p);
  d = t.decide(synth(100000, timer150));
  CHECK(d.guest_halt_poll_ns == 0);
  CHECK(d.grow_start_ns == 50000u);
  CHECK(d.reset_limits);  // lowered
  p.static_ns = 25000;
  t.set_params(p);
  d = t.decide(synth(0, timer150));
  CHECK(d.guest_halt_poll_ns == 25000);
  CHECK(d.grow_start_ns == 25000u);
  CHECK_FALSE(d.reset_limits);
  // Without reset_limits no reset either way.
  p.reset_limits = false;
  p.static_ns = 50000;
  t.set_params(p);
  d = t.decide(synth(25000, timer150));
  CHECK(d.guest_halt_poll_ns == 50000);
  CHECK_FALSE(d.reset_limits);
}

TEST_CASE("lowering the value asks for a poll-limit reset, raising it does not") {
  TunerParams p;
  p.policy = Policy::static_value;
  p.static_ns = 20000;
  Tuner t(p, 200000);
  auto d = t.decide(synth(200000, timer150));
  CHECK(d.guest_halt_poll_ns == 20000);
  CHECK(d.reset_limits);
  p.static_ns = 100000;
  t.set_params(p);
  d = t.decide(synth(20000, timer150));
  CHECK(d.guest_halt_poll_ns == 100000);
  CHECK_FALSE(d.reset_limits);
  p.static_ns = 50000;
  p.reset_limits = false;
  t.set_params(p);
  d = t.decide(synth(100000, timer150));
  CHECK(d.guest_halt_poll_ns == 50000);
  CHECK_FALSE(d.reset_limits);
}


// ---- each decision parameter just below and just above its boundary ----

namespace {

// An open load (its wake rate never moves) on two CPUs: halts on every period below `knee`, from
// `knee` on catches `caught` of its periods at `poll` % per CPU, each a remote wake-up that
// skipped the IPI. Large counts: the Poisson noise is far below every margin used here.
LoadFn open_load(std::uint32_t knee, double rate, double caught, double poll) {
  return [=](std::uint32_t cap, int) {
    CpuRates r = cap < knee ? R(rate, rate, 0, 40) : R(rate, rate * (1 - caught), poll, 10);
    r.ipi = cap < knee ? 0 : rate * caught;
    return r;
  };
}

// Drives a tuner from 0 until its sweep chose a rung; returns that decision.
Decision until_chosen(Tuner& t, const LoadFn& load, std::optional<double> penalty, int ticks = 20) {
  for (int i = 0; i < ticks; ++i) {
    Observation o = synth(t.current_ns(), load, static_cast<std::uint64_t>(i));
    o.halt_exit_penalty_ns = penalty;
    const Decision d = t.decide(o);
    if (d.rule == Rule::chosen) return d;
  }
  FAIL("no sweep chose a rung in " << ticks << " ticks");
  return {};
}

// The rung a tuner settles on (the end of its confirmation) for a load.
std::uint32_t settled(TunerParams p, const LoadFn& load, std::optional<double> penalty) {
  Tuner t(p, 0);
  auto tr = drive(t, load, 25, penalty);
  INFO(tr.log());
  return tr.values.back();
}

}  // namespace

TEST_CASE("min_benefit_ratio: a rung is kept while its halt exits avoided pay λ times its poll CPU") {
  // 100000 periods/s per CPU caught from 50000 on at 10 % per CPU: served = 20 µs × 2e5/s = 4 CPU-s/s
  // against 0.2 CPU-s/s of polling, plus its halts gone: the ratio is 4 / 0.2 = 20.
  const LoadFn load = open_load(50000, 100000, 1.0, 10);
  for (double lambda : {19.0, 21.0}) {
    TunerParams p;
    p.min_benefit_ratio = lambda;
    INFO("lambda " << lambda);
    CHECK(settled(p, load, 20000.0) == (lambda < 20 ? 50000u : 0u));
  }
}

TEST_CASE("max_poll_cpu_percent: budget keeps a rung whose busiest CPU polls just under it, not just over") {
  const LoadFn load = open_load(50000, 100000, 1.0, 10);
  for (double budget : {9.9, 10.1}) {
    TunerParams p;
    p.policy = Policy::budget;
    p.max_poll_cpu_percent = budget;
    INFO("budget " << budget);
    CHECK(settled(p, load, 20000.0) == (budget > 10 ? 50000u : 0u));
  }
  // In steady state a tick just over the budget steps one rung down at once; just under holds.
  for (double poll : {10.05, 9.95}) {
    TunerParams p;
    p.policy = Policy::budget;
    p.max_poll_cpu_percent = 10.0;
    Tuner t(p, 0);
    drive(t, open_load(50000, 100000, 1.0, 9.0), 25, 20000.0);
    REQUIRE(t.current_ns() == 50000);
    Observation o = synth(50000, open_load(50000, 100000, 1.0, poll));
    o.halt_exit_penalty_ns = 20000.0;
    const Decision d = t.decide(o);
    INFO("poll " << poll << ": " << d.reason);
    CHECK((d.rule == Rule::budget_overrun) == (poll > 10));
  }
}

TEST_CASE("target_wake_latency_ns: latency takes the lowest rung whose halt exits add at most the target per wake-up") {
  // Every rung from 50000 halts on 10 % of its wake-ups: at a 20 µs penalty that is 2 µs per wake-up.
  const LoadFn load = open_load(50000, 100000, 0.9, 10);
  for (std::uint32_t target : {1990u, 2010u}) {
    TunerParams p;
    p.policy = Policy::latency;
    p.target_wake_latency_ns = target;
    Tuner t(p, 0);
    const Decision d = until_chosen(t, load, 20000.0);
    INFO("target " << target << ": " << d.reason);
    // Met: the climb stops at the first rung that meets it. Missed: the fewest halts per
    // wake-up, the same from 50000 on, so the cheapest of them, after a climb to the top.
    CHECK(d.guest_halt_poll_ns == 50000);
    // 0, then 25000 (which halts), then 50000: met, the climb stops; missed, it goes to the top.
    CHECK(t.sweep_measurements().size() == (target > 2000 ? 3u : 6u));
  }
}

TEST_CASE("grow_halts_per_second: a sweep starts when the halts' lower bound reaches it") {
  // 1000 halts/s over 1 s: a lower bound of 1000 - 2 sqrt(1001) = 936.7 halts/s.
  for (double floor : {936.0, 937.5}) {
    TunerParams p;
    p.grow_halts_per_second = floor;
    Tuner t(p, 0);
    const Decision d = t.decide(synth(0, [](std::uint32_t, int) { return R(500, 500, 0, 900); }));
    INFO("floor " << floor << ": " << d.reason);
    CHECK((d.rule == Rule::climb || d.rule == Rule::sweep_unswept || d.rule == Rule::measuring) == (floor < 936.7));
    if (floor > 936.7) CHECK(d.rule == Rule::steady);
  }
}

TEST_CASE("min_periods: a rung is judged once it has seen them, not one period before") {
  // 600 periods per CPU per tick: 1200 a tick.
  const LoadFn load = [](std::uint32_t cap, int) { return cap == 0 ? R(600, 600, 0, 40) : R(600, 60, 5, 10); };
  for (std::uint64_t need : {1200u, 1201u}) {
    TunerParams p;
    p.min_periods = need;
    p.grow_halts_per_second = 100;
    Tuner t(p, 0);
    const Decision d = t.decide(synth(0, load));
    INFO("min_periods " << need << ": " << d.reason);
    CHECK(d.rule == (need <= 1200 ? Rule::climb : Rule::measuring));
  }
}

TEST_CASE("max_dwell_ticks: a rung short of min_periods is judged after that many ticks") {
  const LoadFn load = [](std::uint32_t cap, int) { return cap == 0 ? R(600, 600, 0, 40) : R(600, 60, 5, 10); };
  for (std::uint32_t dwell : {2u, 3u}) {
    TunerParams p;
    p.min_periods = 100000;
    p.max_dwell_ticks = dwell;
    p.grow_halts_per_second = 100;
    Tuner t(p, 0);
    t.decide(synth(0, load, 0));
    const Decision second = t.decide(synth(0, load, 1));
    INFO("max_dwell_ticks " << dwell << ": " << second.reason);
    CHECK(second.rule == (dwell <= 2 ? Rule::climb : Rule::measuring));
  }
}

TEST_CASE("steal_backoff_percent: steal just over it steps down, just under it does not") {
  for (double steal : {9.9, 10.1}) {
    Tuner t(TunerParams{}, 200000);
    Observation o = synth(200000, db_client);
    o.steal_percent = steal;
    const Decision d = t.decide(o);
    INFO("steal " << steal << ": " << d.reason);
    CHECK((d.rule == Rule::steal_backoff) == (steal > 10));
  }
}

TEST_CASE("resweep_after_ticks: a steady load with frequent halts is swept again after exactly that many ticks") {
  TunerParams p;
  p.resweep_after_ticks = 40;
  Tuner t(p, 0);
  auto tr = drive(t, db_client, 60);
  INFO(tr.log());
  // The last sweep began at the decision after its start; counted from there, the periodic one
  // comes 40 ticks later and not one before.
  std::size_t start = 0, periodic = 0;
  for (std::size_t i = 0; i < tr.decisions.size(); ++i) {
    if (tr.decisions[i].rule == Rule::sweep_unswept) start = i;
    if (tr.decisions[i].rule == Rule::sweep_periodic && !periodic) periodic = i;
  }
  REQUIRE(periodic > 0);
  CHECK(periodic - start == 40);
}

TEST_CASE("a sweep that starts at the bottom on a tick without the eBPF programs measures its baseline on the next") {
  // The rungs above are measured with the programs attached (each caught period seen); a baseline
  // from a steady tick without them would be judged on other counters.
  TunerParams p;
  p.resweep_after_ticks = 20;
  p.steady_trace_every = 7;
  Tuner t(p, 0);
  Trace tr;
  std::vector<bool> detached, want_after;
  for (int i = 0; i < 120; ++i) {
    Observation o = synth(t.current_ns(), timer150, static_cast<std::uint64_t>(i));
    detached.push_back(i > 0 && !want_after.back());
    if (detached.back()) o.kernel.bpf_detached = "steady tick";
    const Decision d = t.decide(o);
    tr.values.push_back(d.guest_halt_poll_ns);
    tr.decisions.push_back(d);
    want_after.push_back(t.wants_kernel_trace());
  }
  INFO(tr.log());
  int on_detached = 0;
  for (std::size_t i = 0; i + 1 < tr.decisions.size(); ++i) {
    if (tr.decisions[i].rule != Rule::sweep_periodic) continue;
    INFO("decision " << i);
    REQUIRE(detached[i]);  // steady ticks of this load run detached
    ++on_detached;
    CHECK(tr.decisions[i].action == Action::hold);  // no rung measured on that tick
    CHECK(tr.values[i] == 0);
    CHECK(want_after[i]);                            // the next tick is traced ...
    CHECK(tr.decisions[i + 1].rule == Rule::climb);  // ... and is the baseline the climb starts from
  }
  CHECK(on_detached >= 2);
}

TEST_CASE("confidence_z: the cheaper of two rungs is chosen only while their objectives are within z standard errors") {
  // A closed loop: 12500 and 25000 run it at 100000 wake-ups/s per CPU for 8 % poll, 2000 halts/s;
  // 50000 at 101000/s, 1000 halts/s, for 12 %; above it no more gain for 30 % poll. 50000's
  // objective is higher by its 1 % more gain and its halts avoided less the extra polling, while
  // its cost (poll time plus halt exits) is higher: inside the noise the cheaper 25000 is chosen
  // (12500 is as cheap, but the first rung past the knee: off_knee_takes_the_next_equivalent_rung).
  const LoadFn load = [](std::uint32_t cap, int) {
    CpuRates r = cap == 0       ? R(50000, 50000, 0, 16)
                 : cap < 50000  ? R(100000, 2000, 8, 10)
                 : cap == 50000 ? R(101000, 1000, 12, 10)
                                : R(101000, 1000, 30, 10);
    r.ipi = cap == 0 ? 0 : r.periods - r.halts;
    return r;
  };
  // The standard error of the difference (Poisson over 1 s ticks) is the tuner's; z at the tie:
  TunerParams p;
  Tuner probe(p, 0);
  until_chosen(probe, load, 20000.0);
  const auto& m = probe.sweep_measurements();
  const auto at = [&m](std::uint32_t ns) {
    const auto it = std::find_if(m.begin(), m.end(), [ns](const RungMeasurement& r) { return r.ns == ns; });
    REQUIRE(it != m.end());
    return *it;
  };
  REQUIRE(at(12500).periods > 0);
  const Score a = probe.score_of(at(25000), m[0]), b = probe.score_of(at(50000), m[0]);
  REQUIRE(b.j.value > a.j.value);
  const double z_tie = (b.j.value - a.j.value) / std::hypot(a.j.se, b.j.se);
  for (double f : {0.98, 1.02}) {
    TunerParams q;
    q.confidence_z = z_tie * f;
    Tuner t(q, 0);
    const Decision d = until_chosen(t, load, 20000.0);
    INFO("z " << q.confidence_z << " (tie at " << z_tie << "): " << d.reason);
    // Below the tie the better rung stands alone; above it 25000 is within the noise and cheaper.
    CHECK(d.rule == Rule::chosen);
    CHECK(d.guest_halt_poll_ns == (f < 1 ? 50000u : 25000u));
  }
}

TEST_CASE("off_knee_takes_the_next_equivalent_rung: a closed loop's first rung past its knee is passed for the next equivalent one") {
  // A closed loop slow below 25000 and equally fast from 25000 on, at the same poll CPU: the
  // cheapest equivalent rung is 25000, the first past the knee; the next equivalent one is taken.
  // With no equivalent rung above (the rungs above poll far more for nothing), 25000 stays. An
  // open load whose periods are caught from 25000 on keeps 25000: its knee does not move.
  const auto closed = [](double poll_above) {
    return LoadFn([poll_above](std::uint32_t cap, int) {
      CpuRates r = cap == 0 ? R(50000, 50000, 0, 16) : cap < 25000 ? R(50000, 50000, 0.5, 16)
                   : cap < 50000 ? R(100000, 1000, 10, 10) : R(100000, 1000, poll_above, 10);
      r.ipi = cap < 25000 ? 0 : r.periods - r.halts;
      return r;
    });
  };
  for (double poll_above : {10.0, 40.0}) {
    Tuner t(TunerParams{}, 0);
    const Decision d = until_chosen(t, closed(poll_above), 20000.0);
    INFO("poll above 25000: " << poll_above << " %: " << d.reason);
    CHECK(d.rule == Rule::chosen);
    CHECK(d.guest_halt_poll_ns == (poll_above == 10.0 ? 50000u : 25000u));
  }
  Tuner open(TunerParams{}, 0);
  const Decision d = until_chosen(open, open_load(25000, 100000, 1.0, 10), 20000.0);
  INFO(d.reason);
  CHECK(d.guest_halt_poll_ns == 25000u);
}

TEST_CASE("tick_noise: a confirmation tick is consistent with the sweep tick while its log rates are within z of noise") {
  // The chosen rung's whole tick shows 1.5 x the wake-ups of its sweep tick (same halts and poll
  // CPU). Consistent iff ln 1.5 <= z sqrt(Poisson + 2 noise^2) at 1 s ticks.
  int n = 0;
  const LoadFn load = [&n](std::uint32_t cap, int) {
    if (cap == 0) return R(50000, 50000, 0, 40);
    const double w = n++ >= 200 ? 75000 : 50000;
    CpuRates r = R(w, 500, 20, 10);
    r.ipi = w - 500;
    return r;
  };
  // 1e5 periods per side: the Poisson part is ~2e-5; noise* = ln 1.5 / (2 sqrt 2) = 0.1433.
  for (double noise : {0.140, 0.147}) {
    n = 0;
    TunerParams p;
    p.tick_noise = noise;
    Tuner t(p, 0);
    Decision d = until_chosen(t, load, 20000.0);
    n = 200;  // the whole ticks from here on
    Observation o = synth(t.current_ns(), load);
    o.halt_exit_penalty_ns = 20000.0;
    d = t.decide(o);
    INFO("noise " << noise << ": " << d.reason);
    CHECK(d.rule == (noise > 0.1433 ? Rule::confirmed : Rule::confirmation_failed));
  }
}

TEST_CASE("confirmation: a rate that moved beyond the noise but leaves the objective within it confirms the rung") {
  // The chosen rung's whole ticks halt 20 times a second per CPU where its sweep tick halted 150
  // (the limits were still growing to the new cap): beyond the governor's noise as a rate, but a
  // few halts against 80000 wake-ups move the objective by far less than its standard error. A
  // whole tick with a third of the wake-ups moves both, and is measured again.
  for (const bool wakes_move : {false, true}) {
    int n = 0;
    const LoadFn load = [&n, wakes_move](std::uint32_t cap, int) {
      if (cap == 0) return R(30000, 30000, 0, 20);
      const bool whole = n++ >= 200;
      const double w = whole && wakes_move ? 30000 : 80000;
      CpuRates r = R(w, whole ? 20 : 150, 35, 10);
      r.ipi = w - r.halts;
      return r;
    };
    Tuner t(TunerParams{}, 0);
    Decision d = until_chosen(t, load, 20000.0);
    REQUIRE(d.rule == Rule::chosen);
    n = 200;  // the whole ticks from here on
    Observation o = synth(t.current_ns(), load);
    o.halt_exit_penalty_ns = 20000.0;
    d = t.decide(o);
    INFO("wake-ups move: " << wakes_move << ": " << d.reason);
    CHECK(d.rule == (wakes_move ? Rule::confirmation_failed : Rule::confirmed));
  }
}

TEST_CASE("change_threshold: the detector fires when the CUSUM of a shift crosses it, not a tick before") {
  // After confirmation, the wake rate steps to 1.2 x. Each tick adds z - 1 to the sum, with z the
  // shift over its standard deviation; with the noise pinned (tick_noise large against Poisson,
  // learned from zero residuals on the steady ticks first) the crossing tick follows from the threshold.
  bool shifted = false;
  const LoadFn load = [&shifted](std::uint32_t cap, int) {
    CpuRates r = cap == 0 ? R(50000, 50000, 0, 40) : R(shifted ? 60000 : 50000, 500, 20, 10);
    r.ipi = r.periods - r.halts;
    return r;
  };
  auto alarm_tick = [&](double threshold) {
    shifted = false;
    TunerParams p;
    p.change_threshold = threshold;
    Tuner t(p, 0);
    drive(t, load, 12, 20000.0);
    REQUIRE(t.phase() == "steady");
    shifted = true;
    for (int i = 1; i <= 40; ++i) {
      Observation o = synth(t.current_ns(), load);
      o.halt_exit_penalty_ns = 20000.0;
      if (t.decide(o).rule == Rule::sweep_change) return i;
    }
    return 0;
  };
  // Two thresholds a hair apart around a crossing: the alarm moves by exactly one tick.
  const int at6 = alarm_tick(6.0);
  REQUIRE(at6 > 1);
  double lo = 0.5, hi = 6.0;  // find the threshold where the alarm comes one tick earlier
  for (int k = 0; k < 40; ++k) {
    const double mid = (lo + hi) / 2;
    (alarm_tick(mid) < at6 ? lo : hi) = mid;
  }
  INFO("alarm at tick " << at6 << " for 6.0; one tick earlier below " << lo);
  CHECK(alarm_tick(lo * 0.999) == at6 - 1);
  CHECK(alarm_tick(hi * 1.001) == at6);
}

TEST_CASE("the choice says which CPUs drove it and which poll there without gain") {
  // Four CPUs: 0 and 1 a closed loop that triples its wake rate from 50000 on, 2 and 3 a timer's
  // that polls there without gain.
  auto tick = [](std::uint32_t cap) {
    Observation o;
    o.current_ns = cap;
    o.elapsed_ns = o.kernel.elapsed_ns = 1'000'000'000;
    o.steal_percent = 0;
    o.halt_exit_penalty_ns = 20000.0;
    for (int cpu = 0; cpu < 4; ++cpu) {
      CpuKernelSignals k;
      k.cpu = cpu;
      const bool loop = cpu < 2;
      if (cap < 50000) {
        k.halts = loop ? 20000 : 6600;
        k.halt_ns = k.halts * 60000;
      } else {
        k.poll_entries = loop ? 60000 : 6600;
        k.halts = k.poll_misses = loop ? 600 : 3000;
        k.poll_hits = k.poll_entries - k.halts;
        k.poll_ns = loop ? 380'000'000 : 330'000'000;
        k.ipi_skipped = loop ? k.poll_hits : 0;
      }
      if (!k.ipi_skipped) k.ipi_skipped = 0;
      o.kernel.cpus.push_back(k);
    }
    return o;
  };
  Tuner t;
  for (int i = 0; i < 20 && t.gain_cpus().empty(); ++i) t.decide(tick(t.current_ns()));
  CHECK(t.current_ns() >= 50000);
  CHECK(t.gain_cpus() == "0-1");
  CHECK(t.paying_cpus() == "2-3");
}

TEST_CASE("a CPU that polls without limit whatever the cap (a latency QoS request of 0) is left out of the objective") {
  auto unlimited = [](std::vector<int> cpus) {
    return [cpus](Observation& o) {
      PollingOverrides ov;
      for (int c : cpus) {
        CpuPollingOverride p;
        p.cpu = c;
        p.polls_without_limit = true;
        ov.cpus.push_back(p);
      }
      o.kernel.overrides = ov;
    };
  };
  // CPU 1 polls 100 % by a QoS request while CPU 0 runs the database client: without the
  // override counted, 50000 would pay CPU 1's polling; left out, CPU 0's gain decides alone.
  RungMeasurement m;
  Observation o = synth(50000, db_client);
  unlimited({1})(o);
  m.add(o.kernel);
  CHECK(m.cpus == 1);
  CHECK(m.unlimited_cpus == std::vector<int>{1});
  CHECK(m.wake_rate() == Approx(60000));
  // Every CPU: nothing the cap reaches, held, said so.
  Tuner t(TunerParams{}, 50000);
  auto tr = drive(t, db_client, 3, 20000.0, unlimited({0, 1}));
  INFO(tr.log());
  for (const auto& d : tr.decisions) {
    CHECK(d.rule == Rule::no_cap_reach);
    CHECK(d.action == Action::hold);
  }
}

TEST_CASE("the climb's bound credits a CPU's halts with that CPU's share of polls that skipped an IPI") {
  // Two CPUs at 100000, the same totals (6100 halts/s, 60500 poll hits/s, 54000 of them IPI-skipped)
  // split two ways: the halts left on the pair's CPU, whose catches are remote wake-ups, or on a
  // timer's CPU, whose catches are its own interrupts. Only the first can gain from a higher cap.
  auto rung = [](std::uint64_t pair_halts, std::uint64_t pair_hits, std::uint64_t timer_halts,
                 std::uint64_t timer_hits) {
    KernelSignals k;
    k.elapsed_ns = 1'000'000'000;
    for (int cpu = 0; cpu < 2; ++cpu) {
      CpuKernelSignals c;
      c.cpu = cpu;
      c.halts = c.poll_misses = cpu == 0 ? pair_halts : timer_halts;
      c.poll_hits = cpu == 0 ? pair_hits : timer_hits;
      c.poll_entries = c.poll_hits + c.halts;
      c.ipi_skipped = cpu == 0 ? 54000 : 0;
      c.poll_ns = 100'000'000;
      k.cpus.push_back(c);
    }
    RungMeasurement m;
    m.ns = 100000;
    m.add(k);
    return m;
  };
  const RungMeasurement pair_halts = rung(6000, 54000, 100, 6500);
  const RungMeasurement timer_halts = rung(100, 54000, 6000, 6500);
  REQUIRE(pair_halts.halts == timer_halts.halts);
  REQUIRE(pair_halts.hits == timer_halts.hits);
  RungMeasurement base = pair_halts, base_t = timer_halts;  // no closed-loop gain: the rates as the rung's
  base.ns = base_t.ns = 0;
  const double a = potential(pair_halts, base, 20000.0, 2, {}, {200000});
  const double b = potential(timer_halts, base_t, 20000.0, 2, {}, {200000});
  INFO("halts on the pair's CPU: " << a << ", on the timer's: " << b);
  CHECK(a > 0.3);
  CHECK(b < 0.1 * a);
}
