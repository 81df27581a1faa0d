// bench_handoff_floor: what a hand-off between two pinned threads costs in its barest forms, to tell
// the WorkerPool's own overhead from the floor of its design (docs/performance.md, "Worker pool").
// Ping-pong between CPUs 0 and 1 (the first two of the affinity mask), one-way = round trip / 2,
// exact p50, for:
//   raw          one word per side; the sender stores, the receiver polls (PAUSE) and resets it;
//   node         the sender allocates an 80-byte node and publishes its address by compare-exchange
//                on the receiver's word; the receiver polls, prefetches the node, takes it with an
//                exchange, reads it and frees it (the pool's queue without the pool);
//   node_clock   node, plus a monotonic_ns() stamp on each side (the pool's submit and wake stamps);
//   slot_clock   the payload inline in the receiver's word line: the sender takes its stamp, claims
//                the line with a compare-exchange, writes the stamp and the payload, publishes with
//                a fetch_add (two RMWs on one line); the receiver polls for the publish bit.
// Four rounds of the four variants, interleaved. Prints one JSON object.
#include "bench_common.hpp"
#include "haltpoll/arch/select.hpp"
#include "haltpoll/clock.hpp"
#include "json_writer.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

namespace {

using haltpoll::monotonic_ns;

using benchutil::pin_to;

using haltpoll::arch::native::cpu_relax;  // PAUSE / YIELD, as the barrier uses

struct alignas(16) Node {
  Node* next;
  std::int64_t stamp;
  char payload[64];
};

constexpr std::uintptr_t kEmpty = 2;  // "polling", as in the pool's word
constexpr std::uintptr_t kClaimed = 4, kPublished = 8;

struct alignas(64) Box {
  std::atomic<std::uintptr_t> word{kEmpty};
  std::int64_t stamp = 0;
  char payload[40] = {};
};

enum class Mode { raw, node, node_clock, slot_clock };
const char* name(Mode m) {
  switch (m) {
    case Mode::raw: return "raw";
    case Mode::node: return "node";
    case Mode::node_clock: return "node_clock";
    case Mode::slot_clock: return "slot_clock";
  }
  return "?";
}

volatile std::int64_t g_sink;

void send(Box& to, Mode m) {
  switch (m) {
    case Mode::raw:
      to.word.store(1, std::memory_order_release);
      return;
    case Mode::node:
    case Mode::node_clock: {
      auto* n = new Node;
      n->next = nullptr;
      n->stamp = m == Mode::node_clock ? monotonic_ns() : 0;
      n->payload[0] = 1;
      std::uintptr_t old = kEmpty;
      while (!to.word.compare_exchange_weak(old, reinterpret_cast<std::uintptr_t>(n), std::memory_order_release,
                                            std::memory_order_relaxed)) {
      }
      return;
    }
    case Mode::slot_clock: {
      // The stamp first: between the claim and the publish the receiver's next poll may pull the
      // line back, so that window must be a few stores, not a clock read.
      const std::int64_t stamp = monotonic_ns();
      std::uintptr_t old = kEmpty;
      while (!to.word.compare_exchange_weak(old, old | kClaimed, std::memory_order_acquire, std::memory_order_relaxed)) {
      }
      to.stamp = stamp;
      to.payload[0] = 1;
      to.word.fetch_add(kPublished, std::memory_order_release);
      return;
    }
  }
}

void receive(Box& mine, Mode m) {
  std::uintptr_t v;
  if (m == Mode::slot_clock) {
    while (((v = mine.word.load(std::memory_order_acquire)) & kPublished) == 0) cpu_relax();
    g_sink = mine.stamp + mine.payload[0] + monotonic_ns();
    mine.word.store(kEmpty, std::memory_order_release);
    return;
  }
  while ((v = mine.word.load(std::memory_order_acquire)) == kEmpty) cpu_relax();
  if (m == Mode::raw) {
    mine.word.store(kEmpty, std::memory_order_relaxed);
    return;
  }
  __builtin_prefetch(reinterpret_cast<const void*>(v));
  const std::int64_t now = m == Mode::node_clock ? monotonic_ns() : 0;
  auto* n = reinterpret_cast<Node*>(mine.word.exchange(kEmpty, std::memory_order_acquire));
  g_sink = n->stamp + n->payload[0] + now;
  delete n;
}

Box g_box[2];

void run(Mode m, int cpu_a, int cpu_b, int rounds, std::vector<std::int64_t>& out) {
  constexpr int kWarmup = 1000;
  std::thread pong([&] {
    pin_to(cpu_b);
    for (int i = 0; i < rounds + kWarmup; ++i) {
      receive(g_box[1], m);
      send(g_box[0], m);
    }
  });
  pin_to(cpu_a);
  for (int i = 0; i < rounds + kWarmup; ++i) {
    const std::int64_t t0 = monotonic_ns();
    send(g_box[1], m);
    receive(g_box[0], m);
    if (i >= kWarmup) out.push_back((monotonic_ns() - t0) / 2);
  }
  pong.join();
}

std::int64_t p50(std::vector<std::int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const std::vector<int> cpus = benchutil::affinity_cpus();
  if (cpus.size() < 2) {
    benchutil::JsonObject().str("error", "needs two CPUs").print();
    return 1;
  }
  monotonic_ns();
  const Mode modes[] = {Mode::raw, Mode::node, Mode::node_clock, Mode::slot_clock};
  std::vector<std::int64_t> samples[4];
  for (int block = 0; block < 4; ++block) {
    for (int i = 0; i < 4; ++i) run(modes[i], cpus[0], cpus[1], 50000, samples[i]);
  }
  const double raw = static_cast<double>(std::max<std::int64_t>(p50(samples[0]), 1));
  benchutil::JsonObject json;
  json.str("bench", "handoff_floor").str("clock_source", haltpoll::clock_source_name());
  for (int i = 0; i < 4; ++i) {
    const std::int64_t p = p50(samples[i]);
    json.num(std::string(name(modes[i])) + "_p50_ns", static_cast<double>(p));
    json.num(std::string(name(modes[i])) + "_over_raw", std::round(static_cast<double>(p) / raw * 100) / 100);
  }
  json.print();
  return 0;
}
