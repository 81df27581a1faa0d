// The io.haltpolld varlink interface: method signatures, parameter checking and reply shapes, over
// an abstract ControlBackend that the Daemon implements (and the unit tests fake). No I/O here: the
// server decodes a Call, the Registry dispatches it, these handlers ask the backend. All handlers
// run on the daemon's single control thread, so the backend needs no locking of its own.
#pragma once

#include "config.hpp"
#include "control/stats.hpp"
#include "varlink/varlink.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace haltpolld {

inline constexpr const char* kInterface = "io.haltpolld";

// io.haltpolld errors.
namespace errors {
inline constexpr const char* config_refused = "io.haltpolld.ConfigRefused";      // (path, reason, file?)
inline constexpr const char* no_such_cpu = "io.haltpolld.NoSuchCpu";             // (cpu)
inline constexpr const char* restart_required = "io.haltpolld.RestartRequired";  // (paths)
inline constexpr const char* malformed_message = "io.haltpolld.MalformedMessage";  // (reason); then closed
inline constexpr const char* message_too_large = "io.haltpolld.MessageTooLarge";  // (limit); then closed
inline constexpr const char* too_many_connections = "io.haltpolld.TooManyConnections";  // (limit); then closed
inline constexpr const char* internal_error = "io.haltpolld.InternalError";      // (reason)
}  // namespace errors

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
  virtual nlohmann::json decisions(std::size_t limit) = 0;
};

// Adds the io.haltpolld methods to `registry`. `backend` must outlive the registry's use.
void register_control_interface(varlink::Registry& registry, ControlBackend& backend);

// Bounds of Watch.
inline constexpr unsigned kWatchMinIntervalMs = 100;
inline constexpr unsigned kWatchMaxIntervalMs = 60000;
inline constexpr unsigned kWatchDefaultIntervalMs = 1000;

}  // namespace haltpolld
