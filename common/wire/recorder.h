// Recorder: turns an agent's state reply plus the events that follow it into a model::Snapshot in PyTorch's
// format (the late-join procedure of docs/protocol.md, the Clone pattern of the ZeroMQ Guide, chapter 5).
//
// Events may arrive before the state: they are buffered, and once the state is set only those with a sequence
// above StateHeader::lastSequence are applied. A sequence jump (a gap) or a record's `lost` count means the
// recording missed allocator changes: both are counted and resyncNeeded() turns true; the Recorder goes on
// applying what it has, skipping (and counting) events that do not fit its state. The snapshot's final segments
// and blocks are always the state with the applied events on top, and its device_traces are exactly those events,
// so a Replay of it ends where the Recorder ends. Single-threaded: one thread owns a Recorder. No ZeroMQ.
#pragma once

#include "model/snapshot.h"
#include "wire/decoder.h"
#include "wire/protocol.h"

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace memscope::wire {

struct RecorderStats {
    uint64_t applied = 0; // events turned into trace entries (heartbeats not included)
    uint64_t heartbeats = 0;
    uint64_t stale = 0; // events already contained in the state (sequence <= its lastSequence), dropped
    uint64_t gaps = 0; // sequence jumps
    uint64_t missing = 0; // records skipped over by those jumps
    uint64_t lost = 0; // Σ EventRecord::lost: records the agent dropped (its ring was full)
    uint64_t inconsistent = 0; // events that did not fit the state (free of an unknown block, ...); skipped
    uint64_t agentLost = 0; // Goodbye::lost, when a goodbye arrived
    bool resyncNeeded() const { return gaps > 0 || lost > 0 || inconsistent > 0; }
};

class Recorder {
public:
    // Events of one batch, in order. Before setState they are buffered; after, applied.
    void addEvents(std::span<const EventRecord> events);
    // The baseline (a decoded state reply; its records are copied). May be called again as long as no event has
    // been applied yet: a fresher state replaces a stale one. Returns false (and changes nothing) once started().
    bool setState(const DecodedState& state);
    // True while the first event after the state jumps over missing sequences, i.e. the subscription missed
    // events published after the state was taken (ZeroMQ's slow joiner): ask for a fresher state. Events are
    // held meanwhile. After MaxStateRequests states the Recorder stops asking and accepts the gap.
    bool needsFreshState() const { return m_awaitingFresh; }
    static constexpr int MaxStateRequests = 3;
    bool hasState() const { return m_hasState; }
    // True when an event has been applied on top of the state.
    bool started() const { return m_started; }
    // A stack definition (topic "S"): trace entries, blocks and segments whose stackId names it get its frames in
    // the snapshot. A definition may arrive after the events that use it; a second one for the same id replaces it.
    void addStackDef(const DecodedStackDef& def);
    size_t stackCount() const { return m_stacks.size(); }
    // The agent said goodbye: records its totals (a lastSequence beyond ours counts as missing at the end).
    void setGoodbye(const Goodbye& goodbye);

    const RecorderStats& stats() const { return m_stats; }
    uint64_t lastSequence() const { return m_lastSequence; }
    const Hello& hello() const { return m_hello; }
    size_t bufferedEvents() const { return m_buffer.size(); }

    // The snapshot: final segments (by device, then address) with blocks tiling each of them (active blocks and
    // inactive gaps), device_traces with the applied events, no annotations, empty allocator_settings. Entries,
    // blocks and segments whose stack was defined carry its frames ({name, filename, line}, innermost first, as
    // PyTorch's C++ frames; "??" and 0 where the agent could not tell); the others have empty frames.
    model::Snapshot snapshot() const;

private:
    struct Block {
        uint64_t size = 0;
        uint64_t requestedSize = 0;
        uint8_t state = 1; // BlockRecord::state: 1 active_allocated, 2 active_pending_free
        uint32_t stackId = 0;
    };
    struct Segment {
        uint64_t size = 0;
        uint64_t stream = 0;
        int32_t poolFirst = 0;
        int32_t poolSecond = 0;
        bool isExpandable = false;
        bool isSmall = false;
        uint32_t stackId = 0;
        std::map<uint64_t, Block> blocks; // active blocks by address; the gaps between them are inactive
    };
    using Device = std::map<uint64_t, Segment>; // by address
    struct Entry {
        model::Action action;
        uint8_t device;
        uint64_t addr, size, stream, timeUs;
        uint32_t stackId;
    };
    struct StackFrame {
        std::string name, file;
        int32_t line = 0;
    };

    void drain();
    void apply(const EventRecord& e);
    bool applyToState(const EventRecord& e, uint64_t& traceSize);
    Device& device(uint8_t d);
    Segment* segmentAt(uint8_t d, uint64_t address, uint64_t size);

    bool m_hasState = false;
    bool m_awaitingFresh = false;
    bool m_started = false;
    int m_states = 0;
    Hello m_hello {};
    uint64_t m_lastSequence = 0;
    std::vector<EventRecord> m_buffer;
    std::vector<Device> m_devices;
    std::vector<Entry> m_entries;
    std::map<uint32_t, std::vector<StackFrame>> m_stacks; // by wire stack id
    RecorderStats m_stats;
};

} // namespace memscope::wire
