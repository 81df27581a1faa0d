// Snapshot<T>: an immutable value that readers use without locks while writers replace it.
// The current value is a T* in one atomic word. read() protects it with a hazard pointer
// (hazard.hpp) and returns an RAII view; publish() swaps in a new value and frees the old one once
// no reader holds it. This is how the pool workers see their window caps and policy parameters:
// a worker reads on every park at the cost of a guard (a few ns, no lock, no shared-counter write),
// and a new value takes effect at the next read after publish() returned (or earlier).
//
// Memory-ordering contract: publish() stores the new pointer with a seq_cst exchange, so a reader
// that observes it also observes every write made to the new T before publish() (release/acquire).
// A ReadGuard's value never changes and stays valid until the guard dies, even across publishes.
// publish() and update() serialise with each other through a mutex (writers only); each waits,
// outside that mutex, for the readers of the value it replaced (hazard_synchronize), so a slow
// reader delays that writer only, never readers nor later writers' swaps. A thread holding a
// ReadGuard (or any HazardGuard) must not publish: it would wait for itself.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "haltpoll/hazard.hpp"

namespace haltpoll {

template <class T>
class Snapshot {
 public:
  // RAII read access. Non-copyable and non-movable (returned by guaranteed copy elision).
  class ReadGuard {
   public:
    explicit ReadGuard(const Snapshot& snapshot) noexcept
        : guard_(snapshot.current_), value_(static_cast<const T*>(guard_.get())) {}
    ReadGuard(const ReadGuard&) = delete;
    ReadGuard& operator=(const ReadGuard&) = delete;

    const T* get() const noexcept { return value_; }
    const T* operator->() const noexcept { return value_; }
    const T& operator*() const noexcept { return *value_; }
    explicit operator bool() const noexcept { return value_ != nullptr; }

   private:
    HazardGuard guard_;
    const T* value_;
  };

  // A null value is allowed (read() then yields a guard that converts to false).
  explicit Snapshot(std::unique_ptr<T> initial) noexcept : current_(initial.release()) {}
  // No reader may be active (the owner outlives its readers).
  ~Snapshot() { delete current_.load(std::memory_order_acquire); }

  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  // Lock-free and wait-free unless a publish races with it (then it retries its load).
  ReadGuard read() const noexcept { return ReadGuard(*this); }

  // Replaces the value; returns after the old one has been freed (no reader holds it any more).
  void publish(std::unique_ptr<T> next) {
    T* old = nullptr;
    {
      std::lock_guard<std::mutex> lock(writers_);
      old = current_.exchange(next.release(), std::memory_order_seq_cst);
      version_.fetch_add(1, std::memory_order_release);
    }
    hazard_retire(old);
  }

  // Read-copy-update: copies the current value, applies change(T&) to the copy, publishes it.
  // Serialised with publish(), so concurrent updates never lose each other's changes. Needs a
  // current value (not null) and a copyable T; if the copy or change throws, nothing changes.
  template <class Change>
  void update(Change&& change) {
    T* old = nullptr;
    {
      std::lock_guard<std::mutex> lock(writers_);
      // Writers are serialised, so the current value cannot be freed under us: no guard needed.
      auto next = std::make_unique<T>(*current_.load(std::memory_order_acquire));
      std::forward<Change>(change)(*next);
      old = current_.exchange(next.release(), std::memory_order_seq_cst);
      version_.fetch_add(1, std::memory_order_release);
    }
    hazard_retire(old);
  }

  // Number of publishes so far: lets a reader notice a change without taking a guard.
  std::uint64_t version() const noexcept { return version_.load(std::memory_order_acquire); }

 private:
  std::atomic<T*> current_;
  std::atomic<std::uint64_t> version_{0};
  std::mutex writers_;
};

}  // namespace haltpoll
