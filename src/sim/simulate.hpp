// `haltpolld simulate`: replays an idle trace through a window policy and prices the result.
// The replay is pure (a stream of idle durations in, counters out) so tests drive it directly;
// add_simulate_command adds the command line and the JSON output. Single-threaded; no shared state.
//
// Cost model: an idle period of d ns polled with window w is a hit if d <= w (it polls d ns) and a
// miss otherwise (it polls w ns, then parks and pays the miss cost). cost = polling + misses × miss cost.
#pragma once

#include "haltpoll/governor.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <stdexcept>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace haltpolld {

struct SimulationResult {
  std::string policy;
  std::uint64_t miss_cost_ns = 0;
  std::uint64_t periods = 0, hits = 0, misses = 0;
  std::uint64_t idle_ns = 0;           // sum of the idle durations
  std::uint64_t poll_ns = 0;           // CPU spent polling (hits and misses)
  std::uint64_t wasted_poll_ns = 0;    // polling that ended in a park
  std::uint64_t miss_penalty_ns = 0;   // misses × miss cost
  std::uint64_t cost_ns = 0;           // poll_ns + miss_penalty_ns
  std::uint64_t final_window_ns = 0;
};

// A trace line that is not an idle duration; line() is 1-based.
class TraceError : public std::runtime_error {
 public:
  TraceError(std::uint64_t line, const std::string& what);
  std::uint64_t line() const noexcept { return line_; }

 private:
  std::uint64_t line_;
};

// Trace format: one idle duration in ns per line (a non-negative integer); '#' starts a comment,
// blank lines are skipped. Throws TraceError on the first bad line. The oracle is told each
// duration before its period starts.
SimulationResult simulate_trace(std::istream& trace, haltpoll::WindowGovernor& governor, std::uint64_t miss_cost_ns);

nlohmann::ordered_json to_json(const SimulationResult& r);

// Adds the `simulate` subcommand to the daemon's command line; once `parent` has parsed a command
// line that chose it, the returned function runs it. Exit codes: 0 ok, 2 usage (policy, --set;
// bad flags are CLI11 parse errors, which the caller maps to 2), 3 trace (unreadable, bad line).
std::function<int()> add_simulate_command(CLI::App& parent);

}  // namespace haltpolld
