// PeerConnections (peerconnections.h): libzmq's socket monitor, and the POSIX calls that tell which accepted
// connection belongs to which peer.
#include "peerconnections.h"

#include <zmq.h>

#include <algorithm>
#include <cstring>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace memscope::agent {
namespace {

    // The peer address libzmq puts in a message's "Peer-Address" property for the connection on `fd` (libzmq 4.3,
    // stream_engine_base.cpp / tcp_address.cpp, ipc with SO_PEERCRED): the numeric address for tcp; for ipc the
    // peer's credentials ":UID:GID:PID" (after a host part), of which this returns that tail. Empty when unknown.
    std::string peerOf(int fd)
    {
        sockaddr_storage ss {};
        socklen_t len = sizeof ss;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
            return {};
        if (ss.ss_family == AF_UNIX) {
            ucred cred {};
            socklen_t credLen = sizeof cred;
            if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &credLen) != 0)
                return {};
            return ":" + std::to_string(cred.uid) + ":" + std::to_string(cred.gid) + ":" + std::to_string(cred.pid);
        }
        sockaddr_storage peer {};
        len = sizeof peer;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0)
            return {};
        char text[INET6_ADDRSTRLEN] = {};
        if (peer.ss_family == AF_INET)
            ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, text, sizeof text);
        else if (peer.ss_family == AF_INET6)
            ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, text, sizeof text);
        return text;
    }

    // The connection's own end (getsockname's bytes): an accepted connection's is the listening socket's address.
    std::string localOf(int fd)
    {
        sockaddr_storage ss {};
        socklen_t len = sizeof ss;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
            return {};
        return std::string(reinterpret_cast<const char*>(&ss), len);
    }

    bool samePeer(const std::string& connection, const std::string& property)
    {
        if (connection.empty() || property.empty())
            return false;
        if (connection.front() == ':') // ipc: the credentials end the property
            return property.size() >= connection.size()
                && property.compare(property.size() - connection.size(), connection.size(), connection) == 0;
        return property == connection;
    }

} // namespace

bool PeerConnections::open(void* context, void* socket, const char* name, std::string* error)
{
    const std::string address
        = std::string("inproc://memscope-monitor-") + name + "-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    if (zmq_socket_monitor(socket, address.c_str(), ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED)
        != 0) {
        *error = std::string("cannot monitor the ") + name + " socket: " + zmq_strerror(zmq_errno());
        return false;
    }
    m_monitor = zmq_socket(context, ZMQ_PAIR);
    const int linger = 0;
    if (!m_monitor || zmq_setsockopt(m_monitor, ZMQ_LINGER, &linger, sizeof linger) != 0
        || zmq_connect(m_monitor, address.c_str()) != 0) {
        *error = std::string("cannot monitor the ") + name + " socket: " + zmq_strerror(zmq_errno());
        return false;
    }
    return true;
}

void PeerConnections::close(void* socket) noexcept
{
    // Stopping the monitor first (a null endpoint), then closing its reader: libzmq issues #2083, #3575.
    if (socket)
        zmq_socket_monitor(socket, nullptr, 0);
    if (m_monitor)
        zmq_close(m_monitor);
    m_monitor = nullptr;
    m_connections.clear();
}

void PeerConnections::readMonitor()
{
    if (!m_monitor)
        return;
    for (;;) {
        // zmq_socket_monitor(3): a frame of a 16-bit event and a 32-bit value (here a file descriptor), then a
        // frame with the endpoint.
        zmq_msg_t event;
        zmq_msg_init(&event);
        if (zmq_msg_recv(&event, m_monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&event);
            return;
        }
        uint16_t id = 0;
        uint32_t value = 0;
        if (zmq_msg_size(&event) >= 6) {
            std::memcpy(&id, zmq_msg_data(&event), 2);
            std::memcpy(&value, static_cast<const char*>(zmq_msg_data(&event)) + 2, 4);
        }
        bool more = zmq_msg_more(&event);
        zmq_msg_close(&event);
        while (more) {
            zmq_msg_t rest;
            zmq_msg_init(&rest);
            more = zmq_msg_recv(&rest, m_monitor, ZMQ_DONTWAIT) >= 0 && zmq_msg_more(&rest);
            zmq_msg_close(&rest);
        }
        const int fd = int(value);
        if (id == ZMQ_EVENT_ACCEPTED) {
            std::erase_if(m_connections, [fd](const Connection& c) { return c.fd == fd; });
            m_connections.push_back(Connection { fd, peerOf(fd), localOf(fd) });
            const std::string& peer = m_connections.back().peer;
            if (peer.empty())
                continue;
            size_t count = size_t(std::count_if(m_connections.begin(), m_connections.end(),
                                                [&](const Connection& c) { return c.peer == peer; }));
            // Past the cap: that peer's oldest go (the newest was just accepted, and is kept).
            for (auto it = m_connections.begin(); count > MaxPerPeer && it != m_connections.end();) {
                if (it->peer == peer) {
                    if (shut(*it))
                        m_closedPastCap.fetch_add(1, std::memory_order_relaxed);
                    it = m_connections.erase(it);
                    --count;
                } else {
                    ++it;
                }
            }
        } else if (id == ZMQ_EVENT_DISCONNECTED || id == ZMQ_EVENT_CLOSED) {
            std::erase_if(m_connections, [fd](const Connection& c) { return c.fd == fd; });
        }
    }
}

bool PeerConnections::shut(const Connection& c)
{
    // shutdown(2), not close: the descriptor stays libzmq's, which sees the connection end and cleans up after it.
    // Only a descriptor whose two ends are still those the monitor reported (a number libzmq closed and the host
    // reused since is left alone).
    if (c.local.empty() || peerOf(c.fd) != c.peer || localOf(c.fd) != c.local)
        return false;
    ::shutdown(c.fd, SHUT_RDWR);
    return true;
}

size_t PeerConnections::disconnect(const std::string& peerAddress)
{
    size_t closed = 0;
    for (auto it = m_connections.begin(); it != m_connections.end();) {
        if (samePeer(it->peer, peerAddress)) {
            closed += shut(*it) ? 1 : 0;
            it = m_connections.erase(it);
        } else {
            ++it;
        }
    }
    return closed;
}

} // namespace memscope::agent
