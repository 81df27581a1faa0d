// InstanceLock: at most one haltpolld per socket. An exclusive flock on "<socket path>.lock", held
// for the life of the process (the kernel drops it when the process dies, so a crash leaves no
// stale lock); the file holds the owner's pid so that the second instance can say who runs.
#pragma once

#include <optional>
#include <string>

namespace haltpolld {

class InstanceLock {
 public:
  // Takes the lock, or returns nullopt with a one-line reason ("haltpolld is already running
  // (pid 123, lock /run/haltpolld/io.haltpolld.lock)").
  static std::optional<InstanceLock> acquire(const std::string& lock_path, std::string& why);

  InstanceLock(InstanceLock&& other) noexcept;
  InstanceLock& operator=(InstanceLock&&) = delete;
  InstanceLock(const InstanceLock&) = delete;
  ~InstanceLock();

  const std::string& path() const noexcept { return path_; }

 private:
  InstanceLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace haltpolld
