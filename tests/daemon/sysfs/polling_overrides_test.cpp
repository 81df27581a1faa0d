// What decides the polling besides the cap, read by Sensors from fake trees: the global CPU latency
// QoS at 0 (with a holder, without one, nonzero, negative, malformed, absent), each meaning of a
// CPU's pm_qos_resume_latency_us, the CPU system wakeup QoS, the governor, offline CPUs, a CPU
// without a POLL state, and how often the holders are looked for.
#include "sysfs/polling_overrides.hpp"
#include "fake_sysfs.hpp"
#include "sysfs/sensors.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cerrno>
#include <filesystem>

using namespace haltpolld;
using testsupport::FakeSysfs;

namespace {

constexpr std::uint64_t kSecond = 1'000'000'000;

PollingOverrides read_once(const FakeSysfs& fs, std::uint64_t now = kSecond) {
  Sensors s(fs.root(), {});
  const Observation o = s.sample(now);
  REQUIRE(o.kernel.overrides);
  return *o.kernel.overrides;
}

const CpuPollingOverride& cpu(const PollingOverrides& o, int c) {
  for (const auto& x : o.cpus)
    if (x.cpu == c) return x;
  FAIL("no entry for CPU " << c);
  return o.cpus.front();
}

}  // namespace

TEST_CASE("overrides: a guest as it boots has none, and says what it read") {
  FakeSysfs fs;
  const PollingOverrides o = read_once(fs);
  INFO(o.summary());
  CHECK(o.cpu_dma_latency.present);
  CHECK(o.cpu_dma_latency.value_us == FakeSysfs::kNoLatencyConstraint);
  CHECK(o.cpu_dma_latency.error.empty());
  CHECK(o.cpu_dma_latency.holders.empty());
  CHECK(o.cpu_dma_latency.holders_note.empty());  // not looked for: the value is not 0
  CHECK_FALSE(o.cpu_wakeup_latency.present);      // a kernel without the CPU system wakeup QoS
  CHECK(o.cpu_wakeup_latency.error.empty());
  REQUIRE(o.resume.size() == 2);
  for (const auto& r : o.resume) CHECK(r.state == CpuResumeLatency::State::no_constraint);
  REQUIRE(o.cpus.size() == 2);
  for (const auto& c : o.cpus) {
    CHECK_FALSE(c.polls_without_limit);
    CHECK_FALSE(c.unknown);
  }
  CHECK(o.cpuidle);
  CHECK(o.governor == "haltpoll");
  CHECK(o.governor_applies());
  CHECK(o.offline_cpus.empty());
  CHECK(o.offline_error.empty());
  CHECK_FALSE(o.any());
  CHECK(o.summary().empty());
  CHECK(o.unlimited_cpus().empty());
}

TEST_CASE("overrides: cpu_dma_latency held at 0 makes every CPU poll without limit, and names the holder") {
  FakeSysfs fs;
  fs.set_cpu_dma_latency(0);
  fs.add_holder(4242, "cyclictest", "/dev/cpu_dma_latency");
  fs.add_holder(4343, "bash", "/dev/null");  // another file: not a holder
  const PollingOverrides o = read_once(fs);
  CHECK(o.cpu_dma_latency.value_us == 0);
  REQUIRE(o.cpu_dma_latency.holders.size() == 1);
  CHECK(o.cpu_dma_latency.holders[0].pid == 4242);
  CHECK(o.cpu_dma_latency.holders[0].comm == "cyclictest");
  CHECK(o.unlimited_cpus() == std::vector<int>{0, 1});
  for (int c : {0, 1}) {
    const auto& x = cpu(o, c);
    CHECK(x.polls_without_limit);
    REQUIRE(x.reasons.size() == 1);
    CHECK(x.reasons[0].source == OverrideSource::cpu_dma_latency);
    CHECK(x.reasons[0].text == "cpu_dma_latency is 0, held by process 4242 (cyclictest)");
  }
  CHECK(o.polls_without_limit(1));
  CHECK(o.any());
  CHECK(o.summary() ==
        "CPUs 0-1 poll without limit whatever the cap (cpu_dma_latency is 0, held by process 4242 (cyclictest))");
  CHECK(std::string(to_string(OverrideSource::cpu_dma_latency)) == "cpu_dma_latency");
}

TEST_CASE("overrides: cpu_dma_latency at 0 without a holder is a kernel driver's request or a hidden process's") {
  FakeSysfs fs;
  fs.set_cpu_dma_latency(0);
  const PollingOverrides o = read_once(fs);
  CHECK(o.cpu_dma_latency.holders.empty());
  CHECK(o.cpu_dma_latency.holders_note.find("no process that haltpolld can look into holds it open") !=
        std::string::npos);
  CHECK(o.cpu_dma_latency.holders_note.find("cpu_latency_qos_add_request") != std::string::npos);
  CHECK(cpu(o, 0).polls_without_limit);
  CHECK(cpu(o, 0).reasons.at(0).text.rfind("cpu_dma_latency is 0, no process", 0) == 0);
}

TEST_CASE("overrides: a nonzero cpu_dma_latency leaves the polling to the governor, and no holder is looked for") {
  FakeSysfs fs;
  fs.set_cpu_dma_latency(20);
  fs.add_holder(4242, "cyclictest", "/dev/cpu_dma_latency");
  const PollingOverrides o = read_once(fs);
  CHECK(o.cpu_dma_latency.value_us == 20);
  CHECK(o.cpu_dma_latency.holders.empty());
  CHECK(o.unlimited_cpus().empty());
  CHECK_FALSE(o.any());
}

TEST_CASE("overrides: a negative cpu_dma_latency is not 0 for haltpoll_select, even beside a resume request of 0") {
  // cpuidle_governor_latency_req() takes the smaller of the two: -5, and haltpoll_select() polls
  // every time only at exactly 0.
  FakeSysfs fs;
  fs.set_cpu_dma_latency(-5);
  fs.set_resume_latency(1, "n/a");
  const PollingOverrides o = read_once(fs);
  CHECK(o.cpu_dma_latency.value_us == -5);
  CHECK(o.unlimited_cpus().empty());
  CHECK_FALSE(cpu(o, 1).unknown);
}

TEST_CASE("overrides: a malformed cpu_dma_latency is a reason, and the CPUs' polling cannot be told") {
  FakeSysfs fs;
  SECTION("three bytes") { fs.write_bytes("dev/cpu_dma_latency", std::string(3, '\0')); }
  SECTION("a text number") { fs.write_bytes("dev/cpu_dma_latency", "2000000000\n"); }
  SECTION("empty") { fs.write_bytes("dev/cpu_dma_latency", ""); }
  SECTION("a directory") {
    std::filesystem::remove(fs.root() + "/dev/cpu_dma_latency");
    std::filesystem::create_directories(fs.root() + "/dev/cpu_dma_latency");
  }
  SECTION("a FIFO: not read, and the tick does not wait for a writer") {
    std::filesystem::remove(fs.root() + "/dev/cpu_dma_latency");
    REQUIRE(::mkfifo((fs.root() + "/dev/cpu_dma_latency").c_str(), 0600) == 0);
  }
  const PollingOverrides o = read_once(fs);
  INFO(o.cpu_dma_latency.error);
  CHECK(o.cpu_dma_latency.present);
  CHECK_FALSE(o.cpu_dma_latency.value_us);
  CHECK(o.cpu_dma_latency.error.rfind("/dev/cpu_dma_latency", 0) == 0);
  CHECK(o.unlimited_cpus().empty());
  CHECK(cpu(o, 0).unknown);
  CHECK(cpu(o, 0).unknown_reason == o.cpu_dma_latency.error);
  CHECK(o.any());
  CHECK(o.summary().find("CPUs 0-1 may poll without limit (haltpolld cannot tell: /dev/cpu_dma_latency") == 0);
}

TEST_CASE("overrides: the device's size and type, read directly") {
  FakeSysfs fs;
  fs.write_bytes("dev/x", FakeSysfs::s32_bytes(7) + "more");
  const auto q = read_latency_qos_device(fs.root() + "/dev/x", "/dev/x");
  CHECK_FALSE(q.value_us);
  CHECK(q.error.find("gave 8 bytes, not the 4") != std::string::npos);
  fs.write_bytes("dev/big", std::string(100, 'x'));
  CHECK(read_latency_qos_device(fs.root() + "/dev/big", "/dev/big").error.find("16 or more bytes") !=
        std::string::npos);
  const auto gone = read_latency_qos_device(fs.root() + "/dev/none", "/dev/none");
  CHECK_FALSE(gone.present);
  CHECK(gone.error.empty());
  // An unreadable device (as for a user other than root) says so.
  fs.write_bytes("dev/locked", FakeSysfs::s32_bytes(0));
  ::chmod((fs.root() + "/dev/locked").c_str(), 0);
  const auto locked = read_latency_qos_device(fs.root() + "/dev/locked", "/dev/locked");
  if (::geteuid() != 0) {
    CHECK(locked.present);
    CHECK(locked.error.find("Permission denied") != std::string::npos);
  } else {
    CHECK(locked.value_us == 0);  // root reads a mode 0 file
  }
}

TEST_CASE("overrides: cpu_dma_latency absent where cpuidle runs is hidden, absent without cpuidle is nothing") {
  SECTION("a haltpoll guest") {
    FakeSysfs fs;
    std::filesystem::remove(fs.root() + "/dev/cpu_dma_latency");
    const PollingOverrides o = read_once(fs);
    CHECK_FALSE(o.cpu_dma_latency.present);
    CHECK(o.cpu_dma_latency.error.find("a private /dev hides it") != std::string::npos);
    CHECK(cpu(o, 0).unknown);
    CHECK(o.any());
  }
  SECTION("a guest without a cpuidle driver") {
    FakeSysfs::Options opt;
    opt.driver = "none";
    opt.governor = "menu";
    opt.cpuidle_states = false;
    opt.qos_files = false;
    FakeSysfs fs(opt);
    const PollingOverrides o = read_once(fs);
    CHECK_FALSE(o.cpuidle);
    CHECK(o.cpu_dma_latency.error.empty());
    // No governor runs without a driver, and no CPU has a POLL state: nothing overrides the cap.
    CHECK_FALSE(o.governor_applies());
    CHECK_FALSE(o.any());
    for (const auto& c : o.cpus) CHECK_FALSE((c.polls_without_limit || c.unknown));
  }
}

TEST_CASE("overrides: each meaning of pm_qos_resume_latency_us, as drivers/base/power/sysfs.c shows it") {
  struct Case {
    const char* text;
    CpuResumeLatency::State state;
    std::int32_t limit_us;
    bool unlimited, unknown;
  };
  const Case cases[] = {
      {"n/a", CpuResumeLatency::State::zero, 0, true, false},  // a request of 0: no latency at all
      {"0", CpuResumeLatency::State::no_constraint, 0, false, false},
      {"50", CpuResumeLatency::State::limit, 50, false, false},
      {"2147483646", CpuResumeLatency::State::limit, 2147483646, false, false},
      {"2147483647", CpuResumeLatency::State::unreadable, 0, false, true},  // the kernel shows that as 0
      {"-3", CpuResumeLatency::State::unreadable, 0, false, true},
      {"abc", CpuResumeLatency::State::unreadable, 0, false, true},
      {"", CpuResumeLatency::State::unreadable, 0, false, true},
      {"12 34", CpuResumeLatency::State::unreadable, 0, false, true},
  };
  for (const auto& k : cases) {
    DYNAMIC_SECTION("'" << k.text << "'") {
      FakeSysfs fs;
      fs.set_resume_latency(1, k.text);
      const PollingOverrides o = read_once(fs);
      REQUIRE(o.resume.size() == 2);
      const CpuResumeLatency& r = o.resume[1];
      CHECK(r.cpu == 1);
      CHECK(r.state == k.state);
      CHECK(r.limit_us == k.limit_us);
      CHECK(r.text == k.text);
      CHECK(r.error.empty() == (k.state != CpuResumeLatency::State::unreadable));
      CHECK(cpu(o, 1).polls_without_limit == k.unlimited);
      CHECK(cpu(o, 1).unknown == k.unknown);
      CHECK_FALSE(cpu(o, 0).polls_without_limit);  // the other CPU's request is its own
      if (k.unlimited) {
        REQUIRE(cpu(o, 1).reasons.size() == 1);
        CHECK(cpu(o, 1).reasons[0].source == OverrideSource::resume_latency);
        CHECK(cpu(o, 1).reasons[0].text == "cpu1 pm_qos_resume_latency_us is n/a, a request of 0 µs");
        CHECK(o.summary() ==
              "CPU 1 polls without limit whatever the cap (cpu1 pm_qos_resume_latency_us is n/a, a request of 0 µs)");
      }
      if (k.unknown) CHECK(cpu(o, 1).unknown_reason.rfind("cpu1 pm_qos_resume_latency_us reads '", 0) == 0);
    }
  }
  SECTION("absent: no request, no reason") {
    FakeSysfs fs;
    std::filesystem::remove(fs.root() + "/sys/devices/system/cpu/cpu1/power/pm_qos_resume_latency_us");
    const PollingOverrides o = read_once(fs);
    CHECK(o.resume[1].state == CpuResumeLatency::State::absent);
    CHECK_FALSE(cpu(o, 1).unknown);
    CHECK_FALSE(o.any());
  }
  SECTION("the resume request of 0 and the global one at 0: both reasons") {
    FakeSysfs fs;
    fs.set_resume_latency(0, "n/a");
    fs.set_cpu_dma_latency(0);
    const PollingOverrides o = read_once(fs);
    REQUIRE(cpu(o, 0).reasons.size() == 2);
    CHECK(cpu(o, 0).reasons[0].source == OverrideSource::cpu_dma_latency);
    CHECK(cpu(o, 0).reasons[1].source == OverrideSource::resume_latency);
    CHECK(cpu(o, 1).reasons.size() == 1);
  }
}

TEST_CASE("overrides: the CPU system wakeup QoS at 0 counts where the kernel has it") {
  FakeSysfs fs;
  fs.set_cpu_wakeup_latency(0);
  fs.add_holder(77, "rtapp", "/dev/cpu_wakeup_latency");
  const PollingOverrides o = read_once(fs);
  CHECK(o.cpu_wakeup_latency.present);
  CHECK(o.cpu_wakeup_latency.value_us == 0);
  REQUIRE(o.cpu_wakeup_latency.holders.size() == 1);
  CHECK(o.cpu_wakeup_latency.holders[0].pid == 77);
  CHECK(o.cpu_dma_latency.holders.empty());  // holders of one device are not the other's
  REQUIRE(cpu(o, 0).reasons.size() == 1);
  CHECK(cpu(o, 0).reasons[0].source == OverrideSource::cpu_wakeup_latency);
  CHECK(cpu(o, 0).reasons[0].text == "cpu_wakeup_latency is 0, held by process 77 (rtapp)");
}

TEST_CASE("overrides: another governor, or one that cannot be read") {
  FakeSysfs fs;
  SECTION("menu") {
    fs.write("sys/devices/system/cpu/cpuidle/current_governor", "menu");
    const PollingOverrides o = read_once(fs);
    CHECK(o.governor == "menu");
    CHECK_FALSE(o.governor_applies());
    CHECK(o.any());
    CHECK(o.summary() == "the cpuidle governor is menu, not haltpoll: guest_halt_poll_ns reaches nothing");
  }
  SECTION("not a governor name") {
    fs.write("sys/devices/system/cpu/cpuidle/current_governor", "Menu!\x1b");
    const PollingOverrides o = read_once(fs);
    CHECK(o.governor.empty());
    CHECK(o.governor_error == "current_governor reads 'Menu!?': not a governor name");
    CHECK(o.summary().rfind("the cpuidle governor cannot be read (current_governor reads", 0) == 0);
  }
  SECTION("current_governor_ro on a kernel without the switch") {
    std::filesystem::remove(fs.root() + "/sys/devices/system/cpu/cpuidle/current_governor");
    fs.write("sys/devices/system/cpu/cpuidle/current_governor_ro", "haltpoll");
    const PollingOverrides o = read_once(fs);
    CHECK(o.governor == "haltpoll");
    CHECK_FALSE(o.any());
  }
}

TEST_CASE("overrides: present but offline CPUs, and a present list that is not one") {
  FakeSysfs fs(FakeSysfs::Options{.cpus = 4});
  SECTION("CPU 2 offline") {
    fs.write("sys/devices/system/cpu/online", "0-1,3");
    const PollingOverrides o = read_once(fs);
    CHECK(o.offline_cpus == std::vector<int>{2});
    CHECK(o.cpus.size() == 3);  // the sensors follow the online CPUs
    CHECK(o.any());
    CHECK(o.summary() == "CPU 2 offline (present, not online): no idle polling there");
  }
  SECTION("malformed") {
    fs.write("sys/devices/system/cpu/present", "0-x");
    const PollingOverrides o = read_once(fs);
    CHECK(o.offline_cpus.empty());
    CHECK(o.offline_error.find("reads '0-x': not a CPU list") != std::string::npos);
    CHECK(o.any());
  }
}

TEST_CASE("overrides: a CPU whose state 0 is not POLL does not poll at a requirement of 0") {
  FakeSysfs fs;
  fs.set_state(1, 0, "C1", 0, 0);
  fs.set_cpu_dma_latency(0);
  const PollingOverrides o = read_once(fs);
  CHECK(cpu(o, 0).polls_without_limit);
  CHECK_FALSE(cpu(o, 1).polls_without_limit);
  CHECK(o.summary().rfind("CPU 0 polls without limit", 0) == 0);
}

TEST_CASE("overrides: the holders are looked for when the value turns 0 and again only every 30 s") {
  FakeSysfs fs;
  fs.set_cpu_dma_latency(0);
  fs.add_holder(10, "first", "/dev/cpu_dma_latency");
  Sensors s(fs.root(), {});
  auto holders = [&](std::uint64_t t) {
    const Observation o = s.sample(t);
    std::vector<int> pids;
    for (const auto& h : o.kernel.overrides->cpu_dma_latency.holders) pids.push_back(h.pid);
    return pids;
  };
  CHECK(holders(kSecond) == std::vector<int>{10});
  fs.add_holder(11, "second", "/dev/cpu_dma_latency");
  CHECK(holders(2 * kSecond) == std::vector<int>{10});  // the walk is not repeated every tick
  CHECK(holders(kSecond + kHolderRescanNs) == (std::vector<int>{10, 11}));
  fs.add_holder(12, "third", "/dev/cpu_dma_latency");
  // A change of the value looks again at once.
  fs.set_cpu_dma_latency(5);
  CHECK(holders(kSecond + kHolderRescanNs + kSecond).empty());
  fs.set_cpu_dma_latency(0);
  CHECK(holders(kSecond + kHolderRescanNs + 2 * kSecond) == (std::vector<int>{10, 11, 12}));
}

TEST_CASE("overrides: parse_resume_latency on a failed read") {
  const auto absent = parse_resume_latency(3, std::nullopt, ENOENT);
  CHECK(absent.state == CpuResumeLatency::State::absent);
  CHECK(absent.error.empty());
  const auto denied = parse_resume_latency(3, std::nullopt, EACCES);
  CHECK(denied.state == CpuResumeLatency::State::unreadable);
  CHECK(denied.error == "cpu3 pm_qos_resume_latency_us cannot be read: Permission denied");
}
