// `haltpollctl top` and `stats --kernel` on a guest whose kernel does not poll: a fake tree with no
// cpuidle driver read by the daemon's Sensors, the idle periods the eBPF reader would add scripted
// into its tick, GetStats built as the daemon builds it (daemon_stats, stats_to_json), and the
// lines the two views print from that JSON.
#include "control/daemon_reports.hpp"
#include "control/stats.hpp"
#include "guest_kind.hpp"
#include "sysfs/sensors.hpp"
#include "tuning/tuner.hpp"
#include "views.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sstream>

using namespace haltpolld;
using nlohmann::json;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& l : lines_of(text))
    if (l == line) return true;
  return false;
}

bool has_line_starting(const std::string& text, const std::string& start) {
  for (const auto& l : lines_of(text))
    if (l.rfind(start, 0) == 0) return true;
  return false;
}

// The fake driverless guest and its daemon-side state: the Sensors' tick on the tree, with the
// counts and histograms of the power:cpu_idle tracepoint scripted in (a fake tree has no eBPF).
struct DriverlessGuest {
  testsupport::FakeSysfs tree{testsupport::fake_guest(testsupport::GuestKind::no_driver)};
  Sensors sensors{tree.root(), {}};
  KernelSignalsStats kernel;
  std::uint64_t tick = 0;

  DriverlessGuest() { sensors.sample(0); }

  // One tick of `elapsed` in which each CPU had `periods` idle periods of `ns`, every one a halt.
  void counted_tick(std::uint64_t periods, std::uint64_t ns, std::uint64_t now_ns) {
    Observation o = sensors.sample(now_ns);
    REQUIRE(o.kernel.counters == KernelSignals::Counters::tracepoint);
    REQUIRE(o.kernel.cpus.empty());  // no cpuidle counters on this guest
    o.kernel.periods.emplace();
    for (int cpu = 0; cpu < 2; ++cpu) {
      CpuKernelSignals c;
      c.cpu = cpu;
      c.halts = periods;
      c.halt_ns = periods * ns;
      c.outcomes_exact = true;
      o.kernel.cpus.push_back(c);
      for (std::uint64_t i = 0; i < periods; ++i) {
        o.kernel.periods->halt.record(ns);
        o.kernel.periods->halt_residency.record(ns);
      }
    }
    o.kernel.bpf_missing.clear();  // as the daemon's tick with its eBPF program loaded
    kernel.cpuidle_status = sensors.cpuidle_status();
    kernel.record(++tick, o.kernel, o.steal_percent);
  }
  // A tick the program was detached for: nothing counted.
  void detached_tick(std::uint64_t now_ns) {
    Observation o = sensors.sample(now_ns);
    o.kernel.bpf_missing.clear();
    o.kernel.bpf_detached = "nothing to tune, the kernel does not poll: attached for one tick in 10";
    kernel.cpuidle_status = sensors.cpuidle_status();
    kernel.record(++tick, o.kernel, o.steal_percent);
  }
  // The Sensors' own tick on the fake tree, which has no eBPF.
  void tick_without_ebpf(std::uint64_t now_ns) {
    Observation o = sensors.sample(now_ns);
    REQUIRE_FALSE(o.kernel.bpf_missing.empty());
    kernel.cpuidle_status = sensors.cpuidle_status();
    kernel.record(++tick, o.kernel, o.steal_percent);
  }

  json stats(std::optional<double> penalty_ns) const {
    std::optional<ControllerStatus> c;
    if (penalty_ns) {
      c.emplace();
      c->tuner.ladder_ns = Tuner(c->tuner.params).ladder();
      c->tuner.penalty_ns = penalty_ns;
    }
    const DaemonSnapshot snap = make_snapshot(Mode::observe, c, tree.root());
    ShellFacts facts;
    facts.uptime_seconds = 12;
    facts.cpus = {0, 1};
    return stats_to_json(daemon_stats(snap, FleetSeries{}, kernel, facts, nullptr), std::nullopt, false);
  }
};

}  // namespace

TEST_CASE("driverless top: idle entries and halts per CPU, their distribution and what polling would buy") {
  DriverlessGuest g;
  g.counted_tick(5000, 30'000, 1'000'000'000);  // every period 30 µs: 5000/s on each CPU
  const json s = g.stats(40'000.0);
  const std::string top = haltpollctl::render_kernel_top(s, json(), "/run/x", haltpollctl::Screen{120, 0});
  INFO(top);
  CHECK(has_line_starting(top, "idle     no cpuidle states under " + g.tree.root()));
  CHECK(has_line(top, " CPU    IDLE/s   HALTS/s  HALT CPU  MEAN HALT  STEAL"));
  CHECK(has_line(top, "   0      5.0k      5.0k     15.0%    30.0 µs      -"));
  CHECK(has_line(top, "   1      5.0k      5.0k     15.0%    30.0 µs      -"));
  CHECK(has_line_starting(top, " all     10.0k     10.0k     30.0%    30.0 µs "));
  CHECK(has_line_starting(top, "periods  halt residency p50 30."));
  CHECK(top.find(" · 10.0k idle periods/s, all CPUs (tick 1)") != std::string::npos);
  // The bucket holds 30 µs to 1/16: 29.8 µs of polling per period, 14.9 % of each CPU.
  CHECK(
      has_line(top,
               "forecast enabling halt-polling at 50.0 µs would avoid 10.0k halt exits/s for 14.9% poll CPU per CPU (± "
               "25% or 200/s of"));
  CHECK(has_line(top, "         the halts, ± 5 points of poll CPU)"));
  CHECK(has_line(top, "                CAP     AVOIDED/s    HALTS/s  TIMEOUTS/s ≤  POLL CPU/CPU  NET CPU-s/s"));
  CHECK(has_line(top, "               0 ns           0.0      10.0k           0.0          0.0%      +0.0000"));
  CHECK(has_line(top, "            25.0 µs           0.0      10.0k           0.0          0.0%      +0.0000"));
  CHECK(has_line(top, "         *  50.0 µs         10.0k        0.0           0.0         14.9%      +0.1024"));
  CHECK(has_line(top, "           400.0 µs         10.0k        0.0           0.0         14.9%      +0.1024"));
  CHECK(has_line(top,
                 "         halt-exit penalty 40.0 µs (measured by the daemon) · a lower bound of the gain for closed "
                 "loops, exact in"));
  CHECK(has_line(top, "         expectation for open ones"));
  // Not the table of a polling guest.
  CHECK(top.find("MEAN MISS") == std::string::npos);

  // The next tick the program was detached: the rows stay, from the tick it counted.
  g.detached_tick(2'000'000'000);
  const json d = g.stats(40'000.0);
  CHECK(d["kernel_signals"]["tick"] == 2);
  CHECK(d["kernel_signals"]["rows_tick"] == 1);
  const std::string later = haltpollctl::render_kernel_top(d, json(), "/run/x", haltpollctl::Screen{120, 0});
  INFO(later);
  CHECK(has_line(later, "rows     idle periods of tick 1 (1.00 s), the last the power:cpu_idle tracepoint counted"));
  CHECK(has_line(later, "   0      5.0k      5.0k     15.0%    30.0 µs      -"));
  CHECK(later.find("forecast enabling halt-polling at 50.0 µs") != std::string::npos);

  // A short terminal: the rungs give way first, then CPUs.
  const std::string small = haltpollctl::render_kernel_top(s, json(), "/run/x", haltpollctl::Screen{120, 22});
  INFO(small);
  CHECK(lines_of(small).size() <= 22);
  CHECK(has_line(small, "         every rung and the reason: haltpollctl stats --kernel"));
  CHECK(small.find("AVOIDED/s") == std::string::npos);
  CHECK(has_line(small, "   1      5.0k      5.0k     15.0%    30.0 µs      -"));
}

TEST_CASE("driverless stats --kernel: the rows, the forecast per rung, the choice, its error and bound") {
  DriverlessGuest g;
  g.counted_tick(5000, 30'000, 1'000'000'000);
  // No Controller: the default ladder and the unmeasured 20 µs, at which a 30 µs poll does not pay.
  const std::string unmeasured = haltpollctl::render_kernel_stats(g.stats(std::nullopt));
  INFO(unmeasured);
  CHECK(has_line(unmeasured,
                 "last tick, per second (no cpuidle driver: every idle entry is a halt; HALT CPU of `all` in % of "
                 "one CPU):"));
  CHECK(has_line(unmeasured, "   0      5.0k      5.0k     15.0%    30.0 µs      -"));
  CHECK(has_line(unmeasured, "enabling halt-polling would not pay on this load: the tuner (balanced) would keep 0 ns"));
  CHECK(has_line_starting(unmeasured,
                          "  chosen:  no polling (0 ns): at a 20.0 µs halt-exit penalty (not measured here yet"));
  CHECK(has_line(unmeasured, "  halt-exit penalty 20.0 µs (unmeasured: the real guest's probes)"));
  CHECK(has_line(unmeasured, "* 0 ns           0.0      10.0k           0.0          0.0%      +0.0000") == false);
  CHECK(has_line(unmeasured, "  *     0 ns           0.0      10.0k           0.0          0.0%      +0.0000"));

  const std::string st = haltpollctl::render_kernel_stats(g.stats(40'000.0));
  INFO(st);
  CHECK(has_line(st,
                 "enabling halt-polling at 50.0 µs would avoid 10.0k halt exits/s for 14.9% poll CPU per CPU (± 25% or "
                 "200/s of the halts, ± 5 points of poll CPU)"));
  CHECK(
      has_line_starting(st,
                        "  chosen:  50000 ns: avoids 10000 of 10000 halt exits/s, worth 0.4000 CPU-s/s at the 40.0 µs "
                        "halt-exit penalty the daemon measured"));
  CHECK(has_line(st,
                 "  error:   ± 25% or 200/s of the halts, ± 5 points of poll CPU (the discrete-event simulator's "
                 "calibration error against the real guest (docs/simulator.md))"));
  CHECK(
      has_line(st,
               "  bound:   a closed loop's own speed-up (its idle periods shrink once it polls) cannot be seen from a "
               "guest that does not poll: a lower bound of the gain for closed loops, exact in expectation for open "
               "ones"));
  CHECK(has_line(st, std::string("  enable:  ") + kHowToEnableHaltpoll));
  CHECK(st.find("\ntotals over 1 ticks") != std::string::npos);
}

TEST_CASE("driverless views before anything was counted: why there are no rows and no forecast") {
  DriverlessGuest g;
  g.detached_tick(1'000'000'000);
  const json s = g.stats(std::nullopt);
  const json& f = s["kernel_signals"]["forecast"];
  REQUIRE(f.is_object());
  CHECK(f["available"] == false);
  CHECK(f["rungs"].empty());
  const std::string top = haltpollctl::render_kernel_top(s, json(), "/run/x", haltpollctl::Screen{120, 0});
  INFO(top);
  CHECK(has_line_starting(top, "no idle periods counted yet: no cpuidle states under "));
  CHECK(has_line(top,
                 "forecast no forecast: no tick has counted the idle periods yet (the eBPF program is attached for one "
                 "tick in"));
  CHECK(top.find("AVOIDED/s") == std::string::npos);

  // Without eBPF nothing is ever counted: the forecast names what is missing.
  DriverlessGuest bare;
  bare.tick_without_ebpf(1'000'000'000);
  const json b = bare.stats(std::nullopt)["kernel_signals"]["forecast"];
  CHECK(b["available"] == false);
  CHECK(b["reason"].get<std::string>().find("and eBPF is missing: eBPF kernel signals not requested") !=
        std::string::npos);
  const std::string st = haltpollctl::render_kernel_stats(bare.stats(std::nullopt));
  INFO(st);
  CHECK(has_line_starting(st, "no idle periods counted yet: no cpuidle states under "));
  CHECK(has_line_starting(st, "no forecast: it replays the idle periods the eBPF program on power:cpu_idle counts"));
  CHECK(has_line(st, std::string("  enable:  ") + kHowToEnableHaltpoll));
}
