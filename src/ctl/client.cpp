#include "client.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace haltpollctl {

using nlohmann::json;
namespace varlink = haltpolld::varlink;

Client::Client(std::string socket_path, int timeout_ms) : path_(std::move(socket_path)), timeout_ms_(timeout_ms) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof addr.sun_path)
    throw ClientError(ClientError::Kind::protocol, "socket path too long: " + path_);
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw ClientError(ClientError::Kind::protocol, std::string("socket: ") + std::strerror(errno));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == ENOENT || err == ECONNREFUSED)
      throw ClientError(ClientError::Kind::not_running,
                        "haltpolld is not running (no daemon listening on " + path_ + "; start it with `systemctl start haltpolld` or name another socket with --socket)");
    if (err == EACCES || err == EPERM)
      throw ClientError(ClientError::Kind::permission_denied,
                        "permission denied connecting to " + path_ + " (ask for membership in the socket's group, or use sudo)");
    throw ClientError(ClientError::Kind::not_running, "cannot connect to " + path_ + ": " + std::strerror(err));
  }
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

void Client::send(const varlink::Call& call) {
  const std::string bytes = varlink::encode_call(call);
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw ClientError(ClientError::Kind::protocol, std::string("send: ") + std::strerror(errno));
    }
    off += static_cast<std::size_t>(n);
  }
}

varlink::Reply Client::receive(int timeout_ms) {
  while (true) {
    if (auto msg = decoder_.next()) {
      std::string why;
      auto reply = varlink::parse_reply(*msg, why);
      if (!reply) throw ClientError(ClientError::Kind::protocol, "the daemon sent a malformed reply: " + why);
      return std::move(*reply);
    }
    if (decoder_.overflowed())
      throw ClientError(ClientError::Kind::protocol,
                        "a reply from haltpolld exceeds " + std::to_string(decoder_.max_message_bytes()) + " bytes");
    pollfd p{fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, timeout_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) throw ClientError(ClientError::Kind::timeout, "no reply from haltpolld within " + std::to_string(timeout_ms) + " ms");
    char chunk[65536];
    ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw ClientError(ClientError::Kind::protocol, "haltpolld closed the connection");
    decoder_.feed(std::string_view(chunk, static_cast<std::size_t>(n)));
  }
}

json Client::checked(varlink::Reply reply) {
  if (reply.is_error()) {
    json raw = {{"error", reply.error}, {"parameters", std::move(reply.parameters)}};
    if (reply.error == varlink::errors::permission_denied)
      throw ClientError(ClientError::Kind::permission_denied,
                        "permission denied: changing settings needs root or membership in the daemon's admin group",
                        raw);
    throw ClientError(ClientError::Kind::remote, reply.error, raw);
  }
  return std::move(reply.parameters);
}

json Client::call(const std::string& method, const json& parameters) {
  send(varlink::Call{.method = method, .parameters = parameters});
  return checked(receive(timeout_ms_));
}

void Client::stream(const std::string& method, const json& parameters, const std::function<bool(const json&)>& on_reply,
                    int reply_timeout_ms) {
  send(varlink::Call{.method = method, .parameters = parameters, .more = true});
  while (true) {
    varlink::Reply r = receive(reply_timeout_ms);
    const bool continues = r.continues;
    if (!on_reply(checked(std::move(r))) || !continues) return;
  }
}

}  // namespace haltpollctl
