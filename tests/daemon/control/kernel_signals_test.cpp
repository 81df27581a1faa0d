// The kernel_signals object of GetStats: per-tick rates, the derived poll means, the running
// totals (each tick counted once), the eBPF slots reported as missing with the reason, and the
// idle-period histograms when present.
#include "control/stats.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

using namespace haltpolld;
using nlohmann::json;

namespace {

CpuKernelSignals cpu_tick(int cpu, std::uint64_t polls, std::uint64_t halts, std::uint64_t poll_ns) {
  CpuKernelSignals c;
  c.cpu = cpu;
  c.poll_entries = polls;
  c.halts = halts;
  c.poll_ns = poll_ns;
  c.halt_ns = 100'000'000;
  c.poll_misses = std::min(polls, halts);
  c.poll_hits = polls - c.poll_misses;
  return c;
}

KernelSignals half_second(std::vector<CpuKernelSignals> cpus) {
  KernelSignals k;
  k.elapsed_ns = 500'000'000;
  k.cpus = std::move(cpus);
  return k;
}

}  // namespace

TEST_CASE("kernel_signals: rates of the last tick, totals of all ticks") {
  KernelSignalsStats k;
  k.cpuidle_status = "states POLL,haltpoll";
  // CPU 0: 1000 polls, 250 of them timed out into a halt, 50 ms polling in 0.5 s.
  k.record(1, half_second({cpu_tick(0, 1000, 250, 50'000'000), cpu_tick(1, 0, 10, 0)}), 1.5);
  k.record(1, half_second({cpu_tick(0, 1000, 250, 50'000'000)}), 1.5);  // the same tick again: ignored
  k.record(2, half_second({cpu_tick(0, 2000, 500, 100'000'000), cpu_tick(1, 0, 20, 0)}), 2.5);

  json j = kernel_signals_to_json(k, std::nullopt, false);
  CHECK(j["available"] == true);
  CHECK(j["reason"].is_null());
  CHECK(j["tick"] == 2);
  CHECK(j["steal_percent"] == Approx(2.5));
  REQUIRE(j["cpus"].size() == 2);
  const json& c0 = j["cpus"][0];
  CHECK(c0["cpu"] == 0);
  CHECK(c0["poll_entries_per_s"] == Approx(4000));
  CHECK(c0["halts_per_s"] == Approx(1000));
  CHECK(c0["poll_hits_per_s"] == Approx(3000));
  CHECK(c0["poll_misses_per_s"] == Approx(1000));
  CHECK(c0["idle_entries_per_s"] == Approx(4000));  // a timed-out poll and its halt are one period
  CHECK(c0["poll_cpu_percent"] == Approx(20));
  CHECK(c0["poll_hit_percent"] == Approx(75));
  CHECK(c0["mean_poll_ns"] == Approx(50'000));
  // Hits and misses both happened and no limit is known: the split cannot be derived.
  CHECK(c0["mean_poll_hit_ns"].is_null());
  CHECK(c0["mean_poll_miss_ns"].is_null());
  CHECK(c0["poll_limit_ns"].is_null());
  CHECK(c0["ipi_skipped_per_s"].is_null());
  CHECK(c0["totals"]["poll_entries"] == 3000);
  CHECK(c0["totals"]["poll_hits"] == 2250);
  CHECK(c0["totals"]["idle_entries"] == 3000);
  const json& c1 = j["cpus"][1];
  CHECK(c1["poll_hit_percent"].is_null());  // no polls: no ratio, not 0 %
  CHECK(c1["halts_per_s"] == Approx(40));
  CHECK(c1["idle_entries_per_s"] == Approx(40));
  CHECK(j["all"]["idle_entries_per_s"] == Approx(4040));
  CHECK(j["all"]["poll_cpu_percent"] == Approx(20));
  CHECK(j["totals"]["ticks"] == 2);
  CHECK(j["totals"]["elapsed_ns"] == 1'000'000'000);
  CHECK(j["totals"]["halts"] == 780);
  CHECK(j["totals"]["ipi_skipped"].is_null());

  CHECK(j["bpf"]["present"] == false);
  CHECK(j["bpf"]["missing_reason"] == "no tick has reported the eBPF signals yet");
  CHECK(j["histograms"].is_null());
  CHECK(j["signals"]["poll_entries"]["status"] == "exact");
  CHECK(j["signals"]["poll_hits"]["status"] == "derived");
  CHECK(j["signals"]["poll_limit_ns"]["status"] == "missing");
  CHECK(j["signals"]["histograms"]["source"].get<std::string>().find("eBPF signals yet") != std::string::npos);
  CHECK(j["signals"]["steal_percent"]["status"] == "exact");

  auto one = kernel_signals_to_json(k, 1u, false);
  REQUIRE(one["cpus"].size() == 1);
  CHECK(one["cpus"][0]["cpu"] == 1);
  CHECK(one["all"]["idle_entries_per_s"] == Approx(4040));  // `all` ignores the filter

  k.totals.reset();
  CHECK(kernel_signals_to_json(k, std::nullopt, false)["totals"]["ticks"] == 0);
}

TEST_CASE("kernel_signals: the eBPF reason, the poll limit and the histograms when present") {
  KernelSignalsStats none;
  json empty = kernel_signals_to_json(none, std::nullopt, false);
  CHECK(empty["available"] == false);
  CHECK(empty["reason"] == "no tick sampled yet");
  CHECK(empty["signals"]["poll_entries"]["status"] == "missing");

  KernelSignalsStats no_cpuidle;
  no_cpuidle.cpuidle_status = "no cpuidle states under /x (no cpuidle driver registered): poll CPU cannot be measured";
  KernelSignals k0;
  k0.elapsed_ns = 1'000'000'000;
  k0.bpf_missing = "kernel signals unavailable (EPERM)";
  no_cpuidle.record(1, k0, std::nullopt);
  json n = kernel_signals_to_json(no_cpuidle, std::nullopt, false);
  CHECK(n["available"] == false);
  CHECK(n["reason"] == no_cpuidle.cpuidle_status);
  CHECK(n["bpf"]["missing_reason"] == "kernel signals unavailable (EPERM)");
  CHECK(n["signals"]["steal_percent"]["status"] == "missing");

  KernelSignalsStats k;
  KernelSignals t = half_second({cpu_tick(0, 1000, 250, 50'000'000)});
  t.cpus[0].poll_limit_ns = 100'000;
  t.cpus[0].ipi_skipped = 600;
  t.cpus[0].outcomes_exact = true;
  t.cpus[0].steal_percent = 3.0;
  t.cpus[0].steal_ns = 15'000'000;
  t.periods.emplace();
  for (int i = 0; i < 750; ++i) t.periods->poll_hit.record(3'000);
  for (int i = 0; i < 250; ++i) t.periods->poll_halt.record(1'500'000);
  k.record(1, t, 0.0);
  k.record(2, t, 0.0);
  json j = kernel_signals_to_json(k, std::nullopt, true);
  const json& c0 = j["cpus"][0];
  CHECK(c0["poll_limit_ns"] == 100'000);
  CHECK(c0["mean_poll_miss_ns"] == Approx(100'000));
  // (50 ms - 250 × 100 µs) / 750 hits.
  CHECK(c0["mean_poll_hit_ns"] == Approx(25'000'000.0 / 750));
  CHECK(c0["ipi_skipped_per_s"] == Approx(1200));
  CHECK(c0["totals"]["ipi_skipped"] == 1200);
  CHECK(c0["steal_percent"] == Approx(3.0));
  CHECK(c0["totals"]["steal_ns"] == 30'000'000);
  CHECK(j["bpf"]["present"] == true);
  CHECK(j["bpf"]["missing_reason"].is_null());
  CHECK(j["signals"]["poll_hits"]["status"] == "exact");
  REQUIRE(j["histograms"].is_object());
  CHECK(j["histograms"]["poll_hit"]["count"] == 1500);
  CHECK(j["histograms"]["poll_halt"]["count"] == 500);
  CHECK(j["histograms"]["halt"]["count"] == 0);
  std::uint64_t in_buckets = 0, at_5us = 0;
  for (const auto& b : j["histograms"]["poll_hit"]["buckets"]) {
    in_buckets += b["count"].get<std::uint64_t>();
    if (b["le_ns"] == 5000) at_5us = b["count"];
  }
  CHECK(in_buckets == 1500);
  CHECK(at_5us == 1500);  // 3 µs lies in (2 µs, 5 µs]
  CHECK_FALSE(kernel_signals_to_json(k, std::nullopt, false)["histograms"]["poll_hit"].contains("buckets"));
}

TEST_CASE("poll_means: exact when all polls hit or all missed, from the limit otherwise") {
  CpuKernelSignals all_hit = cpu_tick(0, 100, 0, 1'000'000);
  CHECK(*poll_means(all_hit).hit_ns == Approx(10'000));
  CHECK_FALSE(poll_means(all_hit).miss_ns);
  CpuKernelSignals all_miss = cpu_tick(0, 100, 100, 20'000'000);
  CHECK(*poll_means(all_miss).miss_ns == Approx(200'000));
  CHECK_FALSE(poll_means(all_miss).hit_ns);
  CpuKernelSignals over = cpu_tick(0, 100, 50, 1'000'000);
  over.poll_limit_ns = 200'000;  // 50 misses × 200 µs exceed the residency: clamped, not negative
  CHECK(*poll_means(over).hit_ns == 0.0);
  CHECK_FALSE(poll_means(cpu_tick(0, 0, 5, 0)).poll_ns);
}

TEST_CASE("kernel_signals: a program detached while steady is present, not missing, with the reason") {
  KernelSignalsStats k;
  KernelSignals t = half_second({cpu_tick(0, 100, 10, 1'000'000)});
  t.bpf_detached = "the tuner is steady: attached for one tick in 10";
  k.record(1, t, std::nullopt);
  json j = kernel_signals_to_json(k, std::nullopt, false);
  CHECK(j["bpf"]["present"] == true);
  CHECK(j["bpf"]["missing_reason"].is_null());
  CHECK(j["bpf"]["last_tick"] == false);
  CHECK(j["bpf"]["detached_reason"] == "the tuner is steady: attached for one tick in 10");

  // The next tick has them: last_tick true, no detached reason.
  KernelSignals a = half_second({cpu_tick(0, 100, 10, 1'000'000)});
  a.cpus[0].ipi_skipped = 80;
  a.cpus[0].outcomes_exact = true;
  a.periods = IdlePeriodHistograms{};
  k.record(2, a, std::nullopt);
  j = kernel_signals_to_json(k, std::nullopt, false);
  CHECK(j["bpf"]["present"] == true);
  CHECK(j["bpf"]["last_tick"] == true);
  CHECK(j["bpf"]["detached_reason"].is_null());
}

TEST_CASE("kernel_signals: a CPU back from offline ends a halt longer than the tick; `all` stays within the CPUs") {
  // Seen on a real guest with CPU 1 taken offline and back (tests/faults/real_hotplug_campaign.py):
  // the halt CPU 1 entered before going offline ends in the tick it returns, 1.2 s of halt in a
  // 0.5 s tick. Each CPU's share stops at 100 %, and `all` is the sum of those, at most 200 % here.
  KernelSignalsStats k;
  CpuKernelSignals back = cpu_tick(1, 0, 1, 0);
  back.halt_ns = 1'200'000'000;
  k.record(1, half_second({cpu_tick(0, 1000, 250, 50'000'000), back}), 0);
  const json j = kernel_signals_to_json(k, std::nullopt, false);
  REQUIRE(j["cpus"].size() == 2);
  CHECK(j["cpus"][0]["halt_cpu_percent"] == Approx(20));
  CHECK(j["cpus"][1]["halt_cpu_percent"] == Approx(100));
  CHECK(j["all"]["halt_cpu_percent"] == Approx(120));
  CHECK(j["all"]["poll_cpu_percent"] == Approx(10));
}
