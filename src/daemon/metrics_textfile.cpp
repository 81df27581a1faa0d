#include "metrics_textfile.hpp"

#include <spdlog/spdlog.h>

namespace haltpolld {

void MetricsTextfile::write(const std::string& path, const std::string& content) {
  if (path.empty()) return;
  const auto slash = path.rfind('/');
  int e = 0;
  if (!dir_) dir_ = DirectoryHandle::open(slash == 0 ? "/" : path.substr(0, slash), e);
  if (dir_) e = dir_->replace(path.substr(slash + 1), content, {.mode = 0644}, &written_);
  const std::string err = e == 0 ? std::string() : errno_message("replace", path, e);
  if (err != error_) {
    // Log a failure once, and its recovery once, not every tick.
    if (err.empty()) spdlog::info("metrics textfile {} written again", path);
    else spdlog::warn("metrics textfile: {}", err);
    error_ = err;
  }
}

void MetricsTextfile::remove(const std::string& path) {
  // Only the file this process wrote: whatever has replaced it since is not ours to delete.
  if (dir_ && written_.valid()) dir_->remove_if_same(path.substr(path.rfind('/') + 1), written_);
  written_ = WrittenFile();
}

}  // namespace haltpolld
