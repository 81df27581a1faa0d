#include "cpuidle_totals.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>

#include <unistd.h>

namespace haltpolld {
namespace {

// A sysfs attribute's first line without trailing blanks; at most 256 bytes are read, so a file
// that is not an attribute cannot make the reader allocate. Empty optional when it cannot be read
// or is empty.
std::optional<std::string> read_attribute(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  char buf[256];
  f.read(buf, sizeof buf);
  std::string s(buf, static_cast<std::size_t>(f.gcount()));
  s.erase(std::min(s.find('\n'), s.size()));
  s.erase(s.find_last_not_of(" \t\r") + 1);
  if (s.empty()) return std::nullopt;
  return s;
}

std::optional<std::uint64_t> read_counter(const std::string& path) {
  const auto s = read_attribute(path);
  if (!s) return std::nullopt;
  std::uint64_t v = 0;
  const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc{} || r.ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

}  // namespace

std::vector<CpuidleState> read_cpuidle_states(const std::string& sysfs_root, unsigned cpu) {
  std::vector<CpuidleState> states;
  const std::string dir = sysfs_root + "/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpuidle/state";
  for (unsigned k = 0;; ++k) {
    const std::string st = dir + std::to_string(k) + "/";
    auto name = read_attribute(st + "name");
    if (!name) break;
    const auto usage = read_counter(st + "usage"), time_us = read_counter(st + "time");
    if (!usage || !time_us) break;
    states.push_back({std::move(*name), *usage, *time_us});
  }
  return states;
}

CpuidleTotals read_cpuidle_totals(const std::string& sysfs_root, std::optional<unsigned> poll_state) {
  CpuidleTotals t;
  for (unsigned cpu = 0;; ++cpu) {
    if (::access((sysfs_root + "/devices/system/cpu/cpu" + std::to_string(cpu)).c_str(), F_OK) != 0) break;
    const auto states = read_cpuidle_states(sysfs_root, cpu);
    if (states.empty()) continue;
    ++t.cpus;
    for (std::size_t s = 0; s < states.size(); ++s) {
      if (poll_state && s == *poll_state) {
        t.poll_usage += states[s].usage;
        t.poll_time_us += states[s].time_us;
      } else {
        t.halt_usage += states[s].usage;
        t.halt_time_us += states[s].time_us;
      }
    }
  }
  return t;
}

}  // namespace haltpolld
