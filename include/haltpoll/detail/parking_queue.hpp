// ParkingMpscQueue<Node>: a multi-producer, single-consumer task queue whose consumer can wait for
// work by polling and then sleeping on a futex, with the queue head and the consumer's park state in
// one word (detail::ParkingWord), and one task node (the slot) living in that word's cache line.
//
// Producers push onto a lock-free stack (compare-exchange on the word); the consumer takes the whole
// stack with one RMW and reverses it, which yields the nodes in push order (FIFO per producer, and
// FIFO overall in the order the pushes took effect). Taking all at once keeps the consumer
// wait-free and makes ABA impossible: nodes are never popped one by one while producers look at
// them. When the consumer idles, the word holds a state instead of a pointer (kPolling, kParked); a
// push replaces it with the node and tells from the old value whether the consumer was polling (no
// system call), parked (FUTEX_WAKE) or running.
//
// The inline slot: a producer may claim the slot (set the word's sticky SLOT_CLAIMED bit by
// compare-exchange; nullptr if another holds it), fill it, and push it like any node. A hand-off
// to a polling consumer then moves one cache line, where a heap node added a second (and an
// allocation). The consumer releases the slot (clears the bit) once it is done with the node. A
// claim is invisible until its push, so a claimer preempted between the two blocks nobody: the
// consumer keeps taking other nodes and producers fall back to heap nodes. The bit is sticky: the
// consumer's take and the park transitions keep it, and pushes keep it.
//
// Memory ordering: a push is a release RMW on the word; every take is an acquire RMW, so everything
// a producer wrote into its node before pushing is visible to the consumer that takes it. The
// release of the slot is a release RMW and the claim an acquire RMW, so the consumer's last use of
// the slot happens-before the next claimer's writes. Node needs a `Node* next` member and an
// alignment of at least 8 (the word's three low bits). Checked by tests/model/parking_queue.pml.
#pragma once

#include <atomic>
#include <cstdint>

#include "haltpoll/detail/parking_word.hpp"

namespace haltpoll::detail {

template <class Node>
class ParkingMpscQueue {
  using Word = ParkingWord<std::uintptr_t, kSlotClaimed>;

 public:
  enum class ConsumerState : std::uint8_t { running, polling, parked };

  ParkingMpscQueue() = default;
  ParkingMpscQueue(const ParkingMpscQueue&) = delete;
  ParkingMpscQueue& operator=(const ParkingMpscQueue&) = delete;

  // Any thread. Says how the consumer was found. The queue must outlive the call (FUTEX_WAKE
  // follows the compare-exchange). `node` is a node of the producer's or the slot it claimed.
  WakePath push(Node* node) noexcept {
    static_assert(alignof(Node) >= 8, "the word's three low bits hold the consumer's state and the slot bit");
    // Guess "consumer polling" (and the slot claimed, when pushing it) instead of loading first:
    // that is the case that must be fast, and a compare-exchange straight away asks for the line
    // once (exclusive) instead of twice (shared for the load, then exclusive). A wrong guess costs
    // one retry with the real value.
    std::uintptr_t old = Word::kPolling | (node == &slot_ ? kSlotClaimed : 0);
    const auto top = reinterpret_cast<std::uintptr_t>(node);
    do {
      node->next = reinterpret_cast<Node*>(Word::payload(old));
    } while (!word_.word.compare_exchange_weak(old, top | (old & kSlotClaimed), std::memory_order_release,
                                               std::memory_order_relaxed));
    return word_.woke(old);
  }

  // Any thread. Claims the slot for the caller, who must fill it and push() it; nullptr if it is
  // in use (claimed, queued, or not yet released by the consumer).
  // `parked` (optional) tells whether the word said "consumer parked" when it was read: a hint,
  // got for free from the compare-exchange.
  Node* try_claim_slot(bool* parked = nullptr) noexcept {
    std::uintptr_t old = Word::kPolling;  // the fast case again: an idle consumer, slot free
    do {
      if ((old & kSlotClaimed) != 0) break;
    } while (!word_.word.compare_exchange_weak(old, old | kSlotClaimed, std::memory_order_acquire,
                                               std::memory_order_relaxed));
    if (parked != nullptr) *parked = (old & Word::kStateMask) == Word::kParked;
    return (old & kSlotClaimed) != 0 ? nullptr : &slot_;
  }

  bool is_slot(const Node* node) const noexcept { return node == &slot_; }

  // Consumer only, once it has finished with the slot node (taken, used, its contents destroyed).
  void release_slot() noexcept { word_.word.fetch_and(~kSlotClaimed, std::memory_order_release); }

  // Consumer only. The nodes in push order, linked through `next`, or nullptr; never waits.
  Node* take_all() noexcept { return fifo(word_.take()); }

  // Consumer only. Waits for at least one node (poll for window_ns, then the futex) and takes all:
  // never nullptr.
  Node* wait_take_all(std::int64_t window_ns, ParkInfo& info, ParkCounters& counters, bool stamp_hits = true) noexcept {
    return fifo(word_.park(window_ns, info, counters, stamp_hits));
  }

  // Any thread; hints only (stale as soon as returned).
  ConsumerState consumer_state() const noexcept {
    switch (word_.state_bits()) {
      case Word::kPolling: return ConsumerState::polling;
      case Word::kParked: return ConsumerState::parked;
      default: return ConsumerState::running;
    }
  }
  bool slot_claimed() const noexcept { return (word_.word.load(std::memory_order_relaxed) & kSlotClaimed) != 0; }

 private:
  static Node* fifo(std::uintptr_t top) noexcept {
    Node* stack = reinterpret_cast<Node*>(top);
    Node* out = nullptr;
    while (stack != nullptr) {
      Node* next = stack->next;
      stack->next = out;
      out = stack;
      stack = next;
    }
    return out;
  }

  // The word and the slot share a cache line as far as the slot's size allows (the WorkerPool's
  // TaskNode puts its task's ops pointer and first 16 bytes of captures in it). The owner aligns
  // the queue to a line.
  Word word_;
  Node slot_;
};

}  // namespace haltpoll::detail
