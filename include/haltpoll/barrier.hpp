// Timeout barrier: wait on a memory word until a condition holds or a deadline passes.
//
// cond_load_{relaxed,acquire}_timeout(word, cond, clock, timeout_ns) are the user-space twins of
// the kernel's smp_cond_load_{relaxed,acquire}_timeout(). They load `word` until `cond(value)` is
// true and return the last value loaded. Between loads they wait with the CPU's cheapest wait
// (the backend: PAUSE, UMWAIT, WFE, WFET, a plain spin or sched_yield) and only now and then call
// `clock()` (std::int64_t ns; <= 0 means the clock failed): a calibrated batch of relaxes on the
// spinning backends (at most 2.5 us; one clock read per batch), every wake-up on the ones whose
// instruction itself waits. The first clock reading fixes the deadline at reading + timeout_ns; the
// call gives up once the remaining time is <= 0 or the clock fails, and then re-loads the word
// once more (the caller must check the returned value with `cond` itself). timeout_ns == 0 makes
// one short batch and one clock read; a negative timeout_ns (what (int64_t)UINT64_MAX,
// (int64_t)-1 or S64_MAX+1 become) makes exactly one load and no clock call.
//
// How late the return can come (overshoot: from the deadline, i.e. the first clock reading plus
// timeout_ns, until the call returns; not counting preemption or a host that does not run the
// vCPU; measured from the call, add the first batch, which comes before that reading). The call
// stops at the first clock reading at or past the deadline, so the overshoot is the last wait plus
// one clock read:
//   spin           up to kFixedPollCount (200) relaxes: ~200 / relaxes_per_us() us;
//   x86_pause      the last batch is cut to the remaining time: two relaxes (rounding) plus the
//                  relax calibration's error over that batch (allowed: 1/8 of its <= 3.1 us);
//   x86_waitpkg    the UMWAIT deadline is the remaining time: its wake-up latency (C0.1, < 1 us);
//   arm64_wfet     the WFET deadline is the remaining time: its wake-up latency;
//   arm64_wfe      WFE is used only while at least one event-stream period remains (the period the
//                  kernel derives from CNTFRQ, 66.7-133.3 us; event_stream_period_ns()), so it
//                  returns before the deadline; the rest is a spin: as `spin`;
//   generic_yield  one sched_yield(): a time slice of whatever else runs on this CPU.
// bench_barrier measures each backend's overshoot against these bounds.
//
// Memory ordering: the relaxed variant orders nothing; every load is memory_order_relaxed. In the
// acquire variant every load whose value can be returned is memory_order_acquire, so the caller
// sees every write that happened-before the release store that produced the returned value (the
// kernel gets the same from a control dependency plus an acquire fence; acquire loads cost nothing
// extra on x86 and let ThreadSanitizer see the edge). The clock, the condition and the wait
// instructions are not ordered with the loads beyond that.
//
// Cost per call: one relaxed load of the backend choice; no locks, no allocation, no exceptions.
#pragma once

#include "haltpoll/arch/select.hpp"

#include <atomic>
#include <bit>
#include <cstdint>
#include <vector>

namespace haltpoll {

enum class BarrierBackend : std::uint8_t {
  spin,           // cpu_relax() (PAUSE / YIELD / compiler barrier), a fixed 200 per clock read: the kernel default
  x86_pause,      // PAUSE, count per clock read calibrated from the PAUSE cost, sized to the remaining time
  x86_waitpkg,    // UMONITOR + UMWAIT (C0.1) with a TSC deadline
  arm64_wfe,      // LDXR + WFE, woken by the store or the event stream (66.7-133.3 us); spins below that
  arm64_wfet,     // LDXR + WFET with a CNTVCT deadline
  generic_yield,  // sched_yield() between loads
};

// The backend in use (the start-up choice, or the last successful force_backend()).
BarrierBackend active_backend() noexcept;
// What start-up chose from CPUID / getauxval: x86_waitpkg > x86_pause; arm64_wfet > arm64_wfe > spin;
// HALTPOLL_BARRIER_BACKEND=<to_string name> in the environment overrides it when that backend works here.
BarrierBackend default_backend() noexcept;
const char* to_string(BarrierBackend backend) noexcept;
// For tests and benchmarks: switches every later call in the process; false if not available here.
bool force_backend(BarrierBackend backend) noexcept;
// Backends usable on this machine, the default first.
std::vector<BarrierBackend> available_backends();
// Calibrated cost model of the spinning backends: cpu_relax()+load iterations per microsecond.
std::uint32_t relaxes_per_us() noexcept;
// The overshoot bound of `backend` stated in the header comment, in ns, beyond the one clock read
// that ends every wait (the clock is the caller's): from the calibrated relax cost for the spinning
// ones, a 1 us allowance for the wake-up of UMWAIT and WFET; -1 for generic_yield, which has none.
// Measured from the deadline (the first clock reading + timeout), not from the call.
std::int64_t overshoot_bound_ns(BarrierBackend backend) noexcept;

namespace detail {

// Read-mostly, written at start-up and by force_backend(); one cache line so a call touches one.
struct alignas(64) BarrierTuning {
  std::atomic<BarrierBackend> backend{BarrierBackend::spin};
  std::atomic<std::uint32_t> relaxes_per_us{50};  // safe until calibrated: 20 ns per relax
  std::atomic<std::uint64_t> counter_ticks_per_ns_q32{0};
  // Longest event-stream period (arm64_wfe): WFE only when this much time remains.
  std::atomic<std::int64_t> event_stream_period_ns{INT64_MAX};
};
extern BarrierTuning barrier_tuning;

// Test hook: like force_backend() but without the availability check. Only for a backend whose
// instructions are known to execute here (e.g. WFE under an emulator that lacks the event stream,
// with a waker that keeps storing).
void force_backend_unchecked(BarrierBackend backend) noexcept;

// The kernel's SMP_TIMEOUT_POLL_COUNT, used by `spin` and the arm64 WFE backend's short waits.
inline constexpr std::uint32_t kFixedPollCount = 200;
// What the wait is given before the first clock read (the deadline is not known yet): the
// kernel's 1 us, or the timeout when shorter, so a short timeout is not overshot by this batch.
inline constexpr std::int64_t kFirstBatchNs = 1'000;
// Longest spin between clock reads: 2.5 us, so that even a 10 us wait, which also pays the first
// read and the last, stays under one read per 2 us (~1% of the CPU with a 30 ns clock). The final
// batch is cut to the remaining time, so a long batch does not lengthen the overshoot.
inline constexpr std::int64_t kSpinBatchNs = 2'500;
// Longest hardware wait with a deadline (UMWAIT, WFET) before re-reading the clock: bounds the
// damage of a caller clock that is not in real nanoseconds; the OS caps UMWAIT near this anyway.
inline constexpr std::int64_t kMaxTimedWaitNs = 100'000;
// The arm64 timer event stream's period for a counter of `hz`, at its longest, as the kernel's
// arch_timer_configure_evtstream() chooses it: the divider rate / 10 kHz / 2 rounded to the
// nearest power of two 2^lsb, an event each time counter bit lsb turns 1, i.e. every 2^(lsb+1)
// ticks (66.7-133.3 us: 131.1 us at 1 GHz, 106.7 us at 19.2 MHz). Without FEAT_ECV the kernel caps
// lsb at 15, which only shortens the period; the longest is what bounds a WFE. INT64_MAX for hz 0.
constexpr std::int64_t event_stream_period_ns(std::uint64_t hz) noexcept {
  if (hz == 0) return INT64_MAX;
  const std::uint64_t div = hz / 10'000 / 2;
  int lsb = div == 0 ? 0 : 63 - std::countl_zero(div);
  if (lsb > 0 && ((div >> (lsb - 1)) & 1) != 0) ++lsb;
  __extension__ using u128 = unsigned __int128;
  const u128 ticks = u128{1} << (lsb + 1);
  return static_cast<std::int64_t>((ticks * 1'000'000'000 + hz - 1) / hz);  // rounded up: a bound
}

template <std::memory_order Order, class T, class Cond>
inline bool relax_batch(const std::atomic<T>& word, T& v, Cond& cond, std::uint32_t n) noexcept {
  do {
    arch::native::cpu_relax();
    v = word.load(Order);
    if (cond(v)) return true;
  } while (--n != 0);
  return false;
}

// A batch that ends a hair before the deadline costs a whole extra clock read to learn that a few
// ns remain, so: the last stretch is taken in one batch if it is under 1.25 batches, and the count
// is rounded up plus one relax.
inline std::uint32_t relaxes_for(std::int64_t budget_ns, std::uint32_t per_us) noexcept {
  if (budget_ns >= kSpinBatchNs + kSpinBatchNs / 4) return static_cast<std::uint32_t>(kSpinBatchNs * per_us / 1000);
  return static_cast<std::uint32_t>((static_cast<std::uint64_t>(budget_ns) * per_us + 999) / 1000) + 1;
}

[[maybe_unused]] inline std::uint64_t ticks_for(std::int64_t budget_ns, std::uint64_t ticks_per_ns_q32) noexcept {
  const std::int64_t ns = budget_ns < kMaxTimedWaitNs ? budget_ns : kMaxTimedWaitNs;
  return (static_cast<std::uint64_t>(ns) * ticks_per_ns_q32) >> 32;  // ns < 2^17, ticks/ns < 2^5
}

// One wait of the selected backend for at most about `budget_ns`; true when cond(v) held.
template <std::memory_order Order, class T, class Cond>
inline bool wait_batch(BarrierBackend backend, const std::atomic<T>& word, T& v, Cond& cond,
                       std::int64_t budget_ns) noexcept {
  switch (backend) {
    case BarrierBackend::spin:
      return relax_batch<Order>(word, v, cond, kFixedPollCount);
    case BarrierBackend::x86_pause:
      return relax_batch<Order>(word, v, cond,
                                relaxes_for(budget_ns, barrier_tuning.relaxes_per_us.load(std::memory_order_relaxed)));
    case BarrierBackend::x86_waitpkg:
      if constexpr (arch::native::has_monitor_wait) {
        auto still_waiting = [&]() noexcept { return !cond(word.load(std::memory_order_relaxed)); };
        const std::uint64_t ticks =
            ticks_for(budget_ns, barrier_tuning.counter_ticks_per_ns_q32.load(std::memory_order_relaxed));
        arch::native::monitor_wait(word, still_waiting, arch::native::read_counter() + ticks);
        v = word.load(Order);
        return static_cast<bool>(cond(v));
      }
      break;
    case BarrierBackend::arm64_wfe:
      if constexpr (arch::native::has_cmpwait<T>) {
        if (budget_ns >= barrier_tuning.event_stream_period_ns.load(std::memory_order_relaxed)) {
          arch::native::cmpwait(word, v);
          v = word.load(Order);
          return static_cast<bool>(cond(v));
        }
      }
      break;
    case BarrierBackend::arm64_wfet:
      if constexpr (arch::native::has_cmpwait<T>) {
        const std::uint64_t ticks =
            ticks_for(budget_ns, barrier_tuning.counter_ticks_per_ns_q32.load(std::memory_order_relaxed));
        arch::native::cmpwait_until(word, v, arch::native::read_counter() + ticks);
        v = word.load(Order);
        return static_cast<bool>(cond(v));
      }
      break;
    case BarrierBackend::generic_yield:
      arch::native::yield_cpu();
      v = word.load(Order);
      return static_cast<bool>(cond(v));
  }
  return relax_batch<Order>(word, v, cond, kFixedPollCount);
}

// Everything after the first load: kept out of line so the satisfied-at-once path inlines small.
template <std::memory_order Order, class T, class Cond, class Clock>
[[gnu::noinline]] T cond_load_timeout_slow(const std::atomic<T>& word, T v, Cond& cond, Clock& clock,
                                           std::int64_t timeout_ns) noexcept {
  const BarrierBackend backend = barrier_tuning.backend.load(std::memory_order_relaxed);
  std::int64_t budget = timeout_ns < kFirstBatchNs ? timeout_ns : kFirstBatchNs;
  std::uint64_t end = 0;
  bool have_end = false;
  for (;;) {
    if (wait_batch<Order>(backend, word, v, cond, budget)) return v;
    const auto now = static_cast<std::int64_t>(clock());
    if (now <= 0) return word.load(Order);
    // Unsigned so that a deadline past S64_MAX wraps instead of overflowing; the clock's own wrap
    // past S64_MAX then reads as a failed clock, as in the kernel.
    if (!have_end) {
      end = static_cast<std::uint64_t>(now) + static_cast<std::uint64_t>(timeout_ns);
      have_end = true;
    }
    const auto remaining = static_cast<std::int64_t>(end - static_cast<std::uint64_t>(now));
    if (remaining <= 0) return word.load(Order);
    budget = remaining;
  }
}

template <std::memory_order Order, class T, class Cond, class Clock>
inline T cond_load_timeout(const std::atomic<T>& word, Cond& cond, Clock& clock, std::int64_t timeout_ns) noexcept {
  const T v = word.load(Order);
  if (cond(v) || timeout_ns < 0) return v;
  return cond_load_timeout_slow<Order>(word, v, cond, clock, timeout_ns);
}

}  // namespace detail

template <class T, class Cond, class Clock>
inline T cond_load_relaxed_timeout(const std::atomic<T>& word, Cond&& cond, Clock&& clock,
                                   std::int64_t timeout_ns) noexcept {
  return detail::cond_load_timeout<std::memory_order_relaxed>(word, cond, clock, timeout_ns);
}

template <class T, class Cond, class Clock>
inline T cond_load_acquire_timeout(const std::atomic<T>& word, Cond&& cond, Clock&& clock,
                                   std::int64_t timeout_ns) noexcept {
  return detail::cond_load_timeout<std::memory_order_acquire>(word, cond, clock, timeout_ns);
}

}  // namespace haltpoll
