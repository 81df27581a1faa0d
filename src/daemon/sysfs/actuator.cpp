#include "sysfs/actuator.hpp"

#include "sysfs/file_io.hpp"
#include "sysfs/other_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <vector>

namespace haltpolld {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

// A value read from a file, for a message: printable ASCII, at most 64 characters.
std::string printable_value(const std::string& s) { return printable_text(s, 64); }

// Any edit, chmod, chown or replacement of the file changes one of these.
std::string identity_of(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return {};
  return fmt::format("{}:{}:{}.{}:{}", st.st_dev, st.st_ino, st.st_ctim.tv_sec, st.st_ctim.tv_nsec, st.st_size);
}

// The temporaries of state file writes that a kill interrupted (the originals are then in the state
// file, or nothing was changed yet). Nobody else writes them while the daemon holds the directory.
void remove_interrupted_writes(const std::string& state_file) {
  const std::filesystem::path path(state_file);
  const std::string prefix = "." + path.filename().string() + ".tmp.";
  std::error_code ec;
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) std::filesystem::remove(e.path(), ec);
}

}  // namespace

std::string haltpoll_state_file(const std::string& state_dir) {
  std::string dir = state_dir.empty() ? std::string(".") : state_dir;
  if (dir.back() == '/') dir.pop_back();
  return dir + "/haltpoll-params.json";
}

SysfsHaltpollParams::SysfsHaltpollParams(std::string sysfs_root, std::string state_file,
                                         std::shared_ptr<HeldReads> reads)
    : reads_(reads ? std::move(reads) : std::make_shared<HeldReads>()),
      root_(std::move(sysfs_root)),
      state_file_(std::move(state_file)) {
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
    why = fmt::format("this guest's kernel does not poll: cpuidle current_driver is '{}' (no cpuidle driver is "
                      "registered, so the haltpoll parameters reach no idle path)",
                      s.driver.empty() ? "unreadable" : s.driver);
    if (!s.governor.empty() && s.governor != "haltpoll")
      why += fmt::format(" and current_governor is '{}', not 'haltpoll'", s.governor);
    why += fmt::format("; {}", kHowToEnableHaltpoll);
  } else if (s.governor != "haltpoll") {
    why = fmt::format("cpuidle current_governor is '{}', not 'haltpoll' (driver '{}')",
                      s.governor.empty() ? "unreadable" : s.governor, s.driver);
  }
  s.active = why.empty();
  s.reason = why;
  return s;
}

std::optional<std::string> SysfsHaltpollParams::read(const char* name) const {
  return reads_->read(params_dir() + "/" + name);
}

std::optional<std::string> SysfsHaltpollParams::read_governor() const {
  return reads_->read(cpuidle_dir() + "current_governor");
}

void SysfsHaltpollParams::hold_reads(bool on) { reads_->hold(on); }

std::optional<std::uint32_t> SysfsHaltpollParams::read_poll_ns() const {
  auto s = read("guest_halt_poll_ns");
  if (!s) return std::nullopt;
  std::uint32_t v = 0;
  auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc{}) return std::nullopt;
  return v;
}

bool SysfsHaltpollParams::valid_value(const std::string& name, const std::string& value) {
  if (name == "guest_halt_poll_allow_shrink") return value == "Y" || value == "N";
  if (value.empty() || value.size() > 10 || value.find_first_not_of("0123456789") != std::string::npos) return false;
  std::uint64_t v = 0;
  const auto r = std::from_chars(value.data(), value.data() + value.size(), v);
  return r.ec == std::errc{} && r.ptr == value.data() + value.size() && v <= UINT32_MAX;
}

namespace {

// One value into a sysfs attribute. O_NOFOLLOW|O_NONBLOCK: a symlink or a FIFO planted in a fake or
// bind-mounted tree is refused, not followed or waited on.
SysfsHaltpollParams::Result write_value_file(const std::string& path, const std::string& value) {
  SysfsHaltpollParams::Result r;
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    r.ok = false;
    r.error = errno;
    r.message = fmt::format("open {}: {}", path, errno == ELOOP ? "is a symbolic link" : errno_text(errno));
    return r;
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    r.ok = false;
    r.error = EINVAL;
    r.message = fmt::format("open {}: not a regular file", path);
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

}  // namespace

SysfsHaltpollParams::Result SysfsHaltpollParams::write_param(const std::string& dir, const std::string& name,
                                                             const std::string& value) const {
  const std::string path = dir + "/" + name;
  reads_->forget(path);  // the next read sees what the kernel made of the write
  if (!valid_value(name, value)) {
    Result r;
    r.ok = false;
    r.error = EINVAL;
    r.message = fmt::format("refusing to write '{}' to {}: not a valid value", value, path);
    return r;
  }
  return write_value_file(path, value);
}

std::string SysfsHaltpollParams::cpuidle_dir() const { return root_ + "sys/devices/system/cpu/cpuidle/"; }

bool SysfsHaltpollParams::valid_governor(const std::string& name) {
  return !name.empty() && name.size() <= 15 && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::write_governor(const std::string& name) const {
  if (!valid_governor(name)) {
    Result r;
    r.ok = false;
    r.error = EINVAL;
    r.message = fmt::format("refusing to write governor '{}': not a valid name", name);
    return r;
  }
  reads_->forget(cpuidle_dir() + "current_governor");
  return write_value_file(cpuidle_dir() + "current_governor", name);
}

SysfsHaltpollParams::Result SysfsHaltpollParams::restore_governor(const std::string& name) const {
  if (name.empty()) return {};
  const auto cur = read_small_file(cpuidle_dir() + "current_governor");
  if (cur && *cur == name) return {};
  return write_governor(name);
}

SysfsHaltpollParams::Result SysfsHaltpollParams::reset_poll_limits() {
  auto refuse = [](int e, std::string why) {
    Result r;
    r.ok = false;
    r.error = e;
    r.message = std::move(why);
    return r;
  };
  const std::string dir = cpuidle_dir();
  const auto cur = read_small_file(dir + "current_governor");
  if (!cur) return refuse(errno ? errno : ENOENT, fmt::format("read {}current_governor: {}", dir, errno_text(errno ? errno : ENOENT)));
  if (*cur != "haltpoll") return refuse(EINVAL, fmt::format("current_governor is '{}', not 'haltpoll'", *cur));
  const std::string available = read_small_file(dir + "available_governors").value_or("");
  std::vector<std::string> names;
  for (std::size_t i = 0; i < available.size();) {
    const std::size_t j = std::min(available.find(' ', i), available.size());
    if (j > i) names.push_back(available.substr(i, j - i));
    i = j + 1;
  }
  // menu first: every kernel that builds cpuidle has it; any other but haltpoll will do.
  std::string other;
  for (const char* pref : {"menu", "teo", "ladder"})
    if (std::find(names.begin(), names.end(), pref) != names.end()) { other = pref; break; }
  if (other.empty())
    for (const auto& n : names)
      if (n != "haltpoll" && valid_governor(n)) { other = n; break; }
  if (other.empty())
    return refuse(ENOTSUP, fmt::format("no cpuidle governor but haltpoll to switch through (available_governors: '{}')", available));
  if (Result s = ensure_saved(); !s.ok) return s;
  Result away = write_governor(other);
  if (!away.ok) return away;
  Result back = write_governor("haltpoll");
  if (!back.ok) back = write_governor("haltpoll");  // once more: staying on `other` is not an option
  if (!back.ok) {
    back.message = fmt::format("governor left at '{}' (the state file names 'haltpoll' for the next start): {}",
                               other, back.message);
    return back;
  }
  ++limit_resets_;
  return back;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::save_originals() {
  Result r;
  auto refuse = [&](int e, std::string why) {
    r.ok = false;
    r.error = e;
    r.message = std::move(why);
    return r;
  };
  struct stat st{};
  if (!blocked_.empty() && ::lstat(state_file_.c_str(), &st) != 0 && errno == ENOENT) blocked_.clear();  // removed by an operator
  if (!blocked_.empty())
    return refuse(EEXIST, fmt::format("kernel writes refused: {}; restore it or remove {}, then reload", blocked_,
                                      state_file_));
  if (::lstat(state_file_.c_str(), &st) == 0)
    return refuse(EEXIST, fmt::format("kernel writes refused: {} exists but was not written by this run (it may hold "
                                      "the originals of another run); remove it, then reload",
                                      state_file_));
  std::map<std::string, std::string> values;
  for (const char* name : kParams) {
    auto v = read(name);
    if (!v) {
      const int e = errno ? errno : ENOENT;
      return refuse(e, fmt::format("read {}/{}: {}", params_dir(), name, errno_text(e)));
    }
    if (!valid_value(name, *v))
      return refuse(EINVAL, fmt::format("{}/{} holds '{}', which could not be restored", params_dir(), name, *v));
    values[name] = *v;
  }
  // The governor too: reset_poll_limits() switches it for a moment.
  std::string governor = read_small_file(cpuidle_dir() + "current_governor").value_or("");
  if (!valid_governor(governor)) governor.clear();
  r = write_state_file(values, governor);
  if (!r.ok) return r;
  saved_ = std::move(values);
  saved_governor_ = std::move(governor);
  return r;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::write_state_file(const std::map<std::string, std::string>& values,
                                                                  const std::string& governor) const {
  nlohmann::json j;
  j["version"] = 1;
  j["sysfs_root"] = root_;
  j["pid"] = ::getpid();
  j["params"] = values;
  if (!governor.empty()) j["cpuidle_governor"] = governor;
  // Always present (even empty), so that recover() tells a value in force that is neither the
  // original nor one written here for another writer's.
  j["written"] = written_;
  if (other_writer_)
    j["other_writer"] = {{"parameter", other_writer_->parameter},
                         {"value", other_writer_->value},
                         {"expected", other_writer_->expected},
                         {"who", other_writer_->who}};
  int e = replace_file_atomically(state_file_, j.dump(2) + "\n", {.mode = 0600, .sync_directory = true, .create_directory = true});
  std::string why = e == 0 ? std::string() : errno_text(e);
  if (e == 0) {
    // A directory that others may write could have the file swapped before the next start reads it.
    const auto slash = state_file_.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : state_file_.substr(0, slash);
    why = check_private_directory(dir, e);
    if (e != 0) ::unlink(state_file_.c_str());
  }
  Result r;
  if (e != 0) {
    // Without a saved copy a crash could not be undone: refuse to write the kernel's values.
    r.ok = false;
    r.error = e;
    r.message = fmt::format("save originals to {}: {}", state_file_, why);
  }
  return r;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::ensure_saved() {
  if (!saved_) return save_originals();
  // Before every write, not only the first: the record may have been removed while the daemon ran
  // (an operator, a cleaner of /run), and a crash after the next write would then lose the originals.
  struct stat st {};
  if (::lstat(state_file_.c_str(), &st) == 0 || errno != ENOENT) return {};
  return write_state_file(*saved_, saved_governor_);
}

SysfsHaltpollParams::Result SysfsHaltpollParams::write_recorded(const char* name, const std::string& value) {
  const std::vector<std::string> before = written_[name];
  const bool record = before.empty() || before.back() != value;
  if (record) {
    // Recorded before the write, with the value it replaces: after a kill between the two, recover()
    // sees whichever is in force as this run's.
    written_[name] = before.empty() ? std::vector<std::string>{value} : std::vector<std::string>{before.back(), value};
    if (Result s = write_state_file(*saved_, saved_governor_); !s.ok) {
      written_[name] = before;
      return s;
    }
  }
  Result r = write_param(params_dir(), name, value);
  if (r.ok) {
    expected_[name] = value;
  } else if (record) {
    written_[name] = before;  // not in force (best effort: a stale record only makes recover() leave the value)
    (void)write_state_file(*saved_, saved_governor_);
  }
  if (written_[name].empty()) written_.erase(name);
  return r;
}

bool SysfsHaltpollParams::is_written(const Written& w, const std::string& name, const std::string& value) {
  const auto it = w.find(name);
  return it != w.end() && std::find(it->second.begin(), it->second.end(), value) != it->second.end();
}

SysfsHaltpollParams::Result SysfsHaltpollParams::set_poll_ns(std::uint32_t ns) {
  if (Result s = ensure_saved(); !s.ok) return s;
  if (last_written_ == ns) return {};
  if (auto cur = read_poll_ns(); cur && *cur == ns) {
    last_written_ = ns;
    expected_["guest_halt_poll_ns"] = std::to_string(ns);
    return {};
  }
  Result r = write_recorded("guest_halt_poll_ns", std::to_string(ns));
  if (r.ok) last_written_ = ns;
  return r;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::set_grow_start_ns(std::uint32_t ns) {
  if (Result s = ensure_saved(); !s.ok) return s;
  const std::string value = std::to_string(ns);
  if (auto cur = read("guest_halt_poll_grow_start"); cur && *cur == value) {
    expected_["guest_halt_poll_grow_start"] = value;
    return {};
  }
  return write_recorded("guest_halt_poll_grow_start", value);
}

SysfsHaltpollParams::Result SysfsHaltpollParams::restore_values(const std::string& dir,
                                                                const std::map<std::string, std::string>& values,
                                                                const Written* written) const {
  Result all;
  for (const auto& [name, value] : values) {
    auto cur = read_small_file(dir + "/" + name);
    if (cur && *cur == value) continue;
    if (written && cur) {
      // Only a value this run wrote goes back: any other is another writer's.
      if (!is_written(*written, name, *cur)) {
        all.message += fmt::format("{}{} left at {} (not written by haltpolld)", all.message.empty() ? "" : "; ",
                                   name, printable_value(*cur));
        continue;
      }
    }
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
  if (!saved_) return r;  // a state file this run did not write is not this run's to remove
  r = restore_values(params_dir(), *saved_, &written_);
  // A governor another writer chose stays.
  if (Result g = other_writer_ ? Result{} : restore_governor(saved_governor_); !g.ok) {
    r.ok = false;
    r.error = g.error;
    r.message += (r.message.empty() ? "" : "; ") + g.message;
  }
  if (!r.ok) return r;  // keep the state file: the next start tries again
  std::error_code ec;
  std::filesystem::remove(state_file_, ec);
  saved_.reset();
  last_written_.reset();
  written_.clear();
  return r;
}

void SysfsHaltpollParams::expect_values_in_force() {
  expected_.clear();
  for (const char* name : kParams)
    if (auto v = read(name)) expected_[name] = *v;
  if (auto g = read_governor()) expected_["cpuidle_governor"] = *g;
  watching_ = true;
}

std::optional<ForeignValue> SysfsHaltpollParams::claimed_by_other() {
  const std::string who = tuned_haltpoll_writer(root_, "guest_halt_poll_ns");
  if (who.empty()) return std::nullopt;
  std::string parameter = "guest_halt_poll_ns";
  if (who.find(parameter) == std::string::npos)
    for (const char* name : kParams)
      if (who.find(name) != std::string::npos) {
        parameter = name;
        break;
      }
  const std::string value = printable_value(read(parameter.c_str()).value_or(""));
  return ForeignValue{parameter, value, value, who};
}

std::optional<ForeignValue> SysfsHaltpollParams::foreign_value() {
  if (!watching_ || other_writer_) return std::nullopt;
  auto differs = [&](const std::string& name, const std::optional<std::string>& cur) -> std::optional<ForeignValue> {
    const auto e = expected_.find(name);
    if (!cur || e == expected_.end() || e->second == *cur) return std::nullopt;  // unreadable is not foreign
    return ForeignValue{name, printable_value(*cur), e->second, {}};
  };
  std::optional<ForeignValue> f;
  for (const char* name : kParams)
    if ((f = differs(name, read(name)))) break;
  if (!f) f = differs("cpuidle_governor", read_governor());
  // Who, only now: a foreign value is rare, the look (TuneD's files, /proc) is not free.
  if (f) f->who = identify_other_writer(root_, params_dir(), f->parameter);
  return f;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::yield_to(const ForeignValue& f) {
  other_writer_ = f;
  watching_ = false;
  last_written_.reset();
  if (!saved_) return {};
  // The stop path, a restart's recover() and `haltpolld --restore` must all leave the other
  // writer's values: the state file says that the originals are superseded.
  return write_state_file(*saved_, saved_governor_);
}

SysfsHaltpollParams::Result SysfsHaltpollParams::take_over() {
  const bool governor_taken = other_writer_ && other_writer_->parameter == "cpuidle_governor";
  other_writer_.reset();
  watching_ = false;
  last_written_.reset();
  if (!saved_) return {};
  // What the other writer set is the new original; a value this run wrote and still in force keeps
  // the original it replaced.
  for (const char* name : kParams) {
    const auto cur = read(name);
    if (!cur || !valid_value(name, *cur)) continue;
    if (is_written(written_, name, *cur)) continue;
    (*saved_)[name] = *cur;
    written_.erase(name);
  }
  if (governor_taken) {
    const std::string g = read_small_file(cpuidle_dir() + "current_governor").value_or("");
    if (valid_governor(g)) saved_governor_ = g;
  }
  return write_state_file(*saved_, saved_governor_);
}

std::string SysfsHaltpollParams::recheck_blocked() {
  if (blocked_.empty()) return {};
  struct stat st{};
  if (::lstat(state_file_.c_str(), &st) != 0 && errno == ENOENT) {
    blocked_.clear();
    return fmt::format("the refused state file {} was removed: kernel writes resume", state_file_);
  }
  if (identity_of(state_file_) == blocked_identity_) return {};
  return recover().message;
}

SysfsHaltpollParams::Result SysfsHaltpollParams::recover() {
  Result r;
  blocked_.clear();
  remove_interrupted_writes(state_file_);
  int err = 0;
  std::string why;
  auto text = read_private_file(state_file_, err, why);
  auto refuse = [&](int e, std::string reason) {
    r.ok = false;
    r.error = e;
    r.message = fmt::format("state file {} not applied and left in place: {}", state_file_, reason);
    blocked_ = r.message;
    blocked_identity_ = identity_of(state_file_);
    return r;
  };
  if (!text) {
    if (err == ENOENT) return r;
    return refuse(err, why);
  }
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return refuse(EINVAL, "not a JSON object");
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() || *version != 1) return refuse(EINVAL, "version is not 1");
  const auto params = j.find("params");
  if (params == j.end() || !params->is_object()) return refuse(EINVAL, "params is not an object");
  if (params->size() != kParams.size()) return refuse(EINVAL, fmt::format("params has {} entries, not {}", params->size(), kParams.size()));
  std::map<std::string, std::string> values;
  for (const char* name : kParams) {
    const auto v = params->find(name);
    if (v == params->end() || !v->is_string()) return refuse(EINVAL, fmt::format("params.{} is missing or not a string", name));
    const std::string s = v->get<std::string>();
    if (!valid_value(name, s)) return refuse(EINVAL, fmt::format("params.{} is '{}', not a valid value", name, s));
    values[name] = s;
  }
  // Never a path from the file: a different root means the values belong to another tree.
  const auto root = j.find("sysfs_root");
  if (root != j.end()) {
    if (!root->is_string()) return refuse(EINVAL, "sysfs_root is not a string");
    std::string saved_root = root->get<std::string>();
    if (saved_root.empty() || saved_root.back() != '/') saved_root.push_back('/');
    if (saved_root != root_)
      return refuse(EINVAL, fmt::format("saved for sysfs root '{}', but the configured root is '{}'", saved_root, root_));
  }
  std::int64_t pid = 0;
  if (const auto p = j.find("pid"); p != j.end()) {
    if (!p->is_number_integer()) return refuse(EINVAL, "pid is not an integer");
    pid = p->get<std::int64_t>();
  }
  std::string governor;
  if (const auto g = j.find("cpuidle_governor"); g != j.end()) {
    if (!g->is_string() || !valid_governor(g->get<std::string>()))
      return refuse(EINVAL, "cpuidle_governor is not a governor name");
    governor = g->get<std::string>();
    // Only a governor this kernel has: the name came from a file, not from the kernel.
    const std::string available = " " + read_small_file(cpuidle_dir() + "available_governors").value_or("") + " ";
    if (available.find(" " + governor + " ") == std::string::npos)
      return refuse(EINVAL, fmt::format("cpuidle_governor '{}' is not in available_governors", governor));
  }
  // What the run wrote (absent in files of older versions: then every value differing goes back).
  std::optional<Written> written;
  if (const auto wr = j.find("written"); wr != j.end()) {
    if (!wr->is_object()) return refuse(EINVAL, "written is not an object");
    written.emplace();
    for (const auto& [name, v] : wr->items()) {
      if (std::find_if(kParams.begin(), kParams.end(), [&](const char* p) { return name == p; }) == kParams.end())
        return refuse(EINVAL, fmt::format("written names '{}', not a haltpoll parameter", printable_value(name)));
      if (!v.is_array() || v.empty() || v.size() > 2)
        return refuse(EINVAL, fmt::format("written.{} is not a list of one or two values", name));
      for (const auto& e : v) {
        if (!e.is_string() || !valid_value(name, e.get<std::string>()))
          return refuse(EINVAL, fmt::format("written.{} holds an invalid value", name));
        (*written)[name].push_back(e.get<std::string>());
      }
    }
  }
  // Superseded originals: another writer's values (and governor) stay.
  std::string other;
  if (const auto ow = j.find("other_writer"); ow != j.end()) {
    if (!ow->is_object()) return refuse(EINVAL, "other_writer is not an object");
    const auto who = ow->find("who");
    other = who != ow->end() && who->is_string() ? printable_value(who->get<std::string>()) : std::string(kUnknownWriter);
  }
  Result w = restore_values(params_dir(), values, written ? &*written : nullptr);
  if (!w.ok) return refuse(w.error, "restoring its values: " + w.message);
  const std::string left = w.message;
  if (other.empty()) {
    Result g = restore_governor(governor);
    if (!g.ok) return refuse(g.error, "restoring the governor: " + g.message);
    if (g.written) w.written = true;
  }
  std::error_code ec;
  std::filesystem::remove(state_file_, ec);
  r.message = fmt::format("restored the haltpoll parameters saved by pid {} in {} ({})", pid, state_file_,
                          w.written ? "values changed back" : "values were already the originals");
  if (!other.empty()) r.message += fmt::format("; the originals were superseded by another writer ({})", other);
  if (!left.empty()) r.message += "; " + left;
  r.written = true;  // a state file was found and handled
  return r;
}

}  // namespace haltpolld
