// A caching allocator's state as lines of text, for tests that compare two states built by different engines (an
// agent's state reply, a recording's final segments, a replay the viewer grew): every segment and every block with
// the fields all of them carry, so that a QCOMPARE of two lists shows the first line that differs. Header-only;
// for tests under tests/ (their include path has this folder).
#pragma once

#include "model/replay.h"
#include "model/snapshot.h"

#include <QString>
#include <QStringList>

namespace memscope::test {

inline QString segmentLine(model::DeviceAddr address, int device, model::ByteCount size, model::ByteCount allocated,
                           model::ByteCount active, int64_t stream, std::pair<int64_t, int64_t> pool)
{
    return QStringLiteral("segment %1 dev %2 size %3 allocated %4 active %5 stream %6 pool %7,%8")
        .arg(address, 0, 16)
        .arg(device)
        .arg(size)
        .arg(allocated)
        .arg(active)
        .arg(stream)
        .arg(pool.first)
        .arg(pool.second);
}

// Inactive blocks have no requested size (PyTorch writes 0; a replay knows none).
inline QString blockLine(model::DeviceAddr address, model::ByteCount size, model::ByteCount requested,
                         model::BlockState state)
{
    return QStringLiteral("  block %1 size %2 requested %3 state %4")
        .arg(address, 0, 16)
        .arg(size)
        .arg(state == model::BlockState::Inactive ? 0 : requested)
        .arg(int(state));
}

// From a snapshot's segments and blocks (a state reply, a recording's end).
inline QStringList stateLines(const model::Snapshot& s)
{
    QStringList lines;
    for (const model::Segment& seg : s.segments) {
        lines << segmentLine(seg.address, seg.device, seg.totalSize, seg.allocatedSize, seg.activeSize, seg.stream,
                             seg.poolId);
        const model::Block* blocks = s.segmentBlocks(seg);
        for (uint32_t b = 0; b < seg.blockCount; ++b)
            lines << blockLine(blocks[b].address, blocks[b].size, blocks[b].requestedSize, blocks[b].state);
    }
    return lines;
}

// From a replay's state at some index (what the views show).
inline QStringList stateLines(const model::ReplayState& st)
{
    QStringList lines;
    for (const model::ReplaySegment& seg : st.segments) {
        lines << segmentLine(seg.address, seg.device, seg.totalSize, seg.allocatedSize, seg.activeSize, seg.stream,
                             seg.poolId);
        for (uint32_t b = seg.blockBegin; b < seg.blockBegin + seg.blockCount; ++b)
            lines << blockLine(st.blocks[b].address, st.blocks[b].size, st.blocks[b].requestedSize, st.blocks[b].state);
    }
    return lines;
}

} // namespace memscope::test
