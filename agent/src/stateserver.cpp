// StateServer (stateserver.h): state requests in, one shared state reply out, over libzmq's ROUTER.
#include "stateserver.h"

#include "sockets.h"
#include "wire/protocol.h"

#include <zmq.h>

#include <algorithm>
#include <cstring>

#include <unistd.h>

#ifndef MEMSCOPE_AGENT_VERSION
#define MEMSCOPE_AGENT_VERSION "unknown"
#endif

namespace memscope::agent {
namespace {

    std::string keyOf(const std::vector<std::string>& routing)
    {
        std::string key;
        for (const std::string& frame : routing) {
            key += std::to_string(frame.size());
            key += ':';
            key += frame;
        }
        return key;
    }

    void copyString(char* dst, size_t capacity, const char* src)
    {
        const size_t n = strnlen(src, capacity - 1);
        std::memcpy(dst, src, n);
        dst[n] = '\0';
    }

} // namespace

void StateServer::collect(void* router)
{
    for (;;) {
        // Identity [, empty delimiter], request: a longer message is not ours (it fails the checks below).
        std::vector<std::string> frames = receiveMessage(router, 4);
        if (frames.empty())
            break;
        if (frames.size() < 2 || frames.back().size() != sizeof(wire::Request))
            continue;
        wire::Request request;
        std::memcpy(&request, frames.back().data(), sizeof request);
        if (request.magic != wire::Magic || request.version != wire::ProtocolVersion)
            continue;
        if (request.type == uint16_t(wire::RequestType::Stacks)) {
            m_stacksAsked = true; // however many ask, one resend (Publisher::answerRequests)
            continue;
        }
        const bool goodbye = request.type == uint16_t(wire::RequestType::Goodbye);
        if (request.type != uint16_t(wire::RequestType::State) && !goodbye)
            continue;
        frames.pop_back(); // the routing frames stay: identity [, delimiter]
        std::string key = keyOf(frames);
        if (goodbye) {
            // The most recent MaxGoodbyeWatchers connections: a viewer asks on every new DEALER (one per state
            // request), so its latest connection is among them and those it closed drop out first.
            if (!m_watcherKeys.insert(key).second)
                continue;
            if (m_goodbyeWatchers.size() >= MaxGoodbyeWatchers) {
                m_watcherKeys.erase(keyOf(m_goodbyeWatchers.front()));
                m_goodbyeWatchers.pop_front();
            }
            m_goodbyeWatchers.push_back(std::move(frames));
            continue;
        }
        if (m_waitingKeys.count(key))
            continue; // asked twice before being answered: one answer
        if (m_requesters.size() >= MaxRequesters) {
            ++m_requestsDropped; // it asks again after its timeout
            continue;
        }
        m_waitingKeys.insert(std::move(key));
        m_requesters.push_back(std::move(frames));
    }
}

bool StateServer::takeToken(int64_t nowNs)
{
    // A burst of StateBurst states at once (a viewer's retries after ZeroMQ's slow joiner, a few viewers arriving
    // together), then one per MinStateIntervalMs.
    if (m_lastRefillNs != 0)
        m_tokens = std::min(double(StateBurst),
                            m_tokens + double(nowNs - m_lastRefillNs) / (double(MinStateIntervalMs) * 1e6));
    m_lastRefillNs = nowNs;
    if (m_tokens < 1.0)
        return false; // the run loop comes back, and the bucket has refilled a little
    m_tokens -= 1.0;
    ++m_statesTaken;
    return true;
}

void StateServer::reply(void* router, uint16_t deviceCount, uint64_t clockBaseNs, uint64_t lastSequence,
                        const std::vector<SegmentInfo>& segments)
{
    wire::Hello hello {};
    hello.magic = wire::Magic;
    hello.version = wire::ProtocolVersion;
    hello.deviceCount = deviceCount;
    hello.pid = uint32_t(::getpid());
    hello.clockBaseNs = clockBaseNs;
    char host[sizeof hello.host] = {};
    ::gethostname(host, sizeof host - 1);
    copyString(hello.host, sizeof hello.host, host);
    copyString(hello.agentVersion, sizeof hello.agentVersion, MEMSCOPE_AGENT_VERSION);

    wire::StateHeader state {};
    state.lastSequence = lastSequence;
    state.segmentCount = uint32_t(segments.size());
    for (const SegmentInfo& s : segments)
        state.blockCount += uint32_t(s.blocks.size());

    zmq_msg_t reply;
    const size_t bytes = sizeof hello + sizeof state + segments.size() * sizeof(wire::SegmentRecord)
        + size_t(state.blockCount) * sizeof(wire::BlockRecord);
    if (zmq_msg_init_size(&reply, bytes) != 0) {
        forget(); // no memory now: they ask again
        return;
    }
    char* out = static_cast<char*>(zmq_msg_data(&reply));
    auto put = [&out](const auto& value) {
        std::memcpy(out, &value, sizeof value);
        out += sizeof value;
    };
    put(hello);
    put(state);
    for (const SegmentInfo& s : segments) {
        wire::SegmentRecord r {};
        r.address = s.address;
        r.size = s.totalSize;
        r.stream = raw(s.stream);
        r.poolFirst = int32_t(s.pool.first);
        r.poolSecond = int32_t(s.pool.second);
        r.device = uint8_t(s.device);
        r.isExpandable = s.isExpandable;
        r.isSmall = !s.isLarge;
        put(r);
    }
    for (const SegmentInfo& s : segments) {
        for (const BlockInfo& b : s.blocks) {
            wire::BlockRecord r {};
            r.address = b.address;
            r.size = b.size;
            r.requestedSize = b.requestedSize;
            r.stream = raw(s.stream);
            r.device = uint8_t(s.device);
            r.state = b.allocated ? 1 : (b.active ? 2 : 0);
            r.stackId = b.stackId; // its Alloc's stack (sent again just before this reply)
            put(r);
        }
    }
    for (const std::vector<std::string>& routing : m_requesters) {
        zmq_msg_t copy;
        zmq_msg_init(&copy);
        zmq_msg_copy(&copy, &reply); // shares the buffer
        for (const std::string& frame : routing)
            zmq_send(router, frame.data(), frame.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        if (zmq_msg_send(&copy, router, ZMQ_DONTWAIT) < 0)
            zmq_msg_close(&copy); // that peer's queue is full: it asked and does not read
    }
    zmq_msg_close(&reply);
    forget();
    m_statesReplied.fetch_add(1, std::memory_order_release);
}

void StateServer::sendGoodbye(void* router, const void* goodbye, size_t bytes)
{
    for (const std::vector<std::string>& routing : m_goodbyeWatchers) {
        for (const std::string& frame : routing)
            zmq_send(router, frame.data(), frame.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
        zmq_send(router, goodbye, bytes, ZMQ_DONTWAIT);
    }
}

} // namespace memscope::agent
