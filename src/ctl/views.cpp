#include "views.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <utility>
#include <vector>

namespace haltpollctl {

using nlohmann::json;

namespace {

std::string human_value(const json& v, bool ns) {
  if (v.is_null()) return "-";
  if (ns && v.is_number()) return human_ns(v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "Y" : "N";
  return v.is_string() ? v.get<std::string>() : v.dump();
}

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

// A reference into `j` (or a static null): value() returns a copy, and a reference to it dangles.
const json& at(const json& j, const char* key) {
  static const json null = nullptr;
  auto it = j.find(key);
  return it == j.end() ? null : *it;
}

const json& items(const json& j, const char* key) {
  static const json empty = json::array();
  const json& v = at(j, key);
  return v.is_array() ? v : empty;
}

std::string str(const json& j, const char* key, const char* fallback = "-") {
  const json& v = at(j, key);
  return v.is_null() ? std::string(fallback) : human_value(v, false);
}

// 12.3, 12.3k, 1.23M: rates span six decades on one screen.
std::string human_rate(double r) {
  if (r < 1000) return fmt::format("{:.1f}", r);
  if (r < 1e6) return fmt::format("{:.1f}k", r / 1e3);
  return fmt::format("{:.2f}M", r / 1e6);
}

// A number or "-" for a missing signal (null), never a made-up 0.
std::string or_dash(const json& v, std::string (*f)(double)) { return v.is_number() ? f(v.get<double>()) : "-"; }
std::string percent(double v) { return fmt::format("{:.1f}%", v); }
std::string ns_or_dash(const json& v) { return or_dash(v, human_ns); }

std::size_t columns(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
  return n;
}

// Splits `text` into lines of at most `width` columns at spaces; a word longer than a line is cut
// (at a character boundary), so that no line ever exceeds the width.
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  width = std::max<std::size_t>(width, 1);
  std::vector<std::string> words;
  for (std::size_t start = 0; start <= text.size();) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(start, end - start);
    while (columns(word) > width) {
      std::size_t cut = 0, cols = 0;
      while (cut < word.size() && cols < width) {
        ++cut;
        while (cut < word.size() && (static_cast<unsigned char>(word[cut]) & 0xC0) == 0x80) ++cut;
        ++cols;
      }
      words.push_back(word.substr(0, cut));
      word.erase(0, cut);
    }
    words.push_back(std::move(word));
    start = end + 1;
  }
  std::vector<std::string> lines;
  std::string line;
  std::size_t cols = 0;
  for (const std::string& word : words) {
    const std::size_t w = columns(word);
    if (cols > 0 && cols + 1 + w > width) {
      lines.push_back(line);
      line.clear();
      cols = 0;
    }
    if (cols > 0) {
      line += ' ';
      ++cols;
    }
    line += word;
    cols += w;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string local_time(const json& time_ms) {
  if (!time_ms.is_number()) return "-";
  const std::time_t t = static_cast<std::time_t>(time_ms.get<double>() / 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// Bars of a bucket list [{le_ns, count}], empty buckets at both ends skipped (the ones in between
// stay, so that the shape is honest).
std::string render_buckets(const json& buckets, const std::string& indent) {
  double max = 0;
  std::size_t first = buckets.size(), last = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const double n = num(buckets[i], "count");
    max = std::max(max, n);
    if (n > 0) first = std::min(first, i), last = i;
  }
  if (first == buckets.size()) return indent + "(no samples)\n";
  constexpr int width = 50;
  std::string out;
  for (std::size_t i = first; i <= last; ++i) {
    const double n = num(buckets[i], "count");
    const std::string label = buckets[i]["le_ns"].is_null() ? "+Inf" : "≤ " + human_ns(num(buckets[i], "le_ns"));
    int bar = max > 0 ? static_cast<int>(n / max * width + 0.5) : 0;
    if (n > 0 && bar == 0) bar = 1;
    std::string bars;
    for (int k = 0; k < bar; ++k) bars += "█";
    out += fmt::format("{}{:>11} │{} {:.0f}\n", indent, label, bars, n);
  }
  return out;
}

std::string kernel_params_line(const json& k) {
  if (!k.value("present", false)) return "no haltpoll module parameters (not a KVM guest with cpuidle-haltpoll?)";
  return fmt::format("guest_halt_poll_ns {} · grow {} · shrink {} · grow_start {} · allow_shrink {}",
                     human_value(at(k, "guest_halt_poll_ns"), true), str(k, "guest_halt_poll_grow"),
                     str(k, "guest_halt_poll_shrink"), human_value(at(k, "guest_halt_poll_grow_start"), true),
                     str(k, "guest_halt_poll_allow_shrink"));
}

// The eBPF line shared by top, stats --kernel and histogram --kernel.
std::string bpf_line(const json& ks) {
  const json& bpf = at(ks, "bpf");
  if (bpf.value("present", false) && !bpf.value("last_tick", true))
    return "loaded, detached for the last tick (" + str(bpf, "detached_reason", "no reason given") +
           "): its hits and misses derived from the counters";
  if (bpf.value("present", false)) return "present: poll limits, IPI skips and idle-period histograms from the power tracepoints";
  return "absent (" + str(bpf, "missing_reason", "no reason given") +
         "): no poll limit, IPI skips or histograms; hits and misses derived from the counters";
}

constexpr const char* kKernelHeader = "{:>4} {:>8} {:>6} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>10} {:>6}";

std::string kernel_row(const std::string& label, const json& c, const json& steal) {
  return fmt::format(kKernelHeader, label, percent(num(c, "poll_cpu_percent")), or_dash(at(c, "poll_hit_percent"), percent),
                     human_rate(num(c, "idle_entries_per_s")), human_rate(num(c, "poll_entries_per_s")),
                     human_rate(num(c, "halts_per_s")), ns_or_dash(at(c, "mean_poll_ns")), ns_or_dash(at(c, "mean_poll_hit_ns")),
                     ns_or_dash(at(c, "mean_poll_miss_ns")), ns_or_dash(at(c, "poll_limit_ns")),
                     or_dash(at(c, "ipi_skipped_per_s"), human_rate), or_dash(steal, percent));
}

std::string kernel_table_header() {
  return fmt::format(kKernelHeader, "CPU", "POLL CPU", "HIT%", "IDLE/s", "POLLS/s", "HALTS/s", "MEAN POLL", "MEAN HIT",
                     "MEAN MISS", "LIMIT", "IPI SKIP/s", "STEAL");
}

// A guest whose kernel does not poll (no cpuidle driver): the tracepoint counts its idle periods,
// every one a halt, so the poll columns would all read 0 or "-".
bool driverless(const json& ks) { return ks.value("counters", "") == "tracepoint"; }

constexpr const char* kHaltHeader = "{:>4} {:>9} {:>9} {:>9} {:>10} {:>6}";

std::string halt_table_header() {
  return fmt::format(kHaltHeader, "CPU", "IDLE/s", "HALTS/s", "HALT CPU", "MEAN HALT", "STEAL");
}

std::string halt_row(const std::string& label, const json& c, const json& steal) {
  return fmt::format(kHaltHeader, label, human_rate(num(c, "idle_entries_per_s")), human_rate(num(c, "halts_per_s")),
                     percent(num(c, "halt_cpu_percent")), ns_or_dash(at(c, "mean_halt_ns")), or_dash(steal, percent));
}

// Where the rows of a driverless guest come from when the last tick did not count (the eBPF program
// is attached for one tick in tuner.steady_trace_every).
std::string rows_note(const json& ks) {
  const json& rt = at(ks, "rows_tick");
  if (!rt.is_number() || rt == at(ks, "tick")) return "";
  return fmt::format("idle periods of tick {} ({:.2f} s), the last the power:cpu_idle tracepoint counted",
                     str(ks, "rows_tick"), num(ks, "rows_elapsed_ns") / 1e9);
}

// The idle periods the forecast replays: on a guest that does not poll, every one is a halt.
std::string periods_line(const json& f) {
  const json& p = at(f, "periods");
  if (!p.is_object()) return "";
  return fmt::format("halt residency p50 {} · p90 {} · p99 {} · {} idle periods/s, all CPUs (tick {})",
                     ns_or_dash(at(p, "p50_ns")), ns_or_dash(at(p, "p90_ns")), ns_or_dash(at(p, "p99_ns")),
                     human_rate(num(p, "per_s")), str(f, "tick"));
}

std::string forecast_error(const json& f) {
  const json& e = at(f, "error");
  return fmt::format("± {:g}% or {:g}/s of the halts, ± {:g} points of poll CPU", num(e, "halts_percent"),
                     num(e, "halts_per_s"), num(e, "poll_points"));
}

// The sentence an operator reads first: the tuner's choice and what it would buy.
std::string forecast_summary(const json& f) {
  if (!f.value("available", false)) return "no forecast: " + str(f, "reason", "no reason given");
  const json& c = at(f, "chosen");
  if (num(c, "ns") <= 0 || num(c, "halts_avoided_per_s") <= 0)
    return "enabling halt-polling would not pay on this load: the tuner (balanced) would keep 0 ns";
  return fmt::format("enabling halt-polling at {} would avoid {} halt exits/s for {} poll CPU per CPU ({})",
                     human_ns(num(c, "ns")), human_rate(num(c, "halts_avoided_per_s")),
                     percent(num(c, "poll_cpu_percent_per_cpu")), forecast_error(f));
}

constexpr const char* kRungHeader = "{:>1}{:>9} {:>13} {:>10} {:>13} {:>13} {:>12}";

// The forecast per rung, the tuner's choice marked.
std::vector<std::string> forecast_table(const json& f) {
  std::vector<std::string> out{
      fmt::format(kRungHeader, "", "CAP", "AVOIDED/s", "HALTS/s", "TIMEOUTS/s ≤", "POLL CPU/CPU", "NET CPU-s/s")};
  const json& chosen = at(f, "chosen");
  for (const auto& r : items(f, "rungs"))
    out.push_back(fmt::format(kRungHeader, at(r, "ns") == at(chosen, "ns") ? "*" : "", human_ns(num(r, "ns")),
                              human_rate(num(r, "halts_avoided_per_s")), human_rate(num(r, "halts_per_s")),
                              human_rate(num(r, "poll_timeouts_per_s_at_most")),
                              percent(num(r, "poll_cpu_percent_per_cpu")), fmt::format("{:+.4f}", num(r, "net_cpus"))));
  return out;
}

std::string penalty_line(const json& f) {
  return fmt::format(
      "halt-exit penalty {} ({})", human_ns(num(f, "halt_exit_penalty_ns")),
      f.value("penalty_measured", false) ? "measured by the daemon" : "unmeasured: the real guest's probes");
}

// Lines of text wrapped to `width`, the first after `tag` (9 columns), the rest indented to it.
void add_wrapped(std::string& out, std::size_t& used, const std::string& tag, const std::string& text,
                 std::size_t width) {
  bool first = true;
  for (const auto& line : wrap(text, width > 9 ? width - 9 : 1)) {
    out += fmt::format("{:<9}", first ? tag : std::string()) + line + '\n';
    first = false;
    ++used;
  }
}

// The forecast's lines: the summary, then (unless `compact`) the rungs and what the numbers rest on.
std::string forecast_block(const json& f, std::size_t width, bool compact, std::size_t& used) {
  std::string out;
  if (!f.is_object()) return out;
  add_wrapped(out, used, "forecast", forecast_summary(f), width);
  if (!f.value("available", false)) return out;
  if (compact) {
    add_wrapped(out, used, "", "every rung and the reason: haltpollctl stats --kernel", width);
    return out;
  }
  for (const auto& line : forecast_table(f)) {
    out += std::string(9, ' ') + line + '\n';
    ++used;
  }
  add_wrapped(out, used, "",
              penalty_line(f) + " · a lower bound of the gain for closed loops, exact in expectation for open ones",
              width);
  return out;
}

// `top` on a guest whose kernel does not poll: per CPU its idle entries and halts (the same: every
// entry halts), their distribution and what enabling halt-polling would buy.
std::string driverless_top(const json& ks, const Screen& screen, std::size_t width, std::size_t used) {
  std::string out;
  add_wrapped(out, used, "idle", str(ks, "cpuidle"), width);
  if (const std::string note = rows_note(ks); !note.empty()) add_wrapped(out, used, "rows", note, width);
  const json& cpus = items(ks, "cpus");
  const json& f = at(ks, "forecast");
  std::string below;
  std::size_t below_lines = 0;
  if (!cpus.empty()) {
    below += halt_row("all", at(ks, "all"), at(ks, "steal_percent")) + '\n';
    ++below_lines;
    if (const std::string p = periods_line(f); !p.empty()) add_wrapped(below, below_lines, "periods", p, width);
  }
  std::size_t forecast_lines = 0;
  std::string forecast = forecast_block(f, width, false, forecast_lines);
  // On a terminal too short for everything the rungs go first, then CPUs.
  if (screen.height > 0 && used + 2 + cpus.size() + below_lines + 1 + forecast_lines > screen.height) {
    forecast_lines = 0;
    forecast = forecast_block(f, width, true, forecast_lines);
  }
  out += '\n' + halt_table_header() + '\n';
  used += 2;
  if (cpus.empty()) {
    out += "no idle periods counted yet: " + str(ks, "reason", "unknown") + '\n';
  } else {
    const std::size_t reserve = used + below_lines + 1 + forecast_lines + 1;
    std::size_t shown = cpus.size();
    if (screen.height > 0 && reserve + cpus.size() > screen.height)
      shown = screen.height > reserve ? screen.height - reserve : 0;
    for (std::size_t i = 0; i < shown; ++i)
      out += halt_row(str(cpus[i], "cpu"), cpus[i], at(cpus[i], "steal_percent")) + '\n';
    if (shown < cpus.size()) out += fmt::format("  … {} more CPUs: haltpollctl stats --kernel\n", cpus.size() - shown);
    out += below;
  }
  if (!forecast.empty()) out += '\n' + forecast;
  return out;
}

}  // namespace

std::string human_ns(double ns) {
  if (ns < 1000) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f} µs", ns / 1e3);
  if (ns < 1e9) return fmt::format("{:.1f} ms", ns / 1e6);
  return fmt::format("{:.2f} s", ns / 1e9);
}

std::string render_status(const json& s) {
  std::string out = fmt::format("haltpolld {} (pid {}), up {:.0f} s\n", str(s, "version"), str(s, "pid"), num(s, "uptime_seconds"));
  out += "mode:     " + str(s, "mode");
  if (s.value("requested_mode", "") != s.value("mode", "")) out += " (requested " + str(s, "requested_mode") + ")";
  out += " — " + str(s, "mode_reason") + '\n';
  out += "backend:  " + str(s, "backend") + '\n';
  out += "cpus:     " + (s.contains("cpus") ? s["cpus"].dump() : std::string("-")) + '\n';
  const json& k = at(s, "kernel");
  if (k.value("present", false)) {
    out += fmt::format("kernel:   guest_halt_poll_ns={} grow={} shrink={} grow_start={} allow_shrink={}\n",
                       str(k, "guest_halt_poll_ns"), str(k, "guest_halt_poll_grow"), str(k, "guest_halt_poll_shrink"),
                       str(k, "guest_halt_poll_grow_start"), str(k, "guest_halt_poll_allow_shrink"));
  } else {
    out += "kernel:   no haltpoll module parameters (not a KVM guest with cpuidle-haltpoll?)\n";
  }
  const json& kc = at(at(s, "controller"), "kernel");
  if (kc.is_object()) {
    // Whether writing the parameters changes anything here, in plain words, with the remedy.
    out += kc.value("haltpoll_active", false)
               ? fmt::format("polling:  yes: cpuidle driver {}, governor {}\n", str(kc, "cpuidle_driver"), str(kc, "cpuidle_governor"))
               : "polling:  no: " + str(kc, "reason", "no reason given") + '\n';
  }
  const json& ow = at(s, "other_writer");
  if (ow.is_object())
    // value == expected: the writer claimed the parameter before haltpolld wrote it (TuneD's profile).
    out += (str(ow, "value") == str(ow, "expected")
                ? fmt::format("writer:   another writer owns {} ({}): {}", str(ow, "parameter"), str(ow, "value"), str(ow, "who"))
                : fmt::format("writer:   another writer set {} to {} (haltpolld had {}): {}", str(ow, "parameter"),
                              str(ow, "value"), str(ow, "expected"), str(ow, "who"))) +
           "; `haltpollctl take-over` takes it back\n";
  const json& po = at(s, "polling_overrides");
  if (po.is_object() && po.value("active", false))
    // QoS requests at 0, another governor, offline CPUs: what the cap does not decide.
    out += "override: " + str(po, "summary", "active, no summary given") + '\n';
  const json& ks = at(s, "kernel_signals");
  if (ks.is_object()) {
    // The tracepoint counts a driverless guest's periods only where the eBPF program is loaded.
    const bool from_trace = ks.value("counters", "") == "tracepoint" && at(ks, "bpf").value("present", false);
    out += "signals:  " +
           (from_trace ? std::string("idle periods from the power:cpu_idle tracepoint (no cpuidle counters on this guest)")
            : ks.value("available", false) ? "cpuidle " + str(ks, "cpuidle")
                                           : "none: " + str(ks, "reason", "unknown")) +
           "; eBPF " +
           (!at(ks, "bpf").value("present", false) ? "absent: " + str(at(ks, "bpf"), "missing_reason")
            : at(ks, "bpf").value("last_tick", true) ? std::string("present")
                                                     : "present, detached: " + str(at(ks, "bpf"), "detached_reason")) +
           '\n';
  }
  const json& c = at(s, "controller");
  if (c.is_object()) {
    out += "tuning:   " + str(c, "tuning_target");
    if (c.contains("tuner") && c["tuner"].contains("current_ns")) out += ", current " + human_value(c["tuner"]["current_ns"], true);
    out += '\n';
  }
  const json& ctl = at(s, "control");
  out += fmt::format("socket:   {} ({} connections)\n", str(ctl, "socket"), str(ctl, "connections"));
  return out;
}

std::string render_pool_stats(const json& s) {
  std::string out = fmt::format("{:>4} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "CPU", "TASKS", "WINDOW", "HIT%",
                                "FUTEX", "NOSYSCALL", "WAKE p50", "p99", "p99.9");
  for (const auto& c : items(s, "cpus")) {
    const json& l = at(c, "latency");
    out += fmt::format("{:>4} {:>10.0f} {:>10} {:>7.1f}% {:>10.0f} {:>10.0f} {:>10} {:>10} {:>10}\n", c.value("cpu", 0),
                       num(c, "tasks_run"), human_ns(num(c, "window_ns")), 100.0 * num(c, "poll_hit_ratio"), num(c, "futex_waits"),
                       num(c, "wakes_without_syscall"), human_ns(num(l, "p50_ns")), human_ns(num(l, "p99_ns")),
                       human_ns(num(l, "p999_ns")));
  }
  return out;
}

std::string render_pool_histogram(const json& s) {
  std::string out;
  for (const auto& c : items(s, "cpus")) {
    const json& l = at(c, "latency");
    out += fmt::format("CPU {}: {:.0f} wake-ups, p50 {}, p99 {}\n", c.value("cpu", 0), num(l, "count"), human_ns(num(l, "p50_ns")),
                       human_ns(num(l, "p99_ns")));
    out += render_buckets(items(l, "buckets"), "  ") + "\n";
  }
  return out;
}

std::string render_pool_top(const json& cur, const json* prev, const std::string& socket) {
  const json& k = at(cur, "kernel");
  std::string out = fmt::format("haltpolld {} — mode {}, kernel cap {}, up {} s\n\n", socket, cur.value("mode", "?"),
                                k.value("present", false) ? human_value(at(k, "guest_halt_poll_ns"), true) : std::string("n/a"),
                                static_cast<long>(num(cur, "uptime_seconds")));
  out += fmt::format("{:>4} {:>10} {:>8} {:>10} {:>10} {:>9} {:>10}\n", "CPU", "WINDOW", "HIT%", "WAKE p50", "p99", "POLL CPU",
                     "WAKES/s");
  const double dt = prev ? (num(cur, "monotonic_ns") - num(*prev, "monotonic_ns")) : 0;
  for (const auto& c : items(cur, "cpus")) {
    const json* p = nullptr;
    if (prev)
      for (const auto& pc : items(*prev, "cpus"))
        if (pc.value("cpu", -1) == c.value("cpu", -2)) p = &pc;
    double hits = num(c, "poll_hits"), misses = num(c, "poll_misses");
    double poll_cpu = 0, rate = 0;
    if (p && dt > 0) {
      hits -= num(*p, "poll_hits");
      misses -= num(*p, "poll_misses");
      poll_cpu = 100.0 * (num(c, "poll_ns") - num(*p, "poll_ns")) / dt;
      rate = (num(c, "tasks_run") - num(*p, "tasks_run")) / (dt / 1e9);
    }
    const double hit = hits + misses > 0 ? 100.0 * hits / (hits + misses) : 0.0;
    const json& l = at(c, "latency");
    out += fmt::format("{:>4} {:>10} {:>7.1f}% {:>10} {:>10} {:>8.2f}% {:>10.1f}\n", c.value("cpu", 0), human_ns(num(c, "window_ns")),
                       hit, human_ns(num(l, "p50_ns")), human_ns(num(l, "p99_ns")), poll_cpu, rate);
  }
  return out;
}

std::string render_kernel_top(const json& stats, const json& d, const std::string& socket, const Screen& screen) {
  const json& ks = at(stats, "kernel_signals");
  const std::size_t width = std::max<std::size_t>(screen.width, 60);
  std::string out = fmt::format("haltpolld {} · mode {} · tick {} ({:.2f} s) · up {} s\n", socket, stats.value("mode", "?"),
                                str(ks, "tick"), num(ks, "elapsed_ns") / 1e9, static_cast<long>(num(stats, "uptime_seconds")));
  out += "kernel   " + kernel_params_line(at(stats, "kernel")) + '\n';
  std::size_t used = 2;
  if (d.is_object()) {
    const std::string where = d.value("applied_kernel", false) ? "written to the kernel"
                              : d.value("applied_pool", false) ? "applied to the pool"
                              : d.value("target", "") == "kernel" ? "in force in the kernel"
                                                                   : "not written to the kernel (target " + d.value("target", std::string("?")) + ")";
    const std::string action =
        d.value("action", std::string("?")) + (d.contains("rule") ? " [" + d.value("rule", std::string()) + "]" : "");
    const std::string change = d.value("previous_ns", json()) == d.value("guest_halt_poll_ns", json())
                                   ? action
                                   : fmt::format("{} {} → {}", action, human_value(at(d, "previous_ns"), true),
                                                 human_value(at(d, "guest_halt_poll_ns"), true));
    out += fmt::format("set      {} · last decision: {} at {} (tick {}) · {}\n", human_value(at(d, "guest_halt_poll_ns"), true),
                       change, local_time(at(d, "time_ms")), str(d, "tick"), where);
    // At most three lines of reason: the rest is in `haltpollctl decisions`.
    auto lines = wrap(d.value("reason", std::string("-")), width - 11);  // room for " …"
    if (lines.size() > 3) {
      lines.resize(3);
      lines.back() += " …";
    }
    for (std::size_t i = 0; i < lines.size(); ++i) out += (i == 0 ? "reason   " : "         ") + lines[i] + '\n';
    used += 1 + lines.size();
  } else {
    out += "set      - (no decision yet)\n";
    ++used;
  }
  bool first = true;
  for (const auto& line : wrap(bpf_line(ks), width - 9)) {
    out += (first ? "eBPF     " : "         ") + line + '\n';
    first = false;
    ++used;
  }
  if (driverless(ks)) return out + driverless_top(ks, screen, width, used);
  out += '\n' + kernel_table_header() + '\n';
  used += 2;
  if (!ks.value("available", false)) {
    out += "no kernel signals: " + str(ks, "reason", "unknown") + '\n';
    return out;
  }
  const json& cpus = items(ks, "cpus");
  // On a terminal, as many CPUs as fit above the `all` row; the rest are in `stats --kernel`.
  std::size_t shown = cpus.size();
  if (screen.height > 0 && used + cpus.size() + 2 > screen.height) shown = screen.height > used + 3 ? screen.height - used - 3 : 0;
  for (std::size_t i = 0; i < shown; ++i) out += kernel_row(str(cpus[i], "cpu"), cpus[i], at(cpus[i], "steal_percent")) + '\n';
  if (shown < cpus.size()) out += fmt::format("  … {} more CPUs: haltpollctl stats --kernel\n", cpus.size() - shown);
  out += kernel_row("all", at(ks, "all"), at(ks, "steal_percent")) + '\n';
  return out;
}

std::string render_kernel_stats(const json& stats) {
  const json& ks = at(stats, "kernel_signals");
  std::string out = fmt::format("kernel signals of tick {} ({:.2f} s) · cpuidle {} · steal {}\n", str(ks, "tick"),
                                num(ks, "elapsed_ns") / 1e9, str(ks, "cpuidle"),
                                at(ks, "steal_percent").is_number() ? percent(num(ks, "steal_percent")) + " (all CPUs)" : "-");
  out += "eBPF: " + bpf_line(ks) + "\n\n";
  const json& f = at(ks, "forecast");
  if (driverless(ks)) {
    if (items(ks, "cpus").empty()) {
      out += "no idle periods counted yet: " + str(ks, "reason", "unknown") + '\n';
    } else {
      const std::string note = rows_note(ks);
      out += (note.empty() ? std::string("last tick") : note) +
             ", per second (no cpuidle driver: every idle entry is a halt; HALT CPU of `all` in % of one CPU):\n" +
             halt_table_header() + '\n';
      for (const auto& c : items(ks, "cpus")) out += halt_row(str(c, "cpu"), c, at(c, "steal_percent")) + '\n';
      out += halt_row("all", at(ks, "all"), at(ks, "steal_percent")) + '\n';
      if (const std::string p = periods_line(f); !p.empty()) out += p + '\n';
    }
  } else if (!ks.value("available", false)) {
    out += "no kernel signals: " + str(ks, "reason", "unknown") + '\n';
  } else {
    out += "last tick, per second (POLL CPU of `all` in % of one CPU):\n" + kernel_table_header() + '\n';
    for (const auto& c : items(ks, "cpus")) out += kernel_row(str(c, "cpu"), c, at(c, "steal_percent")) + '\n';
    out += kernel_row("all", at(ks, "all"), at(ks, "steal_percent")) + '\n';
  }
  const json& t = at(ks, "totals");
  out += fmt::format("\ntotals over {} ticks ({:.1f} s):\n", str(t, "ticks"), num(t, "elapsed_ns") / 1e9);
  constexpr const char* row = "{:>4} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>10} {:>11} {:>7} {:>7}\n";
  out += fmt::format(row, "CPU", "IDLE", "POLLS", "HALTS", "HITS", "MISSES", "POLL TIME", "HALT TIME", "IPI SKIPPED", "GROWS",
                     "SHRINKS");
  auto totals_row = [&](const std::string& label, const json& c) {
    return fmt::format(row, label, str(c, "idle_entries"), str(c, "poll_entries"), str(c, "halts"), str(c, "poll_hits"),
                       str(c, "poll_misses"), human_ns(num(c, "poll_ns")), human_ns(num(c, "halt_ns")), str(c, "ipi_skipped"),
                       str(c, "limit_grows"), str(c, "limit_shrinks"));
  };
  for (const auto& c : items(ks, "cpus"))
    if (c.contains("totals")) out += totals_row(str(c, "cpu"), c["totals"]);
  out += totals_row("all", t);
  if (f.is_object()) {
    out +=
        "\nwhat enabling halt-polling would buy: the idle periods of the tick replayed through the kernel's haltpoll "
        "governor (the library's model) at each rung of the tuner's ladder\n" +
        forecast_summary(f) + '\n';
    if (f.value("available", false)) {
      for (const auto& line : forecast_table(f)) out += "  " + line + '\n';
      out += "  chosen:  " + str(at(f, "chosen"), "reason") + '\n';
      out += "  " + penalty_line(f) + '\n';
      out += "  error:   " + forecast_error(f) + " (" + str(at(f, "error"), "source") + ")\n";
      out += "  bound:   " + str(f, "bound") + '\n';
    }
    out += "  enable:  " + str(f, "how_to_enable") + '\n';
  }
  out += "\nsignals:\n";
  const json& sig = at(ks, "signals");
  if (sig.is_object())
    for (auto it = sig.begin(); it != sig.end(); ++it) {
      // The reason there are no kernel signals at all is printed once, above.
      const bool as_above = !ks.value("available", false) && at(*it, "source") == at(ks, "reason");
      out += fmt::format("  {:<18} {:<8} {}\n", it.key(), str(*it, "status"),
                         as_above ? std::string("(no kernel signals in the last tick: see above)") : str(*it, "source"));
    }
  return out;
}

std::string render_kernel_histogram(const json& stats) {
  const json& ks = at(stats, "kernel_signals");
  const json& h = at(ks, "histograms");
  if (!h.is_object()) {
    const json& bpf = at(ks, "bpf");
    const std::string why = bpf.value("present", false) ? std::string("the eBPF program recorded no idle-period histograms")
                                                        : "eBPF absent: " + str(bpf, "missing_reason", "no reason given");
    return "no idle-period histograms (" + why +
           ").\nThey come from the eBPF program on power:cpu_idle; without it the cpuidle counters give rates, not a "
           "distribution: see `haltpollctl stats --kernel`.\n";
  }
  std::string out = "idle periods by outcome, " + str(h, "scope") + ":\n\n";
  const std::pair<const char*, const char*> outcomes[] = {
      {"poll_hit", "poll ended by a wake-up"}, {"poll_halt", "poll timed out, then halt (whole period)"}, {"halt", "halt without a poll"}};
  for (const auto& [key, what] : outcomes) {
    const json& o = at(h, key);
    out += fmt::format("{} ({}): {} periods, p50 {}, p99 {}\n", key, what, str(o, "count"), ns_or_dash(at(o, "p50_ns")),
                       ns_or_dash(at(o, "p99_ns")));
    out += render_buckets(items(o, "buckets"), "  ") + "\n";
  }
  return out;
}

std::string render_decisions(const json& d, const Screen& screen, bool wrap_reason) {
  const json& list = items(d, "decisions");
  if (list.empty()) return "no decisions yet\n";
  constexpr const char* row = "{:<8} {:>11} {:<6} {:<6} {:>9} → {:<9} {:<7} {}\n";
  std::string out = fmt::format(row, "TIME", "TICK", "TARGET", "ACTION", "OLD", "NEW", "APPLIED", "REASON");
  constexpr std::size_t reason_column = 8 + 1 + 11 + 1 + 6 + 1 + 6 + 1 + 9 + 3 + 9 + 1 + 7 + 1;
  const std::size_t reason_width = screen.width > reason_column + 20 ? screen.width - reason_column : 40;
  auto applied = [](const json& e) -> std::string {
    return e.value("applied_kernel", false) ? "kernel" : e.value("applied_pool", false) ? "pool" : "-";
  };
  // Two records say the same when everything but their time and tick does: a run of them is one line
  // with its count and time span (the JSON keeps every tick's record).
  auto same = [&](const json& a, const json& b) {
    for (const char* key : {"target", "action", "previous_ns", "guest_halt_poll_ns", "reason"})
      if (at(a, key) != at(b, key)) return false;
    return applied(a) == applied(b);
  };
  for (std::size_t i = 0; i < list.size();) {
    std::size_t j = i + 1;
    while (j < list.size() && same(list[i], list[j])) ++j;
    const json& e = list[i];
    const json& last = list[j - 1];
    std::string reason = e.value("reason", std::string("-"));
    std::string tick = str(e, "tick");
    if (j - i > 1) {
      tick += "-" + str(last, "tick");
      reason = fmt::format("{} ({} times, {}–{})", reason, j - i, local_time(at(e, "time_ms")), local_time(at(last, "time_ms")));
    }
    std::vector<std::string> lines = wrap_reason ? wrap(reason, reason_width) : std::vector<std::string>{reason};
    if (lines.empty()) lines.push_back("");
    out += fmt::format(row, local_time(at(e, "time_ms")), tick, str(e, "target"), str(e, "action"),
                       human_value(at(e, "previous_ns"), true), human_value(at(e, "guest_halt_poll_ns"), true), applied(e), lines[0]);
    for (std::size_t k = 1; k < lines.size(); ++k) out += std::string(reason_column, ' ') + lines[k] + '\n';
    i = j;
  }
  return out;
}

}  // namespace haltpollctl
