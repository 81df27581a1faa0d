// A blocking varlink client for haltpollctl: one AF_UNIX connection with a timeout on every wait.
// The bytes on the wire come from the shared varlink library (encode_call, FrameDecoder), so that
// the client and the daemon frame messages with the same code; this class owns only the blocking
// socket I/O. Failures carry a kind so that the command line can map them to its documented exit
// codes. Not thread-safe: one thread per Client.
#pragma once

#include "varlink/varlink.hpp"

#include <nlohmann/json.hpp>

#include <cstddef>

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
  void send(const haltpolld::varlink::Call& call);
  haltpolld::varlink::Reply receive(int timeout_ms);
  nlohmann::json checked(haltpolld::varlink::Reply reply);

  std::string path_;
  int fd_ = -1;
  int timeout_ms_;
  // Replies are not bounded by the daemon's 64 KiB call limit: GetStats with histograms on a
  // large guest is bigger. 16 MiB is far above any reply and still stops a runaway peer.
  static constexpr std::size_t kMaxReplyBytes = 16u << 20;
  haltpolld::varlink::FrameDecoder decoder_{kMaxReplyBytes};
};

}  // namespace haltpollctl
