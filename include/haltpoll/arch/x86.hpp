// x86 primitives for the timeout barrier: PAUSE, RDTSC and WAITPKG (UMONITOR/UMWAIT).
//
// PAUSE tells the core it is in a spin loop (saves power, frees the sibling hyper-thread, avoids
// the memory-order machine clear on exit); it costs ~10 cycles on older cores and ~40-140 on newer
// ones, so the barrier calibrates how many fit in a microsecond instead of counting a fixed 200.
// UMONITOR arms address monitoring of the word's cache line and UMWAIT sleeps in C0.1 until that
// line is written, an interrupt arrives or the absolute TSC deadline passes (the OS may cap the
// sleep through IA32_UMWAIT_CONTROL, /sys/devices/system/cpu/umwait_control/max_time). None of
// these instructions orders memory; the caller re-loads the word with the order it needs.
#pragma once

#if !(defined(__x86_64__) || defined(__i386__))
#error "haltpoll/arch/x86.hpp included on a non-x86 target"
#endif

#include <atomic>
#include <cstdint>

#include "haltpoll/arch/generic.hpp"

namespace haltpoll::arch::x86 {

// From the generic layer: no compare-and-wait; the TSC's frequency is stated nowhere (calibrated).
using generic::cmpwait;
using generic::cmpwait_until;
using generic::counter_frequency;
using generic::has_cmpwait;
using generic::yield_cpu;

inline void cpu_relax() noexcept { __builtin_ia32_pause(); }

inline constexpr bool has_counter = true;

// Not serialising on purpose: a deadline check tolerates a few cycles of reordering.
inline std::uint64_t read_counter() noexcept { return __builtin_ia32_rdtsc(); }

// Ordered after every earlier load (LFENCE; RDTSC, the kernel's rdtsc_ordered), as a timestamp
// must be: one taken after seeing another thread's store must not read earlier than a timestamp
// that thread took before the store. Without the fence the two-thread test in barrier_test.cpp
// sees that thousands of times in most runs (RDTSC executes before the load that observed the
// store completes).
inline std::uint64_t read_counter_ordered() noexcept {
  __builtin_ia32_lfence();
  return __builtin_ia32_rdtsc();
}

// UMWAIT control: bit 0 set selects C0.1 (faster wake-up, less saving) over C0.2; a barrier
// waits for a hand-off, so wake-up latency is what matters.
inline constexpr unsigned kUmwaitC01 = 1U;

// Waits until the word's cache line is written, an interrupt, or TSC `deadline`; returns without
// sleeping when `still_waiting()` is false once the monitor is armed (the store already happened).
// Only call when CPUID.7.0:ECX[5] (WAITPKG) is set: the instructions fault otherwise.
// The instructions are emitted as bytes (checked with objdump: `umonitor %rax`, `umwait %ecx`) so that
// GCC and clang accept them alike without -mwaitpkg; their builtins disagree on arity.
inline constexpr bool has_monitor_wait = true;
template <class T, class StillWaiting>
inline void monitor_wait(const std::atomic<T>& word, StillWaiting& still_waiting, std::uint64_t deadline) noexcept {
  const volatile void* addr = &word;
  asm volatile(".byte 0xf3, 0x0f, 0xae, 0xf0" : : "a"(addr) : "memory");  // umonitor %rax
  if (still_waiting()) {
    const auto lo = static_cast<std::uint32_t>(deadline), hi = static_cast<std::uint32_t>(deadline >> 32);
    asm volatile(".byte 0xf2, 0x0f, 0xae, 0xf1" : : "c"(kUmwaitC01), "a"(lo), "d"(hi) : "memory", "cc");  // umwait %ecx
  }
}

}  // namespace haltpoll::arch::x86
