// Where an agent listens, as the agent and every viewer must agree (docs/protocol.md, "Endpoints"): which endpoints
// carry the protocol, where the state (ROUTER) socket is beside the event (PUB) socket, and the folders and file
// names of the default sockets, which the agent makes and sweeps and the attach dialog lists. Pure functions over
// strings (and the environment and user id, for the folders); any thread.
//
// One rule for every transport: ipc:///PATH and tcp://HOST:PORT carry the protocol, nothing else does, and both
// sides refuse the rest with the same reason. inproc:// in particular: it joins sockets of one ZeroMQ context only
// (zmq_inproc(7)), and the agent's publisher makes its own context, so no viewer could ever connect to it; an
// abstract ipc endpoint (ipc://@NAME) has no file, hence no owner to check and no permissions.
#pragma once

#include <string>
#include <string_view>

namespace memscope::wire {

constexpr std::string_view IpcScheme = "ipc://";
constexpr std::string_view TcpScheme = "tcp://";
// ipc: the state socket's path is the event socket's with this appended.
constexpr std::string_view StateSuffix = "-state";
// The default sockets' file names: this, then the job's pid (then StateSuffix for the state socket).
constexpr std::string_view SocketNamePrefix = "memscope-";

// "" when `endpoint` can carry the protocol, else why not: one line, without the endpoint (callers prefix it).
std::string endpointProblem(std::string_view endpoint);
// The state endpoint of an agent whose event socket is `endpoint`: StateSuffix appended for ipc://PATH, the next
// port for tcp://HOST:PORT. Empty when endpointProblem(endpoint) is not.
std::string stateEndpointFor(std::string_view endpoint);

// The default event socket's file name for the job with `pid`: "memscope-PID".
std::string socketName(long pid);
// What a file name in a socket folder says.
struct SocketName {
    bool memscope = false; // it starts with SocketNamePrefix
    bool state = false; // ... and ends with StateSuffix: a state socket, beside its event socket
    long pid = 0; // the job's pid when the rest is one (at most 9 digits), else 0 (a name a user chose)
};
SocketName parseSocketName(std::string_view name);

// The folders of the default sockets, in the agent's order of preference: $XDG_RUNTIME_DIR ("" when unset or
// empty; the agent takes it only when it is a folder it may write to), then one of this user's own in /tmp,
// "/tmp/memscope-UID", which the agent makes with mode 0700 when it needs it.
std::string runtimeSocketFolder();
std::string fallbackSocketFolder();

} // namespace memscope::wire
