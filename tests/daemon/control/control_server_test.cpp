// The real haltpolld binary on a real socket: every method, every error, the bounds, the signals.
#include "daemon_fixture.hpp"

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
    CHECK(m.wait_eof(5s));
  }
  SECTION("not a call: error, then closed") {
    RawClient m(d.socket);
    REQUIRE(m.send_raw(std::string("[1,2]") + '\0'));
    CHECK(error_of(*m.recv_message()) == "io.haltpolld.MalformedMessage");
    CHECK(m.wait_eof(5s));
  }
  SECTION("oversized: error, then closed") {
    RawClient m(d.socket);
    m.send_raw(std::string(70 * 1024, 'x'));
    auto r = m.recv_message();
    REQUIRE(r);
    CHECK(error_of(*r) == "io.haltpolld.MessageTooLarge");
    CHECK((*r)["parameters"]["limit"] == 65536);
    CHECK(m.wait_eof(5s));
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
    auto r = c->recv_message(10s);
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
        auto r = c.recv_message(10s);
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
  Daemon d(json{{"socket", {{"max_connections", 2}, {"idle_timeout_ms", 300}}}});
  RawClient a(d.socket), b(d.socket);
  // The idle clock restarts at each complete message, not at partial bytes.
  auto last_message = std::chrono::steady_clock::now();
  CHECK(a.call("io.haltpolld.GetStatus")["parameters"].contains("version"));
  CHECK(b.call("io.haltpolld.GetStatus")["parameters"].contains("version"));
  RawClient c(d.socket);
  auto r = c.recv_message();
  REQUIRE(r);
  CHECK(error_of(*r) == "io.haltpolld.TooManyConnections");
  CHECK(c.wait_eof(5s));

  // A half-sent message does not keep a connection open past the idle timeout.
  a.send_raw(R"({"method":"io.haltpolld.Get)");
  CHECK(a.wait_eof(10s));
  CHECK(std::chrono::steady_clock::now() - last_message >= 300ms);
  CHECK(b.wait_eof(10s));
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
  REQUIRE(d.proc->wait_for_output("config applied", 10s));
  CHECK(c.call("io.haltpolld.GetConfig")["parameters"]["config"]["tuner"]["interval_ms"] == 300);

  d.write_config_text(R"({"tuner": {"interval_ms": "soon"}})");
  d.proc->signal(SIGHUP);
  REQUIRE(d.proc->wait_for_output("reload refused", 10s));
  CHECK(d.proc->err().find("/tuner/interval_ms") != std::string::npos);
  CHECK(c.call("io.haltpolld.GetConfig")["parameters"]["config"]["tuner"]["interval_ms"] == 300);
  auto r = c.call("io.haltpolld.Reload");
  CHECK(error_of(r) == "io.haltpolld.ConfigRefused");
  CHECK(r["parameters"]["path"] == "/tuner/interval_ms");
  CHECK(r["parameters"]["file"] == d.config_file);

  d.write_config_text("{ this is not json");
  d.proc->signal(SIGHUP);
  REQUIRE(d.proc->wait_for_output("not valid JSON", 10s));
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

TEST_CASE("control: SIGTERM and SIGINT remove the socket, the textfile and free the lock") {
  for (int sig : {SIGTERM, SIGINT}) {
    json cfg = kFast;
    Daemon d(cfg);
    std::string prom = d.dir + "/haltpolld.prom";
    RawClient c(d.socket);
    REQUIRE(error_of(c.call("io.haltpolld.SetConfig", {{"config", {{"metrics", {{"textfile", prom}}}}}})).empty());
    // Written at the next tick (200 ms).
    for (int i = 0; i < 100 && !std::filesystem::exists(prom); ++i) std::this_thread::sleep_for(50ms);
    REQUIRE(std::filesystem::exists(prom));
    std::ifstream in(prom);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(text.find("haltpoll_info{") != std::string::npos);
    CHECK(d.stop(sig) == 0);
    CHECK(d.proc->err().find("stopped") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(d.socket));
    CHECK_FALSE(std::filesystem::exists(prom));
    CHECK(c.wait_eof(5s));
    // The lock is free: a new instance starts on the same socket.
    d.start();
    CHECK(d.stop() == 0);
  }
}

TEST_CASE("control: a second instance on the same socket is refused clearly") {
  Daemon d(kFast);
  auto second = testsupport::run({HALTPOLLD_BIN, "--config", d.config_file, "--socket", d.socket, "--sysfs-root", d.sysfs});
  CHECK(second.code == 4);
  CHECK(second.err.find("already running") != std::string::npos);
  CHECK(d.alive());
  CHECK(d.stop() == 0);
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
