// The park algorithm of detail::ParkingWord (include/haltpoll/detail/parking_word.hpp), shared by
// Parker (a 32-bit word whose payload is NOTIFIED) and the WorkerPool's queue (a pointer word
// whose payload is the top of the task stack).
#include "haltpoll/detail/parking_word.hpp"

#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"

namespace haltpoll::detail {

namespace {

// Private futexes: the word never leaves the process, so the kernel can skip the mm lookup.
// Both return 0 or the errno.
int futex_wait(std::uint32_t* word, std::uint32_t expected) noexcept {
  return syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0) == 0 ? 0 : errno;
}
int futex_wake_one(std::uint32_t* word) noexcept {
  return syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0) >= 0 ? 0 : errno;
}

// EAGAIN (the word already changed), EINTR (a signal) and ETIMEDOUT mean "re-check the word";
// anything else will most likely fail again at once, and treating it as a spurious wake-up would
// turn the park into a silent 100 % CPU spin.
bool futex_error(int err) noexcept { return err != 0 && err != EAGAIN && err != EINTR && err != ETIMEDOUT; }

std::atomic<std::uint64_t> wait_errors{0}, wake_errors{0};
std::atomic<int> last_errno{0};
std::atomic<bool> wait_logged{false}, wake_logged{false};

void report(int err, std::atomic<std::uint64_t>& count, std::atomic<bool>& logged, const char* op) noexcept {
  count.fetch_add(1, std::memory_order_relaxed);
  last_errno.store(err, std::memory_order_relaxed);
  if (!logged.exchange(true, std::memory_order_relaxed)) {
    char buf[128];
    std::fprintf(stderr, "haltpoll: %s failed: %s (errno %d); counted in the futex error statistics, not logged again\n",
                 op, strerror_r(err, buf, sizeof buf), err);
  }
}

// After the n-th consecutive failure: 50 us, doubling up to 10 ms. The owner then notices a
// notification within 10 ms at worst (it re-reads the word after each sleep) and uses ~nothing.
void back_off(std::uint32_t n) noexcept {
  const long us = 50L << (n < 8 ? n - 1 : 7);
  timespec ts{0, (us < 10'000 ? us : 10'000) * 1000};
  nanosleep(&ts, nullptr);
}

void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

template <class W, W Sticky>
void ParkingWord<W, Sticky>::futex_wake() noexcept {
  if (const int err = futex_wake_one(futex_address()); err != 0) report(err, wake_errors, wake_logged, "FUTEX_WAKE");
}

template <class W, W Sticky>
W ParkingWord<W, Sticky>::park(std::int64_t window_ns, ParkInfo& out, ParkCounters& counters,
                               bool stamp_hits) noexcept {
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
    std::int64_t last_read = out.start_ns;
    cur = cond_load_acquire_timeout(
        word, [](W v) { return payload(v) != 0; }, [&last_read]() noexcept { return last_read = monotonic_ns(); },
        window_ns);
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
    const bool hit = payload(cur) != 0;
    const std::int64_t now = hit && !stamp_hits ? last_read : monotonic_ns();
    out.poll_ns = now - out.start_ns;
    if (hit) {
      out.wake_ns = now;
      out.wake_stamped = stamp_hits;
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
  std::uint32_t waits = 0, errors = 0, failing = 0;
  for (;;) {
    const W v = word.load(std::memory_order_acquire);
    if (payload(v) != 0) break;
    // The value just read: kParked plus the sticky bits. If a user changes a sticky bit in
    // between, FUTEX_WAIT returns EAGAIN and the loop reads again.
    ++waits;
    if (const int err = futex_wait(futex_address(), static_cast<std::uint32_t>(v)); futex_error(err)) {
      ++errors;
      bump(counters.futex_errors);
      report(err, wait_errors, wait_logged, "FUTEX_WAIT");
      back_off(++failing);
    } else {
      failing = 0;
    }
  }
  bump(counters.futex_waits, waits);
  out.futex_waits = waits;
  out.futex_errors = errors;
  out.wake_ns = monotonic_ns();
  // An RMW, not a store: it must read the latest payload in the word's modification order (a
  // later notifier may have replaced the first one's) and acquire from it. See the header.
  return take_now();
}

FutexErrorCounts futex_error_counts() noexcept {
  return {wait_errors.load(std::memory_order_relaxed), wake_errors.load(std::memory_order_relaxed),
          last_errno.load(std::memory_order_relaxed)};
}

template class ParkingWord<std::uint32_t>;
template class ParkingWord<std::uintptr_t, kSlotClaimed>;

}  // namespace haltpoll::detail
