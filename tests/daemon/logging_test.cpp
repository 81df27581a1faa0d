// The daemon's logging: which sink it picks, and that the journal gets each message's priority
// (stderr in the "<N>" form journald's stream reader parses, checked byte for byte).
#include "logging.hpp"

#include <catch2/catch.hpp>
#include <spdlog/spdlog.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
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

// Child side of the journal test: stderr is a file that JOURNAL_STREAM names, as systemd sets it
// up for a service. Returns 0 on success; what stderr received goes to `report`.
int journal_child(int report) {
  auto say = [report](const std::string& s) { (void)!write(report, s.data(), s.size()); };
  const int err_fd = temp_file();
  if (dup2(err_fd, STDERR_FILENO) < 0) return say("dup2"), 12;
  setenv("JOURNAL_STREAM", dev_ino(STDERR_FILENO).c_str(), 1);
  haltpolld::setup_logging("info");
  spdlog::warn("poll window {} ns refused", 1234);
  spdlog::info("tuner started");
  spdlog::debug("below the level: not sent");
  spdlog::error("two\nlines");
  std::string got;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = pread(err_fd, buf, sizeof buf, at);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  say(got);
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
  REQUIRE(WEXITSTATUS(status) == 0);
  // The lines in order, each with its syslog priority as journald's stream reader takes it: no
  // timestamp, nothing below the level, every line of a multi-line message prefixed.
  CHECK(report == "<4>poll window 1234 ns refused\n<6>tuner started\n<3>two\n<3>lines\n");
}

TEST_CASE("logging: journal priorities and line prefixes") {
  CHECK(haltpolld::journal_priority(spdlog::level::critical) == 2);
  CHECK(haltpolld::journal_priority(spdlog::level::err) == 3);
  CHECK(haltpolld::journal_priority(spdlog::level::warn) == 4);
  CHECK(haltpolld::journal_priority(spdlog::level::info) == 6);
  CHECK(haltpolld::journal_priority(spdlog::level::debug) == 7);
  CHECK(haltpolld::journal_priority(spdlog::level::trace) == 7);
  CHECK(haltpolld::journal_stream_lines(spdlog::level::warn, "") == "<4>\n");
  CHECK(haltpolld::journal_stream_lines(spdlog::level::info, "a\n") == "<6>a\n");
  CHECK(haltpolld::journal_stream_lines(spdlog::level::err, "a\nb") == "<3>a\n<3>b\n");
}
