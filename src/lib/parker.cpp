#include "haltpoll/parker.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"

namespace haltpoll {

namespace {

// Private futexes: the word never leaves the process, so the kernel can skip the mm lookup.
// Results are ignored on purpose: EAGAIN (the word already changed) and EINTR (a signal) both
// mean "re-check the word", which park()'s loop does.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_one(std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
}

}  // namespace

bool Parker::consume_notification(ParkInfo* info, bool poll_hit) noexcept {
  // An exchange, not a store: it must read the latest NOTIFIED in the word's modification order
  // (which may come from a later unpark() that merged with the first) and acquire from it, so
  // that this notifier's writes are visible as well. See the header.
  word_.exchange(EMPTY, std::memory_order_acquire);
  if (info != nullptr) info->poll_hit = poll_hit;
  return true;
}

bool Parker::park(std::int64_t window_ns, ParkInfo* info) noexcept {
  ParkInfo local;
  ParkInfo& out = info != nullptr ? *info : local;
  out = ParkInfo{};

  std::uint32_t expected = EMPTY;
  if (!word_.compare_exchange_strong(expected, POLLING, std::memory_order_acquire, std::memory_order_relaxed)) {
    // Only NOTIFIED can be here: POLLING and PARKED are set by this (the only) owner.
    out.already_notified = true;
    return consume_notification(&out, false);
  }
  bump(parks_);
  out.start_ns = monotonic_ns();

  if (window_ns > 0) {
    const std::uint32_t seen = cond_load_acquire_timeout(
        word_, [](std::uint32_t v) { return v == NOTIFIED; }, MonotonicClock{}, window_ns);
    const std::int64_t now = monotonic_ns();
    out.poll_ns = now - out.start_ns;
    if (seen == NOTIFIED) {
      out.wake_ns = now;
      bump(wakes_without_syscall_);
      return consume_notification(&out, true);
    }
  }

  expected = POLLING;
  if (!word_.compare_exchange_strong(expected, PARKED, std::memory_order_acquire, std::memory_order_relaxed)) {
    // The notification landed between the last poll and this transition. The notifier saw
    // POLLING and made no syscall; with a window this is a poll hit like any other.
    out.wake_ns = monotonic_ns();
    bump(wakes_without_syscall_);
    return consume_notification(&out, window_ns > 0);
  }

  std::uint32_t waits = 0;
  while (word_.load(std::memory_order_acquire) == PARKED) {
    ++waits;
    futex_wait(word_, PARKED);
  }
  bump(futex_waits_, waits);
  out.futex_waits = waits;
  out.wake_ns = monotonic_ns();
  consume_notification(&out, false);
  return false;
}

WakePath Parker::unpark() noexcept {
  // The futex word may be touched after the owner has consumed the notification (it may already
  // be parked again, which FUTEX_WAKE then wakes spuriously, and park() tolerates). The owner must
  // therefore outlive every unpark() call; WorkerPool guarantees it by counting submitters.
  switch (word_.exchange(NOTIFIED, std::memory_order_release)) {
    case PARKED:
      futex_wake_one(word_);
      return WakePath::futex;
    case POLLING:
      return WakePath::poll;
    default:
      return WakePath::none;
  }
}

}  // namespace haltpoll
