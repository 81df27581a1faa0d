// The discrete-event guest (des_guest.hpp): events, the idle loop of each vCPU, the threads.
//
// Events live in per-CPU slots (Guest::Slot), at most one of each kind per CPU, so that a poll
// ended by a wake-up just clears its timeout and a CPU's next event is the least of five keys; a
// tournament tree over the CPUs gives the guest's next one. Costs are drawn through prepared
// samplers (des_sampler.hpp). The event loop's path (run_until down to the draws) is inlined into
// one function; what runs once per halt, timer or interrupt is not.
#include "sim/des_guest.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace haltpolld::des {

namespace {
haltpoll::PolicyParams policy_params(const haltpoll::HaltpollParams& p) {
  haltpoll::PolicyParams pp;
  pp.haltpoll = p;
  return pp;
}

// An event's key: its time above 3 bits of slot, so that one comparison orders by time, then slot.
constexpr int kSlotBits = 3;
constexpr Ns kNever = std::numeric_limits<Ns>::max();
constexpr Ns kLatest = (kNever >> kSlotBits) - 1;  // later events are kept at this time
constexpr Ns key_of(Ns t, int slot) noexcept { return (std::min(t, kLatest) << kSlotBits) | slot; }

// Guest::Thread::sock: what a thread reading a socket channel is doing, in the top bits, and its
// channel (blocked, spurious, recheck) or the thread whose token it took (consume) below.
constexpr std::int32_t kSockBlocked = 1 << 28;   // in the channel's waiters
constexpr std::int32_t kSockConsume = 2 << 28;   // woken with a token: on its run, wake the token's sender
constexpr std::int32_t kSockSpurious = 3 << 28;  // woken by write space: on its run, check the channel
constexpr std::int32_t kSockRecheck = 4 << 28;   // found nothing: after its way back, check and sleep
constexpr std::int32_t kSockKind = 7 << 28;
constexpr std::int32_t kSockArg = (1 << 28) - 1;

bool same(const Dist& a, const Dist& b) noexcept {
  return a.median_ns == b.median_ns && a.sigma == b.sigma && a.tail_p == b.tail_p && a.tail_mean_ns == b.tail_mean_ns;
}
}  // namespace

// A step of a thread's program with its Dist prepared: 32 bytes, two to a cache line.
struct Guest::Op {
  Step::Op op;
  // Resumed at this step, the thread reaches a compute step through begin and end steps only,
  // with this many ends on the way; -1: it posts, waits or sleeps first.
  std::int8_t ends_to_compute;
  int arg;
  const Op* next;  // the step after this one (the program loops)
  union {
    const Sampler* d;  // compute: its duration, shared by every step of the same Dist
    Ns period;         // sleep_period, sleep_exp
  };
  Ns slack;
};

// The fields in the order the event loop touches them: the first line on every event of the CPU,
// the second on every idle period (with the counters' usage and time), the rest less often.
struct alignas(64) Guest::Cpu {
  enum class St : std::uint8_t { running, waking, poll, halt };
  Cpu(const haltpoll::HaltpollParams& p, std::uint32_t i) : id(i), gov("haltpoll", policy_params(p)) {
    limit = gov.window_ns();
  }
  Ns key[slots] = {kNever, kNever, kNever, kNever, kNever};  // key_of(time, slot); kNever: none pending
  Thread* current = nullptr;                                 // the thread whose compute step the run slot ends
  St st = St::running;
  bool dirty = false;            // a key changed since the tree last saw this CPU
  bool poll_time_limit = false;  // cpuidle's poll_time_limit
  bool halt_after_poll = false;  // the current halt follows a timed-out poll of poll_ns
  std::uint8_t last_state = 0;   // cpuidle's last_state_idx (starts 0, as a zeroed device)
  std::uint32_t id;
  Ns since = 0;               // start of the current idle period
  Ns ipi_debt = 0;            // IPIs this CPU sent while running: its next compute step runs longer
  std::uint64_t limit = 0;    // gov.window_ns(), which changes only where it is re-read
  Thread* waking = nullptr;   // the thread a wake-up in progress will run (null: none)
  std::uint64_t poll_ns = 0;
  CpuCounters counters;
  Fifo runq;
  std::vector<Thread*> threads;  // the threads placed here: their timers make the timer slot
  haltpoll::WindowGovernor gov;
  // Apart (31 KB), so that the Cpus, a few cache lines each, lie together.
  std::unique_ptr<CpuHistograms> hist = std::make_unique<CpuHistograms>();
};

// One cache line.
struct alignas(64) Guest::Thread {
  Cpu* cpu = nullptr;
  const Op* pc = nullptr;  // its next step
  Ns begin_t = 0;
  Ns deadline = 0;
  Ns timer_at = kNever;
  std::int16_t lateness_metric = -1;  // set while sleeping on a periodic timer
  // A metric sample of a resume that the event loop ran ahead (Guest::resume): recorded once
  // virtual time reaches pending_at, so that a reader never sees it early.
  std::int16_t pending_metric = -1;
  std::int32_t sock = 0;  // 0, or kSock* | its argument: a thread reading from a socket channel
  std::uint64_t pending_value = 0;
  Ns pending_at = 0;
};

bool Guest::Fifo::remove(Thread* t) noexcept {
  for (std::uint32_t i = 0; i < size_; ++i) {
    if (buf_[(head_ + i) & mask_] != t) continue;
    for (std::uint32_t k = i; k + 1 < size_; ++k) buf_[(head_ + k) & mask_] = buf_[(head_ + k + 1) & mask_];
    --size_;
    return true;
  }
  return false;
}

void Guest::Fifo::grow() {
  const std::uint32_t cap = std::max<std::uint32_t>(4, 2 * (mask_ + 1));
  auto b = std::make_unique<Thread*[]>(cap);
  for (std::uint32_t i = 0; i < size_; ++i) b[i] = buf_[(head_ + i) & mask_];
  buf_ = std::move(b);
  mask_ = cap - 1;
  head_ = 0;
}

Guest::Guest(GuestConfig cfg, Workload load)
    : cfg_(std::move(cfg)), load_(std::move(load)), params_(cfg_.params), rng_(cfg_.seed) {
  if (cfg_.cpus < 1) throw std::invalid_argument("a guest needs at least one vCPU");
  for (int i = 0; i < cfg_.cpus; ++i) cpus_.push_back(std::make_unique<Cpu>(params_, static_cast<std::uint32_t>(i)));
  for (const auto& name : load_.metrics) {
    metrics_.push_back(std::make_unique<MetricStats>());
    metrics_.back()->name = name;
  }
  tokens_.assign(static_cast<std::size_t>(load_.channels), 0);
  waiters_.resize(static_cast<std::size_t>(load_.channels));
  socket_.assign(static_cast<std::size_t>(load_.channels), 0);
  sent_.resize(static_cast<std::size_t>(load_.channels));
  const auto nmetrics = static_cast<int>(load_.metrics.size());
  if (nmetrics > std::numeric_limits<std::int16_t>::max() || load_.channels > kSockArg ||
      load_.threads.size() > static_cast<std::size_t>(kSockArg))
    throw std::invalid_argument("a load of at most 32767 metrics and 268435455 channels and threads");
  // A channel's tokens all come over a socket or none do (a socket channel's reader is woken by
  // its sender's write space).
  std::vector<std::uint8_t> plain(socket_.size(), 0);
  for (const ThreadSpec& t : load_.threads)
    for (const Step& s : t.steps)
      if ((s.op == Step::Op::post || s.op == Step::Op::post_socket) && s.arg >= 0 && s.arg < load_.channels)
        (s.op == Step::Op::post ? plain : socket_)[static_cast<std::size_t>(s.arg)] = 1;
  for (std::size_t ch = 0; ch < socket_.size(); ++ch)
    if (plain[ch] && socket_[ch])
      throw std::invalid_argument("channel " + std::to_string(ch) + " is posted to both over a socket and not");
  std::size_t nsteps = 0;
  for (const ThreadSpec& t : load_.threads) {
    if (t.cpu < 0 || t.cpu >= cfg_.cpus)
      throw std::invalid_argument("thread " + t.name + " is placed on cpu " + std::to_string(t.cpu) +
                                  ", the guest has " + std::to_string(cfg_.cpus));
    bool advances = false;
    for (const Step& s : t.steps) {
      const bool channel = s.op == Step::Op::post || s.op == Step::Op::post_socket || s.op == Step::Op::wait;
      const bool metric = s.op == Step::Op::begin || s.op == Step::Op::end || s.op == Step::Op::sleep_period;
      if (channel && (s.arg < 0 || s.arg >= load_.channels))
        throw std::invalid_argument("thread " + t.name + ": channel " + std::to_string(s.arg) + " out of range");
      if (metric && (s.arg < 0 || s.arg >= nmetrics))
        throw std::invalid_argument("thread " + t.name + ": metric " + std::to_string(s.arg) + " out of range");
      if (s.op == Step::Op::sleep_period && s.period <= 0)
        throw std::invalid_argument("thread " + t.name + ": a periodic sleep needs a period > 0");
      advances = advances || s.op == Step::Op::wait || s.op == Step::Op::sleep_period ||
                 (s.op == Step::Op::sleep_exp && s.period > 0) ||
                 (s.op == Step::Op::compute && (s.d.median_ns > 0 || s.d.tail_p > 0));
    }
    if (!advances)
      throw std::invalid_argument("thread " + t.name +
                                  ": its program never waits, sleeps or computes, so it would loop forever");
    nsteps += t.steps.size() + (t.stop_ns >= 0 ? 1 : 0);  // and the check of its end
  }
  // The programs, their samplers and the threads: they stay where they are from here on.
  ops_.reserve(nsteps);
  step_samplers_.reserve(nsteps);
  threads_.reserve(load_.threads.size());
  std::vector<Dist> step_dists;
  auto sampler = [&](const Dist& d) -> const Sampler* {
    for (std::size_t i = 0; i < step_dists.size(); ++i)
      if (same(step_dists[i], d)) return &step_samplers_[i];
    step_dists.push_back(d);
    step_samplers_.push_back(tables_.sampler(d));
    return &step_samplers_.back();
  };
  for (const ThreadSpec& spec : load_.threads) {
    // A thread that stops: its program starts with the check of its end.
    ThreadSpec t = spec;
    if (t.stop_ns >= 0) t.steps.insert(t.steps.begin(), Step{Step::Op::until, {}, 0, t.stop_ns, 0});
    const std::size_t first = ops_.size(), n = t.steps.size();
    for (const Step& s : t.steps) {
      ops_.push_back(Op{s.op, -1, s.arg, nullptr, {nullptr}, s.slack});
      if (s.op == Step::Op::compute) ops_.back().d = sampler(s.d);
      else ops_.back().period = s.period;
    }
    for (std::size_t i = 0; i < n; ++i) {
      Op& op = ops_[first + i];
      op.next = &ops_[first + (i + 1) % n];
      int ends = 0;
      for (std::size_t k = 0; k < n && ends <= 1; ++k) {
        const Step::Op o = t.steps[(i + k) % n].op;
        if (o == Step::Op::compute) {
          op.ends_to_compute = static_cast<std::int8_t>(ends);
          break;
        }
        if (o == Step::Op::end) ++ends;
        else if (o != Step::Op::begin) break;
      }
    }
    Thread th;
    th.cpu = cpus_[static_cast<std::size_t>(t.cpu)].get();
    th.pc = &ops_[first];
    threads_.push_back(th);
  }
  const Costs& k = cfg_.costs;
  wake_polling_ = tables_.sampler(k.wake_polling);
  wake_delay_ = tables_.sampler(k.wake_delay);
  timer_in_poll_ = tables_.sampler(k.timer_in_poll);
  housekeeping_gap_ = tables_.sampler(k.housekeeping_gap);
  steal_ = tables_.sampler(k.steal);
  spurious_wake_ = tables_.sampler(k.spurious_wake);
  ipi_send_ = tables_.sampler(k.ipi_send);
  ipi_send_cost_ = k.ipi_send.median_ns > 0 || k.ipi_send.tail_p > 0;
  steals_ = k.steal_probability > 0;
  for (const Dist* d : {&k.wake_halted, &k.wake_halted_long, &k.timer_in_halt})
    cost_samplers_.push_back({d, *d, tables_.sampler(*d)});

  while (leaves_ < cpus_.size()) leaves_ *= 2;
  tree_key_.assign(2 * leaves_, kNever);
  tree_cpu_.assign(2 * leaves_, nullptr);
  for (std::size_t i = 0; i < cpus_.size(); ++i) tree_cpu_[leaves_ + i] = cpus_[i].get();
  for (std::size_t i = leaves_ - 1; i > 0; --i) tree_cpu_[i] = tree_cpu_[2 * i];
  dirty_ = std::make_unique<Cpu*[]>(cpus_.size());

  for (std::size_t i = 0; i < threads_.size(); ++i) {
    Thread& t = threads_[i];
    t.cpu->threads.push_back(&t);
    if (load_.threads[i].start_ns > 0) set_timer(t, load_.threads[i].start_ns);  // starts later
    else t.cpu->runq.push(&t);
  }
  for (auto& c : cpus_) {
    if (k.housekeeping_gap.median_ns > 0) set(*c, housekeeping, housekeeping_gap_.draw(rng_));
    switch_out(*c);
  }
  flush();
}

Guest::~Guest() = default;

// The CPU into the list of those whose keys the tree has yet to see. The CPU whose event runs is
// marked before it runs and updated after.
[[gnu::always_inline]] inline void Guest::mark(Cpu& c) {
  if (c.dirty) return;
  c.dirty = true;
  dirty_[ndirty_++] = &c;
}

// Branches, not selects, for the clamps: they almost never apply, and a select would make the
// next event wait for this key.
[[gnu::always_inline]] inline void Guest::set(Cpu& c, Slot s, Ns t) {
  if (__builtin_expect(t < now_, 0)) t = now_;
  if (__builtin_expect(t > kLatest, 0)) t = kLatest;
  c.key[s] = (t << kSlotBits) | s;
  mark(c);
}

[[gnu::always_inline]] inline void Guest::clear(Cpu& c, Slot s) {
  c.key[s] = kNever;
  mark(c);
}

// A CPU's least key into the tree: up its leaf's path to the root, the winner so far carried along
// against each sibling; at equal keys the one carried up stays (deterministic, as the order of
// updates is). Keys and CPUs in two arrays, so that a level is a few instructions. Up to 4 CPUs a
// branch picks the winner: it predicts well there and lets the next event start before this one's
// key is known; with more CPUs which side wins is as good as random, and a select is cheaper than
// the mispredictions (2-vCPU pipe 18 % faster with the branch, 64-vCPU pipe 29 % slower).
[[gnu::always_inline]] inline void Guest::update(Cpu& c) {
  c.dirty = false;
  Ns k = c.key[0];
  for (int s = 1; s < slots; ++s) k = std::min(k, c.key[s]);
  Ns* keys = tree_key_.data();
  Cpu** cpus = tree_cpu_.data();
  Cpu* win = &c;
  std::size_t i = leaves_ + c.id;
  keys[i] = k;
  if (leaves_ <= 4) {
    for (; i > 1; i >>= 1) {
      if (keys[i ^ 1] < k) {
        k = keys[i ^ 1];
        win = cpus[i ^ 1];
      }
      keys[i >> 1] = k;
      cpus[i >> 1] = win;
    }
    return;
  }
  for (; i > 1; i >>= 1) {
    const Ns sk = keys[i ^ 1];
    Cpu* const sc = cpus[i ^ 1];
    const bool take = sk < k;
    k = take ? sk : k;
    win = take ? sc : win;
    keys[i >> 1] = k;
    cpus[i >> 1] = win;
  }
}

[[gnu::always_inline]] inline void Guest::flush() {
  for (std::size_t i = 0; i < ndirty_; ++i) update(*dirty_[i]);
  ndirty_ = 0;
}

void Guest::run_until(Ns t) {
  const Ns stop = key_of(t, (1 << kSlotBits) - 1);
  while (tree_key_[1] <= stop) {
    const Ns key = tree_key_[1];
    const auto s = static_cast<Slot>(key & ((1 << kSlotBits) - 1));
    now_ = key >> kSlotBits;
    ++processed_;
    Cpu& c = *tree_cpu_[1];
    c.key[s] = kNever;
    c.dirty = true;  // updated below, not through the list
    dispatch(c, s);
    update(c);
    flush();
  }
  now_ = std::max(now_, t);
  for (Thread& th : threads_)
    if (th.pending_metric >= 0 && th.pending_at <= now_) record_pending(th);
}

[[gnu::always_inline]] inline void Guest::dispatch(Cpu& c, Slot s) {
  switch (s) {
    case halt_end: end_halt(c); break;
    case run: {
      if (c.st != Cpu::St::waking) {  // the running thread's compute step ended
        Thread& t = *c.current;
        if (t.pending_metric >= 0) record_pending(t);
        run_thread(c, &t);
        break;
      }
      c.st = Cpu::St::running;
      Thread* t = c.waking;
      c.waking = nullptr;
      if (t != nullptr) run_thread(c, t);
      else switch_out(c);
      break;
    }
    case poll_timeout:
      end_poll(c, true);
      enter_idle(c);
      break;
    case timer: fire_timer(c); break;
    case housekeeping: housekeeping_irq(c); break;
   case slots: break;
  }
}

void Guest::record_pending(Thread& t) {
  record(*metrics_[static_cast<std::size_t>(t.pending_metric)], t.pending_value);
  t.pending_metric = -1;
}

[[gnu::always_inline]] inline void Guest::record(MetricStats& m, std::uint64_t ns) {
  m.hist.record(ns);
  ++m.count;
}

// The first of the CPU's threads whose timer is due; the others stay in the slot.
void Guest::fire_timer(Cpu& c) {
  Ns next = kNever;
  Thread* due = nullptr;
  for (Thread* t : c.threads) {
    if (due == nullptr && t->timer_at <= now_) due = t;
    else next = std::min(next, t->timer_at);
  }
  if (next != kNever) set(c, timer, next);
  if (due == nullptr) return;
  due->timer_at = kNever;
  wake(*due, nullptr);
}

void Guest::set_timer(Thread& t, Ns at) {
  t.timer_at = std::min(std::max(at, now_), kLatest);
  Ns next = t.timer_at;
  for (const Thread* o : t.cpu->threads) next = std::min(next, o->timer_at);
  set(*t.cpu, timer, next);
}

void Guest::housekeeping_irq(Cpu& c) {
  set(c, housekeeping, now_ + std::max<Ns>(1, housekeeping_gap_.draw(rng_)));
  // An interrupt ends a halt (the idle loop runs again) and leaves a poll alone: it does not set
  // need-resched.
  if (c.st != Cpu::St::halt) return;
  const Ns lat = sampler_of(cfg_.costs.halted_interrupt(now_ - c.since)).draw(rng_);
  c.st = Cpu::St::waking;
  c.waking = nullptr;
  set(c, halt_end, now_ + round_ns(cfg_.costs.halt_exit_share * static_cast<double>(lat)));
  set(c, run, now_ + lat);
}

[[gnu::always_inline]] inline const Sampler& Guest::sampler_of(const Dist& d) {
  CostSampler& first = cost_samplers_.front();
  if (first.dist == &d && same(first.copy, d)) return first.s;
  return prepare(d);
}

const Sampler& Guest::prepare(const Dist& d) {
  for (CostSampler& e : cost_samplers_)
    if (e.dist == &d) {
      if (!same(e.copy, d)) {
        e.copy = d;
        e.s = tables_.sampler(d);
      }
      return e.s;
    }
  cost_samplers_.push_back({&d, d, tables_.sampler(d)});
  return cost_samplers_.back().s;
}

[[gnu::always_inline]] inline Ns Guest::steal(Ns d) {
  if (steals_ && rng_.uniform() < cfg_.costs.steal_probability) d += steal_.draw(rng_);
  return d;
}

// Runs thread t on the CPU until its next compute step, whose end is the CPU's next event, or
// until it blocks; then the next thread of the run queue, or the CPU goes idle.
[[gnu::always_inline]] inline void Guest::run_thread(Cpu& c, Thread* t) {
  c.st = Cpu::St::running;
  for (;;) {
    if (t->lateness_metric >= 0) {
      record(*metrics_[static_cast<std::size_t>(t->lateness_metric)],
             static_cast<std::uint64_t>(std::max<Ns>(0, now_ - t->deadline)));
      t->lateness_metric = -1;
    }
    const SocketRun r = t->sock == 0 ? SocketRun::proceed : socket_run(c, *t);
    if (r == SocketRun::computing) return;
    if (r == SocketRun::proceed && !run_steps(c, *t)) return;
    if (c.runq.empty()) {
      enter_idle(c);
      return;
    }
    t = c.runq.pop();
  }
}

// The thread's steps from its pc: false when it computes, true when it blocked.
[[gnu::always_inline]] inline bool Guest::run_steps(Cpu& c, Thread& t) {
  for (;;) {
    const Op& s = *t.pc;
    t.pc = s.next;
    switch (s.op) {
      case Step::Op::compute:
        c.current = &t;
        set(c, run, now_ + steal(s.d->draw(rng_)) + c.ipi_debt);
        c.ipi_debt = 0;
        return false;
      case Step::Op::post: post(s.arg, c, t, false); break;
      case Step::Op::post_socket: post(s.arg, c, t, true); break;
      case Step::Op::wait: {
        const auto ch = static_cast<std::size_t>(s.arg);
        auto& tok = tokens_[ch];
        if (tok > 0) {
          --tok;
          if (socket_[ch]) write_space(*sent_[ch].pop(), c);
          break;
        }
        waiters_[ch].push(&t);
        if (socket_[ch]) t.sock = kSockBlocked | s.arg;
        return true;
      }
      case Step::Op::sleep_period:
        // The next multiple of the period after now; the timer fires `slack` after it.
        t.deadline = (now_ / s.period + 1) * s.period;
        t.lateness_metric = static_cast<std::int16_t>(s.arg);
        set_timer(t, t.deadline + s.slack);
        return true;
      case Step::Op::sleep_exp:
        set_timer(t, now_ + round_ns(tables_.exponential(rng_, static_cast<double>(s.period))));
        return true;
      case Step::Op::begin: t.begin_t = now_; break;
      case Step::Op::end:
        record(*metrics_[static_cast<std::size_t>(s.arg)], static_cast<std::uint64_t>(now_ - t.begin_t));
        break;
      case Step::Op::until:
        if (now_ >= s.period) return true;  // stopped for good: on no waiter list, no timer
        break;
    }
  }
}

// A socket channel's token taken (the kernel's read frees its buffer: sock_wfree ->
// unix_write_space): the sender's socket has room again, and every thread asleep on that socket's
// wait queue wakes, whatever it waits for; the sender asleep in its own read wakes, finds nothing
// and sleeps again. Measured on Linux 6.18 with bench_load_rr's shape: about two voluntary context
// switches per round trip on each side, one over a pipe.
void Guest::write_space(Thread& sender, Cpu& from) {
  if ((sender.sock & kSockKind) != kSockBlocked) return;
  const int ch = sender.sock & kSockArg;
  waiters_[static_cast<std::size_t>(ch)].remove(&sender);
  sender.sock = kSockSpurious | ch;
  wake(sender, &from);
}

Guest::SocketRun Guest::socket_run(Cpu& c, Thread& t) {
  const int kind = t.sock & kSockKind, arg = t.sock & kSockArg;
  t.sock = 0;
  if (kind == kSockConsume) {
    write_space(threads_[static_cast<std::size_t>(arg)], c);
    return SocketRun::proceed;
  }
  // Woken by write space while waiting to read channel arg: the data may have come meanwhile.
  const auto ch = static_cast<std::size_t>(arg);
  if (tokens_[ch] > 0) {
    --tokens_[ch];
    write_space(*sent_[ch].pop(), c);
    return SocketRun::proceed;
  }
  if (kind == kSockSpurious) {
    t.sock = kSockRecheck | arg;
    c.current = &t;
    set(c, run, now_ + steal(spurious_wake_.draw(rng_)) + c.ipi_debt);
    c.ipi_debt = 0;
    return SocketRun::computing;
  }
  waiters_[ch].push(&t);
  t.sock = kSockBlocked | arg;
  return SocketRun::blocked;
}

[[gnu::always_inline]] inline void Guest::post(int ch, Cpu& from, Thread& sender, bool socket) {
  Fifo& w = waiters_[static_cast<std::size_t>(ch)];
  if (w.empty()) {
    ++tokens_[static_cast<std::size_t>(ch)];
    if (socket) sent_[static_cast<std::size_t>(ch)].push(&sender);
    return;
  }
  Thread& t = *w.pop();
  // The reader takes the token when it runs, and wakes the sender's socket then.
  if (socket) t.sock = kSockConsume | static_cast<std::int32_t>(&sender - threads_.data());
  wake(t, &from);
}

[[gnu::always_inline]] inline void Guest::wake(Thread& t, Cpu* from) {
  Cpu& c = *t.cpu;
  const bool remote = from != nullptr && from != &c;
  switch (c.st) {
    case Cpu::St::running: c.runq.push(&t); return;
    case Cpu::St::waking:
      // After a halt has ended the idle loop runs with the polling flag set again until it
      // switches to the thread (the tick's restart on the way): a remote waker sends no IPI.
      if (remote && c.last_state == 1 && c.key[halt_end] == kNever) {
        ++c.counters.wake_idle_without_ipi;
        log(now_, c, TraceEvent::Kind::wake_idle_without_ipi, 0);
      }
      c.runq.push(&t);
      return;
    case Cpu::St::poll: {
      // The poll sees need-resched at once; a remote waker found the polling flag and sent no IPI.
      end_poll(c, false);
      if (remote) {
        ++c.counters.wake_idle_without_ipi;
        log(now_, c, TraceEvent::Kind::wake_idle_without_ipi, 0);
      }
      const Ns lat = steal(remote ? wake_polling_.draw(rng_) + wake_delay_.draw(rng_) + 2 * trace_cost_
                                  : timer_in_poll_.draw(rng_) + trace_cost_);
      resume(c, t, now_ + lat);
      return;
    }
    case Cpu::St::halt: {
      if (remote) {
        ++c.counters.ipis;
        if (ipi_send_cost_) from->ipi_debt += ipi_send_.draw(rng_);
      }
      const Ns halted_for = now_ - c.since;
      const Dist& d = remote ? cfg_.costs.halted_wake(halted_for) : cfg_.costs.halted_interrupt(halted_for);
      const Ns lat = steal(sampler_of(d).draw(rng_) + (remote ? wake_delay_.draw(rng_) : 0) + trace_cost_);
      const double share = remote ? cfg_.costs.halted_share(halted_for) : cfg_.costs.halt_exit_share;
      set(c, halt_end, now_ + round_ns(share * static_cast<double>(lat)));
      resume(c, t, now_ + lat);
      return;
    }
  }
}

// Thread t runs on its CPU from time at (a wake-up's latency ahead). When it reaches its next
// compute step through begin and end steps only, those steps touch nothing another CPU sees, so
// they run now with `at` as their time and the compute step's end is the CPU's next event; the CPU
// is `running` already, which wake() and the interrupts treat as `waking`. At most one metric
// sample waits for its time (Thread::pending_metric). Otherwise the resume is an event at `at`.
[[gnu::always_inline]] inline void Guest::resume(Cpu& c, Thread& t, Ns at) {
  const int ends = t.pc->ends_to_compute;
  if (ends < 0 || ends + (t.lateness_metric >= 0 ? 1 : 0) > 1 || t.sock != 0) {
    c.st = Cpu::St::waking;
    c.waking = &t;
    set(c, run, at);
    return;
  }
  c.st = Cpu::St::running;
  if (t.lateness_metric >= 0) {
    t.pending_metric = t.lateness_metric;
    t.pending_value = static_cast<std::uint64_t>(std::max<Ns>(0, at - t.deadline));
    t.pending_at = at;
    t.lateness_metric = -1;
  }
  for (;;) {
    const Op& s = *t.pc;
    t.pc = s.next;
    if (s.op == Step::Op::begin) {
      t.begin_t = at;
    } else if (s.op == Step::Op::end) {
      t.pending_metric = static_cast<std::int16_t>(s.arg);
      t.pending_value = static_cast<std::uint64_t>(at - t.begin_t);
      t.pending_at = at;
    } else {
      c.current = &t;
      set(c, run, at + steal(s.d->draw(rng_)));
      return;
    }
  }
}

void Guest::switch_out(Cpu& c) {
  if (!c.runq.empty()) {
    run_thread(c, c.runq.pop());
    return;
  }
  enter_idle(c);
}

// haltpoll_select(): halt at limit 0 or after a timed-out poll, otherwise poll for the limit.
[[gnu::always_inline]] inline void Guest::enter_idle(Cpu& c) {
  c.since = now_;
  c.ipi_debt = 0;  // an IPI sent just before sleeping (a post then a wait) delays nothing modelled
  if (c.limit == 0 || (c.last_state == 0 && c.poll_time_limit)) {
    c.st = Cpu::St::halt;
    c.halt_after_poll = c.last_state == 0 && c.poll_time_limit;
    log(now_, c, TraceEvent::Kind::cpu_idle, 1);
    return;
  }
  c.st = Cpu::St::poll;
  set(c, poll_timeout, now_ + static_cast<Ns>(c.limit));
  log(now_, c, TraceEvent::Kind::cpu_idle, 0);
}

[[gnu::always_inline]] inline void Guest::end_poll(Cpu& c, bool timed_out) {
  const auto res = static_cast<std::uint64_t>(now_ - c.since);
  ++c.counters.usage[CpuCounters::poll];
  c.counters.time_ns[CpuCounters::poll] += res;
  if (timed_out) {
    ++c.counters.polls_timed_out;
    c.poll_ns = res;
  } else {
    clear(c, poll_timeout);
    if (histograms_) c.hist->poll_hit.record(res);
  }
  log(now_, c, TraceEvent::Kind::cpu_idle, -1);
  c.last_state = 0;
  c.poll_time_limit = timed_out;
}

// The halt's end, then haltpoll_reflect → adjust_poll_limit with its residency.
void Guest::end_halt(Cpu& c) {
  const auto res = static_cast<std::uint64_t>(now_ - c.since);
  ++c.counters.usage[CpuCounters::halt];
  c.counters.time_ns[CpuCounters::halt] += res;
  if (histograms_) {
    c.hist->halt_residency.record(res);
    if (c.halt_after_poll) c.hist->poll_halt.record(c.poll_ns + res);
    else c.hist->halt.record(res);
  }
  log(now_, c, TraceEvent::Kind::cpu_idle, -1);
  c.last_state = 1;
  const std::uint64_t old = c.limit;
  const auto branch = haltpoll::haltpoll_branch(old, res, params_);
  // record(window + block, window): the library's model sees a halt of `res` after the poll.
  if (res > 0) {
    c.gov.record(old + res, old);
    c.limit = c.gov.window_ns();
  }
  if (branch == haltpoll::HaltpollBranch::none) return;
  const bool grow = branch == haltpoll::HaltpollBranch::grow;
  ++(grow ? c.counters.limit_grow : c.counters.limit_shrink);
  log(now_, c, TraceEvent::Kind::guest_halt_poll_ns, 0, grow, static_cast<std::uint32_t>(c.limit),
      static_cast<std::uint32_t>(old));
}

[[gnu::always_inline]] inline void Guest::log(Ns t, const Cpu& c, TraceEvent::Kind k, std::int32_t state, bool grow,
                                              std::uint32_t n, std::uint32_t o) {
  if (cfg_.log_events) append_log(TraceEvent{t, c.id, k, state, grow, n, o});
}

void Guest::append_log(const TraceEvent& e) { log_.push_back(e); }

void Guest::set_params(const haltpoll::HaltpollParams& p) {
  params_ = p;
  for (auto& c : cpus_) {
    c->gov.set_haltpoll_params(p);
    c->limit = c->gov.window_ns();
  }
}

void Guest::set_cap_ns(std::uint32_t cap_ns) {
  haltpoll::HaltpollParams p = params_;
  p.guest_halt_poll_ns = cap_ns;
  set_params(p);
}

void Guest::reset_limits() {
  for (auto& c : cpus_) {
    c->gov = haltpoll::WindowGovernor("haltpoll", policy_params(params_));
    c->limit = c->gov.window_ns();
  }
}

const CpuCounters& Guest::counters(int cpu) const { return cpus_.at(static_cast<std::size_t>(cpu))->counters; }

std::uint32_t Guest::poll_limit_ns(int cpu) const {
  return static_cast<std::uint32_t>(cpus_.at(static_cast<std::size_t>(cpu))->gov.window_ns());
}

const CpuHistograms& Guest::histograms(int cpu) const { return *cpus_.at(static_cast<std::size_t>(cpu))->hist; }

const MetricStats& Guest::metric(std::string_view name) const {
  for (const auto& m : metrics_)
    if (m->name == name) return *m;
  throw std::out_of_range("no metric named " + std::string(name));
}

}  // namespace haltpolld::des
