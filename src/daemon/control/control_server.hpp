// ControlServer: the varlink control socket (AF_UNIX stream) on the daemon's control io_context.
// It accepts connections, reads NUL-framed calls with a per-connection FrameDecoder, asks SO_PEERCRED
// and SO_PEERGROUPS who the peer is, dispatches through a varlink::Registry and writes the replies
// in call order. Streaming calls (`more`) are re-dispatched on a per-connection timer.
//
// Bounds, so that no client can stall, starve or crash the daemon: a message is at most
// max_message_bytes (else MessageTooLarge, then close), a malformed message gets MalformedMessage
// and the connection is closed. The peer is identified before it counts against a limit: at most
// max_connections are open, of which the last admin_reserved_connections only for admins, and at
// most max_connections_per_uid per uid other than 0 and the daemon's own (the next gets
// TooManyConnections and is closed). A connection that completes no message for idle_timeout_ms
// is closed (half-sent messages included), and so is one whose replies make no write progress for
// idle_timeout_ms (a Watch stream nobody reads) or exceed max_write_queue_bytes. Memory per
// connection is bounded by not reading: while a stream runs or read_pause_bytes of replies are
// unread, further calls stay unparsed in the socket (at most one read chunk and one partial
// message are buffered), and a Watch stream skips a tick instead of queueing behind an unread
// reply. A client that half-closes still receives the replies to the calls it sent. The calls of
// one non-admin uid share a token bucket (calls_per_second_per_uid, call_burst_per_uid): a call
// beyond it gets RateLimited (retry_after_ms) and that connection reads nothing more until a token
// is due, so a flood costs the control thread one small reply per connection and pause.
//
// Admin status is decided once, at connect: the admin group is restart-only. If SO_PEERGROUPS
// fails the peer has no supplementary groups (never a zero-filled list, which would read as gid 0).
//
// Threading: everything runs on the one thread that runs the io_context; no member is touched from
// anywhere else, so there are no locks. This header does not include Asio (the io_context is only
// forward-declared) so that the daemon's other code compiles without it.
#pragma once

#include "varlink/varlink.hpp"

#include <sys/socket.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace boost::asio {
class io_context;
}

namespace haltpolld {

// getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, ...) by default; a test seam to make it fail.
using PeerGroupsQuery = int (*)(int fd, gid_t* groups, socklen_t* bytes);

struct ControlServerOptions {
  std::string path;
  unsigned mode = 0660;
  std::optional<gid_t> admin_gid;  // members may call admin_only methods (uid 0 and our euid always may)
  unsigned max_connections = 128;
  unsigned admin_reserved_connections = 8;  // of max_connections, only for admins
  unsigned max_connections_per_uid = 32;    // uid 0 and the daemon's uid are not limited
  unsigned idle_timeout_ms = 60000;
  // Calls per second of one non-admin uid over all its connections (a token bucket holding up to
  // call_burst_per_uid); 0: unlimited. Admins are never limited.
  unsigned calls_per_second_per_uid = 200;
  unsigned call_burst_per_uid = 400;
  std::size_t max_message_bytes = varlink::kMaxMessageBytes;
  std::size_t max_write_queue_bytes = 4 * 1024 * 1024;
  std::size_t read_pause_bytes = 64 * 1024;  // unread replies beyond which no new call is read
  int send_buffer_bytes = 8 * 1024;          // SO_SNDBUF of each connection (kernel memory per client)
  PeerGroupsQuery peer_groups = nullptr;     // nullptr: the real SO_PEERGROUPS
  // A test seam: runs after bind() where a race could swap the path before its group and mode are set.
  void (*after_bind)(const std::string& path) = nullptr;
};

struct ControlServerCounters {
  std::uint64_t connections_open = 0;
  std::uint64_t connections_total = 0;
  std::uint64_t requests_total = 0;
  std::uint64_t errors_total = 0;
  std::uint64_t rejected_total = 0;
  std::uint64_t rate_limited_total = 0;  // calls answered RateLimited (also in errors_total)
};

class ControlServer {
 public:
  ControlServer(boost::asio::io_context& io, const varlink::Registry& registry, ControlServerOptions options);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Binds and listens. A leftover socket file at the path is removed first (the caller holds the
  // single-instance lock, so it is stale); any other kind of file there is an error. Sets the file
  // mode and, with an admin group, the file's group, on the inode bind() created and never through
  // the path (a symlink or hard link swapped in meanwhile is left alone and start() fails). Throws
  // std::system_error with the reason.
  void start();
  // Closes the acceptor and every connection and removes the socket file. Idempotent.
  void stop();
  // Applies the settings that may change at run time: max_connections, max_connections_per_uid,
  // idle_timeout_ms, the per-uid call rate and burst (admin_gid is fixed at start).
  void update(const ControlServerOptions& options);
  ControlServerCounters counters() const;

  struct Impl;  // public so that the connections in control_server.cpp can name it

 private:
  std::shared_ptr<Impl> impl_;
};

// Resolves a group name to its gid (getgrnam_r); nullopt for an unknown group.
std::optional<gid_t> resolve_group(const std::string& name);

}  // namespace haltpolld
