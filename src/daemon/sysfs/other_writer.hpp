// Who else writes the haltpoll parameters: the actuator asks this once, when it sees a value in
// force that it did not write (never per tick). The walk of /proc/*/fd also names the holders of
// the QoS devices (sysfs/polling_overrides.hpp). The answer is a sentence for status, logs and the
// state file: the active TuneD profile when it (or a profile it includes) names haltpoll
// parameters in a [sysfs] section or haltpoll keys in a [cpu] section, else a process that holds
// a parameter file open, else "unknown writer".
//
// Everything read here is untrusted: TuneD's files under <root>/etc/tuned and <root>/usr/lib/tuned
// and other processes' /proc entries are opened without blocking (no FIFO wait), only as regular
// files of at most 64 KiB, includes are followed to a bounded depth, and whatever ends up in the
// answer is cut to printable ASCII and a bounded length. Plain functions, no state: callable from
// any thread.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace haltpolld {

inline constexpr const char* kUnknownWriter = "unknown writer";

// The profile names of `tuned-adm active`'s output ("Current active profile: a b") or of TuneD's
// active_profile file ("a b"); empty for "No current active profile." or an empty file. Names
// that are not [A-Za-z0-9._-]+ are dropped.
std::vector<std::string> parse_tuned_active_profiles(std::string_view text);

// What a TuneD profile (tuned.conf, INI) says about haltpoll: its [main] include= profiles, and its
// lines that set haltpoll parameters (a [sysfs] section, or a section with type=sysfs, whose key
// names .../haltpoll/parameters/...; a [cpu] section's keys that name haltpoll), each as
// "[section] key = value".
struct TunedProfileHaltpoll {
  std::vector<std::string> includes;
  std::vector<std::string> haltpoll_lines;
};
TunedProfileHaltpoll parse_tuned_profile(std::string_view conf);

// The active TuneD profile's (or an included one's) lines that set a haltpoll parameter, as
// "profile 'name' (path: line)"; empty when TuneD has no active profile or none of its profiles
// names haltpoll. `root` is the sysfs root ("/" on a real guest).
std::string tuned_haltpoll_writer(const std::string& root, const std::string& parameter);

// The processes (not this one) with a descriptor whose /proc link target `matches`, at most `max`
// of them, and how many processes' descriptors could not be read (no permission: another user's,
// or a root process with more capabilities than this one, without CAP_SYS_PTRACE). Each target
// and comm is cut to printable ASCII and a bounded length.
struct FileHolder {
  int pid = 0;
  std::string comm;
  std::string path;  // the link target that matched
};
struct FileHolders {
  std::vector<FileHolder> found;
  unsigned unreadable = 0;
  bool proc_readable = true;  // false: `proc_dir` itself could not be listed
};
FileHolders processes_holding(const std::string& proc_dir, const std::function<bool(std::string_view)>& matches,
                              std::size_t max);

// "process PID (comm) holds PATH open" for the first process (not this one) with a descriptor on a
// file under `params_dir`; empty when none (or /proc does not tell).
std::string process_holding(const std::string& proc_dir, const std::string& params_dir);

// The sentence: TuneD, else a process, else kUnknownWriter.
std::string identify_other_writer(const std::string& root, const std::string& params_dir, const std::string& parameter);

}  // namespace haltpolld
