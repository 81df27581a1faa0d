#include "sysfs/kernel_params.hpp"

#include "sysfs/file_io.hpp"

namespace haltpolld {

namespace {

void read_param(const std::string& path, std::optional<std::uint64_t>& out) { out = read_u64_file(path); }
void read_param(const std::string& path, std::optional<bool>& out) {
  if (auto s = read_small_file(path); s && (*s == "Y" || *s == "N")) out = *s == "Y";
}

}  // namespace

KernelHaltpollParams read_kernel_haltpoll_params(const std::string& sysfs_root) {
  KernelHaltpollParams k;
  const std::string dir = join_path(sysfs_root, "sys/module/haltpoll/parameters/");
#define HALTPOLLD_READ_PARAM(name, type, value, kind) read_param(dir + #name, k.name);
  HALTPOLL_PARAMS(HALTPOLLD_READ_PARAM)
#undef HALTPOLLD_READ_PARAM
  k.present = k.guest_halt_poll_ns.has_value() || k.guest_halt_poll_allow_shrink.has_value();
  return k;
}

}  // namespace haltpolld
