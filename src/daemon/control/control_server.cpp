#include "control/control_server.hpp"

#include "control/control_service.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <deque>
#include <system_error>
#include <unordered_set>
#include <vector>

namespace haltpolld {

namespace asio = boost::asio;
using asio::local::stream_protocol;
using boost::system::error_code;

std::optional<gid_t> resolve_group(const std::string& name) {
  if (name.empty()) return std::nullopt;
  std::vector<char> buf(16384);
  group g{};
  group* result = nullptr;
  while (true) {
    int rc = getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &result);
    if (rc == ERANGE && buf.size() < (1u << 20)) {
      buf.resize(buf.size() * 2);
      continue;
    }
    if (rc != 0 || result == nullptr) return std::nullopt;
    return g.gr_gid;
  }
}

namespace {

constexpr std::size_t kMaxPendingCalls = 64;  // calls queued behind a running stream

class Connection;

}  // namespace

struct ControlServer::Impl : std::enable_shared_from_this<ControlServer::Impl> {
  Impl(asio::io_context& context, const varlink::Registry& r, ControlServerOptions o)
      : io(context), registry(r), options(std::move(o)), acceptor(io) {}

  void accept();
  void remove(Connection* c);
  bool is_admin(const ucred& cred, const std::vector<gid_t>& groups) const;

  asio::io_context& io;
  const varlink::Registry& registry;
  ControlServerOptions options;
  stream_protocol::acceptor acceptor;
  std::unordered_set<std::shared_ptr<Connection>> connections;
  ControlServerCounters counters;
  bool stopped = false;
  bool bound = false;
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<ControlServer::Impl> server, stream_protocol::socket socket)
      : server_(std::move(server)),
        socket_(std::move(socket)),
        idle_timer_(server_->io),
        stream_timer_(server_->io),
        decoder_(server_->options.max_message_bytes) {}

  void start() {
    identify_peer();
    arm_idle_timer();
    read();
  }

  // Over the connection limit: say why, then close.
  void reject(unsigned limit) {
    ++server_->counters.rejected_total;
    enqueue(varlink::encode_reply(varlink::error_reply(errors::too_many_connections, {{"limit", limit}})));
    close_after_write_ = true;
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    idle_timer_.cancel();
    stream_timer_.cancel();
    socket_.shutdown(stream_protocol::socket::shutdown_both, ec);
    socket_.close(ec);
    server_->remove(this);
  }

  void rearm_idle() { arm_idle_timer(); }

 private:
  void identify_peer() {
    int fd = socket_.native_handle();
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      // Unknown peer: treat as the least privileged (reading only).
      cred.uid = static_cast<uid_t>(-1);
      cred.gid = static_cast<gid_t>(-1);
      cred.pid = 0;
    }
    std::vector<gid_t> groups(64);
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0 && errno == ERANGE) {
      groups.resize(glen / sizeof(gid_t) + 1);
      glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
      if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) != 0) glen = 0;
    }
    groups.resize(glen / sizeof(gid_t));
    peer_.uid = cred.uid;
    peer_.gid = cred.gid;
    peer_.pid = cred.pid;
    peer_.admin = server_->is_admin(cred, groups);
  }

  void arm_idle_timer() {
    idle_timer_.expires_after(std::chrono::milliseconds(server_->options.idle_timeout_ms));
    idle_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->closed_) return;
      if (self->streaming_) return self->arm_idle_timer();  // a Watch stream is not idle
      spdlog::debug("control: closing idle connection of pid {}", self->peer_.pid);
      ++self->server_->counters.rejected_total;
      self->close();
    });
  }

  void read() {
    if (closed_ || close_after_write_) return;
    socket_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](const error_code& ec, std::size_t n) {
      self->on_read(ec, n);
    });
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (closed_) return;
    if (ec) {
      if (decoder_.pending_bytes() > 0)
        spdlog::debug("control: pid {} hung up in the middle of a message ({} bytes)", peer_.pid, decoder_.pending_bytes());
      return close();
    }
    if (!decoder_.feed(std::string_view(rbuf_.data(), n))) {
      return fail(varlink::error_reply(errors::message_too_large, {{"limit", decoder_.max_message_bytes()}}));
    }
    while (auto text = decoder_.next()) {
      std::string why;
      auto call = varlink::parse_call(*text, why);
      if (!call) return fail(varlink::error_reply(errors::malformed_message, {{"reason", why}}));
      arm_idle_timer();
      if (streaming_) {
        if (pending_.size() >= kMaxPendingCalls)
          return fail(varlink::error_reply(errors::malformed_message, {{"reason", "too many calls queued behind a stream"}}));
        pending_.push_back(std::move(*call));
        continue;
      }
      handle(std::move(*call));
      if (closed_ || close_after_write_) return;
    }
    read();
  }

  // An error the connection does not survive: reply, then close once it is written.
  void fail(varlink::Reply r) {
    ++server_->counters.errors_total;
    ++server_->counters.rejected_total;
    spdlog::debug("control: closing connection of pid {}: {} {}", peer_.pid, r.error, r.parameters.dump());
    enqueue(varlink::encode_reply(r));
    close_after_write_ = true;
  }

  void handle(varlink::Call call) {
    ++server_->counters.requests_total;
    varlink::Reply r = server_->registry.dispatch(call, peer_);
    if (r.is_error()) ++server_->counters.errors_total;
    if (!call.oneway) enqueue(varlink::encode_reply(r));
    if (r.continues && !r.is_error()) {
      streaming_ = true;
      stream_call_ = std::move(call);
      schedule_stream(r.next_after_ms);
    }
  }

  void schedule_stream(unsigned after_ms) {
    stream_timer_.expires_after(std::chrono::milliseconds(after_ms));
    stream_timer_.async_wait([self = shared_from_this(), after_ms](const error_code& ec) {
      if (ec || self->closed_) return;
      if (!self->wqueue_.empty()) return self->schedule_stream(after_ms);  // the client lags: skip a tick
      self->stream_call_.stream_index++;
      varlink::Reply r = self->server_->registry.dispatch(self->stream_call_, self->peer_);
      if (r.is_error()) ++self->server_->counters.errors_total;
      self->enqueue(varlink::encode_reply(r));
      if (r.continues && !r.is_error()) return self->schedule_stream(r.next_after_ms);
      self->end_stream();
    });
  }

  void end_stream() {
    streaming_ = false;
    while (!pending_.empty() && !streaming_ && !closed_ && !close_after_write_) {
      varlink::Call c = std::move(pending_.front());
      pending_.pop_front();
      handle(std::move(c));
    }
  }

  void enqueue(std::string bytes) {
    if (closed_) return;
    wbytes_ += bytes.size();
    wqueue_.push_back(std::move(bytes));
    if (wbytes_ > server_->options.max_write_queue_bytes) {
      spdlog::debug("control: pid {} does not read its replies; closing", peer_.pid);
      ++server_->counters.rejected_total;
      return close();
    }
    if (!writing_) write();
  }

  void write() {
    writing_ = true;
    asio::async_write(socket_, asio::buffer(wqueue_.front()), [self = shared_from_this()](const error_code& ec, std::size_t) {
      self->writing_ = false;
      if (self->closed_) return;
      if (ec) return self->close();
      self->wbytes_ -= self->wqueue_.front().size();
      self->wqueue_.pop_front();
      if (!self->wqueue_.empty()) return self->write();
      if (self->close_after_write_) return self->close();
    });
  }

  std::shared_ptr<ControlServer::Impl> server_;
  stream_protocol::socket socket_;
  asio::steady_timer idle_timer_;
  asio::steady_timer stream_timer_;
  varlink::FrameDecoder decoder_;
  std::array<char, 8192> rbuf_{};
  std::deque<std::string> wqueue_;
  std::size_t wbytes_ = 0;
  bool writing_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  bool streaming_ = false;
  varlink::Call stream_call_;
  std::deque<varlink::Call> pending_;
  varlink::Peer peer_;
};

}  // namespace

bool ControlServer::Impl::is_admin(const ucred& cred, const std::vector<gid_t>& groups) const {
  if (cred.uid == 0 || cred.uid == ::geteuid()) return true;
  if (!options.admin_gid) return false;
  if (cred.gid == *options.admin_gid) return true;
  for (gid_t g : groups)
    if (g == *options.admin_gid) return true;
  return false;
}

void ControlServer::Impl::remove(Connection* c) {
  for (auto it = connections.begin(); it != connections.end(); ++it) {
    if (it->get() == c) {
      connections.erase(it);
      break;
    }
  }
  counters.connections_open = connections.size();
}

void ControlServer::Impl::accept() {
  acceptor.async_accept([self = shared_from_this()](const error_code& ec, stream_protocol::socket socket) {
    if (self->stopped) return;
    if (ec) {
      // EMFILE and friends: keep serving the connections we have, try again shortly.
      spdlog::warn("control: accept failed: {}", ec.message());
      auto timer = std::make_shared<asio::steady_timer>(self->io, std::chrono::milliseconds(100));
      timer->async_wait([self, timer](const error_code&) {
        if (!self->stopped) self->accept();
      });
      return;
    }
    auto conn = std::make_shared<Connection>(self, std::move(socket));
    if (self->connections.size() >= self->options.max_connections) {
      conn->reject(self->options.max_connections);
    } else {
      self->connections.insert(conn);
      ++self->counters.connections_total;
      self->counters.connections_open = self->connections.size();
      conn->start();
    }
    self->accept();
  });
}

ControlServer::ControlServer(asio::io_context& io, const varlink::Registry& registry, ControlServerOptions options)
    : impl_(std::make_shared<Impl>(io, registry, std::move(options))) {}

ControlServer::~ControlServer() { stop(); }

void ControlServer::start() {
  const std::string& path = impl_->options.path;
  struct stat st{};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      throw std::system_error(EEXIST, std::generic_category(), path + " exists and is not a socket");
    ::unlink(path.c_str());
  }
  error_code ec;
  auto& acc = impl_->acceptor;
  acc.open(stream_protocol(), ec);
  if (ec) throw std::system_error(ec, "socket");
  // Bind with no permission bits for others, then widen to the configured mode: never more open
  // than asked for, not even for an instant.
  mode_t old_mask = ::umask(0177);
  acc.bind(stream_protocol::endpoint(path), ec);
  ::umask(old_mask);
  if (ec) throw std::system_error(ec, "bind " + path);
  impl_->bound = true;
  if (::chmod(path.c_str(), impl_->options.mode) != 0)
    throw std::system_error(errno, std::generic_category(), "chmod " + path);
  if (impl_->options.admin_gid && ::chown(path.c_str(), static_cast<uid_t>(-1), *impl_->options.admin_gid) != 0)
    spdlog::warn("control: cannot give {} to group {}: {}", path, *impl_->options.admin_gid, std::strerror(errno));
  acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) throw std::system_error(ec, "listen " + path);
  impl_->accept();
}

void ControlServer::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  error_code ec;
  impl_->acceptor.close(ec);
  auto conns = impl_->connections;  // close() erases from the set
  for (auto& c : conns) c->close();
  impl_->connections.clear();
  if (impl_->bound) ::unlink(impl_->options.path.c_str());
  impl_->bound = false;
}

void ControlServer::update(const ControlServerOptions& options) {
  impl_->options.admin_gid = options.admin_gid;
  impl_->options.max_connections = options.max_connections;
  bool idle_changed = impl_->options.idle_timeout_ms != options.idle_timeout_ms;
  impl_->options.idle_timeout_ms = options.idle_timeout_ms;
  if (idle_changed)
    for (auto& c : impl_->connections) c->rearm_idle();
  if (impl_->bound && options.admin_gid &&
      ::chown(impl_->options.path.c_str(), static_cast<uid_t>(-1), *options.admin_gid) != 0)
    spdlog::warn("control: cannot give {} to group {}: {}", impl_->options.path, *options.admin_gid, std::strerror(errno));
}

ControlServerCounters ControlServer::counters() const { return impl_->counters; }

}  // namespace haltpolld
