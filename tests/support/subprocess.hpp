// Test helper: run a program with pipes on stdout/stderr, wait with a deadline, send signals.
// Used by the tests that run the real haltpolld and haltpollctl binaries.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace testsupport {

class Subprocess {
 public:
  // argv[0] is the program path. `env` entries ("K=V") are added to the current environment.
  explicit Subprocess(std::vector<std::string> argv, std::vector<std::string> env = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) envs.emplace_back(*e);
    for (auto& e : env) envs.push_back(e);
    std::vector<char*> envp;
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
    if (rc != 0) {
      close(out_fd_);
      close(err_fd_);
      throw std::runtime_error("posix_spawn " + argv[0] + ": " + std::strerror(rc));
    }
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      int st;
      waitpid(pid_, &st, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }

  pid_t pid() const { return pid_; }
  void signal(int sig) { ::kill(pid_, sig); }

  // Reads available output for up to `d`; returns when `needle` has appeared on stderr or stdout.
  bool wait_for_output(const std::string& needle, std::chrono::milliseconds d) {
    auto deadline = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < deadline) {
      if (out_.find(needle) != std::string::npos || err_.find(needle) != std::string::npos) return true;
      pump(std::chrono::milliseconds(20));
      if (exited_ || reap(false)) {
        drain();
        return out_.find(needle) != std::string::npos || err_.find(needle) != std::string::npos;
      }
    }
    return false;
  }

  // Waits for exit; returns the exit code, 128+signal when killed, or -1 on timeout.
  int wait(std::chrono::milliseconds d = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + d;
    while (!exited_) {
      pump(std::chrono::milliseconds(10));
      if (reap(false)) break;
      if (std::chrono::steady_clock::now() > deadline) return -1;
    }
    drain();
    return status_;
  }

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  bool reap(bool block) {
    int st;
    pid_t r = waitpid(pid_, &st, block ? 0 : WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return true;
    }
    return false;
  }
  // One read of each pipe that has data, waiting up to `d`; true when something was read.
  bool pump(std::chrono::milliseconds d) {
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(d.count())) <= 0) return false;
    char buf[4096];
    bool got = false;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].revents & (POLLIN | POLLHUP)) {
        ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
        if (n > 0) (i == 0 ? out_ : err_).append(buf, static_cast<size_t>(n));
        got |= n > 0;
      }
    }
    return got;
  }
  // After the exit: everything the child wrote, not only one pipe buffer's read of it (a reply of
  // more than 4 KiB written just before exiting would be cut otherwise).
  void drain() {
    while (pump(std::chrono::milliseconds(0))) {}
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  bool exited_ = false;
  int status_ = -1;
  std::string out_, err_;
};

// Runs a program to completion and returns {exit code, stdout, stderr}.
struct RunResult {
  int code;
  std::string out, err;
};
inline RunResult run(std::vector<std::string> argv, std::vector<std::string> env = {},
                     std::chrono::milliseconds d = std::chrono::seconds(30)) {
  Subprocess p(std::move(argv), std::move(env));
  int code = p.wait(d);
  return {code, p.out(), p.err()};
}

}  // namespace testsupport
