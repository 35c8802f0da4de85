// The replay engine: the caching allocator's state of one device at any point of its trace, per-index memory
// series, and the lifetime of every allocation, derived from one Snapshot.
//
// PyTorch's trace is a ring buffer (`max_entries`), so it may start mid-run; only the final `segments` are
// complete. A Replay therefore starts from the final state and undoes the trace backwards (as PyTorch's
// MemoryViz.js does in `simulate_memory`), which resolves every allocation's lifetime, including blocks alive
// before the first entry. It then walks forwards to build the series and to keep checkpoints (the ids of the
// allocations and segment ranges live at some indices), so that the state at any index costs a binary search plus
// the live state plus the entries since the nearest checkpoint, never the whole trace; and forwards once more,
// following every free block, for what the free blocks carry (the inactive labels) and the largest free block at
// every index.
//
// A Replay is built once (Replay::build, any thread, typically a background job) and is immutable afterwards: any
// number of threads may query one at once. The last pass may be left to later (ReplayOptions::deferLabels): the
// Replay answers every query meanwhile, without what that pass adds, until Replay::buildLabels (one call, any
// thread, while other threads query) has added it. It holds no reference to the Snapshot it was built from.
#pragma once

#include "model/packedseries.h"
#include "model/snapshot.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

namespace memscope::model {

// Index into Replay::allocations() of one replay. Never mix ids of two replays.
enum class AllocationId : uint32_t {};
constexpr uint32_t raw(AllocationId id) { return static_cast<uint32_t>(id); }
constexpr AllocationId NoAllocation { UINT32_MAX };

// Trace positions. An entry index j in [0, n) names trace entry j. A state index i in [0, n] names the state after
// applying entries [0, i): i = 0 is the state before the first entry, i = n the final state (== the snapshot's).
// Entry j moves the state from index j to index j + 1.
using TraceIndex = int32_t;
// The longest trace a Replay takes (2^29 entries, ~34 GB of trace entries in memory), so that indices fit int32_t
// and the internal address coordinates (at most 2 per allocation or segment) stay below 2^31.
constexpr size_t MaxReplayEntries = size_t(1) << 29;

// Block sizes the trace does not know. Trace entries carry the requested size only; PyTorch rounds a request up
// to a multiple of 512 B (c10/cuda/CUDACachingAllocator.cpp: round_size, kMinBlockSize), more when
// roundup_power2_divisions is set, and hands out the whole free block when the remainder is not worth splitting
// off (should_split: under 512 B in the small pool, up to 1 MiB in the large pool without expandable segments).
// A Replay takes the exact size from the final snapshot for an allocation that survives to the end, and
// otherwise this lower bound.
constexpr ByteCount MinBlockSize = 512;
constexpr ByteCount estimatedBlockSize(ByteCount requested)
{
    return requested <= MinBlockSize ? MinBlockSize : (requested + MinBlockSize - 1) / MinBlockSize * MinBlockSize;
}

// One allocation (one block of the caching allocator from its alloc to its free_completed).
//
// It is live at state i iff allocIndex < i <= freeCompletedIndex, and then pending free (active_pending_free:
// freed by the user, still in use by another stream through record_stream) iff freeRequestedIndex < i; otherwise
// active_allocated. For a timeline its entry-index range is [allocIndex, freeCompletedIndex).
struct Allocation {
    DeviceAddr address = 0;
    ByteCount size = 0; // block bytes: exact when sizeIsExact, else estimatedBlockSize(requestedSize)
    ByteCount requestedSize = 0;
    StackId stack = EmptyStack; // the alloc's stack; empty when the alloc is not in the trace
    uint32_t version = 0; // as TraceEntry::version / Block::version
    TraceIndex allocIndex = -1; // entry index of its alloc; -1: alive before the trace
    // Entry index of its free_requested; -1: pending since before the trace (or since its alloc when the trace
    // has no free_requested for it); freeCompletedIndex: never pending (e.g. legacy `free` entries).
    TraceIndex freeRequestedIndex = 0;
    TraceIndex freeCompletedIndex = 0; // entry index of its free_completed; n: alive at the end
    bool sizeIsExact = false; // size comes from the final snapshot
};

// One lifetime of reserved memory: a whole cudaMalloc'ed segment, or one mapped range of an expandable segment
// (segment_map .. segment_unmap; a range unmapped in parts is split into several pieces). Live at state i iff
// beginIndex < i <= endIndex. Pool id and segment stack are known only for pieces alive at the end (trace entries
// carry neither): other pieces have pool (0, 0) and the stack of their segment_alloc/segment_free entry.
struct SegmentPiece {
    DeviceAddr address = 0;
    ByteCount size = 0;
    int64_t stream = 0;
    std::pair<int64_t, int64_t> poolId { 0, 0 };
    StackId stack = EmptyStack;
    TraceIndex beginIndex = -1; // entry index of its segment_alloc / segment_map; -1: before the trace
    TraceIndex endIndex = 0; // entry index of its segment_free / segment_unmap; n: alive at the end
    bool isExpandable = false;
};

// Where an inactive block's requested size comes from. PyTorch leaves the request of a Block object's last user on
// it when it is freed, and the object that survives a split or merge decides which request a free block shows
// (model/freeblocks.h has the rules). A label says: from state index `index` on, the free block that ends at `end`
// is a Block object carrying `requested`, until a later label for the same end. Free blocks keep their end while
// they live (an allocation takes the front of one), so the label of an inactive block at index i is the latest one
// with its end at or before i.
struct InactiveLabel {
    DeviceAddr end = 0;
    ByteCount requested = 0;
    TraceIndex index = 0;
};

// A block of the state at one index: an allocation (active_allocated / active_pending_free) or a free gap
// (inactive) between allocations. Blocks tile their segment exactly, in address order.
struct ReplayBlock {
    DeviceAddr address = 0;
    ByteCount size = 0;
    // Inactive blocks: the stale request their Block object carries (as in PyTorch's snapshot), where the replay
    // knows it (see Replay::inactiveLabels); 0 where it does not.
    ByteCount requestedSize = 0;
    BlockState state = BlockState::Inactive;
    StackId stack = EmptyStack;
    uint32_t version = 0;
    TraceIndex allocIndex = -1; // -1 also on inactive blocks
    AllocationId allocation = NoAllocation; // NoAllocation on inactive blocks
};

// A segment of the state at one index. An expandable segment is the union of adjacent mapped pieces of one stream
// and pool, as PyTorch's snapshot reports one segment per contiguous mapped range (CUDACachingAllocator.cpp
// snapshot(): "one segment for each contiguous mapped range"); total_size is then the mapped bytes.
struct ReplaySegment {
    DeviceAddr address = 0;
    ByteCount totalSize = 0;
    ByteCount allocatedSize = 0; // Σ active_allocated blocks
    ByteCount activeSize = 0; // + active_pending_free blocks
    ByteCount requestedSize = 0; // Σ requested bytes of active blocks
    int64_t stream = 0;
    std::pair<int64_t, int64_t> poolId { 0, 0 };
    StackId stack = EmptyStack;
    int32_t device = 0;
    bool isExpandable = false;
    uint32_t blockBegin = 0; // range in ReplayState::blocks
    uint32_t blockCount = 0;
};

// The allocator state at one index. Reuse one object across queries to avoid reallocating its vectors.
struct ReplayState {
    int64_t index = 0;
    std::vector<ReplaySegment> segments; // by address
    std::vector<ReplayBlock> blocks; // by address; each segment's blocks are contiguous
    std::vector<AllocationId> allocations; // the allocations live at index, by address (== Replay::liveAt)
    // Live allocations that lie outside every segment or overlap another one (only in inconsistent traces); they
    // are in `allocations` but not in `blocks`.
    uint32_t strayBlocks = 0;
    std::vector<uint32_t> pieces; // the segment pieces live at index (into Replay::segmentPieces()), by address
    std::vector<AllocationId> scratch; // reused by queries; no meaning to callers
    std::vector<std::pair<DeviceAddr, uint32_t>> labelScratch; // likewise
};

// Per-state-index values, one per index 0..n (n + 1 values each). Packed (model/packedseries.h: about 2-4 bytes a
// value instead of 8, read back exactly); a live replay appends to them.
struct ReplaySeries {
    PackedSeries allocated; // Σ active_allocated block bytes
    PackedSeries active; // + active_pending_free block bytes
    PackedSeries reserved; // Σ segment bytes (mapped bytes of expandable segments)
    PackedSeries requested; // Σ requested bytes of active blocks (PyTorch's segment requested_size)
    // The largest inactive gap in any segment is Replay::largestFree(): it comes with the labels.

    size_t size() const { return allocated.size(); }
    // External fragmentation: reserved bytes not backing an active block, in bytes and as a fraction of reserved
    // (0 when nothing is reserved).
    ByteCount fragmentation(size_t i) const { return reserved[i] - active[i]; }
    double fragmentationRatio(size_t i) const
    {
        return reserved[i] > 0 ? double(reserved[i] - active[i]) / double(reserved[i]) : 0.0;
    }
};

// The largest inactive block of a state (0 when none).
ByteCount largestInactive(const ReplayState& state);

struct Peak {
    ByteCount bytes = 0;
    int64_t index = 0; // the first state index where the maximum is reached
};

// An inconsistency between a trace and its final state, as Replay::build met it.
struct ReplayIssue {
    int64_t entry = 0; // this replay's entry index (entryCount(): the final state)
    const char* what = ""; // what did not fit, a static string
};

struct ReplayOptions {
    // Checkpoint spacing: a checkpoint is kept once max(minCheckpointInterval, checkpointSpacing × live objects)
    // entries have passed since the previous one, so checkpoints cost about 4 / checkpointSpacing bytes per entry
    // in total and a query replays at most that many entries. Live objects are the live allocations, the live
    // segment pieces and the free blocks (a checkpoint lists each one's label), the free blocks counted as their
    // bound, one per live allocation or piece (a free block begins where one of those ends or where a segment
    // begins), so that the checkpoints are known before the free blocks are followed. 0 and 0 keep one checkpoint
    // per entry (tests).
    uint32_t minCheckpointInterval = 1024;
    uint32_t checkpointSpacing = 4;
    // Called now and then on the building thread with the share of the build done, in [0, 1], never less than
    // the call before: at the start of each step (undoing the trace, ordering the allocations, the series and
    // checkpoints, the coordinates, the labels) and every 2^20 items of its loops, so that no step of even a 5 GB
    // file runs long unasked. With deferLabels the share is of what build() does.
    // Returning false stops the build at once: the replay is then incomplete (Replay::stopped()) and of no use but
    // to be dropped, and this is not called again. Empty: the build runs to the end unasked.
    std::function<bool(double done)> progress {};
    // Work that derives from the allocations and segment pieces alone (the timeline's items): when set, the build
    // runs it on a thread of its own as soon as both are final, beside the forward pass (about half of the build),
    // and waits for it before it returns or throws (an exception of the work's own is rethrown by build()). The
    // spans are the Replay's own arrays, which keep their storage wherever the Replay is moved. `stop` is set when
    // the build stops early or fails: the work should then end soon, its result being of no use.
    std::function<void(std::span<const Allocation> allocations, std::span<const SegmentPiece> pieces,
                       int64_t entryCount, const std::atomic<bool>& stop)>
        beside {};
    // Leave the inactive labels and the largest-free series (about half of the build: a second forward pass and
    // the coordinates it runs on) to Replay::buildLabels, so that a document can show everything else sooner.
    bool deferLabels = false;
};

class Replay {
public:
    Replay() = default;

    // Builds the replay of `device` (segments filtered by device, trace deviceTraces[device]). Never fails:
    // inconsistencies (a free of an unknown address, an alloc over a live block, a segment_free of an unknown
    // segment, ...) are counted in warnings() and skipped. Allocates O(n); may be called from any thread.
    // Of a trace longer than MaxReplayEntries only the newest MaxReplayEntries entries are replayed (counted as
    // one warning; see firstEntry()).
    static Replay build(const Snapshot& snapshot, int device, const ReplayOptions& options = {});
    // One replay per device, index = device (Snapshot::deviceCount()).
    static std::vector<Replay> buildAll(const Snapshot& snapshot, const ReplayOptions& options = {});

    int device() const { return m_device; }
    int64_t entryCount() const { return m_entryCount; } // n: states are 0..n
    // The snapshot trace entry that is this replay's entry 0: 0 unless the trace was longer than MaxReplayEntries.
    int64_t firstEntry() const { return m_firstEntry; }

    // The state at state index `index` (clamped to [0, n]). O(log n + live state + entries since the nearest
    // checkpoint); allocates only to grow `out`'s vectors.
    void stateAt(int64_t index, ReplayState& out) const;
    ReplayState stateAt(int64_t index) const;

    // The allocations live at state index `index` (clamped), by address. Same cost as stateAt without the tiling.
    void liveAt(int64_t index, std::vector<AllocationId>& out, std::vector<AllocationId>& scratch) const;
    std::vector<AllocationId> liveAt(int64_t index) const;

    // Every allocation: those alive before the trace first (by address), then one per alloc entry in trace order.
    // An alloc entry that could not be matched (inconsistent trace, counted in warnings()) has none.
    const GrowingArray<Allocation>& allocations() const { return m_allocations; }
    const Allocation& allocation(AllocationId id) const { return m_allocations[raw(id)]; }
    // The allocation an alloc / free_requested / free_completed entry changed, or NoAllocation (other actions,
    // or an entry that was skipped as inconsistent).
    AllocationId allocationOfEntry(int64_t entry) const;
    // Every segment lifetime, by beginIndex.
    const std::vector<SegmentPiece>& segmentPieces() const { return m_pieces; }
    // The labels of inactive blocks' requests, by index. A replay grown forwards from a known state
    // (ReplayExtender) knows every inactive block's request from there on. Replay::build applies the same rules
    // forwards from the state before the trace, where a free block's request is known only if that block survives
    // to the end (the final snapshot shows it); a request the rules cannot know is 0, and at the last index the
    // final snapshot's requests are taken as they are.
    // Empty until labelled().
    const GrowingArray<InactiveLabel>& inactiveLabels() const;

    const ReplaySeries& series() const { return m_series; }
    Peak peakAllocated() const { return m_peakAllocated; }
    Peak peakActive() const { return m_peakActive; }
    Peak peakReserved() const { return m_peakReserved; }

    // Whether ReplayOptions::progress stopped the build (the replay is then incomplete).
    bool stopped() const { return m_stopped; }

    // Whether the inactive labels and the largest-free series are there: always after a build without
    // ReplayOptions::deferLabels; after one with it, once buildLabels() has finished. Until then stateAt() leaves
    // every inactive block's requestedSize 0, inactiveLabels() is empty and largestFree() null.
    bool labelled() const { return m_labelled.value.load(std::memory_order_acquire); }
    // Builds what a build with ReplayOptions::deferLabels left out, from the Snapshot it was built from (which must
    // be alive and unchanged). On one thread at a time; other threads may query this Replay meanwhile (it must not be
    // moved or destroyed until this returns). `progress` as ReplayOptions::progress, over this call's work; when it
    // stops the call (returns false), so does this, leaving the replay unlabelled (a later call starts again).
    // Returns labelled(). A replay that is labelled already is left as it is.
    bool buildLabels(const Snapshot& snapshot, const std::function<bool(double done)>& progress = {});
    // The largest inactive gap in any segment, per state index (as series()); null until labelled().
    const PackedSeries* largestFree() const { return labelled() ? &m_largestFree : nullptr; }
    // The same at state `index` (clamped): from largestFree() once labelled(), else from stateAt(index) (the cost of
    // a query).
    ByteCount largestFreeAt(int64_t index) const;

    // Inconsistencies met while building (0 for a well-formed trace, truncated or not).
    uint64_t warnings() const { return m_warnings; }
    // The earliest of them in trace order (entry n: the final state itself); meaningful when warnings() > 0. What the
    // ReplayExtender meets later is counted in warnings() only.
    const ReplayIssue& firstWarning() const { return m_firstWarning; }
    // Whether the trace was recorded without its `free_requested` entries (PyTorch's
    // `_record_memory_history(skip_actions=["free_requested"])`, torch/cuda/memory.py): it has `free_completed`
    // entries and none of them. Each free then counts as requested where it completed.
    bool freeRequestedSkipped() const { return m_freeRequestedSkipped; }

    size_t checkpointCount() const { return m_checkpointIndex.size(); }
    size_t checkpointBytes() const; // memory held by checkpoints
    size_t memoryBytes() const; // memory held by the whole replay

private:
    friend class ReplayBuilder;
    friend class ReplayLabeller; // the labels' pass (replay.cpp)
    friend class ReplayExtender; // model/replayextender.h: grows a Replay forwards, entry by entry

    size_t checkpointFor(int64_t index) const;
    void collectPieces(int64_t index, std::vector<uint32_t>& out) const;

    // For both builders (ReplayBuilder's forward pass, ReplayExtender): appends the series values of state `index`
    // and updates the peaks; keeps a checkpoint when one is due (see ReplayOptions). `liveAllocs` / `livePieces`: what
    // is live at `index` (any order); `nextAlloc` / `nextPiece`: the first allocation / piece that begins at or
    // after it. `scratch` is the caller's, reused.
    struct StateTotals {
        ByteCount allocated, active, reserved, requested, largestFree;
    };
    // Returns true when it kept a checkpoint: the caller then calls checkpointLabels() for it with the labels of the
    // free blocks live at `index`. Appends `totals.largestFree` too (for a replay labelled as it goes).
    bool recordState(TraceIndex index, const StateTotals& totals, std::span<const uint32_t> liveAllocs,
                     std::span<const uint32_t> livePieces, uint32_t nextAlloc, uint32_t nextPiece,
                     const ReplayOptions& options, std::vector<std::pair<DeviceAddr, uint32_t>>& scratch)
    {
        recordSeries(index, totals);
        m_largestFree.push_back(totals.largestFree);
        return recordCheckpoint(index, liveAllocs, livePieces, nextAlloc, nextPiece, options, scratch);
    }
    // recordState's parts, which touch disjoint members: the series (but the largest free) and the peaks, and the
    // checkpoints (which read the allocations and pieces). ReplayBuilder runs them on two threads.
    void recordSeries(TraceIndex index, const StateTotals& totals);
    bool recordCheckpoint(TraceIndex index, std::span<const uint32_t> liveAllocs, std::span<const uint32_t> livePieces,
                          uint32_t nextAlloc, uint32_t nextPiece, const ReplayOptions& options,
                          std::vector<std::pair<DeviceAddr, uint32_t>>& scratch);
    // The labels of the free blocks live at the next checkpoint, in order, that has none yet: (end, label id)
    // pairs, any order. Every label made so far has an index at or before the checkpoint's, and no other does.
    void checkpointLabels(std::vector<std::pair<DeviceAddr, uint32_t>>& byEnd);
    // The requests of the inactive blocks of `out` (stateAt's last step).
    void labelInactive(ReplayState& out) const;

    int m_device = 0;
    int64_t m_entryCount = 0;
    int64_t m_firstEntry = 0;
    uint64_t m_warnings = 0;
    bool m_stopped = false;
    bool m_freeRequestedSkipped = false;
    ReplayIssue m_firstWarning;
    GrowingArray<Allocation> m_allocations; // GrowingArrays: a live replay grows these per entry
    GrowingArray<uint32_t> m_entryAllocation; // per entry: raw AllocationId or UINT32_MAX
    std::vector<SegmentPiece> m_pieces;
    GrowingArray<InactiveLabel> m_labels; // by index
    ReplaySeries m_series;
    Peak m_peakAllocated, m_peakActive, m_peakReserved;
    // Set (release) once the labels, their lists at the checkpoints and m_largestFree are complete; copyable, so
    // that a Replay is (while nobody labels it).
    struct Flag {
        std::atomic<bool> value { false };
        Flag() = default;
        Flag(const Flag& other) noexcept
            : value(other.value.load())
        {
        }
        Flag& operator=(const Flag& other) noexcept
        {
            value.store(other.value.load());
            return *this;
        }
    } m_labelled;
    PackedSeries m_largestFree;

    // Checkpoint k at state index m_checkpointIndex[k]: the allocations live there (by address) are
    // m_checkpointAllocs[m_checkpointAllocOffsets[k] .. [k + 1]), the live pieces (by address) likewise, and the
    // first allocation / piece that begins at or after it is m_checkpointFirstAlloc[k] / m_checkpointFirstPiece[k].
    std::vector<TraceIndex> m_checkpointIndex;
    std::vector<uint32_t> m_checkpointAllocOffsets;
    std::vector<AllocationId> m_checkpointAllocs;
    std::vector<uint32_t> m_checkpointPieceOffsets;
    std::vector<uint32_t> m_checkpointPieces;
    std::vector<uint32_t> m_checkpointFirstAlloc;
    std::vector<uint32_t> m_checkpointFirstPiece;
    // ... and the labels of the free blocks live there (by id) are m_checkpointLabels[m_checkpointLabelOffsets[k]
    // .. [k + 1]), the first label made after it m_checkpointFirstLabel[k]. These, m_labels and m_largestFree are
    // the labels' pass's: read them only when labelled().
    std::vector<uint32_t> m_checkpointLabelOffsets;
    std::vector<uint32_t> m_checkpointLabels;
    std::vector<uint32_t> m_checkpointFirstLabel;
};

} // namespace memscope::model
