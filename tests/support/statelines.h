// A caching allocator's state as lines of text, for tests that compare two states built by different engines (an
// agent's state reply or exit dump, a recording's final segments, a replay the viewer grew): every segment with
// its address, device, size, allocated / active / requested bytes, stream, pool and whether it is expandable, and
// every block, free ones included, with its address, size, state and requested size (on an inactive block the
// stale request PyTorch leaves on it), so that a QCOMPARE of two lists shows the first line that differs.
// Header-only; for tests under tests/ (their include path has this folder). Test thread only.
#pragma once

#include "model/replay.h"
#include "model/snapshot.h"

#include <QString>
#include <QStringList>

namespace memscope::test {

// Whether inactive blocks' requests take part: Ignore only for a state whose source cannot know them (a replay of a
// file before its last index, for free blocks from before its trace: model::Replay::inactiveLabels).
enum class StaleRequests { Compare, Ignore };

inline QString segmentLine(model::DeviceAddr address, int device, model::ByteCount size, model::ByteCount allocated,
                           model::ByteCount active, model::ByteCount requested, int64_t stream,
                           std::pair<int64_t, int64_t> pool, bool expandable)
{
    return QStringLiteral("segment %1 dev %2 size %3 allocated %4 active %5 requested %6 stream %7 pool %8,%9%10")
        .arg(address, 0, 16)
        .arg(device)
        .arg(size)
        .arg(allocated)
        .arg(active)
        .arg(requested)
        .arg(stream)
        .arg(pool.first)
        .arg(pool.second)
        .arg(expandable ? QStringLiteral(" expandable") : QString());
}

inline QString blockLine(model::DeviceAddr address, model::ByteCount size, model::ByteCount requested,
                         model::BlockState state, StaleRequests stale)
{
    const bool ignored = state == model::BlockState::Inactive && stale == StaleRequests::Ignore;
    return QStringLiteral("  block %1 size %2 requested %3 state %4")
        .arg(address, 0, 16)
        .arg(size)
        .arg(ignored ? QStringLiteral("?") : QString::number(requested))
        .arg(int(state));
}

// From a snapshot's segments and blocks (a state reply, an exit dump, a recording's end).
inline QStringList stateLines(const model::Snapshot& s, StaleRequests stale = StaleRequests::Compare)
{
    QStringList lines;
    for (const model::Segment& seg : s.segments) {
        lines << segmentLine(seg.address, seg.device, seg.totalSize, seg.allocatedSize, seg.activeSize,
                             seg.requestedSize, seg.stream, seg.poolId, seg.isExpandable);
        const model::Block* blocks = s.segmentBlocks(seg);
        for (uint32_t b = 0; b < seg.blockCount; ++b)
            lines << blockLine(blocks[b].address, blocks[b].size, blocks[b].requestedSize, blocks[b].state, stale);
    }
    return lines;
}

// From a replay's state at some index (what the views show).
inline QStringList stateLines(const model::ReplayState& st, StaleRequests stale = StaleRequests::Compare)
{
    QStringList lines;
    for (const model::ReplaySegment& seg : st.segments) {
        lines << segmentLine(seg.address, seg.device, seg.totalSize, seg.allocatedSize, seg.activeSize,
                             seg.requestedSize, seg.stream, seg.poolId, seg.isExpandable);
        for (uint32_t b = seg.blockBegin; b < seg.blockBegin + seg.blockCount; ++b)
            lines << blockLine(st.blocks[b].address, st.blocks[b].size, st.blocks[b].requestedSize, st.blocks[b].state,
                               stale);
    }
    return lines;
}

} // namespace memscope::test
