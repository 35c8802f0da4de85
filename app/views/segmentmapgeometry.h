// The segment map's geometry, with no painting in it: where every segment of one allocator state goes when its
// bytes are laid out to one scale (pixels per byte) in rows of a given width, grouped by device, pool and stream;
// byte <-> pixel mapping; hit testing of a point to (segment, block); the scale at which a state fits a viewport;
// per-segment fragmentation figures. A plain value type, so that it can be unit tested without a widget; the view
// (SegmentMapView) keeps one and lays it out again only when the state, the filters, the zoom or the size change.
//
// Layout. Segments flow like words of text: each group (device → pool → stream) has a header and then rows of
// `contentWidth()` pixels; a segment that fits in what is left of a row goes there, one that fits a whole row
// starts the next row, and one wider than a row flows on from where the row is (or from a new row when less than a
// quarter of it is left) and wraps over as many rows as it needs (its bytes continue at the left of the next row, so
// the scale never changes). Only one position per segment is stored, so the layout costs O(segments) whatever the
// zoom (at high zoom a state has millions of rows).
//
// Coordinates: "content" y runs from 0 at the top of the first group to contentHeight(); widget y = content y -
// pan(). x is the same in both. Any thread may use one object at a time; it holds a pointer to the ReplayState it
// was laid out from, which must stay alive and unchanged until the next layout().
#pragma once

#include "model/replay.h"

#include <QPointF>
#include <QRectF>

#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace memscope::app {

// Fragmentation figures of one segment of a state.
struct SegmentStats {
    model::ByteCount freeBytes = 0; // Σ inactive blocks
    model::ByteCount largestGap = 0; // the largest inactive block
    uint32_t gapCount = 0; // inactive blocks
    model::ByteCount activeBytes = 0; // Σ size of active blocks (allocated + pending free)
    model::ByteCount requestedBytes = 0; // Σ requested size of active blocks
    uint32_t activeCount = 0;

    // Bytes lost to rounding: block size - requested size, over the active blocks.
    model::ByteCount roundingWaste() const { return activeBytes - requestedBytes; }
    // PyTorch's MemoryViz.js segment tooltip: "(internal_free / free) * 100 % internal", where free = segment size -
    // Σ requested and internal_free = Σ (size - requested) of the active blocks. 0 when nothing is free.
    double internalPercent(model::ByteCount segmentSize) const
    {
        const model::ByteCount free = segmentSize - requestedBytes;
        return free > 0 ? 100.0 * double(roundingWaste()) / double(free) : 0.0;
    }
};

class SegmentMapGeometry {
public:
    // Pixel sizes, chosen by the view from its fonts.
    struct Metrics {
        double margin = 8; // around the content
        double headerHeight = 20; // a group's title line
        double barHeight = 18; // a row's segment bar
        double captionHeight = 13; // under the bar: segment captions
        double rowGap = 3; // between rows
        double groupGap = 8; // between groups
        double segmentGap = 2; // between segments in a row (MemoryViz.js pads segments by one pixel)
        double rowPitch() const { return barHeight + captionHeight + rowGap; }
    };

    // Which segments to show (Session's stream/pool filters); null shows all.
    using Visible = std::function<bool(const model::ReplaySegment&)>;

    struct Group {
        int32_t device = 0;
        std::pair<int64_t, int64_t> pool { 0, 0 };
        int64_t stream = 0; // raw handle
        uint32_t firstPlacement = 0; // range in placements()
        uint32_t placementCount = 0;
        int64_t rowCount = 0;
        double top = 0; // content y of the header
        double rowsTop = 0; // content y of row 0
        double bottom = 0; // content y below the last row
        model::ByteCount reserved = 0;
        model::ByteCount freeBytes = 0;
        model::ByteCount activeBytes = 0;
        model::ByteCount requestedBytes = 0;
        uint32_t expandableCount = 0;
    };

    // Where one segment goes: its byte 0 is at x (widget px) of row firstRow; its last byte on row lastRow.
    struct Placement {
        uint32_t segment = 0; // index into ReplayState::segments
        uint32_t group = 0;
        int64_t firstRow = 0;
        int64_t lastRow = 0;
        double x = 0;
    };

    // The part of a placed segment on one row: bytes [begin, end) from the segment's address, drawn at [x0, x1).
    struct Piece {
        double begin = 0;
        double end = 0;
        double x0 = 0;
        double x1 = 0;
        bool isEmpty() const { return !(end > begin); }
    };

    struct Hit {
        enum class Part : uint8_t { None, Header, Bar, Caption };
        Part part = Part::None;
        int32_t group = -1;
        int32_t placement = -1;
        int32_t segment = -1; // index into ReplayState::segments
        int32_t block = -1; // index into ReplayState::blocks (Bar only)
        int64_t row = -1;
        double offset = 0; // bytes from the segment's address (Bar and Caption)
    };

    // Lays out `state` at `pxPerByte` in rows `width` px wide (margins included). Keeps the pan. Groups come by
    // device, then pool id, then stream in `streamOrder` (raw handles; streams not in it follow, by handle);
    // segments in a group by size, then address, as MemoryViz.js orders them (smallest first), so that rows fill.
    void layout(const model::ReplayState& state, const Visible& visible, const std::vector<int64_t>& streamOrder,
                const Metrics& metrics, double width, double pxPerByte);

    // The scale at which `state` fits `width` x `height`: the largest (at most maxPxPerByte) at which the whole
    // layout is at most `height` tall, segments wrapping over rows as they must, except that a scale up to 1.5x
    // past the one at which the largest segment fills a row gives way to that one (no sliver of a wrap); when even
    // one row per group is too tall, the scale that puts each group in about one row. Deterministic;
    // O(segments log segments + ~80 packs).
    static double fitScale(const model::ReplayState& state, const Visible& visible,
                           const std::vector<int64_t>& streamOrder, const Metrics& metrics, double width, double height,
                           double maxPxPerByte = 1.0);

    const model::ReplayState* state() const { return m_state; }
    const Metrics& metrics() const { return m_metrics; }
    double width() const { return m_width; }
    double contentLeft() const { return m_metrics.margin; }
    double contentWidth() const { return m_contentWidth; }
    double contentHeight() const { return m_contentHeight; }
    double pxPerByte() const { return m_pxPerByte; }
    double rowBytes() const { return m_contentWidth / m_pxPerByte; } // bytes in one full row

    double pan() const { return m_pan; }
    // Clamps to [0, max(0, contentHeight - viewportHeight)].
    void setPan(double pan, double viewportHeight);
    double maxPan(double viewportHeight) const { return std::max(0.0, m_contentHeight - viewportHeight); }

    const std::vector<Group>& groups() const { return m_groups; }
    const std::vector<Placement>& placements() const { return m_placements; }
    // The placement of a segment of the state, or -1 when it is hidden.
    int32_t placementOf(uint32_t segment) const { return segment < m_placementOf.size() ? m_placementOf[segment] : -1; }
    // Per segment of the state (hidden ones included).
    const SegmentStats& stats(uint32_t segment) const { return m_stats[segment]; }
    // Blocks of the placed (visible) segments.
    size_t drawnBlockCount() const { return m_drawnBlocks; }

    double rowTop(const Group& group, int64_t row) const { return group.rowsTop + double(row) * m_metrics.rowPitch(); }
    // Placements with a piece on `row` of `group`: [first, last) into placements().
    std::pair<uint32_t, uint32_t> placementsInRow(uint32_t group, int64_t row) const;
    Piece piece(uint32_t placement, int64_t row) const;
    // Widget x of byte `offset` of a placed segment, and the content y of the top of its row.
    QPointF position(uint32_t placement, double offset) const;
    // The index into ReplayState::blocks of the block of a segment holding byte `offset`, or -1.
    int32_t blockAt(uint32_t segment, double offset) const;

    Hit hitTest(QPointF widgetPoint) const;

    // Calls f(groupIndex, row, widgetY of the row top) for every row at least partly inside [0, viewportHeight),
    // top to bottom.
    template <class F> void forEachVisibleRow(double viewportHeight, F&& f) const
    {
        const double pitch = m_metrics.rowPitch();
        for (uint32_t g = 0; g < m_groups.size(); ++g) {
            const Group& group = m_groups[g];
            if (group.bottom - m_pan <= 0)
                continue;
            if (group.top - m_pan >= viewportHeight)
                break;
            const int64_t first = std::max<int64_t>(0, int64_t(std::floor((m_pan - group.rowsTop) / pitch)));
            const int64_t last = std::min<int64_t>(
                group.rowCount - 1, int64_t(std::floor((m_pan + viewportHeight - group.rowsTop) / pitch)));
            for (int64_t r = first; r <= last; ++r)
                f(g, r, rowTop(group, r) - m_pan);
        }
    }

    // Calls f(QRectF) with the widget rectangle of the segment bar covering bytes [begin, end) of a placed segment,
    // once per row, for the rows inside [0, viewportHeight).
    template <class F>
    void forEachBarRect(uint32_t placement, double begin, double end, double viewportHeight, F&& f) const
    {
        const Placement& p = m_placements[placement];
        const Group& group = m_groups[p.group];
        const double pitch = m_metrics.rowPitch();
        const double w = m_contentWidth;
        const double flowBegin = p.x - contentLeft() + begin * m_pxPerByte;
        const double flowEnd = p.x - contentLeft() + end * m_pxPerByte;
        int64_t first = p.firstRow + int64_t(std::floor(flowBegin / w));
        int64_t last = p.firstRow + int64_t(std::ceil(flowEnd / w)) - 1;
        first = std::clamp(first, p.firstRow, p.lastRow);
        last = std::clamp(last, first, p.lastRow);
        first = std::max(first, int64_t(std::floor((m_pan - group.rowsTop) / pitch)));
        last = std::min(last, int64_t(std::floor((m_pan + viewportHeight - group.rowsTop) / pitch)));
        for (int64_t r = first; r <= last; ++r) {
            const double rowFlow = double(r - p.firstRow) * w;
            const double x0 = std::max(flowBegin, rowFlow) - rowFlow + contentLeft();
            const double x1 = std::min(flowEnd, rowFlow + w) - rowFlow + contentLeft();
            f(QRectF(x0, rowTop(group, r) - m_pan, std::max(0.0, x1 - x0), m_metrics.barHeight));
        }
    }

private:
    struct Ordered; // sorting and grouping shared by layout() and fitScale()
    static Ordered order(const model::ReplayState& state, const Visible& visible,
                         const std::vector<int64_t>& streamOrder);
    static double pack(const model::ReplayState& state, const Ordered& ordered, const Metrics& metrics,
                       double contentWidth, double pxPerByte, std::vector<Group>* groups,
                       std::vector<Placement>* placements);

    const model::ReplayState* m_state = nullptr;
    Metrics m_metrics;
    double m_width = 0;
    double m_contentWidth = 1;
    double m_contentHeight = 0;
    double m_pxPerByte = 1;
    double m_pan = 0;
    size_t m_drawnBlocks = 0;
    std::vector<Group> m_groups;
    std::vector<Placement> m_placements; // group by group, in flow order
    std::vector<int32_t> m_placementOf; // per state segment
    std::vector<SegmentStats> m_stats; // per state segment
};

} // namespace memscope::app
