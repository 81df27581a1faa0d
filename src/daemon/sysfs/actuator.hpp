// SysfsHaltpollParams: the actuator for the kernel's haltpoll governor parameters under
// `<sysfs_root>/sys/module/haltpoll/parameters/`. It detects whether writing them can have any
// effect (module present, cpuidle driver registered, current governor "haltpoll") and says
// precisely why not; before its first write it saves the original values of all the parameters to a state file
// (write to a temporary file, fsync, rename, fsync the directory) so that the next start after a
// crash or SIGKILL can put them back, and before every later write it writes that file again if it
// has gone; it writes only on change; restore() puts the originals back
// and removes the state file. A failed write reports errno and the path, changes nothing else and
// leaves the caller to degrade to observe mode. Not thread-safe: the Controller serialises calls.
//
// The state file is not trusted: recover() reads it only when it and its directory belong to the
// daemon's uid and nobody else may write them (no symlink, no FIFO), takes no path from it (the
// values go to the configured root only), and restores nothing unless every value is valid
// (decimal <= UINT32_MAX, or Y/N for allow_shrink). A state file that was not applied is never
// overwritten: until it is restored or removed, set_poll_ns() refuses with the reason
// (recheck_blocked() notices the removal or a repair). Parameter files are opened without
// following a symlink and must be regular files.
//
// Lowering the cap does not lower a CPU's poll limit until that CPU halts (the governor adjusts
// only after a halt), so a CPU whose wake-ups all arrive within its old limit polls at the old
// limit for as long as the load lasts (measured: a 150 µs timer kept polling 93 % of a CPU after
// the cap went from 200000 to 20000). reset_poll_limits() puts every CPU's limit back to 0 the
// only way the kernel offers, a cpuidle governor round trip (haltpoll → another → haltpoll: the
// governor's enable hook zeroes poll_limit_ns); the limits then regrow under the new cap. The
// governor found is saved in the state file with the parameters, and recover() and restore() put
// it back, so a crash between the two writes does not leave the guest on another governor.
//
// Another writer: the actuator knows what it wrote (each value is recorded in the state file, under
// "written", before it is written, next to the value before it: a kill between the record and the
// write leaves either in force) and what it found when kernel mode started, and foreign_value()
// compares the values in force with those. Once it yields to another writer, the state file says so
// ("other_writer"): restore(), recover() and `haltpolld --restore` then put back only the values
// this run wrote that are still in force, never the other writer's, and leave the governor alone.
// recover() applies the same rule to any state file with "written": a value in force that is
// neither the original nor the one written is another writer's and stays.
//
// It is the real kernel's HaltpollActuator (signals/edges.hpp).
#pragma once

#include "signals/edges.hpp"
#include "sysfs/file_io.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace haltpolld {

// KernelHaltpollState (signals/edges.hpp) as detect() fills it: params_present is
// <root>/sys/module/haltpoll/parameters existing, driver cpuidle/current_driver ("" when
// unreadable), governor cpuidle/current_governor (or current_governor_ro).

// The state file of `state_dir`: <state_dir>/haltpoll-params.json ("." when empty).
std::string haltpoll_state_file(const std::string& state_dir);

class SysfsHaltpollParams final : public HaltpollActuator {
 public:
  // Every parameter of kParams is saved and restored together.
  using Result = ActuatorResult;

  // `reads`: the held reads shared with the tick's other readers (sysfs_edges() gives the sensors
  // the same); null: its own.
  SysfsHaltpollParams(std::string sysfs_root, std::string state_file, std::shared_ptr<HeldReads> reads = nullptr);

  KernelHaltpollState detect() const override;
  std::string params_dir() const;
  const std::string& state_file() const noexcept { return state_file_; }
  std::string params_location() const override { return params_dir(); }
  std::string originals_location() const override { return state_file_; }

  std::optional<std::string> read(const char* name) const override;
  std::optional<std::uint32_t> read_poll_ns() const override;
  void hold_reads(bool on) override;

  // A state file left by a run that did not stop cleanly: put its values back and remove it.
  // ok=true, written=false and an empty message when there was none.
  Result recover() override;

  // Why kernel writes are refused (a state file of an earlier run that was not applied); empty
  // when they are not.
  const std::string& blocked_reason() const noexcept override { return blocked_; }
  // While writes are refused: looks at the state file again. Gone (an operator removed it): writes
  // are no longer refused. Changed since it was refused (an operator repaired it): recover() again.
  // Returns what happened (the new refusal included), empty when nothing did.
  std::string recheck_blocked() override;

  // True when `value` may be written to parameter `name` (decimal <= UINT32_MAX, or Y/N).
  static bool valid_value(const std::string& name, const std::string& value);

  // Saves the originals (first call only), then writes guest_halt_poll_ns when it differs.
  Result set_poll_ns(std::uint32_t ns) override;

  // Saves the originals (first call only), then writes guest_halt_poll_grow_start when it differs
  // (the tuner moves it with a small cap so that a shrink does not reset the limit to 0).
  Result set_grow_start_ns(std::uint32_t ns) override;

  // Zeroes every CPU's poll limit by switching the cpuidle governor away from haltpoll and back
  // (saves the originals first). Refused, changing nothing, unless the current governor is
  // haltpoll and another one is available.
  Result reset_poll_limits() override;
  std::uint64_t limit_resets() const noexcept { return limit_resets_; }
  // A name current_governor may be given: 1-15 characters of [a-z0-9_].
  static bool valid_governor(const std::string& name);

  // Puts the saved originals back (only those that differ and hold what this run wrote) and removes
  // the state file.
  Result restore() override;

  void expect_values_in_force() override;
  std::optional<ForeignValue> claimed_by_other() override;
  std::optional<ForeignValue> foreign_value() override;
  Result yield_to(const ForeignValue& f) override;
  Result take_over() override;
  const std::optional<ForeignValue>& other_writer() const noexcept { return other_writer_; }
  bool has_saved_originals() const noexcept override { return saved_.has_value(); }
  const std::optional<std::map<std::string, std::string>>& saved_originals() const noexcept { return saved_; }

 private:
  Result save_originals();
  // save_originals() the first time; later, writes the state file again if it has gone.
  Result ensure_saved();
  Result write_state_file(const std::map<std::string, std::string>& values, const std::string& governor) const;
  // Records `value` as written to `name` (in the state file first), then writes it.
  Result write_recorded(const char* name, const std::string& value);
  Result write_param(const std::string& dir, const std::string& name, const std::string& value) const;
  // The reads held by hold_reads(true): the parameters and current_governor.
  std::shared_ptr<HeldReads> reads_;
  std::optional<std::string> read_governor() const;
  // By parameter, the values this run wrote that may be in force: the last one and, while it is
  // being written, the one before.
  using Written = std::map<std::string, std::vector<std::string>>;
  static bool is_written(const Written& w, const std::string& name, const std::string& value);
  // Puts `values` back where they differ; with `written`, only where the value in force is one
  // written (any other is another writer's: left, and said in the message).
  Result restore_values(const std::string& dir, const std::map<std::string, std::string>& values,
                        const Written* written) const;
  std::string cpuidle_dir() const;
  Result write_governor(const std::string& name) const;
  // Puts `name` back as the current governor when another one is in force.
  Result restore_governor(const std::string& name) const;

  std::string root_;
  std::string state_file_;
  std::optional<std::map<std::string, std::string>> saved_;
  std::optional<std::uint32_t> last_written_;
  std::string saved_governor_;  // the governor found when the originals were saved ("" if unknown)
  std::uint64_t limit_resets_ = 0;
  Written written_;  // what this run wrote, by parameter: the last value and the one before (recorded in the state file)
  std::map<std::string, std::string> expected_;  // the values this run owns: found when watching started, or written
  bool watching_ = false;
  std::optional<ForeignValue> other_writer_;     // set by yield_to(): the originals are superseded
  std::string blocked_;
  std::string blocked_identity_;  // device, inode, ctime and size of the refused state file
};

}  // namespace haltpolld
