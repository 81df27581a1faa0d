// Tuner: synthetic Observation sequences for each rule, then closed loops against the simulated
// haltpoll guest (src/daemon/guest_model.hpp).
#include "sim/guest_model.hpp"
#include "tuning/tuner.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

using namespace haltpolld;

namespace {

Observation obs_of(std::uint32_t current, std::optional<double> cpu, std::optional<double> lat,
                   std::optional<double> steal = 0.0, double wakes = 10000) {
  Observation o;
  o.current_ns = current;
  o.elapsed_ns = 1000000000;
  o.poll_cpu_percent = cpu;
  o.total_poll_cpu_percent = cpu;
  o.wake_latency_ns = lat;
  o.latency_samples = lat ? 500 : 0;
  o.steal_percent = steal;
  o.wakes_per_second = wakes;
  return o;
}

TunerParams fast(Policy p) {
  TunerParams t;
  t.policy = p;
  t.settle_ticks = 0;
  return t;
}

}  // namespace

TEST_CASE("static policy applies the configured value, clamped") {
  TunerParams p = fast(Policy::static_value);
  p.static_ns = 50000;
  Tuner t(p, 200000);
  auto d = t.decide(obs_of(200000, std::nullopt, std::nullopt));
  CHECK(d.action == Action::set);
  CHECK(d.guest_halt_poll_ns == 50000);
  CHECK(d.reason.find("static") != std::string::npos);
  d = t.decide(obs_of(50000, std::nullopt, std::nullopt));
  CHECK(d.action == Action::hold);
  p.static_ns = 900000;
  t.set_params(p);
  CHECK(t.decide(obs_of(50000, std::nullopt, std::nullopt)).guest_halt_poll_ns == p.max_ns);
}

TEST_CASE("params validation names the problem") {
  TunerParams p;
  CHECK(validate(p).empty());
  p.min_ns = 500000;
  CHECK(validate(p).find("min_ns") != std::string::npos);
  p = {};
  p.percentile = 100;
  CHECK(validate(p).find("percentile") != std::string::npos);
  CHECK(policy_from_string("balanced") == Policy::balanced);
  CHECK(!policy_from_string("fast"));
}

TEST_CASE("steal above the threshold backs off and freezes growth") {
  Tuner t(fast(Policy::balanced), 200000);
  auto d = t.decide(obs_of(200000, 2.0, 20000, 25.0));
  CHECK(d.action == Action::shrink);
  CHECK(d.guest_halt_poll_ns == 100000);
  CHECK(d.reason.find("steal") != std::string::npos);
  // Uncontended again, latency bad, budget free: growth stays frozen at the backed-off value.
  d = t.decide(obs_of(100000, 1.0, 20000, 0.0));
  CHECK(d.guest_halt_poll_ns <= 100000);
}

TEST_CASE("a grow that does not pay is reverted and growth is frozen") {
  TunerParams p = fast(Policy::balanced);
  Tuner t(p, 20000);
  auto d = t.decide(obs_of(20000, 1.0, 20000));
  REQUIRE(d.action == Action::grow);
  REQUIRE(d.guest_halt_poll_ns == 40000);
  // Same latency, more polling: it did not pay.
  d = t.decide(obs_of(40000, 5.0, 19900));
  CHECK(d.action == Action::revert);
  CHECK(d.guest_halt_poll_ns == 20000);
  CHECK(d.reason.find("did not pay") != std::string::npos);
  CHECK(t.growth_ceiling_ns() == 40000u);
  for (int i = 0; i < 5; ++i) {
    d = t.decide(obs_of(20000, 1.0, 20000));
    CHECK(d.guest_halt_poll_ns == 20000);
  }
  CHECK(d.reason.find("frozen") != std::string::npos);
}

TEST_CASE("a grow that pays is kept and growth continues") {
  Tuner t(fast(Policy::balanced), 20000);
  REQUIRE(t.decide(obs_of(20000, 1.0, 20000)).guest_halt_poll_ns == 40000);
  // Latency halves for 2 % more polling at 10k wakes/s: 10 µs × 10k/s per 0.02 CPU = ratio 5.
  auto d = t.decide(obs_of(40000, 3.0, 10000));
  CHECK(d.action == Action::grow);
  CHECK(d.guest_halt_poll_ns == 80000);
  CHECK(d.reason.find("paid") != std::string::npos);
}

TEST_CASE("marginal benefit: a latency gain too small for its polling is not paying") {
  Tuner t(fast(Policy::balanced), 20000);
  REQUIRE(t.decide(obs_of(20000, 1.0, 20000, 0.0, 100)).guest_halt_poll_ns == 40000);
  // 50 % better latency, but at 100 wakes/s for 8 % more polling: ratio 10 µs×100/0.08e9 ≈ 0.0125.
  auto d = t.decide(obs_of(40000, 9.0, 10000, 0.0, 100));
  CHECK(d.action == Action::revert);
}

TEST_CASE("step limits, start value and bounds") {
  TunerParams p = fast(Policy::latency);
  p.target_wake_latency_ns = 1000;
  Tuner t(p, 0);
  auto d = t.decide(obs_of(0, 0.0, 20000));
  CHECK(d.guest_halt_poll_ns == p.start_ns);  // from 0 the first step is start_ns
  t.reset(250000);
  d = t.decide(obs_of(250000, 0.0, 20000));
  CHECK(d.guest_halt_poll_ns == 350000);  // ×2 limited by max_step_ns
  t.reset(390000);
  d = t.decide(obs_of(390000, 0.0, 20000));
  CHECK(d.guest_halt_poll_ns == p.max_ns);
  t.reset(p.max_ns);
  d = t.decide(obs_of(p.max_ns, 0.0, 20000));
  CHECK(d.action == Action::hold);
  CHECK(d.reason.find("max_ns") != std::string::npos);
}

TEST_CASE("latency policy holds inside the hysteresis band") {
  TunerParams p = fast(Policy::latency);
  p.target_wake_latency_ns = 10000;
  Tuner t(p, 50000);
  for (double lat : {9500.0, 10500.0, 10900.0, 9100.0}) {
    auto d = t.decide(obs_of(50000, 5.0, lat));
    CHECK(d.action == Action::hold);
    CHECK(d.guest_halt_poll_ns == 50000);
  }
  CHECK(t.decide(obs_of(50000, 5.0, 5000)).action == Action::shrink);
}

TEST_CASE("budget policy shrinks proportionally, limited by the step factor") {
  Tuner t(fast(Policy::budget), 200000);
  auto d = t.decide(obs_of(200000, 80.0, 2000));
  CHECK(d.action == Action::shrink);
  CHECK(d.guest_halt_poll_ns == 100000);
  CHECK(d.reason.find("budget") != std::string::npos);
  // Within budget but above the lower band: hold.
  d = t.decide(obs_of(100000, 9.5, 2000));
  CHECK(d.action == Action::hold);
}

TEST_CASE("missing signals hold with a reason instead of guessing") {
  Tuner t(fast(Policy::balanced), 50000);
  auto d = t.decide(obs_of(50000, std::nullopt, 20000));
  CHECK(d.action == Action::hold);
  CHECK(d.reason.find("no poll-CPU signal") != std::string::npos);
  d = t.decide(obs_of(50000, 1.0, std::nullopt));
  CHECK(d.action == Action::hold);
  CHECK(d.reason.find("no latency signal") != std::string::npos);
}

TEST_CASE("a value changed behind the tuner's back restarts it from that value") {
  Tuner t(fast(Policy::balanced), 50000);
  auto d = t.decide(obs_of(120000, 1.0, 20000));
  CHECK(d.previous_ns == 120000);
  CHECK(d.reason.find("restarting") != std::string::npos);
}

// ---- closed loop against the simulated guest ----

namespace {

struct LoopResult {
  double poll_cpu = 0;  // mean of the busiest CPU's poll share over the tail, %
  double latency = 0;   // mean p90 over the tail, ns
  std::uint32_t final_ns = 0;
};

LoopResult run_loop(LoadModel load, TunerParams p, std::uint32_t start_ns, int ticks, int tail,
                    double steal = 0, std::uint64_t seed = 7) {
  GuestModelParams gp;
  gp.steal_percent = steal;
  SimulatedGuest guest(std::move(load), 2, gp, seed);
  Tuner t(p, start_ns);
  LoopResult r;
  for (int i = 0; i < ticks; ++i) {
    const std::uint32_t cap = t.current_ns();
    Observation o = guest.run(50'000'000, cap, p.percentile);
    t.decide(o);
    if (i >= ticks - tail) {
      r.poll_cpu += *o.poll_cpu_percent / tail;
      r.latency += *o.wake_latency_ns / tail;
    }
  }
  r.final_ns = t.current_ns();
  return r;
}

LoopResult run_static(LoadModel load, std::uint32_t ns, int ticks, int tail) {
  TunerParams p;
  p.policy = Policy::static_value;
  p.static_ns = ns;
  return run_loop(std::move(load), p, ns, ticks, tail);
}

}  // namespace

TEST_CASE("closed loop: balanced keeps the pipe load's latency near static 200000") {
  auto ref = run_static(LoadModel::pipe(), 200000, 40, 20);
  TunerParams p;  // defaults: balanced
  auto r = run_loop(LoadModel::pipe(), p, 0, 150, 100);
  INFO("static 200000: p90 " << ref.latency << " ns, poll " << ref.poll_cpu << "%; balanced: p90 " << r.latency
                              << " ns, poll " << r.poll_cpu << "%, final " << r.final_ns);
  CHECK(r.latency <= 1.2 * ref.latency + 500);
  CHECK(r.final_ns > 0);
}

TEST_CASE("closed loop: budget 10% holds the 150us timer load under 12% while static 200000 polls far more") {
  auto ref = run_static(LoadModel::timer_150us(), 200000, 40, 20);
  TunerParams p;
  p.policy = Policy::budget;
  p.max_poll_cpu_percent = 10;
  auto r = run_loop(LoadModel::timer_150us(), p, 200000, 200, 150);
  INFO("static 200000 polls " << ref.poll_cpu << "%; budget polls " << r.poll_cpu << "%, final " << r.final_ns);
  CHECK(r.poll_cpu <= 12);
  CHECK(ref.poll_cpu >= 30);
}

TEST_CASE("closed loop: an idle guest polls at most 1% under balanced") {
  TunerParams p;
  auto r = run_loop(LoadModel::idle_guest(), p, 200000, 200, 150);
  INFO("idle: poll " << r.poll_cpu << "%, final " << r.final_ns);
  CHECK(r.poll_cpu <= 1.0);
}

TEST_CASE("closed loop: a contended host drives the value down") {
  TunerParams p;
  auto r = run_loop(LoadModel::pipe(), p, 200000, 30, 10, 30.0);
  CHECK(r.final_ns <= p.start_ns);
}
