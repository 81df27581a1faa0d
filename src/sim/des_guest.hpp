// Discrete-event model of an N-vCPU KVM guest whose cpuidle driver is haltpoll.
//
// Virtual time is an integer count of ns. Every vCPU runs the kernel's idle loop: when its run
// queue is empty it asks the haltpoll governor (the library's bit-exact haltpoll::WindowGovernor,
// one per CPU) for a state, exactly as haltpoll_select() does — halt when the per-CPU limit is 0;
// after a poll that timed out, halt; otherwise poll for the limit. After every halt the governor
// adjusts the limit with the halt's residency as block_ns (haltpoll_reflect → adjust_poll_limit),
// reading the module parameters in force at that moment, so a cap change reaches a CPU only at its
// next adjustment. A governor round trip (reset_limits) zeroes every limit.
//
// cpuidle's sysfs counters are kept per CPU as the kernel keeps them: state0 POLL and state1 halt,
// `usage` and `time` incremented when an idle period ends (time in ns here; time_us() divides as
// sysfs does). Optionally every power:cpu_idle (entry with the state, exit with -1),
// power:guest_halt_poll_ns (on every grow or shrink branch, also when the value stays) and
// sched:sched_wake_idle_without_ipi (a remote wake-up of a polling CPU) is logged in time order.
//
// Costs (des_costs.hpp) are distributions; a workload (des_workload.hpp) is a set of threads, each a
// small looping program of compute, post, wait and sleep steps, placed on one vCPU. A thread that
// posts to a channel on which a thread of another vCPU waits wakes that vCPU remotely: if it polls
// the wake-up skips the IPI and costs `wake_polling`, if it halts it costs `wake_halted`, of which
// the share `halt_exit_share` passes before the halt residency ends (the rest is the guest's path
// back to the thread; a wake-up on that way back finds the polling flag set and skips the IPI).
// The waker of a halted vCPU pays `ipi_send` (its next compute step runs longer). A thread's own
// timer wakes its CPU locally (`timer_in_poll` / `timer_in_halt`): a poll ended that way is a
// "hit" in the counters but skips no IPI. Over a socket (post_socket) the reader's taking of a
// token also wakes its sender if it sleeps in a read of a socket channel (the kernel's write-space
// wake-up); the sender finds nothing, spends `spurious_wake` and sleeps again.
//
// The interface is shaped for the daemon's layers: cumulative per-CPU counters and idle-period
// histograms (a kernel signal source), set_params / set_cap_ns / reset_limits (an actuator), now()
// (a clock). Deterministic for a seed; single-threaded; no wall clock, no I/O.
#pragma once

#include "sim/des_costs.hpp"
#include "sim/des_sampler.hpp"
#include "sim/des_workload.hpp"

#include <haltpoll/governor.hpp>
#include <haltpoll/latency_histogram.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace haltpolld::des {

struct GuestConfig {
  int cpus = 2;
  Costs costs;
  haltpoll::HaltpollParams params;  // the module parameters at boot
  std::uint64_t seed = 1;
  bool log_events = false;  // keep the tracepoint log (memory grows with the run)
};

// One CPU's cpuidle sysfs counters (cumulative), plus what the tracepoints count.
struct CpuCounters {
  static constexpr int poll = 0;  // state0 "POLL"
  static constexpr int halt = 1;  // state1 "haltpoll idle"
  std::uint64_t usage[2] = {0, 0};
  std::uint64_t time_ns[2] = {0, 0};
  std::uint64_t wake_idle_without_ipi = 0;  // remote wake-ups of this CPU that skipped the IPI
  std::uint64_t ipis = 0;                   // remote wake-ups of this CPU while it halted
  std::uint64_t polls_timed_out = 0;
  std::uint64_t limit_grow = 0;    // power:guest_halt_poll_ns with grow=1
  std::uint64_t limit_shrink = 0;  // ... with grow=0
  // sysfs `time` is the residency in µs, truncated: cpuidle divides its ns sum by 1000.
  std::uint64_t time_us(int state) const noexcept { return time_ns[state] / 1000; }
};

// Idle-period histograms of one CPU, cumulative, shaped as the daemon's eBPF reader fills them:
// a poll that timed out and the halt after it are one period.
struct CpuHistograms {
  haltpoll::LatencyHistogram poll_hit;        // POLL residency of polls ended by a wake-up or a local timer
  haltpoll::LatencyHistogram poll_halt;       // whole period (poll + halt) of polls that timed out
  haltpoll::LatencyHistogram halt;            // halts without a timed-out poll before them
  haltpoll::LatencyHistogram halt_residency;  // every halt's residency (the governor's block_ns)
};

struct TraceEvent {
  enum class Kind : std::uint8_t { cpu_idle, guest_halt_poll_ns, wake_idle_without_ipi };
  Ns t = 0;
  std::uint32_t cpu = 0;
  Kind kind = Kind::cpu_idle;
  std::int32_t state = 0;  // cpu_idle: 0 POLL, 1 halt, -1 exit
  bool grow = false;       // guest_halt_poll_ns
  std::uint32_t new_ns = 0;
  std::uint32_t old_ns = 0;
};

// A workload metric (round trip, lateness, ...): completions and their latency.
struct MetricStats {
  std::string name;
  std::uint64_t count = 0;
  haltpoll::LatencyHistogram hist;
};

class Guest {
 public:
  // Throws std::invalid_argument when a thread is placed on a CPU the guest lacks or a program
  // could loop forever without advancing time.
  Guest(GuestConfig cfg, Workload load);
  ~Guest();
  Guest(const Guest&) = delete;
  Guest& operator=(const Guest&) = delete;

  // Clock: runs every event up to and including virtual time t.
  void run_until(Ns t);
  void run_for(Ns d) { run_until(now_ + d); }
  Ns now() const noexcept { return now_; }

  // Actuator. Like a write to /sys/module/haltpoll/parameters: the per-CPU limits stay until each
  // CPU's next adjustment (after its next halt).
  void set_params(const haltpoll::HaltpollParams& p);
  void set_cap_ns(std::uint32_t cap_ns);
  const haltpoll::HaltpollParams& params() const noexcept { return params_; }
  // A cpuidle governor round trip: every CPU's limit back to 0 (polls in progress run out).
  void reset_limits();
  // The eBPF programs' cost while attached: ns per tracepoint event on the path it fires on (a
  // remote wake-up of a polling CPU carries two, its idle exit and sched_wake_idle_without_ipi on
  // the waker; of a halted one, or a local wake-up, one). 0: detached.
  void set_trace_cost(Ns per_event) noexcept { trace_cost_ = per_event; }
  // Whether the idle-period histograms (histograms()) are kept: as the eBPF reader keeps them only
  // while attached, a reader that takes their deltas over its attached ticks sees the same; off
  // they cost nothing (31 KB a CPU, written on every idle period). On at construction.
  void set_histograms(bool on) noexcept { histograms_ = on; }

  // Kernel signals.
  int cpus() const noexcept { return static_cast<int>(cpus_.size()); }
  const CpuCounters& counters(int cpu) const;
  std::uint32_t poll_limit_ns(int cpu) const;
  const CpuHistograms& histograms(int cpu) const;
  const std::vector<TraceEvent>& events() const noexcept { return log_; }
  void clear_events() { log_.clear(); }

  // The workload's results.
  const MetricStats& metric(std::string_view name) const;
  const std::vector<std::unique_ptr<MetricStats>>& metrics() const noexcept { return metrics_; }
  std::uint64_t events_processed() const noexcept { return processed_; }

 private:
  struct Cpu;
  struct Thread;
  struct Op;
  // A FIFO of threads (a run queue, a channel's waiters) in a ring that grows when full.
  class Fifo {
   public:
    bool empty() const noexcept { return size_ == 0; }
    void push(Thread* t) {
      if (size_ == mask_ + 1) grow();
      buf_[(head_ + size_) & mask_] = t;
      ++size_;
    }
    Thread* pop() noexcept {
      Thread* t = buf_[head_];
      head_ = (head_ + 1) & mask_;
      --size_;
      return t;
    }
    // Takes t out wherever it stands (a socket's sender woken by write space); false if absent.
    bool remove(Thread* t) noexcept;

   private:
    void grow();
    std::unique_ptr<Thread*[]> buf_;  // mask_ + 1 long, a power of two (0 before the first push)
    std::uint32_t mask_ = std::uint32_t(-1), head_ = 0, size_ = 0;
  };
  // A CPU's pending events, one slot each; at equal times the lower slot runs first (a halt's end
  // before the resume it leads to). run: the running thread's compute step ends, or a wake-up's
  // resume (state waking). timer: the earliest timer of the CPU's threads.
  enum Slot : std::uint8_t { halt_end, run, poll_timeout, timer, housekeeping, slots };

  void mark(Cpu& c);
  void set(Cpu& c, Slot s, Ns t);
  void clear(Cpu& c, Slot s);
  void update(Cpu& c);
  void flush();
  void dispatch(Cpu& c, Slot s);
  void run_thread(Cpu& c, Thread* t);
  bool run_steps(Cpu& c, Thread& t);
  void switch_out(Cpu& c);
  void enter_idle(Cpu& c);
  void end_poll(Cpu& c, bool timed_out);
  void end_halt(Cpu& c);
  void set_timer(Thread& t, Ns at);
  void fire_timer(Cpu& c);
  void housekeeping_irq(Cpu& c);
  void post(int ch, Cpu& from, Thread& sender, bool socket);
  // What a thread with Thread::sock set does when it runs: take its token and wake the socket's
  // sender (consume), or check again after a write-space wake-up (spurious, recheck).
  enum class SocketRun : std::uint8_t { proceed, computing, blocked };
  SocketRun socket_run(Cpu& c, Thread& t);
  void write_space(Thread& sender, Cpu& from);
  // A wake-up of t by a thread running on `from` (null: a local timer).
  void wake(Thread& t, Cpu* from);
  void resume(Cpu& c, Thread& t, Ns at);
  void record_pending(Thread& t);
  void record(MetricStats& m, std::uint64_t ns);
  void log(Ns t, const Cpu& c, TraceEvent::Kind k, std::int32_t state, bool grow = false, std::uint32_t n = 0,
           std::uint32_t o = 0);
  void append_log(const TraceEvent& e);
  Ns steal(Ns d);
  // The prepared sampler of a Dist of cfg_.costs (what Costs::halted_wake and friends select).
  const Sampler& sampler_of(const Dist& d);
  const Sampler& prepare(const Dist& d);

  GuestConfig cfg_;
  Workload load_;
  haltpoll::HaltpollParams params_;
  Rng rng_;
  Ns now_ = 0;
  std::uint64_t processed_ = 0;
  SamplerTables tables_;
  Sampler wake_polling_, wake_delay_, timer_in_poll_, housekeeping_gap_, steal_, spurious_wake_, ipi_send_;
  bool ipi_send_cost_ = false;
  Ns trace_cost_ = 0;
  bool histograms_ = true;
  bool steals_ = false;  // steal_probability > 0
  struct CostSampler {
    const Dist* dist;
    Dist copy;
    Sampler s;
  };
  std::vector<CostSampler> cost_samplers_;
  // Every CPU's next event, (time << 3 | slot), in a tournament tree: node 1 is the guest's next
  // event, nodes [leaves_, 2·leaves_) the CPUs'; a CPU's change costs log2(cpus) comparisons.
  std::vector<Ns> tree_key_;
  std::vector<Cpu*> tree_cpu_;
  std::size_t leaves_ = 1;
  std::unique_ptr<Cpu*[]> dirty_;  // CPUs whose keys changed since the tree saw them, ndirty_ of them
  std::size_t ndirty_ = 0;
  std::vector<std::unique_ptr<Cpu>> cpus_;
  std::vector<Thread> threads_;         // never reallocated: CPUs, queues and steps point into it
  std::vector<Op> ops_;                 // every thread's program, one after the other; likewise
  std::vector<Sampler> step_samplers_;  // one per distinct Dist of the compute steps; likewise
  std::vector<std::int64_t> tokens_;    // per channel
  std::vector<Fifo> waiters_;           // per channel
  std::vector<std::uint8_t> socket_;    // per channel: its tokens come over a socket (post_socket)
  std::vector<Fifo> sent_;              // per socket channel: the senders of its tokens, in order
  std::vector<std::unique_ptr<MetricStats>> metrics_;
  std::vector<TraceEvent> log_;
};

}  // namespace haltpolld::des
