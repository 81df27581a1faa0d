// Simple hazard pointers (shazptr), user-space flavour: one slot per thread instead of per CPU.
// A reader publishes the pointer it is about to use in its own slot (a HazardGuard); a writer that
// has unpublished a pointer calls hazard_synchronize(p), which returns once no slot holds p or the
// WILDCARD, after which p may be freed. A guard taken while this thread's slot is already in use
// (nesting) publishes the WILDCARD instead, which blocks every synchronize until the outermost guard
// of the thread is released: nesting stays correct with one slot and costs nothing extra.
//
// Memory-ordering contract. It is the store-buffering (Dekker) pattern:
//   reader:  slot = p;          FULL FENCE;  re-load the source (must still be p, else retry)
//   writer:  source = new;      FULL FENCE;  load every slot (wait while it holds p or WILDCARD)
// At least one side sees the other's store: either the reader sees `new` and retries without ever
// dereferencing p, or the writer sees p and waits. The reader clears its slot with a release store
// and publishes with a release store, and the writer loads slots with acquire, so every access a
// reader made through p happens-before synchronize(p) returns, whichever later value it observes.
// "FULL FENCE" on the reader side is, in the default (symmetric) mode, a locked XCHG on x86 or
// STLR+DMB ISH on arm64 (a few ns). In the optional asymmetric mode (hazard_set_asymmetric_fence)
// it is only a compiler barrier, and the writer's fence is membarrier(MEMBARRIER_CMD_PRIVATE_
// EXPEDITED), which makes every running thread of the process execute a full barrier; that is the
// liburcu-memb / folly asymmetric_thread_fence scheme. It makes guards cheaper and synchronize
// dearer (an IPI per CPU running one of our threads), so it is off by default.
//
// Rules for callers: guards of one thread are released in reverse order (automatic for scoped
// objects; guards cannot be copied or moved). A thread must not call hazard_synchronize or
// hazard_retire while it holds a guard itself (it would wait for itself). Guard sections should be
// short: a slow reader only delays writers (synchronize spins for a few microseconds, then yields,
// then sleeps with exponential backoff up to 1 ms per check, see docs/design.md), it never blocks
// other readers, and readers never take a lock (the first guard of a thread registers its slot
// without locks; that may allocate a new block of slots once per 64 threads alive at once).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "haltpoll/detail/export.hpp"

#if defined(__SANITIZE_THREAD__)
#define HALTPOLL_HAZARD_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define HALTPOLL_HAZARD_TSAN 1
#endif
#endif

namespace haltpoll {

namespace detail {

// Readers write their own slot on every guard, so each slot has a cache line to itself.
struct alignas(64) HazardSlot {
  std::atomic<const void*> value{nullptr};
  std::atomic<bool> owned{false};
};

// The three variables below must exist once per process: a guard nested in another must find the
// outer one's slot (or it publishes a plain pointer instead of the WILDCARD while the outer guard
// is still live: a use-after-free), and every guard must publish the same WILDCARD. As inline
// variables they were unique only through default symbol visibility (a library built with
// -fvisibility=hidden would have had a copy of its own), so each has one definition, in
// hazard.cpp, exported explicitly. `constinit` here too: the compiler then knows they need no
// dynamic initialisation, and the thread_local is read without a TLS wrapper call.

// The WILDCARD is the address of a private object: never a pointer anybody retires.
extern HALTPOLL_EXPORT constinit char hazard_wildcard_tag;
inline constexpr const void* hazard_wildcard = &hazard_wildcard_tag;

// Set only while no guard is being taken and no synchronize runs (see hazard_set_asymmetric_fence).
extern HALTPOLL_EXPORT constinit std::atomic<bool> hazard_asymmetric_mode;

// Constant-initialised and trivially destructible so that the fast path is one TLS load with no
// init guard; the slot's release at thread exit is done by a separate thread_local in hazard.cpp.
extern HALTPOLL_EXPORT thread_local constinit HazardSlot* this_thread_hazard_slot;

HazardSlot* register_this_thread_hazard_slot() noexcept;

inline HazardSlot& this_thread_slot() noexcept {
  HazardSlot* slot = this_thread_hazard_slot;
  if (slot == nullptr) [[unlikely]] {
    slot = register_this_thread_hazard_slot();
  }
  return *slot;
}

// Publishes v in the slot and orders that store before every later load of this thread: the
// reader half of the Dekker pair.
inline void hazard_publish(HazardSlot& slot, const void* v) noexcept {
  if (hazard_asymmetric_mode.load(std::memory_order_relaxed)) {
    slot.value.store(v, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the writer's membarrier does the rest
    return;
  }
#if defined(__x86_64__) || defined(__i386__) || defined(HALTPOLL_HAZARD_TSAN)
  // XCHG is a full barrier on x86 and cheaper than MOV+MFENCE; under TSan a seq_cst RMW keeps the
  // build free of atomic_thread_fence, which TSan does not model (GCC's -Wtsan).
  (void)slot.value.exchange(v, std::memory_order_seq_cst);
#else
  slot.value.store(v, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace detail

// RAII hazard pointer. Non-copyable, non-movable; see the rules at the top of this header.
class HazardGuard {
 public:
  // Protects p, which the caller knows to be live now (e.g. it loaded p from a place that a writer
  // clears before synchronize, and re-checks that place after this constructor, as the
  // std::atomic overload below does). Protects everything (WILDCARD) when nested.
  explicit HazardGuard(const void* p) noexcept : slot_(&detail::this_thread_slot()) {
    nested_ = slot_->value.load(std::memory_order_relaxed) != nullptr;
    ptr_ = p;
    detail::hazard_publish(*slot_, nested_ ? detail::hazard_wildcard : p);
  }

  // Loads src and protects the value: load, publish, re-load until both loads agree. Afterwards
  // get() stays valid until the guard dies, even if a writer replaces src meanwhile.
  template <class T>
  explicit HazardGuard(const std::atomic<T*>& src) noexcept : slot_(&detail::this_thread_slot()) {
    nested_ = slot_->value.load(std::memory_order_relaxed) != nullptr;
    if (nested_) {
      // With the WILDCARD published and fenced, any value loaded afterwards is protected.
      detail::hazard_publish(*slot_, detail::hazard_wildcard);
      ptr_ = src.load(std::memory_order_seq_cst);
      return;
    }
    T* p = src.load(std::memory_order_relaxed);
    for (;;) {
      detail::hazard_publish(*slot_, p);
      T* again = src.load(std::memory_order_seq_cst);  // also the acquire that makes *p readable
      if (again == p) [[likely]] {
        break;
      }
      p = again;
    }
    ptr_ = p;
  }

  ~HazardGuard() {
    if (!nested_) {
      slot_->value.store(nullptr, std::memory_order_release);
    }
  }

  HazardGuard(const HazardGuard&) = delete;
  HazardGuard& operator=(const HazardGuard&) = delete;

  const void* get() const noexcept { return ptr_; }
  // True when this guard published the WILDCARD because an outer guard of this thread is live.
  bool nested() const noexcept { return nested_; }

 private:
  detail::HazardSlot* slot_;
  const void* ptr_;
  bool nested_;
};

// Returns once no slot holds p or the WILDCARD. The caller has already made p unreachable for new
// readers. It spins briefly, then yields, then sleeps with exponential backoff (10 µs .. 1 ms) while
// a slow reader holds p, so it never burns a CPU for long. p == nullptr returns at once.
void hazard_synchronize(const void* p) noexcept;

// Non-blocking check for callers that defer reclamation: true if some slot holds p or the WILDCARD
// now. Same fence as hazard_synchronize. A false answer is final for an unpublished p.
bool hazard_is_protected(const void* p) noexcept;

// Synchronous reclamation: waits for readers of p, then deletes it. Deferred reclamation is left to
// callers that cannot block (keep a list, free the entries for which hazard_is_protected is false).
template <class T>
void hazard_retire(T* p) {
  hazard_synchronize(p);
  delete p;
}

// Switches the reader-side fence between a full barrier (default) and a compiler barrier backed by
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) in synchronize. Returns whether the asymmetric mode
// is active afterwards (false if asked for and membarrier is unavailable, e.g. under qemu-user or
// TSan, which cannot see it). Call only while no thread is taking a guard or synchronizing
// (start-up, or a quiescent benchmark phase): a reader and a writer must agree on the mode.
bool hazard_set_asymmetric_fence(bool enable) noexcept;

struct HazardStats {
  std::size_t slots_allocated;  // slots in the grow-only list (blocks of 64)
  std::size_t slots_owned;      // slots owned by live threads (or abandoned, below)
  std::size_t slots_abandoned;  // slots kept forever because a guard outlived its thread's slot
  std::uint64_t synchronize_calls;
  std::uint64_t synchronize_waits;   // times synchronize found a slot holding p or the WILDCARD
  std::uint64_t synchronize_sleeps;  // nanosleeps taken while waiting for slow readers
};
HazardStats hazard_stats() noexcept;

}  // namespace haltpoll
