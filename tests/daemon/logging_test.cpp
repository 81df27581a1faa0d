// The daemon's logging: which sink it picks, and that the journal gets each message's priority.
// The journal case sends through the real sd_journal_send to a datagram socket of the test's own,
// bound at the journal's path inside a private mount namespace (tmpfs on /run), so nothing of
// the host's /run is touched.
#include "logging.hpp"

#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

std::string dev_ino(int fd) {
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

int temp_file() {
  char tmpl[] = "/tmp/haltpolld-log-test-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  unlink(tmpl);
  return fd;
}

// Child side of the journal test. Returns 0 on success, 77 when a private mount namespace is not
// possible here, other values name the step that failed; details go to `report`.
int journal_child(int report) {
  auto say = [report](const std::string& s) { (void)!write(report, s.data(), s.size()); };
  if (unshare(CLONE_NEWNS) != 0) return say(std::string("unshare: ") + std::strerror(errno)), 77;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") != 0)
    return say(std::string("mount: ") + std::strerror(errno)), 77;
  if (mkdir("/run/systemd", 0755) != 0 || mkdir("/run/systemd/journal", 0755) != 0) return say("mkdir"), 10;
  const int sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, "/run/systemd/journal/socket");
  if (sock < 0 || bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return say("bind"), 11;

  // stderr is "the journal's stream" when JOURNAL_STREAM names it.
  const int err_fd = temp_file();
  if (dup2(err_fd, STDERR_FILENO) < 0) return say("dup2"), 12;
  setenv("JOURNAL_STREAM", dev_ino(STDERR_FILENO).c_str(), 1);
  haltpolld::setup_logging("info");
  spdlog::warn("poll window {} ns refused", 1234);
  spdlog::info("tuner started");
  spdlog::debug("below the level: not sent");

  std::string got;
  char buf[4096];
  for (int i = 0; i < 3; ++i) {
    pollfd p{sock, POLLIN, 0};
    if (poll(&p, 1, i < 2 ? 5000 : 200) != 1) break;
    const ssize_t n = recv(sock, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n)).append("\n--\n");
  }
  struct stat st {};
  fstat(err_fd, &st);
  say(got + "stderr bytes: " + std::to_string(st.st_size) + "\n");
  return 0;
}

}  // namespace

TEST_CASE("logging: JOURNAL_STREAM counts only when it names the fd's file") {
  const int a = temp_file(), b = temp_file();
  const std::string id = dev_ino(a);
  CHECK(haltpolld::is_journal_stream(a, id.c_str()));
  CHECK_FALSE(haltpolld::is_journal_stream(b, id.c_str()));  // inherited, but stderr was redirected
  CHECK_FALSE(haltpolld::is_journal_stream(a, nullptr));
  CHECK_FALSE(haltpolld::is_journal_stream(a, ""));
  CHECK_FALSE(haltpolld::is_journal_stream(a, (id + "x").c_str()));
  CHECK_FALSE(haltpolld::is_journal_stream(a, id.substr(0, id.find(':')).c_str()));
  CHECK_FALSE(haltpolld::is_journal_stream(a, (":" + id.substr(id.find(':') + 1)).c_str()));
  close(a);
  close(b);
}

TEST_CASE("logging: under the journal each message keeps its priority") {
  int pipefd[2];
  REQUIRE(pipe(pipefd) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(pipefd[0]);
    _exit(journal_child(pipefd[1]));
  }
  close(pipefd[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = read(pipefd[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<std::size_t>(n));
  close(pipefd[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  INFO(report);
  if (WEXITSTATUS(status) == 77) {
    WARN("no private mount namespace here (needs root): skipped: " + report);
    return;
  }
  REQUIRE(WEXITSTATUS(status) == 0);
  // Two datagrams, in order, with syslog priorities 4 (warning) and 6 (info), and nothing on stderr.
  const auto warn_at = report.find("MESSAGE=poll window 1234 ns refused\n");
  const auto info_at = report.find("MESSAGE=tuner started\n");
  REQUIRE(warn_at != std::string::npos);
  REQUIRE(info_at != std::string::npos);
  CHECK(warn_at < info_at);
  const auto first = report.substr(0, report.find("\n--\n"));
  CHECK(first.find("PRIORITY=4\n") != std::string::npos);
  CHECK(first.find("SYSLOG_IDENTIFIER=haltpolld\n") != std::string::npos);
  const auto second = report.substr(info_at);
  CHECK(second.substr(0, second.find("\n--\n")).find("PRIORITY=6\n") != std::string::npos);
  CHECK(report.find("below the level") == std::string::npos);
  CHECK(report.find("stderr bytes: 0\n") != std::string::npos);
}
