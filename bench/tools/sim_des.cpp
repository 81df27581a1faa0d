// bench_sim_des: the discrete-event guest (src/sim/des_*.hpp) against the real guest's static
// curve, and its speed. Fits the costs on the real points at caps 0 and 200000 (fit_costs), then
// predicts every point of the static curve (pipe µs/op, timer lateness p50, Poisson RTT p50, and
// poll CPU) and prints real against simulated with the error; then runs 2-, 32- and 64-vCPU guests
// (calibrated_mix: half the vCPUs request/response pairs, half 150 µs timers) for 10 s of virtual time and prints
// the wall time. One JSON object on stdout.
//   bench_sim_des [static-curve.jsonl] [virtual seconds per cell]
#include "sim/des_calibration.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>

using namespace haltpolld::des;

namespace {
double round_to(double x, double unit) { return std::round(x / unit) / std::round(1 / unit); }
}  // namespace

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 && argv[1][0] ? argv[1] : HALTPOLL_SOURCE_DIR "/tests/data/real-guest/static-curve.jsonl";
  const double secs = argc > 2 ? std::stod(argv[2]) : 2.0;
  std::ifstream in(path);
  if (!in) {
    std::cerr << "cannot read " << path << "\n";
    return 1;
  }
  const auto curve = read_static_curve(in);
  const Calibration cal = fit_costs(fit_inputs_from(curve));
  nlohmann::json out;
  out["fit_caps"] = {0, 200000};
  out["virtual_seconds_per_cell"] = secs;
  for (const Prediction& p : predict(cal, curve, static_cast<Ns>(secs * 1e9), 1)) {
    out["points"].push_back({{"load", p.real.load},
                             {"cap", p.real.cap},
                             {"held_out", p.real.cap != 0 && p.real.cap != 200000},
                             {"quantity", p.real.quantity},
                             {"real", p.real.result},
                             {"sim", round_to(p.sim_result, 0.01)},
                             {"error_percent", round_to(p.error_percent, 0.1)},
                             {"real_poll_percent", p.real.poll_percent},
                             {"sim_poll_percent", round_to(p.sim.poll_percent_per_cpu, 0.1)},
                             {"sim_halts_per_s", std::round(p.sim.halts_per_s)},
                             {"sim_idle_entries_per_s", std::round(p.sim.idle_entries_per_s)},
                             {"sim_ipi_skips_per_s", std::round(p.sim.ipi_skips_per_s)}});
  }
  for (int cpus : {2, 32, 64}) {
    const Workload w = calibrated_mix(cal, cpus);
    const auto t0 = std::chrono::steady_clock::now();
    const CellResult r = run_cell(cal.costs, w, cpus, 100000, 0, 10'000'000'000, 1, "rtt");
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out["speed"].push_back({{"cpus", cpus},
                            {"virtual_s", 10},
                            {"wall_s", round_to(wall, 0.01)},
                            {"events", r.events},
                            {"idle_periods_per_wall_s", std::round(r.idle_entries_per_s * 10 / wall)}});
  }
  std::cout << out.dump(1) << "\n";
  return 0;
}
