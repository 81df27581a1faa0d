// InstanceLock: at most one haltpolld per socket, per state directory and per sysfs root. An
// exclusive flock held for the life of the process (the kernel drops it when the process dies, so a
// crash leaves no stale lock): on "<socket path>.lock", whose content is the owner's pid so that the
// second instance can say who runs, and on the directories themselves (the state directory and the
// sysfs root), so that two daemons with different sockets never tune the same parameters or save
// each other's tuned values as "originals". A directory lock is on the inode: another path to the
// same directory (a bind mount, a symlink) finds it taken.
#pragma once

#include <optional>
#include <string>

namespace haltpolld {

class InstanceLock {
 public:
  // Takes the lock, or returns nullopt with a one-line reason ("haltpolld is already running
  // (pid 123, lock /run/haltpolld/io.haltpolld.lock)").
  static std::optional<InstanceLock> acquire(const std::string& lock_path, std::string& why);
  // Locks the directory `dir` itself; `what` names it in the reason ("sysfs root").
  static std::optional<InstanceLock> acquire_directory(const std::string& dir, const std::string& what,
                                                       std::string& why);

  InstanceLock(InstanceLock&& other) noexcept;
  InstanceLock& operator=(InstanceLock&&) = delete;
  InstanceLock(const InstanceLock&) = delete;
  ~InstanceLock();

  const std::string& path() const noexcept { return path_; }

 private:
  InstanceLock(int fd, std::string path, bool directory = false)
      : fd_(fd), path_(std::move(path)), directory_(directory) {}
  int fd_ = -1;
  std::string path_;
  bool directory_ = false;
};

}  // namespace haltpolld
