// haltpollctl: the command-line client of haltpolld's control socket (varlink, io.haltpolld).
#include "client.hpp"

#include "control/interface.hpp"

#include "haltpoll/version.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

namespace {

using haltpollctl::Client;
using haltpollctl::ClientError;
using nlohmann::json;

// Exit codes, documented in haltpollctl(1).
enum ExitCode : int { ok = 0, failure = 1, usage_error = 2, not_running = 3, permission_denied = 4 };

std::string human_ns(double ns) {
  char buf[32];
  if (ns < 1000) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (ns < 1e6) std::snprintf(buf, sizeof buf, "%.1f µs", ns / 1e3);
  else if (ns < 1e9) std::snprintf(buf, sizeof buf, "%.1f ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f s", ns / 1e9);
  return buf;
}

std::string human_value(const json& v, bool ns) {
  if (v.is_null()) return "-";
  if (ns && v.is_number()) return human_ns(v.get<double>());
  if (v.is_boolean()) return v.get<bool>() ? "Y" : "N";
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Right-aligns to `width` terminal columns (printf counts bytes, and "µ" is two).
std::string pad(const std::string& v, std::size_t width) {
  std::size_t cols = 0;
  for (unsigned char ch : v)
    if ((ch & 0xC0) != 0x80) ++cols;
  return cols >= width ? v : std::string(width - cols, ' ') + v;
}

double num(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

void print_json(const json& j) { std::cout << j.dump(2) << '\n'; }

void print_status(const json& s) {
  auto str = [&](const char* k) { return s.contains(k) ? human_value(s[k], false) : std::string("-"); };
  std::cout << "haltpolld " << str("version") << " (pid " << str("pid") << "), up " << std::fixed;
  std::cout.precision(0);
  std::cout << num(s, "uptime_seconds") << " s\n";
  std::cout << "mode:     " << str("mode");
  if (s.value("requested_mode", "") != s.value("mode", "")) std::cout << " (requested " << str("requested_mode") << ")";
  std::cout << " — " << str("mode_reason") << '\n';
  std::cout << "backend:  " << str("backend") << '\n';
  std::cout << "cpus:     " << (s.contains("cpus") ? s["cpus"].dump() : "-") << '\n';
  const json& k = s.value("kernel", json::object());
  if (k.value("present", false)) {
    std::cout << "kernel:   guest_halt_poll_ns=" << human_value(k.value("guest_halt_poll_ns", json()), false)
              << " grow=" << human_value(k.value("guest_halt_poll_grow", json()), false)
              << " shrink=" << human_value(k.value("guest_halt_poll_shrink", json()), false)
              << " grow_start=" << human_value(k.value("guest_halt_poll_grow_start", json()), false)
              << " allow_shrink=" << human_value(k.value("guest_halt_poll_allow_shrink", json()), false) << '\n';
  } else {
    std::cout << "kernel:   no haltpoll module parameters (not a KVM guest with cpuidle-haltpoll?)\n";
  }
  const json& c = s.value("controller", json());
  if (c.is_object()) {
    if (c.contains("tuning_target")) std::cout << "tuning:   " << human_value(c["tuning_target"], false);
    if (c.contains("tuner") && c["tuner"].contains("current_ns"))
      std::cout << ", current " << human_value(c["tuner"]["current_ns"], true);
    std::cout << '\n';
  }
  const json& ctl = s.value("control", json::object());
  std::cout << "socket:   " << human_value(ctl.value("socket", json()), false) << " (" << human_value(ctl.value("connections", json()), false)
            << " connections)\n";
}

void print_stats(const json& s) {
  std::printf("%4s %10s %10s %8s %10s %10s %10s %10s %10s\n", "CPU", "TASKS", "WINDOW", "HIT%", "FUTEX", "NOSYSCALL", "WAKE p50",
              "p99", "p99.9");
  for (const auto& c : s.value("cpus", json::array())) {
    const json& l = c.value("latency", json::object());
    std::printf("%4d %10.0f %s %7.1f%% %10.0f %10.0f %s %s %s\n", c.value("cpu", 0), num(c, "tasks_run"),
                pad(human_ns(num(c, "window_ns")), 10).c_str(), 100.0 * num(c, "poll_hit_ratio"), num(c, "futex_waits"),
                num(c, "wakes_without_syscall"), pad(human_ns(num(l, "p50_ns")), 10).c_str(),
                pad(human_ns(num(l, "p99_ns")), 10).c_str(), pad(human_ns(num(l, "p999_ns")), 10).c_str());
  }
}

void print_histogram(const json& s) {
  for (const auto& c : s.value("cpus", json::array())) {
    const json& l = c.value("latency", json::object());
    std::printf("CPU %d: %.0f wake-ups, p50 %s, p99 %s\n", c.value("cpu", 0), num(l, "count"), human_ns(num(l, "p50_ns")).c_str(),
                human_ns(num(l, "p99_ns")).c_str());
    const json& b = l.value("buckets", json::array());
    double max = 0;
    for (const auto& x : b) max = std::max(max, num(x, "count"));
    // Skip the empty buckets at both ends; keep the ones in between so the shape stays honest.
    std::size_t first = b.size(), last = 0;
    for (std::size_t i = 0; i < b.size(); ++i)
      if (num(b[i], "count") > 0) first = std::min(first, i), last = i;
    if (first == b.size()) {
      std::printf("  (no samples)\n\n");
      continue;
    }
    constexpr int width = 50;
    for (std::size_t i = first; i <= last; ++i) {
      double n = num(b[i], "count");
      std::string label = b[i]["le_ns"].is_null() ? "+Inf" : "≤ " + human_ns(num(b[i], "le_ns"));
      int bar = max > 0 ? static_cast<int>(n / max * width + 0.5) : 0;
      if (n > 0 && bar == 0) bar = 1;
      std::string bars;
      for (int k = 0; k < bar; ++k) bars += "█";
      std::printf("  %s │%s %.0f\n", pad(label, 11).c_str(), bars.c_str(), n);
    }
    std::printf("\n");
  }
}

// Live view: rates come from the difference of two consecutive Watch replies.
void print_top(const json& cur, const json* prev, const std::string& socket) {
  bool tty = ::isatty(STDOUT_FILENO);
  if (tty) std::cout << "\033[H\033[2J";
  const json& k = cur.value("kernel", json::object());
  std::cout << "haltpolld " << socket << " — mode " << cur.value("mode", "?") << ", kernel cap "
            << (k.value("present", false) ? human_value(k.value("guest_halt_poll_ns", json()), true) : std::string("n/a"))
            << ", up " << static_cast<long>(num(cur, "uptime_seconds")) << " s\n\n";
  std::printf("%4s %10s %8s %10s %10s %9s %10s\n", "CPU", "WINDOW", "HIT%", "WAKE p50", "p99", "POLL CPU", "WAKES/s");
  double dt = prev ? (num(cur, "monotonic_ns") - num(*prev, "monotonic_ns")) : 0;
  static const json no_cpus = json::array();
  // References into the replies themselves: value() would return a copy, and a pointer into it dangles.
  const json& prev_cpus = prev && prev->contains("cpus") ? (*prev)["cpus"] : no_cpus;
  for (const auto& c : cur.value("cpus", json::array())) {
    const json* p = nullptr;
    for (const auto& pc : prev_cpus)
      if (pc.value("cpu", -1) == c.value("cpu", -2)) p = &pc;
    double hits = num(c, "poll_hits"), misses = num(c, "poll_misses");
    double poll_cpu = 0, rate = 0;
    if (p && dt > 0) {
      hits -= num(*p, "poll_hits");
      misses -= num(*p, "poll_misses");
      poll_cpu = 100.0 * (num(c, "poll_ns") - num(*p, "poll_ns")) / dt;
      rate = (num(c, "tasks_run") - num(*p, "tasks_run")) / (dt / 1e9);
    }
    double hit = hits + misses > 0 ? 100.0 * hits / (hits + misses) : 0.0;
    const json& l = c.value("latency", json::object());
    std::printf("%4d %s %7.1f%% %s %s %8.2f%% %10.1f\n", c.value("cpu", 0), pad(human_ns(num(c, "window_ns")), 10).c_str(), hit,
                pad(human_ns(num(l, "p50_ns")), 10).c_str(), pad(human_ns(num(l, "p99_ns")), 10).c_str(), poll_cpu, rate);
  }
  if (!tty) std::cout << '\n';
  std::cout.flush();
}

void print_decisions(const json& d) {
  const json& list = d.value("decisions", json::array());
  if (list.empty()) std::cout << "no decisions yet\n";
  for (const auto& e : list) {
    std::ostringstream line;
    for (auto it = e.begin(); it != e.end(); ++it) {
      if (it.key() == "reason") continue;
      line << it.key() << '=' << (it->is_string() ? it->get<std::string>() : it->dump()) << ' ';
    }
    if (e.contains("reason")) line << "— " << human_value(e["reason"], false);
    std::cout << line.str() << '\n';
  }
}

// "tuner.interval_ms" → "/tuner/interval_ms".
json::json_pointer key_pointer(const std::string& key) {
  std::string p;
  std::stringstream in(key);
  std::string part;
  while (std::getline(in, part, '.')) {
    if (part.empty()) throw CLI::ValidationError("KEY", "expected a dotted key such as tuner.interval_ms");
    p += "/" + part;
  }
  return json::json_pointer(p);
}

void print_remote_error(const ClientError& e) {
  const json& r = e.reply();
  std::string err = r.value("error", std::string(e.what()));
  const json& p = r.value("parameters", json::object());
  if (err == haltpolld::errors::config_refused) {
    std::fprintf(stderr, "haltpollctl: refused: %s%s: %s\n", p.contains("file") ? (p["file"].get<std::string>() + " ").c_str() : "",
                 p.value("path", "").empty() ? "config" : p.value("path", "").c_str(), p.value("reason", "").c_str());
  } else if (err == haltpolld::errors::restart_required) {
    std::fprintf(stderr, "haltpollctl: refused: %s take effect only after a restart (edit the file, then restart haltpolld)\n",
                 p.value("paths", json::array()).dump().c_str());
  } else if (err == haltpolld::errors::no_such_cpu) {
    std::fprintf(stderr, "haltpollctl: the daemon runs no worker on CPU %s\n", p.value("cpu", json()).dump().c_str());
  } else {
    std::fprintf(stderr, "haltpollctl: %s %s\n", err.c_str(), p.empty() ? "" : p.dump().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"haltpollctl: query and tune haltpolld over its control socket"};
  app.set_version_flag("-V,--version", std::string("haltpollctl ") + HALTPOLL_VERSION_STRING);
  std::string socket_path = "/run/haltpolld/io.haltpolld";
  bool as_json = false;
  int timeout_ms = 5000;
  app.add_option("-s,--socket", socket_path, "control socket of the daemon")->envname("HALTPOLLD_SOCKET")->capture_default_str();
  app.add_flag("-j,--json", as_json, "print the daemon's reply as JSON (read commands)");
  app.add_option("--timeout", timeout_ms, "milliseconds to wait for a reply")->capture_default_str()->check(CLI::Range(1, 600000));
  app.require_subcommand(0, 1);
  // Global options (--json, --socket, --timeout) are accepted after the command too.
  app.fallthrough();

  int cpu = -1;
  auto* status = app.add_subcommand("status", "daemon version, mode and why, backend, CPUs, kernel haltpoll state");
  auto* stats = app.add_subcommand("stats", "per-CPU counters and wake-latency percentiles");
  stats->add_option("--cpu", cpu, "only this CPU")->check(CLI::NonNegativeNumber);
  int interval_ms = 1000, count = 0;
  auto* top = app.add_subcommand("top", "live per-CPU view (Ctrl-C to quit)");
  top->add_option("-i,--interval", interval_ms, "refresh period, ms")->capture_default_str()->check(CLI::Range(100, 60000));
  top->add_option("-n,--count", count, "stop after this many refreshes (0: never)")->check(CLI::NonNegativeNumber);
  auto* histogram = app.add_subcommand("histogram", "wake-latency distribution as a bar chart");
  histogram->add_option("--cpu", cpu, "only this CPU")->check(CLI::NonNegativeNumber);
  auto* config = app.add_subcommand("config", "read or change the running configuration");
  config->require_subcommand(1);
  std::string key, value;
  auto* config_get = config->add_subcommand("get", "print the configuration, or one KEY such as tuner.interval_ms");
  config_get->add_option("KEY", key, "dotted key");
  auto* config_set = config->add_subcommand("set", "set KEY to VALUE (JSON, or else a string) until the next reload");
  config_set->add_option("KEY", key, "dotted key")->required();
  config_set->add_option("VALUE", value, "new value")->required();
  auto* reload = app.add_subcommand("reload", "re-read the config file (as SIGHUP does)");
  auto* reset = app.add_subcommand("reset", "zero the per-CPU counters and histograms");
  std::size_t limit = 0;
  auto* decisions = app.add_subcommand("decisions", "the tuner's recent decisions, newest last");
  decisions->add_option("--limit", limit, "at most this many");
  auto* metrics = app.add_subcommand("metrics", "Prometheus text exposition");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? ExitCode::ok : ExitCode::usage_error;
  }
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stdout);
    return ExitCode::ok;
  }

  try {
    Client client(socket_path, timeout_ms);
    if (status->parsed()) {
      json s = client.call("io.haltpolld.GetStatus");
      as_json ? print_json(s) : print_status(s);
    } else if (stats->parsed() || histogram->parsed()) {
      json p = json::object();
      if (cpu >= 0) p["cpu"] = cpu;
      if (histogram->parsed()) p["histogram"] = true;
      json s = client.call("io.haltpolld.GetStats", p);
      if (as_json) print_json(s);
      else if (histogram->parsed()) print_histogram(s);
      else print_stats(s);
    } else if (top->parsed()) {
      json prev;
      bool have_prev = false;
      json p = {{"interval_ms", interval_ms}};
      if (count > 0) p["count"] = count;
      client.stream("io.haltpolld.Watch", p, [&](const json& cur) {
        if (as_json) std::cout << cur.dump() << std::endl;
        else print_top(cur, have_prev ? &prev : nullptr, socket_path);
        prev = cur;
        have_prev = true;
        return true;
      }, interval_ms + timeout_ms);
    } else if (config_get->parsed()) {
      json c = client.call("io.haltpolld.GetConfig");
      json v = c.value("config", json::object());
      if (!key.empty()) {
        auto ptr = key_pointer(key);
        if (!v.contains(ptr)) {
          std::fprintf(stderr, "haltpollctl: no config key %s\n", key.c_str());
          return ExitCode::usage_error;
        }
        v = v.at(ptr);
      }
      if (as_json || v.is_structured()) print_json(v);
      else std::cout << (v.is_string() ? v.get<std::string>() : v.dump()) << '\n';
    } else if (config_set->parsed()) {
      // VALUE is JSON when it parses as such, else a string; a key whose running value is a string
      // always gets a string (so that `config set cpus 0` means "0").
      json running = client.call("io.haltpolld.GetConfig").value("config", json::object());
      auto ptr = key_pointer(key);
      if (!running.contains(ptr)) {
        std::fprintf(stderr, "haltpollctl: no config key %s\n", key.c_str());
        return ExitCode::usage_error;
      }
      json parsed = json::parse(value, nullptr, false);
      bool as_string = parsed.is_discarded() || (running.at(ptr).is_string() && !parsed.is_string());
      json partial = json::object();
      partial[ptr] = as_string ? json(value) : parsed;
      json r = client.call("io.haltpolld.SetConfig", {{"config", partial}});
      if (as_json) print_json(r);
      else std::cout << key << " = " << r.value("config", json::object()).at(key_pointer(key)).dump() << '\n';
    } else if (reload->parsed()) {
      json r = client.call("io.haltpolld.Reload");
      if (as_json) print_json(r);
      else {
        std::cout << "reloaded " << r.value("file", "") << '\n';
        for (const auto& p : r.value("restart_required", json::array()))
          std::cout << "note: " << p.get<std::string>() << " changed in the file; it takes effect after a restart\n";
      }
    } else if (reset->parsed()) {
      client.call("io.haltpolld.ResetStats");
      if (!as_json) std::cout << "statistics reset\n";
      else print_json(json::object());
    } else if (decisions->parsed()) {
      json p = json::object();
      if (limit > 0) p["limit"] = limit;
      json d = client.call("io.haltpolld.GetDecisions", p);
      as_json ? print_json(d) : print_decisions(d);
    } else if (metrics->parsed()) {
      json m = client.call("io.haltpolld.GetMetrics");
      std::cout << m.value("text", "");
    }
  } catch (const ClientError& e) {
    switch (e.kind()) {
      case ClientError::Kind::not_running:
        std::fprintf(stderr, "haltpollctl: %s\n", e.what());
        return ExitCode::not_running;
      case ClientError::Kind::permission_denied:
        std::fprintf(stderr, "haltpollctl: %s\n", e.what());
        return ExitCode::permission_denied;
      case ClientError::Kind::remote:
        print_remote_error(e);
        return ExitCode::failure;
      default:
        std::fprintf(stderr, "haltpollctl: %s\n", e.what());
        return ExitCode::failure;
    }
  } catch (const CLI::ValidationError& e) {
    std::fprintf(stderr, "haltpollctl: %s\n", e.what());
    return ExitCode::usage_error;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "haltpollctl: %s\n", e.what());
    return ExitCode::failure;
  }
  return ExitCode::ok;
}
