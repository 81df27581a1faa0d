// Controller: the daemon's sensor → tuner → actuator loop, one step per tick(). It also measures
// the halt-exit penalty the tuner prices halts with (HaltExitPenalty, from the probes on ticks
// when the CPUs are otherwise idle) and, with tuner.grow_start_at_cap or manage_grow_start, writes
// the tuner's guest_halt_poll_grow_start next to the cap (before any limit reset).
// It reaches the guest only through its edges (signals/edges.hpp): a KernelSignalSource, a
// HaltpollActuator and a Clock, given at construction and kept for its life (the shell wires the
// sysfs ones in, sysfs/sysfs_edges.hpp; a simulated guest may provide its own in virtual time).
// start() first has the actuator put back the parameters left behind by a run that was killed,
// then detects whether kernel mode can work here and why not; the actuator saves the originals
// before its first change. Each tick samples the kernel's signals, the pool's counters and the
// probe latencies, asks the Tuner, and applies the Decision: to the kernel when kernel mode is
// active, else to the pool's window cap (the only poll window this process can move and measure
// itself) when there is a pool, else nowhere (observe). A write failure degrades to observe with
// the reason in status(). stop() restores the originals.
//
// Another writer: in kernel mode each tick first asks the actuator for a value in force that this
// run neither wrote nor found (HaltpollActuator::foreign_value(), before the tuner sees the value).
// One seen, the Controller stops writing (effective mode observe, the writer in status()), the
// actuator records that the originals are superseded, and stop() leaves the other writer's values
// in place. take_over() is the way back: the values in force become the originals and kernel mode
// resumes. A reload does not take over.
//
// Thread-safety: in the daemon every call comes from the one thread that runs the io_context (the
// tick timer, the varlink handlers, reload and shutdown), so the mutex that every public method
// takes is never contended there. It stays so that a Controller may be read (status(),
// decisions(), last_observation()) from another thread than the one that ticks, as the tests and
// tools do; it costs one uncontended lock per call. The Prober runs its own thread and never takes
// the mutex (stop() joins it under the lock). status() and decisions() return copies.
#pragma once

#include "signals/edges.hpp"
#include "tuning/controller_status.hpp"
#include "tuning/pool_access.hpp"
#include "tuning/prober.hpp"
#include "tuning/tuner.hpp"

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace haltpoll {
class WorkerPool;
}

namespace haltpolld {

struct ControllerOptions {
  bool kernel_mode = false;  // false: observe (decide, never write the kernel's parameters)
  std::vector<int> cpus;     // the CPUs to probe; empty: all of the pool's
  TunerParams tuner;
  double probe_rate_hz = 100;  // per CPU; 0 disables probes
  std::uint32_t interval_ms = 1000;
  std::size_t decision_log_size = 256;
};

class Controller {
 public:
  // `edges` must all be set.
  Controller(ControllerOptions options, GuestEdges edges, haltpoll::WorkerPool* pool);
  // For tests and models: any PoolAccess (nullptr: no pool).
  Controller(ControllerOptions options, GuestEdges edges, std::unique_ptr<PoolAccess> pool);
  ~Controller();  // stop() if the caller did not
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  void start();
  Decision tick();
  void stop();

  ControllerStatus status() const;
  // The status as the last tick left it, from the files that tick read (no read of its own);
  // empty before the first tick or after a tick that threw.
  std::optional<ControllerStatus> tick_status() const;
  std::vector<DecisionRecord> decisions() const;  // newest last
  // The last tick's Observation (its kernel signals feed the stats snapshot); empty before the
  // first tick.
  std::optional<Observation> last_observation() const;
  // The signal source's words on cpuidle: the states found, or why there are none.
  std::string cpuidle_status() const;
  // True while the tuner sweeps its ladder (not while it confirms a shrink): the daemon then ticks at
  // tuner.sweep_interval_ms.
  bool searching() const;
  // Takes the parameters back from another writer: the values in force become the originals, and
  // kernel mode resumes (when configured and possible). `took_over` false, with the reason, when
  // there was no other writer.
  struct TakeOver {
    bool took_over = false;
    std::string message;
    std::optional<OtherWriter> previous;
  };
  TakeOver take_over();
  // New options (reload); the edges stay.
  void update(const ControllerOptions& options);

  const ControllerOptions& options() const noexcept { return options_; }
  // Where the actuator keeps the originals (HaltpollActuator::originals_location()).
  std::string state_file() const;

 private:
  enum class Target { none, kernel, pool };
  void start_prober();
  void detect_locked();
  Target target_locked() const;
  ControllerStatus status_locked() const;
  Decision tick_locked();
  std::optional<ControllerStatus> tick_status_;
  void restore_locked();
  // Leaves kernel mode after a refused write (`why`, for status): restores what this run changed.
  void degrade_locked(const std::string& why);
  static const char* target_name(Target t) noexcept;

  mutable std::mutex mu_;
  ControllerOptions options_;
  std::unique_ptr<PoolAccess> pool_;
  std::shared_ptr<KernelSignalSource> signals_;
  std::shared_ptr<HaltpollActuator> actuator_;
  std::shared_ptr<const Clock> clock_;
  std::unique_ptr<Prober> prober_;
  HaltExitPenalty penalty_;
  Tuner tuner_;

  bool started_ = false;
  KernelHaltpollState kernel_;
  std::string degraded_reason_;  // set when a write failed: kernel mode is off until reload
  std::optional<OtherWriter> other_writer_;  // set when another writer was seen: kernel mode is off until take_over()
  bool watching_ = false;  // the actuator watches for another writer (kernel mode is the target)
  bool taken_over_ = false;  // take_over() ran: a writer's claim (claimed_by_other) no longer counts
  // In kernel mode: starts watching, or looks for another writer and yields to it. Returns the target.
  Target watch_locked(Target t);
  std::string recovery_message_;
  std::string reset_unavailable_;  // why reset_poll_limits() failed (not retried until reload)
  std::uint64_t limit_resets_ = 0;  // poll limit resets done
  std::uint64_t ticks_ = 0;
  std::vector<PoolCounters> last_pool_;
  haltpoll::LatencyHistogram carried_probes_;  // probe samples not yet used (fewer than min_latency_samples)
  std::uint32_t carried_ticks_ = 0;
  std::optional<Observation> last_obs_;
  std::deque<DecisionRecord> log_;
};

}  // namespace haltpolld
