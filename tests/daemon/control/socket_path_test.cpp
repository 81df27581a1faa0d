// The real ControlServer in this process: its socket's group and mode go to the inode bind()
// created, never through the path. The ControlServerOptions::after_bind seam swaps the freshly
// bound path for a symlink or a hard link to a victim file at the worst moment (after the server
// has checked what it bound, before it sets the group and mode); the victim's mode and owner must
// stay as they were and start() must fail, saying so.
#include "control/control_server.hpp"

#include <boost/asio/io_context.hpp>
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

using namespace haltpolld;

namespace {

std::string g_victim;

void swap_for_symlink(const std::string& path) {
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::symlink(g_victim.c_str(), path.c_str()) == 0);
}

void swap_for_hard_link(const std::string& path) {
  REQUIRE(::unlink(path.c_str()) == 0);
  REQUIRE(::link(g_victim.c_str(), path.c_str()) == 0);
}

struct TempTree {
  std::string dir;
  TempTree() {
    char tmpl[] = "/tmp/haltpolld-sockpath-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

ControlServerOptions socket_at(const TempTree& t) {
  ControlServerOptions o;
  o.path = t.dir + "/s";
  o.mode = 0660;
  return o;
}

}  // namespace

TEST_CASE("hardening: the socket's group and mode never reach what is swapped in at its path") {
  TempTree t;
  g_victim = t.dir + "/victim";
  std::ofstream(g_victim) << "precious\n";
  REQUIRE(::chmod(g_victim.c_str(), 0600) == 0);
  struct stat before{};
  REQUIRE(::stat(g_victim.c_str(), &before) == 0);

  varlink::Registry registry;
  boost::asio::io_context io;
  ControlServerOptions o = socket_at(t);
  const bool root = ::geteuid() == 0;
  // Root may give any group; another user only its own (then the chown would be a no-op to see).
  const gid_t group = root ? 65534 : ::getegid();
  bool with_group = false;
  SECTION("a symlink, with an admin group") {
    with_group = true;
    o.after_bind = swap_for_symlink;
  }
  SECTION("a hard link, with an admin group") {
    with_group = true;
    o.after_bind = swap_for_hard_link;
  }
  SECTION("a symlink, no admin group") { o.after_bind = swap_for_symlink; }
  SECTION("a hard link, no admin group") { o.after_bind = swap_for_hard_link; }
  if (with_group) o.admin_gid = group;
  CAPTURE(with_group, root);

  ControlServer server(io, registry, o);
  std::string what;
  try {
    server.start();
  } catch (const std::system_error& e) {
    what = e.what();
  }
  CHECK(what.find("was replaced") != std::string::npos);
  struct stat after{};
  REQUIRE(::stat(g_victim.c_str(), &after) == 0);
  CHECK((after.st_mode & 07777) == 0600);
  CHECK(after.st_uid == before.st_uid);
  CHECK(after.st_gid == before.st_gid);
  server.stop();
  // The name is not the daemon's any more: stop() leaves it (and so the victim's link) alone.
  struct stat planted{};
  CHECK(::lstat(o.path.c_str(), &planted) == 0);
}

TEST_CASE("hardening: the socket gets exactly its mode and group, whatever the umask") {
  TempTree t;
  varlink::Registry registry;
  boost::asio::io_context io;
  ControlServerOptions o = socket_at(t);
  const bool root = ::geteuid() == 0;
  if (root) o.admin_gid = 65534;
  const mode_t old = ::umask(0077);  // the unit's UMask=
  ControlServer server(io, registry, o);
  server.start();
  ::umask(old);
  struct stat st{};
  REQUIRE(::lstat(o.path.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 07777) == 0660);
  if (root) CHECK(st.st_gid == 65534u);
  server.stop();
  CHECK_FALSE(std::filesystem::exists(o.path));
}
