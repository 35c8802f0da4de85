// ReplayExtender: grows a Replay forwards, for a trace that is still being written (a live recording).
//
// Replay::build starts from the final state and undoes the trace backwards, which needs the whole trace. A live
// recording knows the opposite end: the allocator's state when the viewer joined (the agent's state reply) and then
// every entry as it happens. The extender starts a Replay at that state (state index 0) and applies entries in
// order, appending allocations, segment pieces, series values and checkpoints, so that the cost of an append is the
// new entries plus the live state, never the trace so far.
//
// After every append() the Replay answers exactly as Replay::build would on a snapshot whose final state is the
// extender's current state and whose trace is the entries so far, with four deliberate differences, all because
// the forward direction knows more or less than the backward one:
//   - inactive blocks' requests: the extender knows those of the start state (the agent's state reply lists them)
//     and follows PyTorch's rules from there (model/freeblocks.h); Replay::build knows those of its final state and
//     of the free blocks the rules reach;
//   - block sizes: the caller may pass each alloc's exact block size (the agent's records carry it); Replay::build
//     knows it only for allocations alive at the end and estimates the others;
//   - pool ids: the caller may pass each segment event's pool; Replay::build knows pools only of segments alive at
//     the end;
//   - a partial segment_unmap of an expandable range ends the whole piece and begins its remainders anew at the
//     unmap (pieces are immutable once a checkpoint lists them); states, segments and series are unaffected.
// An entry that does not fit the state (a free of an unknown block, an alloc over a live one, ...) is skipped and
// counted in Replay::warnings(), as in Replay::build.
//
// Threads: one thread owns an extender and the Replay it grows; the Replay must not be read while append() runs
// (a live document takes care of that, see app/document/livedocument.h). Between appends any number of threads may
// query it.
#pragma once

#include "model/addressmap.h"
#include "model/freeblocks.h"
#include "model/replay.h"
#include "model/snapshot.h"

#include <cstdint>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace memscope::model {

// What a live source knows about a trace entry beyond PyTorch's trace fields. Zero means unknown.
struct EntryDetail {
    ByteCount blockSize = 0; // alloc: the block's bytes (else estimatedBlockSize(requested))
    std::pair<int64_t, int64_t> poolId { 0, 0 }; // segment_alloc / segment_map: the segment's pool
};

// The allocator state at one index as a snapshot with segments and blocks (inactive gaps included) and no trace:
// what a viewer that joins at that moment is given. Stack ids stay those of the replay's snapshot.
Snapshot snapshotOfState(const ReplayState& state, int device);

class ReplayExtender {
public:
    explicit ReplayExtender(const ReplayOptions& options = {})
        : m_options(options)
    {
    }

    // Resets `replay` to state index 0 = the segments and blocks of `device` in `initial` (its trace is ignored),
    // with no entries yet.
    void start(Replay& replay, const Snapshot& initial, int device);
    // Applies `entries` (the trace's next entries, in order; `forms` holds their forms: their snapshot's
    // entryForms) to `replay`, which start() began and only this extender has changed since. `details` is empty or
    // has one per entry. Stops (counting one warning) at MaxReplayEntries entries. Allocates O(entries) amortised.
    void append(Replay& replay, const EntryFormTable& forms, std::span<const TraceEntry> entries,
                std::span<const EntryDetail> details = {});

    int64_t entryCount() const { return m_n; }

private:
    void apply(Replay& r, const EntryFormTable& forms, const TraceEntry& e, const EntryDetail& detail);
    void recordState(Replay& r);
    void publish(Replay& r);

    // freeGap: the piece's range is new free space (else it was reserved already); labelAt >= 0: label the free
    // block it makes at that state index (the start state is labelled as a whole).
    uint32_t addPiece(Replay& r, SegmentPiece piece, bool freeGap, TraceIndex labelAt = -1);
    void endPiece(Replay& r, uint32_t id);
    void segmentRelease(Replay& r, const TraceEntry& e, bool expandable);
    void addAllocation(Replay& r, uint32_t id, TraceIndex labelAt = -1);
    void removeAllocation(Replay& r, uint32_t id);
    bool compatible(const Replay& r, uint32_t a, uint32_t b) const;
    bool barrier(const Replay& r, DeviceAddr address) const;
    std::map<DeviceAddr, uint32_t>::iterator firstOpenEndingAfter(const Replay& r, DeviceAddr address);

    // A free Block object came into being on the way to state `index`: label it (Replay::inactiveLabels).
    void label(Replay& r, const FreeBlocks::Made& made, TraceIndex index);
    void label(Replay& r, const FreeBlocks::Changes& changes, TraceIndex index);

    ReplayOptions m_options;
    int64_t m_n = 0;
    uint32_t m_nextAlloc = 0; // allocations that began (all of them: they are appended in order)

    AddressMap m_open { 1024 }; // block address -> live allocation
    std::vector<uint8_t> m_freeRequested; // per allocation: its free_requested was seen
    std::vector<uint32_t> m_liveAllocs, m_allocPos;
    std::map<DeviceAddr, uint32_t> m_openPieces; // live pieces by address
    std::vector<uint32_t> m_livePieces, m_piecePos;
    FreeBlocks m_free { true }; // free blocks inside live segments, with their requests and labels (tags)
    std::vector<std::pair<DeviceAddr, uint32_t>> m_sortScratch;
    ByteCount m_allocated = 0, m_active = 0, m_reserved = 0, m_requested = 0;
    bool m_full = false;
};

} // namespace memscope::model
