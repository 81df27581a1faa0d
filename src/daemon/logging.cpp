#include "logging.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace haltpolld {

void setup_logging(const std::string& level) {
  auto logger = spdlog::get("haltpolld");
  if (!logger) logger = spdlog::stderr_color_mt("haltpolld");
  // Under systemd, stderr goes to the journal, which stamps time and priority itself.
  if (std::getenv("JOURNAL_STREAM") != nullptr)
    logger->set_pattern("%l: %v");
  else
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace haltpolld
