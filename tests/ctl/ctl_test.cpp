// haltpollctl against a real haltpolld: every command, --json, exit codes, and the kernel's view
// from a fake cpuidle tree whose counters the test advances between the daemon's ticks.
#include "daemon_fixture.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <sstream>

using daemontest::Daemon;
using nlohmann::json;
using testsupport::run;
using namespace std::chrono_literals;

namespace {
testsupport::RunResult ctl(const Daemon& d, std::vector<std::string> args) {
  std::vector<std::string> argv = {HALTPOLLCTL_BIN, "--socket", d.socket};
  for (auto& a : args) argv.push_back(a);
  return run(argv);
}

// Replaces a file in one rename, so that the daemon's tick never reads half a number.
void put(const std::string& path, const std::string& value) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  { std::ofstream(path + ".tmp") << value << "\n"; }
  std::filesystem::rename(path + ".tmp", path);
}

struct Counters {
  std::uint64_t poll_usage = 0, poll_us = 0, halt_usage = 0, halt_us = 0;
};

void put_cpuidle(const Daemon& d, int cpu, const Counters& c) {
  const std::string dir = d.sysfs + "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpuidle/";
  put(dir + "state0/name", "POLL");
  put(dir + "state0/usage", std::to_string(c.poll_usage));
  put(dir + "state0/time", std::to_string(c.poll_us));
  put(dir + "state1/name", "haltpoll");
  put(dir + "state1/usage", std::to_string(c.halt_usage));
  put(dir + "state1/time", std::to_string(c.halt_us));
}

void put_proc_stat(const Daemon& d, std::uint64_t total, std::uint64_t steal) {
  put(d.sysfs + "/proc/stat", fmt::format("cpu  {} 0 0 0 0 0 0 {} 0 0", total - steal, steal));
}

json kernel_json(const Daemon& d) {
  auto r = ctl(d, {"stats", "--kernel", "--json"});
  REQUIRE(r.code == 0);
  return json::parse(r.out);
}

// Polls until the daemon has ticked past `tick` and its last tick carried cpuidle signals.
json wait_kernel_tick(const Daemon& d, std::uint64_t tick) {
  auto deadline = std::chrono::steady_clock::now() + 60s;  // bounds a failing run only
  while (std::chrono::steady_clock::now() < deadline) {
    json k = kernel_json(d);
    if (k["tick"].get<std::uint64_t>() > tick && k["available"] == true) return k;
    std::this_thread::sleep_for(20ms);
  }
  FAIL("the daemon did not tick past " << tick);
  return {};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> v;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> v;
  std::istringstream in(line);
  for (std::string w; in >> w;) v.push_back(w);
  return v;
}
}  // namespace

TEST_CASE("haltpollctl: read commands, human and --json") {
  Daemon d(json{{"tuner", {{"interval_ms", 200}}}});
  auto status = ctl(d, {"status"});
  CHECK(status.code == 0);
  CHECK(status.out.find("mode:     observe") != std::string::npos);
  CHECK(status.out.find("guest_halt_poll_ns=200000") != std::string::npos);
  // The fixture's tree has no cpuidle states: status says there are no signals, and why.
  CHECK(status.out.find("signals:  none: ") != std::string::npos);
  // A fake root: the eBPF program would describe the real kernel, not this tree, so it is not
  // loaded (before the first tick the daemon cannot say more than that it is absent).
  CHECK(status.out.find("; eBPF absent: ") != std::string::npos);
  auto sj = ctl(d, {"status", "--json"});
  REQUIRE(sj.code == 0);
  json s = json::parse(sj.out);
  CHECK(s["mode"] == "observe");
  int cpu = s["cpus"][0];

  auto stats = ctl(d, {"stats"});
  CHECK(stats.code == 0);
  CHECK(stats.out.find("WAKE p50") != std::string::npos);
  auto one = ctl(d, {"--json", "stats", "--cpu", std::to_string(cpu)});
  REQUIRE(one.code == 0);
  CHECK(json::parse(one.out)["cpus"].size() == 1);
  auto nocpu = ctl(d, {"stats", "--cpu", "4000"});
  CHECK(nocpu.code == 1);
  CHECK(nocpu.err.find("no worker on CPU 4000") != std::string::npos);

  auto hist = ctl(d, {"histogram", "--cpu", std::to_string(cpu)});
  CHECK(hist.code == 0);
  CHECK(hist.out.find("CPU " + std::to_string(cpu) + ":") != std::string::npos);
  auto hj = ctl(d, {"histogram", "--json"});
  REQUIRE(hj.code == 0);
  CHECK(json::parse(hj.out)["cpus"][0]["latency"].contains("buckets"));

  auto top = ctl(d, {"top", "--pool", "--interval", "100", "--count", "2"});
  CHECK(top.code == 0);
  CHECK(top.out.find("POLL CPU") != std::string::npos);
  CHECK(top.out.find("kernel cap 200.0 µs") != std::string::npos);
  auto topj = ctl(d, {"top", "-p", "-i", "100", "-n", "2", "--json"});
  CHECK(topj.code == 0);
  CHECK(std::count(topj.out.begin(), topj.out.end(), '\n') == 2);

  auto dec = ctl(d, {"decisions", "--json"});
  CHECK(dec.code == 0);
  CHECK(json::parse(dec.out)["decisions"].is_array());
  CHECK(ctl(d, {"decisions", "--limit", "3"}).code == 0);

  auto metrics = ctl(d, {"metrics"});
  CHECK(metrics.code == 0);
  CHECK(metrics.out.find("# TYPE haltpoll_worker_tasks_total counter") != std::string::npos);
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: status says whether the kernel of the guest the tree is shaped like polls") {
  // Under `scripts/test.sh guest-kinds` the fixture's tree is shaped like each kind of guest in turn.
  Daemon d(json{{"tuner", {{"interval_ms", 100}}}});
  std::string out;
  for (auto deadline = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < deadline;) {
    auto r = ctl(d, {"status"});
    REQUIRE(r.code == 0);
    out = r.out;
    if (out.find("polling:  ") != std::string::npos) break;
    std::this_thread::sleep_for(50ms);
  }
  INFO(out);
  if (d.guest == testsupport::GuestKind::haltpoll_driver) {
    CHECK(out.find("polling:  yes: cpuidle driver haltpoll, governor haltpoll\n") != std::string::npos);
  } else {
    // No driver registered (or no driver files at all): the reason names what is in force and the remedy.
    CHECK(out.find("polling:  no: this guest's kernel does not poll") != std::string::npos);
    CHECK(out.find("cpuidle_haltpoll.force=1") != std::string::npos);
    if (d.guest == testsupport::GuestKind::no_driver) CHECK(out.find("current_driver is 'none'") != std::string::npos);
  }
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: top and stats --kernel on a guest whose kernel does not poll, and the forecast's state") {
  // Under `scripts/test.sh guest-kinds` the fixture's tree is shaped like each kind of guest in turn;
  // a fake tree has no eBPF, so a driverless one counts no period and the forecast says why (the
  // scripted periods and the forecast's numbers are in test_ctl_driverless and test_poll_forecast).
  Daemon d(json{{"tuner", {{"interval_ms", 100}}}});
  json k;
  for (auto deadline = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < deadline;) {
    k = kernel_json(d);
    if (k["tick"].get<std::uint64_t>() > 0) break;
    std::this_thread::sleep_for(20ms);
  }
  INFO(k.dump());
  REQUIRE(k["tick"].get<std::uint64_t>() > 0);
  if (d.guest == testsupport::GuestKind::no_driver) CHECK(k["counters"] == "tracepoint");
  if (k["counters"] != "tracepoint") {
    CHECK(k["forecast"].is_null());  // the kernel polls (or could): the tuner measures every rung itself
    CHECK(d.stop() == 0);
    return;
  }
  const json& f = k["forecast"];
  REQUIRE(f.is_object());
  CHECK(f["available"] == false);
  CHECK(f["rungs"].empty());
  CHECK(f["reason"].get<std::string>().find("and eBPF is missing: eBPF kernel signals not used: sysfs_root is ") !=
        std::string::npos);
  CHECK(f["how_to_enable"].get<std::string>().find("cpuidle_haltpoll.force=1") != std::string::npos);

  auto top = ctl(d, {"top", "-n", "1"});
  REQUIRE(top.code == 0);
  INFO(top.out);
  const auto lines = lines_of(top.out);
  auto starts = [&](const std::string& prefix) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
  };
  CHECK(starts("idle     no cpuidle states under " + d.sysfs));
  CHECK(starts(" CPU    IDLE/s   HALTS/s  HALT CPU  MEAN HALT  STEAL"));
  CHECK(starts("no idle periods counted yet: no cpuidle states under "));
  CHECK(starts("forecast no forecast: it replays the idle periods the eBPF program on power:cpu_idle counts"));
  CHECK(top.out.find("MEAN MISS") == std::string::npos);

  auto st = ctl(d, {"stats", "--kernel"});
  REQUIRE(st.code == 0);
  INFO(st.out);
  CHECK(st.out.find("\nno idle periods counted yet: ") != std::string::npos);
  CHECK(st.out.find("\nwhat enabling halt-polling would buy: ") != std::string::npos);
  CHECK(st.out.find("\nno forecast: it replays the idle periods") != std::string::npos);
  CHECK(st.out.find("\n  enable:  the cpuidle-haltpoll driver would make it poll: ") != std::string::npos);
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: status and metrics name a QoS request that makes the CPUs poll without limit") {
  Daemon d(json{{"tuner", {{"interval_ms", 100}}}});
  for (int cpu : {0, 1}) put_cpuidle(d, cpu, {});
  put(d.sysfs + "/sys/devices/system/cpu/online", "0-1");
  put(d.sysfs + "/sys/devices/system/cpu/cpuidle/current_governor", "haltpoll");
  put(d.sysfs + "/proc/4242/comm", "cyclictest");
  std::filesystem::create_directories(d.sysfs + "/proc/4242/fd");
  std::filesystem::create_symlink("/dev/cpu_dma_latency", d.sysfs + "/proc/4242/fd/3");
  auto set_qos = [&](std::int32_t us) {
    std::filesystem::create_directories(d.sysfs + "/dev");
    { std::ofstream(d.sysfs + "/dev/cpu_dma_latency.tmp", std::ios::binary) << testsupport::FakeSysfs::s32_bytes(us); }
    std::filesystem::rename(d.sysfs + "/dev/cpu_dma_latency.tmp", d.sysfs + "/dev/cpu_dma_latency");
  };
  auto status_until = [&](auto done) {
    std::string out;
    for (auto deadline = std::chrono::steady_clock::now() + 60s; std::chrono::steady_clock::now() < deadline;) {
      auto r = ctl(d, {"status"});
      REQUIRE(r.code == 0);
      out = r.out;
      if (done(out)) break;
      std::this_thread::sleep_for(50ms);
    }
    return out;
  };
  const std::string line =
      "override: CPUs 0-1 poll without limit whatever the cap (cpu_dma_latency is 0, held by process 4242 "
      "(cyclictest))\n";
  set_qos(0);
  std::string out = status_until([&](const std::string& o) { return o.find(line) != std::string::npos; });
  INFO(out);
  CHECK(out.find(line) != std::string::npos);
  auto sj = ctl(d, {"status", "--json"});
  REQUIRE(sj.code == 0);
  const json po = json::parse(sj.out)["polling_overrides"];
  CHECK(po["unlimited_cpus"] == json::array({0, 1}));
  CHECK(po["cpu_dma_latency"]["holders"][0]["pid"] == 4242);
  auto m = ctl(d, {"metrics"});
  REQUIRE(m.code == 0);
  INFO(m.out);
  CHECK(m.out.find("\nhaltpoll_polling_override{cpu=\"0\",reason=\"cpu_dma_latency\"} 1\n") != std::string::npos);
  CHECK(m.out.find("\nhaltpoll_polling_unlimited_cpus 2\n") != std::string::npos);
  // The holder lets go: the line goes, and the series with it.
  set_qos(testsupport::FakeSysfs::kNoLatencyConstraint);
  out = status_until([&](const std::string& o) { return o.find("override:") == std::string::npos; });
  CHECK(out.find("override:") == std::string::npos);
  m = ctl(d, {"metrics"});
  CHECK(m.out.find("haltpoll_polling_override{") == std::string::npos);
  CHECK(m.out.find("\nhaltpoll_polling_unlimited_cpus 0\n") != std::string::npos);
  CHECK(d.stop() == 0);
  // The journal (stderr here) said both.
  CHECK(d.proc->err().find("polling overrides: CPUs 0-1 poll without limit") != std::string::npos);
  CHECK(d.proc->err().find("polling overrides gone") != std::string::npos);
}

TEST_CASE("haltpollctl: the kernel's view (stats --kernel, top, histogram --kernel) from advancing cpuidle counters") {
  // The test writes one tick's counters just after a tick and reads that tick back with several
  // haltpollctl runs before the next one: 3 s leaves room for slow runs (a sanitizer build on a
  // loaded machine). A `top` still late enough to show the next tick (its counters unchanged) is
  // detected by the tick it names, and the round is played again, up to 3 times.
  Daemon d(json{{"tuner", {{"interval_ms", 3000}}}});
  auto sj = ctl(d, {"status", "--json"});
  REQUIRE(sj.code == 0);
  std::vector<int> cpus = json::parse(sj.out)["cpus"];
  REQUIRE(!cpus.empty());

  // Before any cpuidle state exists the view says why instead of showing zeros.
  json none = kernel_json(d);
  CHECK(none["available"] == false);
  CHECK(none["reason"].is_string());

  std::vector<Counters> c(cpus.size());
  for (std::size_t i = 0; i < cpus.size(); ++i) put_cpuidle(d, cpus[i], c[i]);
  put_proc_stat(d, 100000, 0);
  // The first tick that sees the states primes them; the next one has (zero) deltas.
  std::uint64_t t = wait_kernel_tick(d, 0)["tick"];

  // One tick's worth of idle activity per round: CPU i polls 1000·(i+1) times for 5·(i+1) ms in
  // all, and halts 250 times (so 250 polls timed out); 1 % of all CPU time was stolen.
  json k;
  testsupport::RunResult top;
  std::uint64_t rounds = 0;
  for (;;) {
    ++rounds;
    // Start just after a tick (the priming one at first), so that the writes below all land
    // before the next one.
    if (rounds > 1) t = wait_kernel_tick(d, kernel_json(d)["tick"].get<std::uint64_t>())["tick"];
    for (std::size_t i = 0; i < cpus.size(); ++i) {
      const std::uint64_t n = i + 1;
      c[i] = {c[i].poll_usage + 1000 * n, c[i].poll_us + 5000 * n, c[i].halt_usage + 250, c[i].halt_us + 400000};
      put_cpuidle(d, cpus[i], c[i]);
    }
    put_proc_stat(d, 100000 + 1000 * rounds, 10 * rounds);
    k = wait_kernel_tick(d, t);
    REQUIRE(k["tick"] == t + 1);
    // top, one frame, at once: it must show this tick, so it runs before the checks below.
    top = ctl(d, {"top", "-n", "1"});
    if (top.out.find(fmt::format("tick {} ", t + 1)) != std::string::npos || rounds == 3) break;
    WARN("haltpollctl top came after the next tick; round " << rounds << " played again");
  }
  const double e = k["elapsed_ns"].get<double>();
  REQUIRE(e > 0);
  REQUIRE(k["cpus"].size() == cpus.size());
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    const json& r = k["cpus"][i];
    const double n = static_cast<double>(i + 1);
    INFO("cpu " << cpus[i]);
    CHECK(r["cpu"] == cpus[i]);
    CHECK(r["poll_entries_per_s"].get<double>() == Approx(1000 * n * 1e9 / e));
    CHECK(r["halts_per_s"].get<double>() == Approx(250 * 1e9 / e));
    CHECK(r["poll_hits_per_s"].get<double>() == Approx((1000 * n - 250) * 1e9 / e));
    CHECK(r["poll_misses_per_s"].get<double>() == Approx(250 * 1e9 / e));
    CHECK(r["idle_entries_per_s"].get<double>() == Approx(1000 * n * 1e9 / e));
    CHECK(r["poll_cpu_percent"].get<double>() == Approx(100.0 * 5e6 * n / e));
    CHECK(r["poll_hit_percent"].get<double>() == Approx(100.0 * (1000 * n - 250) / (1000 * n)));
    CHECK(r["mean_poll_ns"].get<double>() == Approx(5000.0));
    CHECK(r["poll_limit_ns"].is_null());
    CHECK(r["ipi_skipped_per_s"].is_null());
    CHECK(r["totals"]["poll_entries"] == rounds * 1000 * (i + 1));
    CHECK(r["totals"]["poll_misses"] == rounds * 250);
  }
  CHECK(k["steal_percent"].get<double>() == Approx(1.0));
  CHECK(k["bpf"]["present"] == false);
  CHECK(k["signals"]["poll_hits"]["status"] == "derived");
  CHECK(k["signals"]["poll_limit_ns"]["status"] == "missing");
  CHECK(ctl(d, {"status"}).out.find("signals:  cpuidle states POLL,haltpoll; eBPF absent") != std::string::npos);

  // top: the same tick's numbers, "-" where eBPF is missing.
  REQUIRE(top.code == 0);
  INFO(top.out);
  CHECK(top.out.find(fmt::format("tick {} ", t + 1)) != std::string::npos);
  CHECK(top.out.find("kernel   guest_halt_poll_ns 200.0 µs") != std::string::npos);
  CHECK(top.out.find("\nset      ") != std::string::npos);
  CHECK(top.out.find("\nreason   ") != std::string::npos);
  CHECK(top.out.find("eBPF     absent (eBPF kernel signals not used: sysfs_root is ") != std::string::npos);
  const auto lines = lines_of(top.out);
  auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) { return l.find("POLL CPU") != std::string::npos; });
  REQUIRE(header != lines.end());
  CHECK(words_of(*header) == std::vector<std::string>{"CPU", "POLL", "CPU", "HIT%", "IDLE/s", "POLLS/s", "HALTS/s", "MEAN",
                                                      "POLL", "MEAN", "HIT", "MEAN", "MISS", "LIMIT", "IPI", "SKIP/s", "STEAL"});
  for (std::size_t i = 0; i < cpus.size(); ++i) {
    auto row = words_of(*(header + 1 + static_cast<std::ptrdiff_t>(i)));
    const json& r = k["cpus"][i];
    REQUIRE(row.size() >= 9);
    CHECK(row[0] == std::to_string(cpus[i]));
    CHECK(row[1] == fmt::format("{:.1f}%", r["poll_cpu_percent"].get<double>()));
    CHECK(row[2] == fmt::format("{:.1f}%", r["poll_hit_percent"].get<double>()));
    // Rates: one decimal, with a k (or M) suffix from 1000 on.
    auto rate = [](double v) { return v < 1000 ? fmt::format("{:.1f}", v) : fmt::format("{:.1f}k", v / 1e3); };
    CHECK(row[3] == rate(r["idle_entries_per_s"].get<double>()));
    CHECK(row[4] == rate(r["poll_entries_per_s"].get<double>()));
    CHECK(row[5] == rate(r["halts_per_s"].get<double>()));
    CHECK(row[6] + " " + row[7] == "5.0 µs");
    CHECK(row.back() == "-");  // steal has no per-CPU split
  }
  auto all = words_of(*(header + 1 + static_cast<std::ptrdiff_t>(cpus.size())));
  CHECK(all.front() == "all");
  CHECK(all.back() == "1.0%");

  // stats --kernel as text: the same rates, the totals and the signal table.
  auto st = ctl(d, {"stats", "--kernel"});
  CHECK(st.code == 0);
  CHECK(st.out.find("totals over") != std::string::npos);
  CHECK(st.out.find("poll_hits          derived") != std::string::npos);

  auto hist = ctl(d, {"histogram", "--kernel"});
  CHECK(hist.code == 0);
  CHECK(hist.out.find("no idle-period histograms (eBPF absent: eBPF kernel signals not used: sysfs_root is ") !=
        std::string::npos);
  auto hj = ctl(d, {"histogram", "--kernel", "--json"});
  REQUIRE(hj.code == 0);
  CHECK(json::parse(hj.out)["histograms"].is_null());

  // ResetStats zeroes the totals; no more activity follows, so they stay 0.
  REQUIRE(ctl(d, {"reset"}).code == 0);
  CHECK(kernel_json(d)["totals"]["poll_entries"] == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: decisions as a table, --json raw") {
  Daemon d(json{{"tuner", {{"interval_ms", 100}}}});
  auto deadline = std::chrono::steady_clock::now() + 60s;  // bounds a failing run only
  json raw;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = ctl(d, {"decisions", "--json"});
    REQUIRE(r.code == 0);
    raw = json::parse(r.out);
    if (raw["decisions"].size() >= 3) break;
    std::this_thread::sleep_for(50ms);
  }
  REQUIRE(raw["decisions"].size() >= 3);
  CHECK(raw["decisions"][0].contains("reason"));

  auto table = ctl(d, {"decisions", "--limit", "3"});
  REQUIRE(table.code == 0);
  const auto lines = lines_of(table.out);
  // Not a terminal: reasons unwrapped, one line per run of identical decisions (3 records: 1 to 3 runs).
  REQUIRE(lines.size() >= 2);
  REQUIRE(lines.size() <= 4);
  CHECK(words_of(lines[0]) ==
        std::vector<std::string>{"TIME", "TICK", "TARGET", "ACTION", "OLD", "→", "NEW", "APPLIED", "REASON"});
  const std::regex row(R"(^\d\d:\d\d:\d\d +\d+(-\d+)? (pool|kernel|none) +(hold|grow|shrink|set|revert) +[0-9.]+ \S+ → [0-9.]+ \S+ +(kernel|pool|-) +\S.*$)");
  auto raw_now = ctl(d, {"decisions", "--json"});
  REQUIRE(raw_now.code == 0);
  const json log = json::parse(raw_now.out)["decisions"];
  // Terminal columns, not bytes: "µ" and "→" are two and three bytes.
  auto column_of = [](const std::string& line, const std::string& what) {
    const std::size_t at = line.find(what);
    std::size_t cols = 0;
    for (std::size_t i = 0; i < at && at != std::string::npos; ++i) cols += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
    return at == std::string::npos ? std::string::npos : cols;
  };
  for (std::size_t i = 1; i < lines.size(); ++i) {
    INFO(lines[i]);
    CHECK(std::regex_match(lines[i], row));
    CHECK(lines[i].find("action=") == std::string::npos);  // not a key=value dump
    CHECK(lines[i].find("target=") == std::string::npos);
    CHECK(column_of(lines[i], "→") == column_of(lines[0], "→"));
    // The row ends with that decision's reason, whole; a run of identical ones adds its count and span.
    const std::string ticks = words_of(lines[i])[1];
    const auto tick = std::stoull(ticks.substr(0, ticks.find('-')));
    bool found = false;
    for (const auto& e : log) {
      if (e["tick"] != tick) continue;
      found = true;
      const std::string reason = e["reason"];
      const bool run = ticks.find('-') != std::string::npos;
      const std::regex suffix(run ? R"( \(\d+ times, \d\d:\d\d:\d\d–\d\d:\d\d:\d\d\)$)" : "$");
      std::smatch m;
      REQUIRE(std::regex_search(lines[i], m, suffix));
      const std::string body = lines[i].substr(0, static_cast<std::size_t>(m.position(0)));
      REQUIRE(body.size() >= reason.size());
      CHECK(body.substr(body.size() - reason.size()) == reason);
      CHECK(column_of(lines[i], reason) == column_of(lines[0], "REASON"));
    }
    CHECK(found);
  }
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: config get/set, reload, reset") {
  Daemon d;
  auto all = ctl(d, {"config", "get"});
  REQUIRE(all.code == 0);
  CHECK(json::parse(all.out)["tuner"]["policy"] == "balanced");
  auto one = ctl(d, {"config", "get", "tuner.interval_ms"});
  CHECK(one.code == 0);
  CHECK(one.out == "1000\n");
  CHECK(ctl(d, {"config", "get", "tuner.nope"}).code == 2);

  auto set = ctl(d, {"config", "set", "tuner.policy", "latency"});
  CHECK(set.code == 0);
  CHECK(set.out == "tuner.policy = \"latency\"\n");
  CHECK(ctl(d, {"config", "get", "tuner.policy"}).out == "latency\n");
  CHECK(ctl(d, {"config", "set", "probe.rate_hz", "2.5"}).code == 0);
  auto bad = ctl(d, {"config", "set", "tuner.interval_ms", "5"});
  CHECK(bad.code == 1);
  CHECK(bad.err.find("/tuner/interval_ms") != std::string::npos);
  auto restart = ctl(d, {"config", "set", "cpus", "0"});
  CHECK(restart.code == 1);
  CHECK(restart.err.find("after a restart") != std::string::npos);

  auto reload = ctl(d, {"reload"});
  CHECK(reload.code == 0);
  CHECK(ctl(d, {"config", "get", "tuner.policy"}).out == "balanced\n");
  d.write_config_text("{ broken");
  auto refused = ctl(d, {"reload"});
  CHECK(refused.code == 1);
  CHECK(refused.err.find("refused") != std::string::npos);
  CHECK(ctl(d, {"reset"}).code == 0);
  CHECK(d.stop() == 0);
}

TEST_CASE("haltpollctl: exit codes when the daemon is absent or the usage is wrong") {
  auto dir = daemontest::make_temp_dir();
  auto r = run({HALTPOLLCTL_BIN, "--socket", dir + "/none", "status"});
  CHECK(r.code == 3);
  CHECK(r.err.find("not running") != std::string::npos);
  CHECK(run({HALTPOLLCTL_BIN, "--socket", dir + "/none", "frobnicate"}).code == 2);
  CHECK(run({HALTPOLLCTL_BIN, "config"}).code == 2);
  auto env = run({HALTPOLLCTL_BIN, "status"}, {"HALTPOLLD_SOCKET=" + dir + "/env-sock"});
  CHECK(env.err.find(dir + "/env-sock") != std::string::npos);
  std::filesystem::remove_all(dir);
}
