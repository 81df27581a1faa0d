// `haltpolld simulate`: the replay on small hand-checked traces, the trace parser, and the command.
#include "sim/simulate.hpp"
#include "subprocess.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

using haltpoll::PolicyParams;
using haltpoll::WindowGovernor;
using haltpolld::simulate_trace;
using haltpolld::TraceError;
using testsupport::run;

namespace {
const std::string data_dir = HALTPOLL_SOURCE_DIR "/tests/sim/data";

haltpolld::SimulationResult replay(const std::string& trace, const std::string& policy, std::uint64_t miss_cost) {
  PolicyParams p;
  p.miss_cost_ns = miss_cost;
  WindowGovernor g(policy, p);
  std::istringstream in(trace);
  return simulate_trace(in, g, miss_cost);
}
}  // namespace

TEST_CASE("simulate: static window, hit iff the period ends within it") {
  // w = 50000: 10000 hit, 50000 hit (ends exactly at the window), 60000 miss, 0 hit.
  const auto r = replay("10000\n50000\n60000\n0\n", "static:50000", 30000);
  CHECK(r.policy == "static");
  CHECK(r.periods == 4);
  CHECK(r.hits == 3);
  CHECK(r.misses == 1);
  CHECK(r.idle_ns == 120000);
  CHECK(r.poll_ns == 10000 + 50000 + 50000 + 0);
  CHECK(r.wasted_poll_ns == 50000);
  CHECK(r.miss_penalty_ns == 30000);
  CHECK(r.cost_ns == 140000);
  CHECK(r.final_window_ns == 50000);
}

TEST_CASE("simulate: haltpoll replay matches the hand-checked trace file") {
  std::ifstream in(data_dir + "/haltpoll_small.trace");
  REQUIRE(in);
  WindowGovernor g("haltpoll");
  const auto r = simulate_trace(in, g, 30000);
  CHECK(r.periods == 10);
  CHECK(r.hits == 2);
  CHECK(r.misses == 8);
  CHECK(r.idle_ns == 3165000);
  // Polled: 0 + 40000 + 50000 + 100000 + 100000 + 200000 + 90000 + 100000 + 50000 + 0.
  CHECK(r.poll_ns == 730000);
  CHECK(r.wasted_poll_ns == 730000 - 40000 - 90000);
  CHECK(r.miss_penalty_ns == 8 * 30000);
  CHECK(r.cost_ns == 730000 + 240000);
  CHECK(r.final_window_ns == 50000);
}

TEST_CASE("simulate: the oracle is told each period and never wastes polling") {
  // miss cost 30000: 5000 polled, 50000 parked, 30000 polled, 30001 parked.
  const auto r = replay("5000\n50000\n30000\n30001\n", "oracle", 30000);
  CHECK(r.hits == 2);
  CHECK(r.misses == 2);
  CHECK(r.poll_ns == 35000);
  CHECK(r.wasted_poll_ns == 0);
  CHECK(r.cost_ns == 35000 + 60000);
}

TEST_CASE("simulate: comments, blanks, CRLF and surrounding spaces are accepted") {
  const auto r = replay("# header\n\n  100  \n200 # trailing comment\r\n\t300\t\r\n#\n   \n", "static:0", 10);
  CHECK(r.periods == 3);
  CHECK(r.idle_ns == 600);
  CHECK(r.misses == 3);
  const auto empty = replay("", "adaptive", 10);
  CHECK(empty.periods == 0);
  CHECK(empty.cost_ns == 0);
}

TEST_CASE("simulate: a bad line is reported with its number") {
  const std::pair<const char*, std::uint64_t> cases[] = {
      {"1\n2\n12x\n", 3}, {"-5\n", 1}, {"# c\n\n1.5\n", 3}, {"1\n99999999999999999999999\n", 2},
      {"1 2\n", 1},       {"abc # c\n", 1}};
  for (const auto& [text, line] : cases) {
    INFO(text);
    try {
      (void)replay(text, "haltpoll", 30000);
      FAIL("accepted");
    } catch (const TraceError& e) {
      CHECK(e.line() == line);
      CHECK(std::string(e.what()).rfind("line " + std::to_string(line) + ":", 0) == 0);
    }
  }
}

TEST_CASE("simulate: JSON carries the documented keys") {
  const auto j = haltpolld::to_json(replay("10000\n60000\n", "static:50000", 30000));
  for (const char* k : {"policy", "miss_cost_ns", "periods", "hits", "misses", "idle_ns", "poll_ns", "wasted_poll_ns",
                        "miss_penalty_ns", "cost_ns", "final_window_ns", "hit_ratio", "cost_per_period_ns",
                        "poll_share_of_idle"})
    CHECK(j.contains(k));
  CHECK(j["cost_ns"] == j["poll_ns"].get<std::uint64_t>() + j["miss_penalty_ns"].get<std::uint64_t>());
  CHECK(j["cost_per_period_ns"].get<double>() == Approx(90000.0 / 2));
}

TEST_CASE("haltpolld simulate: command line, exit codes, stdin") {
  const std::string trace = data_dir + "/haltpoll_small.trace";
  auto r = run({HALTPOLLD_BIN, "simulate", "--trace", trace, "--policy", "haltpoll", "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["periods"] == 10);
  CHECK(j["cost_ns"] == 970000);
  CHECK(j["miss_cost_ns"] == 30000);

  // --miss-cost-ns and --set reach the model and the policy.
  r = run({HALTPOLLD_BIN, "simulate", "--trace", trace, "--policy", "haltpoll", "--miss-cost-ns", "1000", "--set",
           "guest_halt_poll_grow_start=100000", "--json"});
  REQUIRE(r.code == 0);
  const auto k = nlohmann::json::parse(r.out);
  CHECK(k["miss_penalty_ns"] == k["misses"].get<std::uint64_t>() * 1000);
  CHECK(k["final_window_ns"] == 100000);

  r = run({"/bin/sh", "-c", std::string(HALTPOLLD_BIN) + " simulate --trace - --policy static:50000 --json < " + trace});
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["periods"] == 10);

  r = run({HALTPOLLD_BIN, "simulate", "--trace", data_dir + "/bad_line.trace", "--json"});
  CHECK(r.code == 3);
  CHECK(r.err.find("bad_line.trace: line 3:") != std::string::npos);
  CHECK(r.out.empty());

  r = run({HALTPOLLD_BIN, "simulate", "--trace", data_dir + "/no_such.trace"});
  CHECK(r.code == 3);
  CHECK(r.err.find("cannot open") != std::string::npos);

  r = run({HALTPOLLD_BIN, "simulate", "--trace", trace, "--set", "guest_halt_poll_nss=1"});
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown parameter \"guest_halt_poll_nss\"") != std::string::npos);

  r = run({HALTPOLLD_BIN, "simulate", "--trace", trace, "--set", "adaptive_half_life"});
  CHECK(r.code == 2);
  CHECK(r.err.find("key=value") != std::string::npos);

  r = run({HALTPOLLD_BIN, "simulate", "--trace", trace, "--policy", "static:x"});
  CHECK(r.code == 2);
  CHECK(r.err.find("static:x") != std::string::npos);

  r = run({HALTPOLLD_BIN, "simulate"});  // --trace is required
  CHECK(r.code == 2);

  r = run({HALTPOLLD_BIN, "simulate", "--help"});
  CHECK(r.code == 0);
  CHECK(r.out.find("--miss-cost-ns") != std::string::npos);
}

TEST_CASE("haltpolld simulate: an option of the other mode is refused, not ignored") {
  const std::string trace = std::string(HALTPOLL_SOURCE_DIR) + "/tests/sim/data/haltpoll_small.trace";
  const std::string load = std::string(HALTPOLL_SOURCE_DIR) + "/contrib/loads/db.json";
  // The guest's options without --guest.
  for (const char* opt : {"--cpus", "--seconds", "--seed", "--boot-ns"}) {
    auto r = run({HALTPOLLD_BIN, "simulate", "--trace", trace, opt, "4"});
    CHECK(r.code == 2);
    CHECK(r.err.find(std::string(opt) + " only with --guest") != std::string::npos);
  }
  auto r = run({HALTPOLLD_BIN, "simulate", "--trace", trace, "--setting", "static:0", "--load", load});
  CHECK(r.code == 2);
  CHECK(r.err.find("--load, --setting only with --guest") != std::string::npos);
  // The replay's options with --guest.
  for (const char* opt : {"--policy", "--miss-cost-ns", "--cap-ns", "--residency-bias-ns"}) {
    r = run({HALTPOLLD_BIN, "simulate", "--guest", "--load", load, "--seconds", "1", opt,
             std::string(opt) == "--policy" ? "haltpoll" : "1000"});
    CHECK(r.code == 2);
    CHECK(r.err.find(std::string(opt) + ": the trace replay's, not the guest's") != std::string::npos);
    CHECK(r.out.empty());
  }
  // Without --set the kernel's defaults (the JSON checked below with one of them set).
  r = run({HALTPOLLD_BIN, "simulate", "--guest", "--load", load, "--seconds", "1", "--json"});
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["module_parameters_at_boot"]["guest_halt_poll_grow_start"] == 50000);
  // --set with --guest: the guest's other module parameters, the replay's keys and the cap refused.
  r = run({HALTPOLLD_BIN, "simulate", "--guest", "--load", load, "--seconds", "1", "--set", "miss_cost_ns=5"});
  CHECK(r.code == 2);
  CHECK(r.err.find("not a module parameter of the guest") != std::string::npos);
  r = run({HALTPOLLD_BIN, "simulate", "--guest", "--load", load, "--seconds", "1", "--set", "guest_halt_poll_ns=5"});
  CHECK(r.code == 2);
  CHECK(r.err.find("the cap is --setting static:<ns>") != std::string::npos);
  r = run({HALTPOLLD_BIN, "simulate", "--guest", "--load", load, "--seconds", "1", "--set",
           "guest_halt_poll_shrink=-1"});
  CHECK(r.code == 2);
  CHECK(r.err.find("guest_halt_poll_shrink") != std::string::npos);
  r = run({HALTPOLLD_BIN, "simulate", "--guest", "--load", load, "--seconds", "1", "--setting", "static:100000",
           "--set", "guest_halt_poll_grow_start=100000", "--set", "guest_halt_poll_allow_shrink=N", "--json"});
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out)["module_parameters_at_boot"];
  CHECK(j["guest_halt_poll_ns"] == 100000);
  CHECK(j["guest_halt_poll_grow_start"] == 100000);
  CHECK(j["guest_halt_poll_allow_shrink"] == false);
  CHECK(j["guest_halt_poll_grow"] == 2);
}

TEST_CASE("haltpolld simulate on a kernel recording: haltpoll checks the model, other policies replay its periods") {
  const std::string dir = std::string(HALTPOLL_SOURCE_DIR) + "/tests/data/real-guest";
  auto r = run({"/bin/sh", "-c",
                "xz -dc " + dir + "/timer-50000.idle.txt.xz | " + std::string(HALTPOLLD_BIN) +
                    " simulate --trace - --policy haltpoll --cap-ns 50000 --residency-bias-ns 1000 --json"});
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(r.out);
  CHECK(j["recording"] == true);
  CHECK(j["kernel_limit_events"].get<std::uint64_t>() == 16511);
  CHECK(j["aligned_ratio"].get<double>() >= 0.99);
  r = run({"/bin/sh", "-c",
           "xz -dc " + dir + "/timer-50000.idle.txt.xz | " + std::string(HALTPOLLD_BIN) +
               " simulate --trace - --policy static:200000 --json"});
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["policy"] == "static");
  // A 150 µs timer: nearly every period is shorter than 200 µs, so a 200 µs window polls through it.
  CHECK(j["hit_ratio"].get<double>() > 0.9);
  r = run({"/bin/sh", "-c", "printf '0 halt 10\\n0 nap 5\\n' | " + std::string(HALTPOLLD_BIN) + " simulate --trace - --policy haltpoll"});
  CHECK(r.code == 3);
  CHECK(r.err.find("line 2") != std::string::npos);
}
