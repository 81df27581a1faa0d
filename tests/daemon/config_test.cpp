#include "config.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

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
}  // namespace

TEST_CASE("the shipped default config parses to the built-in defaults") {
  Config c = haltpolld::load_config_file(HALTPOLL_SOURCE_DIR "/config/haltpolld.json");
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
  CHECK(c.pool.guest_halt_poll_grow == 3u);
  CHECK_FALSE(c.pool.guest_halt_poll_allow_shrink);
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
