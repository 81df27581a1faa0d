// Sensors with the real eBPF program on the running kernel (read-only: the cpuidle counters and
// the program's maps; nothing is written to the haltpoll parameters). A tick carries the eBPF
// signals only when the programs were attached from its start to its end. On a guest with a cpuidle
// driver they refine the cpuidle counters; on a guest without one they are the only count of the
// idle periods, every one a halt. Needs root, like tests/bpf; CI runs it as root.
// The QoS devices are read from a fake /dev (FakeDev): opening the real /dev/cpu_dma_latency adds a
// request at the no-constraint default, which lowers the aggregate when every request in force is
// above that default, and a test cannot rule that out without opening it.
#include "sysfs/sensors.hpp"

#include "fake_sysfs.hpp"
#include "guest_kind.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>
#include <chrono>
#include <fstream>
#include <thread>

using namespace haltpolld;

namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

// A /dev with the QoS device at the no-constraint default, for Sensors on the real root.
struct FakeDev {
  testsupport::TempDir dir;
  FakeDev() {
    std::ofstream(dir.path() + "/cpu_dma_latency", std::ios::binary)
        << testsupport::FakeSysfs::s32_bytes(testsupport::FakeSysfs::kNoLatencyConstraint);
  }
};

// Idle periods on every CPU: short sleeps end in a timer interrupt after a halt.
void some_idle() {
  for (int i = 0; i < 50; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

bool has_ebpf(const Observation& o) {
  if (!o.kernel.periods) return false;
  for (const auto& c : o.kernel.cpus)
    if (!c.outcomes_exact) return false;
  return true;
}

}  // namespace

TEST_CASE("Sensors: eBPF signals only for ticks the programs were attached for, whole", "[bpf]") {
  const auto kind = testsupport::host_guest_kind();
  INFO("this machine: " << testsupport::to_string(kind));
  FakeDev dev;
  Sensors s("/", {}, nullptr, dev.dir.path());
  // The kind of guest decides where the per-CPU counts come from.
  CHECK(s.read_cpuidle(s.cpus().front()).has_value() == (kind == testsupport::GuestKind::haltpoll_driver));
  const auto counters = kind == testsupport::GuestKind::haltpoll_driver ? KernelSignals::Counters::cpuidle
                                                                         : KernelSignals::Counters::tracepoint;
  INFO("eBPF: " << s.kernel_signals_missing());
  REQUIRE(s.enable_idle_trace());
  REQUIRE(s.idle_trace_attached());
  s.sample(now_ns());  // primes
  some_idle();
  const Observation attached = s.sample(now_ns());
  INFO("cpuidle: " << s.cpuidle_status());
  CHECK(attached.kernel.counters == counters);
  REQUIRE(attached.kernel.available());
  // The real governor and resume latency requests beside the fake device's value.
  REQUIRE(attached.kernel.overrides);
  CHECK(attached.kernel.overrides->cpu_dma_latency.value_us == testsupport::FakeSysfs::kNoLatencyConstraint);
  CHECK(attached.kernel.overrides->cpuidle == (kind == testsupport::GuestKind::haltpoll_driver));
  CHECK(attached.kernel.overrides->resume.size() == s.cpus().size());
  CHECK(has_ebpf(attached));
  CHECK(attached.kernel.bpf_detached.empty());
  if (kind == testsupport::GuestKind::no_driver) {
    // This kernel does not poll: the tracepoint sees every idle entry as a halt, and says so.
    CHECK(s.cpuidle_status().find("does not poll") != std::string::npos);
    CHECK(attached.kernel.total(&CpuKernelSignals::poll_entries) == 0);
    CHECK(attached.kernel.total(&CpuKernelSignals::poll_ns) == 0);
    CHECK(attached.kernel.total(&CpuKernelSignals::halts) > 0);
    CHECK(attached.cpuidle.empty());
    CHECK(!attached.poll_cpu_percent);
  }

  REQUIRE(s.set_idle_trace_attached(false, "steady"));
  CHECK(!s.idle_trace_attached());
  CHECK(s.kernel_signals_status().find("detached: steady") != std::string::npos);
  some_idle();
  const Observation detached = s.sample(now_ns());
  CHECK(detached.kernel.counters == counters);
  // Detached, a driverless guest has no count of its idle periods at all; a haltpoll one keeps the
  // cpuidle counters.
  CHECK(detached.kernel.available() == (kind == testsupport::GuestKind::haltpoll_driver));
  CHECK(!has_ebpf(detached));
  CHECK(!detached.kernel.periods);
  for (const auto& c : detached.kernel.cpus) {
    CHECK(!c.outcomes_exact);
    CHECK(!c.ipi_skipped);
  }
  CHECK(detached.kernel.bpf_detached == "steady");

  // Attached right after a sample: the next tick is whole and carries them, with histograms
  // whose counts are the program's own view of that tick's periods only.
  s.sample(now_ns());
  REQUIRE(s.set_idle_trace_attached(true));
  some_idle();
  const Observation again = s.sample(now_ns());
  CHECK(has_ebpf(again));
  CHECK(again.kernel.bpf_detached.empty());
  REQUIRE(again.kernel.periods);
  std::uint64_t halts = 0;
  for (const auto& c : again.kernel.cpus) halts += c.halts;
  // The histograms hold the halts of this tick only: none of the detached ticks' (the counters' halts
  // were a few ms longer, between the sample and the attach).
  CHECK(again.kernel.periods->halt_residency.count() <= halts + again.kernel.cpus.size());
  CHECK(again.kernel.periods->halt_residency.count() > 0);
  CHECK(again.kernel.periods->halt_residency.sum_ns() <= again.elapsed_ns * again.kernel.cpus.size());
}

TEST_CASE("Sensors: without a program, attaching is refused and nothing changes", "[bpf]") {
  FakeDev dev;
  Sensors s("/", {}, nullptr, dev.dir.path());
  CHECK(!s.set_idle_trace_attached(true));
  CHECK(!s.idle_trace_attached());
  s.sample(now_ns());
  some_idle();
  const Observation o = s.sample(now_ns());
  CHECK(!o.kernel.periods);
  CHECK(o.kernel.bpf_detached.empty());
  CHECK(o.kernel.bpf_missing == "eBPF kernel signals not requested");
}
