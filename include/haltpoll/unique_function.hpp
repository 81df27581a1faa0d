// UniqueFunction<R(Args...)>: a move-only, type-erased callable (C++20 has no
// std::move_only_function). It exists so that pool tasks can own move-only state (a promise, a
// unique_ptr) and so that a small task is stored inline: callables up to `inline_size` bytes whose
// move constructor is noexcept live inside the object, larger ones on the heap. Moving is
// noexcept either way; a moved-from UniqueFunction is empty.
//
// Concurrency: none of its own. A UniqueFunction is handed from a submitter to a worker inside a
// queue node; the queue's release/acquire pair is what makes the callable's state visible.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace haltpoll {

template <class Signature>
class UniqueFunction;

template <class R, class... Args>
class UniqueFunction<R(Args...)> {
 public:
  // 48 bytes holds a lambda capturing a handful of pointers/ints plus a unique_ptr, which covers
  // the pool's own tasks (probes, ping-pong, benchmarks) without touching the allocator.
  static constexpr std::size_t inline_size = 48;

  UniqueFunction() noexcept = default;
  UniqueFunction(std::nullptr_t) noexcept {}  // NOLINT(google-explicit-constructor)

  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, UniqueFunction> && std::is_invocable_r_v<R, D&, Args...>>>
  UniqueFunction(F&& f) {  // NOLINT(google-explicit-constructor): like std::function
    if constexpr (std::is_pointer_v<D> || std::is_member_pointer_v<D>) {
      if (f == nullptr) return;
    }
    if constexpr (fits_inline<D>()) {
      ::new (static_cast<void*>(storage_)) D(std::forward<F>(f));
      ops_ = &inline_ops<D>;
    } else {
      D* heap = new D(std::forward<F>(f));
      ::new (static_cast<void*>(storage_)) D*(heap);
      ops_ = &heap_ops<D>;
    }
  }

  UniqueFunction(UniqueFunction&& other) noexcept { take(other); }
  UniqueFunction& operator=(UniqueFunction&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  UniqueFunction& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  UniqueFunction(const UniqueFunction&) = delete;
  UniqueFunction& operator=(const UniqueFunction&) = delete;
  ~UniqueFunction() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }

  // Calling an empty UniqueFunction throws std::bad_function_call, like std::function.
  R operator()(Args... args) {
    if (ops_ == nullptr) throw std::bad_function_call();
    return ops_->invoke(storage_, std::forward<Args>(args)...);
  }

  // True when the callable lives inside the object (for tests and for the benchmarks' claims).
  bool is_inline() const noexcept { return ops_ != nullptr && ops_->is_inline; }

 private:
  struct Ops {
    R (*invoke)(void* storage, Args&&... args);
    void (*move)(void* from, void* to) noexcept;  // move-construct into `to`, destroy `from`
    void (*destroy)(void* storage) noexcept;
    bool is_inline;
  };

  template <class D>
  static constexpr bool fits_inline() {
    return sizeof(D) <= inline_size && alignof(D) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<D>;
  }

  template <class D>
  static constexpr Ops inline_ops{
      [](void* s, Args&&... args) -> R { return std::invoke(*std::launder(static_cast<D*>(s)), std::forward<Args>(args)...); },
      [](void* from, void* to) noexcept {
        D* f = std::launder(static_cast<D*>(from));
        ::new (to) D(std::move(*f));
        f->~D();
      },
      [](void* s) noexcept { std::launder(static_cast<D*>(s))->~D(); },
      true};

  template <class D>
  static constexpr Ops heap_ops{
      [](void* s, Args&&... args) -> R { return std::invoke(**std::launder(static_cast<D**>(s)), std::forward<Args>(args)...); },
      [](void* from, void* to) noexcept { ::new (to) D*(*std::launder(static_cast<D**>(from))); },
      [](void* s) noexcept { delete *std::launder(static_cast<D**>(s)); },
      false};

  void take(UniqueFunction& other) noexcept {
    if (other.ops_ != nullptr) {
      other.ops_->move(other.storage_, storage_);
      ops_ = other.ops_;
      other.ops_ = nullptr;
    }
  }
  void reset() noexcept {
    if (ops_ != nullptr) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

  // ops_ first: a small callable then shares a cache line with ops_ and with whatever precedes
  // the object (the WorkerPool's queue slot puts both in its queue word's line).
  const Ops* ops_ = nullptr;
  alignas(std::max_align_t) unsigned char storage_[inline_size];
};

}  // namespace haltpoll
