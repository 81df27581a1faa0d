// tuner_sim: the tuner in closed loop with the simulated haltpoll guest (src/sim/guest_model),
// for the evaluation loads (pipe, 150 µs timer, Poisson server, idle) and the settings static 0,
// 50000, 200000, balanced and budget (10 %). Each run simulates `ticks` ticks of 100 ms on 2 vCPUs
// and reports, over the second half, the wake latency (p50, p90 of the model) and the busiest CPU's
// poll share. Prints one JSON object: {"bench":"tuner_sim","rows":[...]}.
//   bench_tuner_sim [ticks]
#include "sim/guest_model.hpp"
#include "tuning/tuner.hpp"

#include "json_writer.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace haltpolld;

int main(int argc, char** argv) {
  const int ticks = argc > 1 ? std::atoi(argv[1]) : 600;
  struct Setting {
    std::string name;
    TunerParams params;
    std::uint32_t start;
  };
  std::vector<Setting> settings;
  for (std::uint32_t ns : {0u, 50000u, 200000u}) {
    TunerParams p;
    p.policy = Policy::static_value;
    p.static_ns = ns;
    settings.push_back({"static_" + std::to_string(ns), p, ns});
  }
  TunerParams balanced;
  settings.push_back({"balanced", balanced, 200000});
  TunerParams budget;
  budget.policy = Policy::budget;
  budget.max_poll_cpu_percent = 10;
  settings.push_back({"budget_10", budget, 200000});

  benchutil::JsonArray rows;
  for (const LoadModel& load :
       {LoadModel::pipe(), LoadModel::pipe_closed(), LoadModel::timer_150us(), LoadModel::poisson_server(),
        LoadModel::idle_guest()}) {
    for (const auto& s : settings) {
      SimulatedGuest guest(load, 2, GuestModelParams{}, 99);
      Tuner tuner(s.params, s.start);
      double cpu = 0, p50 = 0, p90 = 0, value = 0;
      int n = 0, changes = 0;
      for (int i = 0; i < ticks; ++i) {
        Observation o = guest.run(100'000'000, tuner.current_ns(), s.params.percentile);
        // What the daemon's penalty measurement would find on this model: a halt wake minus a poll wake.
        o.halt_exit_penalty_ns = GuestModelParams{}.miss_cost_ns - GuestModelParams{}.hit_cost_ns;
        Decision d = tuner.decide(o);
        if (d.changed()) ++changes;
        if (i >= ticks / 2) {
          cpu += *o.poll_cpu_percent;
          p50 += guest.last_latencies().interpolated_percentile(0.5);
          p90 += *o.wake_latency_ns;
          value += o.current_ns;
          ++n;
        }
      }
      rows.add(benchutil::JsonObject()
                   .str("load", load.name)
                   .str("setting", s.name)
                   .num("p50_us", p50 / n / 1e3)
                   .num("p90_us", p90 / n / 1e3)
                   .num("poll_cpu_percent", cpu / n)
                   .num("mean_guest_halt_poll_ns", std::round(value / n))
                   .integer("final_guest_halt_poll_ns", tuner.current_ns())
                   .num("changes", changes));
    }
  }
  benchutil::JsonObject().str("bench", "tuner_sim").num("tick_ms", 100).num("ticks", ticks).raw("rows", rows.done()).print();
  return 0;
}
