#include "sim/simulate.hpp"

#include "sim/kernel_replay.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <charconv>
#include <cstdio>
#include <memory>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string_view>
#include <vector>

namespace haltpolld {
namespace {

// `haltpolld simulate`'s exit codes; the process's status only where the command returns it.
enum class ExitCode : int { ok = 0, usage_error = 2, trace_error = 3 };

// Returns false for a line with nothing but blanks and a comment.
bool parse_trace_line(std::string_view line, std::uint64_t lineno, std::uint64_t& out) {
  if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
  constexpr std::string_view blanks = " \t\r\f\v";
  const auto first = line.find_first_not_of(blanks);
  if (first == std::string_view::npos) return false;
  line = line.substr(first, line.find_last_not_of(blanks) - first + 1);
  auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), out);
  if (ec == std::errc::result_out_of_range)
    throw TraceError(lineno, "idle duration \"" + std::string(line) + "\" does not fit in 64 bits");
  if (ec != std::errc{} || p != line.data() + line.size())
    throw TraceError(lineno, "expected an idle duration in ns (a non-negative integer), got \"" + std::string(line) + "\"");
  return true;
}

}  // namespace

TraceError::TraceError(std::uint64_t line, const std::string& what)
    : std::runtime_error("line " + std::to_string(line) + ": " + what), line_(line) {}

SimulationResult simulate_trace(std::istream& trace, haltpoll::WindowGovernor& governor, std::uint64_t miss_cost_ns) {
  SimulationResult r;
  r.policy = governor.policy().name();
  r.miss_cost_ns = miss_cost_ns;
  std::string line;
  std::uint64_t lineno = 0, d = 0;
  while (std::getline(trace, line)) {
    ++lineno;
    if (!parse_trace_line(line, lineno, d)) continue;
    governor.hint_next_idle_ns(d);
    const std::uint64_t w = governor.window_ns();
    ++r.periods;
    r.idle_ns += d;
    if (d <= w) {
      ++r.hits;
      r.poll_ns += d;
    } else {
      ++r.misses;
      r.poll_ns += w;
      r.wasted_poll_ns += w;
      r.miss_penalty_ns += miss_cost_ns;
    }
    governor.record(d, w);
  }
  if (trace.bad()) throw TraceError(lineno + 1, "read error");
  r.cost_ns = r.poll_ns + r.miss_penalty_ns;
  r.final_window_ns = governor.window_ns();
  return r;
}

nlohmann::ordered_json to_json(const SimulationResult& r) {
  const auto per = [&](std::uint64_t v) { return r.periods ? static_cast<double>(v) / static_cast<double>(r.periods) : 0.0; };
  return {
      {"policy", r.policy},
      {"miss_cost_ns", r.miss_cost_ns},
      {"periods", r.periods},
      {"hits", r.hits},
      {"misses", r.misses},
      {"idle_ns", r.idle_ns},
      {"poll_ns", r.poll_ns},
      {"wasted_poll_ns", r.wasted_poll_ns},
      {"miss_penalty_ns", r.miss_penalty_ns},
      {"cost_ns", r.cost_ns},
      {"final_window_ns", r.final_window_ns},
      {"hit_ratio", per(r.hits)},
      {"cost_per_period_ns", per(r.cost_ns)},
      {"poll_share_of_idle", r.idle_ns ? static_cast<double>(r.poll_ns) / static_cast<double>(r.idle_ns) : 0.0},
  };
}

namespace {

struct SimulateOptions {
  std::string trace_path, policy = "adaptive";
  std::vector<std::string> sets;
  std::uint64_t miss_cost_ns = 30000;
  bool miss_cost_given = false;  // --miss-cost-ns was on the command line
  bool json = false;
  std::uint32_t recording_cap_ns = 200000;  // kernel recordings without a '# haltpoll' header
  std::int64_t residency_bias_ns = 0;       // kernel recordings: subtracted from each halt
};

ExitCode run_simulate(const SimulateOptions& o) {
  haltpoll::PolicyParams params;
  std::unique_ptr<haltpoll::WindowGovernor> governor;
  try {
    for (const auto& s : o.sets) {
      const auto eq = s.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("--set " + s + ": expected key=value");
      haltpoll::set_policy_param(params, std::string_view(s).substr(0, eq), std::string_view(s).substr(eq + 1));
    }
    // --miss-cost-ns prices the model and tells the cost-aware policies; it wins over --set miss_cost_ns.
    if (o.miss_cost_given) params.miss_cost_ns = o.miss_cost_ns;
    governor = std::make_unique<haltpoll::WindowGovernor>(o.policy, params);
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "haltpolld simulate: {}\n", e.what());
    return ExitCode::usage_error;
  }

  // A kernel recording (`haltpolld record`): `--policy haltpoll` checks the model against the
  // kernel's own limit changes; any other policy replays its idle periods as a duration trace.
  std::string text;
  {
    std::ostringstream all;
    if (o.trace_path == "-") {
      all << std::cin.rdbuf();
    } else {
      std::ifstream in(o.trace_path);
      if (!in) {
        fmt::print(stderr, "haltpolld simulate: cannot open trace {}\n", o.trace_path);
        return ExitCode::trace_error;
      }
      all << in.rdbuf();
    }
    text = all.str();
  }
  SimulationResult r;
  try {
    if (looks_like_kernel_recording(text.substr(0, 4096))) {
      std::istringstream in(text);
      const auto rec = read_kernel_recording(in, o.recording_cap_ns);
      if (o.policy == "haltpoll") {
        const auto j = to_json(replay_against_kernel(rec, o.residency_bias_ns), rec, o.residency_bias_ns);
        if (o.json) fmt::print("{}\n", j.dump());
        else for (const auto& [k, v] : j.items()) fmt::print("{}: {}\n", k, v.dump());
        return ExitCode::ok;
      }
      std::ostringstream durations;
      for (const auto& [cpu, c] : rec.cpus)
        for (auto d : c.periods) durations << d << '\n';
      std::istringstream trace(durations.str());
      r = simulate_trace(trace, *governor, params.miss_cost_ns);
    } else {
      std::istringstream trace(text);
      r = simulate_trace(trace, *governor, params.miss_cost_ns);
    }
  } catch (const TraceError& e) {
    fmt::print(stderr, "haltpolld simulate: {}: {}\n", o.trace_path == "-" ? "<stdin>" : o.trace_path, e.what());
    return ExitCode::trace_error;
  }

  const auto j = to_json(r);
  if (o.json) {
    fmt::print("{}\n", j.dump());
  } else {
    for (const auto& [k, v] : j.items()) fmt::print("{}: {}\n", k, v.dump());
  }
  return ExitCode::ok;
}

}  // namespace

std::function<int()> add_simulate_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "simulate", "replay an idle trace (one duration in ns per line) through a window policy and price it");
  // The options outlive this call: CLI11 writes them during parse, the returned function reads them.
  auto o = std::make_shared<SimulateOptions>();
  app->add_option("--trace", o->trace_path, "trace file, '-' for stdin")->required();
  app->add_option("--policy", o->policy, "haltpoll | adaptive | static:<ns> | oracle")->capture_default_str();
  std::string keys;
  for (const auto& n : haltpoll::policy_param_names()) keys += (keys.empty() ? "" : ", ") + n;
  app->add_option("--set", o->sets, "policy parameter key=value (repeatable); keys: " + keys);
  auto* miss_opt = app->add_option("--miss-cost-ns", o->miss_cost_ns, "cost of a miss (park + futex wake), ns")
                       ->capture_default_str();
  app->add_flag("--json", o->json, "print one JSON object");
  app->add_option("--cap-ns", o->recording_cap_ns,
                  "kernel recordings without a '# haltpoll' header: the guest_halt_poll_ns in force")
      ->capture_default_str();
  app->add_option("--residency-bias-ns", o->residency_bias_ns,
                  "kernel recordings: subtracted from each recorded halt before the model sees it "
                  "(perf-recorded tracepoints frame the kernel's measurement by about 1000 ns)")
      ->capture_default_str();
  return [o, miss_opt] {
    o->miss_cost_given = miss_opt->count() > 0;
    return static_cast<int>(run_simulate(*o));
  };
}

}  // namespace haltpolld
