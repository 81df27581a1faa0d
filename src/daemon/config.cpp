#include "config.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace haltpolld {

using nlohmann::json;

ConfigError::ConfigError(std::string path, std::string reason)
    : std::runtime_error((path.empty() ? std::string("config") : "config " + path) + ": " + reason),
      path_(std::move(path)),
      reason_(std::move(reason)) {}

std::string_view to_string(Mode m) noexcept { return m == Mode::kernel ? "kernel" : "observe"; }

namespace {

// Walks one JSON object, remembering which keys were consumed so that unknown keys are refused.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path) : j_(j), path_(std::move(path)) {
    if (!j_.is_object()) throw ConfigError(path_, "expected an object, got " + std::string(j_.type_name()));
  }
  ~ObjectReader() = default;
  ObjectReader(const ObjectReader&) = delete;
  ObjectReader& operator=(const ObjectReader&) = delete;

  // Returns the member or nullptr when absent.
  const json* member(const char* key) {
    seen_.insert(key);
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  std::string child(const char* key) const { return path_ + "/" + key; }

  void string(const char* key, std::string& out) {
    if (const json* v = member(key)) {
      if (!v->is_string()) throw ConfigError(child(key), "expected a string, got " + std::string(v->type_name()));
      out = v->get<std::string>();
    }
  }
  template <class F>
  void string_one_of(const char* key, F&& assign, std::initializer_list<const char*> allowed) {
    std::string s;
    bool present = j_.contains(key);
    string(key, s);
    if (!present) return;
    for (const char* a : allowed)
      if (s == a) return assign(s);
    std::string list;
    for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
    throw ConfigError(child(key), "\"" + s + "\" is not one of: " + list);
  }
  // An integer in [lo, hi]; floats, negative numbers and booleans are refused.
  template <class T>
  void integer(const char* key, T& out, std::uint64_t lo, std::uint64_t hi) {
    const json* v = member(key);
    if (!v) return;
    if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() && v->get<double>() >= 0 &&
        v->get<double>() < 1.8e19) {
      // 1e6 written as a float literal: accept when it is a whole number.
      check_range(key, static_cast<std::uint64_t>(v->get<double>()), lo, hi);
      out = static_cast<T>(v->get<double>());
      return;
    }
    // Parsed text gives unsigned numbers for non-negative integers; JSON built in code gives signed.
    if (v->is_number_integer() && !v->is_number_unsigned() && v->get<std::int64_t>() < 0)
      throw ConfigError(child(key), "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                        "], got " + v->dump());
    if (!v->is_number_integer())
      throw ConfigError(child(key), "expected an unsigned integer, got " + std::string(v->type_name()));
    std::uint64_t x = v->get<std::uint64_t>();
    check_range(key, x, lo, hi);
    out = static_cast<T>(x);
  }
  void number(const char* key, double& out, double lo, double hi) {
    const json* v = member(key);
    if (!v) return;
    if (!v->is_number()) throw ConfigError(child(key), "expected a number, got " + std::string(v->type_name()));
    double x = v->get<double>();
    if (!(x >= lo && x <= hi)) {
      std::ostringstream o;
      o << "expected a number in [" << lo << ", " << hi << "], got " << x;
      throw ConfigError(child(key), o.str());
    }
    out = x;
  }
  void boolean(const char* key, bool& out) {
    if (const json* v = member(key)) {
      if (!v->is_boolean()) throw ConfigError(child(key), "expected true or false, got " + std::string(v->type_name()));
      out = v->get<bool>();
    }
  }
  template <class F>
  void object(const char* key, F&& read) {
    if (const json* v = member(key)) {
      ObjectReader sub(*v, child(key));
      read(sub);
      sub.finish();
    }
  }
  void finish() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key())) throw ConfigError(path_ + "/" + it.key(), "unknown key");
  }

 private:
  void check_range(const char* key, std::uint64_t x, std::uint64_t lo, std::uint64_t hi) const {
    if (x < lo || x > hi)
      throw ConfigError(child(key), "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                        "], got " + std::to_string(x));
  }

  const json& j_;
  std::string path_;
  std::set<std::string> seen_;
};

unsigned parse_octal_mode(const std::string& s, const std::string& path) {
  if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos)
    throw ConfigError(path, "expected an octal file mode such as \"0660\", got \"" + s + "\"");
  return static_cast<unsigned>(std::stoul(s, nullptr, 8));
}

std::string format_octal_mode(unsigned m) {
  std::ostringstream o;
  o << '0' << std::oct << m;
  return o.str();
}

constexpr unsigned kMaxCpu = 8191;

// "0-3,6": comma-separated CPU numbers or ranges a-b with a <= b. Returns the CPUs in order.
std::vector<unsigned> parse_cpu_list(const std::string& s, const std::string& path) {
  auto bad = [&] {
    throw ConfigError(path, "expected \"all\" or a CPU list such as \"0-3,6\", got \"" + s + "\"");
  };
  std::set<unsigned> cpus;
  std::istringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789-") != std::string::npos) bad();
    auto dash = item.find('-');
    std::string a = dash == std::string::npos ? item : item.substr(0, dash);
    std::string b = dash == std::string::npos ? item : item.substr(dash + 1);
    if (a.empty() || b.empty() || a.size() > 4 || b.size() > 4 || b.find('-') != std::string::npos) bad();
    unsigned lo = static_cast<unsigned>(std::stoul(a)), hi = static_cast<unsigned>(std::stoul(b));
    if (lo > hi || hi > kMaxCpu) bad();
    for (unsigned c = lo; c <= hi; ++c) cpus.insert(c);
  }
  if (cpus.empty() || (!s.empty() && s.back() == ',')) bad();
  return {cpus.begin(), cpus.end()};
}

void require_absolute(const std::string& value, const char* path, bool allow_empty) {
  if (value.empty() && allow_empty) return;
  if (value.empty() || value.front() != '/') throw ConfigError(path, "expected an absolute path");
  if (value.find('\0') != std::string::npos) throw ConfigError(path, "contains a NUL byte");
}

constexpr std::uint64_t kMaxWindowNs = 100'000'000;
constexpr double kMinProbeRateHz = 0.01;  // one probe per CPU every 100 s  // 100 ms: far beyond any useful poll window

}  // namespace

Config apply_config_json(const json& j, const Config& base) {
  Config c = base;
  ObjectReader root(j, "");
  root.string_one_of("mode", [&](const std::string& s) { c.mode = s == "kernel" ? Mode::kernel : Mode::observe; },
                     {"observe", "kernel"});
  root.string("cpus", c.cpus);
  if (c.cpus != "all") parse_cpu_list(c.cpus, "/cpus");
  root.string("sysfs_root", c.sysfs_root);
  require_absolute(c.sysfs_root, "/sysfs_root", false);
  root.string("state_dir", c.state_dir);
  require_absolute(c.state_dir, "/state_dir", true);
  root.object("socket", [&](ObjectReader& r) {
    r.string("path", c.socket.path);
    if (c.socket.path.empty()) throw ConfigError("/socket/path", "must not be empty");
    // sun_path holds 108 bytes including the terminating NUL.
    if (c.socket.path.size() > 107) throw ConfigError("/socket/path", "longer than 107 bytes (AF_UNIX limit)");
    if (c.socket.path.find('\0') != std::string::npos) throw ConfigError("/socket/path", "contains a NUL byte");
    std::string mode = format_octal_mode(c.socket.mode);
    r.string("mode", mode);
    c.socket.mode = parse_octal_mode(mode, "/socket/mode");
    if (c.socket.mode > 0777) throw ConfigError("/socket/mode", "only permission bits (at most 0777) are allowed");
    r.string("admin_group", c.socket.admin_group);
    r.integer("max_connections", c.socket.max_connections, 1, 4096);
    r.integer("max_connections_per_uid", c.socket.max_connections_per_uid, 1, 4096);
    r.integer("idle_timeout_ms", c.socket.idle_timeout_ms, 100, 86'400'000);
  });
  root.object("pool", [&](ObjectReader& r) {
    r.string_one_of("policy", [&](const std::string& s) { c.pool.policy = s; }, {"haltpoll", "adaptive"});
    r.integer("window_cap_ns", c.pool.window_cap_ns, 0, kMaxWindowNs);
    r.integer("guest_halt_poll_ns", c.pool.guest_halt_poll_ns, 0, kMaxWindowNs);
    r.integer("guest_halt_poll_grow", c.pool.guest_halt_poll_grow, 0, 1024);
    r.integer("guest_halt_poll_shrink", c.pool.guest_halt_poll_shrink, 0, 1024);
    r.integer("guest_halt_poll_grow_start", c.pool.guest_halt_poll_grow_start, 0, kMaxWindowNs);
    r.boolean("guest_halt_poll_allow_shrink", c.pool.guest_halt_poll_allow_shrink);
  });
  root.object("probe", [&](ObjectReader& r) { r.number("rate_hz", c.probe.rate_hz, 0.0, 10000.0); });
  // A rate near 0 makes the mean gap (1/rate) overflow the prober's nanosecond clock arithmetic.
  if (c.probe.rate_hz > 0 && c.probe.rate_hz < kMinProbeRateHz)
    throw ConfigError("/probe/rate_hz", "expected 0 (off) or a rate in [0.01, 10000]");
  root.object("tuner", [&](ObjectReader& r) {
    r.string_one_of("policy", [&](const std::string& s) { c.tuner.policy = s; },
                    {"static", "latency", "budget", "balanced"});
    r.integer("interval_ms", c.tuner.interval_ms, 100, 3'600'000);
    r.integer("target_wake_latency_ns", c.tuner.target_wake_latency_ns, 100, kMaxWindowNs);
    r.number("max_poll_cpu_percent", c.tuner.max_poll_cpu_percent, 0.0, 100.0);
    r.integer("min_ns", c.tuner.min_ns, 0, kMaxWindowNs);
    r.integer("max_ns", c.tuner.max_ns, 0, kMaxWindowNs);
  });
  if (c.tuner.min_ns > c.tuner.max_ns)
    throw ConfigError("/tuner/min_ns", "must not exceed tuner.max_ns (" + std::to_string(c.tuner.max_ns) + ")");
  root.object("metrics", [&](ObjectReader& r) {
    r.string("textfile", c.metrics.textfile);
    require_absolute(c.metrics.textfile, "/metrics/textfile", true);
    // node_exporter reads only *.prom; requiring the name keeps the daemon's own files (state,
    // socket, lock) and any system file out of reach of a rename that runs as root every tick.
    const std::string& t = c.metrics.textfile;
    const std::string name = t.substr(t.rfind('/') + 1);
    if (!t.empty() && (name.size() <= 5 || name.front() == '.' || !name.ends_with(".prom")))
      throw ConfigError("/metrics/textfile", "expected a file name ending in .prom (not starting with a dot), got \"" + name + "\"");
  });
  root.object("log", [&](ObjectReader& r) {
    r.string_one_of("level", [&](const std::string& s) { c.log.level = s; },
                    {"trace", "debug", "info", "warn", "error", "critical", "off"});
  });
  root.finish();
  return c;
}

Config parse_config(std::string_view text, const Config& base) {
  json j;
  try {
    j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    throw ConfigError("", std::string("not valid JSON: ") + e.what());
  }
  return apply_config_json(j, base);
}

Config load_config_file(const std::string& file, const Config& base) {
  std::ifstream in(file);
  if (!in) throw ConfigError("", "cannot read " + file);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), base);
}

nlohmann::json to_json(const Config& c) {
  return json{{"mode", to_string(c.mode)},
              {"cpus", c.cpus},
              {"sysfs_root", c.sysfs_root},
              {"state_dir", c.state_dir},
              {"socket",
               {{"path", c.socket.path},
                {"mode", format_octal_mode(c.socket.mode)},
                {"admin_group", c.socket.admin_group},
                {"max_connections", c.socket.max_connections},
                {"max_connections_per_uid", c.socket.max_connections_per_uid},
                {"idle_timeout_ms", c.socket.idle_timeout_ms}}},
              {"pool",
               {{"policy", c.pool.policy},
                {"window_cap_ns", c.pool.window_cap_ns},
                {"guest_halt_poll_ns", c.pool.guest_halt_poll_ns},
                {"guest_halt_poll_grow", c.pool.guest_halt_poll_grow},
                {"guest_halt_poll_shrink", c.pool.guest_halt_poll_shrink},
                {"guest_halt_poll_grow_start", c.pool.guest_halt_poll_grow_start},
                {"guest_halt_poll_allow_shrink", c.pool.guest_halt_poll_allow_shrink}}},
              {"probe", {{"rate_hz", c.probe.rate_hz}}},
              {"tuner",
               {{"policy", c.tuner.policy},
                {"interval_ms", c.tuner.interval_ms},
                {"target_wake_latency_ns", c.tuner.target_wake_latency_ns},
                {"max_poll_cpu_percent", c.tuner.max_poll_cpu_percent},
                {"min_ns", c.tuner.min_ns},
                {"max_ns", c.tuner.max_ns}}},
              {"metrics", {{"textfile", c.metrics.textfile}}},
              {"log", {{"level", c.log.level}}}};
}

const std::vector<std::string>& restart_only_paths() {
  static const std::vector<std::string> paths = {
      "/mode", "/cpus", "/sysfs_root", "/state_dir", "/socket/path", "/socket/mode", "/socket/admin_group",
      "/metrics/textfile", "/pool/policy",
      "/pool/guest_halt_poll_ns", "/pool/guest_halt_poll_grow", "/pool/guest_halt_poll_shrink",
      "/pool/guest_halt_poll_grow_start", "/pool/guest_halt_poll_allow_shrink"};
  return paths;
}

std::vector<std::string> restart_only_differences(const Config& a, const Config& b) {
  json ja = to_json(a), jb = to_json(b);
  std::vector<std::string> out;
  for (const auto& p : restart_only_paths()) {
    json::json_pointer ptr(p);
    if (ja.at(ptr) != jb.at(ptr)) out.push_back(p);
  }
  return out;
}

std::vector<unsigned> expand_cpus(const std::string& spec, const std::vector<unsigned>& allowed) {
  if (spec == "all") return allowed;
  std::vector<unsigned> cpus = parse_cpu_list(spec, "/cpus");
  for (unsigned cpu : cpus)
    if (std::find(allowed.begin(), allowed.end(), cpu) == allowed.end())
      throw ConfigError("/cpus", "CPU " + std::to_string(cpu) + " is not in this process's affinity mask");
  return cpus;
}

std::string effective_state_dir(const Config& c) {
  if (!c.state_dir.empty()) return c.state_dir;
  auto slash = c.socket.path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return c.socket.path.substr(0, slash);
}

}  // namespace haltpolld
