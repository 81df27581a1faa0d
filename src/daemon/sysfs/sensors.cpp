#include "sysfs/sensors.hpp"

#include "sysfs/file_io.hpp"
#include "sysfs/polling_overrides.hpp"

#include "cpuidle_totals.hpp"
#include "idle_trace.hpp"

#include <haltpoll/affinity.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

namespace haltpolld {

namespace {

std::uint64_t delta(std::uint64_t now, std::uint64_t before) { return now >= before ? now - before : 0; }

// How much longer than a tick one CPU's POLL residency may be: a poll that began before the tick
// and ended in it is counted whole, and no poll lasts longer than the poll limit (200 µs found on a
// haltpoll guest, 400 µs at the top of the tuner's default ladder).
constexpr std::uint64_t kMaxPollSlackNs = 5'000'000;

}  // namespace

Sensors::Sensors(std::string sysfs_root, std::vector<int> cpus, std::shared_ptr<HeldReads> reads, std::string dev_root)
    : root_(std::move(sysfs_root)), requested_(std::move(cpus)) {
  // push_back rather than assigning "/": GCC 12 -O2 reports a false -Wrestrict on the assignment.
  if (root_.empty() || root_.back() != '/') root_.push_back('/');
  overrides_ = std::make_unique<PollingOverridesReader>(root_, std::move(dev_root), std::move(reads));
  cpus_ = online_cpus();
  cpuidle_status_ = "not sampled yet";
}

std::vector<int> Sensors::online_cpus(std::optional<std::vector<int>>* all) const {
  const auto text = read_small_file(root_ + "sys/devices/system/cpu/online");
  const auto online = text ? haltpoll::parse_cpu_list(*text) : std::nullopt;
  if (all) *all = online;
  if (!online && !requested_.empty()) return requested_;  // no hotplug information: the requested CPUs
  if (!online) {
    // No list of online CPUs (a tree without one): the cpuN directories there are.
    std::vector<int> dirs;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root_ + "sys/devices/system/cpu", ec)) {
      const std::string name = e.path().filename().string();
      int cpu = -1;
      if (name.size() <= 3 || name.rfind("cpu", 0) != 0) continue;
      const auto r = std::from_chars(name.data() + 3, name.data() + name.size(), cpu);
      if (r.ec == std::errc{} && r.ptr == name.data() + name.size() && cpu >= 0) dirs.push_back(cpu);
    }
    std::sort(dirs.begin(), dirs.end());
    return dirs;
  }
  if (requested_.empty()) return *online;
  std::vector<int> out;
  for (int c : requested_)
    if (std::binary_search(online->begin(), online->end(), c)) out.push_back(c);
  return out;
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

  // CPUs come and go (hotplug): the set is read again on every sample. A CPU that left or joined
  // during the tick, or whose counters restarted (its cpuidle device was unregistered when it went
  // offline and registered again, from zero, when it came back), makes the tick's aggregates
  // describe two different sets of CPUs: the tick is marked unsound, and a restarted CPU has no
  // delta rather than a made-up one.
  std::vector<int> before_cpus = std::move(cpus_);
  std::optional<std::vector<int>> online;
  cpus_ = online_cpus(&online);
  std::string changes;
  auto note = [&](const std::string& what) { changes += (changes.empty() ? "" : ", ") + what; };
  for (int c : before_cpus)
    if (primed_ && !std::binary_search(cpus_.begin(), cpus_.end(), c)) note(fmt::format("CPU {} went offline", c));
  for (int c : cpus_)
    if (primed_ && !std::binary_search(before_cpus.begin(), before_cpus.end(), c))
      note(fmt::format("CPU {} came online", c));

  bool any_idle = false;
  std::vector<int> poll_state;  // the CPUs whose state 0 is POLL
  std::string names;
  double max_cpu = 0, sum_cpu = 0, wakes = 0;
  std::map<int, CpuidleCounters> idle_now;
  for (int cpu : cpus_) {
    auto now = read_cpuidle(cpu);
    const auto last = last_idle_.find(cpu);
    const bool had = last != last_idle_.end();
    const bool was_sampled = std::binary_search(before_cpus.begin(), before_cpus.end(), cpu);
    if (primed_ && was_sampled && had != now.has_value())
      note(fmt::format("CPU {}'s cpuidle states {}", cpu, had ? "vanished" : "appeared"));
    if (!now) continue;
    any_idle = true;
    if (!now->state_names.empty() && now->state_names.front() == "POLL") poll_state.push_back(cpu);
    obs.cpuidle_totals.push_back({static_cast<unsigned>(cpu), now->poll_usage, now->poll_time_us, now->halt_usage,
                                  now->halt_time_us});
    if (names.empty()) {
      for (const auto& n : now->state_names) names += (names.empty() ? "" : ",") + n;
    }
    if (primed_ && had && elapsed > 0) {
      const auto& before = last->second;
      if (now->poll_usage < before.poll_usage || now->poll_time_us < before.poll_time_us ||
          now->halt_usage < before.halt_usage || now->halt_time_us < before.halt_time_us) {
        note(fmt::format("CPU {}'s cpuidle counters restarted", cpu));
      } else {
        CpuIdleDelta d;
        d.cpu = cpu;
        d.poll_usage = now->poll_usage - before.poll_usage;
        d.poll_ns = (now->poll_time_us - before.poll_time_us) * 1000;
        d.halt_usage = now->halt_usage - before.halt_usage;
        d.halt_ns = (now->halt_time_us - before.halt_time_us) * 1000;
        // A poll ends within the poll limit (at most a few ms): more polling than the tick plus that
        // was counted over a longer interval than this tick (an early tick, counters from before).
        if (d.poll_ns > elapsed + kMaxPollSlackNs)
          note(fmt::format("CPU {} polled {:.1f} ms in a {:.1f} ms tick", cpu, static_cast<double>(d.poll_ns) / 1e6,
                           static_cast<double>(elapsed) / 1e6));
        const double cpu_share =
            std::min(100.0, 100.0 * static_cast<double>(d.poll_ns) / static_cast<double>(elapsed));
        max_cpu = std::max(max_cpu, cpu_share);
        sum_cpu += cpu_share;
        // An idle period that polled and then halted shows up in both states: count it once.
        wakes += static_cast<double>(std::max(d.poll_usage, d.halt_usage));
        obs.cpuidle.push_back(d);
        obs.kernel.cpus.push_back(derive_kernel_signals(d));
      }
    }
    idle_now.emplace(cpu, std::move(*now));
  }
  last_idle_ = std::move(idle_now);
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

  obs.kernel.overrides = overrides_->read(cpus_, online, poll_state, any_idle, now_ns);

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
  if (primed_ && stat && last_stat_ && elapsed > 0) {
    static const long user_hz = ::sysconf(_SC_CLK_TCK);
    // The aggregate line covers the tick only if it neither went backwards nor grew by more than the
    // online CPUs can count in the tick (USER_HZ ticks each per second, a quarter and two ticks of
    // slack for the samples' rounding). A steal count that jumps past that, or goes backwards (a host
    // that restarted its accounting, a migration), or CPUs whose lines come and go make the share a
    // figure of something else than the tick: no share, and the tick is unsound.
    const std::size_t lines = std::max(stat->cpus.size(), last_stat_->cpus.size());
    const double most =
        1.25 * (static_cast<double>(elapsed) * static_cast<double>(user_hz) / 1e9 + 2.0) * static_cast<double>(lines);
    auto line_set = [](const ProcStatTimes& t) {
      std::vector<int> v;
      for (const auto& c : t.cpus) v.push_back(c.cpu);
      return v;
    };
    const std::uint64_t total = delta(stat->total, last_stat_->total);
    if (stat->steal < last_stat_->steal || stat->total < last_stat_->total) {
      note(fmt::format("the steal count went backwards ({} to {} ticks)", last_stat_->steal, stat->steal));
    } else if (user_hz > 0 && lines > 0 && static_cast<double>(total) > most) {
      note(fmt::format("/proc/stat counted {} ticks ({} of them steal) in a {:.1f} ms tick of {} CPUs", total,
                       stat->steal - last_stat_->steal, static_cast<double>(elapsed) / 1e6, lines));
    } else if (line_set(*stat) != line_set(*last_stat_)) {
      note(fmt::format("the CPU lines of /proc/stat changed ({} to {})", last_stat_->cpus.size(), stat->cpus.size()));
    } else if (total > 0) {
      obs.steal_percent = 100.0 * static_cast<double>(stat->steal - last_stat_->steal) / static_cast<double>(total);
    }
    // Per CPU: a CPU that went offline (no line now or then) has no steal share rather than 0; nor
    // has one whose counts went backwards or exceed the tick.
    auto line_of = [](const ProcStatTimes& t, int cpu) -> const CpuStatTimes* {
      for (const auto& c : t.cpus)
        if (c.cpu == cpu) return &c;
      return nullptr;
    };
    const double most_one = most / static_cast<double>(std::max<std::size_t>(lines, 1));
    for (auto& k : obs.kernel.cpus) {
      const CpuStatTimes* now = line_of(*stat, k.cpu);
      const CpuStatTimes* before = line_of(*last_stat_, k.cpu);
      if (now == nullptr || before == nullptr) continue;
      if (now->total < before->total || now->steal < before->steal) continue;
      const std::uint64_t cpu_total = now->total - before->total;
      const std::uint64_t steal = now->steal - before->steal;
      if (user_hz > 0 && static_cast<double>(cpu_total) > most_one) continue;
      if (user_hz > 0) k.steal_ns = steal * (1'000'000'000u / static_cast<std::uint64_t>(user_hz));
      if (cpu_total > 0) k.steal_percent = 100.0 * static_cast<double>(steal) / static_cast<double>(cpu_total);
    }
  }
  obs.unsound = std::move(changes);
  last_stat_ = stat;
  last_ns_ = now_ns;
  primed_ = true;
  return obs;
}

}  // namespace haltpolld
