// The haltpoll governor parameters as read from <sysfs_root>/sys/module/haltpoll/parameters,
// each one empty when absent or unreadable. A plain value read on demand; no state.
#pragma once

#include <haltpoll/governor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace haltpolld {

// The kernel parameters of the library's table (HALTPOLL_PARAMS) as read from
// <sysfs_root>/sys/module/haltpoll/parameters: numbers as read (u64), the flag as Y/N.
struct KernelHaltpollParams {
#define HALTPOLLD_KERNEL_PARAM(name, type, value, kind) \
  std::optional<std::conditional_t<std::is_same_v<type, bool>, bool, std::uint64_t>> name;
  HALTPOLL_PARAMS(HALTPOLLD_KERNEL_PARAM)
#undef HALTPOLLD_KERNEL_PARAM
  bool present = false;  // the module directory exists
};
KernelHaltpollParams read_kernel_haltpoll_params(const std::string& sysfs_root);

// The same from the files' contents already read, as (name, content) pairs with an empty content
// for an unreadable file (ControllerStatus::Kernel::params, the actuator's reading of the table):
// a name missing from `read` stays empty.
using KernelParamReadings = std::vector<std::pair<std::string, std::optional<std::string>>>;
KernelHaltpollParams parse_kernel_haltpoll_params(const KernelParamReadings& read);

}  // namespace haltpolld
