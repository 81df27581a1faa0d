// haltpolld configuration: the typed form of haltpolld.json, its defaults and its validation.
// Parsing is pure (text in, Config or ConfigError out) so that start-up, SIGHUP, the Reload and
// SetConfig methods and the fuzzer share one code path; an error names the JSON path and the
// reason, and the caller keeps its previous Config. No threads, no shared state: a Config is a
// plain value that the daemon copies and swaps on its control thread.
#pragma once

#include "haltpoll/governor.hpp"
#include "tuner_params.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace haltpolld {

enum class Mode { observe, kernel };

struct Config {
  Mode mode = Mode::observe;
  std::string cpus = "all";  // "all" or a list such as "0-3,6"
  std::string sysfs_root = "/";
  std::string state_dir;     // crash-recovery state; empty: the directory of socket.path
  struct Socket {
    std::string path = "/run/haltpolld/io.haltpolld";
    unsigned mode = 0660;
    std::string admin_group;  // empty: only uid 0 (and the daemon's own uid) may change settings
    unsigned max_connections = 128;
    unsigned max_connections_per_uid = 32;  // uid 0 and the daemon's uid are not limited
    unsigned idle_timeout_ms = 60000;
    unsigned calls_per_second_per_uid = 200;  // 0: unlimited; admins are never limited
    unsigned call_burst_per_uid = 400;
    friend bool operator==(const Socket&, const Socket&) = default;
  } socket;
  struct Pool {
    std::string policy = "haltpoll";  // "haltpoll" | "adaptive"
    std::uint64_t window_cap_ns = 200000;
    // The kernel governor's parameters (pool.guest_halt_poll_* in the file), used by the pool's
    // `haltpoll` window policy; guest_halt_poll_ns is also the static tuner policy's value.
    haltpoll::HaltpollParams haltpoll;
    friend bool operator==(const Pool&, const Pool&) = default;
  } pool;
  struct Probe {
    double rate_hz = 10.0;  // per CPU; 0 disables probing
    friend bool operator==(const Probe&, const Probe&) = default;
  } probe;
  // The tuner's parameters (TunerParams, whose table binds the tuner.* keys) and the daemon's
  // tick intervals.
  struct Tuner : TunerParams {
    unsigned interval_ms = 1000;
    // The tick interval while the tuner sweeps (if shorter); a confirmation takes a whole interval_ms tick.
    unsigned sweep_interval_ms = 250;
    friend bool operator==(const Tuner&, const Tuner&) = default;
  } tuner;
  struct Metrics {
    std::string textfile;  // empty: no textfile
    friend bool operator==(const Metrics&, const Metrics&) = default;
  } metrics;
  struct Log {
    std::string level = "info";
    friend bool operator==(const Log&, const Log&) = default;
  } log;

  friend bool operator==(const Config&, const Config&) = default;
};

// A refused configuration: `path` is a JSON-pointer-like path ("/socket/mode", "" for the root).
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
// Same, from an already parsed JSON value (SetConfig, command-line overrides).
Config apply_config_json(const nlohmann::json& j, const Config& base = Config{});

// Reads and parses a file; a file that cannot be read is a ConfigError with an empty path.
Config load_config_file(const std::string& file, const Config& base = Config{});

nlohmann::json to_json(const Config& c);
std::string_view to_string(Mode m) noexcept;

// Keys whose new value only takes effect after a restart (socket, CPU set, trees, pool shape).
// Returns the JSON paths where `a` and `b` differ in such keys.
std::vector<std::string> restart_only_differences(const Config& a, const Config& b);
// All restart-only paths, for documentation and GetConfig.
const std::vector<std::string>& restart_only_paths();
// `next` with the restart-only settings of `running`: what a reload applies now.
Config keep_restart_only(Config next, const Config& running);

// Every key's JSON path ("/socket/path"), in schema order; for documentation checks.
const std::vector<std::string>& config_key_paths();
// The values a string key with a fixed set accepts ("/mode", "/log/level", ...); empty otherwise.
std::vector<std::string> config_choices(std::string_view path);

// Expands "all" (from the affinity mask `allowed`) or a list such as "0-3,6" into CPU numbers.
// A listed CPU outside `allowed` is an error (ConfigError on "/cpus").
std::vector<unsigned> expand_cpus(const std::string& spec, const std::vector<unsigned>& allowed);

// The directory that holds the lock file and the crash-recovery state.
std::string effective_state_dir(const Config& c);

}  // namespace haltpolld
