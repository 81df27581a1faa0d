#include "notify.hpp"

#include <haltpoll/clock.hpp>

#include <systemd/sd-daemon.h>


namespace haltpolld::notify {

namespace {
void send(const std::string& s) { (void)sd_notify(0, s.c_str()); }
}  // namespace

void ready(const std::string& st) { send("READY=1\nSTATUS=" + st); }
void status(const std::string& st) { send("STATUS=" + st); }

void reloading() {
  // systemd ≥ 253 (Type=notify-reload) wants the monotonic time with RELOADING=1; older ones ignore it.
  send("RELOADING=1\nMONOTONIC_USEC=" + std::to_string(haltpoll::clock_monotonic_ns() / 1000));
}

void stopping() { send("STOPPING=1"); }
void watchdog() { send("WATCHDOG=1"); }

std::optional<std::chrono::microseconds> watchdog_period() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec / 2);
}

}  // namespace haltpolld::notify
