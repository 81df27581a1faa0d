// haltpoll_idle_trace: IdleTrace from the command line, for tests and scripts.
//   haltpoll_idle_trace snapshot [--seconds S]   counters over S seconds (default 1) as one JSON object
//   haltpoll_idle_trace run -- CMD [ARG...]      counters over CMD's run (CMD's stdout goes to stderr)
//   haltpoll_idle_trace record ARGS...           `haltpolld record ARGS...`
// Exit codes: 0, 2 usage, 3 kernel signals unavailable (the reason on stderr), 4 CMD failed.
#include "cpuidle_totals.hpp"
#include "idle_record.hpp"
#include "idle_trace.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

namespace {

void print_hist(const char* name, const haltpoll::LatencyHistogram& h) {
  std::printf("\"%s\":{\"count\":%llu,\"sum_ns\":%llu,\"p50_ns\":%llu,\"p90_ns\":%llu,\"max_ns\":%llu}", name,
              static_cast<unsigned long long>(h.count()), static_cast<unsigned long long>(h.sum_ns()),
              static_cast<unsigned long long>(h.percentile(0.5)), static_cast<unsigned long long>(h.percentile(0.9)),
              static_cast<unsigned long long>(h.max_ns()));
}

void print_stats(const haltpolld::IdleCpuStats& s) {
  auto u = [](std::uint64_t v) { return static_cast<unsigned long long>(v); };
  std::printf(
      "{\"idle_entries\":%llu,\"poll_entries\":%llu,\"poll_hits\":%llu,\"poll_timeouts\":%llu,\"halts\":%llu,"
      "\"poll_ns\":%llu,\"halt_ns\":%llu,\"ipi_skipped\":%llu,\"limit_events\":%llu,\"grows\":%llu,\"shrinks\":%llu,"
      "\"unmatched\":%llu,",
      u(s.idle_entries), u(s.poll_entries), u(s.poll_hits), u(s.poll_timeouts), u(s.halts), u(s.poll_ns),
      u(s.halt_ns), u(s.ipi_skipped), u(s.limit_events), u(s.grows), u(s.shrinks), u(s.unmatched));
  if (s.poll_limit_ns)
    std::printf("\"poll_limit_ns\":%u,", *s.poll_limit_ns);
  else
    std::printf("\"poll_limit_ns\":null,");
  print_hist("poll_hit", s.poll_hit);
  std::printf(",");
  print_hist("poll_halt", s.poll_halt);
  std::printf(",");
  print_hist("halt", s.halt);
  std::printf(",");
  print_hist("halt_residency", s.halt_residency);
  std::printf("}");
}

int usage() {
  std::fprintf(stderr, "usage: haltpoll_idle_trace snapshot [--seconds S] | run -- CMD [ARG...] | record ARGS...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string_view mode = argv[1];
  if (mode == "record") return haltpolld::record_main(argc - 1, argv + 1);
  double seconds = 1;
  char** cmd = nullptr;
  if (mode == "snapshot") {
    if (argc == 4 && std::string_view(argv[2]) == "--seconds") {
      char* end = nullptr;
      seconds = std::strtod(argv[3], &end);
      if (*end != '\0' || !(seconds > 0)) return usage();
    } else if (argc != 2) {
      return usage();
    }
  } else if (mode == "run") {
    if (argc < 4 || std::string_view(argv[2]) != "--") return usage();
    cmd = argv + 3;
  } else {
    return usage();
  }

  std::string why;
  auto trace = haltpolld::IdleTrace::open({}, &why);
  if (!trace) {
    std::fprintf(stderr, "haltpoll_idle_trace: %s\n", why.c_str());
    return 3;
  }
  const auto sys0 = haltpolld::read_cpuidle_totals("/sys", trace->poll_state());
  const auto a = trace->read();
  int rc = 0;
  if (cmd) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(2, 1);  // stdout carries only our JSON
      ::execvp(cmd[0], cmd);
      std::fprintf(stderr, "haltpoll_idle_trace: cannot run %s: %s\n", cmd[0], std::strerror(errno));
      ::_exit(127);
    }
    int st = 0;
    if (pid < 0 || ::waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 4;
  } else {
    timespec ts{static_cast<time_t>(seconds), static_cast<long>((seconds - static_cast<double>(static_cast<time_t>(seconds))) * 1e9)};
    ::nanosleep(&ts, nullptr);
  }
  const auto b = trace->read();
  const auto sys1 = haltpolld::read_cpuidle_totals("/sys", trace->poll_state());

  std::printf("{\"status\":\"%s\",\"seconds\":%.6f,\"torn_reads\":%llu,", trace->status().c_str(),
              static_cast<double>(b.taken_ns - a.taken_ns) / 1e9, static_cast<unsigned long long>(b.torn_reads));
  std::printf("\"sysfs\":{\"poll_usage\":%llu,\"poll_time_us\":%llu,\"halt_usage\":%llu,\"halt_time_us\":%llu},",
              static_cast<unsigned long long>(sys1.poll_usage - sys0.poll_usage),
              static_cast<unsigned long long>(sys1.poll_time_us - sys0.poll_time_us),
              static_cast<unsigned long long>(sys1.halt_usage - sys0.halt_usage),
              static_cast<unsigned long long>(sys1.halt_time_us - sys0.halt_time_us));
  std::printf("\"total\":");
  print_stats(b.total().minus(a.total()));
  std::printf(",\"cpus\":[");
  for (std::size_t i = 0; i < b.cpus.size(); ++i) {
    if (i) std::printf(",");
    print_stats(b.cpus[i].minus(a.cpus[i]));
  }
  std::printf("]}\n");
  return rc;
}
