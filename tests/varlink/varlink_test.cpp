#include "varlink/varlink.hpp"

#include <catch2/catch.hpp>

#include <cstdint>

using namespace haltpolld::varlink;
using nlohmann::json;

TEST_CASE("FrameDecoder splits on NUL across arbitrary chunking") {
  std::string stream = std::string("{\"a\":1}") + '\0' + "{\"b\":2}" + '\0' + "{\"c\"";
  for (std::size_t chunk = 1; chunk <= stream.size(); ++chunk) {
    FrameDecoder d;
    std::vector<std::string> got;
    for (std::size_t i = 0; i < stream.size(); i += chunk) {
      REQUIRE(d.feed(std::string_view(stream).substr(i, chunk)));
      while (auto m = d.next()) got.push_back(*m);
    }
    REQUIRE(got.size() == 2);
    CHECK(got[0] == "{\"a\":1}");
    CHECK(got[1] == "{\"b\":2}");
    CHECK(d.pending_bytes() == 4);  // the half-sent third message
  }
}

TEST_CASE("FrameDecoder bounds a message, complete or still arriving") {
  FrameDecoder d(16);
  CHECK(d.feed(std::string(16, 'x')));
  CHECK_FALSE(d.feed("y"));
  CHECK(d.overflowed());
  CHECK_FALSE(d.next());

  FrameDecoder e(16);
  CHECK_FALSE(e.feed(std::string(17, 'x') + '\0'));
  FrameDecoder f(16);
  CHECK(f.feed(std::string(16, 'x') + '\0' + std::string(16, 'y') + '\0'));
  CHECK(f.next()->size() == 16);
  CHECK(f.next()->size() == 16);
  CHECK_FALSE(f.next());
  CHECK(f.pending_bytes() == 0);
}

TEST_CASE("parse_call accepts valid calls and names what is wrong otherwise") {
  std::string why;
  auto c = parse_call(R"({"method":"io.haltpolld.GetStats","parameters":{"cpu":1},"more":true})", why);
  REQUIRE(c);
  CHECK(c->method == "io.haltpolld.GetStats");
  CHECK(c->parameters["cpu"] == 1);
  CHECK(c->more);
  CHECK_FALSE(c->oneway);

  auto bad = [&](const std::string& text) {
    why.clear();
    bool rejected = !parse_call(text, why);
    return rejected && !why.empty();
  };
  CHECK(bad("not json"));
  CHECK(bad("[]"));
  CHECK(bad("{}"));
  CHECK(bad(R"({"method":1})"));
  CHECK(bad(R"({"method":"GetStats"})"));
  CHECK(bad(R"({"method":"io.haltpolld."})"));
  CHECK(bad(R"({"method":".GetStats"})"));
  CHECK(bad(R"({"method":"io..x.GetStats"})"));
  CHECK(bad(R"({"method":"io.haltpolld.getStats"})"));
  CHECK(bad(R"({"method":"io.haltpolld.GetStats","more":"yes"})"));
  CHECK(bad(R"({"method":"io.haltpolld.GetStats","more":true,"oneway":true})"));
  CHECK(bad(R"({"method":"io.haltpolld.GetStats","colour":1})"));
  CHECK(bad(R"({"method":"io.haltpolld.GetStats","upgrade":true})"));
}

TEST_CASE("parse_call accepts what the reference implementations send") {
  std::string why;
  // Go's GetInfo: "parameters": null; explicit false or null flags are as absent.
  for (const char* text : {R"({"method":"org.varlink.service.GetInfo","parameters":null})",
                           R"({"method":"org.varlink.service.GetInfo","parameters":{},"more":false,"oneway":false,"upgrade":false})",
                           R"({"method":"org.varlink.service.GetInfo","more":null,"oneway":null})"}) {
    auto c = parse_call(text, why);
    INFO(text << ": " << why);
    REQUIRE(c);
    CHECK(c->parameters == json::object());
    CHECK_FALSE(c->more);
    CHECK_FALSE(c->oneway);
    CHECK(c->invalid_parameter.empty());
  }
  // A well-formed call with parameters of the wrong type is a call, answered InvalidParameter.
  Registry reg;
  auto c = parse_call(R"({"method":"org.varlink.service.GetInterfaceDescription","parameters":[]})", why);
  REQUIRE(c);
  auto r = reg.dispatch(*c, Peer{});
  CHECK(r.error == errors::invalid_parameter);
  CHECK(r.parameters["parameter"] == "parameters");
  // ... unless the method does not exist: that is what the caller needs to know first.
  c = parse_call(R"({"method":"org.varlink.service.Nope","parameters":"x"})", why);
  REQUIRE(c);
  CHECK(reg.dispatch(*c, Peer{}).error == errors::method_not_found);
}

TEST_CASE("replies encode as one JSON object and one NUL") {
  Reply r;
  r.parameters = {{"x", 1}};
  r.continues = true;
  std::string s = encode_reply(r);
  REQUIRE(s.back() == '\0');
  CHECK(s.find('\0') == s.size() - 1);
  json j = json::parse(s.substr(0, s.size() - 1));
  CHECK(j["parameters"]["x"] == 1);
  CHECK(j["continues"] == true);
  CHECK_FALSE(j.contains("error"));

  json e = json::parse(encode_reply(error_reply(errors::permission_denied)).c_str());
  CHECK(e["error"] == errors::permission_denied);
  CHECK(e["parameters"].is_object());

  Reply bad_utf8;
  bad_utf8.parameters = {{"s", std::string("\xff\xfe")}};
  CHECK_NOTHROW(encode_reply(bad_utf8));
}

TEST_CASE("Registry dispatch: lookup, permission, more, exceptions, introspection") {
  Registry reg({"v", "p", "1.2.3", "u"});
  reg.add({"io.example.Echo", "method Echo(x: int) -> (x: int)", false, false,
           [](const Call& c, const Peer&) {
             Reply r;
             r.parameters = c.parameters;
             return r;
           }});
  reg.add({"io.example.Change", "method Change() -> ()", true, false, [](const Call&, const Peer&) { return Reply{}; }});
  reg.add({"io.example.Stream", "method Stream() -> ()", false, true, [](const Call&, const Peer&) {
             Reply r;
             r.continues = true;
             return r;
           }});
  reg.add({"io.example.Throw", "", false, false,
           [](const Call&, const Peer&) -> Reply { throw std::runtime_error("boom"); }});
  reg.add({"io.example.Empty", "", false, false, nullptr});

  Peer user{1000, 1000, 1, false}, admin{0, 0, 1, true};
  Call c;
  c.method = "io.example.Echo";
  c.parameters = {{"x", 5}};
  CHECK(reg.dispatch(c, user).parameters["x"] == 5);

  c.method = "io.other.Echo";
  CHECK(reg.dispatch(c, user).error == errors::interface_not_found);
  c.method = "io.example.Nope";
  CHECK(reg.dispatch(c, user).error == errors::method_not_found);
  c.method = "io.example.Change";
  CHECK(reg.dispatch(c, user).error == errors::permission_denied);
  CHECK_FALSE(reg.dispatch(c, admin).is_error());
  c.method = "io.example.Stream";
  CHECK(reg.dispatch(c, user).error == errors::expected_more);
  c.more = true;
  CHECK(reg.dispatch(c, user).continues);
  c.more = false;
  c.method = "io.example.Throw";
  auto t = reg.dispatch(c, user);
  CHECK(t.error == "io.haltpolld.InternalError");
  CHECK(t.parameters["reason"] == "boom");
  c.method = "io.example.Empty";
  CHECK(reg.dispatch(c, user).error == errors::method_not_implemented);

  c.method = "org.varlink.service.GetInfo";
  c.parameters = json::object();
  auto info = reg.dispatch(c, user);
  CHECK(info.parameters["version"] == "1.2.3");
  CHECK(info.parameters["interfaces"] == json({"io.example", "org.varlink.service"}));

  c.method = "org.varlink.service.GetInterfaceDescription";
  c.parameters = {{"interface", "io.example"}};
  auto d = reg.dispatch(c, user);
  CHECK(d.parameters["description"].get<std::string>().find("method Echo(x: int)") != std::string::npos);
  c.parameters = {{"interface", "io.none"}};
  CHECK(reg.dispatch(c, user).error == errors::interface_not_found);
  c.parameters = json::object();
  auto ip = reg.dispatch(c, user);
  CHECK(ip.error == errors::invalid_parameter);
  CHECK(ip.parameters["parameter"] == "interface");
}

TEST_CASE("parse_reply decodes what the reference implementations send") {
  std::string why;
  // Go's service omits "parameters" of a method without output (org.varlink.certification.Test11).
  auto empty = parse_reply("{}", why);
  REQUIRE(empty);
  CHECK(empty->parameters == json::object());
  CHECK_FALSE(empty->is_error());
  CHECK_FALSE(empty->continues);

  auto more = parse_reply(R"({"parameters":{"string":"Reply number 1"},"continues":true})", why);
  REQUIRE(more);
  CHECK(more->parameters["string"] == "Reply number 1");
  CHECK(more->continues);

  auto null_params = parse_reply(R"({"parameters":null,"continues":null,"error":null})", why);
  REQUIRE(null_params);
  CHECK(null_params->parameters == json::object());
  CHECK_FALSE(null_params->is_error());

  // Go's CertificationError: the error name after the parameters, the parameters null inside.
  auto err = parse_reply(
      R"({"parameters":{"wants":null,"got":null},"error":"org.varlink.certification.CertificationError"})", why);
  REQUIRE(err);
  CHECK(err->error == "org.varlink.certification.CertificationError");
  CHECK(err->parameters == json({{"wants", nullptr}, {"got", nullptr}}));
  auto bare = parse_reply(R"({"error":"org.varlink.certification.ClientIdError"})", why);
  REQUIRE(bare);
  CHECK(bare->error == "org.varlink.certification.ClientIdError");
  CHECK(bare->parameters == json::object());
}

TEST_CASE("parse_reply names what is wrong with a reply") {
  auto bad = [](const std::string& text) {
    std::string why;
    bool rejected = !parse_reply(text, why);
    INFO(text << ": " << why);
    return rejected && !why.empty();
  };
  CHECK(bad("not json"));
  CHECK(bad("[]"));
  CHECK(bad(R"("parameters")"));
  CHECK(bad(R"({"parameters":[]})"));
  CHECK(bad(R"({"parameters":"x"})"));
  CHECK(bad(R"({"error":5})"));
  CHECK(bad(R"({"error":""})"));
  CHECK(bad(R"({"error":"NoInterface"})"));
  CHECK(bad(R"({"error":"org.varlink.service.invalidParameter"})"));
  CHECK(bad(R"({"continues":"yes"})"));
  CHECK(bad(R"({"error":"org.varlink.service.ExpectedMore","continues":true})"));
  CHECK(bad(R"({"parameters":{},"method":"io.haltpolld.GetStatus"})"));
}

TEST_CASE("a reply survives encode_reply and parse_reply, and an error ends a stream") {
  Reply r;
  // The shapes of org.varlink.certification's MyType: nulls inside arrays, maps, sets, a float.
  r.parameters = json::parse(R"({"mytype":{"object":{"method":"org.varlink.certification.Test09"},
    "enum":"two","struct":{"first":1,"second":"2"},"array":["one","two","three"],
    "dictionary":{"foo":"Foo","bar":"Bar"},"stringset":{"one":{},"two":{},"three":{}},
    "nullable":null,"nullable_array_struct":null,
    "interface":{"foo":[null,{"Foo":"foo","Bar":"bar"},null,{"one":"foo","two":"bar"}],"anon":{"foo":true,"bar":false}}},
    "int":-9223372036854775808,"float":3.141592653589793})");
  r.continues = true;
  std::string bytes = encode_reply(r);
  std::string why;
  auto back = parse_reply(std::string_view(bytes).substr(0, bytes.size() - 1), why);
  REQUIRE(back);
  CHECK(back->parameters == r.parameters);
  CHECK(back->parameters["float"].get<double>() == 3.141592653589793);
  CHECK(back->parameters["int"].get<std::int64_t>() == INT64_MIN);
  CHECK(back->continues);

  // A handler that fails in the middle of a stream: the error is the stream's last reply.
  Reply e = error_reply("org.varlink.certification.CertificationError", {{"wants", nullptr}, {"got", nullptr}});
  e.continues = true;
  std::string eb = encode_reply(e);
  CHECK_FALSE(json::parse(eb.c_str()).contains("continues"));
  auto eback = parse_reply(std::string_view(eb).substr(0, eb.size() - 1), why);
  REQUIRE(eback);
  CHECK(eback->error == "org.varlink.certification.CertificationError");
  CHECK_FALSE(eback->continues);
}
