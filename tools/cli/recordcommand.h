// `memscope-cli record ENDPOINT -o FILE [--duration S] [--events N] [--timeout S] [--follow]
// [--curve-server-key FILE --curve-key FILE]`: joins a running agent through client::AgentClient (the late-join
// procedure of docs/protocol.md, with automatic resyncs after gaps), records until the agent says goodbye (or,
// with --follow, across job restarts), a limit is reached or SIGINT, and writes what it saw as a PyTorch-format
// snapshot. Lives in the static library memscope-record so that tests/common/tst_recordcommand can run it against
// a fake agent. Call from one thread at a time (it installs a SIGINT handler for its duration).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace memscope {

// Exit status: 0 recorded (goodbye, limit, SIGINT, or the agent went silent: then with a warning), 1 nothing
// answered / the agent is incompatible / a CURVE key is refused / the file cannot be written, 2 a bad command
// line. The summary line goes to stdout, messages to stderr.
int runRecord(const std::vector<std::string>& args);
// Same, printing to `out` and `err` (tests).
int runRecord(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

} // namespace memscope
