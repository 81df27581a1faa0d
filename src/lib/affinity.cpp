#include "haltpoll/affinity.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

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

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  constexpr std::string_view blanks = " \t\n";
  const auto first = text.find_first_not_of(blanks);
  if (first == std::string_view::npos) return std::nullopt;
  text = text.substr(first, text.find_last_not_of(blanks) - first + 1);
  // A CPU number: digits only (no sign, no blank), at most kMaxCpuNumber.
  auto number = [](std::string_view s, int& out) {
    const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && r.ec == std::errc{} && r.ptr == s.data() + s.size() && s.front() != '-' &&
           out <= kMaxCpuNumber;
  };
  std::vector<int> cpus;
  for (std::size_t pos = 0; pos <= text.size();) {
    const auto comma = std::min(text.find(',', pos), text.size());
    const std::string_view item = text.substr(pos, comma - pos);
    const auto dash = item.find('-');
    int lo = 0, hi = 0;
    if (!number(item.substr(0, dash), lo)) return std::nullopt;
    if (dash == std::string_view::npos)
      hi = lo;
    else if (!number(item.substr(dash + 1), hi) || hi < lo)
      return std::nullopt;
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    pos = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

}  // namespace haltpoll
