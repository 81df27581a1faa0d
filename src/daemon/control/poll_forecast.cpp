#include "control/poll_forecast.hpp"

#include "control/stats.hpp"
#include "tuning/controller_status.hpp"
#include "tuning/tuner.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace haltpolld {

using nlohmann::json;

namespace {

std::string penalty_words(const PollForecast& f) {
  return f.penalty_measured
             ? fmt::format("the {:.1f} µs halt-exit penalty the daemon measured", f.penalty_ns / 1e3)
             : fmt::format("a {:.1f} µs halt-exit penalty (not measured here yet: what the real guest's probes read)",
                           f.penalty_ns / 1e3);
}

std::string explain_choice(const PollForecast& f) {
  const RungForecast& c = f.rungs[f.chosen];
  const RungForecast& b = f.rungs[f.best];
  std::size_t left_out = 0;
  for (const RungForecast& r : f.rungs) left_out += !r.acceptable;
  const std::string budget =
      left_out ? fmt::format(
                     "; {} rung(s) over the balanced budget ({:g} % poll CPU per CPU) that do not pay for "
                     "themselves left out",
                     left_out, f.max_poll_cpu_percent)
               : std::string();
  if (c.halts_avoided_per_s <= 0 || c.ns == 0) {
    // The rung that would catch the most periods, the cheapest of those: what polling could do at best.
    const RungForecast* most = &f.rungs.front();
    for (const RungForecast& r : f.rungs)
      if (r.halts_avoided_per_s > most->halts_avoided_per_s) most = &r;
    if (most->halts_avoided_per_s <= 0)
      return fmt::format("no polling ({} ns): no rung up to {} ns would catch an idle period (p50 {:.1f} µs)", c.ns,
                         f.rungs.back().ns, f.p50_ns / 1e3);
    return fmt::format(
        "no polling ({} ns): at {}, no rung's halt exits avoided are worth its poll CPU; the most a rung avoids is "
        "{:.0f} halt exits/s ({} ns, {:.1f} % poll CPU per CPU, net {:+.4f} CPU-s/s){}",
        c.ns, penalty_words(f), most->halts_avoided_per_s, most->ns, most->poll_cpu_percent_per_cpu, most->net, budget);
  }
  std::string out = fmt::format(
      "{} ns: avoids {:.0f} of {:.0f} halt exits/s, worth {:.4f} CPU-s/s at {}, for {:.4f} CPU-s/s of polling "
      "({:.1f} % per CPU over {} CPU{}): net {:+.4f} CPU-s/s",
      c.ns, c.halts_avoided_per_s, f.periods_per_s, c.halts_avoided_per_s * f.penalty_ns / 1e9, penalty_words(f),
      c.poll_cpus, c.poll_cpu_percent_per_cpu, f.cpus, f.cpus == 1 ? "" : "s", c.net);
  out += f.chosen == f.best ? std::string("; the best net of the ladder")
                            : fmt::format(
                                  "; the cheapest rung within {:g} % of the best rung's poll CPU of the best net "
                                  "({} ns, net {:+.4f} CPU-s/s)",
                                  100 * kForecastTieShare, b.ns, b.net);
  return out + budget;
}

}  // namespace

ForecastInputs forecast_inputs(const ControllerStatus* controller) {
  ForecastInputs in;
  if (controller) {
    in.ladder_ns = controller->tuner.ladder_ns;
    in.params = controller->tuner.params;
    in.penalty_ns = controller->tuner.penalty_ns;
  }
  return in;
}

PollForecast forecast_polling(const KernelSignals& tick, std::uint64_t tick_number, const ForecastInputs& in) {
  PollForecast f;
  f.tick = tick_number;
  f.elapsed_ns = tick.elapsed_ns;
  f.cpus = static_cast<unsigned>(tick.cpus.size());
  f.penalty_measured = in.penalty_ns && *in.penalty_ns > 0;
  if (f.penalty_measured) f.penalty_ns = *in.penalty_ns;
  f.max_poll_cpu_percent = in.params.max_poll_cpu_percent;
  if (!tick.periods) {
    f.reason = fmt::format("tick {} carried no idle-period histograms", tick_number);
    return f;
  }
  if (f.elapsed_ns == 0 || f.cpus == 0) {
    f.reason = fmt::format("tick {} counted no CPU", tick_number);
    return f;
  }
  haltpoll::LatencyHistogram all;
  all.merge(tick.periods->poll_hit);
  all.merge(tick.periods->poll_halt);
  all.merge(tick.periods->halt);
  f.periods = all.count();
  if (f.periods == 0) {
    f.reason = fmt::format("the tracepoint counted no idle period in tick {}", tick_number);
    return f;
  }
  const double per_s = 1e9 / static_cast<double>(f.elapsed_ns);
  f.periods_per_s = static_cast<double>(f.periods) * per_s;
  f.p50_ns = all.interpolated_percentile(0.5);
  f.p90_ns = all.interpolated_percentile(0.9);
  f.p99_ns = all.interpolated_percentile(0.99);

  const Tuner tuner(in.params);
  for (const std::uint32_t ns : in.ladder_ns.empty() ? tuner.ladder() : in.ladder_ns) {
    RungForecast r;
    r.ns = ns;
    // The grow_start the tuner would write with this cap, else the kernel's.
    r.grow_start_ns = tuner.grow_start_for(ns).value_or(in.params.kernel_grow_start_ns);
    const CapPrediction p = replay_cap(*tick.periods, ns, r.grow_start_ns);
    r.halts_avoided_per_s = p.hits * per_s;  // every period halts now: each one caught is a halt exit fewer
    r.halts_per_s = p.halts * per_s;
    r.poll_cpus = p.poll_ns * per_s / 1e9;
    // A poll that times out polls the CPU's whole limit, and a non-zero limit is never below
    // min(grow_start, cap) (a grow starts there, a shrink under grow_start resets to 0).
    const double shortest_limit = std::max<std::uint32_t>(std::min(r.grow_start_ns, ns), 1);
    r.poll_timeouts_per_s_at_most = ns > 0 ? std::min(r.halts_per_s, p.poll_ns * per_s / shortest_limit) : 0.0;
    r.poll_cpu_percent_per_cpu = 100 * r.poll_cpus / f.cpus;
    const double benefit = r.halts_avoided_per_s * f.penalty_ns / 1e9;
    r.net = benefit - r.poll_cpus;
    r.acceptable = r.poll_cpu_percent_per_cpu <= in.params.max_poll_cpu_percent ||
                   benefit >= in.params.min_benefit_ratio * r.poll_cpus;
    f.rungs.push_back(r);
  }
  // The balanced policy's open-loop choice: the best net among the acceptable rungs, then the
  // cheapest acceptable rung within the tie of it. No polling (net 0) is acceptable whatever the budget.
  bool any = false;
  for (std::size_t i = 0; i < f.rungs.size(); ++i)
    if (f.rungs[i].acceptable && (!any || f.rungs[i].net > f.rungs[f.best].net)) f.best = i, any = true;
  const double floor = f.rungs[f.best].net - kForecastTieShare * f.rungs[f.best].poll_cpus;
  f.chosen = f.best;
  for (std::size_t i = 0; i < f.rungs.size(); ++i)
    if (f.rungs[i].acceptable && f.rungs[i].net >= floor && f.rungs[i].poll_cpus < f.rungs[f.chosen].poll_cpus)
      f.chosen = i;
  f.chosen_reason = explain_choice(f);
  return f;
}

std::optional<PollForecast> driverless_forecast(const KernelSignalsStats& k, const ForecastInputs& in) {
  if (k.last.counters != KernelSignals::Counters::tracepoint) return std::nullopt;
  if (k.last_counted_tick == 0) {
    PollForecast f = forecast_polling(KernelSignals{}, 0, in);
    f.reason = !k.last.bpf_missing.empty()
                   ? "it replays the idle periods the eBPF program on power:cpu_idle counts, and eBPF is missing: " +
                         k.last.bpf_missing
                   : std::string(
                         "no tick has counted the idle periods yet (the eBPF program is attached for one tick in "
                         "tuner.steady_trace_every)");
    return f;
  }
  return forecast_polling(k.last_counted, k.last_counted_tick, in);
}

json to_json(const PollForecast& f) {
  json rungs = json::array();
  for (const RungForecast& r : f.rungs)
    rungs.push_back({{"ns", r.ns},
                     {"grow_start_ns", r.grow_start_ns},
                     {"halts_avoided_per_s", r.halts_avoided_per_s},
                     {"halts_per_s", r.halts_per_s},
                     {"poll_timeouts_per_s_at_most", r.poll_timeouts_per_s_at_most},
                     {"poll_cpus", r.poll_cpus},
                     {"poll_cpu_percent_per_cpu", r.poll_cpu_percent_per_cpu},
                     {"net_cpus", r.net},
                     {"acceptable", r.acceptable}});
  json chosen = nullptr;
  if (f.available()) {
    const RungForecast& c = f.rungs[f.chosen];
    chosen = {{"ns", c.ns},
              {"halts_avoided_per_s", c.halts_avoided_per_s},
              {"poll_cpu_percent_per_cpu", c.poll_cpu_percent_per_cpu},
              {"policy", "balanced"},
              {"best_ns", f.rungs[f.best].ns},
              {"reason", f.chosen_reason}};
  }
  json periods = nullptr;
  if (f.periods > 0)
    periods = {{"count", f.periods},
               {"per_s", f.periods_per_s},
               {"p50_ns", f.p50_ns},
               {"p90_ns", f.p90_ns},
               {"p99_ns", f.p99_ns}};
  return {{"available", f.available()},
          {"reason", f.reason.empty() ? json(nullptr) : json(f.reason)},
          {"tick", f.tick},
          {"elapsed_ns", f.elapsed_ns},
          {"cpus", f.cpus},
          {"periods", std::move(periods)},
          {"halt_exit_penalty_ns", f.penalty_ns},
          {"penalty_measured", f.penalty_measured},
          {"rungs", std::move(rungs)},
          {"chosen", std::move(chosen)},
          {"error",
           {{"halts_percent", kForecastError.halts_percent},
            {"halts_per_s", kForecastError.halts_per_s},
            {"poll_points", kForecastError.poll_points},
            {"source", "the discrete-event simulator's calibration error against the real guest (docs/simulator.md)"}}},
          {"how_to_enable", kHowToEnableHaltpoll},
          {"bound",
           "a closed loop's own speed-up (its idle periods shrink once it polls) cannot be seen from a guest that does "
           "not poll: a lower bound of the gain for closed loops, exact in expectation for open ones"}};
}

}  // namespace haltpolld
