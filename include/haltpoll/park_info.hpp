// What a park and an unpark report: WakePath (how a notifier found the owner) and ParkInfo (what one
// park did). Shared by Parker and the WorkerPool's queue, which both wait through
// detail::ParkingWord (parking_word.hpp); public because Parker's callers read them. Plain values,
// filled by the thread that parks or notifies and handed to it alone: no synchronisation.
#pragma once

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
  bool parked = false;            // the owner reached kParked: its notifier paid for FUTEX_WAKE
  std::uint32_t futex_waits = 0;  // FUTEX_WAIT calls made (0 on a hit; > 1 after spurious wakes)
  std::uint32_t futex_errors = 0; // of those, the ones that failed unexpectedly (see detail::ParkCounters)
  std::int64_t poll_ns = 0;       // time spent polling (0 with a window <= 0): wake_ns - start_ns
  std::int64_t start_ns = 0;      // monotonic_ns() when park() began (0 if already notified)
  std::int64_t wake_ns = 0;       // monotonic_ns() once the notification was seen (0 likewise);
                                  // see wake_stamped
  // False only on a poll hit of a park(..., stamp_hits = false): no clock read was made after the
  // hit, and wake_ns is the poll's last clock reading (start_ns if it made none), a lower bound
  // at most one barrier batch (<= 2.5 us) early. Saves the hand-off one ordered clock read.
  bool wake_stamped = true;
};

}  // namespace haltpoll
