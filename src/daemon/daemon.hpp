// The haltpolld process: takes the single-instance lock, owns the control io_context (one thread:
// signals, the control server, the tuner tick, the watchdog, the metrics textfile), the worker pool
// and the Controller (sensor → tuner → actuator). run() returns when SIGINT/SIGTERM arrives; the
// kernel parameters are restored, the socket removed and the pool stopped before it returns.
// SIGHUP and the Reload method re-read the config file atomically or keep the running one.
// Asio stays in daemon.cpp (pimpl) so that this header is cheap to include.
#pragma once

#include "config.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace haltpolld {

// Exit codes of haltpolld, documented in docs/operations.md and haltpolld(8). Scoped: a code
// becomes the process's status only through exit_status, at main's return.
enum class ExitCode : int { ok = 0, runtime_error = 1, usage_error = 2, config_error = 3, already_running = 4 };
constexpr int exit_status(ExitCode c) noexcept { return static_cast<int>(c); }

class Daemon {
 public:
  // `overrides` are the command-line settings (same shape as the file); they are re-applied on
  // top of the file at every reload.
  Daemon(Config config, std::string config_file = {}, nlohmann::json overrides = nlohmann::json::object());
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until SIGINT/SIGTERM; returns the process's exit code.
  ExitCode run();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace haltpolld
