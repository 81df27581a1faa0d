#include "sysfs/polling_overrides.hpp"

#include "sysfs/other_writer.hpp"

#include <haltpoll/affinity.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>

namespace haltpolld {

namespace {

// drivers/base/power/sysfs.c never shows PM_QOS_RESUME_LATENCY_NO_CONSTRAINT (S32_MAX): it shows 0.
constexpr std::int64_t kNoConstraint = std::numeric_limits<std::int32_t>::max();
constexpr std::size_t kMaxHolders = 8;
constexpr std::size_t kMaxText = 32;

std::string cpu_dir(const std::string& root, int cpu) {
  return fmt::format("{}sys/devices/system/cpu/cpu{}/", root, cpu);
}

// "held by process 4242 (cyclictest)", "held by processes 1 (a), 2 (b)", or the walk's note.
std::string held_by(const GlobalLatencyQos& q) {
  if (q.holders.empty()) return q.holders_note;
  std::string who;
  for (const auto& h : q.holders) who += fmt::format("{}{} ({})", who.empty() ? "" : ", ", h.pid, h.comm);
  return fmt::format("held by process{} {}{}", q.holders.size() == 1 ? "" : "es", who,
                     q.holders_note.empty() ? "" : "; " + q.holders_note);
}

std::string qos_zero_reason(const char* name, const GlobalLatencyQos& q) {
  const std::string who = held_by(q);
  return fmt::format("{} is 0{}", name, who.empty() ? "" : ", " + who);
}

}  // namespace

GlobalLatencyQos read_latency_qos_device(const std::string& path, const std::string& device) {
  GlobalLatencyQos q;
  q.device = device;
  // O_NONBLOCK: nothing that is not the device (a FIFO put there) can stall the tick.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) return q;
    q.present = true;
    q.error = fmt::format("{} cannot be read ({}): {}", device, path, std::strerror(e));
    if (e == EACCES || e == EPERM)
      q.error += " (the device is root's, mode 0600; under systemd the unit must allow it)";
    return q;
  }
  q.present = true;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISREG(st.st_mode))) {
    ::close(fd);
    q.error = fmt::format("{} ({}) is neither a character device nor a regular file", device, path);
    return q;
  }
  // The kernel hands out the s32 once (simple_read_from_buffer); more than that is not the device.
  char buf[16];
  std::size_t got = 0;
  int e = 0;
  while (got < sizeof buf) {
    const ssize_t n = ::read(fd, buf + got, sizeof buf - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) e = errno;
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (e != 0) {
    q.error = fmt::format("{} cannot be read ({}): {}", device, path, std::strerror(e));
  } else if (got != sizeof(std::int32_t)) {
    q.error = fmt::format("{} ({}) gave {}{} bytes, not the 4 of the kernel's s32", device, path, got,
                          got == sizeof buf ? " or more" : "");
  } else {
    std::int32_t v = 0;
    std::memcpy(&v, buf, sizeof v);  // the kernel copies its s32 out in the CPU's byte order
    q.value_us = v;
  }
  return q;
}

CpuResumeLatency parse_resume_latency(int cpu, const std::optional<std::string>& text, int error) {
  CpuResumeLatency r;
  r.cpu = cpu;
  if (!text) {
    r.state =
        error == ENOENT || error == ENOTDIR ? CpuResumeLatency::State::absent : CpuResumeLatency::State::unreadable;
    if (r.state == CpuResumeLatency::State::unreadable)
      r.error = fmt::format("cpu{} pm_qos_resume_latency_us cannot be read: {}", cpu, std::strerror(error));
    return r;
  }
  r.text = printable_text(*text, kMaxText);
  if (*text == "n/a") {
    r.state = CpuResumeLatency::State::zero;
    return r;
  }
  std::int64_t v = -1;
  const char* end = text->data() + text->size();
  const auto p = std::from_chars(text->data(), end, v);
  if (text->empty() || text->size() > 10 || (*text)[0] == '-' || p.ec != std::errc{} || p.ptr != end) {
    r.state = CpuResumeLatency::State::unreadable;
    r.error = fmt::format("cpu{} pm_qos_resume_latency_us reads '{}': neither n/a nor a number of µs", cpu, r.text);
  } else if (v == 0) {
    r.state = CpuResumeLatency::State::no_constraint;
  } else if (v < kNoConstraint) {
    r.state = CpuResumeLatency::State::limit;
    r.limit_us = static_cast<std::int32_t>(v);
  } else {
    r.state = CpuResumeLatency::State::unreadable;
    r.error =
        fmt::format("cpu{} pm_qos_resume_latency_us reads '{}': beyond any request the kernel shows", cpu, r.text);
  }
  return r;
}

PollingOverridesReader::PollingOverridesReader(std::string root, std::string dev_root, std::shared_ptr<HeldReads> reads)
    : root_(std::move(root)),
      dev_root_(std::move(dev_root)),
      reads_(reads ? std::move(reads) : std::make_shared<HeldReads>()) {
  if (root_.empty() || root_.back() != '/') root_.push_back('/');
  if (dev_root_.empty()) dev_root_ = root_ + "dev";
  if (dev_root_.back() != '/') dev_root_.push_back('/');
}

void PollingOverridesReader::holders(GlobalLatencyQos& q, Watch& w, std::uint64_t now_ns) {
  if (q.value_us != 0) {
    w = Watch{};
    w.last_value = q.value_us;
    return;
  }
  if (w.last_value != q.value_us || !w.scanned_ns || now_ns - *w.scanned_ns >= kHolderRescanNs) {
    const std::string proc = root_ + "proc";
    const FileHolders h = processes_holding(
        proc, [&](std::string_view t) { return t == q.device; }, kMaxHolders);
    w.holders.clear();
    for (const auto& f : h.found) w.holders.push_back({f.pid, f.comm});
    // In pid order, not the directory's: status and the log stay the same while the holders do.
    std::sort(w.holders.begin(), w.holders.end(), [](const QosHolder& a, const QosHolder& b) { return a.pid < b.pid; });
    const bool kernel_requests = q.device == "/dev/cpu_dma_latency";  // drivers add requests only there
    if (!h.proc_readable) {
      w.note = fmt::format("{} cannot be listed: the holders are unknown", proc);
    } else if (h.found.empty()) {
      w.note = fmt::format(
          "no process that haltpolld can look into holds it open{}: {}",
          h.unreadable ? fmt::format(" ({} processes' descriptors unreadable without CAP_SYS_PTRACE)", h.unreadable)
                       : std::string(),
          kernel_requests ? "the request is a kernel driver's (cpu_latency_qos_add_request) or a hidden process's"
                          : "the request is a hidden process's");
    } else {
      w.note = h.unreadable ? fmt::format("{} processes' descriptors unreadable", h.unreadable) : std::string();
    }
    w.scanned_ns = now_ns;
  }
  w.last_value = q.value_us;
  q.holders = w.holders;
  q.holders_note = w.note;
}

PollingOverrides PollingOverridesReader::read(const std::vector<int>& cpus,
                                              const std::optional<std::vector<int>>& online,
                                              const std::vector<int>& poll_state, bool cpuidle, std::uint64_t now_ns) {
  PollingOverrides o;
  o.cpuidle = cpuidle;
  o.cpu_dma_latency = read_latency_qos_device(dev_root_ + "cpu_dma_latency", "/dev/cpu_dma_latency");
  // The kernel registers the device wherever it has cpuidle (CONFIG_CPU_IDLE): gone, it is hidden.
  if (!o.cpu_dma_latency.present && cpuidle)
    o.cpu_dma_latency.error = fmt::format(
        "/dev/cpu_dma_latency does not exist under {} although cpuidle runs: a private /dev hides it (systemd's "
        "PrivateDevices=; the shipped unit binds it in)",
        dev_root_);
  o.cpu_wakeup_latency = read_latency_qos_device(dev_root_ + "cpu_wakeup_latency", "/dev/cpu_wakeup_latency");
  holders(o.cpu_dma_latency, dma_, now_ns);
  holders(o.cpu_wakeup_latency, wakeup_, now_ns);

  // The governor through the held reads: in kernel mode the actuator has read it this tick.
  const std::string cpuidle_dir = root_ + "sys/devices/system/cpu/cpuidle/";
  auto gov = reads_->read(cpuidle_dir + "current_governor");
  int gov_error = gov ? 0 : errno;
  if (!gov && gov_error == ENOENT) {
    gov = reads_->read(cpuidle_dir + "current_governor_ro");
    gov_error = gov ? 0 : errno;
  }
  if (!gov) {
    o.governor_error = fmt::format("{}current_governor cannot be read: {}", cpuidle_dir, std::strerror(gov_error));
  } else if (gov->empty() || gov->size() > 15 ||
             gov->find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
    o.governor_error = fmt::format("current_governor reads '{}': not a governor name", printable_text(*gov, kMaxText));
  } else {
    o.governor = *gov;
  }

  // Present but not online: a CPU hot-unplugged (or never brought up) that the sensors do not sample.
  const std::string present_file = root_ + "sys/devices/system/cpu/present";
  const auto present_text = read_small_file(present_file);
  const int present_error = present_text ? 0 : errno;
  if (!present_text) {
    if (present_error != ENOENT)
      o.offline_error = fmt::format("{} cannot be read: {}", present_file, std::strerror(present_error));
  } else if (const auto present = haltpoll::parse_cpu_list(*present_text); !present) {
    o.offline_error =
        fmt::format("{} reads '{}': not a CPU list", present_file, printable_text(*present_text, kMaxText));
  } else if (online) {
    for (int c : *present)
      if (!std::binary_search(online->begin(), online->end(), c)) o.offline_cpus.push_back(c);
  }

  // Per CPU, cpuidle_governor_latency_req(): the smallest of the CPU's resume latency request and
  // the global requests. haltpoll_select() polls every time only when it is exactly 0.
  for (int cpu : cpus) {
    const auto text = read_small_file(cpu_dir(root_, cpu) + "power/pm_qos_resume_latency_us");
    o.resume.push_back(parse_resume_latency(cpu, text, text ? 0 : errno));
    const CpuResumeLatency& r = o.resume.back();
    CpuPollingOverride c;
    c.cpu = cpu;
    if (!std::binary_search(poll_state.begin(), poll_state.end(), cpu)) {
      o.cpus.push_back(std::move(c));  // no POLL state: a requirement of 0 picks a halt state, or no governor runs
      continue;
    }
    struct Part {
      std::optional<OverrideSource> source;  // empty: the resume request that is not 0
      std::int64_t us;
      std::string reason;
    };
    std::vector<Part> known;
    std::string unknown;
    bool dma_unknown = false;
    auto note_unknown = [&](const std::string& why) { unknown += (unknown.empty() ? "" : "; ") + why; };
    const GlobalLatencyQos& dma = o.cpu_dma_latency;
    if (dma.value_us)
      known.push_back({OverrideSource::cpu_dma_latency, *dma.value_us, qos_zero_reason("cpu_dma_latency", dma)});
    else if (!dma.error.empty()) {
      note_unknown(dma.error);
      dma_unknown = true;
    }
    const GlobalLatencyQos& wake = o.cpu_wakeup_latency;
    if (wake.value_us)
      known.push_back(
          {OverrideSource::cpu_wakeup_latency, *wake.value_us, qos_zero_reason("cpu_wakeup_latency", wake)});
    else if (!wake.error.empty()) note_unknown(wake.error);
    switch (r.state) {
      case CpuResumeLatency::State::zero:
        known.push_back({OverrideSource::resume_latency, 0,
                         fmt::format("cpu{} pm_qos_resume_latency_us is n/a, a request of 0 µs", cpu)});
        break;
      case CpuResumeLatency::State::limit: known.push_back({std::nullopt, r.limit_us, {}}); break;
      case CpuResumeLatency::State::unreadable: note_unknown(r.error); break;
      case CpuResumeLatency::State::absent:
      case CpuResumeLatency::State::no_constraint: break;
    }
    std::int64_t least = kNoConstraint;
    for (const auto& p : known) least = std::min(least, p.us);
    // Only /dev/cpu_dma_latency takes a negative request, and a negative minimum is not 0: an
    // unreadable one leaves a 0 of the others uncertain, other unreadable files only a minimum above 0.
    if (least == 0 && !dma_unknown) {
      c.polls_without_limit = true;
      for (const auto& p : known)
        if (p.us == 0 && p.source) c.reasons.push_back({*p.source, p.reason});
    } else if (!unknown.empty() && least >= 0) {
      c.unknown = true;
      c.unknown_reason = unknown;
    }
    o.cpus.push_back(std::move(c));
  }
  return o;
}

}  // namespace haltpolld
