// The io.haltpolld varlink interface: method signatures, parameter checking and reply shapes, over
// an abstract ControlBackend that the Daemon implements (and the unit tests fake). No I/O here: the
// server decodes a Call, the Registry dispatches it, these handlers ask the backend. All handlers
// run on the daemon's single control thread, so the backend needs no locking of its own.
#pragma once

#include "config.hpp"
#include "control/stats.hpp"
#include "varlink/io_haltpolld.hpp"
#include "varlink/varlink.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace haltpolld {

struct ReloadResult {
  Config config;
  std::vector<std::string> restart_required;  // paths whose new value waits for a restart
};

class ControlBackend {
 public:
  virtual ~ControlBackend() = default;
  virtual nlohmann::json status() = 0;
  virtual StatsSnapshot stats() = 0;
  virtual Config config() const = 0;
  virtual std::string config_file() const = 0;
  // Validates `partial` on top of the running config and applies it whole, or throws ConfigError
  // and changes nothing.
  virtual Config set_config(const nlohmann::json& partial) = 0;
  // Re-reads the config file (plus the command-line overrides); throws ConfigError and keeps the
  // running config when the file is refused.
  virtual ReloadResult reload() = 0;
  virtual void reset_stats() = 0;
  // Takes the parameters back from another writer (Controller::take_over()):
  // {took_over, message, other_writer}.
  virtual nlohmann::json take_over() = 0;
  virtual nlohmann::json decisions(std::size_t limit) = 0;
};

// Adds the io.haltpolld methods to `registry`. `backend` must outlive the registry's use.
void register_control_interface(varlink::Registry& registry, ControlBackend& backend);

// Bounds of Watch.
inline constexpr unsigned kWatchMinIntervalMs = 100;
inline constexpr unsigned kWatchMaxIntervalMs = 60000;
inline constexpr unsigned kWatchDefaultIntervalMs = 1000;

}  // namespace haltpolld
