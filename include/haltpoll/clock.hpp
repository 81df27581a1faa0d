// Clocks for the timeout barrier: a cheap monotonic nanosecond clock, and the clock contract.
//
// A clock is any callable returning std::int64_t nanoseconds on a monotonic scale; a value <= 0
// means the clock failed and makes the barrier give up. monotonic_ns() is the default: the CPU's
// own counter (invariant TSC on x86, CNTVCT_EL0 on arm64 when it runs at the CNTFRQ_EL0 rate the
// firmware states) scaled to ns and anchored to
// CLOCK_MONOTONIC at first use, or clock_gettime(CLOCK_MONOTONIC) itself when the counter is not
// trustworthy (see docs/design.md, "Timeout barrier", for the rule). The source is chosen once, on
// the first call (which may take ~5 ms to calibrate the TSC), and never changes afterwards, so
// readings are monotonic within a thread; across threads they are as ordered as the hardware
// counter is (synchronised TSC / the architectural CNTVCT). Reading a clock orders no memory, but
// a reading is taken after every earlier load completes (LFENCE; RDTSC on x86, ISB; MRS on arm64,
// as the vDSO does): a time read after seeing another thread's store is not earlier than a time
// that thread read before the store, which latency measurements across threads need.
// The environment variable HALTPOLL_CLOCK=tsc|cntvct|clock_gettime overrides the choice.
#pragma once

#include <cstdint>

namespace haltpoll {

// Nanoseconds, always > 0.
std::int64_t monotonic_ns() noexcept;

// clock_gettime(CLOCK_MONOTONIC) itself, in ns: the kernel's clock, for a time compared with one
// the kernel or another process took (eBPF timestamps, systemd's MONOTONIC_USEC, a client's own
// reading). monotonic_ns() is the cheaper clock for intervals this process measures; its counter
// is anchored to this clock only once. The one place the library and the daemon read it.
std::int64_t clock_monotonic_ns() noexcept;

struct MonotonicClock {
  std::int64_t operator()() const noexcept { return monotonic_ns(); }
};

enum class ClockSource : std::uint8_t { tsc, cntvct, clock_gettime };

ClockSource clock_source() noexcept;
const char* clock_source_name() noexcept;  // "tsc", "cntvct", "clock_gettime"

namespace detail {
// Hardware counter ticks per nanosecond as a 32.32 fixed-point number, or 0 when this machine has
// no usable counter. Calibrates the TSC on first use even when monotonic_ns() does not use it
// (WAITPKG deadlines are in TSC ticks).
std::uint64_t counter_ticks_per_ns_q32() noexcept;

// How far a counter's stated frequency (CNTFRQ_EL0) may be from its measured rate. A wrong firmware
// value is typically off by a factor (19.2 vs 24 MHz is 25 %); the measurement's own error is the
// clock_gettime bracket (~1 us, ~10 us under an emulator) over 5 ms.
inline constexpr double kCounterFrequencyTolerance = 0.01;
// Measures the counter that `read` returns against CLOCK_MONOTONIC (~5 ms) and says whether it
// runs at stated_hz within kCounterFrequencyTolerance. The arm64 clock's start-up check.
bool counter_frequency_agrees(std::uint64_t stated_hz, std::uint64_t (*read)()) noexcept;

// True when the kernel keeps time with the TSC: <sysfs_root>/devices/system/clocksource/
// clocksource0/current_clocksource reads "tsc". The kernel switches away from the TSC when its
// watchdog finds it unstable, so this is its current verdict; UMWAIT's TSC deadlines rely on it.
// sysfs_root is "/sys" except in tests. An unreadable file is no verdict: false.
bool kernel_clocksource_is_tsc(const char* sysfs_root = "/sys");
}  // namespace detail

}  // namespace haltpoll
