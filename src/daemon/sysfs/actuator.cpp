#include "sysfs/actuator.hpp"

#include "sysfs/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace haltpolld {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

SysfsHaltpollParams::SysfsHaltpollParams(std::string sysfs_root, std::string state_file)
    : root_(std::move(sysfs_root)), state_file_(std::move(state_file)) {
  // push_back rather than assigning "/": GCC 12 -O2 reports a false -Wrestrict on the assignment.
  if (root_.empty() || root_.back() != '/') root_.push_back('/');
}

std::string SysfsHaltpollParams::params_dir() const { return root_ + "sys/module/haltpoll/parameters"; }

KernelHaltpollState SysfsHaltpollParams::detect() const {
  KernelHaltpollState s;
  std::error_code ec;
  s.params_present = std::filesystem::is_directory(params_dir(), ec);
  const std::string cpuidle = root_ + "sys/devices/system/cpu/cpuidle/";
  s.driver = read_small_file(cpuidle + "current_driver").value_or("");
  auto gov = read_small_file(cpuidle + "current_governor");
  if (!gov) gov = read_small_file(cpuidle + "current_governor_ro");
  s.governor = gov.value_or("");

  std::string why;
  if (!s.params_present) {
    why = fmt::format("{} does not exist (the haltpoll governor is neither built in nor loaded)", params_dir());
  } else if (s.driver.empty() || s.driver == "none") {
    why = fmt::format("cpuidle current_driver is '{}' (cpuidle-haltpoll did not register, so no cpuidle states "
                      "exist and the haltpoll parameters do not reach the idle path)",
                      s.driver.empty() ? "unreadable" : s.driver);
    if (!s.governor.empty() && s.governor != "haltpoll")
      why += fmt::format("; current_governor is '{}', not 'haltpoll'", s.governor);
  } else if (s.governor != "haltpoll") {
    why = fmt::format("cpuidle current_governor is '{}', not 'haltpoll' (driver '{}')",
                      s.governor.empty() ? "unreadable" : s.governor, s.driver);
  }
  s.active = why.empty();
  s.reason = why;
  return s;
}

std::optional<std::string> SysfsHaltpollParams::read(const char* name) const {
  return read_small_file(params_dir() + "/" + name);
}

std::optional<std::uint32_t> SysfsHaltpollParams::read_poll_ns() const {
  auto s = read("guest_halt_poll_ns");
  if (!s) return std::nullopt;
  std::uint32_t v = 0;
  auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc{}) return std::nullopt;
  return v;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::write_param(const std::string& dir, const std::string& name,
                                                             const std::string& value) const {
  Result r;
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) {
    r.ok = false;
    r.error = errno;
    r.message = fmt::format("open {}: {}", path, errno_text(r.error));
    return r;
  }
  const std::string line = value + "\n";
  const ssize_t n = ::write(fd, line.data(), line.size());
  const int e = n < 0 ? errno : 0;
  ::close(fd);
  if (n < 0 || static_cast<std::size_t>(n) != line.size()) {
    r.ok = false;
    r.error = e ? e : EIO;
    r.message = fmt::format("write {} to {}: {}", value, path, errno_text(r.error));
    return r;
  }
  r.written = true;
  return r;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::save_originals() {
  Result r;
  std::map<std::string, std::string> values;
  for (const char* name : kParams) {
    auto v = read(name);
    if (!v) {
      r.ok = false;
      r.error = errno ? errno : ENOENT;
      r.message = fmt::format("read {}/{}: {}", params_dir(), name, errno_text(r.error));
      return r;
    }
    values[name] = *v;
  }
  nlohmann::json j;
  j["version"] = 1;
  j["sysfs_root"] = root_;
  j["pid"] = ::getpid();
  j["params"] = values;
  const int e = replace_file_atomically(state_file_, j.dump(2) + "\n", {.mode = 0600, .sync_directory = true, .create_directory = true});
  if (e != 0) {
    // Without a saved copy a crash could not be undone: refuse to write the kernel's values.
    r.ok = false;
    r.error = e;
    r.message = fmt::format("save originals to {}: {}", state_file_, errno_text(e));
    return r;
  }
  saved_ = std::move(values);
  return r;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::set_poll_ns(std::uint32_t ns) {
  if (!saved_) {
    Result s = save_originals();
    if (!s.ok) return s;
  }
  if (last_written_ == ns) return {};
  if (auto cur = read_poll_ns(); cur && *cur == ns) {
    last_written_ = ns;
    return {};
  }
  Result r = write_param(params_dir(), "guest_halt_poll_ns", std::to_string(ns));
  if (r.ok) last_written_ = ns;
  return r;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::set_grow_start_ns(std::uint32_t ns) {
  if (!saved_) {
    Result s = save_originals();
    if (!s.ok) return s;
  }
  if (auto cur = read("guest_halt_poll_grow_start"); cur && *cur == std::to_string(ns)) return {};
  return write_param(params_dir(), "guest_halt_poll_grow_start", std::to_string(ns));
}

SysfsHaltpollParams::Result SysfsHaltpollParams::restore_values(const std::string& dir,
                                                                const std::map<std::string, std::string>& values) const {
  Result all;
  for (const auto& [name, value] : values) {
    auto cur = read_small_file(dir + "/" + name);
    if (cur && *cur == value) continue;
    Result r = write_param(dir, name, value);
    if (!r.ok) {
      all.ok = false;
      all.error = r.error;
      all.message += (all.message.empty() ? "" : "; ") + r.message;
    } else {
      all.written = true;
    }
  }
  return all;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::restore() {
  Result r;
  if (saved_) {
    r = restore_values(params_dir(), *saved_);
    if (!r.ok) return r;  // keep the state file: the next start tries again
  }
  std::error_code ec;
  std::filesystem::remove(state_file_, ec);
  saved_.reset();
  last_written_.reset();
  return r;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::recover() {
  Result r;
  auto text = read_small_file(state_file_);
  if (!text) return r;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("params") || !j["params"].is_object()) {
    r.ok = false;
    r.error = EINVAL;
    r.message = fmt::format("state file {} is not valid; left in place for inspection", state_file_);
    return r;
  }
  std::map<std::string, std::string> values;
  for (const char* name : kParams) {
    if (j["params"].contains(name) && j["params"][name].is_string()) values[name] = j["params"][name];
  }
  // The values go back where they were written, even if the configured root changed since.
  std::string root = j.value("sysfs_root", root_);
  if (root.empty() || root.back() != '/') root += '/';
  r = restore_values(root + "sys/module/haltpoll/parameters", values);
  if (!r.ok) {
    r.message = fmt::format("restoring the values saved in {}: {}", state_file_, r.message);
    return r;
  }
  std::error_code ec;
  std::filesystem::remove(state_file_, ec);
  r.message = fmt::format("restored the haltpoll parameters saved by pid {} in {} ({})", j.value("pid", 0),
                          state_file_, r.written ? "values changed back" : "values were already the originals");
  r.written = true;  // a state file was found and handled
  return r;
}

}  // namespace haltpolld
