#include "daemon.hpp"

#include "control/control_server.hpp"
#include "control/control_service.hpp"
#include "control/controller_json.hpp"
#include "fleet_metrics.hpp"
#include "tuning/controller.hpp"
#include "instance_lock.hpp"
#include "logging.hpp"
#include "control/prometheus.hpp"
#include "sysfs/file_io.hpp"
#include "sysfs/sysfs_edges.hpp"
#include "notify.hpp"
#include "varlink/varlink.hpp"

#include "haltpoll/affinity.hpp"
#include "haltpoll/barrier.hpp"
#include "haltpoll/version.hpp"
#include "haltpoll/worker_pool.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <csignal>
#include <ctime>
#include <optional>

namespace haltpolld {

namespace asio = boost::asio;
using boost::system::error_code;
using nlohmann::json;

namespace {

// The library's affinity_cpus() (cgroup cpusets included), as the config's CPU numbers.
std::vector<unsigned> affinity_cpus() {
  std::vector<unsigned> cpus;
  for (int c : haltpoll::affinity_cpus()) cpus.push_back(static_cast<unsigned>(c));
  return cpus;
}

std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Wake-latency buckets of the exposition: 1-2-5 steps from 100 ns to 100 ms. Fixed bounds keep the
// Prometheus series stable; the pool's own histogram is much finer.
const std::vector<std::uint64_t>& exposition_bounds() {
  static const std::vector<std::uint64_t> b = [] {
    std::vector<std::uint64_t> v;
    for (std::uint64_t decade = 100; decade <= 100'000'000; decade *= 10)
      for (std::uint64_t m : {1, 2, 5})
        if (decade * m <= 100'000'000) v.push_back(decade * m);
    return v;
  }();
  return b;
}

}  // namespace

struct Daemon::Impl final : ControlBackend {
  Impl(Config c, std::string file, json ov)
      : config_(std::move(c)),
        config_file_(std::move(file)),
        overrides_(std::move(ov)),
        signals_(io_, SIGINT, SIGTERM, SIGHUP),
        tick_timer_(io_),
        watchdog_timer_(io_),
        registry_(varlink::ServiceInfo{"haltpolld", "haltpolld", HALTPOLL_VERSION_STRING,
                                       "https://github.com/haltpolld/haltpolld"}) {}

  int run();

  // ControlBackend
  json status() override;
  StatsSnapshot stats() override;
  Config config() const override { return config_; }
  std::string config_file() const override { return config_file_; }
  Config set_config(const json& partial) override;
  ReloadResult reload() override;
  void reset_stats() override;
  json take_over() override;
  json decisions(std::size_t limit) override;

 private:
  void wait_for_signal();
  void schedule_tick();
  void schedule_watchdog(std::chrono::microseconds period);
  void tick();
  void apply(const Config& next);
  std::optional<gid_t> admin_gid_of(const Config& c) const;
  ControllerOptions controller_options(const Config& c) const;
  ControlServerOptions server_options(const Config& c) const;
  std::string status_line() const;
  void write_textfile();
  void remove_textfile();
  bool take_locks();

  Config config_;
  std::string config_file_;
  json overrides_;
  asio::io_context io_;
  asio::signal_set signals_;
  asio::steady_timer tick_timer_;
  asio::steady_timer watchdog_timer_;
  varlink::Registry registry_;
  std::vector<InstanceLock> locks_;
  // The textfile's directory, opened once: every write is an openat/renameat into it.
  std::optional<DirectoryHandle> textfile_dir_;
  WrittenFile textfile_written_;
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<haltpoll::WorkerPool> pool_;
  std::unique_ptr<Controller> controller_;
  std::vector<unsigned> cpus_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::uint64_t ticks_ = 0;
  std::uint64_t reloads_ = 0;
  std::uint64_t reload_failures_ = 0;
  std::string textfile_error_;
  // Refreshed every tick, so that GetStats (the hot read) neither locks the controller nor reads sysfs.
  std::string effective_mode_ = "observe";
  KernelHaltpollParams kernel_;
  FleetMetrics fleet_;
  KernelSignalsStats kernel_signals_;  // the last tick's kernel signals and their running totals
  void refresh_cached_state();
};

std::optional<gid_t> Daemon::Impl::admin_gid_of(const Config& c) const {
  if (c.socket.admin_group.empty()) return std::nullopt;
  auto gid = resolve_group(c.socket.admin_group);
  if (!gid) throw ConfigError("/socket/admin_group", "no group named \"" + c.socket.admin_group + "\" on this system");
  return gid;
}

ControlServerOptions Daemon::Impl::server_options(const Config& c) const {
  ControlServerOptions o;
  o.path = c.socket.path;
  o.mode = c.socket.mode;
  o.admin_gid = admin_gid_of(c);
  o.max_connections = c.socket.max_connections;
  o.max_connections_per_uid = c.socket.max_connections_per_uid;
  o.idle_timeout_ms = c.socket.idle_timeout_ms;
  o.calls_per_second_per_uid = c.socket.calls_per_second_per_uid;
  o.call_burst_per_uid = c.socket.call_burst_per_uid;
  return o;
}

ControllerOptions Daemon::Impl::controller_options(const Config& c) const {
  ControllerOptions o;
  o.kernel_mode = c.mode == Mode::kernel;
  for (unsigned cpu : cpus_) o.cpus.push_back(static_cast<int>(cpu));
  o.tuner.policy = c.tuner.policy;
  o.tuner.static_ns = c.pool.haltpoll.guest_halt_poll_ns;
  o.tuner.target_wake_latency_ns = static_cast<double>(c.tuner.target_wake_latency_ns);
  o.tuner.max_poll_cpu_percent = c.tuner.max_poll_cpu_percent;
  o.tuner.min_ns = static_cast<std::uint32_t>(c.tuner.min_ns);
  o.tuner.max_ns = static_cast<std::uint32_t>(c.tuner.max_ns);
  o.tuner.min_benefit_ratio = c.tuner.min_benefit_ratio;
  o.tuner.manage_grow_start = c.tuner.manage_grow_start;
  o.tuner.reset_limits = c.tuner.reset_limits;
  o.tuner.steady_trace_every = c.tuner.steady_trace_every;
  o.probe_rate_hz = c.probe.rate_hz;
  o.interval_ms = c.tuner.interval_ms;
  return o;
}

void Daemon::Impl::wait_for_signal() {
  signals_.async_wait([this](const error_code& ec, int signo) {
    if (ec) return;
    if (signo == SIGHUP) {
      spdlog::info("received SIGHUP, reloading {}", config_file_);
      try {
        auto r = reload();
        if (!r.restart_required.empty())
          spdlog::warn("reload: {} keep their running value until a restart", json(r.restart_required).dump());
      } catch (const ConfigError& e) {
        // reload() has logged the refusal; the running config stays.
      }
      return wait_for_signal();
    }
    spdlog::info("received {}, stopping", signo == SIGINT ? "SIGINT" : "SIGTERM");
    io_.stop();
  });
}

void Daemon::Impl::schedule_tick() {
  // Faster while the tuner sweeps: a rung is judged on its counters (min_periods idle periods),
  // which a busy load fills in a fraction of a second, so a sweep takes seconds, not 7 intervals.
  unsigned ms = config_.tuner.interval_ms;
  if (controller_ && controller_->searching()) ms = std::min(ms, config_.tuner.sweep_interval_ms);
  tick_timer_.expires_after(std::chrono::milliseconds(ms));
  tick_timer_.async_wait([this](const error_code& ec) {
    if (ec) return;
    tick();
    schedule_tick();
  });
}

void Daemon::Impl::schedule_watchdog(std::chrono::microseconds period) {
  watchdog_timer_.expires_after(period);
  watchdog_timer_.async_wait([this, period](const error_code& ec) {
    if (ec) return;
    // Pinging from the control thread proves that the loop that serves clients and ticks is alive.
    notify::watchdog();
    schedule_watchdog(period);
  });
}

void Daemon::Impl::refresh_cached_state() {
  effective_mode_ = std::string(to_string(config_.mode));
  std::optional<ControllerStatus> st;
  if (controller_) {
    st = controller_->status();
    effective_mode_ = st->kernel_effective ? "kernel" : "observe";
  }
  kernel_ = read_kernel_haltpoll_params(config_.sysfs_root);
  fleet_.refresh(config_.sysfs_root, cpus_, st);
}

void Daemon::Impl::tick() {
  ++ticks_;
  if (controller_) {
    try {
      fleet_.record(controller_->tick());
    } catch (const std::exception& e) {
      spdlog::error("tuner tick failed: {}", e.what());
    }
    if (auto o = controller_->last_observation()) kernel_signals_.record(o->tick, o->kernel, o->steal_percent);
    kernel_signals_.cpuidle_status = controller_->cpuidle_status();
  }
  refresh_cached_state();
  write_textfile();
  notify::status(status_line());
}

void Daemon::Impl::write_textfile() {
  const std::string& path = config_.metrics.textfile;
  if (path.empty()) return;
  const auto slash = path.rfind('/');
  int e = 0;
  if (!textfile_dir_) textfile_dir_ = DirectoryHandle::open(slash == 0 ? "/" : path.substr(0, slash), e);
  if (textfile_dir_) {
    e = textfile_dir_->replace(path.substr(slash + 1), render_prometheus(stats()), {.mode = 0644}, &textfile_written_);
  }
  const std::string err = e == 0 ? std::string() : errno_message("replace", path, e);
  if (err != textfile_error_) {
    // Log a failure once, and its recovery once, not every tick.
    if (err.empty()) spdlog::info("metrics textfile {} written again", path);
    else spdlog::warn("metrics textfile: {}", err);
    textfile_error_ = err;
  }
}

void Daemon::Impl::remove_textfile() {
  // Only the file this process wrote: whatever has replaced it since is not ours to delete.
  if (textfile_dir_ && textfile_written_.valid()) {
    const std::string& path = config_.metrics.textfile;
    textfile_dir_->remove_if_same(path.substr(path.rfind('/') + 1), textfile_written_);
  }
  textfile_written_ = WrittenFile();
}

std::string Daemon::Impl::status_line() const {
  std::string mode = std::string(to_string(config_.mode));
  std::string line = mode + " mode, " + std::to_string(cpus_.size()) + " CPUs";
  if (controller_) {
    const ControllerStatus s = controller_->status();
    line = std::string(s.kernel_effective ? "kernel" : "observe") + " mode, " + std::to_string(cpus_.size()) + " CPUs";
    line += ", tuner at " + std::to_string(s.tuner.current_ns) + " ns";
  }
  return line;
}

void Daemon::Impl::apply(const Config& next) {
  if (next.log.level != config_.log.level) setup_logging(next.log.level);
  if (server_) server_->update(server_options(next));
  if (pool_ && next.pool.window_cap_ns != config_.pool.window_cap_ns) pool_->set_window_cap_ns(next.pool.window_cap_ns);
  bool interval_changed = next.tuner.interval_ms != config_.tuner.interval_ms ||
                          next.tuner.sweep_interval_ms != config_.tuner.sweep_interval_ms;
  Config old = config_;
  config_ = next;
  if (controller_ && controller_options(next).tuner != controller_options(old).tuner) controller_->update(controller_options(next));
  else if (controller_ && (next.probe.rate_hz != old.probe.rate_hz || interval_changed))
    controller_->update(controller_options(next));
  if (interval_changed) schedule_tick();
  refresh_cached_state();
  spdlog::info("config applied: {}", to_json(config_).dump());
}

Config Daemon::Impl::set_config(const json& partial) {
  Config next = apply_config_json(partial, config_);
  auto diff = restart_only_differences(config_, next);
  if (!diff.empty()) throw ConfigError(diff.front(), "takes effect only after a restart");
  (void)admin_gid_of(next);
  apply(next);
  return config_;
}

ReloadResult Daemon::Impl::reload() {
  notify::reloading();
  try {
    Config fresh = load_config_file(config_file_, Config{});
    fresh = apply_config_json(overrides_, fresh);
    auto diff = restart_only_differences(config_, fresh);
    Config next = keep_restart_only(fresh, config_);
    (void)admin_gid_of(next);
    apply(next);
    ++reloads_;
    notify::ready(status_line());
    return {config_, diff};
  } catch (const ConfigError& e) {
    ++reload_failures_;
    spdlog::error("reload refused, keeping the running config: {}", e.what());
    notify::ready(status_line());
    throw;
  }
}

void Daemon::Impl::reset_stats() {
  if (pool_) pool_->reset_stats();
  kernel_signals_.totals.reset();
  spdlog::info("statistics reset");
}

json Daemon::Impl::take_over() {
  if (!controller_) return {{"took_over", false}, {"message", "no tuner runs"}, {"other_writer", nullptr}};
  const Controller::TakeOver r = controller_->take_over();
  refresh_cached_state();
  return {{"took_over", r.took_over}, {"message", r.message}, {"other_writer", other_writer_to_json(r.previous)}};
}

json Daemon::Impl::decisions(std::size_t limit) {
  std::vector<DecisionRecord> d = controller_ ? controller_->decisions() : std::vector<DecisionRecord>();
  if (limit > 0 && d.size() > limit) d.erase(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() - limit));
  return decisions_to_json(d);
}

StatsSnapshot Daemon::Impl::stats() {
  StatsSnapshot s;
  s.version = HALTPOLL_VERSION_STRING;
  s.mode = effective_mode_;
  s.backend = haltpoll::to_string(haltpoll::active_backend());
  s.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  s.monotonic_ns = monotonic_ns();
  s.kernel = kernel_;
  s.fleet = fleet_.series();
  s.kernel_signals = kernel_signals_;
  s.tuner_ticks = ticks_;
  s.config_reloads = reloads_;
  s.config_reload_failures = reload_failures_;
  if (server_) {
    auto c = server_->counters();
    s.control_connections = c.connections_open;
    s.control_connections_total = c.connections_total;
    s.control_requests_total = c.requests_total;
    s.control_errors_total = c.errors_total;
    s.control_rejected_total = c.rejected_total;
  }
  if (pool_) {
    s.pin_failures = pool_->pin_failures().size();
    const auto& bounds = exposition_bounds();
    for (const haltpoll::WorkerStats& w : pool_->all_stats()) s.cpus.push_back(CpuStats::of(w, bounds));
    return s;
  }
  for (unsigned cpu : cpus_) {
    CpuStats c;
    c.cpu = cpu;
    s.cpus.push_back(c);
  }
  return s;
}

json Daemon::Impl::status() {
  json s;
  s["version"] = HALTPOLL_VERSION_STRING;
  s["pid"] = ::getpid();
  s["requested_mode"] = to_string(config_.mode);
  s["mode"] = to_string(config_.mode);
  s["mode_reason"] = config_.mode == Mode::observe ? "observe requested by the configuration" : "kernel mode active";
  json controller = nullptr;
  if (controller_) {
    const ControllerStatus c = controller_->status();
    s["mode"] = c.kernel_effective ? "kernel" : "observe";
    if (!c.kernel_mode_inactive_reason.empty() && config_.mode == Mode::kernel) s["mode_reason"] = c.kernel_mode_inactive_reason;
    controller = status_to_json(c);
  }
  s["backend"] = haltpoll::to_string(haltpoll::active_backend());
  s["cpus"] = cpus_;
  s["uptime_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  s["config_file"] = config_file_;
  s["kernel"] = to_json(read_kernel_haltpoll_params(config_.sysfs_root));
  {
    // Which kernel signals the daemon has, and why not: the summary of GetStats' kernel_signals.
    const json ks = kernel_signals_to_json(kernel_signals_, std::nullopt, false);
    s["kernel_signals"] = {{"available", ks["available"]}, {"reason", ks["reason"]}, {"counters", ks["counters"]},
                           {"cpuidle", ks["cpuidle"]}, {"bpf", ks["bpf"]}};
  }
  json pool = nullptr;
  if (pool_) {
    json failures = json::array();
    for (const auto& [cpu, why] : pool_->pin_failures()) failures.push_back({{"cpu", cpu}, {"reason", why}});
    pool = {{"cpus", pool_->cpus()}, {"policy", config_.pool.policy}, {"window_cap_ns", pool_->window_cap_ns()},
            {"pin_failures", failures}};
  }
  s["pool"] = pool;
  s["controller"] = controller;
  s["other_writer"] = controller.is_object() ? controller["other_writer"] : json(nullptr);
  auto c = server_ ? server_->counters() : ControlServerCounters{};
  s["control"] = {{"socket", config_.socket.path},
                  {"connections", c.connections_open},
                  {"requests_total", c.requests_total},
                  {"rate_limited_total", c.rate_limited_total},
                  {"max_connections", config_.socket.max_connections}};
  s["metrics_textfile"] = config_.metrics.textfile.empty() ? json(nullptr) : json(config_.metrics.textfile);
  if (!textfile_error_.empty()) s["metrics_textfile_error"] = textfile_error_;
  return s;
}

bool Daemon::Impl::take_locks() {
  std::string why;
  auto lock = InstanceLock::acquire(config_.socket.path + ".lock", why);
  if (!lock) {
    spdlog::critical("{}", why);
    return false;
  }
  locks_.push_back(std::move(*lock));
  // The resources themselves: whatever the socket, one daemon per state directory and sysfs root.
  const std::string state_dir = effective_state_dir(config_);
  std::error_code ec;
  if (!std::filesystem::exists(state_dir, ec) && std::filesystem::create_directories(state_dir, ec))
    ::chmod(state_dir.c_str(), 0700);
  std::vector<std::pair<std::string, const char*>> dirs = {{state_dir, "state directory"}};
  if (config_.sysfs_root != state_dir) dirs.emplace_back(config_.sysfs_root, "sysfs root");
  for (const auto& [dir, what] : dirs) {
    auto dir_lock = InstanceLock::acquire_directory(dir, what, why);
    if (!dir_lock) {
      spdlog::critical("{}", why);
      return false;
    }
    locks_.push_back(std::move(*dir_lock));
  }
  return true;
}

int Daemon::Impl::run() {
  // Before the first log line: a client that hangs up, or a reader of stderr that went away (a
  // pipe to a logger), must not end the daemon without a restore.
  ::signal(SIGPIPE, SIG_IGN);
  spdlog::info("haltpolld {} starting", HALTPOLL_VERSION_STRING);
  spdlog::info("effective config: {}", to_json(config_).dump());
  if (!take_locks()) return ExitCode::already_running;

  ControlServerOptions server_opts;
  try {
    cpus_ = expand_cpus(config_.cpus, affinity_cpus());
    server_opts = server_options(config_);
  } catch (const ConfigError& e) {
    spdlog::critical("{}", e.what());
    return ExitCode::config_error;
  }

  try {
    haltpoll::PoolOptions po;
    for (unsigned cpu : cpus_) po.cpus.push_back(static_cast<int>(cpu));
    po.policy = config_.pool.policy;
    po.params.haltpoll = config_.pool.haltpoll;
    po.window_cap_ns = config_.pool.window_cap_ns;
    // The probes are the daemon's latency samples (a few per second): stamp every one of them.
    po.latency_sample_every = 1;
    pool_ = std::make_unique<haltpoll::WorkerPool>(po);
    for (const auto& [cpu, reason] : pool_->pin_failures()) spdlog::warn("worker of CPU {} runs unpinned: {}", cpu, reason);
    // The real kernel's edges: its files under sysfs_root, the originals in the state directory.
    ControllerOptions co = controller_options(config_);
    GuestEdges edges = sysfs_edges(config_.sysfs_root, effective_state_dir(config_), co.cpus);
    controller_ = std::make_unique<Controller>(std::move(co), std::move(edges), pool_.get());
    controller_->start();
    register_control_interface(registry_, *this);
    server_ = std::make_unique<ControlServer>(io_, registry_, server_opts);
    server_->start();
  } catch (const std::exception& e) {
    spdlog::critical("cannot start: {}", e.what());
    if (controller_) controller_->stop();
    return ExitCode::runtime_error;
  }

  refresh_cached_state();
  wait_for_signal();
  schedule_tick();
  if (auto period = notify::watchdog_period()) {
    spdlog::info("systemd watchdog: pinging every {} ms", period->count() / 1000);
    notify::watchdog();
    schedule_watchdog(*period);
  }
  write_textfile();
  spdlog::info("listening on {} ({} CPUs, mode {})", config_.socket.path, cpus_.size(), to_string(config_.mode));
  notify::ready(status_line());

  io_.run();

  notify::stopping();
  // Clients first: their descriptors must not starve the restore (EMFILE), and nobody may change
  // a setting while the originals go back.
  if (server_) server_->stop();
  notify::status("stopping: restoring kernel parameters");
  if (controller_) {
    try {
      controller_->stop();
    } catch (const std::exception& e) {
      spdlog::error("restoring the kernel parameters failed: {}", e.what());
    }
  }
  if (pool_) pool_->shutdown(haltpoll::ShutdownMode::cancel);
  // A stale textfile would keep reporting the last values as if the daemon still ran.
  remove_textfile();
  spdlog::info("stopped");
  return ExitCode::ok;
}

Daemon::Daemon(Config config, std::string config_file, json overrides)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(config_file), std::move(overrides))) {}

Daemon::~Daemon() = default;

int Daemon::run() { return impl_->run(); }

}  // namespace haltpolld
