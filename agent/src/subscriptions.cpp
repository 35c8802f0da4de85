// SubscriptionGuard (subscriptions.h): libzmq's verbose XPUB; the connections are PeerConnections'.
#include "subscriptions.h"

#include <zmq.h>

namespace memscope::agent {

bool SubscriptionGuard::open(void* context, void* xpub, std::string* error)
{
    return m_connections.open(context, xpub, "events", error);
}

void SubscriptionGuard::close(void* xpub) noexcept { m_connections.close(xpub); }

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
            m_disconnected.fetch_add(m_connections.disconnect(peer ? peer : ""), std::memory_order_relaxed);
        }
        zmq_msg_close(&msg);
    }
}

} // namespace memscope::agent
