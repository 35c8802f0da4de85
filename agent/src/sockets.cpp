// PublisherSockets (sockets.h): libzmq's context, sockets and options.
#include "sockets.h"

#include <zmq.h>

namespace memscope::agent {

bool PublisherSockets::open(const BindPlan& plan, int pubHwm, std::string* error)
{
    context = zmq_ctx_new();
    if (!context) {
        *error = std::string("zmq_ctx_new: ") + zmq_strerror(zmq_errno());
        return false;
    }
    zmq_ctx_set(context, ZMQ_IO_THREADS, 1);
    pub = zmq_socket(context, ZMQ_XPUB);
    router = zmq_socket(context, ZMQ_ROUTER);
    if (!pub || !router) {
        *error = std::string("zmq_socket: ") + zmq_strerror(zmq_errno());
        return false;
    }
    const int linger = LingerMs;
    zmq_setsockopt(pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(pub, ZMQ_SNDHWM, &pubHwm, sizeof pubHwm);
    zmq_setsockopt(router, ZMQ_SNDHWM, &RouterHwm, sizeof RouterHwm);
    // What a peer may send the job is small: a Request (wire/protocol.h) to the ROUTER, a subscription (a flag byte
    // and a topic) to the PUB, and the handshake's commands (CURVE's INITIATE, the largest, is a few hundred bytes:
    // ZeroMQ RFC 26). A larger message closes that peer's connection as soon as its header is read, before libzmq
    // allocates for it, during the handshake too (zmq_setsockopt(3), ZMQ_MAXMSGSIZE): no peer can spend the job's
    // memory.
    // The events socket takes subscriptions only (2 bytes at most: the empty prefix or a one-byte topic) and the
    // handshake; CURVE's INITIATE with its metadata, the largest command, stays under 600 bytes with the longest
    // identity a peer may give (255 bytes, RFC 23 / RFC 26), so 1 KiB there.
    const int64_t maxInbound = MaxInboundBytes, maxInboundPub = MaxInboundPubBytes;
    zmq_setsockopt(pub, ZMQ_MAXMSGSIZE, &maxInboundPub, sizeof maxInboundPub);
    zmq_setsockopt(router, ZMQ_MAXMSGSIZE, &maxInbound, sizeof maxInbound);
    // Every subscription comes up to the publisher thread (zmq_setsockopt(3), ZMQ_XPUB_VERBOSE), which disconnects
    // a peer that subscribes to anything but the empty prefix or a one-byte topic (subscriptions.h), so no peer can
    // grow the socket's subscription trie by more than the few it sent before being read. Few are queued per peer.
    const int verbose = 1, pubRcvHwm = PubRcvHwm;
    if (zmq_setsockopt(pub, ZMQ_XPUB_VERBOSE, &verbose, sizeof verbose) != 0) {
        *error = std::string("ZMQ_XPUB_VERBOSE: ") + zmq_strerror(zmq_errno());
        return false;
    }
    zmq_setsockopt(pub, ZMQ_RCVHWM, &pubRcvHwm, sizeof pubRcvHwm);
    if (!subscriptions.open(context, pub, error))
        return false;
    // Each connection costs the job whether or not its peer reads: one peer keeps at most
    // PeerConnections::MaxPerPeer on each socket (peerconnections.h).
    if (!routerPeers.open(context, router, "state", error))
        return false;
    if (plan.ipv6) {
        const int on = 1;
        zmq_setsockopt(pub, ZMQ_IPV6, &on, sizeof on);
        zmq_setsockopt(router, ZMQ_IPV6, &on, sizeof on);
    }
    if (plan.secretKey) {
        // The ZAP handler (ZeroMQ RFC 27) must be bound before the CURVE servers: libzmq lets every client in
        // when no handler is there (zmq_setsockopt(3), ZMQ_ZAP_ENFORCE_DOMAIN). The publisher thread serves it.
        zap = zmq_socket(context, ZMQ_REP);
        if (!zap || zmq_bind(zap, "inproc://zeromq.zap.01") != 0) {
            *error = std::string("cannot start the CURVE authentication handler: ") + zmq_strerror(zmq_errno());
            return false;
        }
        zmq_setsockopt(zap, ZMQ_LINGER, &linger, sizeof linger);
        const int server = 1;
        const char domain[] = "memscope";
        for (void* socket : { pub, router }) {
            if (zmq_setsockopt(socket, ZMQ_CURVE_SERVER, &server, sizeof server) != 0
                || zmq_setsockopt(socket, ZMQ_CURVE_SECRETKEY, plan.secretKey->data(), 40) != 0
                || zmq_setsockopt(socket, ZMQ_ZAP_DOMAIN, domain, sizeof domain - 1) != 0) {
                *error = "cannot make " + plan.endpoint + " a CURVE server: " + zmq_strerror(zmq_errno());
                return false;
            }
        }
    }
    return true;
}

std::vector<std::string> receiveMessage(void* socket, size_t keep)
{
    std::vector<std::string> frames;
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, socket, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            break;
        }
        if (frames.size() < keep)
            frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
        const bool more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
        if (!more)
            break;
    }
    return frames;
}

void PublisherSockets::closeSockets() noexcept
{
    subscriptions.close(pub);
    routerPeers.close(router);
    for (void** socket : { &pub, &router, &zap }) {
        if (*socket)
            zmq_close(*socket);
        *socket = nullptr;
    }
}

void PublisherSockets::close() noexcept
{
    closeSockets();
    if (context)
        zmq_ctx_term(context);
    context = nullptr;
}

} // namespace memscope::agent
