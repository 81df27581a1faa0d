// spdlog set-up shared by the daemon's entry points. Under systemd, stderr is a stream to the
// journal; when stderr is the journal's stream every line starts with its syslog priority in the
// "<4>" form that journald's stream reader takes off (SyslogLevelPrefix=, on by default), so that
// `journalctl -p warning -u haltpolld` shows the warnings. The stream, not sd_journal_send: the
// journal learns a stream's unit when systemd connects it, while a datagram's unit is looked up
// from the sender's pid on arrival, and a short-lived `haltpolld --restore` (the unit's
// ExecStopPost) has often exited by then, so its warning lost the unit and `-u` did not show it.
// Elsewhere it logs to stderr with timestamps. Call once, before other threads log; spdlog's
// loggers are thread-safe.
#pragma once

#include <spdlog/common.h>

#include <string>
#include <string_view>

namespace haltpolld {

// True when `journal_stream` (the value of $JOURNAL_STREAM: "<device>:<inode>", set by systemd
// for a service whose stdout/stderr go to the journal) names the file that `fd` is open on.
// A null or malformed value is false: the variable can be inherited by a child whose stderr
// was redirected, and then the journal is not where its output goes.
bool is_journal_stream(int fd, const char* journal_stream);

// The syslog priority journald records for a message of `level` (warn: 4, info: 6, ...).
int journal_priority(spdlog::level::level_enum level);

// `message` as journal-stream lines: each line prefixed with "<priority>", each ended by '\n'
// (a final '\n' of the message ends its last line).
std::string journal_stream_lines(spdlog::level::level_enum level, std::string_view message);

// Logger "haltpolld" as the default logger at `level` ("trace" ... "off").
void setup_logging(const std::string& level);

}  // namespace haltpolld
