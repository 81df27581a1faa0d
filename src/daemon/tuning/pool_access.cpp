#include "tuning/pool_access.hpp"

#include <haltpoll/worker_pool.hpp>

namespace haltpolld {

namespace {

class WorkerPoolAccess final : public PoolAccess {
 public:
  explicit WorkerPoolAccess(haltpoll::WorkerPool& pool) : pool_(pool) {}

  std::vector<int> cpus() const override { return pool_.cpus(); }

  ProbePath submit(int cpu, std::function<void()> task) override {
    switch (pool_.submit(cpu, haltpoll::Task(std::move(task)))) {
      case haltpoll::SubmitOutcome::rejected: return ProbePath::rejected;
      case haltpoll::SubmitOutcome::queued: return ProbePath::queued;
      case haltpoll::SubmitOutcome::woke_polling: return ProbePath::poll_hit;
      case haltpoll::SubmitOutcome::woke_parked: return ProbePath::park_path;
    }
    return ProbePath::rejected;
  }

  std::vector<PoolCounters> counters() const override { return pool_.all_stats(); }

  void set_window_cap_ns(std::uint64_t ns) override { pool_.set_window_cap_ns(ns); }
  std::uint64_t window_cap_ns() const override { return pool_.window_cap_ns(); }

 private:
  haltpoll::WorkerPool& pool_;
};

}  // namespace

std::unique_ptr<PoolAccess> make_pool_access(haltpoll::WorkerPool* pool) {
  if (!pool) return nullptr;
  return std::make_unique<WorkerPoolAccess>(*pool);
}

}  // namespace haltpolld
