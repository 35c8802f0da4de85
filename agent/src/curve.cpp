// TCP endpoint rules, the public key of a secret key and the ZAP handler of the publisher (curve.h).
#include "curve.h"

#include "sockets.h"
#include "wire/keyfile.h"

#include <zmq.h>

#include <cstring>

#include <arpa/inet.h>

namespace memscope::agent {

TcpEndpoint parseTcpEndpoint(const std::string& endpoint)
{
    const std::string rest = endpoint.substr(6); // after "tcp://"
    const size_t colon = rest.rfind(':'); // there is one, and a port after it (wire::endpointProblem)
    const std::string host = rest.substr(0, colon);
    const std::string portText = rest.substr(colon + 1);
    TcpEndpoint out;
    out.bind = endpoint;
    if (host.empty() || host == "localhost") {
        // No host (or localhost): this machine only. A literal address, so that no resolver decides for us.
        out.bind = "tcp://127.0.0.1:" + portText;
        out.loopback = true;
        return out;
    }
    in_addr v4 {};
    if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
        out.loopback = (ntohl(v4.s_addr) >> 24) == 127; // 127.0.0.0/8 (RFC 1122 3.2.1.3)
        return out;
    }
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
        const std::string inner = host.substr(1, host.size() - 2);
        in6_addr v6 {};
        if (inet_pton(AF_INET6, inner.c_str(), &v6) == 1) {
            out.ipv6 = true;
            out.loopback = IN6_IS_ADDR_LOOPBACK(&v6);
            return out;
        }
    }
    out.loopback = false; // "*", 0.0.0.0, an interface, a host name: reachable from elsewhere
    return out;
}

std::optional<std::string> publicKeyOf(const std::string& secret)
{
    char out[wire::Z85KeyLength + 1] = {};
    if (secret.size() != wire::Z85KeyLength || zmq_curve_public(out, secret.c_str()) != 0)
        return std::nullopt;
    return std::string(out, wire::Z85KeyLength);
}

std::string zapDecision(const std::vector<std::string>& request, const std::vector<std::array<uint8_t, 32>>& clients,
                        std::string* why)
{
    // RFC 27: version "1.0", request id, domain, address, identity, mechanism, then the mechanism's credentials
    // (CURVE: the client's 32-byte long-term public key).
    if (request.size() < 7 || request[0] != "1.0" || request[5] != "CURVE" || request[6].size() != 32) {
        *why = "only CURVE clients with a listed key are accepted";
        return "400";
    }
    for (const auto& key : clients) {
        if (std::memcmp(key.data(), request[6].data(), 32) == 0) {
            *why = "OK";
            return "200";
        }
    }
    *why = "client key not authorised";
    return "400";
}

void ZapHandler::answer(void* zap)
{
    for (;;) {
        const std::vector<std::string> request = receiveMessage(zap);
        if (request.empty())
            return;
        std::string why;
        const std::string status = zapDecision(request, m_clients, &why);
        // RFC 27 reply: version, request id, status code, status text, user id, metadata.
        const std::string requestId = request.size() > 1 ? request[1] : std::string();
        const std::string frames[] = { "1.0", requestId, status, why, status == "200" ? "memscope-viewer" : "", "" };
        for (size_t i = 0; i < 6; ++i)
            zmq_send(zap, frames[i].data(), frames[i].size(), i + 1 < 6 ? ZMQ_SNDMORE : 0);
        if (status == "200")
            m_accepted.fetch_add(1, std::memory_order_relaxed);
        else
            m_refused.fetch_add(1, std::memory_order_relaxed);
    }
}

} // namespace memscope::agent
