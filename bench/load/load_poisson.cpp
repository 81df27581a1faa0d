// load_poisson: a request server and a client over an AF_UNIX stream socket, in two processes.
// The client sends a 64-byte request at Poisson times (rate -r per second) and waits for the
// 64-byte reply; the server reads, does a little work (-w µs of spinning) and replies. Round-trip
// latency includes two wake-ups of a blocked process, which is what guest halt-polling shortens.
// Prints one JSON object.
//   bench_load_poisson [-r rate_per_s] [-d duration_s] [-w work_us]
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "json_writer.hpp"
#include "load_common.hpp"

namespace {

using loadgen::cpu_seconds;
using loadgen::full_io;
using loadgen::now_ns;

void serve(int listen_fd, double work_us) {
  const int fd = accept(listen_fd, nullptr, nullptr);
  if (fd < 0) _exit(1);
  char buf[64];
  while (full_io(fd, buf, sizeof buf, true)) {
    const std::int64_t until = now_ns() + static_cast<std::int64_t>(work_us * 1000);
    while (now_ns() < until) {
    }
    if (!full_io(fd, buf, sizeof buf, false)) break;
  }
  _exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  double rate = 2000, duration_s = 3, work_us = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-r") == 0 && i + 1 < argc) rate = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "-d") == 0 && i + 1 < argc) duration_s = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "-w") == 0 && i + 1 < argc) work_us = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [-r rate_per_s] [-d duration_s] [-w work_us]\n", argv[0]);
      return 2;
    }
  }
  sockaddr_un addr{};
  const int lfd = loadgen::listen_unix("load-poisson", addr);
  if (lfd < 0) return 1;
  const pid_t server = fork();
  if (server == 0) serve(lfd, work_us);
  close(lfd);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    std::perror("connect");
    kill(server, SIGKILL);
    return 1;
  }
  unlink(addr.sun_path);

  std::mt19937_64 rng(12345);
  std::exponential_distribution<double> gap(rate);
  std::vector<std::int64_t> rtt;
  char buf[64] = {};
  const std::int64_t start = now_ns();
  const std::int64_t end = start + static_cast<std::int64_t>(duration_s * 1e9);
  std::int64_t next = start;
  while (true) {
    next += static_cast<std::int64_t>(gap(rng) * 1e9);
    if (next >= end) break;
    timespec ts{static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
    }
    const std::int64_t t0 = now_ns();
    if (!full_io(fd, buf, sizeof buf, false) || !full_io(fd, buf, sizeof buf, true)) break;
    rtt.push_back(now_ns() - t0);
  }
  close(fd);
  int st = 0;
  waitpid(server, &st, 0);
  if (rtt.empty()) return 1;
  std::sort(rtt.begin(), rtt.end());
  auto pct = [&](double p) {
    return static_cast<double>(rtt[std::min(rtt.size() - 1, static_cast<std::size_t>(p / 100 * rtt.size()))]) / 1e3;
  };
  double sum = 0;
  for (auto v : rtt) sum += static_cast<double>(v);
  benchutil::JsonObject()
      .str("bench", "load_poisson")
      .num("rate_per_s", std::round(rate))
      .integer("requests", rtt.size())
      .num("work_us", work_us)
      .num("rtt_mean_us", sum / static_cast<double>(rtt.size()) / 1e3)
      .num("rtt_p50_us", pct(50))
      .num("rtt_p99_us", pct(99))
      .print();
  return 0;
}
