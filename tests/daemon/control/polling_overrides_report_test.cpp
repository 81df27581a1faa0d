// What a client reads of the polling overrides, from a real Controller on fake trees: GetStatus'
// polling_overrides object, the status line and `haltpollctl status`'s override line, for a QoS
// device at 0 with a holder, at a nonzero value, malformed, a resume latency request of 0, another
// governor, an offline CPU, and a source that does not read them.
#include "control/daemon_reports.hpp"
#include "control/daemon_snapshot.hpp"
#include "fake_sysfs.hpp"
#include "sysfs/sysfs_edges.hpp"
#include "tuning/controller.hpp"
#include "views.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace haltpolld;
using haltpollctl::render_status;
using nlohmann::json;
using testsupport::FakeSysfs;
using testsupport::TempDir;

namespace {

struct Reports {
  json status;       // GetStatus
  std::string line;  // the status line (sd_notify STATUS=)
  std::string ctl;   // haltpollctl status
};

// One tick of an observing Controller on the tree, reported as the daemon reports it.
Reports tick_and_report(const FakeSysfs& fs, std::vector<int> cpus = {0, 1}) {
  TempDir dir;
  ControllerOptions o;
  o.kernel_mode = false;
  o.probe_rate_hz = 0;
  o.tuner.policy = Policy::static_value;
  o.tuner.static_ns = 100000;
  Controller c(o, sysfs_edges(fs.root(), dir.path(), std::move(cpus)), std::unique_ptr<PoolAccess>{});
  c.start();
  c.tick();
  Config config;
  config.mode = Mode::observe;
  ShellFacts facts;
  facts.version = "test";
  facts.cpus = {0, 1};
  const DaemonSnapshot snap = make_snapshot(Mode::observe, c.status(), fs.root());
  Reports r;
  r.status = daemon_status_json(config, snap, KernelSignalsStats{}, facts, nullptr);
  r.line = daemon_status_line(snap, 2);
  r.ctl = render_status(r.status);
  c.stop();
  return r;
}

std::string override_line(const std::string& ctl) {
  const auto at = ctl.find("\noverride: ");
  if (at == std::string::npos) return {};
  return ctl.substr(at + 1, ctl.find('\n', at + 1) - at - 1);
}

}  // namespace

TEST_CASE("report: cpu_dma_latency held at 0 by a process") {
  FakeSysfs fs;
  fs.set_cpu_dma_latency(0);
  fs.add_holder(4242, "cyclictest", "/dev/cpu_dma_latency");
  const Reports r = tick_and_report(fs);
  const json& po = r.status["polling_overrides"];
  INFO(po.dump(2));
  CHECK(po["active"] == true);
  CHECK(po["unlimited_cpus"] == json::array({0, 1}));
  CHECK(po["cpu_dma_latency"]["device"] == "/dev/cpu_dma_latency");
  CHECK(po["cpu_dma_latency"]["value_us"] == 0);
  CHECK(po["cpu_dma_latency"]["error"].is_null());
  CHECK(po["cpu_dma_latency"]["holders"] == json::array({{{"pid", 4242}, {"comm", "cyclictest"}}}));
  CHECK(po["cpu_wakeup_latency"]["present"] == false);
  REQUIRE(po["cpus"].size() == 2);
  CHECK(po["cpus"][0]["polls_without_limit"] == true);
  CHECK(po["cpus"][0]["reasons"] ==
        json::array(
            {{{"source", "cpu_dma_latency"}, {"text", "cpu_dma_latency is 0, held by process 4242 (cyclictest)"}}}));
  CHECK(po["resume_latency"][1]["state"] == "no_constraint");
  CHECK(po["governor"] == "haltpoll");
  CHECK(po["governor_applies"] == true);
  CHECK(po["offline_cpus"] == json::array());
  CHECK(po["summary"] ==
        "CPUs 0-1 poll without limit whatever the cap (cpu_dma_latency is 0, held by process 4242 (cyclictest))");
  CHECK(override_line(r.ctl) ==
        "override: CPUs 0-1 poll without limit whatever the cap (cpu_dma_latency is 0, held by process 4242 "
        "(cyclictest))");
  CHECK(r.line == "observe mode, 2 CPUs, tuner at 100000 ns, 2 CPUs poll without limit (QoS)");
}

TEST_CASE("report: cpu_dma_latency at a nonzero value is no override, and no line says one") {
  FakeSysfs fs;
  fs.set_cpu_dma_latency(20);
  const Reports r = tick_and_report(fs);
  const json& po = r.status["polling_overrides"];
  CHECK(po["active"] == false);
  CHECK(po["summary"].is_null());
  CHECK(po["cpu_dma_latency"]["value_us"] == 20);
  CHECK(po["unlimited_cpus"] == json::array());
  CHECK(override_line(r.ctl).empty());
  CHECK(r.line == "observe mode, 2 CPUs, tuner at 100000 ns");
}

TEST_CASE("report: a malformed cpu_dma_latency is a reason, and the CPUs cannot be told") {
  FakeSysfs fs;
  fs.write_bytes("dev/cpu_dma_latency", "0\n");
  const Reports r = tick_and_report(fs);
  const json& po = r.status["polling_overrides"];
  CHECK(po["active"] == true);
  CHECK(po["cpu_dma_latency"]["value_us"].is_null());
  const std::string error = po["cpu_dma_latency"]["error"];
  CHECK(error.find("gave 2 bytes, not the 4") != std::string::npos);
  CHECK(po["cpus"][0]["unknown"] == true);
  CHECK(po["cpus"][0]["unknown_reason"] == error);
  CHECK(override_line(r.ctl) == "override: CPUs 0-1 may poll without limit (haltpolld cannot tell: " + error + ")");
  CHECK(r.line == "observe mode, 2 CPUs, tuner at 100000 ns");  // not counted as polling without limit
}

TEST_CASE("report: a resume latency request of 0 on one CPU") {
  FakeSysfs fs;
  fs.set_resume_latency(1, "n/a");
  fs.set_resume_latency(0, "30");
  const Reports r = tick_and_report(fs);
  const json& po = r.status["polling_overrides"];
  CHECK(po["unlimited_cpus"] == json::array({1}));
  CHECK(po["resume_latency"][0] ==
        json({{"cpu", 0}, {"state", "limit"}, {"limit_us", 30}, {"text", "30"}, {"error", nullptr}}));
  CHECK(po["resume_latency"][1]["state"] == "zero");
  CHECK(po["resume_latency"][1]["text"] == "n/a");
  CHECK(po["cpus"][1]["reasons"][0]["source"] == "pm_qos_resume_latency_us");
  CHECK(
      override_line(r.ctl) ==
      "override: CPU 1 polls without limit whatever the cap (cpu1 pm_qos_resume_latency_us is n/a, a request of 0 µs)");
  CHECK(r.line == "observe mode, 2 CPUs, tuner at 100000 ns, 1 CPU polls without limit (QoS)");
}

TEST_CASE("report: the menu governor, and an offline CPU") {
  FakeSysfs fs(FakeSysfs::Options{.governor = "menu", .cpus = 3});
  fs.write("sys/devices/system/cpu/online", "0-1");
  const Reports r = tick_and_report(fs, {});
  const json& po = r.status["polling_overrides"];
  CHECK(po["governor"] == "menu");
  CHECK(po["governor_applies"] == false);
  CHECK(po["offline_cpus"] == json::array({2}));
  CHECK(po["cpus"].size() == 2);
  CHECK(override_line(r.ctl) ==
        "override: the cpuidle governor is menu, not haltpoll: guest_halt_poll_ns reaches nothing; CPU 2 offline "
        "(present, "
        "not online): no idle polling there");
}

TEST_CASE("report: no Observation yet, or a source that does not read them: null, and no line") {
  Config config;
  ShellFacts facts;
  ControllerStatus st;  // no last_observation
  const DaemonSnapshot none = make_snapshot(Mode::observe, st, "/nonexistent-root");
  json s = daemon_status_json(config, none, KernelSignalsStats{}, facts, nullptr);
  CHECK(s.contains("polling_overrides"));
  CHECK(s["polling_overrides"].is_null());
  st.last_observation = Observation{};  // the simulated guest's: kernel.overrides empty
  s = daemon_status_json(config, make_snapshot(Mode::observe, st, "/nonexistent-root"), KernelSignalsStats{}, facts,
                         nullptr);
  CHECK(s["polling_overrides"].is_null());
  s["kernel"] = {{"present", true}};
  CHECK(render_status(s).find("override:") == std::string::npos);
}
