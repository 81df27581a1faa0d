#include "sysfs/kernel_params.hpp"

#include "sysfs/file_io.hpp"

namespace haltpolld {

KernelHaltpollParams read_kernel_haltpoll_params(const std::string& sysfs_root) {
  KernelHaltpollParams k;
  std::string dir = join_path(sysfs_root, "sys/module/haltpoll/parameters/");
  k.guest_halt_poll_ns = read_u64_file(dir + "guest_halt_poll_ns");
  k.guest_halt_poll_grow = read_u64_file(dir + "guest_halt_poll_grow");
  k.guest_halt_poll_shrink = read_u64_file(dir + "guest_halt_poll_shrink");
  k.guest_halt_poll_grow_start = read_u64_file(dir + "guest_halt_poll_grow_start");
  if (auto s = read_small_file(dir + "guest_halt_poll_allow_shrink"); s && (*s == "Y" || *s == "N"))
    k.guest_halt_poll_allow_shrink = *s == "Y";
  k.present = k.guest_halt_poll_ns.has_value() || k.guest_halt_poll_allow_shrink.has_value();
  return k;
}

}  // namespace haltpolld
