// Test helper: idle activity of known kinds. A ping-pong between two threads over pipes makes short
// idle periods with remote wake-ups (the kind a poll catches, and sched_wake_idle_without_ipi
// counts when the target is polling); sleeps make longer ones that end in a timer interrupt.
#pragma once

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

namespace bpftest {

inline void ping_pong(int round_trips) {
  int ab[2], ba[2];
  if (::pipe(ab) != 0 || ::pipe(ba) != 0) throw std::runtime_error("pipe");
  std::thread peer([&] {
    char c;
    for (int i = 0; i < round_trips; ++i) {
      if (::read(ab[0], &c, 1) != 1 || ::write(ba[1], &c, 1) != 1) break;
    }
  });
  char c = 'x';
  for (int i = 0; i < round_trips; ++i) {
    if (::write(ab[1], &c, 1) != 1 || ::read(ba[0], &c, 1) != 1) break;
  }
  peer.join();
  for (int fd : {ab[0], ab[1], ba[0], ba[1]}) ::close(fd);
}

inline void sleeps(int n, std::chrono::microseconds each) {
  for (int i = 0; i < n; ++i) std::this_thread::sleep_for(each);
}

// Idle + iowait time of all CPUs so far, in clock ticks (/proc/stat): when a test sees no idle
// period, this tells whether any CPU was idle at all or other work kept every CPU busy.
inline unsigned long long idle_ticks() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  unsigned long long user = 0, nice = 0, sys = 0, idle = 0, iowait = 0;
  f >> cpu >> user >> nice >> sys >> idle >> iowait;
  return idle + iowait;
}

}  // namespace bpftest
