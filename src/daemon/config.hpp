// haltpolld configuration: the typed form of haltpolld.json, its defaults and its validation.
// Parsing is pure (text in, Config or ConfigError out) so that start-up, SIGHUP, the Reload and
// SetConfig methods and the fuzzer share one code path; an error names the JSON path and the
// reason, and the caller keeps its previous Config.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <stdexcept>
#include <string>
#include <string_view>

namespace haltpolld {

enum class Mode { observe, kernel };

struct Config {
  Mode mode = Mode::observe;
  std::string cpus = "all";   // "all" or a list such as "0-3,6"
  std::string sysfs_root = "/";
  struct Socket {
    std::string path = "/run/haltpolld/io.haltpolld";
    unsigned mode = 0660;
    std::string admin_group;  // empty: only uid 0 may change settings
    friend bool operator==(const Socket&, const Socket&) = default;
  } socket;
  struct Log {
    std::string level = "info";
    friend bool operator==(const Log&, const Log&) = default;
  } log;

  friend bool operator==(const Config&, const Config&) = default;
};

// A refused configuration: `path` is a JSON pointer-like path ("/socket/mode", "" for the root).
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string path, std::string reason);
  const std::string& path() const noexcept { return path_; }
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string path_;
  std::string reason_;
};

// Parses JSON text (comments allowed) on top of `base`: keys that are absent keep base's value.
// Throws ConfigError on syntax errors, unknown keys, wrong types and out-of-range values.
Config parse_config(std::string_view text, const Config& base = Config{});

// Reads and parses a file; a file that cannot be read is a ConfigError with an empty path.
Config load_config_file(const std::string& file, const Config& base = Config{});

nlohmann::json to_json(const Config& c);
std::string_view to_string(Mode m) noexcept;

}  // namespace haltpolld
