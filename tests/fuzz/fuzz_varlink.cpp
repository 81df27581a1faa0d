// libFuzzer target: the control server's message path without the socket. The input is a byte
// stream, fed to a FrameDecoder in chunks whose sizes come from the input itself; every complete
// message is decoded and dispatched through the real io.haltpolld registry (over a fake backend),
// and every reply must encode to exactly one NUL-terminated JSON object that parse_reply decodes.
#include "control/control_service.hpp"
#include "varlink/varlink.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

namespace {

class FuzzBackend : public haltpolld::ControlBackend {
 public:
  nlohmann::json status() override { return {{"version", "fuzz"}}; }
  haltpolld::StatsSnapshot stats() override {
    haltpolld::StatsSnapshot s;
    haltpolld::CpuStats c;
    c.cpu = 0;
    c.latency_buckets = {{1000, 1}, {UINT64_MAX, 1}};
    s.cpus.push_back(c);
    return s;
  }
  haltpolld::Config config() const override { return cfg; }
  std::string config_file() const override { return "/dev/null"; }
  haltpolld::Config set_config(const nlohmann::json& partial) override { return cfg = haltpolld::apply_config_json(partial, cfg); }
  haltpolld::ReloadResult reload() override { return {cfg, {}}; }
  void reset_stats() override {}
  nlohmann::json take_over() override { return {{"took_over", false}, {"message", ""}, {"other_writer", nullptr}}; }
  nlohmann::json decisions(std::size_t) override { return nlohmann::json::array(); }
  haltpolld::Config cfg;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static FuzzBackend backend;
  static haltpolld::varlink::Registry registry = [] {
    haltpolld::varlink::Registry r;
    haltpolld::register_control_interface(r, backend);
    return r;
  }();
  backend.cfg = haltpolld::Config{};
  if (size == 0) return 0;
  // First byte: chunk size and whether the peer is admin.
  std::size_t chunk = 1 + (data[0] & 0x3f);
  haltpolld::varlink::Peer peer{1000, 1000, 1, (data[0] & 0x40) != 0};
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  haltpolld::varlink::FrameDecoder decoder(4096);
  for (std::size_t off = 0; off < in.size(); off += chunk) {
    if (!decoder.feed(in.substr(off, chunk))) return 0;
    while (auto msg = decoder.next()) {
      if (msg->size() > 4096) std::abort();
      std::string why;
      auto call = haltpolld::varlink::parse_call(*msg, why);
      if (!call) {
        if (why.empty()) std::abort();
        continue;
      }
      for (int i = 0; i < 2; ++i) {
        auto reply = registry.dispatch(*call, peer);
        std::string bytes = haltpolld::varlink::encode_reply(reply);
        if (bytes.empty() || bytes.back() != '\0' || bytes.find('\0') != bytes.size() - 1) std::abort();
        // What the server sends, a client decodes: the same error, the same end of a stream.
        auto back = haltpolld::varlink::parse_reply(std::string_view(bytes).substr(0, bytes.size() - 1), why);
        if (!back || back->error != reply.error || back->continues != (reply.continues && !reply.is_error()))
          std::abort();
        if (!reply.continues) break;
        call->stream_index++;
      }
    }
  }
  return 0;
}
