// Window governor: the haltpoll policy against hand-computed kernel sequences, the adaptive
// policy's decisions on distributions whose best window is known, static, oracle, parsing.
#include "haltpoll/governor.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

using haltpoll::HaltpollParams;
using haltpoll::make_window_policy;
using haltpoll::PolicyParams;
using haltpoll::WindowGovernor;

// Counts allocations so that the hot path can be shown not to allocate. Not under the sanitizers:
// their runtimes own operator new, and mixing replacements with theirs reports false mismatches.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define HALTPOLL_COUNT_ALLOCATIONS 1
namespace {
std::atomic<long> g_allocations{0};
}
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// GCC 12 at -O2 sees free() of a pointer from operator new[] through the inlined replacement pair
// and warns, although both sides are these malloc-based replacements.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop
#endif

namespace {

// One idle period polled with the policy's current window, then the limit the kernel would hold.
struct Step {
  std::uint64_t idle_ns;
  std::uint64_t expect_window_ns;
  std::uint64_t set_cap_before = 0;  // non-zero: write guest_halt_poll_ns first
};
struct Row {
  const char* name;
  HaltpollParams params;
  std::vector<Step> steps;
};

HaltpollParams hp(std::uint32_t cap, std::uint32_t grow, std::uint32_t shrink, std::uint32_t grow_start,
                  bool allow_shrink = true) {
  HaltpollParams p;
  p.guest_halt_poll_ns = cap;
  p.guest_halt_poll_grow = grow;
  p.guest_halt_poll_shrink = shrink;
  p.guest_halt_poll_grow_start = grow_start;
  p.guest_halt_poll_allow_shrink = allow_shrink;
  return p;
}

}  // namespace

TEST_CASE("haltpoll policy follows the kernel's adjust_poll_limit step by step") {
  const std::vector<Row> rows = {
      {"defaults: grow from 0 to grow_start, double, clamp, shrink, reset below grow_start",
       HaltpollParams{},
       {
           {10000, 50000},     // w=0: halt 10000 > 0, <= cap: 0*2 raised to grow_start
           {40000, 50000},     // hit: no adjustment
           {120000, 100000},   // miss, halt 70000 > 50000: double
           {150000, 100000},   // miss, halt 50000 <= limit: unchanged although the poll failed
           {250000, 200000},   // miss, halt 150000: 200000 (= cap)
           {500000, 100000},   // miss, halt 300000 > cap: /2
           {400000, 50000},    // halt 300000 > cap: /2
           {400000, 0},        // 25000 < grow_start: reset to 0
           {300000, 0},        // w=0: halt = whole period 300000 > cap: 0/2 = 0
           {200000, 50000},    // w=0: halt 200000 == cap still grows
       }},
      {"halt residency one above the cap shrinks, at the cap grows",
       HaltpollParams{},
       {{1, 50000}, {250000, 100000}, {300001, 50000}}},
      {"clamp to cap after a large grow factor",
       hp(700000, 10, 2, 10000),
       {{50, 10000}, {30000, 100000}, {300000, 700000}, {700000, 700000}, {1400001, 350000}}},
      {"shrink 0 sets 0 at once", hp(200000, 2, 0, 50000), {{10, 50000}, {350000, 0}}},
      {"grow_start 0: growing from 0 stays 0, the kernel never starts polling",
       hp(200000, 2, 2, 0),
       {{10, 0}, {10, 0}, {100000, 0}}},
      {"shrink 3: integer division, then the reset below grow_start",
       hp(200000, 2, 3, 10000),
       {{10, 10000}, {30000, 20000}, {60000, 40000}, {400000, 13333}, {400000, 0}}},
      {"grow 1 parks the limit at grow_start", hp(200000, 1, 2, 30000), {{10, 30000}, {100000, 30000}}},
      {"grow_start above the cap is clamped to the cap", hp(40000, 2, 2, 50000), {{10, 40000}}},
      {"32-bit overflow: 50000 * 100000 wraps modulo 2^32 instead of clamping to the cap",
       hp(4000000000u, 100000, 2, 50000),
       {{10, 50000}, {150000, 705032704}}},  // 5e9 mod 2^32 = 705032704
      {"32-bit overflow on grow: 3e9 * 2 wraps to 1705032704 (64-bit arithmetic would give the cap)",
       hp(3000000000u, 2, 2, 1000000000u),
       {{10, 1000000000u},
        {2500000000ull, 2000000000u},
        {4500000000ull, 3000000000u},                    // 4e9 clamped to the cap
        {6500000000ull, 1705032704, 4000000000ull}}},   // cap raised to 4e9; 6e9 mod 2^32
      {"raising the cap lets the next grow go further",
       HaltpollParams{},
       {{10, 50000}, {120000, 100000}, {250000, 200000}, {550000, 400000, 800000}}},
      {"lowering the cap does not clamp the limit until the next adjustment (allow_shrink=Y)",
       HaltpollParams{},
       {{10, 50000},
        {120000, 100000},
        {250000, 200000},
        {150000, 200000, 100000},  // hit under the old limit; cap now 100000, limit stays 200000
        {280000, 200000},          // miss, halt 80000 <= cap but not > limit: unchanged
        {400000, 100000}}},        // miss, halt 200000 > cap: shrink 200000/2
      {"allow_shrink=N quirk: a limit above a lowered cap stays for good",
       hp(200000, 2, 2, 50000, false),
       {{10, 50000},
        {120000, 100000},
        {250000, 200000},
        {700000, 200000},          // halt 500000 > cap: no shrink allowed
        {300000, 200000, 100000},  // cap lowered to 100000: halt 100000 is not > limit
        {900000, 200000},          // halt 700000 > cap: still no shrink
        {260000, 200000}}},        // halt 60000: unchanged; the window never comes back under the cap
  };
  for (const auto& row : rows) {
    SECTION(row.name) {
      PolicyParams params;
      params.haltpoll = row.params;
      WindowGovernor g("haltpoll", params);
      CHECK(g.window_ns() == 0);
      std::size_t i = 0;
      for (const auto& s : row.steps) {
        INFO("step " << i++ << ": idle " << s.idle_ns);
        if (s.set_cap_before) g.set_cap_ns(s.set_cap_before);
        g.record(s.idle_ns, g.window_ns());
        CHECK(g.window_ns() == s.expect_window_ns);
      }
    }
  }
}

TEST_CASE("haltpoll policy computes the halt residency from the window it is told") {
  WindowGovernor g("haltpoll");
  g.record(10, 0);  // 0 → 50000
  REQUIRE(g.window_ns() == 50000);
  // Polled 20000 (not the policy's own window), halted 60000 > 50000: grows.
  g.record(80000, 20000);
  CHECK(g.window_ns() == 100000);
  // A hit under any window changes nothing, however long the period.
  g.record(900000, 900000);
  CHECK(g.window_ns() == 100000);
  // With window 0 the whole period is the halt: 300000 > cap shrinks.
  g.record(300000, 0);
  CHECK(g.window_ns() == 50000);
}

TEST_CASE("haltpoll cap is a 32-bit module parameter") {
  WindowGovernor g("haltpoll");
  CHECK(g.policy().cap_ns() == 200000);
  g.set_cap_ns(std::uint64_t{1} << 40);
  CHECK(g.policy().cap_ns() == UINT32_MAX);
  CHECK(std::string(g.policy().name()) == "haltpoll");
}

TEST_CASE("static policy polls its window, bounded by the cap") {
  WindowGovernor g("static:50000");
  CHECK(g.window_ns() == 50000);
  g.record(1000000, 50000);
  CHECK(g.window_ns() == 50000);
  g.set_cap_ns(20000);
  CHECK(g.window_ns() == 20000);
  g.set_cap_ns(100000);
  CHECK(g.window_ns() == 50000);
  CHECK(WindowGovernor("static:0").window_ns() == 0);
}

TEST_CASE("oracle polls exactly the periods shorter than the miss cost") {
  PolicyParams p;
  p.miss_cost_ns = 30000;
  WindowGovernor g("oracle", p);
  CHECK(g.window_ns() == 0);  // no hint: park
  g.hint_next_idle_ns(5000);
  CHECK(g.window_ns() == 5000);
  g.hint_next_idle_ns(30000);
  CHECK(g.window_ns() == 30000);
  g.hint_next_idle_ns(30001);
  CHECK(g.window_ns() == 0);
  g.set_cap_ns(4000);
  g.hint_next_idle_ns(5000);
  CHECK(g.window_ns() == 0);
  g.set_miss_cost_ns(100000);
  g.set_cap_ns(UINT64_MAX);
  g.hint_next_idle_ns(90000);
  CHECK(g.window_ns() == 90000);
}

namespace {
PolicyParams with_miss_cost(std::uint64_t m) {
  PolicyParams p;
  p.miss_cost_ns = m;
  return p;
}
void feed(WindowGovernor& g, std::uint64_t idle_ns, int n) {
  for (int i = 0; i < n; ++i) g.record(idle_ns, g.window_ns());
}
}  // namespace

TEST_CASE("adaptive starts parked and learns to cover short periods with the next bucket edge") {
  WindowGovernor g("adaptive", with_miss_cost(30000));
  CHECK(g.window_ns() == 0);
  CHECK(std::string(g.policy().name()) == "adaptive");
  feed(g, 5000, 50);
  // 5000 falls in the bucket (4096, 5120]; polling to its edge turns every period into a hit.
  CHECK(g.window_ns() == 5120);
  // Shorter periods do not shrink it: a window costs nothing when every period ends before it.
  feed(g, 256, 200);
  CHECK(g.window_ns() == 5120);
  WindowGovernor tiny("adaptive", with_miss_cost(30000));
  feed(tiny, 200, 20);
  CHECK(tiny.window_ns() == 256);  // the lowest bucket is [0, 256]
}

TEST_CASE("adaptive parks when a period costs more to poll through than a miss") {
  WindowGovernor g("adaptive", with_miss_cost(30000));
  feed(g, 100000, 100);
  CHECK(g.window_ns() == 0);
  // The same periods are worth polling through when a miss costs more than they last.
  g.set_miss_cost_ns(200000);
  CHECK(g.window_ns() == 114688);  // bucket (98304, 114688]
  // A cap below the period leaves nothing worth polling.
  g.set_cap_ns(100000);
  CHECK(g.window_ns() == 0);
  g.set_cap_ns(200000);
  CHECK(g.window_ns() == 114688);
}

TEST_CASE("adaptive covers the short mode of a bimodal mix and skips the long one") {
  WindowGovernor g("adaptive", with_miss_cost(30000));
  // 70 % 2 µs, 30 % 5 ms: polling to 2048 costs 0.7·2000 + 0.3·(2048 + 30000) ≈ 11 µs a period,
  // parking costs 30 µs, polling through the long mode far more.
  const std::uint64_t pattern[] = {2000, 2000, 5000000, 2000, 2000, 5000000, 2000, 2000, 2000, 5000000};
  for (int r = 0; r < 50; ++r)
    for (auto d : pattern) g.record(d, g.window_ns());
  CHECK(g.window_ns() == 2048);
}

TEST_CASE("adaptive follows a phase change within a few half-lives") {
  WindowGovernor g("adaptive", with_miss_cost(30000));  // half-life 32 records
  feed(g, 2000, 1000);
  REQUIRE(g.window_ns() == 2048);
  // Long periods only: polling 2048 stops paying once short ones weigh under ~7 % (≈ 4 half-lives).
  int n = 0;
  while (g.window_ns() != 0 && n < 1000) {
    g.record(5000000, g.window_ns());
    ++n;
  }
  CHECK(n > 32);
  CHECK(n <= 160);
  // Coming back is quick: polling pays again as soon as short periods weigh over ~7 %.
  n = 0;
  while (g.window_ns() == 0 && n < 1000) {
    g.record(2000, g.window_ns());
    ++n;
  }
  CHECK(n >= 2);
  CHECK(n <= 10);
  CHECK(g.window_ns() == 2048);
}

TEST_CASE("adaptive respects the poll budget") {
  PolicyParams p = with_miss_cost(30000);
  p.adaptive.adaptive_budget_permille = 0;
  WindowGovernor none("adaptive", p);
  feed(none, 5000, 100);
  CHECK(none.window_ns() == 0);
  // Half the idle time: 50 % of periods are 2 µs, 50 % are 100 µs; polling the short ones
  // (2048 ns window) spends about (2000 + 2048) / 102000 ≈ 4 % of idle time, within a 10 % budget;
  // polling through 100 µs would spend all of it.
  p.adaptive.adaptive_budget_permille = 100;
  p.miss_cost_ns = 1000000;
  WindowGovernor some("adaptive", p);
  for (int i = 0; i < 200; ++i) {
    some.record(2000, some.window_ns());
    some.record(100000, some.window_ns());
  }
  CHECK(some.window_ns() == 2048);
  p.adaptive.adaptive_budget_permille = 1000;
  WindowGovernor all("adaptive", p);
  for (int i = 0; i < 200; ++i) {
    all.record(2000, all.window_ns());
    all.record(100000, all.window_ns());
  }
  CHECK(all.window_ns() == 114688);
}

TEST_CASE("adaptive honours the haltpoll cap as its default bound") {
  PolicyParams p = with_miss_cost(10000000);
  p.haltpoll.guest_halt_poll_ns = 100000;
  WindowGovernor g("adaptive", p);
  feed(g, 90000, 100);
  CHECK(g.window_ns() == 98304);
  CHECK(g.policy().cap_ns() == 100000);
  feed(g, 150000, 300);
  CHECK(g.window_ns() <= 100000);
}

#ifdef HALTPOLL_COUNT_ALLOCATIONS
TEST_CASE("record and window_ns do not allocate") {
  for (const char* spec : {"haltpoll", "adaptive", "static:1000", "oracle"}) {
    const long at_start = g_allocations.load();
    WindowGovernor g(spec);
    REQUIRE(g_allocations.load() > at_start);  // the counter does see this binary's allocations
    const long before = g_allocations.load();
    std::uint64_t x = 12345;
    for (int i = 0; i < 20000; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const std::uint64_t d = (x >> 40) % 3000000;
      g.hint_next_idle_ns(d);
      g.record(d, g.window_ns());
      if (i % 1000 == 0) g.set_cap_ns(100000 + static_cast<std::uint64_t>(i));
    }
    CHECK(g_allocations.load() == before);
  }
}
#endif

TEST_CASE("make_window_policy refuses bad specs with a clear message") {
  for (const char* bad : {"", "foo", "Haltpoll", "static", "static:", "static:abc", "static:-1", "static:12x",
                          "static:99999999999999999999999"}) {
    INFO(bad);
    try {
      (void)make_window_policy(bad);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(std::string("\"") + bad + "\"") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(WindowGovernor(std::unique_ptr<haltpoll::WindowPolicy>{}), std::invalid_argument);
}

TEST_CASE("set_policy_param parses every known key and refuses the rest") {
  PolicyParams p;
  haltpoll::set_policy_param(p, "guest_halt_poll_ns", "400000");
  haltpoll::set_policy_param(p, "guest_halt_poll_grow", "4");
  haltpoll::set_policy_param(p, "guest_halt_poll_shrink", "0");
  haltpoll::set_policy_param(p, "guest_halt_poll_grow_start", "10000");
  haltpoll::set_policy_param(p, "guest_halt_poll_allow_shrink", "N");
  haltpoll::set_policy_param(p, "miss_cost_ns", "12345");
  haltpoll::set_policy_param(p, "adaptive_half_life", "64");
  haltpoll::set_policy_param(p, "adaptive_recompute_every", "4");
  haltpoll::set_policy_param(p, "adaptive_budget_permille", "500");
  haltpoll::set_policy_param(p, "adaptive_hysteresis_permille", "0");
  CHECK(p.haltpoll.guest_halt_poll_ns == 400000);
  CHECK(p.haltpoll.guest_halt_poll_grow == 4);
  CHECK(p.haltpoll.guest_halt_poll_shrink == 0);
  CHECK(p.haltpoll.guest_halt_poll_grow_start == 10000);
  CHECK_FALSE(p.haltpoll.guest_halt_poll_allow_shrink);
  CHECK(p.miss_cost_ns == 12345);
  CHECK(p.adaptive.adaptive_half_life == 64);
  CHECK(p.adaptive.adaptive_recompute_every == 4);
  CHECK(p.adaptive.adaptive_budget_permille == 500);
  CHECK(p.adaptive.adaptive_hysteresis_permille == 0);
  haltpoll::set_policy_param(p, "guest_halt_poll_allow_shrink", "true");
  CHECK(p.haltpoll.guest_halt_poll_allow_shrink);
  CHECK(haltpoll::policy_param_names().size() == 10);

  auto refuses = [&](const char* k, const char* v, const char* needle) {
    INFO(k << "=" << v);
    try {
      haltpoll::set_policy_param(p, k, v);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(needle) != std::string::npos);
    }
  };
  refuses("no_such_key", "1", "unknown parameter \"no_such_key\"");
  refuses("guest_halt_poll_ns", "4294967296", "out of range");
  refuses("guest_halt_poll_ns", "-1", "not a non-negative integer");
  refuses("guest_halt_poll_ns", "", "not a non-negative integer");
  refuses("guest_halt_poll_grow", "2x", "not a non-negative integer");
  refuses("guest_halt_poll_allow_shrink", "maybe", "not a boolean");
  refuses("adaptive_half_life", "0", "out of range");
  refuses("adaptive_budget_permille", "1001", "out of range");
  refuses("miss_cost_ns", "99999999999999999999999", "out of range");
}
