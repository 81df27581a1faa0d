#include "control/prometheus.hpp"

#include <fmt/format.h>

#include <cctype>
#include <iterator>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

namespace haltpolld {

namespace {

// The exposition format escapes backslash and newline in HELP text, and double quotes too in label
// values.
std::string escape(const std::string& v, bool label) {
  std::string o;
  for (char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"' && label) o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}
std::string escape_label(const std::string& v) { return escape(v, true); }

std::string fmt_double(double v) { return fmt::format("{:.9g}", v); }

std::string seconds(std::uint64_t ns) { return fmt_double(static_cast<double>(ns) / 1e9); }

class Exposition {
 public:
  void family(const char* name, const char* type, const char* help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {0} {1}\n# TYPE {0} {2}\n", name, help, type);
  }
  void sample(const std::string& name, const std::string& labels, const std::string& value) {
    if (labels.empty()) fmt::format_to(std::back_inserter(out_), "{} {}\n", name, value);
    else fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name, labels, value);
  }
  std::string str() const { return out_; }

 private:
  std::string out_;
};

std::string cpu_label(unsigned cpu) { return "cpu=\"" + std::to_string(cpu) + "\""; }

// Exact, unlike {:.9g}: a busy CPU's poll time passes 10^3 s within hours, and rounding a counter to
// nine digits would make its rate over a short window jump.
std::string micros_as_seconds(std::uint64_t us) { return fmt::format("{}.{:06}", us / 1000000, us % 1000000); }

// What decides the polling besides the cap (signals/polling_overrides.hpp): a series per CPU and
// reason while a latency requirement of 0 makes the CPU poll without limit (only then: one per CPU
// and reason would be mostly zeros), and the counts and the governor always.
void render_polling_overrides(Exposition& e, const PollingOverrides& o) {
  bool any = false;
  for (const auto& c : o.cpus) any |= c.polls_without_limit;
  if (any) {
    e.family(
        "haltpoll_polling_override", "gauge",
        "1 while a latency requirement of 0 (reason: cpu_dma_latency, cpu_wakeup_latency, pm_qos_resume_latency_us) "
        "makes the CPU poll without limit whatever the cap.");
    for (const auto& c : o.cpus)
      for (const auto& r : c.reasons)
        e.sample("haltpoll_polling_override",
                 cpu_label(static_cast<unsigned>(c.cpu)) + ",reason=\"" + escape_label(to_string(r.source)) + "\"",
                 "1");
  }
  unsigned unlimited = 0, unknown = 0;
  for (const auto& c : o.cpus) {
    unlimited += c.polls_without_limit ? 1 : 0;
    unknown += c.unknown ? 1 : 0;
  }
  e.family("haltpoll_polling_unlimited_cpus", "gauge",
           "CPUs that poll without limit whatever the cap (a latency requirement of 0).");
  e.sample("haltpoll_polling_unlimited_cpus", "", std::to_string(unlimited));
  e.family("haltpoll_polling_unknown_cpus", "gauge",
           "CPUs of which haltpolld cannot tell whether they poll without limit (a QoS file it could not read).");
  e.sample("haltpoll_polling_unknown_cpus", "", std::to_string(unknown));
  e.family("haltpoll_cpus_offline", "gauge", "CPUs present but not online.");
  e.sample("haltpoll_cpus_offline", "", std::to_string(o.offline_cpus.size()));
  if (!o.governor.empty()) {
    e.family("haltpoll_cpuidle_governor_info", "gauge",
             "Constant 1, labelled with the cpuidle governor in force (the cap applies only under haltpoll).");
    e.sample("haltpoll_cpuidle_governor_info", "governor=\"" + escape_label(o.governor) + "\"", "1");
  }
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
  e.family("haltpoll_other_writer", "gauge",
           "1 while another writer owns a haltpoll parameter (labelled) and haltpolld does not write; 0 otherwise.");
  e.sample("haltpoll_other_writer", "parameter=\"" + escape_label(f.other_writer) + "\"", f.other_writer.empty() ? "0" : "1");
  if (!f.tuner_policy.empty()) {
    e.family("haltpoll_tuner_info", "gauge", "Constant 1, labelled with the tuner's policy.");
    e.sample("haltpoll_tuner_info", "policy=\"" + escape_label(f.tuner_policy) + "\"", "1");
  }
  if (!f.decisions.empty()) {
    e.family("haltpoll_tuner_decisions_total", "counter", "Tuner decisions, one per tick, by action.");
    for (const auto& d : f.decisions)
      e.sample("haltpoll_tuner_decisions_total", "action=\"" + escape_label(d.action) + "\"", std::to_string(d.count));
  }
  if (!f.rules.empty()) {
    e.family("haltpoll_tuner_rule_decisions_total", "counter",
             "Tuner decisions, one per tick, by the rule that made them (docs/tuning.md, \"The rules\").");
    for (const auto& d : f.rules)
      e.sample("haltpoll_tuner_rule_decisions_total", "rule=\"" + escape_label(d.action) + "\"", std::to_string(d.count));
  }
  if (f.last_change_unix_seconds) {
    e.family("haltpoll_tuner_last_change_timestamp_seconds", "gauge", "When the tuner last changed its value (Unix time).");
    // {:.9g} would round to 10 s.
    e.sample("haltpoll_tuner_last_change_timestamp_seconds", "", fmt::format("{:.3f}", *f.last_change_unix_seconds));
  }
  if (f.steal_seconds) {
    e.family("haltpoll_steal_seconds_total", "counter", "Time the host stole from all the guest's CPUs (/proc/stat).");
    // USER_HZ ticks: exact to 10 ms, for years.
    e.sample("haltpoll_steal_seconds_total", "", fmt::format("{:.3f}", *f.steal_seconds));
  }
  if (f.steal_backoff_ratio) {
    e.family("haltpoll_tuner_steal_backoff_ratio", "gauge", "Steal share of all CPU time above which the tuner backs off.");
    e.sample("haltpoll_tuner_steal_backoff_ratio", "", fmt_double(*f.steal_backoff_ratio));
  }
  if (const auto& o = f.polling_overrides) render_polling_overrides(e, *o);
}

}  // namespace

// The series that the tick-by-tick kernel signals add to the cpuidle counters: poll outcomes (exact
// from eBPF, else derived), and, with eBPF only, skipped IPIs, the per-CPU limit and its changes and
// the idle-period histograms. Sums since start (or ResetStats, which Prometheus sees as a reset).
void render_kernel_signal_series(Exposition& e, const KernelSignalsStats& k) {
  const auto& cpus = k.totals.cpus();
  if (cpus.empty()) return;
  e.family("haltpoll_kernel_poll_hits_total", "counter",
           "Polls ended by a wake-up rather than a halt (eBPF outcome counts, else derived from cpuidle).");
  for (const auto& c : cpus)
    e.sample("haltpoll_kernel_poll_hits_total", cpu_label(static_cast<unsigned>(c.cpu)), std::to_string(c.poll_hits));
  e.family("haltpoll_kernel_poll_misses_total", "counter", "Polls that timed out and were followed by a halt.");
  for (const auto& c : cpus)
    e.sample("haltpoll_kernel_poll_misses_total", cpu_label(static_cast<unsigned>(c.cpu)), std::to_string(c.poll_misses));
  bool any_ipi = false;
  for (const auto& c : cpus) any_ipi |= c.ipi_skipped.has_value();
  if (any_ipi) {
    e.family("haltpoll_kernel_ipi_skipped_total", "counter",
             "Remote wake-ups that found the CPU polling and skipped the IPI (sched_wake_idle_without_ipi).");
    for (const auto& c : cpus)
      if (c.ipi_skipped)
        e.sample("haltpoll_kernel_ipi_skipped_total", cpu_label(static_cast<unsigned>(c.cpu)), std::to_string(*c.ipi_skipped));
    e.family("haltpoll_kernel_poll_limit_changes_total", "counter",
             "The haltpoll governor's per-CPU limit adjustments (power:guest_halt_poll_ns), by direction.");
    for (const auto& c : cpus) {
      const std::string l = cpu_label(static_cast<unsigned>(c.cpu));
      e.sample("haltpoll_kernel_poll_limit_changes_total", l + ",direction=\"grow\"", std::to_string(c.limit_grows));
      e.sample("haltpoll_kernel_poll_limit_changes_total", l + ",direction=\"shrink\"", std::to_string(c.limit_shrinks));
    }
  }
  bool any_steal = false;
  for (const auto& c : cpus) any_steal |= c.steal_ns.has_value();
  if (any_steal) {
    e.family("haltpoll_kernel_steal_seconds_total", "counter",
             "Time the host stole from the CPU (its /proc/stat cpuN line; USER_HZ resolution).");
    for (const auto& c : cpus)
      if (c.steal_ns) e.sample("haltpoll_kernel_steal_seconds_total", cpu_label(static_cast<unsigned>(c.cpu)), seconds(*c.steal_ns));
  }
  bool any_limit = false;
  for (const auto& c : k.last.cpus) any_limit |= c.poll_limit_ns.has_value();
  if (any_limit) {
    e.family("haltpoll_kernel_poll_limit_seconds", "gauge", "The haltpoll governor's current per-CPU poll limit.");
    for (const auto& c : k.last.cpus)
      if (c.poll_limit_ns)
        e.sample("haltpoll_kernel_poll_limit_seconds", cpu_label(static_cast<unsigned>(c.cpu)), seconds(*c.poll_limit_ns));
  }
  if (const auto& periods = k.totals.periods()) {
    e.family("haltpoll_kernel_idle_period_seconds", "histogram",
             "Idle-period length over all CPUs by outcome: poll_hit (poll ended by a wake-up), poll_halt (poll "
             "timed out, then halt), halt (no poll).");
    auto one = [&](const char* outcome, const haltpoll::LatencyHistogram& h) {
      const std::string l = std::string("outcome=\"") + outcome + "\"";
      std::uint64_t cumulative = 0;
      for (const auto& b : idle_period_buckets(h)) {
        cumulative += b.count;
        const bool inf = b.le_ns == std::numeric_limits<std::uint64_t>::max();
        e.sample("haltpoll_kernel_idle_period_seconds_bucket", l + ",le=\"" + (inf ? "+Inf" : seconds(b.le_ns)) + "\"",
                 std::to_string(cumulative));
      }
      e.sample("haltpoll_kernel_idle_period_seconds_sum", l, seconds(h.sum_ns()));
      e.sample("haltpoll_kernel_idle_period_seconds_count", l, std::to_string(h.count()));
    };
    one("poll_hit", periods->poll_hit);
    one("poll_halt", periods->poll_halt);
    one("halt", periods->halt);
  }
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

  // One family per counter of the library's table, named by the exposition rules: base unit
  // seconds for the *_ns counters, _total for the counters (not the gauges).
  struct WorkerSeries {
    std::string name;
    std::string help;
    const char* type;
    bool ns;
    std::uint64_t CpuStats::*field;
  };
  static const std::vector<WorkerSeries> worker_series = [] {
    std::vector<WorkerSeries> v;
    auto add = [&](std::string_view field, std::string_view kind, std::string_view help, std::uint64_t CpuStats::*member) {
      const bool ns = field.ends_with("_ns");
      if (ns) field.remove_suffix(3);
      if (ns && help.ends_with(", ns")) help.remove_suffix(4);
      // The family's name since before the table: kept so that dashboards keep working.
      if (field == "tasks_run") field = "tasks";
      std::string name = "haltpoll_worker_" + std::string(field) + (ns ? "_seconds" : "");
      if (kind == "counter") name += "_total";
      std::string h(help);
      h[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(h[0])));
      v.push_back({std::move(name), escape(h + (ns ? ", in seconds." : "."), false), kind == "counter" ? "counter" : "gauge", ns,
                   member});
    };
#define HALTPOLLD_WORKER_SERIES(name, kind, source, help) add(#name, #kind, help, &CpuStats::name);
    HALTPOLL_WORKER_COUNTERS(HALTPOLLD_WORKER_SERIES)
#undef HALTPOLLD_WORKER_SERIES
    return v;
  }();
  for (const auto& w : worker_series) {
    e.family(w.name.c_str(), w.type, w.help.c_str());
    for (const auto& cpu : s.cpus)
      e.sample(w.name, cpu_label(cpu.cpu), w.ns ? seconds(cpu.*(w.field)) : std::to_string(cpu.*(w.field)));
  }

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
  // One gauge per parameter of the library's table: the *_ns ones in seconds, the flag as 0/1.
  auto kernel_gauge = [&](std::string_view param, haltpoll::HaltpollParamKind kind, const auto& v) {
    if (!v) return;
    const bool ns = kind == haltpoll::HaltpollParamKind::ns;
    if (ns) param.remove_suffix(3);
    const std::string name = "haltpoll_kernel_" + std::string(param) + (ns ? "_seconds" : "");
    const std::string help = "Kernel " + std::string(param) + (ns ? "_ns, in seconds." : kind == haltpoll::HaltpollParamKind::flag ? " (1 = Y)." : ".");
    e.family(name.c_str(), "gauge", help.c_str());
    if constexpr (std::is_same_v<std::remove_cvref_t<decltype(*v)>, bool>) e.sample(name, "", *v ? "1" : "0");
    else e.sample(name, "", ns ? seconds(*v) : std::to_string(*v));
  };
#define HALTPOLLD_PARAM_GAUGE(name, type, value, kind) kernel_gauge(#name, haltpoll::HaltpollParamKind::kind, s.kernel.name);
  HALTPOLL_PARAMS(HALTPOLLD_PARAM_GAUGE)
#undef HALTPOLLD_PARAM_GAUGE

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
  render_kernel_signal_series(e, s.kernel_signals);
  return e.str();
}

}  // namespace haltpolld
