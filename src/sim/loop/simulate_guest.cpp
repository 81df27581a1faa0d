// `haltpolld simulate --guest` (simulate_guest.hpp).
#include "sim/loop/simulate_guest.hpp"

#include "sim/des_calibration.hpp"
#include "sim/des_load_json.hpp"
#include "sim/loop/closed_loop.hpp"
#include "sim/loop/guest_record.hpp"
#include "sim/simulate.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <map>
#include <iostream>
#include <memory>
#include <sstream>

namespace haltpolld::des {

namespace {
constexpr int kOk = 0, kUsage = 2, kLoad = 3;
}  // namespace

namespace {

// Sets the configuration key `name` of the tuner ("grow_start_at_cap", not "tuner.grow_start_at_cap")
// from its text: true/false for a flag, a number within the key's bounds otherwise (the policy is
// --setting's). An empty string, or why the key or its value is refused.
std::string set_tuner_key(TunerParams& p, const std::string& name, std::string_view text) {
  std::string error = "not a configuration key of the tuner";
  for_each_tuner_param([&](const char* n, auto member, TunerParamUse use, const TunerBounds&) {
    if (name != n || use != TunerParamUse::config) return;
    using T = std::remove_cvref_t<decltype(p.*member)>;
    if constexpr (std::is_same_v<T, bool>) {
      if (text == "true" || text == "false") {
        p.*member = text == "true";
        error.clear();
      } else {
        error = "expected true or false";
      }
    } else if constexpr (std::is_arithmetic_v<T>) {
      try {
        std::size_t used = 0;
        const double v = std::stod(std::string(text), &used);
        if (used != text.size()) throw std::invalid_argument("trailing text");
        if (std::is_integral_v<T> && (v < 0 || v != static_cast<double>(static_cast<std::uint64_t>(v))))
          throw std::invalid_argument("not a whole number");
        p.*member = static_cast<T>(v);
        error.clear();
      } catch (const std::exception&) {
        error = "expected a number";
      }
    } else {
      error = "set by --setting";
    }
  });
  if (error.empty()) {
    if (const auto e = check_tuner_params(p)) error = e->name + ": " + e->reason;
  }
  return error;
}

}  // namespace

int run_simulate_guest(const GuestSimulateOptions& o, std::ostream& out, std::ostream& err) {
  if (o.cpus < 1 || o.cpus > 1024) {
    fmt::print(err, "haltpolld simulate --guest: --cpus {}: expected 1 to 1024\n", o.cpus);
    return kUsage;
  }
  if (!(o.seconds >= 1 && o.seconds <= 3600)) {
    fmt::print(err, "haltpolld simulate --guest: --seconds {}: expected 1 to 3600\n", o.seconds);
    return kUsage;
  }
  std::optional<TunerParams> tuner;
  std::uint32_t boot = o.boot_ns;
  if (o.setting.rfind("static:", 0) == 0) {
    try {
      std::size_t used = 0;
      const unsigned long v = std::stoul(o.setting.substr(7), &used);
      if (used != o.setting.size() - 7 || v > 10'000'000) throw std::invalid_argument("range");
      boot = static_cast<std::uint32_t>(v);
    } catch (const std::exception&) {
      fmt::print(err, "haltpolld simulate --guest: --setting {}: expected static:<ns> (0 to 10000000)\n", o.setting);
      return kUsage;
    }
  } else if (auto p = policy_from_string(o.setting); p && *p != Policy::static_value) {
    tuner = TunerParams{};
    tuner->policy = *p;
  } else {
    fmt::print(err, "haltpolld simulate --guest: --setting {}: expected balanced, budget, latency or static:<ns>\n",
               o.setting);
    return kUsage;
  }

  // The other module parameters at boot, parsed (and range-checked) as the replay parses them.
  haltpoll::PolicyParams module;
  std::map<std::string, std::string> tuner_sets;  // the tuner keys given, for the header and the JSON
  for (const auto& kv : o.sets) {
    const auto eq = kv.find('=');
    const std::string key = kv.substr(0, eq);
    if (eq == std::string::npos) {
      fmt::print(err, "haltpolld simulate --guest: --set {}: expected key=value\n", kv);
      return kUsage;
    }
    if (key.rfind("tuner.", 0) == 0) {
      // A key of the daemon's tuner, as haltpolld.json sets it.
      if (!tuner) {
        fmt::print(err, "haltpolld simulate --guest: --set {}: a tuner key needs a policy --setting, not {}\n", kv,
                   o.setting);
        return kUsage;
      }
      if (auto e = set_tuner_key(*tuner, key.substr(6), std::string_view(kv).substr(eq + 1)); !e.empty()) {
        fmt::print(err, "haltpolld simulate --guest: --set {}: {}\n", kv, e);
        return kUsage;
      }
      tuner_sets[key] = kv.substr(eq + 1);
      continue;
    }
    if (key == "guest_halt_poll_ns") {
      fmt::print(err, "haltpolld simulate --guest: --set {}: the cap is --setting static:<ns> (or --boot-ns)\n", kv);
      return kUsage;
    }
    bool module_key = false;
    haltpoll::for_each_haltpoll_param([&](const char* name, auto, auto) { module_key |= key == name; });
    if (!module_key) {
      fmt::print(err,
                 "haltpolld simulate --guest: --set {}: not a module parameter of the guest (guest_halt_poll_grow, "
                 "guest_halt_poll_grow_start, guest_halt_poll_shrink, guest_halt_poll_allow_shrink)\n",
                 kv);
      return kUsage;
    }
    try {
      haltpoll::set_policy_param(module, key, std::string_view(kv).substr(eq + 1));
    } catch (const std::invalid_argument& e) {
      fmt::print(err, "haltpolld simulate --guest: --set {}: {}\n", kv, e.what());
      return kUsage;
    }
  }
  module.haltpoll.guest_halt_poll_ns = boot;
  const haltpoll::HaltpollParams defaults{};
  std::string module_text;  // the parameters that differ from the kernel's defaults, for the header
  haltpoll::for_each_haltpoll_param([&](const char* name, auto member, auto) {
    if (std::string_view(name) != "guest_halt_poll_ns" && !(module.haltpoll.*member == defaults.*member))
      module_text += fmt::format(", {} {}", name, module.haltpoll.*member);
  });
  for (const auto& [k, v] : tuner_sets) module_text += fmt::format(", {} {}", k, v);

  std::string text;
  {
    std::ostringstream all;
    if (o.load_path == "-") {
      all << std::cin.rdbuf();
    } else {
      std::ifstream in(o.load_path);
      if (!in) {
        fmt::print(err, "haltpolld simulate --guest: cannot open load {}\n", o.load_path);
        return kLoad;
      }
      all << in.rdbuf();
    }
    text = all.str();
  }
  const Calibration& cal = guest_calibration();
  LoadDescription load;
  try {
    load = parse_load(text, cal, o.cpus);
  } catch (const LoadError& e) {
    fmt::print(err, "haltpolld simulate --guest: {}: {}\n", o.load_path == "-" ? "<stdin>" : o.load_path, e.what());
    return kLoad;
  }

  LoopConfig c;
  c.cpus = o.cpus;
  c.costs = cal.costs;
  c.load = load.load;
  c.metric = load.result;
  c.tuner = tuner;
  c.boot = module.haltpoll;
  c.duration = static_cast<Ns>(o.seconds * 1e9);
  c.seed = o.seed;
  // --record: written to a temporary file beside the target, renamed over it once the run ends.
  std::ofstream rec_file;
  std::optional<GuestRecordWriter> rec;
  const std::string rec_tmp = o.record_path.empty() ? "" : o.record_path + ".tmp";
  if (!o.record_path.empty()) {
    rec_file.open(rec_tmp, std::ios::trunc);
    if (!rec_file) {
      fmt::print(err, "haltpolld simulate --guest: --record {}: cannot write {}: {}\n", o.record_path, rec_tmp,
                 std::strerror(errno));
      return kUsage;
    }
    rec.emplace(rec_file, o.cpus, module.haltpoll,
                fmt::format("haltpolld simulate --guest: load {} ({} cop{}) on {} vCPU{}, setting {}{}, seed {}, "
                            "{:.0f} s of virtual time",
                            load.load.name, load.copies, load.copies == 1 ? "y" : "ies", o.cpus, o.cpus == 1 ? "" : "s",
                            o.setting, module_text, o.seed, o.seconds));
    c.on_events = [&rec](const std::vector<TraceEvent>& ev, std::uint32_t cap) { rec->consume(ev, cap); };
  }
  auto drop_record = [&] {
    if (rec_tmp.empty()) return;
    rec_file.close();
    std::remove(rec_tmp.c_str());
  };
  LoopResult r;
  {
    // The Controller logs every change at info: the decisions are summarised below instead.
    const auto level = spdlog::get_level();
    spdlog::set_level(spdlog::level::warn);
    try {
      r = run_closed_loop(c);
    } catch (const std::invalid_argument& e) {  // a program that could loop without advancing time
      spdlog::set_level(level);
      drop_record();
      fmt::print(err, "haltpolld simulate --guest: {}: {}\n", o.load_path, e.what());
      return kLoad;
    }
    spdlog::set_level(level);
  }
  if (rec) {
    rec->finish(o.seconds);
    rec_file.flush();
    if (!rec_file || (rec_file.close(), !rec_file) || std::rename(rec_tmp.c_str(), o.record_path.c_str()) != 0) {
      fmt::print(err, "haltpolld simulate --guest: --record {}: writing failed: {}\n", o.record_path,
                 std::strerror(errno));
      drop_record();
      return kUsage;
    }
  }
  const CalibrationTolerance& tol = kCalibrationTolerance;
  std::uint64_t changes = 0;
  double settled_s = 0;
  for (const LoopTick& t : r.ticks)
    if (t.changed) {
      ++changes;
      settled_s = static_cast<double>(t.t) / 1e9;
    }
  const CellResult& w = r.whole;
  const double ops_per_s = w.seconds > 0 ? static_cast<double>(w.ops) / w.seconds : 0;

  if (o.json) {
    nlohmann::ordered_json j;
    j["load"] = load.load.name;
    j["copies"] = load.copies;
    j["cpus"] = o.cpus;
    j["setting"] = o.setting;
    j["seconds"] = o.seconds;
    j["seed"] = o.seed;
    nlohmann::ordered_json mp;
    haltpoll::for_each_haltpoll_param([&](const char* name, auto member, auto) { mp[name] = module.haltpoll.*member; });
    j["module_parameters_at_boot"] = mp;
    if (!tuner_sets.empty()) j["tuner_keys"] = tuner_sets;
    j["cap_at_end_ns"] = r.final_cap_ns;
    j["cap_changes"] = changes;
    j["last_change_s"] = settled_s;
    j["poll_cpu_percent_per_cpu"] = w.poll_percent_per_cpu;
    j["poll_cpu_percent_busiest"] = w.poll_percent_busiest;
    j["halts_per_s"] = w.halts_per_s;
    j["idle_entries_per_s"] = w.idle_entries_per_s;
    j["ipi_skipped_per_s"] = w.ipi_skips_per_s;
    if (!load.result.empty()) {
      j["result"] = {{"metric", load.result},
                     {"mean_us", w.result_mean_us},
                     {"p50_us", w.result_p50_us},
                     {"p99_us", w.result_p99_us},
                     {"ops_per_s", ops_per_s}};
    }
    j["late_half"] = {{"poll_cpu_percent_per_cpu", r.late.poll_percent_per_cpu},
                      {"result_mean_us", r.late.result_mean_us},
                      {"halts_per_s", r.late.halts_per_s}};
    j["calibration_error"] = {{"result_percent", tol.result_percent},
                              {"poll_cpu_points", tol.poll_points},
                              {"halts_percent", tol.halts_percent},
                              {"halts_per_s", tol.halts_per_s},
                              {"worst_held_out_result_percent", tol.worst_result_percent},
                              {"worst_held_out_poll_cpu_points", tol.worst_poll_points},
                              {"not_covered", tol.not_covered}};
    if (r.penalty_ns) j["halt_exit_penalty_ns"] = *r.penalty_ns;
    fmt::print(out, "{}\n", j.dump());
    return kOk;
  }
  fmt::print(out,
             "load {} ({} cop{} on {} vCPU{}), setting {}, {:.0f} s of virtual time from boot at {} ns{}, seed {}\n",
             load.load.name, load.copies, load.copies == 1 ? "y" : "ies", o.cpus, o.cpus == 1 ? "" : "s", o.setting,
             o.seconds, boot, module_text, o.seed);
  if (tuner)
    fmt::print(out, "cap at the end: {} ns ({} change{}, the last at {:.2f} s; halt-exit penalty {:.1f} us)\n",
               r.final_cap_ns, changes, changes == 1 ? "" : "s", settled_s, r.penalty_ns.value_or(0) / 1000);
  if (o.decisions)
    for (const LoopTick& t : r.ticks)
      if (t.changed || t.rule != Rule::steady)
        fmt::print(out, "  t={:.2f} s -> {} ns [{}]: {}\n", static_cast<double>(t.t) / 1e9, t.cap_ns, to_string(t.rule),
                   t.reason);
  fmt::print(out, "over the whole run (the daemon's search included):\n");
  fmt::print(out,
             "  poll CPU      {:7.2f} % per CPU, busiest {:.2f} %   (calibration error: within {:.0f} points; worst "
             "held-out {:.1f})\n",
             w.poll_percent_per_cpu, w.poll_percent_busiest, tol.poll_points, tol.worst_poll_points);
  if (!load.result.empty())
    fmt::print(out,
               "  {:<13} mean {:.2f} us, p50 {:.2f} us, p99 {:.2f} us, {:.0f} ops/s   (calibration error: within "
               "{:.0f} %; worst held-out {:.1f} %)\n",
               load.result, w.result_mean_us, w.result_p50_us, w.result_p99_us, ops_per_s, tol.result_percent,
               tol.worst_result_percent);
  fmt::print(out, "  halts         {:7.0f} /s   (calibration error: within {:.0f} % or {:.0f}/s)\n", w.halts_per_s,
             tol.halts_percent, tol.halts_per_s);
  fmt::print(out, "  idle entries  {:7.0f} /s, IPI skipped {:.0f} /s\n", w.idle_entries_per_s, w.ipi_skips_per_s);
  fmt::print(out, "second half: poll CPU {:.2f} % per CPU, {} mean {:.2f} us, halts {:.0f} /s\n",
             r.late.poll_percent_per_cpu, load.result.empty() ? "result" : load.result, r.late.result_mean_us,
             r.late.halts_per_s);
  fmt::print(out, "not covered by the calibration: {}\n", tol.not_covered);
  return kOk;
}

std::function<int()> add_simulate_command_with_guest(CLI::App& parent) {
  auto replay = add_simulate_command(parent);
  CLI::App* app = parent.get_subcommands({}).back();
  app->description(app->get_description() +
                   "; with --guest, predict poll CPU and a described load's result on a simulated haltpoll guest");
  // --trace is required for the replay only.
  CLI::Option* trace = app->get_option("--trace");
  trace->required(false);
  auto o = std::make_shared<GuestSimulateOptions>();
  auto guest = std::make_shared<bool>(false);
  app->add_flag("--guest", *guest,
                "simulate an N-vCPU haltpoll guest running --load under --setting (docs/simulator.md)");
  auto* load = app->add_option("--load", o->load_path, "--guest: the load, a JSON description ('-' for stdin)");
  app->add_option("--cpus", o->cpus, "--guest: vCPUs")->capture_default_str();
  app->add_option("--setting", o->setting, "--guest: balanced | budget | latency | static:<ns>")->capture_default_str();
  app->add_option("--boot-ns", o->boot_ns, "--guest: guest_halt_poll_ns at boot (where the daemon starts)")
      ->capture_default_str();
  app->add_option("--seconds", o->seconds, "--guest: virtual seconds, the daemon's search included")
      ->capture_default_str();
  app->add_option("--seed", o->seed, "--guest: random seed")->capture_default_str();
  app->add_flag("--decisions", o->decisions, "--guest: print every decision but a steady hold, with the tuner's rule and reason");
  app->add_option("--record", o->record_path,
                  "--guest: also write the guest's idle periods and limit changes to this file, in `haltpolld "
                  "record`'s format");
  auto* json = app->get_option("--json");
  auto* set = app->get_option("--set");
  set->description(set->get_description() +
                   "; with --guest, the guest's other module parameters at boot: guest_halt_poll_grow, "
                   "guest_halt_poll_grow_start, guest_halt_poll_shrink, guest_halt_poll_allow_shrink; or a "
                   "key of the daemon's tuner, tuner.<key>=<value> (haltpolld.json's, e.g. "
                   "tuner.grow_start_at_cap=true)");
  // The options of one mode that the other would silently ignore.
  std::vector<CLI::Option*> replay_only, guest_only;
  for (const char* n : {"--policy", "--miss-cost-ns", "--cap-ns", "--residency-bias-ns"})
    replay_only.push_back(app->get_option(n));
  for (const char* n : {"--load", "--cpus", "--setting", "--boot-ns", "--seconds", "--seed", "--decisions", "--record"})
    guest_only.push_back(app->get_option(n));
  auto given = [](const std::vector<CLI::Option*>& opts) {
    std::string names;
    for (const CLI::Option* opt : opts)
      if (opt->count() > 0) names += (names.empty() ? "" : ", ") + opt->get_name();
    return names;
  };
  return [=] {
    if (!*guest) {
      if (const std::string g = given(guest_only); !g.empty()) {
        fmt::print(stderr, "haltpolld simulate: {} only with --guest\n", g);
        return kUsage;
      }
      if (trace->count() == 0) {
        fmt::print(stderr, "haltpolld simulate: --trace is required (or --guest with --load)\n");
        return kUsage;
      }
      return replay();
    }
    if (load->count() == 0 || trace->count() > 0) {
      fmt::print(stderr, "haltpolld simulate --guest: needs --load FILE and takes no --trace\n");
      return kUsage;
    }
    if (const std::string r = given(replay_only); !r.empty()) {
      fmt::print(stderr, "haltpolld simulate --guest: {}: the trace replay's, not the guest's\n", r);
      return kUsage;
    }
    GuestSimulateOptions run = *o;
    run.json = json->count() > 0;
    if (set->count() > 0) run.sets = set->results();  // (as<>() of no result is one empty string)
    return run_simulate_guest(run, std::cout, std::cerr);
  };
}

}  // namespace haltpolld::des
