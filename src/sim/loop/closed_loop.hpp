// The daemon's Controller and Tuner, unmodified, tuning the discrete-event guest (sim/des_guest.hpp)
// in virtual time through the simulated edges (des_edges.hpp): the guest boots with its module
// parameters and the load, the Controller starts at once (kernel mode, no worker pool: no probes,
// the penalty measured before the load instead, des_edges.hpp) and ticks every interval_ms, or
// every sweep_interval_ms while its tuner sweeps, as the daemon's shell ticks it; between ticks the
// guest runs. Without a tuner the boot parameters stay: a static setting. The load's result and
// poll CPU are read over the whole run, search time included (a user lives through it), and over
// its second half. Deterministic for a seed; single-threaded.
#pragma once

#include "sim/des_cell.hpp"
#include "tuning/tuner.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld::des {

struct LoopConfig {
  int cpus = 2;
  Costs costs;
  Workload load;
  std::string metric;                // the load's result ("" for none)
  std::optional<TunerParams> tuner;  // empty: no daemon, the boot parameters stay
  haltpoll::HaltpollParams boot;     // the module parameters at boot
  std::uint32_t interval_ms = 1000;  // the daemon's defaults (config tuner.interval_ms, sweep_interval_ms)
  std::uint32_t sweep_interval_ms = 250;
  bool ebpf = true;             // the eBPF reader is loaded
  bool measure_penalty = true;  // the halt-exit penalty is measured before the load (else never)
  // The daemon's own cost while it runs: the eBPF programs' per tracepoint event while attached
  // (150-220 ns on the real guest, docs/kernel-signals.md), and a thread on vCPU 0 that works
  // tick_work_ns per interval_ms tick (the real daemon took 0.3 % of one CPU on an idle guest, with
  // its probes, which the simulated daemon does not run). 0: free.
  Ns ebpf_event_ns = 185;
  Ns tick_work_ns = 1'000'000;
  Ns duration = 30'000'000'000;
  std::uint64_t seed = 1;
  // Set: the guest keeps its tracepoint log, handed over after each stretch of the run (at most
  // 50 ms, never across a tick) with the cap in force during it, then dropped (guest_record.hpp
  // writes it).
  std::function<void(const std::vector<TraceEvent>&, std::uint32_t cap_ns)> on_events;
};

struct LoopTick {
  Ns t = 0;                  // virtual time of the tick
  std::uint32_t cap_ns = 0;  // in force after it
  bool changed = false;
  bool searching = false;  // the tuner sweeps after this tick
  Rule rule = Rule::steady;
  std::string reason;
};

struct LoopResult {
  std::vector<LoopTick> ticks;
  std::uint32_t final_cap_ns = 0;
  CellResult whole;  // from boot to the end: search time included
  CellResult late;   // the second half
  std::optional<double> penalty_ns;
  std::uint64_t writes = 0, resets = 0, traced_ticks = 0;
  // Ticks after the last change of the cap (the run's settled length).
  std::uint64_t ticks_since_last_change = 0;
};

LoopResult run_closed_loop(const LoopConfig& cfg);

}  // namespace haltpolld::des
