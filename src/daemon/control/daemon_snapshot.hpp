// DaemonSnapshot: what the daemon reports of one moment, taken once per tick right after the
// Controller's step (and afresh for GetStatus): one Controller::status() (which carries the tick's
// Observation, cumulative counters included), the kernel's haltpoll parameters as that status read
// them, and the effective mode with its reason. The status line, GetStats' mode and kernel
// parameters, the fleet series and GetStatus are all derived from a snapshot, so that a tick reads
// each kernel file once and every report agrees on the mode. A plain value: no threads, no shared
// state.
#pragma once

#include "config.hpp"
#include "sysfs/kernel_params.hpp"
#include "tuning/controller_status.hpp"

#include <optional>
#include <string>

namespace haltpolld {

// The mode the daemon is really in, and why it is not kernel mode.
struct EffectiveMode {
  Mode mode = Mode::observe;
  std::string reason;  // empty while kernel mode is active
};

// The one place that decides the effective mode: kernel when the Controller writes the kernel's
// parameters, else observe with the configuration's or the Controller's reason. `controller` is
// Controller::status(), nullptr without a Controller.
EffectiveMode effective_mode(Mode requested, const ControllerStatus* controller);

struct DaemonSnapshot {
  std::optional<ControllerStatus> controller;  // empty without a Controller
  KernelHaltpollParams kernel;
  EffectiveMode mode;
};

// From one Controller::status() (empty without a Controller: the parameters are then read from
// `sysfs_root`).
DaemonSnapshot make_snapshot(Mode requested, std::optional<ControllerStatus> controller, const std::string& sysfs_root);

}  // namespace haltpolld
