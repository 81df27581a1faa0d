// Small-file I/O shared by every sysfs/procfs reader and every file the daemon writes.
// Reads are bounded (a sysfs attribute or a state file is small; a file that is not is refused
// rather than read into memory) and trim the trailing newline sysfs adds. Writes replace a file
// atomically: a temporary with an unpredictable name in the same directory, created with
// O_CREAT|O_EXCL|O_NOFOLLOW (never an existing file, never through a symlink, never a FIFO
// that would block), checked with fstat to be a regular file, given its mode explicitly
// (independent of the process umask), renamed over the target, and for durable files (state)
// fsync'ed before and the directory fsync'ed after the rename so that it survives a crash. A
// file the daemon trusts (its own state) is read only when it and its directory belong to the
// effective uid and nobody else may write them.
// A DirectoryHandle keeps a directory open so that repeated replacements (the metrics textfile)
// go through openat/renameat into that one directory, whatever later happens to the path.
// Every free function is reentrant and keeps no state; a DirectoryHandle is one thread's.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace haltpolld {

// Largest file read_small_file accepts.
inline constexpr std::size_t kMaxSmallFileBytes = 1 << 20;

// The whole file, trailing newlines and spaces removed; empty optional (errno kept) on failure or
// when the file is larger than kMaxSmallFileBytes (errno EFBIG).
std::optional<std::string> read_small_file(const std::string& path);

// Reads of kernel files that several readers of one tick share, so that each file is read once
// per tick: the actuator's look for another writer and the sensors both read current_governor, and
// the actuator's status reads the parameters its look read. While held, the first read of a path
// is kept (with its errno) and returned to every later read of it, until the path is forgotten
// (this process wrote it) or the hold ends; not held, every read goes to the file. One thread's.
class HeldReads {
 public:
  // read_small_file(path), or what it gave the first time within the hold (errno set on failure).
  std::optional<std::string> read(const std::string& path);
  void hold(bool on);
  bool held() const noexcept { return held_.has_value(); }
  void forget(const std::string& path);

 private:
  struct Read {
    std::optional<std::string> text;
    int error = 0;
  };
  std::optional<std::map<std::string, Read>> held_;
};

// A file holding one unsigned decimal number (sysfs style); empty optional on anything else.
std::optional<std::uint64_t> read_u64_file(const std::string& path);
// The same parsing of text already read (read_small_file's trimmed content).
std::optional<std::uint64_t> parse_u64(const std::string& text);

// `root` + "/" + `rel` without doubling the slash; root "" or "/" gives "/rel".
std::string join_path(const std::string& root, const std::string& rel);

struct ReplaceOptions {
  mode_t mode = 0600;            // the file's mode, set with fchmod (the umask does not apply)
  bool sync_directory = false;   // fsync the file and, after the rename, the directory (state files)
  bool create_directory = false; // create the parent directory (mode 0700) when missing
};

// Replaces `path` with `content` atomically. Returns 0 or the errno of the failing step; on failure
// the temporary is removed and `path` is unchanged.
int replace_file_atomically(const std::string& path, const std::string& content, const ReplaceOptions& options = {});

// A file the daemon wrote, held open: the open descriptor keeps its inode alive, so that its
// (device, inode) pair cannot be reused by a file someone else creates under the same name, and
// the daemon removes only that file. Move-only.
class WrittenFile {
 public:
  WrittenFile() = default;
  WrittenFile(WrittenFile&& other) noexcept;
  WrittenFile& operator=(WrittenFile&& other) noexcept;
  WrittenFile(const WrittenFile&) = delete;
  WrittenFile& operator=(const WrittenFile&) = delete;
  ~WrittenFile();
  bool valid() const noexcept { return fd_ >= 0; }
  bool same_as(dev_t dev, ino_t ino) const noexcept { return fd_ >= 0 && dev == dev_ && ino == ino_; }

 private:
  friend class DirectoryHandle;
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

class DirectoryHandle {
 public:
  // Opens `dir` (O_DIRECTORY); nullopt with the errno on failure.
  static std::optional<DirectoryHandle> open(const std::string& dir, int& error);
  DirectoryHandle(DirectoryHandle&& other) noexcept;
  DirectoryHandle& operator=(DirectoryHandle&& other) noexcept;
  DirectoryHandle(const DirectoryHandle&) = delete;
  DirectoryHandle& operator=(const DirectoryHandle&) = delete;
  ~DirectoryHandle();

  // Replaces the entry `name` (no slash) as replace_file_atomically does; `written` receives the
  // new file (and releases the one it held). Returns 0 or the errno of the failing step.
  int replace(const std::string& name, const std::string& content, const ReplaceOptions& options,
              WrittenFile* written = nullptr) const;
  // Unlinks `name` only when it still is `file` (not a symlink, not someone else's file).
  bool remove_if_same(const std::string& name, const WrittenFile& file) const;
  int fd() const noexcept { return fd_; }

 private:
  explicit DirectoryHandle(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// Empty when `dir` is a directory owned by the effective uid that neither group nor others may
// write; else why not (for a status reason). `error` receives the errno (EPERM for a wrong owner
// or mode).
std::string check_private_directory(const std::string& dir, int& error);

// Reads a file only this user can have written: `path` is opened without following a symlink and
// without blocking, must be a regular file owned by the effective uid, not group- or
// other-writable, in a directory that passes check_private_directory. nullopt with `error`
// (ENOENT when there is no file) and `why` otherwise.
std::optional<std::string> read_private_file(const std::string& path, int& error, std::string& why);

// Text read from an untrusted file, fit for a message, a label or a log line: printable ASCII (any
// other byte becomes '?'), at most `max` characters, "..." appended when cut.
std::string printable_text(std::string_view s, std::size_t max);

// "what path: strerror(e)" for log lines and status reasons.
std::string errno_message(const std::string& what, const std::string& path, int e);

}  // namespace haltpolld
