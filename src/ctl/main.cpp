// haltpollctl: the command-line client of haltpolld's control socket (varlink, io.haltpolld).
#include "client.hpp"
#include "views.hpp"

#include "varlink/io_haltpolld.hpp"

#include "haltpoll/version.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

namespace {

using haltpollctl::Client;
using haltpollctl::ClientError;
using haltpollctl::Screen;
using nlohmann::json;
using namespace haltpollctl;

// Exit codes, documented in haltpollctl(1) and docs/operations.md; the process's status only at
// main's return.
enum class ExitCode : int { ok = 0, failure = 1, usage_error = 2, not_running = 3, permission_denied = 4 };

void print_json(const json& j) { std::cout << j.dump(2) << '\n'; }

// The terminal's size when stdout is one; else no height limit and the width of a wide terminal,
// so that piped output keeps whole lines.
Screen screen_of_stdout() {
  Screen s;
  winsize w{};
  if (::isatty(STDOUT_FILENO) && ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) {
    s.width = w.ws_col;
    s.height = w.ws_row;
  }
  return s;
}

// "tuner.interval_ms" → "/tuner/interval_ms".
json::json_pointer key_pointer(const std::string& key) {
  std::string p;
  std::string_view rest = key;
  while (!rest.empty()) {
    const auto dot = rest.find('.');
    const std::string_view part = rest.substr(0, dot);
    if (part.empty()) throw CLI::ValidationError("KEY", "expected a dotted key such as tuner.interval_ms");
    p += "/";
    p += part;
    rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
  }
  return json::json_pointer(p);
}

void print_remote_error(const ClientError& e) {
  const json& r = e.reply();
  std::string err = r.value("error", std::string(e.what()));
  const json& p = r.value("parameters", json::object());
  if (err == haltpolld::errors::config_refused) {
    fmt::print(stderr, "haltpollctl: refused: {}{}: {}\n", p.contains("file") ? p["file"].get<std::string>() + " " : "",
               p.value("path", "").empty() ? "config" : p.value("path", ""), p.value("reason", ""));
  } else if (err == haltpolld::errors::restart_required) {
    fmt::print(stderr, "haltpollctl: refused: {} take effect only after a restart (edit the file, then restart haltpolld)\n",
               p.value("paths", json::array()).dump());
  } else if (err == haltpolld::errors::no_such_cpu) {
    fmt::print(stderr, "haltpollctl: the daemon runs no worker on CPU {}\n", p.value("cpu", json()).dump());
  } else {
    fmt::print(stderr, "haltpollctl: {} {}\n", err, p.empty() ? "" : p.dump());
  }
}

ExitCode run(int argc, char** argv) {
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
  bool kernel_view = false, pool_view = false;
  auto* stats = app.add_subcommand("stats", "per-CPU counters and wake-latency percentiles (--kernel: the kernel's idle accounting)");
  stats->add_option("--cpu", cpu, "only this CPU")->check(CLI::NonNegativeNumber);
  stats->add_flag("-k,--kernel", kernel_view, "the kernel's per-CPU idle rates of the last tick, totals, and which signals are exact");
  int interval_ms = 1000, count = 0;
  auto* top = app.add_subcommand("top", "live per-CPU view of the kernel's idle accounting (Ctrl-C to quit)");
  top->add_flag("-p,--pool", pool_view, "the worker pool's view instead: window, hit %, wake latency, poll CPU");
  top->add_option("-i,--interval", interval_ms, "refresh period, ms")->capture_default_str()->check(CLI::Range(100, 60000));
  top->add_option("-n,--count", count, "stop after this many refreshes (0: never)")->check(CLI::NonNegativeNumber);
  auto* histogram = app.add_subcommand("histogram", "wake-latency distribution as a bar chart (--kernel: idle periods)");
  histogram->add_option("--cpu", cpu, "only this CPU")->check(CLI::NonNegativeNumber);
  histogram->add_flag("-k,--kernel", kernel_view, "idle-period lengths per outcome (poll hit, poll then halt, halt), from eBPF");
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
  auto* take_over = app.add_subcommand(
      "take-over", "take the haltpoll parameters back from another writer: the values in force become the originals");
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
      if (as_json) print_json(s);
      else std::cout << render_status(s);
    } else if (stats->parsed() || histogram->parsed()) {
      json p = json::object();
      if (cpu >= 0) p["cpu"] = cpu;
      if (histogram->parsed()) p["histogram"] = true;
      json s = client.call("io.haltpolld.GetStats", p);
      if (as_json && kernel_view) print_json(s.value("kernel_signals", json()));
      else if (as_json) print_json(s);
      else if (histogram->parsed()) std::cout << (kernel_view ? render_kernel_histogram(s) : render_pool_histogram(s));
      else std::cout << (kernel_view ? render_kernel_stats(s) : render_pool_stats(s));
    } else if (top->parsed()) {
      const bool tty = ::isatty(STDOUT_FILENO);
      // The decision log is read on a second connection: the first one is busy with the stream.
      std::optional<Client> log_client;
      if (!pool_view && !as_json) log_client.emplace(socket_path, timeout_ms);
      json prev;
      bool have_prev = false;
      json p = {{"interval_ms", interval_ms}};
      if (count > 0) p["count"] = count;
      client.stream("io.haltpolld.Watch", p, [&](const json& cur) {
        if (as_json) {
          std::cout << cur.dump() << std::endl;
        } else {
          std::string frame;
          if (pool_view) {
            frame = render_pool_top(cur, have_prev ? &prev : nullptr, socket_path);
          } else {
            const json d = log_client->call("io.haltpolld.GetDecisions", {{"limit", 1}}).value("decisions", json::array());
            frame = render_kernel_top(cur, d.empty() ? json() : d.back(), socket_path, screen_of_stdout());
          }
          // One write per frame, so that a terminal never shows half of one; on a terminal the frame
          // overwrites the last one line by line (cursor home, erase each line's rest and what is
          // below) instead of clearing the screen first, which flickers.
          if (tty) {
            std::string painted = "\033[H";
            for (char ch : frame) painted += ch == '\n' ? std::string("\033[K\n") : std::string(1, ch);
            std::cout << painted << "\033[J" << std::flush;
          } else {
            std::cout << frame << '\n' << std::flush;
          }
        }
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
          fmt::print(stderr, "haltpollctl: no config key {}\n", key);
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
        fmt::print(stderr, "haltpollctl: no config key {}\n", key);
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
    } else if (take_over->parsed()) {
      json r = client.call("io.haltpolld.TakeOver");
      if (as_json) print_json(r);
      else std::cout << r.value("message", "") << '\n';
      if (!r.value("took_over", false)) return ExitCode::failure;
    } else if (reset->parsed()) {
      client.call("io.haltpolld.ResetStats");
      if (!as_json) std::cout << "statistics reset\n";
      else print_json(json::object());
    } else if (decisions->parsed()) {
      json p = json::object();
      if (limit > 0) p["limit"] = limit;
      json d = client.call("io.haltpolld.GetDecisions", p);
      if (as_json) print_json(d);
      else std::cout << render_decisions(d, screen_of_stdout(), ::isatty(STDOUT_FILENO));
    } else if (metrics->parsed()) {
      json m = client.call("io.haltpolld.GetMetrics");
      std::cout << m.value("text", "");
    }
  } catch (const ClientError& e) {
    switch (e.kind()) {
      case ClientError::Kind::not_running:
        fmt::print(stderr, "haltpollctl: {}\n", e.what());
        return ExitCode::not_running;
      case ClientError::Kind::permission_denied:
        fmt::print(stderr, "haltpollctl: {}\n", e.what());
        return ExitCode::permission_denied;
      case ClientError::Kind::remote:
        print_remote_error(e);
        return ExitCode::failure;
      default:
        fmt::print(stderr, "haltpollctl: {}\n", e.what());
        return ExitCode::failure;
    }
  } catch (const CLI::ValidationError& e) {
    fmt::print(stderr, "haltpollctl: {}\n", e.what());
    return ExitCode::usage_error;
  } catch (const std::exception& e) {
    fmt::print(stderr, "haltpollctl: {}\n", e.what());
    return ExitCode::failure;
  }
  return ExitCode::ok;
}

}  // namespace

int main(int argc, char** argv) { return static_cast<int>(run(argc, argv)); }
