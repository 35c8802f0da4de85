// EventSource: what a Publisher publishes. Two kinds: memscope's own caching allocator (the publisher's ring is fed
// by the allocator's TraceObserver calls; publisher.cpp adapts it), and another allocator observed through its
// trace events (observer.h: PyTorch's, from a torch extension), whose records lack what only the allocator knew
// (block sizes, symbolised stacks) and which the source completes before they are sent.
//
// Threads: everything here is called on the publisher thread only.
#pragma once

#include "allocator.h"
#include "wire/protocol.h"

#include <cstdint>
#include <string>
#include <vector>

namespace memscope::agent {

class EventRing;

// A frame already symbolised by whoever captured it (PyTorch's Python and C++ frames): what a "S" definition holds.
struct SymbolFrame {
    std::string name;
    std::string filename;
    int64_t line = 0;
};

// The publisher, as a source sees it: sends stack definitions (topic "S") ahead of the records that name them.
class StackSender {
public:
    virtual ~StackSender() = default;
    virtual void sendSymbolizedStack(uint32_t stackId, const std::vector<SymbolFrame>& frames) = 0;
    // While a source waits for something slow (a host hook): says the agent is alive (a heartbeat, at most one per
    // heartbeat interval), so that viewers do not take the wait for a hung job.
    virtual void keepAlive() {}
};

class EventSource {
public:
    virtual ~EventSource() = default;

    virtual int deviceCount() const = 0;

    // The allocator's state now, every device's segments sorted by address, and in `written` (one entry per
    // device, already sized) the position of that device's ring (EventRing::written) the state follows: records
    // up to it are in the state, later ones are not. False when no state can be had (the state reply is skipped).
    virtual bool takeState(const std::vector<EventRing*>& rings, std::vector<SegmentInfo>& state,
                           std::vector<uint64_t>& written)
        = 0;

    // An observed source: the publisher takes a state before it publishes anything, drops the records that
    // state already holds (discard()), and hands every batch to complete() before numbering and sending it.
    virtual bool observed() const { return false; }
    // Records about to go out, in ring order: fill in what the observed allocator's events lacked; stack
    // definitions they need go out through `sender` now (before the batch).
    virtual void complete(wire::EventRecord* records, size_t count, StackSender& sender)
    {
        (void)records;
        (void)count;
        (void)sender;
    }
    // Records that will never be sent (the first state holds them): release what they hold.
    virtual void discard(const wire::EventRecord* records, size_t count)
    {
        (void)records;
        (void)count;
    }
    // The records up to takeState()'s positions are out: `state` is the baseline from now on.
    virtual void stateSent(const std::vector<SegmentInfo>& state) { (void)state; }
    // A viewer joined: every stack definition sent so far, again.
    virtual void resendStacks(StackSender& sender) { (void)sender; }
    // The allocator's settings in the wire's `key=T:value` lines (config.h, settingsLines); empty: none known.
    virtual std::string settings() const { return {}; }
};

} // namespace memscope::agent
