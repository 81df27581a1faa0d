// Control-plane benchmark against the real haltpolld binary (observe mode, default config, a fake
// sysfs root): GetStats round-trip latency with 100 connected clients (one call in flight, and
// all 100 at once), then the daemon's idle CPU and memory. Prints one JSON object.
//   bench_control [idle_seconds=10] [rounds=50]
#include "json_writer.hpp"
#include "subprocess.hpp"


#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

struct Conn {
  int fd = -1;
  std::string buf;
  explicit Conn(const std::string& path) {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect");
  }
  ~Conn() { ::close(fd); }
  void send(const std::string& m) {
    if (::send(fd, m.data(), m.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(m.size())) throw std::runtime_error("send");
  }
  std::string recv() {
    while (true) {
      auto nul = buf.find('\0');
      if (nul != std::string::npos) {
        std::string r = buf.substr(0, nul);
        buf.erase(0, nul + 1);
        return r;
      }
      char chunk[65536];
      ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) throw std::runtime_error("recv");
      buf.append(chunk, static_cast<std::size_t>(n));
    }
  }
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}

// utime + stime of a process, in clock ticks.
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream f(s.substr(s.rfind(')') + 2));
  std::string field;
  long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && f >> field; ++i) {
    if (i == 14) utime = std::stol(field);
    if (i == 15) stime = std::stol(field);
  }
  return utime + stime;
}

long status_kib(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  int idle_seconds = argc > 1 ? std::atoi(argv[1]) : 10;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 50;
  constexpr int kClients = 100;
  char tmpl[] = "/tmp/bench-control-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string sock = dir + "/io.haltpolld";
  testsupport::Subprocess d({HALTPOLLD_BIN, "--config", HALTPOLL_SOURCE_DIR "/config/haltpolld.json", "--socket", sock,
                             "--sysfs-root", dir, "--log-level", "warn"});
  // The daemon is quiet at warn: poll for the socket instead of a log line.
  for (int i = 0; i < 200 && !std::filesystem::exists(sock); ++i) std::this_thread::sleep_for(50ms);
  std::this_thread::sleep_for(200ms);

  const std::string call = std::string(R"({"method":"io.haltpolld.GetStats"})") + '\0';
  std::vector<std::unique_ptr<Conn>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(std::make_unique<Conn>(sock));

  // One call in flight at a time, round robin over the 100 connections.
  std::vector<double> sequential_us;
  for (int r = 0; r < rounds; ++r)
    for (auto& c : clients) {
      auto t0 = Clock::now();
      c->send(call);
      c->recv();
      sequential_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  // All 100 at once: each client's time until its own reply.
  std::vector<double> burst_us;
  for (int r = 0; r < std::max(1, rounds / 5); ++r) {
    auto t0 = Clock::now();
    for (auto& c : clients) c->send(call);
    for (auto& c : clients) {
      c->recv();
      burst_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  std::size_t reply_bytes = 0;
  clients[0]->send(call);
  reply_bytes = clients[0]->recv().size();
  clients.clear();

  // Idle: no clients, default probe rate, observe mode.
  std::this_thread::sleep_for(1s);
  long hz = sysconf(_SC_CLK_TCK);
  long t0 = cpu_ticks(d.pid());
  auto w0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(idle_seconds));
  long t1 = cpu_ticks(d.pid());
  double wall = std::chrono::duration<double>(Clock::now() - w0).count();
  double idle_cpu_percent = 100.0 * static_cast<double>(t1 - t0) / static_cast<double>(hz) / wall;
  long rss = status_kib(d.pid(), "VmRSS"), hwm = status_kib(d.pid(), "VmHWM");
  d.signal(SIGTERM);
  int rc = d.wait(20s);
  std::filesystem::remove_all(dir);

  using benchutil::JsonObject;
  auto latencies = [](const std::vector<double>& us) {
    return JsonObject()
        .integer("samples", us.size())
        .num("p50", percentile(us, 0.5))
        .num("p99", percentile(us, 0.99))
        .num("max", percentile(us, 1.0))
        .done();
  };
  JsonObject()
      .str("bench", "control")
      .num("clients", kClients)
      .num("getstats_reply_bytes", static_cast<double>(reply_bytes))
      .raw("getstats_sequential_us", latencies(sequential_us))
      .raw("getstats_burst100_us", latencies(burst_us))
      .num("idle_seconds", wall)
      .num("idle_cpu_percent_of_one_cpu", idle_cpu_percent)
      .num("rss_kib", static_cast<double>(rss))
      .num("rss_peak_kib", static_cast<double>(hwm))
      .num("daemon_exit_code", rc)
      .raw("targets", JsonObject()
                          .num("getstats_p99_us_max", 1000)
                          .num("idle_cpu_percent_max", 1.0)
                          .num("rss_kib_max", 20480)
                          .done())
      .print();
  return 0;
}
