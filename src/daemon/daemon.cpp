#include "daemon.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <csignal>

namespace haltpolld {

Daemon::Daemon(Config config, std::string config_file)
    : config_(std::move(config)), config_file_(std::move(config_file)), signals_(io_, SIGINT, SIGTERM) {}

void Daemon::wait_for_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("received {}, stopping", signo == SIGINT ? "SIGINT" : "SIGTERM");
    io_.stop();
  });
}

int Daemon::run() {
  spdlog::info("effective config: {}", to_json(config_).dump());
  spdlog::info("mode {}", to_string(config_.mode));
  wait_for_signal();
  io_.run();
  spdlog::info("stopped");
  return 0;
}

}  // namespace haltpolld
