// Sensors against a fake sysfs tree: cpuidle deltas by state name, steal, a guest without states, CPUs
// coming and going, steal counts that jump or go backwards, and early ticks.
#include "cpuidle_totals.hpp"
#include "fake_sysfs.hpp"
#include "sysfs/sensors.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <filesystem>

#include <unistd.h>

using namespace haltpolld;
using testsupport::FakeSysfs;

TEST_CASE("cpuidle deltas per CPU, POLL found by name, the rest counted as halt") {
  FakeSysfs fs;
  Sensors s(fs.root(), {});
  REQUIRE(s.cpus() == std::vector<int>{0, 1});
  auto first = s.sample(1'000'000'000);
  CHECK(first.elapsed_ns == 0);
  CHECK(!first.poll_cpu_percent);
  // In 1 s: CPU0 polled 100 ms in 1000 entries, halted 500 ms in 100; CPU1 polled 20 ms.
  fs.set_state(0, 0, "POLL", 1000, 100000);
  fs.set_state(0, 1, "haltpoll", 100, 500000);
  fs.set_state(1, 0, "POLL", 10, 20000);
  fs.set_state(1, 1, "haltpoll", 5, 900000);
  fs.set_proc_stat(90, 10);  // 10 of 100 new ticks stolen (the base line has 150 + 0; one cpuN line)
  auto o = s.sample(2'000'000'000);
  CHECK(o.elapsed_ns == 1'000'000'000);
  REQUIRE(o.poll_cpu_percent);
  CHECK(*o.poll_cpu_percent == Approx(10.0));
  CHECK(*o.mean_poll_cpu_percent == Approx(6.0));
  CHECK(*o.total_poll_cpu_percent == Approx(12.0));
  REQUIRE(o.cpuidle.size() == 2);
  CHECK(o.cpuidle[0].poll_usage == 1000);
  CHECK(o.cpuidle[0].poll_ns == 100'000'000);
  CHECK(o.cpuidle[0].halt_usage == 100);
  CHECK(*o.wakes_per_second == Approx(1010.0));
  REQUIRE(o.steal_percent);
  CHECK(*o.steal_percent == Approx(10.0));
  CHECK(s.cpuidle_status() == "states POLL,haltpoll");
}

TEST_CASE("steal per CPU from the cpuN lines of /proc/stat, beside the aggregate") {
  FakeSysfs fs;
  Sensors s(fs.root(), {});
  fs.set_proc_stat_text(
      "cpu  200 0 100 1000 0 0 0 0 0 0\n"
      "cpu0 100 0 50 500 0 0 0 0 0 0\n"
      "cpu1 100 0 50 500 0 0 0 0 0 0\n"
      "intr 0\n");
  s.sample(0);
  // In 1 s (100 ticks per CPU at USER_HZ 100): CPU0 lost 30 ticks to the host, CPU1 none.
  fs.set_state(0, 0, "POLL", 10, 1000);
  fs.set_state(1, 0, "POLL", 10, 1000);
  fs.set_proc_stat_text(
      "cpu  270 0 100 1100 0 0 0 30 0 0\n"
      "cpu0 140 0 50 530 0 0 0 30 0 0\n"
      "cpu1 130 0 50 570 0 0 0 0 0 0\n"
      "intr 0\n");
  auto o = s.sample(1'000'000'000);
  REQUIRE(o.steal_percent);
  CHECK(*o.steal_percent == Approx(15.0));  // 30 of 200
  REQUIRE(o.kernel.cpus.size() == 2);
  REQUIRE(o.kernel.cpus[0].steal_percent);
  CHECK(*o.kernel.cpus[0].steal_percent == Approx(30.0));  // 30 of CPU0's 100
  REQUIRE(o.kernel.cpus[0].steal_ns);
  CHECK(*o.kernel.cpus[0].steal_ns == 30 * (1'000'000'000u / static_cast<std::uint64_t>(::sysconf(_SC_CLK_TCK))));
  REQUIRE(o.kernel.cpus[1].steal_percent);
  CHECK(*o.kernel.cpus[1].steal_percent == Approx(0.0));
  CHECK(*o.kernel.cpus[1].steal_ns == 0);

  // CPU1's line vanishes (offline): no steal for it rather than a zero; a malformed line is skipped.
  fs.set_proc_stat_text(
      "cpu  290 0 100 1170 0 0 0 40 0 0\n"
      "cpu0 160 0 50 600 0 0 0 40 0 0\n"
      "cpuX 1 2 3\n"
      "intr 0\n");
  o = s.sample(2'000'000'000);
  REQUIRE(o.kernel.cpus.size() == 2);
  REQUIRE(o.kernel.cpus[0].steal_percent);
  CHECK(*o.kernel.cpus[0].steal_percent == Approx(10.0));  // 10 of 100
  CHECK(!o.kernel.cpus[1].steal_percent);
  CHECK(!o.kernel.cpus[1].steal_ns);
}

TEST_CASE("a halt state with another name (C1) is still the halt side") {
  FakeSysfs fs;
  fs.set_state(0, 1, "C1", 0, 0);
  Sensors s(fs.root(), {0});
  s.sample(0);
  fs.set_state(0, 1, "C1", 7, 7000);
  auto o = s.sample(1'000'000'000);
  REQUIRE(o.cpuidle.size() == 1);
  CHECK(o.cpuidle[0].halt_usage == 7);
  CHECK(o.cpuidle[0].halt_ns == 7'000'000);
}

TEST_CASE("one cpuidle reader: Sensors and the sums over CPUs read the same states") {
  FakeSysfs fs;
  fs.set_state(0, 0, "POLL", 10, 20);
  fs.set_state(0, 1, "haltpoll idle", 3, 400);
  fs.set_state(1, 0, "POLL", 1, 2);
  fs.set_state(1, 1, "haltpoll idle", 5, 600);
  const std::string sys = fs.root() + "/sys";
  const auto states = read_cpuidle_states(sys, 0);
  REQUIRE(states.size() == 2);
  CHECK(states[0].name == "POLL");
  CHECK(states[1].name == "haltpoll idle");
  CHECK(states[1].usage == 3);
  CHECK(states[1].time_us == 400);

  Sensors s(fs.root(), {0, 1});
  const auto per_cpu = s.read_cpuidle(0);
  REQUIRE(per_cpu);
  CHECK(per_cpu->state_names == std::vector<std::string>{"POLL", "haltpoll idle"});
  CHECK(per_cpu->poll_usage == 10);
  CHECK(per_cpu->halt_time_us == 400);
  const auto t = read_cpuidle_totals(sys, 0);
  CHECK(t.cpus == 2);
  CHECK(t.poll_usage == 11);
  CHECK(t.poll_time_us == 22);
  CHECK(t.halt_usage == 8);
  CHECK(t.halt_time_us == 1000);

  // A counter that is not a number ends the CPU's list there, for every user alike.
  fs.write("sys/devices/system/cpu/cpu0/cpuidle/state1/usage", "3x");
  CHECK(read_cpuidle_states(sys, 0).size() == 1);
  CHECK(s.read_cpuidle(0)->state_names == std::vector<std::string>{"POLL"});
  CHECK(read_cpuidle_totals(sys, 0).halt_usage == 5);
  // No states (no cpuidle driver): nothing, and the CPU is not counted.
  FakeSysfs::Options no_states;
  no_states.cpuidle_states = false;
  FakeSysfs bare(no_states);
  CHECK(read_cpuidle_states(bare.root() + "/sys", 0).empty());
  CHECK_FALSE(Sensors(bare.root(), {0}).read_cpuidle(0));
  CHECK(read_cpuidle_totals(bare.root() + "/sys", 0).cpus == 0);
}

TEST_CASE("no cpuidle driver: no poll-CPU signal, and the status says why") {
  FakeSysfs::Options opt;
  opt.driver = "none";
  opt.governor = "menu";
  opt.cpuidle_states = false;
  FakeSysfs fs(opt);
  Sensors s(fs.root(), {});
  s.sample(0);
  fs.set_proc_stat(100, 0);
  auto o = s.sample(1'000'000'000);
  CHECK(!o.poll_cpu_percent);
  CHECK(o.cpuidle.empty());
  CHECK(!s.cpuidle_available());
  CHECK(s.cpuidle_status().find("no cpuidle states") != std::string::npos);
  // Such a guest's kernel halts without polling; on a fake tree there is no eBPF to count its periods.
  CHECK(o.kernel.counters == KernelSignals::Counters::tracepoint);
  CHECK(!o.kernel.available());
  CHECK(s.cpuidle_status().find("does not poll") != std::string::npos);
  CHECK(s.cpuidle_status().find("not counted") != std::string::npos);
  REQUIRE(o.steal_percent);  // /proc/stat still works
  CHECK(*o.steal_percent == Approx(0.0));
}

TEST_CASE("kernel signals per CPU: poll hits and misses derived from the counters") {
  FakeSysfs fs;
  Sensors s(fs.root(), {});
  s.sample(0);
  // CPU0: 1000 polls, 100 halts (each after a timed-out poll) → 900 hits, 100 misses, 1000 periods.
  // CPU1: no polling at all (limit 0): 50 halts → no hits, no misses, 50 periods.
  fs.set_state(0, 0, "POLL", 1000, 100000);
  fs.set_state(0, 1, "haltpoll", 100, 500000);
  fs.set_state(1, 0, "POLL", 0, 0);
  fs.set_state(1, 1, "haltpoll", 50, 900000);
  auto o = s.sample(500'000'000);
  REQUIRE(o.kernel.available());
  REQUIRE(o.kernel.cpus.size() == 2);
  const auto& c0 = o.kernel.cpus[0];
  CHECK(c0.poll_entries == 1000);
  CHECK(c0.poll_misses == 100);
  CHECK(c0.poll_hits == 900);
  CHECK(c0.idle_periods() == 1000);
  CHECK_FALSE(c0.outcomes_exact);
  CHECK_FALSE(c0.ipi_skipped);
  const auto& c1 = o.kernel.cpus[1];
  CHECK(c1.poll_hits == 0);
  CHECK(c1.poll_misses == 0);
  CHECK(c1.idle_periods() == 50);
  CHECK(o.kernel.per_second(o.kernel.total_idle_periods()) == Approx(2100.0));
  CHECK(o.kernel.per_second(o.kernel.total(&CpuKernelSignals::poll_hits)) == Approx(1800.0));
  CHECK(o.kernel.poll_cpu_percent(c0) == Approx(20.0));
  CHECK_FALSE(o.kernel.total_ipi_skipped());
}

namespace {

// CPU `c` offline as the kernel shows it: out of the online list, its cpuidle directory gone
// (cpuidle-haltpoll unregisters the device), its /proc/stat line gone.
void take_offline(const FakeSysfs& fs, int c, const std::string& online) {
  fs.write("sys/devices/system/cpu/online", online);
  std::filesystem::remove_all(fs.root() + "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/cpuidle");
}

}  // namespace

TEST_CASE("CPUs going offline and online: the set follows, a tick that saw it change is unsound") {
  FakeSysfs::Options opt;
  opt.cpus = 3;
  FakeSysfs fs(opt);
  Sensors s(fs.root(), {});
  REQUIRE(s.cpus() == std::vector<int>{0, 1, 2});
  s.sample(0);
  for (int c = 0; c < 3; ++c) fs.set_state(c, 0, "POLL", 100, 10000);
  auto o = s.sample(1'000'000'000);
  CHECK(o.unsound.empty());
  REQUIRE(o.kernel.cpus.size() == 3);

  // CPU 1 goes offline during the next tick.
  take_offline(fs, 1, "0,2");
  for (int c : {0, 2}) fs.set_state(c, 0, "POLL", 200, 20000);
  o = s.sample(2'000'000'000);
  CHECK(s.cpus() == std::vector<int>{0, 2});
  CHECK(o.unsound.find("CPU 1 went offline") != std::string::npos);
  REQUIRE(o.kernel.cpus.size() == 2);  // the CPUs there at both ends keep their deltas
  CHECK(o.kernel.cpus[0].cpu == 0);
  CHECK(o.kernel.cpus[1].cpu == 2);
  REQUIRE(o.poll_cpu_percent);
  CHECK(*o.poll_cpu_percent == Approx(1.0));

  // A tick with the smaller set throughout is sound again.
  for (int c : {0, 2}) fs.set_state(c, 0, "POLL", 300, 30000);
  o = s.sample(3'000'000'000);
  CHECK(o.unsound.empty());
  CHECK(o.kernel.cpus.size() == 2);

  // CPU 1 comes back: its cpuidle device is registered again, its counters from zero.
  fs.write("sys/devices/system/cpu/online", "0-2");
  fs.set_state(1, 0, "POLL", 5, 500);
  fs.set_state(1, 1, "haltpoll", 5, 500);
  o = s.sample(4'000'000'000);
  CHECK(s.cpus() == std::vector<int>{0, 1, 2});
  CHECK(o.unsound.find("CPU 1 came online") != std::string::npos);
  CHECK(o.kernel.cpus.size() == 2);  // no delta for CPU 1 yet: it was not there at the tick's start
  fs.set_state(1, 0, "POLL", 105, 10500);
  o = s.sample(5'000'000'000);
  CHECK(o.unsound.empty());
  REQUIRE(o.kernel.cpus.size() == 3);
  CHECK(o.kernel.cpus[1].cpu == 1);
  CHECK(o.kernel.cpus[1].poll_entries == 100);
}

TEST_CASE("a CPU that went offline and came back between two samples: no delta from restarted counters") {
  FakeSysfs fs;
  Sensors s(fs.root(), {});
  fs.set_state(1, 0, "POLL", 5000, 900000);
  fs.set_state(1, 1, "haltpoll", 500, 9000000);
  s.sample(0);
  // Offline and online again within the tick: the online list is the same at both ends, but the
  // counters started again from zero.
  fs.set_state(1, 0, "POLL", 10, 1000);
  fs.set_state(1, 1, "haltpoll", 3, 3000);
  fs.set_state(0, 0, "POLL", 10, 1000);
  auto o = s.sample(1'000'000'000);
  CHECK(o.unsound.find("CPU 1's cpuidle counters restarted") != std::string::npos);
  REQUIRE(o.kernel.cpus.size() == 1);
  CHECK(o.kernel.cpus[0].cpu == 0);
  for (const auto& d : o.cpuidle) CHECK(d.cpu != 1);
  // The next tick measures CPU 1 from the restarted counters.
  fs.set_state(1, 0, "POLL", 20, 2000);
  o = s.sample(2'000'000'000);
  CHECK(o.unsound.empty());
  REQUIRE(o.kernel.cpus.size() == 2);
  CHECK(o.kernel.cpus[1].poll_entries == 10);

  // Only the cpuidle directory vanishes (the driver unregistered the device): said, no delta.
  std::filesystem::remove_all(fs.root() + "/sys/devices/system/cpu/cpu1/cpuidle");
  o = s.sample(3'000'000'000);
  CHECK(o.unsound.find("CPU 1's cpuidle states vanished") != std::string::npos);
  CHECK(o.kernel.cpus.size() == 1);
}

TEST_CASE("a requested CPU list follows hotplug too: an offline CPU is left out until it is back") {
  FakeSysfs::Options opt;
  opt.cpus = 3;
  FakeSysfs fs(opt);
  take_offline(fs, 2, "0-1");
  Sensors s(fs.root(), {1, 2});
  CHECK(s.cpus() == std::vector<int>{1});
  s.sample(0);
  fs.write("sys/devices/system/cpu/online", "0-2");
  fs.set_state(2, 0, "POLL", 0, 0);
  auto o = s.sample(1'000'000'000);
  CHECK(s.cpus() == std::vector<int>{1, 2});
  CHECK(o.unsound == "CPU 2 came online");
}

TEST_CASE("steal that jumps past the tick or goes backwards gives no share, and the tick is unsound") {
  FakeSysfs fs;
  Sensors s(fs.root(), {});
  auto stat = [&](std::uint64_t idle, std::uint64_t steal) {
    fs.set_proc_stat_text(fmt::format("cpu  {} 0 0 {} 0 0 0 {} 0 0\ncpu0 {} 0 0 {} 0 0 0 {} 0 0\n"
                                      "cpu1 {} 0 0 {} 0 0 0 {} 0 0\nintr 0\n",
                                      200, 2 * idle, 2 * steal, 100, idle, steal, 100, idle, steal));
  };
  stat(1000, 0);
  s.sample(0);
  // A storm within the tick's reach: 60 of the 100 ticks of each CPU stolen in 1 s. A real share.
  stat(1040, 60);
  auto o = s.sample(1'000'000'000);
  CHECK(o.unsound.empty());
  REQUIRE(o.steal_percent);
  CHECK(*o.steal_percent == Approx(60.0));
  REQUIRE(o.kernel.cpus.size() == 2);
  REQUIRE(o.kernel.cpus[0].steal_percent);
  CHECK(*o.kernel.cpus[0].steal_percent == Approx(60.0));

  // Steal jumps by 50 s worth of ticks in a 1 s tick (a host that paused the guest without its
  // clock noticing, an accounting glitch): no share, per CPU neither; the tick is unsound.
  stat(1080, 5060);
  o = s.sample(2'000'000'000);
  CHECK_FALSE(o.steal_percent);
  CHECK(o.unsound.find("/proc/stat counted") != std::string::npos);
  for (const auto& k : o.kernel.cpus) {
    CHECK_FALSE(k.steal_percent);
    CHECK_FALSE(k.steal_ns);
  }

  // Steal goes backwards: no share (not 0 %), unsound.
  stat(1180, 10);
  o = s.sample(3'000'000'000);
  CHECK_FALSE(o.steal_percent);
  CHECK(o.unsound.find("went backwards") != std::string::npos);
  for (const auto& k : o.kernel.cpus) CHECK_FALSE(k.steal_percent);

  // Then an ordinary tick again.
  stat(1280, 10);
  o = s.sample(4'000'000'000);
  CHECK(o.unsound.empty());
  REQUIRE(o.steal_percent);
  CHECK(*o.steal_percent == Approx(0.0));
}

TEST_CASE("an early tick: more polling than the tick can hold makes it unsound, no share above 100 %") {
  FakeSysfs fs;
  Sensors s(fs.root(), {});
  s.sample(1'000'000'000);
  // 1 ms after the last sample, CPU 0's counters show 40 ms of polling counted before the tick.
  fs.set_state(0, 0, "POLL", 200, 40000);
  auto o = s.sample(1'001'000'000);
  CHECK(o.unsound.find("CPU 0 polled 40.0 ms in a 1.0 ms tick") != std::string::npos);
  REQUIRE(o.poll_cpu_percent);
  CHECK(*o.poll_cpu_percent <= 100.0);
  // The clock standing still (or going back) computes nothing.
  fs.set_state(0, 0, "POLL", 300, 50000);
  o = s.sample(1'001'000'000);
  CHECK(o.elapsed_ns == 0);
  CHECK_FALSE(o.poll_cpu_percent);
  CHECK_FALSE(o.steal_percent);
}

TEST_CASE("the sample carries the cumulative counters its deltas came from, for the fleet series") {
  FakeSysfs fs;
  fs.set_state(0, 0, "POLL", 1234, 5'000'001);
  fs.set_state(0, 1, "haltpoll", 77, 9'000'000);
  fs.set_state(1, 0, "POLL", 10, 20);
  fs.set_state(1, 1, "haltpoll", 30, 40);
  fs.set_proc_stat(1000, 250);
  Sensors s(fs.root(), {});
  // The priming sample has no deltas but the totals already.
  const Observation o = s.sample(1'000'000'000);
  CHECK(o.cpuidle.empty());
  REQUIRE(o.cpuidle_totals.size() == 2);
  CHECK(o.cpuidle_totals[0].cpu == 0);
  CHECK(o.cpuidle_totals[0].poll_entries == 1234);
  CHECK(o.cpuidle_totals[0].poll_us == 5'000'001);
  CHECK(o.cpuidle_totals[0].halts == 77);
  CHECK(o.cpuidle_totals[0].halt_us == 9'000'000);
  CHECK(o.cpuidle_totals[1].cpu == 1);
  CHECK(o.cpuidle_totals[1].halt_us == 40);
  CHECK(o.steal_ticks_total == 250u);

  FakeSysfs none(FakeSysfs::Options{.cpuidle_states = false});
  Sensors n(none.root(), {});
  const Observation p = n.sample(1'000'000'000);
  CHECK(p.cpuidle_totals.empty());  // no states: no series, not zeros
  CHECK(p.steal_ticks_total.has_value());
}

TEST_CASE("a tree without a list of online CPUs: the cpuN directories there are, followed as they come") {
  FakeSysfs fs;
  std::filesystem::remove(fs.root() + "/sys/devices/system/cpu/online");
  Sensors s(fs.root(), {});
  CHECK(s.cpus() == std::vector<int>{0, 1});
  fs.set_state(2, 0, "POLL", 0, 0);
  s.sample(0);
  CHECK(s.cpus() == std::vector<int>{0, 1, 2});
  // A list given is kept as it is.
  Sensors listed(fs.root(), {1});
  CHECK(listed.cpus() == std::vector<int>{1});
}
