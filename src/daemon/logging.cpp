#include "logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <memory>

namespace haltpolld {

namespace {

// "<N>", the sd-daemon(3) priority prefix: the journal files each line under its level, so that
// `journalctl -p warning` shows the daemon's warnings (without it every line is "info").
class JournalPriority final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    static constexpr const char* kPrefix[] = {"<7>", "<7>", "<6>", "<4>", "<3>", "<2>", "<6>"};
    const auto level = static_cast<std::size_t>(msg.level);
    const char* p = kPrefix[level < std::size(kPrefix) ? level : 6];
    dest.append(p, p + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JournalPriority>(); }
};

}  // namespace

void setup_logging(const std::string& level) {
  auto logger = spdlog::get("haltpolld");
  if (!logger) logger = spdlog::stderr_color_mt("haltpolld");
  // Under systemd, stderr goes to the journal, which stamps time and priority itself.
  if (std::getenv("JOURNAL_STREAM") != nullptr) {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JournalPriority>('*').set_pattern("%*%l: %v");
    logger->set_formatter(std::move(f));
  } else
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace haltpolld
