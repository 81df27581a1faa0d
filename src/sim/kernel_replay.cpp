#include "sim/kernel_replay.hpp"

#include "sim/simulate.hpp"

#include <algorithm>
#include <charconv>
#include <istream>
#include <sstream>
#include <string_view>

namespace haltpolld {
namespace {

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

template <typename T>
T number(std::string_view s, std::uint64_t lineno, const char* what) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size())
    throw TraceError(lineno, std::string("expected ") + what + ", got \"" + std::string(s) + "\"");
  return v;
}

// The model's branch for one halt, as the kernel's adjust_poll_limit would take it.
using Branch = haltpoll::HaltpollBranch;
constexpr auto branch_of = haltpoll::haltpoll_branch;

// A haltpoll model whose limit starts at `limit`: grown from 0 through its own rule (0 →
// grow_start → ×grow …), so only values that rule can reach are accepted.
haltpoll::WindowGovernor model_at(std::uint32_t limit, const haltpoll::HaltpollParams& p, bool& reached) {
  haltpoll::PolicyParams pp;
  pp.haltpoll = p;
  haltpoll::WindowGovernor g("haltpoll", pp);
  for (int i = 0; i < 64 && g.window_ns() < limit; ++i) {
    const std::uint64_t w = g.window_ns();
    const std::uint64_t before = w;
    g.record(w + std::min<std::uint64_t>(p.guest_halt_poll_ns, std::max<std::uint64_t>(w + 1, 1)), w);
    if (g.window_ns() == before) break;
  }
  reached = g.window_ns() == limit;
  return g;
}

// One halt through the model: returns the event the kernel's tracepoint would show, if any.
bool model_halt(haltpoll::WindowGovernor& g, std::uint64_t block_ns, const haltpoll::HaltpollParams& p,
                LimitEvent& ev) {
  const std::uint64_t w = g.window_ns();
  const Branch b = branch_of(w, block_ns, p);
  // record(idle, window) with idle = window + block: the library sees a timed-out poll followed by
  // a halt of block_ns, exactly what the kernel's reflect step sees.
  if (block_ns > 0) g.record(w + block_ns, w);
  if (b == Branch::none) return false;
  ev.old_ns = static_cast<std::uint32_t>(w);
  ev.new_ns = static_cast<std::uint32_t>(g.window_ns());
  ev.grow = b == Branch::grow;
  return true;
}

}  // namespace

KernelRecording read_kernel_recording(std::istream& in, std::uint32_t cap_ns) {
  KernelRecording rec;
  rec.params.guest_halt_poll_ns = cap_ns;
  std::string line;
  std::uint64_t lineno = 0;
  // The last halt of each CPU still waiting for its event (the kernel fires it right after the exit).
  std::map<int, bool> halt_open;
  std::map<int, bool> last_was_poll;
  while (std::getline(in, line)) {
    ++lineno;
    const auto f = fields(line);
    if (f.empty()) continue;
    if (f[0] == "#") {
      if (f.size() >= 2 && f[1] == "haltpoll") {
        haltpoll::PolicyParams pp;
        pp.haltpoll = rec.params;
        for (std::size_t i = 2; i < f.size(); ++i) {
          const auto eq = f[i].find('=');
          if (eq == std::string_view::npos) throw TraceError(lineno, "expected key=value in the haltpoll header");
          try {
            haltpoll::set_policy_param(pp, f[i].substr(0, eq), f[i].substr(eq + 1));
          } catch (const std::invalid_argument& e) {
            throw TraceError(lineno, e.what());
          }
        }
        rec.params = pp.haltpoll;
        rec.params_from_header = true;
      } else if (f.size() >= 2 && f[1] == "limit") {
        if (f.size() != 6 || (f[5] != "grow" && f[5] != "shrink"))
          throw TraceError(lineno, "expected '# limit cpu old new grow|shrink'");
        const int cpu = number<int>(f[2], lineno, "a CPU number");
        LimitEvent ev{number<std::uint32_t>(f[3], lineno, "the old limit"),
                      number<std::uint32_t>(f[4], lineno, "the new limit"), f[5] == "grow"};
        auto& c = rec.cpus[cpu];
        c.events.push_back(ev);
        if (halt_open[cpu] && !c.halts.empty()) {
          c.halts.back().has_event = true;
          c.halts.back().event = ev;
        }
        halt_open[cpu] = false;
      }
      continue;  // other comments
    }
    if (f.size() != 3) throw TraceError(lineno, "expected 'cpu POLL|halt residency_ns'");
    const int cpu = number<int>(f[0], lineno, "a CPU number");
    const auto ns = number<std::uint64_t>(f[2], lineno, "a residency in ns");
    auto& c = rec.cpus[cpu];
    if (f[1] == "POLL") {
      ++c.polls;
      halt_open[cpu] = false;
      c.periods.push_back(ns);
      last_was_poll[cpu] = true;
    } else if (f[1] == "halt") {
      c.halts.push_back({ns, false, {}});
      halt_open[cpu] = true;
      if (last_was_poll[cpu] && !c.periods.empty()) c.periods.back() += ns;
      else c.periods.push_back(ns);
      last_was_poll[cpu] = false;
    } else {
      throw TraceError(lineno, "unknown idle state \"" + std::string(f[1]) + "\" (POLL or halt)");
    }
  }
  if (in.bad()) throw TraceError(lineno + 1, "read error");
  return rec;
}

bool looks_like_kernel_recording(const std::string& head) {
  std::istringstream in(head);
  std::string line;
  while (std::getline(in, line)) {
    const auto f = fields(line);
    if (f.size() >= 2 && f[0] == "#" && (f[1] == "limit" || f[1] == "haltpoll")) return true;
    if (f.size() == 3 && (f[1] == "POLL" || f[1] == "halt")) return true;
  }
  return false;
}

nlohmann::ordered_json to_json(const ReplayAgreement& a, const KernelRecording& rec, std::int64_t residency_bias_ns) {
  std::uint64_t periods = 0, halts = 0;
  for (const auto& [cpu, c] : rec.cpus) {
    periods += c.periods.size();
    halts += c.halts.size();
  }
  return {{"policy", "haltpoll"},
          {"recording", true},
          {"cpus", rec.cpus.size()},
          {"periods", periods},
          {"halts", halts},
          {"guest_halt_poll_ns", rec.params.guest_halt_poll_ns},
          {"guest_halt_poll_grow_start", rec.params.guest_halt_poll_grow_start},
          {"params_from_header", rec.params_from_header},
          {"residency_bias_ns", residency_bias_ns},
          {"kernel_limit_events", a.kernel_events},
          {"model_limit_events", a.model_events},
          {"aligned_events", a.aligned},
          {"aligned_ratio", a.aligned_ratio()},
          {"one_step_same", a.one_step_same},
          {"one_step_ratio", a.one_step_ratio()},
          {"near_threshold_disagreements", a.near_cap_disagreements}};
}

std::uint64_t lcs_length(const std::vector<LimitEvent>& a, const std::vector<LimitEvent>& b) {
  // Myers: furthest-reaching D-paths; LCS = (N + M - D) / 2 for the shortest edit script D.
  const long n = static_cast<long>(a.size()), m = static_cast<long>(b.size());
  if (n == 0 || m == 0) return 0;
  const long max_d = n + m;
  std::vector<long> v(static_cast<std::size_t>(2 * max_d + 2), 0);
  const long off = max_d + 1;
  for (long d = 0; d <= max_d; ++d) {
    for (long k = -d; k <= d; k += 2) {
      long x;
      if (k == -d || (k != d && v[static_cast<std::size_t>(off + k - 1)] < v[static_cast<std::size_t>(off + k + 1)]))
        x = v[static_cast<std::size_t>(off + k + 1)];
      else
        x = v[static_cast<std::size_t>(off + k - 1)] + 1;
      long y = x - k;
      while (x < n && y < m && a[static_cast<std::size_t>(x)] == b[static_cast<std::size_t>(y)]) ++x, ++y;
      v[static_cast<std::size_t>(off + k)] = x;
      if (x >= n && y >= m) return static_cast<std::uint64_t>((n + m - d) / 2);
    }
  }
  return 0;
}

ReplayAgreement replay_against_kernel(const KernelRecording& rec, std::int64_t residency_bias_ns) {
  ReplayAgreement r;
  const auto& p = rec.params;
  auto corrected = [&](std::uint64_t ns) {
    const std::int64_t v = static_cast<std::int64_t>(ns) - residency_bias_ns;
    return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0));
  };
  for (const auto& [cpu, c] : rec.cpus) {
    r.kernel_events += c.events.size();
    // Free run from the recording's first known state.
    const std::uint32_t start = c.events.empty() ? 0 : c.events.front().old_ns;
    bool reached = false;
    auto g = model_at(start, p, reached);
    std::vector<LimitEvent> predicted;
    for (const auto& h : c.halts) {
      LimitEvent ev;
      if (model_halt(g, corrected(h.block_ns), p, ev)) predicted.push_back(ev);
    }
    r.model_events += predicted.size();
    // The kernel's events before the first halt of the recording have no halt to predict them.
    std::vector<LimitEvent> kernel_after_first_halt;
    std::size_t paired = 0;
    for (const auto& h : c.halts) paired += h.has_event ? 1 : 0;
    kernel_after_first_halt.assign(c.events.end() - static_cast<long>(std::min(paired, c.events.size())), c.events.end());
    r.aligned += lcs_length(predicted, kernel_after_first_halt);

    // One step: the model restarted at the kernel's own limit before each halt.
    std::uint32_t kernel_limit = start;
    for (const auto& h : c.halts) {
      ++r.halts;
      const std::uint64_t block = corrected(h.block_ns);
      bool ok = false;
      auto m = model_at(kernel_limit, p, ok);
      LimitEvent ev;
      const bool fired = ok && model_halt(m, block, p, ev);
      bool same;
      if (!ok) same = false;
      else if (fired != h.has_event) same = false;
      else same = !fired || ev == h.event;
      if (same) {
        ++r.one_step_same;
      } else {
        const auto near = [&](std::uint64_t t) { return (block > t ? block - t : t - block) <= 1000; };
        if (near(kernel_limit) || near(p.guest_halt_poll_ns)) ++r.near_cap_disagreements;
      }
      if (h.has_event) kernel_limit = h.event.new_ns;
    }
  }
  return r;
}

}  // namespace haltpolld
