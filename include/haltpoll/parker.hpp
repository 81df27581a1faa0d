// Parker: one thread (the owner) waits for a notification by first polling for a window and then
// sleeping on a futex; any thread may notify it. It is the user-space twin of the kernel's
// poll_idle + TIF_POLLING_NRFLAG: while the owner is still polling, unpark() costs one atomic
// exchange and no system call.
//
// State: one 32-bit futex word (private futex), on a cache line of its own.
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

namespace haltpoll {

enum class WakePath : std::uint8_t {
  none,   // the owner was running or already notified: the notification waits for its next park
  poll,   // the owner was polling: it sees the word change, no system call
  futex,  // the owner was parked: FUTEX_WAKE was called
};

// What one park() did, for the owner's statistics and its window governor. The two clock reads
// are the ones park() needs anyway; handing them out saves the caller reading the clock again on
// the wake path.
struct ParkInfo {
  bool already_notified = false;  // a notification was pending on entry: no poll, no sleep
  bool poll_hit = false;          // the notification came during the poll window
  std::uint32_t futex_waits = 0;  // FUTEX_WAIT calls made (0 on a hit; > 1 after spurious wakes)
  std::int64_t poll_ns = 0;       // time spent polling (0 with a window <= 0)
  std::int64_t start_ns = 0;      // monotonic_ns() when park() began (0 if already notified)
  std::int64_t wake_ns = 0;       // monotonic_ns() once the notification was seen (0 likewise)
};

class Parker {
 public:
  enum State : std::uint32_t { EMPTY = 0, NOTIFIED = 1, POLLING = 2, PARKED = 3 };

  Parker() noexcept = default;
  Parker(const Parker&) = delete;
  Parker& operator=(const Parker&) = delete;

  // Owner only. Returns once notified: polls for up to window_ns (window_ns <= 0: no polling at
  // all, straight to the futex, like the kernel with poll_limit_ns == 0), then FUTEX_WAITs.
  // Returns false iff it had to sleep on the futex (a poll miss); ParkInfo tells the rest.
  bool park(std::int64_t window_ns, ParkInfo* info = nullptr) noexcept;

  // Any thread. Never blocks; makes one system call at most (only when the owner is PARKED).
  WakePath unpark() noexcept;

  // Hints for schedulers such as WorkerPool::submit(task): may be stale as soon as returned.
  bool is_polling() const noexcept { return word_.load(std::memory_order_relaxed) == POLLING; }
  bool is_parked() const noexcept { return word_.load(std::memory_order_relaxed) == PARKED; }
  State state() const noexcept { return static_cast<State>(word_.load(std::memory_order_relaxed)); }

  // Owner-side counters (single writer, relaxed; any thread may read them). A poll hit is
  // exactly an unpark() that found POLLING, so the owner can count the skipped syscalls itself
  // and unpark() stays one exchange.
  std::uint64_t wakes_without_syscall() const noexcept { return wakes_without_syscall_.load(std::memory_order_relaxed); }
  std::uint64_t parks() const noexcept { return parks_.load(std::memory_order_relaxed); }
  std::uint64_t futex_waits() const noexcept { return futex_waits_.load(std::memory_order_relaxed); }

 private:
  bool consume_notification(ParkInfo* info, bool poll_hit) noexcept;

  // 32 bytes, not aligned on purpose: the owner places the Parker on a cache line of its own, or
  // (as WorkerPool does) next to the data a notifier writes just before unpark(), so that the
  // notification and the data travel in one line transfer. The counters are owner-written.
  std::atomic<std::uint32_t> word_{EMPTY};
  std::atomic<std::uint64_t> parks_{0};
  std::atomic<std::uint64_t> wakes_without_syscall_{0};
  std::atomic<std::uint64_t> futex_waits_{0};
};

static_assert(std::atomic<std::uint32_t>::is_always_lock_free && sizeof(std::atomic<std::uint32_t>) == 4,
              "the futex word must be a plain 32-bit word");

}  // namespace haltpoll
