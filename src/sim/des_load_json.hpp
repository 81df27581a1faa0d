// A workload of the discrete-event guest (des_workload.hpp) described in JSON, so that a new load
// shape needs no code (docs/simulator.md, "Describing a load"). One object:
//   {"name": "db", "result": "rtt", "replicate": true,
//    "threads": [{"name": "client", "cpu": 0, "steps": [{"compute_us": 60, "sigma": 0.5}, {"begin": "rtt"},
//                                                     {"send": "request"}, {"wait": "reply"}, {"end": "rtt"}]},
//                {"name": "server", "cpu": 1, "steps": [{"wait": "request"}, {"compute_us": 60},
//                                                     {"send": "reply"}]}]}
// Each step is an object with exactly one of these keys (plus its own options):
//   compute_us: N        run N µs on average (a log-normal; "sigma": σ of its log, default 0: exactly
//                        N; "tail_p" and "tail_mean_us": a rare extra exponential delay)
//   send: "ch"           the calibrated hop: the sender's work, a post to channel "ch", its way to idle
//                        (the pipe's fitted per-hop costs)
//   post: "ch"           one token to channel "ch", nothing else
//   wait: "ch"           take a token from "ch", idle while there is none
//   sleep_period_us: N   sleep to the next multiple of N µs; "slack_us" (default 50), the lateness to
//                        metric "metric" (default "lateness")
//   sleep_exp_us: N      sleep an exponential time of mean N µs (open-loop arrivals)
//   begin: "m" / end: "m"  an operation of metric "m" starts / completes
// Channels and metrics are named; they are numbered in order of first use. "result" names the
// metric that is the load's result (default: the first metric). "replicate": copy the threads onto
// every further group of "span" CPUs (default: the highest vCPU used + 1) as far as the guest's CPUs
// go. An empty "threads" is an idle guest (background interrupts only).
// A malformed description is refused with its position: line and column for a JSON syntax error,
// the JSON pointer of the offending value otherwise.
#pragma once

#include "sim/des_costs.hpp"
#include "sim/des_workload.hpp"

#include <stdexcept>
#include <string>

namespace haltpolld::des {

class LoadError : public std::runtime_error {
 public:
  LoadError(std::string where, const std::string& why)
      : std::runtime_error(where + ": " + why), where_(std::move(where)) {}
  const std::string& where() const noexcept { return where_; }

 private:
  std::string where_;
};

struct LoadDescription {
  Workload load;       // placed on `cpus` vCPUs (replicated if asked)
  std::string result;  // the metric that is the load's result ("" when it has none)
  int span = 0;        // CPUs one copy of the threads covers
  int copies = 1;
};

// Throws LoadError.
LoadDescription parse_load(const std::string& json_text, const Calibration& cal, int cpus);

}  // namespace haltpolld::des
