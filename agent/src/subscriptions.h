// SubscriptionGuard: what peers may subscribe to on the events socket (docs/protocol.md, "Sockets and endpoints").
// libzmq's PUB keeps every distinct subscription a peer sends in a trie until that peer's connection ends, with no
// bound (one peer adding 100,000 grew a job by 58 MB). The events socket is an XPUB that passes every subscription
// up (zmq_setsockopt(3), ZMQ_XPUB_VERBOSE); a viewer subscribes to the empty prefix or to one-byte topics only, so
// a peer that subscribes to anything else is disconnected as soon as the publisher thread reads it: the guard knows
// each accepted connection's descriptor and peer (PeerConnections, which also caps the connections per peer) and
// shuts down those of the offending peer (the "Peer-Address" libzmq gives its messages: its process for ipc, its
// address for tcp); libzmq then ends the connection and frees its subscriptions. (Manual mode, ZMQ_XPUB_MANUAL,
// does not bound them: libzmq 4.3 keeps each one in a second trie all the same, src/xpub.cpp.) Publisher thread
// only, but for the counters.
#pragma once

#include "peerconnections.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace memscope::agent {

class SubscriptionGuard {
public:
    // Starts monitoring `xpub` (a verbose XPUB, before it is bound) through a PAIR socket of `context`.
    // False, and *error says why.
    bool open(void* context, void* xpub, std::string* error);
    // Stops monitoring and closes the PAIR socket; call before closing `xpub`.
    void close(void* xpub) noexcept;
    void* monitor() const { return m_connections.monitor(); } // to poll for ZMQ_POLLIN
    // Reads the monitor's events without blocking: connections accepted and closed (PeerConnections::readMonitor).
    void readMonitor() { m_connections.readMonitor(); }
    // Reads every subscription waiting on `xpub` without blocking, and disconnects the peers of those not allowed.
    void readSubscriptions(void* xpub);

    uint64_t applied() const { return m_applied.load(std::memory_order_relaxed); }
    uint64_t refused() const { return m_refused.load(std::memory_order_relaxed); }
    uint64_t disconnected() const { return m_disconnected.load(std::memory_order_relaxed); }
    const PeerConnections& connections() const { return m_connections; }

private:
    PeerConnections m_connections;
    std::atomic<uint64_t> m_applied { 0 };
    std::atomic<uint64_t> m_refused { 0 };
    std::atomic<uint64_t> m_disconnected { 0 };
};

} // namespace memscope::agent
