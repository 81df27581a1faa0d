// The simulated guest's tracepoint log written as `haltpolld record` writes the real one
// (src/bpf/idle_record.cpp): one line per idle state's residency ("cpu POLL|halt ns") and one per
// adjustment of a CPU's poll limit ("# limit cpu old new grow|shrink"), in the order the kernel
// emits them, so that the same tools read a real and a simulated recording: `haltpolld simulate
// --trace` (the replay through the haltpoll model) and scripts/trace-summary.py. A period still
// running at the end is left out, as the recorder leaves it out.
#pragma once

#include "sim/des_guest.hpp"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace haltpolld::des {

class GuestRecordWriter {
 public:
  // `comment`: the first header line's text after "# " (what was simulated).
  GuestRecordWriter(std::ostream& out, int cpus, const haltpoll::HaltpollParams& boot, const std::string& comment);
  // The events of one stretch of the run, during which the cap was `cap_ns`; a change of the cap
  // from the last stretch's is written as a comment ("# cap <ns> at <s> s").
  void consume(const std::vector<TraceEvent>& events, std::uint32_t cap_ns);
  // The closing comment: the virtual seconds and what was written.
  void finish(double seconds);
  std::uint64_t periods() const noexcept { return periods_; }
  std::uint64_t limit_events() const noexcept { return limits_; }

 private:
  struct Open {
    Ns since = -1;  // -1: not idle
    std::int32_t state = 0;
  };
  std::ostream& out_;
  std::vector<Open> open_;
  std::uint32_t cap_ns_;
  std::uint64_t periods_ = 0, limits_ = 0;
};

}  // namespace haltpolld::des
