// The timeout barrier's typed suite: every case runs once per (backend, word type); a backend that
// this machine lacks is reported and skipped. Mirrors the kernel's lib/tests/barrier-timeout-test.c
// (REFERENCE.md §2) plus a cross-thread wake and an acquire message-passing check.
#include "haltpoll/affinity.hpp"
#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"

#include <catch2/catch.hpp>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace {

using haltpoll::BarrierBackend;

template <BarrierBackend B, class W>
struct Case {
  static constexpr BarrierBackend backend = B;
  using Word = W;
};
using SpinU32 = Case<BarrierBackend::spin, std::uint32_t>;
using SpinU64 = Case<BarrierBackend::spin, std::uint64_t>;
using PauseU32 = Case<BarrierBackend::x86_pause, std::uint32_t>;
using PauseU64 = Case<BarrierBackend::x86_pause, std::uint64_t>;
using WaitpkgU32 = Case<BarrierBackend::x86_waitpkg, std::uint32_t>;
using WaitpkgU64 = Case<BarrierBackend::x86_waitpkg, std::uint64_t>;
using WfeU32 = Case<BarrierBackend::arm64_wfe, std::uint32_t>;
using WfeU64 = Case<BarrierBackend::arm64_wfe, std::uint64_t>;
using WfetU32 = Case<BarrierBackend::arm64_wfet, std::uint32_t>;
using WfetU64 = Case<BarrierBackend::arm64_wfet, std::uint64_t>;
using YieldU32 = Case<BarrierBackend::generic_yield, std::uint32_t>;
using YieldU64 = Case<BarrierBackend::generic_yield, std::uint64_t>;

#define BARRIER_CASES \
  SpinU32, SpinU64, PauseU32, PauseU64, WaitpkgU32, WaitpkgU64, WfeU32, WfeU64, WfetU32, WfetU64, YieldU32, YieldU64

// Forces the case's backend for the test's duration and puts the start-up choice back afterwards.
class BackendScope {
 public:
  explicit BackendScope(BarrierBackend b) : ok_(haltpoll::force_backend(b)) {
    if (!ok_) WARN("backend " << haltpoll::to_string(b) << " not available here: case skipped");
  }
  ~BackendScope() { haltpoll::force_backend(haltpoll::default_backend()); }
  BackendScope(const BackendScope&) = delete;
  BackendScope& operator=(const BackendScope&) = delete;
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

// Adds `unit` per call, starting from 0, and counts calls: the kernel test's synthetic clock.
struct SyntheticClock {
  std::uint64_t unit;
  std::uint64_t now = 0;
  std::int64_t first = 0;
  std::int64_t last = 0;
  int calls = 0;
  std::int64_t operator()() {
    now += unit;
    last = static_cast<std::int64_t>(now);  // wraps negative past S64_MAX, as in the kernel
    if (calls++ == 0) first = last;
    return last;
  }
};

template <class W>
auto never() {
  return [](W) { return false; };
}

constexpr std::int64_t kS64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();

}  // namespace

TEMPLATE_TEST_CASE("barrier: negative and out-of-range timeouts load once and never read the clock",
                   "[barrier]", BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  std::atomic<W> word{7};
  // What -1, ~0, S64_MAX+1 and U64_MAX become after the signed 64-bit cast.
  const std::array<std::int64_t, 4> timeouts{-1, static_cast<std::int64_t>(~std::uint64_t{0}),
                                             static_cast<std::int64_t>(std::uint64_t{1} << 63),
                                             static_cast<std::int64_t>(kU64Max)};
  for (std::int64_t t : timeouts) {
    CAPTURE(t);
    SyntheticClock c{0};
    CHECK(haltpoll::cond_load_relaxed_timeout(word, never<W>(), c, t) == 7);
    CHECK(c.calls == 0);
    SyntheticClock a{0};
    CHECK(haltpoll::cond_load_acquire_timeout(word, never<W>(), a, t) == 7);
    CHECK(a.calls == 0);
  }
}

TEMPLATE_TEST_CASE("barrier: timeout 0 reads the clock exactly once", "[barrier]", BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  std::atomic<W> word{1};
  SyntheticClock c{0};
  // A zero clock is a failed clock; give it a value so that only the timeout ends the wait.
  c.now = 1;
  CHECK(haltpoll::cond_load_relaxed_timeout(word, never<W>(), c, 0) == 1);
  CHECK(c.calls == 1);  // the kernel's too: one batch, one reading that fixes (and ends) the deadline
  SyntheticClock a{0};
  a.now = 1;
  CHECK(haltpoll::cond_load_acquire_timeout(word, never<W>(), a, 0) == 1);
  CHECK(a.calls == 1);
}

TEMPLATE_TEST_CASE("barrier: synthetic clock table", "[barrier]", BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  struct Row {
    std::int64_t timeout;
    std::uint64_t unit;
    int min_calls;
  };
  const std::array<Row, 6> rows{{
      {1, std::uint64_t{1} << 28, 1},
      {std::int64_t{1} << 30, std::uint64_t{1} << 28, 4},
      {std::numeric_limits<std::int32_t>::max(), std::uint64_t{1} << 28, 8},
      {static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()), std::uint64_t{1} << 28, 16},
      {std::int64_t{1} << 33, std::uint64_t{1} << 28, 32},
      {kS64Max, std::uint64_t{1} << 58, 32},  // the deadline wraps; the exit comes when `now` wraps <= 0
  }};
  for (const Row& r : rows) {
    CAPTURE(r.timeout, r.unit);
    std::atomic<W> word{3};
    for (bool acquire : {false, true}) {
      CAPTURE(acquire);
      SyntheticClock c{r.unit};
      const W v = acquire ? haltpoll::cond_load_acquire_timeout(word, never<W>(), c, r.timeout)
                          : haltpoll::cond_load_relaxed_timeout(word, never<W>(), c, r.timeout);
      CHECK(v == 3);
      CHECK(c.calls >= r.min_calls);
      if (r.timeout != kS64Max) {
        REQUIRE(c.calls >= 1);
        CHECK(c.last - c.first >= r.timeout);
        // From above too: the wait ends at the first reading at or past the deadline, not later.
        CHECK(c.last - c.first < r.timeout + static_cast<std::int64_t>(r.unit));
      } else {
        CHECK(c.last <= 0);  // ended by the wrapped (failed) clock, not by a bogus deadline
      }
    }
  }
}

TEMPLATE_TEST_CASE("barrier: a mocked clock that sets the flag makes the wait succeed", "[barrier]",
                   BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  constexpr std::int64_t kTimeout = 2'000'000;
  for (bool acquire : {false, true}) {
    CAPTURE(acquire);
    std::atomic<W> word{0};
    // Synthetic time, 1/16 of the timeout per reading: with the real clock, a preemption between
    // two readings (a few ms on a loaded machine) jumped past the deadline in one step, and the
    // wait ended on the reading that set the flag, before a load could see it.
    SyntheticClock clock{kTimeout / 16};
    auto setter = [&]() noexcept {
      const std::int64_t now = clock();
      if (now - clock.first >= kTimeout / 2) word.store(1, std::memory_order_relaxed);
      return now;
    };
    auto is_set = [](W v) { return v == 1; };
    const W v = acquire ? haltpoll::cond_load_acquire_timeout(word, is_set, setter, kTimeout)
                        : haltpoll::cond_load_relaxed_timeout(word, is_set, setter, kTimeout);
    CHECK(v == 1);
  }
}

TEMPLATE_TEST_CASE("barrier: a real-clock timeout waits at least the timeout", "[barrier]", BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  std::atomic<W> word{5};
  for (std::int64_t timeout : {std::int64_t{100'000}, std::int64_t{2'000'000}}) {
    CAPTURE(timeout);
    // Measured with the clock the barrier was given, so calibration error cannot fake a shortfall.
    const std::int64_t t0 = haltpoll::monotonic_ns();
    CHECK(haltpoll::cond_load_relaxed_timeout(word, never<W>(), haltpoll::MonotonicClock{}, timeout) == 5);
    CHECK(haltpoll::monotonic_ns() - t0 >= timeout);
    const std::int64_t t1 = haltpoll::monotonic_ns();
    CHECK(haltpoll::cond_load_acquire_timeout(word, never<W>(), haltpoll::MonotonicClock{}, timeout) == 5);
    CHECK(haltpoll::monotonic_ns() - t1 >= timeout);
    // A plain function is a clock too.
    const std::int64_t t3 = haltpoll::monotonic_ns();
    CHECK(haltpoll::cond_load_relaxed_timeout(word, never<W>(), haltpoll::monotonic_ns, timeout) == 5);
    CHECK(haltpoll::monotonic_ns() - t3 >= timeout);
    // Any callable is a clock: steady_clock measured by steady_clock.
    auto steady = [] {
      return static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now().time_since_epoch())
                                           .count());
    };
    const std::int64_t t2 = steady();
    CHECK(haltpoll::cond_load_acquire_timeout(word, never<W>(), steady, timeout) == 5);
    CHECK(steady() - t2 >= timeout);
  }
}

TEMPLATE_TEST_CASE("barrier: a failing clock ends the wait at once", "[barrier]", BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  std::atomic<W> word{9};
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, std::numeric_limits<std::int64_t>::min()}) {
    CAPTURE(bad);
    int calls = 0;
    auto failing = [&] {
      ++calls;
      return bad;
    };
    CHECK(haltpoll::cond_load_relaxed_timeout(word, never<W>(), failing, kS64Max) == 9);
    CHECK(calls == 1);
    // Works for a while, then fails: the wait ends at the first failure, whatever the timeout.
    int later_calls = 0;
    auto fails_third = [&] {
      ++later_calls;
      return later_calls < 3 ? std::int64_t{later_calls} * 1000 : bad;
    };
    CHECK(haltpoll::cond_load_acquire_timeout(word, never<W>(), fails_third, kS64Max) == 9);
    CHECK(later_calls == 3);
  }
}

TEMPLATE_TEST_CASE("barrier: a store from another thread ends the wait", "[barrier]", BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  std::atomic<W> word{0};
  // 64-bit words get a value that only fits in 64 bits, so a truncating load would never match.
  const W target = sizeof(W) == 8 ? static_cast<W>(0x1234567800000001ULL) : W{42};
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    word.store(target, std::memory_order_release);
  });
  const W v = haltpoll::cond_load_acquire_timeout(
      word, [&](W x) { return x == target; }, haltpoll::MonotonicClock{}, std::int64_t{10'000'000'000});
  waker.join();
  CHECK(v == target);
}

TEMPLATE_TEST_CASE("barrier: the acquire variant orders the payload after the flag", "[barrier]", BARRIER_CASES) {
  BackendScope scope(TestType::backend);
  if (!scope.ok()) return;
  using W = typename TestType::Word;
  // Plain (non-atomic) payload: without acquire on the reader's side ThreadSanitizer reports a race,
  // and a weakly ordered CPU could show a stale payload.
  constexpr int kRounds = 300;
  std::array<std::uint64_t, 4> payload{};
  std::atomic<W> flag{0};
  std::atomic<W> ack{0};
  std::thread writer([&] {
    for (int i = 1; i <= kRounds; ++i) {
      for (std::uint64_t& p : payload) p = static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ULL;
      flag.store(static_cast<W>(i), std::memory_order_release);
      haltpoll::cond_load_acquire_timeout(
          ack, [&](W a) { return a == static_cast<W>(i); }, haltpoll::MonotonicClock{}, kS64Max);
    }
  });
  int bad = 0;
  for (int i = 1; i <= kRounds; ++i) {
    const W v = haltpoll::cond_load_acquire_timeout(
        flag, [&](W f) { return f == static_cast<W>(i); }, haltpoll::MonotonicClock{}, kS64Max);
    if (v != static_cast<W>(i)) ++bad;
    for (std::uint64_t p : payload) bad += p == static_cast<std::uint64_t>(i) * 0x9E3779B97F4A7C15ULL ? 0 : 1;
    ack.store(static_cast<W>(i), std::memory_order_release);
  }
  writer.join();
  CHECK(bad == 0);
}

TEST_CASE("barrier: the start-up choice is available and forcing works", "[barrier]") {
  const auto backends = haltpoll::available_backends();
  REQUIRE_FALSE(backends.empty());
  CHECK(backends.front() == haltpoll::default_backend());
  CHECK(haltpoll::active_backend() == haltpoll::default_backend());
  CHECK(std::find(backends.begin(), backends.end(), BarrierBackend::spin) != backends.end());
  CHECK(std::find(backends.begin(), backends.end(), BarrierBackend::generic_yield) != backends.end());
  for (BarrierBackend b : backends) {
    CHECK(haltpoll::force_backend(b));
    CHECK(haltpoll::active_backend() == b);
  }
#if defined(__x86_64__)
  CHECK(std::find(backends.begin(), backends.end(), BarrierBackend::x86_pause) != backends.end());
  CHECK_FALSE(haltpoll::force_backend(BarrierBackend::arm64_wfe));
#elif defined(__aarch64__)
  CHECK_FALSE(haltpoll::force_backend(BarrierBackend::x86_pause));
#endif
  CHECK(haltpoll::force_backend(haltpoll::default_backend()));
  CHECK(haltpoll::relaxes_per_us() >= 1);
  std::string names;
  for (BarrierBackend b : backends) names += std::string(haltpoll::to_string(b)) + " ";
  WARN("barrier backends here: " << names << "(default " << haltpoll::to_string(haltpoll::default_backend())
                                 << "), clock " << haltpoll::clock_source_name() << ", relaxes/us "
                                 << haltpoll::relaxes_per_us());
}

TEST_CASE("barrier: the event-stream period is the kernel's for every counter frequency", "[barrier]") {
  using haltpoll::detail::event_stream_period_ns;
  // Worked through arch_timer_configure_evtstream() by hand: divider = hz / 10 kHz / 2 rounded
  // to the nearest power of two 2^lsb, an event every 2^(lsb+1) ticks.
  CHECK(event_stream_period_ns(1'000'000'000) == 131'072);  // 50000 -> 2^16: 2^17 ns
  CHECK(event_stream_period_ns(19'200'000) == 106'667);     // 960 -> 2^10: 2048 ticks
  CHECK(event_stream_period_ns(24'000'000) == 85'334);      // 1200 -> 2^10: 2048 ticks
  CHECK(event_stream_period_ns(62'500'000) == 131'072);     // 3125 -> 2^12 (qemu): 8192 ticks
  CHECK(event_stream_period_ns(100'000'000) == 81'920);     // 5000 -> 2^12: 8192 ticks
  CHECK(event_stream_period_ns(0) == std::numeric_limits<std::int64_t>::max());
  // Nearest power of two: never more than 4/3 of the nominal 100 us, never less than 2/3. The
  // old fixed 100 us assumption let a WFE started with 100 us left return up to 33 us late.
  for (std::uint64_t hz = 1'000'000; hz <= 4'000'000'000; hz += 7'777'777) {
    CAPTURE(hz);
    const std::int64_t p = event_stream_period_ns(hz);
    CHECK(p >= 66'666);
    CHECK(p <= 133'334);
  }
#if defined(__aarch64__)
  if (haltpoll::detail::counter_ticks_per_ns_q32() != 0) {
    std::uint64_t hz;
    asm volatile("mrs %0, cntfrq_el0" : "=r"(hz));
    CHECK(haltpoll::detail::barrier_tuning.event_stream_period_ns.load() == event_stream_period_ns(hz));
  }
#endif
}

TEST_CASE("barrier: the timed waits' counter deadline never lies past the budget or 100 us", "[barrier]") {
  // The arithmetic of the UMWAIT and WFET paths (deadline = now + ticks_for(budget)), which no
  // machine here can execute (no WAITPKG; qemu 7.2 has no FEAT_WFxT): a model of the path. For a
  // table of counter rates, the ticks waited, converted back to ns at that rate, must not exceed
  // min(budget, kMaxTimedWaitNs) and must fall short of it by less than two ticks.
  using haltpoll::detail::kMaxTimedWaitNs;
  using haltpoll::detail::ticks_for;
  for (const std::uint64_t hz : {19'200'000ULL, 24'000'000ULL, 62'500'000ULL, 1'000'000'000ULL, 2'900'000'000ULL}) {
    const auto q32 = static_cast<std::uint64_t>(static_cast<double>(hz) * 4294967296.0 / 1e9);
    for (const std::int64_t budget : {std::int64_t{0}, std::int64_t{1}, std::int64_t{999}, std::int64_t{50'000},
                                      std::int64_t{100'000}, std::int64_t{100'001}, std::int64_t{1'000'000'000}}) {
      CAPTURE(hz, budget);
      const std::uint64_t ticks = ticks_for(budget, q32);
      const double waited_ns = static_cast<double>(ticks) * 1e9 / static_cast<double>(hz);
      const double cap = static_cast<double>(std::min(budget, kMaxTimedWaitNs));
      CHECK(waited_ns <= cap + 1e-6);
      CHECK(waited_ns > cap - 2e9 / static_cast<double>(hz) - 1e-6);
    }
  }
}

TEST_CASE("barrier: a counter frequency that disagrees with CLOCK_MONOTONIC is rejected", "[barrier][clock]") {
  // The check the arm64 clock applies to CNTFRQ_EL0, run on this machine's own counter.
#if defined(__x86_64__)
  const std::uint64_t q32 = haltpoll::detail::counter_ticks_per_ns_q32();
  if (q32 == 0) {
    WARN("no calibrated TSC here: case skipped");
    return;
  }
  const auto hz = static_cast<std::uint64_t>(static_cast<double>(q32) * 1e9 / 4294967296.0);
  std::uint64_t (*read)() = [] { return haltpoll::arch::native::read_counter(); };
#elif defined(__aarch64__)
  std::uint64_t hz;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(hz));
  std::uint64_t (*read)() = [] { return haltpoll::arch::native::read_counter(); };
  CHECK(haltpoll::clock_source() == haltpoll::ClockSource::cntvct);  // the real CNTFRQ passes
#else
  const std::uint64_t hz = 0;
  std::uint64_t (*read)() = nullptr;
  WARN("no CPU counter on this architecture: case skipped");
  return;
#endif
  CAPTURE(hz);
  CHECK(haltpoll::detail::counter_frequency_agrees(hz, read));
  CHECK_FALSE(haltpoll::detail::counter_frequency_agrees(hz + hz / 4, read));  // 19.2 MHz stated as 24
  CHECK_FALSE(haltpoll::detail::counter_frequency_agrees(hz - hz / 5, read));
  CHECK_FALSE(haltpoll::detail::counter_frequency_agrees(hz * 2, read));
  CHECK_FALSE(haltpoll::detail::counter_frequency_agrees(0, read));
}

TEST_CASE("barrier: UMWAIT's TSC deadlines need the kernel to keep time with the TSC", "[barrier][clock]") {
  // A fake sysfs root; the code under test reads it as it reads /sys.
  const std::string root = "/tmp/haltpoll_clocksource_test_" + std::to_string(getpid());
  const std::string dir = root + "/devices/system/clocksource/clocksource0";
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  auto write = [&](const char* text) {
    std::FILE* f = std::fopen((dir + "/current_clocksource").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(text, f);
    std::fclose(f);
  };
  CHECK_FALSE(haltpoll::detail::kernel_clocksource_is_tsc(root.c_str()));  // no file: no verdict
  write("tsc\n");
  CHECK(haltpoll::detail::kernel_clocksource_is_tsc(root.c_str()));
  write("kvm-clock\n");  // what the kernel falls back to on a KVM guest once it marks the TSC unstable
  CHECK_FALSE(haltpoll::detail::kernel_clocksource_is_tsc(root.c_str()));
  write("hpet\n");
  CHECK_FALSE(haltpoll::detail::kernel_clocksource_is_tsc(root.c_str()));
  std::system(("rm -rf " + root).c_str());
  const auto backends = haltpoll::available_backends();
  const bool waitpkg = std::find(backends.begin(), backends.end(), BarrierBackend::x86_waitpkg) != backends.end();
  if (waitpkg) {
    const char* env = std::getenv("HALTPOLL_CLOCK");
    CHECK((haltpoll::detail::kernel_clocksource_is_tsc() || (env != nullptr && std::string(env) == "tsc")));
  }
}

TEST_CASE("barrier: monotonic_ns is positive, monotonic and tracks CLOCK_MONOTONIC's rate", "[barrier][clock]") {
  const std::string src = haltpoll::clock_source_name();
  CHECK((src == "tsc" || src == "cntvct" || src == "clock_gettime"));
  std::int64_t prev = haltpoll::monotonic_ns();
  CHECK(prev > 0);
  for (int i = 0; i < 10000; ++i) {
    const std::int64_t now = haltpoll::monotonic_ns();
    REQUIRE(now >= prev);
    prev = now;
  }
  // A lower bound only: 20 ms of sleep must read as at least ~20 ms (a 1% rate error allowed).
  const std::int64_t t0 = haltpoll::monotonic_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(haltpoll::monotonic_ns() - t0 >= 19'800'000);
}

#if defined(__aarch64__)
// The LDXR+WFE sequence itself, also where the event stream is missing (qemu-user executes WFE as a
// yield): safe everywhere because the waker keeps storing until the waiter has seen the value.
TEST_CASE("barrier: arm64 LDXR+WFE returns on a store", "[barrier][arm64]") {
  if (!haltpoll::force_backend(BarrierBackend::arm64_wfe)) {
    haltpoll::detail::force_backend_unchecked(BarrierBackend::arm64_wfe);
  }
  std::atomic<std::uint32_t> word{0};
  std::atomic<bool> seen{false};
  std::thread waker([&] {
    std::uint32_t v = 1;
    while (!seen.load(std::memory_order_acquire)) {
      word.store(v++, std::memory_order_release);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  });
  const std::uint32_t v = haltpoll::cond_load_acquire_timeout(
      word, [](std::uint32_t x) { return x >= 3; }, haltpoll::MonotonicClock{}, std::int64_t{10'000'000'000});
  seen.store(true, std::memory_order_release);
  waker.join();
  haltpoll::force_backend(haltpoll::default_backend());
  CHECK(v >= 3);
}

TEST_CASE("barrier: with the kernel's event stream, a WFE wait ends within the stated bound", "[barrier][arm64]") {
  // The library derives the event stream's period from CNTFRQ and lets WFE wait only while at least
  // one period remains; the kernel wakes every WFE once per period, and a spin finishes the wait. Had
  // the library derived a period shorter than the kernel's (a power of two off, say), a wait would
  // run past its deadline by a third of a period or more. On an arm64 kernel (tests/arm64vm runs
  // this in a guest) WFE waits are compared with spin waits of the same length, interleaved in the
  // same run: past the deadline, WFE's median may exceed spin's by no more than an eighth of a
  // period. The absolute bound (overshoot_bound_ns plus the clock reads) is printed beside it: under
  // emulation the relax calibration it rests on is not a hardware figure. Under qemu-user the kernel
  // has no event stream and the library must not choose WFE.
  std::uint64_t hz = 0;
  asm volatile("mrs %0, cntfrq_el0" : "=r"(hz));
  const bool evtstrm = (getauxval(AT_HWCAP) & HWCAP_EVTSTRM) != 0;
  const std::int64_t period = haltpoll::detail::barrier_tuning.event_stream_period_ns.load();
  WARN("CNTFRQ " << hz << " Hz, HWCAP_EVTSTRM " << (evtstrm ? "yes" : "no") << ", derived event-stream period "
                 << period << " ns, backend " << haltpoll::to_string(haltpoll::default_backend()));
  const auto backends = haltpoll::available_backends();
  const bool wfe = std::find(backends.begin(), backends.end(), BarrierBackend::arm64_wfe) != backends.end();
  CHECK(wfe == (evtstrm && haltpoll::detail::counter_ticks_per_ns_q32() != 0));
  if (!wfe) {
    CHECK(haltpoll::default_backend() != BarrierBackend::arm64_wfe);
    return;
  }
  REQUIRE(period == haltpoll::detail::event_stream_period_ns(hz));
  // Three periods: WFE waits through the first two, the spin finishes the third.
  const std::int64_t timeout = 3 * period;
  std::atomic<std::uint32_t> word{0};
  // return - deadline, for waits the thread kept its CPU through; [0] spin, [1] WFE.
  std::array<std::vector<std::int64_t>, 2> past;
  for (int i = 0; i < 400; ++i) {
    const int k = i % 2;
    REQUIRE(haltpoll::force_backend(k == 0 ? BarrierBackend::spin : BarrierBackend::arm64_wfe));
    rusage ru0{};
    getrusage(RUSAGE_THREAD, &ru0);
    std::int64_t deadline = 0;
    auto clock = [&]() noexcept {
      const std::int64_t now = haltpoll::monotonic_ns();
      if (deadline == 0) deadline = now + timeout;
      return now;
    };
    haltpoll::cond_load_relaxed_timeout(word, [](std::uint32_t v) { return v != 0; }, clock, timeout);
    const std::int64_t end = haltpoll::monotonic_ns();
    rusage ru1{};
    getrusage(RUSAGE_THREAD, &ru1);
    if (ru1.ru_nivcsw == ru0.ru_nivcsw) past[static_cast<std::size_t>(k)].push_back(end - deadline);
  }
  haltpoll::force_backend(haltpoll::default_backend());
  REQUIRE(past[0].size() >= 25);
  REQUIRE(past[1].size() >= 25);
  for (auto& v : past) std::sort(v.begin(), v.end());
  const std::int64_t spin_median = past[0][past[0].size() / 2];
  const std::int64_t wfe_median = past[1][past[1].size() / 2];
  WARN("WFE waits of " << timeout << " ns: past the deadline median " << wfe_median << " ns (spin " << spin_median
                       << " ns), max " << past[1].back() << " ns over " << past[1].size()
                       << " quiet waits; stated bound " << haltpoll::overshoot_bound_ns(BarrierBackend::arm64_wfe)
                       << " ns plus the clock reads");
  CHECK(past[1].front() >= 0);  // never returns early
  CHECK(wfe_median <= spin_median + period / 8);
}
#endif

TEST_CASE("barrier: a monotonic_ns reading taken after seeing another thread's store is not earlier", "[barrier][clock]") {
  // B reads a time that A published, then reads the clock itself: causality must show in the
  // readings (what the pool's submit→start latencies rely on). An unfenced RDTSC fails this
  // thousands of times in most runs; CTest also runs it with HALTPOLL_CLOCK=tsc, for the TSC path.
  const std::vector<int> mask = haltpoll::affinity_cpus();
  const int cpus[2] = {mask.empty() ? -1 : mask[0], mask.size() < 2 ? -1 : mask[1]};
  auto pin = [](int cpu) {
    if (cpu >= 0) haltpoll::pin_this_thread(cpu);
  };
  std::atomic<std::int64_t> published{0};
  std::atomic<int> backwards{0};
  std::atomic<bool> stop{false};
  std::thread a([&] {
    pin(cpus[0]);
    for (int i = 0; i < 300000; ++i) published.store(haltpoll::monotonic_ns(), std::memory_order_release);
    stop.store(true);
  });
  std::thread b([&] {
    pin(cpus[1]);
    while (!stop.load()) {
      const std::int64_t seen = published.load(std::memory_order_acquire);
      const std::int64_t mine = haltpoll::monotonic_ns();
      if (seen != 0 && mine < seen) backwards.fetch_add(1);
    }
  });
  a.join();
  b.join();
  CHECK(backwards.load() == 0);
}
