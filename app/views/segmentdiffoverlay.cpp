// SegmentDiffOverlay: see segmentdiffoverlay.h.
#include "views/segmentdiffoverlay.h"

#include "itemmodels/diffmodel.h"
#include "style/colors.h"
#include "views/segmentmapview.h"

#include <QPainter>

#include <algorithm>

namespace memscope::app {

SegmentDiffOverlay::SegmentDiffOverlay(SegmentMapView* map, Session* session, DiffSession* diff, bool sideB)
    : WidgetOverlay(map)
    , m_map(map)
    , m_session(session)
    , m_diff(diff)
    , m_sideB(sideB)
{
}

void SegmentDiffOverlay::paintEvent(QPaintEvent*)
{
    if (!m_session || !m_diff)
        return;
    const SegmentMapGeometry& g = m_map->geometry();
    const model::ReplayState* state = g.state();
    if (!state)
        return;
    QPainter p(this);
    p.setRenderHint(QPainter::Antialiasing, false);
    const double h = height();
    const int device = m_session->device();
    auto segmentAt = [&](model::DeviceAddr address) -> int32_t {
        const auto& segs = state->segments;
        auto it = std::upper_bound(segs.begin(), segs.end(), address,
                                   [](model::DeviceAddr a, const model::ReplaySegment& s) { return a < s.address; });
        if (it == segs.begin())
            return -1;
        --it;
        if (address >= it->address + model::DeviceAddr(it->totalSize))
            return -1;
        return int32_t(it - segs.begin());
    };
    auto outline = [&](int32_t segment, double begin, double end, const QColor& color, bool fill, int width) {
        if (segment < 0)
            return;
        const int32_t placement = g.placementOf(uint32_t(segment));
        if (placement < 0)
            return;
        QColor translucent = color;
        translucent.setAlpha(70);
        g.forEachBarRect(uint32_t(placement), begin, end, h, [&](const QRectF& r) {
            if (fill)
                p.fillRect(r, translucent);
            p.setPen(QPen(color, width));
            p.setBrush(Qt::NoBrush);
            p.drawRect(r.adjusted(-1, -1, 0, 0));
        });
    };
    const model::DiffResult& result = m_diff->result();
    for (const model::DiffSegment& s : result.segmentList) {
        if (s.device != device)
            continue;
        const bool mine
            = m_sideB ? s.status == model::DiffSegmentStatus::OnlyB : s.status == model::DiffSegmentStatus::OnlyA;
        const bool changed = s.status == model::DiffSegmentStatus::Both
            && (s.activeA != s.activeB || s.allocatedA != s.allocatedB || s.allocationsA != s.allocationsB);
        if (!mine && !changed)
            continue;
        const int32_t seg = segmentAt(s.address);
        if (seg < 0 || state->segments[size_t(seg)].address != s.address)
            continue;
        if (mine)
            outline(seg, 0, double(s.size), m_sideB ? colors::growth() : colors::shrink(), true, 2);
        else
            outline(seg, 0, double(s.size), colors::changed(), false, 2);
    }
    if (result.sameTrace) {
        // Blocks: allocated after A (shown on B) and freed before B (shown on A).
        const auto& list = m_sideB ? result.lifetimes.newList : result.lifetimes.freedList;
        const QColor c = m_sideB ? colors::growth() : colors::shrink();
        for (const model::DiffAllocation& a : list) {
            if (a.device != device)
                continue;
            const int32_t seg = segmentAt(a.address);
            if (seg < 0)
                continue;
            const double off = double(a.address - state->segments[size_t(seg)].address);
            outline(seg, off, off + double(a.size), c, true, 1);
        }
    }
}

} // namespace memscope::app
