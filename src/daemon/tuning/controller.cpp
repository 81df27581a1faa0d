#include "tuning/controller.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>

namespace haltpolld {

namespace {

std::uint64_t steady_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

nlohmann::json opt(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

nlohmann::json to_json(const TunerParams& p) {
  return {{"policy", std::string(to_string(p.policy))},
          {"static_ns", p.static_ns},
          {"target_wake_latency_ns", p.target_wake_latency_ns},
          {"percentile", p.percentile},
          {"max_poll_cpu_percent", p.max_poll_cpu_percent},
          {"min_ns", p.min_ns},
          {"max_ns", p.max_ns},
          {"start_ns", p.start_ns},
          {"ladder_factor", p.ladder_factor},
          {"min_benefit_ratio", p.min_benefit_ratio},
          {"min_periods", p.min_periods},
          {"max_dwell_ticks", p.max_dwell_ticks},
          {"grow_halts_per_second", p.grow_halts_per_second},
          {"closed_loop_min_gain", p.closed_loop_min_gain},
          {"load_change_factor", p.load_change_factor},
          {"resweep_after_ticks", p.resweep_after_ticks},
          {"hysteresis", p.hysteresis},
          {"steal_backoff_percent", p.steal_backoff_percent},
          {"manage_grow_start", p.manage_grow_start},
          {"kernel_grow_start_ns", p.kernel_grow_start_ns},
          {"min_latency_samples", p.min_latency_samples}};
}

}  // namespace

Controller::Controller(ControllerOptions options, haltpoll::WorkerPool* pool)
    : Controller(std::move(options), make_pool_access(pool)) {}

Controller::Controller(ControllerOptions options, std::unique_ptr<PoolAccess> pool)
    : options_(std::move(options)), pool_(std::move(pool)), tuner_(options_.tuner) {
  build_edges();
}

Controller::~Controller() {
  // A daemon that forgets stop() must still leave the kernel as it found it.
  try {
    stop();
  } catch (...) {
  }
}

std::string Controller::state_file() const {
  std::string dir = options_.state_dir.empty() ? std::string(".") : options_.state_dir;
  if (dir.back() == '/') dir.pop_back();
  return dir + "/haltpoll-params.json";
}

void Controller::build_edges() {
  std::vector<int> cpus = options_.cpus;
  if (cpus.empty() && pool_) cpus = pool_->cpus();
  sensors_ = std::make_unique<Sensors>(options_.sysfs_root, cpus);
  // The eBPF signals (exact outcomes, IPI skips, per-CPU limits, idle-period histograms) where the
  // kernel allows them; without them the counters alone drive the tuner and status says why.
  if (options_.kernel_signals) sensors_->enable_idle_trace();
  actuator_ = std::make_unique<SysfsHaltpollParams>(options_.sysfs_root, state_file());
}

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
  if (options_.kernel_mode && kernel_.active && degraded_reason_.empty()) return Target::kernel;
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
      tuner_.set_params(options_.tuner);
    }
  }
  tuner_.reset(in_force);
  sensors_->sample(steady_ns());  // prime the deltas
  if (pool_) last_pool_ = pool_->counters();
  start_prober();
  started_ = true;
}

Decision Controller::tick() {
  std::lock_guard lock(mu_);
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
  const Target t = target_locked();
  Observation obs = sensors_->sample(steady_ns());
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
    penalty_.add(drained, cpus_idle, steady_ns());
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
    obs.penalty_age_s = static_cast<double>(steady_ns() - *penalty_.measured_at_ns()) / 1e9;
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

  Decision d = tuner_.decide(obs);
  if (d.changed()) {
    // Samples taken under the old value must not be judged as the new one's.
    carried_probes_.reset();
    carried_ticks_ = 0;
    if (t == Target::kernel) {
      auto r = actuator_->set_poll_ns(d.guest_halt_poll_ns);
      if (r.ok) {
        d.applied_kernel = true;
      } else {
        degraded_reason_ = r.message;
        d.reason += "; not applied: " + r.message + " (degraded to observe)";
        spdlog::error("kernel mode degraded to observe: {}", r.message);
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
      degraded_reason_ = r.message;
      d.reason += "; grow_start not applied: " + r.message + " (degraded to observe)";
      spdlog::error("kernel mode degraded to observe: {}", r.message);
    }
  }
  last_obs_ = obs;

  nlohmann::json e = {{"tick", d.tick},
                      {"time_ms", unix_ms()},
                      {"target", target_name(t)},
                      {"action", to_string(d.action)},
                      {"previous_ns", d.previous_ns},
                      {"guest_halt_poll_ns", d.guest_halt_poll_ns},
                      {"reason", d.reason},
                      {"poll_cpu_percent", opt(d.poll_cpu_percent)},
                      {"wake_latency_ns", opt(d.wake_latency_ns)},
                      {"latency_samples", obs.latency_samples},
                      {"steal_percent", opt(d.steal_percent)},
                      {"applied_kernel", d.applied_kernel},
                      {"applied_pool", d.applied_pool},
                      {"grow_start_ns", d.grow_start_ns ? nlohmann::json(*d.grow_start_ns) : nlohmann::json(nullptr)},
                      {"applied_grow_start", d.applied_grow_start},
                      {"tuner_phase", std::string(tuner_.phase())},
                      {"halt_exit_penalty_ns", opt(obs.halt_exit_penalty_ns)}};
  log_.push_back(std::move(e));
  while (log_.size() > std::max<std::size_t>(options_.decision_log_size, 1)) log_.pop_front();
  if (d.changed()) spdlog::info("tuner: {} -> {} ns: {}", d.previous_ns, d.guest_halt_poll_ns, d.reason);
  else spdlog::debug("tuner: hold {} ns: {}", d.guest_halt_poll_ns, d.reason);
  return d;
}

void Controller::restore_locked() {
  if (!actuator_->has_saved_originals()) return;
  auto r = actuator_->restore();
  if (!r.ok) spdlog::error("restoring the haltpoll parameters: {} (state file {} kept for the next start)",
                           r.message, actuator_->state_file());
  else spdlog::info("restored the original haltpoll parameters");
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
  const bool edges_changed = old.sysfs_root != options.sysfs_root || old.state_dir != options.state_dir ||
                             old.cpus != options.cpus;
  if (edges_changed || (old.kernel_mode && !options.kernel_mode)) restore_locked();
  if (edges_changed) {
    build_edges();
    if (started_) {
      auto rec = actuator_->recover();
      if (!rec.message.empty()) recovery_message_ = rec.message;
      sensors_->sample(steady_ns());
    }
  }
  degraded_reason_.clear();  // a reload is the way to retry kernel mode after a failed write
  detect_locked();
  if (!(old.tuner == options_.tuner)) tuner_.set_params(options_.tuner);
  if (started_ && (edges_changed || old.probe_rate_hz != options.probe_rate_hz)) start_prober();
}

nlohmann::json Controller::decisions() const {
  std::lock_guard lock(mu_);
  nlohmann::json a = nlohmann::json::array();
  for (const auto& e : log_) a.push_back(e);
  return a;
}

std::optional<Observation> Controller::last_observation() const {
  std::lock_guard lock(mu_);
  return last_obs_;
}

std::string Controller::cpuidle_status() const {
  std::lock_guard lock(mu_);
  return sensors_->cpuidle_status();
}

nlohmann::json Controller::status() const {
  std::lock_guard lock(mu_);
  const Target t = target_locked();
  nlohmann::json params = nlohmann::json::object();
  for (const char* name : SysfsHaltpollParams::kParams) {
    auto v = actuator_->read(name);
    params[name] = v ? nlohmann::json(*v) : nlohmann::json(nullptr);
  }
  std::string inactive;
  if (!options_.kernel_mode) inactive = "mode is observe";
  else if (!kernel_.active) inactive = kernel_.reason;
  else if (!degraded_reason_.empty()) inactive = "write failed: " + degraded_reason_;

  nlohmann::json s;
  s["requested_mode"] = options_.kernel_mode ? "kernel" : "observe";
  s["effective_mode"] = t == Target::kernel ? "kernel" : "observe";
  s["kernel_mode_inactive_reason"] = inactive.empty() ? nlohmann::json(nullptr) : nlohmann::json(inactive);
  s["tuning_target"] = target_name(t);
  s["started"] = started_;
  s["ticks"] = ticks_;
  s["interval_ms"] = options_.interval_ms;
  s["kernel"] = {{"params_dir", actuator_->params_dir()},
                 {"params_present", kernel_.params_present},
                 {"cpuidle_driver", kernel_.driver},
                 {"cpuidle_governor", kernel_.governor},
                 {"haltpoll_active", kernel_.active},
                 {"reason", kernel_.reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(kernel_.reason)},
                 {"params", params},
                 {"originals_saved", actuator_->has_saved_originals()},
                 {"state_file", actuator_->state_file()},
                 {"degraded_reason",
                  degraded_reason_.empty() ? nlohmann::json(nullptr) : nlohmann::json(degraded_reason_)},
                 {"recovery", recovery_message_.empty() ? nlohmann::json(nullptr) : nlohmann::json(recovery_message_)}};
  nlohmann::json sweep = nlohmann::json::array();
  for (const auto& r : tuner_.sweep_measurements())
    sweep.push_back({{"ns", r.ns},
                     {"ticks", r.ticks},
                     {"wake_ups_per_second", r.wake_rate()},
                     {"halts_per_second", r.halt_rate()},
                     {"poll_hits_per_second", r.per_s(r.hits)},
                     {"ipi_skipped_per_second", r.ipi_skipped ? nlohmann::json(r.per_s(*r.ipi_skipped)) : nlohmann::json(nullptr)},
                     {"mean_poll_cpu_percent", r.mean_poll_cpu_percent()},
                     {"max_poll_cpu_percent", r.max_poll_cpu_percent()}});
  nlohmann::json penalty = {{"ns", opt(penalty_.penalty_ns())},
                            {"age_s", penalty_.measured_at_ns()
                                          ? nlohmann::json(static_cast<double>(steady_ns() - *penalty_.measured_at_ns()) / 1e9)
                                          : nlohmann::json(nullptr)},
                            {"source", penalty_.source()}};
  s["tuner"] = {{"current_ns", tuner_.current_ns()},
                {"phase", std::string(tuner_.phase())},
                {"ladder_ns", tuner_.ladder()},
                {"last_sweep", sweep},
                {"halt_exit_penalty", penalty},
                {"growth_ceiling_ns",
                 tuner_.growth_ceiling_ns() ? nlohmann::json(*tuner_.growth_ceiling_ns()) : nlohmann::json(nullptr)},
                {"params", to_json(tuner_.params())}};
  s["sensors"] = {{"cpus", sensors_->cpus()},
                  {"cpuidle_available", sensors_->cpuidle_available()},
                  {"cpuidle", sensors_->cpuidle_status()},
                  {"kernel_signals", sensors_->kernel_signals_status()},
                  {"kernel_signals_missing", sensors_->kernel_signals_missing().empty()
                                                 ? nlohmann::json(nullptr)
                                                 : nlohmann::json(sensors_->kernel_signals_missing())}};
  if (pool_) s["pool"] = {{"cpus", pool_->cpus()}, {"window_cap_ns", pool_->window_cap_ns()}};
  else s["pool"] = nullptr;
  if (prober_) {
    nlohmann::json per = nlohmann::json::array();
    for (const auto& c : prober_->totals()) {
      const auto all = c.all();
      per.push_back({{"cpu", c.cpu},
                     {"samples", all.count()},
                     {"poll_hit", c.poll_hit.count()},
                     {"park_path", c.park_path.count()},
                     {"queued", c.queued},
                     {"rejected", c.rejected},
                     {"poll_hit_p50_ns", c.poll_hit.interpolated_percentile(0.5)},
                     {"park_path_p50_ns", c.park_path.interpolated_percentile(0.5)},
                     {"p50_ns", all.interpolated_percentile(0.5)},
                     {"p99_ns", all.interpolated_percentile(0.99)}});
    }
    s["probes"] = {{"rate_hz_per_cpu", prober_->rate_hz()}, {"per_cpu", per}};
  } else {
    s["probes"] = {{"rate_hz_per_cpu", 0}, {"reason", pool_ ? "probe rate is 0" : "no worker pool"}};
  }
  if (last_obs_) {
    const auto& o = *last_obs_;
    s["last_observation"] = {{"tick", o.tick},
                             {"elapsed_ns", o.elapsed_ns},
                             {"current_ns", o.current_ns},
                             {"poll_cpu_percent", opt(o.poll_cpu_percent)},
                             {"mean_poll_cpu_percent", opt(o.mean_poll_cpu_percent)},
                             {"wakes_per_second", opt(o.wakes_per_second)},
                             {"wake_latency_ns", opt(o.wake_latency_ns)},
                             {"latency_samples", o.latency_samples},
                             {"steal_percent", opt(o.steal_percent)},
                             {"cpu_source", o.cpu_source},
                             {"latency_source", o.latency_source},
                             {"probe_poll_hits", o.probes.poll_hits},
                             {"probe_park_path", o.probes.park_path},
                             {"probe_queued", o.probes.queued}};
  } else {
    s["last_observation"] = nullptr;
  }
  return s;
}

}  // namespace haltpolld
