// spdlog set-up shared by the daemon's entry points. Under systemd, stderr is a stream to the
// journal, which would give every line priority 6 (info); so when stderr is the journal's stream
// the daemon logs through sd_journal_send (spdlog's systemd sink) with each message's own
// priority, and `journalctl -p warning -u haltpolld` shows the warnings. Elsewhere it logs to
// stderr with timestamps. Call once, before other threads log; spdlog's loggers are thread-safe.
#pragma once

#include <string>

namespace haltpolld {

// True when `journal_stream` (the value of $JOURNAL_STREAM: "<device>:<inode>", set by systemd
// for a service whose stdout/stderr go to the journal) names the file that `fd` is open on.
// A null or malformed value is false: the variable can be inherited by a child whose stderr
// was redirected, and then the journal is not where its output goes.
bool is_journal_stream(int fd, const char* journal_stream);

// Logger "haltpolld" as the default logger at `level` ("trace" ... "off").
void setup_logging(const std::string& level);

}  // namespace haltpolld
