// PublisherSockets: the publisher's ZeroMQ context and its sockets, the PUB for events and the ROUTER for state
// requests (docs/protocol.md, "Sockets and endpoints"), plus, with CURVE, the REP socket of the ZAP handler (ZeroMQ
// RFC 27) bound before the CURVE servers. Made by Publisher::start() with every signal blocked (BlockedSignals), so
// that libzmq's threads never take the host's signals; from then on owned by the publisher thread, which closes
// them at its end. Binding them is endpointpolicy.h's. receiveMessage reads what the ROUTER and the ZAP handler's
// socket are sent.
#pragma once

#include "endpointpolicy.h"
#include "subscriptions.h"

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memscope::agent {

constexpr int LingerMs = 150; // what close may wait to flush the Goodbye unless stop() allows more
constexpr int64_t MaxInboundBytes = 4096; // the largest message the agent accepts from a peer (sockets.cpp)
// The events socket's: a subscription is at most 2 bytes, and a handshake command at most ~600 (sockets.cpp).
constexpr int64_t MaxInboundPubBytes = 1024;
// Subscription messages queued per peer before the publisher thread reads them (SubscriptionGuard).
constexpr int PubRcvHwm = 16;
constexpr int RouterHwm = 2; // state replies queued per peer; a peer that asks and never reads holds no more

// Blocks every signal of the calling thread while it lives; threads started meanwhile inherit the full mask.
class BlockedSignals {
public:
    BlockedSignals()
    {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &m_old);
    }
    ~BlockedSignals() { pthread_sigmask(SIG_SETMASK, &m_old, nullptr); }
    BlockedSignals(const BlockedSignals&) = delete;
    BlockedSignals& operator=(const BlockedSignals&) = delete;

private:
    sigset_t m_old;
};

// The frames of the next message waiting on `socket`, read without blocking (every frame is read; the first `keep`
// are returned); empty when none is waiting.
std::vector<std::string> receiveMessage(void* socket, size_t keep = SIZE_MAX);

struct PublisherSockets {
    void* context = nullptr;
    void* pub = nullptr; // an XPUB, verbose: `subscriptions` sees every subscription
    void* router = nullptr;
    SubscriptionGuard subscriptions; // the PUB's connections, capped per peer, and what they subscribe to
    PeerConnections routerPeers; // the ROUTER's connections, capped per peer
    void* zap = nullptr; // REP on inproc://zeromq.zap.01 when CURVE is on

    // Makes the context (one I/O thread) and the sockets with their options: LingerMs, the send high-water marks
    // (`pubHwm` messages per viewer on the PUB, RouterHwm replies per peer), IPv6 for an IPv6 endpoint and, when
    // the plan has a secret key, the CURVE server options of both sockets, the ZAP handler's socket bound first.
    // False, and *error says why (what was made stays, for close()). Nothing is bound to the plan's endpoints.
    bool open(const BindPlan& plan, int pubHwm, std::string* error);
    bool curve() const { return zap != nullptr; }
    void closeSockets() noexcept; // closes the sockets that are open
    void close() noexcept; // closes the sockets, then ends the context (which waits for their linger)
};

} // namespace memscope::agent
