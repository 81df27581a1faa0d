// Sensors against a fake sysfs tree: cpuidle deltas by state name, steal, and a guest without states.
#include "cpuidle_totals.hpp"
#include "fake_sysfs.hpp"
#include "sysfs/sensors.hpp"

#include <catch2/catch.hpp>

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
  fs.set_proc_stat(900, 100);  // 100 of 1000 new ticks stolen (the base line has 150 + 0)
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
  fs.set_proc_stat(1000, 0);
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
