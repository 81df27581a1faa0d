#include "haltpoll/affinity.hpp"

#include <sched.h>

#include <cerrno>

namespace haltpoll {

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    throw std::system_error(errno, std::system_category(), "sched_getaffinity");
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

std::error_code pin_this_thread(int cpu) noexcept {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return std::make_error_code(std::errc::invalid_argument);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) return {errno, std::system_category()};
  return {};
}

}  // namespace haltpoll
