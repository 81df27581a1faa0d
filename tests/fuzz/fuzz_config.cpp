// libFuzzer target: the config parser. Any input either parses into a Config that round-trips
// through to_json, or is refused with a ConfigError; nothing else may escape.
#include "config.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    haltpolld::Config c = haltpolld::parse_config(text);
    haltpolld::Config again = haltpolld::parse_config(haltpolld::to_json(c).dump());
    if (!(again == c)) std::abort();
    (void)haltpolld::restart_only_differences(c, haltpolld::Config{});
    if (c.cpus != "all") (void)haltpolld::expand_cpus(c.cpus, {});
  } catch (const haltpolld::ConfigError& e) {
    if (e.reason().empty()) std::abort();
  }
  return 0;
}
