// The discrete-event guest against a real static curve (des_calibration.hpp).
#include "sim/des_calibration.hpp"

#include <nlohmann/json.hpp>

#include <istream>
#include <stdexcept>

namespace haltpolld::des {

std::vector<RealPoint> read_static_curve(std::istream& in) {
  std::vector<RealPoint> out;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      RealPoint p;
      p.load = j.at("load").get<std::string>();
      p.cap = j.at("cap").get<std::uint32_t>();
      p.poll_percent = j.at("poll_cpu_percent_per_cpu").get<double>();
      p.quantity = p.load == "perf_pipe" ? "us_per_op" : p.load == "load_timer" ? "late_p50_us" : "rtt_p50_us";
      p.result = j.at(p.quantity).get<double>();
      out.push_back(p);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("static curve line " + std::to_string(lineno) + ": " + e.what());
    }
  }
  return out;
}

namespace {
const RealPoint& find(const std::vector<RealPoint>& curve, const std::string& load, std::uint32_t cap) {
  for (const RealPoint& p : curve)
    if (p.load == load && p.cap == cap) return p;
  throw std::runtime_error("the static curve has no " + load + " point at cap " + std::to_string(cap));
}
}  // namespace

FitInputs fit_inputs_from(const std::vector<RealPoint>& curve, FitInputs in, std::uint32_t halting_cap,
                          std::uint32_t polling_cap) {
  const RealPoint& pipe_h = find(curve, "perf_pipe", halting_cap);
  const RealPoint& pipe_p = find(curve, "perf_pipe", polling_cap);
  in.pipe_us_per_op_halting = pipe_h.result;
  in.pipe_us_per_op_polling = pipe_p.result;
  in.pipe_poll_share_polling = pipe_p.poll_percent / 100;
  in.timer_late_p50_us_halting = find(curve, "load_timer", halting_cap).result;
  in.timer_late_p50_us_polling = find(curve, "load_timer", polling_cap).result;
  in.poisson_rtt_p50_us_halting = find(curve, "load_poisson", halting_cap).result;
  return in;
}

std::vector<Prediction> predict(const Calibration& cal, const std::vector<RealPoint>& curve, Ns duration,
                                std::uint64_t seed) {
  std::vector<Prediction> out;
  constexpr Ns warmup = 100'000'000;
  for (const RealPoint& p : curve) {
    Prediction r;
    r.real = p;
    if (p.load == "perf_pipe") {
      r.sim = run_cell(cal.costs, calibrated_pipe(cal), 2, p.cap, warmup, duration, seed, "round_trip");
      r.sim_result = r.sim.result_mean_us;
    } else if (p.load == "load_timer") {
      r.sim = run_cell(cal.costs, calibrated_timer(cal), 2, p.cap, warmup, duration, seed, "lateness");
      r.sim_result = r.sim.result_p50_us;
    } else {
      r.sim = run_cell(cal.costs, calibrated_poisson(cal), 2, p.cap, warmup, duration, seed, "rtt");
      r.sim_result = r.sim.result_p50_us;
    }
    r.error_percent = 100 * (r.sim_result - p.result) / p.result;
    r.poll_error_points = r.sim.poll_percent_per_cpu - p.poll_percent;
    out.push_back(r);
  }
  return out;
}

}  // namespace haltpolld::des
