// An org.varlink.certification service on the project's varlink library (its registry, codec and
// framing) and the daemon's own socket loop (ControlServer, haltpolld_control_server), so that the
// reference Go certification client (varlink-go-certification --client) checks the code haltpolld
// runs. The semantics are the reference services': Start gives a client id; every later call must
// name a known id (else ClientIdError, as the Go service) and must be, to the value, the call the
// sequence expects next (else CertificationError with `wants` and `got`, as the Python service,
// and the id is forgotten, so that End fails after a failed oneway Test11 too). Test10 needs
// `more` and answers ten times; End answers all_ok once every step passed.
// Usage: certification_server [--varlink=]unix:PATH    (SIGTERM or SIGINT: exit 0)
// Single-threaded: the handlers run on the io_context's thread, like the daemon's.
#include "certification.hpp"
#include "control/control_server.hpp"
#include "varlink/varlink.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

#include <csignal>
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <string_view>

namespace {

namespace varlink = haltpolld::varlink;
using nlohmann::json;

// The declarations of the reference's interface; the registry appends the methods' signatures.
constexpr const char* kIdlPreamble =
    R"(# The varlink certification interface: a client calls Start, Test01 ... Test11 and End in this
# order, each call with the client id and what the call before it returned.
interface org.varlink.certification

type Interface (
  foo: ?[]?[string](foo, bar, baz),
  anon: (foo: bool, bar: bool)
)

type MyType (
  object: object,
  enum: (one, two, three),
  struct: (first: int, second: string),
  array: []string,
  dictionary: [string]string,
  stringset: [string](),
  nullable: ?string,
  nullable_array_struct: ?[](first: int, second: string),
  interface: Interface
)

# The client id is not one Start gave out, or it was forgotten after a failed step.
error ClientIdError ()

# The call is not the one the sequence expects next.
error CertificationError (wants: object, got: object)
)";

constexpr std::pair<std::string_view, std::string_view> kSignatures[] = {
    {"Start", "method Start() -> (client_id: string)"},
    {"Test01", "method Test01(client_id: string) -> (bool: bool)"},
    {"Test02", "method Test02(client_id: string, bool: bool) -> (int: int)"},
    {"Test03", "method Test03(client_id: string, int: int) -> (float: float)"},
    {"Test04", "method Test04(client_id: string, float: float) -> (string: string)"},
    {"Test05",
     "method Test05(client_id: string, string: string) -> (bool: bool, int: int, float: float, string: string)"},
    {"Test06",
     "method Test06(client_id: string, bool: bool, int: int, float: float, string: string)\n"
     "  -> (struct: (bool: bool, int: int, float: float, string: string))"},
    {"Test07",
     "method Test07(client_id: string, struct: (bool: bool, int: int, float: float, string: string))\n"
     "  -> (map: [string]string)"},
    {"Test08", "method Test08(client_id: string, map: [string]string) -> (set: [string]())"},
    {"Test09", "method Test09(client_id: string, set: [string]()) -> (mytype: MyType)"},
    {"Test10",
     "# Called with \"more\": ten replies, all but the last with \"continues\".\n"
     "method Test10(client_id: string, mytype: MyType) -> (string: string)"},
    {"Test11", "# Called \"oneway\": no reply.\nmethod Test11(client_id: string, last_more_replies: []string) -> ()"},
    {"End", "method End(client_id: string) -> (all_ok: bool)"},
};

// The call as the reference Python service compares it: what the client sent, flags included.
json as_sent(const varlink::Call& call) {
  json j = {{"method", call.method}};
  if (!call.parameters.empty()) j["parameters"] = call.parameters;
  if (call.more) j["more"] = true;
  if (call.oneway) j["oneway"] = true;
  return j;
}

class CertificationService {
 public:
  void add_to(varlink::Registry& registry) {
    registry.describe_interface(certification::kInterface, kIdlPreamble);
    for (const auto& [method, signature] : kSignatures)
      registry.add(
          varlink::Method{.name = certification::qualified(method),
                          .signature = std::string(signature),
                          .handler = [this, m = std::string(method)](const varlink::Call& call, const varlink::Peer&) {
                            return step(m, call);
                          }});
  }

 private:
  static constexpr std::size_t kMaxClients = 100;

  // The whole call the sequence expects for `method` from `client_id`.
  static json expected(const std::string& method, const std::string& client_id) {
    json p = certification::parameters_of(method);
    json j = {{"method", certification::qualified(method)}};
    if (method != "Start") {
      p["client_id"] = client_id;
      j["parameters"] = p;
    }
    if (method == "Test10") j["more"] = true;
    if (method == "Test11") j["oneway"] = true;
    return j;
  }

  static varlink::Reply refused(json wants, json got) {
    return varlink::error_reply(certification::kCertificationError,
                                {{"wants", std::move(wants)}, {"got", std::move(got)}});
  }

  std::string new_client() {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id;
    for (int i = 0; i < 32; ++i) id.push_back(kHex[random_() & 15]);
    if (order_.size() >= kMaxClients) {
      clients_.erase(order_.front());
      order_.pop_front();
    }
    clients_[id] = "Test01";
    order_.push_back(id);
    return id;
  }

  void forget(const std::string& id) {
    clients_.erase(id);
    std::erase(order_, id);
  }

  varlink::Reply step(const std::string& method, const varlink::Call& call) {
    varlink::Reply r;
    if (method == "Test10" && call.stream_index > 0) {
      // The stream's later replies: the call was checked when it came.
      const int n = static_cast<int>(call.stream_index) + 1;
      r.parameters = {{"string", certification::more_reply(n)}};
      r.continues = n < certification::kMoreReplies;
      return r;
    }
    if (method == "Start") {
      if (as_sent(call) != expected(method, {})) return refused(expected(method, {}), as_sent(call));
      r.parameters = {{"client_id", new_client()}};
      return r;
    }
    auto id_it = call.parameters.find("client_id");
    if (id_it == call.parameters.end() || !id_it->is_string()) return varlink::invalid_parameter("client_id");
    const std::string id = id_it->get<std::string>();
    auto client = clients_.find(id);
    if (client == clients_.end()) return varlink::error_reply(certification::kClientIdError);
    if (client->second != method) {
      json wants = {{"method", certification::qualified(client->second)}};
      forget(id);
      return refused(std::move(wants), {{"method", call.method}});
    }
    json wants = expected(method, id);
    if (certification::without_nulls(as_sent(call)) != certification::without_nulls(wants)) {
      forget(id);
      return refused(std::move(wants), as_sent(call));
    }
    if (method == "End") {
      forget(id);
    } else {
      for (std::size_t i = 0; i + 1 < certification::kSequence.size(); ++i)
        if (certification::kSequence[i] == method) client->second = std::string(certification::kSequence[i + 1]);
    }
    if (method == "Test10") {
      r.parameters = {{"string", certification::more_reply(1)}};
      r.continues = true;
      return r;
    }
    r.parameters = certification::reply_of(method);
    return r;
  }

  std::map<std::string, std::string> clients_;  // id -> the method it calls next
  std::deque<std::string> order_;               // ids, oldest first
  std::mt19937_64 random_{std::random_device{}()};
};

// "--varlink=unix:PATH", "unix:PATH" or a bare path: the socket path.
std::string socket_path(std::string_view arg) {
  if (arg.starts_with("--varlink=")) arg.remove_prefix(10);
  if (arg.starts_with("unix:")) arg.remove_prefix(5);
  return std::string(arg.substr(0, arg.find(';')));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: certification_server [--varlink=]unix:PATH\n");
    return 2;
  }
  try {
    boost::asio::io_context io;
    varlink::Registry registry({.vendor = "haltpolld",
                                .product = "haltpolld varlink certification service",
                                .version = HALTPOLL_VERSION_STRING_FOR_TEST,
                                .url = "https://github.com/haltpolld/haltpolld"});
    CertificationService service;
    service.add_to(registry);
    haltpolld::ControlServerOptions options;
    options.path = socket_path(argv[1]);
    options.mode = 0600;
    haltpolld::ControlServer server(io, registry, options);
    server.start();
    boost::asio::signal_set stop(io, SIGTERM, SIGINT);
    stop.async_wait([&](const boost::system::error_code&, int) {
      server.stop();
      io.stop();
    });
    std::printf("certification_server: listening on unix:%s\n", options.path.c_str());
    std::fflush(stdout);
    io.run();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "certification_server: %s\n", e.what());
    return 1;
  }
}
