// systemd readiness protocol (sd_notify): READY, STATUS, RELOADING, STOPPING and the watchdog.
// Every call is a no-op when NOTIFY_SOCKET is unset (not started by systemd), so the daemon runs
// the same way by hand, in tests and under Type=notify. Called from the control thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace haltpolld::notify {

void ready(const std::string& status);
void status(const std::string& status);
void reloading();
void stopping();
void watchdog();
// Half of WATCHDOG_USEC when systemd expects pings from this process, else nullopt.
std::optional<std::chrono::microseconds> watchdog_period();

}  // namespace haltpolld::notify
