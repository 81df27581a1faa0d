// `haltpolld record` (run_record / record_main, run through the haltpoll_idle_trace front end)
// against the real kernel: a 2 s recording parses line by line and is plausible; bad arguments and
// a missing capability fail with their exit code and message, and an existing output file
// survives a failed run.
#include <catch2/catch.hpp>

#include "idle_load.hpp"
#include "idle_record.hpp"
#include "subprocess.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using haltpolld::IdleTraceLine;

namespace {

std::string temp_path(const char* stem) {
  std::string p = std::string("/tmp/haltpoll-") + stem + "-" + std::to_string(::getpid());
  std::remove(p.c_str());
  return p;
}

testsupport::RunResult record(std::vector<std::string> args) {
  args.insert(args.begin(), {HALTPOLL_IDLE_TRACE_BIN, "record"});
  return testsupport::run(std::move(args), {}, std::chrono::seconds(30));
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("parse_idle_trace_line reads the format of the real-guest traces and refuses others", "[bpf]") {
  IdleTraceLine l;
  std::string err;
  REQUIRE(haltpolld::parse_idle_trace_line("1 POLL 2345", l, err));
  REQUIRE((l.kind == IdleTraceLine::Kind::poll && l.cpu == 1 && l.residency_ns == 2345));
  REQUIRE(haltpolld::parse_idle_trace_line("0 halt 81581", l, err));
  REQUIRE((l.kind == IdleTraceLine::Kind::halt && l.cpu == 0 && l.residency_ns == 81581));
  REQUIRE(haltpolld::parse_idle_trace_line("# limit 1 50000 100000 grow", l, err));
  REQUIRE((l.kind == IdleTraceLine::Kind::limit && l.cpu == 1 && l.old_ns == 50000 && l.new_ns == 100000 && l.grow));
  REQUIRE(haltpolld::parse_idle_trace_line("# limit 0 0 0 shrink", l, err));
  REQUIRE((l.kind == IdleTraceLine::Kind::limit && !l.grow));
  for (const char* comment : {"", "   ", "# cpu state residency_ns | # limit cpu old new grow|shrink", "#limit"}) {
    REQUIRE(haltpolld::parse_idle_trace_line(comment, l, err));
    REQUIRE(l.kind == IdleTraceLine::Kind::comment);
  }
  for (const char* bad : {"0 C1 100", "0 halt", "0 halt 12x", "x halt 1", "0 halt 1 2", "12345", "# limit 0 1 2",
                          "# limit 0 1 2 up", "0 halt -5", "0 halt 99999999999999999999"}) {
    INFO(bad);
    err.clear();
    REQUIRE_FALSE(haltpolld::parse_idle_trace_line(bad, l, err));
    REQUIRE(!err.empty());
  }
}

TEST_CASE("IdlePeriodReader turns a trace into per-CPU idle periods for the simulator", "[bpf]") {
  haltpolld::IdlePeriodReader r;
  std::string err;
  for (const char* line : {"# cpu state residency_ns | # limit cpu old new grow|shrink", "0 POLL 100", "1 halt 5000",
                           "# limit 1 0 50000 grow", "0 POLL 200", "1 POLL 300", "0 halt 7000", "0 halt 9000",
                           "1 POLL 400"})
    REQUIRE(r.add_line(line, err));
  r.finish();
  const auto& p = r.periods();
  REQUIRE(p.size() == 2);
  // CPU 0: a poll hit (100), a poll that timed out and its halt (200 + 7000), a plain halt.
  REQUIRE(p[0].size() == 3);
  REQUIRE((p[0][0].ns == 100 && p[0][0].polled && !p[0][0].halted));
  REQUIRE((p[0][1].ns == 7200 && p[0][1].polled && p[0][1].halted));
  REQUIRE((p[0][2].ns == 9000 && !p[0][2].polled && p[0][2].halted));
  // CPU 1: a plain halt, a poll hit, and the last poll, decided by finish().
  REQUIRE(p[1].size() == 3);
  REQUIRE((p[1][0].ns == 5000 && !p[1][0].polled));
  REQUIRE((p[1][1].ns == 300 && p[1][2].ns == 400));
  REQUIRE_FALSE(r.add_line("0 POLL x", err));
  REQUIRE(err == "line 10: expected '<cpu> POLL|halt <residency_ns>'");
}

TEST_CASE("record captures 2 s of real idle periods in the idle-trace format", "[bpf]") {
  const std::string out = temp_path("record");
  std::atomic<bool> done{false};
  std::thread load([&] {
    while (!done) {
      bpftest::ping_pong(2000);
      bpftest::sleeps(20, std::chrono::milliseconds(1));
    }
  });
  // A CPU idles only in the gaps other work leaves it: on a saturated machine a 2 s recording may
  // hold nothing, so record again (up to 5 times) until it holds an idle period.
  const auto idle0 = bpftest::idle_ticks();
  for (int attempt = 0; attempt < 5; ++attempt) {
    const auto r = record({"--seconds", "2", "--output", out});
    INFO("stderr: " << r.err);
    REQUIRE(r.code == 0);
    REQUIRE(::access((out + ".tmp").c_str(), F_OK) != 0);
    if (slurp(out).find(" halt ") != std::string::npos || slurp(out).find(" POLL ") != std::string::npos) break;
  }
  done = true;
  load.join();

  std::ifstream f(out);
  REQUIRE(f);
  std::string line, first, last, err;
  std::uint64_t lineno = 0, periods = 0, polls = 0, limits = 0;
  std::map<unsigned, IdleTraceLine::Kind> previous;  // per CPU, the last period line
  const long ncpu = ::sysconf(_SC_NPROCESSORS_CONF);
  while (std::getline(f, line)) {
    ++lineno;
    if (lineno == 1) first = line;
    last = line;
    IdleTraceLine l;
    INFO("line " << lineno << ": " << line);
    REQUIRE(haltpolld::parse_idle_trace_line(line, l, err));
    switch (l.kind) {
      case IdleTraceLine::Kind::comment: break;
      case IdleTraceLine::Kind::poll:
      case IdleTraceLine::Kind::halt:
        ++periods;
        polls += l.kind == IdleTraceLine::Kind::poll;
        REQUIRE(l.cpu < static_cast<unsigned>(ncpu));
        // Only periods that began after the attach are written: none is longer than the run.
        REQUIRE(l.residency_ns <= 2'500'000'000u);
        previous[l.cpu] = l.kind;
        break;
      case IdleTraceLine::Kind::limit:
        ++limits;
        REQUIRE(l.cpu < static_cast<unsigned>(ncpu));
        // The governor adjusts a CPU's limit right after that CPU's halt (unless the halt began
        // before the attach and so has no line).
        if (previous.count(l.cpu)) REQUIRE(previous[l.cpu] == IdleTraceLine::Kind::halt);
        break;
    }
  }
  REQUIRE_THAT(first, StartsWith("# haltpolld record: "));
  REQUIRE_THAT(last, StartsWith("# end: "));
  REQUIRE_THAT(last, Contains(" " + std::to_string(periods) + " periods, " + std::to_string(limits) + " limit events"));
  INFO(periods << " periods (" << polls << " POLL), " << limits << " limit events; /proc/stat idle time "
                << bpftest::idle_ticks() - idle0 << " ticks (0 = other work kept every CPU busy)");
  REQUIRE(periods > 0);
  std::remove(out.c_str());
}

TEST_CASE("record refuses bad arguments with exit code 2 and a reason", "[bpf]") {
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{}, "--seconds N is required"},
      {{"--seconds", "abc", "--output", "/tmp/x"}, "not a number"},
      {{"--seconds", "0", "--output", "/tmp/x"}, "--seconds must be a number in (0, 86400]"},
      {{"--seconds", "-1", "--output", "/tmp/x"}, "--seconds must be"},
      {{"--seconds", "1"}, "--output FILE is required"},
      {{"--seconds"}, "unknown or incomplete argument '--seconds'"},
      {{"--bogus", "1"}, "unknown or incomplete argument '--bogus'"},
  };
  for (const auto& c : cases) {
    const auto r = record(c.args);
    INFO("args: " << c.args.size() << " stderr: " << r.err);
    REQUIRE(r.code == 2);
    REQUIRE_THAT(r.err, Contains(c.says));
  }
  const auto help = record({"--help"});
  REQUIRE(help.code == 0);
  REQUIRE_THAT(help.out, Contains("usage: haltpolld record --seconds N --output FILE"));
}

TEST_CASE("record fails with exit code 4 on an unwritable output and 3 without the capability", "[bpf]") {
  const auto r = record({"--seconds", "1", "--output", "/nonexistent-dir/trace.txt"});
  REQUIRE(r.code == 4);
  REQUIRE_THAT(r.err, Contains("cannot create /nonexistent-dir/trace.txt.tmp"));

  // As nobody, in a directory nobody may write to: the temporary file goes again and the existing
  // file is left as it was.
  char tmpl[] = "/tmp/haltpoll-rec-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, out = dir + "/trace.txt";
  REQUIRE(::chmod(dir.c_str(), 0777) == 0);
  { std::ofstream(out) << "keep me\n"; }
  const auto n = testsupport::run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                   "--inh-caps=-all", HALTPOLL_IDLE_TRACE_BIN, "record", "--seconds", "1", "--output",
                                   out});
  INFO("stderr: " << n.err);
  REQUIRE(n.code == 3);
  REQUIRE_THAT(n.err, Contains("haltpolld record: kernel signals unavailable (EPERM)"));
  REQUIRE(slurp(out) == "keep me\n");
  REQUIRE(::access((out + ".tmp").c_str(), F_OK) != 0);
  std::remove(out.c_str());
  ::rmdir(dir.c_str());
}
