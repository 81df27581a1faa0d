// Loads described in JSON (src/sim/des_load_json.hpp) and `haltpolld simulate --guest`
// (src/sim/loop/simulate_guest.hpp): the shipped loads equal the calibrated builders, malformed
// descriptions are refused with their position and reason, and the command predicts.
#include "sim/loop/simulate_guest.hpp"
#include "sim/des_cell.hpp"
#include "sim/kernel_replay.hpp"
#include "sim/des_load_json.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

using namespace haltpolld::des;

namespace {

std::string contrib(const std::string& name) { return HALTPOLL_SOURCE_DIR "/contrib/loads/" + name + ".json"; }

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string refusal(const std::string& text, int cpus = 2) {
  try {
    parse_load(text, fit_costs(), cpus);
  } catch (const LoadError& e) {
    return e.what();
  }
  return "accepted";
}

// The database-shaped load of contrib/loads/ at a setting, for `seconds`.
GuestSimulateOptions db_at(const std::string& setting, double seconds) {
  GuestSimulateOptions o;
  o.load_path = contrib("db");
  o.setting = setting;
  o.seconds = seconds;
  return o;
}

// simulate --guest with `o` and these --set, which must succeed quietly: its JSON.
nlohmann::json run_json(GuestSimulateOptions o, std::vector<std::string> sets) {
  o.sets = std::move(sets);
  o.json = true;
  std::ostringstream out, err;
  REQUIRE(run_simulate_guest(o, out, err) == 0);
  CHECK(err.str().empty());
  return nlohmann::json::parse(out.str());
}

}  // namespace

TEST_CASE("load json: the shipped pipe is the calibrated pipe, replicated per pair of vCPUs", "[load]") {
  const Calibration cal = fit_costs();
  const LoadDescription d = parse_load(slurp(contrib("pipe")), cal, 5);
  CHECK(d.result == "round_trip");
  CHECK(d.span == 2);
  CHECK(d.copies == 2);  // vCPUs 0-1 and 2-3; vCPU 4 stays idle
  REQUIRE(d.load.threads.size() == 4);
  CHECK(d.load.threads[2].cpu == 2);
  CHECK(d.load.threads[3].cpu == 3);
  CHECK(d.load.channels == 4);
  // Same program and same results as the builder's pipe on one pair.
  const LoadDescription one = parse_load(slurp(contrib("pipe")), cal, 2);
  const CellResult a = run_cell(cal.costs, one.load, 2, 50000, 50'000'000, 200'000'000, 5, one.result);
  const CellResult b = run_cell(cal.costs, calibrated_pipe(cal), 2, 50000, 50'000'000, 200'000'000, 5, "round_trip");
  CHECK(a.ops == b.ops);
  CHECK(a.result_mean_us == b.result_mean_us);
  CHECK(a.halts_per_s == b.halts_per_s);
}

TEST_CASE("load json: every shipped load parses and runs", "[load]") {
  const Calibration cal = fit_costs();
  for (const char* name : {"pipe", "rr", "db", "timer", "poisson", "idle"}) {
    CAPTURE(name);
    const LoadDescription d = parse_load(slurp(contrib(name)), cal, 4);
    const CellResult r = run_cell(cal.costs, d.load, 4, 0, 10'000'000, 100'000'000, 1, d.result);
    CHECK(r.idle_entries_per_s > 0);
    if (std::string(name) != "idle") CHECK(r.ops > 0);
  }
}

TEST_CASE("load json: a malformed description is refused with its position and reason", "[load]") {
  CHECK_THAT(refusal("{\"threads\": [\n  {\"cpu\": 0,, }\n]}"), Catch::StartsWith("line 2, column 13: "));
  CHECK_THAT(refusal("{\"threads\": [\n  {\"cpu\": 0,, }\n]}"), Catch::Contains("syntax error"));
  CHECK_THAT(refusal("[]"), Catch::StartsWith("/: a load is a JSON object"));
  CHECK_THAT(refusal(R"({"thread": []})"), Catch::StartsWith("/thread: unknown key"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 2, "steps": [{"compute_us": 1}]}]})"),
             Catch::StartsWith("/threads/0/cpu: vCPU 2 on a guest of 2"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "steps": [{"compute_us": 1}, {"sleep": 3}]}]})"),
             Catch::StartsWith("/threads/0/steps/1: no step kind"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "steps": [{"compute_us": -1}]}]})"),
             Catch::StartsWith("/threads/0/steps/0/compute_us: must be > 0"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "steps": [{"compute_us": 1, "sigm": 1}]}]})"),
             Catch::StartsWith("/threads/0/steps/0/sigm: unknown option"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "steps": [{"post": "a", "wait": "a"}]}]})"),
             Catch::StartsWith("/threads/0/steps/0: one step, two kinds"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "steps": [{"wait": ""}]}]})"),
             Catch::StartsWith("/threads/0/steps/0/wait: expected a non-empty name"));
  CHECK_THAT(refusal(R"({"result": "rtt", "threads": [{"cpu": 0, "steps": [{"compute_us": 1}]}]})"),
             Catch::StartsWith("/result: no step names the metric 'rtt'"));
  CHECK_THAT(refusal(R"({"span": 1, "threads": [{"cpu": 1, "steps": [{"compute_us": 1}]}]})"),
             Catch::StartsWith("/span: expected an integer from 2"));
}

TEST_CASE("simulate --guest: predicts a described load with the calibration error beside it", "[load][loop]") {
  GuestSimulateOptions o;
  o.load_path = contrib("pipe");
  o.setting = "static:50000";
  o.seconds = 2;
  std::ostringstream out, err;
  REQUIRE(run_simulate_guest(o, out, err) == 0);
  CHECK(err.str().empty());
  CHECK_THAT(out.str(), Catch::Contains("poll CPU") && Catch::Contains("calibration error: within 5 points") &&
                            Catch::Contains("round_trip") && Catch::Contains("within 15 %"));

  o.setting = "balanced";
  o.json = true;
  o.seconds = 5;
  std::ostringstream js;
  REQUIRE(run_simulate_guest(o, js, err) == 0);
  const auto j = nlohmann::json::parse(js.str());
  CHECK(j.at("cap_at_end_ns").get<std::uint32_t>() >= 25000);
  CHECK(j.at("result").at("mean_us").get<double>() < 15);  // fast from the first second on (44 us/op at 0, 9.5 polling)
  CHECK(j.at("calibration_error").at("result_percent").get<double>() == 15);

  std::ostringstream bad, why;
  o.load_path = HALTPOLL_SOURCE_DIR "/tests/sim/data/bad_load.json";
  CHECK(run_simulate_guest(o, bad, why) == 3);
  CHECK_THAT(why.str(), Catch::Contains("bad_load.json: /threads/0/steps/1/wait: expected a non-empty name"));
  o.load_path = contrib("pipe");
  o.setting = "static:fast";
  CHECK(run_simulate_guest(o, bad, why) == 2);
  o.setting = "static";
  CHECK(run_simulate_guest(o, bad, why) == 2);
}

TEST_CASE("simulate --guest: --set puts the guest's other module parameters in force at boot", "[load][loop]") {
  // The database-shaped load at cap 100000: its 60 us wait for the reply, split by the socket's
  // write-space wake-up, polls the kernel's grow_start (50000), times out and halts too briefly to
  // grow the limit (the trap); with grow_start at the cap the first halt grows the limit to the cap,
  // which catches the wait.
  GuestSimulateOptions o = db_at("static:100000", 2);
  const auto trapped = run_json(o, {});
  const auto escaped = run_json(o, {"guest_halt_poll_grow_start=100000"});
  CHECK(trapped.at("module_parameters_at_boot").at("guest_halt_poll_grow_start") == 50000);
  CHECK(escaped.at("module_parameters_at_boot").at("guest_halt_poll_grow_start") == 100000);
  CHECK(escaped.at("halts_per_s").get<double>() * 10 < trapped.at("halts_per_s").get<double>());
  CHECK(escaped.at("result").at("mean_us").get<double>() < 0.9 * trapped.at("result").at("mean_us").get<double>());
  // Text: the parameters that differ from the kernel's defaults are named in the header.
  o.json = false;
  o.sets = {"guest_halt_poll_grow_start=100000"};
  std::ostringstream text, err;
  REQUIRE(run_simulate_guest(o, text, err) == 0);
  CHECK_THAT(text.str(), Catch::Contains("from boot at 100000 ns, guest_halt_poll_grow_start 100000, seed 1"));
  o.sets = {"guest_halt_poll_grow_start"};
  CHECK(run_simulate_guest(o, text, err) == 2);
  CHECK_THAT(err.str(), Catch::Contains("--set guest_halt_poll_grow_start: expected key=value"));
}

TEST_CASE("simulate --guest: --set tuner.<key> runs the daemon with that key, grow_start_at_cap leaves the trap",
          "[load][loop]") {
  // balanced on the database-shaped load: with the kernel's grow_start its sweep measures every rung
  // above 50000 still in the trap (the limits the rung below left) and keeps 0; with the cap as
  // grow_start and the limits zeroed on each climb the rungs above catch the wait.
  GuestSimulateOptions o = db_at("balanced", 20);
  const auto kernel = run_json(o, {});
  const auto at_cap = run_json(o, {"tuner.grow_start_at_cap=true"});
  CHECK(!kernel.contains("tuner_keys"));
  CHECK(at_cap.at("tuner_keys").at("tuner.grow_start_at_cap") == "true");
  CHECK(kernel.at("cap_at_end_ns").get<std::uint32_t>() < 50000);
  CHECK(at_cap.at("cap_at_end_ns").get<std::uint32_t>() >= 100000);
  CHECK(at_cap.at("result").at("mean_us").get<double>() < 0.75 * kernel.at("result").at("mean_us").get<double>());
  CHECK(at_cap.at("late_half").at("halts_per_s").get<double>() * 10 < kernel.at("late_half").at("halts_per_s").get<double>());
  // Refused, with the key and the reason: a tuner key with a static setting, a key that is not the
  // configuration's, a value out of its type or bounds, a combination validate() refuses.
  auto refused = [&](const std::string& setting, const std::string& kv, const std::string& why) {
    o.setting = setting;
    o.sets = {kv};
    std::ostringstream out, err;
    CHECK(run_simulate_guest(o, out, err) == 2);
    CHECK_THAT(err.str(), Catch::Contains("--set " + kv + ": " + why));
  };
  refused("static:100000", "tuner.grow_start_at_cap=true", "a tuner key needs a policy --setting");
  refused("balanced", "tuner.min_periods=10", "not a configuration key of the tuner");
  refused("balanced", "tuner.grow_start_at_cap=yes", "expected true or false");
  refused("balanced", "tuner.max_poll_cpu_percent=101", "max_poll_cpu_percent: expected");
  refused("balanced", "tuner.max_ns=4e5x", "expected a number");
  o.setting = "balanced";
  o.sets = {"tuner.manage_grow_start=true", "tuner.grow_start_at_cap=true"};
  std::ostringstream out, err;
  CHECK(run_simulate_guest(o, out, err) == 2);
  CHECK_THAT(err.str(), Catch::Contains("grow_start_at_cap: excludes manage_grow_start"));
}

TEST_CASE("load json: repeat expands a burst, start_s and stop_s bound a thread's run", "[load]") {
  const Calibration cal = fit_costs();
  const std::string text = R"({"threads": [
    {"name": "a", "cpu": 0, "stop_s": 1, "steps": [{"repeat": 3, "steps": [{"begin": "x"}, {"compute_us": 10}, {"end": "x"}]}, {"sleep_exp_us": 100}]},
    {"name": "b", "cpu": 1, "start_s": 1, "steps": [{"begin": "y"}, {"compute_us": 10}, {"end": "y"}, {"sleep_exp_us": 100}]}]})";
  const LoadDescription d = parse_load(text, cal, 2);
  REQUIRE(d.load.threads.size() == 2);
  CHECK(d.load.threads[0].steps.size() == 10);  // three times begin, compute, end; then the sleep
  CHECK(d.load.threads[0].stop_ns == 1'000'000'000);
  CHECK(d.load.threads[1].start_ns == 1'000'000'000);
  // In the guest: x completes only before 1 s, y only after.
  GuestConfig gc;
  gc.costs = cal.costs;
  Guest g(gc, d.load);
  g.run_until(900'000'000);
  const auto x_early = g.metric("x").count, y_early = g.metric("y").count;
  CHECK(x_early > 1000);
  CHECK(y_early == 0);
  g.run_until(2'000'000'000);
  CHECK(g.metric("x").count <= x_early + 3 * 2000);  // at most the burst in progress at 1 s ... and none later
  const auto x_at_2 = g.metric("x").count;
  CHECK(g.metric("y").count > 1000);
  g.run_until(3'000'000'000);
  CHECK(g.metric("x").count == x_at_2);
  // Refused with the position: a fractional repeat, an empty one, a stop before the start.
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "steps": [{"repeat": 2.5, "steps": [{"compute_us": 1}]}]}]})"),
             Catch::Contains("/threads/0/steps/0/repeat: expected a whole number"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "steps": [{"repeat": 2, "steps": []}]}]})"),
             Catch::Contains("/threads/0/steps/0/steps: expected a non-empty array"));
  CHECK_THAT(refusal(R"({"threads": [{"cpu": 0, "start_s": 2, "stop_s": 1, "steps": [{"compute_us": 1}]}]})"),
             Catch::Contains("/threads/0/stop_s: must be after start_s"));
}

TEST_CASE("simulate --guest --record: the guest's idle periods in record's format, every limit event the model's",
          "[load][loop]") {
  char dir_template[] = "/tmp/haltpolld-sim-record-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  const std::string path = dir + "/pipe.txt";

  GuestSimulateOptions o;
  o.load_path = contrib("pipe");
  o.setting = "static:20000";  // the cap inside the pipe's knee: grows, shrinks and timed-out polls
  o.seconds = 2;
  o.record_path = path;
  const auto j = run_json(o, {});
  const std::string text = slurp(path);
  CHECK_FALSE(std::ifstream(path + ".tmp").good());  // renamed into place
  CHECK_THAT(text, Catch::StartsWith("# haltpolld simulate --guest: load pipe (1 copy) on 2 vCPUs, setting "
                                     "static:20000, seed 1, 2 s of virtual time\n# haltpoll guest_halt_poll_ns=20000 "));

  // As a kernel recording: the parameters from its header, every line a period or an event.
  std::istringstream in(text);
  const haltpolld::KernelRecording rec = haltpolld::read_kernel_recording(in, 0);
  CHECK(rec.params_from_header);
  CHECK(rec.params.guest_halt_poll_ns == 20000);
  CHECK(rec.params.guest_halt_poll_grow_start == 50000);
  REQUIRE(rec.cpus.size() == 2);
  std::uint64_t polls = 0, halts = 0, events = 0;
  for (const auto& [cpu, c] : rec.cpus) {
    polls += c.polls;
    halts += c.halts.size();
    events += c.events.size();
  }
  // The counters count the periods still running at the end too (one per CPU at most).
  const double seconds = j.at("seconds").get<double>();
  CHECK(std::abs(static_cast<double>(polls + halts) - j.at("idle_entries_per_s").get<double>() * seconds) <= 2);
  CHECK(std::abs(static_cast<double>(halts) - j.at("halts_per_s").get<double>() * seconds) <= 2);
  CHECK(halts > 1000);
  CHECK(polls > 50 * halts);  // the pipe polls through all but about one period in 90 at 20000
  CHECK_THAT(text, Catch::EndsWith(fmt::format("# end: 2.000 s, {} periods, {} limit events\n", polls + halts, events)));

  // The replay of the kernel's rule takes every branch the simulated kernel took, to the same value.
  const haltpolld::ReplayAgreement a = haltpolld::replay_against_kernel(rec);
  CHECK(a.kernel_events == events);
  CHECK(a.kernel_events > 1000);
  CHECK(a.model_events == a.kernel_events);
  CHECK(a.aligned == a.kernel_events);
  CHECK(a.one_step_same == a.halts);

  // Under the daemon: each change of the cap is a comment at its time.
  o.setting = "balanced";
  o.seconds = 3;
  const auto b = run_json(o, {});
  const std::string tuned = slurp(path);
  std::size_t cap_lines = 0;
  for (std::size_t at = tuned.find("\n# cap "); at != std::string::npos; at = tuned.find("\n# cap ", at + 1)) ++cap_lines;
  CHECK(b.at("cap_changes").get<std::size_t>() >= 2);
  CHECK(cap_lines == b.at("cap_changes").get<std::size_t>());

  // A file that cannot be written: refused before the run, nothing left behind.
  o.record_path = dir + "/no/such/dir/x.txt";
  std::ostringstream out, err;
  CHECK(run_simulate_guest(o, out, err) == 2);
  CHECK_THAT(err.str(), Catch::Contains("--record " + o.record_path + ": cannot write"));
  CHECK(out.str().empty());

  std::remove(path.c_str());
  ::rmdir(dir.c_str());
}
