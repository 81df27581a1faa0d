#include "metrics.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

namespace haltpolld {

using nlohmann::json;

namespace {

std::optional<std::string> read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string s;
  std::getline(in, s);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::optional<std::uint64_t> read_u64(const std::string& path) {
  auto s = read_small_file(path);
  if (!s || s->empty() || s->find_first_not_of("0123456789") != std::string::npos || s->size() > 19)
    return std::nullopt;
  return std::stoull(*s);
}

std::string join_path(const std::string& root, const std::string& rel) {
  if (root.empty() || root == "/") return "/" + rel;
  return (root.back() == '/' ? root : root + "/") + rel;
}

// Prometheus label values escape backslash, double quote and newline.
std::string escape_label(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

std::string fmt_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string seconds(std::uint64_t ns) { return fmt_double(static_cast<double>(ns) / 1e9); }

class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    out_ << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
  }
  void sample(const std::string& name, const std::string& labels, const std::string& value) {
    out_ << name;
    if (!labels.empty()) out_ << '{' << labels << '}';
    out_ << ' ' << value << '\n';
  }
  std::string str() const { return out_.str(); }

 private:
  std::ostringstream out_;
};

std::string cpu_label(unsigned cpu) { return "cpu=\"" + std::to_string(cpu) + "\""; }

// Exact, unlike %.9g: a busy CPU's poll time passes 10^3 s within hours, and rounding a counter to
// nine digits would make its rate over a short window jump.
std::string micros_as_seconds(std::uint64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llu.%06llu", static_cast<unsigned long long>(us / 1000000),
                static_cast<unsigned long long>(us % 1000000));
  return buf;
}

// The series of FleetSeries, kept in one block so that they move with the writer as a whole.
void render_fleet_series(Exposition& e, const FleetSeries& f) {
  struct Counter {
    const char* name;
    const char* help;
    std::uint64_t KernelCpuidleCounters::*field;
    bool us;
  };
  // After haltpoll_kernel_idle_entries_total (the sum of the two entry counts), each of these.
  static const Counter cpuidle[] = {
      {"haltpoll_kernel_poll_entries_total", "Entries into the cpuidle POLL state.", &KernelCpuidleCounters::poll_entries, false},
      {"haltpoll_kernel_poll_seconds_total", "Time spent in the cpuidle POLL state.", &KernelCpuidleCounters::poll_us, true},
      {"haltpoll_kernel_halts_total", "Entries into the other cpuidle states (halt).", &KernelCpuidleCounters::halts, false},
      {"haltpoll_kernel_halt_seconds_total", "Time spent in the other cpuidle states (halt).", &KernelCpuidleCounters::halt_us,
       true},
  };
  if (!f.cpuidle.empty()) {
    e.family("haltpoll_kernel_idle_entries_total", "counter", "Idle entries (POLL and halt) of the CPU, from cpuidle.");
    for (const auto& c : f.cpuidle)
      e.sample("haltpoll_kernel_idle_entries_total", cpu_label(c.cpu), std::to_string(c.poll_entries + c.halts));
    for (const auto& k : cpuidle) {
      e.family(k.name, "counter", k.help);
      for (const auto& c : f.cpuidle)
        e.sample(k.name, cpu_label(c.cpu),
                 k.us ? micros_as_seconds(c.*(k.field)) : std::to_string(c.*(k.field)));
    }
  }
  e.family("haltpoll_kernel_mode_info", "gauge",
           "Constant 1, labelled with the effective mode and why kernel mode is not active (empty when it is).");
  e.sample("haltpoll_kernel_mode_info", "mode=\"" + escape_label(f.mode) + "\",reason=\"" + escape_label(f.mode_reason) + "\"",
           "1");
  e.family("haltpoll_state_file_pending", "gauge",
           "1 while a state file with saved original kernel parameters is left behind unapplied.");
  e.sample("haltpoll_state_file_pending", "", f.state_file_pending ? "1" : "0");
  if (!f.tuner_policy.empty()) {
    e.family("haltpoll_tuner_info", "gauge", "Constant 1, labelled with the tuner's policy.");
    e.sample("haltpoll_tuner_info", "policy=\"" + escape_label(f.tuner_policy) + "\"", "1");
  }
  if (!f.decisions.empty()) {
    e.family("haltpoll_tuner_decisions_total", "counter", "Tuner decisions, one per tick, by action.");
    for (const auto& d : f.decisions)
      e.sample("haltpoll_tuner_decisions_total", "action=\"" + escape_label(d.action) + "\"", std::to_string(d.count));
  }
  if (f.last_change_unix_seconds) {
    e.family("haltpoll_tuner_last_change_timestamp_seconds", "gauge", "When the tuner last changed its value (Unix time).");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", *f.last_change_unix_seconds);  // %.9g would round to 10 s
    e.sample("haltpoll_tuner_last_change_timestamp_seconds", "", buf);
  }
  if (f.steal_seconds) {
    e.family("haltpoll_steal_seconds_total", "counter", "Time the host stole from all the guest's CPUs (/proc/stat).");
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", *f.steal_seconds);  // USER_HZ ticks: exact to 10 ms, for years
    e.sample("haltpoll_steal_seconds_total", "", buf);
  }
  if (f.steal_backoff_ratio) {
    e.family("haltpoll_tuner_steal_backoff_ratio", "gauge", "Steal share of all CPU time above which the tuner backs off.");
    e.sample("haltpoll_tuner_steal_backoff_ratio", "", fmt_double(*f.steal_backoff_ratio));
  }
}

}  // namespace

KernelHaltpollParams read_kernel_haltpoll_params(const std::string& sysfs_root) {
  KernelHaltpollParams k;
  std::string dir = join_path(sysfs_root, "sys/module/haltpoll/parameters/");
  k.guest_halt_poll_ns = read_u64(dir + "guest_halt_poll_ns");
  k.guest_halt_poll_grow = read_u64(dir + "guest_halt_poll_grow");
  k.guest_halt_poll_shrink = read_u64(dir + "guest_halt_poll_shrink");
  k.guest_halt_poll_grow_start = read_u64(dir + "guest_halt_poll_grow_start");
  if (auto s = read_small_file(dir + "guest_halt_poll_allow_shrink"); s && (*s == "Y" || *s == "N"))
    k.guest_halt_poll_allow_shrink = *s == "Y";
  k.present = k.guest_halt_poll_ns.has_value() || k.guest_halt_poll_allow_shrink.has_value();
  return k;
}

json to_json(const KernelHaltpollParams& k) {
  json j = {{"present", k.present}};
  auto put = [&](const char* name, const std::optional<std::uint64_t>& v) { j[name] = v ? json(*v) : json(nullptr); };
  put("guest_halt_poll_ns", k.guest_halt_poll_ns);
  put("guest_halt_poll_grow", k.guest_halt_poll_grow);
  put("guest_halt_poll_shrink", k.guest_halt_poll_shrink);
  put("guest_halt_poll_grow_start", k.guest_halt_poll_grow_start);
  j["guest_halt_poll_allow_shrink"] =
      k.guest_halt_poll_allow_shrink ? json(*k.guest_halt_poll_allow_shrink) : json(nullptr);
  return j;
}

json stats_to_json(const StatsSnapshot& s, std::optional<unsigned> cpu, bool histogram) {
  json cpus = json::array();
  for (const CpuStats& c : s.cpus) {
    if (cpu && c.cpu != *cpu) continue;
    std::uint64_t polls = c.poll_hits + c.poll_misses;
    json lat = {{"count", c.latency_count}, {"sum_ns", c.latency_sum_ns}, {"p50_ns", c.p50_ns},
                {"p90_ns", c.p90_ns},       {"p99_ns", c.p99_ns},         {"p999_ns", c.p999_ns}};
    if (histogram) {
      json b = json::array();
      for (const auto& bucket : c.latency_buckets)
        b.push_back({{"le_ns", bucket.le_ns == std::numeric_limits<std::uint64_t>::max() ? json(nullptr)
                                                                                           : json(bucket.le_ns)},
                     {"count", bucket.count}});
      lat["buckets"] = std::move(b);
    }
    cpus.push_back({{"cpu", c.cpu},
                    {"tasks_run", c.tasks_run},
                    {"task_exceptions", c.task_exceptions},
                    {"poll_hits", c.poll_hits},
                    {"poll_misses", c.poll_misses},
                    {"poll_hit_ratio", polls ? static_cast<double>(c.poll_hits) / static_cast<double>(polls) : 0.0},
                    {"futex_waits", c.futex_waits},
                    {"wakes_without_syscall", c.wakes_without_syscall},
                    {"poll_ns", c.poll_ns},
                    {"window_ns", c.window_ns},
                    {"latency", std::move(lat)}});
  }
  return {{"mode", s.mode},
          {"uptime_seconds", s.uptime_seconds},
          {"monotonic_ns", s.monotonic_ns},
          {"kernel", to_json(s.kernel)},
          {"cpus", std::move(cpus)}};
}

std::string render_prometheus(const StatsSnapshot& s) {
  Exposition e;
  e.family("haltpoll_info", "gauge", "Constant 1, labelled with the daemon's version, effective mode and wait backend.");
  e.sample("haltpoll_info", "version=\"" + escape_label(s.version) + "\",mode=\"" + escape_label(s.mode) +
                                "\",backend=\"" + escape_label(s.backend) + "\"",
           "1");
  e.family("haltpoll_uptime_seconds", "gauge", "Seconds since the daemon started.");
  e.sample("haltpoll_uptime_seconds", "", fmt_double(s.uptime_seconds));
  e.family("haltpoll_kernel_mode", "gauge", "1 when the daemon writes the kernel's haltpoll parameters (mode kernel), else 0.");
  e.sample("haltpoll_kernel_mode", "", s.mode == "kernel" ? "1" : "0");

  struct Counter {
    const char* name;
    const char* help;
    std::uint64_t CpuStats::*field;
  };
  static const Counter counters[] = {
      {"haltpoll_worker_tasks_total", "Tasks run by the CPU's worker.", &CpuStats::tasks_run},
      {"haltpoll_worker_task_exceptions_total", "Tasks that threw (caught and counted).", &CpuStats::task_exceptions},
      {"haltpoll_worker_poll_hits_total", "Wake-ups that arrived while the worker was still polling.", &CpuStats::poll_hits},
      {"haltpoll_worker_poll_misses_total", "Poll windows that ran out before work arrived.", &CpuStats::poll_misses},
      {"haltpoll_worker_futex_waits_total", "FUTEX_WAIT calls of the worker (park path).", &CpuStats::futex_waits},
      {"haltpoll_worker_wakes_without_syscall_total", "Wake-ups that skipped FUTEX_WAKE because the worker was polling.",
       &CpuStats::wakes_without_syscall},
  };
  for (const auto& c : counters) {
    e.family(c.name, "counter", c.help);
    for (const auto& cpu : s.cpus) e.sample(c.name, cpu_label(cpu.cpu), std::to_string(cpu.*(c.field)));
  }
  e.family("haltpoll_worker_poll_seconds_total", "counter", "Time the worker spent polling.");
  for (const auto& cpu : s.cpus) e.sample("haltpoll_worker_poll_seconds_total", cpu_label(cpu.cpu), seconds(cpu.poll_ns));
  e.family("haltpoll_worker_window_seconds", "gauge", "The worker's current poll window.");
  for (const auto& cpu : s.cpus) e.sample("haltpoll_worker_window_seconds", cpu_label(cpu.cpu), seconds(cpu.window_ns));

  e.family("haltpoll_wake_latency_seconds", "histogram", "Submit-to-start latency of tasks on the CPU's worker.");
  for (const auto& cpu : s.cpus) {
    std::uint64_t cumulative = 0;
    bool inf_seen = false;
    for (const auto& b : cpu.latency_buckets) {
      cumulative += b.count;
      bool inf = b.le_ns == std::numeric_limits<std::uint64_t>::max();
      inf_seen |= inf;
      e.sample("haltpoll_wake_latency_seconds_bucket", cpu_label(cpu.cpu) + ",le=\"" + (inf ? "+Inf" : seconds(b.le_ns)) + "\"",
               std::to_string(cumulative));
    }
    if (!inf_seen)
      e.sample("haltpoll_wake_latency_seconds_bucket", cpu_label(cpu.cpu) + ",le=\"+Inf\"", std::to_string(cpu.latency_count));
    e.sample("haltpoll_wake_latency_seconds_sum", cpu_label(cpu.cpu), seconds(cpu.latency_sum_ns));
    e.sample("haltpoll_wake_latency_seconds_count", cpu_label(cpu.cpu), std::to_string(cpu.latency_count));
  }

  e.family("haltpoll_kernel_present", "gauge", "1 when /sys/module/haltpoll/parameters exists.");
  e.sample("haltpoll_kernel_present", "", s.kernel.present ? "1" : "0");
  auto kernel_gauge = [&](const char* name, const char* help, const std::optional<std::uint64_t>& v, bool ns) {
    if (!v) return;
    e.family(name, "gauge", help);
    e.sample(name, "", ns ? seconds(*v) : std::to_string(*v));
  };
  kernel_gauge("haltpoll_kernel_guest_halt_poll_seconds", "Kernel guest_halt_poll_ns (the global poll cap), in seconds.",
               s.kernel.guest_halt_poll_ns, true);
  kernel_gauge("haltpoll_kernel_guest_halt_poll_grow", "Kernel guest_halt_poll_grow (factor).", s.kernel.guest_halt_poll_grow, false);
  kernel_gauge("haltpoll_kernel_guest_halt_poll_shrink", "Kernel guest_halt_poll_shrink (divisor).", s.kernel.guest_halt_poll_shrink,
               false);
  kernel_gauge("haltpoll_kernel_guest_halt_poll_grow_start_seconds", "Kernel guest_halt_poll_grow_start, in seconds.",
               s.kernel.guest_halt_poll_grow_start, true);
  if (s.kernel.guest_halt_poll_allow_shrink) {
    e.family("haltpoll_kernel_guest_halt_poll_allow_shrink", "gauge", "Kernel guest_halt_poll_allow_shrink (1 = Y).");
    e.sample("haltpoll_kernel_guest_halt_poll_allow_shrink", "", *s.kernel.guest_halt_poll_allow_shrink ? "1" : "0");
  }

  auto counter = [&](const char* name, const char* help, std::uint64_t v) {
    e.family(name, "counter", help);
    e.sample(name, "", std::to_string(v));
  };
  counter("haltpoll_worker_pin_failures_total", "Workers that could not be pinned to their CPU.", s.pin_failures);
  counter("haltpoll_tuner_ticks_total", "Sensor-tuner-actuator steps run.", s.tuner_ticks);
  counter("haltpoll_config_reloads_total", "Configuration reloads applied (SIGHUP, Reload).", s.config_reloads);
  counter("haltpoll_config_reload_failures_total", "Configuration reloads refused.", s.config_reload_failures);
  e.family("haltpoll_control_connections", "gauge", "Open control-socket connections.");
  e.sample("haltpoll_control_connections", "", std::to_string(s.control_connections));
  counter("haltpoll_control_connections_total", "Control-socket connections accepted.", s.control_connections_total);
  counter("haltpoll_control_requests_total", "Varlink calls handled.", s.control_requests_total);
  counter("haltpoll_control_errors_total", "Varlink error replies sent.", s.control_errors_total);
  counter("haltpoll_control_rejected_total", "Connections refused or closed by the daemon (limit, malformed, idle).",
          s.control_rejected_total);
  render_fleet_series(e, s.fleet);
  return e.str();
}

std::string replace_file_atomically(const std::string& path, const std::string& text) {
  auto slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // node_exporter's textfile collector reads only *.prom, so a ".name.tmp" file is never scraped.
  std::string tmp = dir + "/." + base + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return "open " + tmp + ": " + std::strerror(errno);
  // open()'s mode is filtered by the umask; the exporter's user must still read the file.
  if (::fchmod(fd, 0644) != 0) {
    std::string why = "fchmod " + tmp + ": " + std::strerror(errno);
    ::close(fd);
    ::unlink(tmp.c_str());
    return why;
  }
  std::size_t off = 0;
  while (off < text.size()) {
    ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::string why = "write " + tmp + ": " + std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return why;
    }
    off += static_cast<std::size_t>(n);
  }
  int sync_rc = ::fsync(fd);
  int sync_errno = errno;
  if (::close(fd) != 0 || sync_rc != 0) {
    std::string why = "fsync " + tmp + ": " + std::strerror(sync_rc != 0 ? sync_errno : errno);
    ::unlink(tmp.c_str());
    return why;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = "rename to " + path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return why;
  }
  return {};
}

}  // namespace haltpolld
