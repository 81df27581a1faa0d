// Workload builders for the discrete-event guest (des_workload.hpp).
#include "sim/des_workload.hpp"

namespace haltpolld::des {

using namespace step;

Workload& Workload::add(const Workload& other) {
  const int ch0 = channels;
  const int m0 = static_cast<int>(metrics.size());
  for (ThreadSpec t : other.threads) {
    for (Step& s : t.steps) {
      if (s.op == Step::Op::post || s.op == Step::Op::post_socket || s.op == Step::Op::wait) s.arg += ch0;
      if (s.op == Step::Op::begin || s.op == Step::Op::end || s.op == Step::Op::sleep_period) s.arg += m0;
    }
    threads.push_back(std::move(t));
  }
  channels += other.channels;
  metrics.insert(metrics.end(), other.metrics.begin(), other.metrics.end());
  name = name.empty() ? other.name : name + "+" + other.name;
  return *this;
}

Workload pipe_load(int cpu_a, int cpu_b, Dist work, Dist block) {
  Workload w{"pipe", {}, 2, {"round_trip"}};
  w.threads.push_back({"pipe-a", cpu_a, {begin(0), compute(work), post(0), compute(block), wait(1), end(0)}});
  w.threads.push_back({"pipe-b", cpu_b, {wait(0), compute(work), post(1), compute(block)}});
  return w;
}

namespace {
// The client's request after `pre` (think time or an arrival gap), the server's reply.
Workload rr(std::string name, int client_cpu, int server_cpu, Step pre, Dist server_work, Dist hop_work, Dist block,
            Dist switch_cost = {}, bool socket = false) {
  Workload w{std::move(name), {}, 2, {"rtt"}};
  auto send = [socket](int ch) { return socket ? post_socket(ch) : post(ch); };
  ThreadSpec client{"client", client_cpu, {pre, begin(0), compute(hop_work), send(0), compute(block), wait(1)}};
  ThreadSpec server{"server", server_cpu, {wait(0)}};
  if (switch_cost.median_ns > 0) {
    client.steps.push_back(compute(switch_cost));
    server.steps.push_back(compute(switch_cost));
  }
  client.steps.push_back(end(0));
  for (const Step& s : {compute(server_work), compute(hop_work), send(1), compute(block)}) server.steps.push_back(s);
  w.threads.push_back(std::move(client));
  w.threads.push_back(std::move(server));
  return w;
}
}  // namespace

Workload request_response_load(int client_cpu, int server_cpu, Dist think, Dist server_work, Dist hop_work,
                               Dist block, bool socket) {
  return rr("rr", client_cpu, server_cpu, compute(think), server_work, hop_work, block, {}, socket);
}

Workload poisson_load(int client_cpu, int server_cpu, double rate_per_s, Dist server_work, Dist hop_work, Dist block,
                      Dist switch_cost) {
  return rr("poisson", client_cpu, server_cpu, sleep_exp(static_cast<Ns>(1e9 / rate_per_s)), server_work, hop_work,
            block, switch_cost);
}

Workload timer_load(int cpu, Ns period, Ns slack, Dist busy) {
  Workload w{"timer", {}, 0, {"lateness"}};
  w.threads.push_back({"timer", cpu, {sleep_period(period, slack, 0), compute(busy)}});
  return w;
}

Workload idle_load() { return Workload{"idle", {}, 0, {}}; }

Workload calibrated_pipe(const Calibration& c, int cpu_a, int cpu_b) {
  return pipe_load(cpu_a, cpu_b, Dist::with_mean(c.pipe_work_ns, 0.2), Dist::with_mean(c.pipe_block_ns, 0.2));
}

// bench_load_timer -p 150: a 150 µs period; the thread's own work per wake-up is small (5 µs assumed).
Workload calibrated_timer(const Calibration& c, int cpu) {
  return timer_load(cpu, 150000, static_cast<Ns>(c.timer_slack_ns), Dist::with_mean(5000, 0.2));
}

// bench_load_poisson -r 2000 -w 5: 5 µs of server work per request, client and server on one vCPU.
Workload calibrated_poisson(const Calibration& c, int cpu) {
  return poisson_load(cpu, cpu, 2000, Dist::constant(5000), Dist::with_mean(c.pipe_work_ns, 0.2),
                      Dist::with_mean(c.pipe_block_ns, 0.2), Dist::with_mean(c.switch_ns, 0.2));
}

Workload calibrated_request_response(const Calibration& c, double think_us, double work_us, int client_cpu,
                                     int server_cpu) {
  const double work = c.socket_work_ns > 0 ? c.socket_work_ns : c.pipe_work_ns;
  const double block = c.socket_work_ns > 0 ? c.socket_block_ns : c.pipe_block_ns;
  return request_response_load(client_cpu, server_cpu, Dist::with_mean(think_us * 1000, 0.1),
                               Dist::with_mean(work_us * 1000, 0.1), Dist::with_mean(work, 0.2),
                               Dist::with_mean(block, 0.2), true);
}

Workload calibrated_mix(const Calibration& c, int cpus) {
  const int pairs_end = (cpus / 2 + 1) / 2 * 2;
  Workload w;
  for (int cpu = 0; cpu + 1 < pairs_end; cpu += 2)
    w.add(request_response_load(cpu, cpu + 1, Dist::with_mean(50000, 0.5), Dist::with_mean(20000, 0.3),
                                Dist::with_mean(c.pipe_work_ns, 0.2), Dist::with_mean(c.pipe_block_ns, 0.2)));
  for (int cpu = pairs_end; cpu < cpus; ++cpu) w.add(calibrated_timer(c, cpu));
  return w;
}

}  // namespace haltpolld::des
