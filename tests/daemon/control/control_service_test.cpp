#include "control/control_service.hpp"

#include <catch2/catch.hpp>

using namespace haltpolld;
using nlohmann::json;
using varlink::Call;
using varlink::Peer;

namespace {

class FakeBackend : public ControlBackend {
 public:
  Config cfg;
  bool reload_fails = false;
  int resets = 0;
  int take_overs = 0;
  json status() override { return {{"version", "t"}, {"mode", "observe"}}; }
  StatsSnapshot stats() override {
    StatsSnapshot s;
    s.mode = "observe";
    for (unsigned cpu : {0u, 2u}) {
      CpuStats c;
      c.cpu = cpu;
      c.poll_hits = 3;
      c.poll_misses = 1;
      c.latency_buckets = {{1000, 2}, {UINT64_MAX, 1}};
      c.latency_count = 3;
      s.cpus.push_back(c);
    }
    KernelSignals k;
    k.elapsed_ns = 1'000'000'000;
    for (int cpu : {0, 2}) {
      CpuKernelSignals ck;
      ck.cpu = cpu;
      ck.poll_entries = 40;
      ck.poll_hits = 30;
      ck.poll_misses = 10;
      ck.halts = 10;
      k.cpus.push_back(ck);
    }
    s.kernel_signals.record(7, k, 0.5);
    return s;
  }
  Config config() const override { return cfg; }
  std::string config_file() const override { return "/etc/x.json"; }
  Config set_config(const json& partial) override { return cfg = apply_config_json(partial, cfg); }
  ReloadResult reload() override {
    if (reload_fails) throw ConfigError("/tuner/interval_ms", "expected an integer");
    return {cfg, {}};
  }
  void reset_stats() override { ++resets; }
  json take_over() override {
    ++take_overs;
    return {{"took_over", true}, {"message", "taken"}, {"other_writer", nullptr}};
  }
  json decisions(std::size_t limit) override {
    json d = json::array({{{"n", 1}}, {{"n", 2}}, {{"n", 3}}});
    if (limit && limit < d.size()) d.erase(d.begin(), d.begin() + static_cast<long>(d.size() - limit));
    return d;
  }
};

struct Fixture {
  FakeBackend backend;
  varlink::Registry reg{{"haltpolld", "haltpolld", "0.1", ""}};
  Peer user{1000, 1000, 1, false};
  Peer admin{0, 0, 1, true};
  Fixture() { register_control_interface(reg, backend); }
  varlink::Reply call(const std::string& m, json params = json::object(), bool as_admin = false, bool more = false,
                      std::uint64_t index = 0) {
    Call c;
    c.method = "io.haltpolld." + m;
    c.parameters = std::move(params);
    c.more = more;
    c.stream_index = index;
    return reg.dispatch(c, as_admin ? admin : user);
  }
};

}  // namespace

TEST_CASE("io.haltpolld read methods") {
  Fixture f;
  CHECK(f.call("GetStatus").parameters["version"] == "t");
  auto s = f.call("GetStats");
  REQUIRE(s.parameters["cpus"].size() == 2);
  CHECK(s.parameters["cpus"][0]["poll_hit_ratio"] == Approx(0.75));
  CHECK_FALSE(s.parameters["cpus"][0]["latency"].contains("buckets"));
  auto one = f.call("GetStats", {{"cpu", 2}, {"histogram", true}});
  REQUIRE(one.parameters["cpus"].size() == 1);
  CHECK(one.parameters["cpus"][0]["latency"]["buckets"].size() == 2);
  CHECK(one.parameters["cpus"][0]["latency"]["buckets"][1]["le_ns"].is_null());
  // The kernel's view follows the same filter; its `all` row does not.
  REQUIRE(one.parameters["kernel_signals"]["cpus"].size() == 1);
  CHECK(one.parameters["kernel_signals"]["cpus"][0]["cpu"] == 2);
  CHECK(one.parameters["kernel_signals"]["cpus"][0]["poll_hits_per_s"] == Approx(30));
  CHECK(one.parameters["kernel_signals"]["all"]["poll_entries_per_s"] == Approx(80));
  CHECK(s.parameters["kernel_signals"]["tick"] == 7);
  CHECK(s.parameters["kernel_signals"]["cpus"].size() == 2);
  CHECK(f.call("GetStats", {{"cpu", 1}}).error == errors::no_such_cpu);
  CHECK(f.call("GetStats", {{"cpu", -1}}).error == varlink::errors::invalid_parameter);
  CHECK(f.call("GetStats", {{"cpu", "0"}}).parameters["parameter"] == "cpu");
  CHECK(f.call("GetStats", {{"colour", 1}}).parameters["parameter"] == "colour");
  CHECK(f.call("GetStatus", {{"x", 1}}).error == varlink::errors::invalid_parameter);
  auto cfg = f.call("GetConfig");
  CHECK(cfg.parameters["config"]["mode"] == "observe");
  CHECK(cfg.parameters["file"] == "/etc/x.json");
  CHECK(f.call("GetDecisions").parameters["decisions"].size() == 3);
  auto last = f.call("GetDecisions", {{"limit", 1}});
  REQUIRE(last.parameters["decisions"].size() == 1);
  CHECK(last.parameters["decisions"][0]["n"] == 3);
  auto m = f.call("GetMetrics").parameters["text"].get<std::string>();
  CHECK(m.find("haltpoll_worker_poll_hits_total{cpu=\"2\"} 3") != std::string::npos);
}

TEST_CASE("io.haltpolld Watch streams with more and stops after count") {
  Fixture f;
  CHECK(f.call("Watch").error == varlink::errors::expected_more);
  auto first = f.call("Watch", {{"interval_ms", 200}, {"count", 2}}, false, true, 0);
  CHECK(first.continues);
  CHECK(first.next_after_ms == 200);
  CHECK_FALSE(f.call("Watch", {{"interval_ms", 200}, {"count", 2}}, false, true, 1).continues);
  CHECK(f.call("Watch", {}, false, true, 1000).continues);
  CHECK(f.call("Watch", {{"interval_ms", 5}}, false, true).parameters["parameter"] == "interval_ms");
}

TEST_CASE("io.haltpolld changes need admin, are validated and atomic") {
  Fixture f;
  for (const char* m : {"SetConfig", "Reload", "ResetStats", "TakeOver"})
    CHECK(f.call(m).error == varlink::errors::permission_denied);
  CHECK(f.backend.resets == 0);
  CHECK(f.backend.take_overs == 0);
  CHECK(f.call("TakeOver", {{"force", true}}, true).parameters["parameter"] == "force");
  auto take = f.call("TakeOver", json::object(), true);
  REQUIRE_FALSE(take.is_error());
  CHECK(take.parameters["took_over"] == true);
  CHECK(f.backend.take_overs == 1);
  CHECK_FALSE(f.call("ResetStats", json::object(), true).is_error());
  CHECK(f.backend.resets == 1);

  auto set = f.call("SetConfig", {{"config", {{"tuner", {{"interval_ms", 500}}}}}}, true);
  REQUIRE_FALSE(set.is_error());
  CHECK(set.parameters["config"]["tuner"]["interval_ms"] == 500);
  CHECK(f.backend.cfg.tuner.interval_ms == 500);

  auto bad = f.call("SetConfig", {{"config", {{"tuner", {{"interval_ms", 500}, {"policy", "fast"}}}}}}, true);
  CHECK(bad.error == errors::config_refused);
  CHECK(bad.parameters["path"] == "/tuner/policy");
  CHECK(f.backend.cfg.tuner.policy == haltpolld::Policy::balanced);

  auto restart = f.call("SetConfig", {{"config", {{"cpus", "0"}}}}, true);
  CHECK(restart.error == errors::restart_required);
  CHECK(restart.parameters["paths"] == json({"/cpus"}));
  CHECK(f.call("SetConfig", {{"config", 1}}, true).parameters["parameter"] == "config");

  CHECK_FALSE(f.call("Reload", json::object(), true).is_error());
  f.backend.reload_fails = true;
  auto r = f.call("Reload", json::object(), true);
  CHECK(r.error == errors::config_refused);
  CHECK(r.parameters["path"] == "/tuner/interval_ms");
  CHECK(r.parameters["file"] == "/etc/x.json");
}

TEST_CASE("the interface describes itself") {
  Fixture f;
  Call c;
  c.method = "org.varlink.service.GetInterfaceDescription";
  c.parameters = {{"interface", "io.haltpolld"}};
  auto d = f.reg.dispatch(c, f.user).parameters["description"].get<std::string>();
  for (const char* m : {"GetStatus", "GetStats", "GetConfig", "SetConfig", "Reload", "ResetStats", "GetDecisions",
                        "GetMetrics", "Watch", "TakeOver", "type OtherWriter", "other_writer: ?OtherWriter",
                        "error ConfigRefused"})
    CHECK(d.find(m) != std::string::npos);
}
