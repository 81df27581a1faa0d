// The fleet series of the Prometheus writer: FleetMetrics fed by the snapshots of a real Controller on
// a fake sysfs tree (cumulative cpuidle counters, steal, mode and reason, pending state file, decisions), the
// exposition checked by the real `promtool check metrics`, and the textfile's mode under the
// unit's UMask=0077.
#include "control/daemon_snapshot.hpp"
#include "control/prometheus.hpp"
#include "sysfs/file_io.hpp"
#include "sysfs/sysfs_edges.hpp"
#include "tuning/controller.hpp"
#include "fake_sysfs.hpp"
#include "fleet_metrics.hpp"
#include "subprocess.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace haltpolld;
using testsupport::FakeSysfs;
using testsupport::TempDir;

namespace {

ControllerOptions options(bool kernel, std::uint32_t static_ns) {
  ControllerOptions o;
  o.kernel_mode = kernel;
  o.cpus = {0, 1};
  o.probe_rate_hz = 0;
  o.tuner.policy = Policy::static_value;
  o.tuner.static_ns = static_ns;
  o.tuner.steal_backoff_percent = 12.5;
  return o;
}

std::string render(const FleetMetrics& f) {
  StatsSnapshot s;
  s.version = "test";
  s.mode = f.series().mode;
  s.fleet = f.series();
  return render_prometheus(s);
}

// The daemon's snapshot of the Controller as it is now: its status carries the last tick's Observation.
DaemonSnapshot snapshot_of(const Controller& c) {
  return make_snapshot(c.options().kernel_mode ? Mode::kernel : Mode::observe, c.status(), "/nonexistent-root");
}

bool has_line(const std::string& text, const std::string& line) { return text.find("\n" + line + "\n") != std::string::npos; }

// promtool reads the exposition on stdin; a temporary file keeps the Subprocess helper one-way.
std::pair<int, std::string> promtool_check_metrics(const std::string& text) {
  TempDir d;
  const std::string file = d.path() + "/m.prom";
  std::ofstream(file) << text;
  auto r = testsupport::run({"/bin/sh", "-c", std::string(PROMTOOL_BIN) + " check metrics < " + file});
  return {r.code, r.out + r.err};
}

}  // namespace

TEST_CASE("fleet series: cumulative cpuidle counters and steal, exactly as the tree has them") {
  FakeSysfs fs;
  TempDir dir;
  fs.set_state(0, 0, "POLL", 1234, 5'000'001);   // 5.000001 s of polling
  fs.set_state(0, 1, "haltpoll", 77, 9'000'000);
  fs.set_state(1, 0, "POLL", 10, 20);
  fs.set_state(1, 1, "haltpoll", 30, 40);
  fs.set_proc_stat(1000, 250);  // 250 USER_HZ ticks of steal
  Controller c(options(false, 0), sysfs_edges(fs.root(), dir.path(), {0, 1}), std::unique_ptr<PoolAccess>{});
  c.start();
  FleetMetrics f;
  f.refresh(snapshot_of(c));
  // Before the first tick there is no Observation, hence no counters: the series are not read apart.
  CHECK(f.series().cpuidle.empty());
  c.tick();
  f.refresh(snapshot_of(c));
  const std::string t = render(f);
  CHECK(has_line(t, "# TYPE haltpoll_kernel_idle_entries_total counter"));
  CHECK(has_line(t, "haltpoll_kernel_idle_entries_total{cpu=\"0\"} 1311"));
  CHECK(has_line(t, "haltpoll_kernel_poll_entries_total{cpu=\"0\"} 1234"));
  CHECK(has_line(t, "haltpoll_kernel_poll_seconds_total{cpu=\"0\"} 5.000001"));
  CHECK(has_line(t, "haltpoll_kernel_halts_total{cpu=\"0\"} 77"));
  CHECK(has_line(t, "haltpoll_kernel_halt_seconds_total{cpu=\"0\"} 9.000000"));
  CHECK(has_line(t, "haltpoll_kernel_poll_seconds_total{cpu=\"1\"} 0.000020"));
  const double hz = static_cast<double>(::sysconf(_SC_CLK_TCK));
  REQUIRE(f.series().steal_seconds.has_value());
  CHECK(*f.series().steal_seconds == Approx(250.0 / hz));
  CHECK(has_line(t, "haltpoll_tuner_steal_backoff_ratio 0.125"));
  CHECK(has_line(t, "haltpoll_tuner_info{policy=\"static\"} 1"));

  // The totals, not the tick's deltas: the next tick's snapshot shows the new totals.
  fs.set_state(0, 0, "POLL", 2000, 6'000'000);
  c.tick();
  f.refresh(snapshot_of(c));
  CHECK(has_line(render(f), "haltpoll_kernel_poll_entries_total{cpu=\"0\"} 2000"));

  auto [rc, out] = promtool_check_metrics(t);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.empty());  // promtool prints lint findings (names, units, HELP) even when it exits 0
}

TEST_CASE("fleet series: no cpuidle states, no per-CPU kernel series (not zeros)") {
  FakeSysfs fs(FakeSysfs::Options{.cpuidle_states = false});
  TempDir dir;
  Controller c(options(false, 0), sysfs_edges(fs.root(), dir.path(), {0, 1}), std::unique_ptr<PoolAccess>{});
  c.start();
  c.tick();  // an Observation, without cpuidle totals
  FleetMetrics f;
  f.refresh(snapshot_of(c));
  REQUIRE(f.series().steal_seconds.has_value());  // the tick's /proc/stat reached the series
  const std::string t = render(f);
  CHECK(t.find("haltpoll_kernel_idle_entries_total") == std::string::npos);
  CHECK(t.find("haltpoll_kernel_poll_seconds_total") == std::string::npos);
  CHECK(has_line(t, "haltpoll_kernel_mode_info{mode=\"observe\",reason=\"observe requested by the configuration\"} 1"));
  auto [rc, out] = promtool_check_metrics(t);
  INFO(out);
  CHECK(rc == 0);
}

TEST_CASE("fleet series: a QoS request at 0 per CPU and reason, the counts, governor and offline CPUs, past promtool") {
  TempDir dir;
  auto render_tick = [&](const FakeSysfs& fs, std::vector<int> cpus) {
    Controller c(options(false, 0), sysfs_edges(fs.root(), dir.path(), std::move(cpus)), std::unique_ptr<PoolAccess>{});
    c.start();
    c.tick();
    FleetMetrics f;
    f.refresh(snapshot_of(c));
    REQUIRE(f.series().polling_overrides);
    const std::string t = render(f);
    auto [rc, out] = promtool_check_metrics(t);
    INFO(t);
    INFO(out);
    CHECK(rc == 0);
    CHECK(out.empty());
    c.stop();
    return t;
  };
  SECTION("cpu_dma_latency held at 0, and CPU 1's own request of 0") {
    FakeSysfs fs;
    fs.set_cpu_dma_latency(0);
    fs.add_holder(4242, "cyclictest", "/dev/cpu_dma_latency");
    fs.set_resume_latency(1, "n/a");
    const std::string t = render_tick(fs, {0, 1});
    CHECK(has_line(t, "# TYPE haltpoll_polling_override gauge"));
    CHECK(has_line(t, "haltpoll_polling_override{cpu=\"0\",reason=\"cpu_dma_latency\"} 1"));
    CHECK(has_line(t, "haltpoll_polling_override{cpu=\"1\",reason=\"cpu_dma_latency\"} 1"));
    CHECK(has_line(t, "haltpoll_polling_override{cpu=\"1\",reason=\"pm_qos_resume_latency_us\"} 1"));
    CHECK(t.find("haltpoll_polling_override{cpu=\"0\",reason=\"pm_qos_resume_latency_us\"}") == std::string::npos);
    CHECK(has_line(t, "haltpoll_polling_unlimited_cpus 2"));
    CHECK(has_line(t, "haltpoll_polling_unknown_cpus 0"));
    CHECK(has_line(t, "haltpoll_cpus_offline 0"));
    CHECK(has_line(t, "haltpoll_cpuidle_governor_info{governor=\"haltpoll\"} 1"));
  }
  SECTION("cpu_dma_latency at 20 µs: the counts at 0 and no per-CPU series") {
    FakeSysfs fs;
    fs.set_cpu_dma_latency(20);
    const std::string t = render_tick(fs, {0, 1});
    CHECK(t.find("haltpoll_polling_override{") == std::string::npos);
    CHECK(t.find("# TYPE haltpoll_polling_override gauge") == std::string::npos);
    CHECK(has_line(t, "haltpoll_polling_unlimited_cpus 0"));
  }
  SECTION("malformed: the CPUs are counted as unknown, not as polling") {
    FakeSysfs fs;
    fs.write_bytes("dev/cpu_dma_latency", "0\n");  // text, not the kernel's s32
    fs.set_resume_latency(0, "-1");
    const std::string t = render_tick(fs, {0, 1});
    CHECK(has_line(t, "haltpoll_polling_unlimited_cpus 0"));
    CHECK(has_line(t, "haltpoll_polling_unknown_cpus 2"));
  }
  SECTION("the menu governor and an offline CPU") {
    FakeSysfs fs(FakeSysfs::Options{.governor = "menu", .cpus = 4});
    fs.write("sys/devices/system/cpu/online", "0,2-3");
    const std::string t = render_tick(fs, {});
    CHECK(has_line(t, "haltpoll_cpuidle_governor_info{governor=\"menu\"} 1"));
    CHECK(has_line(t, "haltpoll_cpus_offline 1"));
  }
}

TEST_CASE("fleet series: no overrides from a source that does not read them") {
  FleetMetrics f;
  ControllerStatus st;
  st.last_observation = Observation{};
  f.refresh(make_snapshot(Mode::observe, st, "/nonexistent-root"));
  CHECK_FALSE(f.series().polling_overrides);
  CHECK(render(f).find("haltpoll_polling_") == std::string::npos);
}

TEST_CASE("fleet series: mode and reason") {
  TempDir dir;
  SECTION("kernel mode active: reason empty") {
    FakeSysfs fs;
    Controller c(options(true, 30000), sysfs_edges(fs.root(), dir.path(), {0, 1}), std::unique_ptr<PoolAccess>{});
    c.start();
    FleetMetrics f;
    f.refresh(snapshot_of(c));
    CHECK(has_line(render(f), "haltpoll_kernel_mode_info{mode=\"kernel\",reason=\"\"} 1"));
    c.stop();
  }
  SECTION("kernel mode asked for on a menu-governed guest: the controller's reason") {
    FakeSysfs fs(FakeSysfs::Options{.governor = "menu"});
    Controller c(options(true, 30000), sysfs_edges(fs.root(), dir.path(), {0, 1}), std::unique_ptr<PoolAccess>{});
    c.start();
    FleetMetrics f;
    f.refresh(snapshot_of(c));
    CHECK(f.series().mode == "observe");
    CHECK(f.series().mode_reason.find("'menu'") != std::string::npos);
    CHECK(render(f).find("haltpoll_kernel_mode_info{mode=\"observe\",reason=\"cpuidle current_governor is 'menu'") !=
          std::string::npos);
  }
  SECTION("no controller status: observe, and the reason says the configuration (nothing to report)") {
    FleetMetrics f;
    f.refresh(make_snapshot(Mode::observe, std::nullopt, "/nonexistent-root"));
    CHECK(f.series().mode == "observe");
    CHECK(f.series().cpuidle.empty());
    CHECK_FALSE(f.series().steal_seconds.has_value());
  }
}

TEST_CASE("fleet series: a state file this run could not put back is pending, our own is not") {
  FakeSysfs fs;
  TempDir dir;
  SECTION("own state file while tuning") {
    Controller c(options(true, 30000), sysfs_edges(fs.root(), dir.path(), {0, 1}), std::unique_ptr<PoolAccess>{});
    c.start();
    c.tick();  // the static value differs from the tree's 200000: originals saved, value written
    REQUIRE(std::filesystem::exists(c.state_file()));
    FleetMetrics f;
    f.refresh(snapshot_of(c));
    CHECK_FALSE(f.series().state_file_pending);
    CHECK(has_line(render(f), "haltpoll_state_file_pending 0"));
    c.stop();
  }
  SECTION("a broken state file left by an earlier run") {
    std::ofstream(dir.path() + "/haltpoll-params.json") << "{not json";
    Controller c(options(true, 30000), sysfs_edges(fs.root(), dir.path(), {0, 1}), std::unique_ptr<PoolAccess>{});
    c.start();  // recover() refuses the file and leaves it in place
    FleetMetrics f;
    f.refresh(snapshot_of(c));
    CHECK(f.series().state_file_pending);
    CHECK(has_line(render(f), "haltpoll_state_file_pending 1"));
  }
}

TEST_CASE("fleet series: decisions by action and the time of the last change") {
  FakeSysfs fs;
  TempDir dir;
  Controller c(options(true, 30000), sysfs_edges(fs.root(), dir.path(), {0, 1}), std::unique_ptr<PoolAccess>{});
  c.start();
  FleetMetrics f;
  f.refresh(snapshot_of(c));
  CHECK(render(f).find("haltpoll_tuner_last_change_timestamp_seconds") == std::string::npos);
  const double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::array<std::uint64_t, 5> expect{};
  bool changed = false;
  for (int i = 0; i < 5; ++i) {
    Decision d = c.tick();
    ++expect[static_cast<std::size_t>(d.action)];
    changed |= d.changed();
    f.record(d);
  }
  REQUIRE(changed);  // 200000 -> 30000 on the first tick
  REQUIRE(f.series().decisions.size() == expect.size());
  for (Action a : {Action::hold, Action::grow, Action::shrink, Action::set, Action::revert}) {
    const auto& d = f.series().decisions[static_cast<std::size_t>(a)];
    CHECK(d.action == to_string(a));
    CHECK(d.count == expect[static_cast<std::size_t>(a)]);
  }
  const std::string t = render(f);
  for (Action a : {Action::hold, Action::grow, Action::shrink, Action::set, Action::revert})
    CHECK(has_line(t, std::string("haltpoll_tuner_decisions_total{action=\"") + to_string(a) + "\"} " +
                          std::to_string(expect[static_cast<std::size_t>(a)])));
  REQUIRE(f.series().last_change_unix_seconds.has_value());
  CHECK(*f.series().last_change_unix_seconds >= before);
  // Rendered to the millisecond, not rounded to nine digits (ten seconds of a Unix time).
  const std::string key = "\nhaltpoll_tuner_last_change_timestamp_seconds ";
  const auto at = t.find(key);
  REQUIRE(at != std::string::npos);
  CHECK(std::stod(t.substr(at + key.size())) == Approx(*f.series().last_change_unix_seconds).epsilon(0).margin(0.001));
  auto [rc, out] = promtool_check_metrics(t);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.empty());
  c.stop();
}

TEST_CASE("textfile: mode 0644 whatever the umask, so node_exporter's user can read it") {
  TempDir dir;
  const std::string path = dir.path() + "/haltpolld.prom";
  const mode_t old = ::umask(077);
  // The daemon writes its textfile with this mode (daemon.cpp, write_textfile).
  const int err = replace_file_atomically(path, "haltpoll_uptime_seconds 1\n", {.mode = 0644});
  ::umask(old);
  REQUIRE(err == 0);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0644);
}

TEST_CASE("eBPF kernel series: outcomes, skipped IPIs, limits and idle-period histograms pass promtool") {
  KernelSignals k;
  k.elapsed_ns = 1'000'000'000;
  for (int cpu = 0; cpu < 2; ++cpu) {
    CpuKernelSignals c;
    c.cpu = cpu;
    c.poll_entries = 1000;
    c.halts = 10;
    c.poll_hits = 995;
    c.poll_misses = 5;
    c.outcomes_exact = true;
    c.ipi_skipped = 900;
    c.poll_limit_ns = 50000;
    c.limit_grows = 3;
    c.limit_shrinks = 1;
    if (cpu == 0) c.steal_ns = 250'000'000;  // CPU1's /proc/stat line is missing: no sample for it
    k.cpus.push_back(c);
  }
  IdlePeriodHistograms h;
  for (std::uint64_t ns : {2000, 3000, 9000}) h.poll_hit.record(ns);
  h.poll_halt.record(120000);
  h.halt.record(5'000'000);
  k.periods = h;
  StatsSnapshot s;
  s.kernel_signals.record(1, k, 0.0);
  const std::string t = render_prometheus(s);
  CHECK(t.find("haltpoll_kernel_poll_hits_total{cpu=\"1\"} 995") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_ipi_skipped_total{cpu=\"0\"} 900") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_poll_limit_seconds{cpu=\"0\"} 5e-05") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_steal_seconds_total{cpu=\"0\"} 0.25\n") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_steal_seconds_total{cpu=\"1\"}") == std::string::npos);
  CHECK(t.find("haltpoll_kernel_poll_limit_changes_total{cpu=\"0\",direction=\"grow\"} 3") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_idle_period_seconds_count{outcome=\"poll_hit\"} 3") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_idle_period_seconds_bucket{outcome=\"halt\",le=\"+Inf\"} 1") != std::string::npos);
  auto [rc, out] = promtool_check_metrics(t);
  CHECK(rc == 0);
  CHECK(out.empty());
}

// The worker families are generated from the library's counter table: with a worker whose every
// counter is set, the exposition must still pass promtool's lint (names, units, HELP, _total).
TEST_CASE("worker series of every HALTPOLL_WORKER_COUNTERS counter pass promtool") {
  haltpoll::WorkerStats w;
  w.cpu = 1;
  std::uint64_t n = 0;
#define FILL(name, kind, source, help) w.name = ++n * 1000;
  HALTPOLL_WORKER_COUNTERS(FILL)
#undef FILL
  StatsSnapshot s;
  s.version = "test";
  s.mode = "observe";
  s.cpus.push_back(CpuStats::of(w, {1000, 2000}));
  const std::string t = render_prometheus(s);
  CHECK(t.find("haltpoll_worker_tasks_total{cpu=\"1\"} 1000\n") != std::string::npos);
  auto [rc, out] = promtool_check_metrics(t);
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.empty());
}
