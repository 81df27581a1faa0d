// Generic arch layer: the whole interface an architecture provides, with the defaults every
// architecture starts from (the asm-generic pattern).
//
// An architecture header (x86.hpp, arm64.hpp) defines, in its own namespace, what its CPU has and
// takes the rest from here with using-declarations, so that `arch::native::<name>` exists for every
// name below on every architecture and the barrier can choose with `if constexpr` instead of `#if`.
// The interface:
//   cpu_relax()                    spin-loop hint
//   yield_cpu()                    give the CPU to another runnable thread
//   has_counter                    a cheap per-CPU counter exists:
//   read_counter(), read_counter_ordered(), counter_frequency()   (0 = stated nowhere: calibrate)
//   has_cmpwait<T>                 a compare-and-wait for a word of type T exists (arm64 LDXR+WFE):
//   cmpwait(word, old), cmpwait_until(word, old, counter_deadline)
//   has_monitor_wait               an address-monitor wait exists (x86 UMONITOR/UMWAIT):
//   monitor_wait(word, still_waiting, counter_deadline)
// The defaults are what needs no CPU support: a compiler barrier as the relax, no counter (0), and
// "waits" that are a single relax, which is always correct because every caller re-checks the word
// (a wait may return early for any reason). None of these functions orders memory; the barrier's
// loads carry the ordering (see barrier.hpp).
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

namespace haltpoll::arch::generic {

// A compiler barrier only: keeps the loop's load from being hoisted on CPUs without a spin hint.
inline void cpu_relax() noexcept { asm volatile("" ::: "memory"); }

// Gives the CPU to another runnable thread; the right wait on an oversubscribed machine, where
// spinning would keep the thread we wait for from running.
inline void yield_cpu() noexcept { sched_yield(); }

inline constexpr bool has_counter = false;
inline std::uint64_t read_counter() noexcept { return 0; }
inline std::uint64_t read_counter_ordered() noexcept { return 0; }
// The counter's stated frequency in Hz; 0 when the architecture states none (x86: calibrated).
inline std::uint64_t counter_frequency() noexcept { return 0; }

template <class T>
inline constexpr bool has_cmpwait = false;
template <class T>
inline void cmpwait(const std::atomic<T>& /*word*/, T /*old*/) noexcept {
  cpu_relax();
}
template <class T>
inline void cmpwait_until(const std::atomic<T>& /*word*/, T /*old*/, std::uint64_t /*deadline*/) noexcept {
  cpu_relax();
}

inline constexpr bool has_monitor_wait = false;
template <class T, class StillWaiting>
inline void monitor_wait(const std::atomic<T>& /*word*/, StillWaiting& /*still_waiting*/,
                         std::uint64_t /*deadline*/) noexcept {
  cpu_relax();
}

}  // namespace haltpoll::arch::generic
