#include "idle_record.hpp"

#include "idle_trace.hpp"

#include <haltpoll/clock.hpp>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

namespace haltpolld {
namespace {

volatile std::sig_atomic_t stop_requested = 0;
extern "C" void request_stop(int) { stop_requested = 1; }

// Restores the previous SIGINT/SIGTERM dispositions on every way out.
class StopSignals {
 public:
  StopSignals() {
    stop_requested = 0;
    struct sigaction sa {};
    sa.sa_handler = request_stop;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

template <class T>
bool parse_uint(std::string_view s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size() && !s.empty();
}

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> v;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
    std::size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\r') ++j;
    if (j > i) v.push_back(s.substr(i, j - i));
    i = j;
  }
  return v;
}

const char* usage =
    "usage: haltpolld record --seconds N --output FILE\n"
    "  Records every CPU's idle periods for N seconds (eBPF on power:cpu_idle and\n"
    "  power:guest_halt_poll_ns) into FILE ('-' = stdout), in the idle-trace text format\n"
    "  (docs/kernel-signals.md). Needs CAP_BPF and CAP_PERFMON (or root).\n";

}  // namespace

bool parse_idle_trace_line(std::string_view line, IdleTraceLine& out, std::string& error) {
  out = IdleTraceLine{};
  const auto f = split(line);
  if (f.empty()) return true;
  if (f[0].front() == '#') {
    if (f[0] != "#" || f.size() < 2 || f[1] != "limit") return true;
    if (f.size() != 6 || !parse_uint(f[2], out.cpu) || !parse_uint(f[3], out.old_ns) || !parse_uint(f[4], out.new_ns) ||
        (f[5] != "grow" && f[5] != "shrink")) {
      error = "expected '# limit <cpu> <old_ns> <new_ns> grow|shrink'";
      return false;
    }
    out.kind = IdleTraceLine::Kind::limit;
    out.grow = f[5] == "grow";
    return true;
  }
  if (f.size() != 3 || !parse_uint(f[0], out.cpu) || (f[1] != "POLL" && f[1] != "halt") ||
      !parse_uint(f[2], out.residency_ns)) {
    error = "expected '<cpu> POLL|halt <residency_ns>'";
    return false;
  }
  out.kind = f[1] == "POLL" ? IdleTraceLine::Kind::poll : IdleTraceLine::Kind::halt;
  return true;
}

bool IdlePeriodReader::add_line(std::string_view line, std::string& error) {
  ++lineno_;
  IdleTraceLine l;
  std::string why;
  if (!parse_idle_trace_line(line, l, why)) {
    error = "line " + std::to_string(lineno_) + ": " + why;
    return false;
  }
  if (l.kind != IdleTraceLine::Kind::poll && l.kind != IdleTraceLine::Kind::halt) return true;
  if (l.cpu >= periods_.size()) {
    periods_.resize(l.cpu + 1);
    pending_poll_.resize(l.cpu + 1);
  }
  auto& pending = pending_poll_[l.cpu];
  if (l.kind == IdleTraceLine::Kind::poll) {
    if (pending) periods_[l.cpu].push_back({*pending, true, false});
    pending = l.residency_ns;
  } else {
    periods_[l.cpu].push_back({pending.value_or(0) + l.residency_ns, pending.has_value(), true});
    pending.reset();
  }
  return true;
}

void IdlePeriodReader::finish() {
  for (std::size_t cpu = 0; cpu < pending_poll_.size(); ++cpu) {
    if (pending_poll_[cpu]) periods_[cpu].push_back({*pending_poll_[cpu], true, false});
    pending_poll_[cpu].reset();
  }
}

int run_record(const RecordOptions& o, std::ostream& err) {
  if (!(o.seconds > 0) || !std::isfinite(o.seconds) || o.seconds > 86400) {
    err << "haltpolld record: --seconds must be a number in (0, 86400], got " << o.seconds << "\n";
    return record_usage;
  }
  if (o.output.empty()) {
    err << "haltpolld record: --output FILE is required ('-' for stdout)\n";
    return record_usage;
  }
  const bool to_stdout = o.output == "-";
  const std::string tmp = to_stdout ? std::string() : o.output + ".tmp";
  std::FILE* out = to_stdout ? stdout : std::fopen(tmp.c_str(), "w");
  if (out == nullptr) {
    err << "haltpolld record: cannot create " << tmp << ": " << std::strerror(errno) << "\n";
    return record_io_error;
  }
  auto fail = [&](int code) {
    if (!to_stdout) {
      std::fclose(out);
      std::remove(tmp.c_str());
    }
    return code;
  };

  IdleTraceOptions topt;
  topt.sysfs_root = o.sysfs_root;
  topt.record_ring_bytes = o.ring_bytes;
  std::string why;
  auto trace = IdleTrace::open(topt, &why);
  if (!trace) {
    err << "haltpolld record: " << why << "\n";
    return fail(record_unavailable);
  }
  for (const auto& m : trace->missing()) err << "haltpolld record: warning: " << m << "\n";

  const std::time_t wall = std::time(nullptr);
  char when[64] = "";
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&wall));
  std::fprintf(out, "# haltpolld record: %s, %.3f s requested, %u possible CPUs\n", when, o.seconds,
               trace->possible_cpus());
  std::fprintf(out, "# %s\n", trace->status().c_str());
  // The governor's parameters in force, so that `haltpolld simulate` replays with the same ones
  // (docs/kernel-signals.md, "Replaying a recording"). Values are checked: a parameter file that
  // does not read as a plain number (or Y/N) is left out rather than copied.
  {
    std::string header;
    for (const char* name : {"guest_halt_poll_ns", "guest_halt_poll_grow", "guest_halt_poll_grow_start",
                             "guest_halt_poll_shrink", "guest_halt_poll_allow_shrink"}) {
      std::FILE* f = std::fopen((o.sysfs_root + "/module/haltpoll/parameters/" + name).c_str(), "re");
      if (!f) continue;
      char v[32] = "";
      const bool got = std::fgets(v, sizeof v, f) != nullptr;
      std::fclose(f);
      std::string value = got ? v : "";
      while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
      const bool number = !value.empty() && value.size() <= 10 && value.find_first_not_of("0123456789") == std::string::npos;
      if (number || value == "Y" || value == "N") header += std::string(" ") + name + "=" + value;
    }
    if (!header.empty()) std::fprintf(out, "# haltpoll%s\n", header.c_str());
  }
  std::fprintf(out, "# cpu state residency_ns | # limit cpu old new grow|shrink\n");

  std::uint64_t periods = 0, limits = 0;
  const std::function<void(const IdleRecord&)> sink = [&](const IdleRecord& r) {
    switch (r.kind) {
      case IdleRecord::Kind::poll:
        std::fprintf(out, "%u POLL %llu\n", r.cpu, static_cast<unsigned long long>(r.residency_ns));
        ++periods;
        break;
      case IdleRecord::Kind::halt:
        std::fprintf(out, "%u halt %llu\n", r.cpu, static_cast<unsigned long long>(r.residency_ns));
        ++periods;
        break;
      case IdleRecord::Kind::limit:
        std::fprintf(out, "# limit %u %u %u %s\n", r.cpu, r.old_ns, r.new_ns, r.grow ? "grow" : "shrink");
        ++limits;
        break;
    }
  };

  const auto t0 = static_cast<std::uint64_t>(haltpoll::clock_monotonic_ns());
  const auto duration_ns = static_cast<std::uint64_t>(o.seconds * 1e9);
  {
    StopSignals signals;
    for (;;) {
      const auto now = static_cast<std::uint64_t>(haltpoll::clock_monotonic_ns());
      if (now - t0 >= duration_ns || stop_requested) break;
      // 20 ms between drains: at 200k periods/s that is 128 KiB of the ring, far below its size.
      const std::uint64_t nap = std::min<std::uint64_t>(20'000'000, duration_ns - (now - t0));
      timespec ts{static_cast<time_t>(nap / 1000000000u), static_cast<long>(nap % 1000000000u)};
      ::nanosleep(&ts, nullptr);
      if (trace->consume(sink) < 0) break;
    }
  }
  const double elapsed = static_cast<double>(static_cast<std::uint64_t>(haltpoll::clock_monotonic_ns()) - t0) / 1e9;
  trace->consume(sink);  // what ended since the last drain; later periods are not part of the run
  trace.reset();
  std::fprintf(out, "# end: %.3f s, %llu periods, %llu limit events%s\n", elapsed,
               static_cast<unsigned long long>(periods), static_cast<unsigned long long>(limits),
               stop_requested ? ", stopped by a signal" : "");
  if (std::fflush(out) != 0 || std::ferror(out)) {
    err << "haltpolld record: writing " << (to_stdout ? "stdout" : tmp) << ": " << std::strerror(errno) << "\n";
    return fail(record_io_error);
  }
  if (!to_stdout) {
    if (std::fclose(out) != 0) {
      err << "haltpolld record: closing " << tmp << ": " << std::strerror(errno) << "\n";
      std::remove(tmp.c_str());
      return record_io_error;
    }
    if (std::rename(tmp.c_str(), o.output.c_str()) != 0) {
      err << "haltpolld record: renaming " << tmp << " to " << o.output << ": " << std::strerror(errno) << "\n";
      std::remove(tmp.c_str());
      return record_io_error;
    }
  }
  return record_ok;
}

int record_main(int argc, char** argv) {
  RecordOptions o;
  bool have_seconds = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    std::string_view value;
    auto take = [&](std::string_view name) {
      if (a == name) {
        if (i + 1 >= argc) return false;
        value = argv[++i];
        return true;
      }
      if (a.size() > name.size() && a.substr(0, name.size()) == name && a[name.size()] == '=') {
        value = a.substr(name.size() + 1);
        return true;
      }
      return false;
    };
    if (a == "--help" || a == "-h") {
      std::cout << usage;
      return record_ok;
    }
    if (take("--seconds")) {
      std::string v(value);
      char* end = nullptr;
      errno = 0;
      o.seconds = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size() || errno != 0) {
        std::cerr << "haltpolld record: --seconds: not a number: '" << v << "'\n" << usage;
        return record_usage;
      }
      have_seconds = true;
    } else if (take("--output") || take("-o")) {
      o.output = std::string(value);
    } else {
      std::cerr << "haltpolld record: unknown or incomplete argument '" << a << "'\n" << usage;
      return record_usage;
    }
  }
  if (!have_seconds) {
    std::cerr << "haltpolld record: --seconds N is required\n" << usage;
    return record_usage;
  }
  return run_record(o, std::cerr);
}

}  // namespace haltpolld
