#include "haltpoll/clock.hpp"

#include "haltpoll/arch/select.hpp"

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>

#if HALTPOLL_ARCH_X86
#include <cpuid.h>
#endif

namespace haltpoll {
namespace {

__extension__ typedef unsigned __int128 u128;

struct Sample {
  std::uint64_t ticks;
  std::int64_t ns;
};

// The counter value taken halfway through the clock_gettime call with the tightest bracket of
// five, so a preemption in the middle of one attempt does not skew the pair.
template <class Read>
Sample paired_sample(Read read) noexcept {
  Sample best{0, 0};
  std::uint64_t best_width = ~std::uint64_t{0};
  for (int i = 0; i < 5; ++i) {
    const std::uint64_t t0 = read();
    const std::int64_t ns = clock_monotonic_ns();
    const std::uint64_t t1 = read();
    if (t1 - t0 < best_width) {
      best_width = t1 - t0;
      best = Sample{t0 + (t1 - t0) / 2, ns};
    }
  }
  return best;
}

template <class Read>
Sample sample_after(Read read, const Sample& from, std::int64_t ns) noexcept {
  while (clock_monotonic_ns() - from.ns < ns) {
  }
  return paired_sample(read);
}

// Three samples 2.5 ms apart: the counter's rate in ticks/ns over each half and over the whole.
struct RateSamples {
  Sample a, b, c;
  double r1, r2, rate;
};

template <class Read>
RateSamples measure_rate(Read read) noexcept {
  RateSamples m;
  m.a = paired_sample(read);
  m.b = sample_after(read, m.a, 2'500'000);
  m.c = sample_after(read, m.b, 2'500'000);
  m.r1 = static_cast<double>(m.b.ticks - m.a.ticks) / static_cast<double>(m.b.ns - m.a.ns);
  m.r2 = static_cast<double>(m.c.ticks - m.b.ticks) / static_cast<double>(m.c.ns - m.b.ns);
  m.rate = static_cast<double>(m.c.ticks - m.a.ticks) / static_cast<double>(m.c.ns - m.a.ns);
  return m;
}

// ns = base_ns + (ticks - base_ticks) * ns_per_tick_q32 >> 32
struct CounterScale {
  bool usable = false;
  std::uint64_t base_ticks = 0;
  std::int64_t base_ns = 0;
  std::uint64_t ns_per_tick_q32 = 0;
  std::uint64_t ticks_per_ns_q32 = 0;
};

#if HALTPOLL_ARCH_X86

bool cpu_has_invariant_tsc() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000U, &a, &b, &c, &d) == 0 || a < 0x80000007U) return false;
  __get_cpuid(0x80000007U, &a, &b, &c, &d);
  return (d & (1U << 8)) != 0;  // CPUID.80000007H:EDX[8], constant and non-stop TSC
}

// The kernel's own verdict: when it lists its clock sources and "tsc" is not among them, it has
// ruled the TSC out (tsc=unstable on the command line, or its clocksource watchdog saw it drift).
// An unreadable file (no /sys in a sandbox) is no verdict.
bool kernel_rules_out_tsc() {
  std::ifstream in("/sys/devices/system/clocksource/clocksource0/available_clocksource");
  if (!in) return false;
  std::string name;
  while (in >> name) {
    if (name == "tsc") return false;
  }
  return true;
}

// Two back-to-back 2.5 ms windows; the TSC is trusted only when both give the same rate within
// 0.1% and the rate is plausible. 0.1% of 2.5 ms is 2.5 us, far above the bracketing error.
CounterScale calibrate_tsc() noexcept {
  CounterScale s;
  const RateSamples m = measure_rate([]() noexcept { return arch::x86::read_counter(); });
  const double rate = m.rate;
  if (!(rate > 0.1 && rate < 20.0)) return s;  // 100 MHz .. 20 GHz
  if (m.r1 / m.r2 > 1.001 || m.r2 / m.r1 > 1.001) return s;
  s.usable = true;
  s.base_ticks = m.c.ticks;
  s.base_ns = m.c.ns;
  s.ns_per_tick_q32 = static_cast<std::uint64_t>(4294967296.0 / rate);
  s.ticks_per_ns_q32 = static_cast<std::uint64_t>(4294967296.0 * rate);
  return s;
}

#elif HALTPOLL_ARCH_ARM64

// CNTFRQ_EL0 is whatever the firmware wrote there; a wrong value would scale every window,
// timeout and deadline. So it is trusted only when the counter, measured against
// CLOCK_MONOTONIC as the TSC is, runs at that rate; otherwise the OS clock is used.
CounterScale arm64_scale() noexcept {
  CounterScale s;
  const std::uint64_t freq = arch::arm64::counter_frequency();
  if (freq == 0 || !detail::counter_frequency_agrees(freq, [] { return arch::arm64::read_counter(); })) return s;
  s.usable = true;
  s.base_ticks = arch::arm64::read_counter();
  s.base_ns = clock_monotonic_ns();
  s.ns_per_tick_q32 = static_cast<std::uint64_t>((u128{1'000'000'000} << 32) / freq);
  s.ticks_per_ns_q32 = static_cast<std::uint64_t>((u128{freq} << 32) / 1'000'000'000);
  return s;
}

#endif

enum class Override : std::uint8_t { none, counter, clock_gettime };

Override env_override() noexcept {
  const char* v = std::getenv("HALTPOLL_CLOCK");
  if (v == nullptr) return Override::none;
  if (std::strcmp(v, "clock_gettime") == 0) return Override::clock_gettime;
  if (std::strcmp(v, "tsc") == 0 || std::strcmp(v, "cntvct") == 0) return Override::counter;
  return Override::none;
}

const CounterScale& counter_scale() noexcept {
  static const CounterScale scale = [] {
#if HALTPOLL_ARCH_X86
    return cpu_has_invariant_tsc() ? calibrate_tsc() : CounterScale{};
#elif HALTPOLL_ARCH_ARM64
    return arm64_scale();
#else
    return CounterScale{};
#endif
  }();
  return scale;
}

struct ClockState {
  ClockSource source = ClockSource::clock_gettime;
  const CounterScale* scale = nullptr;
};

ClockState choose() noexcept {
  ClockState st;
  const Override ov = env_override();
  if (ov == Override::clock_gettime) return st;
#if HALTPOLL_ARCH_X86
  bool want = cpu_has_invariant_tsc();
  if (ov == Override::none) {
    try {
      want = want && !kernel_rules_out_tsc();
    } catch (...) {
      want = false;
    }
  }
  if (want && counter_scale().usable) {
    st.source = ClockSource::tsc;
    st.scale = &counter_scale();
  }
#elif HALTPOLL_ARCH_ARM64
  if (counter_scale().usable) {
    st.source = ClockSource::cntvct;
    st.scale = &counter_scale();
  }
#endif
  return st;
}

const ClockState& state() noexcept {
  static const ClockState st = choose();
  return st;
}

}  // namespace

std::int64_t monotonic_ns() noexcept {
  const ClockState& st = state();
#if HALTPOLL_ARCH_X86 || HALTPOLL_ARCH_ARM64
  if (st.scale != nullptr) {
    // Ordered: monotonic_ns() also stamps events (the pool's submit→start latencies).
    const std::uint64_t now = arch::native::read_counter_ordered();
    // A counter a hair behind the calibrating CPU's reads as the anchor, never as going back.
    const std::uint64_t delta = now > st.scale->base_ticks ? now - st.scale->base_ticks : 0;
    return st.scale->base_ns + static_cast<std::int64_t>((u128{delta} * st.scale->ns_per_tick_q32) >> 32);
  }
#endif
  return clock_monotonic_ns();
}

std::int64_t clock_monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ClockSource clock_source() noexcept { return state().source; }

const char* clock_source_name() noexcept {
  switch (clock_source()) {
    case ClockSource::tsc: return "tsc";
    case ClockSource::cntvct: return "cntvct";
    case ClockSource::clock_gettime: break;
  }
  return "clock_gettime";
}

namespace detail {
bool counter_frequency_agrees(std::uint64_t stated_hz, std::uint64_t (*read)()) noexcept {
  if (stated_hz == 0) return false;
  const RateSamples m = measure_rate(read);
  const double ratio = m.rate * 1e9 / static_cast<double>(stated_hz);
  return ratio > 1.0 - kCounterFrequencyTolerance && ratio < 1.0 + kCounterFrequencyTolerance;
}

bool kernel_clocksource_is_tsc(const char* sysfs_root) {
  std::ifstream in(std::string(sysfs_root) + "/devices/system/clocksource/clocksource0/current_clocksource");
  std::string name;
  return in && (in >> name) && name == "tsc";
}

std::uint64_t counter_ticks_per_ns_q32() noexcept {
  const CounterScale& s = counter_scale();
  return s.usable ? s.ticks_per_ns_q32 : 0;
}
}  // namespace detail

}  // namespace haltpoll
