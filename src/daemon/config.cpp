#include "config.hpp"

#include "haltpoll/affinity.hpp"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>

namespace haltpolld {

using nlohmann::json;

std::string_view to_string(Policy p) noexcept {
  switch (p) {
    case Policy::static_value: return "static";
    case Policy::latency: return "latency";
    case Policy::budget: return "budget";
    case Policy::balanced: return "balanced";
  }
  return "?";
}

std::optional<Policy> policy_from_string(std::string_view s) noexcept {
  if (s == "static") return Policy::static_value;
  if (s == "latency") return Policy::latency;
  if (s == "budget") return Policy::budget;
  if (s == "balanced") return Policy::balanced;
  return std::nullopt;
}

ConfigError::ConfigError(std::string path, std::string reason)
    : std::runtime_error((path.empty() ? std::string("config") : "config " + path) + ": " + reason),
      path_(std::move(path)),
      reason_(std::move(reason)) {}

namespace {

// ---- value checks (beyond type and range) ----

constexpr auto kMaxWindowNs = static_cast<std::uint64_t>(kTunerMaxNs);  // 100 ms: far beyond any useful poll window
constexpr std::uint64_t kMaxFactor = 1024;

// "0-3,6": the kernel's CPU list format (haltpoll::parse_cpu_list). Returns the CPUs in order.
std::vector<unsigned> parse_cpu_list(const std::string& s, const std::string& path) {
  const auto cpus = haltpoll::parse_cpu_list(s);
  if (!cpus) throw ConfigError(path, "expected \"all\" or a CPU list such as \"0-3,6\", got \"" + s + "\"");
  return {cpus->begin(), cpus->end()};
}

void check_cpus(const std::string& v, const std::string& path) {
  if (v != "all") parse_cpu_list(v, path);
}
void check_absolute(const std::string& v, const std::string& path) {
  if (v.empty() || v.front() != '/') throw ConfigError(path, "expected an absolute path");
  if (v.find('\0') != std::string::npos) throw ConfigError(path, "contains a NUL byte");
}
void check_absolute_or_empty(const std::string& v, const std::string& path) {
  if (!v.empty()) check_absolute(v, path);
}
// node_exporter reads only *.prom; requiring the name keeps the daemon's own files (state, socket,
// lock) and any system file out of reach of a rename that runs as root every tick.
void check_textfile(const std::string& v, const std::string& path) {
  if (v.empty()) return;
  check_absolute(v, path);
  const std::string name = v.substr(v.rfind('/') + 1);
  if (name.size() <= 5 || name.front() == '.' || !name.ends_with(".prom"))
    throw ConfigError(path, "expected a file name ending in .prom (not starting with a dot), got \"" + name + "\"");
}
void check_socket_path(const std::string& v, const std::string& path) {
  if (v.empty()) throw ConfigError(path, "must not be empty");
  // sun_path holds 108 bytes including the terminating NUL.
  if (v.size() > 107) throw ConfigError(path, "longer than 107 bytes (AF_UNIX limit)");
  if (v.find('\0') != std::string::npos) throw ConfigError(path, "contains a NUL byte");
}

// ---- value kinds of the schema ----

struct Text {  // a string, optionally checked
  void (*check)(const std::string& value, const std::string& path) = nullptr;
};
struct Choice {  // a string from a fixed set
  std::vector<std::string> allowed;
};
template <class E>
struct Enum {  // a string naming one value of an enum
  std::vector<std::pair<std::string, E>> values;
};
struct Integer {  // an unsigned integer in [lo, hi]
  std::uint64_t lo, hi;
};
using Number = TunerBounds;  // a number in [lo, hi] (or an open end)
struct Flag {};       // true or false
struct FileMode {};   // an octal permission string such as "0660" (at most 0777)

const Enum<Mode>& mode_names() {
  static const Enum<Mode> e{{{"observe", Mode::observe}, {"kernel", Mode::kernel}}};
  return e;
}
// The tuner's policies under their names (the enum counts from 0; to_string gives "?" past the
// last one), so that a policy added to tuner_policy.hpp is accepted here without another list.
const Enum<Policy>& tuner_policy_names() {
  static const Enum<Policy> e = [] {
    Enum<Policy> r;
    for (int i = 0;; ++i) {
      const auto p = static_cast<Policy>(i);
      if (to_string(p) == "?") break;
      r.values.emplace_back(std::string(to_string(p)), p);
    }
    return r;
  }();
  return e;
}

// An integer bound of the tuner's table, which holds them as doubles.
std::uint64_t integer_bound(double x) {
  return x >= 1.8e19 ? std::numeric_limits<std::uint64_t>::max() : static_cast<std::uint64_t>(x);
}

// "an integer in [1, 3600]", "a number in (0, 100)": the words of every range error.
template <class T>
std::string expected_in(const TunerBounds& b) {
  const char open = b.lo_open ? '(' : '[', close = b.hi_open ? ')' : ']';
  if constexpr (std::is_integral_v<T>)
    return fmt::format("an integer in {}{}, {}{}", open, integer_bound(b.lo), integer_bound(b.hi), close);
  else
    return fmt::format("a number in {}{}, {}{}", open, b.lo, b.hi, close);
}

// The schema's kind of a tuner parameter of type T.
template <class T>
auto tuner_kind(const TunerBounds& b) {
  if constexpr (std::is_same_v<T, bool>)
    return Flag{};
  else if constexpr (std::is_same_v<T, Policy>)
    return tuner_policy_names();
  else if constexpr (std::is_integral_v<T>)
    return Integer{integer_bound(b.lo), integer_bound(b.hi)};
  else
    return Number{b};
}

enum class Apply : bool { live, restart };

// THE SCHEMA: every key once, in file order. v(path, apply, accessor, kind); the accessor gives
// the field of any Config (const or not), so one visitor can read a key of two configs.
// A new key is one line here, plus its line in config/haltpolld.json and haltpolld.json(5)
// (config_test checks both).
template <class V>
void visit_schema(V&& v) {
  using enum Apply;
  // clang-format off
  v("/mode", restart, [](auto& c) -> auto& { return c.mode; }, mode_names());
  v("/cpus", restart, [](auto& c) -> auto& { return c.cpus; }, Text{check_cpus});
  v("/sysfs_root", restart, [](auto& c) -> auto& { return c.sysfs_root; }, Text{check_absolute});
  v("/state_dir", restart, [](auto& c) -> auto& { return c.state_dir; }, Text{check_absolute_or_empty});
  v("/socket/path", restart, [](auto& c) -> auto& { return c.socket.path; }, Text{check_socket_path});
  v("/socket/mode", restart, [](auto& c) -> auto& { return c.socket.mode; }, FileMode{});
  v("/socket/admin_group", restart, [](auto& c) -> auto& { return c.socket.admin_group; }, Text{});
  v("/socket/max_connections", live, [](auto& c) -> auto& { return c.socket.max_connections; }, Integer{1, 4096});
  v("/socket/max_connections_per_uid", live, [](auto& c) -> auto& { return c.socket.max_connections_per_uid; }, Integer{1, 4096});
  v("/socket/idle_timeout_ms", live, [](auto& c) -> auto& { return c.socket.idle_timeout_ms; }, Integer{100, 86'400'000});
  v("/socket/calls_per_second_per_uid", live, [](auto& c) -> auto& { return c.socket.calls_per_second_per_uid; }, Integer{0, 1'000'000});
  v("/socket/call_burst_per_uid", live, [](auto& c) -> auto& { return c.socket.call_burst_per_uid; }, Integer{1, 1'000'000});
  v("/pool/policy", restart, [](auto& c) -> auto& { return c.pool.policy; }, Choice{{"haltpoll", "adaptive"}});
  v("/pool/window_cap_ns", live, [](auto& c) -> auto& { return c.pool.window_cap_ns; }, Integer{0, kMaxWindowNs});
  // clang-format on
  // pool.guest_halt_poll_*: the library's one list of the kernel governor's parameters.
  haltpoll::for_each_haltpoll_param([&](const char* name, auto member, haltpoll::HaltpollParamKind kind) {
    auto field = [member](auto& c) -> auto& { return c.pool.haltpoll.*member; };
    const std::string path = std::string("/pool/") + name;
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(haltpoll::HaltpollParams{}.*member)>, bool>)
      v(path, restart, field, Flag{});
    else
      v(path, restart, field, Integer{0, kind == haltpoll::HaltpollParamKind::factor ? kMaxFactor : kMaxWindowNs});
  });
  // clang-format off
  v("/probe/rate_hz", live, [](auto& c) -> auto& { return c.probe.rate_hz; }, Number{0.0, 10000.0});
  v("/tuner/interval_ms", live, [](auto& c) -> auto& { return c.tuner.interval_ms; }, Integer{100, 3'600'000});
  v("/tuner/sweep_interval_ms", live, [](auto& c) -> auto& { return c.tuner.sweep_interval_ms; }, Integer{100, 3'600'000});
  // clang-format on
  // The rest of tuner.*: the TunerParams fields the tuner's table (tuner_params.hpp) marks `config`.
  for_each_tuner_param([&](const char* name, auto member, TunerParamUse use, const TunerBounds& bounds) {
    if (use != TunerParamUse::config) return;
    using T = std::remove_cvref_t<decltype(TunerParams{}.*member)>;
    v(std::string("/tuner/") + name, live, [member](auto& c) -> auto& { return c.tuner.*member; },
      tuner_kind<T>(bounds));
  });
  // clang-format off
  v("/metrics/textfile", restart, [](auto& c) -> auto& { return c.metrics.textfile; }, Text{check_textfile});
  v("/log/level", live, [](auto& c) -> auto& { return c.log.level; }, Choice{{"trace", "debug", "info", "warn", "error", "critical", "off"}});
  // clang-format on
}

// Checks across keys, after every key was read.
void check_whole(const Config& c) {
  // A rate near 0 makes the mean gap (1/rate) overflow the prober's nanosecond clock arithmetic.
  if (c.probe.rate_hz > 0 && c.probe.rate_hz < 0.01)
    throw ConfigError("/probe/rate_hz", "expected 0 (off) or a rate in [0.01, 10000]");
  if (auto e = check_tuner_params(c.tuner)) throw ConfigError("/tuner/" + e->name, e->reason);
}

// ---- reading one value ----

std::string list_of(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string read_string(const json& v, const std::string& path) {
  if (!v.is_string()) throw ConfigError(path, "expected a string, got " + std::string(v.type_name()));
  return v.get<std::string>();
}

// An integer in [lo, hi]; negative numbers, fractions and booleans are refused. A whole number
// written as a float literal (1e6) is accepted.
std::uint64_t read_integer(const json& v, const std::string& path, std::uint64_t lo, std::uint64_t hi) {
  const auto expected = [&] { return fmt::format("expected an integer in [{}, {}], got {}", lo, hi, v.dump()); };
  std::uint64_t x = 0;
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::floor(d) == d && d >= 0 && d < 1.8e19)) throw ConfigError(path, expected());
    x = static_cast<std::uint64_t>(d);
  } else if (v.is_number_integer()) {
    // Parsed text gives unsigned numbers for non-negative integers; JSON built in code gives signed.
    if (!v.is_number_unsigned() && v.get<std::int64_t>() < 0) throw ConfigError(path, expected());
    x = v.get<std::uint64_t>();
  } else {
    throw ConfigError(path, "expected an unsigned integer, got " + std::string(v.type_name()));
  }
  if (x < lo || x > hi) throw ConfigError(path, fmt::format("expected an integer in [{}, {}], got {}", lo, hi, x));
  return x;
}

unsigned parse_octal_mode(const std::string& s, const std::string& path) {
  if (s.empty() || s.size() > 4 || s.find_first_not_of("01234567") != std::string::npos)
    throw ConfigError(path, "expected an octal file mode such as \"0660\", got \"" + s + "\"");
  const auto m = static_cast<unsigned>(std::stoul(s, nullptr, 8));
  if (m > 0777) throw ConfigError(path, "only permission bits (at most 0777) are allowed");
  return m;
}

std::string format_octal_mode(unsigned m) { return fmt::format("0{:o}", m); }

template <class T>
void read_value(const json& v, const std::string& path, T& out, const Text& k) {
  out = read_string(v, path);
  if (k.check) k.check(out, path);
}
inline void read_value(const json& v, const std::string& path, std::string& out, const Choice& k) {
  std::string s = read_string(v, path);
  if (std::find(k.allowed.begin(), k.allowed.end(), s) == k.allowed.end())
    throw ConfigError(path, "\"" + s + "\" is not one of: " + list_of(k.allowed));
  out = std::move(s);
}
template <class E>
void read_value(const json& v, const std::string& path, E& out, const Enum<E>& k) {
  const std::string s = read_string(v, path);
  std::vector<std::string> names;
  for (const auto& [name, value] : k.values) {
    if (name == s) {
      out = value;
      return;
    }
    names.push_back(name);
  }
  throw ConfigError(path, "\"" + s + "\" is not one of: " + list_of(names));
}
template <class T>
void read_value(const json& v, const std::string& path, T& out, const Integer& k) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  out = static_cast<T>(read_integer(v, path, k.lo, std::min<std::uint64_t>(k.hi, std::numeric_limits<T>::max())));
}
inline void read_value(const json& v, const std::string& path, double& out, const Number& k) {
  if (!v.is_number()) throw ConfigError(path, "expected a number, got " + std::string(v.type_name()));
  const double x = v.get<double>();
  if (!k.contains(x)) throw ConfigError(path, fmt::format("expected {}, got {}", expected_in<double>(k), x));
  out = x;
}
inline void read_value(const json& v, const std::string& path, bool& out, const Flag&) {
  if (!v.is_boolean()) throw ConfigError(path, "expected true or false, got " + std::string(v.type_name()));
  out = v.get<bool>();
}
inline void read_value(const json& v, const std::string& path, unsigned& out, const FileMode&) {
  out = parse_octal_mode(read_string(v, path), path);
}

// ---- writing one value ----

template <class T, class K>
json write_value(const T& value, const K&) {
  return value;
}
template <class E>
json write_value(const E& value, const Enum<E>& k) {
  for (const auto& [name, v] : k.values)
    if (v == value) return name;
  return "?";
}
inline json write_value(unsigned value, const FileMode&) { return format_octal_mode(value); }

// ---- structure: objects where the schema has sections, no unknown keys ----

bool is_section(const std::string& path) {
  const std::string prefix = path + "/";
  for (const auto& k : config_key_paths())
    if (k.starts_with(prefix)) return true;
  return false;
}

void check_structure(const json& j, const std::string& path) {
  if (!j.is_object()) throw ConfigError(path, "expected an object, got " + std::string(j.type_name()));
  const auto& keys = config_key_paths();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string child = path + "/" + it.key();
    if (std::find(keys.begin(), keys.end(), child) != keys.end()) continue;
    if (!is_section(child)) throw ConfigError(child, "unknown key");
    check_structure(*it, child);
  }
}

}  // namespace

std::optional<TunerParamError> check_tuner_params(const TunerParams& p) {
  std::optional<TunerParamError> error;
  for_each_tuner_param([&](const char* name, auto member, TunerParamUse, const TunerBounds& bounds) {
    using T = std::remove_cvref_t<decltype(p.*member)>;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      const T value = p.*member;
      if (!error && !bounds.contains(static_cast<double>(value)))
        error = TunerParamError{name, fmt::format("expected {}, got {}", expected_in<T>(bounds), value)};
    }
  });
  if (!error && p.min_ns > p.max_ns)
    error = TunerParamError{"min_ns", fmt::format("must not exceed max_ns ({})", p.max_ns)};
  if (!error && p.grow_start_at_cap && p.manage_grow_start)
    error = TunerParamError{"grow_start_at_cap", "excludes manage_grow_start: each writes its own grow_start"};
  return error;
}

std::string validate(const TunerParams& p) {
  const auto e = check_tuner_params(p);
  return e ? e->name + ": " + e->reason : std::string();
}

const std::vector<std::string>& config_key_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    visit_schema([&](const std::string& path, Apply, auto&&, const auto&) { out.push_back(path); });
    return out;
  }();
  return paths;
}

const std::vector<std::string>& restart_only_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> out;
    visit_schema([&](const std::string& path, Apply apply, auto&&, const auto&) {
      if (apply == Apply::restart) out.push_back(path);
    });
    return out;
  }();
  return paths;
}

std::vector<std::string> config_choices(std::string_view path) {
  std::vector<std::string> out;
  visit_schema([&](const std::string& p, Apply, auto&&, const auto& kind) {
    if (p != path) return;
    using K = std::remove_cvref_t<decltype(kind)>;
    if constexpr (std::is_same_v<K, Choice>)
      out = kind.allowed;
    else if constexpr (requires { kind.values; })
      for (const auto& [name, value] : kind.values) out.push_back(name);
  });
  return out;
}

std::string_view to_string(Mode m) noexcept {
  for (const auto& [name, value] : mode_names().values)
    if (value == m) return name;
  return "?";
}

Config apply_config_json(const json& j, const Config& base) {
  check_structure(j, "");
  Config c = base;
  visit_schema([&](const std::string& path, Apply, auto&& field, const auto& kind) {
    const json::json_pointer ptr(path);
    if (j.contains(ptr)) read_value(j.at(ptr), path, field(c), kind);
  });
  check_whole(c);
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
  json j = json::object();
  visit_schema([&](const std::string& path, Apply, auto&& field, const auto& kind) {
    j[json::json_pointer(path)] = write_value(field(c), kind);
  });
  return j;
}

std::vector<std::string> restart_only_differences(const Config& a, const Config& b) {
  std::vector<std::string> out;
  visit_schema([&](const std::string& path, Apply apply, auto&& field, const auto&) {
    if (apply == Apply::restart && !(field(a) == field(b))) out.push_back(path);
  });
  return out;
}

Config keep_restart_only(Config next, const Config& running) {
  visit_schema([&](const std::string&, Apply apply, auto&& field, const auto&) {
    if (apply == Apply::restart) field(next) = field(running);
  });
  return next;
}

std::vector<unsigned> expand_cpus(const std::string& spec, const std::vector<unsigned>& allowed) {
  if (spec == "all") return allowed;
  std::vector<unsigned> cpus = parse_cpu_list(spec, "/cpus");
  for (unsigned cpu : cpus)
    if (std::find(allowed.begin(), allowed.end(), cpu) == allowed.end())
      throw ConfigError("/cpus", fmt::format("CPU {} is not in this process's affinity mask", cpu));
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
