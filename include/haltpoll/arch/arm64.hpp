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

namespace haltpoll::arch::arm64 {

inline void cpu_relax() noexcept { asm volatile("yield" ::: "memory"); }

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

// Waits for an event while the word still holds `old`: a store to it, the event stream, an
// interrupt or any SEV. Spurious returns are allowed; the caller re-checks.
template <class T>
inline void cmpwait(const std::atomic<T>& word, T old) noexcept {
  static_assert(has_cmpwait<T>);
  std::uint64_t diff;
  const void* p = &word;
  if constexpr (sizeof(T) == 1) {
    asm volatile("sevl\n\twfe\n\tldxrb %w[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\twfe\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)) : "memory");
  } else if constexpr (sizeof(T) == 2) {
    asm volatile("sevl\n\twfe\n\tldxrh %w[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\twfe\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    asm volatile("sevl\n\twfe\n\tldxr %w[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\twfe\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)) : "memory");
  } else {
    asm volatile("sevl\n\twfe\n\tldxr %x[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\twfe\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)) : "memory");
  }
}

// As cmpwait, but also wakes at the absolute CNTVCT_EL0 value `deadline`. WFET is emitted as
// `.inst` (0xd5031000 | Rt, with Rt = x16) because assemblers before binutils 2.38 lack the
// mnemonic; only call it when HWCAP2_WFXT is set, it is UNDEFINED otherwise.
template <class T>
inline void cmpwait_until(const std::atomic<T>& word, T old, std::uint64_t deadline) noexcept {
  static_assert(has_cmpwait<T>);
  std::uint64_t diff;
  const void* p = &word;
  register std::uint64_t deadline_reg asm("x16") = deadline;
  if constexpr (sizeof(T) == 1) {
    asm volatile("sevl\n\twfe\n\tldxrb %w[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\t.inst 0xd5031010\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)), "r"(deadline_reg) : "memory");
  } else if constexpr (sizeof(T) == 2) {
    asm volatile("sevl\n\twfe\n\tldxrh %w[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\t.inst 0xd5031010\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)), "r"(deadline_reg) : "memory");
  } else if constexpr (sizeof(T) == 4) {
    asm volatile("sevl\n\twfe\n\tldxr %w[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\t.inst 0xd5031010\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)), "r"(deadline_reg) : "memory");
  } else {
    asm volatile("sevl\n\twfe\n\tldxr %x[diff], [%[p]]\n\teor %x[diff], %x[diff], %x[old]\n\tcbnz %x[diff], 1f\n\t.inst 0xd5031010\n1:"
                 : [diff] "=&r"(diff) : [p] "r"(p), [old] "r"(detail::pattern(old)), "r"(deadline_reg) : "memory");
  }
}

}  // namespace haltpoll::arch::arm64
