// arm64 primitives for the timeout barrier: YIELD, CNTVCT_EL0 and the LDXR+WFE / WFET
// compare-and-wait.
//
// LDXR arms the exclusive monitor on the word's granule; a store to it by another CPU clears the
// monitor and thereby generates a wake-up event for WFE. WFE alone is bounded only by the timer
// event stream (HWCAP_EVTSTRM, ~100 us), so the barrier uses it only for waits at least that long;
// WFET (HWCAP2_WFXT) also takes an absolute CNTVCT_EL0 deadline. EL0 may execute both because
// Linux sets SCTLR_EL1.nTWE. `sevl; wfe` first consumes any stale event so the final wait
// really waits. The sequence is the kernel's __cmpwait. None of this orders memory: the caller
// re-loads the word with the order it needs (an exclusive load is never returned to the user).
#pragma once

#if !defined(__aarch64__)
#error "haltpoll/arch/arm64.hpp included on a non-arm64 target"
#endif

#include <atomic>
#include <bit>
#include <cstdint>

#include "haltpoll/arch/generic.hpp"

namespace haltpoll::arch::arm64 {

// From the generic layer: no address-monitor wait (the exclusive monitor serves cmpwait instead).
using generic::has_monitor_wait;
using generic::monitor_wait;
using generic::yield_cpu;

inline void cpu_relax() noexcept { asm volatile("yield" ::: "memory"); }

inline constexpr bool has_counter = true;

// The ISB keeps the read from being hoisted above earlier loads, as the kernel's vDSO does.
inline std::uint64_t read_counter() noexcept {
  std::uint64_t v;
  asm volatile("isb\n\tmrs %0, cntvct_el0" : "=r"(v)::"memory");
  return v;
}

// Already ordered after earlier loads (the ISB above).
inline std::uint64_t read_counter_ordered() noexcept { return read_counter(); }

inline std::uint64_t counter_frequency() noexcept {
  std::uint64_t v;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(v));
  return v;
}

// Exclusive loads exist for 1, 2, 4 and 8 bytes; other types fall back to a spin in the barrier.
template <class T>
inline constexpr bool has_cmpwait = sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8;

namespace detail {
template <std::size_t N> struct bits_of;
template <> struct bits_of<1> { using type = std::uint8_t; };
template <> struct bits_of<2> { using type = std::uint16_t; };
template <> struct bits_of<4> { using type = std::uint32_t; };
template <> struct bits_of<8> { using type = std::uint64_t; };

// Zero-extended bit pattern, matching what LDXR{B,H} leave in a register.
template <class T>
inline std::uint64_t pattern(T v) noexcept {
  return static_cast<std::uint64_t>(std::bit_cast<typename bits_of<sizeof(T)>::type>(v));
}
}  // namespace detail

namespace detail {
// `.L__hp_gpr_num_x<N>` = N for every general register, so that an instruction emitted with
// `.inst` can encode whatever register the compiler chose (the kernel's __DEFINE_ASM_GPR_NUMS).
#define HALTPOLL_ARM64_GPR_NUMS                                                                      \
  ".irp num,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30\n" \
  ".equ .L__hp_gpr_num_x\\num, \\num\n"                                                           \
  ".endr\n"

// WFET Xt is `msr s0_3_c1_c0_0, Xt` = 0xd5031000 | t; emitted as `.inst` because assemblers
// before binutils 2.38 lack the mnemonic.
#define HALTPOLL_ARM64_WFET ".inst 0xd5031000 | .L__hp_gpr_num_%x[deadline]"

// The compare-and-wait body, one per load width and wait instruction. Every input is a plain
// register operand computed before the statement: no fixed register (a `register asm("x16")`
// variable is not preserved across calls made while evaluating the other operands, and at -O0,
// or through a PLT stub, those calls write x16).
#define HALTPOLL_ARM64_CMPWAIT(load, wait)                                                           \
  asm volatile(HALTPOLL_ARM64_GPR_NUMS "sevl\n\twfe\n\t" load                                      \
               ", [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\t" wait "\n1:" \
               : [diff] "=&r"(diff)                                                                \
               : [p] "r"(p), [old] "r"(expected), [deadline] "r"(deadline)                          \
               : "memory")

template <class T, bool Timed>
inline void cmpwait_impl(const std::atomic<T>& word, T old, std::uint64_t deadline) noexcept {
  static_assert(has_cmpwait<T>);
  const std::uint64_t expected = pattern(old);
  const void* const p = &word;
  std::uint64_t diff;
  if constexpr (sizeof(T) == 1) {
    if constexpr (Timed) HALTPOLL_ARM64_CMPWAIT("ldxrb %w[diff]", HALTPOLL_ARM64_WFET);
    else HALTPOLL_ARM64_CMPWAIT("ldxrb %w[diff]", "wfe");
  } else if constexpr (sizeof(T) == 2) {
    if constexpr (Timed) HALTPOLL_ARM64_CMPWAIT("ldxrh %w[diff]", HALTPOLL_ARM64_WFET);
    else HALTPOLL_ARM64_CMPWAIT("ldxrh %w[diff]", "wfe");
  } else if constexpr (sizeof(T) == 4) {
    if constexpr (Timed) HALTPOLL_ARM64_CMPWAIT("ldxr %w[diff]", HALTPOLL_ARM64_WFET);
    else HALTPOLL_ARM64_CMPWAIT("ldxr %w[diff]", "wfe");
  } else {
    if constexpr (Timed) HALTPOLL_ARM64_CMPWAIT("ldxr %x[diff]", HALTPOLL_ARM64_WFET);
    else HALTPOLL_ARM64_CMPWAIT("ldxr %x[diff]", "wfe");
  }
}
#undef HALTPOLL_ARM64_CMPWAIT
#undef HALTPOLL_ARM64_WFET
#undef HALTPOLL_ARM64_GPR_NUMS
}  // namespace detail

// Waits for an event while the word still holds `old`: a store to it, the event stream, an
// interrupt or any SEV. Spurious returns are allowed; the caller re-checks.
template <class T>
inline void cmpwait(const std::atomic<T>& word, T old) noexcept {
  detail::cmpwait_impl<T, false>(word, old, 0);
}

// As cmpwait, but also wakes at the absolute CNTVCT_EL0 value `deadline`. Only call it when
// HWCAP2_WFXT is set: WFET is UNDEFINED otherwise.
template <class T>
inline void cmpwait_until(const std::atomic<T>& word, T old, std::uint64_t deadline) noexcept {
  detail::cmpwait_impl<T, true>(word, old, deadline);
}

}  // namespace haltpoll::arch::arm64
