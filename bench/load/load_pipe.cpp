// load_pipe: two threads hand one byte back and forth over two pipes, like
// `perf bench sched pipe` (which uses two processes). Each round trip is two wake-ups of a blocked
// reader, so us/op measures the wake path: with guest halt-polling a reader's vCPU that is still
// polling wakes without an IPI and a VM exit. Prints one JSON object.
//   bench_load_pipe [-l loops] [--pin]   (--pin: the two threads on CPUs 0 and 1)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "json_writer.hpp"
#include "load_common.hpp"

namespace {

using loadgen::cpu_seconds;
using loadgen::now_ns;

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

}  // namespace

int main(int argc, char** argv) {
  long loops = 100000;
  bool do_pin = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-l") == 0 && i + 1 < argc) loops = std::atol(argv[++i]);
    else if (std::strcmp(argv[i], "--pin") == 0) do_pin = true;
    else {
      std::fprintf(stderr, "usage: %s [-l loops] [--pin]\n", argv[0]);
      return 2;
    }
  }
  int ab[2], ba[2];
  if (pipe(ab) != 0 || pipe(ba) != 0) return 1;
  const unsigned ncpu = std::thread::hardware_concurrency();
  std::thread echo([&] {
    if (do_pin && ncpu > 1) pin(1);
    char c;
    for (long i = 0; i < loops; ++i) {
      if (read(ab[0], &c, 1) != 1 || write(ba[1], &c, 1) != 1) std::abort();
    }
  });
  if (do_pin) pin(0);
  const double cpu0 = cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  char c = 'x';
  for (long i = 0; i < loops; ++i) {
    if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1) std::abort();
  }
  const auto t1 = std::chrono::steady_clock::now();
  echo.join();
  const double secs = std::chrono::duration<double>(t1 - t0).count();
  const double cpu = cpu_seconds() - cpu0;
  benchutil::JsonObject()
      .str("bench", "load_pipe")
      .num("loops", static_cast<double>(loops))
      .boolean("pinned", do_pin)
      .num("total_s", secs)
      .num("us_per_op", secs * 1e6 / static_cast<double>(loops))
      .num("ops_per_s", std::round(static_cast<double>(loops) / secs))
      .num("process_cpu_percent", 100.0 * cpu / secs)
      .print();
  return 0;
}
