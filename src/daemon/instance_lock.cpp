#include "instance_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace haltpolld {

std::optional<InstanceLock> InstanceLock::acquire(const std::string& lock_path, std::string& why) {
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    why = "cannot open lock file " + lock_path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char buf[32] = {};
    ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("unknown");
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      why = "haltpolld is already running (pid " + pid + ", lock " + lock_path + ")";
    } else {
      why = "cannot lock " + lock_path + ": " + std::strerror(err);
    }
    return std::nullopt;
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The pid is only informative; holding the lock is what matters.
  }
  return InstanceLock(fd, lock_path);
}

std::optional<InstanceLock> InstanceLock::acquire_directory(const std::string& dir, const std::string& what,
                                                           std::string& why) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    why = "cannot open " + what + " " + dir + " to lock it: " + std::strerror(errno);
    return std::nullopt;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    why = err == EWOULDBLOCK ? "haltpolld is already running for " + what + " " + dir +
                                   " (another instance holds its lock; see its socket's .lock file for the pid)"
                             : "cannot lock " + what + " " + dir + ": " + std::strerror(err);
    return std::nullopt;
  }
  return InstanceLock(fd, dir, true);
}

InstanceLock::InstanceLock(InstanceLock&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)), directory_(other.directory_) {
  other.fd_ = -1;
}

InstanceLock::~InstanceLock() {
  if (fd_ < 0) return;
  if (directory_) {
    ::close(fd_);
    return;
  }
  // Empty the pid but keep the file: unlinking a lock file races with a starting instance.
  if (::ftruncate(fd_, 0) != 0) {
  }
  ::close(fd_);
}

}  // namespace haltpolld
