// Test fixture: a real haltpolld in a temporary directory (socket, lock, fake sysfs root, config
// file), and a raw varlink client on a plain AF_UNIX socket with NUL framing.
#pragma once

#include "guest_kind.hpp"
#include "subprocess.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

namespace daemontest {

using nlohmann::json;
using namespace std::chrono_literals;

inline std::string make_temp_dir() {
  char tmpl[] = "/tmp/haltpolld-ctl-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  ::chmod(tmpl, 0755);  // the unprivileged-client tests must reach the socket
  return tmpl;
}

// A raw connection. recv_message() returns nullopt on EOF or timeout. Its default timeout only
// bounds a failing run: a sanitizer daemon on a loaded 2-CPU machine may take seconds to answer.
class RawClient {
 public:
  explicit RawClient(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }
  bool send_raw(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<std::size_t>(n);
    }
    return true;
  }
  bool send(const json& call) { return send_raw(call.dump() + std::string(1, '\0')); }
  std::optional<json> recv_message(std::chrono::milliseconds timeout = 30s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      auto nul = buf_.find('\0');
      if (nul != std::string::npos) {
        std::string m = buf_.substr(0, nul);
        buf_.erase(0, nul + 1);
        return json::parse(m);
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[65536];
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n <= 0) {
        eof_ = true;
        return std::nullopt;
      }
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
  }
  json call(const std::string& method, json params = json::object()) {
    REQUIRE(send({{"method", method}, {"parameters", params}}));
    auto r = recv_message();
    REQUIRE(r);
    return *r;
  }
  // Waits until the daemon closes the connection.
  bool wait_eof(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!eof_ && std::chrono::steady_clock::now() < deadline) {
      auto m = recv_message(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()));
      if (!m && eof_) return true;
    }
    return eof_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string buf_;
};

// The guest the daemon's fake tree is shaped like, from HALTPOLLD_TEST_GUEST: unset or "bare" (the
// haltpoll parameters alone), "haltpoll" (a guest whose kernel registered the cpuidle-haltpoll driver:
// driver, governor, POLL and halt states per CPU, /proc/stat), "none" (a guest with no cpuidle driver:
// the parameters do nothing). `scripts/test.sh guest-kinds` runs the daemon tests under each.
inline std::optional<testsupport::GuestKind> fixture_guest_kind() {
  const char* v = std::getenv("HALTPOLLD_TEST_GUEST");
  const std::string kind = v ? v : "";
  if (kind.empty() || kind == "bare") return std::nullopt;
  if (kind == "haltpoll") return testsupport::GuestKind::haltpoll_driver;
  if (kind == "none") return testsupport::GuestKind::no_driver;
  throw std::invalid_argument("HALTPOLLD_TEST_GUEST must be bare, haltpoll or none, not '" + kind + "'");
}

struct Daemon {
  std::optional<testsupport::GuestKind> guest = fixture_guest_kind();
  std::unique_ptr<testsupport::FakeSysfs> tree = guest ? std::make_unique<testsupport::FakeSysfs>(testsupport::fake_guest(*guest)) : nullptr;
  std::string dir = make_temp_dir();
  std::string socket = dir + "/io.haltpolld";
  std::string config_file = dir + "/haltpolld.json";
  std::string sysfs = tree ? tree->root() : dir + "/sysfs";
  std::unique_ptr<testsupport::Subprocess> proc;

  // `config` is written as the config file; socket path and sysfs root are added as flags.
  explicit Daemon(const json& config = json::object(), std::vector<std::string> extra_args = {}) {
    std::filesystem::create_directories(sysfs + "/sys/module/haltpoll/parameters");
    // The same found values in every kind of tree.
    auto param = [&](const char* n, const char* v) { std::ofstream(sysfs + "/sys/module/haltpoll/parameters/" + n) << v << "\n"; };
    param("guest_halt_poll_ns", "200000");
    param("guest_halt_poll_grow", "2");
    param("guest_halt_poll_shrink", "2");
    param("guest_halt_poll_grow_start", "50000");
    param("guest_halt_poll_allow_shrink", "Y");
    write_config(config);
    start(std::move(extra_args));
  }
  ~Daemon() {
    proc.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  void write_config(const json& config) { std::ofstream(config_file) << config.dump(2); }
  void write_config_text(const std::string& text) { std::ofstream(config_file) << text; }
  void start(std::vector<std::string> extra_args = {}) {
    std::vector<std::string> argv = {HALTPOLLD_BIN, "--config", config_file, "--socket", socket, "--sysfs-root", sysfs};
    for (auto& a : extra_args) argv.push_back(a);
    proc = std::make_unique<testsupport::Subprocess>(argv);
    REQUIRE(proc->wait_for_output("listening on", 60s));  // the bounds only end a failing run
  }
  int stop(int sig = SIGTERM) {
    proc->signal(sig);
    return proc->wait(60s);
  }
  bool alive() { return ::kill(proc->pid(), 0) == 0 && RawClient(socket).connected(); }
};

}  // namespace daemontest
