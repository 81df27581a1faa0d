#include "sysfs/file_io.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

namespace haltpolld {

namespace {

std::string dirname_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// 64 random bits in hex: the temporary's name cannot be guessed and planted in advance.
std::string random_suffix() {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    // No entropy yet (early boot): O_EXCL still refuses anything planted under this name.
    r = static_cast<std::uint64_t>(::getpid()) << 32 ^ static_cast<std::uint64_t>(::time(nullptr));
  }
  return fmt::format("{:016x}", r);
}

int write_all(int fd, const std::string& content) {
  std::size_t off = 0;
  while (off < content.size()) {
    const ssize_t n = ::write(fd, content.data() + off, content.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    off += static_cast<std::size_t>(n);
  }
  return 0;
}

// Reads all of `fd` into `out`; 0, the errno, or EFBIG beyond kMaxSmallFileBytes.
int read_bounded(int fd, std::string& out) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return 0;
    if (out.size() + static_cast<std::size_t>(n) > kMaxSmallFileBytes) return EFBIG;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  std::string s;
  const int e = read_bounded(fd, s);
  ::close(fd);
  if (e != 0) {
    errno = e;
    return std::nullopt;
  }
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::optional<std::string> HeldReads::read(const std::string& path) {
  if (!held_) return read_small_file(path);
  auto it = held_->find(path);
  if (it == held_->end()) {
    Read r;
    r.text = read_small_file(path);
    r.error = r.text ? 0 : errno;
    it = held_->emplace(path, std::move(r)).first;
  }
  if (!it->second.text) errno = it->second.error;
  return it->second.text;
}

void HeldReads::hold(bool on) {
  if (on) held_.emplace();
  else held_.reset();
}

void HeldReads::forget(const std::string& path) {
  if (held_) held_->erase(path);
}

std::string printable_text(std::string_view s, std::size_t max) {
  std::string out;
  for (char c : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    out.push_back(c >= 0x20 && c < 0x7f ? c : '?');
  }
  return out;
}

std::optional<std::uint64_t> parse_u64(const std::string& s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc{} || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> read_u64_file(const std::string& path) {
  auto s = read_small_file(path);
  if (!s) return std::nullopt;
  return parse_u64(*s);
}

std::string join_path(const std::string& root, const std::string& rel) {
  if (root.empty() || root == "/") return "/" + rel;
  return (root.back() == '/' ? root : root + "/") + rel;
}

namespace {

// Replaces `name` in the open directory `dfd`. The temporary is a new regular file or nothing.
int replace_at(int dfd, const std::string& name, const std::string& content, const ReplaceOptions& options,
               int* keep_fd, struct stat* written) {
  if (name.empty() || name.find('/') != std::string::npos) return EINVAL;
  // A leading dot: node_exporter's textfile collector reads only *.prom, so it never scrapes this.
  const std::string tmp = "." + name + ".tmp." + random_suffix();
  const int fd = ::openat(dfd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  struct stat st{};
  int e = ::fstat(fd, &st) == 0 ? 0 : errno;
  if (e == 0 && !S_ISREG(st.st_mode)) e = EINVAL;
  if (e == 0 && ::fchmod(fd, options.mode) != 0) e = errno;
  if (e == 0) e = write_all(fd, content);
  if (e == 0 && options.sync_directory && ::fsync(fd) != 0) e = errno;
  if (e == 0 && ::renameat(dfd, tmp.c_str(), dfd, name.c_str()) != 0) e = errno;
  if (e != 0 || !keep_fd) {
    if (::close(fd) != 0 && e == 0) e = errno;
  }
  if (e != 0) {
    if (keep_fd) ::close(fd);
    ::unlinkat(dfd, tmp.c_str(), 0);
    return e;
  }
  if (keep_fd) *keep_fd = fd;
  if (written) *written = st;
  if (options.sync_directory) ::fsync(dfd);
  return 0;
}

bool private_mode(const struct stat& st) { return st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0; }

std::string why_not_private(const std::string& what, const std::string& path, const struct stat& st) {
  if (st.st_uid != ::geteuid())
    return fmt::format("{} {} belongs to uid {}, not to the daemon's uid {}", what, path, st.st_uid, ::geteuid());
  return fmt::format("{} {} is writable by group or others (mode {:04o})", what, path, st.st_mode & 07777);
}

}  // namespace

int replace_file_atomically(const std::string& path, const std::string& content, const ReplaceOptions& options) {
  const std::string dir = dirname_of(path);
  if (options.create_directory) {
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec)) {
      std::filesystem::create_directories(dir, ec);
      if (ec) return ec.value();
      ::chmod(dir.c_str(), 0700);
    }
  }
  int e = 0;
  auto d = DirectoryHandle::open(dir, e);
  if (!d) return e;
  return d->replace(basename_of(path), content, options);
}

WrittenFile::WrittenFile(WrittenFile&& other) noexcept : fd_(other.fd_), dev_(other.dev_), ino_(other.ino_) {
  other.fd_ = -1;
}

WrittenFile& WrittenFile::operator=(WrittenFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    dev_ = other.dev_;
    ino_ = other.ino_;
    other.fd_ = -1;
  }
  return *this;
}

WrittenFile::~WrittenFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<DirectoryHandle> DirectoryHandle::open(const std::string& dir, int& error) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    error = errno;
    return std::nullopt;
  }
  return DirectoryHandle(fd);
}

DirectoryHandle::DirectoryHandle(DirectoryHandle&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

DirectoryHandle& DirectoryHandle::operator=(DirectoryHandle&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

DirectoryHandle::~DirectoryHandle() {
  if (fd_ >= 0) ::close(fd_);
}

int DirectoryHandle::replace(const std::string& name, const std::string& content, const ReplaceOptions& options,
                             WrittenFile* written) const {
  if (!written) return replace_at(fd_, name, content, options, nullptr, nullptr);
  WrittenFile w;
  struct stat st{};
  const int e = replace_at(fd_, name, content, options, &w.fd_, &st);
  if (e != 0) return e;
  w.dev_ = st.st_dev;
  w.ino_ = st.st_ino;
  *written = std::move(w);
  return 0;
}

bool DirectoryHandle::remove_if_same(const std::string& name, const WrittenFile& file) const {
  struct stat st{};
  if (::fstatat(fd_, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (!S_ISREG(st.st_mode) || !file.same_as(st.st_dev, st.st_ino)) return false;
  return ::unlinkat(fd_, name.c_str(), 0) == 0;
}

std::string check_private_directory(const std::string& dir, int& error) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) {
    error = errno;
    return errno_message("stat", dir, error);
  }
  if (!S_ISDIR(st.st_mode)) {
    error = ENOTDIR;
    return errno_message("stat", dir, error);
  }
  if (!private_mode(st)) {
    error = EPERM;
    return why_not_private("directory", dir, st);
  }
  error = 0;
  return {};
}

std::optional<std::string> read_private_file(const std::string& path, int& error, std::string& why) {
  const std::string dir = dirname_of(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    error = errno;
    why = errno_message("open", dir, error);
    return std::nullopt;
  }
  struct stat dst{};
  const int fd = ::openat(dfd, basename_of(path).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  error = fd < 0 ? errno : 0;
  // The directory is checked through the descriptor that found the file: no swap in between.
  const bool dir_ok = ::fstat(dfd, &dst) == 0 && private_mode(dst);
  ::close(dfd);
  if (fd < 0) {
    why = error == ELOOP ? fmt::format("{} is a symbolic link", path) : errno_message("open", path, error);
    return std::nullopt;
  }
  struct stat st{};
  std::string refused;
  if (::fstat(fd, &st) != 0) refused = errno_message("fstat", path, errno);
  else if (!S_ISREG(st.st_mode)) refused = fmt::format("{} is not a regular file", path);
  else if (!private_mode(st)) refused = why_not_private("file", path, st);
  else if (!dir_ok) refused = why_not_private("directory", dir, dst);
  else if (st.st_size > static_cast<off_t>(kMaxSmallFileBytes)) refused = errno_message("read", path, EFBIG);
  if (!refused.empty()) {
    ::close(fd);
    error = EPERM;
    why = refused;
    return std::nullopt;
  }
  std::string s;
  error = read_bounded(fd, s);
  ::close(fd);
  if (error != 0) {
    why = errno_message("read", path, error);
    return std::nullopt;
  }
  return s;
}

std::string errno_message(const std::string& what, const std::string& path, int e) {
  return fmt::format("{} {}: {}", what, path, std::strerror(e));
}

}  // namespace haltpolld
