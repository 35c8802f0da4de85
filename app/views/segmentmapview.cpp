// SegmentMapView: painting and interaction of the segment map. See segmentmapview.h. GUI thread only.
#include "views/segmentmapview.h"

#include "style/colors.h"
#include "style/displaytext.h"

#include <QApplication>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QStringBuilder>
#include <QToolTip>
#include <QWheelEvent>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace memscope::app {

using namespace memscope::model;

namespace {

    // The smallest drawn size: 16 bytes per pixel (a 512-byte block is 32 px wide).
    constexpr double MaxPxPerByte = 1.0 / 16.0;
    // Widths (px) from which blocks get a separator line, labels and hatching.
    constexpr double SeparatorMinWidth = 6;
    constexpr double LabelMinWidth = 36;
    constexpr double HatchMinWidth = 4;
    constexpr double CaptionMinWidth = 28;
    constexpr const char* Separator = " \xB7 "; // " · " in Latin-1

    QFont smallFont(const QFont& base)
    {
        QFont f = base;
        if (base.pointSizeF() > 0)
            f.setPointSizeF(base.pointSizeF() * 0.85);
        else
            f.setPixelSize(std::max(8, int(base.pixelSize() * 0.85)));
        return f;
    }

    // Appends "1.50 MiB" as Session::formatBytes writes it, without allocating once `out` has grown.
    void appendBytes(QString& out, ByteCount bytes)
    {
        char buf[48];
        const ScaledBytes b = scaleBytes(bytes);
        if (b.whole)
            std::snprintf(buf, sizeof buf, "%" PRId64 " B", bytes);
        else
            std::snprintf(buf, sizeof buf, "%.*f %s", b.value < 10 ? 2 : 1, b.value, b.unit);
        out.append(QLatin1String(buf));
    }

    void appendNumber(QString& out, uint64_t value, bool hex = false)
    {
        char buf[24];
        std::snprintf(buf, sizeof buf, hex ? "%" PRIx64 : "%" PRIu64, value);
        out.append(QLatin1String(buf));
    }

    // The colours of up to four things covering one pixel column, by coverage; the column is painted in the
    // colour covering most of it (level of detail: one primitive per column however many blocks fall in it).
    struct ColumnMix {
        QRgb rgb[4] = {};
        double cover[4] = {};
        int n = 0;

        void add(QRgb c, double w)
        {
            for (int i = 0; i < n; ++i) {
                if (rgb[i] == c) {
                    cover[i] += w;
                    return;
                }
            }
            if (n < 4) {
                rgb[n] = c;
                cover[n++] = w;
                return;
            }
            int least = 0;
            for (int i = 1; i < 4; ++i)
                least = cover[i] < cover[least] ? i : least;
            if (w > cover[least]) {
                rgb[least] = c;
                cover[least] = w;
            }
        }
        QRgb dominant() const
        {
            int best = 0;
            for (int i = 1; i < n; ++i)
                best = cover[i] > cover[best] ? i : best;
            return rgb[best];
        }
    };

    // Merges horizontally adjacent pixel runs of one colour into one fillRect.
    class RunPainter {
    public:
        RunPainter(QPainter& painter, int y, int height)
            : m_painter(painter)
            , m_y(y)
            , m_height(height)
        {
        }
        ~RunPainter() { flush(); }
        void add(int x0, int x1, QRgb rgb)
        {
            if (x1 <= x0)
                return;
            if (m_open && rgb == m_rgb && x0 == m_x1) {
                m_x1 = x1;
                return;
            }
            flush();
            m_open = true;
            m_x0 = x0;
            m_x1 = x1;
            m_rgb = rgb;
        }
        void flush()
        {
            if (m_open)
                m_painter.fillRect(QRect(m_x0, m_y, m_x1 - m_x0, m_height), QColor(m_rgb));
            m_open = false;
        }

    private:
        QPainter& m_painter;
        int m_y, m_height;
        int m_x0 = 0, m_x1 = 0;
        QRgb m_rgb = 0;
        bool m_open = false;
    };

    // Rasterises contiguous spans [a, b) (px, left to right) into whole pixel columns.
    class SpanRasterizer {
    public:
        explicit SpanRasterizer(RunPainter& runs)
            : m_runs(runs)
        {
        }
        ~SpanRasterizer() { finish(); }
        void add(double a, double b, QRgb rgb)
        {
            if (!(b > a))
                return;
            const int ca = int(std::floor(a));
            if (!m_started || ca > m_col) {
                finishColumn();
                m_col = ca;
                m_started = true;
            }
            const double colEnd = double(m_col) + 1.0;
            if (b <= colEnd) {
                m_mix.add(rgb, b - a);
                return;
            }
            m_mix.add(rgb, colEnd - a);
            finishColumn();
            const int cb = int(std::floor(b));
            m_runs.add(m_col + 1, cb, rgb);
            m_col = cb;
            if (b > double(cb))
                m_mix.add(rgb, b - double(cb));
        }
        void finish() { finishColumn(); }

    private:
        void finishColumn()
        {
            if (m_mix.n > 0)
                m_runs.add(m_col, m_col + 1, m_mix.dominant());
            m_mix.n = 0;
        }
        RunPainter& m_runs;
        ColumnMix m_mix;
        int m_col = 0;
        bool m_started = false;
    };

    // Outlines are filled edge rectangles: QPainter::drawRect with a pen takes the raster engine's stroking path
    // (handed to its thread pool in Qt 6), which cost ~40 ms for big_trace's 564 segments; fillRect is a memfill.
    void strokeRect(QPainter& painter, const QRect& r, const QColor& color, int width = 1, bool left = true,
                    bool right = true)
    {
        const int w = std::min(width, std::max(1, r.width() / 2));
        painter.fillRect(QRect(r.left(), r.top(), r.width(), width), color);
        painter.fillRect(QRect(r.left(), r.bottom() - width + 1, r.width(), width), color);
        if (left)
            painter.fillRect(QRect(r.left(), r.top() + width, w, r.height() - 2 * width), color);
        if (right)
            painter.fillRect(QRect(r.right() - w + 1, r.top() + width, w, r.height() - 2 * width), color);
    }

    // A dashed outline (expandable segments): 3 px on, 3 px off along the top and bottom, solid sides.
    void dashRect(QPainter& painter, const QRect& r, const QColor& color, bool left, bool right)
    {
        for (int x = r.left(); x <= r.right(); x += 6) {
            const int len = std::min(3, r.right() - x + 1);
            painter.fillRect(QRect(x, r.top(), len, 1), color);
            painter.fillRect(QRect(x, r.bottom(), len, 1), color);
        }
        if (left)
            painter.fillRect(QRect(r.left(), r.top(), 1, r.height()), color);
        if (right)
            painter.fillRect(QRect(r.right(), r.top(), 1, r.height()), color);
    }

    // The rounding tail of a block: its colour pulled two thirds of the way to colors::roundingWaste(), so the tail
    // reads as part of its block and darker.
    QRgb tailColor(QRgb block, QRgb waste)
    {
        auto channel = [](int a, int b) { return (a + 2 * b) / 3; };
        return qRgb(channel(qRed(block), qRed(waste)), channel(qGreen(block), qGreen(waste)),
                    channel(qBlue(block), qBlue(waste)));
    }

    // "1 segment", "37 segments".
    QString counted(uint64_t n, const char* one, const char* many)
    {
        return QString::number(n) + QLatin1Char(' ') + QLatin1String(n == 1 ? one : many);
    }

    bool isActive(BlockState s) { return s == BlockState::ActiveAllocated || s == BlockState::ActivePendingFree; }

} // namespace

SegmentMapView::SegmentMapView(Session* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
{
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Expanding);
    if (!session)
        return;
    connect(session, &Session::deviceChanged, this, [this] {
        m_geometry.setPan(0, height());
        invalidateFit();
    });
    connect(session, &Session::cursorChanged, this, [this] { invalidateLayout(); });
    // A live document grew: a new peak of reserved memory changes the scale.
    connect(session, &Session::grown, this, [this] {
        if (m_session && m_session->replay().peakReserved().index != m_peakIndex)
            m_peakDevice = -1;
        invalidateLayout();
    });
    connect(session, &Session::filterChanged, this, [this] { invalidateFit(); });
    connect(session, &Session::selectionChanged, this, [this] { update(); });
    connect(session, &Session::hoveredChanged, this, [this] { update(); });
    connect(session, &Session::colorModeChanged, this, [this] {
        invalidatePixmap();
        update();
        Q_EMIT colorModeChanged(colorMode());
    });
    connect(session, &QObject::destroyed, this, [this] { update(); });
}

SegmentMapView::~SegmentMapView()
{
    if (m_session && m_hoverOwned)
        m_session->setHovered(NoAllocation);
}

void SegmentMapView::setColorMode(ColorMode mode)
{
    if (m_session)
        m_session->setColorMode(mode);
}

void SegmentMapView::invalidateFit()
{
    m_anchor = {};
    m_fitValid = false;
    m_layoutValid = false;
    m_pixmapValid = false;
    update();
}

void SegmentMapView::invalidateLayout()
{
    m_anchor = {};
    m_layoutValid = false;
    m_pixmapValid = false;
    update();
}

bool SegmentMapView::isShown(const ReplaySegment& segment) const
{
    return m_session->isStreamVisible(segment.stream) && m_session->isPoolVisible(segment.poolId);
}

SegmentMapGeometry::Metrics SegmentMapView::metrics() const
{
    const QFontMetricsF fm(font());
    const QFontMetricsF sm(smallFont(font()));
    SegmentMapGeometry::Metrics m;
    m.headerHeight = std::ceil(fm.height() + 8);
    m.barHeight = std::max(16.0, std::ceil(sm.height() + 4));
    m.captionHeight = std::ceil(sm.height() + 1);
    m.rowGap = 3;
    m.groupGap = 6;
    m.margin = 8;
    m.segmentGap = 2;
    return m;
}

QString SegmentMapView::streamName(int64_t stream) const
{
    const int number = m_session->snapshot().streamNumber(stream);
    if (stream == 0)
        return tr("stream %1").arg(number);
    return tr("stream %1 (0x%2)").arg(number).arg(QString::number(quint64(stream), 16));
}

QString SegmentMapView::segmentName(const ReplaySegment& segment) const
{
    // MemoryViz.js names segments 's' + hex address.
    return QLatin1Char('s') + QString::number(quint64(segment.address), 16);
}

void SegmentMapView::ensureLayout() const
{
    if (!m_session)
        return;
    const Session& session = *m_session;
    const ReplayState& state = session.state();
    if (m_peakDevice != session.device()) {
        // The fit uses the state at the peak of reserved memory, so that the scale stays put while the cursor moves
        // and a segment has the same width at every point of the trace.
        m_peakIndex = session.replay().peakReserved().index;
        session.replay().stateAt(m_peakIndex, m_peakState);
        m_peakDevice = session.device();
        m_fitValid = false;
    }
    const auto visible = [this](const ReplaySegment& s) { return isShown(s); };
    const SegmentMapGeometry::Metrics m = metrics();
    if (!m_fitValid) {
        m_fitScale = SegmentMapGeometry::fitScale(m_peakState, visible, session.snapshot().streams, m, width(),
                                                  height(), MaxPxPerByte);
        m_fitValid = true;
        m_layoutValid = false;
    }
    if (m_layoutValid && m_layoutIndex == state.index && m_geometry.state() == &state)
        return;
    const double zoom = std::clamp(m_zoom, 1.0, std::max(1.0, MaxPxPerByte / m_fitScale));
    const double pan = m_geometry.pan();
    m_geometry.layout(state, visible, session.snapshot().streams, m, width(), m_fitScale * zoom);
    m_geometry.setPan(std::round(pan), height());
    m_layoutValid = true;
    m_layoutIndex = state.index;
    m_pixmapValid = false;

    m_streamColors.assign(state.segments.size(), 0);
    for (size_t i = 0; i < state.segments.size(); ++i)
        m_streamColors[i] = colors::stream(session.snapshot().streamNumber(state.segments[i].stream)).rgb();

    m_groupTitles.clear();
    for (const SegmentMapGeometry::Group& g : m_geometry.groups()) {
        QString title = tr("device %1 · pool (%2, %3) · %4 · %5")
                            .arg(g.device)
                            .arg(g.pool.first)
                            .arg(g.pool.second)
                            .arg(streamName(g.stream), counted(g.placementCount, "segment", "segments"));
        if (g.expandableCount > 0)
            title += tr(" (%1 expandable)").arg(g.expandableCount);
        title += QStringLiteral(" · ")
            % tr("%1 reserved, %2 free").arg(Session::formatBytes(g.reserved), Session::formatBytes(g.freeBytes));
        m_groupTitles.push_back(title);
    }
}

const SegmentMapGeometry& SegmentMapView::geometry() const
{
    ensureLayout();
    return m_geometry;
}

double SegmentMapView::maxZoom() const
{
    ensureLayout();
    return std::max(1.0, MaxPxPerByte / m_fitScale);
}

void SegmentMapView::setZoom(double zoom, QPointF anchor)
{
    if (!m_session)
        return;
    ensureLayout();
    zoom = std::clamp(zoom, 1.0, maxZoom());
    if (zoom == m_zoom)
        return;
    if (anchor.x() < 0 || anchor.y() < 0)
        anchor = QPointF(width() / 2.0, height() / 2.0);
    // Keep the byte under the anchor on the row under it (the rows reflow, so only y can be kept exactly). While
    // the pointer stays put, successive steps keep zooming into the byte first found under it, not into whatever
    // the reflow brought there.
    const int64_t index = m_session->state().index;
    if (!(m_anchor.pos == anchor && m_anchor.stateIndex == index && m_anchor.segment >= 0
          && m_geometry.placementOf(uint32_t(m_anchor.segment)) >= 0)) {
        const SegmentMapGeometry::Hit hit = m_geometry.hitTest(anchor);
        m_anchor = {};
        m_anchor.pos = anchor;
        m_anchor.stateIndex = index;
        if (hit.placement >= 0) {
            m_anchor.segment = hit.segment;
            m_anchor.offset = hit.offset;
            m_anchor.inRow
                = anchor.y() + m_geometry.pan() - m_geometry.rowTop(m_geometry.groups()[size_t(hit.group)], hit.row);
        }
    }
    const double oldContentY = anchor.y() + m_geometry.pan();
    const double oldHeight = m_geometry.contentHeight();

    m_zoom = zoom;
    m_layoutValid = false;
    ensureLayout();

    double pan;
    const int32_t placement = m_anchor.segment >= 0 ? m_geometry.placementOf(uint32_t(m_anchor.segment)) : -1;
    if (placement >= 0)
        pan = m_geometry.position(uint32_t(placement), m_anchor.offset).y() + m_anchor.inRow - anchor.y();
    else
        pan = oldHeight > 0 ? oldContentY * m_geometry.contentHeight() / oldHeight - anchor.y() : 0;
    m_geometry.setPan(std::round(pan), height());
    invalidatePixmap();
    update();
    Q_EMIT zoomChanged(m_zoom);
}

void SegmentMapView::resetZoom()
{
    m_anchor = {};
    m_geometry.setPan(0, height());
    if (m_zoom != 1) {
        m_zoom = 1;
        invalidateLayout();
        Q_EMIT zoomChanged(m_zoom);
    }
    invalidatePixmap();
    update();
}

void SegmentMapView::setPan(double pan)
{
    ensureLayout();
    const double old = m_geometry.pan();
    m_geometry.setPan(std::round(pan), height());
    if (m_geometry.pan() != old) {
        m_anchor = {}; // the next zoom anchors on what is under the pointer now
        invalidatePixmap();
        update();
    }
}

int32_t SegmentMapView::blockOf(AllocationId id) const
{
    if (!m_session || id == NoAllocation || raw(id) >= m_session->replay().allocations().size())
        return -1;
    const ReplayState& state = m_session->state();
    const DeviceAddr address = m_session->replay().allocation(id).address;
    const auto it = std::lower_bound(state.blocks.begin(), state.blocks.end(), address,
                                     [](const ReplayBlock& b, DeviceAddr a) { return b.address < a; });
    if (it == state.blocks.end() || it->address != address || it->allocation != id)
        return -1;
    return int32_t(it - state.blocks.begin());
}

QRgb SegmentMapView::blockColor(const ReplayBlock& block, QRgb streamColor) const
{
    switch (colorMode()) {
    case ColorMode::Stack:
        return colors::stack(block.stack).rgb();
    case ColorMode::Stream:
        return streamColor;
    case ColorMode::Metadata:
        return colors::metadata(m_session ? m_session->userMetadata(block.allocation) : model::EmptyString).rgb();
    case ColorMode::Allocation:
        break;
    }
    return colors::allocation(block.address).rgb();
}

void SegmentMapView::paintEvent(QPaintEvent*)
{
    QPainter painter(this);
    ensureLayout();
    const qreal dpr = devicePixelRatioF();
    const QSize pixelSize = size() * dpr;
    if (!m_pixmapValid || m_pixmap.size() != pixelSize || m_pixmap.devicePixelRatio() != dpr) {
        if (m_pixmap.size() != pixelSize) // reused while the size stays: no 8 MB allocation per repaint
            m_pixmap = QPixmap(pixelSize);
        m_pixmap.setDevicePixelRatio(dpr);
        QPainter mapPainter(&m_pixmap);
        renderMap(mapPainter);
        m_pixmapValid = true;
    }
    painter.drawPixmap(0, 0, m_pixmap);
    if (!m_session)
        return;

    // Outlines: hovered (thin) under selected (thick), as PyTorch's viewer strokes the block under the pointer.
    const AllocationId selected = m_session->selection();
    const AllocationId hovered = m_session->hovered();
    if (hovered != NoAllocation && hovered != selected)
        paintOutline(painter, hovered, palette().color(QPalette::Text), 1);
    if (selected != NoAllocation)
        paintOutline(painter, selected, colors::selection(palette()), 2);
}

void SegmentMapView::paintOutline(QPainter& painter, AllocationId id, const QColor& color, int width) const
{
    const int32_t b = blockOf(id);
    if (b < 0)
        return;
    const ReplayState& state = m_session->state();
    const ReplayBlock& block = state.blocks[size_t(b)];
    // The segment holding it: the last one starting at or before it.
    const auto seg = std::upper_bound(state.segments.begin(), state.segments.end(), block.address,
                                      [](DeviceAddr a, const ReplaySegment& s) { return a < s.address; });
    if (seg == state.segments.begin())
        return;
    const uint32_t segment = uint32_t((seg - 1) - state.segments.begin());
    const int32_t placement = m_geometry.placementOf(segment);
    if (placement < 0)
        return;
    const double begin = double(block.address - state.segments[segment].address);
    m_geometry.forEachBarRect(uint32_t(placement), begin, begin + double(block.size), height(), [&](QRectF r) {
        int x0 = int(std::floor(r.left())), x1 = int(std::ceil(r.right()));
        // At least 3 px wide so that a sub-pixel block still shows where it is.
        if (x1 - x0 < 3) {
            x0 = int(std::floor(r.center().x())) - 1;
            x1 = x0 + 3;
        }
        strokeRect(painter, QRect(x0, int(std::round(r.top())), x1 - x0, int(r.height())), color, width);
    });
}

void SegmentMapView::renderMap(QPainter& painter) const
{
    m_labelled.clear();
    const QPalette& pal = palette();
    painter.fillRect(rect(), pal.color(QPalette::Base));
    if (!m_session) {
        painter.setPen(pal.color(QPalette::Text));
        painter.drawText(rect(), Qt::AlignCenter, tr("No snapshot"));
        return;
    }
    const ReplayState& state = m_session->state();
    if (m_geometry.groups().empty()) {
        painter.setPen(pal.color(QPalette::Text));
        const QString message = state.segments.empty()
            ? tr("No memory reserved at state %1 of %2").arg(state.index).arg(m_session->entryCount())
            : tr("Every segment is hidden by the stream and pool filters");
        painter.drawText(rect(), Qt::AlignCenter, message);
        return;
    }

    // Group headers.
    const SegmentMapGeometry::Metrics& m = m_geometry.metrics();
    QFont headerFont = font();
    headerFont.setBold(true);
    painter.setFont(headerFont);
    const QFontMetricsF hfm(headerFont);
    const QColor textColor = pal.color(QPalette::Text);
    const QColor rule = colors::mix(pal.color(QPalette::Base), textColor, 0.25);
    for (size_t g = 0; g < m_geometry.groups().size(); ++g) {
        const SegmentMapGeometry::Group& group = m_geometry.groups()[g];
        const double top = group.top - m_geometry.pan();
        if (top + m.headerHeight <= 0 || top >= height())
            continue;
        const QRectF r(m.margin, top, m_geometry.contentWidth(), m.headerHeight - 3);
        painter.setPen(textColor);
        painter.drawText(r, Qt::AlignLeft | Qt::AlignVCenter,
                         hfm.elidedText(m_groupTitles[g], Qt::ElideRight, r.width()));
        painter.fillRect(QRectF(m.margin, std::round(top + m.headerHeight - 3), m_geometry.contentWidth(), 1), rule);
    }

    painter.setFont(smallFont(font()));
    m_geometry.forEachVisibleRow(
        height(), [&](uint32_t group, int64_t row, double y) { paintRow(painter, group, row, std::round(y)); });

    // A scroll indicator when the map is taller than the view.
    const double maxPan = m_geometry.maxPan(height());
    if (maxPan > 0) {
        const double track = height() - 4;
        const double thumb = std::max(16.0, track * height() / m_geometry.contentHeight());
        const double y = 2 + (track - thumb) * m_geometry.pan() / maxPan;
        QColor c = textColor;
        c.setAlpha(90);
        painter.fillRect(QRectF(width() - 5, std::round(y), 3, std::round(thumb)), c);
    }
}

double SegmentMapView::textWidth(const QString& text) const
{
    // Captions and labels are Latin-1: their width is the sum of cached per-character advances (kerning aside),
    // which spares a text shaping per candidate string (QFontMetricsF::horizontalAdvance was half of a paint).
    const QFont f = smallFont(font());
    if (!m_advancesValid || f != m_advancesFont) {
        const QFontMetricsF fm(f);
        for (int c = 0; c < 256; ++c)
            m_advances[size_t(c)] = fm.horizontalAdvance(QChar(c));
        m_advancesFont = f;
        m_advancesValid = true;
    }
    double w = 1; // slack for kerning and rounding
    for (const QChar c : text)
        w += c.unicode() < 256 ? m_advances[c.unicode()] : m_advances['M'];
    return w;
}

void SegmentMapView::drawCachedText(QPainter& painter, QPointF topLeft, const QString& text) const
{
    // Captions and labels repeat a lot ("192.0 MiB" under most of big_trace's segments): their laid-out glyphs are
    // kept, so a repaint draws cached glyph runs instead of shaping each string again (drawText was most of a
    // full paint). Bounded; a lookup does not allocate.
    if (m_textCacheFont != painter.font() || m_textCache.size() > 4096) {
        m_textCache.clear();
        m_textCacheFont = painter.font();
    }
    auto it = m_textCache.find(text);
    if (it == m_textCache.end()) {
        QStaticText st(text);
        st.setTextFormat(Qt::PlainText);
        st.setPerformanceHint(QStaticText::AggressiveCaching);
        st.prepare(QTransform(), painter.font());
        it = m_textCache.insert(text, st);
    }
    painter.drawStaticText(topLeft, *it);
}

namespace {

    // The bytes of a block's body: what was requested of it (the rest is drawn as rounding waste).
    double bodyBytes(const ReplayBlock& b) { return double(std::clamp<ByteCount>(b.requestedSize, 0, b.size)); }

} // namespace

bool SegmentMapView::labelsHere(uint32_t placement, int64_t row, double b0, double bodyBytes,
                                const SegmentMapGeometry::Piece& piece, double pxPerByte) const
{
    // A block whose body wraps over rows is labelled once: on the second of three or more rows (a whole row of
    // it, as wide as any), else on the wider of its two rows (the first on a tie).
    const double bodyEnd = b0 + bodyBytes;
    const double here = (std::min(bodyEnd, piece.end) - std::max(b0, piece.begin)) * pxPerByte;
    const SegmentMapGeometry::Placement& pl = m_geometry.placements()[placement];
    if (b0 >= piece.begin) { // the body starts on this row
        if (bodyEnd <= piece.end || row >= pl.lastRow)
            return true;
        const SegmentMapGeometry::Piece next = m_geometry.piece(placement, row + 1);
        if (bodyEnd > next.end)
            return false; // three rows or more: the next one is whole
        return here >= (bodyEnd - next.begin) * pxPerByte;
    }
    if (row <= pl.firstRow)
        return true;
    const SegmentMapGeometry::Piece previous = m_geometry.piece(placement, row - 1);
    if (b0 < previous.begin)
        return false; // the body started two rows up or more: the row after its first has the label
    if (bodyEnd > piece.end)
        return true; // the second of three or more rows
    return here > (previous.end - b0) * pxPerByte;
}

void SegmentMapView::paintRow(QPainter& painter, uint32_t group, int64_t row, double y) const
{
    const ReplayState& state = m_session->state();
    const SegmentMapGeometry::Metrics& m = m_geometry.metrics();
    const QPalette& pal = palette();
    const QRgb freeRgb = colors::freeSpace(pal).rgb();
    const QRgb wasteRgb = colors::roundingWaste().rgb();
    const QRgb pendingRgb = colors::pendingFree().rgb();
    const double k = m_geometry.pxPerByte();
    const int barTop = int(y);
    const int barHeight = int(m.barHeight);
    const auto [first, last] = m_geometry.placementsInRow(group, row);

    m_labels.clear();
    m_hatches.clear();
    m_separators.clear();
    {
        RunPainter runs(painter, barTop, barHeight);
        for (uint32_t p = first; p < last; ++p) {
            const SegmentMapGeometry::Piece piece = m_geometry.piece(p, row);
            const uint32_t segIndex = m_geometry.placements()[p].segment;
            const ReplaySegment& seg = state.segments[segIndex];
            const QRgb streamRgb = m_streamColors[segIndex];
            // Segment byte 0 sits at xBase on this row.
            const double xBase = piece.x0 - piece.begin * k;
            SpanRasterizer raster(runs);
            if (seg.blockCount == 0)
                raster.add(piece.x0, std::max(piece.x1, piece.x0 + 0.5), freeRgb);
            const auto blocksBegin = state.blocks.begin() + seg.blockBegin;
            const auto blocksEnd = blocksBegin + seg.blockCount;
            const double firstByte = double(seg.address) + piece.begin;
            auto it = std::partition_point(blocksBegin, blocksEnd, [firstByte](const ReplayBlock& b) {
                return double(b.address + b.size) <= firstByte;
            });
            for (; it != blocksEnd; ++it) {
                const ReplayBlock& b = *it;
                const double b0 = double(b.address - seg.address);
                if (b0 >= piece.end)
                    break;
                const double b1 = b0 + double(b.size);
                const double s0 = std::max(b0, piece.begin);
                const double s1 = std::min(b1, piece.end);
                const double x0 = xBase + s0 * k;
                const double x1 = xBase + s1 * k;
                if (!isActive(b.state)) {
                    raster.add(x0, x1, freeRgb);
                    continue;
                }
                // The requested bytes in the block's colour, the rest of the block (rounding) as a dark tail.
                const double bodyEnd
                    = std::clamp(b0 + double(std::clamp<ByteCount>(b.requestedSize, 0, b.size)), s0, s1);
                const double xBody = xBase + bodyEnd * k;
                const bool pending = b.state == BlockState::ActivePendingFree;
                const QRgb body = pending ? pendingRgb : blockColor(b, streamRgb);
                raster.add(x0, xBody, body);
                if (x1 > xBody)
                    raster.add(xBody, x1, tailColor(body, wasteRgb));
                if (x1 - x0 >= SeparatorMinWidth) {
                    if (s0 == b0 && x0 > piece.x0 + 0.5)
                        m_separators.emplace_back(int(std::round(x0)), barTop, 1, barHeight);
                    if (s1 == b1 && x1 < piece.x1 - 0.5)
                        m_separators.emplace_back(int(std::round(x1)) - 1, barTop, 1, barHeight);
                }
                if (pending && xBody - x0 >= HatchMinWidth)
                    m_hatches.emplace_back(QPointF(std::round(x0), barTop),
                                           QPointF(std::round(xBody), barTop + barHeight));
                if (xBody - x0 >= LabelMinWidth && labelsHere(p, row, b0, bodyBytes(b), piece, k))
                    m_labels.push_back({ x0, xBody, int32_t(it - state.blocks.begin()), body });
            }
        }
    }

    if (!m_hatches.empty()) {
        // Pending free (record_stream): red as in MemoryViz.js, hatched so it reads without colour too.
        const QBrush hatch(QColor(pendingRgb).darker(160), Qt::BDiagPattern);
        for (const QRectF& r : m_hatches)
            painter.fillRect(r, hatch);
    }
    if (!m_separators.empty()) {
        QColor c = pal.color(QPalette::Base);
        c.setAlpha(170);
        for (const QRect& r : m_separators)
            painter.fillRect(r, c);
    }

    // Segment outlines (dashed for expandable segments) and captions.
    QColor outline = pal.color(QPalette::Text);
    outline.setAlpha(110);
    const QColor captionColor = colors::mix(pal.color(QPalette::Base), pal.color(QPalette::Text), 0.7);
    const QFontMetricsF fm(painter.font());
    const double captionY = barTop + barHeight;
    // Text vertically centred in the caption strip and in the bar.
    const double captionTextTop = std::round(captionY + (m.captionHeight - fm.height()) / 2);
    const double barTextTop = std::round(barTop + (barHeight - fm.height()) / 2);
    for (uint32_t p = first; p < last; ++p) {
        const SegmentMapGeometry::Piece piece = m_geometry.piece(p, row);
        const SegmentMapGeometry::Placement& placement = m_geometry.placements()[p];
        const ReplaySegment& seg = state.segments[placement.segment];
        const double w = piece.x1 - piece.x0;
        if (w >= 3 || seg.isExpandable) {
            const int x0 = int(std::round(piece.x0));
            const QRect r(x0, barTop, std::max(1, int(std::round(piece.x1)) - x0), barHeight);
            // A segment wrapped over rows is one strip: no edge where it continues on the next row.
            const bool left = piece.begin <= 0, right = piece.end >= double(seg.totalSize);
            if (seg.isExpandable)
                dashRect(painter, r, pal.color(QPalette::Text), left, right);
            else
                strokeRect(painter, r, outline, 1, left, right);
        }
        if (w < CaptionMinWidth)
            continue;
        // The caption: the longest variant that fits under the piece. Continuation rows of a wrapped segment say
        // where in the segment they start.
        const SegmentStats& st = m_geometry.stats(placement.segment);
        const double room = w - 2;
        const uint64_t freePercent
            = uint64_t(std::lround(100.0 * double(st.freeBytes) / double(std::max<ByteCount>(1, seg.totalSize))));
        bool fits = false;
        const int variants = row == placement.firstRow ? 4 : 1;
        for (int variant = 0; variant < variants && !fits; ++variant) {
            m_text.resize(0);
            if (row != placement.firstRow) {
                m_text.append(QLatin1Char('+'));
                appendBytes(m_text, ByteCount(piece.begin));
                fits = textWidth(m_text) <= room;
                break;
            }
            if (seg.isExpandable && variant <= 1) {
                m_text.append(QLatin1String("expandable"));
                m_text.append(QLatin1String(Separator));
            }
            if (variant == 0) {
                m_text.append(QLatin1Char('s'));
                appendNumber(m_text, uint64_t(seg.address), true);
                m_text.append(QLatin1String(Separator));
            }
            appendBytes(m_text, seg.totalSize);
            if (variant <= 1) {
                m_text.append(QLatin1String(Separator));
                appendBytes(m_text, st.freeBytes);
                m_text.append(QLatin1String(" free"));
                if (st.gapCount > 1) {
                    m_text.append(QLatin1String(", largest "));
                    appendBytes(m_text, st.largestGap);
                }
                if (st.roundingWaste() > 0) {
                    m_text.append(QLatin1String(Separator));
                    appendNumber(m_text, uint64_t(std::lround(st.internalPercent(seg.totalSize))));
                    m_text.append(QLatin1String("% internal"));
                }
            } else if (variant == 2) {
                m_text.append(QLatin1String(Separator));
                appendNumber(m_text, freePercent);
                m_text.append(QLatin1String("% free"));
            }
            fits = textWidth(m_text) <= room;
        }
        if (fits) {
            painter.setPen(captionColor);
            drawCachedText(painter, QPointF(piece.x0 + 1, captionTextTop), m_text);
        }
    }

    // Block labels where they fit: name and size, or size alone.
    for (const Label& label : m_labels) {
        const ReplayBlock& b = state.blocks[size_t(label.block)];
        const double room = label.x1 - label.x0 - 6;
        bool fits = false;
        for (int variant = 0; variant < 2 && !fits; ++variant) {
            m_text.resize(0);
            if (variant == 0) {
                // Named as Session::allocationName (MemoryViz.js formatAddr): b<hex address>_<version>.
                m_text.append(QLatin1Char('b'));
                appendNumber(m_text, uint64_t(b.address), true);
                m_text.append(QLatin1Char('_'));
                appendNumber(m_text, b.version);
                m_text.append(QLatin1String(Separator));
            }
            appendBytes(m_text, b.size);
            fits = textWidth(m_text) <= room;
        }
        if (!fits)
            continue;
        painter.setPen(qGray(label.background) > 140 ? QColor(Qt::black) : QColor(Qt::white));
        drawCachedText(painter, QPointF(label.x0 + 3, barTextTop), m_text);
        m_labelled.push_back(label.block);
    }
}

std::vector<int32_t> SegmentMapView::labelledBlocks() const { return m_labelled; }

QString SegmentMapView::toolTipAt(QPointF point) const
{
    if (!m_session)
        return {};
    ensureLayout();
    const SegmentMapGeometry::Hit hit = m_geometry.hitTest(point);
    const ReplayState& state = m_session->state();
    if (hit.part == SegmentMapGeometry::Hit::Part::Header) {
        const SegmentMapGeometry::Group& g = m_geometry.groups()[size_t(hit.group)];
        return m_groupTitles[size_t(hit.group)] + QLatin1Char('\n')
            + tr("%1 active (%2 requested), rounding waste %3")
                  .arg(Session::formatBytes(g.activeBytes), Session::formatBytes(g.requestedBytes),
                       Session::formatBytes(g.activeBytes - g.requestedBytes));
    }
    if (hit.segment < 0)
        return {};
    const ReplaySegment& seg = state.segments[size_t(hit.segment)];
    const SegmentStats& st = m_geometry.stats(uint32_t(hit.segment));
    QString text;
    if (hit.block >= 0) {
        const ReplayBlock& b = state.blocks[size_t(hit.block)];
        if (isActive(b.state)) {
            text += m_session->allocationName(b.allocation) + QLatin1String("  ")
                + tr("%1 block, %2 requested").arg(Session::formatBytes(b.size), Session::formatBytes(b.requestedSize));
            if (b.size > b.requestedSize)
                text += tr(" (%1 rounding waste)").arg(Session::formatBytes(b.size - b.requestedSize));
            text += QLatin1Char('\n');
            if (b.state == BlockState::ActivePendingFree)
                // MemoryViz.js: "block freed but waiting due to record_stream".
                text += tr("pending free: freed, still in use by another stream (record_stream)\n");
        } else {
            text += tr("free gap %1 at 0x%2\n")
                        .arg(Session::formatBytes(b.size), QString::number(quint64(b.address), 16));
        }
        text += QLatin1Char('\n');
    }
    text += tr("segment %1: %2, %3, pool (%4, %5)%6\n")
                .arg(segmentName(seg), Session::formatBytes(seg.totalSize), streamName(seg.stream))
                .arg(seg.poolId.first)
                .arg(seg.poolId.second)
                .arg(seg.isExpandable ? tr(", expandable") : QString());
    text += tr("free %1 in %2, largest gap %3\n")
                .arg(Session::formatBytes(st.freeBytes), counted(st.gapCount, "gap", "gaps"),
                     Session::formatBytes(st.largestGap));
    text += tr("%1: %2, %3 requested, rounding waste %4 (%5% internal)")
                .arg(counted(st.activeCount, "active block", "active blocks"), Session::formatBytes(st.activeBytes),
                     Session::formatBytes(st.requestedBytes), Session::formatBytes(st.roundingWaste()))
                .arg(st.internalPercent(seg.totalSize), 0, 'f', 1);
    return text;
}

bool SegmentMapView::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString text = toolTipAt(help->pos());
        if (text.isEmpty()) {
            QToolTip::hideText();
            event->ignore();
        } else {
            QToolTip::showText(help->globalPos(), text, this);
        }
        return true;
    }
    return QWidget::event(event);
}

void SegmentMapView::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    invalidateFit();
}

void SegmentMapView::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange)
        invalidatePixmap();
    else if (event->type() == QEvent::FontChange)
        invalidateFit();
    QWidget::changeEvent(event);
}

void SegmentMapView::wheelEvent(QWheelEvent* event)
{
    const QPoint delta = event->angleDelta();
    if (delta.y() == 0) {
        event->ignore();
        return;
    }
    if (event->modifiers() & Qt::ShiftModifier) {
        setPan(pan() - delta.y());
    } else {
        // One notch (120) zooms by 2^(1/4).
        setZoom(m_zoom * std::pow(2.0, delta.y() / 480.0), event->position());
    }
    event->accept();
}

void SegmentMapView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton) {
        QWidget::mousePressEvent(event);
        return;
    }
    m_pressed = true;
    m_dragging = false;
    m_pressPos = event->position();
    m_pressPan = pan();
}

void SegmentMapView::mouseMoveEvent(QMouseEvent* event)
{
    m_anchor = {};
    if (m_pressed && (event->buttons() & Qt::LeftButton)) {
        const QPointF d = event->position() - m_pressPos;
        if (!m_dragging && d.manhattanLength() >= QApplication::startDragDistance()) {
            m_dragging = true;
            setCursor(Qt::ClosedHandCursor);
        }
        if (m_dragging) {
            setPan(m_pressPan - d.y());
            return;
        }
    }
    updateHover(event->position());
}

void SegmentMapView::mouseReleaseEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton || !m_pressed) {
        QWidget::mouseReleaseEvent(event);
        return;
    }
    if (!m_dragging && m_session) {
        ensureLayout();
        const SegmentMapGeometry::Hit hit = m_geometry.hitTest(event->position());
        const AllocationId id = hit.block >= 0 ? m_session->state().blocks[size_t(hit.block)].allocation : NoAllocation;
        m_session->setSelection(id);
    }
    if (m_dragging)
        unsetCursor();
    m_pressed = m_dragging = false;
}

void SegmentMapView::mouseDoubleClickEvent(QMouseEvent* event)
{
    if (event->button() == Qt::LeftButton)
        resetZoom();
}

void SegmentMapView::keyPressEvent(QKeyEvent* event)
{
    const double pitch = m_geometry.metrics().rowPitch();
    switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal:
        setZoom(m_zoom * 1.5);
        break;
    case Qt::Key_Minus:
        setZoom(m_zoom / 1.5);
        break;
    case Qt::Key_0:
        resetZoom();
        break;
    case Qt::Key_Up:
        setPan(pan() - pitch);
        break;
    case Qt::Key_Down:
        setPan(pan() + pitch);
        break;
    case Qt::Key_PageUp:
        setPan(pan() - height() * 0.9);
        break;
    case Qt::Key_PageDown:
        setPan(pan() + height() * 0.9);
        break;
    case Qt::Key_Home:
        setPan(0);
        break;
    case Qt::Key_End:
        setPan(m_geometry.contentHeight());
        break;
    default:
        QWidget::keyPressEvent(event);
        return;
    }
    event->accept();
}

void SegmentMapView::leaveEvent(QEvent* event)
{
    if (m_session && m_hoverOwned) {
        m_hoverOwned = false;
        m_session->setHovered(NoAllocation);
    }
    QWidget::leaveEvent(event);
}

void SegmentMapView::updateHover(QPointF point)
{
    if (!m_session)
        return;
    ensureLayout();
    const SegmentMapGeometry::Hit hit = m_geometry.hitTest(point);
    const AllocationId id = hit.block >= 0 ? m_session->state().blocks[size_t(hit.block)].allocation : NoAllocation;
    // Leave another view's hover alone while the pointer is over nothing here.
    if (id == NoAllocation && !m_hoverOwned)
        return;
    m_hoverOwned = id != NoAllocation;
    m_session->setHovered(id);
}

} // namespace memscope::app
