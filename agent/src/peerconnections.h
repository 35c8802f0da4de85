// PeerConnections: the connections one of the agent's listening ZeroMQ sockets has accepted, each with its
// descriptor and its peer (its process for ipc, its address for tcp), as the socket's monitor reports them
// (zmq_socket_monitor(3), ZMQ_EVENT_ACCEPTED, ZMQ_EVENT_DISCONNECTED, ZMQ_EVENT_CLOSED). A connection costs the job
// libzmq's engine, buffers and pipes whether or not its peer ever reads, and libzmq bounds neither how many a socket
// accepts nor how many come from one peer: past MaxPerPeer of one peer, its oldest connections are closed as soon
// as the monitor is read (a viewer's newest connection is the one it uses). SubscriptionGuard closes a peer's
// connections on demand through it. Publisher thread only, but for the counters.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace memscope::agent {

class PeerConnections {
public:
    // Connections one peer may hold on one socket. A viewer holds one on each (`record`, the app: a SUB and the
    // DEALER it asks on, a new DEALER per retry, the old one closed), and several viewers behind one peer (one SSH
    // session's forwarded socket, one host over tcp) hold one each; each costs the job tens of KiB (tst_publisher
    // manyAskersFromOnePeerCostLittle).
    static constexpr size_t MaxPerPeer = 16;

    // Starts monitoring `socket` (before it is bound) through a PAIR socket of `context`; `name` tells the
    // monitor's inproc address apart from the other socket's. False, and *error says why.
    bool open(void* context, void* socket, const char* name, std::string* error);
    // Stops monitoring and closes the PAIR socket; call before closing `socket`.
    void close(void* socket) noexcept;
    void* monitor() const { return m_monitor; } // to poll for ZMQ_POLLIN
    // Reads the monitor's events without blocking: connections accepted and closed; closes the oldest connections
    // of a peer past MaxPerPeer.
    void readMonitor();
    // Closes every connection of the peer a message's "Peer-Address" property names (zmq_msg_gets(3)); how many.
    size_t disconnect(const std::string& peerAddress);

    size_t count() const { return m_connections.size(); } // open now
    // Connections closed because their peer held more than MaxPerPeer. Any thread.
    uint64_t closedPastCap() const { return m_closedPastCap.load(std::memory_order_relaxed); }

private:
    struct Connection {
        int fd;
        std::string peer; // as libzmq names it in "Peer-Address" (the ipc tail: ":UID:GID:PID"); empty: unknown
        std::string local; // its own end's address (getsockname), the listening socket's
    };
    // shutdown(2)s the connection when its descriptor still has the same two ends; true when it did.
    static bool shut(const Connection& c);

    void* m_monitor = nullptr;
    std::vector<Connection> m_connections; // accepted and not yet closed, oldest first
    std::atomic<uint64_t> m_closedPastCap { 0 };
};

} // namespace memscope::agent
