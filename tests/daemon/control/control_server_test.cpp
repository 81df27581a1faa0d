// The real haltpolld binary on a real socket: every method, every error, the bounds, the signals.
#include "daemon_fixture.hpp"

#include <grp.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

using daemontest::Daemon;
using daemontest::RawClient;
using nlohmann::json;
using namespace std::chrono_literals;

namespace {
std::string error_of(const json& reply) { return reply.value("error", ""); }
const json kFast = {{"tuner", {{"interval_ms", 200}}}, {"socket", {{"mode", "0666"}}}};
}  // namespace

TEST_CASE("control: every io.haltpolld method answers") {
  Daemon d(kFast);
  RawClient c(d.socket);
  REQUIRE(c.connected());

  auto status = c.call("io.haltpolld.GetStatus")["parameters"];
  CHECK(status["version"] == HALTPOLL_VERSION_STRING_FOR_TEST);
  CHECK(status["mode"] == "observe");
  CHECK(status["mode_reason"].is_string());
  CHECK(status["backend"].is_string());
  CHECK_FALSE(status["cpus"].empty());
  CHECK(status["kernel"]["present"] == true);
  CHECK(status["kernel"]["guest_halt_poll_ns"] == 200000);

  auto stats = c.call("io.haltpolld.GetStats")["parameters"];
  REQUIRE(stats["cpus"].size() == status["cpus"].size());
  int cpu = status["cpus"][0];
  auto one = c.call("io.haltpolld.GetStats", {{"cpu", cpu}, {"histogram", true}})["parameters"];
  REQUIRE(one["cpus"].size() == 1);
  CHECK(one["cpus"][0]["latency"]["buckets"].is_array());

  auto cfg = c.call("io.haltpolld.GetConfig")["parameters"];
  CHECK(cfg["config"]["tuner"]["interval_ms"] == 200);
  CHECK(cfg["file"] == d.config_file);

  auto set = c.call("io.haltpolld.SetConfig", {{"config", {{"tuner", {{"max_poll_cpu_percent", 5}}}}}});
  REQUIRE(error_of(set).empty());
  CHECK(c.call("io.haltpolld.GetConfig")["parameters"]["config"]["tuner"]["max_poll_cpu_percent"] == 5.0);

  auto reload = c.call("io.haltpolld.Reload");
  REQUIRE(error_of(reload).empty());
  // The file did not set max_poll_cpu_percent: Reload goes back to the file (and the default).
  CHECK(reload["parameters"]["config"]["tuner"]["max_poll_cpu_percent"] == 10.0);

  CHECK(error_of(c.call("io.haltpolld.ResetStats")).empty());
  CHECK(c.call("io.haltpolld.GetDecisions")["parameters"]["decisions"].is_array());
  auto metrics = c.call("io.haltpolld.GetMetrics")["parameters"]["text"].get<std::string>();
  CHECK(metrics.find("# TYPE haltpoll_wake_latency_seconds histogram") != std::string::npos);
  CHECK(metrics.find("haltpoll_kernel_guest_halt_poll_seconds 0.0002") != std::string::npos);

  auto info = c.call("org.varlink.service.GetInfo")["parameters"];
  CHECK(info["interfaces"] == json({"io.haltpolld", "org.varlink.service"}));
  auto desc = c.call("org.varlink.service.GetInterfaceDescription", {{"interface", "io.haltpolld"}})["parameters"];
  CHECK(desc["description"].get<std::string>().find("method Watch(") != std::string::npos);

  // Watch: `more` replies carry continues until count is reached; then the connection serves calls again.
  REQUIRE(c.send({{"method", "io.haltpolld.Watch"}, {"parameters", {{"interval_ms", 100}, {"count", 3}}}, {"more", true}}));
  REQUIRE(c.send({{"method", "io.haltpolld.GetStatus"}}));  // queued behind the stream
  for (int i = 0; i < 3; ++i) {
    auto r = c.recv_message();
    REQUIRE(r);
    CHECK((*r).value("continues", false) == (i < 2));
    CHECK((*r)["parameters"]["cpus"].is_array());
  }
  auto after = c.recv_message();
  REQUIRE(after);
  CHECK((*after)["parameters"]["version"].is_string());

  // oneway: no reply; the next call's reply is the next message.
  REQUIRE(c.send({{"method", "io.haltpolld.ResetStats"}, {"oneway", true}}));
  CHECK(c.call("io.haltpolld.GetConfig")["parameters"].contains("config"));
  CHECK(d.stop() == 0);
}

TEST_CASE("control: every error, and the connection survives the non-fatal ones") {
  Daemon d(kFast);
  RawClient c(d.socket);
  CHECK(error_of(c.call("io.nothing.Get")) == "org.varlink.service.InterfaceNotFound");
  CHECK(error_of(c.call("io.haltpolld.Nope")) == "org.varlink.service.MethodNotFound");
  auto ip = c.call("io.haltpolld.GetStats", {{"cpu", "zero"}});
  CHECK(error_of(ip) == "org.varlink.service.InvalidParameter");
  CHECK(ip["parameters"]["parameter"] == "cpu");
  CHECK(error_of(c.call("io.haltpolld.Watch")) == "org.varlink.service.ExpectedMore");
  CHECK(error_of(c.call("io.haltpolld.GetStats", {{"cpu", 8000}})) == "io.haltpolld.NoSuchCpu");
  auto refused = c.call("io.haltpolld.SetConfig", {{"config", {{"tuner", {{"interval_ms", 1}}}}}});
  CHECK(error_of(refused) == "io.haltpolld.ConfigRefused");
  CHECK(refused["parameters"]["path"] == "/tuner/interval_ms");
  auto restart = c.call("io.haltpolld.SetConfig", {{"config", {{"mode", "kernel"}}}});
  CHECK(error_of(restart) == "io.haltpolld.RestartRequired");
  CHECK(restart["parameters"]["paths"] == json({"/mode"}));
  CHECK(error_of(c.call("org.varlink.service.GetInterfaceDescription", {{"interface", "io.none"}})) ==
        "org.varlink.service.InterfaceNotFound");
  // Still the same connection, still answering.
  CHECK(c.call("io.haltpolld.GetStatus")["parameters"]["mode"] == "observe");

  SECTION("malformed JSON: error, then closed") {
    RawClient m(d.socket);
    REQUIRE(m.send_raw(std::string("{not json") + '\0'));
    auto r = m.recv_message();
    REQUIRE(r);
    CHECK(error_of(*r) == "io.haltpolld.MalformedMessage");
    CHECK(m.wait_eof(30s));
  }
  SECTION("not a call: error, then closed") {
    RawClient m(d.socket);
    REQUIRE(m.send_raw(std::string("[1,2]") + '\0'));
    CHECK(error_of(*m.recv_message()) == "io.haltpolld.MalformedMessage");
    CHECK(m.wait_eof(30s));
  }
  SECTION("oversized: error, then closed") {
    RawClient m(d.socket);
    m.send_raw(std::string(70 * 1024, 'x'));
    auto r = m.recv_message();
    REQUIRE(r);
    CHECK(error_of(*r) == "io.haltpolld.MessageTooLarge");
    CHECK((*r)["parameters"]["limit"] == 65536);
    CHECK(m.wait_eof(30s));
  }
  SECTION("half-sent then hang-up, and binary garbage") {
    {
      RawClient m(d.socket);
      m.send_raw(R"({"method":"io.haltpolld.GetSta)");
    }
    {
      RawClient m(d.socket);
      std::string garbage;
      for (int i = 0; i < 4096; ++i) garbage.push_back(static_cast<char>((i * 7919) & 0xff));
      m.send_raw(garbage);
    }
  }
  CHECK(d.alive());
  RawClient again(d.socket);
  CHECK(again.call("io.haltpolld.GetStatus")["parameters"]["mode"] == "observe");
  CHECK(d.stop() == 0);
}

TEST_CASE("control: changes need root or the admin group; reading is open") {
  Daemon d(kFast);
  auto as_nobody = [&](std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", HALTPOLLCTL_BIN,
                                     "--socket", d.socket};
    for (auto& a : args) argv.push_back(a);
    return testsupport::run(argv);
  };
  auto status = as_nobody({"status", "--json"});
  CHECK(status.code == 0);
  CHECK(status.out.find("\"mode\"") != std::string::npos);
  for (auto args : std::vector<std::vector<std::string>>{{"reset"}, {"reload"}, {"config", "set", "tuner.interval_ms", "500"}}) {
    auto r = as_nobody(args);
    CHECK(r.code == 4);
    CHECK(r.err.find("permission denied") != std::string::npos);
  }
  // The socket mode decides who may connect at all.
  Daemon closed(json{{"socket", {{"mode", "0600"}}}});
  auto r = testsupport::run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", HALTPOLLCTL_BIN, "--socket",
                             closed.socket, "status"});
  CHECK(r.code == 4);
  struct stat st {};
  REQUIRE(::stat(closed.socket.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("control: 100 concurrent clients are all served") {
  Daemon d(kFast);
  constexpr int kClients = 100;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<RawClient>(d.socket));
    REQUIRE(clients.back()->connected());
  }
  // Every client has a call in flight at once, then reads its reply.
  for (auto& c : clients) REQUIRE(c->send({{"method", "io.haltpolld.GetStats"}}));
  int ok = 0;
  for (auto& c : clients) {
    auto r = c->recv_message(30s);
    if (r && error_of(*r).empty() && (*r)["parameters"]["cpus"].is_array()) ++ok;
  }
  CHECK(ok == kClients);
  // And from 8 threads at once, 20 calls each on their own connections.
  std::atomic<int> good{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      RawClient c(d.socket);
      for (int i = 0; i < 20; ++i) {
        if (!c.send({{"method", "io.haltpolld.GetStatus"}})) return;
        auto r = c.recv_message(30s);
        if (r && error_of(*r).empty()) ++good;
      }
    });
  for (auto& t : threads) t.join();
  CHECK(good == 160);
  auto status = clients[0]->call("io.haltpolld.GetStatus")["parameters"];
  CHECK(status["control"]["connections"].get<int>() >= kClients);
  clients.clear();
  CHECK(d.stop() == 0);
}

TEST_CASE("control: connection limit and idle timeout") {
  // 2 s, not less: a and b must still be open when c is refused, after two round trips to a
  // (sanitizer) daemon on a loaded machine.
  Daemon d(json{{"socket", {{"max_connections", 2}, {"idle_timeout_ms", 2000}}}});
  RawClient a(d.socket), b(d.socket);
  // The idle clock restarts at each complete message, not at partial bytes.
  auto last_message = std::chrono::steady_clock::now();
  CHECK(a.call("io.haltpolld.GetStatus")["parameters"].contains("version"));
  CHECK(b.call("io.haltpolld.GetStatus")["parameters"].contains("version"));
  RawClient c(d.socket);
  auto r = c.recv_message();
  REQUIRE(r);
  CHECK(error_of(*r) == "io.haltpolld.TooManyConnections");
  CHECK(c.wait_eof(30s));

  // A half-sent message does not keep a connection open past the idle timeout.
  a.send_raw(R"({"method":"io.haltpolld.Get)");
  CHECK(a.wait_eof(30s));
  CHECK(std::chrono::steady_clock::now() - last_message >= 2000ms);
  CHECK(b.wait_eof(30s));
  // The slots are free again.
  RawClient e(d.socket);
  CHECK(e.call("io.haltpolld.GetStatus")["parameters"].contains("version"));
  CHECK(d.stop() == 0);
}

TEST_CASE("control: SIGHUP applies a good file and keeps the running config on a broken one") {
  Daemon d(kFast);
  RawClient c(d.socket);
  d.write_config(json{{"tuner", {{"interval_ms", 300}}}, {"socket", {{"mode", "0666"}}}});
  d.proc->signal(SIGHUP);
  REQUIRE(d.proc->wait_for_output("config applied", 30s));
  CHECK(c.call("io.haltpolld.GetConfig")["parameters"]["config"]["tuner"]["interval_ms"] == 300);

  d.write_config_text(R"({"tuner": {"interval_ms": "soon"}})");
  d.proc->signal(SIGHUP);
  REQUIRE(d.proc->wait_for_output("reload refused", 30s));
  CHECK(d.proc->err().find("/tuner/interval_ms") != std::string::npos);
  CHECK(c.call("io.haltpolld.GetConfig")["parameters"]["config"]["tuner"]["interval_ms"] == 300);
  auto r = c.call("io.haltpolld.Reload");
  CHECK(error_of(r) == "io.haltpolld.ConfigRefused");
  CHECK(r["parameters"]["path"] == "/tuner/interval_ms");
  CHECK(r["parameters"]["file"] == d.config_file);

  d.write_config_text("{ this is not json");
  d.proc->signal(SIGHUP);
  REQUIRE(d.proc->wait_for_output("not valid JSON", 30s));
  CHECK(c.call("io.haltpolld.GetStatus")["parameters"]["mode"] == "observe");
  CHECK(d.alive());

  // A restart-only key changed in the file: reported, running value kept.
  d.write_config(json{{"cpus", "0"}, {"socket", {{"mode", "0666"}}}});
  auto rr = c.call("io.haltpolld.Reload");
  REQUIRE(error_of(rr).empty());
  CHECK(rr["parameters"]["restart_required"] == json({"/cpus"}));
  CHECK(rr["parameters"]["config"]["cpus"] == "all");
  auto metrics = c.call("io.haltpolld.GetMetrics")["parameters"]["text"].get<std::string>();
  CHECK(metrics.find("haltpoll_config_reload_failures_total 3") != std::string::npos);
  CHECK(d.stop() == 0);
}

namespace {
std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
bool wait_for_regular(const std::string& path, std::chrono::milliseconds timeout = 30s) {
  for (auto end = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < end;
       std::this_thread::sleep_for(50ms)) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("control: SIGTERM and SIGINT remove the socket, the textfile and free the lock") {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string dir = daemontest::make_temp_dir();
    const std::string prom = dir + "/haltpolld.prom";
    json cfg = kFast;
    cfg["metrics"]["textfile"] = prom;
    Daemon d(cfg);
    RawClient c(d.socket);
    REQUIRE(wait_for_regular(prom));
    CHECK(slurp(prom).find("haltpoll_info{") != std::string::npos);
    // 0644 whatever the umask (the unit's is 0077): node_exporter runs as another user.
    struct stat st {};
    REQUIRE(::stat(prom.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0644);
    auto other = testsupport::run({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/cat", prom});
    CHECK(other.code == 0);
    CHECK(other.out.find("haltpoll_info{") != std::string::npos);
    CHECK(d.stop(sig) == 0);
    CHECK(d.proc->err().find("stopped") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(d.socket));
    CHECK_FALSE(std::filesystem::exists(prom));
    CHECK(c.wait_eof(30s));
    // The lock is free: a new instance starts on the same socket.
    d.start();
    CHECK(d.stop() == 0);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("hardening: metrics.textfile is restart-only, a .prom name, and never written through what is planted there") {
  const std::string dir = daemontest::make_temp_dir();
  const std::string prom = dir + "/haltpolld.prom";
  const std::string victim = dir + "/victim";
  std::ofstream(victim) << "precious\n";
  SECTION("pointed at the daemon's own state file or lock: refused at start") {
    Daemon probe(kFast);
    const std::string state = probe.dir + "/haltpoll-params.json";
    probe.stop();
    for (const std::string& t : {state, probe.socket + ".lock", probe.socket}) {
      std::ofstream(probe.config_file) << json{{"metrics", {{"textfile", t}}}}.dump();
      auto r = testsupport::run({HALTPOLLD_BIN, "--config", probe.config_file, "--socket", probe.socket, "--sysfs-root", probe.sysfs});
      CHECK(r.code == 3);
      CHECK(r.err.find("/metrics/textfile") != std::string::npos);
    }
  }
  SECTION("SetConfig cannot move it") {
    json cfg = kFast;
    cfg["metrics"]["textfile"] = prom;
    Daemon d(cfg);
    RawClient c(d.socket);
    auto r = c.call("io.haltpolld.SetConfig", {{"config", {{"metrics", {{"textfile", dir + "/other.prom"}}}}}});
    CHECK(error_of(r) == "io.haltpolld.RestartRequired");
    CHECK(d.stop() == 0);
  }
  SECTION("a FIFO and a symlink planted at the name are replaced, never opened") {
    REQUIRE(::mkfifo(prom.c_str(), 0666) == 0);
    const std::string prom2 = dir + "/second.prom";
    std::filesystem::create_symlink(victim, prom2);
    json cfg = kFast;
    cfg["metrics"]["textfile"] = prom;
    Daemon d(cfg);
    REQUIRE(wait_for_regular(prom));
    CHECK(d.alive());  // the control thread did not block on the FIFO
    CHECK(d.stop() == 0);
    cfg["metrics"]["textfile"] = prom2;
    d.write_config(cfg);
    d.start();
    REQUIRE(wait_for_regular(prom2));
    CHECK(slurp(victim) == "precious\n");
    CHECK(d.stop() == 0);
    CHECK(slurp(victim) == "precious\n");
  }
  SECTION("at stop only the file the daemon wrote is removed") {
    // One tick an hour: the file is written once, at start, and not again before the stop.
    json cfg = {{"tuner", {{"interval_ms", 3600000}}}, {"metrics", {{"textfile", prom}}}};
    Daemon d(cfg);
    REQUIRE(wait_for_regular(prom));
    // Someone swaps in a symlink to a victim: at the stop neither it nor its target goes.
    std::filesystem::remove(prom);
    std::filesystem::create_symlink(victim, prom);
    CHECK(d.stop() == 0);
    CHECK(std::filesystem::is_symlink(prom));
    CHECK(slurp(victim) == "precious\n");
    // Or another regular file: not the daemon's either.
    std::filesystem::remove(prom);
    d.start();
    REQUIRE(wait_for_regular(prom));
    std::filesystem::remove(prom);
    std::ofstream(prom) << "someone else's\n";
    CHECK(d.stop() == 0);
    CHECK(slurp(prom) == "someone else's\n");
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("control: a second instance on the same socket is refused clearly") {
  Daemon d(kFast);
  auto second = testsupport::run({HALTPOLLD_BIN, "--config", d.config_file, "--socket", d.socket, "--sysfs-root", d.sysfs});
  CHECK(second.code == 4);
  CHECK(second.err.find("already running") != std::string::npos);
  CHECK(d.alive());
  CHECK(d.stop() == 0);
}

TEST_CASE("hardening: a second instance on another socket but the same sysfs root or state directory is refused") {
  Daemon d(kFast);
  const std::string other = daemontest::make_temp_dir();
  // Same sysfs root, another socket (and so another default state directory).
  auto same_root = testsupport::run({HALTPOLLD_BIN, "--config", d.config_file, "--socket", other + "/s", "--sysfs-root", d.sysfs});
  CHECK(same_root.code == 4);
  CHECK(same_root.err.find("sysfs root " + d.sysfs) != std::string::npos);
  // Another root, but the first one's state directory.
  std::ofstream(other + "/c.json") << json{{"state_dir", d.dir}}.dump();
  std::filesystem::create_directories(other + "/sysfs");
  auto same_state = testsupport::run({HALTPOLLD_BIN, "--config", other + "/c.json", "--socket", other + "/s", "--sysfs-root", other + "/sysfs"});
  CHECK(same_state.code == 4);
  CHECK(same_state.err.find("state directory " + d.dir) != std::string::npos);
  // A bind mount or symlink to the same root is the same directory.
  std::filesystem::create_directory_symlink(d.sysfs, other + "/alias");
  auto alias = testsupport::run({HALTPOLLD_BIN, "--config", d.config_file, "--socket", other + "/s", "--sysfs-root", other + "/alias"});
  CHECK(alias.code == 4);
  CHECK(d.alive());
  CHECK(d.stop() == 0);
  std::filesystem::remove_all(other);
}

TEST_CASE("control: start-up refusals") {
  auto dir = daemontest::make_temp_dir();
  std::ofstream(dir + "/c.json") << R"({"socket": {"admin_group": "no-such-group-xyz"}})";
  auto r = testsupport::run({HALTPOLLD_BIN, "--config", dir + "/c.json", "--socket", dir + "/s", "--sysfs-root", dir});
  CHECK(r.code == 3);
  CHECK(r.err.find("/socket/admin_group") != std::string::npos);
  auto missing_dir = testsupport::run({HALTPOLLD_BIN, "--config", dir + "/c.json", "--socket", dir + "/none/s"});
  CHECK(missing_dir.code != 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("control: members of socket.admin_group may change settings (primary or supplementary group)") {
  if (!std::ifstream("/etc/group") || testsupport::run({"/usr/bin/getent", "group", "nogroup"}).code != 0) {
    WARN("no group 'nogroup' here: skipped");
    return;
  }
  Daemon d(json{{"socket", {{"mode", "0666"}, {"admin_group", "nogroup"}}}});
  auto as = [&](std::vector<std::string> ids, std::vector<std::string> args) {
    std::vector<std::string> argv = {"/usr/bin/setpriv"};
    for (auto& i : ids) argv.push_back(i);
    argv.push_back(HALTPOLLCTL_BIN);
    argv.push_back("--socket");
    argv.push_back(d.socket);
    for (auto& a : args) argv.push_back(a);
    return testsupport::run(argv);
  };
  CHECK(as({"--reuid=65534", "--regid=65534", "--clear-groups"}, {"reset"}).code == 0);
  CHECK(as({"--reuid=65534", "--regid=1", "--groups=65534"}, {"reset"}).code == 0);
  CHECK(as({"--reuid=65534", "--regid=1", "--clear-groups"}, {"reset"}).code == 4);
  struct stat st {};
  REQUIRE(::stat(d.socket.c_str(), &st) == 0);
  CHECK(st.st_gid == 65534u);
  CHECK(d.stop() == 0);
}

namespace {

// Forks a child that becomes `uid`, opens `n` connections and on each starts a Watch it never
// reads, then pushes as many 60 KiB calls behind it as the socket takes without blocking. It
// reports how many connections it got and stays until killed.
pid_t hostile(const std::string& path, uid_t uid, int n, int report) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) _exit(2);
  const std::string watch = json{{"method", "io.haltpolld.Watch"}, {"more", true},
                                 {"parameters", {{"interval_ms", 100}, {"histogram", true}}}}.dump() + std::string(1, '\0');
  const std::string big = json{{"method", "io.haltpolld.GetStatus"}, {"parameters", {{"junk", std::string(60000, 'x')}}}}.dump() +
                          std::string(1, '\0');
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) continue;
    (void)!::send(fd, watch.data(), watch.size(), MSG_NOSIGNAL);
    for (int k = 0; k < 64; ++k)
      if (::send(fd, big.data(), big.size(), MSG_NOSIGNAL) <= 0) break;
    fds.push_back(fd);
  }
  const char c = static_cast<char>(fds.size());
  (void)!::write(report, &c, 1);
  for (;;) ::pause();
}

// Sanitizer builds run the daemon several times slower; 120 streams then keep its control thread
// busy for seconds before they stall.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kSlow = 6;
#else
constexpr int kSlow = 1;
#endif

json call_within(RawClient& c, const std::string& method, const json& params, std::chrono::seconds timeout) {
  REQUIRE(c.send({{"method", method}, {"parameters", params}}));
  auto r = c.recv_message(timeout);
  REQUIRE(r);
  return *r;
}

long status_kib(pid_t pid, const char* key) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key) + 1));
  return -1;
}

}  // namespace

TEST_CASE("hardening: 128 hostile Watch clients neither lock out an admin nor grow the daemon") {
  if (::geteuid() != 0) {
    WARN("not root: cannot run clients as other uids; skipped");
    return;
  }
  // A long idle timeout while the clients pile up (slow on a loaded machine), so that no stalled
  // stream frees its slot before the limits are checked; then a short one for the stall check.
  Daemon d(json{{"socket", {{"mode", "0666"}, {"idle_timeout_ms", 600000}}}, {"tuner", {{"interval_ms", 200}}}});
  const long rss_before = status_kib(d.proc->pid(), "VmRSS:");
  int report[2];
  REQUIRE(::pipe(report) == 0);
  // Killed and reaped whatever happens to the test.
  struct Children {
    std::vector<pid_t> pids;
    ~Children() {
      for (pid_t p : pids) {
        ::kill(p, SIGKILL);
        ::waitpid(p, nullptr, 0);
      }
    }
  } guard;
  std::vector<pid_t>& children = guard.pids;
  int got = 0;
  // Four uids of 32 each: the per-uid cap (32) and the admin reserve (8 of 128) hold them to 120.
  for (uid_t uid : {60001u, 60002u, 60003u, 60004u}) {
    children.push_back(hostile(d.socket, uid, 32, report[1]));
    char c = 0;
    REQUIRE(::read(report[0], &c, 1) == 1);
    got += c;
  }
  // A fifth uid's one connection: only the reserved slots are left, and it is not an admin.
  children.push_back(hostile(d.socket, 60005, 1, report[1]));
  char c = 0;
  REQUIRE(::read(report[0], &c, 1) == 1);
  got += c;
  CAPTURE(got);
  // A sixth uid, at once (before any stalled stream times out): refused, and told why.
  {
    const pid_t p = ::fork();
    if (p == 0) {
      if (::setresgid(60006, 60006, 60006) != 0 || ::setresuid(60006, 60006, 60006) != 0) _exit(2);
      RawClient late(d.socket);
      if (!late.connected()) _exit(6);
      auto r = late.recv_message(10s * kSlow);
      if (!r) _exit(3);
      if (r->value("error", "") != "io.haltpolld.TooManyConnections") _exit(4);
      _exit(r->at("parameters").value("reason", "").find("reserved") != std::string::npos ? 0 : 5);
    }
    int st = 0;
    ::waitpid(p, &st, 0);
    CAPTURE(st >> 8);
    CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0));
  }
  // Root still gets a reserved slot, and its admin call succeeds.
  RawClient admin(d.socket);
  REQUIRE(admin.connected());
  auto reset = call_within(admin, "io.haltpolld.ResetStats", json::object(), 5s * kSlow);
  CHECK(error_of(reset).empty());
  auto status = call_within(admin, "io.haltpolld.GetStatus", json::object(), 5s * kSlow)["parameters"];
  CHECK(status["control"]["connections"].get<int>() <= 121);
  // Nobody reads the streams: each is closed once its replies stop moving for idle_timeout_ms.
  REQUIRE(error_of(call_within(admin, "io.haltpolld.SetConfig", {{"config", {{"socket", {{"idle_timeout_ms", 2000}}}}}},
                                5s * kSlow)).empty());
  int open = 1000;
  for (int i = 0; i < 200 * kSlow && open > 1; ++i) {
    std::this_thread::sleep_for(100ms);
    open = call_within(admin, "io.haltpolld.GetStatus", json::object(), 5s * kSlow)["parameters"]["control"]["connections"].get<int>();
  }
  CHECK(open == 1);
  const long hwm = status_kib(d.proc->pid(), "VmHWM:");
  CAPTURE(rss_before, hwm);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  WARN("sanitizer build: shadow memory inflates RSS; the 32 MiB bound is checked in the dev build");
#else
  CHECK(hwm < 32 * 1024);
#endif
  CHECK(d.alive());
  ::close(report[0]);
  ::close(report[1]);
  CHECK(d.stop() == 0);
}

TEST_CASE("hardening: a client that half-closes still gets every reply") {
  Daemon d(kFast);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, d.socket.c_str(), sizeof a.sun_path - 1);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  const std::string calls =
      json{{"method", "io.haltpolld.Watch"}, {"more", true}, {"parameters", {{"interval_ms", 100}, {"count", 3}}}}.dump() +
      std::string(1, '\0') + json{{"method", "io.haltpolld.GetConfig"}}.dump() + std::string(1, '\0');
  REQUIRE(::send(fd, calls.data(), calls.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(calls.size()));
  REQUIRE(::shutdown(fd, SHUT_WR) == 0);
  std::string all;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 30000) <= 0) break;  // EOF ends the loop; the timeout bounds a failure
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;  // EOF: the daemon closed after the last reply
    all.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  CHECK(std::count(all.begin(), all.end(), '\0') == 4);  // three Watch replies and GetConfig's
  CHECK(all.find("\"config\"") != std::string::npos);
  CHECK(d.stop() == 0);
}

namespace {

// A child that becomes `uid` and floods the daemon for `seconds` from `n` connections with
// pipelined GetStats calls (reading every reply), then reports "<ok> <rate_limited> <ms>" on
// `report`: how many calls were answered, how many were refused as RateLimited, and how long it ran.
pid_t flooder(const std::string& path, uid_t uid, int n, double seconds, int report) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0) _exit(2);
  const std::string call = json{{"method", "io.haltpolld.GetStats"}, {"parameters", {{"histogram", true}}}}.dump() + std::string(1, '\0');
  std::vector<pollfd> fds;
  std::vector<std::string> bufs(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(3);
    fds.push_back({fd, POLLIN | POLLOUT, 0});
  }
  long ok = 0, limited = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  static char chunk[1 << 16];
  while (std::chrono::steady_clock::now() < end) {
    if (::poll(fds.data(), fds.size(), 50) <= 0) continue;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents & POLLOUT) (void)!::send(fds[i].fd, call.data(), call.size(), MSG_NOSIGNAL);
      if (fds[i].revents & POLLIN) {
        const ssize_t got = ::recv(fds[i].fd, chunk, sizeof chunk, 0);
        if (got <= 0) _exit(4);  // closed on us: the test wants calls answered, not dropped
        bufs[i].append(chunk, static_cast<std::size_t>(got));
        for (std::size_t nul; (nul = bufs[i].find('\0')) != std::string::npos;) {
          const std::string reply = bufs[i].substr(0, nul);
          if (reply.find("io.haltpolld.RateLimited") != std::string::npos) ++limited;
          else if (reply.find("\"error\"") == std::string::npos) ++ok;
          bufs[i].erase(0, nul + 1);
        }
      }
    }
  }
  const long ms = static_cast<long>(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  const std::string line = std::to_string(ok) + " " + std::to_string(limited) + " " + std::to_string(ms) + "\n";
  (void)!::write(report, line.data(), line.size());
  _exit(0);
}

}  // namespace

TEST_CASE("hardening: a uid flooding GetStats is held to its call budget while an admin call succeeds") {
  if (::geteuid() != 0) {
    WARN("not root: cannot run the flood as another uid; skipped");
    return;
  }
  constexpr unsigned rate = 20, burst = 40;
  Daemon d(json{{"socket", {{"mode", "0666"}, {"calls_per_second_per_uid", rate}, {"call_burst_per_uid", burst}}},
                {"tuner", {{"interval_ms", 200}}}});
  int report[2];
  REQUIRE(::pipe(report) == 0);
  const pid_t child = flooder(d.socket, 60010, 8, 3.0 * kSlow, report[1]);
  struct Reap {
    pid_t pid;
    ~Reap() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reap{child};
  std::this_thread::sleep_for(500ms * kSlow);  // the flood is on
  RawClient admin(d.socket);
  REQUIRE(admin.connected());
  for (int i = 0; i < 50; ++i) {
    // Root is never limited: fifty calls in a row, more than the flooder's burst, all run.
    CHECK(error_of(call_within(admin, "io.haltpolld.GetStats", json::object(), 5s * kSlow)).empty());
  }
  CHECK(error_of(call_within(admin, "io.haltpolld.ResetStats", json::object(), 5s * kSlow)).empty());
  char line[128] = {};
  REQUIRE(::read(report[0], line, sizeof line - 1) > 0);
  long ok = 0, limited = 0, ms = 0;
  REQUIRE(std::sscanf(line, "%ld %ld %ld", &ok, &limited, &ms) == 3);
  CAPTURE(ok, limited, ms);
  // The whole uid, eight connections together, gets the burst plus the rate (a token's slack for
  // each connection's pause), and every call beyond is answered RateLimited rather than dropped.
  CHECK(ok >= static_cast<long>(burst));
  CHECK(ok <= static_cast<long>(burst + rate * ms / 1000 + 8 + rate));
  CHECK(limited > 0);
  auto status = call_within(admin, "io.haltpolld.GetStatus", json::object(), 5s * kSlow)["parameters"];
  CHECK(status["control"]["rate_limited_total"].get<long>() >= limited);
  ::close(report[0]);
  ::close(report[1]);
  CHECK(d.alive());
  CHECK(d.stop() == 0);
}
