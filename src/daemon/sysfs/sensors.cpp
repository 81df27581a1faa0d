#include "sysfs/sensors.hpp"

#include "sysfs/file_io.hpp"

#include "cpuidle_totals.hpp"
#include "idle_trace.hpp"

#include <haltpoll/affinity.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace haltpolld {

namespace {

std::uint64_t delta(std::uint64_t now, std::uint64_t before) { return now >= before ? now - before : 0; }

}  // namespace

Sensors::Sensors(std::string sysfs_root, std::vector<int> cpus) : root_(std::move(sysfs_root)), cpus_(std::move(cpus)) {
  // push_back rather than assigning "/": GCC 12 -O2 reports a false -Wrestrict on the assignment.
  if (root_.empty() || root_.back() != '/') root_.push_back('/');
  if (cpus_.empty()) {
    if (auto online = read_small_file(root_ + "sys/devices/system/cpu/online")) {
      if (auto list = haltpoll::parse_cpu_list(*online)) cpus_ = *list;
    }
  }
  last_idle_.resize(cpus_.size());
  cpuidle_status_ = "not sampled yet";
}

std::optional<CpuidleCounters> Sensors::read_cpuidle(int cpu) const {
  const auto states = read_cpuidle_states(root_ + "sys", static_cast<unsigned>(cpu));
  if (states.empty()) return std::nullopt;
  CpuidleCounters c;
  for (const auto& st : states) {
    c.state_names.push_back(st.name);
    if (st.name == "POLL") {
      c.poll_usage += st.usage;
      c.poll_time_us += st.time_us;
    } else {
      c.halt_usage += st.usage;
      c.halt_time_us += st.time_us;
    }
  }
  return c;
}

namespace {

// "cpu  1 2 ..." or "cpu3 1 2 ...": the first eight fields (guest and guest_nice are already in user
// and nice). A field missing on an old kernel reads 0; a `cpuN` line with a malformed number is
// skipped rather than misattributed.
std::optional<CpuStatTimes> parse_cpu_stat_line(const std::string& line) {
  if (line.rfind("cpu", 0) != 0) return std::nullopt;
  CpuStatTimes t;
  std::size_t pos = 3;
  if (pos < line.size() && line[pos] != ' ') {
    int cpu = 0;
    const auto r = std::from_chars(line.data() + pos, line.data() + line.size(), cpu);
    if (r.ec != std::errc{} || r.ptr == line.data() + line.size() || *r.ptr != ' ' || cpu < 0) return std::nullopt;
    t.cpu = cpu;
    pos = static_cast<std::size_t>(r.ptr - line.data());
  }
  std::istringstream ss(line.substr(pos));
  std::uint64_t v[8] = {};
  for (auto& x : v) {
    if (!(ss >> x)) x = 0;
  }
  for (auto x : v) t.total += x;
  t.steal = v[7];
  return t;
}

}  // namespace

std::optional<ProcStatTimes> Sensors::read_proc_stat() const {
  std::ifstream f(root_ + "proc/stat");
  if (!f) return std::nullopt;
  std::string line;
  std::optional<ProcStatTimes> out;
  while (std::getline(f, line)) {
    if (line.rfind("cpu", 0) != 0) {
      if (out) break;  // the cpu lines come first and together
      continue;
    }
    const auto t = parse_cpu_stat_line(line);
    if (!t) continue;
    if (!out) out.emplace();
    if (t->cpu < 0) {
      out->total = t->total;
      out->steal = t->steal;
    } else {
      out->cpus.push_back(*t);
    }
  }
  return out;
}

namespace {

// The eBPF program's view of one CPU's tick: exact outcomes, IPI skips and the governor's limit,
// and the tick's idle periods added to the histograms.
void apply_trace(CpuKernelSignals& k, const IdleCpuStats& d, IdlePeriodHistograms& h) {
  k.poll_hits = d.poll_hits;
  k.poll_misses = d.poll_timeouts;
  k.outcomes_exact = true;
  k.ipi_skipped = d.ipi_skipped;
  k.poll_limit_ns = d.poll_limit_ns;
  k.limit_grows = d.grows;
  k.limit_shrinks = d.shrinks;
  h.poll_hit.merge(d.poll_hit);
  h.poll_halt.merge(d.poll_halt);
  h.halt.merge(d.halt);
  h.halt_residency.merge(d.halt_residency);
}

}  // namespace

Sensors::~Sensors() = default;

SignalSourceStatus Sensors::status() const {
  return {cpus_, cpuidle_available_, cpuidle_status_, kernel_signals_status(), bpf_missing_};
}

bool Sensors::enable_idle_trace() {
  if (trace_) return true;
  if (root_ != "/") {
    bpf_missing_ = "eBPF kernel signals not used: sysfs_root is " + root_ + ", not the running kernel's";
    return false;
  }
  std::string why;
  IdleTraceOptions o;
  o.sysfs_root = "/sys";
  trace_ = IdleTrace::open(o, &why);
  if (!trace_) {
    bpf_missing_ = why;
    return false;
  }
  last_trace_ = std::make_unique<IdleTraceSnapshot>(trace_->read());
  trace_whole_tick_ = false;  // attached now, not at the last sample
  bpf_missing_.clear();
  for (const auto& m : trace_->missing()) bpf_missing_ += (bpf_missing_.empty() ? "" : "; ") + m;
  return true;
}

std::string Sensors::kernel_signals_status() const {
  if (!trace_) return bpf_missing_;
  if (!trace_->attached()) return trace_->status() + " (detached: " + detached_why_ + ")";
  return trace_->status();
}

bool Sensors::idle_trace_attached() const noexcept { return trace_ && trace_->attached(); }

bool Sensors::set_idle_trace_attached(bool on, std::string why) {
  if (!trace_) return false;
  detached_why_ = on ? std::string() : std::move(why);
  if (on == trace_->attached()) return true;
  const int err = trace_->set_attached(on);
  if (on) {
    // The tick in progress began at the last sample, a few milliseconds ago: counted as whole.
    *last_trace_ = trace_->read();
    trace_whole_tick_ = true;
  }
  if (err != 0) {
    bpf_missing_ = fmt::format("re-attaching the eBPF programs failed ({}): {}", std::strerror(-err),
                               trace_->status());
    return false;
  }
  return true;
}

Observation Sensors::sample(std::uint64_t now_ns) {
  Observation obs;
  const std::uint64_t elapsed = primed_ ? delta(now_ns, last_ns_) : 0;
  obs.elapsed_ns = elapsed;
  obs.kernel.elapsed_ns = elapsed;

  bool any_idle = false;
  std::string names;
  double max_cpu = 0, sum_cpu = 0, wakes = 0;
  for (std::size_t i = 0; i < cpus_.size(); ++i) {
    auto now = read_cpuidle(cpus_[i]);
    if (now) {
      any_idle = true;
      obs.cpuidle_totals.push_back({static_cast<unsigned>(cpus_[i]), now->poll_usage, now->poll_time_us, now->halt_usage,
                                    now->halt_time_us});
      if (names.empty()) {
        for (const auto& n : now->state_names) names += (names.empty() ? "" : ",") + n;
      }
      if (primed_ && last_idle_[i] && elapsed > 0) {
        const auto& before = *last_idle_[i];
        CpuIdleDelta d;
        d.cpu = cpus_[i];
        d.poll_usage = delta(now->poll_usage, before.poll_usage);
        d.poll_ns = delta(now->poll_time_us, before.poll_time_us) * 1000;
        d.halt_usage = delta(now->halt_usage, before.halt_usage);
        d.halt_ns = delta(now->halt_time_us, before.halt_time_us) * 1000;
        const double cpu =
            std::min(100.0, 100.0 * static_cast<double>(d.poll_ns) / static_cast<double>(elapsed));
        max_cpu = std::max(max_cpu, cpu);
        sum_cpu += cpu;
        // An idle period that polled and then halted shows up in both states: count it once.
        wakes += static_cast<double>(std::max(d.poll_usage, d.halt_usage));
        obs.cpuidle.push_back(d);
        obs.kernel.cpus.push_back(derive_kernel_signals(d));
      }
    }
    last_idle_[i] = std::move(now);
  }
  cpuidle_available_ = any_idle;
  if (!any_idle) {
    if (cpus_.empty()) {
      cpuidle_status_ = "no CPUs to read";
    } else {
      obs.kernel.counters = KernelSignals::Counters::tracepoint;
      cpuidle_status_ = fmt::format(
          "no cpuidle states under {}sys/devices/system/cpu/cpu{}/cpuidle: no cpuidle driver is registered, so "
          "this guest's kernel halts on every idle entry and does not poll; {}",
          root_, cpus_.front(),
          trace_ ? "its idle periods are counted by the power:cpu_idle tracepoint on the ticks eBPF is attached for"
                 : "without eBPF (" + bpf_missing_ + ") its idle periods are not counted");
    }
  } else {
    cpuidle_status_ = "states " + names;
  }
  if (!obs.cpuidle.empty()) {
    obs.poll_cpu_percent = max_cpu;
    obs.mean_poll_cpu_percent = sum_cpu / static_cast<double>(obs.cpuidle.size());
    obs.total_poll_cpu_percent = sum_cpu;
    obs.wakes_per_second = wakes * 1e9 / static_cast<double>(elapsed);
    obs.cpu_source = "cpuidle";
  }

  obs.kernel.bpf_missing = bpf_missing_;
  if (trace_) {
    auto now = std::make_unique<IdleTraceSnapshot>(trace_->read());
    const bool whole = trace_whole_tick_ && trace_->attached();
    trace_whole_tick_ = trace_->attached();
    if (!whole) obs.kernel.bpf_detached = trace_->attached() ? "eBPF programs attached during the tick" : detached_why_;
    auto tick_of = [&](int cpu) -> std::optional<IdleCpuStats> {
      const auto c = static_cast<std::size_t>(cpu);
      if (c >= now->cpus.size() || c >= last_trace_->cpus.size()) return std::nullopt;
      return now->cpus[c].minus(last_trace_->cpus[c]);
    };
    if (whole && !obs.kernel.cpus.empty()) {
      // The program sees every period's outcome; the counters' derivation is replaced.
      IdlePeriodHistograms h;
      for (auto& k : obs.kernel.cpus)
        if (auto d = tick_of(k.cpu)) apply_trace(k, *d, h);
      obs.kernel.periods = std::move(h);
    } else if (whole && !any_idle && elapsed > 0) {
      // No cpuidle driver: the tracepoint is the only count of this guest's idle periods. Its kernel
      // does not poll, so every period should be a halt; the counts say so rather than assume it.
      IdlePeriodHistograms h;
      for (int cpu : cpus_) {
        const auto d = tick_of(cpu);
        if (!d) continue;
        CpuKernelSignals k;
        k.cpu = cpu;
        k.poll_entries = d->poll_entries;
        k.poll_ns = d->poll_ns;
        k.halts = d->halts;
        k.halt_ns = d->halt_ns;
        apply_trace(k, *d, h);
        obs.kernel.cpus.push_back(k);
      }
      obs.kernel.periods = std::move(h);
    }
    last_trace_ = std::move(now);
  }

  auto stat = read_proc_stat();
  if (stat) obs.steal_ticks_total = stat->steal;
  if (primed_ && stat && last_stat_) {
    const std::uint64_t total = delta(stat->total, last_stat_->total);
    if (total > 0)
      obs.steal_percent = 100.0 * static_cast<double>(delta(stat->steal, last_stat_->steal)) /
                          static_cast<double>(total);
    // Per CPU: a CPU that went offline (no line now or then) has no steal share rather than 0.
    static const long user_hz = ::sysconf(_SC_CLK_TCK);
    auto line_of = [](const ProcStatTimes& t, int cpu) -> const CpuStatTimes* {
      for (const auto& c : t.cpus)
        if (c.cpu == cpu) return &c;
      return nullptr;
    };
    for (auto& k : obs.kernel.cpus) {
      const CpuStatTimes* now = line_of(*stat, k.cpu);
      const CpuStatTimes* before = line_of(*last_stat_, k.cpu);
      if (now == nullptr || before == nullptr) continue;
      const std::uint64_t cpu_total = delta(now->total, before->total);
      const std::uint64_t steal = delta(now->steal, before->steal);
      if (user_hz > 0) k.steal_ns = steal * (1'000'000'000u / static_cast<std::uint64_t>(user_hz));
      if (cpu_total > 0) k.steal_percent = 100.0 * static_cast<double>(steal) / static_cast<double>(cpu_total);
    }
  }
  last_stat_ = stat;
  last_ns_ = now_ns;
  primed_ = true;
  return obs;
}

}  // namespace haltpolld
