// TCP endpoints and CURVE security for the publisher (docs/protocol.md, "TCP and CURVE"): which tcp:// endpoints
// are loopback, the public key of the agent's secret key, and the ZAP handler (ZeroMQ RFC 27, ZAP): its decision,
// and the handler itself, which the publisher thread serves. The key files are read by wire/keyfile.h, the reader
// viewers use too. The functions are pure, over strings: any thread; they allocate, so never on the allocator's hot
// path. ZapHandler: the publisher thread only, but for its counters.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace memscope::agent {

struct TcpEndpoint {
    std::string bind; // what to bind: "tcp://127.0.0.1:PORT" for "tcp://:PORT" and localhost, else the endpoint
    bool loopback = false; // 127.0.0.0/8, localhost, [::1]: only this host can connect
    bool ipv6 = false; // a bracketed IPv6 address: the sockets need ZMQ_IPV6
};

// Classifies a tcp:// endpoint that wire::endpointProblem accepts (the rules of docs/protocol.md).
TcpEndpoint parseTcpEndpoint(const std::string& endpoint);

// The CURVE public key of a secret key of 40 Z85 characters (zmq_curve_public). Empty optional for a key ZeroMQ
// cannot use.
std::optional<std::string> publicKeyOf(const std::string& secret);

// The ZAP handler's answer to one request (RFC 27: version, request id, domain, address, identity, mechanism,
// credentials...): "200" when the mechanism is CURVE and the 32-byte client key is in `clients` (binary keys),
// else "400"; `why` gets the status text.
std::string zapDecision(const std::vector<std::string>& request, const std::vector<std::array<uint8_t, 32>>& clients,
                        std::string* why);

// The ZAP handler: answers the handshakes of CURVE clients on the REP socket bound at inproc://zeromq.zap.01
// (sockets.h), admitting the listed client keys (zapDecision).
class ZapHandler {
public:
    // The authorised clients' public keys (binary); set before the publisher thread starts.
    void setClients(std::vector<std::array<uint8_t, 32>> clients) { m_clients = std::move(clients); }
    // Answers every request waiting on `zap`, without blocking.
    void answer(void* zap);
    // Handshakes accepted / refused so far. Any thread.
    uint64_t accepted() const { return m_accepted.load(std::memory_order_relaxed); }
    uint64_t refused() const { return m_refused.load(std::memory_order_relaxed); }

private:
    std::vector<std::array<uint8_t, 32>> m_clients;
    std::atomic<uint64_t> m_accepted { 0 };
    std::atomic<uint64_t> m_refused { 0 };
};

} // namespace memscope::agent
