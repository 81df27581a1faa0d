#include "tuning/controller.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <stdexcept>

namespace haltpolld {

namespace {

// "another writer set X to V (haltpolld had E): who", or for a claim before any write "another
// writer owns X (V): who".
std::string describe(const ForeignValue& f) {
  if (f.value == f.expected) return fmt::format("another writer owns {} ({}): {}", f.parameter, f.value, f.who);
  return fmt::format("another writer set {} to {} (haltpolld had {}): {}", f.parameter, f.value, f.expected, f.who);
}

}  // namespace

Controller::Controller(ControllerOptions options, GuestEdges edges, haltpoll::WorkerPool* pool)
    : Controller(std::move(options), std::move(edges), make_pool_access(pool)) {}

Controller::Controller(ControllerOptions options, GuestEdges edges, std::unique_ptr<PoolAccess> pool)
    : options_(std::move(options)),
      pool_(std::move(pool)),
      signals_(std::move(edges.signals)),
      actuator_(std::move(edges.actuator)),
      clock_(std::move(edges.clock)),
      tuner_(options_.tuner) {
  if (!signals_ || !actuator_ || !clock_) throw std::invalid_argument("Controller: a guest edge is missing");
}

Controller::~Controller() {
  // A daemon that forgets stop() must still leave the kernel as it found it.
  try {
    stop();
  } catch (...) {
  }
}

std::string Controller::state_file() const { return actuator_->originals_location(); }

void Controller::start_prober() {
  if (prober_) prober_->stop();
  prober_.reset();
  if (!pool_ || !(options_.probe_rate_hz > 0)) return;
  std::vector<int> cpus = pool_->cpus();
  if (!options_.cpus.empty()) {
    std::vector<int> both;
    for (int c : cpus)
      for (int want : options_.cpus)
        if (c == want) both.push_back(c);
    cpus = both;
  }
  PoolAccess* pool = pool_.get();
  prober_ = std::make_unique<Prober>(cpus, options_.probe_rate_hz,
                                     [pool](int cpu, std::function<void()> task) {
                                       return pool->submit(cpu, std::move(task));
                                     });
  prober_->start();
}

void Controller::detect_locked() { kernel_ = actuator_->detect(); }

Controller::Target Controller::target_locked() const {
  if (options_.kernel_mode && kernel_.active && degraded_reason_.empty() && !other_writer_) return Target::kernel;
  if (pool_) return Target::pool;
  return Target::none;
}

const char* Controller::target_name(Target t) noexcept {
  switch (t) {
    case Target::none: return "none";
    case Target::kernel: return "kernel";
    case Target::pool: return "pool";
  }
  return "?";
}

void Controller::start() {
  std::lock_guard lock(mu_);
  if (started_) return;
  // A previous run that was killed left its originals behind: put them back before anything else.
  auto rec = actuator_->recover();
  recovery_message_ = rec.message;
  if (!rec.message.empty()) {
    if (rec.ok) spdlog::warn("{}", rec.message);
    else spdlog::error("{}", rec.message);
  }
  detect_locked();
  if (options_.kernel_mode && !kernel_.active) spdlog::warn("kernel mode inactive: {}", kernel_.reason);
  const Target t = target_locked();
  std::uint32_t in_force = 0;
  if (t == Target::kernel || (t == Target::none && kernel_.params_present)) {
    in_force = actuator_->read_poll_ns().value_or(0);
  } else if (t == Target::pool) {
    in_force = static_cast<std::uint32_t>(std::min<std::uint64_t>(pool_->window_cap_ns(), UINT32_MAX));
  }
  // grow_start follows a small cap from the value this guest had (after any recovery above).
  if (auto gs = actuator_->read("guest_halt_poll_grow_start")) {
    try {
      options_.tuner.kernel_grow_start_ns = static_cast<std::uint32_t>(std::stoul(*gs));
      tuner_.set_params(options_.tuner);
    } catch (const std::exception&) {
      spdlog::warn("guest_halt_poll_grow_start reads '{}', not a number: grow_start stays unmanaged", *gs);
      options_.tuner.manage_grow_start = false;
      options_.tuner.grow_start_at_cap = false;
      tuner_.set_params(options_.tuner);
    }
  }
  tuner_.reset(in_force);
  watching_ = false;
  watch_locked(t);
  signals_->sample(clock_->steady_ns());  // prime the deltas
  if (pool_) last_pool_ = pool_->counters();
  start_prober();
  started_ = true;
}

Decision Controller::tick() {
  std::lock_guard lock(mu_);
  // Each parameter file once per tick: the look for another writer, the value in force and the
  // status below share one read of each.
  struct Held {
    HaltpollActuator& a;
    explicit Held(HaltpollActuator& x) : a(x) { a.hold_reads(true); }
    ~Held() { a.hold_reads(false); }
  } held(*actuator_);
  tick_status_.reset();
  Decision d = tick_locked();
  tick_status_ = status_locked();
  return d;
}

std::optional<ControllerStatus> Controller::tick_status() const {
  std::lock_guard lock(mu_);
  return tick_status_;
}

Decision Controller::tick_locked() {
  // Kernel mode refused for an unapplied state file comes back by itself once an operator removes or
  // repairs that file: no reload needed.
  if (!degraded_reason_.empty() && !actuator_->blocked_reason().empty()) {
    if (std::string what = actuator_->recheck_blocked(); !what.empty()) {
      recovery_message_ = what;
      if (actuator_->blocked_reason().empty()) {
        degraded_reason_.clear();
        detect_locked();
        spdlog::warn("{}; kernel mode resumes", what);
      } else {
        spdlog::error("{}", what);
      }
    }
  }
  const Target t = watch_locked(target_locked());
  Observation obs = signals_->sample(clock_->steady_ns());
  obs.tick = ++ticks_;

  // Pool counters: the poll CPU and wake rate of the pool's own workers.
  std::optional<double> pool_cpu, pool_total, pool_wakes;
  if (pool_ && obs.elapsed_ns > 0) {
    auto now = pool_->counters();
    double max_cpu = 0, sum = 0, wakes = 0;
    for (const auto& c : now) {
      for (const auto& b : last_pool_) {
        if (b.cpu != c.cpu) continue;
        const double poll = static_cast<double>(c.poll_ns >= b.poll_ns ? c.poll_ns - b.poll_ns : 0);
        const double cpu = std::min(100.0, 100.0 * poll / static_cast<double>(obs.elapsed_ns));
        max_cpu = std::max(max_cpu, cpu);
        sum += cpu;
        wakes += static_cast<double>((c.poll_hits + c.poll_misses) - (b.poll_hits + b.poll_misses));
      }
    }
    if (!now.empty()) {
      pool_cpu = max_cpu;
      pool_total = sum;
      pool_wakes = wakes * 1e9 / static_cast<double>(obs.elapsed_ns);
    }
    last_pool_ = std::move(now);
  }
  if (t == Target::pool || (!obs.poll_cpu_percent && pool_cpu)) {
    obs.poll_cpu_percent = pool_cpu;
    obs.total_poll_cpu_percent = pool_total;
    obs.mean_poll_cpu_percent = pool_total && !last_pool_.empty()
                                    ? std::optional<double>(*pool_total / static_cast<double>(last_pool_.size()))
                                    : std::nullopt;
    obs.wakes_per_second = pool_wakes;
    obs.cpu_source = "pool";
  }

  // Probe latencies.
  if (prober_) {
    // At low probe rates one tick may hold too few samples to judge: carry them over (up to 5 ticks)
    // rather than let the tuner starve.
    haltpoll::LatencyHistogram& all = carried_probes_;
    const std::vector<CpuProbes> drained = prober_->drain();
    // The penalty is taken only while the CPUs are otherwise idle: few wake-ups, no polling.
    const auto& k = obs.kernel;
    const bool cpus_idle = k.available() && k.per_second(k.total_idle_periods()) <= 200.0 * k.cpus.size() &&
                           obs.poll_cpu_percent.value_or(100) < 1.0;
    penalty_.add(drained, cpus_idle, clock_->steady_ns());
    for (const auto& c : drained) {
      all.merge(c.poll_hit);
      all.merge(c.park_path);
      obs.probes.poll_hits += c.poll_hit.count();
      obs.probes.park_path += c.park_path.count();
      obs.probes.queued += c.queued;
    }
    ++carried_ticks_;
    const bool enough = all.count() >= options_.tuner.min_latency_samples || carried_ticks_ >= 5;
    obs.probes.samples = all.count();
    obs.latency_samples = all.count();  // so that a carrying tick's reason shows how many there are
    if (enough && all.count() > 0) {
      obs.probes.p50_ns = all.interpolated_percentile(0.5);
      obs.probes.p99_ns = all.interpolated_percentile(0.99);
      obs.probes.at_percentile_ns = all.interpolated_percentile(options_.tuner.percentile / 100.0);
      obs.wake_latency_ns = obs.probes.at_percentile_ns;
      obs.latency_samples = all.count();
      obs.mean_wake_latency_ns = all.trimmed_mean(0.99);
      obs.latency_source = carried_ticks_ > 1 ? fmt::format("probes ({} ticks)", carried_ticks_) : "probes";
    }
    if (enough) {
      all.reset();
      carried_ticks_ = 0;
    }
  }

  if (auto p = penalty_.penalty_ns()) {
    obs.halt_exit_penalty_ns = p;
    obs.penalty_age_s = static_cast<double>(clock_->steady_ns() - *penalty_.measured_at_ns()) / 1e9;
  }
  obs.penalty_source = penalty_.source();

  // The value in force: what the kernel or the pool really has; in observe mode the tuner's own.
  if (t == Target::kernel) {
    obs.current_ns = actuator_->read_poll_ns().value_or(tuner_.current_ns());
  } else if (t == Target::pool) {
    obs.current_ns = static_cast<std::uint32_t>(std::min<std::uint64_t>(pool_->window_cap_ns(), UINT32_MAX));
  } else {
    obs.current_ns = tuner_.current_ns();
  }

  // A tick long after the last one (the process was stopped, the guest suspended, the clock jumped):
  // rates over the gap describe the gap, not the load, so nothing is decided from them. The sample
  // above re-primed the deltas, so the next tick measures an ordinary interval again.
  // The longest period is interval_ms (sweeps tick faster).
  const std::uint64_t period_ms = options_.interval_ms;
  const std::uint64_t late_ns = (2 * period_ms + 2000) * 1'000'000ULL;
  // Likewise a tick whose counters do not describe one interval of one set of CPUs (a CPU went
  // offline or came back, the steal count jumped or went backwards): the source says why.
  Decision d;
  if (obs.elapsed_ns > late_ns || !obs.unsound.empty()) {
    d.tick = obs.tick;
    d.previous_ns = d.guest_halt_poll_ns = tuner_.current_ns();
    d.rule = Rule::unsound_tick;
    d.reason = obs.elapsed_ns > late_ns
                   ? fmt::format("tick {:.1f} s after the last (expected every {} ms): the daemon was stopped or the "
                                 "guest suspended; nothing decided from rates over the gap",
                                 static_cast<double>(obs.elapsed_ns) / 1e9, period_ms)
                   : fmt::format("{} during the tick; nothing decided from its rates", obs.unsound);
    for (auto* rate : {&obs.poll_cpu_percent, &obs.mean_poll_cpu_percent, &obs.total_poll_cpu_percent,
                       &obs.wakes_per_second, &obs.steal_percent, &obs.wake_latency_ns, &obs.mean_wake_latency_ns})
      rate->reset();
    carried_probes_.reset();
    carried_ticks_ = 0;
    spdlog::warn("tuner: {}", d.reason);
  } else {
    d = tuner_.decide(obs);
  }
  if (d.changed()) {
    // Samples taken under the old value must not be judged as the new one's.
    carried_probes_.reset();
    carried_ticks_ = 0;
    if (t == Target::kernel) {
      auto r = actuator_->set_poll_ns(d.guest_halt_poll_ns);
      if (r.ok) {
        d.applied_kernel = true;
      } else {
        degrade_locked(r.message);
        d.reason += "; not applied: " + r.message + " (degraded to observe)";
      }
    } else if (t == Target::pool) {
      pool_->set_window_cap_ns(d.guest_halt_poll_ns);
      d.applied_pool = true;
    }
  }
  if (d.grow_start_ns && t == Target::kernel && degraded_reason_.empty()) {
    auto r = actuator_->set_grow_start_ns(*d.grow_start_ns);
    if (r.ok) {
      d.applied_grow_start = true;
    } else {
      degrade_locked(r.message);
      d.reason += "; grow_start not applied: " + r.message + " (degraded to observe)";
    }
  }
  // The limits reset after both the cap and grow_start are in force: a CPU that halts between the
  // writes would otherwise regrow by the old grow_start (grow_start_at_cap's raised cap).
  if (d.applied_kernel && d.reset_limits && reset_unavailable_.empty() && degraded_reason_.empty()) {
    // Not a reason to leave kernel mode: the cap is in force, only CPUs that never halt keep
    // their old limit. Said once in the log and kept in status.
    auto z = actuator_->reset_poll_limits();
    if (z.ok) {
      d.applied_reset = true;
      ++limit_resets_;
    } else if (actuator_->detect().governor != "haltpoll") {
      // Refused half way: the guest is on another governor, so the parameters reach nothing.
      degrade_locked(z.message);
      d.reason += "; poll limit reset stopped half way: " + z.message + " (degraded to observe)";
    } else {
      reset_unavailable_ = z.message;
      d.reason += "; poll limits not reset: " + z.message;
      spdlog::warn("lowering the cap cannot reset the CPUs' poll limits: {}", z.message);
    }
  }
  last_obs_ = obs;
  // The eBPF programs only on the ticks the tuner uses them (TunerParams::steady_trace_every);
  // called right after the sample, so the next tick has them whole.
  const bool want_trace = tuner_.wants_kernel_trace();
  const char* why_detached = obs.kernel.counters == KernelSignals::Counters::tracepoint
                                 ? "nothing to tune, the kernel does not poll: attached for one tick in {} to count "
                                   "the idle periods"
                                 : "the tuner is steady: attached for one tick in {}";
  signals_->set_idle_trace_attached(
      want_trace,
      want_trace ? std::string() : fmt::format(fmt::runtime(why_detached), options_.tuner.steady_trace_every));

  DecisionRecord e{
      d, clock_->unix_ms(), target_name(t), obs.latency_samples, std::string(tuner_.phase()), obs.halt_exit_penalty_ns};
  log_.push_back(std::move(e));
  while (log_.size() > std::max<std::size_t>(options_.decision_log_size, 1)) log_.pop_front();
  if (d.changed()) spdlog::info("tuner: {} -> {} ns: {}", d.previous_ns, d.guest_halt_poll_ns, d.reason);
  else spdlog::debug("tuner: hold {} ns: {}", d.guest_halt_poll_ns, d.reason);
  return d;
}

void Controller::restore_locked() {
  watching_ = false;
  if (!actuator_->has_saved_originals()) return;
  auto r = actuator_->restore();
  if (!r.ok) spdlog::error("restoring the haltpoll parameters: {} (state file {} kept for the next start)",
                           r.message, actuator_->originals_location());
  else if (r.message.empty()) spdlog::info("restored the original haltpoll parameters");
  else spdlog::info("restored the original haltpoll parameters this run changed; {}", r.message);
}

Controller::Target Controller::watch_locked(Target t) {
  if (t != Target::kernel) {
    watching_ = false;
    return t;
  }
  std::optional<ForeignValue> f;
  if (!watching_) {
    // Kernel mode starts (start, reload, a take-over): what is in force now is this run's to change,
    // unless another writer declares the parameters its own (TuneD's profile).
    f = taken_over_ ? std::nullopt : actuator_->claimed_by_other();
    if (!f) {
      actuator_->expect_values_in_force();
      watching_ = true;
      return t;
    }
  } else {
    f = actuator_->foreign_value();
  }
  if (!f) return t;
  other_writer_ = OtherWriter{*f, clock_->unix_ms()};
  watching_ = false;
  spdlog::warn("{}; haltpolld stops writing and leaves its values in place (haltpollctl take-over takes the "
               "parameters back)",
               describe(*f));
  if (auto r = actuator_->yield_to(*f); !r.ok)
    spdlog::error("recording the other writer in the state file: {}", r.message);
  return target_locked();
}

Controller::TakeOver Controller::take_over() {
  std::lock_guard lock(mu_);
  TakeOver r;
  if (!other_writer_) {
    r.message = "no other writer: nothing to take over";
    return r;
  }
  if (auto a = actuator_->take_over(); !a.ok) {
    r.message = "the state file could not record the new originals: " + a.message;
    spdlog::error("take-over refused: {}", r.message);
    return r;
  }
  r.took_over = true;
  taken_over_ = true;
  r.previous = std::move(other_writer_);
  other_writer_.reset();
  detect_locked();
  // The tuner goes on from the value in force, which is now the original.
  tuner_.reset(actuator_->read_poll_ns().value_or(tuner_.current_ns()));
  const Target t = target_locked();
  r.message = t == Target::kernel ? "the values in force are the new originals; kernel mode resumes"
                                  : "the values in force are the new originals; kernel mode stays off: " +
                                        std::string(!options_.kernel_mode ? "mode is observe" : kernel_.active ? degraded_reason_ : kernel_.reason);
  spdlog::warn("take-over from {} ({} was {}): {}", r.previous->value.who, r.previous->value.parameter,
               r.previous->value.value, r.message);
  return r;
}

void Controller::degrade_locked(const std::string& why) {
  degraded_reason_ = why;
  spdlog::error("kernel mode degraded to observe: {}", why);
  // Stop writing and put back what this run changed: observe mode leaves the kernel as found.
  restore_locked();
  detect_locked();
}

void Controller::stop() {
  std::lock_guard lock(mu_);
  // Joining under mu_ is safe: the prober thread never takes it.
  if (prober_) prober_->stop();
  restore_locked();
  started_ = false;
}

void Controller::update(const ControllerOptions& options) {
  std::lock_guard lock(mu_);
  const ControllerOptions old = options_;
  options_ = options;
  options_.tuner.kernel_grow_start_ns = old.tuner.kernel_grow_start_ns;  // learnt at start(), not configured
  if (old.kernel_mode && !options.kernel_mode) restore_locked();
  degraded_reason_.clear();  // a reload is the way to retry kernel mode after a failed write
  reset_unavailable_.clear();
  detect_locked();
  if (!(old.tuner == options_.tuner)) tuner_.set_params(options_.tuner);
  if (started_ && (old.cpus != options.cpus || old.probe_rate_hz != options.probe_rate_hz)) start_prober();
}

std::vector<DecisionRecord> Controller::decisions() const {
  std::lock_guard lock(mu_);
  return {log_.begin(), log_.end()};
}

std::optional<Observation> Controller::last_observation() const {
  std::lock_guard lock(mu_);
  return last_obs_;
}

bool Controller::searching() const {
  std::lock_guard lock(mu_);
  return tuner_.sweeping();
}

std::string Controller::cpuidle_status() const {
  std::lock_guard lock(mu_);
  return signals_->status().cpuidle;
}

ControllerStatus Controller::status() const {
  std::lock_guard lock(mu_);
  return status_locked();
}

ControllerStatus Controller::status_locked() const {
  const Target t = target_locked();
  ControllerStatus s;
  s.kernel_requested = options_.kernel_mode;
  s.kernel_effective = t == Target::kernel;
  if (!options_.kernel_mode) s.kernel_mode_inactive_reason = "mode is observe";
  else if (!kernel_.active) s.kernel_mode_inactive_reason = kernel_.reason;
  else if (!degraded_reason_.empty()) s.kernel_mode_inactive_reason = "write failed: " + degraded_reason_;
  else if (other_writer_)
    s.kernel_mode_inactive_reason =
        describe(other_writer_->value) + "; haltpolld does not write while it does (haltpollctl take-over)";
  s.tuning_target = target_name(t);
  s.started = started_;
  s.ticks = ticks_;
  s.interval_ms = options_.interval_ms;

  auto& k = s.kernel;
  k.params_dir = actuator_->params_location();
  k.params_present = kernel_.params_present;
  k.cpuidle_driver = kernel_.driver;
  k.cpuidle_governor = kernel_.governor;
  k.haltpoll_active = kernel_.active;
  k.reason = kernel_.reason;
  for (const char* name : HaltpollActuator::kParams) k.params.emplace_back(name, actuator_->read(name));
  k.originals_saved = actuator_->has_saved_originals();
  k.state_file = actuator_->originals_location();
  k.degraded_reason = degraded_reason_;
  k.recovery = recovery_message_;
  k.poll_limit_resets = limit_resets_;
  k.poll_limit_reset_unavailable = reset_unavailable_;

  auto& tu = s.tuner;
  tu.current_ns = tuner_.current_ns();
  tu.phase = std::string(tuner_.phase());
  tu.ladder_ns = tuner_.ladder();
  tu.last_sweep = tuner_.sweep_measurements();
  tu.penalty_ns = penalty_.penalty_ns();
  if (penalty_.measured_at_ns())
    tu.penalty_age_s = static_cast<double>(clock_->steady_ns() - *penalty_.measured_at_ns()) / 1e9;
  tu.penalty_source = penalty_.source();
  tu.growth_ceiling_ns = tuner_.growth_ceiling_ns();
  tu.gain_cpus = tuner_.gain_cpus();
  tu.paying_cpus = tuner_.paying_cpus();
  tu.params = tuner_.params();

  s.sensors = signals_->status();
  if (pool_) s.pool = ControllerStatus::Pool{pool_->cpus(), pool_->window_cap_ns()};
  if (prober_) {
    s.probes.rate_hz_per_cpu = prober_->rate_hz();
    s.probes.per_cpu = prober_->totals();
  } else {
    s.probes.reason = pool_ ? "probe rate is 0" : "no worker pool";
  }
  s.last_observation = last_obs_;
  s.other_writer = other_writer_;
  return s;
}

}  // namespace haltpolld
