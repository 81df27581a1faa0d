// The discrete-event guest against a real static curve (des_calibration.hpp).
#include "sim/des_calibration.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
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

namespace {
const char* quantity_of(const std::string& load) {
  if (load == "pipe") return "us_per_op";
  if (load == "rr" || load == "db") return "throughput_per_s";
  if (load == "timer") return "late_p50_us";
  if (load == "poisson") return "rtt_p50_us";
  return "";
}
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
const CounterPoint& find(const std::vector<CounterPoint>& rec, const std::string& load, std::uint32_t cap) {
  for (const CounterPoint& p : rec)
    if (p.load == load && p.cap == cap) return p;
  throw std::runtime_error("the recording has no " + load + " cell at cap " + std::to_string(cap));
}
double field(const CounterPoint& p, const std::string& name) {
  const auto it = p.fields.find(name);
  if (it == p.fields.end())
    throw std::runtime_error("the recording's " + p.load + " cell at cap " + std::to_string(p.cap) + " has no " + name);
  return it->second;
}
}  // namespace

std::vector<CounterPoint> read_counter_recording(std::istream& in) {
  struct Rounds {
    std::vector<double> result, poll, halts, entries, ipi;
    std::map<std::string, std::vector<double>> bare;
  };
  std::map<std::pair<std::string, std::uint32_t>, Rounds> cells;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      const std::string load = j.at("load").get<std::string>();
      Rounds& r = cells[{load, j.at("cap").get<std::uint32_t>()}];
      const std::string q = quantity_of(load);
      const bool perf = j.value("perf", false);
      if (!q.empty() && !j.at(q).is_null()) r.result.push_back(j.at(q).get<double>());
      r.poll.push_back(j.at("poll_cpu_percent_per_cpu").get<double>());
      r.halts.push_back(j.at("halts_per_s").get<double>());
      r.entries.push_back(j.at("idle_entries_per_s").get<double>());
      if (perf && j.contains("ipi_skips_per_s") && !j.at("ipi_skips_per_s").is_null())
        r.ipi.push_back(j.at("ipi_skips_per_s").get<double>());
      if (!perf)
        for (const auto& [k, v] : j.items())
          if (v.is_number()) r.bare[k].push_back(v.get<double>());
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error("recording line " + std::to_string(lineno) + ": " + e.what());
    }
  }
  std::vector<CounterPoint> out;
  for (auto& [key, r] : cells) {
    CounterPoint p;
    p.load = key.first;
    p.cap = key.second;
    p.quantity = quantity_of(p.load);
    for (const auto& [k, v] : r.bare) p.fields[k] = median(v);
    if (!p.quantity.empty() && !r.result.empty()) {
      p.result = p.fields.count(p.quantity) ? p.fields[p.quantity] : median(r.result);
      p.result_lo = *std::min_element(r.result.begin(), r.result.end());
      p.result_hi = *std::max_element(r.result.begin(), r.result.end());
    }
    p.poll_percent = median(r.poll);
    p.halts_per_s = median(r.halts);
    p.entries_per_s = median(r.entries);
    if (!r.ipi.empty()) p.ipi_skips_per_s = median(r.ipi);
    p.rounds = static_cast<int>(r.poll.size());
    out.push_back(std::move(p));
  }
  return out;
}

FitInputs fit_inputs_from(const std::vector<CounterPoint>& rec, FitInputs in) {
  // The polling pipe from both fit caps that poll (30000 and 200000): one cell's median of two
  // bare rounds spreads ±20 %.
  const CounterPoint& pipe_h = find(rec, "pipe", 0);
  const CounterPoint& pipe_a = find(rec, "pipe", 30000);
  const CounterPoint& pipe_p = find(rec, "pipe", 200000);
  in.pipe_us_per_op_halting = pipe_h.result;
  in.pipe_us_per_op_polling = (pipe_a.result + pipe_p.result) / 2;
  in.pipe_poll_share_polling = (pipe_a.poll_percent + pipe_p.poll_percent) / 200;
  in.pipe_halts_per_s_polling = pipe_p.halts_per_s;
  in.pipe_entries_per_s_polling = pipe_p.entries_per_s;
  in.pipe_halts_per_s_low_cap = pipe_a.halts_per_s;
  in.pipe_entries_per_s_low_cap = pipe_a.entries_per_s;
  in.pipe_low_cap_ns = 30000;
  in.rr_per_s_halting = find(rec, "rr", 0).result;
  const CounterPoint& rr_a = find(rec, "rr", 30000);
  const CounterPoint& rr_p = find(rec, "rr", 200000);
  in.rr_per_s_polling = (rr_a.result + rr_p.result) / 2;
  in.rr_poll_share_polling = (rr_a.poll_percent + rr_p.poll_percent) / 200;
  in.rr_work_us = field(rr_p, "work_us");
  in.rr_think_us = field(rr_p, "think_us");
  const CounterPoint& timer_h = find(rec, "timer", 0);
  in.timer_late_p50_us_halting = timer_h.result;
  in.timer_late_p99_us_halting = field(timer_h, "late_p99_us");
  in.timer_late_p50_us_polling = find(rec, "timer", 200000).result;
  in.poisson_rtt_p50_us_halting = find(rec, "poisson", 0).result;
  in.idle_entries_per_s = find(rec, "idle", 0).entries_per_s;
  const CounterPoint& db = find(rec, "db", 0);
  in.db_rtt_us_halting = field(db, "rtt_mean_us");
  in.db_work_us = field(db, "work_us");
  return in;
}

const char* not_covered(const std::string& load, std::uint32_t cap, const std::string& q) {
  // Inside a closed loop's knee the real guest polls from a lower cap than the model: the pipe
  // runs at 25.8 us/op at 10000 (the model 43), and request/response merges most of its socket's
  // write-space wake-ups with the reply (1.9 idle entries a round trip at cap 0, the model 3), so
  // that the model halts more from 10000 to 25000 and reaches the real speed only from 25000.
  constexpr const char* knee = "inside the load's knee (the real loop polls from a lower cap)";
  if (load == "pipe" && cap == 10000 && (q == "result" || q == "halts")) return knee;
  if (load == "pipe" && cap >= 20000 && cap <= 25000 && q == "halts") return knee;
  if (load == "rr" && cap >= 10000 && cap <= 25000 && q == "halts") return knee;
  if (load == "rr" && cap == 20000 && q == "result") return knee;
  // The database-shaped load's wait for the reply, split by its socket's write-space wake-up,
  // lasts about 60 us: a limit of grow_start (50000) traps it (poll 50 us, then halt), and only a
  // halt longer than the limit grows it past. The model polls more in the trap than the real
  // load at 25000-50000 and leaves it at 75000 (the real cells there are bimodal, 5183-7255/s).
  // Above, the rare long periods shrink a limit back into the trap now and then; how long it stays
  // there varies from cell to cell (the model's halts at 100000-400000 range over 180-1600/s with
  // the fit's iterations, the real ones 83-146/s): its halts are not asserted from 25000 on.
  constexpr const char* trap = "the database-shaped load in the trap of grow_start (50000) and its way out";
  if (load == "db" && cap >= 25000 && cap <= 75000 && q == "poll") return trap;
  if (load == "db" && cap >= 25000 && q == "halts") return trap;
  if (load == "db" && cap == 75000 && q == "result") return trap;
  // The pipe's poll share: the model's is the fit caps' (26 %), the real cells above 30000 spread
  // over 20-27 %.
  if (load == "pipe" && cap > 30000 && q == "poll") return "the pipe's poll share spreads between cells (20-27 %)";
  return nullptr;
}

Calibration refine_costs(Calibration cal, const FitInputs& in, int iterations) {
  constexpr Ns warmup = 100'000'000, run = 2'000'000'000;
  for (int i = 0; i < iterations; ++i) {
    const CellResult p = run_cell(cal.costs, calibrated_pipe(cal), 2, 200000, warmup, run, 1, "round_trip");
    const double rt = in.pipe_us_per_op_polling * 1000;
    // Half the round trip's error on each hop's wake-up; the poll share's error on the block.
    const double body = cal.costs.wake_polling.mean_ns() - cal.costs.wake_polling.tail_p * cal.costs.wake_polling.tail_mean_ns;
    const double sigma = cal.costs.wake_polling.sigma;
    const double new_body = std::max(100.0, body + (rt - p.result_mean_us * 1000) / 2);
    const double tail_p = cal.costs.wake_polling.tail_p, tail_mean = cal.costs.wake_polling.tail_mean_ns;
    cal.costs.wake_polling = Dist::with_mean(new_body, sigma);
    cal.costs.wake_polling.tail_p = tail_p;
    cal.costs.wake_polling.tail_mean_ns = tail_mean;
    cal.pipe_block_ns =
        std::max(0.0, cal.pipe_block_ns + (p.poll_percent_per_cpu / 100 - in.pipe_poll_share_polling) * rt);
    if (cal.socket_work_ns > 0) cal.socket_block_ns = cal.pipe_block_ns;  // the same way to sleep (fit_costs)
    // The rare long delays from the pipe's halts at 200000 and the moderate ones from its halts at
    // the low cap: the closed form counts one halt per delay over the cap, the model also the
    // halts of the limits the long ones shrink. Each probability scaled by real over simulated.
    if (in.pipe_halts_per_s_polling > 0 && p.halts_per_s > 0)
      cal.costs.wake_polling.tail_p = std::clamp(tail_p * in.pipe_halts_per_s_polling / p.halts_per_s, 0.0, 1.0);
    if (in.pipe_halts_per_s_low_cap > 0) {
      const CellResult lo = run_cell(cal.costs, calibrated_pipe(cal), 2, in.pipe_low_cap_ns, warmup, run, 1, "round_trip");
      Dist& d = cal.costs.wake_delay;
      if (lo.halts_per_s > 0) d.tail_p = std::clamp(d.tail_p * in.pipe_halts_per_s_low_cap / lo.halts_per_s, 0.0, 1.0);
    }
    if (in.rr_per_s_polling > 0 && cal.socket_work_ns > 0) {
      const CellResult r = run_cell(cal.costs, calibrated_request_response(cal, in.rr_think_us, in.rr_work_us), 2,
                                    200000, warmup, run, 1, "rtt");
      const double rt_target = 1e9 / in.rr_per_s_polling;
      const double rt_sim = r.ops > 0 ? r.seconds * 1e9 / static_cast<double>(r.ops) : rt_target;
      cal.socket_work_ns = std::max(100.0, cal.socket_work_ns + (rt_target - rt_sim) / 2);
      // The poll share's error on the spurious wake-up's CPU time (two CPUs, one each a round trip).
      Dist& sw = cal.costs.spurious_wake;
      sw = Dist::with_mean(
          std::max(100.0, sw.mean_ns() + (r.poll_percent_per_cpu / 100 - in.rr_poll_share_polling) * rt_target), sw.sigma);
    }
    // At cap 0: the waker's IPI cost from request/response (two a round trip on its path: the
    // write-space wake-ups of the halted sender), then a long halt's wake-up from the database-
    // shaped load's mean round trip (two a round trip); the halted wake-ups' shape follows both.
    auto body_mean = [](const Dist& d) { return d.median_ns * std::exp(d.sigma * d.sigma / 2); };
    {
      // The pipe at cap 0: the short halted wake-up (two a round trip), whose closed form leaves
      // out the long path that some of its halts take.
      const CellResult r = run_cell(cal.costs, calibrated_pipe(cal), 2, 0, warmup, run, 1, "round_trip");
      Dist& m = cal.costs.wake_halted;
      m = Dist::with_mean(std::max(body_mean(cal.costs.wake_polling),
                                   body_mean(m) + (in.pipe_us_per_op_halting - r.result_mean_us) * 1000 / 2),
                          m.sigma);
      shape_halted_wakes(cal, in, body_mean(cal.costs.ipi_send));
    }
    if (in.rr_per_s_halting > 0) {
      const CellResult r = run_cell(cal.costs, calibrated_request_response(cal, in.rr_think_us, in.rr_work_us), 2, 0,
                                    warmup, run, 1, "rtt");
      const double rt_target = 1e9 / in.rr_per_s_halting;
      const double rt_sim = r.ops > 0 ? r.seconds * 1e9 / static_cast<double>(r.ops) : rt_target;
      const double ipi = std::max(0.0, body_mean(cal.costs.ipi_send) + (rt_target - rt_sim) / 2);
      shape_halted_wakes(cal, in, ipi);
    }
    if (in.db_rtt_us_halting > 0 && cal.costs.host_poll_ns > 0) {
      const CellResult r = run_cell(cal.costs, calibrated_request_response(cal, in.db_work_us, in.db_work_us), 2, 0,
                                    warmup, run, 1, "rtt");
      Dist& l = cal.costs.wake_halted_long;
      l = Dist::with_mean(std::max(body_mean(cal.costs.wake_halted),
                                   body_mean(l) + (in.db_rtt_us_halting - r.result_mean_us) * 1000 / 2),
                          l.sigma);
      shape_halted_wakes(cal, in, body_mean(cal.costs.ipi_send));
    }
  }
  return cal;
}

FitInputs recorded_fit_inputs() {
  FitInputs in;
  in.pipe_us_per_op_halting = 44.0874;
  in.pipe_us_per_op_polling = 9.45831;
  in.pipe_poll_share_polling = 0.262163;
  in.pipe_halts_per_s_polling = 90.5;
  in.pipe_entries_per_s_polling = 183532;
  in.pipe_halts_per_s_low_cap = 519.5;
  in.pipe_entries_per_s_low_cap = 157170;
  in.pipe_low_cap_ns = 30000;
  in.timer_late_p50_us_halting = 79.7245;
  in.timer_late_p99_us_halting = 123.749;
  in.timer_late_p50_us_polling = 67.2155;
  in.poisson_rtt_p50_us_halting = 20.8105;
  in.idle_entries_per_s = 114;
  in.db_rtt_us_halting = 138.995;
  in.db_work_us = 60;
  in.rr_per_s_polling = 21186.2;
  in.rr_per_s_halting = 13305.25;
  in.rr_poll_share_polling = 0.367118;
  in.rr_work_us = 20;
  in.rr_think_us = 10;
  return in;
}

const Calibration& guest_calibration() {
  static const Calibration cal = refine_costs(fit_costs(recorded_fit_inputs()), recorded_fit_inputs());
  return cal;
}

Workload recorded_load(const Calibration& cal, const std::string& load) {
  if (load == "pipe") return calibrated_pipe(cal);
  if (load == "rr") return calibrated_request_response(cal, 10, 20);
  if (load == "db") return calibrated_request_response(cal, 60, 60);
  if (load == "timer") return calibrated_timer(cal);
  if (load == "poisson") return calibrated_poisson(cal);
  return idle_load();
}

double sim_quantity(const CellResult& r, const std::string& q) {
  if (q == "us_per_op") return r.result_mean_us;
  if (q == "throughput_per_s") return r.seconds > 0 ? static_cast<double>(r.ops) / r.seconds : 0;
  if (q == "late_p50_us" || q == "rtt_p50_us") return r.result_p50_us;
  return 0;
}

std::vector<CounterPrediction> predict(const Calibration& cal, const std::vector<CounterPoint>& rec, Ns duration,
                                       std::uint64_t seed) {
  std::vector<CounterPrediction> out;
  constexpr Ns warmup = 100'000'000;
  for (const CounterPoint& p : rec) {
    CounterPrediction r;
    r.real = p;
    const char* metric = p.load == "pipe" ? "round_trip" : p.load == "timer" ? "lateness" : p.load == "idle" ? "" : "rtt";
    r.sim = run_cell(cal.costs, recorded_load(cal, p.load), 2, p.cap, warmup, duration, seed, metric);
    r.sim_result = sim_quantity(r.sim, p.quantity);
    r.error_percent = p.result > 0 ? 100 * (r.sim_result - p.result) / p.result : 0;
    out.push_back(r);
  }
  return out;
}

}  // namespace haltpolld::des
