// The five haltpoll governor parameters as read from <sysfs_root>/sys/module/haltpoll/parameters,
// each one empty when absent or unreadable. A plain value read on demand; no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace haltpolld {

// The five kernel parameters as read from <sysfs_root>/sys/module/haltpoll/parameters.
struct KernelHaltpollParams {
  std::optional<std::uint64_t> guest_halt_poll_ns, guest_halt_poll_grow, guest_halt_poll_shrink,
      guest_halt_poll_grow_start;
  std::optional<bool> guest_halt_poll_allow_shrink;
  bool present = false;  // the module directory exists
};
KernelHaltpollParams read_kernel_haltpoll_params(const std::string& sysfs_root);

}  // namespace haltpolld
