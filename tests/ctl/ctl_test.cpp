// haltpollctl against a real haltpolld: every command, --json, exit codes.
#include "daemon_fixture.hpp"

using daemontest::Daemon;
using nlohmann::json;
using testsupport::run;
using namespace std::chrono_literals;

namespace {
testsupport::RunResult ctl(const Daemon& d, std::vector<std::string> args) {
  std::vector<std::string> argv = {HALTPOLLCTL_BIN, "--socket", d.socket};
  for (auto& a : args) argv.push_back(a);
  return run(argv);
}
}  // namespace

TEST_CASE("haltpollctl: read commands, human and --json") {
  Daemon d(json{{"tuner", {{"interval_ms", 200}}}});
  auto status = ctl(d, {"status"});
  CHECK(status.code == 0);
  CHECK(status.out.find("mode:     observe") != std::string::npos);
  CHECK(status.out.find("guest_halt_poll_ns=200000") != std::string::npos);
  auto sj = ctl(d, {"status", "--json"});
  REQUIRE(sj.code == 0);
  json s = json::parse(sj.out);
  CHECK(s["mode"] == "observe");
  int cpu = s["cpus"][0];

  auto stats = ctl(d, {"stats"});
  CHECK(stats.code == 0);
  CHECK(stats.out.find("WAKE p50") != std::string::npos);
  auto one = ctl(d, {"--json", "stats", "--cpu", std::to_string(cpu)});
  REQUIRE(one.code == 0);
  CHECK(json::parse(one.out)["cpus"].size() == 1);
  auto nocpu = ctl(d, {"stats", "--cpu", "4000"});
  CHECK(nocpu.code == 1);
  CHECK(nocpu.err.find("no worker on CPU 4000") != std::string::npos);

  auto hist = ctl(d, {"histogram", "--cpu", std::to_string(cpu)});
  CHECK(hist.code == 0);
  CHECK(hist.out.find("CPU " + std::to_string(cpu) + ":") != std::string::npos);
  auto hj = ctl(d, {"histogram", "--json"});
  REQUIRE(hj.code == 0);
  CHECK(json::parse(hj.out)["cpus"][0]["latency"].contains("buckets"));

  auto top = ctl(d, {"top", "--interval", "100", "--count", "2"});
  CHECK(top.code == 0);
  CHECK(top.out.find("POLL CPU") != std::string::npos);
  CHECK(top.out.find("kernel cap 200.0 µs") != std::string::npos);
  auto topj = ctl(d, {"top", "-i", "100", "-n", "2", "--json"});
  CHECK(topj.code == 0);
  CHECK(std::count(topj.out.begin(), topj.out.end(), '\n') == 2);

  auto dec = ctl(d, {"decisions", "--json"});
  CHECK(dec.code == 0);
  CHECK(json::parse(dec.out)["decisions"].is_array());
  CHECK(ctl(d, {"decisions", "--limit", "3"}).code == 0);

  auto metrics = ctl(d, {"metrics"});
  CHECK(metrics.code == 0);
  CHECK(metrics.out.find("# TYPE haltpoll_worker_tasks_total counter") != std::string::npos);
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: config get/set, reload, reset") {
  Daemon d;
  auto all = ctl(d, {"config", "get"});
  REQUIRE(all.code == 0);
  CHECK(json::parse(all.out)["tuner"]["policy"] == "balanced");
  auto one = ctl(d, {"config", "get", "tuner.interval_ms"});
  CHECK(one.code == 0);
  CHECK(one.out == "1000\n");
  CHECK(ctl(d, {"config", "get", "tuner.nope"}).code == 2);

  auto set = ctl(d, {"config", "set", "tuner.policy", "latency"});
  CHECK(set.code == 0);
  CHECK(set.out == "tuner.policy = \"latency\"\n");
  CHECK(ctl(d, {"config", "get", "tuner.policy"}).out == "latency\n");
  CHECK(ctl(d, {"config", "set", "probe.rate_hz", "2.5"}).code == 0);
  auto bad = ctl(d, {"config", "set", "tuner.interval_ms", "5"});
  CHECK(bad.code == 1);
  CHECK(bad.err.find("/tuner/interval_ms") != std::string::npos);
  auto restart = ctl(d, {"config", "set", "cpus", "0"});
  CHECK(restart.code == 1);
  CHECK(restart.err.find("after a restart") != std::string::npos);

  auto reload = ctl(d, {"reload"});
  CHECK(reload.code == 0);
  CHECK(ctl(d, {"config", "get", "tuner.policy"}).out == "balanced\n");
  d.write_config_text("{ broken");
  auto refused = ctl(d, {"reload"});
  CHECK(refused.code == 1);
  CHECK(refused.err.find("refused") != std::string::npos);
  CHECK(ctl(d, {"reset"}).code == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: exit codes when the daemon is absent or the usage is wrong") {
  auto dir = daemontest::make_temp_dir();
  auto r = run({HALTPOLLCTL_BIN, "--socket", dir + "/none", "status"});
  CHECK(r.code == 3);
  CHECK(r.err.find("not running") != std::string::npos);
  CHECK(run({HALTPOLLCTL_BIN, "--socket", dir + "/none", "frobnicate"}).code == 2);
  CHECK(run({HALTPOLLCTL_BIN, "config"}).code == 2);
  auto env = run({HALTPOLLCTL_BIN, "status"}, {"HALTPOLLD_SOCKET=" + dir + "/env-sock"});
  CHECK(env.err.find(dir + "/env-sock") != std::string::npos);
  std::filesystem::remove_all(dir);
}
