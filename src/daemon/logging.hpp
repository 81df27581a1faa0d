// spdlog set-up shared by the daemon's entry points: stderr only (journald collects it under
// systemd), no timestamps when journald adds its own.
#pragma once

#include <string>

namespace haltpolld {

void setup_logging(const std::string& level);

}  // namespace haltpolld
