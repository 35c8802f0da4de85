// The stacking engine of the memory timelines: items with lifetimes (allocations, or segment pieces) stacked in
// item order at every state index, as PyTorch's "Active Memory Timeline" and "Active Cached Memory Timeline" draw
// them (torch/utils/viz/MemoryViz.js, process_alloc_data: each element sits on the sum of the elements before it
// and slides down when an earlier one is freed). Unlike MemoryViz.js, which plots only the `max_entries` (15,000)
// largest elements and sums the rest into one "summarized" band, every item is represented: the plot is rasterised
// column by column from an incrementally maintained live stack, so a full picture costs O(entries in view +
// columns × live items), whatever the trace length.
//
// Plain C++20, no Qt. TimelineItems is immutable once built and may be shared by any threads; a TimelineStack and
// the functions that write into caller-owned buffers are used by one thread at a time.
#pragma once

#include "model/replay.h"

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

namespace memscope::model {

// Index of an item in its TimelineItems (for allocations it equals raw(AllocationId)).
using TimelineItem = uint32_t;
constexpr TimelineItem NoTimelineItem = UINT32_MAX;

// Things stacked on a timeline, in stacking order (bottom first). Item k is live at state index s iff
// begin[k] < s <= end[k] (the Replay convention: entry j moves state j to state j + 1), and is drawn "pending"
// (freed by the user, kept alive by record_stream) iff it is live and s > pendingFrom[k].
// Invariant: begin is non-decreasing, so an item added later always stacks on top of every live one.
struct TimelineItems {
    int64_t entryCount = 0; // states are 0..entryCount
    // GrowingArrays: a live document's timeline appends to them at its rate.
    GrowingArray<TraceIndex> begin; // entry index that adds it; -1: live before the trace
    GrowingArray<TraceIndex> end; // entry index that removes it; entryCount: live at the end
    GrowingArray<ByteCount> size;
    GrowingArray<TraceIndex> pendingFrom; // INT32_MAX: never pending
    // No address: item k is the replay's allocation k, or its segment piece k, which has it (8 bytes an item fewer:
    // 36 MB of a 1 GB snapshot's 4.5 M allocations).
    GrowingArray<TimelineItem> byEnd; // every item, ordered by end (then by index)
    GrowingArray<TraceIndex> endByEnd; // end[byEnd[i]]: the same order, without the indirection
    std::vector<TimelineItem> byPending; // the items that are ever pending, ordered by pendingFrom
    std::vector<TraceIndex> pendingByPending; // pendingFrom[byPending[i]]

    size_t count() const { return begin.size(); }
    bool operator==(const TimelineItems&) const = default; // every member (tests)
    bool liveAt(TimelineItem k, int64_t state) const { return begin[k] < state && state <= end[k]; }

    // Every allocation of `replay` (item k = allocation k; size = block bytes, as ReplaySeries::active counts;
    // pending from its free_requested unless its free_completed follows directly).
    static TimelineItems fromAllocations(const Replay& replay);
    // Every segment piece of `replay` (item k = segmentPieces()[k]), by begin order.
    static TimelineItems fromSegments(const Replay& replay);
    // The same from a replay's parts, for a build beside the replay's own (ReplayOptions::beside). `stop`, when
    // given and set meanwhile, ends the build early: its result is then incomplete, of no use but to be dropped.
    // `hugePages`: for items that will not grow (a snapshot file's; see setHugePages).
    static TimelineItems fromAllocations(std::span<const Allocation> allocations, int64_t entryCount,
                                         const std::atomic<bool>* stop = nullptr, bool hugePages = false);
    static TimelineItems fromSegments(std::span<const SegmentPiece> pieces, int64_t entryCount);
    // Fills the orders (byEnd, byPending and their keys) from begin/end/pendingFrom; the factories call it.
    void finish();
    // GrowingArray::setHugePages for every array: items made at once fault far less in 2 MiB pages (a 1 GB
    // snapshot's 4.5 M allocations: 170 MB of items); a live timeline's, which grow while the GUI waits, keep 4 KiB
    // ones.
    void setHugePages(bool on);

    // The same as fromAllocations / fromSegments of `replay` after it grew (model/replayextender.h) from the
    // replay these items were made of: the items alive at the old end are updated, the new ones appended, and the
    // orders repaired, in O(items alive at the old end + new items + pending items), not O(all items).
    void extendAllocations(const Replay& replay);
    void extendSegments(const Replay& replay);
};

// The segment piece (index into replay.segmentPieces()) holding each allocation when it begins, or NoTimelineItem
// (an inconsistent trace). O((allocations + pieces) log pieces). Any thread.
std::vector<TimelineItem> pieceOfAllocations(const Replay& replay);
// The same for `out`, pieceOfAllocations of the replay before it grew (model/replayextender.h), extended to the
// allocations added since, given the replay's segment pieces as grown TimelineItems (fromSegments, extendSegments):
// O(pieces alive at the first new allocation + new allocations × log live pieces + new pieces), not O(all). Equal to
// pieceOfAllocations(replay) where no two pieces share an address at once (every consistent trace).
void extendPieceOfAllocations(const Replay& replay, const TimelineItems& pieceItems, std::vector<TimelineItem>& out);

// One state per pixel column. Column x covers the states [lo[x], hi[x]) (non-empty, both non-decreasing,
// lo[x + 1] >= hi[x] - 1); it shows the state of the largest stacked total in that range (first one on ties), so
// a peak is never lost between columns, the envelope is the true maximum, and every column is one real state.
struct TimelineColumns {
    std::vector<int64_t> state; // per column: the state shown
    std::vector<ByteCount> total; // per column: the stacked bytes of that state (visible items only)
    ByteCount maxTotal = 0;
    // Where the walk stood when each column began, and after the last one, so that a later call can resume at a
    // column (sampleColumns).
    struct Walk {
        int64_t state;
        size_t nextAdd, nextRemove;
        ByteCount total;
    };
    std::vector<Walk> walk;
    // Reused by sampleColumns, one value per item where filters hide some (or an item is never live); no meaning to
    // callers. A GrowingArray: a live timeline's grows with its items at every growth, which a std::vector would copy
    // whole now and then.
    GrowingArray<ByteCount> scratch;
    bool sizesAsIs = false; // the last call read the items' sizes, not scratch
    size_t itemsSeen = 0; // the items the last call knew
};

// Picks the state of every column (pass 1: running totals only, O(items + entries in view)).
// `visible` (one flag per item) may be empty: everything is visible.
//
// With `firstColumn` > 0 it resumes: columns before it keep what `out` holds, and the walk goes on from where it
// stood at that column, O(items added since + entries from there). For a live document's timeline, whose old
// columns do not change when entries are appended. `out` must hold the result of an earlier call with the same
// `visible` flags for the items it knew, on the same items since grown only by TimelineItems::extend*, and the
// same lo[x], hi[x] for every x < firstColumn; firstColumn must not exceed that call's column count.
void sampleColumns(const TimelineItems& items, std::span<const uint8_t> visible, std::span<const int64_t> lo,
                   std::span<const int64_t> hi, TimelineColumns& out, size_t firstColumn = 0);

// The live items at one state, bottom first, maintained incrementally as the state moves forward: an item that
// begins is appended (it has the largest index of all live ones), an item that ends leaves a tombstone (size 0) that
// a periodic compaction removes. Each slot has a stable id that its items remember, so an entry costs O(1).
//
// For drawing, items thinner than a threshold (setColours) are not kept one by one: consecutive thin items share one
// "run" slot holding their total, drawn in the neutral colour. A column then walks about two slots per visible item
// instead of one per live item (big_trace at full view: ~750 instead of ~3,000). With the threshold at 0 (the
// default) every item has its own slot, and offsetOf / itemAt resolve every item.
class TimelineStack {
public:
    struct Slot {
        ByteCount size; // 0: tombstone (or an emptied run)
        // What to draw it with (see setColours): the caller's per-item colour, the pending colour while the item is
        // pending, or the neutral colour for a run of thin items.
        uint32_t color;
    };
    // Set in slotItems() on a slot that holds a run of thin items.
    static constexpr uint32_t RunFlag = 0x80000000u;

    TimelineStack() = default;
    // Binds the stack to `items` (which must outlive it) with per-item visibility (empty: all) and colours (empty:
    // 0). The stack is empty until a reset().
    void bind(const TimelineItems* items, std::span<const uint8_t> visible = {}, std::span<const uint32_t> colors = {});

    // Items smaller than `tallBytes` are merged into neutral runs; pending ones (live, state > pendingFrom) get the
    // colour `pending`, the others their own: decided when they are stacked or turn pending, so that drawing a column
    // decides nothing per item. A change re-stacks the current state (a scan).
    void setColours(ByteCount tallBytes, uint32_t neutral, uint32_t pending);
    ByteCount tallBytes() const { return m_tall; }

    // Moves to `state` (clamped to [0, entryCount]) by scanning the items begun before it: O(those items).
    void reset(int64_t state);
    // Moves to `state` with its live items given by a faster source (e.g. Replay::liveAt), in any order.
    void reset(int64_t state, std::span<const TimelineItem> live);
    // Moves forward to `state` (>= state()), applying the entries in between: O(entries) plus amortised compaction.
    void advanceTo(int64_t state);

    int64_t state() const { return m_state; }
    ByteCount total() const { return m_total; } // Σ sizes of the live visible items
    size_t liveCount() const { return m_live; } // live visible items
    // Slots bottom first; tombstones included. slotItems()[i] is the item of slots()[i], or for a run its last item
    // | RunFlag.
    std::span<const Slot> slots() const { return m_slots; }
    std::span<const uint32_t> slotItems() const { return m_slotItems; }

    // The bytes below a live visible item with a slot of its own, or -1. O(its position).
    ByteCount offsetOf(TimelineItem item) const;
    // The live visible item with a slot of its own covering byte offset `bytes` (0 = bottom) and its offset, or
    // NoTimelineItem (nothing there, or a run of thin items). O(slots).
    TimelineItem itemAt(ByteCount bytes, ByteCount* offset = nullptr) const;

private:
    void add(TimelineItem k);
    void remove(TimelineItem k);
    size_t slotOf(TimelineItem k) const; // the slot holding stacked item k
    void compact();
    void clear(int64_t state);
    uint32_t colourOf(TimelineItem k) const;
    bool isStacked(TimelineItem k) const; // visible, with a size and a lifetime
    void pushSlot(Slot slot, uint32_t item);

    const TimelineItems* m_items = nullptr;
    std::span<const uint8_t> m_visible;
    std::span<const uint32_t> m_colors;
    std::vector<Slot> m_slots;
    std::vector<uint32_t> m_slotItems;
    std::vector<uint32_t> m_slotIds; // per slot: its id
    std::vector<uint32_t> m_slotIndex; // per slot id: the slot's index now (valid for ids of live slots)
    // Per slot id: the id of the run it was merged into, or itself (a union-find forest, path-compressed on lookup).
    mutable std::vector<uint32_t> m_slotParent;
    // Per item: the id of its slot, valid while it is stacked. Never cleared (only stacked items' are read), so that
    // binding the stack to a live timeline's grown items costs only the new ones.
    GrowingArray<uint32_t> m_itemSlot;
    std::vector<TimelineItem> m_scratch;
    size_t m_dead = 0; // slots of size 0
    ByteCount m_tall = 0;
    uint32_t m_neutral = 0;
    uint32_t m_pending = 0;
    int64_t m_state = 0;
    size_t m_nextAdd = 0; // first item with begin >= m_state
    size_t m_nextRemove = 0; // first byEnd position with end >= m_state
    size_t m_nextPending = 0; // first byPending position with pendingFrom >= m_state
    size_t m_live = 0;
    ByteCount m_total = 0;
};

// Where and how rasterize() paints: a 32-bit pixel buffer (e.g. a QImage's bits), `width` columns by `height` rows,
// row 0 at the top, `stride` pixels per row. Byte 0 sits at the bottom; `bytesPerPixel` bytes make one pixel row.
struct TimelineRaster {
    uint32_t* pixels = nullptr;
    ptrdiff_t stride = 0;
    int width = 0;
    int height = 0;
    double bytesPerPixel = 1;
    uint32_t background = 0; // above the stack
    uint32_t neutral = 0; // rows of items thinner than one pixel row, merged into bands
    uint32_t pending = 0; // pending-free items (MemoryViz.js draws active_pending_free blocks red)
};

// Working memory of rasterize(), kept by the caller so that repeated calls allocate nothing. One per thread.
struct TimelineRasterScratch {
    std::vector<uint32_t> chunk; // a few columns, column-major
    std::vector<uint32_t> marks; // per row of one column
};

// Pass 2: paints columns [firstColumn, endColumn) (endColumn < 0: to the width), column x with the stack at
// columns.state[x], bottom up. Item k's run is [round(offset_k / bpp), round((offset_k + size_k) / bpp)): the runs
// tile the column exactly, and consecutive equal colours merge by construction. An item at least one pixel row tall
// gets its colour; an item thinner than that gets the neutral colour, so a run of thin items becomes one neutral
// band. A column whose state equals its left neighbour's (in the same call) is copied. `stack` must be bound to the
// items and at a state no later than columns.state[firstColumn]; it is left at the last column's state, with
// setColours(tallBytes(raster), raster.neutral, raster.pending). bytesPerPixel below 1/128 counts as 1/128.
// Allocates only to grow `scratch`. Calls on disjoint column ranges with their own stack and scratch may run
// concurrently. The smallest item drawn in its own colour: one pixel row's worth of bytes.
ByteCount tallBytes(const TimelineRaster& raster);

// The pixel row boundary of a byte offset: round(offset / bytesPerPixel), at most `height`. Computed as
// (offset × K + 2^55) >> 56 in 128-bit integers with K = 2^56 / bytesPerPixel, exact to far below a row for any
// realistic total and a few integer operations (no float round trip) in rasterize's inner loop. bytesPerPixel
// below 1/128 counts as 1/128.
struct TimelineRows {
    TimelineRows(double bytesPerPixel, int height);
    int row(ByteCount offset) const
    {
        __extension__ using Wide = unsigned __int128;
        const uint64_t rows = uint64_t((Wide(uint64_t(offset)) * m_scale + (Wide(1) << (Shift - 1))) >> Shift);
        return int(rows < m_height ? rows : m_height);
    }

private:
    static constexpr int Shift = 56;
    uint64_t m_scale;
    uint64_t m_height;
};

void rasterize(TimelineStack& stack, const TimelineColumns& columns, const TimelineRaster& raster,
               TimelineRasterScratch& scratch, int firstColumn = 0, int endColumn = -1);

// The bytes below `item` at each of `states` (non-decreasing), or -1 where it is not live (or not visible).
// O(items before it + entries between the first and last live state). For outlining one item across its lifetime.
void itemOffsets(const TimelineItems& items, std::span<const uint8_t> visible, TimelineItem item,
                 std::span<const int64_t> states, std::vector<ByteCount>& out);

} // namespace memscope::model
