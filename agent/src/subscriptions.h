// SubscriptionGuard: what peers may subscribe to on the events socket (docs/protocol.md, "Sockets and endpoints").
// The socket is an XPUB in manual mode (zmq_setsockopt(3), ZMQ_XPUB_MANUAL): every subscription a peer sends comes
// up to the publisher thread, which applies only the empty prefix and one-byte topics (all a viewer ever subscribes
// to), so no peer holds more than 257 subscriptions in the socket's matching trie. libzmq (4.3, xpub.cpp) still
// keeps each subscription a manual-mode peer sends in a second trie until that peer's connection ends, so a peer
// that sends any other subscription is disconnected at once: the guard knows each accepted connection's descriptor
// from the socket's monitor (zmq_socket_monitor(3), ZMQ_EVENT_ACCEPTED) and shuts down those of the offending peer
// (the "Peer-Address" libzmq gives its messages: its process for ipc, its address for tcp); libzmq then ends the
// connection and frees what it held. Publisher thread only, but for the counters.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace memscope::agent {

class SubscriptionGuard {
public:
    // Starts monitoring `xpub` (an XPUB in manual mode, before it is bound) through a PAIR socket of `context`.
    // False, and *error says why.
    bool open(void* context, void* xpub, std::string* error);
    // Stops monitoring and closes the PAIR socket; call before closing `xpub`.
    void close(void* xpub) noexcept;
    void* monitor() const { return m_monitor; } // to poll for ZMQ_POLLIN
    // Reads the monitor's events without blocking: connections accepted and closed.
    void readMonitor();
    // Reads every subscription waiting on `xpub` without blocking: applies the allowed ones, disconnects the peers
    // of the others.
    void readSubscriptions(void* xpub);

    uint64_t applied() const { return m_applied.load(std::memory_order_relaxed); }
    uint64_t refused() const { return m_refused.load(std::memory_order_relaxed); }
    uint64_t disconnected() const { return m_disconnected.load(std::memory_order_relaxed); }

private:
    void disconnect(const std::string& peerAddress);

    void* m_monitor = nullptr;
    struct Connection {
        int fd;
        std::string peer; // as libzmq names it in "Peer-Address"; empty when it could not be told
    };
    std::vector<Connection> m_connections; // accepted and not yet closed
    std::atomic<uint64_t> m_applied { 0 };
    std::atomic<uint64_t> m_refused { 0 };
    std::atomic<uint64_t> m_disconnected { 0 };
};

} // namespace memscope::agent
