// ParkingWord<W, Sticky>: the poll-then-futex wait shared by Parker and the WorkerPool's task queue.
//
// One word; its two low bits are the owner's idle state, the `Sticky` bits (0, or the queue's
// SLOT_CLAIMED bit) belong to the user and are never changed here, the other bits are a payload:
//   payload 0, state 0         the owner is running, nothing pending;
//   payload 0, kPolling        the owner polls the word (cond_load_acquire_timeout) for up to its window;
//   payload 0, kParked         the owner is (about to be) in FUTEX_WAIT on the word's low 32 bits;
//   payload != 0, state 0      something is pending: a notification (Parker) or the top of a stack
//                              of task nodes (WorkerPool). Notifiers replace payload and state bits
//                              with a payload (keeping the sticky bits) by one release RMW
//                              (exchange or compare-exchange), and call FUTEX_WAKE only when the
//                              value they replaced had kParked.
// Invariant: the state bits are non-zero only while the payload is zero (a notifier's RMW clears
// them, and only the owner sets them, from 0).
//
// The owner's park() moves the state 0 -> kPolling -> kParked by compare-exchange (retrying when
// only a sticky bit changed under it) and takes the payload with one acquire RMW that leaves only
// the sticky bits. Both sides use RMWs on the one word, so whichever comes second in the word's
// modification order sees the other's value: no lost wake-up (docs/design.md has the argument;
// tests/model/parker.pml and tests/model/parking_queue.pml check every interleaving).
//
// Putting the task queue's head and the park state in one word means a hand-off to a polling worker
// moves one cache line (the word) plus the task, instead of a queue line and a separate parker
// line; the queue's inline slot (parking_queue.hpp) puts the task in that line too.
//
// W is std::uint32_t (Parker) or std::uintptr_t (a pointer payload, aligned to more than the state
// and sticky bits). The futex always watches the low 32 bits and waits on the value it last read
// (kParked plus whatever sticky bits were set): a pointer payload's low 32 bits have the state bits
// clear, so they never equal it, and FUTEX_WAIT sees every change that matters. The member
// functions are defined in src/lib/parking_word.cpp and instantiated there for the two users.
#pragma once

#include <atomic>
#include <bit>
#include <cstdint>
#include <type_traits>

#include "haltpoll/park_info.hpp"

namespace haltpoll {

namespace detail {

// Owner-written, relaxed; any thread may read them.
struct ParkCounters {
  std::atomic<std::uint64_t> parks{0};                  // idle periods entered (not already_notified)
  std::atomic<std::uint64_t> wakes_without_syscall{0};  // notifications that found kPolling
  std::atomic<std::uint64_t> futex_waits{0};            // FUTEX_WAIT calls
  // FUTEX_WAIT calls that failed with anything but EINTR, EAGAIN or ETIMEDOUT (which mean "look
  // again"): EPERM from a seccomp filter, ENOSYS. Counted as they happen, so a reader sees them
  // while the owner is still parked; the owner backs off between them instead of spinning.
  std::atomic<std::uint64_t> futex_errors{0};
};

// Process-wide: futex calls of every ParkingWord that failed unexpectedly, FUTEX_WAIT (also in
// the owners' ParkCounters) and FUTEX_WAKE (a failed wake leaves its owner asleep until a later
// one), and the errno of the latest. The first failure of each kind is also logged to stderr.
struct FutexErrorCounts {
  std::uint64_t wait_errors = 0;
  std::uint64_t wake_errors = 0;
  int last_errno = 0;
};
FutexErrorCounts futex_error_counts() noexcept;

template <class W, W Sticky = 0>
class ParkingWord {
 public:
  static_assert(std::is_same_v<W, std::uint32_t> || std::is_same_v<W, std::uintptr_t>);
  static_assert((Sticky & 3) == 0, "the two low bits are the state");
  static_assert(std::atomic<W>::is_always_lock_free && sizeof(std::atomic<W>) == sizeof(W));
  static_assert(std::endian::native == std::endian::little || std::endian::native == std::endian::big);

  static constexpr W kParked = 1;
  static constexpr W kPolling = 2;
  static constexpr W kStateMask = 3;
  static constexpr W kSticky = Sticky;
  static constexpr W kPayloadMask = ~(kStateMask | Sticky);

  static constexpr W payload(W v) noexcept { return v & kPayloadMask; }

  // Owner only. Returns once a payload is there and takes it (see take_now): polls for up to
  // window_ns (<= 0: no polling, straight to the futex, like the kernel with poll_limit_ns == 0),
  // then FUTEX_WAITs. The state bits must be 0 on entry (the owner is not idle).
  // stamp_hits = false: skip the clock read after a poll hit (see ParkInfo::wake_stamped).
  W park(std::int64_t window_ns, ParkInfo& out, ParkCounters& counters, bool stamp_hits = true) noexcept;

  // Owner only: takes a pending payload without waiting; 0 if there is none.
  W take() noexcept {
    if (payload(word.load(std::memory_order_relaxed)) == 0) return 0;
    return take_now();
  }

  // Owner only: takes the payload (0 if none) with one acquire RMW that leaves only the sticky bits.
  W take_now() noexcept {
    if constexpr (Sticky == 0) {
      return word.exchange(0, std::memory_order_acquire);
    } else {
      return payload(word.fetch_and(Sticky, std::memory_order_acquire));
    }
  }

  // Notifier, right after the release RMW that replaced `old` with a payload.
  WakePath woke(W old) noexcept {
    switch (old & kStateMask) {
      case kParked:
        futex_wake();
        return WakePath::futex;
      case kPolling:
        return WakePath::poll;
      default:
        return WakePath::none;
    }
  }

  W state_bits() const noexcept { return word.load(std::memory_order_relaxed) & kStateMask; }

  std::atomic<W> word{0};

 private:
  std::uint32_t* futex_address() noexcept {
    // The low 32 bits of the word, whatever the byte order.
    constexpr int low_half = std::endian::native == std::endian::little ? 0 : int{sizeof(W) / 4 - 1};
    return reinterpret_cast<std::uint32_t*>(&word) + low_half;
  }
  void futex_wake() noexcept;
};

// The queue's sticky bit: SLOT_CLAIMED (parking_queue.hpp).
inline constexpr std::uintptr_t kSlotClaimed = 4;

extern template class ParkingWord<std::uint32_t>;
extern template class ParkingWord<std::uintptr_t, kSlotClaimed>;

}  // namespace detail
}  // namespace haltpoll
