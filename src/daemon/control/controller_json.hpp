// The JSON forms of the Controller's reports (docs/protocol.md): GetStatus' `controller` and
// `polling_overrides` objects and the entries of GetDecisions. The tuning layer hands over plain values
// (tuning/controller_status.hpp); only here do they become JSON. Pure formatting.
#pragma once

#include "tuning/controller_status.hpp"

#include <nlohmann/json.hpp>

#include <vector>

namespace haltpolld {

nlohmann::json status_to_json(const ControllerStatus& s);
nlohmann::json decision_to_json(const DecisionRecord& d);
nlohmann::json decisions_to_json(const std::vector<DecisionRecord>& log);  // an array, oldest first
nlohmann::json to_json(const TunerParams& p);
// GetStatus' other_writer: {parameter, value, expected, who, since_unix_ms}, or null.
nlohmann::json other_writer_to_json(const std::optional<OtherWriter>& w);
// GetStatus' polling_overrides (docs/protocol.md, PollingOverrides), or null when the signal source
// does not read them (before the first tick, a simulated guest).
nlohmann::json polling_overrides_to_json(const std::optional<PollingOverrides>& o);

}  // namespace haltpolld
