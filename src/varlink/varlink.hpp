// Varlink message layer, pure: framing (one JSON object per message, each ending in a NUL byte),
// the decoding and encoding of calls and replies (the server's side and the client's), and a
// registry of methods keyed by their qualified name, with the org.varlink.service introspection
// built in. No sockets and no Asio here, so that the unit tests
// and the fuzzer drive exactly the code the server runs. Nothing is shared between threads: the
// server uses one FrameDecoder per connection and dispatches on its single control thread.
#pragma once

#include <nlohmann/json.hpp>

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace haltpolld::varlink {

// Bound of one message (NUL excluded). A client that exceeds it gets an error and is disconnected.
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;

// Splits a byte stream on NUL. Bounded: a message (complete or still arriving) longer than the limit
// puts the decoder into the overflow state, after which it yields nothing.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_message_bytes = kMaxMessageBytes) : max_(max_message_bytes) {}

  // Appends received bytes. Returns false once the decoder has overflowed.
  bool feed(std::string_view bytes);
  // The next complete message without its NUL, or nullopt when none is complete (or overflowed).
  std::optional<std::string> next();

  bool overflowed() const noexcept { return overflowed_; }
  // Bytes received but not yet returned by next(): non-zero at EOF means a half-sent message.
  std::size_t pending_bytes() const noexcept { return buf_.size() - start_; }
  std::size_t max_message_bytes() const noexcept { return max_; }

 private:
  std::string buf_;
  std::size_t start_ = 0;  // first byte of the current message
  std::size_t scan_ = 0;   // bytes before this are known not to be NUL
  std::size_t max_;
  bool overflowed_ = false;
};

struct Call {
  std::string method;  // qualified: "io.haltpolld.GetStatus"
  nlohmann::json parameters = nlohmann::json::object();
  bool more = false;
  bool oneway = false;
  // Set by the server for a streaming method: 0 for the call itself, n for its n-th repetition.
  std::uint64_t stream_index = 0;
  // A well-formed call whose "parameters" is neither an object nor null: dispatch() answers
  // org.varlink.service.InvalidParameter naming it, and the connection stays open.
  std::string invalid_parameter{};
};

// Decodes one message. On failure returns nullopt and sets `why`; the server then sends an error
// and closes the connection (varlink: a malformed message ends the connection).
std::optional<Call> parse_call(std::string_view text, std::string& why);

struct Reply {
  nlohmann::json parameters = nlohmann::json::object();
  std::string error;  // empty: success
  bool continues = false;
  // Streaming only: how long the server waits before calling the handler again (not sent).
  unsigned next_after_ms = 0;

  bool is_error() const noexcept { return !error.empty(); }
};

// Decodes one reply, on the client's side. Its fields are the spec's three: "parameters" (an
// object; null or absent is none, as the reference Go service sends for a method without output),
// "error" (a qualified name) and "continues" (a boolean, never together with an error). Anything
// else is malformed: nullopt and `why`, and the caller drops the connection.
std::optional<Reply> parse_reply(std::string_view text, std::string& why);

// The bytes to send: the JSON object followed by one NUL. An error ends a stream, so an error
// reply never carries "continues".
std::string encode_reply(const Reply& r);
std::string encode_call(const Call& c);

Reply error_reply(std::string error, nlohmann::json parameters = nlohmann::json::object());
Reply invalid_parameter(std::string parameter, std::string reason = {});

// Generic error names (org.varlink.service.*).
namespace errors {
inline constexpr const char* interface_not_found = "org.varlink.service.InterfaceNotFound";
inline constexpr const char* method_not_found = "org.varlink.service.MethodNotFound";
inline constexpr const char* method_not_implemented = "org.varlink.service.MethodNotImplemented";
inline constexpr const char* invalid_parameter = "org.varlink.service.InvalidParameter";
inline constexpr const char* permission_denied = "org.varlink.service.PermissionDenied";
inline constexpr const char* expected_more = "org.varlink.service.ExpectedMore";
}  // namespace errors

// Who called: from SO_PEERCRED (and SO_PEERGROUPS) on the server's side.
struct Peer {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
  bool admin = false;  // decided by the server's access policy
};

using Handler = std::function<Reply(const Call&, const Peer&)>;

struct Method {
  std::string name;        // qualified name
  std::string signature;   // IDL, e.g. "method GetStats(cpu: ?int) -> (cpus: []CpuStats)"
  bool admin_only = false; // changes state: needs Peer::admin
  bool streaming = false;  // needs `more`: the server calls the handler again while continues
  Handler handler;
};

struct ServiceInfo {
  std::string vendor = "haltpolld";
  std::string product = "haltpolld";
  std::string version;
  std::string url = "https://github.com/haltpolld/haltpolld";
};

// Methods by qualified name. dispatch() checks name, permission and `more` before calling the
// handler; a handler that throws becomes an error reply, never a crash.
class Registry {
 public:
  explicit Registry(ServiceInfo info = {});

  void add(Method m);
  // Extra IDL for an interface (type and error declarations) shown by GetInterfaceDescription.
  void describe_interface(const std::string& interface, std::string idl_preamble);

  const Method* find(std::string_view qualified_name) const;
  Reply dispatch(const Call& call, const Peer& peer) const;

  std::vector<std::string> interfaces() const;
  std::optional<std::string> interface_description(const std::string& interface) const;
  std::vector<std::string> method_names() const;

 private:
  ServiceInfo info_;
  std::map<std::string, Method, std::less<>> methods_;
  std::map<std::string, std::string, std::less<>> preambles_;
};

// "io.haltpolld.GetStatus" → {"io.haltpolld", "GetStatus"}; an empty interface when malformed.
std::pair<std::string_view, std::string_view> split_method(std::string_view qualified);

}  // namespace haltpolld::varlink
