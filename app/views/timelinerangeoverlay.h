// TimelineRangeOverlay shades, on a timeline of the one trace both sides of a diff come from, the range between A's
// and B's indices and marks both with labelled lines. A WidgetOverlay of the timeline; object name
// "diffRangeOverlay". GUI thread only.
#pragma once

#include "views/timelinegeometry.h"
#include "views/widgetoverlay.h"

#include <QPointer>

#include <cstdint>

namespace memscope::app {

class Session;
class TimelineView;

class TimelineRangeOverlay : public WidgetOverlay {
    Q_OBJECT
public:
    // A child of `timeline`, which shows `session`; `a` and `b`: the two sides' state indices.
    TimelineRangeOverlay(TimelineView* timeline, Session* session, int64_t a, int64_t b);

    // Widget x of a state's marker on the timeline.
    double xOf(int64_t state);

protected:
    void paintEvent(QPaintEvent* event) override;

private:
    TimelineView* m_timeline;
    QPointer<Session> m_session;
    int64_t m_a, m_b;
    StateAxis m_axis;
    bool m_axisValid = false;
};

} // namespace memscope::app
