// The human forms of haltpollctl's replies: each function turns the daemon's JSON into the text a
// person reads (tables with aligned columns, bar charts, the live `top` frame) and does no I/O, so
// that one frame is the same string on a terminal, in a pipe and in a test. Widths are terminal
// columns (fmt counts "µ" and "→" as one). Pure functions of their arguments: no shared state.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>

namespace haltpollctl {

struct Screen {
  std::size_t width = 120;  // columns available; reasons wrap to it
  std::size_t height = 0;   // rows available; 0: unbounded (not a terminal)
};

std::string human_ns(double ns);

std::string render_status(const nlohmann::json& status);
// The pool's counters (GetStats without --kernel).
std::string render_pool_stats(const nlohmann::json& stats);
std::string render_pool_histogram(const nlohmann::json& stats);
// One frame of `top --pool`; rates are differences against the previous Watch reply (or none).
std::string render_pool_top(const nlohmann::json& cur, const nlohmann::json* prev, const std::string& socket);

// The kernel's view: GetStats' kernel_signals.
std::string render_kernel_stats(const nlohmann::json& stats);
std::string render_kernel_histogram(const nlohmann::json& stats);
// One frame of `top`: the kernel's per-CPU idle accounting of the daemon's last tick, under the
// value haltpolld set and why (`last_decision`: the newest GetDecisions entry, or null).
std::string render_kernel_top(const nlohmann::json& stats, const nlohmann::json& last_decision, const std::string& socket,
                              const Screen& screen);

// GetDecisions as a table: time, tick, target, action, old → new, where applied, reason.
std::string render_decisions(const nlohmann::json& decisions, const Screen& screen, bool wrap);

}  // namespace haltpollctl
