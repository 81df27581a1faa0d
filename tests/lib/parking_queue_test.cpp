// ParkingMpscQueue: the pool's task queue, whose head and the consumer's park state share one word.
// The push outcomes for each consumer state, FIFO order, and a randomized stress test in which a
// lost wake-up shows up as a producer whose item is never acknowledged.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "haltpoll/detail/parking_queue.hpp"

using haltpoll::ParkInfo;
using haltpoll::WakePath;
using haltpoll::detail::ParkCounters;
using namespace std::chrono_literals;

namespace {

struct Node {
  Node* next = nullptr;
  int producer = 0;
  std::uint64_t seq = 0;
};
using Queue = haltpoll::detail::ParkingMpscQueue<Node>;

template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::yield();
  }
  return true;
}

std::vector<std::uint64_t> seqs(Node* list) {
  std::vector<std::uint64_t> out;
  for (; list != nullptr; list = list->next) out.push_back(list->seq);
  return out;
}

}  // namespace

TEST_CASE("parking queue: pushes to a running consumer queue up and come out in push order", "[parking_queue]") {
  Queue q;
  Node n[4];
  for (int i = 0; i < 4; ++i) {
    n[i].seq = static_cast<std::uint64_t>(i);
    CHECK(q.push(&n[i]) == WakePath::none);
    CHECK(q.consumer_state() == Queue::ConsumerState::running);
  }
  CHECK(seqs(q.take_all()) == std::vector<std::uint64_t>{0, 1, 2, 3});
  CHECK(q.take_all() == nullptr);
}

TEST_CASE("parking queue: a pending push is taken at once, without an idle period", "[parking_queue]") {
  Queue q;
  ParkCounters c;
  Node a;
  q.push(&a);
  ParkInfo info;
  CHECK(q.wait_take_all(1'000'000'000, info, c) == &a);
  CHECK(info.already_notified);
  CHECK(c.parks.load() == 0);
}

TEST_CASE("parking queue: a push to a polling consumer makes no system call", "[parking_queue]") {
  Queue q;
  ParkCounters c;
  Node a, b;
  a.seq = 1;
  ParkInfo info;
  Node* got = nullptr;
  std::thread consumer([&] { got = q.wait_take_all(std::int64_t{60} * 1'000'000'000, info, c); });
  REQUIRE(eventually([&] { return q.consumer_state() == Queue::ConsumerState::polling; }));
  CHECK(q.push(&a) == WakePath::poll);
  consumer.join();
  REQUIRE(got == &a);
  CHECK(got->next == nullptr);
  CHECK(info.poll_hit);
  CHECK_FALSE(info.parked);
  CHECK(info.futex_waits == 0);
  CHECK(c.wakes_without_syscall.load() == 1);
  CHECK(q.consumer_state() == Queue::ConsumerState::running);
  CHECK(q.push(&b) == WakePath::none);  // the word went back to "running"
}

TEST_CASE("parking queue: window 0 parks on the futex and a push wakes it", "[parking_queue]") {
  Queue q;
  ParkCounters c;
  Node a;
  ParkInfo info;
  Node* got = nullptr;
  std::thread consumer([&] { got = q.wait_take_all(0, info, c); });
  REQUIRE(eventually([&] { return q.consumer_state() == Queue::ConsumerState::parked; }));
  CHECK(q.push(&a) == WakePath::futex);
  consumer.join();
  CHECK(got == &a);
  CHECK(info.parked);
  CHECK_FALSE(info.poll_hit);
  CHECK(info.poll_ns == 0);
  CHECK(c.futex_waits.load() == info.futex_waits);
}

TEST_CASE("parking queue: randomized stress, per-producer FIFO and no lost wake-up", "[parking_queue][stress]") {
  // Producers push numbered nodes; every few items each waits until the consumer has seen its
  // latest one, so that a lost wake-up (the consumer asleep with work queued) stalls it. A stalled
  // producer counts the loss after 2 s and pushes again so the test can end.
  constexpr int producers = 3;
  const auto duration = 1500ms;
  Queue q;
  ParkCounters c;
  std::atomic<std::uint64_t> seen[producers] = {};
  std::atomic<bool> done{false};
  std::atomic<int> lost{0}, disorder{0}, producers_left{producers};
  std::vector<std::thread> threads;

  std::thread consumer([&] {
    std::mt19937 rng(99);
    const std::int64_t windows[] = {0, 0, 500, 5000, 50000, 1000000};
    std::uint64_t last[producers] = {};
    for (;;) {
      Node* list = q.take_all();
      if (list == nullptr) {
        if (done.load(std::memory_order_acquire) && producers_left.load(std::memory_order_acquire) == 0) {
          list = q.take_all();  // the last pushes happened before producers_left reached 0
          if (list == nullptr) break;
        } else {
          ParkInfo info;
          list = q.wait_take_all(windows[rng() % 6], info, c);
        }
      }
      while (list != nullptr) {
        Node* next = list->next;
        if (list->producer >= 0) {
          const int p = list->producer;
          if (list->seq != last[p] + 1) disorder.fetch_add(1);
          last[p] = list->seq;
          seen[p].store(list->seq, std::memory_order_release);
        }
        delete list;
        list = next;
      }
    }
  });
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rng(static_cast<unsigned>(p) + 1);
      const auto end = std::chrono::steady_clock::now() + duration;
      std::uint64_t seq = 0;
      while (std::chrono::steady_clock::now() < end) {
        auto* n = new Node{nullptr, p, ++seq};
        q.push(n);
        if (rng() % 4 == 0) {
          const auto give_up = std::chrono::steady_clock::now() + 2s;
          while (seen[p].load(std::memory_order_acquire) != seq) {
            if (std::chrono::steady_clock::now() > give_up) {
              lost.fetch_add(1);
              q.push(new Node{nullptr, -1, 0});  // rescue, so that the test can finish
              break;
            }
            std::this_thread::yield();
          }
        }
        if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 200));
      }
      producers_left.fetch_sub(1, std::memory_order_release);
    });
  }
  for (auto& t : threads) t.join();
  done.store(true, std::memory_order_release);
  q.push(new Node{nullptr, -1, 0});  // wake the consumer if it is parked
  consumer.join();
  for (Node* list = q.take_all(); list != nullptr;) {  // the wake node, if the consumer had already left
    Node* next = list->next;
    delete list;
    list = next;
  }
  CHECK(lost.load() == 0);
  CHECK(disorder.load() == 0);
  CHECK(c.parks.load() > 0);
}
