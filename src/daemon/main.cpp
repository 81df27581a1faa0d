// haltpolld entry point: command line (CLI11) → config → Daemon.
#include "config.hpp"
#include "daemon.hpp"
#include "instance_lock.hpp"
#include "logging.hpp"
#include "sim/loop/simulate_guest.hpp"

#include "idle_record.hpp"
#include "sysfs/actuator.hpp"

#include "haltpoll/version.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

using haltpolld::ExitCode;

namespace {

// Subcommands other than running the daemon: each adds itself to the command line and returns
// what runs it once the command line chose it. A new one is one more line here.
using AddSubcommand = std::function<int()> (*)(CLI::App&);
// `haltpolld record`: the eBPF program in record mode (src/bpf/idle_record.hpp). Exit codes: 0,
// 2 bad arguments, 3 kernel signals unavailable (the reason on stderr), 4 output not writable.
std::function<int()> add_record_command(CLI::App& parent) {
  auto* app = parent.add_subcommand(
      "record", "capture every CPU's idle periods and the kernel's poll-limit changes (eBPF; needs "
                "CAP_BPF and CAP_PERFMON) in the text format `haltpolld simulate` reads");
  auto o = std::make_shared<haltpolld::RecordOptions>();
  app->add_option("--seconds", o->seconds, "how long to record, in (0, 86400]")
      ->required()
      ->check(CLI::Range(1e-3, 86400.0));
  app->add_option("--output", o->output, "file to write ('-' for stdout); replaced only when the recording succeeds")
      ->required();
  return [o] { return haltpolld::run_record(*o, std::cerr); };
}

// `haltpolld --restore`: the unit's ExecStopPost. After a daemon that did not stop cleanly (SIGKILL,
// a crash, the watchdog), puts back the originals its state file holds, exactly as the next start
// would, so that stopping the unit without a restart leaves nothing changed. Nothing to do after a
// clean stop (the daemon removed the file). Refuses while a daemon holds the instance's locks.
ExitCode restore_originals(const haltpolld::Config& config) {
  const std::string state_dir = haltpolld::effective_state_dir(config);
  std::error_code ec;
  if (!std::filesystem::is_directory(state_dir, ec)) return ExitCode::ok;  // no state file to put back
  // A running daemon holds its state directory's lock for as long as it runs.
  std::string why;
  const auto lock = haltpolld::InstanceLock::acquire_directory(state_dir, "state directory", why);
  if (!lock) {
    spdlog::critical("not restoring: {}", why);
    return ExitCode::already_running;
  }
  haltpolld::SysfsHaltpollParams params(config.sysfs_root, haltpolld::haltpoll_state_file(state_dir));
  const auto r = params.recover();
  if (!r.ok) {
    spdlog::error("{}", r.message);
    return ExitCode::runtime_error;
  }
  if (!r.message.empty()) spdlog::warn("{}", r.message);
  return ExitCode::ok;
}

constexpr AddSubcommand kSubcommands[] = {
    haltpolld::des::add_simulate_command_with_guest,
    add_record_command,
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"haltpolld: measures guest wake latency and tunes guest halt-polling"};
  app.set_version_flag("-V,--version", std::string("haltpolld ") + HALTPOLL_VERSION_STRING);
  app.require_subcommand(0, 1);
  struct Subcommand {
    const CLI::App* cli;
    std::function<int()> run;
  };
  std::vector<Subcommand> subcommands;
  for (auto add : kSubcommands) {
    auto run = add(app);
    subcommands.push_back({app.get_subcommands({}).back(), std::move(run)});
  }

  std::string config_file = HALTPOLLD_DEFAULT_CONFIG_FILE;
  std::string mode, socket_path, sysfs_root, log_level;
  bool foreground = false, check_config = false, restore = false;
  auto* config_opt = app.add_option("-c,--config", config_file, "configuration file")->capture_default_str();
  app.add_option("--mode", mode, "override mode")->check(CLI::IsMember(haltpolld::config_choices("/mode")));
  app.add_option("--socket", socket_path, "override socket.path");
  app.add_option("--sysfs-root", sysfs_root, "override sysfs_root (a fake tree for tests)");
  app.add_option("--log-level", log_level, "override log.level")
      ->check(CLI::IsMember(haltpolld::config_choices("/log/level")));
  app.add_flag("-f,--foreground", foreground, "stay in the foreground (haltpolld never forks; accepted for clarity)");
  app.add_flag("--check-config", check_config, "validate the configuration, print the effective one as JSON and exit");
  app.add_flag("--restore", restore,
               "put back the haltpoll parameters and governor saved by a daemon that did not stop cleanly, then "
               "exit (the unit's ExecStopPost)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return exit_status(rc == 0 ? ExitCode::ok : ExitCode::usage_error);
  }
  (void)foreground;
  for (const auto& sub : subcommands)
    if (sub.cli->parsed()) return sub.run();

  haltpolld::Config config;
  nlohmann::json overrides = nlohmann::json::object();
  try {
    config = haltpolld::load_config_file(config_file, config);
    // Flags override the file; run them through the same validator.
    if (!mode.empty()) overrides["mode"] = mode;
    if (!socket_path.empty()) overrides["socket"]["path"] = socket_path;
    if (!sysfs_root.empty()) overrides["sysfs_root"] = sysfs_root;
    if (!log_level.empty()) overrides["log"]["level"] = log_level;
    config = haltpolld::apply_config_json(overrides, config);
  } catch (const haltpolld::ConfigError& e) {
    fmt::print(stderr, "haltpolld: {}{}\n", e.what(),
               config_opt->count() == 0 ? " (use --config to name another file)" : "");
    return exit_status(ExitCode::config_error);
  }

  if (check_config) {
    fmt::print("{}\n", haltpolld::to_json(config).dump(2));
    return exit_status(ExitCode::ok);
  }

  try {
    haltpolld::setup_logging(config.log.level);
    if (restore) return exit_status(restore_originals(config));
    haltpolld::Daemon daemon(config, config_file, overrides);
    return exit_status(daemon.run());
  } catch (const std::exception& e) {
    spdlog::critical("fatal: {}", e.what());
    return exit_status(ExitCode::runtime_error);
  }
}
