// The real haltpolld process under conditions that would end it or cost the originals: a stop
// while clients hold every descriptor it may open.
#include "daemon_fixture.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

using daemontest::Daemon;
using daemontest::RawClient;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {

std::size_t open_fds(pid_t pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) ++n;
  return n;
}

template <class Pred>
bool eventually(Pred p, std::chrono::milliseconds within) {
  const auto deadline = std::chrono::steady_clock::now() + within;
  while (std::chrono::steady_clock::now() < deadline) {
    if (p()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return p();
}

// The fixture's tree plus the cpuidle files that make kernel mode active on it.
void make_haltpoll_guest(const Daemon& d) {
  const std::string cpuidle = d.sysfs + "/sys/devices/system/cpu/cpuidle";
  std::filesystem::create_directories(cpuidle);
  std::ofstream(cpuidle + "/current_driver") << "haltpoll\n";
  std::ofstream(cpuidle + "/current_governor") << "haltpoll\n";
}

std::string param(const Daemon& d, const char* name) {
  std::ifstream f(d.sysfs + "/sys/module/haltpoll/parameters/" + name);
  std::string v;
  std::getline(f, v);
  return v;
}

}  // namespace

TEST_CASE("hardening: the stop restores the originals even when clients hold every descriptor") {
  if (::geteuid() != 0) {
    WARN("not root: cannot lower another process's RLIMIT_NOFILE here; skipped");
    return;
  }
  // Kernel mode on the fake root, a static cap that differs from the original 200000.
  const json cfg = {{"mode", "kernel"},
                    {"tuner", {{"interval_ms", 200}, {"policy", "static"}}},
                    {"pool", {{"guest_halt_poll_ns", 100000}}},
                    {"socket", {{"mode", "0666"}, {"idle_timeout_ms", 600000}}}};
  Daemon d(cfg);
  REQUIRE(d.stop() == 0);
  make_haltpoll_guest(d);
  d.start();
  REQUIRE(eventually([&] { return param(d, "guest_halt_poll_ns") == "100000"; }, 20s));
  const std::string state = d.dir + "/haltpoll-params.json";
  REQUIRE(std::filesystem::exists(state));

  // Every descriptor the daemon may still open goes to a client; more wait in the backlog.
  const pid_t pid = d.proc->pid();
  rlimit lim{};
  REQUIRE(::prlimit(pid, RLIMIT_NOFILE, nullptr, &lim) == 0);
  lim.rlim_cur = open_fds(pid) + 6;
  REQUIRE(::prlimit(pid, RLIMIT_NOFILE, &lim, nullptr) == 0);
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 12; ++i) {
    clients.push_back(std::make_unique<RawClient>(d.socket));
    REQUIRE(clients.back()->connected());
  }
  CHECK(eventually([&] { return open_fds(pid) >= lim.rlim_cur; }, 10s));
  CHECK(d.proc->wait_for_output("accept failed", 10s));  // EMFILE: the daemon is out of descriptors

  CHECK(d.stop() == 0);
  CAPTURE(d.proc->err());
  CHECK(param(d, "guest_halt_poll_ns") == "200000");
  CHECK_FALSE(std::filesystem::exists(state));
  // By the stop itself, not by the Controller's destructor after "stopped" (which would mask a
  // restore that failed with EMFILE).
  const std::string& err = d.proc->err();
  CHECK(err.find("restoring the haltpoll parameters:") == std::string::npos);
  const auto restored = err.find("restored the original haltpoll parameters");
  REQUIRE(restored != std::string::npos);
  CHECK(restored < err.find("info stopped"));
}
