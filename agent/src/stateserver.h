// StateServer: the ROUTER side of the Clone pattern (ZeroMQ Guide, chapter 5; docs/protocol.md, "State"): it
// collects the viewers' state requests and answers all those waiting with one reply, shared by reference
// (zmq_msg_copy), so the job's memory and CPU do not grow with the number of viewers asking (or with peers that ask
// and never read: the ROUTER keeps at most a few replies per peer, and those share one buffer). States are taken
// in a burst of StateBurst, then at most one per MinStateIntervalMs (a token bucket). Taking the state itself is
// the publisher's (it must publish the records the state covers first). Publisher thread only, but for the
// counters, which any thread may read.
#pragma once

#include "allocator.h"

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_set>
#include <vector>

namespace memscope::agent {

class StateServer {
public:
    // Distinct peers waiting for one state; more are dropped (they retry). One state serves them all and their
    // replies share one buffer, so the bound is only the routing frames kept (at most 256 B each): large enough that
    // peers asking and never reading cannot crowd a real viewer out (tst_publisher silentAskersDoNotLockViewersOut).
    static constexpr size_t MaxRequesters = 1024;
    // Connections that asked for the job's Goodbye (Request{Goodbye}): the most recent ones.
    static constexpr size_t MaxGoodbyeWatchers = 1024;
    static constexpr unsigned MinStateIntervalMs = 100; // between two states taken once a burst is spent
    static constexpr int StateBurst = 4; // states taken at once before the interval applies

    // Reads every request waiting on `router` (a ZeroMQ ROUTER socket) without blocking; a well-formed
    // Request{State} from a peer not already waiting joins the waiting list; a Request{Stacks} (from anyone, any
    // number of times) asks for one resend of the stack definitions.
    void collect(void* router);
    bool waiting() const { return !m_requesters.empty(); }
    // A state or a resend of the definitions is due (each takes a token).
    bool pending() const { return waiting() || m_stacksAsked; }
    // The definitions were sent again (with a state or alone): the requests for it so far are answered.
    void stacksResent() { m_stacksAsked = false; }
    // Whether a state (or a resend of the definitions alone) may be taken now for those waiting (the token bucket;
    // `nowNs` a steady clock); counts it in statesTaken.
    bool takeToken(int64_t nowNs);
    // Sends the state reply (Hello, StateHeader, the segments and their blocks) to every peer waiting, and forgets
    // them; they ask again when there was no memory for it.
    void reply(void* router, uint16_t deviceCount, uint64_t clockBaseNs, uint64_t lastSequence,
               const std::vector<SegmentInfo>& segments);
    // No state this time: those waiting ask again after their timeout.
    void forget()
    {
        m_requesters.clear();
        m_waitingKeys.clear();
    }
    // The job's Goodbye (wire::Goodbye) to every connection that asked for it, without blocking: a peer whose queue
    // is full, or which is gone, misses it.
    void sendGoodbye(void* router, const void* goodbye, size_t bytes);

    uint64_t statesTaken() const { return m_statesTaken.load(std::memory_order_relaxed); }
    // State replies sent so far (any thread).
    uint64_t statesReplied() const { return m_statesReplied.load(std::memory_order_acquire); }
    uint64_t requestsDropped() const { return m_requestsDropped.load(std::memory_order_relaxed); }

private:
    std::vector<std::vector<std::string>> m_requesters; // routing frames of waiting peers
    std::unordered_set<std::string> m_waitingKeys; // their routing frames joined: one entry per waiting peer
    std::deque<std::vector<std::string>> m_goodbyeWatchers; // routing frames of peers that asked for the Goodbye
    std::unordered_set<std::string> m_watcherKeys;
    bool m_stacksAsked = false; // a Request{Stacks} came since the definitions were last sent again
    int64_t m_lastRefillNs = 0; // steady clock, the last time the bucket was filled
    double m_tokens = StateBurst; // states that may be taken now
    std::atomic<uint64_t> m_statesTaken { 0 };
    std::atomic<uint64_t> m_statesReplied { 0 };
    std::atomic<uint64_t> m_requestsDropped { 0 };
};

} // namespace memscope::agent
