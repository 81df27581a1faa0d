// The discrete-event guest (des_guest.hpp): events, the idle loop of each vCPU, the threads.
#include "sim/des_guest.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <stdexcept>

namespace haltpolld::des {

namespace {
haltpoll::PolicyParams policy_params(const haltpoll::HaltpollParams& p) {
  haltpoll::PolicyParams pp;
  pp.haltpoll = p;
  return pp;
}
}  // namespace

struct Guest::Cpu {
  enum class St : std::uint8_t { running, waking, poll, halt };
  explicit Cpu(const haltpoll::HaltpollParams& p) : gov("haltpoll", policy_params(p)) {}
  St st = St::running;
  Ns since = 0;           // start of the current idle period
  std::uint32_t gen = 0;  // invalidates a poll's timeout and a wake-up's resume
  int waking = -1;        // the thread a wake-up in progress will run (-1: none)
  std::deque<int> runq;
  haltpoll::WindowGovernor gov;
  int last_state = 0;  // cpuidle's last_state_idx (starts 0, as a zeroed device)
  bool poll_time_limit = false;
  bool halt_after_poll = false;  // the current halt follows a timed-out poll of poll_ns
  // The poll's timeout: one armed event per CPU (timeout_gen), at or before the poll's deadline;
  // when it fires early (a later poll of the same CPU kept it) it re-arms at the deadline. A poll
  // ended by a wake-up thus leaves no event behind, and the heap stays small.
  Ns poll_deadline = 0;
  Ns timeout_at = 0;
  bool timeout_armed = false;
  std::uint32_t timeout_gen = 0;
  std::uint64_t poll_ns = 0;
  CpuCounters counters;
  CpuHistograms hist;
};

struct Guest::Thread {
  int cpu = 0;
  const std::vector<Step>* steps = nullptr;
  std::size_t pc = 0;
  Ns begin_t = 0;
  Ns deadline = 0;
  int lateness_metric = -1;  // set while sleeping on a periodic timer
};

Guest::Guest(GuestConfig cfg, Workload load)
    : cfg_(std::move(cfg)), load_(std::move(load)), params_(cfg_.params), rng_(cfg_.seed) {
  if (cfg_.cpus < 1) throw std::invalid_argument("a guest needs at least one vCPU");
  for (int i = 0; i < cfg_.cpus; ++i) cpus_.push_back(std::make_unique<Cpu>(params_));
  for (const auto& name : load_.metrics) {
    metrics_.push_back(std::make_unique<MetricStats>());
    metrics_.back()->name = name;
  }
  tokens_.assign(static_cast<std::size_t>(load_.channels), 0);
  waiters_.resize(static_cast<std::size_t>(load_.channels));
  const auto nmetrics = static_cast<int>(load_.metrics.size());
  for (const ThreadSpec& t : load_.threads) {
    if (t.cpu < 0 || t.cpu >= cfg_.cpus)
      throw std::invalid_argument("thread " + t.name + " is placed on cpu " + std::to_string(t.cpu) +
                                  ", the guest has " + std::to_string(cfg_.cpus));
    bool advances = false;
    for (const Step& s : t.steps) {
      const bool channel = s.op == Step::Op::post || s.op == Step::Op::wait;
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
    Thread th;
    th.cpu = t.cpu;
    th.steps = &t.steps;
    threads_.push_back(th);
  }
  for (std::size_t i = 0; i < threads_.size(); ++i)
    cpus_[static_cast<std::size_t>(threads_[i].cpu)]->runq.push_back(static_cast<int>(i));
  for (int c = 0; c < cfg_.cpus; ++c) {
    if (cfg_.costs.housekeeping_gap.median_ns > 0)
      push(cfg_.costs.housekeeping_gap.draw(rng_), housekeeping, static_cast<std::uint32_t>(c));
    switch_out(c);
  }
}

Guest::~Guest() = default;

void Guest::push(Ns t, Kind k, std::uint32_t a, std::uint32_t gen) {
  q_.push(Event{std::max(t, now_), seq_++, a, gen, k});
}

void Guest::run_until(Ns t) {
  while (!q_.empty() && q_.top().t <= t) {
    const Event e = q_.top();
    q_.pop();
    now_ = e.t;
    ++processed_;
    dispatch(e);
  }
  now_ = std::max(now_, t);
}

void Guest::dispatch(const Event& e) {
  switch (static_cast<Kind>(e.kind)) {
    case step_done: run_thread(threads_[e.a].cpu, static_cast<int>(e.a)); break;
    case poll_timeout: {
      Cpu& c = *cpus_[e.a];
      if (e.gen != c.timeout_gen) break;  // disarmed by a shorter poll's own timeout
      c.timeout_armed = false;
      if (c.st != Cpu::St::poll) break;  // the poll ended by a wake-up
      if (now_ < c.poll_deadline) {      // armed for an earlier poll: wait for this one's deadline
        arm_timeout(static_cast<int>(e.a));
        break;
      }
      end_poll(static_cast<int>(e.a), true);
      enter_idle(static_cast<int>(e.a));
      break;
    }
    case halt_end: end_halt(static_cast<int>(e.a)); break;
    case resume: {
      Cpu& c = *cpus_[e.a];
      if (c.gen != e.gen) break;
      c.st = Cpu::St::running;
      const int th = c.waking;
      c.waking = -1;
      if (th >= 0) run_thread(static_cast<int>(e.a), th);
      else switch_out(static_cast<int>(e.a));
      break;
    }
    case timer: wake(static_cast<int>(e.a), false); break;
    case housekeeping: {
      Cpu& c = *cpus_[e.a];
      push(now_ + std::max<Ns>(1, cfg_.costs.housekeeping_gap.draw(rng_)), housekeeping, e.a);
      // An interrupt ends a halt (the idle loop runs again) and leaves a poll alone: it does not
      // set need-resched.
      if (c.st != Cpu::St::halt) break;
      const Ns lat = cfg_.costs.timer_in_halt.draw(rng_);
      c.st = Cpu::St::waking;
      c.waking = -1;
      push(now_ + std::llround(cfg_.costs.halt_exit_share * static_cast<double>(lat)), halt_end, e.a);
      push(now_ + lat, resume, e.a, ++c.gen);
      break;
    }
  }
}

Ns Guest::steal(Ns d) {
  if (cfg_.costs.steal_probability > 0 && rng_.uniform() < cfg_.costs.steal_probability)
    d += cfg_.costs.steal.draw(rng_);
  return d;
}

void Guest::run_thread(int cpu, int th) {
  Cpu& c = *cpus_[static_cast<std::size_t>(cpu)];
  Thread& t = threads_[static_cast<std::size_t>(th)];
  c.st = Cpu::St::running;
  if (t.lateness_metric >= 0) {
    MetricStats& m = *metrics_[static_cast<std::size_t>(t.lateness_metric)];
    m.hist.record(static_cast<std::uint64_t>(std::max<Ns>(0, now_ - t.deadline)));
    ++m.count;
    t.lateness_metric = -1;
  }
  const auto& steps = *t.steps;
  for (;;) {
    const Step& s = steps[t.pc];
    t.pc = t.pc + 1 == steps.size() ? 0 : t.pc + 1;
    switch (s.op) {
      case Step::Op::compute: push(now_ + steal(s.d.draw(rng_)), step_done, static_cast<std::uint32_t>(th)); return;
      case Step::Op::post: post(s.arg, cpu); break;
      case Step::Op::wait: {
        auto& tok = tokens_[static_cast<std::size_t>(s.arg)];
        if (tok > 0) {
          --tok;
          break;
        }
        waiters_[static_cast<std::size_t>(s.arg)].push_back(th);
        switch_out(cpu);
        return;
      }
      case Step::Op::sleep_period: {
        // The next multiple of the period after now; the timer fires `slack` after it.
        t.deadline = (now_ / s.period + 1) * s.period;
        t.lateness_metric = s.arg;
        push(t.deadline + s.slack, timer, static_cast<std::uint32_t>(th));
        switch_out(cpu);
        return;
      }
      case Step::Op::sleep_exp:
        push(now_ + std::llround(rng_.exponential(static_cast<double>(s.period))), timer,
             static_cast<std::uint32_t>(th));
        switch_out(cpu);
        return;
      case Step::Op::begin: t.begin_t = now_; break;
      case Step::Op::end: {
        MetricStats& m = *metrics_[static_cast<std::size_t>(s.arg)];
        m.hist.record(static_cast<std::uint64_t>(now_ - t.begin_t));
        ++m.count;
        break;
      }
    }
  }
}

void Guest::post(int ch, int from_cpu) {
  auto& w = waiters_[static_cast<std::size_t>(ch)];
  if (w.empty()) {
    ++tokens_[static_cast<std::size_t>(ch)];
    return;
  }
  const int th = w.front();
  w.erase(w.begin());
  wake(th, threads_[static_cast<std::size_t>(th)].cpu != from_cpu);
}

void Guest::wake(int th, bool remote) {
  const int cpu = threads_[static_cast<std::size_t>(th)].cpu;
  Cpu& c = *cpus_[static_cast<std::size_t>(cpu)];
  const auto a = static_cast<std::uint32_t>(cpu);
  switch (c.st) {
    case Cpu::St::running:
    case Cpu::St::waking: c.runq.push_back(th); return;
    case Cpu::St::poll: {
      // The poll sees need-resched at once; a remote waker found the polling flag and sent no IPI.
      end_poll(cpu, false);
      if (remote) {
        ++c.counters.wake_idle_without_ipi;
        log(now_, cpu, TraceEvent::Kind::wake_idle_without_ipi, 0);
      }
      const Ns lat = steal(remote ? cfg_.costs.wake_polling.draw(rng_) + cfg_.costs.wake_delay.draw(rng_)
                                  : cfg_.costs.timer_in_poll.draw(rng_));
      c.st = Cpu::St::waking;
      c.waking = th;
      push(now_ + lat, resume, a, ++c.gen);
      return;
    }
    case Cpu::St::halt: {
      if (remote) ++c.counters.ipis;
      const Ns halted_for = now_ - c.since;
      const Ns lat = steal(remote ? cfg_.costs.halted_wake(halted_for).draw(rng_) + cfg_.costs.wake_delay.draw(rng_)
                                  : cfg_.costs.timer_in_halt.draw(rng_));
      const double share = remote ? cfg_.costs.halted_share(halted_for) : cfg_.costs.halt_exit_share;
      c.st = Cpu::St::waking;
      c.waking = th;
      push(now_ + std::llround(share * static_cast<double>(lat)), halt_end, a);
      push(now_ + lat, resume, a, ++c.gen);
      return;
    }
  }
}

void Guest::switch_out(int cpu) {
  Cpu& c = *cpus_[static_cast<std::size_t>(cpu)];
  if (!c.runq.empty()) {
    const int th = c.runq.front();
    c.runq.pop_front();
    run_thread(cpu, th);
    return;
  }
  enter_idle(cpu);
}

// haltpoll_select(): halt at limit 0 or after a timed-out poll, otherwise poll for the limit.
void Guest::enter_idle(int cpu) {
  Cpu& c = *cpus_[static_cast<std::size_t>(cpu)];
  const std::uint64_t limit = c.gov.window_ns();
  c.since = now_;
  if (limit == 0 || (c.last_state == 0 && c.poll_time_limit)) {
    c.st = Cpu::St::halt;
    c.halt_after_poll = c.last_state == 0 && c.poll_time_limit;
    log(now_, cpu, TraceEvent::Kind::cpu_idle, 1);
    return;
  }
  c.st = Cpu::St::poll;
  c.poll_deadline = now_ + static_cast<Ns>(limit);
  log(now_, cpu, TraceEvent::Kind::cpu_idle, 0);
  if (!c.timeout_armed || c.timeout_at > c.poll_deadline) arm_timeout(cpu);
}

void Guest::arm_timeout(int cpu) {
  Cpu& c = *cpus_[static_cast<std::size_t>(cpu)];
  c.timeout_armed = true;
  c.timeout_at = c.poll_deadline;
  push(c.poll_deadline, poll_timeout, static_cast<std::uint32_t>(cpu), ++c.timeout_gen);
}

void Guest::end_poll(int cpu, bool timed_out) {
  Cpu& c = *cpus_[static_cast<std::size_t>(cpu)];
  const auto res = static_cast<std::uint64_t>(now_ - c.since);
  ++c.counters.usage[CpuCounters::poll];
  c.counters.time_ns[CpuCounters::poll] += res;
  if (timed_out) {
    ++c.counters.polls_timed_out;
    c.poll_ns = res;
  } else {
    c.hist.poll_hit.record(res);
  }
  log(now_, cpu, TraceEvent::Kind::cpu_idle, -1);
  c.last_state = 0;
  c.poll_time_limit = timed_out;
}

// The halt's end, then haltpoll_reflect → adjust_poll_limit with its residency.
void Guest::end_halt(int cpu) {
  Cpu& c = *cpus_[static_cast<std::size_t>(cpu)];
  const auto res = static_cast<std::uint64_t>(now_ - c.since);
  ++c.counters.usage[CpuCounters::halt];
  c.counters.time_ns[CpuCounters::halt] += res;
  c.hist.halt_residency.record(res);
  if (c.halt_after_poll) c.hist.poll_halt.record(c.poll_ns + res);
  else c.hist.halt.record(res);
  log(now_, cpu, TraceEvent::Kind::cpu_idle, -1);
  c.last_state = 1;
  const std::uint64_t old = c.gov.window_ns();
  const auto branch = haltpoll::haltpoll_branch(old, res, params_);
  // record(window + block, window): the library's model sees a halt of `res` after the poll.
  if (res > 0) c.gov.record(old + res, old);
  if (branch == haltpoll::HaltpollBranch::none) return;
  const bool grow = branch == haltpoll::HaltpollBranch::grow;
  ++(grow ? c.counters.limit_grow : c.counters.limit_shrink);
  log(now_, cpu, TraceEvent::Kind::guest_halt_poll_ns, 0, grow, static_cast<std::uint32_t>(c.gov.window_ns()),
      static_cast<std::uint32_t>(old));
}

void Guest::log(Ns t, int cpu, TraceEvent::Kind k, std::int32_t state, bool grow, std::uint32_t n, std::uint32_t o) {
  if (!cfg_.log_events) return;
  log_.push_back(TraceEvent{t, static_cast<std::uint32_t>(cpu), k, state, grow, n, o});
}

void Guest::set_params(const haltpoll::HaltpollParams& p) {
  params_ = p;
  for (auto& c : cpus_) c->gov.set_haltpoll_params(p);
}

void Guest::set_cap_ns(std::uint32_t cap_ns) {
  haltpoll::HaltpollParams p = params_;
  p.guest_halt_poll_ns = cap_ns;
  set_params(p);
}

void Guest::reset_limits() {
  for (auto& c : cpus_) c->gov = haltpoll::WindowGovernor("haltpoll", policy_params(params_));
}

const CpuCounters& Guest::counters(int cpu) const { return cpus_.at(static_cast<std::size_t>(cpu))->counters; }

std::uint32_t Guest::poll_limit_ns(int cpu) const {
  return static_cast<std::uint32_t>(cpus_.at(static_cast<std::size_t>(cpu))->gov.window_ns());
}

const CpuHistograms& Guest::histograms(int cpu) const { return cpus_.at(static_cast<std::size_t>(cpu))->hist; }

const MetricStats& Guest::metric(std::string_view name) const {
  for (const auto& m : metrics_)
    if (m->name == name) return *m;
  throw std::out_of_range("no metric named " + std::string(name));
}

}  // namespace haltpolld::des
