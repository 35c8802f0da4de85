// `memscope-cli record ENDPOINT -o FILE [--duration S] [--events N] [--timeout S]`: joins a running agent (the
// late-join procedure of docs/protocol.md: subscribe to events, then ask for the state), records until the agent
// says goodbye, a limit is reached or SIGINT, and writes what it saw as a PyTorch-format snapshot. Lives in the
// static library memscope-record (with the ZeroMQ client) so that tests/common/tst_recordcommand can run it
// against a fake agent. Call from one thread at a time (it installs a SIGINT handler for its duration).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace memscope {

// Exit status: 0 recorded (goodbye, limit, SIGINT, or the agent went silent: then with a warning), 1 nothing
// answered / the agent is incompatible / the file cannot be written, 2 a bad command line. The summary line goes
// to stdout, messages to stderr.
int runRecord(const std::vector<std::string>& args);
// Same, printing to `out` and `err` (tests).
int runRecord(const std::vector<std::string>& args, std::FILE* out, std::FILE* err);

// The ROUTER endpoint of an agent whose PUB socket is `endpoint`: "-state" appended for ipc://, the next port for
// tcp://HOST:PORT. Empty when `endpoint` is neither.
std::string stateEndpointFor(const std::string& endpoint);

} // namespace memscope
