// The tuner's policies: the enum the tuner decides by and the names the configuration gives them
// (tuner.policy). Owned by the configuration, so that parsing a file needs nothing of the tuner;
// the tuning layer uses the enum (tuning/tuner.hpp says what each policy does). Pure functions:
// nothing to synchronise.
#pragma once

#include <optional>
#include <string_view>

namespace haltpolld {

enum class Policy { static_value, latency, budget, balanced };

// "static", "latency", "budget", "balanced"; "?" past the last one.
std::string_view to_string(Policy p) noexcept;
std::optional<Policy> policy_from_string(std::string_view s) noexcept;

}  // namespace haltpolld
