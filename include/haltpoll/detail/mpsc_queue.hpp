// IntrusiveMpscQueue<Node>: many producers push, one consumer takes everything at once.
//
// Producers push onto a lock-free stack (compare-exchange on `head_`); the single consumer
// swaps the whole stack out with one exchange and reverses it, which yields the nodes in push
// order (FIFO per producer, and FIFO overall in the order the pushes took effect). Taking all at
// once keeps the consumer wait-free and makes ABA impossible: nodes are never popped one by one
// while producers still look at them. Node must have a `Node* next` member.
//
// Memory ordering: a push is a release RMW on `head_`; take_all() is an acquire exchange, so
// everything a producer wrote into its node before pushing is visible to the consumer that takes
// it. Because both sides are RMWs on the same word, a take_all() that comes later in `head_`'s
// modification order always sees every earlier push (no store-buffer reordering to worry about).
#pragma once

#include <atomic>

namespace haltpoll::detail {

template <class Node>
class IntrusiveMpscQueue {
 public:
  IntrusiveMpscQueue() = default;
  IntrusiveMpscQueue(const IntrusiveMpscQueue&) = delete;
  IntrusiveMpscQueue& operator=(const IntrusiveMpscQueue&) = delete;

  // Any thread. Returns true when the queue was empty before this push (the consumer may be idle).
  bool push(Node* node) noexcept {
    // Guess "empty" instead of loading first: that is the common case for a worker that keeps up,
    // and a compare-exchange straight away asks for the line once (exclusive) instead of twice
    // (shared for the load, then exclusive). A wrong guess costs one retry with the real value.
    Node* old = nullptr;
    do {
      node->next = old;
    } while (!head_.compare_exchange_weak(old, node, std::memory_order_release, std::memory_order_relaxed));
    return old == nullptr;
  }

  // Consumer only. Returns the nodes in push order as a list linked through `next`, or nullptr.
  // likely_nonempty = false (the idle loop) checks with a plain load first, which keeps the line
  // shared while nothing arrives; true (right after a wake-up) goes straight to the exchange.
  Node* take_all(bool likely_nonempty = false) noexcept {
    if (!likely_nonempty && head_.load(std::memory_order_relaxed) == nullptr) return nullptr;
    Node* stack = head_.exchange(nullptr, std::memory_order_acquire);
    Node* fifo = nullptr;
    while (stack != nullptr) {
      Node* next = stack->next;
      stack->next = fifo;
      fifo = stack;
      stack = next;
    }
    return fifo;
  }

  // Any thread; a hint only (it may be stale by the time the caller acts on it).
  bool empty() const noexcept { return head_.load(std::memory_order_relaxed) == nullptr; }

 private:
  std::atomic<Node*> head_{nullptr};
};

}  // namespace haltpoll::detail
