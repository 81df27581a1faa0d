#include "haltpoll/barrier.hpp"

#include "haltpoll/clock.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if HALTPOLL_ARCH_X86
#include <cpuid.h>
#include <unistd.h>
#elif HALTPOLL_ARCH_ARM64
#include <sys/auxv.h>
#endif

namespace haltpoll {
namespace detail {
constinit BarrierTuning barrier_tuning{};
}  // namespace detail

namespace {

#if HALTPOLL_ARCH_ARM64
constexpr unsigned long kHwcapEvtstrm = 1UL << 2;  // AT_HWCAP
constexpr unsigned long kHwcap2Wfxt = 1UL << 31;   // AT_HWCAP2
#endif

struct Availability {
  bool x86_pause = false;
  bool x86_waitpkg = false;
  bool arm64_wfe = false;
  bool arm64_wfet = false;
};

Availability probe() noexcept {
  Availability a;
#if HALTPOLL_ARCH_X86
  a.x86_pause = true;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool cpu_waitpkg = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1U << 5)) != 0;
  // The kernel exposes umwait_control only when it manages IA32_UMWAIT_CONTROL for user space;
  // without it we do not know the OS cap on the sleep. The deadline needs the TSC rate as well,
  // and a TSC the kernel still keeps time with (it leaves the TSC once it finds it unstable; an
  // operator's HALTPOLL_CLOCK=tsc vouches for it instead).
  bool tsc_trusted = false;
  try {
    const char* clock_env = std::getenv("HALTPOLL_CLOCK");
    tsc_trusted = detail::kernel_clocksource_is_tsc() || (clock_env != nullptr && std::strcmp(clock_env, "tsc") == 0);
  } catch (...) {
  }
  a.x86_waitpkg = cpu_waitpkg && tsc_trusted &&
                  access("/sys/devices/system/cpu/umwait_control/max_time", R_OK) == 0 &&
                  detail::counter_ticks_per_ns_q32() != 0;
#elif HALTPOLL_ARCH_ARM64
  // WFE's bound comes from the event-stream period, which the kernel derives from the counter
  // frequency: only with a CNTFRQ that passed the clock's cross-check.
  a.arm64_wfe = (getauxval(AT_HWCAP) & kHwcapEvtstrm) != 0 && detail::counter_ticks_per_ns_q32() != 0;
  a.arm64_wfet = (getauxval(AT_HWCAP2) & kHwcap2Wfxt) != 0 && detail::counter_ticks_per_ns_q32() != 0;
#endif
  return a;
}

bool available(const Availability& a, BarrierBackend b) noexcept {
  switch (b) {
    case BarrierBackend::spin: return true;
    case BarrierBackend::x86_pause: return a.x86_pause;
    case BarrierBackend::x86_waitpkg: return a.x86_waitpkg;
    case BarrierBackend::arm64_wfe: return a.arm64_wfe;
    case BarrierBackend::arm64_wfet: return a.arm64_wfet;
    case BarrierBackend::generic_yield: return true;
  }
  return false;
}

BarrierBackend preferred(const Availability& a) noexcept {
  if (a.x86_waitpkg) return BarrierBackend::x86_waitpkg;
  if (a.x86_pause) return BarrierBackend::x86_pause;
  if (a.arm64_wfet) return BarrierBackend::arm64_wfet;
  if (a.arm64_wfe) return BarrierBackend::arm64_wfe;
  return BarrierBackend::spin;
}

constexpr BarrierBackend kAllBackends[] = {BarrierBackend::spin,      BarrierBackend::x86_pause,
                                           BarrierBackend::x86_waitpkg, BarrierBackend::arm64_wfe,
                                           BarrierBackend::arm64_wfet, BarrierBackend::generic_yield};

// The cost of the spinning backends' inner step (cpu_relax + load + condition), the fastest of
// seven runs of 2000 steps, so a preemption during one run does not count. PAUSE alone varies from
// ~10 to ~140 cycles between cores, so no fixed count gives the same time everywhere.
std::uint32_t calibrate_relaxes_per_us() noexcept {
  constexpr std::uint32_t kSteps = 2000;
  std::atomic<std::uint32_t> word{0};
  std::uint32_t v = 0;
  auto never = [](std::uint32_t) noexcept { return false; };
  std::int64_t best = INT64_MAX;
  for (int run = 0; run < 7; ++run) {
    const std::int64_t t0 = clock_monotonic_ns();
    detail::relax_batch<std::memory_order_relaxed>(word, v, never, kSteps);
    best = std::min(best, clock_monotonic_ns() - t0);
  }
  if (best <= 0) best = 1;
  const std::int64_t per_us = std::int64_t{kSteps} * 1000 / best;
  return static_cast<std::uint32_t>(std::clamp<std::int64_t>(per_us, 1, 100'000));
}

struct StartUp {
  Availability avail;
  BarrierBackend chosen = BarrierBackend::spin;
};

const StartUp& start_up() noexcept {
  static const StartUp s = [] {
    StartUp st;
    st.avail = probe();
    st.chosen = preferred(st.avail);
    // An operator's (or benchmark's) choice, honoured only when the backend works here.
    if (const char* env = std::getenv("HALTPOLL_BARRIER_BACKEND")) {
      for (BarrierBackend b : kAllBackends) {
        if (std::strcmp(env, to_string(b)) == 0 && available(st.avail, b)) st.chosen = b;
      }
    }
    detail::barrier_tuning.relaxes_per_us.store(calibrate_relaxes_per_us(), std::memory_order_relaxed);
    if (st.avail.x86_waitpkg || st.avail.arm64_wfet) {
      detail::barrier_tuning.counter_ticks_per_ns_q32.store(detail::counter_ticks_per_ns_q32(),
                                                            std::memory_order_relaxed);
    }
#if HALTPOLL_ARCH_ARM64
    // Also without HWCAP_EVTSTRM: force_backend_unchecked(arm64_wfe) then behaves as it would.
    if (detail::counter_ticks_per_ns_q32() != 0) {
      detail::barrier_tuning.event_stream_period_ns.store(
          detail::event_stream_period_ns(arch::arm64::counter_frequency()), std::memory_order_relaxed);
    }
#endif
    detail::barrier_tuning.backend.store(st.chosen, std::memory_order_relaxed);
    return st;
  }();
  return s;
}

// Select at load time, so the first wait already uses the right backend; until then (static
// initialisers of other translation units) the constinit defaults give a correct plain spin.
[[maybe_unused]] const bool selected_at_start_up = (start_up(), true);

}  // namespace

BarrierBackend active_backend() noexcept {
  start_up();
  return detail::barrier_tuning.backend.load(std::memory_order_relaxed);
}

BarrierBackend default_backend() noexcept { return start_up().chosen; }

const char* to_string(BarrierBackend backend) noexcept {
  switch (backend) {
    case BarrierBackend::spin: return "spin";
    case BarrierBackend::x86_pause: return "x86_pause";
    case BarrierBackend::x86_waitpkg: return "x86_waitpkg";
    case BarrierBackend::arm64_wfe: return "arm64_wfe";
    case BarrierBackend::arm64_wfet: return "arm64_wfet";
    case BarrierBackend::generic_yield: return "generic_yield";
  }
  return "unknown";
}

bool force_backend(BarrierBackend backend) noexcept {
  if (!available(start_up().avail, backend)) return false;
  detail::barrier_tuning.backend.store(backend, std::memory_order_relaxed);
  return true;
}

std::vector<BarrierBackend> available_backends() {
  const StartUp& st = start_up();
  std::vector<BarrierBackend> out{st.chosen};
  for (BarrierBackend b : kAllBackends) {
    if (b != st.chosen && available(st.avail, b)) out.push_back(b);
  }
  return out;
}

std::uint32_t relaxes_per_us() noexcept {
  start_up();
  return detail::barrier_tuning.relaxes_per_us.load(std::memory_order_relaxed);
}

std::int64_t overshoot_bound_ns(BarrierBackend backend) noexcept {
  const std::int64_t per_us = relaxes_per_us();
  switch (backend) {
    case BarrierBackend::spin:
    case BarrierBackend::arm64_wfe:
      return (std::int64_t{detail::kFixedPollCount} * 1000 + per_us - 1) / per_us;
    case BarrierBackend::x86_pause:
      // Two relaxes of rounding, plus 1/8 of the longest last batch for the calibration's error
      // (the fastest of seven runs: a real PAUSE is often a little slower).
      return (2 * 1000 + per_us - 1) / per_us + (detail::kSpinBatchNs + detail::kSpinBatchNs / 4) / 8;
    case BarrierBackend::x86_waitpkg:
    case BarrierBackend::arm64_wfet:
      return 1000;
    case BarrierBackend::generic_yield:
      break;
  }
  return -1;
}

namespace detail {
void force_backend_unchecked(BarrierBackend backend) noexcept {
  start_up();
  barrier_tuning.backend.store(backend, std::memory_order_relaxed);
}
}  // namespace detail

}  // namespace haltpoll
