// IdleTrace against the real kernel: the program loaded and attached, its counts checked against
// the kernel's other accounts of the same idle periods (cpuidle sysfs, perf's tracepoint counts),
// its histograms against its counters, and its refusals (no privileges, seccomp) against their
// messages. Needs root and a kernel with eBPF; CI runs it as root.
#include <catch2/catch.hpp>

#include "cpuidle_totals.hpp"
#include "guest_kind.hpp"
#include "idle_load.hpp"
#include "idle_trace.hpp"
#include "subprocess.hpp"

#include <bpf/bpf.h>
#include <grp.h>
#include <sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
using haltpolld::IdleCpuStats;
using haltpolld::IdleTrace;
using haltpolld::IdleTraceOptions;

namespace {

std::unique_ptr<IdleTrace> open_or_fail(const IdleTraceOptions& o = {}) {
  std::string why;
  auto t = IdleTrace::open(o, &why);
  INFO("IdleTrace::open: " << why);
  REQUIRE(t != nullptr);
  return t;
}

// The invariants that hold exactly for one CPU's delta: the kernel updates each CPU inside a
// sequence count, so a snapshot's histograms and counters describe the same events.
void require_consistent(const IdleCpuStats& d) {
  INFO("cpu " << d.cpu);
  REQUIRE(d.poll_hit.count() == d.poll_hits);
  REQUIRE(d.poll_halt.count() == d.poll_timeouts);
  REQUIRE(d.halt.count() + d.poll_timeouts == d.halts);
  REQUIRE(d.halt_residency.count() == d.halts);
  REQUIRE(d.halt_residency.sum_ns() == d.halt_ns);
  REQUIRE(d.grows + d.shrinks == d.limit_events);
  // A poll hit's residency is a POLL residency; every POLL residency is a hit, a timeout or pending.
  REQUIRE(d.poll_hit.sum_ns() <= d.poll_ns);
}

std::uint64_t absdiff(std::uint64_t a, std::uint64_t b) { return a > b ? a - b : b - a; }

// Idle activity until the program has seen at least `min_entries` idle entries since `a`, or 20 s
// passed: on a machine whose CPUs other work keeps busy, a CPU idles only in the gaps. Returns the
// last snapshot.
haltpolld::IdleTraceSnapshot idle_until(const IdleTrace& t, const haltpolld::IdleTraceSnapshot& a,
                                        std::uint64_t min_entries, int round_trips) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const auto idle0 = bpftest::idle_ticks();
  for (;;) {
    bpftest::ping_pong(round_trips);
    bpftest::sleeps(20, std::chrono::milliseconds(1));
    auto b = t.read();
    if (b.total().minus(a.total()).idle_entries >= min_entries) return b;
    if (std::chrono::steady_clock::now() > deadline) {
      // The failure that follows is about the machine, not the program, when no CPU idled at all.
      WARN("after 20 s: " << b.total().minus(a.total()).idle_entries << " idle entries; /proc/stat idle time "
                          << bpftest::idle_ticks() - idle0 << " ticks (0 = other work kept every CPU busy)");
      return b;
    }
  }
}

// Runs fn in a forked child and returns what it wrote to the pipe (its IdleTrace::open message)
// and its exit status: the child changes process-wide state (credentials, seccomp) for good.
std::pair<std::string, int> in_child(const std::function<std::string()>& fn) {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(p[0]);
    const std::string msg = fn();
    const bool ok = ::write(p[1], msg.data(), msg.size()) == static_cast<ssize_t>(msg.size());
    ::_exit(ok ? 0 : 1);
  }
  ::close(p[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(p[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  return {out, st};
}

std::string open_message() {
  std::string why;
  auto t = IdleTrace::open({}, &why);
  return t ? std::string("opened") : why;
}

// The counts of `perf stat -a -A -x, -o file` per CPU, of the first event of that name: lines
// "CPU<n>,<count>,<unit>,<event>,...", every CPU of one event before the next event.
std::vector<std::uint64_t> perf_counts_per_cpu(const std::string& file, const std::string& event, std::size_t ncpu) {
  std::ifstream f(file);
  std::string line;
  std::vector<std::uint64_t> out(ncpu, 0);
  std::vector<bool> seen(ncpu, false);
  bool found = false;
  while (std::getline(f, line)) {
    if (line.rfind("CPU", 0) != 0) continue;
    std::stringstream ss(line);
    std::string cpu, count, unit, name;
    std::getline(ss, cpu, ',');
    std::getline(ss, count, ',');
    std::getline(ss, unit, ',');
    std::getline(ss, name, ',');
    if (name != event) continue;
    const std::size_t c = std::stoul(cpu.substr(3));
    if (c >= ncpu || seen[c]) break;  // the next event of the same name
    seen[c] = true;
    found = true;
    out[c] = count.find_first_not_of("0123456789") == std::string::npos && !count.empty() ? std::stoull(count) : 0;
  }
  if (!found) FAIL("no " << event << " in " << file);
  return out;
}

std::string perf_path() {
  for (const char* p : {"/usr/bin/perf", "/usr/sbin/perf", "/usr/local/bin/perf"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

}  // namespace

TEST_CASE("IdleTrace loads, attaches and counts real idle periods consistently with cpuidle sysfs", "[bpf]") {
  auto t = open_or_fail();
  INFO("status: " << t->status());
  REQUIRE_THAT(t->status(), Contains("power:cpu_idle tp_btf") || Contains("power:cpu_idle raw_tp"));
  const auto s0 = haltpolld::read_cpuidle_totals("/sys", t->poll_state());
  const auto a = t->read();
  const auto b = idle_until(*t, a, 1000, 5000);
  const auto s1 = haltpolld::read_cpuidle_totals("/sys", t->poll_state());
  REQUIRE(a.torn_reads == 0);
  REQUIRE(b.torn_reads == 0);
  REQUIRE(b.cpus.size() == t->possible_cpus());

  for (std::size_t i = 0; i < b.cpus.size(); ++i) require_consistent(b.cpus[i].minus(a.cpus[i]));
  const IdleCpuStats d = b.total().minus(a.total());
  require_consistent(d);
  INFO("entries " << d.idle_entries << " poll " << d.poll_entries << " hits " << d.poll_hits << " timeouts "
                  << d.poll_timeouts << " halts " << d.halts << " ipi_skipped " << d.ipi_skipped);
  REQUIRE(d.idle_entries > 0);
  const std::uint64_t ncpu = t->possible_cpus();
  // Entries are counted on entry, halts and POLL residencies on exit: one period per CPU may be open.
  REQUIRE(absdiff(d.idle_entries, d.poll_entries + d.halts) <= ncpu);

  const std::uint64_t sys_poll = s1.poll_usage - s0.poll_usage, sys_halt = s1.halt_usage - s0.halt_usage;
  INFO("sysfs: POLL usage " << sys_poll << ", halt usage " << sys_halt << " on " << s1.cpus << " CPUs");
  if (testsupport::host_guest_kind() == testsupport::GuestKind::no_driver) {
    // No cpuidle driver: sysfs has no states to count, the kernel halts on every idle entry without
    // polling, and the tracepoint is the only count of the periods.
    REQUIRE(s1.cpus == 0);
    REQUIRE(sys_poll + sys_halt == 0);
    REQUIRE_FALSE(t->poll_state().has_value());
    REQUIRE_THAT(t->status(), Contains("POLL absent"));
    REQUIRE(d.poll_entries == 0);
    REQUIRE(d.poll_ns == 0);
    REQUIRE(d.halts > 0);
    REQUIRE(absdiff(d.idle_entries, d.halts) <= ncpu);
  } else {
    // sysfs counts a period when it ends, the program when it starts; and the sysfs reads bracket the
    // map reads by a few file reads (~100 us). So they may differ by one open period per CPU plus
    // the periods of those ~100 us on either side: at the 200k periods/s of two saturated pipe CPUs,
    // 20 each side. 0.5 % covers a slower sysfs read on a busy machine.
    const auto tolerance = [&](std::uint64_t n) { return 2 * ncpu + 40 + n / 200; };
    REQUIRE(s1.cpus > 0);
    REQUIRE(absdiff(d.poll_entries, sys_poll) <= tolerance(sys_poll));
    REQUIRE(absdiff(d.halts, sys_halt) <= tolerance(sys_halt));
  }

  // The governor's own limit can never exceed the cap it was given.
  std::ifstream capf("/sys/module/haltpoll/parameters/guest_halt_poll_ns");
  std::uint64_t cap = 0;
  if (capf >> cap) {
    for (const auto& c : b.cpus)
      if (c.poll_limit_ns) REQUIRE(*c.poll_limit_ns <= cap);
  }
}

TEST_CASE("the counts agree with perf stat over the same interval", "[bpf]") {
  const std::string perf = perf_path();
  INFO("perf is in scripts/install-deps.sh (linux-perf)");
  REQUIRE(!perf.empty());
  auto t = open_or_fail();
  char tmpl[] = "/tmp/haltpoll-perf-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  REQUIRE(fd >= 0);
  ::close(fd);
  const std::string out = tmpl;
  // perf's counting window lies inside the program's (a before the spawn, b after the exit); the
  // filter leaves perf the entry events only (exits have state PWR_EVENT_EXIT = (u32)-1). Per CPU
  // (-A): on the dev guest perf counts no power:cpu_idle event of CPU1 at all, wherever perf runs,
  // while the program and cpuidle's usage see CPU1's periods (docs/kernel-signals.md, "perf and
  // power:cpu_idle"); a CPU that perf does not see is reported, the others compared.
  // Both CPUs kept busy by other work for the whole run (a loaded machine) leave no idle period to
  // compare: such a run is taken again, up to three times, and only then is that a failure.
  haltpolld::IdleTraceSnapshot a, b;
  testsupport::RunResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    a = t->read();
    r = testsupport::run({perf, "stat", "-a", "-A", "-x,", "-o", out, "-e", "power:cpu_idle", "--filter",
                          "state != 4294967295", "-e", "sched:sched_wake_idle_without_ipi", "--", perf, "bench",
                          "sched", "pipe", "-l", "20000"},
                         {}, std::chrono::seconds(60));
    b = t->read();
    if (r.code != 0 || b.total().minus(a.total()).idle_entries > 0) break;
  }
  INFO("perf: " << r.err);
  REQUIRE(r.code == 0);
  const std::size_t ncpu = t->possible_cpus();
  const auto perf_entries = perf_counts_per_cpu(out, "power:cpu_idle", ncpu);
  const auto perf_ipi_cpu = perf_counts_per_cpu(out, "sched:sched_wake_idle_without_ipi", ncpu);
  std::remove(out.c_str());
  std::uint64_t perf_ipi = 0;
  for (auto n : perf_ipi_cpu) perf_ipi += n;
  const IdleCpuStats d = b.total().minus(a.total());
  INFO("program: entries " << d.idle_entries << " ipi_skipped " << d.ipi_skipped << "; perf: ipi " << perf_ipi);
  if (d.idle_entries == 0) FAIL("no idle period during the pipe run: other work kept every CPU busy");
  REQUIRE(perf_ipi <= d.ipi_skipped);
  // The program's IPI surplus is perf's own start-up and exit (tens of ms in which the CPUs idle
  // while perf opens its events): at most 5 % of a 20000-round-trip pipe run plus 1000.
  REQUIRE(d.ipi_skipped - perf_ipi <= d.ipi_skipped / 20 + 1000);
  std::size_t compared = 0;
  for (std::size_t c = 0; c < ncpu; ++c) {
    const std::uint64_t mine = b.cpus[c].minus(a.cpus[c]).idle_entries;
    INFO("CPU " << c << ": program entries " << mine << ", perf entries " << perf_entries[c]);
    // Inclusion: perf cannot see more than the program (one open period aside) ...
    REQUIRE(perf_entries[c] <= mine + 1);
    if (perf_entries[c] == 0) {
      if (mine > 0) WARN("perf counts no power:cpu_idle event of CPU " << c << " (the program counts " << mine << ")");
      continue;
    }
    // ... and the program's surplus is again perf's start-up and exit.
    REQUIRE(mine - perf_entries[c] <= mine / 20 + 1000);
    ++compared;
  }
  // At least one CPU must be visible to perf, or the comparison proved nothing.
  REQUIRE(compared > 0);
}

TEST_CASE("the raw_tp fallback attaches and counts like tp_btf", "[bpf]") {
  IdleTraceOptions o;
  o.attach = IdleTraceOptions::Attach::raw_tp;
  auto t = open_or_fail(o);
  INFO("status: " << t->status());
  REQUIRE_THAT(t->status(), Contains("power:cpu_idle raw_tp"));
  REQUIRE_THAT(t->status(), !Contains("tp_btf"));
  const auto a = t->read();
  const auto b = idle_until(*t, a, 100, 2000);
  for (std::size_t i = 0; i < b.cpus.size(); ++i) require_consistent(b.cpus[i].minus(a.cpus[i]));
  REQUIRE(b.total().minus(a.total()).idle_entries > 0);
}

TEST_CASE("detached, the counts stop; attached again, they resume without the gap counted as a period", "[bpf]") {
  for (auto kind : {IdleTraceOptions::Attach::automatic, IdleTraceOptions::Attach::raw_tp}) {
    IdleTraceOptions o;
    o.attach = kind;
    auto t = open_or_fail(o);
    INFO("status: " << t->status());
    REQUIRE(t->attached());
    const auto a = t->read();
    const auto b = idle_until(*t, a, 100, 2000);
    REQUIRE(b.total().minus(a.total()).idle_entries > 0);

    REQUIRE(t->set_attached(false) == 0);
    REQUIRE(!t->attached());
    REQUIRE(t->set_attached(false) == 0);  // twice is harmless
    // A program already running when its link went away may still finish: read after a pause.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto c = t->read();
    bpftest::ping_pong(2000);
    bpftest::sleeps(100, std::chrono::milliseconds(10));  // about 1.2 s of idle gaps, none counted
    const auto d = t->read();
    const IdleCpuStats gap = d.total().minus(c.total());
    CHECK(gap.idle_entries == 0);
    CHECK(gap.halts == 0);
    CHECK(gap.poll_ns + gap.halt_ns == 0);

    const auto attach_ns = d.taken_ns;
    REQUIRE(t->set_attached(true) == 0);
    REQUIRE(t->attached());
    const auto e = idle_until(*t, d, 100, 2000);
    const std::uint64_t ncpu = t->possible_cpus();
    for (std::size_t i = 0; i < e.cpus.size(); ++i) {
      const IdleCpuStats x = e.cpus[i].minus(d.cpus[i]);
      require_consistent(x);
      INFO("cpu " << i << ": halt_ns " << x.halt_ns << " poll_ns " << x.poll_ns << " in "
                  << e.taken_ns - attach_ns << " ns since attaching");
      // A CPU that was idle across the gap has its first exit counted as unmatched, not as a
      // period as long as the gap: each CPU's residency fits in the time since attaching.
      CHECK(x.halt_ns + x.poll_ns <= e.taken_ns - attach_ns);
      CHECK(x.unmatched <= 1);
      // The limit the governor had before the gap is forgotten until its next event.
      if (e.cpus[i].poll_limit_ns) CHECK(x.limit_events > 0);
    }
    CHECK(e.total().minus(d.total()).idle_entries > 0);
    CHECK(e.total().minus(d.total()).unmatched <= ncpu);
  }
}

TEST_CASE("the POLL state index comes from sysfs, and a root without POLL counts everything as halt", "[bpf]") {
  char tmpl[] = "/tmp/haltpoll-sysfs-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string root = tmpl;
  REQUIRE(std::system(("mkdir -p " + root + "/devices/system/cpu/cpu0/cpuidle/state0 " + root +
                       "/devices/system/cpu/cpuidle && echo C1 > " + root +
                       "/devices/system/cpu/cpu0/cpuidle/state0/name && echo fake > " + root +
                       "/devices/system/cpu/cpuidle/current_driver")
                          .c_str()) == 0);
  IdleTraceOptions o;
  o.sysfs_root = root;
  auto t = open_or_fail(o);
  REQUIRE_FALSE(t->poll_state().has_value());
  REQUIRE_THAT(t->status(), StartsWith("cpuidle driver fake, POLL absent"));
  const auto a = t->read();
  const IdleCpuStats d = idle_until(*t, a, 100, 2000).total().minus(a.total());
  REQUIRE(d.poll_entries == 0);
  REQUIRE(d.poll_ns == 0);
  REQUIRE(d.halts > 0);
  std::system(("rm -rf " + root).c_str());

  auto real = open_or_fail();
  // This machine's driver is cpuidle-haltpoll (docs/kernel-signals.md): POLL is state0.
  if (real->status().rfind("cpuidle driver haltpoll", 0) == 0) REQUIRE(real->poll_state() == 0u);
}

TEST_CASE("without privileges open() reports EPERM, not libbpf's RLIMIT_MEMLOCK hint", "[bpf]") {
  const std::string expected = "kernel signals unavailable (EPERM): loading eBPF needs CAP_BPF and CAP_PERFMON";
  SECTION("in process, after dropping to nobody") {
    auto [msg, st] = in_child([] {
      if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0)
        return std::string("cannot drop privileges");
      return open_message();
    });
    REQUIRE(WIFEXITED(st));
    REQUIRE_THAT(msg, StartsWith(expected));
    REQUIRE_THAT(msg, !Contains("RLIMIT_MEMLOCK"));
  }
  SECTION("the tool under setpriv exits 3 with the message") {
    const auto r = testsupport::run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                     "--inh-caps=-all", HALTPOLL_IDLE_TRACE_BIN, "snapshot", "--seconds", "0.1"});
    INFO("stderr: " << r.err);
    REQUIRE(r.code == 3);
    REQUIRE_THAT(r.err, Contains(expected));
    REQUIRE(r.out.empty());
  }
}

TEST_CASE("a seccomp filter that denies bpf() is reported with its errno", "[bpf]") {
  const auto deny_bpf = [](unsigned err) {
    return [err] {
      // seccomp_data.nr; if nr == __NR_bpf return ERRNO(err) else allow. The test runs on the host
      // architecture only, so the filter needs no arch check.
      sock_filter prog[] = {
          {static_cast<__u16>(BPF_LD | BPF_W | BPF_ABS), 0, 0, static_cast<__u32>(offsetof(seccomp_data, nr))},
          {static_cast<__u16>(BPF_JMP | BPF_JEQ | BPF_K), 0, 1, static_cast<__u32>(__NR_bpf)},
          {static_cast<__u16>(BPF_RET | BPF_K), 0, 0, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)},
          {static_cast<__u16>(BPF_RET | BPF_K), 0, 0, SECCOMP_RET_ALLOW},
      };
      sock_fprog fprog{static_cast<unsigned short>(sizeof prog / sizeof prog[0]), prog};
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0)
        return std::string("cannot install seccomp filter");
      return open_message();
    };
  };
  SECTION("ENOSYS") {
    auto [msg, st] = in_child(deny_bpf(ENOSYS));
    REQUIRE(WIFEXITED(st));
    REQUIRE_THAT(msg, StartsWith("kernel signals unavailable (ENOSYS): no bpf() system call"));
    REQUIRE_THAT(msg, Contains("seccomp"));
  }
  SECTION("EPERM") {
    auto [msg, st] = in_child(deny_bpf(EPERM));
    REQUIRE(WIFEXITED(st));
    REQUIRE_THAT(msg, StartsWith("kernel signals unavailable (EPERM)"));
  }
}

TEST_CASE("record mode rejects a ring size that is not a power of two", "[bpf]") {
  IdleTraceOptions o;
  o.record_ring_bytes = 3 * 4096;
  std::string why;
  REQUIRE(IdleTrace::open(o, &why) == nullptr);
  REQUIRE_THAT(why, Contains("not a power of two"));
}

TEST_CASE("tp_btf can be forced where the kernel has BTF, and every tracepoint attaches", "[bpf]") {
  if (::access("/sys/kernel/btf/vmlinux", R_OK) != 0) {
    WARN("skipped: the kernel exposes no BTF (/sys/kernel/btf/vmlinux), so tp_btf cannot be forced");
    return;
  }
  IdleTraceOptions o;
  o.attach = IdleTraceOptions::Attach::tp_btf;
  auto t = open_or_fail(o);
  INFO("status: " << t->status());
  REQUIRE_THAT(t->status(), Contains("power:cpu_idle tp_btf"));
  // This kernel (docs/kernel-signals.md) has all three tracepoints.
  if (::access("/sys/kernel/tracing/events/sched/sched_wake_idle_without_ipi", F_OK) == 0 &&
      ::access("/sys/kernel/tracing/events/power/guest_halt_poll_ns", F_OK) == 0) {
    REQUIRE(t->missing().empty());
    REQUIRE_THAT(t->status(), Contains("power:guest_halt_poll_ns tp_btf"));
    REQUIRE_THAT(t->status(), Contains("sched:sched_wake_idle_without_ipi tp_btf"));
  }
}

namespace {

// Runs a raw_tp program once through BPF_PROG_TEST_RUN with these tracepoint arguments.
void test_run(int prog, std::initializer_list<__u64> args) {
  std::vector<__u64> ctx(args);
  bpf_test_run_opts opts{};
  opts.sz = sizeof opts;
  opts.ctx_in = ctx.data();
  opts.ctx_size_in = static_cast<__u32>(ctx.size() * sizeof(__u64));
  INFO("BPF_PROG_TEST_RUN: " << std::strerror(errno));
  REQUIRE(bpf_prog_test_run_opts(prog, &opts) == 0);
}

// The events are fed for the CPU this thread is pinned to: while it runs the test, that CPU cannot
// idle, so no real event of that CPU mixes in. The old affinity comes back at the end of the scope.
class PinHere {
 public:
  PinHere() {
    REQUIRE(sched_getaffinity(0, sizeof old_, &old_) == 0);
    cpu_ = sched_getcpu();
    REQUIRE(cpu_ >= 0);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_, &set);
    REQUIRE(sched_setaffinity(0, sizeof set, &set) == 0);
  }
  ~PinHere() { sched_setaffinity(0, sizeof old_, &old_); }
  PinHere(const PinHere&) = delete;
  PinHere& operator=(const PinHere&) = delete;
  int cpu() const { return cpu_; }

 private:
  cpu_set_t old_{};
  int cpu_ = -1;
};

}  // namespace

TEST_CASE("the program's state machine on a scripted sequence of events (BPF_PROG_TEST_RUN)", "[bpf]") {
  const PinHere pin;
  const int cpu = pin.cpu();
  // The events are scripted, so the state indices are the script's, whatever driver this machine has.
  const testsupport::FakeSysfs tree;
  IdleTraceOptions o;
  o.sysfs_root = tree.root() + "/sys";
  o.attach = IdleTraceOptions::Attach::raw_tp;
  auto t = open_or_fail(o);
  REQUIRE(t->poll_state() == std::optional<unsigned>(0));
  const __u64 poll = *t->poll_state(), halt = poll == 0 ? 1 : 0, exit_ = 0xffffffffu, c = static_cast<__u64>(cpu);
  const int idle = t->program_fd("cpu_idle"), limit = t->program_fd("guest_halt_poll_ns"),
            ipi = t->program_fd("sched_wake_idle_without_ipi");
  REQUIRE(idle >= 0);
  // A clean start: whatever the CPU's last real period left, a halt entry and exit close it.
  test_run(idle, {exit_, c});
  test_run(idle, {halt, c});
  test_run(idle, {exit_, c});
  const auto a = t->read();
  test_run(idle, {poll, c});   // poll 1
  test_run(idle, {exit_, c});
  test_run(idle, {poll, c});   // poll 2: poll 1 was a hit
  test_run(idle, {exit_, c});
  test_run(idle, {halt, c});   // halt after poll 2: poll 2 timed out
  test_run(idle, {exit_, c});
  test_run(idle, {halt, c});   // a halt without a poll
  test_run(idle, {exit_, c});
  test_run(idle, {exit_, c});  // an exit without an entry
  test_run(idle, {poll, c});   // poll 3 ...
  test_run(idle, {poll, c});   // ... whose exit was lost: an entry while idle
  test_run(idle, {exit_, c});
  if (limit >= 0) {
    test_run(limit, {1, 100000, 50000});  // grow 50000 -> 100000
    test_run(limit, {0, 50000, 100000});  // shrink 100000 -> 50000
  }
  if (ipi >= 0) {
    test_run(ipi, {c});
    test_run(ipi, {c});
  }
  const IdleCpuStats d = t->read().cpus.at(static_cast<std::size_t>(cpu)).minus(a.cpus.at(static_cast<std::size_t>(cpu)));
  CHECK(d.idle_entries == 6);
  CHECK(d.poll_entries == 4);
  CHECK(d.poll_hits == 1);
  CHECK(d.poll_timeouts == 1);
  CHECK(d.halts == 2);
  CHECK(d.unmatched == 2);
  CHECK(d.poll_hit.count() == 1);
  CHECK(d.poll_halt.count() == 1);
  CHECK(d.halt.count() == 1);
  CHECK(d.halt_residency.count() == 2);
  // poll 2 + its halt, as one period, is longer than the halt alone.
  CHECK(d.poll_halt.sum_ns() > d.halt_residency.sum_ns() - d.halt.sum_ns());
  require_consistent(d);
  if (limit >= 0) {
    CHECK(d.limit_events == 2);
    CHECK(d.grows == 1);
    CHECK(d.shrinks == 1);
    CHECK(t->read().cpus.at(static_cast<std::size_t>(cpu)).poll_limit_ns == std::optional<std::uint32_t>(50000));
  }
  if (ipi >= 0) CHECK(d.ipi_skipped == 2);
}

TEST_CASE("record mode writes one record per period and limit change, in order (BPF_PROG_TEST_RUN)", "[bpf]") {
  const PinHere pin;
  const int cpu = pin.cpu();
  IdleTraceOptions o;
  const testsupport::FakeSysfs tree;
  o.sysfs_root = tree.root() + "/sys";
  o.attach = IdleTraceOptions::Attach::raw_tp;
  o.record_ring_bytes = 1 << 20;
  auto t = open_or_fail(o);
  REQUIRE(t->poll_state() == std::optional<unsigned>(0));
  const __u64 poll = *t->poll_state(), halt = poll == 0 ? 1 : 0, exit_ = 0xffffffffu, c = static_cast<__u64>(cpu);
  const int idle = t->program_fd("cpu_idle"), limit = t->program_fd("guest_halt_poll_ns");
  REQUIRE(idle >= 0);
  REQUIRE(limit >= 0);
  test_run(idle, {exit_, c});  // closes a real period in progress, if any (its record is dropped below)
  t->consume([](const haltpolld::IdleRecord&) {});
  test_run(idle, {poll, c});
  test_run(idle, {exit_, c});
  test_run(idle, {halt, c});
  test_run(idle, {exit_, c});
  test_run(limit, {1, 100000, 50000});
  std::vector<haltpolld::IdleRecord> got;
  REQUIRE(t->consume([&](const haltpolld::IdleRecord& r) {
    if (r.cpu == static_cast<unsigned>(cpu)) got.push_back(r);
  }) >= 3);
  REQUIRE(got.size() == 3);
  CHECK(got[0].kind == haltpolld::IdleRecord::Kind::poll);
  CHECK(got[1].kind == haltpolld::IdleRecord::Kind::halt);
  CHECK(got[2].kind == haltpolld::IdleRecord::Kind::limit);
  CHECK((got[2].old_ns == 50000 && got[2].new_ns == 100000 && got[2].grow));
  CHECK(got[0].ts_ns < got[1].ts_ns);
  CHECK(got[1].ts_ns <= got[2].ts_ns);
  CHECK(t->records_dropped() == 0);
}
