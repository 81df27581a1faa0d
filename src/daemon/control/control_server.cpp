#include "control/control_server.hpp"

#include "varlink/io_haltpolld.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <deque>
#include <system_error>
#include <unordered_map>
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

class Connection;

int real_peer_groups(int fd, gid_t* groups, socklen_t* bytes) {
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, bytes);
}

}  // namespace

struct ControlServer::Impl : std::enable_shared_from_this<ControlServer::Impl> {
  Impl(asio::io_context& context, const varlink::Registry& r, ControlServerOptions o)
      : io(context), registry(r), options(std::move(o)), acceptor(io) {}

  void accept();
  void admit(const std::shared_ptr<Connection>& c);
  void remove(Connection* c);
  bool is_admin(const ucred& cred, const std::vector<gid_t>& groups) const;
  // Empty when a peer may take a slot; else why not.
  std::string refusal(uid_t uid, bool admin) const;
  // Takes one call from the uid's bucket: 0 when it may run, else the ms until a token is due.
  unsigned take_call(uid_t uid);

  asio::io_context& io;
  const varlink::Registry& registry;
  ControlServerOptions options;
  stream_protocol::acceptor acceptor;
  std::unordered_set<std::shared_ptr<Connection>> connections;
  std::unordered_map<uid_t, unsigned> per_uid;
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point at;
  };
  std::unordered_map<uid_t, Bucket> buckets;  // kept after a uid's last connection: reconnecting refills nothing
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
        pause_timer_(server_->io),
        decoder_(server_->options.max_message_bytes) {}

  // Who is calling, before the peer counts against any limit.
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
    const PeerGroupsQuery query = server_->options.peer_groups ? server_->options.peer_groups : real_peer_groups;
    std::vector<gid_t> groups(64);
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    int rc = query(fd, groups.data(), &glen);
    if (rc != 0 && errno == ERANGE) {
      groups.resize(glen / sizeof(gid_t) + 1);
      glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
      rc = query(fd, groups.data(), &glen);
    }
    if (rc != 0) {
      // No list is no membership: the zero-filled buffer must never be read as 64 times gid 0.
      spdlog::debug("control: SO_PEERGROUPS of pid {} failed ({}); counting no supplementary groups", cred.pid,
                    std::strerror(errno));
      groups.clear();
    } else {
      groups.resize(std::min<std::size_t>(groups.size(), glen / sizeof(gid_t)));
    }
    peer_.uid = cred.uid;
    peer_.gid = cred.gid;
    peer_.pid = cred.pid;
    peer_.admin = server_->is_admin(cred, groups);
    // A small send buffer bounds the kernel memory a non-reading client pins, and makes a stalled
    // reader visible (no write progress) within a few replies.
    const int sndbuf = server_->options.send_buffer_bytes;
    if (sndbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  }
  const varlink::Peer& peer() const noexcept { return peer_; }

  void start() {
    last_progress_ = std::chrono::steady_clock::now();
    arm_idle_timer();
    read();
  }

  // Over a connection limit: say why, then close.
  void reject(unsigned limit, const std::string& why) {
    ++server_->counters.rejected_total;
    spdlog::debug("control: refusing pid {} uid {}: {}", peer_.pid, peer_.uid, why);
    enqueue(varlink::encode_reply(varlink::error_reply(errors::too_many_connections, {{"limit", limit}, {"reason", why}})));
    close_after_write_ = true;
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    idle_timer_.cancel();
    stream_timer_.cancel();
    pause_timer_.cancel();
    socket_.shutdown(stream_protocol::socket::shutdown_both, ec);
    socket_.close(ec);
    server_->remove(this);
  }

  void rearm_idle() { arm_idle_timer(); }

 private:
  void arm_idle_timer() {
    idle_timer_.expires_after(std::chrono::milliseconds(server_->options.idle_timeout_ms));
    idle_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->closed_) return;
      const auto timeout = std::chrono::milliseconds(self->server_->options.idle_timeout_ms);
      if (!self->wqueue_.empty() && std::chrono::steady_clock::now() - self->last_progress_ >= timeout) {
        // Replies (a Watch stream's included) that nobody reads: the slot goes back.
        spdlog::debug("control: pid {} reads no replies; closing", self->peer_.pid);
        ++self->server_->counters.rejected_total;
        return self->close();
      }
      if (self->streaming_ || !self->wqueue_.empty()) return self->arm_idle_timer();  // busy, not idle
      spdlog::debug("control: closing idle connection of pid {}", self->peer_.pid);
      ++self->server_->counters.rejected_total;
      self->close();
    });
  }

  bool may_process() const {
    return !closed_ && !close_after_write_ && !streaming_ && !paused_ && wbytes_ < server_->options.read_pause_bytes;
  }

  void read() {
    if (reading_ || peer_eof_ || !drained_ || !may_process()) return;
    reading_ = true;
    socket_.async_read_some(asio::buffer(rbuf_), [self = shared_from_this()](const error_code& ec, std::size_t n) {
      self->reading_ = false;
      self->on_read(ec, n);
    });
  }

  void on_read(const error_code& ec, std::size_t n) {
    if (closed_) return;
    if (ec == asio::error::eof) {
      // A half-close: the calls already sent still get their replies.
      if (decoder_.pending_bytes() > 0)
        spdlog::debug("control: pid {} hung up in the middle of a message ({} bytes)", peer_.pid, decoder_.pending_bytes());
      peer_eof_ = true;
      return process();
    }
    if (ec) return close();
    drained_ = false;
    if (!decoder_.feed(std::string_view(rbuf_.data(), n))) {
      return fail(varlink::error_reply(errors::message_too_large, {{"limit", decoder_.max_message_bytes()}}));
    }
    process();
  }

  // Handles the complete calls in the decoder while nothing holds them back, then reads on.
  void process() {
    while (may_process()) {
      auto text = decoder_.next();
      if (!text) {
        drained_ = true;
        break;
      }
      std::string why;
      auto call = varlink::parse_call(*text, why);
      if (!call) return fail(varlink::error_reply(errors::malformed_message, {{"reason", why}}));
      arm_idle_timer();
      if (!peer_.admin) {
        if (const unsigned wait_ms = server_->take_call(peer_.uid); wait_ms > 0) {
          rate_limited(*call, wait_ms);
          break;
        }
      }
      handle(std::move(*call));
    }
    if (peer_eof_) return finish_if_done();
    read();
  }

  // Over the uid's call budget: this call is answered with RateLimited, not run, and nothing more is
  // read from this connection until a token is due.
  void rate_limited(const varlink::Call& call, unsigned wait_ms) {
    ++server_->counters.requests_total;
    ++server_->counters.errors_total;
    ++server_->counters.rate_limited_total;
    if (!call.oneway) enqueue(varlink::encode_reply(varlink::error_reply(errors::rate_limited, {{"retry_after_ms", wait_ms}})));
    paused_ = true;
    pause_timer_.expires_after(std::chrono::milliseconds(wait_ms));
    pause_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
      if (ec || self->closed_) return;
      self->paused_ = false;
      self->process();
    });
  }

  void finish_if_done() {
    if (closed_ || !peer_eof_ || !drained_ || streaming_ || writing_ || !wqueue_.empty()) return;
    close();
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
      self->streaming_ = false;
      self->process();  // the calls that waited behind the stream
    });
  }

  void enqueue(std::string bytes) {
    if (closed_) return;
    if (wqueue_.empty()) last_progress_ = std::chrono::steady_clock::now();
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
      self->last_progress_ = std::chrono::steady_clock::now();
      self->wbytes_ -= self->wqueue_.front().size();
      self->wqueue_.pop_front();
      if (!self->wqueue_.empty()) return self->write();
      if (self->close_after_write_) return self->close();
      self->process();  // reading resumes once the client has caught up
    });
  }

  std::shared_ptr<ControlServer::Impl> server_;
  stream_protocol::socket socket_;
  asio::steady_timer idle_timer_;
  asio::steady_timer stream_timer_;
  asio::steady_timer pause_timer_;
  varlink::FrameDecoder decoder_;
  std::array<char, 8192> rbuf_{};
  std::deque<std::string> wqueue_;
  std::size_t wbytes_ = 0;
  std::chrono::steady_clock::time_point last_progress_{};
  bool writing_ = false;
  bool reading_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  bool streaming_ = false;
  bool paused_ = false;  // over the uid's call budget
  bool peer_eof_ = false;
  bool drained_ = true;  // no complete call is left in the decoder
  varlink::Call stream_call_;
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

std::string ControlServer::Impl::refusal(uid_t uid, bool admin) const {
  const std::size_t open = connections.size();
  if (open >= options.max_connections) return "all connections are taken";
  const unsigned reserved = std::min(options.admin_reserved_connections, options.max_connections - 1);
  if (!admin && open >= options.max_connections - reserved)
    return "the remaining connections are reserved for administrators";
  if (uid != 0 && uid != ::geteuid()) {
    auto it = per_uid.find(uid);
    if (it != per_uid.end() && it->second >= options.max_connections_per_uid) return "too many connections of this uid";
  }
  return {};
}

unsigned ControlServer::Impl::take_call(uid_t uid) {
  const double rate = options.calls_per_second_per_uid;
  if (rate <= 0) return 0;
  const double burst = std::max(1u, options.call_burst_per_uid);
  const auto now = std::chrono::steady_clock::now();
  auto [it, fresh] = buckets.try_emplace(uid, Bucket{burst, now});
  Bucket& b = it->second;
  b.tokens = std::min(burst, b.tokens + rate * std::chrono::duration<double>(now - b.at).count());
  b.at = now;
  if (fresh && buckets.size() > 4096) {
    // Many uids came and went: forget the full buckets (they would start full anyway).
    std::erase_if(buckets, [&](const auto& e) {
      return e.first != uid && e.second.tokens + rate * std::chrono::duration<double>(now - e.second.at).count() >= burst;
    });
  }
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return 0;
  }
  return static_cast<unsigned>(std::ceil((1 - b.tokens) / rate * 1000));
}

void ControlServer::Impl::admit(const std::shared_ptr<Connection>& conn) {
  conn->identify_peer();
  const std::string why = refusal(conn->peer().uid, conn->peer().admin);
  if (!why.empty()) {
    const bool per_uid_limit = why.find("uid") != std::string::npos;
    conn->reject(per_uid_limit ? options.max_connections_per_uid : options.max_connections, why);
    return;
  }
  connections.insert(conn);
  ++per_uid[conn->peer().uid];
  ++counters.connections_total;
  counters.connections_open = connections.size();
  conn->start();
}

void ControlServer::Impl::remove(Connection* c) {
  for (auto it = connections.begin(); it != connections.end(); ++it) {
    if (it->get() == c) {
      auto u = per_uid.find(c->peer().uid);
      if (u != per_uid.end() && --u->second == 0) per_uid.erase(u);
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
    self->admit(std::make_shared<Connection>(self, std::move(socket)));
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
  // bind() gives the file the socket inode's own mode less the umask: so the file is created with
  // its final mode, or, while a group is still to be given, with the owner's bits alone, never
  // more open than asked for, not even for an instant. Nothing after bind() goes by the path's
  // name alone, which whoever may write the directory could swap for a symlink or a hard link.
  const std::optional<gid_t> gid = impl_->options.admin_gid;
  const mode_t at_bind = static_cast<mode_t>(gid ? (impl_->options.mode & 0700) : (impl_->options.mode & 0777));
  if (::fchmod(acc.native_handle(), at_bind) != 0) throw std::system_error(errno, std::generic_category(), "fchmod socket");
  mode_t old_mask = ::umask(0777 & ~at_bind);
  acc.bind(stream_protocol::endpoint(path), ec);
  ::umask(old_mask);
  if (ec) throw std::system_error(ec, "bind " + path);
  impl_->bound = true;
  // The descriptor pins the inode: whatever later happens to the name, the group and the mode go
  // to the socket just bound and to nothing else.
  const int fd = ::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  struct stat bound{};
  if (fd < 0 || ::fstat(fd, &bound) != 0 || !S_ISSOCK(bound.st_mode) || bound.st_uid != ::geteuid() ||
      (bound.st_mode & 07777) != at_bind) {
    if (fd >= 0) ::close(fd);
    impl_->bound = false;  // not ours to unlink
    throw std::system_error(EEXIST, std::generic_category(), path + " is not the socket just bound");
  }
  if (impl_->options.after_bind) impl_->options.after_bind(path);
  auto fail = [&](int e, const std::string& what) {
    ::close(fd);
    throw std::system_error(e, std::generic_category(), what);
  };
  if (gid) {
    if (::fchownat(fd, "", static_cast<uid_t>(-1), *gid, AT_EMPTY_PATH) != 0)
      spdlog::warn("control: cannot give {} to group {}: {}", path, *gid, std::strerror(errno));
    // An O_PATH descriptor takes no fchmod(); its /proc link names exactly its inode (the kernel
    // does not follow a symlink through it, unlike the path).
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    if (::chmod(self.c_str(), impl_->options.mode & 07777) != 0) fail(errno, "chmod " + path + " (through " + self + ")");
  }
  struct stat now{};
  if (::fstatat(AT_FDCWD, path.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_dev != bound.st_dev ||
      now.st_ino != bound.st_ino) {
    impl_->bound = false;
    fail(EEXIST, path + " was replaced while the daemon set up its socket");
  }
  ::close(fd);
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
  impl_->options.max_connections = options.max_connections;
  impl_->options.max_connections_per_uid = options.max_connections_per_uid;
  bool idle_changed = impl_->options.idle_timeout_ms != options.idle_timeout_ms;
  impl_->options.idle_timeout_ms = options.idle_timeout_ms;
  impl_->options.calls_per_second_per_uid = options.calls_per_second_per_uid;
  impl_->options.call_burst_per_uid = options.call_burst_per_uid;
  if (idle_changed)
    for (auto& c : impl_->connections) c->rearm_idle();
}

ControlServerCounters ControlServer::counters() const { return impl_->counters; }

}  // namespace haltpolld
