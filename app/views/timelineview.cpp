// The memory timeline view. See timelineview.h for what it shows and how the mouse drives it.
#include "views/timelineview.h"

#include "style/colors.h"

#include <QFutureWatcher>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QPainter>
#include <QStringBuilder>
#include <QTimer>
#include <QToolButton>
#include <QToolTip>
#include <QWheelEvent>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <array>
#include <cmath>

namespace memscope::app {

using namespace memscope::model;

namespace {

    // Wheel zoom per notch (120 units of angleDelta).
    constexpr double ZoomPerNotch = 0.8;
    // A press that moves less than this (pixels) is a click.
    constexpr int ClickSlop = 4;
    // Overview brush edges are grabbed within this many pixels.
    constexpr int EdgeGrab = 5;
    // A growth put off while a job reads the data is tried again this often (as LiveController's flush).
    constexpr int GrowthRetryMs = 10;

    QString helpText()
    {
        return TimelineView::tr(
            "Left-drag: move the cursor · click: select the allocation · right-, middle- or "
            "Shift-drag: pan · wheel: zoom · double-click: show all\nOverview: drag the brush or its "
            "edges, or drag a new range");
    }

} // namespace

TimelineView::TimelineView(Session* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
{
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setContextMenuPolicy(Qt::PreventContextMenu);
    setAttribute(Qt::WA_OpaquePaintEvent);
    setObjectName(QStringLiteral("timelineView"));

    m_segmentsButton = new QToolButton(this);
    m_segmentsButton->setObjectName(QStringLiteral("timelineSegmentsToggle"));
    m_segmentsButton->setText(tr("Cached segments"));
    m_segmentsButton->setCheckable(true);
    m_segmentsButton->setAutoRaise(true);
    m_segmentsButton->setToolTip(tr("Stack reserved segments (Active Cached Memory Timeline) instead of allocations"));
    connect(m_segmentsButton, &QToolButton::toggled, this, &TimelineView::setShowSegments);

    m_timeButton = new QToolButton(this);
    m_timeButton->setObjectName(QStringLiteral("timelineTimeToggle"));
    m_timeButton->setText(tr("Time axis"));
    m_timeButton->setCheckable(true);
    m_timeButton->setAutoRaise(true);
    m_timeButton->setToolTip(tr("Show real time (time_us) on the x axis instead of the entry index"));
    connect(m_timeButton, &QToolButton::toggled, this, [this](bool on) {
        if (m_session)
            m_session->setTimeAxis(on ? TimeAxis::Time : TimeAxis::Index);
    });

    connect(session, &Session::deviceChanged, this, &TimelineView::onDeviceChanged);
    connect(session, &Session::filterChanged, this, &TimelineView::onFilterChanged);
    connect(session, &Session::timeAxisChanged, this, &TimelineView::onTimeAxisChanged);
    connect(session, &Session::colorModeChanged, this, &TimelineView::onColorModeChanged);
    connect(session, &Session::growingChanged, this, &TimelineView::onTimeAxisChanged); // the domain's room to grow
    connect(session, &Session::cursorChanged, this, &TimelineView::onCursorChanged);
    connect(session, &Session::grown, this, &TimelineView::onGrown);
    m_growthRetry = new QTimer(this);
    m_growthRetry->setSingleShot(true);
    m_growthRetry->setInterval(GrowthRetryMs);
    connect(m_growthRetry, &QTimer::timeout, this, &TimelineView::onGrown);
    connect(session, &Session::selectionChanged, this, qOverload<>(&QWidget::update));
    connect(session, &Session::hoveredChanged, this, qOverload<>(&QWidget::update));
    // A plot rendered in the background is shown at the next paint.
    m_renderer.setPlotReadyCallback([this] {
        refreshHover();
        update();
    });

    onDeviceChanged();
}

// ---- data ---------------------------------------------------------------------------------------------------------

void TimelineView::startBuild(uint8_t changes)
{
    if (!m_session)
        return;
    // A build under way is superseded: its result will be dropped, so this one does its work too.
    if (m_buildWatcher)
        changes |= m_buildChanges;
    changes &= uint8_t(~TimelineDataRequest::Grown);
    m_buildChanges = changes;
    const uint64_t generation = ++m_buildGeneration;
    TimelineDataRequest request = makeTimelineDataRequest(*m_session, changes, m_data, ++m_revision);
    m_buildTimeAxis = request.timeAxis;
    // The watcher of a superseded build goes (its job runs to its end; nothing waits for it).
    if (m_buildWatcher)
        m_buildWatcher->deleteLater();
    auto* watcher = new QFutureWatcher<std::shared_ptr<const TimelineData>>(this);
    m_buildWatcher = watcher;
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation] {
        // Stale (a newer build was asked for) or already shown by finishBuild(): dropped.
        if (generation != m_buildGeneration || watcher != m_buildWatcher)
            return;
        const auto data = watcher->result();
        m_buildWatcher = nullptr;
        watcher->deleteLater();
        adopt(data);
        if (m_growthOwed)
            onGrown(); // the growth put off until the build came
    });
    watcher->setFuture(
        QtConcurrent::run([request = std::move(request)]() mutable { return buildTimelineData(std::move(request)); }));
}

void TimelineView::finishBuild()
{
    finishDataBuild();
    if (m_growthOwed) {
        m_renderer.finishPlot(); // the render under way may be what holds the document
        onGrown();
    }
    if (hasData()) {
        m_renderer.preparePlotNow(frame());
        refreshHover();
    }
}

void TimelineView::finishDataBuild()
{
    if (!m_buildWatcher)
        return;
    const auto data = m_buildWatcher->result(); // waits; runs the job here if no pool thread has taken it yet
    delete std::exchange(m_buildWatcher, nullptr);
    adopt(data);
    if (m_growthOwed)
        onGrown(); // the growth put off until the build came
}

void TimelineView::adopt(std::shared_ptr<const TimelineData> data)
{
    if (data == m_data)
        return;
    m_data = std::move(data);
    m_renderer.setData(m_data);
    // Its time axis, made in the build (or the index axis, the time axis no longer asked for), showing the same
    // states.
    if (hasData() && m_axis != m_data->timeAxis && (m_data->timeAxis || m_axis->isTime()))
        onTimeAxisChanged();
    m_allocPiece.clear();
    m_allocPieceData = nullptr;
    takeInData();
}

void TimelineView::takeInData()
{
    m_hitGeneration = UINT64_MAX; // the hit stack is bound to the data's vectors (a growth may move them)
    update();
    Q_EMIT dataChanged();
}

void TimelineView::onColorModeChanged()
{
    startBuild(TimelineDataRequest::Colors);
    update();
}

void TimelineView::onDeviceChanged()
{
    if (!m_session)
        return;
    m_device = m_session->device();
    startBuild(TimelineDataRequest::Items);
    m_hoverPiece = NoTimelineItem;
    m_hitGeneration = UINT64_MAX;
    rebuildAxis();
    m_geometry.reset();
    emitRangeIfChanged();
    update();
}

// A live document grew: the data is extended here, in place (O(live + new items): the Document grows on this thread,
// between events), the view keeps its zoom, and a view showing the end (or everything) slides along with the data.
// The growth holds the data's write lock, so that no job reads the data while it changes and none is copied for the
// jobs that hold it (a plot render queued: issue 15, where each growth during a render copied every item, up to
// seconds on the GUI thread at 20 M entries). While a job reads the data (a render), or a build of the data is under
// way, the growth is put off (the view shows the data as it was) and taken in when the build comes, or tried again
// shortly: the GUI thread never waits for a job. Jobs that read only the document (the call tree's, the insights')
// do not hold it off: the document grows on this thread, and only flush() changes it, under its own lock.
void TimelineView::onGrown()
{
    if (!m_session)
        return;
    m_growthRetry->stop();
    m_growthOwed = false;
    if (m_buildWatcher) {
        m_growthOwed = true; // the build's data grows when it comes
        return;
    }
    const auto [first, last] = visibleRange();
    const bool wasReset = m_geometry.isReset();
    const bool atEnd = last >= m_axis->entryCount();
    const double width = m_geometry.span();
    if (hasData() && m_data->document == m_session->documentPtr()) {
        const auto lock = m_data->tryWriteLock();
        if (!lock.owns_lock()) {
            m_growthOwed = true;
            m_growthRetry->start();
            return;
        }
        // And the axis, the data's time axis, which the growth extends (rebuildAxis takes it back).
        m_axis = std::make_shared<const StateAxis>();
        // The view is the only writer of the data it shows: builds make it, and only this changes it afterwards. The
        // renderer's plot stays valid and renders only the columns the new entries changed (the data's revision and
        // entry count tell).
        TimelineData& data = const_cast<TimelineData&>(*m_data);
        // The Session's annotation spans, let go of first: it extends them in place when no one else holds them,
        // and copies every one otherwise (a live job that opens a range per step has hundreds of thousands).
        data.annotations.reset();
        growTimelineData(data, makeTimelineDataRequest(*m_session, TimelineDataRequest::Grown, m_data, ++m_revision));
        if (m_allocPieceData == m_data.get())
            extendPieceOfAllocations(m_data->replay(), *m_data->pieces, m_allocPiece);
        takeInData();
    } else {
        startBuild(TimelineDataRequest::Items);
    }
    rebuildAxis(AxisChange::Grown); // shows everything
    if (!wasReset) {
        if (atEnd)
            m_geometry.setRange(m_axis->domainEnd() - width, m_axis->domainEnd());
        else
            m_geometry.setRange(m_axis->stateBegin(first), m_axis->stateBegin(last + 1));
    }
    emitRangeIfChanged();
    update();
}

const std::vector<TimelineItem>& TimelineView::allocationPieces()
{
    if (m_data->allocPiece)
        return *m_data->allocPiece;
    if (m_allocPieceData != m_data.get()) {
        m_allocPiece = pieceOfAllocations(m_data->replay());
        m_allocPieceData = m_data.get();
    }
    return m_allocPiece;
}

void TimelineView::onFilterChanged()
{
    // The annotations (torch.compile's may have been shown or hidden) and the items' visibility.
    startBuild(TimelineDataRequest::Visibility);
    update();
}

void TimelineView::rebuildAxis(AxisChange change)
{
    if (!m_session)
        return;
    const int64_t n = m_session->entryCount();
    const bool time = m_session->timeAxis() == TimeAxis::Time && !m_session->entries().empty();
    // The time axis (each state's time: O(entries)) is the data's, made by its build off this thread and extended by
    // a growth (O(new entries)); until the data has it, the index axis.
    if (time && hasData() && m_data->timeAxis)
        m_axis = m_data->timeAxis;
    else
        m_axis = std::make_shared<const StateAxis>(StateAxis::index(n));
    // A growing (live) document's domain runs ahead of its data by LiveDomainAhead and grows in steps, so that the
    // columns of what is already drawn keep their states while entries arrive (the renderer renders only the new
    // ones). The columns beyond the data stay empty. Once it stops growing, the domain is the data's.
    double end = m_axis->domainEnd();
    if (m_session->isGrowing()) {
        if (change != AxisChange::Grown || m_liveDomainEnd < end)
            m_liveDomainEnd = m_axis->domainBegin() + (end - m_axis->domainBegin()) * LiveDomainAhead;
        end = m_liveDomainEnd;
    }
    m_geometry.setDomain(m_axis->domainBegin(), end, m_axis->isTime() ? 4.0 : std::min<double>(8.0, double(n + 1)));
    const QSignalBlocker block(m_timeButton);
    m_timeButton->setChecked(time);
    m_timeButton->setEnabled(!m_session->entries().empty());
}

void TimelineView::onTimeAxisChanged()
{
    // A time axis the data does not have yet is made by a build.
    const bool time = m_session && m_session->timeAxis() == TimeAxis::Time && !m_session->entries().empty();
    if (time && (!hasData() || !m_data->timeAxis) && !(m_buildWatcher && m_buildTimeAxis))
        startBuild(TimelineDataRequest::Axis);
    // Keep the same states in view.
    const auto [first, last] = visibleRange();
    const bool wasReset = m_geometry.isReset();
    rebuildAxis();
    if (!wasReset)
        m_geometry.setRange(m_axis->stateBegin(first),
                            last >= m_axis->entryCount() ? m_axis->domainEnd() : m_axis->stateBegin(last + 1));
    emitRangeIfChanged();
    update();
}

// ---- public API ---------------------------------------------------------------------------------------------------

void TimelineView::setShowSegments(bool on)
{
    if (on == m_showSegments)
        return;
    m_showSegments = on;
    {
        const QSignalBlocker block(m_segmentsButton);
        m_segmentsButton->setChecked(on);
    }
    m_hoverPiece = NoTimelineItem;
    m_hitGeneration = UINT64_MAX;
    update();
    Q_EMIT showSegmentsChanged(on);
}

void TimelineView::zoomToRange(int64_t first, int64_t last)
{
    if (first > last)
        std::swap(first, last);
    const double end = last >= m_axis->entryCount() ? m_axis->domainEnd() : m_axis->stateBegin(last + 1);
    setRange(m_axis->stateBegin(first), end);
}

std::pair<int64_t, int64_t> TimelineView::visibleRange() const
{
    const int64_t first = m_axis->stateAt(m_geometry.begin);
    const int64_t last = std::max(first, m_axis->statesBefore(m_geometry.end) - 1);
    return { first, std::min(last, m_axis->entryCount()) };
}

void TimelineView::resetZoom() { setRange(m_geometry.domainBegin, m_geometry.domainEnd); }

void TimelineView::setRange(double begin, double end)
{
    m_geometry.setRange(begin, end);
    emitRangeIfChanged();
    update();
}

void TimelineView::emitRangeIfChanged()
{
    const auto range = visibleRange();
    if (range == m_emittedRange)
        return;
    m_emittedRange = range;
    Q_EMIT visibleRangeChanged(range.first, range.second);
}

// ---- layout -------------------------------------------------------------------------------------------------------

void TimelineView::relayout()
{
    const QFontMetrics fm = fontMetrics();
    m_layout = TimelineLayout::compute(size(), fm.height(), fm.horizontalAdvance(QStringLiteral("1023.75 MiB")));
    m_layoutSize = size();
    m_geometry.rect = QRectF(m_layout.plot);
    const QSize hint = m_segmentsButton->sizeHint();
    const int h = std::min(hint.height(), m_layout.header.height() - 2);
    int x = m_layout.header.right() - 4;
    for (QToolButton* b : { m_segmentsButton, m_timeButton }) {
        const int w = b->sizeHint().width();
        x -= w;
        b->setGeometry(x, (m_layout.header.height() - h) / 2, w, h);
        x -= 4;
    }
}

void TimelineView::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    relayout();
}

void TimelineView::changeEvent(QEvent* event)
{
    QWidget::changeEvent(event);
    if (event->type() == QEvent::FontChange || event->type() == QEvent::StyleChange)
        relayout();
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::StyleChange)
        update(); // the plot key holds the palette, so the plot re-renders
}

// ---- hit testing --------------------------------------------------------------------------------------------------

TimelineFrame TimelineView::hitFrame()
{
    TimelineFrame f;
    f.axis = m_axis.get();
    f.geometry = &m_geometry;
    f.layout = m_layout;
    f.bounds = rect();
    f.palette = palette(); // the plot's key has its colours (isPlotCurrent)
    f.dpr = devicePixelRatioF();
    f.device = m_device;
    f.segments = m_showSegments;
    return f;
}

int64_t TimelineView::stateAtPixel(double x) const
{
    return m_axis->stateAt(m_geometry.coordAt(std::clamp<double>(x, m_layout.plot.left(), m_layout.plot.right() + 1)));
}

int64_t TimelineView::stateAtX(int x)
{
    finishDataBuild();
    if (!hasData())
        return -1;
    m_renderer.preparePlotNow(frame());
    if (!m_layout.plot.contains(QPoint(x, m_layout.plot.center().y())))
        return -1;
    const int column = m_renderer.columnAt(hitFrame(), x + 0.5);
    return column < 0 ? -1 : m_renderer.columns().state[size_t(column)];
}

TimelineView::Hit TimelineView::hitTest(QPoint pos)
{
    Hit hit;
    if (!m_session || !hasData() || !m_layout.plot.contains(pos))
        return hit;
    // The plot shown, as painted (moved onto the range while the range's own plot renders): what is under the
    // mouse is what the user sees there.
    const TimelineFrame f = hitFrame();
    const int column = m_renderer.columnAt(f, pos.x() + 0.5);
    if (column < 0)
        return hit;
    hit.state = m_renderer.columns().state[size_t(column)];
    const uint64_t generation = m_renderer.renderGeneration() ^ (uint64_t(m_showSegments) << 63);
    if (m_hitGeneration != generation) {
        m_hitStack.bind(&items(), visible());
        m_hitStack.reset(hit.state);
        m_hitGeneration = generation;
    } else if (hit.state != m_hitStack.state()) {
        if (hit.state > m_hitStack.state() && hit.state - m_hitStack.state() < 4096)
            m_hitStack.advanceTo(hit.state);
        else if (m_showSegments)
            m_hitStack.reset(hit.state);
        else {
            m_data->replay().liveAt(hit.state, m_live, m_liveScratch);
            m_liveItems.resize(m_live.size());
            std::transform(m_live.begin(), m_live.end(), m_liveItems.begin(), [](AllocationId a) { return raw(a); });
            m_hitStack.reset(hit.state, m_liveItems);
        }
    }
    // The byte at the middle of the pixel row, as the rasteriser rounds run boundaries to the nearest row.
    const double bytes = m_renderer.bytesAt(f, pos.y() + 0.5);
    ByteCount offset = 0;
    hit.item = m_hitStack.itemAt(ByteCount(std::floor(bytes)), &offset);
    if (hit.item == NoTimelineItem)
        return hit;
    if (!m_showSegments) {
        hit.allocation = AllocationId { hit.item };
        return hit;
    }
    // Segments mode: the allocation live at that address of the segment, if any.
    const Replay& replay = m_data->replay();
    const DeviceAddr address = replay.segmentPieces()[hit.item].address + (ByteCount(std::floor(bytes)) - offset);
    replay.liveAt(hit.state, m_live, m_liveScratch); // by address
    auto it = std::upper_bound(m_live.begin(), m_live.end(), address,
                               [&](DeviceAddr a, AllocationId id) { return a < replay.allocation(id).address; });
    if (it != m_live.begin()) {
        const Allocation& a = replay.allocation(*--it);
        if (address < a.address + a.size)
            hit.allocation = *it;
    }
    return hit;
}

void TimelineView::finishPlot()
{
    finishDataBuild();
    if (hasData())
        m_renderer.preparePlotNow(frame());
}

AllocationId TimelineView::allocationAt(QPoint pos)
{
    finishPlot();
    return hitTest(pos).allocation;
}

int64_t TimelineView::segmentPieceAt(QPoint pos)
{
    if (!m_showSegments)
        return -1;
    finishPlot();
    const Hit hit = hitTest(pos);
    return hit.item == NoTimelineItem ? -1 : int64_t(hit.item);
}

TimelineItem TimelineView::hoveredItem()
{
    if (m_showSegments)
        return m_hoverPiece;
    const AllocationId id = m_session ? m_session->hovered() : NoAllocation;
    return id == NoAllocation ? NoTimelineItem : raw(id);
}

TimelineItem TimelineView::selectedItem()
{
    const AllocationId id = m_session ? m_session->selection() : NoAllocation;
    if (id == NoAllocation || !hasData() || raw(id) >= m_data->allocs->count())
        return NoTimelineItem;
    if (!m_showSegments)
        return raw(id);
    return allocationPieces()[raw(id)];
}

void TimelineView::updateHover(QPoint pos)
{
    if (!m_session)
        return;
    const Hit hit = hitTest(pos);
    // Found in a plot rendered for another range (the range's own is under way): looked at again when it comes.
    m_hoverPos = pos;
    m_hoverStale = hasData() && !m_renderer.isPlotCurrent(hitFrame());
    if (m_showSegments && hit.item != m_hoverPiece) {
        m_hoverPiece = hit.item;
        update();
    }
    m_session->setHovered(hit.allocation);
}

void TimelineView::refreshHover()
{
    if (m_hoverStale && m_drag == Drag::None && m_layout.plot.contains(m_hoverPos))
        updateHover(m_hoverPos);
    m_hoverStale = false;
}

QString TimelineView::tooltipText(QPoint pos)
{
    if (!m_session)
        return {};
    if (m_layout.plot.contains(pos)) {
        const Hit hit = hitTest(pos);
        QString text;
        if (m_showSegments && hit.item != NoTimelineItem) {
            const SegmentPiece& p = m_data->replay().segmentPieces()[hit.item];
            text = tr("segment s%1: %2, stream %3, pool (%4, %5)%6\n")
                       .arg(QString::number(quint64(p.address), 16), Session::formatBytes(p.size))
                       .arg(m_session->snapshot().streamNumber(p.stream))
                       .arg(p.poolId.first)
                       .arg(p.poolId.second)
                       .arg(p.isExpandable ? tr(", expandable") : QString());
        }
        if (hit.allocation != NoAllocation) {
            const Allocation& a = m_data->replay().allocation(hit.allocation);
            text += m_session->allocationName(hit.allocation) % QLatin1String("  ") % Session::formatBytes(a.size)
                % QLatin1Char('\n')
                % (a.allocIndex < 0 ? tr("allocated before the trace") : tr("allocated at entry %1").arg(a.allocIndex))
                % QLatin1String(", ")
                % (a.freeCompletedIndex >= m_session->entryCount() ? tr("alive at the end")
                                                                   : tr("freed at entry %1").arg(a.freeCompletedIndex))
                % QLatin1Char('\n');
        }
        if (hit.state >= 0)
            text += tr("shown: state %1 (the column's largest total)\n").arg(hit.state);
        return text + QLatin1Char('\n') + helpText();
    }
    return helpText();
}

// ---- painting -----------------------------------------------------------------------------------------------------

TimelineFrame TimelineView::frame()
{
    // The widget's size now, even where its resize event is still pending (a hidden widget resized gets it when
    // shown): finishBuild() renders the plot a grab will paint.
    if (m_geometry.rect != QRectF(m_layout.plot) || m_layoutSize != size())
        relayout();
    TimelineFrame f;
    f.axis = m_axis.get();
    f.geometry = &m_geometry;
    f.layout = m_layout;
    f.bounds = rect();
    f.titleRight = m_timeButton->geometry().left() - 8;
    f.palette = palette();
    f.font = font();
    f.dpr = devicePixelRatioF();
    f.device = m_device;
    f.segments = m_showSegments;
    f.growing = m_session && m_session->isGrowing();
    f.cursor = m_session ? m_session->cursor() : -1;
    if (hasData()) {
        f.selected = selectedItem();
        f.hovered = hoveredItem();
    }
    return f;
}

void TimelineView::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    if (!m_session) {
        p.fillRect(rect(), palette().color(QPalette::Window));
        return;
    }
    m_renderer.paint(p, frame());
}

void TimelineView::onCursorChanged()
{
    // Only the strips the old and the new cursor cover: the cached plot is blitted there, nothing is re-rendered.
    if (!m_session)
        return;
    // A zoomed view follows the cursor when it leaves it (P, L, O, Home, End, the keys, the overview): the view pans
    // to put the cursor in its middle, keeping its width.
    if (!m_geometry.isReset() && m_axis) {
        const int64_t c = m_session->cursor();
        const double at = m_axis->stateBegin(c);
        const double stateEnd = c >= m_axis->entryCount() ? m_axis->domainEnd() : m_axis->stateBegin(c + 1);
        if (at < m_geometry.begin || stateEnd > m_geometry.end) {
            const double span = m_geometry.span();
            const double begin = std::clamp(at - span / 2, m_geometry.domainBegin, m_geometry.domainEnd - span);
            setRange(begin, begin + span);
            return; // setRange repaints everything
        }
    }
    const int64_t painted = m_renderer.paintedCursor();
    if (painted >= 0 && hasData()) {
        const TimelineFrame f = frame();
        update(m_renderer.cursorRegion(f, painted) + m_renderer.cursorRegion(f, m_session->cursor()));
    } else
        update();
}

// ---- input --------------------------------------------------------------------------------------------------------

bool TimelineView::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString text = tooltipText(help->pos());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), text, this);
        return true;
    }
    return QWidget::event(event);
}

void TimelineView::mousePressEvent(QMouseEvent* event)
{
    const QPoint pos = event->position().toPoint();
    m_pressPos = pos;
    m_dragMoved = false;
    m_pressBegin = m_geometry.begin;
    m_pressEnd = m_geometry.end;
    m_drag = Drag::None;
    const bool left = event->button() == Qt::LeftButton;
    const bool panButton = event->button() == Qt::RightButton || event->button() == Qt::MiddleButton
        || (left && (event->modifiers() & Qt::ShiftModifier));
    if (m_layout.plot.contains(pos) || m_layout.xAxis.contains(pos)) {
        if (panButton) {
            m_drag = Drag::Pan;
            setCursor(Qt::ClosedHandCursor);
        } else if (left && m_session) {
            m_drag = Drag::Scrub;
            m_session->setCursor(stateAtPixel(pos.x() + 0.5));
        }
    } else if (m_layout.overview.adjusted(-EdgeGrab, 0, EdgeGrab, 0).contains(pos) && left) {
        const double b0 = TimelineRenderer::overviewX(m_layout.overview, m_geometry, m_geometry.begin),
                     b1 = std::max(TimelineRenderer::overviewX(m_layout.overview, m_geometry, m_geometry.end), b0 + 3);
        m_pressCoord = TimelineRenderer::overviewCoord(m_layout.overview, m_geometry, pos.x());
        if (std::abs(pos.x() - b0) <= EdgeGrab)
            m_drag = Drag::BrushLeft;
        else if (std::abs(pos.x() - b1) <= EdgeGrab)
            m_drag = Drag::BrushRight;
        else if (pos.x() > b0 && pos.x() < b1)
            m_drag = Drag::BrushMove;
        else
            m_drag = Drag::BrushNew;
    }
    event->accept();
}

void TimelineView::mouseMoveEvent(QMouseEvent* event)
{
    const QPoint pos = event->position().toPoint();
    if (m_drag != Drag::None && (pos - m_pressPos).manhattanLength() >= ClickSlop)
        m_dragMoved = true;
    switch (m_drag) {
    case Drag::Scrub:
        if (m_session)
            m_session->setCursor(stateAtPixel(pos.x() + 0.5));
        break;
    case Drag::Pan: {
        const double delta
            = double(m_pressPos.x() - pos.x()) / std::max(m_layout.plot.width(), 1) * (m_pressEnd - m_pressBegin);
        setRange(m_pressBegin + delta, m_pressEnd + delta);
        break;
    }
    case Drag::BrushMove: {
        const double delta = TimelineRenderer::overviewCoord(m_layout.overview, m_geometry, pos.x()) - m_pressCoord;
        const double width = m_pressEnd - m_pressBegin;
        const double first = std::clamp(m_pressBegin + delta, m_geometry.domainBegin, m_geometry.domainEnd - width);
        setRange(first, first + width);
        break;
    }
    case Drag::BrushLeft:
        setRange(std::min(TimelineRenderer::overviewCoord(m_layout.overview, m_geometry, pos.x()),
                          m_pressEnd - m_geometry.minSpan),
                 m_pressEnd);
        break;
    case Drag::BrushRight:
        setRange(m_pressBegin,
                 std::max(TimelineRenderer::overviewCoord(m_layout.overview, m_geometry, pos.x()),
                          m_pressBegin + m_geometry.minSpan));
        break;
    case Drag::BrushNew:
        if (m_dragMoved)
            setRange(std::min(m_pressCoord, TimelineRenderer::overviewCoord(m_layout.overview, m_geometry, pos.x())),
                     std::max(m_pressCoord, TimelineRenderer::overviewCoord(m_layout.overview, m_geometry, pos.x())));
        break;
    case Drag::None:
        if (m_layout.plot.contains(pos)) {
            setCursor(Qt::CrossCursor);
            updateHover(pos);
        } else {
            m_hoverStale = false;
            if (m_session)
                m_session->setHovered(NoAllocation);
            if (m_showSegments && m_hoverPiece != NoTimelineItem) {
                m_hoverPiece = NoTimelineItem;
                update();
            }
            const double b0 = TimelineRenderer::overviewX(m_layout.overview, m_geometry, m_geometry.begin),
                         b1
                = std::max(TimelineRenderer::overviewX(m_layout.overview, m_geometry, m_geometry.end), b0 + 3);
            if (m_layout.overview.adjusted(-EdgeGrab, 0, EdgeGrab, 0).contains(pos)
                && (std::abs(pos.x() - b0) <= EdgeGrab || std::abs(pos.x() - b1) <= EdgeGrab))
                setCursor(Qt::SizeHorCursor);
            else if (m_layout.overview.contains(pos) && pos.x() > b0 && pos.x() < b1)
                setCursor(Qt::OpenHandCursor);
            else if (m_layout.xAxis.contains(pos))
                setCursor(Qt::SizeHorCursor);
            else
                unsetCursor();
        }
        break;
    }
    event->accept();
}

void TimelineView::mouseReleaseEvent(QMouseEvent* event)
{
    const QPoint pos = event->position().toPoint();
    if (m_drag == Drag::Scrub && !m_dragMoved && m_layout.plot.contains(pos) && m_session) {
        // A click pins what is under it (and clears the pin on empty space).
        m_session->setSelection(hitTest(pos).allocation);
    } else if (m_drag == Drag::BrushNew && !m_dragMoved) {
        const double width = m_geometry.span();
        const double centre = TimelineRenderer::overviewCoord(m_layout.overview, m_geometry, pos.x());
        setRange(centre - width / 2, centre + width / 2);
    }
    if (m_drag == Drag::Pan)
        setCursor(Qt::CrossCursor);
    m_drag = Drag::None;
    event->accept();
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent* event)
{
    const QPoint pos = event->position().toPoint();
    if (event->button() == Qt::LeftButton
        && (m_layout.plot.contains(pos) || m_layout.overview.contains(pos) || m_layout.xAxis.contains(pos))) {
        resetZoom();
        m_drag = Drag::None;
    }
    event->accept();
}

void TimelineView::wheelEvent(QWheelEvent* event)
{
    const QPointF pos = event->position();
    const QPoint delta = event->angleDelta();
    const bool overPlot = m_layout.plot.contains(pos.toPoint()) || m_layout.xAxis.contains(pos.toPoint());
    const bool overOverview = m_layout.overview.contains(pos.toPoint());
    if (!overPlot && !overOverview) {
        event->ignore();
        return;
    }
    if (delta.y() != 0) {
        const double anchor = overPlot ? m_geometry.coordAt(pos.x()) : (m_geometry.begin + m_geometry.end) / 2;
        m_geometry.zoomAround(anchor, std::pow(ZoomPerNotch, delta.y() / 120.0));
    }
    if (delta.x() != 0)
        m_geometry.panPixels(-delta.x() / 120.0 * m_layout.plot.width() / 10.0);
    emitRangeIfChanged();
    update();
    if (overPlot && m_drag == Drag::None)
        updateHover(pos.toPoint());
    event->accept();
}

void TimelineView::leaveEvent(QEvent* event)
{
    QWidget::leaveEvent(event);
    m_hoverStale = false;
    if (m_session)
        m_session->setHovered(NoAllocation);
    if (m_hoverPiece != NoTimelineItem) {
        m_hoverPiece = NoTimelineItem;
        update();
    }
}

void TimelineView::keyPressEvent(QKeyEvent* event)
{
    if (!m_session) {
        QWidget::keyPressEvent(event);
        return;
    }
    const auto [first, last] = visibleRange();
    const int64_t page = std::max<int64_t>(1, (last - first) / 10);
    const double anchor = m_axis->stateMarker(m_session->cursor());
    switch (event->key()) {
    case Qt::Key_Left:
        m_session->setCursor(m_session->cursor() - ((event->modifiers() & Qt::ShiftModifier) ? page : 1));
        break;
    case Qt::Key_Right:
        m_session->setCursor(m_session->cursor() + ((event->modifiers() & Qt::ShiftModifier) ? page : 1));
        break;
    case Qt::Key_Plus:
    case Qt::Key_Equal:
        m_geometry.zoomAround(anchor, 0.5);
        emitRangeIfChanged();
        update();
        break;
    case Qt::Key_Minus:
        m_geometry.zoomAround(anchor, 2.0);
        emitRangeIfChanged();
        update();
        break;
    case Qt::Key_0:
        resetZoom();
        break;
    default:
        QWidget::keyPressEvent(event);
        return;
    }
    event->accept();
}

void finishTimelineBuilds(QWidget* root)
{
    if (!root)
        return;
    if (auto* view = qobject_cast<TimelineView*>(root))
        view->finishBuild();
    for (TimelineView* view : root->findChildren<TimelineView*>())
        view->finishBuild();
}

} // namespace memscope::app
