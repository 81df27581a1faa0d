// The park algorithm of detail::ParkingWord (include/haltpoll/detail/parking_word.hpp), shared by
// Parker (a 32-bit word whose payload is NOTIFIED) and the WorkerPool's queue (a pointer word
// whose payload is the top of the task stack).
#include "haltpoll/detail/parking_word.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"

namespace haltpoll::detail {

namespace {

// Private futexes: the word never leaves the process, so the kernel can skip the mm lookup.
// Results are ignored on purpose: EAGAIN (the word already changed) and EINTR (a signal) both
// mean "re-check the word", which park()'s loop does.
void futex_wait(std::uint32_t* word, std::uint32_t expected) noexcept {
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

template <class W>
void ParkingWord<W>::futex_wake() noexcept {
  syscall(SYS_futex, futex_address(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

template <class W>
W ParkingWord<W>::park(std::int64_t window_ns, ParkInfo& out, ParkCounters& counters) noexcept {
  out = ParkInfo{};

  W expected = 0;
  if (!word.compare_exchange_strong(expected, kPolling, std::memory_order_acquire, std::memory_order_relaxed)) {
    // Only a payload can be here: the state bits are set by this (the only) owner.
    out.already_notified = true;
    return word.exchange(0, std::memory_order_acquire);
  }
  bump(counters.parks);
  out.start_ns = monotonic_ns();

  if (window_ns > 0) {
    // While the owner polls, only a notifier can change the word, and it leaves a payload.
    const W seen = cond_load_acquire_timeout(word, [](W v) { return v != kPolling; }, MonotonicClock{}, window_ns);
    if constexpr (std::is_same_v<W, std::uintptr_t>) {
      // A pointer payload (the pool's newest task node, 80 bytes): start fetching its lines now, so
      // that they travel while the clock is read and the word is taken. A prefetch never faults.
      if (seen != kPolling) {
        __builtin_prefetch(reinterpret_cast<const void*>(seen));
        __builtin_prefetch(reinterpret_cast<const char*>(seen) + 64);
      }
    }
    const std::int64_t now = monotonic_ns();
    out.poll_ns = now - out.start_ns;
    if (seen != kPolling) {
      out.wake_ns = now;
      out.poll_hit = true;
      bump(counters.wakes_without_syscall);
      return word.exchange(0, std::memory_order_acquire);
    }
  }

  expected = kPolling;
  if (!word.compare_exchange_strong(expected, kParked, std::memory_order_acquire, std::memory_order_relaxed)) {
    // The notification landed between the last poll and this transition. The notifier saw
    // kPolling and made no syscall; with a window this is a poll hit like any other.
    out.wake_ns = monotonic_ns();
    out.poll_hit = window_ns > 0;
    bump(counters.wakes_without_syscall);
    return word.exchange(0, std::memory_order_acquire);
  }

  out.parked = true;
  std::uint32_t waits = 0;
  while (word.load(std::memory_order_acquire) == kParked) {
    ++waits;
    futex_wait(futex_address(), static_cast<std::uint32_t>(kParked));
  }
  bump(counters.futex_waits, waits);
  out.futex_waits = waits;
  out.wake_ns = monotonic_ns();
  // An exchange, not a store: it must read the latest payload in the word's modification order
  // (a later notifier may have replaced the first one's) and acquire from it. See the header.
  return word.exchange(0, std::memory_order_acquire);
}

template class ParkingWord<std::uint32_t>;
#if UINTPTR_MAX != UINT32_MAX
template class ParkingWord<std::uintptr_t>;
#endif

}  // namespace haltpoll::detail
