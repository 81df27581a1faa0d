// The discrete-event guest against a real guest's static curve (tests/data/real-guest/
// static-curve.jsonl): read the curve, fit the costs on some caps, predict the others.
#pragma once

#include "sim/des_cell.hpp"

#include <iosfwd>
#include <string>
#include <vector>

namespace haltpolld::des {

// The stated calibration error (docs/simulator.md): the tolerance the calibration test asserts at
// every held-out point of the 2-vCPU real guest, and the worst error measured there. Printed next to
// every prediction of `haltpolld simulate --guest`.
struct CalibrationTolerance {
  double result_percent = 15;         // the load's result (µs/op, lateness, RTT)
  double poll_points = 5;             // poll CPU, points of one CPU
  double halts_percent = 25;          // halts/s: within this share ...
  double halts_per_s = 200;           // ... or this many
  double worst_result_percent = 9.4;  // measured 2026-12-03 (Poisson at 20000)
  double worst_poll_points = 4.5;     // measured 2026-12-03 (pipe at 400000)
  // Where it does not hold: the pipe between 10000 and 30000 (the knee, model fast already at 20000).
  const char* not_covered =
      "caps inside a load's knee (the pipe at 10000-20000 read -57 %), loads unlike the "
      "calibrated ones, more than 2 vCPUs (the costs are the 2-vCPU guest's)";
};
inline constexpr CalibrationTolerance kCalibrationTolerance{};

// One point of the real curve: a load at a static cap, its result and its poll CPU.
struct RealPoint {
  std::string load;  // perf_pipe, load_timer, load_poisson
  std::uint32_t cap = 0;
  std::string quantity;  // us_per_op, late_p50_us, rtt_p50_us
  double result = 0;
  double poll_percent = 0;  // POLL residency per CPU, %
};

// One JSON object per line; throws std::runtime_error naming the line on a malformed one.
std::vector<RealPoint> read_static_curve(std::istream& in);

// `base` with the fields that come from the static curve taken from its points at `halting_cap`
// (0) and `polling_cap` (200000); throws std::runtime_error when one is missing.
FitInputs fit_inputs_from(const std::vector<RealPoint>& curve, FitInputs base = {}, std::uint32_t halting_cap = 0,
                          std::uint32_t polling_cap = 200000);

struct Prediction {
  RealPoint real;
  CellResult sim;
  double sim_result = 0;     // the same quantity as real.result
  double error_percent = 0;  // (sim - real) / real
  double poll_error_points = 0;
};

// Simulates every point (2 vCPUs, the load as the real run placed it) for `duration` after 0.1 s
// of warm-up.
std::vector<Prediction> predict(const Calibration& cal, const std::vector<RealPoint>& curve, Ns duration,
                                std::uint64_t seed);

}  // namespace haltpolld::des
