// One snapshot per tick, counted on the real haltpolld: every file of its fake sysfs tree is watched
// with inotify (IN_OPEN and both closes on each directory), and the ticks are counted by the metrics
// textfile, which the daemon replaces (a rename into its directory) at the end of each tick. Between
// two renames lie exactly one tick's reads, so over N ticks with no client call each kernel file
// is opened at most N times, and the files every tick needs exactly N times (the count is real).
// Then, with ticks far apart: GetStats reads no file at all, GetStatus only the parameters.
#include "daemon_fixture.hpp"

#include <sys/inotify.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

using daemontest::RawClient;
using nlohmann::json;
using testsupport::FakeSysfs;
using testsupport::GuestKind;
using namespace std::chrono_literals;

namespace {

const char* const kParams[] = {"guest_halt_poll_ns", "guest_halt_poll_grow", "guest_halt_poll_grow_start",
                               "guest_halt_poll_shrink", "guest_halt_poll_allow_shrink"};

std::string param_file(const char* name) { return std::string("sys/module/haltpoll/parameters/") + name; }

// What happened under the tree between two points: opens per file (relative to the root) and the
// opens for writing among them, and the textfile's replacements (ticks).
struct Opens {
  std::map<std::string, unsigned> opened, written;
  unsigned ticks = 0;
  unsigned of(const std::string& rel) const {
    auto it = opened.find(rel);
    return it == opened.end() ? 0 : it->second;
  }
  std::string dump() const {
    std::ostringstream o;
    o << ticks << " ticks;";
    for (const auto& [f, n] : opened) o << " " << f << "=" << n << (written.count(f) ? "(w)" : "");
    return o.str();
  }
};

class OpenCounter {
 public:
  OpenCounter(const std::string& root, const std::string& textfile_dir, std::string textfile_name)
      : textfile_(std::move(textfile_name)) {
    fd_ = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    REQUIRE(fd_ >= 0);
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      if (!e.is_directory()) continue;
      watch(e.path().string(), std::filesystem::relative(e.path(), root).string() + "/");
    }
    watch(root, "");
    text_wd_ = ::inotify_add_watch(fd_, textfile_dir.c_str(), IN_MOVED_TO);
    REQUIRE(text_wd_ >= 0);
  }
  ~OpenCounter() { ::close(fd_); }
  OpenCounter(const OpenCounter&) = delete;
  OpenCounter& operator=(const OpenCounter&) = delete;

  // Drops what happened so far, waits for the end of a tick, then counts until `ticks` more ends.
  Opens over_ticks(unsigned ticks) {
    drain(0ms);
    Opens discard;
    while (discard.ticks == 0) REQUIRE(read_events(discard, 30s));
    Opens o;
    while (o.ticks < ticks) REQUIRE(read_events(o, 30s));
    return o;
  }
  // Everything queued now (the daemon queued a call's opens before it replied).
  Opens drain(std::chrono::milliseconds wait) {
    Opens o;
    read_events(o, wait);
    while (read_events(o, 0ms)) {
    }
    return o;
  }

 private:
  void watch(const std::string& dir, const std::string& rel) {
    // The closes too: inotify merges an event into an identical one still queued, so two opens of a
    // file in a row would count as one without the close between them.
    const int wd = ::inotify_add_watch(fd_, dir.c_str(), IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE);
    REQUIRE(wd >= 0);
    dirs_[wd] = rel;
  }
  // One read() of the queue, after waiting up to `wait` for it; stops at a tick's end so that
  // over_ticks() never counts past it. False when nothing came.
  bool read_events(Opens& o, std::chrono::milliseconds wait) {
    if (!pending_.empty()) return consume(o);
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
    alignas(inotify_event) char buf[64 * (sizeof(inotify_event) + NAME_MAX + 1)];
    const ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n <= 0) return false;
    for (ssize_t off = 0; off < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + off);
      pending_.push_back({e->wd, e->mask, e->len ? std::string(e->name) : std::string()});
      off += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
    return consume(o);
  }
  bool consume(Opens& o) {
    REQUIRE(std::none_of(pending_.begin(), pending_.end(), [](const Event& e) { return e.mask & IN_Q_OVERFLOW; }));
    while (!pending_.empty()) {
      const Event e = pending_.front();
      pending_.erase(pending_.begin());
      if (e.wd == text_wd_) {
        if (e.name == textfile_) {
          ++o.ticks;
          return true;  // the rest belongs to the next tick
        }
        continue;
      }
      if ((e.mask & IN_ISDIR) || e.name.empty()) continue;  // a directory listed, not a file read
      const std::string rel = dirs_[e.wd] + e.name;
      if (e.mask & IN_OPEN) ++o.opened[rel];
      if (e.mask & IN_CLOSE_WRITE) ++o.written[rel];
    }
    return true;
  }

  struct Event {
    int wd;
    std::uint32_t mask;
    std::string name;
  };
  int fd_ = -1;
  int text_wd_ = -1;
  std::string textfile_;
  std::map<int, std::string> dirs_;
  std::vector<Event> pending_;
};

// A haltpolld on its own fake tree of the given kind, with a metrics textfile beside its socket.
struct TreeDaemon {
  FakeSysfs tree;
  std::string dir = daemontest::make_temp_dir();
  std::string socket = dir + "/io.haltpolld";
  std::string textfile = dir + "/metrics/haltpolld.prom";
  std::unique_ptr<testsupport::Subprocess> proc;

  TreeDaemon(GuestKind kind, json config) : tree(testsupport::fake_guest(kind)) {
    std::filesystem::create_directories(dir + "/metrics");
    config["metrics"] = {{"textfile", textfile}};
    config["state_dir"] = dir + "/state";
    std::ofstream(dir + "/haltpolld.json") << config.dump(2);
    proc = std::make_unique<testsupport::Subprocess>(std::vector<std::string>{
        HALTPOLLD_BIN, "--config", dir + "/haltpolld.json", "--socket", socket, "--sysfs-root", tree.root()});
    REQUIRE(proc->wait_for_output("listening on", 60s));
  }
  ~TreeDaemon() {
    proc->signal(SIGTERM);
    proc->wait(60s);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // The files of the tree a tick needs every time on this kind of guest: the parameters (the
  // snapshot's), each CPU's cpuidle states (the Observation's), /proc/stat, and what decides the
  // polling besides the cap (the Observation's overrides): the QoS device, the present list, each
  // CPU's resume latency request and the governor.
  std::vector<std::string> read_every_tick(GuestKind kind) const {
    std::vector<std::string> files;
    for (const char* p : kParams) files.push_back(param_file(p));
    files.push_back("proc/stat");
    files.push_back("dev/cpu_dma_latency");
    files.push_back("sys/devices/system/cpu/present");
    files.push_back("sys/devices/system/cpu/cpuidle/current_governor");
    for (int cpu = 0; cpu < 2; ++cpu)
      files.push_back("sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/power/pm_qos_resume_latency_us");
    if (kind == GuestKind::haltpoll_driver)
      for (int cpu = 0; cpu < 2; ++cpu)
        for (int k = 0; k < 2; ++k)
          for (const char* f : {"name", "usage", "time"})
            files.push_back("sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpuidle/state" + std::to_string(k) + "/" + f);
    return files;
  }
};

const unsigned kTicks = 8;

// The governor is read once per tick in both modes: in kernel mode the look for another writer
// and the overrides share one read (the held reads of sysfs_edges()).
void check_once_per_tick(const Opens& o, const std::vector<std::string>& every_tick) {
  INFO(o.dump());
  REQUIRE(o.ticks == kTicks);
  for (const auto& [file, n] : o.opened) {
    INFO(file);
    CHECK(n <= kTicks);
  }
  for (const auto& f : every_tick) {
    INFO(f);
    CHECK(o.of(f) >= kTicks);
  }
  // The cpuidle driver is read at the start and on a config change, not per tick; the governor
  // exactly once per tick (in the list above, and at most once by the loop before it).
  CHECK(o.of("sys/devices/system/cpu/cpuidle/current_driver") == 0);
  CHECK(o.of("sys/devices/system/cpu/cpuidle/current_governor") == kTicks);
  // No holder is looked for while the QoS device is not 0: no process's comm is read.
  for (const auto& [file, n] : o.opened) CHECK((file.rfind("proc/", 0) != 0 || file == "proc/stat"));
}

}  // namespace

TEST_CASE("tick: each kernel file is opened at most once per tick, with no client call") {
  for (GuestKind kind : {GuestKind::haltpoll_driver, GuestKind::no_driver}) {
    DYNAMIC_SECTION(testsupport::to_string(kind) << ", observe mode") {
      TreeDaemon d(kind, {{"mode", "observe"}, {"tuner", {{"interval_ms", 100}, {"sweep_interval_ms", 100}}}});
      OpenCounter c(d.tree.root(), d.dir + "/metrics", "haltpolld.prom");
      const Opens o = c.over_ticks(kTicks);
      check_once_per_tick(o, d.read_every_tick(kind));
      CHECK(o.written.empty());
    }
  }
  SECTION("haltpoll driver, kernel mode with the static cap in force") {
    TreeDaemon d(GuestKind::haltpoll_driver, {{"mode", "kernel"},
                                              {"tuner", {{"interval_ms", 100}, {"sweep_interval_ms", 100}, {"policy", "static"}}},
                                              {"pool", {{"guest_halt_poll_ns", 100000}}}});
    OpenCounter c(d.tree.root(), d.dir + "/metrics", "haltpolld.prom");
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (d.tree.param("guest_halt_poll_ns") != "100000" && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(20ms);
    REQUIRE(d.tree.param("guest_halt_poll_ns") == "100000");
    const Opens o = c.over_ticks(kTicks);
    // One read of each parameter serves the look for another writer, the value in force and the
    // snapshot (Controller::tick_status).
    check_once_per_tick(o, d.read_every_tick(GuestKind::haltpoll_driver));
    INFO(o.dump());
    CHECK(o.written.empty());  // the cap in force: nothing written again
  }
}

TEST_CASE("tick: with the QoS at 0, its holders are looked for when it turns 0, not every tick") {
  TreeDaemon d(GuestKind::haltpoll_driver,
               {{"mode", "observe"}, {"tuner", {{"interval_ms", 100}, {"sweep_interval_ms", 100}}}});
  d.tree.add_holder(4242, "cyclictest", "/dev/cpu_dma_latency");
  d.tree.set_cpu_dma_latency(0);
  RawClient client(d.socket);
  REQUIRE(client.connected());
  // Until a tick has seen the 0 and named the holder.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  json po;
  while (std::chrono::steady_clock::now() < deadline) {
    po = client.call("io.haltpolld.GetStatus")["parameters"]["polling_overrides"];
    if (po.is_object() && po["cpu_dma_latency"]["holders"].size() == 1) break;
    std::this_thread::sleep_for(20ms);
  }
  INFO(po.dump());
  REQUIRE(po["cpu_dma_latency"]["holders"].size() == 1);
  OpenCounter c(d.tree.root(), d.dir + "/metrics", "haltpolld.prom");
  const Opens o = c.over_ticks(kTicks);
  INFO(o.dump());
  check_once_per_tick(o, d.read_every_tick(GuestKind::haltpoll_driver));
  CHECK(o.of("proc/4242/comm") == 0);  // the walk is repeated every 30 s, or when the value changes
}

TEST_CASE("tick: GetStats reads no kernel file, GetStatus only the parameters") {
  const GuestKind kind = GuestKind::haltpoll_driver;
  // Ticks an hour apart: whatever is opened now is the clients' doing.
  TreeDaemon d(kind, {{"mode", "observe"}, {"tuner", {{"interval_ms", 3'600'000}, {"sweep_interval_ms", 3'600'000}}}});
  OpenCounter c(d.tree.root(), d.dir + "/metrics", "haltpolld.prom");
  RawClient client(d.socket);
  REQUIRE(client.connected());
  c.drain(200ms);

  for (int i = 0; i < 5; ++i) {
    const json r = client.call("io.haltpolld.GetStats");
    REQUIRE(r.contains("parameters"));
    CHECK(r["parameters"]["kernel"]["guest_halt_poll_ns"] == 200000);
  }
  {
    const Opens o = c.drain(100ms);
    INFO("after GetStats: " << o.dump());
    CHECK(o.opened.empty());
  }

  const json st = client.call("io.haltpolld.GetStatus");
  REQUIRE(st.contains("parameters"));
  CHECK(st["parameters"]["mode"] == "observe");
  {
    const Opens o = c.drain(100ms);
    INFO("after GetStatus: " << o.dump());
    for (const char* p : kParams) CHECK(o.of(param_file(p)) == 1);  // one fresh snapshot
    CHECK(o.opened.size() == std::size(kParams));                     // no cpuidle state, no /proc/stat
  }

  // The fresh snapshot's mode agrees with the tick's: one function decides both.
  const json stats = client.call("io.haltpolld.GetStats");
  CHECK(stats["parameters"]["mode"] == st["parameters"]["mode"]);
  CHECK(c.drain(100ms).opened.empty());
}
