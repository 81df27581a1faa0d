// Controller on a fake tree, with and without a (fake) pool: effective mode and reasons, kernel
// writes and restore, degrade on write failure, decisions ring buffer, reload; and on a guest that
// is no kernel at all (its signals, parameters and time are the test's), as a simulated guest
// drives it.
#include "control/controller_json.hpp"
#include "sysfs/sysfs_edges.hpp"
#include "tuning/controller.hpp"
#include "fake_sysfs.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

using namespace haltpolld;
using testsupport::FakeSysfs;
using testsupport::TempDir;

namespace {

// A pool whose probes run inline, whose workers "poll" a fixed share of the time.
class FakePool final : public PoolAccess {
 public:
  std::vector<int> cpus() const override { return {0, 1}; }
  ProbePath submit(int, std::function<void()> task) override {
    task();
    return ProbePath::park_path;
  }
  std::vector<PoolCounters> counters() const override {
    std::lock_guard l(mu_);
    reads_ += 1;
    std::vector<PoolCounters> out;
    for (int c : {0, 1}) {
      PoolCounters p;
      p.cpu = c;
      p.poll_hits = reads_ * 10;
      p.poll_misses = reads_ * 10;
      p.poll_ns = reads_ * 1000;
      p.window_ns = cap_;
      p.tasks_run = reads_ * 20;
      out.push_back(p);
    }
    return out;
  }
  void set_window_cap_ns(std::uint64_t ns) override { cap_ = ns; }
  std::uint64_t window_cap_ns() const override { return cap_; }
  std::atomic<std::uint64_t> cap_{200000};

 private:
  mutable std::mutex mu_;
  mutable std::uint64_t reads_ = 0;
};

ControllerOptions opts(bool kernel) {
  ControllerOptions o;
  o.kernel_mode = kernel;
  o.probe_rate_hz = 0;
  o.tuner.policy = Policy::static_value;
  o.tuner.static_ns = 30000;
  return o;
}

// A haltpoll guest in virtual time: one object is the three edges, and nothing touches a file or
// reads a clock. Each tick sees 1000 polls per CPU, 100 of which end in a halt.
class VirtualGuest final : public KernelSignalSource, public HaltpollActuator, public Clock {
 public:
  std::uint64_t now_ns = 5'000'000'000;
  std::int64_t wall_ms = 1'700'000'000'000;
  std::uint32_t poll_ns = 200000;
  std::vector<std::uint32_t> writes;
  std::vector<std::string> order;  // every write and reset, in the order they came
  int limit_resets = 0;
  std::optional<std::uint32_t> saved;

  Observation sample(std::uint64_t now) override {
    Observation o;
    if (last_) {
      o.elapsed_ns = now - *last_;
      o.kernel.elapsed_ns = o.elapsed_ns;
      for (int cpu : {0, 1}) {
        const CpuIdleDelta d{cpu, 1000, 5'000'000, 100, 400'000'000};
        o.cpuidle.push_back(d);
        o.kernel.cpus.push_back(derive_kernel_signals(d));
      }
      o.cpu_source = "model";
    }
    last_ = now;
    return o;
  }
  bool set_idle_trace_attached(bool, std::string) override { return false; }
  SignalSourceStatus status() const override { return {{0, 1}, true, "POLL,haltpoll (model)", "none", "a model"}; }

  KernelHaltpollState detect() const override { return {true, "haltpoll", "haltpoll", true, ""}; }
  std::optional<std::string> read(const char* name) const override {
    if (std::string(name) == "guest_halt_poll_ns") return std::to_string(poll_ns);
    return std::nullopt;
  }
  std::optional<std::uint32_t> read_poll_ns() const override { return poll_ns; }
  ActuatorResult set_poll_ns(std::uint32_t ns) override {
    if (!saved) saved = poll_ns;
    writes.push_back(ns);
    order.push_back("ns " + std::to_string(ns));
    poll_ns = ns;
    return {true, true, 0, ""};
  }
  ActuatorResult set_grow_start_ns(std::uint32_t ns) override {
    order.push_back("grow_start " + std::to_string(ns));
    return {true, true, 0, ""};
  }
  ActuatorResult reset_poll_limits() override {
    order.push_back("reset");
    ++limit_resets;
    return {true, true, 0, ""};
  }
  ActuatorResult recover() override { return {}; }
  ActuatorResult restore() override {
    if (saved) poll_ns = *saved;
    saved.reset();
    return {};
  }
  bool has_saved_originals() const override { return saved.has_value(); }
  const std::string& blocked_reason() const override { return blocked_; }
  std::string recheck_blocked() override { return {}; }
  std::string params_location() const override { return "the model's parameters"; }
  std::string originals_location() const override { return "the model's memory"; }

  std::uint64_t steady_ns() const override { return now_ns; }
  std::int64_t unix_ms() const override { return wall_ms; }

  void advance_s(int s) {
    now_ns += static_cast<std::uint64_t>(s) * 1'000'000'000;
    wall_ms += s * 1000;
  }

 private:
  std::optional<std::uint64_t> last_;
  std::string blocked_;
};

GuestEdges edges_of(const std::shared_ptr<VirtualGuest>& g) { return {g, g, g}; }

}  // namespace

TEST_CASE("the Controller drives a guest that is not the kernel, in the guest's own time") {
  auto guest = std::make_shared<VirtualGuest>();
  Controller c(opts(true), edges_of(guest), std::unique_ptr<PoolAccess>{});
  c.start();
  guest->advance_s(3);
  auto d = c.tick();
  CHECK(d.guest_halt_poll_ns == 30000);
  CHECK(d.applied_kernel);
  CHECK(d.applied_reset);  // lowered from 200000: the limits are reset through the actuator
  CHECK(guest->writes == std::vector<std::uint32_t>{30000});
  CHECK(guest->limit_resets == 1);
  // The tick's length and the log's timestamp are the guest's clock, not the machine's.
  REQUIRE(c.last_observation());
  CHECK(c.last_observation()->elapsed_ns == 3'000'000'000ULL);
  CHECK(c.last_observation()->kernel.total(&CpuKernelSignals::halts) == 200);
  REQUIRE(c.decisions().size() == 1);
  CHECK(c.decisions()[0].time_ms == guest->wall_ms);
  auto s = c.status();
  CHECK(s.kernel_effective);
  CHECK(s.kernel.params_dir == "the model's parameters");
  CHECK(s.kernel.state_file == "the model's memory");
  CHECK(s.kernel.poll_limit_resets == 1);
  CHECK(s.sensors.cpuidle == "POLL,haltpoll (model)");
  CHECK(c.cpuidle_status() == "POLL,haltpoll (model)");
  c.stop();
  CHECK(guest->poll_ns == 200000);
  CHECK(!guest->saved);
}

TEST_CASE("grow_start at the cap: the limits reset after both the cap and grow_start are written") {
  // A CPU that halts between the writes must not grow by the old grow_start once the limits are
  // zeroed: the cap (whose refusal stops everything), grow_start, then the reset.
  auto guest = std::make_shared<VirtualGuest>();
  guest->poll_ns = 50000;
  auto o = opts(true);
  o.tuner.static_ns = 100000;
  o.tuner.grow_start_at_cap = true;
  Controller c(o, edges_of(guest), std::unique_ptr<PoolAccess>{});
  c.start();
  guest->advance_s(1);
  auto d = c.tick();
  CHECK(d.guest_halt_poll_ns == 100000);
  CHECK(d.applied_grow_start);
  CHECK(d.applied_reset);  // raised, with grow_start at the cap
  CHECK(guest->order == std::vector<std::string>{"ns 100000", "grow_start 100000", "reset"});
  c.stop();
}

TEST_CASE("a Controller without one of its edges is refused") {
  auto guest = std::make_shared<VirtualGuest>();
  GuestEdges e = edges_of(guest);
  e.clock = nullptr;
  CHECK_THROWS_AS(Controller(opts(false), e, std::unique_ptr<PoolAccess>{}), std::invalid_argument);
}

TEST_CASE("kernel mode on a haltpoll guest writes, and stop() restores") {
  FakeSysfs fs;
  TempDir dir;
  Controller c(opts(true), sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  auto d = c.tick();
  CHECK(d.guest_halt_poll_ns == 30000);
  CHECK(d.applied_kernel);
  CHECK(fs.param("guest_halt_poll_ns") == "30000");
  auto s = status_to_json(c.status());
  CHECK(s["effective_mode"] == "kernel");
  CHECK(s["tuning_target"] == "kernel");
  CHECK(s["kernel"]["originals_saved"] == true);
  CHECK(std::filesystem::exists(c.state_file()));
  c.tick();
  auto log = decisions_to_json(c.decisions());
  REQUIRE(log.size() == 2);
  CHECK(log[0]["action"] == "set");
  CHECK(log[1]["action"] == "hold");
  c.stop();
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  CHECK(!std::filesystem::exists(c.state_file()));
}

TEST_CASE("the tick's Observation carries the polling overrides the sensors read") {
  FakeSysfs fs;
  TempDir dir;
  fs.set_cpu_dma_latency(0);
  fs.set_resume_latency(1, "n/a");
  Controller c(opts(true), sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  c.tick();
  const auto obs = c.last_observation();
  REQUIRE(obs);
  REQUIRE(obs->kernel.overrides);
  CHECK(obs->kernel.overrides->unlimited_cpus() == std::vector<int>{0, 1});
  CHECK(obs->kernel.polls_without_limit(0));
  CHECK(obs->kernel.polls_without_limit(1));
  CHECK_FALSE(obs->kernel.polls_without_limit(2));
  CHECK(obs->kernel.overrides->cpus[1].reasons.size() == 2);  // the global request and CPU 1's own
  // The status the tick left behind has the same.
  const auto st = c.tick_status();
  REQUIRE(st);
  REQUIRE(st->last_observation);
  CHECK(st->last_observation->kernel.overrides->unlimited_cpus() == std::vector<int>{0, 1});
  // Cleared, the next tick says so.
  fs.set_cpu_dma_latency(FakeSysfs::kNoLatencyConstraint);
  fs.set_resume_latency(1, "0");
  c.tick();
  CHECK(c.last_observation()->kernel.overrides->unlimited_cpus().empty());
  CHECK_FALSE(c.last_observation()->kernel.polls_without_limit(0));
  c.stop();
}

TEST_CASE("observe mode decides but never writes") {
  FakeSysfs fs;
  TempDir dir;
  Controller c(opts(false), sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  auto d = c.tick();
  CHECK(d.guest_halt_poll_ns == 30000);
  CHECK(!d.applied_kernel);
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  CHECK(status_to_json(c.status())["kernel_mode_inactive_reason"] == "mode is observe");
  c.stop();
}

TEST_CASE("driver none: kernel mode is inactive with the precise reason and the pool cap is tuned instead") {
  FakeSysfs::Options fo;
  fo.driver = "none";
  fo.governor = "menu";
  fo.cpuidle_states = false;
  FakeSysfs fs(fo);
  TempDir dir;
  auto pool = std::make_unique<FakePool>();
  auto* raw = pool.get();
  Controller c(opts(true), sysfs_edges(fs.root(), dir.path()), std::move(pool));
  c.start();
  auto d = c.tick();
  CHECK(!d.applied_kernel);
  CHECK(d.applied_pool);
  CHECK(raw->cap_ == 30000);
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  auto s = status_to_json(c.status());
  CHECK(s["effective_mode"] == "observe");
  CHECK(s["tuning_target"] == "pool");
  CHECK(s["kernel_mode_inactive_reason"].get<std::string>().find("current_driver is 'none'") != std::string::npos);
  CHECK(s["last_observation"]["cpu_source"] == "pool");
  c.stop();
  CHECK(!std::filesystem::exists(c.state_file()));
}

TEST_CASE("a failed write degrades to observe with the reason and a reload retries") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(true);
  Controller c(o, sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  REQUIRE(c.tick().applied_kernel);
  std::filesystem::remove(fs.params_dir() + "/guest_halt_poll_ns");
  o.tuner.static_ns = 60000;
  c.update(o);
  auto d = c.tick();
  CHECK(!d.applied_kernel);
  CHECK(d.reason.find("degraded to observe") != std::string::npos);
  auto s = status_to_json(c.status());
  CHECK(s["effective_mode"] == "observe");
  CHECK(s["kernel"]["degraded_reason"].get<std::string>().find("No such file") != std::string::npos);
  fs.set_param("guest_halt_poll_ns", "30000");
  c.update(o);
  CHECK(c.tick().applied_kernel);
  c.stop();
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
}

TEST_CASE("a write refused after others degrades to observe and puts back what the run changed") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(true);
  o.tuner.manage_grow_start = true;
  o.tuner.static_ns = 20000;  // below grow_start: the tuner moves grow_start with the cap
  Controller c(o, sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  REQUIRE(c.tick().applied_kernel);
  REQUIRE(fs.param("guest_halt_poll_ns") == "20000");
  REQUIRE(fs.param("guest_halt_poll_grow_start") != "50000");
  // The cap goes through, then grow_start's write is refused (a file turned into a directory).
  const std::string gs = fs.params_dir() + "/guest_halt_poll_grow_start";
  std::filesystem::remove(gs);
  std::filesystem::create_directory(gs);
  o.tuner.static_ns = 8000;
  c.update(o);
  auto d = c.tick();
  CHECK(d.reason.find("degraded to observe") != std::string::npos);
  CHECK(status_to_json(c.status())["effective_mode"] == "observe");
  // Not at the stop: at once, while the daemon goes on in observe mode.
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  CHECK(std::filesystem::exists(c.state_file()));  // grow_start could not be put back: kept for the next start
  const auto writes = std::filesystem::last_write_time(fs.params_dir() + "/guest_halt_poll_ns");
  for (int i = 0; i < 3; ++i) c.tick();
  CHECK(std::filesystem::last_write_time(fs.params_dir() + "/guest_halt_poll_ns") == writes);  // no more writes
  c.stop();
}

TEST_CASE("a tick long after the last (a stopped daemon, a suspended guest) decides nothing from the gap") {
  auto g = std::make_shared<VirtualGuest>();
  auto o = opts(true);
  o.tuner.policy = Policy::budget;
  o.tuner.max_poll_cpu_percent = 10;  // late after 2 × interval_ms (1 s) + 2 s
  Controller c(o, edges_of(g), std::unique_ptr<PoolAccess>{});
  c.start();
  Decision before;
  for (int i = 0; i < 4; ++i) {
    g->advance_s(1);
    before = c.tick();
  }
  g->advance_s(30);  // SIGSTOP, 30 s, SIGCONT
  const auto late = c.tick();
  CHECK(late.reason.find("nothing decided from rates over the gap") != std::string::npos);
  CHECK_FALSE(late.poll_cpu_percent.has_value());
  CHECK(late.guest_halt_poll_ns == before.guest_halt_poll_ns);
  CHECK_FALSE(late.changed());
  // The next tick measures an ordinary interval again.
  g->advance_s(1);
  const auto next = c.tick();
  CHECK(next.reason.find("over the gap") == std::string::npos);
  c.stop();
}

namespace {

// The steady clock of a test, moved by hand.
struct ManualClock final : Clock {
  std::uint64_t now_ns = 1'000'000'000;
  std::uint64_t steady_ns() const override { return now_ns; }
  std::int64_t unix_ms() const override { return 1'700'000'000'000; }
};

}  // namespace

TEST_CASE("a tick during which a CPU went offline or came back decides nothing from its rates") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(true);
  o.tuner.policy = Policy::budget;
  o.tuner.max_poll_cpu_percent = 10;
  auto clock = std::make_shared<ManualClock>();
  GuestEdges edges = sysfs_edges(fs.root(), dir.path());
  edges.clock = clock;
  Controller c(o, std::move(edges), std::unique_ptr<PoolAccess>{});
  c.start();
  std::uint64_t poll_us = 0;
  auto second = [&](bool cpu1) {
    // Every online CPU polls 80 % of each second: far over the 10 % budget.
    poll_us += 800'000;
    fs.set_state(0, 0, "POLL", poll_us / 100, poll_us);
    if (cpu1) fs.set_state(1, 0, "POLL", poll_us / 100, poll_us);
    clock->now_ns += 1'000'000'000;
    return c.tick();
  };
  // CPU 1 goes offline (the online list, its cpuidle directory) during the first tick.
  fs.write("sys/devices/system/cpu/online", "0");
  std::filesystem::remove_all(fs.root() + "/sys/devices/system/cpu/cpu1/cpuidle");
  const auto held = second(false);
  CHECK(held.reason.find("CPU 1 went offline during the tick; nothing decided from its rates") != std::string::npos);
  CHECK_FALSE(held.changed());
  CHECK_FALSE(held.poll_cpu_percent.has_value());
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  // A whole tick on CPU 0 alone: the budget is crossed, the tuner acts.
  const auto acted = second(false);
  CHECK(acted.changed());
  REQUIRE(acted.poll_cpu_percent);
  CHECK(*acted.poll_cpu_percent == Approx(80.0));
  const std::string after = fs.param("guest_halt_poll_ns");
  // CPU 1 comes back: that tick holds too, whatever its counters say.
  fs.write("sys/devices/system/cpu/online", "0-1");
  fs.set_state(1, 0, "POLL", 0, 0);
  fs.set_state(1, 1, "haltpoll", 0, 0);
  const auto back = second(false);
  CHECK(back.reason.find("CPU 1 came online") != std::string::npos);
  CHECK_FALSE(back.changed());
  CHECK(fs.param("guest_halt_poll_ns") == after);
  REQUIRE(c.status().last_observation);
  CHECK(c.status().sensors.cpus == std::vector<int>{0, 1});
  c.stop();
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
}

TEST_CASE("turning kernel mode off by reload restores the originals") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(true);
  Controller c(o, sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  c.tick();
  REQUIRE(fs.param("guest_halt_poll_ns") == "30000");
  o.kernel_mode = false;
  c.update(o);
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  c.stop();
}

TEST_CASE("the decision log is a bounded ring, newest last") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(false);
  o.decision_log_size = 3;
  Controller c(o, sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  for (int i = 0; i < 5; ++i) c.tick();
  auto log = decisions_to_json(c.decisions());
  REQUIRE(log.size() == 3);
  CHECK(log[2]["tick"] == 5);
  CHECK(log[0]["tick"] == 3);
  c.stop();
}

TEST_CASE("with probes, latencies reach the observation") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(false);
  o.probe_rate_hz = 2000;
  Controller c(o, sysfs_edges(fs.root(), dir.path()), std::make_unique<FakePool>());
  c.start();
  // Ticks until one has samples: the prober thread's first probes may be late on a loaded machine.
  nlohmann::json s;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    c.tick();
    s = status_to_json(c.status());
  } while (s["last_observation"]["latency_samples"].get<std::uint64_t>() == 0 && std::chrono::steady_clock::now() < deadline);
  CHECK(s["last_observation"]["latency_samples"].get<std::uint64_t>() > 0);
  CHECK(s["last_observation"]["latency_source"] == "probes");
  CHECK(s["probes"]["per_cpu"].size() == 2);
  c.stop();
}

TEST_CASE("kernel mode with manage_grow_start writes grow_start next to a small cap and restores it") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(true);
  o.tuner.static_ns = 25000;
  o.tuner.manage_grow_start = true;
  Controller c(o, sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  auto d = c.tick();
  CHECK(d.guest_halt_poll_ns == 25000);
  REQUIRE(d.grow_start_ns);
  CHECK(*d.grow_start_ns == 12500);
  CHECK(d.applied_grow_start);
  CHECK(fs.param("guest_halt_poll_grow_start") == "12500");
  auto log = decisions_to_json(c.decisions());
  CHECK(log.back()["grow_start_ns"] == 12500);
  CHECK(status_to_json(c.status())["tuner"]["halt_exit_penalty"]["ns"].is_null());
  c.stop();
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  CHECK(fs.param("guest_halt_poll_grow_start") == "50000");
}

TEST_CASE("a busy guest starts a sweep, and the controller says it is searching (the daemon ticks faster)") {
  FakeSysfs fs;
  TempDir dir;
  auto o = opts(false);
  o.tuner.policy = Policy::balanced;
  Controller c(o, sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  c.start();
  CHECK(c.searching());  // the tuner's first look comes at the sweep's pace
  c.tick();              // an idle guest: nothing to search
  CHECK(!c.searching());
  // Frequent halts on both CPUs: 2000 per tick, 100 µs each.
  for (int c0 : {0, 1}) fs.set_state(c0, 1, "haltpoll", 2000, 200000);
  c.tick();
  CHECK(c.searching());
  CHECK(c.status().tuner.phase != "steady");
  c.stop();
}

TEST_CASE("hardening: kernel mode comes back on the next tick once the refused state file is removed or repaired") {
  FakeSysfs fs;
  TempDir dir;
  Controller c(opts(true), sysfs_edges(fs.root(), dir.path()), std::unique_ptr<PoolAccess>{});
  const std::string state = c.state_file();
  std::ofstream(state) << "{\"version\": 2}\n";  // in the private directory, but not a file to apply
  c.start();
  CHECK_FALSE(c.tick().applied_kernel);
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  REQUIRE(status_to_json(c.status())["effective_mode"] == "observe");
  CHECK_FALSE(c.tick().applied_kernel);  // nothing changed: still refused, and the file is kept
  CHECK(std::filesystem::exists(state));

  SECTION("removed") {
    std::filesystem::remove(state);
    CHECK(c.tick().applied_kernel);
    CHECK(fs.param("guest_halt_poll_ns") == "30000");
    auto s = status_to_json(c.status());
    CHECK(s["effective_mode"] == "kernel");
    CHECK(s["kernel_mode_inactive_reason"].is_null());
    CHECK(s["kernel"]["recovery"].get<std::string>().find("was removed") != std::string::npos);
    c.stop();
    CHECK(fs.param("guest_halt_poll_ns") == "200000");
  }
  SECTION("repaired: its values are applied first, then tuning resumes on top of them") {
    const nlohmann::json fixed = {{"version", 1},
                                  {"sysfs_root", fs.root()},
                                  {"pid", 1},
                                  {"params",
                                   {{"guest_halt_poll_ns", "150000"},
                                    {"guest_halt_poll_grow", "2"},
                                    {"guest_halt_poll_grow_start", "50000"},
                                    {"guest_halt_poll_shrink", "2"},
                                    {"guest_halt_poll_allow_shrink", "Y"}}}};
    std::ofstream(state) << fixed.dump();
    CHECK(c.tick().applied_kernel);
    CHECK(fs.param("guest_halt_poll_ns") == "30000");
    auto s = status_to_json(c.status());
    CHECK(s["effective_mode"] == "kernel");
    CHECK(s["kernel"]["recovery"].get<std::string>().find("restored the haltpoll parameters saved by pid 1") !=
          std::string::npos);
    c.stop();
    CHECK(fs.param("guest_halt_poll_ns") == "150000");  // the repaired file's originals
  }
  SECTION("changed but still not valid: still refused, with the new reason") {
    std::ofstream(state) << "{\"version\": 1}\n";
    CHECK_FALSE(c.tick().applied_kernel);
    auto s = status_to_json(c.status());
    CHECK(s["effective_mode"] == "observe");
    CHECK(s["kernel"]["recovery"].get<std::string>().find("params is not an object") != std::string::npos);
    CHECK(fs.param("guest_halt_poll_ns") == "200000");
  }
}
