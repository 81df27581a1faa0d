// Slot registry and synchronize for the simple hazard pointers (see include/haltpoll/hazard.hpp).
#include "haltpoll/hazard.hpp"

#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"

#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <cstdint>

namespace haltpoll {
namespace detail {

// The one definition of each (see hazard.hpp).
constinit char hazard_wildcard_tag = 0;
constinit std::atomic<bool> hazard_asymmetric_mode{false};
thread_local constinit HazardSlot* this_thread_hazard_slot = nullptr;

namespace {

constexpr std::size_t slots_per_block = 64;

// Slots live in a grow-only singly linked list of blocks. Blocks are never freed, so synchronize
// walks the list without a lock and without caring about threads that come and go; a thread's slot
// is returned to the pool at its exit and claimed again by a later thread.
struct HazardSlotBlock {
  HazardSlot slots[slots_per_block];
  // Slots [0, high_water) have been claimed at least once; synchronize scans only those.
  std::atomic<std::uint32_t> high_water{0};
  std::atomic<HazardSlotBlock*> next{nullptr};
};

constinit HazardSlotBlock first_block;

constinit std::atomic<std::size_t> slots_allocated{slots_per_block};
constinit std::atomic<std::size_t> slots_owned{0};
constinit std::atomic<std::size_t> slots_abandoned{0};
constinit std::atomic<std::uint64_t> synchronize_calls{0};
constinit std::atomic<std::uint64_t> synchronize_waits{0};
constinit std::atomic<std::uint64_t> synchronize_sleeps{0};

// Why these numbers: a reader's guard section is a few ns to a few hundred ns, so a slot that is
// still busy after a few µs belongs to a reader that was preempted or does something slow. Spinning
// longer than about one context switch (~2–5 µs on the KVM guests we target) costs more CPU than
// sleeping would; yielding first lets a preempted reader on our own CPU finish; then sleeping with
// exponential backoff bounds the writer's CPU to a few wake-ups per millisecond of reader delay.
constexpr std::int64_t spin_ns = 4'000;
constexpr int yields = 4;
constexpr std::int64_t first_sleep_ns = 10'000;
constexpr std::int64_t max_sleep_ns = 1'000'000;

// Always ends with a successful seq_cst RMW, even when the mark is already high enough: that RMW
// precedes this thread's first publish in the seq_cst order, so a synchronize that could miss the
// publish loads a mark that covers the slot (a relaxed "already high enough" read would not).
void raise_high_water(HazardSlotBlock& block, std::uint32_t at_least) noexcept {
  std::uint32_t seen = block.high_water.load(std::memory_order_relaxed);
  while (!block.high_water.compare_exchange_weak(seen, seen < at_least ? at_least : seen,
                                                 std::memory_order_seq_cst,
                                                 std::memory_order_relaxed)) {
  }
}

HazardSlot* claim_slot() noexcept {
  HazardSlotBlock* block = &first_block;
  for (;;) {
    for (std::size_t i = 0; i < slots_per_block; ++i) {
      HazardSlot& slot = block->slots[i];
      bool expected = false;
      if (!slot.owned.load(std::memory_order_relaxed) &&
          slot.owned.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
        // seq_cst RMW: visible to any synchronize that could miss this thread's first publish.
        raise_high_water(*block, static_cast<std::uint32_t>(i + 1));
        slots_owned.fetch_add(1, std::memory_order_relaxed);
        return &slot;
      }
    }
    HazardSlotBlock* next = block->next.load(std::memory_order_acquire);
    if (next == nullptr) {
      // More than 64 threads hold slots at once. Allocation failure here terminates (noexcept):
      // there is no way to protect anything without a slot.
      auto* fresh = new HazardSlotBlock;
      if (block->next.compare_exchange_strong(next, fresh, std::memory_order_acq_rel)) {
        slots_allocated.fetch_add(slots_per_block, std::memory_order_relaxed);
        next = fresh;
      } else {
        delete fresh;  // another thread appended first; `next` now holds its block
      }
    }
    block = next;
  }
}

void release_slot(HazardSlot& slot) noexcept {
  if (slot.value.load(std::memory_order_relaxed) != nullptr) {
    // A guard is still live: it belongs to a thread_local object that was constructed before this
    // thread's first guard and so is destroyed after us. Its destructor will clear the value
    // through its own pointer, so the slot must never be handed to another thread: keep it.
    slots_abandoned.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  slots_owned.fetch_sub(1, std::memory_order_relaxed);
  slot.owned.store(false, std::memory_order_release);
}

// Releases the thread's slot at thread exit. Separate from this_thread_hazard_slot so that the
// readers' fast path touches a trivially destructible thread_local with no init guard.
struct SlotOwner {
  HazardSlot* slot = nullptr;
  SlotOwner() = default;
  SlotOwner(const SlotOwner&) = delete;
  SlotOwner& operator=(const SlotOwner&) = delete;
  ~SlotOwner();
};

// Set once this thread's SlotOwner is destroyed (thread exit in progress).
thread_local bool this_thread_exiting = false;

SlotOwner::~SlotOwner() {
  this_thread_exiting = true;
  this_thread_hazard_slot = nullptr;
  if (slot != nullptr) {
    release_slot(*slot);
  }
}

thread_local SlotOwner this_thread_slot_owner;

bool membarrier_registered = false;

long sys_membarrier(int cmd) noexcept { return syscall(SYS_membarrier, cmd, 0U, 0); }

// The writer half of the Dekker pair: a full barrier here, or on every running thread of the
// process in the asymmetric mode.
void writer_fence() noexcept {
  if (hazard_asymmetric_mode.load(std::memory_order_relaxed)) {
    if (sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
      return;
    }
    // Cannot fail once registered; if it ever does there is no safe way on, so be loud.
    __builtin_trap();
  }
#if defined(HALTPOLL_HAZARD_TSAN)
  // TSan does not model atomic_thread_fence; a seq_cst RMW is a full barrier on x86, where the
  // TSan leg runs, and the publisher's own exchange already orders the pair in the C++ model.
  static constinit std::atomic<int> fence_word{0};
  fence_word.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

bool blocks(const void* value, const void* p) noexcept {
  return value == p || value == hazard_wildcard;
}

void wait_for_slot(const HazardSlot& slot, const void* p) noexcept {
  synchronize_waits.fetch_add(1, std::memory_order_relaxed);
  // The timeout barrier waits with the CPU's cheapest wait (PAUSE, or WFE woken by the reader's
  // clearing store on arm64) and reads the clock only every ~2 µs.
  const void* seen = cond_load_acquire_timeout(
      slot.value, [p](const void* value) noexcept { return !blocks(value, p); }, MonotonicClock{},
      spin_ns);
  if (!blocks(seen, p)) {
    return;
  }
  for (int i = 0; i < yields; ++i) {
    sched_yield();
    if (!blocks(slot.value.load(std::memory_order_acquire), p)) {
      return;
    }
  }
  std::int64_t sleep_ns = first_sleep_ns;
  for (;;) {
    timespec ts{0, static_cast<long>(sleep_ns)};
    synchronize_sleeps.fetch_add(1, std::memory_order_relaxed);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    if (!blocks(slot.value.load(std::memory_order_acquire), p)) {
      return;
    }
    sleep_ns = sleep_ns * 2 > max_sleep_ns ? max_sleep_ns : sleep_ns * 2;
  }
}

// Calls f(slot) for every slot that was ever claimed, without locks.
template <class F>
bool for_each_slot(F&& f) noexcept {
  for (HazardSlotBlock* block = &first_block; block != nullptr;
       block = block->next.load(std::memory_order_acquire)) {
    const std::uint32_t used = block->high_water.load(std::memory_order_seq_cst);
    for (std::uint32_t i = 0; i < used; ++i) {
      if (!f(block->slots[i])) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

HazardSlot* register_this_thread_hazard_slot() noexcept {
  HazardSlot* slot = claim_slot();
  if (!this_thread_exiting) {
    this_thread_slot_owner.slot = slot;
  } else {
    // A guard taken by a thread_local destructor after our owner is gone: nothing will release
    // the slot any more, so it is abandoned (counted); cached so that later guards reuse it.
    slots_abandoned.fetch_add(1, std::memory_order_relaxed);
  }
  this_thread_hazard_slot = slot;
  return slot;
}

}  // namespace detail

void hazard_synchronize(const void* p) noexcept {
  if (p == nullptr) {
    return;
  }
  detail::synchronize_calls.fetch_add(1, std::memory_order_relaxed);
  // Waiting for our own slot would never end.
  assert(detail::this_thread_hazard_slot == nullptr ||
         !detail::blocks(detail::this_thread_hazard_slot->value.load(std::memory_order_relaxed), p));
  detail::writer_fence();
  detail::for_each_slot([p](const detail::HazardSlot& slot) {
    if (detail::blocks(slot.value.load(std::memory_order_seq_cst), p)) {
      detail::wait_for_slot(slot, p);
    }
    return true;
  });
}

bool hazard_is_protected(const void* p) noexcept {
  if (p == nullptr) {
    return false;
  }
  detail::writer_fence();
  return !detail::for_each_slot([p](const detail::HazardSlot& slot) {
    return !detail::blocks(slot.value.load(std::memory_order_seq_cst), p);
  });
}

bool hazard_set_asymmetric_fence(bool enable) noexcept {
  using detail::hazard_asymmetric_mode;
#if defined(HALTPOLL_HAZARD_TSAN)
  // TSan cannot see the barrier membarrier executes on the readers' behalf.
  if (enable) {
    return false;
  }
#endif
  if (enable && !detail::membarrier_registered) {
    const long supported = detail::sys_membarrier(MEMBARRIER_CMD_QUERY);
    if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0 ||
        detail::sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) {
      return hazard_asymmetric_mode.load(std::memory_order_relaxed);
    }
    detail::membarrier_registered = true;
  }
  hazard_asymmetric_mode.store(enable, std::memory_order_seq_cst);
  return enable;
}

HazardStats hazard_stats() noexcept {
  return HazardStats{
      detail::slots_allocated.load(std::memory_order_relaxed),
      detail::slots_owned.load(std::memory_order_relaxed),
      detail::slots_abandoned.load(std::memory_order_relaxed),
      detail::synchronize_calls.load(std::memory_order_relaxed),
      detail::synchronize_waits.load(std::memory_order_relaxed),
      detail::synchronize_sleeps.load(std::memory_order_relaxed),
  };
}

}  // namespace haltpoll
