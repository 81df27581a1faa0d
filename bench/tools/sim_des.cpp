// bench_sim_des: the discrete-event guest (src/sim/des_*.hpp) against the real guest's static
// curve, and its speed. Fits the costs on the real points at caps 0 and 200000 (fit_costs), then
// predicts every point of the static curve (pipe µs/op, timer lateness p50, Poisson RTT p50, and
// poll CPU) and prints real against simulated with the error. Then its speed on one core:
// calibrated_mix (half the vCPUs request/response pairs, half 150 µs timers) and one pipe per pair
// of vCPUs (calibrated_pipe), 2, 8, 32 and 64 vCPUs at cap 100000, and the 60 s cell of the 2-vCPU
// pipe (run_cell) at caps 0 and 200000. Idle periods and events per second of wall time and of the
// thread's CPU time (the machine may be shared: CPU time is the figure per core). One JSON object
// on stdout.
//   bench_sim_des [static-curve.jsonl] [virtual s per calibration cell, 0: none] [virtual s per speed run]
#include "sim/des_calibration.hpp"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>

using namespace haltpolld::des;

namespace {
double round_to(double x, double unit) { return std::round(x / unit) / std::round(1 / unit); }

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One pipe per pair of vCPUs.
Workload pipes(const Calibration& cal, int cpus) {
  Workload w;
  for (int cpu = 0; cpu + 1 < cpus; cpu += 2) w.add(calibrated_pipe(cal, cpu, cpu + 1));
  return w;
}

// One cell without warm-up, timed.
nlohmann::json timed_cell(const Calibration& cal, const std::string& load, int cpus, std::uint32_t cap, double secs) {
  const bool mix = load == "calibrated_mix";
  const Workload w = mix ? calibrated_mix(cal, cpus) : pipes(cal, cpus);
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = thread_cpu_s();
  const CellResult r = run_cell(cal.costs, w, cpus, cap, 0, static_cast<Ns>(secs * 1e9), 1, mix ? "rtt" : "round_trip");
  const double cpu = thread_cpu_s() - c0;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double periods = r.idle_entries_per_s * r.seconds;
  const auto events = static_cast<double>(r.events);
  return {{"load", load},
          {"cpus", cpus},
          {"cap", cap},
          {"virtual_s", secs},
          {"wall_s", round_to(wall, 0.001)},
          {"cpu_s", round_to(cpu, 0.001)},
          {"idle_periods", std::round(periods)},
          {"events", r.events},
          {"idle_periods_per_wall_s", std::round(periods / wall)},
          {"idle_periods_per_cpu_s", std::round(periods / cpu)},
          {"events_per_cpu_s", std::round(events / cpu)},
          {"ns_per_event", round_to(cpu * 1e9 / events, 0.1)},
          {"ns_per_idle_period", round_to(cpu * 1e9 / periods, 0.1)}};
}
}  // namespace

int main(int argc, char** argv) {
  const std::string path =
      argc > 1 && argv[1][0] ? argv[1] : HALTPOLL_SOURCE_DIR "/tests/data/real-guest/static-curve.jsonl";
  const double secs = argc > 2 ? std::stod(argv[2]) : 2.0;
  const double speed_secs = argc > 3 ? std::stod(argv[3]) : 5.0;
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
  if (secs > 0) {
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
  }
  if (speed_secs > 0) {
    for (const char* load : {"calibrated_mix", "calibrated_pipe"})
      for (int cpus : {2, 8, 32, 64}) out["speed"].push_back(timed_cell(cal, load, cpus, 100000, speed_secs));
    for (std::uint32_t cap : {0u, 200000u})
      out["pipe_cell_60s"].push_back(timed_cell(cal, "calibrated_pipe", 2, cap, 60));
  }
  std::cout << out.dump(1) << "\n";
  return 0;
}
