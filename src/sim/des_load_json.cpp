// Loads of the discrete-event guest described in JSON (des_load_json.hpp).
#include "sim/des_load_json.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

namespace haltpolld::des {

namespace {

using nlohmann::json;

std::string line_col(const std::string& text, std::size_t byte) {
  std::size_t line = 1, col = 1;
  for (std::size_t i = 0; i < std::min(byte, text.size()); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  // nlohmann's byte is one past the offending character.
  return "line " + std::to_string(line) + ", column " + std::to_string(col > 1 ? col - 1 : 1);
}

struct Names {
  std::map<std::string, int> ids;
  std::vector<std::string> order;
  int id(const std::string& n) {
    auto [it, fresh] = ids.emplace(n, static_cast<int>(order.size()));
    if (fresh) order.push_back(n);
    return it->second;
  }
};

class Parser {
 public:
  explicit Parser(const Calibration& cal) : cal_(cal) {}

  double number(const json& j, const std::string& at, double min, bool strict_min) const {
    if (!j.is_number()) throw LoadError(at, "expected a number, found " + std::string(j.type_name()));
    const double v = j.get<double>();
    if (!(strict_min ? v > min : v >= min))
      throw LoadError(
          at, "must be " + std::string(strict_min ? "> " : ">= ") + std::to_string(static_cast<long long>(min)));
    return v;
  }
  std::string name(const json& j, const std::string& at) const {
    if (!j.is_string() || j.get<std::string>().empty()) throw LoadError(at, "expected a non-empty name (a string)");
    return j.get<std::string>();
  }
  // The step's options other than its key; anything else is refused.
  void only(const json& s, const std::string& at, std::initializer_list<const char*> allowed) const {
    for (const auto& [k, v] : s.items()) {
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) == allowed.end())
        throw LoadError(at + "/" + k, "unknown option of this step");
    }
  }

  void step(const json& s, const std::string& at, std::vector<Step>& out) {
    if (!s.is_object())
      throw LoadError(at,
                      "a step is an object with one of compute_us, send, post, wait, "
                      "sleep_period_us, sleep_exp_us, begin, end, repeat");
    static constexpr const char* kinds[] = {"compute_us",   "send",  "post", "wait",  "sleep_period_us",
                                            "sleep_exp_us", "begin", "end",  "repeat"};
    const char* kind = nullptr;
    for (const char* k : kinds)
      if (s.contains(k)) {
        if (kind) throw LoadError(at, std::string("one step, two kinds: ") + kind + " and " + k);
        kind = k;
      }
    if (!kind)
      throw LoadError(at,
                      "no step kind (compute_us, send, post, wait, sleep_period_us, sleep_exp_us, begin, end, repeat)");
    const std::string k = kind;
    const std::string v = at + "/" + k;
    if (k == "repeat") {
      // {"repeat": N, "steps": [...]}: the steps N times in a row (a burst of round trips).
      only(s, at, {"repeat", "steps"});
      const double n = number(s[k], v, 1, false);
      if (n != std::floor(n) || n > 100000) throw LoadError(v, "expected a whole number from 1 to 100000");
      if (!s.contains("steps") || !s["steps"].is_array() || s["steps"].empty())
        throw LoadError(at + "/steps", "expected a non-empty array of steps to repeat");
      std::vector<Step> body;
      for (std::size_t i = 0; i < s["steps"].size(); ++i)
        step(s["steps"][i], at + "/steps/" + std::to_string(i), body);
      for (int r = 0; r < static_cast<int>(n); ++r) out.insert(out.end(), body.begin(), body.end());
      return;
    }
    if (k == "compute_us") {
      only(s, at, {"compute_us", "sigma", "tail_p", "tail_mean_us"});
      const double sigma = s.contains("sigma") ? number(s["sigma"], at + "/sigma", 0, false) : 0.0;
      if (sigma > 3) throw LoadError(at + "/sigma", "at most 3");
      Dist d = Dist::with_mean(number(s[k], v, 0, true) * 1000, sigma);
      if (s.contains("tail_p")) {
        d.tail_p = number(s["tail_p"], at + "/tail_p", 0, false);
        if (d.tail_p > 1) throw LoadError(at + "/tail_p", "a probability, at most 1");
        if (!s.contains("tail_mean_us")) throw LoadError(at, "tail_p needs tail_mean_us");
      }
      if (s.contains("tail_mean_us")) d.tail_mean_ns = number(s["tail_mean_us"], at + "/tail_mean_us", 0, true) * 1000;
      out.push_back(step::compute(d));
    } else if (k == "send") {
      only(s, at, {"send", "over"});
      // The hop's costs: a pipe's (perf bench sched pipe) or an AF_UNIX socket's (bench_load_rr),
      // each as the calibration fitted it (a calibration without a socket hop uses the pipe's).
      // Over a socket the token also carries the socket's write-space wake-up (step::post_socket).
      bool over_socket = false;
      if (s.contains("over")) {
        const std::string over = s["over"].is_string() ? s["over"].get<std::string>() : "";
        if (over != "pipe" && over != "socket") throw LoadError(at + "/over", "expected \"pipe\" or \"socket\"");
        over_socket = over == "socket";
      }
      const bool socket = over_socket && cal_.socket_work_ns > 0;
      const int ch = channels.id(name(s[k], v));
      out.push_back(step::compute(Dist::with_mean(socket ? cal_.socket_work_ns : cal_.pipe_work_ns, 0.2)));
      out.push_back(over_socket ? step::post_socket(ch) : step::post(ch));
      out.push_back(step::compute(Dist::with_mean(socket ? cal_.socket_block_ns : cal_.pipe_block_ns, 0.2)));
    } else if (k == "post" || k == "wait") {
      only(s, at, {kind});
      const int ch = channels.id(name(s[k], v));
      out.push_back(k == "post" ? step::post(ch) : step::wait(ch));
    } else if (k == "sleep_period_us") {
      only(s, at, {"sleep_period_us", "slack_us", "metric"});
      const auto period = static_cast<Ns>(number(s[k], v, 0, true) * 1000);
      const auto slack =
          static_cast<Ns>(s.contains("slack_us") ? number(s["slack_us"], at + "/slack_us", 0, false) * 1000 : 50000);
      const int m = metrics.id(s.contains("metric") ? name(s["metric"], at + "/metric") : "lateness");
      out.push_back(step::sleep_period(period, slack, m));
    } else if (k == "sleep_exp_us") {
      only(s, at, {"sleep_exp_us"});
      out.push_back(step::sleep_exp(static_cast<Ns>(number(s[k], v, 0, true) * 1000)));
    } else {
      only(s, at, {kind});
      const int m = metrics.id(name(s[k], v));
      out.push_back(k == "begin" ? step::begin(m) : step::end(m));
    }
  }

  Names channels, metrics;

 private:
  const Calibration& cal_;
};

}  // namespace

LoadDescription parse_load(const std::string& text, const Calibration& cal, int cpus) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string why = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ...": keep the reason.
    if (auto p = why.find(": "); p != std::string::npos) why = why.substr(p + 2);
    throw LoadError(line_col(text, e.byte), why);
  }
  if (!j.is_object()) throw LoadError("/", "a load is a JSON object");
  for (const auto& [k, v] : j.items())
    if (k != "name" && k != "result" && k != "replicate" && k != "span" && k != "threads")
      throw LoadError("/" + k, "unknown key (name, result, replicate, span, threads)");
  Parser p(cal);
  LoadDescription out;
  Workload one;
  one.name = j.contains("name") ? p.name(j["name"], "/name") : "load";
  if (!j.contains("threads") || !j["threads"].is_array())
    throw LoadError("/threads", "expected an array of threads (empty: an idle guest)");
  int max_cpu = 0;
  for (std::size_t i = 0; i < j["threads"].size(); ++i) {
    const json& t = j["threads"][i];
    const std::string at = "/threads/" + std::to_string(i);
    if (!t.is_object()) throw LoadError(at, "a thread is an object with name, cpu and steps");
    for (const auto& [k, v] : t.items())
      if (k != "name" && k != "cpu" && k != "steps" && k != "start_s" && k != "stop_s")
        throw LoadError(at + "/" + k, "unknown key (name, cpu, steps, start_s, stop_s)");
    ThreadSpec spec;
    spec.name = t.contains("name") ? p.name(t["name"], at + "/name") : "thread" + std::to_string(i);
    if (!t.contains("cpu") || !t["cpu"].is_number_integer() || t["cpu"].get<long long>() < 0)
      throw LoadError(at + "/cpu", "expected the vCPU number (an integer >= 0)");
    spec.cpu = static_cast<int>(t["cpu"].get<long long>());
    if (spec.cpu >= cpus)
      throw LoadError(at + "/cpu", "vCPU " + std::to_string(spec.cpu) + " on a guest of " + std::to_string(cpus));
    max_cpu = std::max(max_cpu, spec.cpu);
    if (!t.contains("steps") || !t["steps"].is_array() || t["steps"].empty())
      throw LoadError(at + "/steps", "expected a non-empty array of steps");
    for (std::size_t s = 0; s < t["steps"].size(); ++s)
      p.step(t["steps"][s], at + "/steps/" + std::to_string(s), spec.steps);
    // A thread that runs only from start_s to stop_s of virtual time (a load that changes).
    if (t.contains("start_s")) spec.start_ns = static_cast<Ns>(p.number(t["start_s"], at + "/start_s", 0, false) * 1e9);
    if (t.contains("stop_s")) {
      spec.stop_ns = static_cast<Ns>(p.number(t["stop_s"], at + "/stop_s", 0, true) * 1e9);
      if (spec.stop_ns <= spec.start_ns) throw LoadError(at + "/stop_s", "must be after start_s");
    }
    one.threads.push_back(std::move(spec));
  }
  one.channels = static_cast<int>(p.channels.order.size());
  one.metrics = p.metrics.order;
  out.result = one.metrics.empty() ? "" : one.metrics.front();
  if (j.contains("result")) {
    out.result = p.name(j["result"], "/result");
    if (std::find(one.metrics.begin(), one.metrics.end(), out.result) == one.metrics.end())
      throw LoadError("/result", "no step names the metric '" + out.result + "'");
  }
  out.span = max_cpu + 1;
  if (j.contains("span")) {
    const json& sp = j["span"];
    if (!sp.is_number_integer() || sp.get<long long>() < out.span || sp.get<long long>() > cpus)
      throw LoadError("/span", "expected an integer from " + std::to_string(out.span) +
                                   " (the highest vCPU used + 1) to " + std::to_string(cpus));
    out.span = static_cast<int>(sp.get<long long>());
  }
  bool replicate = false;
  if (j.contains("replicate")) {
    if (!j["replicate"].is_boolean()) throw LoadError("/replicate", "expected true or false");
    replicate = j["replicate"].get<bool>();
  }
  out.load = one;
  if (replicate) {
    for (int k = 1; (k + 1) * out.span <= cpus; ++k) {
      Workload copy = one;
      for (ThreadSpec& t : copy.threads) t.cpu += k * out.span;
      out.load.add(copy);
      ++out.copies;
    }
    out.load.name = one.name;
  }
  return out;
}

}  // namespace haltpolld::des
