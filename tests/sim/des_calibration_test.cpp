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

namespace {
const std::string recording_path = HALTPOLL_SOURCE_DIR "/tests/data/calibration-2026-12-03/counters.jsonl";

std::vector<CounterPoint> recording() {
  std::ifstream in(recording_path);
  REQUIRE(in);
  return read_counter_recording(in);
}

bool recording_fit_cap(std::uint32_t cap) { return cap == 0 || cap == 30000 || cap == 200000; }
}  // namespace

// The 2026-12-03 recording (tests/data/calibration-2026-12-03): the costs fitted on caps 0, 30000
// and 200000 (fit_inputs_from), every other cap predicted, for all six loads of eval-kernel.sh. The
// tolerance (kCalibrationTolerance) at every held-out point: the result within 15 % of the real
// cell's median or within the range its own rounds spread over (a cell cannot be predicted better
// than it repeats: the pipe's rounds at one cap spread 7-10 µs/op), poll CPU within 5 points, halts
// within 25 % or 200/s. Where the model is known not to hold, the quantities are listed by
// not_covered() with the reason, printed as such and not asserted.
TEST_CASE("des calibration: the 2026-12-03 recording, every load at every cap", "[des][calibration]") {
  const auto rec = recording();
  REQUIRE(rec.size() == 66);
  const FitInputs in = fit_inputs_from(rec);
  // The inputs the daemon carries (recorded_fit_inputs) are this recording's.
  const FitInputs baked = recorded_fit_inputs();
  for (auto [a, b] : {std::pair{in.pipe_us_per_op_halting, baked.pipe_us_per_op_halting},
                      {in.pipe_us_per_op_polling, baked.pipe_us_per_op_polling},
                      {in.pipe_poll_share_polling, baked.pipe_poll_share_polling},
                      {in.pipe_halts_per_s_polling, baked.pipe_halts_per_s_polling},
                      {in.pipe_entries_per_s_polling, baked.pipe_entries_per_s_polling},
                      {in.pipe_halts_per_s_low_cap, baked.pipe_halts_per_s_low_cap},
                      {in.pipe_entries_per_s_low_cap, baked.pipe_entries_per_s_low_cap},
                      {in.timer_late_p50_us_halting, baked.timer_late_p50_us_halting},
                      {in.timer_late_p99_us_halting, baked.timer_late_p99_us_halting},
                      {in.timer_late_p50_us_polling, baked.timer_late_p50_us_polling},
                      {in.poisson_rtt_p50_us_halting, baked.poisson_rtt_p50_us_halting},
                      {in.idle_entries_per_s, baked.idle_entries_per_s}, {in.db_rtt_us_halting, baked.db_rtt_us_halting},
                      {in.rr_per_s_polling, baked.rr_per_s_polling}, {in.rr_poll_share_polling, baked.rr_poll_share_polling},
                      {in.rr_per_s_halting, baked.rr_per_s_halting}})
    CHECK(a == Approx(b).epsilon(1e-5));
  const Calibration cal = refine_costs(fit_costs(in), in);
  const auto preds = predict(cal, rec, 3'000'000'000, 1);
  const auto& tol = kCalibrationTolerance;
  std::printf("%-8s %7s %10s %12s %10s %7s %7s %7s %8s %8s %8s %8s %7s %7s  %s\n", "load", "cap", "real", "rounds",
              "sim", "err%", "poll_r", "poll_s", "halts_r", "halts_s", "entr_r", "entr_s", "ipi_r", "ipi_s", "role");
  int held = 0, misses_expected = 0;
  double worst_result = 0, worst_poll = 0;
  for (const auto& p : preds) {
    const auto& r = p.real;
    const bool fit = recording_fit_cap(r.cap);
    const bool result_ok = r.quantity.empty() || std::abs(p.error_percent) <= tol.result_percent ||
                           (p.sim_result >= r.result_lo && p.sim_result <= r.result_hi);
    const bool poll_ok = std::abs(p.sim.poll_percent_per_cpu - r.poll_percent) <= tol.poll_points;
    const double dh = std::abs(p.sim.halts_per_s - r.halts_per_s);
    const bool halts_ok = dh <= tol.halts_per_s || dh <= tol.halts_percent / 100 * r.halts_per_s;
    const char* why_r = not_covered(r.load, r.cap, "result");
    const char* why_p = not_covered(r.load, r.cap, "poll");
    const char* why_h = not_covered(r.load, r.cap, "halts");
    const char* why = why_r ? why_r : why_p ? why_p : why_h;
    const bool miss = (!why_r && !result_ok) || (!why_p && !poll_ok) || (!why_h && !halts_ok);
    std::printf("%-8s %7u %10.2f %5.0f-%-6.0f %10.2f %7.1f %7.2f %7.2f %8.0f %8.0f %8.0f %8.0f %7.0f %7.0f  %s%s%s%s%s\n",
                r.load.c_str(), r.cap, r.result, r.result_lo, r.result_hi, p.sim_result, p.error_percent,
                r.poll_percent, p.sim.poll_percent_per_cpu, r.halts_per_s, p.sim.halts_per_s, r.entries_per_s,
                p.sim.idle_entries_per_s, r.ipi_skips_per_s.value_or(-1), p.sim.ipi_skips_per_s,
                fit ? "fit" : "held-out", !fit && why ? ", not covered (" : "", !fit && why ? (why_r ? "result" : why_p ? "poll" : "halts") : "",
                !fit && why ? "): " : "", !fit && why ? why : "");
    if (fit) continue;
    CAPTURE(r.load, r.cap, r.result, p.sim_result, r.poll_percent, p.sim.poll_percent_per_cpu, r.halts_per_s,
            p.sim.halts_per_s);
    CHECK_FALSE(miss);
    misses_expected += why != nullptr;
    held += why == nullptr;
    if (!why_r && !r.quantity.empty()) worst_result = std::max(worst_result, std::abs(p.error_percent));
    if (!why_p) worst_poll = std::max(worst_poll, std::abs(p.sim.poll_percent_per_cpu - r.poll_percent));
  }
  std::printf("held-out points asserted: %d, not covered: %d; worst result error %.1f %%, worst poll CPU %.1f points\n",
              held, misses_expected, worst_result, worst_poll);
  CHECK(held >= 31);

  // The features that decide tuning, as the model shows them on this recording.
  auto at = [&](const std::string& load, std::uint32_t cap) -> const CounterPrediction& {
    for (const auto& p : preds)
      if (p.real.load == load && p.real.cap == cap) return p;
    FAIL("no " << load << " at " << cap);
    return preds.front();
  };
  // The pipe's knee: slow at 10000, fast from 20000 on (real: 25.8 -> 8.7 µs/op, a partial knee at
  // 10000 the model does not show).
  CHECK(at("pipe", 10000).sim_result > 0.8 * at("pipe", 0).sim_result);
  CHECK(at("pipe", 20000).sim_result < 0.3 * at("pipe", 0).sim_result);
  // The timer's trap at 100000: a third of each CPU polling and still thousands of halts a second
  // (real 32.9 % and 5894/s); at 200000 its polls "hit" and skip no IPI.
  CHECK(at("timer", 100000).sim.poll_percent_per_cpu > 25);
  CHECK(at("timer", 100000).sim.halts_per_s > 4000);
  CHECK(at("timer", 200000).sim.ipi_skips_per_s < 1);
  CHECK(at("timer", 200000).sim.poll_percent_per_cpu > 40);
  // The database-shaped load pays from 100000 on: within 5 % of 400000 there (real 0.99 x), 0 is
  // slower by a quarter or more (real 0.69 x of 400000), and 50000 lies between, at about 0.8 x
  // (real 0.82 x: its wait for the reply, split by the socket's write-space wake-up, about 60 us,
  // polls 50 us and halts).
  const double db_top = at("db", 400000).sim_result;
  CHECK(at("db", 100000).sim_result > 0.95 * db_top);
  CHECK(at("db", 0).sim_result < 0.75 * db_top);
  CHECK(at("db", 50000).sim_result > 0.72 * db_top);
  CHECK(at("db", 50000).sim_result < 0.92 * db_top);
  // The request/response load's socket: its write-space wake-ups make about 3.5 idle entries a
  // round trip once both CPUs poll (real 3.5 at 200000, 3.2 at 30000; 2 without them).
  const auto& rr_p = at("rr", 200000);
  CHECK(rr_p.sim.idle_entries_per_s / rr_p.sim_result > 3.0);
  CHECK(rr_p.sim.idle_entries_per_s / rr_p.sim_result < 4.0);
  CHECK(worst_result <= tol.worst_result_percent + 0.05);
  CHECK(worst_poll <= tol.worst_poll_points + 0.05);
}
