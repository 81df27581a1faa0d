// Costs of the discrete-event guest model (des_guest.hpp) as distributions, and their fit to the
// measurements of a real haltpoll guest.
//
// Every cost is a Dist: a log-normal body given by its median and the σ of its logarithm, plus,
// with probability tail_p, an extra exponential delay of mean tail_mean_ns (the host preempting the
// vCPU thread, a long interrupt: what makes a rare idle period exceed the cap and the governor
// shrink). The fit (fit_costs) is closed-form from a few numbers of the real guest; which numbers
// and why is written next to each field of FitInputs and in docs/simulator.md.
#pragma once

#include <cmath>
#include <cstdint>

namespace haltpolld::des {

using Ns = std::int64_t;

// wyrand (Wang Yi's generator: a Weyl sequence through a 64×64→128-bit multiply) seeded through
// splitmix64: one word of state, a handful of instructions per number, the same sequence on every
// platform (integer arithmetic only).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept;
  // Inline: the event loop draws one or two per event.
  std::uint64_t next() noexcept {
    __extension__ using u128 = unsigned __int128;
    s_ += 0xa0761d6478bd642fULL;
    const u128 t = static_cast<u128>(s_) * (s_ ^ 0xe7037ed1a0b428dbULL);
    return static_cast<std::uint64_t>(t >> 64) ^ static_cast<std::uint64_t>(t);
  }
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() noexcept;                                                            // standard normal
  double exponential(double mean) noexcept { return -mean * std::log1p(-uniform()); }

 private:
  std::uint64_t s_;
  double spare_ = 0;
  bool has_spare_ = false;
};

struct Dist {
  double median_ns = 0;  // 0: the body is 0
  double sigma = 0;      // σ of ln(x); 0: the body is the median exactly
  double tail_p = 0;
  double tail_mean_ns = 0;

  static Dist constant(double ns) { return Dist{ns, 0, 0, 0}; }
  // A log-normal with the given mean (not median) and σ.
  static Dist with_mean(double mean_ns, double sigma) {
    return Dist{mean_ns / std::exp(sigma * sigma / 2), sigma, 0, 0};
  }
  double mean_ns() const noexcept { return median_ns * std::exp(sigma * sigma / 2) + tail_p * tail_mean_ns; }
  Ns draw(Rng& r) const noexcept;
};

struct Costs {
  // The cost of a local interrupt (the thread's own timer, a background interrupt) that ends a
  // halt of halted_for ns: for now timer_in_halt at every length.
  const Dist& halted_interrupt([[maybe_unused]] Ns halted_for) const { return timer_in_halt; }

  // Remote wake-up of a polling vCPU (need-resched seen, no IPI) until the woken thread runs.
  Dist wake_polling;
  // Remote wake-up of a halted vCPU: IPI, VM exit and entry, the host waking the vCPU thread, and
  // the guest's path back to the thread; `wake_halted_long` once the vCPU has halted for
  // `host_poll_ns` or more (the host stopped polling the halted vCPU and descheduled its thread,
  // whose wake-up costs more: the real database-shaped load's halts of about 60 µs paid about
  // 40 µs a wake-up where the pipe's of about 20 µs paid 21). host_poll_ns 0: one cost for all.
  Dist wake_halted;
  Dist wake_halted_long;
  Ns host_poll_ns = 0;
  const Dist& halted_wake(Ns halted_for) const noexcept {
    return host_poll_ns > 0 && halted_for >= host_poll_ns ? wake_halted_long : wake_halted;
  }
  // An extra delay on a remote wake-up, polling or halted, with the probability and exponential
  // mean its tail carries (median 0): the moderate delays (an interrupt on the way, the host's
  // timer) that make a polling loop's idle period now and then exceed a cap of some tens of µs.
  Dist wake_delay;
  // Share of a halted wake-up that passes before the guest's halt ends (its halt residency): the
  // short path's, and the long path's (its extra over the short one is the host's, while the vCPU
  // does not run, so it passes inside the residency).
  double halt_exit_share = 1.0;
  double halt_exit_share_long = 1.0;
  double halted_share(Ns halted_for) const noexcept {
    return host_poll_ns > 0 && halted_for >= host_poll_ns ? halt_exit_share_long : halt_exit_share;
  }
  // A thread's own timer fires while its CPU polls / halts, until the thread runs.
  Dist timer_in_poll;
  Dist timer_in_halt;
  // The waker's cost of an IPI to a halted vCPU (the write to the APIC's ICR exits to the host,
  // which kicks the target's thread before it enters the guest again): its next compute step runs
  // this much longer. median 0: none.
  Dist ipi_send;
  // A thread that its socket's write-space wake-up woke while it waited to read (post_socket) and
  // that finds nothing to read: its CPU time from the resume until it sleeps again (the switch in,
  // the check of the receive queue, the switch out). median 0: none.
  Dist spurious_wake;
  // Background interrupts per CPU (tick, RCU, housekeeping): the gap between two; they end a halt
  // (a new idle period starts) and do not end a poll. median 0: none.
  Dist housekeeping_gap;
  // Optional steal: with this probability a compute step or a wake-up is stretched by `steal`
  // (another guest ran on the physical CPU).
  double steal_probability = 0;
  Dist steal;
};

// The numbers of the real guest the fit uses (the defaults: ../shared/real-guest, measured
// 2026-12-01 on a 2-vCPU Firecracker guest, AMD EPYC, Linux 6.18; kept in tests/data/real-guest).
struct FitInputs {
  // static-curve.jsonl, perf bench sched pipe, µs per round trip at cap 0 and cap 200000, and the
  // POLL residency per CPU at 200000 (fraction).
  double pipe_us_per_op_halting = 44.17708;
  double pipe_us_per_op_polling = 6.10667;
  double pipe_poll_share_polling = 0.1707;
  // traces/pipe-0.idle.txt: the halted idle periods at cap 0, p10 / p50 / p90 (µs).
  double pipe_halted_period_p10_us = 19.399;
  double pipe_halted_period_p50_us = 24.296;
  double pipe_halted_period_p90_us = 34.151;
  // README §4 at cap 200000: halts/s against idle entries/s (the rare periods over the cap).
  double pipe_halts_per_s_polling = 82;
  double pipe_entries_per_s_polling = 273295;
  // The same at a cap just above the polling pipe's idle periods (30000): the moderate delays.
  // 0: none.
  double pipe_halts_per_s_low_cap = 0;
  double pipe_entries_per_s_low_cap = 0;
  std::uint32_t pipe_low_cap_ns = 30000;
  // static-curve.jsonl, load_timer 150 µs: lateness p50 / p99 at cap 0 and p50 at 200000 (µs).
  double timer_late_p50_us_halting = 81.03;
  double timer_late_p99_us_halting = 132.45;
  double timer_late_p50_us_polling = 63.46;
  // static-curve.jsonl, load_poisson 2000/s with 5 µs of server work: RTT p50 at cap 0 (µs). Its
  // client and server share one vCPU (traces/poisson-0: 1190 of the 1331 halts/s on cpu0, fewer
  // idle entries than requests), so the RTT holds two context switches and no wake-up of an idle CPU.
  double poisson_rtt_p50_us_halting = 19.48;
  double poisson_work_us = 5;
  // traces/idle-0: idle entries/s over both CPUs of an idle guest.
  double idle_entries_per_s = 75;
  int idle_cpus = 2;
  // bench_load_rr -w 60 -t 60 (the database-shaped load) at cap 0: its mean round trip (µs) and
  // server work (µs); 0: no separate cost for a long halt's wake-up. Not in the 2026-12-01 data.
  double db_rtt_us_halting = 0;
  double db_work_us = 60;
  // bench_load_rr -w 20 -t 10 at cap 200000: round trips/s and the POLL residency per CPU
  // (fraction): the AF_UNIX socket's hop, which differs from the pipe's; 0: the pipe's hop.
  double rr_per_s_polling = 0;
  double rr_poll_share_polling = 0;
  // The same at cap 0: its round trips/s, which the waker's IPI cost (Costs::ipi_send) explains
  // (the socket's write-space wake-ups put two IPIs a round trip on its path); 0: no IPI cost.
  double rr_per_s_halting = 0;
  double rr_work_us = 20, rr_think_us = 10;
};

// Assumptions that the data cannot separate (docs/simulator.md says why):
struct FitAssumptions {
  double pipe_work_us = 1.0;   // per hop: the woken side's read return and write up to its wake-up
  double timer_slack_us = 50;  // Linux's default timer slack of a normal thread
  double wake_polling_sigma = 0.25;
  double tail_mean_us = 1000;  // a host-side delay long enough to exceed any cap
  double delay_mean_us = 10;   // the moderate delays' mean (Costs::wake_delay)
  // How long a halted vCPU's host keeps its thread ready before a wake-up costs the longer path
  // (Costs::host_poll_ns): within the pipe's halts at cap 0 (19-34 µs, p10-p90, most of which pay
  // the short path) and below the database-shaped load's second halt of a round trip (40-60 µs
  // once its socket's write-space wake-up has split the wait for the reply). Chosen on fit caps:
  // of 20, 25, 30, 35, 40 and 50 µs, 30 puts the database-shaped load at 200000 and the pipe at 0
  // closest to the real ones (docs/simulator.md, "The fit"); above, the former stays in the trap
  // of grow_start, below, the pipe's halts take the long path and the fit does not converge.
  double host_poll_us = 30;
};

// The fitted model: costs plus the shapes of the loads it was fitted on.
struct Calibration {
  Costs costs;
  double pipe_work_ns = 0;   // before the post (the wake-up of the partner)
  double pipe_block_ns = 0;  // after the post, until the thread blocks and the CPU is idle
  double timer_slack_ns = 0;
  double switch_ns = 0;  // a context switch between two threads of one vCPU
  // The request/response loads' hop over an AF_UNIX socket (bench_load_rr): the sender's work
  // before its wake-up of the peer, and its way to idle after it; 0: the pipe's.
  double socket_work_ns = 0;
  double socket_block_ns = 0;
};

Calibration fit_costs(const FitInputs& in = {}, const FitAssumptions& as = {});

// The halted wake-ups' shape given the waker's cost of an IPI (Costs::ipi_send): the pipe's halted
// idle periods at cap 0 (FitInputs' p10/p50/p90) give the share of a halted wake-up that passes
// inside the halt residency and the wake-up's spread, from the means of wake_halted and
// wake_halted_long in `c`. fit_costs calls it with no IPI cost; refine_costs with the cost it fits
// on the request/response load at cap 0.
void shape_halted_wakes(Calibration& c, const FitInputs& in, double ipi_send_ns);

}  // namespace haltpolld::des
