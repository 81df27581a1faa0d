// The real ControlServer in this process, with its SO_PEERGROUPS query replaced through the
// ControlServerOptions::peer_groups seam: a query that fails must leave the peer with no
// supplementary groups (the old code read its zero-filled buffer as 64 times gid 0, i.e. admin when
// admin_group is gid 0). The clients are forked children with uid/gid 65534, so only the group list
// can make them admins.
#include "control/control_server.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

using namespace haltpolld;

namespace {

int failing_query(int, gid_t*, socklen_t*) {
  errno = EINVAL;
  return -1;
}

int root_group_query(int, gid_t* groups, socklen_t* bytes) {
  groups[0] = 0;
  *bytes = sizeof(gid_t);
  return 0;
}

// A child that drops to uid/gid 65534 with no groups, makes one admin-only call and exits 0 when it
// was refused, 1 when it was allowed, 2 on anything else. Forked before any thread starts; it
// waits on `go` until the server listens. Only system calls after the fork.
pid_t spawn_client(const char* path, int go) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  char c;
  if (::read(go, &c, 1) != 1) _exit(2);
  if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) _exit(2);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path, sizeof a.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(2);
  static const char call[] = "{\"method\":\"io.test.Admin\"}";
  if (::send(fd, call, sizeof call, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof call)) _exit(2);  // with its NUL
  char reply[4096] = {};
  std::size_t got = 0;
  while (got < sizeof reply - 1) {
    const ssize_t n = ::recv(fd, reply + got, sizeof reply - 1 - got, 0);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
    if (std::memchr(reply, '\0', got) != nullptr && got > 0 && reply[got - 1] == '\0') break;
  }
  if (std::strstr(reply, "PermissionDenied")) _exit(0);
  if (std::strstr(reply, "\"parameters\"") && !std::strstr(reply, "\"error\"")) _exit(1);
  _exit(2);
}

int serve_one(PeerGroupsQuery query) {
  char tmpl[] = "/tmp/haltpolld-groups-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  ::chmod(tmpl, 0755);
  const std::string path = std::string(tmpl) + "/s";
  int go[2];
  REQUIRE(::pipe(go) == 0);
  const pid_t child = spawn_client(path.c_str(), go[0]);
  REQUIRE(child > 0);

  varlink::Registry registry;
  registry.add(varlink::Method{"io.test.Admin", "method Admin() -> ()", true, false,
                               [](const varlink::Call&, const varlink::Peer&) { return varlink::Reply{}; }});
  boost::asio::io_context io;
  ControlServerOptions o;
  o.path = path;
  o.mode = 0666;
  o.admin_gid = 0;  // the group a zero-filled list would claim
  o.peer_groups = query;
  ControlServer server(io, registry, o);
  server.start();
  std::thread t([&] { io.run(); });
  REQUIRE(::write(go[1], "g", 1) == 1);
  int st = 0;
  ::waitpid(child, &st, 0);
  io.stop();
  t.join();
  server.stop();
  ::close(go[0]);
  ::close(go[1]);
  std::filesystem::remove_all(tmpl);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 3;
}

}  // namespace

TEST_CASE("hardening: SO_PEERGROUPS failure means no groups, never gid 0") {
  if (::geteuid() != 0) {
    WARN("not root: cannot run a client as uid 65534; skipped");
    return;
  }
  CHECK(serve_one(failing_query) == 0);     // refused: no group list, not a member of gid 0
  CHECK(serve_one(root_group_query) == 1);  // the seam is live: a real gid 0 membership is admin
  CHECK(serve_one(nullptr) == 0);           // the real query: uid 65534 with no groups is not admin
}
