// The options of the daemon's parts that follow from the configuration alone: the control
// server's (its socket section, at the start and at every reload), the worker pool's, and the
// single-instance locks, and the CPUs to run on.
#pragma once

#include "config.hpp"
#include "control/control_server.hpp"
#include "instance_lock.hpp"

#include <haltpoll/worker_pool.hpp>

#include <sys/types.h>

#include <optional>
#include <vector>

namespace haltpolld {

// The gid of socket.admin_group; empty when none is configured. Throws ConfigError when the
// group does not exist on this system.
std::optional<gid_t> admin_gid_of(const Config& c);
ControlServerOptions server_options(const Config& c);
// config.cpus expanded over the CPUs this process may run on (cgroup cpusets included).
std::vector<unsigned> configured_cpus(const Config& c);
// The pool of `cpus` (the configured CPUs expanded).
haltpoll::PoolOptions pool_options(const Config& c, const std::vector<unsigned>& cpus);
// One daemon per socket, state directory and sysfs root (InstanceLock): the locks taken, or empty
// after logging why not.
std::optional<std::vector<InstanceLock>> take_instance_locks(const Config& c);

}  // namespace haltpolld
