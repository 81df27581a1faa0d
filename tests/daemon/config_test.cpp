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
