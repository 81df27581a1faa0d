#include "logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/systemd_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace haltpolld {

bool is_journal_stream(int fd, const char* journal_stream) {
  if (journal_stream == nullptr) return false;
  const std::string_view v(journal_stream);
  const auto colon = v.find(':');
  if (colon == std::string_view::npos) return false;
  unsigned long long dev = 0, ino = 0;
  const auto d = std::from_chars(v.data(), v.data() + colon, dev);
  const auto i = std::from_chars(v.data() + colon + 1, v.data() + v.size(), ino);
  if (d.ec != std::errc{} || d.ptr != v.data() + colon || i.ec != std::errc{} || i.ptr != v.data() + v.size())
    return false;
  struct stat st {};
  if (fstat(fd, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == dev && static_cast<unsigned long long>(st.st_ino) == ino;
}

void setup_logging(const std::string& level) {
  auto logger = spdlog::get("haltpolld");
  if (!logger) {
    if (is_journal_stream(STDERR_FILENO, std::getenv("JOURNAL_STREAM"))) {
      // The journal stamps time, unit and priority itself: the message alone.
      logger = spdlog::systemd_logger_mt("haltpolld", "haltpolld");
    } else {
      logger = spdlog::stderr_color_mt("haltpolld");
      logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    }
  }
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace haltpolld
