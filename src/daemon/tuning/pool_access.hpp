// PoolAccess: what the Controller needs from the worker pool (submit a probe, read counters, set
// the window cap), behind an interface so that the Controller builds and is tested without the
// pool, and so that the tests can substitute a fake. make_pool_access() adapts a
// haltpoll::WorkerPool (pool_access.cpp) or returns nullptr when the pool is absent.
// Thread-safety is the pool's: submit() from the prober thread, the rest from the control thread.
#pragma once

#include "tuning/prober.hpp"

#include <haltpoll/worker_pool.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace haltpolld {

// The counters of one worker, as the pool keeps them: the library's table, not a copy of it.
using PoolCounters = haltpoll::WorkerStats;

class PoolAccess {
 public:
  virtual ~PoolAccess() = default;
  virtual std::vector<int> cpus() const = 0;
  virtual ProbePath submit(int cpu, std::function<void()> task) = 0;
  virtual std::vector<PoolCounters> counters() const = 0;
  virtual void set_window_cap_ns(std::uint64_t ns) = 0;
  virtual std::uint64_t window_cap_ns() const = 0;
};

std::unique_ptr<PoolAccess> make_pool_access(haltpoll::WorkerPool* pool);

}  // namespace haltpolld
