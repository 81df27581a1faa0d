// Runs the real binaries.
#include "subprocess.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

using namespace std::chrono_literals;
using testsupport::run;
using testsupport::Subprocess;

namespace {
const std::string config = HALTPOLL_SOURCE_DIR "/config/haltpolld.json";

std::string temp_dir() {
  char tmpl[] = "/tmp/haltpolld-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}
}  // namespace

TEST_CASE("haltpolld --version and --help") {
  auto v = run({HALTPOLLD_BIN, "--version"});
  CHECK(v.code == 0);
  CHECK(v.out.find("haltpolld " HALTPOLL_VERSION_STRING_FOR_TEST) != std::string::npos);
  auto h = run({HALTPOLLD_BIN, "--help"});
  CHECK(h.code == 0);
  CHECK(h.out.find("--config") != std::string::npos);
  CHECK(h.out.find("--socket") != std::string::npos);
  // Subcommands are listed with the daemon's options.
  CHECK(h.out.find("Subcommands:") != std::string::npos);
  CHECK(h.out.find("simulate") != std::string::npos);
  auto bad = run({HALTPOLLD_BIN, "--no-such-flag"});
  CHECK(bad.code == 2);
  auto bad_sub = run({HALTPOLLD_BIN, "no-such-subcommand"});
  CHECK(bad_sub.code == 2);
}

TEST_CASE("haltpollctl --help and --version") {
  auto h = run({HALTPOLLCTL_BIN, "--help"});
  CHECK(h.code == 0);
  CHECK(h.out.find("--socket") != std::string::npos);
  auto v = run({HALTPOLLCTL_BIN, "--version"});
  CHECK(v.code == 0);
  CHECK(v.out.find("haltpollctl ") != std::string::npos);
}

TEST_CASE("haltpolld refuses a bad config with the path and reason") {
  auto dir = temp_dir();
  std::ofstream(dir + "/bad.json") << R"({"socket": {"mode": "0999"}})";
  auto r = run({HALTPOLLD_BIN, "--config", dir + "/bad.json", "--check-config"});
  CHECK(r.code == 3);
  CHECK(r.err.find("/socket/mode") != std::string::npos);
  auto missing = run({HALTPOLLD_BIN, "--config", dir + "/none.json"});
  CHECK(missing.code == 3);
  std::filesystem::remove_all(dir);
}

TEST_CASE("haltpolld --check-config prints the effective config with flag overrides") {
  auto r = run({HALTPOLLD_BIN, "--config", config, "--socket", "/tmp/x.sock", "--log-level", "debug", "--check-config"});
  CHECK(r.code == 0);
  CHECK(r.out.find("\"/tmp/x.sock\"") != std::string::npos);
  CHECK(r.out.find("\"debug\"") != std::string::npos);
}

TEST_CASE("haltpolld starts, logs its effective config and stops cleanly on SIGTERM and SIGINT") {
  auto dir = temp_dir();
  for (int sig : {SIGTERM, SIGINT}) {
    // --mode observe: the shipped config says kernel. --sysfs-root: its real "/" is locked by any
    // haltpolld running on this machine (an installed one, another test), which refuses this one.
    std::filesystem::create_directories(dir + "/sysfs");
    Subprocess d({HALTPOLLD_BIN, "--config", config, "--foreground", "--mode", "observe", "--socket",
                  dir + "/io.haltpolld", "--sysfs-root", dir + "/sysfs"});
    REQUIRE(d.wait_for_output("effective config", 30s));
    CHECK(d.err().find("\"mode\":\"observe\"") != std::string::npos);
    d.signal(sig);
    CHECK(d.wait(30s) == 0);
    CHECK(d.err().find("stopped") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}
