// haltpollctl's text views on replies shaped like the daemon's: what the daemon here cannot
// produce (eBPF histograms and poll limits, more CPUs than the screen has rows), and the 120-column
// bound that makes `top` readable in a 120×40 terminal.
#include "views.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

using namespace haltpollctl;
using nlohmann::json;

namespace {

std::size_t columns(const std::string& line) {
  std::size_t n = 0;
  for (unsigned char ch : line) n += (ch & 0xC0) != 0x80;
  return n;
}

std::size_t widest_line(const std::string& text) {
  std::istringstream in(text);
  std::size_t w = 0;
  for (std::string l; std::getline(in, l);) w = std::max(w, columns(l));
  return w;
}

std::size_t line_count(const std::string& text) { return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')); }

json cpu_row(int cpu) {
  return {{"cpu", cpu},
          {"poll_cpu_percent", 12.5},
          {"poll_hit_percent", 93.75},
          {"idle_entries_per_s", 123456.0},
          {"poll_entries_per_s", 120000.0},
          {"halts_per_s", 7500.0},
          {"mean_poll_ns", 1042.0},
          {"mean_poll_hit_ns", 800.0},
          {"mean_poll_miss_ns", 200000.0},
          {"poll_limit_ns", 200000},
          {"ipi_skipped_per_s", 98765.0}};
}

json stats_with(int ncpus) {
  json cpus = json::array();
  for (int c = 0; c < ncpus; ++c) cpus.push_back(cpu_row(c));
  json hist = {{"scope", "all CPUs, since start or the last ResetStats"}};
  for (const char* k : {"poll_hit", "poll_halt", "halt"})
    hist[k] = {{"count", 30}, {"p50_ns", 2000}, {"p99_ns", 50000},
               {"buckets", json::array({{{"le_ns", 1000}, {"count", 0}}, {{"le_ns", 2000}, {"count", 20}},
                                        {{"le_ns", 5000}, {"count", 0}}, {{"le_ns", 10000}, {"count", 10}},
                                        {{"le_ns", nullptr}, {"count", 0}}})}};
  return {{"mode", "kernel"},
          {"uptime_seconds", 3600.0},
          {"kernel", {{"present", true}, {"guest_halt_poll_ns", 200000}, {"guest_halt_poll_grow", 2},
                      {"guest_halt_poll_shrink", 2}, {"guest_halt_poll_grow_start", 50000}, {"guest_halt_poll_allow_shrink", true}}},
          {"kernel_signals",
           {{"available", true}, {"tick", 42}, {"elapsed_ns", 1000000000}, {"steal_percent", 0.25},
            {"bpf", {{"present", true}, {"missing_reason", nullptr}}}, {"cpus", cpus}, {"all", cpu_row(-1)},
            {"histograms", hist}, {"totals", {{"ticks", 42}}}}}};
}

json decision() {
  return {{"tick", 42}, {"time_ms", 1764580000000}, {"target", "kernel"}, {"action", "grow"}, {"previous_ns", 100000},
          {"guest_halt_poll_ns", 200000}, {"applied_kernel", true},
          {"reason", std::string(400, 'x').replace(10, 1, " ").replace(150, 1, " ").replace(290, 1, " ")}};
}

}  // namespace

TEST_CASE("top: every line fits 120 columns, CPUs beyond the screen's rows are counted, not cut silently") {
  const json s = stats_with(2);
  const std::string frame = render_kernel_top(s, decision(), "/run/haltpolld/io.haltpolld", {120, 40});
  INFO(frame);
  CHECK(widest_line(frame) <= 120);
  CHECK(line_count(frame) <= 40);
  CHECK(frame.find("written to the kernel") != std::string::npos);
  CHECK(frame.find("grow 100.0 µs → 200.0 µs") != std::string::npos);
  CHECK(frame.find("200.0 µs") != std::string::npos);  // the eBPF limit column
  CHECK(frame.find("98.8k") != std::string::npos);     // IPI skips/s
  CHECK(frame.find(" …\n") != std::string::npos);      // a reason longer than three lines is cut and says so

  // Per-CPU steal from the cpuN lines: CPU 1's row shows it, a row without it a dash.
  json stolen = stats_with(2);
  stolen["kernel_signals"]["cpus"][1]["steal_percent"] = 7.25;
  const std::string with_steal = render_kernel_top(stolen, decision(), "/s", {120, 40});
  INFO(with_steal);
  CHECK(with_steal.find("98.8k   7.2%\n") != std::string::npos);
  CHECK(with_steal.find("98.8k      -\n") != std::string::npos);

  const std::string many = render_kernel_top(stats_with(64), decision(), "/s", {120, 40});
  INFO(many);
  CHECK(line_count(many) <= 40);
  CHECK(many.find("more CPUs: haltpollctl stats --kernel") != std::string::npos);
  CHECK(many.find("\n all ") != std::string::npos);
  CHECK(line_count(render_kernel_top(stats_with(64), decision(), "/s", {120, 0})) > 64);  // a pipe gets every CPU

  // The eBPF programs detached while the tuner is steady: said, with the reason, not "absent".
  json detached = stats_with(2);
  detached["kernel_signals"]["bpf"]["last_tick"] = false;
  detached["kernel_signals"]["bpf"]["detached_reason"] = "the tuner is steady: attached for one tick in 10";
  const std::string dframe = render_kernel_top(detached, decision(), "/s", {120, 40});
  INFO(dframe);
  CHECK(dframe.find("detached for the last tick (the tuner is steady") != std::string::npos);
  CHECK(dframe.find("absent") == std::string::npos);
  CHECK(widest_line(dframe) <= 120);

  json none = stats_with(2);
  none["kernel_signals"]["available"] = false;
  none["kernel_signals"]["reason"] = "no cpuidle states under /sys/devices/system/cpu/cpu0/cpuidle";
  CHECK(render_kernel_top(none, nullptr, "/s", {}).find("no kernel signals: no cpuidle states under") != std::string::npos);
  CHECK(render_kernel_top(none, nullptr, "/s", {}).find("set      - (no decision yet)") != std::string::npos);
}

TEST_CASE("histogram --kernel: one bar chart per outcome") {
  const std::string h = render_kernel_histogram(stats_with(2));
  INFO(h);
  for (const char* k : {"poll_hit (poll ended by a wake-up): 30 periods", "poll_halt (poll timed out, then halt (whole period)): 30",
                        "halt (halt without a poll): 30"})
    CHECK(h.find(k) != std::string::npos);
  // Empty buckets at the ends are left out, the one in between stays; the fuller bar is longer.
  CHECK(h.find("≤ 1.0 µs") == std::string::npos);
  CHECK(h.find("+Inf") == std::string::npos);
  CHECK(h.find("   ≤ 5.0 µs │ 0") != std::string::npos);
  const auto full = h.find("≤ 2.0 µs │"), half = h.find("≤ 10.0 µs │");
  REQUIRE(full != std::string::npos);
  REQUIRE(half != std::string::npos);
  auto bar_len = [&](std::size_t at) {
    const std::string line = h.substr(at, h.find('\n', at) - at);
    std::size_t n = 0;
    for (std::size_t p = line.find("█"); p != std::string::npos; p = line.find("█", p + 1)) ++n;
    return n;
  };
  CHECK(bar_len(full) == 50);
  CHECK(bar_len(half) == 25);
}

TEST_CASE("decisions: reasons wrap under their column on a terminal") {
  json d = {{"decisions", json::array({decision()})}};
  const std::string wrapped = render_decisions(d, {100, 40}, true);
  INFO(wrapped);
  CHECK(widest_line(wrapped) <= 100 + 0);
  CHECK(line_count(wrapped) > 2);
  const std::string flat = render_decisions(d, {100, 40}, false);
  CHECK(line_count(flat) == 2);
  CHECK(render_decisions({{"decisions", json::array()}}, {}, true) == "no decisions yet\n");
}

TEST_CASE("decisions: a run of identical decisions is one line with its count and time span") {
  auto hold = [](int tick, const char* reason) {
    return json{{"tick", tick},          {"time_ms", 1764580000000 + 1000LL * tick}, {"target", "pool"},
                {"action", "hold"},      {"previous_ns", 200000},                   {"guest_halt_poll_ns", 200000},
                {"applied_kernel", false}, {"applied_pool", false},                 {"reason", reason}};
  };
  json list = json::array();
  for (int t = 1; t <= 23; ++t) list.push_back(hold(t, "nothing to tune"));
  list.push_back(hold(24, "something else"));
  list.push_back(hold(25, "nothing to tune"));
  const std::string out = render_decisions({{"decisions", list}}, {200, 40}, false);
  INFO(out);
  // Header, the run of 23, the different one, and the lone repeat after it (a run is consecutive).
  CHECK(line_count(out) == 4);
  CHECK(out.find("1-23") != std::string::npos);
  CHECK(out.find("(23 times, ") != std::string::npos);
  CHECK(out.find("(1 times") == std::string::npos);
  // A change of value is never folded into a hold, even with the same reason.
  list = json::array({hold(1, "r"), hold(2, "r")});
  list[1]["action"] = "grow";
  list[1]["guest_halt_poll_ns"] = 400000;
  CHECK(line_count(render_decisions({{"decisions", list}}, {200, 40}, false)) == 3);
}

TEST_CASE("status: whether this guest's kernel polls, in plain words with the remedy") {
  json s = {{"version", "0.1.0"}, {"pid", 1}, {"uptime_seconds", 3.0}, {"mode", "observe"}, {"requested_mode", "observe"},
            {"mode_reason", "observe requested by the configuration"}, {"kernel", {{"present", true}}}};
  s["controller"]["kernel"] = {{"haltpoll_active", false},
                               {"reason", "this guest's kernel does not poll: cpuidle current_driver is 'none'"}};
  s["kernel_signals"] = {{"available", false},
                         {"counters", "tracepoint"},
                         {"reason", "no cpuidle states"},
                         {"bpf", {{"present", true}, {"last_tick", false}, {"detached_reason", "nothing to tune"}}}};
  std::string out = render_status(s);
  INFO(out);
  CHECK(out.find("polling:  no: this guest's kernel does not poll") != std::string::npos);
  CHECK(out.find("signals:  idle periods from the power:cpu_idle tracepoint") != std::string::npos);
  CHECK(out.find("present, detached: nothing to tune") != std::string::npos);
  // Without eBPF the tracepoint counts nothing: the reason is shown instead.
  s["kernel_signals"]["bpf"] = {{"present", false}, {"missing_reason", "not the running kernel"}};
  out = render_status(s);
  CHECK(out.find("signals:  none: no cpuidle states; eBPF absent: not the running kernel") != std::string::npos);
  s["controller"]["kernel"] = {{"haltpoll_active", true}, {"cpuidle_driver", "haltpoll"}, {"cpuidle_governor", "haltpoll"}};
  CHECK(render_status(s).find("polling:  yes: cpuidle driver haltpoll, governor haltpoll") != std::string::npos);
}

TEST_CASE("status: another writer, as it changed a value or as it claimed one, with the way back") {
  json s = {{"version", "0.1.0"}, {"pid", 1}, {"uptime_seconds", 3.0}, {"mode", "observe"}, {"requested_mode", "kernel"},
            {"mode_reason", "another writer"}, {"kernel", {{"present", true}}}};
  CHECK(render_status(s).find("writer:") == std::string::npos);
  s["other_writer"] = {{"parameter", "guest_halt_poll_ns"}, {"value", "2400000"}, {"expected", "100000"},
                       {"who", "unknown writer"}, {"since_unix_ms", 1}};
  std::string out = render_status(s);
  INFO(out);
  CHECK(out.find("writer:   another writer set guest_halt_poll_ns to 2400000 (haltpolld had 100000): unknown writer; "
                 "`haltpollctl take-over` takes it back\n") != std::string::npos);
  s["other_writer"]["expected"] = "2400000";
  s["other_writer"]["who"] = "TuneD: the active profile 'x'";
  CHECK(render_status(s).find("writer:   another writer owns guest_halt_poll_ns (2400000): TuneD: the active profile 'x'; "
                              "`haltpollctl take-over`") != std::string::npos);
}
