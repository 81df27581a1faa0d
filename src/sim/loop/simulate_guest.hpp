// `haltpolld simulate --guest`: predicts, for a load an operator describes (des_load_json.hpp), the
// poll CPU and the load's latency or throughput on an N-vCPU haltpoll guest at a setting (the
// daemon's policy, run unmodified in the closed loop, or a static cap), with the calibration error
// printed beside each prediction (des_calibration.hpp, kCalibrationTolerance).
// add_simulate_command_with_guest() adds the `simulate` subcommand of sim/simulate.hpp (the trace
// replay, unchanged) plus --guest and its options; without --guest it runs the replay. An option of
// the other mode is refused, not ignored (--policy, --miss-cost-ns, --cap-ns and
// --residency-bias-ns are the replay's; --load, --cpus, --setting, --boot-ns, --seconds, --seed and
// --decisions the guest's; --set and --json serve both).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace haltpolld::des {

struct GuestSimulateOptions {
  std::string load_path;  // JSON load description, '-' for stdin
  int cpus = 2;
  std::string setting = "balanced";  // balanced | budget | latency | static:<ns>
  std::uint32_t boot_ns = 200000;    // guest_halt_poll_ns the guest boots with (the daemon starts from it)
  double seconds = 30;               // virtual time, the daemon's search included
  std::uint64_t seed = 1;
  bool json = false;
  bool decisions = false;  // also print every change of the cap with the tuner's reason
  // The guest's other module parameters at boot, "key=value" (--set): guest_halt_poll_grow,
  // guest_halt_poll_grow_start, guest_halt_poll_shrink, guest_halt_poll_allow_shrink. The cap is
  // --setting's (or --boot-ns); the replay's policy keys are refused.
  std::vector<std::string> sets;
  // Also write the guest's idle periods and limit changes to this file in `haltpolld record`'s
  // format (loop/guest_record.hpp); replaced only when the run succeeds. Empty: none.
  std::string record_path;
};

// Exit codes: 0 ok, 2 usage (a bad setting, --cpus or --set), 3 the load (unreadable, malformed).
int run_simulate_guest(const GuestSimulateOptions& o, std::ostream& out, std::ostream& err);

std::function<int()> add_simulate_command_with_guest(CLI::App& parent);

}  // namespace haltpolld::des
