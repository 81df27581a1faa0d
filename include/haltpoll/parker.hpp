// Parker: one thread (the owner) waits for a notification by first polling for a window and then
// sleeping on a futex; any thread may notify it. It is the user-space twin of the kernel's
// poll_idle + TIF_POLLING_NRFLAG: while the owner is still polling, unpark() costs one atomic
// exchange and no system call.
//
// State: one 32-bit futex word (private futex), a detail::ParkingWord whose payload is NOTIFIED.
//   EMPTY    the owner is running and nobody has notified it;
//   NOTIFIED a notification is pending (a permit, like a binary semaphore: notifications that
//            arrive before the owner consumes the pending one merge with it);
//   POLLING  the owner polls the word through cond_load_acquire_timeout for up to its window;
//   PARKED   the owner is (about to be) in FUTEX_WAIT on the word.
// Only the owner moves EMPTY→POLLING→PARKED (compare-exchange) and consumes NOTIFIED (exchange to
// EMPTY). unpark() exchanges NOTIFIED in and calls FUTEX_WAKE only if the old state was PARKED.
//
// Memory ordering: unpark() is a release RMW and every owner-side transition that observes
// NOTIFIED is an acquire RMW (or an acquire load followed by one). So whatever the notifier wrote
// before unpark() (e.g. a queue push) is visible to the owner when park() returns. Because both
// sides use RMWs on the one word, no store-buffer reordering can lose a wake-up: whichever RMW
// comes second in the word's modification order sees the other's value. The full argument and a
// spin model checking every interleaving are in docs/design.md and tests/model/parker.pml.
#pragma once

#include <atomic>
#include <cstdint>

#include "haltpoll/detail/parking_word.hpp"

namespace haltpoll {

class Parker {
  using Word = detail::ParkingWord<std::uint32_t>;

 public:
  enum State : std::uint32_t { EMPTY = 0, PARKED = Word::kParked, POLLING = Word::kPolling, NOTIFIED = 4 };

  Parker() noexcept = default;
  Parker(const Parker&) = delete;
  Parker& operator=(const Parker&) = delete;

  // Owner only. Returns once notified: polls for up to window_ns (window_ns <= 0: no polling at
  // all, straight to the futex, like the kernel with poll_limit_ns == 0), then FUTEX_WAITs.
  // Returns false iff it had to sleep on the futex (a poll miss); ParkInfo tells the rest.
  bool park(std::int64_t window_ns, ParkInfo* info = nullptr) noexcept {
    ParkInfo local;
    ParkInfo& out = info != nullptr ? *info : local;
    word_.park(window_ns, out, counters_);
    return !out.parked;
  }

  // Any thread. Never blocks; makes one system call at most (only when the owner is PARKED).
  // The owner must outlive the call: FUTEX_WAKE follows the exchange.
  WakePath unpark() noexcept { return word_.woke(word_.word.exchange(NOTIFIED, std::memory_order_release)); }

  // Hints for schedulers: may be stale as soon as returned.
  bool is_polling() const noexcept { return state() == POLLING; }
  bool is_parked() const noexcept { return state() == PARKED; }
  State state() const noexcept { return static_cast<State>(word_.word.load(std::memory_order_relaxed)); }

  // Owner-side counters (single writer, relaxed; any thread may read them). A poll hit is
  // exactly an unpark() that found POLLING, so the owner can count the skipped syscalls itself
  // and unpark() stays one exchange.
  std::uint64_t wakes_without_syscall() const noexcept {
    return counters_.wakes_without_syscall.load(std::memory_order_relaxed);
  }
  std::uint64_t parks() const noexcept { return counters_.parks.load(std::memory_order_relaxed); }
  std::uint64_t futex_waits() const noexcept { return counters_.futex_waits.load(std::memory_order_relaxed); }
  // FUTEX_WAITs that failed unexpectedly (EPERM from seccomp, ENOSYS); the owner backs off between
  // them (50 us doubling to 10 ms), so a notification can then take up to 10 ms to be seen.
  std::uint64_t futex_errors() const noexcept { return counters_.futex_errors.load(std::memory_order_relaxed); }

 private:
  // 32 bytes, not aligned on purpose: the owner decides where the Parker lives (on a cache line of
  // its own, usually). The counters are owner-written.
  Word word_;
  detail::ParkCounters counters_;
};

}  // namespace haltpoll
