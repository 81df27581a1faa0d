#include "control/prometheus.hpp"
#include "sysfs/file_io.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>
#include <vector>
#include <sstream>

using namespace haltpolld;

namespace {
std::string temp_dir() {
  char tmpl[] = "/tmp/haltpolld-metrics-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  return tmpl;
}
StatsSnapshot sample() {
  StatsSnapshot s;
  s.version = "1.0";
  s.mode = "observe";
  s.backend = "x86-pause";
  CpuStats c;
  c.cpu = 1;
  c.tasks_run = 10;
  c.poll_ns = 1500000000;
  c.window_ns = 50000;
  c.latency_buckets = {{1000, 4}, {2000, 5}, {UINT64_MAX, 1}};
  c.latency_count = 10;
  c.latency_sum_ns = 15000;
  s.cpus.push_back(c);
  s.kernel.present = true;
  s.kernel.guest_halt_poll_ns = 200000;
  s.kernel.guest_halt_poll_allow_shrink = true;
  return s;
}
}  // namespace

TEST_CASE("Prometheus text: families, base units, cumulative histogram") {
  std::string t = render_prometheus(sample());
  CHECK(t.find("# TYPE haltpoll_worker_tasks_total counter\n") != std::string::npos);
  CHECK(t.find("haltpoll_worker_tasks_total{cpu=\"1\"} 10\n") != std::string::npos);
  CHECK(t.find("haltpoll_worker_poll_seconds_total{cpu=\"1\"} 1.5\n") != std::string::npos);
  CHECK(t.find("haltpoll_worker_window_seconds{cpu=\"1\"} 5e-05\n") != std::string::npos);
  CHECK(t.find("# TYPE haltpoll_wake_latency_seconds histogram\n") != std::string::npos);
  CHECK(t.find("haltpoll_wake_latency_seconds_bucket{cpu=\"1\",le=\"1e-06\"} 4\n") != std::string::npos);
  CHECK(t.find("haltpoll_wake_latency_seconds_bucket{cpu=\"1\",le=\"2e-06\"} 9\n") != std::string::npos);
  CHECK(t.find("haltpoll_wake_latency_seconds_bucket{cpu=\"1\",le=\"+Inf\"} 10\n") != std::string::npos);
  CHECK(t.find("haltpoll_wake_latency_seconds_count{cpu=\"1\"} 10\n") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_guest_halt_poll_seconds 0.0002\n") != std::string::npos);
  CHECK(t.find("haltpoll_kernel_guest_halt_poll_allow_shrink 1\n") != std::string::npos);
  CHECK(t.find("haltpoll_info{version=\"1.0\",mode=\"observe\",backend=\"x86-pause\"} 1\n") != std::string::npos);
  // Every sample line belongs to a declared family and every counter name ends in _total.
  std::istringstream in(t);
  std::string line, family, type;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream l(line.substr(7));
      l >> family >> type;
      if (type == "counter") CHECK(family.size() > 6);
      if (type == "counter") CHECK(family.substr(family.size() - 6) == "_total");
      continue;
    }
    if (line.rfind("#", 0) == 0) continue;
    CHECK(line.rfind(family, 0) == 0);
  }
}

TEST_CASE("label values are escaped") {
  StatsSnapshot s = sample();
  s.version = "a\"b\\c\nd";
  CHECK(render_prometheus(s).find("version=\"a\\\"b\\\\c\\nd\"") != std::string::npos);
}

TEST_CASE("replace_file_atomically replaces the file and leaves no temporary") {
  auto dir = temp_dir();
  std::string path = dir + "/haltpolld.prom";
  CHECK(replace_file_atomically(path, "a 1\n") == 0);
  CHECK(replace_file_atomically(path, "b 2\n") == 0);
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(content == "b 2\n");
  int files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 1);
  CHECK_FALSE(replace_file_atomically(dir + "/missing/x.prom", "x") == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("kernel parameters are read from a fake sysfs root") {
  auto dir = temp_dir();
  CHECK_FALSE(read_kernel_haltpoll_params(dir).present);
  std::string p = dir + "/sys/module/haltpoll/parameters";
  std::filesystem::create_directories(p);
  std::ofstream(p + "/guest_halt_poll_ns") << "123456\n";
  std::ofstream(p + "/guest_halt_poll_grow") << "2\n";
  std::ofstream(p + "/guest_halt_poll_shrink") << "garbage\n";
  std::ofstream(p + "/guest_halt_poll_allow_shrink") << "N\n";
  auto k = read_kernel_haltpoll_params(dir);
  CHECK(k.present);
  CHECK(k.guest_halt_poll_ns == 123456u);
  CHECK(k.guest_halt_poll_grow == 2u);
  CHECK_FALSE(k.guest_halt_poll_shrink);
  CHECK_FALSE(k.guest_halt_poll_grow_start);
  CHECK(k.guest_halt_poll_allow_shrink == false);
  std::filesystem::remove_all(dir);
}

TEST_CASE("stats JSON filters by CPU and carries the kernel state") {
  auto j = stats_to_json(sample(), 1u, false);
  CHECK(j["cpus"].size() == 1);
  CHECK(j["kernel"]["guest_halt_poll_ns"] == 200000);
  CHECK(j["kernel"]["guest_halt_poll_grow"].is_null());
  CHECK(stats_to_json(sample(), 7u, false)["cpus"].empty());
}

// Every counter of the library's table reaches GetStats and Prometheus: the test walks the table
// itself, so a counter added there is checked without an edit here. Counter i holds i + 1 (its
// *_ns form (i + 1) s), so each sample's value says which counter it is.
TEST_CASE("every worker counter of HALTPOLL_WORKER_COUNTERS reaches GetStats and the metrics") {
  haltpoll::WorkerStats w;
  w.cpu = 3;
  struct Entry {
    std::string name;
    bool counter;
    std::uint64_t value;
  };
  std::vector<Entry> table;
#define FILL(name, kind, source, help)                                                          \
  {                                                                                             \
    const std::uint64_t n = table.size() + 1;                                                   \
    w.name = std::string_view(#name).ends_with("_ns") ? n * 1'000'000'000 : n;                  \
    table.push_back({#name, std::string_view(#kind) == "counter", w.name});                     \
  }
  HALTPOLL_WORKER_COUNTERS(FILL)
#undef FILL
  REQUIRE(table.size() >= 17);  // the table as of this test; more is fine

  StatsSnapshot s;
  s.cpus.push_back(CpuStats::of(w, {1000, 2000}));
  const auto j = stats_to_json(s, std::nullopt, false);
  REQUIRE(j["cpus"].size() == 1);
  for (const auto& e : table) {
    INFO(e.name);
    CHECK(j["cpus"][0][e.name] == e.value);
  }

  const std::string text = render_prometheus(s);
  std::map<std::string, std::string> types;  // family → TYPE
  std::map<std::string, std::string> by_value;  // sample value → family, for the cpu="3" worker series
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream l(line.substr(7));
      std::string family, type;
      l >> family >> type;
      types[family] = type;
    } else if (line.rfind("haltpoll_worker_", 0) == 0 && line.find("{cpu=\"3\"} ") != std::string::npos) {
      const auto brace = line.find('{');
      const std::string value = line.substr(line.rfind(' ') + 1);
      CHECK(by_value.count(value) == 0);  // one series per counter
      by_value[value] = line.substr(0, brace);
    }
  }
  for (std::size_t i = 0; i < table.size(); ++i) {
    const auto& e = table[i];
    INFO(e.name);
    const auto it = by_value.find(std::to_string(i + 1));
    REQUIRE(it != by_value.end());
    const std::string& family = it->second;
    std::string stem = e.name == "tasks_run" ? "tasks" : e.name;  // the family's name from before the table
    const bool ns = stem.size() > 3 && stem.substr(stem.size() - 3) == "_ns";
    if (ns) stem.resize(stem.size() - 3);
    CHECK(family.rfind("haltpoll_worker_" + stem + (ns ? "_seconds" : ""), 0) == 0);
    CHECK(types[family] == (e.counter ? "counter" : "gauge"));
    CHECK((family.size() > 6 && family.substr(family.size() - 6) == "_total") == e.counter);
    CHECK(text.find("# HELP " + family + " ") != std::string::npos);
  }
}
