#include "logging.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

namespace haltpolld {

int journal_priority(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::critical: return 2;
    case spdlog::level::err: return 3;
    case spdlog::level::warn: return 4;
    case spdlog::level::info: return 6;
    default: return 7;  // debug, trace
  }
}

std::string journal_stream_lines(spdlog::level::level_enum level, std::string_view message) {
  const std::string prefix = "<" + std::to_string(journal_priority(level)) + ">";
  std::string out;
  out.reserve(message.size() + prefix.size() + 1);
  // Every line carries the prefix: journald reads one record per line of the stream.
  if (!message.empty() && message.back() == '\n') message.remove_suffix(1);
  for (std::size_t start = 0;;) {
    const auto nl = message.find('\n', start);
    out.append(prefix).append(message.substr(start, nl - start)).push_back('\n');  // npos - start: the rest
    if (nl == std::string_view::npos) return out;
    start = nl + 1;
  }
}

namespace {

// stderr as the journal's stream, each line prefixed with its syslog priority.
class JournalStreamSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string out =
        journal_stream_lines(msg.level, std::string_view(msg.payload.data(), msg.payload.size()));
    for (std::size_t done = 0; done < out.size();) {  // one write per message unless it is cut short
      const ssize_t n = ::write(STDERR_FILENO, out.data() + done, out.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // nowhere left to log to
      done += static_cast<std::size_t>(n);
    }
  }
  void flush_() override {}
};

}  // namespace

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
      // The journal stamps time and unit itself: the priority prefix and the message alone.
      logger = std::make_shared<spdlog::logger>("haltpolld", std::make_shared<JournalStreamSink>());
      spdlog::register_logger(logger);
    } else {
      logger = spdlog::stderr_color_mt("haltpolld");
      logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    }
  }
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace haltpolld
