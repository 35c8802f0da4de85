// SegmentDiffOverlay outlines, on one side's segment map of a diff, what changed: segments only on this side (added
// on B, removed on A), segments on both sides whose blocks changed, and, for same-trace diffs, the blocks allocated
// after A (on B) or freed before B (on A). A WidgetOverlay of the map. GUI thread only.
#pragma once

#include "views/widgetoverlay.h"

#include <QPointer>

namespace memscope::app {

class DiffSession;
class SegmentMapView;
class Session;

class SegmentDiffOverlay : public WidgetOverlay {
    Q_OBJECT
public:
    // A child of `map`, which shows `session` (one side of `diff`: B when `sideB`, else A).
    SegmentDiffOverlay(SegmentMapView* map, Session* session, DiffSession* diff, bool sideB);

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    SegmentMapView* m_map;
    QPointer<Session> m_session;
    QPointer<DiffSession> m_diff;
    bool m_sideB;
};

} // namespace memscope::app
