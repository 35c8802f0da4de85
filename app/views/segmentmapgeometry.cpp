// SegmentMapGeometry: the segment map's layout and hit testing. See segmentmapgeometry.h. No Qt beyond QPointF and
// QRectF; any thread, one object at a time.
#include "views/segmentmapgeometry.h"

#include <algorithm>
#include <tuple>

namespace memscope::app {

using namespace memscope::model;

// The visible segments of a state in display order, cut into groups.
struct SegmentMapGeometry::Ordered {
    std::vector<uint32_t> segments; // into state.segments
    std::vector<uint32_t> groupStarts; // into `segments`, one per group, plus segments.size()
    ByteCount largestSegment = 0;
    ByteCount largestGroup = 0; // bytes
};

SegmentMapGeometry::Ordered SegmentMapGeometry::order(const ReplayState& state, const Visible& visible,
                                                      const std::vector<int64_t>& streamOrder)
{
    Ordered out;
    out.segments.reserve(state.segments.size());
    for (uint32_t i = 0; i < state.segments.size(); ++i) {
        if (!visible || visible(state.segments[i]))
            out.segments.push_back(i);
    }
    // Streams in the given order (PyTorch's stream numbering), then unknown ones by handle.
    auto streamRank = [&](int64_t stream) {
        const auto it = std::find(streamOrder.begin(), streamOrder.end(), stream);
        return it != streamOrder.end() ? int64_t(it - streamOrder.begin()) : int64_t(streamOrder.size());
    };
    struct Key {
        int32_t device;
        std::pair<int64_t, int64_t> pool;
        int64_t streamRank;
        int64_t stream;
        ByteCount size;
        DeviceAddr address;
        auto tie() const { return std::tie(device, pool, streamRank, stream, size, address); }
    };
    std::vector<Key> keys(state.segments.size());
    for (uint32_t i : out.segments) {
        const ReplaySegment& s = state.segments[i];
        keys[i] = { s.device, s.poolId, streamRank(s.stream), s.stream, s.totalSize, s.address };
    }
    // MemoryViz.js (MemoryView.draw) sorts segments by size, then address, before wrapping them into rows.
    std::sort(out.segments.begin(), out.segments.end(),
              [&](uint32_t a, uint32_t b) { return keys[a].tie() < keys[b].tie(); });
    ByteCount groupBytes = 0;
    for (size_t k = 0; k < out.segments.size(); ++k) {
        const Key& key = keys[out.segments[k]];
        const Key* previous = k > 0 ? &keys[out.segments[k - 1]] : nullptr;
        const bool starts = !previous || key.device != previous->device || key.pool != previous->pool
            || key.stream != previous->stream;
        if (starts) {
            out.groupStarts.push_back(uint32_t(k));
            groupBytes = 0;
        }
        groupBytes += key.size;
        out.largestGroup = std::max(out.largestGroup, groupBytes);
        out.largestSegment = std::max(out.largestSegment, key.size);
    }
    out.groupStarts.push_back(uint32_t(out.segments.size()));
    return out;
}

double SegmentMapGeometry::pack(const ReplayState& state, const Ordered& ordered, const Metrics& metrics,
                                double contentWidth, double pxPerByte, std::vector<Group>* groups,
                                std::vector<Placement>* placements)
{
    const double w = contentWidth;
    const double pitch = metrics.rowPitch();
    double y = metrics.margin;
    for (size_t g = 0; g + 1 < ordered.groupStarts.size(); ++g) {
        if (g > 0)
            y += metrics.groupGap;
        Group group;
        group.top = y;
        group.rowsTop = y + metrics.headerHeight;
        group.firstPlacement = ordered.groupStarts[g];
        group.placementCount = ordered.groupStarts[g + 1] - ordered.groupStarts[g];
        int64_t row = 0;
        double x = 0; // flow position in the current row, from the content's left
        int64_t lastRow = 0;
        for (uint32_t k = ordered.groupStarts[g]; k < ordered.groupStarts[g + 1]; ++k) {
            const uint32_t index = ordered.segments[k];
            const ReplaySegment& s = state.segments[index];
            const double sw = double(s.totalSize) * pxPerByte;
            Placement p;
            p.segment = index;
            p.group = uint32_t(g);
            if (sw <= w) {
                // Fits a row: never split it.
                if (x > 0 && x + sw > w) {
                    ++row;
                    x = 0;
                }
                p.firstRow = p.lastRow = row;
                p.x = x;
                x += sw + metrics.segmentGap;
            } else {
                // Wider than a row: flow on from where the row is (a new row when little is left of it) and wrap;
                // the next segment follows the tail.
                if (x > 0 && w - x < w / 4) {
                    ++row;
                    x = 0;
                }
                const double end = x + sw;
                p.firstRow = row;
                p.lastRow = row + int64_t(std::ceil(end / w - 1e-9)) - 1;
                p.x = x;
                row = p.lastRow;
                x = end - double(p.lastRow - p.firstRow) * w + metrics.segmentGap;
            }
            if (x >= w) {
                ++row;
                x = 0;
            }
            lastRow = p.lastRow;
            p.x += metrics.margin;
            if (placements)
                placements->push_back(p);
            if (groups) {
                group.reserved += s.totalSize;
                if (s.isExpandable)
                    ++group.expandableCount;
            }
        }
        group.rowCount = group.placementCount > 0 ? lastRow + 1 : 0;
        group.bottom = group.rowsTop + double(group.rowCount) * pitch;
        y = group.bottom;
        if (groups) {
            const ReplaySegment& first = state.segments[ordered.segments[group.firstPlacement]];
            group.device = first.device;
            group.pool = first.poolId;
            group.stream = first.stream;
            groups->push_back(group);
        }
    }
    return y + metrics.margin;
}

void SegmentMapGeometry::layout(const ReplayState& state, const Visible& visible,
                                const std::vector<int64_t>& streamOrder, const Metrics& metrics, double width,
                                double pxPerByte)
{
    m_state = &state;
    m_metrics = metrics;
    m_width = width;
    m_contentWidth = std::max(1.0, width - 2 * metrics.margin);
    m_pxPerByte = pxPerByte > 0 ? pxPerByte : 1.0;
    m_groups.clear();
    m_placements.clear();

    const Ordered ordered = order(state, visible, streamOrder);
    m_contentHeight = pack(state, ordered, metrics, m_contentWidth, m_pxPerByte, &m_groups, &m_placements);
    if (m_groups.empty())
        m_contentHeight = 0;

    m_placementOf.assign(state.segments.size(), -1);
    for (uint32_t k = 0; k < m_placements.size(); ++k)
        m_placementOf[m_placements[k].segment] = int32_t(k);

    m_stats.assign(state.segments.size(), SegmentStats {});
    m_drawnBlocks = 0;
    for (uint32_t i = 0; i < state.segments.size(); ++i) {
        const ReplaySegment& s = state.segments[i];
        SegmentStats& st = m_stats[i];
        for (uint32_t b = s.blockBegin; b < s.blockBegin + s.blockCount; ++b) {
            const ReplayBlock& block = state.blocks[b];
            if (block.state == BlockState::Inactive) {
                st.freeBytes += block.size;
                st.largestGap = std::max(st.largestGap, block.size);
                ++st.gapCount;
            } else {
                st.activeBytes += block.size;
                st.requestedBytes += block.requestedSize;
                ++st.activeCount;
            }
        }
        if (m_placementOf[i] >= 0)
            m_drawnBlocks += s.blockCount;
    }
    for (Group& g : m_groups) {
        for (uint32_t k = g.firstPlacement; k < g.firstPlacement + g.placementCount; ++k) {
            const SegmentStats& st = m_stats[m_placements[k].segment];
            g.freeBytes += st.freeBytes;
            g.activeBytes += st.activeBytes;
            g.requestedBytes += st.requestedBytes;
        }
    }
}

double SegmentMapGeometry::fitScale(const ReplayState& state, const Visible& visible,
                                    const std::vector<int64_t>& streamOrder, const Metrics& metrics, double width,
                                    double height, double maxPxPerByte)
{
    const double w = std::max(1.0, width - 2 * metrics.margin);
    const Ordered ordered = order(state, visible, streamOrder);
    if (ordered.segments.empty())
        return std::min(maxPxPerByte, w / double(ByteCount(2) << 20)); // nothing to show: 2 MiB per row
    auto heightAt = [&](double k) { return pack(state, ordered, metrics, w, k, nullptr, nullptr); };
    // The smallest scale worth considering: each group in about one row.
    const double kMin = std::min(maxPxPerByte, 0.5 * w / double(ordered.largestGroup));
    if (heightAt(kMin) > height)
        return kMin;
    // The height grows with the scale (more pixels per byte, more rows): double until it does not fit, then bisect
    // on a log scale.
    double lo = kMin, hi = kMin;
    while (hi < maxPxPerByte) {
        hi = std::min(maxPxPerByte, hi * 2);
        if (heightAt(hi) > height)
            break;
        lo = hi;
    }
    double k = lo;
    if (lo != hi) {
        double logLo = std::log(lo), logHi = std::log(hi);
        for (int i = 0; i < 60 && logHi - logLo > 1e-4; ++i) {
            const double mid = 0.5 * (logLo + logHi);
            if (heightAt(std::exp(mid)) <= height)
                logLo = mid;
            else
                logHi = mid;
        }
        k = std::exp(logLo);
    }
    // Just past the scale at which the largest segment fills a row, it would wrap by a sliver: take that scale
    // instead (MemoryViz.js's own: the largest segment spans the width). Smaller, so it fits too.
    const double kRow = w / double(ordered.largestSegment);
    if (k > kRow && k < 1.5 * kRow && kRow >= kMin)
        k = kRow;
    return k;
}

void SegmentMapGeometry::setPan(double pan, double viewportHeight)
{
    m_pan = std::clamp(pan, 0.0, maxPan(viewportHeight));
}

std::pair<uint32_t, uint32_t> SegmentMapGeometry::placementsInRow(uint32_t group, int64_t row) const
{
    const Group& g = m_groups[group];
    const auto begin = m_placements.begin() + g.firstPlacement;
    const auto end = begin + g.placementCount;
    // Placements are in flow order, so firstRow and lastRow both grow along the group.
    const auto first = std::partition_point(begin, end, [row](const Placement& p) { return p.lastRow < row; });
    const auto last = std::partition_point(first, end, [row](const Placement& p) { return p.firstRow <= row; });
    return { uint32_t(first - m_placements.begin()), uint32_t(last - m_placements.begin()) };
}

SegmentMapGeometry::Piece SegmentMapGeometry::piece(uint32_t placement, int64_t row) const
{
    const Placement& p = m_placements[placement];
    Piece out;
    if (row < p.firstRow || row > p.lastRow)
        return out;
    const double size = double(m_state->segments[p.segment].totalSize);
    const double w = m_contentWidth;
    const double flow0 = p.x - contentLeft(); // flow position of byte 0 in firstRow
    const double rowFlow = double(row - p.firstRow) * w;
    out.begin = std::clamp((rowFlow - flow0) / m_pxPerByte, 0.0, size);
    out.end = std::clamp((rowFlow + w - flow0) / m_pxPerByte, 0.0, size);
    out.x0 = flow0 + out.begin * m_pxPerByte - rowFlow + contentLeft();
    out.x1 = flow0 + out.end * m_pxPerByte - rowFlow + contentLeft();
    return out;
}

QPointF SegmentMapGeometry::position(uint32_t placement, double offset) const
{
    const Placement& p = m_placements[placement];
    const double size = double(m_state->segments[p.segment].totalSize);
    const double flow = p.x - contentLeft() + std::clamp(offset, 0.0, size) * m_pxPerByte;
    int64_t row = p.firstRow + int64_t(std::floor(flow / m_contentWidth));
    row = std::clamp(row, p.firstRow, p.lastRow);
    const double x = flow - double(row - p.firstRow) * m_contentWidth + contentLeft();
    return { x, rowTop(m_groups[p.group], row) };
}

int32_t SegmentMapGeometry::blockAt(uint32_t segment, double offset) const
{
    const ReplaySegment& s = m_state->segments[segment];
    if (offset < 0 || offset >= double(s.totalSize) || s.blockCount == 0)
        return -1;
    const auto begin = m_state->blocks.begin() + s.blockBegin;
    const auto end = begin + s.blockCount;
    const double address = double(s.address) + offset;
    // The first block ending after the byte.
    const auto it = std::partition_point(
        begin, end, [address](const ReplayBlock& b) { return double(b.address + b.size) <= address; });
    if (it == end || double(it->address) > address)
        return -1;
    return int32_t(it - m_state->blocks.begin());
}

SegmentMapGeometry::Hit SegmentMapGeometry::hitTest(QPointF widgetPoint) const
{
    Hit hit;
    if (!m_state || m_groups.empty())
        return hit;
    const double y = widgetPoint.y() + m_pan;
    const double x = widgetPoint.x();
    const auto g = std::partition_point(m_groups.begin(), m_groups.end(), [y](const Group& gr) { return gr.top <= y; });
    if (g == m_groups.begin())
        return hit;
    const Group& group = *(g - 1);
    const uint32_t groupIndex = uint32_t((g - 1) - m_groups.begin());
    if (y >= group.bottom)
        return hit;
    if (y < group.rowsTop) {
        hit.part = Hit::Part::Header;
        hit.group = int32_t(groupIndex);
        return hit;
    }
    const double pitch = m_metrics.rowPitch();
    const int64_t row = int64_t(std::floor((y - group.rowsTop) / pitch));
    const double inRow = y - rowTop(group, row);
    Hit::Part part;
    if (inRow < m_metrics.barHeight)
        part = Hit::Part::Bar;
    else if (inRow < m_metrics.barHeight + m_metrics.captionHeight)
        part = Hit::Part::Caption;
    else
        return hit; // the gap between rows
    const auto [first, last] = placementsInRow(groupIndex, row);
    for (uint32_t k = first; k < last; ++k) {
        const Piece pc = piece(k, row);
        // Sub-pixel segments still take one pixel's worth of pointer.
        if (x < pc.x0 || x >= std::max(pc.x1, pc.x0 + 1.0))
            continue;
        hit.part = part;
        hit.group = int32_t(groupIndex);
        hit.placement = int32_t(k);
        hit.segment = int32_t(m_placements[k].segment);
        hit.row = row;
        hit.offset = std::clamp(pc.begin + (x - pc.x0) / m_pxPerByte, pc.begin, std::nextafter(pc.end, pc.begin));
        if (part == Hit::Part::Bar)
            hit.block = blockAt(m_placements[k].segment, hit.offset);
        return hit;
    }
    return hit;
}

} // namespace memscope::app
