// An org.varlink.certification client on the project's varlink library (encode_call, FrameDecoder,
// parse_reply) over a blocking AF_UNIX socket, for the reference Go certification service
// (varlink-go-certification --varlink=unix:PATH). It calls Start, Test01 … Test11 and End, each
// with what the call before returned, and checks every reply against the reference's values; then
// what the reference says to calls it must refuse: an unknown client id, a wrong value, Test10
// without `more`, an unknown method and interface; and GetInfo and GetInterfaceDescription.
// Usage: certification_client [--varlink=]unix:PATH    (exit 0: every check passed)
#include "certification.hpp"
#include "varlink/varlink.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

namespace varlink = haltpolld::varlink;
using nlohmann::json;

constexpr int kReplyTimeoutMs = 10000;

class Connection {
 public:
  explicit Connection(const std::string& path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error("connect " + path + ": " + std::strerror(errno));
  }
  ~Connection() {
    if (fd_ >= 0) ::close(fd_);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  void send(const varlink::Call& call) {
    const std::string bytes = varlink::encode_call(call);
    for (std::size_t off = 0; off < bytes.size();) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
      off += static_cast<std::size_t>(n);
    }
  }

  varlink::Reply receive() {
    while (true) {
      if (auto msg = decoder_.next()) {
        std::string why;
        auto r = varlink::parse_reply(*msg, why);
        if (!r) throw std::runtime_error("malformed reply (" + why + "): " + *msg);
        return std::move(*r);
      }
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, kReplyTimeoutMs);
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) throw std::runtime_error("no reply within " + std::to_string(kReplyTimeoutMs) + " ms");
      char chunk[65536];
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("the service closed the connection");
      if (!decoder_.feed(std::string_view(chunk, static_cast<std::size_t>(n))))
        throw std::runtime_error("a reply exceeds " + std::to_string(decoder_.max_message_bytes()) + " bytes");
    }
  }

  varlink::Reply call(const std::string& method, json parameters = json::object()) {
    send({.method = method, .parameters = std::move(parameters)});
    return receive();
  }

 private:
  int fd_ = -1;
  varlink::FrameDecoder decoder_{16u << 20};
};

int failures = 0;

bool check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
  if (!ok) ++failures;
  return ok;
}

std::string shown(const varlink::Reply& r) {
  return r.is_error() ? r.error + " " + r.parameters.dump() : r.parameters.dump();
}

// One run of the sequence. With `stop_before` the run ends there, its client id returned.
std::optional<std::string> run_sequence(Connection& c, std::string_view stop_before = {}) {
  auto start = c.call(certification::qualified("Start"));
  const bool started = !start.is_error() && start.parameters.value("client_id", json()).is_string() &&
                       !start.parameters["client_id"].get<std::string>().empty();
  if (!check(started, "Start: " + shown(start))) return std::nullopt;
  const std::string id = start.parameters["client_id"];
  json previous = json::object();
  for (std::string_view method : certification::kSequence) {
    if (method == "Start") continue;
    if (method == stop_before) return id;
    json p = previous;
    p["client_id"] = id;
    if (method == "Test10") {
      // `more`: the replies until one comes without "continues".
      c.send({.method = certification::qualified(method), .parameters = p, .more = true});
      json strings = json::array();
      bool ok = true;
      for (bool more = true; more && ok;) {
        varlink::Reply r = c.receive();
        more = r.continues;
        const int n = static_cast<int>(strings.size()) + 1;
        ok = check(!r.is_error() && r.parameters == json{{"string", certification::more_reply(n)}} &&
                       more == (n < certification::kMoreReplies),
                   "Test10 reply " + std::to_string(n) + (more ? " (continues): " : ": ") + shown(r));
        strings.push_back(r.parameters.value("string", ""));
      }
      if (!ok) return std::nullopt;
      previous = {{"last_more_replies", strings}};
      continue;
    }
    if (method == "Test11") {
      // oneway: no reply; End's reply is the next message.
      c.send({.method = certification::qualified(method), .parameters = p, .oneway = true});
      std::printf("Test11: sent oneway: %s\n", p["last_more_replies"].dump().c_str());
      previous = json::object();
      continue;
    }
    varlink::Reply r = c.call(certification::qualified(method), p);
    const json want = certification::reply_of(method);
    if (!check(!r.is_error() && certification::without_nulls(r.parameters) == certification::without_nulls(want),
               std::string(method) + ": " + shown(r)))
      return std::nullopt;
    previous = r.parameters;
  }
  return id;
}

void check_error(const varlink::Reply& r, const std::string& error, const std::string& what) {
  check(r.error == error, what + " -> " + error + ": " + shown(r));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: certification_client [--varlink=]unix:PATH\n");
    return 2;
  }
  std::string_view arg = argv[1];
  if (arg.starts_with("--varlink=")) arg.remove_prefix(10);
  if (arg.starts_with("unix:")) arg.remove_prefix(5);
  try {
    Connection c{std::string(arg.substr(0, arg.find(';')))};

    auto info = c.call("org.varlink.service.GetInfo");
    json ifaces = info.parameters.value("interfaces", json::array());
    auto has = [&](const char* i) { return std::find(ifaces.begin(), ifaces.end(), i) != ifaces.end(); };
    bool strings = true;
    for (const char* k : {"vendor", "product", "version", "url"})
      strings &= info.parameters.value(k, json()).is_string();
    check(!info.is_error() && strings && has(certification::kInterface) && has("org.varlink.service"),
          "GetInfo: " + shown(info));
    auto desc = c.call("org.varlink.service.GetInterfaceDescription", {{"interface", certification::kInterface}});
    const std::string idl = desc.parameters.value("description", "");
    bool declared = idl.find("interface org.varlink.certification") != std::string::npos;
    for (std::string_view m : certification::kSequence)
      declared &= idl.find("method " + std::string(m) + "(") != std::string::npos;
    declared &= idl.find("error ClientIdError") != std::string::npos &&
                idl.find("error CertificationError") != std::string::npos;
    check(!desc.is_error() && declared,
          "GetInterfaceDescription(org.varlink.certification) declares every method and error");

    std::optional<std::string> passed = run_sequence(c);
    if (passed) std::printf("certification sequence passed: Start .. Test11 .. End, all_ok\n");

    // What the reference refuses, and how it says so.
    check_error(c.call(certification::qualified("Test01"), {{"client_id", "no-such-client"}}),
                certification::kClientIdError, "Test01(unknown client id)");
    if (auto id = run_sequence(c, "Test02")) {
      check_error(c.call(certification::qualified("Test02"), {{"client_id", *id}, {"bool", false}}),
                  certification::kCertificationError, "Test02(bool: false)");
    }
    if (auto id = run_sequence(c, "Test10")) {
      json p = certification::parameters_of("Test10");
      p["client_id"] = *id;
      check_error(c.call(certification::qualified("Test10"), p), certification::kCertificationError,
                  "Test10 without more");
    }
    check_error(c.call(certification::qualified("Test99")), varlink::errors::method_not_found,
                "org.varlink.certification.Test99");
    auto nope = c.call("org.nope.Start");
    check_error(nope, varlink::errors::interface_not_found, "org.nope.Start");
    check(nope.parameters.value("interface", "") == "org.nope", "InterfaceNotFound names org.nope");
  } catch (const std::exception& e) {
    check(false, e.what());
  }
  if (failures > 0) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("PASS: org.varlink.certification, every step and every refusal as the reference service answers\n");
  return 0;
}
