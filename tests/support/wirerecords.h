// Wire records for tests (common/wire/protocol.h): an allocator event, and a state reply's segment and block, with
// the fields a test names and every other one zero, as the agent would send them. Header-only; for tests that link
// memscope-wire. Test threads only.
#pragma once

#include "wire/protocol.h"

#include <cstdint>

namespace memscope::test {

// The event numbered `sequence`, at `timeBaseNs` + 1 µs per sequence number (CLOCK_REALTIME ns).
inline wire::EventRecord eventRecord(uint64_t sequence, wire::EventType type, uint64_t address, uint64_t size,
                                     uint64_t requested = 0, uint64_t stream = 0, uint64_t timeBaseNs = 1'000'000'000)
{
    wire::EventRecord e {};
    e.sequence = sequence;
    e.timeNs = timeBaseNs + sequence * 1000;
    e.address = address;
    e.size = size;
    e.requestedSize = requested;
    e.stream = stream;
    e.type = uint8_t(type);
    return e;
}

inline wire::SegmentRecord segmentRecord(uint64_t address, uint64_t size, bool expandable = false)
{
    wire::SegmentRecord s {};
    s.address = address;
    s.size = size;
    s.isExpandable = expandable;
    return s;
}

// `state`: 0 inactive, 1 active_allocated, 2 active_pending_free (BlockRecord::state).
inline wire::BlockRecord blockRecord(uint64_t address, uint64_t size, uint64_t requested, uint8_t state = 1)
{
    wire::BlockRecord b {};
    b.address = address;
    b.size = size;
    b.requestedSize = requested;
    b.state = state;
    return b;
}

} // namespace memscope::test
