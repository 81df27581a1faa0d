// The kinds of guest the daemon tells apart, for tests that must hold on every machine the suite
// runs on. A guest whose kernel registered the cpuidle-haltpoll driver has cpuidle states (POLL and
// "haltpoll idle") and counters; a guest with no cpuidle driver (current_driver "none": PVM and
// Firecracker guests, guests booted without cpuidle_haltpoll) has neither, and its kernel halts on
// every idle entry; a fake tree is a sysfs root that is not the running kernel's (no eBPF there).
// Tests on the real kernel ask host_guest_kind() and assert what must hold for that kind, never
// skip; tests on fake trees run every kind (fake_guest()).
#pragma once

#include "fake_sysfs.hpp"

#include <filesystem>
#include <fstream>
#include <string>

namespace testsupport {

enum class GuestKind { haltpoll_driver, no_driver };

inline const char* to_string(GuestKind k) { return k == GuestKind::haltpoll_driver ? "haltpoll driver" : "no cpuidle driver"; }

// The running machine's kind: a cpuidle state directory for CPU 0 means a registered driver.
inline GuestKind host_guest_kind() {
  return std::filesystem::exists("/sys/devices/system/cpu/cpu0/cpuidle/state0") ? GuestKind::haltpoll_driver
                                                                                 : GuestKind::no_driver;
}

// A fake tree shaped like a guest of that kind: the haltpoll parameters exist in both (the module is
// there on a driverless KVM guest too, doing nothing).
inline FakeSysfs::Options fake_guest(GuestKind k, int cpus = 2) {
  FakeSysfs::Options o;
  o.cpus = cpus;
  if (k == GuestKind::no_driver) {
    o.driver = "none";
    o.governor = "menu";
    o.cpuidle_states = false;
  }
  return o;
}

}  // namespace testsupport
