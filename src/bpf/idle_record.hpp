// `haltpolld record`: captures every CPU's idle periods for a while with IdleTrace in record mode
// and writes them as an idle trace, the text format of docs/kernel-signals.md:
//
//   # comment lines start with '#'
//   <cpu> POLL <residency_ns>          a poll; followed on that CPU by a halt line = it timed out
//   <cpu> halt <residency_ns>          a halt (any non-POLL state)
//   # limit <cpu> <old> <new> grow|shrink   the governor's per-CPU poll limit changed (power:guest_halt_poll_ns)
//
// in the order the periods ended (per CPU in time order). The output is written to FILE.tmp and
// renamed at the end, so an existing FILE survives a failed run. SIGINT/SIGTERM end the recording
// early and still write the file (run_record installs its own handlers for the duration and puts
// the old ones back).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace haltpolld {

struct RecordOptions {
  double seconds = 0;     // > 0
  std::string output;     // a path, or "-" for stdout
  std::string sysfs_root = "/sys";
  std::size_t ring_bytes = std::size_t{16} << 20;  // ~500k periods; the reader drains it every 20 ms
};

enum RecordExit : int { record_ok = 0, record_usage = 2, record_unavailable = 3, record_io_error = 4 };

// Errors go to `err` as one line each; returns a RecordExit.
int run_record(const RecordOptions& options, std::ostream& err);
// The subcommand: argv[0] = "record", then --seconds N --output FILE (or --help).
int record_main(int argc, char** argv);

// One line of an idle trace.
struct IdleTraceLine {
  enum class Kind { comment, poll, halt, limit };
  Kind kind = Kind::comment;
  unsigned cpu = 0;
  std::uint64_t residency_ns = 0;  // poll, halt
  std::uint32_t old_ns = 0, new_ns = 0;  // limit
  bool grow = false;                      // limit
};
// False with `error` set for a malformed line; blank and other '#' lines are comments.
bool parse_idle_trace_line(std::string_view line, IdleTraceLine& out, std::string& error);

// An idle trace turned into idle periods, per CPU and in order, the way `haltpolld simulate` wants
// them (one duration each): a POLL followed on its CPU by a halt is one period of both residencies
// (a poll that timed out), any other POLL a period of its own (ended by a wake-up), a halt without
// a POLL before it a period of its own. Limit lines and comments are skipped.
struct IdlePeriod {
  std::uint64_t ns = 0;
  bool polled = false;     // began with a POLL
  bool halted = false;     // ended in a halt
};
class IdlePeriodReader {
 public:
  // False with `error` ("line N: ...") on a malformed line; the periods so far are kept.
  bool add_line(std::string_view line, std::string& error);
  // The polls still waiting for their CPU's next line become periods of their own.
  void finish();
  // periods()[cpu], in trace order.
  const std::vector<std::vector<IdlePeriod>>& periods() const noexcept { return periods_; }

 private:
  std::vector<std::vector<IdlePeriod>> periods_;
  std::vector<std::optional<std::uint64_t>> pending_poll_;  // per CPU
  std::uint64_t lineno_ = 0;
};

}  // namespace haltpolld
