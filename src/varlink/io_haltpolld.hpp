// The names of the io.haltpolld interface that both ends must spell alike: the interface itself
// and its error names (the generic org.varlink.service.* names live in varlink/varlink.hpp).
// Header-only and dependency-free, next to the varlink code both ends link, so that haltpollctl
// needs nothing of the daemon. Constants only: nothing to synchronise.
#pragma once

namespace haltpolld {

inline constexpr const char* kInterface = "io.haltpolld";

// io.haltpolld errors, with the parameters each carries.
namespace errors {
inline constexpr const char* config_refused = "io.haltpolld.ConfigRefused";      // (path, reason, file?)
inline constexpr const char* no_such_cpu = "io.haltpolld.NoSuchCpu";             // (cpu)
inline constexpr const char* restart_required = "io.haltpolld.RestartRequired";  // (paths)
inline constexpr const char* malformed_message = "io.haltpolld.MalformedMessage";  // (reason); then closed
inline constexpr const char* message_too_large = "io.haltpolld.MessageTooLarge";  // (limit); then closed
inline constexpr const char* too_many_connections = "io.haltpolld.TooManyConnections";  // (limit); then closed
inline constexpr const char* rate_limited = "io.haltpolld.RateLimited";          // (retry_after_ms); kept
inline constexpr const char* internal_error = "io.haltpolld.InternalError";      // (reason)
}  // namespace errors

}  // namespace haltpolld
