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

template <class W, W Sticky>
void ParkingWord<W, Sticky>::futex_wake() noexcept {
  syscall(SYS_futex, futex_address(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

template <class W, W Sticky>
W ParkingWord<W, Sticky>::park(std::int64_t window_ns, ParkInfo& out, ParkCounters& counters) noexcept {
  out = ParkInfo{};

  // Guess "nothing pending, no sticky bit" instead of loading first: one compare-exchange asks for
  // the line once (exclusive). A sticky bit set by a user makes it retry with the real value.
  W cur = 0;
  do {
    if (payload(cur) != 0) {
      // Only a payload ends this loop early: the state bits are set by this (the only) owner.
      out.already_notified = true;
      return take_now();
    }
  } while (!word.compare_exchange_weak(cur, cur | kPolling, std::memory_order_acquire, std::memory_order_relaxed));
  cur |= kPolling;
  bump(counters.parks);
  out.start_ns = monotonic_ns();

  if (window_ns > 0) {
    // While the owner polls, only a notifier (payload) or a user (sticky bits) changes the word.
    cur = cond_load_acquire_timeout(word, [](W v) { return payload(v) != 0; }, MonotonicClock{}, window_ns);
    if (payload(cur) != 0) {
      // The poll read the line shared; the take below needs it exclusive. Ask for that now
      // (PREFETCHW / PRFM PSTL1KEEP), so that the upgrade travels while the clock is read.
      __builtin_prefetch(&word, 1);
      if constexpr (std::is_same_v<W, std::uintptr_t>) {
        // A pointer payload (the pool's newest task node, unless it is the slot in this line):
        // start fetching it too. A prefetch never faults.
        __builtin_prefetch(reinterpret_cast<const void*>(payload(cur)));
        __builtin_prefetch(reinterpret_cast<const char*>(payload(cur)) + 64);
      }
    }
    const std::int64_t now = monotonic_ns();
    out.poll_ns = now - out.start_ns;
    if (payload(cur) != 0) {
      out.wake_ns = now;
      out.poll_hit = true;
      bump(counters.wakes_without_syscall);
      return take_now();
    }
  }

  // kPolling -> kParked, keeping the sticky bits; a change of those alone is not a wake-up.
  for (;;) {
    if (payload(cur) != 0) {
      // The notification landed between the last poll and this transition. The notifier saw
      // kPolling and made no syscall; with a window this is a poll hit like any other.
      out.wake_ns = monotonic_ns();
      out.poll_hit = window_ns > 0;
      bump(counters.wakes_without_syscall);
      return take_now();
    }
    if (word.compare_exchange_weak(cur, (cur & ~kStateMask) | kParked, std::memory_order_acquire,
                                   std::memory_order_relaxed)) {
      break;
    }
  }

  out.parked = true;
  std::uint32_t waits = 0;
  for (;;) {
    const W v = word.load(std::memory_order_acquire);
    if (payload(v) != 0) break;
    // The value just read: kParked plus the sticky bits. If a user changes a sticky bit in
    // between, FUTEX_WAIT returns EAGAIN and the loop reads again.
    ++waits;
    futex_wait(futex_address(), static_cast<std::uint32_t>(v));
  }
  bump(counters.futex_waits, waits);
  out.futex_waits = waits;
  out.wake_ns = monotonic_ns();
  // An RMW, not a store: it must read the latest payload in the word's modification order (a
  // later notifier may have replaced the first one's) and acquire from it. See the header.
  return take_now();
}

template class ParkingWord<std::uint32_t>;
template class ParkingWord<std::uintptr_t, kSlotClaimed>;

}  // namespace haltpoll::detail
