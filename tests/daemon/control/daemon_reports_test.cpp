// What a client reads of the daemon, from a DaemonSnapshot: the effective mode and its reason
// (effective_mode(), the one function that decides them), the kernel parameters parsed from the
// Controller's reading exactly as read_kernel_haltpoll_params reads the files, and GetStatus,
// GetStats and the status line agreeing on one snapshot.
#include "control/daemon_reports.hpp"
#include "control/daemon_snapshot.hpp"
#include "fake_sysfs.hpp"
#include "sysfs/kernel_params.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace haltpolld;
using nlohmann::json;
using testsupport::FakeSysfs;

namespace {

ControllerStatus controller(bool requested, bool effective, std::string why = {}) {
  ControllerStatus c;
  c.kernel_requested = requested;
  c.kernel_effective = effective;
  c.kernel_mode_inactive_reason = std::move(why);
  c.tuner.current_ns = 30000;
  c.kernel.params = {{"guest_halt_poll_ns", "30000"}, {"guest_halt_poll_allow_shrink", "N"}};
  return c;
}

}  // namespace

TEST_CASE("effective_mode: kernel only when the Controller writes the parameters, else observe and why") {
  const ControllerStatus active = controller(true, true);
  const ControllerStatus refused = controller(true, false, "cpuidle current_governor is 'menu'");
  const ControllerStatus observing = controller(false, false, "mode is observe");

  EffectiveMode m = effective_mode(Mode::kernel, &active);
  CHECK(m.mode == Mode::kernel);
  CHECK(m.reason.empty());
  m = effective_mode(Mode::kernel, &refused);
  CHECK(m.mode == Mode::observe);
  CHECK(m.reason == "cpuidle current_governor is 'menu'");
  // The alerts tell a configured observe mode from a refused kernel mode by this wording.
  CHECK(effective_mode(Mode::observe, &observing).reason == "observe requested by the configuration");
  CHECK(effective_mode(Mode::observe, nullptr).reason == "observe requested by the configuration");
  m = effective_mode(Mode::kernel, nullptr);
  CHECK(m.mode == Mode::observe);
  CHECK_FALSE(m.reason.empty());
}

TEST_CASE("kernel parameters: parsed from a reading as read from the files") {
  FakeSysfs fs;
  fs.set_param("guest_halt_poll_grow", "not a number");
  KernelParamReadings read;
  for (const char* name : {"guest_halt_poll_ns", "guest_halt_poll_grow", "guest_halt_poll_grow_start",
                           "guest_halt_poll_shrink", "guest_halt_poll_allow_shrink"})
    read.emplace_back(name, fs.param(name));
  const KernelHaltpollParams parsed = parse_kernel_haltpoll_params(read);
  const KernelHaltpollParams files = read_kernel_haltpoll_params(fs.root());
  CHECK(to_json(parsed) == to_json(files));
  CHECK(parsed.guest_halt_poll_ns == 200000u);
  CHECK_FALSE(parsed.guest_halt_poll_grow.has_value());  // unparsable: empty, not 0
  CHECK(parsed.guest_halt_poll_allow_shrink == true);
  CHECK(parsed.present);
  // Unreadable or missing from the reading: empty.
  const KernelHaltpollParams none = parse_kernel_haltpoll_params({{"guest_halt_poll_ns", std::nullopt}});
  CHECK_FALSE(none.guest_halt_poll_ns.has_value());
  CHECK_FALSE(none.present);
}

TEST_CASE("GetStatus, GetStats and the status line: one snapshot, one mode") {
  Config config;
  config.mode = Mode::kernel;
  ShellFacts facts;
  facts.version = "test";
  facts.cpus = {0, 1};
  facts.ticks = 7;
  KernelSignalsStats ks;
  FleetSeries fleet;

  SECTION("kernel mode active") {
    const DaemonSnapshot snap = make_snapshot(Mode::kernel, controller(true, true), "/nonexistent-root");
    CHECK(snap.kernel.guest_halt_poll_ns == 30000u);  // the Controller's reading, not the (absent) files
    const json st = daemon_status_json(config, snap, ks, facts, nullptr);
    CHECK(st["requested_mode"] == "kernel");
    CHECK(st["mode"] == "kernel");
    CHECK(st["mode_reason"] == "kernel mode active");
    CHECK(st["kernel"]["guest_halt_poll_ns"] == 30000);
    CHECK(st["kernel"]["guest_halt_poll_allow_shrink"] == false);
    CHECK(st["controller"].is_object());
    CHECK(st["pool"].is_null());
    const StatsSnapshot stats = daemon_stats(snap, fleet, ks, facts, nullptr);
    CHECK(stats.mode == "kernel");
    CHECK(stats.tuner_ticks == 7);
    CHECK(stats.kernel.guest_halt_poll_ns == 30000u);
    REQUIRE(stats.cpus.size() == 2);  // one empty entry per CPU without a pool
    CHECK(daemon_status_line(snap, 2) == "kernel mode, 2 CPUs, tuner at 30000 ns");
  }
  SECTION("kernel mode refused: observe everywhere, with the Controller's reason") {
    const DaemonSnapshot snap = make_snapshot(Mode::kernel, controller(true, false, "no haltpoll governor"), "/x");
    const json st = daemon_status_json(config, snap, ks, facts, nullptr);
    CHECK(st["mode"] == "observe");
    CHECK(st["mode_reason"] == "no haltpoll governor");
    CHECK(daemon_stats(snap, fleet, ks, facts, nullptr).mode == "observe");
    CHECK(daemon_status_line(snap, 2).rfind("observe mode, 2 CPUs", 0) == 0);
  }
  SECTION("no Controller: the parameters are read from the tree") {
    FakeSysfs fs;
    config.mode = Mode::observe;
    const DaemonSnapshot snap = make_snapshot(Mode::observe, std::nullopt, fs.root());
    CHECK(snap.kernel.guest_halt_poll_ns == 200000u);
    const json st = daemon_status_json(config, snap, ks, facts, nullptr);
    CHECK(st["mode_reason"] == "observe requested by the configuration");
    CHECK(st["controller"].is_null());
    CHECK(daemon_status_line(snap, 2) == "observe mode, 2 CPUs");
  }
}
