// kernel_signals.forecast: what enabling halt-polling would buy on a guest whose kernel does not
// poll, from scripted idle-period histograms, against replay_cap on the same histograms, a case
// checked by hand, the balanced policy's choice, the JSON fields, the rows of the last tick the
// tracepoint counted, and the stated error against the simulator's.
#include "control/poll_forecast.hpp"
#include "control/daemon_reports.hpp"
#include "control/stats.hpp"
#include "sim/des_calibration.hpp"
#include "tuning/tuner.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>

using namespace haltpolld;
using nlohmann::json;

namespace {

// One tick of a driverless guest as the eBPF reader fills it: every idle entry a halt, counted per
// CPU and in the `halt` and `halt_residency` histograms. `periods` lists (length, count) for each CPU.
KernelSignals driverless_tick(const std::vector<std::vector<std::pair<std::uint64_t, std::uint64_t>>>& per_cpu,
                              std::uint64_t elapsed_ns = 1'000'000'000) {
  KernelSignals k;
  k.counters = KernelSignals::Counters::tracepoint;
  k.elapsed_ns = elapsed_ns;
  k.periods.emplace();
  for (std::size_t cpu = 0; cpu < per_cpu.size(); ++cpu) {
    CpuKernelSignals c;
    c.cpu = static_cast<int>(cpu);
    c.outcomes_exact = true;
    for (const auto& [ns, n] : per_cpu[cpu]) {
      c.halts += n;
      c.halt_ns += ns * n;
      for (std::uint64_t i = 0; i < n; ++i) {
        k.periods->halt.record(ns);
        k.periods->halt_residency.record(ns);
      }
    }
    k.cpus.push_back(c);
  }
  return k;
}

ForecastInputs default_inputs(std::optional<double> penalty = std::nullopt) {
  ForecastInputs in;
  in.ladder_ns = Tuner(in.params).ladder();
  in.penalty_ns = penalty;
  return in;
}

const RungForecast& rung(const PollForecast& f, std::uint32_t ns) {
  for (const auto& r : f.rungs)
    if (r.ns == ns) return r;
  FAIL("no rung " << ns);
  return f.rungs.front();
}

}  // namespace

TEST_CASE("forecast: every rung is replay_cap over the same histogram, per second of the tick") {
  // Two CPUs, 1.5 s: a mix of short and long periods, so that the rungs differ.
  const KernelSignals k = driverless_tick({{{8'000, 3000}, {40'000, 2000}, {150'000, 500}, {3'000'000, 50}},
                                           {{20'000, 1500}, {90'000, 800}, {1'000'000, 100}}},
                                          1'500'000'000);
  const ForecastInputs in = default_inputs(31'000.0);
  const PollForecast f = forecast_polling(k, 7, in);
  REQUIRE(f.available());
  CHECK(f.tick == 7);
  CHECK(f.cpus == 2);
  CHECK(f.periods == 7950);
  CHECK(f.periods_per_s == Approx(7950 / 1.5));
  CHECK(f.penalty_measured);
  CHECK(f.penalty_ns == 31'000.0);
  REQUIRE(f.rungs.size() == 7);
  const std::vector<std::uint32_t> ladder{0, 12500, 25000, 50000, 100000, 200000, 400000};
  for (std::size_t i = 0; i < ladder.size(); ++i) {
    const RungForecast& r = f.rungs[i];
    INFO("rung " << r.ns);
    CHECK(r.ns == ladder[i]);
    CHECK(r.grow_start_ns == 50000);  // manage_grow_start off: the kernel's
    const CapPrediction p = replay_cap(*k.periods, r.ns, 50000);
    CHECK(r.halts_avoided_per_s == Approx(p.hits / 1.5));
    CHECK(r.halts_per_s == Approx(p.halts / 1.5));
    CHECK(r.poll_cpus == Approx(p.poll_ns / 1.5 / 1e9));
    CHECK(r.poll_cpu_percent_per_cpu == Approx(100 * p.poll_ns / 1.5 / 1e9 / 2));
    CHECK(r.net == Approx(p.hits / 1.5 * 31e-6 - p.poll_ns / 1.5 / 1e9));
    CHECK(r.halts_avoided_per_s + r.halts_per_s == Approx(7950 / 1.5));
    const double shortest_limit = std::min<std::uint32_t>(r.ns, 50000);
    CHECK(r.poll_timeouts_per_s_at_most ==
          Approx(r.ns == 0 ? 0.0 : std::min(p.halts, p.poll_ns / shortest_limit) / 1.5).margin(1e-9));
  }
  // Nothing polls at 0; more is caught the higher the cap.
  CHECK(f.rungs[0].halts_avoided_per_s == 0);
  CHECK(f.rungs[0].poll_cpus == 0);
  CHECK(rung(f, 400000).halts_avoided_per_s > rung(f, 50000).halts_avoided_per_s);

  // With manage_grow_start the replay runs each cap with the grow_start the tuner would write.
  ForecastInputs managed = in;
  managed.params.manage_grow_start = true;
  const PollForecast g = forecast_polling(k, 7, managed);
  CHECK(rung(g, 50000).grow_start_ns == 25000);
  CHECK(rung(g, 50000).halts_avoided_per_s == Approx(replay_cap(*k.periods, 50000, 25000).hits / 1.5));
}

TEST_CASE("forecast by hand: all periods 30 µs, so a cap of 50000 avoids every halt at 30 µs of poll each") {
  // 2 CPUs × 5000 periods of 30 µs in 1 s.
  const KernelSignals k = driverless_tick({{{30'000, 5000}}, {{30'000, 5000}}});
  const PollForecast f = forecast_polling(k, 3, default_inputs());
  REQUIRE(f.available());
  CHECK(f.p50_ns == Approx(30'000).epsilon(0.04));
  CHECK(f.p90_ns == Approx(30'000).epsilon(0.04));
  for (std::uint32_t cap : {50000u, 100000u, 200000u, 400000u}) {
    INFO("cap " << cap);
    const RungForecast& r = rung(f, cap);
    CHECK(r.halts_avoided_per_s == Approx(10000));  // every halt exit avoided
    CHECK(r.halts_per_s == Approx(0).margin(1e-9));
    CHECK(r.poll_timeouts_per_s_at_most == Approx(0).margin(1e-9));
    // 30 µs of polling per period (the histogram's bucket holds it to 1/16): 0.3 CPU-s/s, 15 % per CPU.
    CHECK(r.poll_cpus == Approx(0.3).epsilon(0.04));
    CHECK(r.poll_cpu_percent_per_cpu == Approx(15).epsilon(0.04));
  }
  // Below the periods the limit never leaves 0: the governor grows it only on a halt no longer than
  // the cap, so every period halts without a poll.
  for (std::uint32_t cap : {12500u, 25000u}) {
    INFO("cap " << cap);
    const RungForecast& r = rung(f, cap);
    CHECK(r.halts_avoided_per_s == Approx(0).margin(1e-9));
    CHECK(r.halts_per_s == Approx(10000));
    CHECK(r.poll_cpus == Approx(0).margin(1e-9));
    CHECK(r.poll_timeouts_per_s_at_most == 0);  // no poll, so none timed out
  }
  // At the unmeasured 20 µs a halt exit is worth less than the 30 µs poll that avoids it (and 15 %
  // per CPU is over the balanced budget of 10 % without paying for itself): no polling.
  CHECK_FALSE(f.penalty_measured);
  CHECK(f.penalty_ns == kUnmeasuredPenaltyNs);
  CHECK(f.rungs[f.chosen].ns == 0);
  CHECK_FALSE(rung(f, 50000).acceptable);
  CHECK(f.chosen_reason.find("no polling (0 ns): at a 20.0 µs halt-exit penalty (not measured here yet") == 0);
  CHECK(f.chosen_reason.find("the most a rung avoids is 10000 halt exits/s (50000 ns, 14.") != std::string::npos);
  // Measured at 40 µs it pays: every rung from 50000 up is worth the same, and the cheapest is chosen.
  const PollForecast m = forecast_polling(k, 3, default_inputs(40'000.0));
  CHECK(m.rungs[m.chosen].ns == 50000);
  CHECK(m.rungs[m.best].ns == 50000);
  CHECK(rung(m, 50000).net == Approx(10000 * 40e-6 - rung(m, 50000).poll_cpus));
  CHECK(m.chosen_reason.find("50000 ns: avoids 10000 of 10000 halt exits/s") == 0);
  CHECK(m.chosen_reason.find("the 40.0 µs halt-exit penalty the daemon measured") != std::string::npos);
  CHECK(m.chosen_reason.find("the best net of the ladder") != std::string::npos);
}

TEST_CASE("forecast: the cheapest rung within 5 % of the best rung's poll CPU of the best net") {
  // Mostly 30 µs periods, some of 70 µs and a few of 140 µs. At 100000 the first 140 µs period
  // halts 90 µs after its 50 µs poll, which grows the limit to the cap, and the 70 µs periods hit
  // from then on; at 50000 they poll 50 µs and halt (the halt's 20 µs grows nothing), and each 140 µs
  // one shrinks the limit under grow_start, to 0. 100000 is worth most; 50000 less by less than 5 %
  // of 100000's poll CPU, for less of it.
  const KernelSignals k = driverless_tick({{{30'000, 9000}, {70'000, 300}, {140'000, 5}}});
  const PollForecast f = forecast_polling(k, 1, default_inputs(45'000.0));
  REQUIRE(f.available());
  INFO(to_json(f).dump());
  // The oracle: nets from replay_cap, the best, then the cheapest within the tie.
  std::size_t best = 0;
  std::vector<double> net, cost;
  for (std::size_t i = 0; i < f.rungs.size(); ++i) {
    const CapPrediction p = replay_cap(*k.periods, f.rungs[i].ns, 50000);
    net.push_back(p.hits * 45e-6 - p.poll_ns / 1e9);
    cost.push_back(p.poll_ns / 1e9);
    if (net[i] > net[best]) best = i;
  }
  std::size_t chosen = best;
  for (std::size_t i = 0; i < f.rungs.size(); ++i)
    if (net[i] >= net[best] - 0.05 * cost[best] && cost[i] < cost[chosen]) chosen = i;
  CHECK(f.best == best);
  CHECK(f.chosen == chosen);
  // What the oracle says, checked on its own: the best is 100000, 50000 is within the tie and cheaper.
  CHECK(f.rungs[best].ns == 100000);
  CHECK(f.rungs[chosen].ns == 50000);
  CHECK(f.chosen_reason.find("the cheapest rung within 5 % of the best rung's poll CPU of the best net (100000 ns") !=
        std::string::npos);
}

TEST_CASE("forecast: no histogram, no periods or a guest with cpuidle counters") {
  KernelSignals no_hist = driverless_tick({{{30'000, 10}}});
  no_hist.periods.reset();
  CHECK(forecast_polling(no_hist, 4, default_inputs()).reason == "tick 4 carried no idle-period histograms");
  CHECK_FALSE(forecast_polling(no_hist, 4, default_inputs()).available());
  CHECK(forecast_polling(driverless_tick({{}}), 5, default_inputs()).reason ==
        "the tracepoint counted no idle period in tick 5");
  // Periods longer than the top rung: nothing to catch.
  const PollForecast idle = forecast_polling(driverless_tick({{{30'000'000, 40}}}), 6, default_inputs(20'000.0));
  CHECK(idle.rungs[idle.chosen].ns == 0);
  CHECK(idle.chosen_reason.find("no rung up to 400000 ns would catch an idle period") != std::string::npos);

  KernelSignalsStats cpuidle;
  KernelSignals c = driverless_tick({{{30'000, 10}}});
  c.counters = KernelSignals::Counters::cpuidle;
  cpuidle.record(1, c, std::nullopt);
  CHECK_FALSE(driverless_forecast(cpuidle, default_inputs()));
  CHECK(kernel_signals_to_json(cpuidle, std::nullopt, false, driverless_forecast(cpuidle, default_inputs()))["forecast"]
            .is_null());

  // A driverless guest without eBPF: nothing counted, and the forecast says why.
  KernelSignalsStats bare;
  KernelSignals t;
  t.counters = KernelSignals::Counters::tracepoint;
  t.elapsed_ns = 1'000'000'000;
  t.bpf_missing = "kernel signals unavailable (EPERM)";
  bare.record(1, t, std::nullopt);
  const auto none = driverless_forecast(bare, default_inputs());
  REQUIRE(none);
  CHECK_FALSE(none->available());
  CHECK(none->reason.find("eBPF is missing: kernel signals unavailable (EPERM)") != std::string::npos);
}

TEST_CASE("GetStats on a driverless guest: the last counted tick's rows, mean halt, p90 and the forecast") {
  KernelSignalsStats k;
  k.cpuidle_status = "no cpuidle states under /x: no cpuidle driver is registered";
  KernelSignals counted = driverless_tick({{{30'000, 5000}}, {{30'000, 4000}, {2'000'000, 100}}});
  k.record(5, counted, 0.5);
  // The next tick the program was detached: no CPUs, no histograms.
  KernelSignals detached;
  detached.counters = KernelSignals::Counters::tracepoint;
  detached.elapsed_ns = 1'000'000'000;
  detached.bpf_detached = "nothing to tune, the kernel does not poll: attached for one tick in 10";
  k.record(6, detached, 0.5);

  StatsSnapshot s;
  s.kernel_signals = k;
  s.forecast_inputs = default_inputs(40'000.0);
  const json j = stats_to_json(s, std::nullopt, false)["kernel_signals"];
  CHECK(j["available"] == false);
  CHECK(j["counters"] == "tracepoint");
  CHECK(j["tick"] == 6);
  CHECK(j["rows_tick"] == 5);
  CHECK(j["rows_elapsed_ns"] == 1'000'000'000);
  REQUIRE(j["cpus"].size() == 2);
  CHECK(j["cpus"][0]["idle_entries_per_s"] == Approx(5000));
  CHECK(j["cpus"][0]["halts_per_s"] == Approx(5000));
  CHECK(j["cpus"][0]["mean_halt_ns"] == Approx(30'000));
  CHECK(j["cpus"][1]["mean_halt_ns"] == Approx((4000 * 30'000.0 + 100 * 2'000'000.0) / 4100));
  CHECK(j["all"]["halts_per_s"] == Approx(9100));
  CHECK(j["histograms"]["halt_residency"]["p90_ns"].get<double>() == Approx(30'000).epsilon(0.04));

  const json& f = j["forecast"];
  REQUIRE(f.is_object());
  CHECK(f["available"] == true);
  CHECK(f["reason"].is_null());
  CHECK(f["tick"] == 5);
  CHECK(f["cpus"] == 2);
  CHECK(f["periods"]["count"] == 9100);
  CHECK(f["periods"]["per_s"] == Approx(9100));
  CHECK(f["periods"]["p50_ns"].get<double>() == Approx(30'000).epsilon(0.04));
  CHECK(f["halt_exit_penalty_ns"] == 40'000.0);
  CHECK(f["penalty_measured"] == true);
  REQUIRE(f["rungs"].size() == 7);
  const PollForecast direct = forecast_polling(counted, 5, default_inputs(40'000.0));
  for (std::size_t i = 0; i < 7; ++i) {
    const json& r = f["rungs"][i];
    CHECK(r["ns"] == direct.rungs[i].ns);
    CHECK(r["grow_start_ns"] == 50000);
    CHECK(r["halts_avoided_per_s"].get<double>() == Approx(direct.rungs[i].halts_avoided_per_s));
    CHECK(r["halts_per_s"].get<double>() == Approx(direct.rungs[i].halts_per_s));
    CHECK(r["poll_timeouts_per_s_at_most"].get<double>() == Approx(direct.rungs[i].poll_timeouts_per_s_at_most));
    CHECK(r["poll_cpus"].get<double>() == Approx(direct.rungs[i].poll_cpus));
    CHECK(r["poll_cpu_percent_per_cpu"].get<double>() == Approx(direct.rungs[i].poll_cpu_percent_per_cpu));
    CHECK(r["net_cpus"].get<double>() == Approx(direct.rungs[i].net));
    CHECK(r["acceptable"] == direct.rungs[i].acceptable);
  }
  CHECK(f["chosen"]["ns"] == direct.rungs[direct.chosen].ns);
  CHECK(f["chosen"]["ns"] == 50000);
  CHECK(f["chosen"]["policy"] == "balanced");
  CHECK(f["chosen"]["reason"] == direct.chosen_reason);
  // Every 30 µs period is caught but the one after each 2 ms period, which shrank that limit to 0.
  CHECK(f["chosen"]["halts_avoided_per_s"].get<double>() == Approx(9000 - 100 * 9000 / 9100.0).margin(30));
  CHECK(f["error"]["halts_percent"] == 25.0);
  CHECK(f["error"]["halts_per_s"] == 200.0);
  CHECK(f["error"]["poll_points"] == 5.0);
  CHECK(f["bound"].get<std::string>().find(
            "a lower bound of the gain for closed loops, exact in expectation for open ones") != std::string::npos);
  CHECK(f["how_to_enable"] == kHowToEnableHaltpoll);
}

TEST_CASE("forecast inputs: the Controller's ladder, parameters and penalty, else the default tuner's") {
  ControllerStatus c;
  c.tuner.ladder_ns = {0, 30000, 90000};
  c.tuner.params.max_poll_cpu_percent = 3;
  c.tuner.penalty_ns = 12'000.0;
  const ForecastInputs in = forecast_inputs(&c);
  CHECK(in.ladder_ns == std::vector<std::uint32_t>{0, 30000, 90000});
  CHECK(in.params.max_poll_cpu_percent == 3);
  CHECK(in.penalty_ns == 12'000.0);
  const PollForecast f = forecast_polling(driverless_tick({{{30'000, 100}}}), 1, in);
  CHECK(f.rungs.size() == 3);
  CHECK(f.max_poll_cpu_percent == 3);
  // Without a Controller: the default ladder.
  const PollForecast d = forecast_polling(driverless_tick({{{30'000, 100}}}), 1, forecast_inputs(nullptr));
  REQUIRE(d.rungs.size() == 7);
  CHECK(d.rungs.back().ns == 400000);
  CHECK_FALSE(d.penalty_measured);
}

TEST_CASE("forecast: the stated error is the simulator's calibration tolerance") {
  CHECK(kForecastError.halts_percent == des::kCalibrationTolerance.halts_percent);
  CHECK(kForecastError.halts_per_s == des::kCalibrationTolerance.halts_per_s);
  CHECK(kForecastError.poll_points == des::kCalibrationTolerance.poll_points);
}
