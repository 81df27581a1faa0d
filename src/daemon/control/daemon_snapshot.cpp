#include "control/daemon_snapshot.hpp"

namespace haltpolld {

EffectiveMode effective_mode(Mode requested, const ControllerStatus* controller) {
  if (controller && controller->kernel_effective) return {Mode::kernel, {}};
  // The alerts tell a configured observe mode from a kernel mode that failed by this wording.
  if (requested == Mode::observe || (controller && !controller->kernel_requested))
    return {Mode::observe, "observe requested by the configuration"};
  if (!controller) return {Mode::observe, "no controller runs"};
  return {Mode::observe, controller->kernel_mode_inactive_reason};
}

DaemonSnapshot make_snapshot(Mode requested, std::optional<ControllerStatus> controller, const std::string& sysfs_root) {
  DaemonSnapshot s;
  s.controller = std::move(controller);
  s.kernel = s.controller ? parse_kernel_haltpoll_params(s.controller->kernel.params) : read_kernel_haltpoll_params(sysfs_root);
  s.mode = effective_mode(requested, s.controller ? &*s.controller : nullptr);
  return s;
}

}  // namespace haltpolld
