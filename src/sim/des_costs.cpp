// Cost distributions and their closed-form fit to the real guest (des_costs.hpp).
#include "sim/des_costs.hpp"

#include <algorithm>

namespace haltpolld::des {

namespace {
std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// z of the normal quantiles used below.
constexpr double z90 = 1.2815515655446004;
constexpr double z99 = 2.3263478740408408;
}  // namespace

Rng::Rng(std::uint64_t seed) noexcept : s_(splitmix64(seed)) {}

double Rng::normal() noexcept {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Marsaglia's polar method: two normals per accepted pair, one log and one sqrt, no trigonometry.
  double u, v, s;
  do {
    u = 2 * uniform() - 1;
    v = 2 * uniform() - 1;
    s = u * u + v * v;
  } while (s >= 1 || s == 0);
  const double m = std::sqrt(-2 * std::log(s) / s);
  spare_ = v * m;
  has_spare_ = true;
  return u * m;
}

Ns Dist::draw(Rng& r) const noexcept {
  double x = median_ns;
  if (sigma > 0 && median_ns > 0) x = median_ns * std::exp(sigma * r.normal());
  if (tail_p > 0 && r.uniform() < tail_p) x += r.exponential(tail_mean_ns);
  return static_cast<Ns>(std::llround(x));
}

void shape_halted_wakes(Calibration& c, const FitInputs& in, double ipi_send_ns) {
  Costs& k = c.costs;
  auto body_mean = [](const Dist& d) { return d.median_ns * std::exp(d.sigma * d.sigma / 2); };
  const double mean_m = body_mean(k.wake_halted), mean_long = body_mean(k.wake_halted_long);
  const double w = c.pipe_work_ns, block = c.pipe_block_ns;
  // A halted pipe CPU's idle period at cap 0: from its sleep (its IPI's cost and its block after
  // its write) the partner's halted wake-up and work, then the share f of its own wake-up that
  // passes before its halt ends: m + w + f m - block - ipi.
  const double f = std::clamp((in.pipe_halted_period_p50_us * 1000 - mean_m - w + block + ipi_send_ns) / mean_m, 0.05, 1.0);
  // The spread of that period (p10..p90) comes from the two draws of m: sd = cv m sqrt(1 + f^2).
  const double sd = (in.pipe_halted_period_p90_us - in.pipe_halted_period_p10_us) * 1000 / (2 * z90);
  const double cv = sd / (mean_m * std::sqrt(1 + f * f));
  const double sigma_m = std::sqrt(std::log1p(cv * cv));
  const double tail_p = k.wake_polling.tail_p, tail_mean = k.wake_polling.tail_mean_ns;
  k.wake_halted = Dist::with_mean(mean_m, sigma_m);
  k.wake_halted.tail_p = tail_p;
  k.wake_halted.tail_mean_ns = tail_mean;
  k.halt_exit_share = f;
  // The long path's extra over the short one is the host's, while the vCPU does not run: inside
  // the halt residency.
  k.wake_halted_long = Dist::with_mean(mean_long, sigma_m);
  k.wake_halted_long.tail_p = tail_p;
  k.wake_halted_long.tail_mean_ns = tail_mean;
  k.halt_exit_share_long = (f * mean_m + (mean_long - mean_m)) / mean_long;
  k.ipi_send = ipi_send_ns > 0 ? Dist::with_mean(ipi_send_ns, 0.25) : Dist{};
}

Calibration fit_costs(const FitInputs& in, const FitAssumptions& as) {
  Calibration c;
  const double w = as.pipe_work_us * 1000;
  // The pipe: a round trip is two hops; a hop is the woken side's wake-up latency plus its work
  // before the next write. Polling (cap 200000) and halting (cap 0) give the two wake-up means.
  const double rt_poll = in.pipe_us_per_op_polling * 1000;
  const double hop_poll = rt_poll / 2;
  const double hop_halt = in.pipe_us_per_op_halting * 1000 / 2;
  // Rare long delays: the share of periods at cap 200000 that exceeded it, each from one wake-up
  // whose tail exceeded 200 µs.
  const double tail_mean = as.tail_mean_us * 1000;
  const double over_cap =
      in.pipe_entries_per_s_polling > 0 ? in.pipe_halts_per_s_polling / in.pipe_entries_per_s_polling : 0;
  const double tail_p = std::min(1.0, over_cap / std::exp(-200000.0 / tail_mean));
  // The moderate delays: the polling pipe's periods over the low cap that the rare ones do not
  // explain, each a delay beyond (low cap - the polling period), exponential of delay_mean.
  const double period_poll = std::max(0.0, in.pipe_poll_share_polling * rt_poll);
  const double delay_mean = as.delay_mean_us * 1000;
  double delay_p = 0;
  if (in.pipe_entries_per_s_low_cap > 0) {
    const double low = in.pipe_low_cap_ns;
    const double over = in.pipe_halts_per_s_low_cap / in.pipe_entries_per_s_low_cap - tail_p * std::exp(-low / tail_mean);
    delay_p = std::clamp(over * std::exp((low - period_poll) / delay_mean), 0.0, 1.0);
  }
  // The moderate delays are part of a wake-up's mean; the rare ones hardly move a round trip's
  // (the loop halts through them), so they are left out of it.
  const double extra = delay_p * delay_mean;
  const double mean_h = std::max(100.0, hop_poll - w - extra);
  const double mean_m = std::max(mean_h, hop_halt - w - extra);
  // A CPU polls from its own block (block ns after its write) until the partner's write (the
  // wake-up and work later): POLL residency per round trip = hop - block. (refine_costs, in
  // des_calibration.hpp, corrects both against simulated cells at the fit caps.)
  const double block = std::clamp(hop_poll - in.pipe_poll_share_polling * rt_poll, 0.0, hop_poll);
  c.costs.wake_polling = Dist::with_mean(mean_h, as.wake_polling_sigma);
  c.costs.wake_polling.tail_p = tail_p;
  c.costs.wake_polling.tail_mean_ns = tail_mean;
  c.costs.wake_halted = Dist::with_mean(mean_m, 0);
  c.costs.wake_delay = Dist{0, 0, delay_p, delay_mean};
  // A long halt's wake-up: the database-shaped request/response at cap 0, RTT = server work + two
  // hops of (work + wake-up), both sides halting longer than host_poll (refine_costs corrects it
  // against the simulated cell).
  c.costs.wake_halted_long = c.costs.wake_halted;
  if (in.db_rtt_us_halting > 0) {
    const double mean_long = std::max(mean_m, (in.db_rtt_us_halting * 1000 - in.db_work_us * 1000 - 2 * w) / 2);
    c.costs.wake_halted_long = Dist::with_mean(mean_long, 0);
    c.costs.host_poll_ns = static_cast<Ns>(as.host_poll_us * 1000);
  }
  c.pipe_work_ns = w;
  c.pipe_block_ns = block;
  shape_halted_wakes(c, in, 0);

  // The timer: lateness = slack + the local timer's latency; medians at cap 0 (halting) and cap
  // 200000 (polling); σ from p99 / p50 at cap 0. One wake-up in the run's 20000 was over 2 ms late.
  const double slack = as.timer_slack_us * 1000;
  const double th = std::max(100.0, in.timer_late_p50_us_halting * 1000 - slack);
  const double tp = std::max(100.0, in.timer_late_p50_us_polling * 1000 - slack);
  const double sigma_t = std::log(std::max(1.0, (in.timer_late_p99_us_halting * 1000 - slack) / th)) / z99;
  c.costs.timer_in_halt = Dist{th, sigma_t, 1.0 / 20000, 2e6};
  c.costs.timer_in_poll = Dist{tp, sigma_t, 1.0 / 20000, 2e6};
  c.timer_slack_ns = slack;

  // The socket's hop (bench_load_rr at caps 30000 and 200000, both CPUs polling): a round trip is
  // think + work + two hops of (the sender's work + a polling wake-up). The sender's way from its
  // write to sleep is the pipe's (the same system calls' return and entry: assumed), shorter than
  // the reader's wake-up, so that the reader takes the token after the sender sleeps and its
  // write-space wake-up (step::post_socket) wakes the sender once a hop. The CPU time of that
  // spurious wake-up is what the poll share leaves: per CPU and round trip (the mean of the two),
  // RT (1 - share) = (think + work) / 2 + work_hop + block + 2 wake-ups + spurious.
  if (in.rr_per_s_polling > 0) {
    const double rt = 1e9 / in.rr_per_s_polling;
    const double hop = (rt - (in.rr_think_us + in.rr_work_us) * 1000) / 2;
    c.socket_work_ns = std::max(100.0, hop - mean_h);
    c.socket_block_ns = block;
    const double spurious = rt * (1 - in.rr_poll_share_polling) - (in.rr_think_us + in.rr_work_us) * 500 -
                            c.socket_work_ns - block - 2 * mean_h;
    c.costs.spurious_wake = Dist::with_mean(std::max(100.0, spurious), 0.2);
  }

  // Request/response on one vCPU: RTT = server work + two hops (work and block) + two switches.
  c.switch_ns = std::max(0.0, (in.poisson_rtt_p50_us_halting * 1000 - in.poisson_work_us * 1000 - 2 * (w + block)) / 2);

  // Background interrupts: an idle guest's entries per CPU and second.
  if (in.idle_entries_per_s > 0)
    c.costs.housekeeping_gap = Dist::with_mean(in.idle_cpus * 1e9 / in.idle_entries_per_s, 1.0);
  return c;
}

}  // namespace haltpolld::des
