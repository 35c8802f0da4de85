// TimelineRangeOverlay: see timelinerangeoverlay.h.
#include "views/timelinerangeoverlay.h"

#include "document/session.h"
#include "views/timelineview.h"

#include <QPainter>

#include <algorithm>
#include <cmath>
#include <vector>

namespace memscope::app {

TimelineRangeOverlay::TimelineRangeOverlay(TimelineView* timeline, Session* session, int64_t a, int64_t b)
    : WidgetOverlay(timeline)
    , m_timeline(timeline)
    , m_session(session)
    , m_a(a)
    , m_b(b)
{
    setObjectName(QStringLiteral("diffRangeOverlay"));
    connect(session, &Session::timeAxisChanged, this, [this] { m_axisValid = false; });
}

double TimelineRangeOverlay::xOf(int64_t state)
{
    if (!m_axisValid) {
        const int64_t n = m_session->entryCount();
        if (m_session->timeAxis() == TimeAxis::Time) {
            std::vector<int64_t> times(size_t(n + 1));
            for (int64_t i = 0; i <= n; ++i)
                times[size_t(i)] = m_session->timeUsAt(i);
            m_axis = StateAxis::time(std::move(times));
        } else {
            m_axis = StateAxis::index(n);
        }
        m_axisValid = true;
    }
    return m_timeline->geometry().xAt(m_axis.stateMarker(state));
}

void TimelineRangeOverlay::paintEvent(QPaintEvent*)
{
    if (!m_session)
        return;
    QPainter p(this);
    const QRect plot = m_timeline->plotRect();
    p.setClipRect(plot.adjusted(0, -16, 0, 0));
    const double xa = xOf(m_a), xb = xOf(m_b);
    QColor shade = palette().color(QPalette::Highlight);
    shade.setAlpha(55);
    p.fillRect(QRectF(std::min(xa, xb), plot.top(), std::abs(xb - xa), plot.height()), shade);
    const QFont f = font();
    p.setFont(f);
    auto mark = [&](double x, const QString& text, const QColor& c) {
        p.setPen(QPen(c, 2, Qt::DashLine));
        p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()));
        const QRectF box(x - 9, plot.top(), 18, 16);
        p.fillRect(box, c);
        p.setPen(Qt::white);
        p.drawText(box, Qt::AlignCenter, text);
    };
    mark(xa, QStringLiteral("A"), QColor(0x1f, 0x5f, 0xbf));
    mark(xb, QStringLiteral("B"), QColor(0x8e, 0x24, 0xaa));
}

} // namespace memscope::app
