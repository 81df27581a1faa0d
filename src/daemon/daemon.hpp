// The haltpolld process: owns the control io_context, the signal handling and (as they land) the
// pool, the sensor → tuner → actuator loop and the control server. run() returns when a stop
// signal arrives; everything it changed on the system is put back before it returns.
#pragma once

#include "config.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

namespace haltpolld {

class Daemon {
 public:
  explicit Daemon(Config config, std::string config_file = {});
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Runs until SIGINT/SIGTERM; returns the process exit code.
  int run();

 private:
  void wait_for_signal();

  Config config_;
  std::string config_file_;
  boost::asio::io_context io_;
  boost::asio::signal_set signals_;
};

}  // namespace haltpolld
