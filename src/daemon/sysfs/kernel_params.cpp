#include "sysfs/kernel_params.hpp"

#include "sysfs/file_io.hpp"

namespace haltpolld {

namespace {

void parse_param(const std::string& s, std::optional<std::uint64_t>& out) { out = parse_u64(s); }
void parse_param(const std::string& s, std::optional<bool>& out) {
  if (s == "Y" || s == "N") out = s == "Y";
}

}  // namespace

KernelHaltpollParams parse_kernel_haltpoll_params(const KernelParamReadings& read) {
  KernelHaltpollParams k;
  auto content = [&](const char* name) -> const std::optional<std::string>* {
    for (const auto& [n, v] : read)
      if (n == name) return &v;
    return nullptr;
  };
#define HALTPOLLD_PARSE_PARAM(name, type, value, kind) \
  if (const auto* v = content(#name); v && *v) parse_param(**v, k.name);
  HALTPOLL_PARAMS(HALTPOLLD_PARSE_PARAM)
#undef HALTPOLLD_PARSE_PARAM
  k.present = k.guest_halt_poll_ns.has_value() || k.guest_halt_poll_allow_shrink.has_value();
  return k;
}

KernelHaltpollParams read_kernel_haltpoll_params(const std::string& sysfs_root) {
  const std::string dir = join_path(sysfs_root, "sys/module/haltpoll/parameters/");
  KernelParamReadings read;
#define HALTPOLLD_READ_PARAM(name, type, value, kind) read.emplace_back(#name, read_small_file(dir + #name));
  HALTPOLL_PARAMS(HALTPOLLD_READ_PARAM)
#undef HALTPOLLD_READ_PARAM
  return parse_kernel_haltpoll_params(read);
}

}  // namespace haltpolld
