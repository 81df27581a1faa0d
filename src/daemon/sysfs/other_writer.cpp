#include "sysfs/other_writer.hpp"

#include "sysfs/file_io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <optional>
#include <set>

namespace haltpolld {

namespace {

constexpr std::size_t kMaxConfigBytes = 64 * 1024;
constexpr std::size_t kMaxAnswer = 300;
constexpr int kMaxIncludeDepth = 8;

// A regular file of at most kMaxConfigBytes, opened without waiting on a FIFO or a device.
std::optional<std::string> read_untrusted(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st{};
  std::optional<std::string> out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::size_t>(st.st_size) <= kMaxConfigBytes) {
    std::string s(kMaxConfigBytes + 1, '\0');
    std::size_t got = 0;
    while (got < s.size()) {
      const ssize_t n = ::read(fd, s.data() + got, s.size() - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    if (got <= kMaxConfigBytes) {
      s.resize(got);
      out = std::move(s);
    }
  }
  ::close(fd);
  return out;
}

// Printable ASCII only, bounded: the answer goes to logs, status, metrics labels and the state file.
std::string printable(std::string_view s, std::size_t max = kMaxAnswer) { return printable_text(s, max); }

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool valid_profile_name(std::string_view n) {
  return !n.empty() && n.size() <= 64 && n != "." && n != ".." &&
         std::all_of(n.begin(), n.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-'; });
}

std::vector<std::string> split_names(std::string_view s, std::string_view separators) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t j = std::min(s.find_first_of(separators, i), s.size());
    const std::string_view n = trim(s.substr(i, j - i));
    if (valid_profile_name(n)) out.emplace_back(n);
    i = j + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> parse_tuned_active_profiles(std::string_view text) {
  text = trim(text);
  constexpr std::string_view kPrefix = "Current active profile:";
  if (const auto at = text.find(kPrefix); at != std::string_view::npos) {
    text = text.substr(at + kPrefix.size());
    text = text.substr(0, std::min(text.find('\n'), text.size()));
  } else if (text.rfind("No current active profile", 0) == 0 || text.find('\n') != std::string_view::npos ||
             text.find(':') != std::string_view::npos) {
    return {};  // tuned-adm's "none", and anything else that is not the file's bare list
  }
  return split_names(text, " \t");
}

TunedProfileHaltpoll parse_tuned_profile(std::string_view conf) {
  TunedProfileHaltpoll out;
  struct Line {
    std::string key, value;
  };
  std::string section;
  std::vector<std::pair<std::string, std::vector<Line>>> sections;
  std::size_t i = 0;
  while (i < conf.size()) {
    const std::size_t j = std::min(conf.find('\n', i), conf.size());
    const std::string_view line = trim(conf.substr(i, j - i));
    i = j + 1;
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      const auto close = line.find(']');
      if (close == std::string_view::npos) continue;
      sections.emplace_back(std::string(trim(line.substr(1, close - 1))), std::vector<Line>{});
      continue;
    }
    if (sections.empty()) continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) continue;
    sections.back().second.push_back({std::string(trim(line.substr(0, eq))), std::string(trim(line.substr(eq + 1)))});
  }
  for (const auto& [name, lines] : sections) {
    std::string type = name;
    for (const auto& l : lines)
      if (l.key == "type") type = l.value;
    for (const auto& l : lines) {
      if (name == "main" && l.key == "include") {
        for (auto& n : split_names(l.value, ",; \t")) out.includes.push_back(std::move(n));
      } else if ((type == "sysfs" && l.key.find("haltpoll/parameters/") != std::string::npos) ||
                 (type == "cpu" && l.key != "type" && (l.key.find("haltpoll") != std::string::npos ||
                                                       l.value.find("haltpoll") != std::string::npos))) {
        out.haltpoll_lines.push_back(fmt::format("[{}] {} = {}", name, l.key, l.value));
      }
    }
  }
  return out;
}

namespace {

// The first profile in `name`'s include tree whose lines set haltpoll parameters, preferring a
// line naming `parameter`. TuneD looks in /etc/tuned first, then /usr/lib/tuned (and their
// profiles/ subdirectories in newer versions).
std::string profile_haltpoll_line(const std::string& root, const std::string& name, const std::string& parameter,
                                  int depth, std::set<std::string>& seen) {
  if (depth > kMaxIncludeDepth || !seen.insert(name).second) return {};
  for (const char* dir : {"etc/tuned/", "etc/tuned/profiles/", "usr/lib/tuned/", "usr/lib/tuned/profiles/"}) {
    const std::string path = root + dir + name + "/tuned.conf";
    const auto text = read_untrusted(path);
    if (!text) continue;
    const TunedProfileHaltpoll p = parse_tuned_profile(*text);
    if (!p.haltpoll_lines.empty()) {
      std::string line = p.haltpoll_lines.front();
      for (const auto& l : p.haltpoll_lines)
        if (l.find(parameter) != std::string::npos) {
          line = l;
          break;
        }
      return fmt::format("'{}' ({}: {})", name, path, line);
    }
    // Includes are resolved like the profile itself; the first directory with the profile wins.
    for (const auto& inc : p.includes)
      if (auto found = profile_haltpoll_line(root, inc, parameter, depth + 1, seen); !found.empty()) return found;
    return {};
  }
  return {};
}

}  // namespace

std::string tuned_haltpoll_writer(const std::string& root, const std::string& parameter) {
  std::string r = root.empty() ? std::string("/") : root;
  if (r.back() != '/') r.push_back('/');
  const auto active = read_untrusted(r + "etc/tuned/active_profile");
  if (!active) return {};
  std::set<std::string> seen;
  for (const auto& name : parse_tuned_active_profiles(*active)) {
    if (auto line = profile_haltpoll_line(r, name, parameter, 0, seen); !line.empty())
      return printable("TuneD: the active profile " + line);
  }
  return {};
}

FileHolders processes_holding(const std::string& proc_dir, const std::function<bool(std::string_view)>& matches,
                              std::size_t max) {
  FileHolders out;
  DIR* procs = ::opendir(proc_dir.c_str());
  if (!procs) {
    out.proc_readable = false;
    return out;
  }
  const std::string self = std::to_string(::getpid());
  while (const dirent* p = ::readdir(procs)) {
    if (out.found.size() >= max) break;
    const std::string_view pid = p->d_name;
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string_view::npos || pid == self)
      continue;
    const std::string fd_dir = fmt::format("{}/{}/fd", proc_dir, pid);
    DIR* fds = ::opendir(fd_dir.c_str());
    if (!fds) {
      if (errno == EACCES || errno == EPERM) ++out.unreadable;
      continue;  // gone, or not ours to look into
    }
    while (const dirent* f = ::readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      char target[4096];
      const ssize_t n = ::readlinkat(::dirfd(fds), f->d_name, target, sizeof target);
      if (n <= 0 || static_cast<std::size_t>(n) >= sizeof target) continue;
      const std::string_view t(target, static_cast<std::size_t>(n));
      if (!matches(t)) continue;
      const std::string comm = read_untrusted(fmt::format("{}/{}/comm", proc_dir, pid)).value_or("?");
      out.found.push_back({std::stoi(std::string(pid)), printable(trim(comm), 32), printable(t)});
      break;
    }
    ::closedir(fds);
  }
  ::closedir(procs);
  return out;
}

std::string process_holding(const std::string& proc_dir, const std::string& params_dir) {
  const std::string prefix = params_dir + "/";
  const FileHolders h = processes_holding(
      proc_dir, [&](std::string_view t) { return t.substr(0, prefix.size()) == prefix; }, 1);
  if (h.found.empty()) return {};
  const FileHolder& f = h.found.front();
  return printable(fmt::format("process {} ({}) holds {} open", f.pid, f.comm, f.path));
}

std::string identify_other_writer(const std::string& root, const std::string& params_dir, const std::string& parameter) {
  if (auto t = tuned_haltpoll_writer(root, parameter); !t.empty()) return t;
  if (auto p = process_holding("/proc", params_dir); !p.empty()) return p;
  return kUnknownWriter;
}

}  // namespace haltpolld
