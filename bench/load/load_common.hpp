// Clock and CPU-time functions shared by the load generators (bench/load/*.cpp). They use
// CLOCK_MONOTONIC and getrusage directly, not libhaltpoll's clock, so that the loads measure the
// system the same way whatever the library under test does.
#pragma once

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

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

// Reads or writes exactly n bytes; false on EOF or error.
inline bool full_io(int fd, char* buf, std::size_t n, bool reading) {
  std::size_t off = 0;
  while (off < n) {
    const ssize_t r = reading ? read(fd, buf + off, n - off) : write(fd, buf + off, n - off);
    if (r <= 0) return false;
    off += static_cast<std::size_t>(r);
  }
  return true;
}

// A listening AF_UNIX stream socket at /tmp/haltpolld-<name>-<pid>.sock (its address in `addr`
// for the client's connect); -1 after printing why.
inline int listen_unix(const char* name, sockaddr_un& addr) {
  const std::string path = std::string("/tmp/haltpolld-") + name + "-" + std::to_string(getpid()) + ".sock";
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr = sockaddr_un{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  unlink(path.c_str());
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 1) != 0) {
    std::perror(name);
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

}  // namespace loadgen
