// Calibration of the discrete-event guest against the real guest (tests/data/real-guest,
// measured 2026-12-01): the costs are fitted on the static curve's points at caps 0 and 200000
// only; every other cap is a prediction. Prints real against simulated for every point.
//
// Tolerance (docs/simulator.md): the load's result within 15 % and poll CPU within 5 points per
// CPU, the spread the real guest itself shows between runs of one cell (the pipe at one static
// ranged 7.65–10.93 µs/op, i.e. ±18 %). Asserted for the pipe away from its knee and for the timer
// and Poisson loads at every held-out cap. Not asserted, and printed as such: the pipe at 10000 and
// 20000 (inside the knee, where the real guest's result is a mixture of polling and halting phases
// whose mix the model does not reproduce: it leaves a halting phase too soon).
#include "sim/des_calibration.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

using namespace haltpolld::des;

namespace {
const std::string curve_path = HALTPOLL_SOURCE_DIR "/tests/data/real-guest/static-curve.jsonl";

bool fit_cap(std::uint32_t cap) { return cap == 0 || cap == 200000; }
bool asserted(const RealPoint& p) {
  if (p.load == "perf_pipe" && (p.cap == 10000 || p.cap == 20000)) return false;
  return !fit_cap(p.cap);
}
}  // namespace

TEST_CASE("des calibration: held-out caps of the real static curve are predicted", "[des][calibration]") {
  std::ifstream in(curve_path);
  REQUIRE(in);
  const auto curve = read_static_curve(in);
  REQUIRE(curve.size() >= 24);
  const Calibration cal = fit_costs(fit_inputs_from(curve));
  const auto preds = predict(cal, curve, 1'000'000'000, 1);

  std::printf("%-13s %7s %-12s %9s %9s %7s %9s %9s %9s %9s %9s  %s\n", "load", "cap", "quantity", "real", "sim", "err%",
              "poll_real", "poll_sim", "halts/s", "entries/s", "ipi_skip/s", "role");
  double worst_result = 0, worst_poll = 0;
  int checked = 0;
  for (const Prediction& p : preds) {
    const char* role = fit_cap(p.real.cap) ? "fit" : asserted(p.real) ? "held-out" : "held-out, not asserted";
    std::printf("%-13s %7u %-12s %9.2f %9.2f %7.1f %9.2f %9.2f %9.0f %9.0f %9.0f  %s\n", p.real.load.c_str(),
                p.real.cap, p.real.quantity.c_str(), p.real.result, p.sim_result, p.error_percent, p.real.poll_percent,
                p.sim.poll_percent_per_cpu, p.sim.halts_per_s, p.sim.idle_entries_per_s, p.sim.ipi_skips_per_s, role);
    if (!asserted(p.real)) continue;
    ++checked;
    CAPTURE(p.real.load, p.real.cap, p.real.result, p.sim_result, p.real.poll_percent, p.sim.poll_percent_per_cpu);
    CHECK(std::abs(p.error_percent) <= kCalibrationTolerance.result_percent);
    CHECK(std::abs(p.poll_error_points) <= kCalibrationTolerance.poll_points);
    worst_result = std::max(worst_result, std::abs(p.error_percent));
    worst_poll = std::max(worst_poll, std::abs(p.poll_error_points));
  }
  std::printf("held-out points asserted: %d; worst result error %.1f %%, worst poll CPU error %.1f points\n", checked,
              worst_result, worst_poll);
  CHECK(checked >= 15);
  // The worst errors that `haltpolld simulate --guest` prints still hold.
  CHECK(worst_result <= kCalibrationTolerance.worst_result_percent + 0.05);
  CHECK(worst_poll <= kCalibrationTolerance.worst_poll_points + 0.05);

  // The features that decide tuning. The timer's trap at 100000: about a third of each CPU
  // polling and still thousands of halts a second (real: 32.5 % and 6189/s), and its polls at
  // 200000 "hit" without skipping an IPI.
  for (const Prediction& p : preds) {
    if (p.real.load == "load_timer" && p.real.cap == 100000) {
      CHECK(p.sim.poll_percent_per_cpu > 25);
      CHECK(p.sim.halts_per_s > 4000);
    }
    if (p.real.load == "load_timer" && p.real.cap == 200000) {
      CHECK(p.sim.halts_per_s < 500);
      CHECK(p.sim.ipi_skips_per_s < 1);
    }
    // The pipe's knee lies between 10000 and 30000: slow below, fast from 30000 on.
    if (p.real.load == "perf_pipe" && p.real.cap == 10000) CHECK(p.sim_result > 0.8 * preds.front().sim_result);
    if (p.real.load == "perf_pipe" && p.real.cap == 30000) CHECK(p.sim_result < 1.2 * p.real.result);
  }
}

TEST_CASE("des calibration: a malformed static curve is refused with its line", "[des][calibration]") {
  std::istringstream bad(
      "{\"load\": \"perf_pipe\", \"cap\": 0, \"us_per_op\": 44, \"poll_cpu_percent_per_cpu\": 0}\n{\"load\": 3}\n");
  CHECK_THROWS_WITH(read_static_curve(bad), Catch::Contains("line 2"));
  std::istringstream partial(
      "{\"load\": \"perf_pipe\", \"cap\": 0, \"us_per_op\": 44, \"poll_cpu_percent_per_cpu\": 0}\n");
  CHECK_THROWS_WITH(fit_inputs_from(read_static_curve(partial)), Catch::Contains("perf_pipe point at cap 200000"));
}

TEST_CASE("des calibration: halts per second of a run without perf attached", "[des][calibration]") {
  // tests/data/real-guest/counters-no-perf.jsonl: cpuidle deltas of one run per cell (README §4 of
  // the measurements). Its pipe ran slower than the static curve's (9.8 against 6.6 µs/op at
  // 30000), so only halts/s is asserted (within 25 % or 200/s), at the held-out caps away from
  // the pipe's knee; idle entries/s and poll CPU are printed.
  std::ifstream in(HALTPOLL_SOURCE_DIR "/tests/data/real-guest/counters-no-perf.jsonl");
  REQUIRE(in);
  const Calibration cal = fit_costs(fit_inputs_from([] {
    std::ifstream c(curve_path);
    return read_static_curve(c);
  }()));
  std::string line;
  int checked = 0;
  std::printf("%-11s %7s %10s %10s %11s %11s %9s %9s  %s\n", "load", "cap", "halts_real", "halts_sim", "entries_real",
              "entries_sim", "poll_real", "poll_sim", "role");
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string load = j.at("load");
    const auto cap = j.at("cap").get<std::uint32_t>();
    const bool pipe = load == "perf_pipe";
    const CellResult r = run_cell(cal.costs, pipe ? calibrated_pipe(cal) : calibrated_timer(cal), 2, cap, 100'000'000,
                                  1'000'000'000, 1, pipe ? "round_trip" : "lateness");
    const double real = j.at("halts_per_s");
    const bool assert_it = !fit_cap(cap) && !(pipe && cap == 20000);
    std::printf("%-11s %7u %10.0f %10.0f %11.0f %11.0f %9.2f %9.2f  %s\n", load.c_str(), cap, real, r.halts_per_s,
                j.at("idle_entries_per_s").get<double>(), r.idle_entries_per_s,
                j.at("poll_cpu_percent_per_cpu").get<double>(), r.poll_percent_per_cpu,
                fit_cap(cap) ? "fit cap"
                : assert_it  ? "held-out"
                             : "held-out, not asserted");
    if (!assert_it) continue;
    ++checked;
    CAPTURE(load, cap, real, r.halts_per_s);
    CHECK((std::abs(r.halts_per_s - real) <= kCalibrationTolerance.halts_per_s ||
           std::abs(r.halts_per_s - real) <= kCalibrationTolerance.halts_percent / 100 * real));
  }
  CHECK(checked == 4);
}
