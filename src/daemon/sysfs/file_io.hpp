// Small-file I/O shared by every sysfs/procfs reader and every file the daemon writes.
// Reads are bounded (a sysfs attribute or a state file is small; a file that is not is refused
// rather than read into memory) and trim the trailing newline sysfs adds. Writes replace a file
// atomically: a temporary with an unpredictable name in the same directory, created with
// O_CREAT|O_EXCL|O_NOFOLLOW (never an existing file, never through a symlink, never a FIFO
// that would block), given its mode explicitly (independent of the process umask), fsync'ed,
// renamed over the target, and optionally the directory fsync'ed so the rename survives a crash.
// Every function is reentrant; none keeps state.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace haltpolld {

// Largest file read_small_file accepts.
inline constexpr std::size_t kMaxSmallFileBytes = 1 << 20;

// The whole file, trailing newlines and spaces removed; empty optional (errno kept) on failure or
// when the file is larger than kMaxSmallFileBytes (errno EFBIG).
std::optional<std::string> read_small_file(const std::string& path);

// A file holding one unsigned decimal number (sysfs style); empty optional on anything else.
std::optional<std::uint64_t> read_u64_file(const std::string& path);

// `root` + "/" + `rel` without doubling the slash; root "" or "/" gives "/rel".
std::string join_path(const std::string& root, const std::string& rel);

struct ReplaceOptions {
  mode_t mode = 0600;            // the file's mode, set with fchmod (the umask does not apply)
  bool sync_directory = false;   // fsync the directory after the rename (durable state files)
  bool create_directory = false; // create the parent directory (mode 0700) when missing
};

// Replaces `path` with `content` atomically. Returns 0 or the errno of the failing step; on failure
// the temporary is removed and `path` is unchanged.
int replace_file_atomically(const std::string& path, const std::string& content, const ReplaceOptions& options = {});

// "what path: strerror(e)" for log lines and status reasons.
std::string errno_message(const std::string& what, const std::string& path, int e);

}  // namespace haltpolld
