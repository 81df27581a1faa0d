// The simulated guest's tracepoint log in `haltpolld record`'s format (guest_record.hpp).
#include "sim/loop/guest_record.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

namespace haltpolld::des {

GuestRecordWriter::GuestRecordWriter(std::ostream& out, int cpus, const haltpoll::HaltpollParams& boot,
                                     const std::string& comment)
    : out_(out), open_(static_cast<std::size_t>(cpus)), cap_ns_(boot.guest_halt_poll_ns) {
  fmt::print(out_, "# {}\n", comment);
  // The parameters at boot, as the recorder copies the ones in force (a flag as sysfs shows it,
  // Y or N), so that the replay uses them.
  std::string header = "# haltpoll";
  haltpoll::for_each_haltpoll_param([&](const char* name, auto member, haltpoll::HaltpollParamKind kind) {
    if (kind == haltpoll::HaltpollParamKind::flag) header += fmt::format(" {}={}", name, boot.*member ? "Y" : "N");
    else header += fmt::format(" {}={}", name, boot.*member);
  });
  fmt::print(out_, "{}\n", header);
  fmt::print(out_, "# cpu state residency_ns | # limit cpu old new grow|shrink\n");
}

void GuestRecordWriter::consume(const std::vector<TraceEvent>& events, std::uint32_t cap_ns) {
  if (cap_ns != cap_ns_) {
    const Ns at = events.empty() ? 0 : events.front().t;
    fmt::print(out_, "# cap {} at {:.6f} s\n", cap_ns, static_cast<double>(at) / 1e9);
    cap_ns_ = cap_ns;
  }
  for (const TraceEvent& e : events) {
    if (e.cpu >= open_.size()) continue;
    Open& o = open_[e.cpu];
    switch (e.kind) {
      case TraceEvent::Kind::cpu_idle:
        if (e.state >= 0) {
          o.since = e.t;
          o.state = e.state;
        } else if (o.since >= 0) {
          fmt::print(out_, "{} {} {}\n", e.cpu, o.state == 0 ? "POLL" : "halt", e.t - o.since);
          o.since = -1;
          ++periods_;
        }
        break;
      case TraceEvent::Kind::guest_halt_poll_ns:
        fmt::print(out_, "# limit {} {} {} {}\n", e.cpu, e.old_ns, e.new_ns, e.grow ? "grow" : "shrink");
        ++limits_;
        break;
      case TraceEvent::Kind::wake_idle_without_ipi:
        break;  // not part of the format (haltpolld record leaves it out too)
    }
  }
}

void GuestRecordWriter::finish(double seconds) {
  fmt::print(out_, "# end: {:.3f} s, {} periods, {} limit events\n", seconds, periods_, limits_);
}

}  // namespace haltpolld::des
