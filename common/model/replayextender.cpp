// ReplayExtender (replayextender.h): the forward half of replay.cpp's builder, without its precomputed address
// coordinates (a live trace's future addresses are unknown), so free gaps live in an ordered map instead of a bit
// tree. Apply rules (what c10/cuda/CUDACachingAllocator.cpp records, read forwards):
//   alloc            a block becomes active_allocated;  free_requested: it turns active_pending_free
//   free_completed   the block goes back to its segment (a legacy `free` does both steps at once)
//   segment_alloc    a segment appears;                 segment_free: it goes
//   segment_map      a range of an expandable segment is mapped;  segment_unmap: unmapped
//   snapshot, oom, unknown actions: no change.
#include "model/replayextender.h"

#include <algorithm>
#include <cassert>

namespace memscope::model {

namespace {

    constexpr uint32_t None = UINT32_MAX;
    // The lifetime bound of what is still live: publish() replaces it with the entry count before anyone reads.
    constexpr TraceIndex Open = INT32_MAX;

    void eraseLive(std::vector<uint32_t>& live, std::vector<uint32_t>& pos, uint32_t id)
    {
        const uint32_t at = pos[id];
        if (at >= live.size() || live[at] != id)
            return;
        live[at] = live.back();
        pos[live[at]] = at;
        live.pop_back();
        pos[id] = None;
    }

    void addLive(std::vector<uint32_t>& live, std::vector<uint32_t>& pos, uint32_t id)
    {
        if (pos.size() <= id)
            pos.resize(size_t(id) + 1, None);
        pos[id] = uint32_t(live.size());
        live.push_back(id);
    }

} // namespace

Snapshot snapshotOfState(const ReplayState& state, int device)
{
    Snapshot s;
    for (const ReplaySegment& rs : state.segments) {
        Segment seg;
        seg.device = device;
        seg.address = rs.address;
        seg.totalSize = rs.totalSize;
        seg.allocatedSize = rs.allocatedSize;
        seg.activeSize = rs.activeSize;
        seg.requestedSize = rs.requestedSize;
        seg.stream = rs.stream;
        seg.poolId = rs.poolId;
        seg.isExpandable = rs.isExpandable;
        seg.stack = rs.stack;
        seg.blockBegin = uint32_t(s.blocks.size());
        for (uint32_t b = rs.blockBegin; b < rs.blockBegin + rs.blockCount; ++b) {
            const ReplayBlock& rb = state.blocks[b];
            Block block;
            block.address = rb.address;
            block.size = rb.size;
            block.requestedSize = rb.requestedSize;
            block.state = rb.state;
            block.stack = rb.stack;
            block.version = rb.version;
            s.blocks.push_back(block);
        }
        seg.blockCount = uint32_t(s.blocks.size()) - seg.blockBegin;
        s.segments.push_back(seg);
    }
    return s;
}

void ReplayExtender::start(Replay& r, const Snapshot& initial, int device)
{
    r = Replay {};
    r.m_device = device;
    *this = ReplayExtender(m_options);

    // Segments first, by address, so that blocks find their gaps (as replay.cpp's forward pass).
    std::vector<const Segment*> segments;
    for (const Segment& seg : initial.segments)
        if (seg.device == device)
            segments.push_back(&seg);
    std::stable_sort(segments.begin(), segments.end(),
                     [](const Segment* a, const Segment* b) { return a->address < b->address; });
    std::vector<Allocation> blocks;
    for (const Segment* seg : segments) {
        if (seg->totalSize <= 0) {
            ++r.m_warnings;
            continue;
        }
        SegmentPiece piece;
        piece.address = seg->address;
        piece.size = seg->totalSize;
        piece.stream = seg->stream;
        piece.poolId = seg->poolId;
        piece.stack = seg->stack;
        piece.beginIndex = -1;
        piece.endIndex = Open;
        piece.isExpandable = seg->isExpandable;
        if (addPiece(r, piece, true) == None)
            continue;
        const size_t first = std::min<size_t>(seg->blockBegin, initial.blocks.size());
        const size_t count = std::min<size_t>(seg->blockCount, initial.blocks.size() - first);
        for (size_t b = first; b < first + count; ++b) {
            const Block& block = initial.blocks[b];
            if (block.state == BlockState::Inactive)
                continue;
            if (block.state == BlockState::Unknown || block.size <= 0) {
                ++r.m_warnings;
                continue;
            }
            Allocation a;
            a.address = block.address;
            a.size = block.size;
            a.requestedSize = block.requestedSize;
            a.stack = block.stack;
            a.version = block.version;
            a.allocIndex = -1;
            a.freeRequestedIndex = block.state == BlockState::ActivePendingFree ? -1 : Open;
            a.freeCompletedIndex = Open;
            a.sizeIsExact = true;
            blocks.push_back(a);
        }
    }
    std::stable_sort(blocks.begin(), blocks.end(),
                     [](const Allocation& a, const Allocation& b) { return a.address < b.address; });
    for (const Allocation& a : blocks) {
        if (m_open.find(a.address) != None) {
            ++r.m_warnings;
            continue;
        }
        const uint32_t id = uint32_t(r.m_allocations.size());
        r.m_allocations.push_back(a);
        m_freeRequested.push_back(a.freeRequestedIndex == -1);
        m_open.insert(a.address, id);
        addAllocation(r, id);
    }
    m_nextAlloc = uint32_t(r.m_allocations.size());
    // The start state's free blocks carry the requests it lists for its inactive blocks (the agent's state reply
    // has PyTorch's stale ones); a free block the state does not list as one inactive block carries none.
    std::map<DeviceAddr, std::pair<DeviceAddr, ByteCount>> inactive; // start -> end, request
    for (const Segment* seg : segments) {
        const size_t first = std::min<size_t>(seg->blockBegin, initial.blocks.size());
        const size_t count = std::min<size_t>(seg->blockCount, initial.blocks.size() - first);
        for (size_t b = first; b < first + count; ++b)
            if (initial.blocks[b].state == BlockState::Inactive)
                inactive[initial.blocks[b].address]
                    = { initial.blocks[b].address + initial.blocks[b].size, initial.blocks[b].requestedSize };
    }
    std::vector<FreeBlocks::Made> made;
    for (const auto& [start, block] : m_free.blocks()) {
        auto it = inactive.find(start);
        const ByteCount requested = it != inactive.end() && it->second.first == block.end ? it->second.second : 0;
        made.push_back({ start, block.end, requested });
    }
    for (const FreeBlocks::Made& m : made) {
        m_free.insert(m.start, m.end, m.requested);
        label(r, m, 0);
    }
    r.m_checkpointAllocOffsets.assign(1, 0);
    r.m_checkpointPieceOffsets.assign(1, 0);
    r.m_checkpointLabelOffsets.assign(1, 0);
    r.m_peakAllocated = { m_allocated, 0 };
    r.m_peakActive = { m_active, 0 };
    r.m_peakReserved = { m_reserved, 0 };
    recordState(r);
    r.m_labelled.value.store(true, std::memory_order_release); // labelled as it grows
    publish(r);
}

void ReplayExtender::append(Replay& r, const EntryFormTable& forms, std::span<const TraceEntry> entries,
                            std::span<const EntryDetail> details)
{
    assert(details.empty() || details.size() == entries.size());
    static const EntryDetail unknown {};
    for (size_t i = 0; i < entries.size(); ++i) {
        if (size_t(m_n) >= MaxReplayEntries) {
            if (!m_full)
                ++r.m_warnings;
            m_full = true;
            break;
        }
        apply(r, forms, entries[i], details.empty() ? unknown : details[i]);
        ++m_n;
        recordState(r);
    }
    publish(r);
    // A replay that is extended keeps growing: the next pages of its per-entry arrays are faulted in on another
    // thread meanwhile (model/prefault.h), about 60 ms of entries ahead at 2 M entries/s.
    constexpr size_t Ahead = size_t(1) << 17;
    r.m_entryAllocation.prefaultAhead(Ahead);
    r.m_allocations.prefaultAhead(Ahead / 2);
    r.m_labels.prefaultAhead(Ahead / 2);
    for (PackedSeries* series : { &r.m_series.allocated, &r.m_series.active, &r.m_series.reserved,
                                  &r.m_series.requested, &r.m_largestFree })
        series->prefaultAhead(Ahead);
}

// Live allocations and pieces get the entry count as their end (the Replay convention for "alive at the end"); an
// allocation not freed by its user gets it as its free_requested too.
void ReplayExtender::publish(Replay& r)
{
    const TraceIndex n = TraceIndex(m_n);
    r.m_entryCount = m_n;
    for (uint32_t id : m_liveAllocs) {
        Allocation& a = r.m_allocations[id];
        a.freeCompletedIndex = n;
        if (!m_freeRequested[id])
            a.freeRequestedIndex = n;
    }
    for (uint32_t p : m_livePieces)
        r.m_pieces[p].endIndex = n;
}

void ReplayExtender::apply(Replay& r, const EntryFormTable& forms, const TraceEntry& e, const EntryDetail& detail)
{
    const TraceIndex index = TraceIndex(m_n);
    uint32_t changed = None;
    switch (e.action) {
    case Action::Alloc: {
        const ByteCount size = detail.blockSize > 0 ? detail.blockSize : estimatedBlockSize(e.size);
        if (m_open.find(e.addr) != None || size <= 0) {
            ++r.m_warnings; // an alloc over a live block (a lost free)
            break;
        }
        Allocation a;
        a.address = e.addr;
        a.size = size;
        a.requestedSize = e.size;
        a.stack = e.stack;
        a.version = e.version;
        a.allocIndex = index;
        a.freeRequestedIndex = Open;
        a.freeCompletedIndex = Open;
        a.sizeIsExact = detail.blockSize > 0;
        changed = uint32_t(r.m_allocations.size());
        r.m_allocations.push_back(a);
        m_freeRequested.push_back(0);
        m_open.insert(a.address, changed);
        addAllocation(r, changed, TraceIndex(m_n + 1));
        m_nextAlloc = changed + 1;
        break;
    }
    case Action::FreeRequested: {
        const uint32_t id = m_open.find(e.addr);
        if (id == None || m_freeRequested[id]) {
            ++r.m_warnings; // a free of an unknown address, or a second free
            break;
        }
        m_freeRequested[id] = 1;
        r.m_allocations[id].freeRequestedIndex = index;
        m_allocated -= r.m_allocations[id].size;
        changed = id;
        break;
    }
    case Action::FreeCompleted: {
        const uint32_t id = m_open.find(e.addr);
        if (id == None) {
            ++r.m_warnings; // a free of a block the state does not have
            break;
        }
        Allocation& a = r.m_allocations[id];
        // A free_completed with no free_requested (PyTorch < 2.1 wrote one `free` for both steps): it was never
        // pending.
        if (!m_freeRequested[id]) {
            m_freeRequested[id] = 1;
            a.freeRequestedIndex = index;
            m_allocated -= a.size;
        }
        a.freeCompletedIndex = index;
        m_open.erase(e.addr);
        removeAllocation(r, id);
        changed = id;
        break;
    }
    case Action::SegmentAlloc:
    case Action::SegmentMap: {
        SegmentPiece piece;
        piece.address = e.addr;
        piece.size = e.size;
        const int64_t stream = forms.get(e.form).stream;
        piece.stream = stream;
        piece.poolId = detail.poolId;
        piece.stack = e.stack;
        piece.beginIndex = index;
        piece.endIndex = Open;
        piece.isExpandable = e.action == Action::SegmentMap;
        if (e.size <= 0) {
            ++r.m_warnings;
            break;
        }
        if (piece.isExpandable && detail.poolId == std::pair<int64_t, int64_t> { 0, 0 }) {
            // No pool given: take the one of an adjacent mapped range of the same stream, as replay.cpp does.
            for (const DeviceAddr at : { e.addr - 1, e.addr + e.size }) {
                auto it = m_openPieces.upper_bound(at);
                if (it == m_openPieces.begin())
                    continue;
                const SegmentPiece& other = r.m_pieces[std::prev(it)->second];
                if (other.isExpandable && other.stream == stream && other.address <= at
                    && at < other.address + other.size) {
                    piece.poolId = other.poolId;
                    break;
                }
            }
        }
        addPiece(r, piece, true, TraceIndex(m_n + 1));
        break;
    }
    case Action::SegmentFree:
        segmentRelease(r, e, false);
        break;
    case Action::SegmentUnmap:
        segmentRelease(r, e, true);
        break;
    case Action::Snapshot:
    case Action::Oom:
    case Action::Unknown:
    case Action::Count:
        break;
    }
    r.m_entryAllocation.push_back(changed);
}

std::map<DeviceAddr, uint32_t>::iterator ReplayExtender::firstOpenEndingAfter(const Replay& r, DeviceAddr address)
{
    auto it = m_openPieces.upper_bound(address);
    if (it != m_openPieces.begin()) {
        auto prev = std::prev(it);
        const SegmentPiece& p = r.m_pieces[prev->second];
        if (p.address + p.size > address)
            return prev;
    }
    return it;
}

uint32_t ReplayExtender::addPiece(Replay& r, SegmentPiece piece, bool freeGap, TraceIndex labelAt)
{
    const DeviceAddr end = piece.address + piece.size;
    auto it = firstOpenEndingAfter(r, piece.address);
    if (it != m_openPieces.end() && r.m_pieces[it->second].address < end) {
        ++r.m_warnings; // overlaps a live segment
        return None;
    }
    const uint32_t id = uint32_t(r.m_pieces.size());
    r.m_pieces.push_back(piece);
    m_openPieces.emplace(piece.address, id);
    addLive(m_livePieces, m_piecePos, id);
    if (freeGap) {
        m_reserved += piece.size;
        // A mapped range joins the free space of an adjacent range of the same expandable segment.
        auto self = m_openPieces.find(piece.address);
        bool mergeLeft = false, mergeRight = false;
        if (self != m_openPieces.begin()) {
            const uint32_t left = std::prev(self)->second;
            mergeLeft = r.m_pieces[left].address + r.m_pieces[left].size == piece.address && compatible(r, left, id);
        }
        if (auto next = std::next(self); next != m_openPieces.end())
            mergeRight = next->first == end && compatible(r, id, next->second);
        // A new segment is one new Block (alloc_block: request 0); a mapped range brings back the Block object of
        // the unmapped range (map_block).
        const FreeBlocks::Made made = piece.isExpandable && labelAt >= 0
            ? m_free.map(piece.address, end, mergeLeft, mergeRight)
            : m_free.release(piece.address, end, 0, mergeLeft, mergeRight);
        if (labelAt >= 0)
            label(r, made, labelAt);
    }
    return id;
}

void ReplayExtender::endPiece(Replay& r, uint32_t id)
{
    r.m_pieces[id].endIndex = TraceIndex(m_n);
    m_openPieces.erase(r.m_pieces[id].address);
    eraseLive(m_livePieces, m_piecePos, id);
}

// segment_free (a whole segment) or segment_unmap (a range of expandable ones): the range stops being reserved.
// Pieces reaching outside an unmapped range end here and their outside parts begin anew as pieces of their own.
void ReplayExtender::segmentRelease(Replay& r, const TraceEntry& e, bool expandable)
{
    const DeviceAddr begin = e.addr, end = e.addr + e.size;
    if (!expandable) {
        auto it = m_openPieces.find(begin);
        if (it == m_openPieces.end() || r.m_pieces[it->second].isExpandable) {
            ++r.m_warnings; // a segment freed that is not live
            return;
        }
        const SegmentPiece& piece = r.m_pieces[it->second];
        if (piece.size != e.size)
            ++r.m_warnings;
        m_reserved -= piece.size;
        m_free.erase(piece.address, piece.address + piece.size);
        endPiece(r, it->second);
        return;
    }
    if (e.size <= 0) {
        ++r.m_warnings;
        return;
    }
    label(r, m_free.unmap(begin, end), TraceIndex(m_n + 1));
    ByteCount covered = 0;
    std::vector<SegmentPiece> rest;
    for (auto it = firstOpenEndingAfter(r, begin); it != m_openPieces.end() && it->first < end;) {
        const uint32_t id = it->second;
        ++it;
        const SegmentPiece whole = r.m_pieces[id];
        if (!whole.isExpandable)
            continue;
        const DeviceAddr wholeEnd = whole.address + whole.size;
        const DeviceAddr from = std::max(whole.address, begin), to = std::min(wholeEnd, end);
        covered += to - from;
        m_reserved -= to - from;
        endPiece(r, id);
        if (whole.address < begin) {
            SegmentPiece left = whole;
            left.size = begin - whole.address;
            rest.push_back(left);
        }
        if (wholeEnd > end) {
            SegmentPiece right = whole;
            right.address = end;
            right.size = wholeEnd - end;
            rest.push_back(right);
        }
    }
    for (SegmentPiece piece : rest) {
        piece.beginIndex = TraceIndex(m_n);
        piece.endIndex = Open;
        addPiece(r, piece, false); // still mapped: its blocks and gaps stay as they are
    }
    if (covered != e.size)
        ++r.m_warnings; // part of the range was not mapped
    // With nothing mapped on either side of the unmapped space, the segment is released with it (release_blocks:
    // an unmapped block with no prev and no next), so is its address space (UnmappedSpace::forget).
    const UnmappedSpace::Range around = m_free.unmapped().around(begin);
    auto mapped = [&](DeviceAddr at, bool endsThere) {
        auto it = endsThere ? firstOpenEndingAfter(r, at - 1) : m_openPieces.find(at);
        if (it == m_openPieces.end())
            return false;
        const SegmentPiece& p = r.m_pieces[it->second];
        return p.isExpandable && (endsThere ? p.address + p.size == at : p.address == at);
    };
    if (around.start < around.end && !mapped(around.start, true) && !mapped(around.end, false))
        m_free.unmapped().forget(around.start, around.end);
}

bool ReplayExtender::compatible(const Replay& r, uint32_t a, uint32_t b) const
{
    const SegmentPiece& pa = r.m_pieces[a];
    const SegmentPiece& pb = r.m_pieces[b];
    return pa.isExpandable && pb.isExpandable && pa.stream == pb.stream && pa.poolId == pb.poolId;
}

// Whether free space may not join across `address`: a live segment starts there, other than the join of two mapped
// ranges of one expandable segment.
bool ReplayExtender::barrier(const Replay& r, DeviceAddr address) const
{
    auto it = m_openPieces.find(address);
    if (it == m_openPieces.end())
        return false;
    if (it == m_openPieces.begin())
        return true;
    const uint32_t before = std::prev(it)->second;
    const SegmentPiece& p = r.m_pieces[before];
    return p.address + p.size != address || !compatible(r, before, it->second);
}

void ReplayExtender::addAllocation(Replay& r, uint32_t id, TraceIndex labelAt)
{
    const Allocation& a = r.m_allocations[id];
    m_active += a.size;
    m_requested += a.requestedSize;
    if (!m_freeRequested[id])
        m_allocated += a.size;
    const FreeBlocks::Changes made = m_free.take(a.address, a.address + a.size);
    if (labelAt >= 0)
        label(r, made, labelAt);
    addLive(m_liveAllocs, m_allocPos, id);
}

void ReplayExtender::removeAllocation(Replay& r, uint32_t id)
{
    const Allocation& a = r.m_allocations[id];
    m_active -= a.size;
    m_requested -= a.requestedSize;
    const DeviceAddr end = a.address + a.size;
    label(r, m_free.release(a.address, end, a.requestedSize, !barrier(r, a.address), !barrier(r, end)),
          TraceIndex(m_n + 1));
    eraseLive(m_liveAllocs, m_allocPos, id);
}

void ReplayExtender::label(Replay& r, const FreeBlocks::Made& made, TraceIndex index)
{
    if (made.start >= made.end)
        return;
    m_free.setTag(made.start, uint32_t(r.m_labels.size()));
    r.m_labels.push_back({ made.end, made.requested, index });
}

void ReplayExtender::label(Replay& r, const FreeBlocks::Changes& changes, TraceIndex index)
{
    for (uint8_t k = 0; k < changes.count; ++k)
        label(r, changes.made[k], index);
}

// The series values and, when due, a checkpoint of state index m_n (Replay::recordState, as replay.cpp's builder).
void ReplayExtender::recordState(Replay& r)
{
    if (!r.recordState(TraceIndex(m_n), { m_allocated, m_active, m_reserved, m_requested, m_free.largest() },
                       m_liveAllocs, m_livePieces, m_nextAlloc, uint32_t(r.m_pieces.size()),
                       m_options, m_sortScratch))
        return;
    m_sortScratch.clear();
    for (const auto& [start, block] : m_free.blocks())
        if (block.tag != UINT32_MAX)
            m_sortScratch.emplace_back(block.end, block.tag);
    r.checkpointLabels(m_sortScratch);
}

} // namespace memscope::model
