#include "control/prometheus.hpp"

#include <cstdio>
#include <limits>
#include <sstream>

namespace haltpolld {

namespace {

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

}  // namespace

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
  return e.str();
}

}  // namespace haltpolld
