// haltpollctl: the command-line client of haltpolld's control socket.
#include "haltpoll/version.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

namespace {

// Exit codes, documented in haltpollctl(1).
enum ExitCode : int { ok = 0, failure = 1, usage_error = 2, not_running = 3, permission_denied = 4 };

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"haltpollctl: query and tune haltpolld over its control socket"};
  app.set_version_flag("-V,--version", std::string("haltpollctl ") + HALTPOLL_VERSION_STRING);
  std::string socket_path = "/run/haltpolld/io.haltpolld";
  app.add_option("-s,--socket", socket_path, "control socket of the daemon")->envname("HALTPOLLD_SOCKET")->capture_default_str();
  app.require_subcommand(0, 1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? ExitCode::ok : ExitCode::usage_error;
  }
  std::fputs(app.help().c_str(), stdout);
  return ExitCode::ok;
}
