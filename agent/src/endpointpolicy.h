// Where and how the publisher binds (docs/protocol.md, "Sockets and endpoints", "TCP and CURVE"): the default
// endpoint (its folder made private, dead jobs' sockets swept), the decision for an endpoint asked for (the rule
// viewers follow too, wire/endpoint.h; tcp://:PORT on 127.0.0.1; CURVE required off loopback, its key files read
// with wire/keyfile.h), and the bind of an ipc socket that only this user can ever connect to. Called by
// Publisher::start(), on any thread but not concurrently; they allocate and make system calls, so never on the
// allocator's hot path.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace memscope::agent {

// ipc://$XDG_RUNTIME_DIR/memscope-<pid>, else ipc:///tmp/memscope-<uid>/memscope-<pid>, whose folder it creates
// (mode 0700) and refuses when another user owns it. Removes the sockets of this user's dead jobs there first.
// Empty on failure (*error says why).
std::string defaultEndpoint(std::string* error = nullptr);

// What to bind for an endpoint asked for.
struct BindPlan {
    std::string endpoint; // the PUB socket's: as asked, but tcp://:PORT and localhost become tcp://127.0.0.1:PORT
    std::string stateEndpoint; // the ROUTER socket's (wire::stateEndpointFor)
    bool ipv6 = false; // a bracketed IPv6 address: the sockets need ZMQ_IPV6
    std::optional<std::string> secretKey; // CURVE on: the agent's secret key (40 Z85 characters)
    std::vector<std::array<uint8_t, 32>> clientKeys; // CURVE on: the authorised clients' public keys (binary)
};
// The plan for `endpoint`, CURVE on when it is tcp and not loopback, or when a key file is named; `secretFile` and
// `clientsFile` as MEMSCOPE_CURVE_SECRET and MEMSCOPE_CURVE_CLIENTS give them. A loopback tcp endpoint without keys
// only with `insecureTcp` (MEMSCOPE_INSECURE_TCP=1). Empty optional, and *error says why in one line naming the
// endpoint or the key file and the remedy, when the endpoint must not be bound.
std::optional<BindPlan> planEndpoint(const std::string& endpoint, const std::string& secretFile,
                                     const std::string& clientsFile, bool insecureTcp, std::string* error);

// Binds `socket` to `endpoint` so that only this user can connect, from the first moment (ipc: see the .cpp);
// *inode gets the socket file's (0 for non-ipc endpoints), for removing it at exit. False, and *error says why.
bool bindPrivate(void* socket, const std::string& endpoint, std::string* error, ino_t* inode);

} // namespace memscope::agent
