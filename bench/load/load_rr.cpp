// load_rr: a closed-loop request/response load, the shape of a database client: a client and a
// server process on different CPUs over an AF_UNIX stream socket, one request outstanding. The
// client sends 64 bytes, the server spins -w µs (the query) and replies 64 bytes, the client spins
// -t µs (its own work) and sends the next one. Every round trip is two wake-ups of a blocked
// process on an otherwise idle CPU, so its throughput is what guest halt-polling buys a closed
// loop: with both CPUs polling the wake-ups skip the IPI and the halt exit, the round trip
// shortens and the loop runs faster (on the real guest a database client ran 3 × faster).
// Prints one JSON object.
//   bench_load_rr [-d duration_s] [-w server_work_us] [-t client_think_us] [-c client_cpu] [-s server_cpu]
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "load_common.hpp"

namespace {

using loadgen::full_io;
using loadgen::now_ns;

void spin_us(double us) {
  const std::int64_t until = now_ns() + static_cast<std::int64_t>(us * 1000);
  while (now_ns() < until) {
  }
}

[[noreturn]] void serve(int listen_fd, double work_us, int cpu) {
  if (cpu >= 0) benchutil::pin_to(cpu);
  const int fd = accept(listen_fd, nullptr, nullptr);
  if (fd < 0) _exit(1);
  char buf[64];
  while (full_io(fd, buf, sizeof buf, true)) {
    spin_us(work_us);
    if (!full_io(fd, buf, sizeof buf, false)) break;
  }
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  double duration_s = 3, work_us = 20, think_us = 10;
  int client_cpu = 0, server_cpu = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-d") == 0 && i + 1 < argc) duration_s = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "-w") == 0 && i + 1 < argc) work_us = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "-t") == 0 && i + 1 < argc) think_us = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "-c") == 0 && i + 1 < argc) client_cpu = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "-s") == 0 && i + 1 < argc) server_cpu = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [-d duration_s] [-w server_work_us] [-t client_think_us] [-c client_cpu] "
                   "[-s server_cpu]   (cpu -1: not pinned)\n",
                   argv[0]);
      return 2;
    }
  }
  if (!(duration_s > 0) || work_us < 0 || think_us < 0) {
    std::fprintf(stderr, "load_rr: duration must be > 0, work and think >= 0\n");
    return 2;
  }
  const auto cpus = benchutil::affinity_cpus();
  auto allowed = [&](int c) { return c < 0 || std::find(cpus.begin(), cpus.end(), c) != cpus.end(); };
  if (!allowed(client_cpu) || !allowed(server_cpu)) {
    std::fprintf(stderr, "load_rr: CPU %d or %d is not in this process's affinity mask\n", client_cpu, server_cpu);
    return 2;
  }
  sockaddr_un addr{};
  const int lfd = loadgen::listen_unix("load-rr", addr);
  if (lfd < 0) return 1;
  const pid_t server = fork();
  if (server < 0) {
    std::perror("load_rr: fork");
    return 1;
  }
  if (server == 0) serve(lfd, work_us, server_cpu);
  close(lfd);
  if (client_cpu >= 0) benchutil::pin_to(client_cpu);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("load_rr: connect");
    kill(server, SIGKILL);
    waitpid(server, nullptr, 0);
    return 1;
  }
  unlink(addr.sun_path);

  std::vector<std::int64_t> rtt;
  rtt.reserve(static_cast<std::size_t>(duration_s * 200000));
  char buf[64] = {};
  const double cpu0 = loadgen::cpu_seconds();
  const std::int64_t start = now_ns();
  const std::int64_t end = start + static_cast<std::int64_t>(duration_s * 1e9);
  std::int64_t now = start;
  while (now < end) {
    const std::int64_t t0 = now;
    if (!full_io(fd, buf, sizeof buf, false) || !full_io(fd, buf, sizeof buf, true)) break;
    now = now_ns();
    rtt.push_back(now - t0);
    spin_us(think_us);
    now = now_ns();
  }
  const double secs = static_cast<double>(now_ns() - start) / 1e9;
  const double client_cpu_s = loadgen::cpu_seconds() - cpu0;
  close(fd);
  int st = 0;
  waitpid(server, &st, 0);
  if (rtt.empty()) {
    std::fprintf(stderr, "load_rr: no round trip completed\n");
    return 1;
  }
  std::sort(rtt.begin(), rtt.end());
  auto pct = [&](double p) {
    return static_cast<double>(rtt[std::min(rtt.size() - 1, static_cast<std::size_t>(p / 100 * rtt.size()))]) / 1e3;
  };
  double sum = 0;
  for (auto v : rtt) sum += static_cast<double>(v);
  std::printf(
      "{\"bench\":\"load_rr\",\"duration_s\":%.3f,\"work_us\":%.1f,\"think_us\":%.1f,\"client_cpu\":%d,"
      "\"server_cpu\":%d,\"requests\":%zu,\"throughput_per_s\":%.1f,\"rtt_mean_us\":%.2f,\"rtt_p50_us\":%.2f,"
      "\"rtt_p90_us\":%.2f,\"rtt_p99_us\":%.2f,\"client_cpu_percent\":%.1f}\n",
      secs, work_us, think_us, client_cpu, server_cpu, rtt.size(), static_cast<double>(rtt.size()) / secs,
      sum / static_cast<double>(rtt.size()) / 1e3, pct(50), pct(90), pct(99), 100 * client_cpu_s / secs);
  return 0;
}
