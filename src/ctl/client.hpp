// A blocking varlink client for haltpollctl: one AF_UNIX connection, calls written with a NUL
// terminator, replies read up to the next NUL, with a timeout on every wait. Failures carry a kind
// so that the command line can map them to its documented exit codes.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <stdexcept>
#include <string>

namespace haltpollctl {

class ClientError : public std::runtime_error {
 public:
  enum class Kind { not_running, permission_denied, protocol, timeout, remote };
  ClientError(Kind kind, const std::string& what, nlohmann::json reply = nullptr)
      : std::runtime_error(what), kind_(kind), reply_(std::move(reply)) {}
  Kind kind() const noexcept { return kind_; }
  const nlohmann::json& reply() const noexcept { return reply_; }

 private:
  Kind kind_;
  nlohmann::json reply_;
};

class Client {
 public:
  Client(std::string socket_path, int timeout_ms);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // One call, one reply; an error reply throws ClientError(remote or permission_denied).
  nlohmann::json call(const std::string& method, const nlohmann::json& parameters = nlohmann::json::object());
  // A `more` call: on_reply gets each reply's parameters and returns false to stop early.
  void stream(const std::string& method, const nlohmann::json& parameters,
              const std::function<bool(const nlohmann::json&)>& on_reply, int reply_timeout_ms);

 private:
  void send(const nlohmann::json& message);
  nlohmann::json receive(int timeout_ms);
  nlohmann::json checked(nlohmann::json reply);

  std::string path_;
  int fd_ = -1;
  int timeout_ms_;
  std::string buf_;
};

}  // namespace haltpollctl
