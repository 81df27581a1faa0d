// The daemon's Controller on the discrete-event guest (closed_loop.hpp).
#include "sim/loop/closed_loop.hpp"

#include "sim/loop/des_edges.hpp"
#include "tuning/controller.hpp"

#include <algorithm>
#include <memory>

namespace haltpolld::des {

LoopResult run_closed_loop(const LoopConfig& cfg) {
  GuestConfig gc;
  gc.cpus = cfg.cpus;
  gc.costs = cfg.costs;
  gc.params = cfg.boot;
  gc.seed = cfg.seed;
  gc.log_events = static_cast<bool>(cfg.on_events);
  Workload load = cfg.load;
  if (cfg.tuner && cfg.tick_work_ns > 0) {
    // The daemon itself: woken by its tick's timer on vCPU 0, it reads the counters and decides.
    Workload daemon{"haltpolld", {}, 0, {"haltpolld_tick"}};
    daemon.threads.push_back({"haltpolld", 0,
                              {step::sleep_period(static_cast<Ns>(cfg.interval_ms) * 1'000'000, 50'000, 0),
                               step::compute(Dist::constant(static_cast<double>(cfg.tick_work_ns)))}});
    load.add(daemon);
  }
  Guest g(gc, load);
  LoopResult out;
  const CellMeter whole(g, cfg.metric);
  std::optional<CellMeter> late;
  const Ns half = cfg.duration / 2;

  // The second half's meter starts at `half` whatever the ticks do; the run ends at the duration.
  // With on_events the log is handed over every 50 ms of virtual time at most, so that its memory
  // stays bounded (a 64-vCPU pipe logs about 27 million events a second).
  auto run_until = [&](Ns t) {
    if (!cfg.on_events) {
      g.run_until(t);
      return;
    }
    constexpr Ns kStretch = 50'000'000;
    while (g.now() < t) {
      g.run_until(std::min(t, g.now() + kStretch));
      cfg.on_events(g.events(), g.params().guest_halt_poll_ns);
      g.clear_events();
    }
  };
  auto run_to = [&](Ns t) {
    if (!late && t > half) {
      run_until(half);
      late.emplace(g, cfg.metric);
    }
    run_until(t);
  };
  auto finish = [&] {
    run_to(cfg.duration);
    out.final_cap_ns = g.params().guest_halt_poll_ns;
    out.whole = whole.result();
    out.late = late->result();
  };
  if (!cfg.tuner) {
    g.set_histograms(false);  // nothing reads them without the daemon
    finish();
    return out;
  }

  DesSignalOptions so;
  so.ebpf = cfg.ebpf;
  if (cfg.measure_penalty) so.halt_exit_penalty = measure_halt_exit_penalty(cfg.costs, cfg.cpus, cfg.seed);
  out.penalty_ns = so.halt_exit_penalty;
  auto signals = std::make_shared<DesSignals>(g, so);
  auto actuator = std::make_shared<DesActuator>(g);
  auto clock = std::make_shared<const DesClock>(g);
  ControllerOptions co;
  co.kernel_mode = true;
  co.tuner = *cfg.tuner;
  co.probe_rate_hz = 0;
  co.interval_ms = cfg.interval_ms;
  Controller ctl(co, GuestEdges{signals, actuator, clock}, std::unique_ptr<PoolAccess>());
  ctl.start();
  const Ns interval = static_cast<Ns>(cfg.interval_ms) * 1'000'000;
  const Ns sweep = static_cast<Ns>(std::min(cfg.sweep_interval_ms, cfg.interval_ms)) * 1'000'000;
  Ns next = ctl.searching() ? sweep : interval;
  while (next <= cfg.duration) {
    run_to(next);
    const Decision d = ctl.tick();
    g.set_trace_cost(signals->attached() ? cfg.ebpf_event_ns : 0);
    g.set_histograms(signals->attached());  // the eBPF reader keeps them only while attached
    LoopTick t;
    t.t = g.now();
    t.cap_ns = g.params().guest_halt_poll_ns;
    t.changed = d.changed();
    t.searching = ctl.searching();
    t.reason = d.reason;
    t.rule = d.rule;
    out.ticks_since_last_change = t.changed ? 0 : out.ticks_since_last_change + 1;
    out.ticks.push_back(std::move(t));
    next = g.now() + (out.ticks.back().searching ? sweep : interval);
  }
  finish();
  out.writes = actuator->writes();
  out.resets = actuator->resets();
  out.traced_ticks = signals->traced_ticks();
  ctl.stop();
  return out;
}

}  // namespace haltpolld::des
