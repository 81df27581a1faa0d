#include "control/stats.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace haltpolld {

using nlohmann::json;

json to_json(const KernelHaltpollParams& k) {
  json j = {{"present", k.present}};
#define HALTPOLLD_PARAM_JSON(name, type, value, kind) j[#name] = k.name ? json(*k.name) : json(nullptr);
  HALTPOLL_PARAMS(HALTPOLLD_PARAM_JSON)
#undef HALTPOLLD_PARAM_JSON
  return j;
}

CpuStats CpuStats::of(const haltpoll::WorkerStats& w, const std::vector<std::uint64_t>& bounds) {
  CpuStats c;
  c.cpu = static_cast<unsigned>(w.cpu);
#define HALTPOLLD_CPU_STATS_COPY(name, kind, source, help) c.name = w.name;
  HALTPOLL_WORKER_COUNTERS(HALTPOLLD_CPU_STATS_COPY)
#undef HALTPOLLD_CPU_STATS_COPY
  c.latency_count = w.latency.count();
  c.latency_sum_ns = w.latency.sum_ns();
  c.p50_ns = w.latency.percentile(0.5);
  c.p90_ns = w.latency.percentile(0.9);
  c.p99_ns = w.latency.percentile(0.99);
  c.p999_ns = w.latency.percentile(0.999);
  std::uint64_t below = 0;
  for (std::uint64_t b : bounds) {
    const std::uint64_t n = w.latency.count_at_or_below(b);
    c.latency_buckets.push_back({b, n >= below ? n - below : 0});
    below = std::max(below, n);
  }
  c.latency_buckets.push_back({std::numeric_limits<std::uint64_t>::max(), c.latency_count >= below ? c.latency_count - below : 0});
  return c;
}

CpuKernelTotals& CpuKernelTotals::operator+=(const CpuKernelTotals& o) noexcept {
  idle_entries += o.idle_entries;
  poll_entries += o.poll_entries;
  poll_ns += o.poll_ns;
  halts += o.halts;
  halt_ns += o.halt_ns;
  poll_hits += o.poll_hits;
  poll_misses += o.poll_misses;
  if (o.ipi_skipped) ipi_skipped = ipi_skipped.value_or(0) + *o.ipi_skipped;
  limit_grows += o.limit_grows;
  limit_shrinks += o.limit_shrinks;
  if (o.steal_ns) steal_ns = steal_ns.value_or(0) + *o.steal_ns;
  return *this;
}

CpuKernelTotals CpuKernelTotals::of(const CpuKernelSignals& c) noexcept {
  return {c.cpu,         c.idle_periods(), c.poll_entries, c.poll_ns,     c.halts,        c.halt_ns,
          c.poll_hits,   c.poll_misses,    c.ipi_skipped,  c.limit_grows, c.limit_shrinks, c.steal_ns};
}

void KernelSignalTotals::add(const KernelSignals& tick) {
  ++ticks_;
  elapsed_ns_ += tick.elapsed_ns;
  for (const CpuKernelSignals& c : tick.cpus) {
    auto it = std::lower_bound(cpus_.begin(), cpus_.end(), c.cpu,
                               [](const CpuKernelTotals& t, int cpu) { return t.cpu < cpu; });
    if (it == cpus_.end() || it->cpu != c.cpu) {
      it = cpus_.insert(it, CpuKernelTotals{});
      it->cpu = c.cpu;
    }
    *it += CpuKernelTotals::of(c);
  }
  if (tick.periods) {
    if (!periods_) periods_.emplace();
    periods_->poll_hit.merge(tick.periods->poll_hit);
    periods_->poll_halt.merge(tick.periods->poll_halt);
    periods_->halt.merge(tick.periods->halt);
    periods_->halt_residency.merge(tick.periods->halt_residency);
  }
}

void KernelSignalTotals::reset() { *this = KernelSignalTotals{}; }

void KernelSignalsStats::record(std::uint64_t tick_number, const KernelSignals& signals, std::optional<double> steal) {
  if (tick_number == 0 || tick_number == tick) return;
  tick = tick_number;
  last = signals;
  if (signals.available()) {
    last_counted = signals;
    last_counted_tick = tick_number;
  }
  steal_percent = steal;
  totals.add(signals);
}

PollMeans poll_means(const CpuKernelSignals& c) {
  PollMeans m;
  if (c.poll_entries == 0) return m;
  const double poll_ns = static_cast<double>(c.poll_ns);
  m.poll_ns = poll_ns / static_cast<double>(c.poll_entries);
  if (c.poll_misses == 0) {
    m.hit_ns = m.poll_ns;
  } else if (c.poll_hits == 0) {
    m.miss_ns = m.poll_ns;
  } else if (c.poll_limit_ns) {
    // Clamped: the limit moves within a tick, so misses × the last limit may exceed the residency.
    m.miss_ns = static_cast<double>(*c.poll_limit_ns);
    m.hit_ns = std::max(0.0, poll_ns - static_cast<double>(c.poll_misses) * *m.miss_ns) / static_cast<double>(c.poll_hits);
  }
  return m;
}

std::vector<LatencyBucket> idle_period_buckets(const haltpoll::LatencyHistogram& h) {
  static const std::vector<std::uint64_t> bounds = [] {
    std::vector<std::uint64_t> v;
    for (std::uint64_t decade = 1000; decade <= 10'000'000'000; decade *= 10)
      for (std::uint64_t m : {1, 2, 5})
        if (decade * m <= 10'000'000'000) v.push_back(decade * m);
    return v;
  }();
  std::vector<LatencyBucket> out;
  std::uint64_t below = 0;
  for (std::uint64_t b : bounds) {
    const std::uint64_t n = h.count_at_or_below(b);
    out.push_back({b, n >= below ? n - below : 0});
    below = std::max(below, n);
  }
  out.push_back({std::numeric_limits<std::uint64_t>::max(), h.count() >= below ? h.count() - below : 0});
  return out;
}

namespace {

json opt(const std::optional<double>& v) { return v && std::isfinite(*v) ? json(*v) : json(nullptr); }
template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json buckets_json(const std::vector<LatencyBucket>& buckets) {
  json b = json::array();
  for (const auto& bucket : buckets)
    b.push_back({{"le_ns", bucket.le_ns == std::numeric_limits<std::uint64_t>::max() ? json(nullptr) : json(bucket.le_ns)},
                 {"count", bucket.count}});
  return b;
}

json signal(const char* status, std::string source) { return {{"status", status}, {"source", std::move(source)}}; }

}  // namespace

json kernel_signals_to_json(const KernelSignalsStats& k, std::optional<unsigned> cpu, bool histogram,
                            const std::optional<PollForecast>& forecast) {
  const KernelSignals& last = k.last;
  const bool available = k.tick > 0 && last.available();
  bool any_limit = false, any_ipi = false, all_exact = !last.cpus.empty();
  for (const auto& c : last.cpus) {
    any_limit |= c.poll_limit_ns.has_value();
    any_ipi |= c.ipi_skipped.has_value();
    all_exact &= c.outcomes_exact;
  }
  // Present: the program is loaded, whether or not it was attached for the last tick.
  const bool bpf_attached = last.periods.has_value() || any_limit || any_ipi;
  const bool bpf_present = bpf_attached || !last.bpf_detached.empty();
  // Why an eBPF signal is missing from the last tick: never empty, so that no reason reads blank.
  const std::string bpf_why = !bpf_present ? (!last.bpf_missing.empty() ? last.bpf_missing
                                                                        : std::string("no tick has reported the eBPF signals yet"))
                              : !bpf_attached ? "the program was detached for the last tick (" + last.bpf_detached + ")"
                                              : std::string("attached, but the tracepoint did not fire in the last tick");
  std::string unavailable;
  if (k.tick == 0) unavailable = "no tick sampled yet";
  else if (!available) unavailable = k.cpuidle_status.empty() ? "no cpuidle counters in the last tick" : k.cpuidle_status;
  const bool from_trace = last.counters == KernelSignals::Counters::tracepoint;
  if (from_trace && !available && !last.bpf_detached.empty())
    unavailable += "; the last tick was not one of them (" + last.bpf_detached + ")";
  // The per-CPU rows: the last tick's, or on a guest counted by the tracepoint the last tick it
  // counted (one in tuner.steady_trace_every), so that its rows do not vanish between those ticks.
  const bool rows_counted_earlier = from_trace && !available && k.last_counted_tick > 0;
  const KernelSignals& rows = rows_counted_earlier ? k.last_counted : last;
  const std::uint64_t rows_tick = rows_counted_earlier ? k.last_counted_tick : available ? k.tick : 0;

  // Rates of one CPU's tick, or of the tick summed over the CPUs.
  auto rates = [&](const CpuKernelTotals& c, double cpu_cap) {
    auto share = [&](std::uint64_t ns) {
      return rows.elapsed_ns ? std::min(cpu_cap, 100.0 * static_cast<double>(ns) / static_cast<double>(rows.elapsed_ns))
                             : 0.0;
    };
    return json{{"idle_entries_per_s", rows.per_second(c.idle_entries)},
                {"poll_entries_per_s", rows.per_second(c.poll_entries)},
                {"halts_per_s", rows.per_second(c.halts)},
                {"poll_hits_per_s", rows.per_second(c.poll_hits)},
                {"poll_misses_per_s", rows.per_second(c.poll_misses)},
                {"poll_cpu_percent", share(c.poll_ns)},
                {"halt_cpu_percent", share(c.halt_ns)},
                {"poll_hit_percent",
                 c.poll_entries ? json(100.0 * static_cast<double>(c.poll_hits) / static_cast<double>(c.poll_entries))
                                : json(nullptr)},
                {"ipi_skipped_per_s", c.ipi_skipped ? json(rows.per_second(*c.ipi_skipped)) : json(nullptr)},
                {"mean_halt_ns",
                 c.halts ? json(static_cast<double>(c.halt_ns) / static_cast<double>(c.halts)) : json(nullptr)}};
  };
  auto totals_json = [](const CpuKernelTotals& t) {
    return json{{"idle_entries", t.idle_entries}, {"poll_entries", t.poll_entries},       {"poll_ns", t.poll_ns},
                {"halts", t.halts},               {"halt_ns", t.halt_ns},                 {"poll_hits", t.poll_hits},
                {"poll_misses", t.poll_misses},   {"ipi_skipped", opt(t.ipi_skipped)},    {"limit_grows", t.limit_grows},
                {"limit_shrinks", t.limit_shrinks}, {"steal_ns", opt(t.steal_ns)}};
  };

  json cpus = json::array();
  CpuKernelTotals sum;
  // `all`'s CPU shares are the sum of the CPUs' shares, each at most one CPU: an idle period can
  // end in a tick longer than the tick (it began before; a CPU brought back online ends the period
  // it entered before going offline, however long that was).
  double all_poll_percent = 0, all_halt_percent = 0;
  for (const CpuKernelSignals& c : rows.cpus) {
    sum += CpuKernelTotals::of(c);
    const json one = rates(CpuKernelTotals::of(c), 100.0);
    all_poll_percent += one["poll_cpu_percent"].get<double>();
    all_halt_percent += one["halt_cpu_percent"].get<double>();
    if (cpu && c.cpu != static_cast<int>(*cpu)) continue;
    json j = {{"cpu", c.cpu}};
    j.update(one);
    const PollMeans m = poll_means(c);
    j["mean_poll_ns"] = opt(m.poll_ns);
    j["mean_poll_hit_ns"] = opt(m.hit_ns);
    j["mean_poll_miss_ns"] = opt(m.miss_ns);
    j["poll_limit_ns"] = opt(c.poll_limit_ns);
    j["limit_grows"] = c.limit_grows;
    j["limit_shrinks"] = c.limit_shrinks;
    j["outcomes_exact"] = c.outcomes_exact;
    j["steal_percent"] = opt(c.steal_percent);
    for (const CpuKernelTotals& t : k.totals.cpus())
      if (t.cpu == c.cpu) j["totals"] = totals_json(t);
    cpus.push_back(std::move(j));
  }
  // `all`: the last tick summed over every CPU (CPU shares in % of one CPU), whatever the filter.
  json all = rates(sum, std::numeric_limits<double>::infinity());
  all["poll_cpu_percent"] = all_poll_percent;
  all["halt_cpu_percent"] = all_halt_percent;
  all["mean_poll_ns"] = sum.poll_entries ? json(static_cast<double>(sum.poll_ns) / static_cast<double>(sum.poll_entries)) : json(nullptr);

  CpuKernelTotals t;
  for (const CpuKernelTotals& c : k.totals.cpus()) t += c;
  json totals = totals_json(t);
  totals["ticks"] = k.totals.ticks();
  totals["elapsed_ns"] = k.totals.elapsed_ns();

  json histograms = nullptr;
  if (const auto& p = k.totals.periods()) {
    auto one = [&](const haltpoll::LatencyHistogram& h) {
      json j = {{"count", h.count()},
                {"sum_ns", h.sum_ns()},
                {"p50_ns", h.count() ? json(h.interpolated_percentile(0.5)) : json(nullptr)},
                {"p90_ns", h.count() ? json(h.interpolated_percentile(0.9)) : json(nullptr)},
                {"p99_ns", h.count() ? json(h.interpolated_percentile(0.99)) : json(nullptr)}};
      if (histogram) j["buckets"] = buckets_json(idle_period_buckets(h));
      return j;
    };
    histograms = {{"scope", "all CPUs, since start or the last ResetStats"},
                  {"poll_hit", one(p->poll_hit)},
                  {"poll_halt", one(p->poll_halt)},
                  {"halt", one(p->halt)},
                  {"halt_residency", one(p->halt_residency)}};
  }

  // What each signal is worth: exact (counted by the kernel), derived (computed from exact counts,
  // with a known error) or missing (and why), so that a reader never mistakes a gap for a zero.
  json signals;
  const std::string no_cpuidle = available ? std::string() : unavailable;
  auto counted = [&](std::string source) { return available ? signal("exact", std::move(source)) : signal("missing", no_cpuidle); };
  auto from_bpf = [&](bool have, std::string source) {
    return have ? signal("exact", std::move(source)) : signal("missing", "eBPF: " + bpf_why);
  };
  signals["poll_entries"] = counted(from_trace ? "eBPF power:cpu_idle entries into POLL" : "cpuidle POLL usage");
  signals["halts"] = counted(from_trace ? "eBPF power:cpu_idle, every idle entry (no cpuidle driver)"
                                        : "cpuidle usage of the other states");
  signals["poll_cpu_percent"] = counted(from_trace ? "eBPF power:cpu_idle POLL residency / tick length"
                                                   : "cpuidle POLL time / tick length");
  if (!available) {
    signals["poll_hits"] = signal("missing", no_cpuidle);
  } else if (all_exact) {
    signals["poll_hits"] = signal("exact", "eBPF outcome counts");
  } else {
    signals["poll_hits"] = signal("derived",
                                  "misses = min(poll entries, halts), hits = polls - misses: under-counts hits by the halts "
                                  "that had no poll before them (docs/kernel-signals.md)");
  }
  signals["poll_misses"] = signals["poll_hits"];
  signals["idle_entries"] = available ? signal(all_exact ? "exact" : "derived", "poll entries + halts - poll misses")
                                      : signal("missing", no_cpuidle);
  signals["mean_poll_hit_ns"] =
      !available ? signal("missing", no_cpuidle)
      : any_limit ? signal("derived", "(POLL time - misses x the CPU's poll limit) / hits; miss = the limit")
                  : signal("derived", "only where a CPU's polls all hit or all missed; otherwise needs the per-CPU poll "
                                      "limit (eBPF: " + bpf_why + ")");
  signals["mean_poll_miss_ns"] = signals["mean_poll_hit_ns"];
  signals["poll_limit_ns"] = from_bpf(any_limit, "eBPF power:guest_halt_poll_ns, last value per CPU");
  signals["ipi_skipped"] = from_bpf(any_ipi, "eBPF sched:sched_wake_idle_without_ipi");
  signals["histograms"] = from_bpf(last.periods.has_value(), "eBPF power:cpu_idle, idle periods by outcome");
  signals["steal_percent"] = k.steal_percent ? signal("exact", "/proc/stat: the cpu line for all CPUs, each cpuN line per CPU")
                                             : signal("missing", k.tick == 0 ? "no tick sampled yet" : "no readable /proc/stat");

  return {{"available", available},
          {"reason", unavailable.empty() ? json(nullptr) : json(unavailable)},
          {"counters", from_trace ? "tracepoint" : "cpuidle"},
          {"cpuidle", k.cpuidle_status},
          {"tick", k.tick},
          {"elapsed_ns", last.elapsed_ns},
          {"steal_percent", opt(k.steal_percent)},
          {"bpf",
           {{"present", bpf_present},
            {"missing_reason", bpf_present ? json(nullptr) : json(bpf_why)},
            {"last_tick", bpf_attached},
            {"detached_reason", bpf_attached || last.bpf_detached.empty() ? json(nullptr) : json(last.bpf_detached)}}},
          {"rows_tick", rows_tick ? json(rows_tick) : json(nullptr)},
          {"rows_elapsed_ns", rows.elapsed_ns},
          {"cpus", std::move(cpus)},
          {"all", std::move(all)},
          {"totals", std::move(totals)},
          {"histograms", std::move(histograms)},
          {"forecast", forecast ? to_json(*forecast) : json(nullptr)},
          {"signals", std::move(signals)}};
}

json stats_to_json(const StatsSnapshot& s, std::optional<unsigned> cpu, bool histogram) {
  json cpus = json::array();
  for (const CpuStats& c : s.cpus) {
    if (cpu && c.cpu != *cpu) continue;
    std::uint64_t polls = c.poll_hits + c.poll_misses;
    json lat = {{"count", c.latency_count}, {"sum_ns", c.latency_sum_ns}, {"p50_ns", c.p50_ns},
                {"p90_ns", c.p90_ns},       {"p99_ns", c.p99_ns},         {"p999_ns", c.p999_ns}};
    if (histogram) lat["buckets"] = buckets_json(c.latency_buckets);
    json j = {{"cpu", c.cpu},
              {"poll_hit_ratio", polls ? static_cast<double>(c.poll_hits) / static_cast<double>(polls) : 0.0},
              {"latency", std::move(lat)}};
#define HALTPOLLD_CPU_STATS_JSON(name, kind, source, help) j[#name] = c.name;
    HALTPOLL_WORKER_COUNTERS(HALTPOLLD_CPU_STATS_JSON)
#undef HALTPOLLD_CPU_STATS_JSON
    cpus.push_back(std::move(j));
  }
  return {{"mode", s.mode},
          {"uptime_seconds", s.uptime_seconds},
          {"monotonic_ns", s.monotonic_ns},
          {"kernel", to_json(s.kernel)},
          {"kernel_signals", kernel_signals_to_json(s.kernel_signals, cpu, histogram,
                                                    driverless_forecast(s.kernel_signals, s.forecast_inputs))},
          {"cpus", std::move(cpus)}};
}

}  // namespace haltpolld
