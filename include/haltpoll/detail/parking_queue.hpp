// ParkingMpscQueue<Node>: a multi-producer, single-consumer task queue whose consumer can wait for
// work by polling and then sleeping on a futex, with the queue head and the consumer's park state in
// one word (detail::ParkingWord<std::uintptr_t>).
//
// Producers push onto a lock-free stack (compare-exchange on the word); the consumer takes the whole
// stack with one exchange and reverses it, which yields the nodes in push order (FIFO per producer,
// and FIFO overall in the order the pushes took effect). Taking all at once keeps the consumer
// wait-free and makes ABA impossible: nodes are never popped one by one while producers look at
// them. When the consumer idles, the word holds a state instead of a pointer (kPolling, kParked); a
// push replaces it with the node and tells from the old value whether the consumer was polling (no
// system call), parked (FUTEX_WAKE) or running.
//
// Why one word: a hand-off to a polling consumer then moves the word's cache line once and the node
// once, where a separate parker word and queue head moved two lines back and forth (the consumer
// polls one and must then fetch the other).
//
// Memory ordering: a push is a release RMW on the word; every take is an acquire exchange, so
// everything a producer wrote into its node before pushing is visible to the consumer that takes
// it. Node needs a `Node* next` member and an alignment of at least 4 (the word's two low bits).
#pragma once

#include <atomic>
#include <cstdint>

#include "haltpoll/detail/parking_word.hpp"

namespace haltpoll::detail {

template <class Node>
class ParkingMpscQueue {
  using Word = ParkingWord<std::uintptr_t>;

 public:
  enum class ConsumerState : std::uint8_t { running, polling, parked };

  ParkingMpscQueue() = default;
  ParkingMpscQueue(const ParkingMpscQueue&) = delete;
  ParkingMpscQueue& operator=(const ParkingMpscQueue&) = delete;

  // Any thread. Says how the consumer was found. The queue must outlive the call (FUTEX_WAKE
  // follows the compare-exchange).
  WakePath push(Node* node) noexcept {
    static_assert(alignof(Node) >= 4, "the word's two low bits hold the consumer's state");
    // Guess "consumer polling" instead of loading first: that is the case that must be fast, and a
    // compare-exchange straight away asks for the line once (exclusive) instead of twice (shared
    // for the load, then exclusive). A wrong guess costs one retry with the real value.
    std::uintptr_t old = Word::kPolling;
    const auto desired = reinterpret_cast<std::uintptr_t>(node);
    do {
      node->next = (old & Word::kStateMask) != 0 ? nullptr : reinterpret_cast<Node*>(old);
    } while (!word_.word.compare_exchange_weak(old, desired, std::memory_order_release, std::memory_order_relaxed));
    return word_.woke(old);
  }

  // Consumer only. The nodes in push order, linked through `next`, or nullptr; never waits.
  Node* take_all() noexcept { return fifo(word_.take()); }

  // Consumer only. Waits for at least one node (poll for window_ns, then the futex) and takes all:
  // never nullptr.
  Node* wait_take_all(std::int64_t window_ns, ParkInfo& info, ParkCounters& counters) noexcept {
    return fifo(word_.park(window_ns, info, counters));
  }

  // Any thread; hints only (stale as soon as returned).
  ConsumerState consumer_state() const noexcept {
    switch (word_.state_bits()) {
      case Word::kPolling: return ConsumerState::polling;
      case Word::kParked: return ConsumerState::parked;
      default: return ConsumerState::running;
    }
  }

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

  Word word_;
};

}  // namespace haltpoll::detail
