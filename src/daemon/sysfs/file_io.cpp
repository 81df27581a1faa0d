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

}  // namespace

std::optional<std::string> read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  std::string s;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      errno = e;
      return std::nullopt;
    }
    if (n == 0) break;
    if (s.size() + static_cast<std::size_t>(n) > kMaxSmallFileBytes) {
      ::close(fd);
      errno = EFBIG;
      return std::nullopt;
    }
    s.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::optional<std::uint64_t> read_u64_file(const std::string& path) {
  auto s = read_small_file(path);
  if (!s || s->empty() || s->size() > 20) return std::nullopt;
  std::uint64_t v = 0;
  const auto r = std::from_chars(s->data(), s->data() + s->size(), v);
  if (r.ec != std::errc{} || r.ptr != s->data() + s->size()) return std::nullopt;
  return v;
}

std::string join_path(const std::string& root, const std::string& rel) {
  if (root.empty() || root == "/") return "/" + rel;
  return (root.back() == '/' ? root : root + "/") + rel;
}

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
  // A leading dot: node_exporter's textfile collector reads only *.prom, so it never scrapes this.
  const std::string tmp = dir + "/." + basename_of(path) + ".tmp." + random_suffix();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  int e = ::fchmod(fd, options.mode) == 0 ? 0 : errno;
  if (e == 0) e = write_all(fd, content);
  if (e == 0 && ::fsync(fd) != 0) e = errno;
  if (::close(fd) != 0 && e == 0) e = errno;
  if (e == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) e = errno;
  if (e != 0) {
    ::unlink(tmp.c_str());
    return e;
  }
  if (options.sync_directory) {
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }
  return 0;
}

std::string errno_message(const std::string& what, const std::string& path, int e) {
  return fmt::format("{} {}: {}", what, path, std::strerror(e));
}

}  // namespace haltpolld
