// Clock and CPU-time helpers shared by the load generators (bench/load/*.cpp). They use
// CLOCK_MONOTONIC and getrusage directly, not libhaltpoll's clock, so that the loads measure the
// system the same way whatever the library under test does.
#pragma once

#include <sys/resource.h>
#include <time.h>

#include <cstdint>

namespace loadgen {

inline std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// User + system CPU seconds of the whole process so far.
inline double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace loadgen
