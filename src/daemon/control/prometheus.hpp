// The Prometheus text exposition of a StatsSnapshot (GetMetrics, `haltpollctl metrics`, the
// node_exporter textfile). Pure formatting: the caller takes the snapshot and writes the file.
#pragma once

#include "control/stats.hpp"

#include <string>

namespace haltpolld {

// Prometheus text exposition format 0.0.4: haltpoll_ prefix, base units (seconds), _total counters,
// a wake-latency histogram per CPU, a gauge per kernel parameter.
std::string render_prometheus(const StatsSnapshot& s);

}  // namespace haltpolld
