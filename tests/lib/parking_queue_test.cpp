// ParkingMpscQueue: the pool's task queue, whose head and the consumer's park state share one word,
// with an inline slot node claimed through a sticky bit in that word. The push outcomes for each
// consumer state, the slot's claim/release rules in each consumer state, FIFO order, and a
// randomized stress test (heap nodes and the slot mixed) in which a lost wake-up shows up as a
// producer whose item is never acknowledged and a double use of the slot as a failed check.
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
  std::atomic<int> users{0};  // the slot: claimers and the consumer count themselves in and out
};
using Queue = haltpoll::detail::ParkingMpscQueue<Node>;

template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;  // bounds a failing run only
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

TEST_CASE("parking queue: the slot is claimed once, queued like any node, and free again only after release",
          "[parking_queue][slot]") {
  Queue q;
  Node heap;
  heap.seq = 1;
  Node* slot = q.try_claim_slot();
  REQUIRE(slot != nullptr);
  CHECK(q.is_slot(slot));
  CHECK_FALSE(q.is_slot(&heap));
  CHECK(q.slot_claimed());
  CHECK(q.try_claim_slot() == nullptr);  // claimed, not yet pushed
  CHECK(q.take_all() == nullptr);        // a claim alone is not work
  slot->seq = 2;
  CHECK(q.push(&heap) == WakePath::none);
  CHECK(q.push(slot) == WakePath::none);
  CHECK(q.slot_claimed());
  CHECK(seqs(q.take_all()) == std::vector<std::uint64_t>{1, 2});
  CHECK(q.slot_claimed());               // the take keeps the bit: the consumer still uses the slot
  CHECK(q.try_claim_slot() == nullptr);
  q.release_slot();
  CHECK_FALSE(q.slot_claimed());
  CHECK(q.try_claim_slot() == slot);
  q.push(slot);
  CHECK(q.take_all() == slot);
  q.release_slot();
}

TEST_CASE("parking queue: a claim does not wake an idle consumer; the slot's push does", "[parking_queue][slot]") {
  // Polling: the claim changes the word under the poll, which must not count it as work; parked:
  // it changes the futex word, and FUTEX_WAIT must not return for good (EAGAIN, then wait again).
  struct Case {
    std::int64_t window_ns;
    Queue::ConsumerState idle;
    WakePath woken_by;
  };
  const Case c = GENERATE(Case{std::int64_t{60} * 1'000'000'000, Queue::ConsumerState::polling, WakePath::poll},
                          Case{0, Queue::ConsumerState::parked, WakePath::futex});
  Queue q;
  ParkCounters counters;
  ParkInfo info;
  Node* got = nullptr;
  std::atomic<bool> returned{false};
  std::thread consumer([&] {
    got = q.wait_take_all(c.window_ns, info, counters);
    returned.store(true);
  });
  REQUIRE(eventually([&] { return q.consumer_state() == c.idle; }));
  Node* slot = q.try_claim_slot();
  REQUIRE(slot != nullptr);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(returned.load());
  CHECK(q.consumer_state() == c.idle);
  slot->seq = 7;
  CHECK(q.push(slot) == c.woken_by);
  consumer.join();
  REQUIRE(got == slot);
  CHECK(got->seq == 7);
  CHECK(info.poll_hit == (c.woken_by == WakePath::poll));
  CHECK(info.parked == (c.woken_by == WakePath::futex));
  CHECK(q.slot_claimed());
  q.release_slot();
}

TEST_CASE("parking queue: a consumer that parks while the slot is claimed keeps the bit and is woken by a heap push",
          "[parking_queue][slot]") {
  Queue q;
  ParkCounters c;
  Node heap;
  Node* slot = q.try_claim_slot();
  REQUIRE(slot != nullptr);
  ParkInfo info;
  Node* got = nullptr;
  // A short window: the consumer polls past the claimed bit, then parks with it set.
  std::thread consumer([&] { got = q.wait_take_all(200'000, info, c); });
  REQUIRE(eventually([&] { return q.consumer_state() == Queue::ConsumerState::parked; }));
  CHECK(q.slot_claimed());
  CHECK(q.push(&heap) == WakePath::futex);
  consumer.join();
  CHECK(got == &heap);
  CHECK(got->next == nullptr);
  CHECK(info.parked);
  CHECK(q.slot_claimed());  // still the claimer's
  CHECK(q.push(slot) == WakePath::none);
  CHECK(q.take_all() == slot);
  q.release_slot();
  CHECK_FALSE(q.slot_claimed());
}

TEST_CASE("parking queue: randomized stress, per-producer FIFO and no lost wake-up", "[parking_queue][stress]") {
  // Producers push numbered nodes; every few items each waits until the consumer has seen its
  // latest one, so that a lost wake-up (the consumer asleep with work queued) stalls it. A stalled
  // producer counts the loss after 10 s (not less: a consumer preempted on a loaded machine or under
  // qemu-user is slow, not lost) and pushes again so the test can end.
  constexpr int producers = 3;
  const auto duration = 1500ms;
  Queue q;
  ParkCounters c;
  std::atomic<std::uint64_t> seen[producers] = {};
  std::atomic<bool> done{false};
  std::atomic<int> lost{0}, disorder{0}, slot_misuse{0}, producers_left{producers};
  std::uint64_t slot_used = 0;  // consumer only
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
        const bool slot = q.is_slot(list);
        if (slot && list->users.fetch_add(1) != 1) slot_misuse.fetch_add(1);  // its claimer left: 1
        if (list->producer >= 0) {
          const int p = list->producer;
          if (list->seq != last[p] + 1) disorder.fetch_add(1);
          last[p] = list->seq;
          seen[p].store(list->seq, std::memory_order_release);
        }
        if (slot) {
          ++slot_used;
          list->producer = -2;  // a plain write: TSan reports it if a claimer writes concurrently
          if (list->users.fetch_sub(2) != 2) slot_misuse.fetch_add(1);
          q.release_slot();
        } else {
          delete list;
        }
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
        Node* n = rng() % 2 == 0 ? q.try_claim_slot() : nullptr;
        if (n != nullptr) {
          if (n->users.fetch_add(1) != 0) slot_misuse.fetch_add(1);
          n->producer = p;
          n->seq = ++seq;
          q.push(n);  // the count stays at 1 until the consumer takes it
        } else {
          n = new Node;
          n->producer = p;
          n->seq = ++seq;
          q.push(n);
        }
        if (rng() % 4 == 0) {
          const auto give_up = std::chrono::steady_clock::now() + 10s;
          while (seen[p].load(std::memory_order_acquire) != seq) {
            if (std::chrono::steady_clock::now() > give_up) {
              lost.fetch_add(1);
              q.push(new Node{nullptr, -1, 0, {}});  // rescue, so that the test can finish
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
  q.push(new Node{nullptr, -1, 0, {}});  // wake the consumer if it is parked
  consumer.join();
  for (Node* list = q.take_all(); list != nullptr;) {  // the wake node, if the consumer had already left
    Node* next = list->next;
    delete list;
    list = next;
  }
  CHECK(lost.load() == 0);
  CHECK(disorder.load() == 0);
  CHECK(slot_misuse.load() == 0);
  CHECK(slot_used > 0);
  CHECK_FALSE(q.slot_claimed());
  CHECK(c.parks.load() > 0);
}
