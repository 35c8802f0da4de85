// SubscriptionGuard (subscriptions.h): libzmq's verbose XPUB, its socket monitor, and the POSIX calls that
// tell which accepted connection a peer address names.
#include "subscriptions.h"

#include <zmq.h>

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

bool SubscriptionGuard::open(void* context, void* xpub, std::string* error)
{
    const std::string address = "inproc://memscope-pub-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    if (zmq_socket_monitor(xpub, address.c_str(), ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CLOSED)
        != 0) {
        *error = std::string("cannot monitor the events socket: ") + zmq_strerror(zmq_errno());
        return false;
    }
    m_monitor = zmq_socket(context, ZMQ_PAIR);
    const int linger = 0;
    if (!m_monitor || zmq_setsockopt(m_monitor, ZMQ_LINGER, &linger, sizeof linger) != 0
        || zmq_connect(m_monitor, address.c_str()) != 0) {
        *error = std::string("cannot monitor the events socket: ") + zmq_strerror(zmq_errno());
        return false;
    }
    return true;
}

void SubscriptionGuard::close(void* xpub) noexcept
{
    // Stopping the monitor first (a null endpoint), then closing its reader: libzmq issues #2083, #3575.
    if (xpub)
        zmq_socket_monitor(xpub, nullptr, 0);
    if (m_monitor)
        zmq_close(m_monitor);
    m_monitor = nullptr;
    m_connections.clear();
}

void SubscriptionGuard::readMonitor()
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
        } else if (id == ZMQ_EVENT_DISCONNECTED || id == ZMQ_EVENT_CLOSED) {
            std::erase_if(m_connections, [fd](const Connection& c) { return c.fd == fd; });
        }
    }
}

void SubscriptionGuard::readSubscriptions(void* xpub)
{
    readMonitor(); // the connections accepted before these subscriptions came
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, xpub, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            return;
        }
        // A subscription is a byte 1 (subscribe) or 0 (unsubscribe) and the topic (zmq_socket(3), ZMQ_XPUB).
        const auto* data = static_cast<const uint8_t*>(zmq_msg_data(&msg));
        const size_t size = zmq_msg_size(&msg);
        if (size == 0 || data[0] != 1) {
            // An unsubscription (libzmq's own too, for a connection that ended) or no subscription at all.
        } else if (size <= 2) {
            m_applied.fetch_add(1, std::memory_order_relaxed);
        } else {
            m_refused.fetch_add(1, std::memory_order_relaxed);
            const char* peer = zmq_msg_gets(&msg, "Peer-Address");
            disconnect(peer ? peer : "");
        }
        zmq_msg_close(&msg);
    }
}

void SubscriptionGuard::disconnect(const std::string& peerAddress)
{
    // shutdown(2), not close: the descriptor stays libzmq's, which sees the connection end and cleans up after it.
    // Only descriptors the monitor reported as accepted by this socket, whose peer is the one named, and which
    // still have the same two ends (a number libzmq closed and the host reused since is left alone).
    for (auto it = m_connections.begin(); it != m_connections.end();) {
        if (samePeer(it->peer, peerAddress) && peerOf(it->fd) == it->peer && !it->local.empty()
            && localOf(it->fd) == it->local) {
            ::shutdown(it->fd, SHUT_RDWR);
            m_disconnected.fetch_add(1, std::memory_order_relaxed);
            it = m_connections.erase(it);
        } else {
            ++it;
        }
    }
}

} // namespace memscope::agent
