// Another writer of the haltpoll parameters, below the Controller: the actuator's record of what it
// wrote and found (foreign_value, yield_to, take_over, restore) against a fake tree, and who the
// writer is: TuneD's active profile and profile files (fixtures of what tuned 2.20 and tuned-adm
// leave and print, hostile ones included) and a process holding a parameter file open.
#include "sysfs/actuator.hpp"
#include "sysfs/other_writer.hpp"
#include "fake_sysfs.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace haltpolld;
using testsupport::FakeSysfs;
using testsupport::TempDir;

TEST_CASE("tuned-adm active and active_profile: the profile names, nothing else") {
  using V = std::vector<std::string>;
  CHECK(parse_tuned_active_profiles("Current active profile: virtual-guest\n") == V{"virtual-guest"});
  CHECK(parse_tuned_active_profiles("Current active profile: virtual-guest sap-hana-kvm-guest\n"
                                    "Profile mode: manual\n") == V{"virtual-guest", "sap-hana-kvm-guest"});
  CHECK(parse_tuned_active_profiles("sap-hana-kvm-guest\n") == V{"sap-hana-kvm-guest"});
  CHECK(parse_tuned_active_profiles("No current active profile.\n").empty());
  CHECK(parse_tuned_active_profiles("").empty());
  // Names that could leave the profile directories are dropped.
  CHECK(parse_tuned_active_profiles("../../etc x/y .. ok") == V{"ok"});
}

TEST_CASE("a TuneD profile: includes, [sysfs] haltpoll paths, [cpu] haltpoll keys, other plugins ignored") {
  const auto p = parse_tuned_profile(
      "#\n# tuned configuration\n#\n[main]\nsummary=SAP HANA on KVM\ninclude=sap-hana, virtual-guest\n\n"
      "[modules]\ncpuidle-haltpoll=+r force\n\n"
      "[sysfs]\npriority=10\n/sys/devices/system/clocksource/clocksource0/current_clocksource=tsc\n"
      "/sys/module/haltpoll/parameters/guest_halt_poll_ns=2400000\n"
      "/sys/module/haltpoll/parameters/guest_halt_poll_grow_start = 2400000\n"
      "[my_sysfs]\ntype=sysfs\n/sys/module/haltpoll/parameters/guest_halt_poll_shrink=4\n"
      "[cpu]\ngovernor=performance\nforce_latency=cstate.id_no_zero:1|3\n"
      "[sysctl]\nkernel.haltpoll = 1\n");
  CHECK(p.includes == std::vector<std::string>{"sap-hana", "virtual-guest"});
  CHECK(p.haltpoll_lines == std::vector<std::string>{
                                "[sysfs] /sys/module/haltpoll/parameters/guest_halt_poll_ns = 2400000",
                                "[sysfs] /sys/module/haltpoll/parameters/guest_halt_poll_grow_start = 2400000",
                                "[my_sysfs] /sys/module/haltpoll/parameters/guest_halt_poll_shrink = 4"});
  CHECK(parse_tuned_profile("[cpu]\ncpuidle_governor=haltpoll\n").haltpoll_lines ==
        std::vector<std::string>{"[cpu] cpuidle_governor = haltpoll"});
  CHECK(parse_tuned_profile("no section\n/sys/module/haltpoll/parameters/x=1\n[sysfs\n").haltpoll_lines.empty());
}

TEST_CASE("TuneD as the writer: the active profile or an included one, first in /etc/tuned, hostile files refused") {
  FakeSysfs fs;
  CHECK(tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns").empty());  // no TuneD at all
  fs.write("etc/tuned/active_profile", "mine\n");
  fs.write("etc/tuned/mine/tuned.conf", "[main]\ninclude=virtual-guest,mine\n");  // includes itself too
  fs.write("usr/lib/tuned/virtual-guest/tuned.conf", "[main]\ninclude=throughput-performance\n[sysctl]\nvm.x=1\n");
  CHECK(tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns").empty());
  fs.write("usr/lib/tuned/throughput-performance/tuned.conf",
           "[sysfs]\n/sys/module/haltpoll/parameters/guest_halt_poll_grow_start=1\n"
           "/sys/module/haltpoll/parameters/guest_halt_poll_ns=2400000\n");
  const std::string who = tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns");
  CAPTURE(who);
  CHECK(who.find("TuneD") == 0);
  CHECK(who.find("'throughput-performance'") != std::string::npos);
  CHECK(who.find("guest_halt_poll_ns = 2400000") != std::string::npos);  // the line naming the parameter
  // A profile in /etc/tuned hides the one of the same name in /usr/lib/tuned, as in TuneD.
  fs.write("etc/tuned/throughput-performance/tuned.conf", "[main]\nsummary=local copy\n");
  CHECK(tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns").empty());
  // A FIFO is not waited on, a huge file is not read, control characters do not reach the answer.
  std::filesystem::remove(fs.root() + "/etc/tuned/throughput-performance/tuned.conf");
  REQUIRE(::mkfifo((fs.root() + "/etc/tuned/throughput-performance/tuned.conf").c_str(), 0644) == 0);
  CHECK(tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns").find("/usr/lib/tuned/throughput-performance") !=
        std::string::npos);  // skipped as if absent
  std::filesystem::remove(fs.root() + "/etc/tuned/throughput-performance/tuned.conf");
  fs.write("etc/tuned/mine/tuned.conf", "[sysfs]\n/sys/module/haltpoll/parameters/guest_halt_poll_ns=\x1b[31m1\n" +
                                            std::string(70000, '#'));
  CHECK(tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns").empty());
  fs.write("etc/tuned/mine/tuned.conf", "[sysfs]\n/sys/module/haltpoll/parameters/guest_halt_poll_ns=\x1b[31m1\n");
  const std::string escaped = tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns");
  CHECK(escaped.find('\x1b') == std::string::npos);
  CHECK(escaped.find("?[31m1") != std::string::npos);
  // `tuned-adm off` empties the file: no TuneD writer any more.
  fs.write("etc/tuned/active_profile", "");
  CHECK(tuned_haltpoll_writer(fs.root(), "guest_halt_poll_ns").empty());
}

TEST_CASE("a process holding a parameter file open is named, else the writer is unknown") {
  FakeSysfs fs;
  const std::string params = fs.root() + "/sys/module/haltpoll/parameters";
  CHECK(process_holding("/proc", params).empty());
  CHECK(identify_other_writer(fs.root(), params, "guest_halt_poll_ns") == kUnknownWriter);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int fd = ::open((params + "/guest_halt_poll_ns").c_str(), O_RDONLY);
    (void)fd;
    ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string who;
  for (int i = 0; i < 200 && who.empty(); ++i) {
    ::usleep(20000);
    who = identify_other_writer(fs.root(), params, "guest_halt_poll_ns");
    if (who == kUnknownWriter) who.clear();
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CAPTURE(who);
  CHECK(who.find("process " + std::to_string(child) + " (sleep) holds " + params + "/guest_halt_poll_ns open") == 0);
}

TEST_CASE("the actuator: a value it did not write is foreign, and yield, restore and take-over keep the other writer's") {
  FakeSysfs fs;
  TempDir dir;
  const std::string state = dir.path() + "/haltpoll-params.json";
  SysfsHaltpollParams a(fs.root(), state);
  CHECK_FALSE(a.foreign_value());  // not watching yet
  a.expect_values_in_force();
  CHECK_FALSE(a.foreign_value());
  REQUIRE(a.set_poll_ns(100000).ok);
  REQUIRE(a.set_grow_start_ns(20000).ok);
  CHECK_FALSE(a.foreign_value());  // its own writes

  SECTION("a parameter") {
    fs.set_param("guest_halt_poll_ns", "2400000");
    const auto f = a.foreign_value();
    REQUIRE(f);
    CHECK(f->parameter == "guest_halt_poll_ns");
    CHECK(f->value == "2400000");
    CHECK(f->expected == "100000");
    CHECK(f->who == kUnknownWriter);
    REQUIRE(a.yield_to(*f).ok);
    CHECK_FALSE(a.foreign_value());  // said once
    std::ifstream in(state);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.find("\"other_writer\"") != std::string::npos);

    SECTION("restore puts back only what it wrote and is still in force") {
      const auto r = a.restore();
      CHECK(r.ok);
      CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") == "2400000");
      CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_grow_start") == "50000");
      CHECK(r.message.find("guest_halt_poll_ns left at 2400000") != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(state));
    }
    SECTION("take-over: the other writer's value is the new original, its own keeps the old one") {
      REQUIRE(a.take_over().ok);
      a.expect_values_in_force();
      REQUIRE(a.set_poll_ns(150000).ok);
      CHECK_FALSE(a.foreign_value());
      REQUIRE(a.restore().ok);
      CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") == "2400000");
      CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_grow_start") == "50000");
    }
    SECTION("recover() after a crash: the same rule from the state file") {
      SysfsHaltpollParams next(fs.root(), state);
      const auto r = next.recover();
      CAPTURE(r.message);
      CHECK(r.ok);
      CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") == "2400000");
      CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_grow_start") == "50000");
      CHECK(r.message.find("superseded by another writer (unknown writer)") != std::string::npos);
    }
  }
  SECTION("the governor: another writer's stays at stop") {
    fs.write("sys/devices/system/cpu/cpuidle/current_governor", "menu");
    const auto f = a.foreign_value();
    REQUIRE(f);
    CHECK(f->parameter == "cpuidle_governor");
    CHECK(f->expected == "haltpoll");
    REQUIRE(a.yield_to(*f).ok);
    REQUIRE(a.restore().ok);
    CHECK(fs.read("sys/devices/system/cpu/cpuidle/current_governor") == "menu");
    CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") == "200000");
  }
}

TEST_CASE("recover(): a state file whose written or other_writer is malformed is refused and left in place") {
  FakeSysfs fs;
  TempDir dir;
  ::chmod(dir.path().c_str(), 0700);
  const std::string state = dir.path() + "/haltpoll-params.json";
  const std::string head =
      R"({"version": 1, "params": {"guest_halt_poll_ns": "200000", "guest_halt_poll_grow": "2", "guest_halt_poll_shrink": "2", "guest_halt_poll_grow_start": "50000", "guest_halt_poll_allow_shrink": "Y"})";
  for (const char* tail : {R"(, "written": []})", R"(, "written": {"../../x": "1"}})",
                           R"(, "written": {"guest_halt_poll_ns": ["-1"]}})",
                           R"(, "written": {"guest_halt_poll_ns": "100000"}})", R"(, "written": {"guest_halt_poll_ns": ["1", "2", "3"]}})", R"(, "other_writer": "tuned"})"}) {
    CAPTURE(tail);
    {
      std::ofstream(state) << head << tail;
    }
    ::chmod(state.c_str(), 0600);
    fs.set_param("guest_halt_poll_ns", "100000");
    SysfsHaltpollParams a(fs.root(), state);
    const auto r = a.recover();
    CHECK_FALSE(r.ok);
    CHECK(std::filesystem::exists(state));
    CHECK(fs.read("sys/module/haltpoll/parameters/guest_halt_poll_ns") == "100000");
  }
}

TEST_CASE("recover(): a kill between the record of a write and the write leaves the value before, still this run's") {
  FakeSysfs fs;
  TempDir dir;
  ::chmod(dir.path().c_str(), 0700);
  const std::string state = dir.path() + "/haltpoll-params.json";
  {
    std::ofstream(state)
        << R"({"version": 1, "params": {"guest_halt_poll_ns": "200000", "guest_halt_poll_grow": "2", "guest_halt_poll_shrink": "2", "guest_halt_poll_grow_start": "50000", "guest_halt_poll_allow_shrink": "Y"},)"
        << R"( "written": {"guest_halt_poll_ns": ["20000", "30000"], "guest_halt_poll_grow_start": ["10000"]}})";
  }
  ::chmod(state.c_str(), 0600);
  fs.set_param("guest_halt_poll_ns", "20000");         // the record said 30000, the kill came first
  fs.set_param("guest_halt_poll_grow_start", "7000");  // neither: another writer's
  SysfsHaltpollParams a(fs.root(), state);
  const auto r = a.recover();
  CAPTURE(r.message);
  CHECK(r.ok);
  CHECK(fs.param("guest_halt_poll_ns") == "200000");
  CHECK(fs.param("guest_halt_poll_grow_start") == "7000");
  CHECK(r.message.find("guest_halt_poll_grow_start left at 7000") != std::string::npos);
}
