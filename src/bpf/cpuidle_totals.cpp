#include "cpuidle_totals.hpp"

#include <fstream>

#include <unistd.h>

namespace haltpolld {
namespace {

std::uint64_t read_u64(const std::string& path) {
  std::ifstream f(path);
  std::uint64_t v = 0;
  f >> v;
  return f ? v : 0;
}

}  // namespace

CpuidleTotals read_cpuidle_totals(const std::string& sysfs_root, std::optional<unsigned> poll_state) {
  CpuidleTotals t;
  for (unsigned cpu = 0;; ++cpu) {
    const std::string dir = sysfs_root + "/devices/system/cpu/cpu" + std::to_string(cpu);
    if (::access(dir.c_str(), F_OK) != 0) break;
    if (::access((dir + "/cpuidle").c_str(), F_OK) != 0) continue;
    ++t.cpus;
    for (unsigned s = 0;; ++s) {
      const std::string st = dir + "/cpuidle/state" + std::to_string(s);
      if (::access(st.c_str(), F_OK) != 0) break;
      const std::uint64_t usage = read_u64(st + "/usage"), time_us = read_u64(st + "/time");
      if (poll_state && s == *poll_state) {
        t.poll_usage += usage;
        t.poll_time_us += time_us;
      } else {
        t.halt_usage += usage;
        t.halt_time_us += time_us;
      }
    }
  }
  return t;
}

}  // namespace haltpolld
