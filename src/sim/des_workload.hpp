// Closed-loop workloads for the discrete-event guest (des_guest.hpp): threads placed on vCPUs,
// each running a small program in a loop. Steps:
//   compute(d)        run for a duration drawn from d
//   post(ch)          one token to channel ch; wakes the first thread waiting on it
//   post_socket(ch)   the same over an AF_UNIX stream socket: when the reader takes the token, the
//                     socket's write-space wake-up (unix_write_space) also wakes the sender if it
//                     sleeps in a read of a socket channel; it finds nothing there and sleeps again
//   wait(ch)          take a token, blocking (the CPU goes idle) while there is none
//   sleep_period(p,s) sleep until the next multiple of p after the thread's start, the timer firing
//                     s later (timer slack); the lateness (run − deadline) goes to a metric
//   sleep_exp(mean)   sleep an exponential time (open-loop arrivals)
//   begin(m) / end(m) an operation starts / completes; its latency goes to metric m
// Channels and metrics are numbered by the workload; the builders below name them.
#pragma once

#include "sim/des_costs.hpp"

#include <string>
#include <vector>

namespace haltpolld::des {

struct Step {
  // until: the thread stops for good once virtual time has reached `period` (ThreadSpec::stop_ns).
  enum class Op : std::uint8_t { compute, post, post_socket, wait, sleep_period, sleep_exp, begin, end, until };
  Op op = Op::compute;
  Dist d;         // compute
  int arg = 0;    // channel (post, wait) or metric (begin, end, sleep_period's lateness)
  Ns period = 0;  // sleep_period; sleep_exp: the mean
  Ns slack = 0;   // sleep_period
};

struct ThreadSpec {
  std::string name;
  int cpu = 0;
  std::vector<Step> steps;
  // The thread runs from start_ns of virtual time (0: from boot) and stops for good at the first
  // turn of its program at or after stop_ns (-1: never): a load that changes over time.
  Ns start_ns = 0;
  Ns stop_ns = -1;
};

struct Workload {
  std::string name;
  std::vector<ThreadSpec> threads;
  int channels = 0;
  std::vector<std::string> metrics;

  // Appends another workload's threads, renumbering its channels and metrics.
  Workload& add(const Workload& other);
};

namespace step {
inline Step compute(Dist d) { return Step{Step::Op::compute, d, 0, 0, 0}; }
inline Step post(int ch) { return Step{Step::Op::post, {}, ch, 0, 0}; }
inline Step post_socket(int ch) { return Step{Step::Op::post_socket, {}, ch, 0, 0}; }
inline Step wait(int ch) { return Step{Step::Op::wait, {}, ch, 0, 0}; }
inline Step sleep_period(Ns period, Ns slack, int metric) {
  return Step{Step::Op::sleep_period, {}, metric, period, slack};
}
inline Step sleep_exp(Ns mean) { return Step{Step::Op::sleep_exp, {}, 0, mean, 0}; }
inline Step begin(int metric) { return Step{Step::Op::begin, {}, metric, 0, 0}; }
inline Step end(int metric) { return Step{Step::Op::end, {}, metric, 0, 0}; }
}  // namespace step

// perf bench sched pipe: two threads on cpu_a and cpu_b passing one token; each hop does `work`
// before its write (the post) and `block` after it until it sleeps. Metric "round_trip".
Workload pipe_load(int cpu_a, int cpu_b, Dist work, Dist block);
// A client on client_cpu and a server on server_cpu, one request outstanding: the client thinks,
// sends, waits for the reply; the server does `server_work`. Metric "rtt". socket: request and
// reply over an AF_UNIX socket (post_socket, with its write-space wake-ups), else a plain hand-off.
Workload request_response_load(int client_cpu, int server_cpu, Dist think, Dist server_work, Dist hop_work, Dist block,
                               bool socket = false);
// Open-loop Poisson arrivals at rate_per_s (the client sleeps an exponential gap between
// requests), otherwise request/response; each side pays `switch_cost` when it resumes after its
// wait (a context switch when both share a vCPU). Metric "rtt".
Workload poisson_load(int client_cpu, int server_cpu, double rate_per_s, Dist server_work, Dist hop_work, Dist block,
                      Dist switch_cost = {});
// A periodic timer (bench_load_timer): wake at every multiple of period, run `busy`. Metric "lateness".
Workload timer_load(int cpu, Ns period, Ns slack, Dist busy);
// Nothing but the background interrupts (Costs::housekeeping_gap).
Workload idle_load();

// The loads of the real-guest measurements with the shapes of a calibration.
struct Calibration;
Workload calibrated_pipe(const Calibration& c, int cpu_a = 0, int cpu_b = 1);
Workload calibrated_timer(const Calibration& c, int cpu = 0);
// bench_load_poisson as the real run placed it: client and server on one vCPU.
Workload calibrated_poisson(const Calibration& c, int cpu = 0);
// bench_load_rr -w work_us -t think_us: a client thinking think_us between requests, a server
// working work_us per request (both busy loops, a tenth of spread), the calibrated hop over an
// AF_UNIX socket (the socket's hop where the calibration fitted one; its write-space wake-ups always).
Workload calibrated_request_response(const Calibration& c, double think_us, double work_us, int client_cpu = 0,
                                     int server_cpu = 1);
// A per-CPU mix for `cpus` vCPUs: the first half (rounded up to even) request/response pairs with
// a database client's shape (50 µs think, 20 µs server work; metric "rtt" per pair), the rest
// 150 µs timers.
Workload calibrated_mix(const Calibration& c, int cpus);

}  // namespace haltpolld::des
