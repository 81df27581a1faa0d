#include "daemon.hpp"

#include "control/control_server.hpp"
#include "control/control_service.hpp"
#include "control/controller_json.hpp"
#include "control/daemon_reports.hpp"
#include "control/prometheus.hpp"
#include "daemon_options.hpp"
#include "logging.hpp"
#include "metrics_textfile.hpp"
#include "notify.hpp"
#include "sysfs/sysfs_edges.hpp"
#include "tick_state.hpp"
#include "tuning/controller.hpp"
#include "varlink/varlink.hpp"

#include "haltpoll/barrier.hpp"
#include "haltpoll/clock.hpp"
#include "haltpoll/version.hpp"
#include "haltpoll/worker_pool.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <optional>

namespace haltpolld {

namespace asio = boost::asio;
using boost::system::error_code;
using nlohmann::json;

namespace {

// The stats' timestamp is the kernel's CLOCK_MONOTONIC, which a client compares with its own.
constexpr auto& monotonic_ns = haltpoll::clock_monotonic_ns;

}  // namespace

struct Daemon::Impl final : ControlBackend {
  Impl(Config c, std::string file, json ov)
      : config_(std::move(c)),
        config_file_(std::move(file)),
        overrides_(std::move(ov)),
        signals_(io_),
        tick_timer_(io_),
        watchdog_timer_(io_),
        registry_(varlink::ServiceInfo{"haltpolld", "haltpolld", HALTPOLL_VERSION_STRING,
                                       "https://github.com/haltpolld/haltpolld"}) {}

  ExitCode run();

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
  // SIGINT, SIGTERM and SIGHUP are blocked in every thread and read from a signalfd by the
  // control loop: no handler runs, so nothing can defer or lose the wake-up of the loop (under
  // ThreadSanitizer a handler-based signal_set sometimes never woke epoll_wait under load).
  bool take_signals();
  void wait_for_signal();
  void schedule_tick();
  void schedule_watchdog(std::chrono::microseconds period);
  void tick();
  void apply(const Config& next);
  ControllerOptions controller_options(const Config& c) const;
  std::string status_line() const;
  // Says in the journal what decides the polling besides the cap, when that changes.
  void log_overrides();
  std::string overrides_said_;
  void write_textfile();
  // One Controller::status() and what follows from it (control/daemon_snapshot.hpp).
  DaemonSnapshot take_snapshot() const;
  ShellFacts facts() const;

  Config config_;
  std::string config_file_;
  json overrides_;
  asio::io_context io_;
  asio::posix::stream_descriptor signals_;
  signalfd_siginfo siginfo_{};
  asio::steady_timer tick_timer_;
  asio::steady_timer watchdog_timer_;
  varlink::Registry registry_;
  std::vector<InstanceLock> locks_;
  MetricsTextfile textfile_;
  std::unique_ptr<ControlServer> server_;
  std::unique_ptr<haltpoll::WorkerPool> pool_;
  std::unique_ptr<Controller> controller_;
  std::vector<unsigned> cpus_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::uint64_t ticks_ = 0;
  std::uint64_t reloads_ = 0;
  std::uint64_t reload_failures_ = 0;
  TickState ticked_;  // the last tick's snapshot and what GetStats derives from it
};

ControllerOptions Daemon::Impl::controller_options(const Config& c) const {
  ControllerOptions o;
  o.kernel_mode = c.mode == Mode::kernel;
  for (unsigned cpu : cpus_) o.cpus.push_back(static_cast<int>(cpu));
  o.tuner = static_cast<const TunerParams&>(c.tuner);      // the configuration holds the tuner's parameters
  o.tuner.static_ns = c.pool.haltpoll.guest_halt_poll_ns;  // the static policy holds the configured cap
  o.probe_rate_hz = c.probe.rate_hz;
  o.interval_ms = c.tuner.interval_ms;
  return o;
}

bool Daemon::Impl::take_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  // Before any thread starts, so that every thread inherits the mask; a signal sent from here on
  // stays pending until the loop reads it.
  if (int e = ::pthread_sigmask(SIG_BLOCK, &set, nullptr); e != 0) {
    spdlog::critical("cannot block SIGINT, SIGTERM and SIGHUP: {}", std::strerror(e));
    return false;
  }
  const int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    spdlog::critical("cannot open a signalfd: {}", std::strerror(errno));
    return false;
  }
  signals_.assign(fd);
  return true;
}

void Daemon::Impl::wait_for_signal() {
  signals_.async_read_some(asio::buffer(&siginfo_, sizeof siginfo_), [this](const error_code& ec, std::size_t n) {
    if (ec == asio::error::operation_aborted) return;
    if (ec) {
      // The loop can no longer hear a stop request: stop now, restoring, rather than run deaf.
      spdlog::error("reading the signalfd failed: {}; stopping", ec.message());
      return io_.stop();
    }
    if (n != sizeof siginfo_) return wait_for_signal();
    const auto signo = static_cast<int>(siginfo_.ssi_signo);
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

DaemonSnapshot Daemon::Impl::take_snapshot() const {
  return make_snapshot(config_.mode, controller_ ? std::optional(controller_->status()) : std::nullopt, config_.sysfs_root);
}

void Daemon::Impl::tick() {
  ++ticks_;
  std::optional<ControllerStatus> st;
  if (controller_) {
    try {
      ticked_.record(controller_->tick());
      st = controller_->tick_status();  // what the tick read: no file read again
    } catch (const std::exception& e) {
      spdlog::error("tuner tick failed: {}", e.what());
    }
  }
  ticked_.refresh(st ? make_snapshot(config_.mode, std::move(st), config_.sysfs_root) : take_snapshot());
  log_overrides();
  write_textfile();
  notify::status(status_line());
}

void Daemon::Impl::log_overrides() {
  const auto& c = ticked_.snapshot().controller;
  std::string said;
  if (c && c->last_observation && c->last_observation->kernel.overrides)
    said = c->last_observation->kernel.overrides->summary();
  if (said == overrides_said_) return;
  if (!said.empty()) spdlog::warn("polling overrides: {}", said);
  else spdlog::info("polling overrides gone: the cap decides the polling of every CPU again");
  overrides_said_ = std::move(said);
}

void Daemon::Impl::write_textfile() {
  if (!config_.metrics.textfile.empty()) textfile_.write(config_.metrics.textfile, render_prometheus(stats()));
}

std::string Daemon::Impl::status_line() const { return daemon_status_line(ticked_.snapshot(), cpus_.size()); }

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
  ticked_.refresh(take_snapshot());
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
  ticked_.reset_totals();
  spdlog::info("statistics reset");
}

json Daemon::Impl::take_over() {
  if (!controller_) return {{"took_over", false}, {"message", "no tuner runs"}, {"other_writer", nullptr}};
  const Controller::TakeOver r = controller_->take_over();
  ticked_.refresh(take_snapshot());
  return {{"took_over", r.took_over}, {"message", r.message}, {"other_writer", other_writer_to_json(r.previous)}};
}

json Daemon::Impl::decisions(std::size_t limit) {
  std::vector<DecisionRecord> d = controller_ ? controller_->decisions() : std::vector<DecisionRecord>();
  if (limit > 0 && d.size() > limit) d.erase(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() - limit));
  return decisions_to_json(d);
}

ShellFacts Daemon::Impl::facts() const {
  ShellFacts f;
  f.version = HALTPOLL_VERSION_STRING;
  f.pid = static_cast<int>(::getpid());
  f.backend = haltpoll::to_string(haltpoll::active_backend());
  f.uptime_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  f.monotonic_ns = monotonic_ns();
  f.cpus = cpus_;
  f.config_file = config_file_;
  f.ticks = ticks_;
  f.reloads = reloads_;
  f.reload_failures = reload_failures_;
  if (server_) f.control = server_->counters();
  f.textfile_error = textfile_.error();
  return f;
}

StatsSnapshot Daemon::Impl::stats() { return daemon_stats(ticked_.snapshot(), ticked_.fleet(), ticked_.kernel_signals(), facts(), pool_.get()); }

json Daemon::Impl::status() {
  // A fresh snapshot: GetStatus shows the parameters as they are now, not as at the last tick.
  return daemon_status_json(config_, take_snapshot(), ticked_.kernel_signals(), facts(), pool_.get());
}

ExitCode Daemon::Impl::run() {
  // Before the first log line: a client that hangs up, or a reader of stderr that went away (a
  // pipe to a logger), must not end the daemon without a restore.
  ::signal(SIGPIPE, SIG_IGN);
  if (!take_signals()) return ExitCode::runtime_error;
  spdlog::info("haltpolld {} starting", HALTPOLL_VERSION_STRING);
  spdlog::info("effective config: {}", to_json(config_).dump());
  auto locks = take_instance_locks(config_);
  if (!locks) return ExitCode::already_running;
  locks_ = std::move(*locks);

  ControlServerOptions server_opts;
  try {
    cpus_ = configured_cpus(config_);
    server_opts = server_options(config_);
  } catch (const ConfigError& e) {
    spdlog::critical("{}", e.what());
    return ExitCode::config_error;
  }

  try {
    pool_ = std::make_unique<haltpoll::WorkerPool>(pool_options(config_, cpus_));
    for (const auto& [cpu, reason] : pool_->pin_failures()) spdlog::warn("worker of CPU {} runs unpinned: {}", cpu, reason);
    // The real kernel's edges: its files under sysfs_root, the originals in the state directory.
    ControllerOptions co = controller_options(config_);
    // With "all" the sensors follow the guest's online CPUs (hotplug) rather than the set at start.
    GuestEdges edges = sysfs_edges(config_.sysfs_root, effective_state_dir(config_),
                                   config_.cpus == "all" ? std::vector<int>{} : co.cpus);
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

  ticked_.refresh(take_snapshot());
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
  textfile_.remove(config_.metrics.textfile);
  spdlog::info("stopped");
  return ExitCode::ok;
}

Daemon::Daemon(Config config, std::string config_file, json overrides)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(config_file), std::move(overrides))) {}

Daemon::~Daemon() = default;

ExitCode Daemon::run() { return impl_->run(); }

}  // namespace haltpolld
