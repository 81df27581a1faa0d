// The discrete-event guest (src/sim/des_*.hpp): its counters against its own tracepoint log, the
// kernel's idle-loop rules, determinism, the closed loop's response to the cap, and its speed.
#include "sim/des_cell.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>

using namespace haltpolld::des;

namespace {

GuestConfig config(int cpus, std::uint32_t cap, bool log = true, std::uint64_t seed = 7) {
  GuestConfig cfg;
  cfg.cpus = cpus;
  cfg.costs = fit_costs().costs;
  cfg.params.guest_halt_poll_ns = cap;
  cfg.seed = seed;
  cfg.log_events = log;
  return cfg;
}

// A mix that exercises every path: a pipe, a request/response pair, a timer and an idle CPU.
Workload mix() {
  const Calibration cal = fit_costs();
  Workload w = calibrated_pipe(cal, 0, 1);
  w.add(request_response_load(2, 3, Dist::with_mean(30000, 0.5), Dist::with_mean(20000, 0.3), Dist::constant(1000),
                              Dist::constant(2000)));
  w.add(calibrated_timer(cal, 4));
  w.add(poisson_load(5, 2, 3000, Dist::constant(5000), Dist::constant(1000), Dist::constant(2000)));
  return w;
}

}  // namespace

TEST_CASE("des: sysfs counters equal what the tracepoint log shows", "[des]") {
  for (std::uint32_t cap : {0u, 20000u, 100000u, 200000u}) {
    Guest g(config(7, cap), mix());
    g.run_until(300'000'000);
    std::vector<CpuCounters> fromlog(7);
    std::vector<int> open(7, -2);  // the state entered and not yet exited
    std::vector<Ns> since(7, 0);
    std::vector<std::uint32_t> limit(7, 0);
    for (const TraceEvent& e : g.events()) {
      auto& c = fromlog[e.cpu];
      switch (e.kind) {
        case TraceEvent::Kind::cpu_idle:
          if (e.state >= 0) {
            REQUIRE(open[e.cpu] == -2);  // never two entries without an exit
            open[e.cpu] = e.state;
            since[e.cpu] = e.t;
          } else {
            REQUIRE(open[e.cpu] >= 0);
            ++c.usage[open[e.cpu]];
            c.time_ns[open[e.cpu]] += static_cast<std::uint64_t>(e.t - since[e.cpu]);
            open[e.cpu] = -2;
          }
          break;
        case TraceEvent::Kind::guest_halt_poll_ns:
          REQUIRE(e.old_ns == limit[e.cpu]);  // the events chain: each starts where the last ended
          REQUIRE(e.new_ns <= std::max(cap, e.old_ns));
          limit[e.cpu] = e.new_ns;
          ++(e.grow ? c.limit_grow : c.limit_shrink);
          break;
        case TraceEvent::Kind::wake_idle_without_ipi:
          REQUIRE(open[e.cpu] == -2);  // logged after the poll's exit
          ++c.wake_idle_without_ipi;
          break;
      }
    }
    std::uint64_t skips = 0;
    for (int c = 0; c < 7; ++c) {
      const CpuCounters& k = g.counters(c);
      CAPTURE(cap, c);
      CHECK(k.usage[0] == fromlog[static_cast<std::size_t>(c)].usage[0]);
      CHECK(k.usage[1] == fromlog[static_cast<std::size_t>(c)].usage[1]);
      CHECK(k.time_ns[0] == fromlog[static_cast<std::size_t>(c)].time_ns[0]);
      CHECK(k.time_ns[1] == fromlog[static_cast<std::size_t>(c)].time_ns[1]);
      CHECK(k.time_us(1) == k.time_ns[1] / 1000);
      CHECK(k.limit_grow == fromlog[static_cast<std::size_t>(c)].limit_grow);
      CHECK(k.limit_shrink == fromlog[static_cast<std::size_t>(c)].limit_shrink);
      CHECK(k.wake_idle_without_ipi == fromlog[static_cast<std::size_t>(c)].wake_idle_without_ipi);
      CHECK(g.poll_limit_ns(c) == limit[static_cast<std::size_t>(c)]);
      const CpuHistograms& h = g.histograms(c);
      CHECK(h.poll_hit.count() + k.polls_timed_out == k.usage[0]);
      CHECK(h.halt_residency.sum_ns() == k.time_ns[1]);
      CHECK(h.halt_residency.count() == k.usage[1]);
      CHECK(h.poll_halt.count() + h.halt.count() == k.usage[1]);
      // Every timed-out poll is followed by a halt (the last one may still be under way).
      CHECK(h.poll_halt.count() <= k.polls_timed_out);
      CHECK(h.poll_halt.count() + 1 >= k.polls_timed_out);
      // Periods: hits + poll-and-halt periods + plain halts; their time is all the idle time.
      CHECK(h.poll_hit.sum_ns() + h.poll_halt.sum_ns() + h.halt.sum_ns() <= k.time_ns[0] + k.time_ns[1]);
      skips += k.wake_idle_without_ipi;
    }
    // At cap 0 nothing polls: a wake-up skips the IPI only on a CPU back from a halt, on its way
    // to the thread it runs (fit_costs() has no IPI cost; the pairs' wake-ups rarely meet there).
    std::uint64_t halts = 0;
    for (int c = 0; c < 7; ++c) halts += g.counters(c).usage[1];
    if (cap == 0) CHECK(skips < halts / 10);
    if (cap == 200000) CHECK(skips > 10000);
  }
}

namespace {
// bench_load_rr's shape, over an AF_UNIX socket (with its write-space wake-ups) or a plain hand-off.
Workload socket_rr(bool socket, double think_us = 10, double work_us = 20, double block_us = 1) {
  return request_response_load(0, 1, Dist::with_mean(think_us * 1000, 0.1), Dist::with_mean(work_us * 1000, 0.1),
                               Dist::constant(4000), Dist::constant(block_us * 1000), socket);
}
}  // namespace

TEST_CASE("des: a socket reader's read wakes the sender asleep in its own read", "[des]") {
  // The kernel's unix_write_space: taking a token sent over a socket wakes every sleeper on the
  // sender's socket, the sender asleep in its read of the reply among them; it finds nothing and
  // sleeps again. Measured on Linux 6.18 (bench_load_rr's shape, 60 µs each side): two voluntary
  // context switches a round trip on each side, one over a pipe.
  Costs k = fit_costs().costs;
  k.spurious_wake = Dist::constant(1500);
  for (std::uint32_t cap : {0u, 200000u}) {
    const CellResult plain = run_cell(k, socket_rr(false, 30, 30), 2, cap, 20'000'000, 300'000'000, 5, "rtt");
    const CellResult sock = run_cell(k, socket_rr(true, 30, 30), 2, cap, 20'000'000, 300'000'000, 5, "rtt");
    const double per_rt_plain = plain.idle_entries_per_s * plain.seconds / static_cast<double>(plain.ops);
    const double per_rt_sock = sock.idle_entries_per_s * sock.seconds / static_cast<double>(sock.ops);
    std::printf("des socket: cap %u, idle entries per round trip %.2f plain, %.2f over a socket\n", cap, per_rt_plain,
                per_rt_sock);
    CAPTURE(cap);
    CHECK(per_rt_plain == Approx(2).margin(0.1));
    // Each side's wait for the other splits in two: the write-space wake-up comes a wake-up after
    // the sender sleeps, long before the reply.
    CHECK(per_rt_sock == Approx(4).margin(0.2));
    // When polling, the extra wake-ups skip the IPI too.
    if (cap == 200000) CHECK(sock.ipi_skips_per_s > 1.9 * plain.ipi_skips_per_s);
  }
  // A sender still on its way to sleep (its block longer than the reader's polling wake-up) is
  // not asleep on the socket when the reader takes the token: no extra wake-up.
  const double wake_us = k.wake_polling.mean_ns() / 1000;
  const CellResult late = run_cell(k, socket_rr(true, 30, 30, 3 * wake_us), 2, 200000, 20'000'000, 300'000'000, 5, "rtt");
  CHECK(late.idle_entries_per_s * late.seconds / static_cast<double>(late.ops) == Approx(2).margin(0.1));
  // Several senders on one socket channel: each token's own sender is woken, none twice.
  Workload clients;
  for (int i = 0; i < 2; ++i) {
    clients.threads.push_back({"client", i, {step::compute(Dist::constant(30000)), step::post_socket(0), step::wait(1)}});
    clients.threads.push_back({"server", 2 + i, {step::wait(0), step::compute(Dist::constant(20000)), step::post_socket(1)}});
  }
  clients.channels = 2;
  Guest g(config(4, 200000, false), clients);
  g.run_until(100'000'000);
  std::uint64_t entries = 0;
  for (int c = 0; c < 4; ++c) entries += g.counters(c).usage[0] + g.counters(c).usage[1];
  CHECK(entries > 0);
  // A channel posted to both over a socket and not is refused.
  Workload mixed{"mixed", {{"a", 0, {step::post_socket(0), step::wait(1)}}, {"b", 1, {step::wait(0), step::post(1)}},
                           {"c", 1, {step::compute(Dist::constant(1000)), step::post(0)}}},
                 2, {}};
  CHECK_THROWS_WITH(Guest(config(2, 0), mixed), Catch::Contains("both over a socket and not"));
}

TEST_CASE("des: the waker pays for its IPI to a halted vCPU, not to a polling one", "[des]") {
  Costs k = fit_costs().costs;
  k.spurious_wake = Dist::constant(1500);
  Costs ipi = k;
  ipi.ipi_send = Dist::constant(5000);
  // Over a socket the write-space wake-up's IPI lies on the round trip's path on both sides (the
  // reader sends it before its own work): at least 2 × 5 µs more a round trip at cap 0 (a little
  // more: the replies that met a CPU on its way back from the extra wake-up now come after it
  // halted again), nothing when both CPUs poll (no IPI is sent).
  const CellResult h0 = run_cell(k, socket_rr(true), 2, 0, 20'000'000, 300'000'000, 6, "rtt");
  const CellResult h1 = run_cell(ipi, socket_rr(true), 2, 0, 20'000'000, 300'000'000, 6, "rtt");
  const CellResult p0 = run_cell(k, socket_rr(true), 2, 200000, 20'000'000, 300'000'000, 6, "rtt");
  const CellResult p1 = run_cell(ipi, socket_rr(true), 2, 200000, 20'000'000, 300'000'000, 6, "rtt");
  auto rt_us = [](const CellResult& r) { return r.seconds * 1e6 / static_cast<double>(r.ops); };
  std::printf("des ipi cost: round trip at cap 0 %.1f -> %.1f us, at 200000 %.1f -> %.1f us\n", rt_us(h0), rt_us(h1),
              rt_us(p0), rt_us(p1));
  CHECK(rt_us(h1) - rt_us(h0) > 9);
  CHECK(rt_us(h1) - rt_us(h0) < 16);
  CHECK(rt_us(p1) - rt_us(p0) == Approx(0).margin(0.5));
}

TEST_CASE("des: idle residency never exceeds elapsed time; a cap of 0 never polls", "[des]") {
  for (std::uint32_t cap : {0u, 50000u, 400000u}) {
    Guest g(config(7, cap, false), mix());
    for (Ns t = 1'000'000; t <= 200'000'000; t += 7'777'777) {
      g.run_until(t);
      for (int c = 0; c < 7; ++c) {
        const CpuCounters& k = g.counters(c);
        CAPTURE(cap, c, t);
        REQUIRE(k.time_ns[0] + k.time_ns[1] <= static_cast<std::uint64_t>(t));
        if (cap == 0) {
          REQUIRE(k.usage[0] == 0);
          REQUIRE(k.time_ns[0] == 0);
          REQUIRE(g.poll_limit_ns(c) == 0);
        }
      }
    }
    // The idle CPU (6) wakes only for the background interrupts (one per ~27 ms).
    const CpuCounters& idle = g.counters(6);
    CHECK(idle.usage[1] >= 2);
    CHECK(idle.usage[1] <= 30);
  }
}

TEST_CASE("des: the kernel's rules: a lowered cap waits for the next halt, a round trip zeroes", "[des]") {
  const Calibration cal = fit_costs();
  {
    // The 150 µs timer at cap 200000 polls through its period once grown (a late host wake-up
    // lengthens one halt past 100 µs). Every poll then hits: no halt, so no adjustment, and a
    // lowered cap changes nothing (the kernel's quirk; real guest: 99.5 % of polls over 100 µs).
    Guest g(config(2, 200000), calibrated_timer(cal, 0));
    g.run_until(1'000'000'000);
    REQUIRE(g.poll_limit_ns(0) == 200000);
    g.set_cap_ns(10000);
    const auto halts = g.counters(0).usage[1];
    g.clear_events();
    g.run_for(1'000'000'000);
    CHECK(g.counters(0).usage[1] == halts);
    CHECK(g.poll_limit_ns(0) == 200000);
    for (const TraceEvent& e : g.events()) CHECK_FALSE((e.cpu == 0 && e.kind == TraceEvent::Kind::guest_halt_poll_ns));
  }
  // A timer with a long pause every 20 periods: its CPU halts now and then. After the cap is
  // lowered the limit stays until the CPU's next halt, which then shrinks it under the new cap's
  // rule (block > cap: limit / 2, and 0 below grow_start).
  Workload w{"timer+pause", {}, 0, {"lateness"}};
  ThreadSpec t{"timer", 0, {}};
  for (int i = 0; i < 20; ++i) {
    t.steps.push_back(step::sleep_period(150000, 50000, 0));
    t.steps.push_back(step::compute(Dist::constant(5000)));
  }
  t.steps.push_back(step::sleep_exp(1'000'000));
  w.threads.push_back(t);
  Guest g(config(2, 200000), w);
  Ns at = 0;
  std::uint32_t before = 0;
  do {  // a moment where the limit is above the coming cap
    g.run_until(at += 1'000'000);
    before = g.poll_limit_ns(0);
  } while (before < 50000 && at < 5'000'000'000);
  REQUIRE(before >= 50000);
  g.set_cap_ns(10000);
  CHECK(g.poll_limit_ns(0) == before);
  g.clear_events();
  g.run_for(50'000'000);
  bool halted = false;
  const TraceEvent* first = nullptr;
  for (const TraceEvent& e : g.events()) {
    if (e.cpu != 0) continue;
    if (e.kind == TraceEvent::Kind::cpu_idle && e.state == 1) halted = true;
    if (e.kind == TraceEvent::Kind::guest_halt_poll_ns) {
      first = &e;
      break;
    }
  }
  REQUIRE(first != nullptr);
  CHECK(halted);  // no adjustment before a halt
  CHECK_FALSE(first->grow);
  CHECK(first->old_ns == before);
  CHECK(first->new_ns == (before / 2 >= 50000 ? before / 2 : 0));
  g.run_for(2'000'000);
  CHECK(g.poll_limit_ns(0) == 0);
  // Back up: grow from 0 to grow_start, then ×2 up to the cap.
  g.set_cap_ns(200000);
  g.run_for(1'000'000'000);
  REQUIRE(g.poll_limit_ns(0) > 0);
  g.reset_limits();
  CHECK(g.poll_limit_ns(0) == 0);
  CHECK(g.poll_limit_ns(1) == 0);
  // Other parameters: grow_start 0 and grow 0 keep a limit at 0 forever (0 × 0, raised to 0).
  haltpoll::HaltpollParams p = g.params();
  p.guest_halt_poll_grow_start = 0;
  p.guest_halt_poll_grow = 0;
  g.set_params(p);
  const auto polls = g.counters(0).usage[0];
  g.run_for(200'000'000);
  CHECK(g.poll_limit_ns(0) == 0);
  CHECK(g.counters(0).usage[0] <= polls + 1);  // at most a poll already under way
}

TEST_CASE("des: the pipe's round trip falls as the cap crosses its idle period", "[des]") {
  const Calibration cal = fit_costs();
  double prev = 1e9;
  std::vector<double> rt;
  for (std::uint32_t cap : {0u, 5000u, 50000u, 200000u}) {
    const CellResult r = run_cell(cal.costs, calibrated_pipe(cal), 2, cap, 50'000'000, 300'000'000, 3, "round_trip");
    std::printf("des pipe cap %u: %.2f us/op, poll %.1f %%/CPU, %.0f halts/s\n", cap, r.result_mean_us,
                r.poll_percent_per_cpu, r.halts_per_s);
    rt.push_back(r.result_mean_us);
    CHECK(r.result_mean_us <= prev * 1.05);
    prev = r.result_mean_us;
  }
  // Below the halted idle period (~24 µs) polling never starts; above it the loop runs 5–8 × faster.
  CHECK(rt[1] > 0.9 * rt[0]);
  CHECK(rt[0] / rt[2] > 4);
  CHECK(rt[0] / rt[3] > 4);
}

TEST_CASE("des: a seed determines the run", "[des]") {
  auto run = [](std::uint64_t seed) {
    Guest g(config(7, 50000, true, seed), mix());
    g.run_until(100'000'000);
    return std::make_tuple(g.events().size(), g.counters(0).time_ns[0], g.counters(3).usage[1],
                           g.metric("round_trip").hist.sum_ns(), g.events().back().t);
  };
  CHECK(run(11) == run(11));
  CHECK(run(11) != run(12));
}

TEST_CASE("des: a malformed workload is refused", "[des]") {
  Workload bad = calibrated_pipe(fit_costs(), 0, 5);
  CHECK_THROWS_WITH(Guest(config(2, 0), bad), Catch::Contains("cpu 5"));
  Workload spin{"spin", {{"t", 0, {step::post(0)}}}, 1, {}};
  CHECK_THROWS_WITH(Guest(config(2, 0), spin), Catch::Contains("loop forever"));
  Workload chan{"chan", {{"t", 0, {step::wait(3)}}}, 1, {}};
  CHECK_THROWS_WITH(Guest(config(2, 0), chan), Catch::Contains("channel 3"));
}

TEST_CASE("des: 32 and 64 vCPUs, 10 s of virtual time", "[des][scale]") {
  const Calibration cal = fit_costs();
  for (int cpus : {32, 64}) {
    // Half the vCPUs request/response pairs (a database client's shape), half 150 µs timers.
    const Workload w = calibrated_mix(cal, cpus);
    const auto t0 = std::chrono::steady_clock::now();
    const CellResult r = run_cell(cal.costs, w, cpus, 100000, 0, 10'000'000'000, 5, "rtt");
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("des scale: %d vCPUs, 10 s virtual in %.2f s wall, %llu events, %.0f idle periods/s virtual\n", cpus,
                wall, static_cast<unsigned long long>(r.events), r.idle_entries_per_s);
    CHECK(r.ops > static_cast<std::uint64_t>(cpus / 4) * 50000);  // every pair kept running
    // The timers at cap 100000 sit in the kernel's trap: about a third of their CPUs polling.
    CHECK(r.poll_percent_per_cpu > 10);
    CHECK(wall < 60);  // a generous bound for a loaded CI machine; the printed time is the figure
  }
}

TEST_CASE("des: steal stretches the closed loop and breaks its polling", "[des]") {
  const Calibration cal = fit_costs();
  Costs stolen = cal.costs;
  stolen.steal_probability = 0.01;
  stolen.steal = Dist::with_mean(300000, 0.5);  // another guest runs for ~300 µs on the physical CPU
  const CellResult clean =
      run_cell(cal.costs, calibrated_pipe(cal), 2, 200000, 50'000'000, 300'000'000, 4, "round_trip");
  const CellResult noisy = run_cell(stolen, calibrated_pipe(cal), 2, 200000, 50'000'000, 300'000'000, 4, "round_trip");
  std::printf("des steal: pipe at 200000 %.2f -> %.2f us/op, %.0f -> %.0f halts/s\n", clean.result_mean_us,
              noisy.result_mean_us, clean.halts_per_s, noisy.halts_per_s);
  // 1 % of steps × 300 µs adds about 3 µs per step, several steps per round trip.
  CHECK(noisy.result_mean_us > 2 * clean.result_mean_us);
  // A stolen partner makes the poll time out: far more halts.
  CHECK(noisy.halts_per_s > 10 * clean.halts_per_s);
}
