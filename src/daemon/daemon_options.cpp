#include "daemon_options.hpp"

#include <haltpoll/affinity.hpp>
#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <filesystem>
#include <utility>

namespace haltpolld {

std::optional<gid_t> admin_gid_of(const Config& c) {
  if (c.socket.admin_group.empty()) return std::nullopt;
  auto gid = resolve_group(c.socket.admin_group);
  if (!gid) throw ConfigError("/socket/admin_group", "no group named \"" + c.socket.admin_group + "\" on this system");
  return gid;
}

ControlServerOptions server_options(const Config& c) {
  ControlServerOptions o;
  o.path = c.socket.path;
  o.mode = c.socket.mode;
  o.admin_gid = admin_gid_of(c);
  o.max_connections = c.socket.max_connections;
  o.max_connections_per_uid = c.socket.max_connections_per_uid;
  o.idle_timeout_ms = c.socket.idle_timeout_ms;
  o.calls_per_second_per_uid = c.socket.calls_per_second_per_uid;
  o.call_burst_per_uid = c.socket.call_burst_per_uid;
  return o;
}

std::vector<unsigned> configured_cpus(const Config& c) {
  std::vector<unsigned> allowed;
  for (int cpu : haltpoll::affinity_cpus()) allowed.push_back(static_cast<unsigned>(cpu));
  return expand_cpus(c.cpus, allowed);
}

haltpoll::PoolOptions pool_options(const Config& c, const std::vector<unsigned>& cpus) {
  haltpoll::PoolOptions po;
  for (unsigned cpu : cpus) po.cpus.push_back(static_cast<int>(cpu));
  po.policy = c.pool.policy;
  po.params.haltpoll = c.pool.haltpoll;
  po.window_cap_ns = c.pool.window_cap_ns;
  // The probes are the daemon's latency samples (a few per second): stamp every one of them.
  po.latency_sample_every = 1;
  return po;
}

std::optional<std::vector<InstanceLock>> take_instance_locks(const Config& c) {
  std::vector<InstanceLock> locks;
  std::string why;
  auto lock = InstanceLock::acquire(c.socket.path + ".lock", why);
  if (!lock) {
    spdlog::critical("{}", why);
    return std::nullopt;
  }
  locks.push_back(std::move(*lock));
  // The resources themselves: whatever the socket, one daemon per state directory and sysfs root.
  const std::string state_dir = effective_state_dir(c);
  std::error_code ec;
  if (!std::filesystem::exists(state_dir, ec) && std::filesystem::create_directories(state_dir, ec))
    ::chmod(state_dir.c_str(), 0700);
  std::vector<std::pair<std::string, const char*>> dirs = {{state_dir, "state directory"}};
  if (c.sysfs_root != state_dir) dirs.emplace_back(c.sysfs_root, "sysfs root");
  for (const auto& [dir, what] : dirs) {
    auto dir_lock = InstanceLock::acquire_directory(dir, what, why);
    if (!dir_lock) {
      spdlog::critical("{}", why);
      return std::nullopt;
    }
    locks.push_back(std::move(*dir_lock));
  }
  return locks;
}

}  // namespace haltpolld
