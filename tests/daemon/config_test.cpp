#include "config.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <type_traits>
#include <vector>

using haltpolld::Config;
using haltpolld::ConfigError;
using haltpolld::parse_config;

namespace {
// Returns the JSON path of the error parse_config reports for `text`.
std::string error_path(const std::string& text) {
  try {
    parse_config(text);
  } catch (const ConfigError& e) {
    return e.path();
  }
  return "<accepted>";
}
std::string read_file(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "/socket/path" -> "socket.path", the spelling of the man page and haltpollctl.
std::string dotted(std::string path) {
  path.erase(0, 1);
  for (auto& ch : path)
    if (ch == '/') ch = '.';
  return path;
}
}  // namespace

TEST_CASE("the shipped default config parses to the built-in defaults, but for kernel mode") {
  Config c = haltpolld::load_config_file(HALTPOLL_SOURCE_DIR "/config/haltpolld.json");
  // The installed service tunes; a daemon started without a config file only observes.
  CHECK(c.mode == haltpolld::Mode::kernel);
  CHECK(Config{}.mode == haltpolld::Mode::observe);
  c.mode = haltpolld::Mode::observe;
  CHECK(c == Config{});
}

TEST_CASE("keys override, absent keys keep the base") {
  Config base;
  base.log.level = "debug";
  Config c = parse_config(R"({"mode":"kernel", /* comment */ "socket":{"mode":"0600"}})", base);
  CHECK(c.mode == haltpolld::Mode::kernel);
  CHECK(c.socket.mode == 0600);
  CHECK(c.socket.path == base.socket.path);
  CHECK(c.log.level == "debug");
}

TEST_CASE("refusals name the JSON path") {
  CHECK(error_path(R"({"mode":"turbo"})") == "/mode");
  CHECK(error_path(R"({"mode":1})") == "/mode");
  CHECK(error_path(R"({"bogus":1})") == "/bogus");
  CHECK(error_path(R"({"socket":{"mode":"999"}})") == "/socket/mode");
  CHECK(error_path(R"({"socket":{"colour":"red"}})") == "/socket/colour");
  CHECK(error_path(R"({"socket":[]})") == "/socket");
  CHECK(error_path(R"({"cpus":"3-1"})") == "/cpus");
  CHECK(error_path(R"({"cpus":"0-3,6"})") == "<accepted>");
  CHECK(error_path(R"({"sysfs_root":"relative"})") == "/sysfs_root");
  CHECK(error_path(R"({"log":{"level":"loud"}})") == "/log/level");
  CHECK(error_path("{") == "");
  CHECK(error_path("[]") == "");
}

TEST_CASE("to_json round-trips through parse_config") {
  Config c;
  c.mode = haltpolld::Mode::kernel;
  c.cpus = "0-1";
  c.socket.admin_group = "wheel";
  CHECK(parse_config(haltpolld::to_json(c).dump()) == c);
}

TEST_CASE("every documented key is accepted and range-checked") {
  Config c = parse_config(R"({
    "state_dir": "/var/lib/x",
    "socket": {"max_connections": 10, "idle_timeout_ms": 1000},
    "pool": {"policy": "adaptive", "window_cap_ns": 1000, "guest_halt_poll_ns": 1, "guest_halt_poll_grow": 3,
             "guest_halt_poll_shrink": 0, "guest_halt_poll_grow_start": 5, "guest_halt_poll_allow_shrink": false},
    "probe": {"rate_hz": 2.5},
    "tuner": {"policy": "latency", "interval_ms": 200, "target_wake_latency_ns": 5000, "max_poll_cpu_percent": 12.5,
              "min_ns": 10, "max_ns": 1e6},
    "metrics": {"textfile": "/tmp/h.prom"}
  })");
  CHECK(c.pool.policy == "adaptive");
  CHECK(c.pool.haltpoll.guest_halt_poll_grow == 3u);
  CHECK_FALSE(c.pool.haltpoll.guest_halt_poll_allow_shrink);
  CHECK(c.probe.rate_hz == 2.5);
  CHECK(c.tuner.max_ns == 1000000u);
  CHECK(c.metrics.textfile == "/tmp/h.prom");
  CHECK(parse_config(haltpolld::to_json(c).dump()) == c);

  CHECK(error_path(R"({"socket":{"max_connections":0}})") == "/socket/max_connections");
  CHECK(error_path(R"({"socket":{"idle_timeout_ms":-5}})") == "/socket/idle_timeout_ms");
  CHECK(error_path(R"({"pool":{"policy":"magic"}})") == "/pool/policy");
  CHECK(error_path(R"({"pool":{"window_cap_ns":1e12}})") == "/pool/window_cap_ns");
  CHECK(error_path(R"({"pool":{"guest_halt_poll_ns":"200000"}})") == "/pool/guest_halt_poll_ns");
  CHECK(error_path(R"({"pool":{"guest_halt_poll_grow":1.5}})") == "/pool/guest_halt_poll_grow");
  CHECK(error_path(R"({"pool":{"guest_halt_poll_allow_shrink":"Y"}})") == "/pool/guest_halt_poll_allow_shrink");
  CHECK(error_path(R"({"probe":{"rate_hz":-1}})") == "/probe/rate_hz");
  CHECK(error_path(R"({"probe":{"rate_hz":true}})") == "/probe/rate_hz");
  CHECK(error_path(R"({"tuner":{"policy":"fast"}})") == "/tuner/policy");
  CHECK(error_path(R"({"tuner":{"interval_ms":10}})") == "/tuner/interval_ms");
  CHECK(error_path(R"({"tuner":{"max_poll_cpu_percent":101}})") == "/tuner/max_poll_cpu_percent");
  CHECK(error_path(R"({"tuner":{"min_ns":5,"max_ns":4}})") == "/tuner/min_ns");
  CHECK(error_path(R"({"tuner":{"target_wake_latency_ns":0}})") == "/tuner/target_wake_latency_ns");
  CHECK(error_path(R"({"metrics":{"textfile":"rel.prom"}})") == "/metrics/textfile");
  // The textfile is renamed over as root every tick: only a *.prom name, never the daemon's own files.
  for (const char* t : {"/run/haltpolld/haltpoll-params.json", "/run/haltpolld/io.haltpolld", "/run/haltpolld/io.haltpolld.lock",
                        "/etc/shadow", "/var/lib/x/.prom", "/var/lib/x/.hidden.prom", "/var/lib/x/h.prom/"}) {
    INFO(t);
    CHECK(error_path(R"({"metrics":{"textfile":")" + std::string(t) + R"("}})") == "/metrics/textfile");
  }
  // A rate so low that 1/rate overflows the prober's clock arithmetic.
  CHECK(error_path(R"({"probe":{"rate_hz":1e-12}})") == "/probe/rate_hz");
  CHECK(error_path(R"({"probe":{"rate_hz":0.001}})") == "/probe/rate_hz");
  CHECK(haltpolld::parse_config(R"({"probe":{"rate_hz":0.01}})").probe.rate_hz == 0.01);
  CHECK(haltpolld::parse_config(R"({"probe":{"rate_hz":0}})").probe.rate_hz == 0);
  CHECK(error_path(R"({"metrics":{"port":9100}})") == "/metrics/port");
  CHECK(error_path(R"({"state_dir":"x"})") == "/state_dir");
  CHECK(error_path(R"({"socket":{"path":")" + std::string(120, 'a') + R"("}})") == "/socket/path");
}

TEST_CASE("restart-only keys, CPU expansion and the state directory") {
  Config a, b;
  b.cpus = "0";
  b.tuner.interval_ms = 5000;
  CHECK(haltpolld::restart_only_differences(a, b) == std::vector<std::string>{"/cpus"});
  // Who may administer and where the daemon writes as root are fixed for the life of the process.
  Config c;
  c.socket.admin_group = "wheel";
  c.metrics.textfile = "/var/lib/prometheus/node-exporter/haltpolld.prom";
  CHECK(haltpolld::restart_only_differences(a, c) == std::vector<std::string>{"/socket/admin_group", "/metrics/textfile"});
  CHECK(haltpolld::expand_cpus("all", {0, 1}) == std::vector<unsigned>{0, 1});
  CHECK(haltpolld::expand_cpus("1,0", {0, 1}) == std::vector<unsigned>{0, 1});
  CHECK_THROWS_AS(haltpolld::expand_cpus("0-3", {0, 1}), ConfigError);
  CHECK(haltpolld::effective_state_dir(a) == "/run/haltpolld");
  a.state_dir = "/var/lib/h";
  CHECK(haltpolld::effective_state_dir(a) == "/var/lib/h");
}

TEST_CASE("restart-only keys come from the schema and a reload keeps exactly them") {
  const auto& keys = haltpolld::config_key_paths();
  const auto& restart = haltpolld::restart_only_paths();
  REQUIRE(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());  // each key once
  for (const auto& p : restart) CHECK(std::find(keys.begin(), keys.end(), p) != keys.end());
  CHECK(std::find(restart.begin(), restart.end(), "/pool/guest_halt_poll_allow_shrink") != restart.end());
  CHECK(std::find(restart.begin(), restart.end(), "/tuner/policy") == restart.end());

  Config running;
  Config file = parse_config(R"({"mode":"kernel","socket":{"path":"/run/x","max_connections":7},
                                 "pool":{"guest_halt_poll_grow":4,"window_cap_ns":5},"tuner":{"policy":"budget"}})");
  Config next = haltpolld::keep_restart_only(file, running);
  CHECK(next.mode == running.mode);
  CHECK(next.socket.path == running.socket.path);
  CHECK(next.pool.haltpoll == running.pool.haltpoll);
  CHECK(next.socket.max_connections == 7u);  // live keys take the file's value
  CHECK(next.pool.window_cap_ns == 5u);
  CHECK(next.tuner.policy == haltpolld::Policy::budget);
  CHECK(haltpolld::restart_only_differences(running, next).empty());
  CHECK(haltpolld::restart_only_differences(running, file) ==
        std::vector<std::string>{"/mode", "/socket/path", "/pool/guest_halt_poll_grow"});
}

TEST_CASE("enumerated keys list their values once, for the parser and the command line") {
  CHECK(haltpolld::config_choices("/mode") == std::vector<std::string>{"observe", "kernel"});
  CHECK(haltpolld::config_choices("/tuner/policy") ==
        std::vector<std::string>{"static", "latency", "budget", "balanced"});
  CHECK(haltpolld::config_choices("/log/level").size() == 7);
  CHECK(haltpolld::config_choices("/socket/path").empty());
  try {
    parse_config(R"({"tuner":{"policy":"fast"}})");
    FAIL("accepted");
  } catch (const ConfigError& e) {
    CHECK(e.reason() == "\"fast\" is not one of: static, latency, budget, balanced");
  }
}

TEST_CASE("every configuration key is in config/haltpolld.json and in haltpolld.json(5)") {
  const auto sample =
      nlohmann::json::parse(read_file(HALTPOLL_SOURCE_DIR "/config/haltpolld.json"), nullptr, true, true);
  for (const auto& p : haltpolld::config_key_paths()) {
    INFO(p);
    CHECK(sample.contains(nlohmann::json::json_pointer(p)));
  }

  // The man page documents each key in a .TP paragraph whose tag line (.B/.BR) names it, and
  // marks the restart-only ones "[restart]". Collect the tag lines' key names outside quotes.
  const std::string man = read_file(HALTPOLL_SOURCE_DIR "/man/haltpolld.json.5");
  std::map<std::string, bool> documented;  // key -> marked [restart]
  std::istringstream lines(man.substr(man.find(".SH KEYS")));
  std::string line, prev;
  const std::regex key_re(R"(^[a-z_]+(\.[a-z_]+)*$)");
  while (std::getline(lines, line)) {
    if (prev == ".TP" && (line.starts_with(".BR ") || line.starts_with(".B "))) {
      std::string unquoted;
      bool quoted = false;
      for (char ch : line.substr(line.find(' ') + 1)) {
        if (ch == '"') quoted = !quoted;
        else if (!quoted) unquoted += ch;
      }
      std::istringstream words(unquoted);
      for (std::string w; words >> w;)
        if (std::regex_match(w, key_re)) documented[w] = line.find("[restart]") != std::string::npos;
    }
    if (line.starts_with(".SH") && !line.starts_with(".SH KEYS")) break;
    prev = line;
  }
  std::set<std::string> schema;
  for (const auto& p : haltpolld::config_key_paths()) schema.insert(dotted(p));
  std::set<std::string> restart;
  for (const auto& p : haltpolld::restart_only_paths()) restart.insert(dotted(p));
  for (const auto& k : schema) {
    INFO(k);
    REQUIRE(documented.count(k) == 1);
    CHECK(documented[k] == (restart.count(k) == 1));
  }
  for (const auto& [k, marked] : documented) {
    INFO("haltpolld.json(5) documents a key the schema does not have: " << k);
    CHECK(schema.count(k) == 1);
  }
}

namespace {
// The number of fields of an aggregate: the most initialisers T{...} accepts.
struct AnyField {
  template <class T>
  operator T() const;  // NOLINT(google-explicit-constructor): only named in unevaluated contexts
};
template <class T, class... Fields>
constexpr std::size_t field_count() {
  if constexpr (requires { T{Fields{}..., AnyField{}}; })
    return field_count<T, Fields..., AnyField>();
  else
    return sizeof...(Fields);
}
}  // namespace

TEST_CASE("the tuner's table names every TunerParams field once, and its config rows are the tuner.* keys") {
  using haltpolld::TunerParams;
  using haltpolld::TunerParamUse;
  std::set<std::string> names;
  std::size_t rows = 0;
  const auto& keys = haltpolld::config_key_paths();
  haltpolld::for_each_tuner_param([&](const char* name, auto, TunerParamUse use, const haltpolld::TunerBounds&) {
    ++rows;
    names.insert(name);
    INFO(name);
    const bool is_key = std::find(keys.begin(), keys.end(), std::string("/tuner/") + name) != keys.end();
    CHECK(is_key == (use == TunerParamUse::config));
  });
  // A field added to TunerParams without its row in for_each_tuner_param fails here.
  CHECK(rows == field_count<TunerParams>());
  CHECK(names.size() == rows);
  // The tuner.* keys that are not TunerParams: the daemon's tick intervals.
  std::set<std::string> others;
  for (const auto& k : keys)
    if (k.starts_with("/tuner/") && !names.count(k.substr(7))) others.insert(k);
  CHECK(others == std::set<std::string>{"/tuner/interval_ms", "/tuner/sweep_interval_ms"});
}

TEST_CASE("every tuner.* key of the table reaches its TunerParams field, round-trips and is range-checked") {
  using haltpolld::TunerBounds;
  using haltpolld::TunerParams;
  using haltpolld::TunerParamUse;
  int bound = 0;
  haltpolld::for_each_tuner_param([&](const char* name, auto member, TunerParamUse use, const TunerBounds& b) {
    if (use != TunerParamUse::config) return;
    ++bound;
    using T = std::remove_cvref_t<decltype(TunerParams{}.*member)>;
    const std::string path = std::string("/tuner/") + name;
    INFO(path);
    // A value other than the base's, inside the bounds; the base lets min_ns reach its upper bound.
    Config base;
    base.tuner.max_ns = static_cast<std::uint32_t>(haltpolld::kTunerMaxNs);
    Config expected = base;
    const T def = expected.tuner.*member;
    T value{};
    if constexpr (std::is_same_v<T, bool>)
      value = !def;
    else if constexpr (std::is_same_v<T, haltpolld::Policy>)
      value = def == haltpolld::Policy::static_value ? haltpolld::Policy::latency : haltpolld::Policy::static_value;
    else
      value = static_cast<T>(static_cast<double>(def) != b.hi ? b.hi : b.lo);
    REQUIRE(!(value == def));
    expected.tuner.*member = value;
    // Into the field through JSON: the parsed Config differs from the base exactly there.
    nlohmann::json j = haltpolld::to_json(base);
    j[nlohmann::json::json_pointer(path)] = haltpolld::to_json(expected)[nlohmann::json::json_pointer(path)];
    const Config parsed = haltpolld::apply_config_json(j);
    CHECK(parsed.tuner.*member == value);
    CHECK(parsed == expected);
    // Back out: to_json writes the field under its key, and parsing that gives the same Config.
    CHECK(parse_config(haltpolld::to_json(parsed).dump()) == parsed);
    // Beyond the bounds: refused with the key's path.
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      CHECK(error_path(nlohmann::json{{"tuner", {{name, b.hi + 1}}}}.dump()) == path);
      if (b.lo >= 1 || std::is_floating_point_v<T>)
        CHECK(error_path(nlohmann::json{{"tuner", {{name, b.lo - 1}}}}.dump()) == path);
    }
  });
  CHECK(bound >= 9);
}

TEST_CASE("validate applies every bound of the tuner's table and names the field") {
  using haltpolld::TunerBounds;
  using haltpolld::TunerParams;
  using haltpolld::TunerParamUse;
  CHECK(haltpolld::validate(TunerParams{}).empty());
  CHECK(haltpolld::validate(Config{}.tuner).empty());
  haltpolld::for_each_tuner_param([&](const char* name, auto member, TunerParamUse, const TunerBounds& b) {
    using T = std::remove_cvref_t<decltype(TunerParams{}.*member)>;
    if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      INFO(name);
      std::vector<double> outside;
      if (b.lo_open) outside.push_back(b.lo);
      if (b.lo >= 1 || std::is_floating_point_v<T>) outside.push_back(b.lo - 1);
      if (b.hi_open) outside.push_back(b.hi);
      if (std::isfinite(b.hi) && b.hi + 1 <= static_cast<double>(std::numeric_limits<T>::max()))
        outside.push_back(b.hi + 1);
      REQUIRE_FALSE(outside.empty());
      for (double x : outside) {
        TunerParams p;
        p.*member = static_cast<T>(x);
        INFO(x);
        CHECK(haltpolld::validate(p).starts_with(std::string(name) + ": "));
      }
    }
  });
  TunerParams p;
  p.min_ns = 500000;
  CHECK(haltpolld::validate(p) == "min_ns: must not exceed max_ns (400000)");
  CHECK(error_path(R"({"tuner":{"min_ns":5,"max_ns":4}})") == "/tuner/min_ns");
  // Two writers of grow_start: refused at the newer key, each alone accepted.
  CHECK(error_path(R"({"tuner":{"manage_grow_start":true,"grow_start_at_cap":true}})") == "/tuner/grow_start_at_cap");
  CHECK(error_path(R"({"tuner":{"grow_start_at_cap":true}})") == "<accepted>");
  CHECK(error_path(R"({"tuner":{"manage_grow_start":true}})") == "<accepted>");
}
