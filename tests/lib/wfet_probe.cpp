// Instantiates the arm64 timed compare-and-wait for every width, directly and through the
// barrier, so that wfet_disasm_check.cmake can inspect the code the compiler made of it. Compiled,
// never run.
#include <atomic>
#include <cstdint>

#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"

namespace probe {

template <class T>
[[gnu::noinline]] void direct(const std::atomic<T>& word, T old, std::uint64_t deadline) {
  haltpoll::arch::arm64::cmpwait_until(word, old, deadline);
}

template <class T>
[[gnu::noinline]] T through_barrier(const std::atomic<T>& word, std::int64_t timeout_ns) {
  return haltpoll::cond_load_acquire_timeout(word, [](T v) { return v != T{}; }, haltpoll::MonotonicClock{}, timeout_ns);
}

template void direct<std::uint8_t>(const std::atomic<std::uint8_t>&, std::uint8_t, std::uint64_t);
template void direct<std::uint16_t>(const std::atomic<std::uint16_t>&, std::uint16_t, std::uint64_t);
template void direct<std::uint32_t>(const std::atomic<std::uint32_t>&, std::uint32_t, std::uint64_t);
template void direct<std::uint64_t>(const std::atomic<std::uint64_t>&, std::uint64_t, std::uint64_t);
template std::uint8_t through_barrier<std::uint8_t>(const std::atomic<std::uint8_t>&, std::int64_t);
template std::uint64_t through_barrier<std::uint64_t>(const std::atomic<std::uint64_t>&, std::int64_t);

}  // namespace probe
