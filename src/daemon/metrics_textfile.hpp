// MetricsTextfile: the Prometheus exposition written to metrics.textfile for node_exporter's
// textfile collector, replaced atomically on every tick through the file's directory, opened once.
// A failure is logged once and its recovery once, not every tick; error() keeps it for GetStatus.
// remove() deletes only the file this process wrote last (a stale textfile would keep reporting the
// last values as if the daemon still ran). Not thread-safe: the control thread calls all.
#pragma once

#include "sysfs/file_io.hpp"

#include <optional>
#include <string>

namespace haltpolld {

class MetricsTextfile {
 public:
  // `path` empty: nothing to write.
  void write(const std::string& path, const std::string& content);
  void remove(const std::string& path);
  const std::string& error() const noexcept { return error_; }

 private:
  std::optional<DirectoryHandle> dir_;
  WrittenFile written_;
  std::string error_;
};

}  // namespace haltpolld
