// load_timer: one thread wakes up every `period` (default 150 µs) with an absolute
// clock_nanosleep and records how late each wake-up was. Between wake-ups the CPU is idle for a
// bit less than the period, which is the case guest halt-polling handles worst: a cap above the
// period polls the whole gap, a cap below it polls and then halts anyway. Prints one JSON object.
//   bench_load_timer [-p period_us] [-d duration_s] [--cpu N]
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "json_writer.hpp"
#include "load_common.hpp"

namespace {

using loadgen::cpu_seconds;
using loadgen::now_ns;

}  // namespace

int main(int argc, char** argv) {
  double period_us = 150, duration_s = 3;
  int cpu = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-p") == 0 && i + 1 < argc) period_us = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "-d") == 0 && i + 1 < argc) duration_s = std::atof(argv[++i]);
    else if (std::strcmp(argv[i], "--cpu") == 0 && i + 1 < argc) cpu = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [-p period_us] [-d duration_s] [--cpu N]\n", argv[0]);
      return 2;
    }
  }
  if (cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  const auto period = static_cast<std::int64_t>(period_us * 1000);
  const auto n = static_cast<std::size_t>(duration_s * 1e6 / period_us);
  std::vector<std::int64_t> late;
  late.reserve(n);
  const double cpu0 = cpu_seconds();
  const std::int64_t start = now_ns();
  std::int64_t next = start;
  for (std::size_t i = 0; i < n; ++i) {
    next += period;
    timespec ts{static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
    }
    const std::int64_t t = now_ns();
    late.push_back(t - next);
    if (t - next > period) next = t;  // missed periods are not made up in a burst
  }
  const double secs = static_cast<double>(now_ns() - start) / 1e9;
  const double cpu_s = cpu_seconds() - cpu0;
  std::sort(late.begin(), late.end());
  auto pct = [&](double p) {
    return static_cast<double>(late[std::min(late.size() - 1, static_cast<std::size_t>(p / 100 * late.size()))]) / 1e3;
  };
  double sum = 0;
  for (auto v : late) sum += static_cast<double>(v);
  benchutil::JsonObject()
      .str("bench", "load_timer")
      .num("period_us", period_us)
      .integer("wakeups", late.size())
      .num("late_mean_us", sum / static_cast<double>(late.size()) / 1e3)
      .num("late_p50_us", pct(50))
      .num("late_p99_us", pct(99))
      .num("late_max_us", static_cast<double>(late.back()) / 1e3)
      .num("process_cpu_percent", 100.0 * cpu_s / secs)
      .print();
  return 0;
}
