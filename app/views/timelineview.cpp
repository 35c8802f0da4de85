// The memory timeline view. See timelineview.h for what it shows and how the mouse drives it.
#include "views/timelineview.h"

#include "style/colors.h"

#include <QElapsedTimer>
#include <QFuture>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QStringBuilder>
#include <QThread>
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
    // Rows of annotation labels at the top of the plot.
    constexpr int LabelRows = 3;
    // Threads that rasterise one plot (the columns are split between them).
    constexpr int MaxRenderThreads = 4;
    // Headroom above the largest visible total.
    constexpr double Headroom = 1.06;

    QString helpText()
    {
        return TimelineView::tr(
            "Left-drag: move the cursor · click: select the allocation · right-, middle- or "
            "Shift-drag: pan · wheel: zoom · double-click: show all\nOverview: drag the brush or its "
            "edges, or drag a new range");
    }

    uint64_t hashName(const QString& s) { return qHash(s); }

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
    connect(session, &Session::selectionChanged, this, qOverload<>(&QWidget::update));
    connect(session, &Session::hoveredChanged, this, qOverload<>(&QWidget::update));

    onDeviceChanged();
}

// ---- data ---------------------------------------------------------------------------------------------------------

// What follows the item lists: colours for the items without one (one colour per allocation everywhere, by
// address: style/colors.h, as MemoryViz.js hashes block addresses), the segment each allocation starts in (lazily),
// annotations and OOM marks.
void TimelineView::itemsChanged(int64_t fromEntry)
{
    m_allocPiece.clear();
    m_allocPieceValid = false;
    fillColors();
    m_annotations = m_session->annotations();
    if (fromEntry == 0)
        m_ooms.clear();
    const std::vector<int64_t> more = m_session->oomIndices(fromEntry);
    m_ooms.insert(m_ooms.end(), more.begin(), more.end());
}

// Colours of the items that have none yet, by the Session's colour mode, as the segment map colours blocks: by
// address (MemoryViz.js), by stack, or by the stream of the segment holding the allocation.
void TimelineView::fillColors()
{
    const ColorMode mode = m_session->colorMode();
    const Replay& replay = m_session->replay();
    const Snapshot& snapshot = m_session->snapshot();
    const auto& pieces = replay.segmentPieces();
    auto streamRgb = [&](int64_t stream) { return colors::stream(snapshot.streamNumber(stream)).rgb(); };
    const size_t allocFrom = std::min(m_allocColors.size(), m_allocs.count());
    m_allocColors.resize(m_allocs.count());
    if (mode == ColorMode::Stream && allocFrom < m_allocs.count())
        allocationPieces();
    for (size_t k = allocFrom; k < m_allocs.count(); ++k) {
        switch (mode) {
        case ColorMode::Allocation:
            m_allocColors[k] = colors::allocation(m_allocs.address[k]).rgb();
            break;
        case ColorMode::Stack:
            m_allocColors[k] = colors::stack(replay.allocations()[k].stack).rgb();
            break;
        case ColorMode::Stream: {
            const TimelineItem piece = k < m_allocPiece.size() ? m_allocPiece[k] : NoTimelineItem;
            m_allocColors[k] = streamRgb(piece != NoTimelineItem ? pieces[piece].stream : 0);
            break;
        }
        }
    }
    const size_t pieceFrom = std::min(m_pieceColors.size(), m_pieces.count());
    m_pieceColors.resize(m_pieces.count());
    for (size_t k = pieceFrom; k < m_pieces.count(); ++k) {
        switch (mode) {
        case ColorMode::Allocation:
            m_pieceColors[k] = colors::allocation(m_pieces.address[k]).rgb();
            break;
        case ColorMode::Stack:
            m_pieceColors[k] = colors::stack(pieces[k].stack).rgb();
            break;
        case ColorMode::Stream:
            m_pieceColors[k] = streamRgb(pieces[k].stream);
            break;
        }
    }
}

void TimelineView::onColorModeChanged()
{
    if (!m_session)
        return;
    m_allocColors.clear();
    m_pieceColors.clear();
    fillColors();
    ++m_filterGeneration; // part of the plot's key: the plot is drawn again
    update();
}

void TimelineView::onDeviceChanged()
{
    if (!m_session)
        return;
    const Replay& replay = m_session->replay();
    m_device = m_session->device();
    m_allocs = TimelineItems::fromAllocations(replay);
    m_pieces = TimelineItems::fromSegments(replay);
    m_allocColors.clear();
    m_pieceColors.clear();
    itemsChanged();
    m_hoverPiece = NoTimelineItem;
    m_hoverOutline = {};
    m_selectOutline = {};
    m_hitGeneration = UINT64_MAX;
    m_plotValid = false;
    m_overviewKeyDevice = -1;
    onFilterChanged();
    rebuildAxis();
    m_geometry.reset();
    emitRangeIfChanged();
    update();
}

// A live document grew: the items are extended (O(live + new items)), the view keeps its zoom, and a view showing
// the end (or everything) slides along with the data.
void TimelineView::onGrown()
{
    if (!m_session)
        return;
    const auto [first, last] = visibleRange();
    const bool wasReset = m_geometry.isReset();
    const bool atEnd = last >= m_axis.entryCount();
    const double width = m_geometry.span();
    const Replay& replay = m_session->replay();
    const int64_t previous = m_allocs.entryCount;
    m_allocs.extendAllocations(replay); // items only append: their colours stay
    m_pieces.extendSegments(replay);
    itemsChanged(previous);
    m_hitGeneration = UINT64_MAX;
    // The plot stays valid: ensurePlot() renders only the columns the new entries changed (m_plotEntries tells).
    m_allocVisible.clear(); // sized by the item counts: made again by onFilterChanged
    m_pieceVisible.clear();
    onFilterChanged();
    rebuildAxis(AxisChange::Grown); // shows everything
    if (!wasReset) {
        if (atEnd)
            m_geometry.setRange(m_axis.domainEnd() - width, m_axis.domainEnd());
        else
            m_geometry.setRange(m_axis.stateBegin(first), m_axis.stateBegin(last + 1));
    }
    emitRangeIfChanged();
    update();
}

const std::vector<TimelineItem>& TimelineView::allocationPieces()
{
    if (!m_allocPieceValid && m_session) {
        m_allocPiece = pieceOfAllocations(m_session->replay());
        m_allocPieceValid = true;
    }
    return m_allocPiece;
}

void TimelineView::onFilterChanged()
{
    if (!m_session)
        return;
    m_annotations = m_session->annotations(); // torch.compile's may have been shown or hidden
    update();
    bool anyHidden = false;
    for (int64_t s : m_session->streams())
        anyHidden |= !m_session->isStreamVisible(s);
    for (const auto& pool : m_session->pools())
        anyHidden |= !m_session->isPoolVisible(pool);
    std::vector<uint8_t> allocVisible, pieceVisible;
    if (anyHidden) {
        // Few distinct (stream, pool) pairs: remember the last answer rather than look up two sets per item.
        struct Key {
            int64_t stream;
            std::pair<int64_t, int64_t> pool;
            bool operator==(const Key&) const = default;
        };
        Key lastKey { 0, { -1, -1 } };
        bool lastVisible = m_session->isStreamVisible(0) && m_session->isPoolVisible({ -1, -1 });
        auto visibleFor = [&](const Key& key) {
            if (!(key == lastKey)) {
                lastKey = key;
                lastVisible = m_session->isStreamVisible(key.stream) && m_session->isPoolVisible(key.pool);
            }
            return lastVisible;
        };
        const auto& pieces = m_session->replay().segmentPieces();
        pieceVisible.resize(pieces.size());
        for (size_t k = 0; k < pieces.size(); ++k)
            pieceVisible[k] = visibleFor({ pieces[k].stream, pieces[k].poolId });
        // An allocation's stream is its alloc entry's; its pool, and the stream of one alive before the trace,
        // come from the segment piece holding it.
        const auto& allocs = m_session->replay().allocations();
        const auto& entries = m_session->entries();
        const auto& holder = allocationPieces();
        const int64_t first = m_session->replay().firstEntry();
        allocVisible.resize(allocs.size());
        for (size_t k = 0; k < allocs.size(); ++k) {
            const TimelineItem piece = holder[k];
            Key key { 0, { 0, 0 } };
            if (piece != NoTimelineItem)
                key = { pieces[piece].stream, pieces[piece].poolId };
            const int64_t entry = first + allocs[k].allocIndex;
            if (allocs[k].allocIndex >= 0 && entry < int64_t(entries.size()))
                key.stream = entries[size_t(entry)].stream;
            allocVisible[k] = visibleFor(key);
        }
    }
    if (allocVisible == m_allocVisible && pieceVisible == m_pieceVisible)
        return;
    m_allocVisible = std::move(allocVisible);
    m_pieceVisible = std::move(pieceVisible);
    ++m_filterGeneration;
    m_hitGeneration = UINT64_MAX;
    update();
}

void TimelineView::rebuildAxis(AxisChange change)
{
    if (!m_session)
        return;
    const int64_t n = m_session->entryCount();
    const bool time = m_session->timeAxis() == TimeAxis::Time && !m_session->entries().empty();
    if (time && change == AxisChange::Grown && m_axis.isTime() && m_axis.entryCount() <= n) {
        std::vector<int64_t> more;
        more.reserve(size_t(n - m_axis.entryCount()));
        for (int64_t s = m_axis.entryCount() + 1; s <= n; ++s)
            more.push_back(m_session->timeUsAt(s));
        m_axis.appendTimes(more);
    } else if (time) {
        std::vector<int64_t> times(size_t(n) + 1);
        for (int64_t s = 0; s <= n; ++s)
            times[size_t(s)] = m_session->timeUsAt(s);
        m_axis = StateAxis::time(std::move(times));
    } else {
        m_axis = StateAxis::index(n);
    }
    // A growing (live) document's domain runs ahead of its data by LiveDomainAhead and grows in steps, so that the
    // columns of what is already drawn keep their states while entries arrive (ensurePlot renders only the new
    // ones). The columns beyond the data stay empty. Once it stops growing, the domain is the data's.
    double end = m_axis.domainEnd();
    if (m_session->isGrowing()) {
        if (change != AxisChange::Grown || m_liveDomainEnd < end)
            m_liveDomainEnd = m_axis.domainBegin() + (end - m_axis.domainBegin()) * LiveDomainAhead;
        end = m_liveDomainEnd;
    }
    m_geometry.setDomain(m_axis.domainBegin(), end, time ? 4.0 : std::min<double>(8.0, double(n + 1)));
    const QSignalBlocker block(m_timeButton);
    m_timeButton->setChecked(m_axis.isTime());
    m_timeButton->setEnabled(!m_session->entries().empty());
}

void TimelineView::onTimeAxisChanged()
{
    // Keep the same states in view.
    const auto [first, last] = visibleRange();
    const bool wasReset = m_geometry.isReset();
    rebuildAxis();
    if (!wasReset)
        m_geometry.setRange(m_axis.stateBegin(first),
                            last >= m_axis.entryCount() ? m_axis.domainEnd() : m_axis.stateBegin(last + 1));
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
    m_hoverOutline = {};
    m_selectOutline = {};
    m_hitGeneration = UINT64_MAX;
    update();
    Q_EMIT showSegmentsChanged(on);
}

void TimelineView::zoomToRange(int64_t first, int64_t last)
{
    if (first > last)
        std::swap(first, last);
    const double end = last >= m_axis.entryCount() ? m_axis.domainEnd() : m_axis.stateBegin(last + 1);
    setRange(m_axis.stateBegin(first), end);
}

std::pair<int64_t, int64_t> TimelineView::visibleRange() const
{
    const int64_t first = m_axis.stateAt(m_geometry.begin);
    const int64_t last = std::max(first, m_axis.statesBefore(m_geometry.end) - 1);
    return { first, std::min(last, m_axis.entryCount()) };
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

// ---- rendering ----------------------------------------------------------------------------------------------------

void TimelineView::ensurePlot()
{
    if (!m_session)
        return;
    if (m_geometry.rect != QRectF(m_layout.plot))
        relayout();
    const qreal dpr = devicePixelRatioF();
    const QRect plot = m_layout.plot;
    const QSize pixels(std::max(1, int(std::lround(plot.width() * dpr))),
                       std::max(1, int(std::lround(plot.height() * dpr))));
    const QPalette& pal = palette();
    const PlotKey key { m_geometry.begin,
                        m_geometry.end,
                        pixels,
                        dpr,
                        m_device,
                        m_showSegments,
                        m_axis.isTime(),
                        m_filterGeneration,
                        pal.color(QPalette::Base).rgb(),
                        pal.color(QPalette::Text).rgb() };
    // The entries the views were told of (Session::grown): a live document may have more already.
    const TimelineItems& its = items();
    const int64_t entries = its.entryCount;
    if (m_plotValid && key == m_plotKey && m_plotEntries == entries)
        return;

    QElapsedTimer timer;
    timer.start();
    std::vector<int64_t> lo, hi;
    m_axis.columnRanges(m_geometry.begin, m_geometry.end, pixels.width(), lo, hi);
    // Columns that begin past the data (a live domain runs ahead of it) show nothing.
    const double columnWidth = (m_geometry.end - m_geometry.begin) / pixels.width();
    size_t dataColumns = lo.size();
    while (dataColumns > 0 && m_geometry.begin + double(dataColumns - 1) * columnWidth >= m_axis.domainEnd())
        --dataColumns;
    lo.resize(dataColumns);
    hi.resize(dataColumns);
    // Only entries were appended since the last render, with the same range and everything else: the columns
    // before the first whose state range changed are as they were (appending changes no earlier state).
    size_t first = 0;
    const bool grownOnly = m_plotValid && key == m_plotKey && m_plotEntries < entries;
    if (grownOnly) {
        const size_t common = std::min(m_lo.size(), lo.size());
        while (first < common && m_lo[first] == lo[first] && m_hi[first] == hi[first])
            ++first;
    }
    m_lo = std::move(lo);
    m_hi = std::move(hi);
    sampleColumns(its, visible(), m_lo, m_hi, m_columns, first);
    // Headroom above the largest total; with annotations or OOMs, enough for their label rows too, so that the
    // labels never cover the data.
    double headroom = Headroom;
    if (!m_annotations.empty() || !m_ooms.empty()) {
        const double reserved = LabelRows * (fontMetrics().height() + 3) + 6;
        headroom = std::max(headroom, plot.height() / std::max(1.0, plot.height() - reserved));
    }
    // A live document's scale keeps room to grow (up to LiveBytesAhead × what its data needs), so that a new scale,
    // which renders every column again, is rare; a render of everything keeps that scale too when it fits.
    const double needed = std::max(double(m_columns.maxTotal) * headroom, 1024.0);
    double bytesTop = needed;
    if (m_session->isGrowing()) {
        const double kept = m_geometry.bytesTop;
        bytesTop = kept >= needed && kept <= needed * LiveBytesAhead ? kept : needed * LiveBytesAhead;
    }
    if (bytesTop != m_geometry.bytesTop)
        first = 0;
    m_geometry.bytesTop = bytesTop;

    if (m_plot.size() != pixels || m_plot.format() != QImage::Format_RGB32)
        m_plot = QImage(pixels, QImage::Format_RGB32);
    m_plot.setDevicePixelRatio(dpr);

    const QColor base = pal.color(QPalette::Base), text = pal.color(QPalette::Text);
    TimelineRaster raster;
    raster.pixels = reinterpret_cast<uint32_t*>(m_plot.bits());
    raster.stride = m_plot.bytesPerLine() / 4;
    raster.width = pixels.width();
    raster.height = pixels.height();
    raster.bytesPerPixel = m_geometry.bytesTop / pixels.height();
    raster.background = base.rgb();
    raster.neutral = colors::mix(base, text, 0.45).rgb();
    raster.pending = colors::pendingFree().rgb();
    // The columns past the data: background.
    const int width = pixels.width();
    const int columns = int(dataColumns);
    if (columns < width)
        for (int y = 0; y < pixels.height(); ++y)
            std::fill_n(raster.pixels + ptrdiff_t(y) * raster.stride + columns, width - columns, raster.background);

    // Columns are independent given a stack at each part's first column: split them over the cores (the GUI
    // thread takes the first part and waits for the rest; an idle pool thread or the GUI thread itself runs them).
    // A render of the new columns only is small: one part.
    const int from = int(first);
    const int parts = columns - from >= 256 ? std::clamp(QThread::idealThreadCount(), 1, MaxRenderThreads) : 1;
    while (int(m_parts.size()) < parts)
        m_parts.push_back(std::make_unique<RenderPart>());
    const Replay& replay = m_session->replay();
    const bool segments = m_showSegments;
    auto renderPart = [&, this](int i) {
        RenderPart& part = *m_parts[size_t(i)];
        const int begin = from + (columns - from) * i / parts, end = from + (columns - from) * (i + 1) / parts;
        if (begin >= end)
            return;
        part.stack.bind(&its, visible(), itemColors());
        part.stack.setColours(tallBytes(raster), raster.neutral, raster.pending); // before stacking: no re-stack
        const int64_t state = m_columns.state[size_t(begin)];
        if (segments) {
            part.stack.reset(state);
        } else {
            // The replay's checkpoints find the live set faster than a scan of every earlier allocation.
            replay.liveAt(state, part.live, part.liveScratch);
            part.liveItems.resize(part.live.size());
            std::transform(part.live.begin(), part.live.end(), part.liveItems.begin(),
                           [](AllocationId a) { return raw(a); });
            part.stack.reset(state, part.liveItems);
        }
        rasterize(part.stack, m_columns, raster, part.scratch, begin, end);
    };
    std::vector<QFuture<void>> futures;
    for (int i = 1; i < parts; ++i)
        futures.push_back(QtConcurrent::run(renderPart, i));
    renderPart(0);
    for (QFuture<void>& f : futures)
        f.waitForFinished();

    m_renderMs = double(timer.nsecsElapsed()) / 1e6;
    m_renderFirstColumn = from;
    ++m_renderCount;
    ++m_renderGeneration;
    m_plotKey = key;
    m_plotEntries = entries;
    m_plotValid = true;
}

void TimelineView::ensureOverview()
{
    if (!m_session)
        return;
    const QSize size = m_layout.overview.size();
    const int64_t entries = items().entryCount; // as ensurePlot
    const bool same = size == m_overviewKeySize && m_device == m_overviewKeyDevice
        && m_showSegments == m_overviewKeySegments && m_axis.isTime() == m_overviewKeyTime
        && m_geometry.domainBegin == m_overviewKeyBegin && m_geometry.domainEnd == m_overviewKeyEnd;
    if (same && entries == m_overviewKeyEntries)
        return;
    m_overviewKeySize = size;
    m_overviewKeyDevice = m_device;
    m_overviewKeySegments = m_showSegments;
    m_overviewKeyTime = m_axis.isTime();
    m_overviewKeyBegin = m_geometry.domainBegin;
    m_overviewKeyEnd = m_geometry.domainEnd;
    m_overviewKeyEntries = entries;
    // ≈ one point per pixel: the largest value of each overview column (STYLE.md, charts reduced before painting).
    // Over the whole domain (a live one runs ahead of the data: columns past it stay 0). When only entries were
    // appended, the columns before the first whose state range changed keep their value.
    const ReplaySeries& series = m_session->replay().series();
    const auto& values = m_showSegments ? series.reserved : series.active;
    std::vector<int64_t> lo, hi;
    const int width = std::max(size.width(), 1);
    m_axis.columnRanges(m_geometry.domainBegin, m_geometry.domainEnd, width, lo, hi);
    const double columnWidth = (m_geometry.domainEnd - m_geometry.domainBegin) / width;
    size_t first = 0;
    if (same && m_overviewLo.size() == lo.size())
        while (first < lo.size() && m_overviewLo[first] == lo[first] && m_overviewHi[first] == hi[first])
            ++first;
    m_overview.resize(lo.size(), 0);
    std::array<ByteCount, PackedSeries::BlockSize> chunk; // the series is packed: read a block at a time
    for (size_t x = first; x < lo.size(); ++x) {
        ByteCount best = 0;
        if (m_geometry.domainBegin + double(x) * columnWidth < m_axis.domainEnd()) {
            const int64_t end = std::min(hi[x], entries + 1);
            for (int64_t s = lo[x]; s < end; s += int64_t(chunk.size())) {
                const size_t count = size_t(std::min<int64_t>(end - s, int64_t(chunk.size())));
                values.read(size_t(s), count, chunk.data());
                best = std::max(best, *std::max_element(chunk.begin(), chunk.begin() + ptrdiff_t(count)));
            }
        }
        m_overview[x] = best;
    }
    m_overviewMax = m_overview.empty() ? 0 : *std::max_element(m_overview.begin(), m_overview.end());
    m_overviewLo = std::move(lo);
    m_overviewHi = std::move(hi);
}

void TimelineView::ensureOutline(Outline& outline, TimelineItem item)
{
    if (outline.item == item && outline.renderGeneration == m_renderGeneration)
        return;
    outline.item = item;
    outline.renderGeneration = m_renderGeneration;
    if (item == NoTimelineItem || item >= items().count())
        outline.offsets.clear();
    else
        itemOffsets(items(), visible(), item, m_columns.state, outline.offsets);
}

// ---- hit testing --------------------------------------------------------------------------------------------------

int TimelineView::columnAt(double x) const
{
    const int column = int(std::floor((x - m_layout.plot.left()) * devicePixelRatioF()));
    return column >= 0 && column < int(m_columns.state.size()) ? column : -1;
}

int64_t TimelineView::stateAtPixel(double x) const
{
    return m_axis.stateAt(m_geometry.coordAt(std::clamp<double>(x, m_layout.plot.left(), m_layout.plot.right() + 1)));
}

int64_t TimelineView::stateAtX(int x)
{
    ensurePlot();
    if (!m_layout.plot.contains(QPoint(x, m_layout.plot.center().y())))
        return -1;
    const int column = columnAt(x + 0.5);
    return column < 0 ? -1 : m_columns.state[size_t(column)];
}

TimelineView::Hit TimelineView::hitTest(QPoint pos)
{
    Hit hit;
    if (!m_session || !m_layout.plot.contains(pos))
        return hit;
    ensurePlot();
    const int column = columnAt(pos.x() + 0.5);
    if (column < 0)
        return hit;
    hit.state = m_columns.state[size_t(column)];
    const uint64_t generation = m_renderGeneration ^ (uint64_t(m_showSegments) << 63);
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
            m_session->replay().liveAt(hit.state, m_live, m_liveScratch);
            m_liveItems.resize(m_live.size());
            std::transform(m_live.begin(), m_live.end(), m_liveItems.begin(), [](AllocationId a) { return raw(a); });
            m_hitStack.reset(hit.state, m_liveItems);
        }
    }
    // The byte at the middle of the pixel row, as the rasteriser rounds run boundaries to the nearest row.
    const double bytes = m_geometry.bytesAt(pos.y() + 0.5);
    ByteCount offset = 0;
    hit.item = m_hitStack.itemAt(ByteCount(std::floor(bytes)), &offset);
    if (hit.item == NoTimelineItem)
        return hit;
    if (!m_showSegments) {
        hit.allocation = AllocationId { hit.item };
        return hit;
    }
    // Segments mode: the allocation live at that address of the segment, if any.
    const DeviceAddr address = m_pieces.address[hit.item] + (ByteCount(std::floor(bytes)) - offset);
    const Replay& replay = m_session->replay();
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

AllocationId TimelineView::allocationAt(QPoint pos) { return hitTest(pos).allocation; }

int64_t TimelineView::segmentPieceAt(QPoint pos)
{
    if (!m_showSegments)
        return -1;
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
    if (id == NoAllocation || raw(id) >= m_allocs.count())
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
    if (m_showSegments && hit.item != m_hoverPiece) {
        m_hoverPiece = hit.item;
        update();
    }
    m_session->setHovered(hit.allocation);
}

QString TimelineView::tooltipText(QPoint pos)
{
    if (!m_session)
        return {};
    if (m_layout.plot.contains(pos)) {
        const Hit hit = hitTest(pos);
        QString text;
        if (m_showSegments && hit.item != NoTimelineItem) {
            const SegmentPiece& p = m_session->replay().segmentPieces()[hit.item];
            text = tr("segment s%1: %2, stream %3, pool (%4, %5)%6\n")
                       .arg(QString::number(quint64(p.address), 16), Session::formatBytes(p.size))
                       .arg(m_session->snapshot().streamNumber(p.stream))
                       .arg(p.poolId.first)
                       .arg(p.poolId.second)
                       .arg(p.isExpandable ? tr(", expandable") : QString());
        }
        if (hit.allocation != NoAllocation) {
            const Allocation& a = m_session->replay().allocation(hit.allocation);
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

void TimelineView::paintEvent(QPaintEvent*)
{
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Window));
    if (!m_session)
        return;
    ensurePlot();
    ensureOverview();

    paintHeader(p);
    p.drawImage(m_layout.plot.topLeft(), m_plot);
    paintYAxis(p);
    paintAnnotations(p);

    p.save();
    p.setClipRect(m_layout.plot);
    p.setRenderHint(QPainter::Antialiasing, true);
    const TimelineItem selected = selectedItem();
    ensureOutline(m_selectOutline, selected);
    paintOutline(p, m_selectOutline, colors::selection(pal), 2.5);
    const TimelineItem hovered = hoveredItem();
    if (hovered != selected) {
        ensureOutline(m_hoverOutline, hovered);
        paintOutline(p, m_hoverOutline, pal.color(QPalette::Text), 1.5);
    }
    p.restore();

    p.setPen(pal.color(QPalette::Mid));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(m_layout.plot).adjusted(-0.5, -0.5, 0.5, 0.5));
    paintXAxis(p);
    paintOverview(p);
    paintCursor(p);
}

void TimelineView::paintHeader(QPainter& p)
{
    const QPalette& pal = palette();
    QFont bold = font();
    bold.setBold(true);
    p.setFont(bold);
    p.setPen(pal.color(QPalette::WindowText));
    const QString title = m_showSegments ? tr("Active Cached Memory Timeline") : tr("Active Memory Timeline");
    QRect r = m_layout.header.adjusted(8, 0, 0, 0);
    r.setRight(m_timeButton->geometry().left() - 8);
    p.drawText(r, Qt::AlignVCenter | Qt::AlignLeft, title);
    const int titleWidth = QFontMetrics(bold).horizontalAdvance(title);
    p.setFont(font());
    const QLocale locale;
    QString detail;
    if (m_showSegments)
        detail = (m_pieces.count() == 1 ? tr("1 segment")
                                        : tr("%1 segments").arg(locale.toString(qulonglong(m_pieces.count()))))
            + tr(", reserved bytes");
    else
        detail = (m_allocs.count() == 1 ? tr("1 allocation")
                                        : tr("%1 allocations").arg(locale.toString(qulonglong(m_allocs.count()))))
            + tr(", block bytes");
    if (!m_allocVisible.empty() || !m_pieceVisible.empty())
        detail += tr(" (filtered)");
    detail += tr(" · largest in view %1").arg(Session::formatBytes(m_columns.maxTotal));
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(r.adjusted(titleWidth + 12, 0, 0, 0), Qt::AlignVCenter | Qt::AlignLeft,
               fontMetrics().elidedText(detail, Qt::ElideRight, std::max(0, r.width() - titleWidth - 12)));
}

void TimelineView::paintYAxis(QPainter& p)
{
    const QPalette& pal = palette();
    const QRect plot = m_layout.plot;
    const QFontMetrics fm = fontMetrics();
    const int maxCount = std::max(1, plot.height() / (fm.height() * 3));
    const auto values = ticks::bytes(m_geometry.bytesTop, maxCount);
    QColor grid = pal.color(QPalette::Text);
    grid.setAlpha(40);
    for (int64_t v : values) {
        const double y = std::round(m_geometry.yAt(double(v))) + 0.5;
        // 1-pixel fills, here and for other translucent rules: the raster engine fills a rectangle ~50× faster than
        // it strokes a translucent line (6 ms for this grid at 1920×1080).
        if (v != 0)
            p.fillRect(QRect(plot.left(), int(y), plot.width(), 1), grid);
        p.setPen(pal.color(QPalette::WindowText));
        const QRectF label(m_layout.yAxis.left(), y - fm.height() / 2.0, m_layout.yAxis.width() - 6, fm.height());
        if (label.top() >= m_layout.yAxis.top() - fm.height() / 2.0)
            p.drawText(label, Qt::AlignRight | Qt::AlignVCenter, ticks::bytesLabel(v));
    }
}

void TimelineView::paintXAxis(QPainter& p)
{
    const QPalette& pal = palette();
    const QRect axis = m_layout.xAxis;
    const QFontMetrics fm = fontMetrics();
    const bool time = m_axis.isTime();
    const double origin = m_axis.domainBegin();
    // Fewer ticks until the widest label fits between neighbours.
    int maxCount = std::max(1, axis.width() / (fm.horizontalAdvance(QStringLiteral("888.88 ms")) + 24));
    std::vector<double> values;
    std::vector<QString> labels;
    for (int attempt = 0; attempt < 4; ++attempt) {
        values = ticks::linear(m_geometry.begin, m_geometry.end, maxCount, time ? origin : 0.0);
        const double step = values.size() > 1 ? values[1] - values[0] : m_geometry.span();
        labels.clear();
        int widest = 0;
        for (double v : values) {
            labels.push_back(time ? ticks::timeLabel(v, origin, step) : ticks::indexLabel(v));
            widest = std::max(widest, fm.horizontalAdvance(labels.back()));
        }
        const double pixelStep = step / m_geometry.span() * axis.width();
        if (pixelStep >= widest + 16 || maxCount == 1)
            break;
        maxCount = std::max(1, int(axis.width() / (widest + 16)));
    }
    p.setPen(pal.color(QPalette::WindowText));
    for (size_t i = 0; i < values.size(); ++i) {
        const double x = std::round(m_geometry.xAt(values[i])) + 0.5;
        if (x < axis.left() || x > axis.right() + 1)
            continue;
        p.drawLine(QPointF(x, axis.top()), QPointF(x, axis.top() + 4));
        const int w = fm.horizontalAdvance(labels[i]);
        // Centred under the tick, kept inside the axis (the unit's label sits left of it).
        const double left = std::clamp(x - w / 2.0, double(axis.left()), double(axis.right() + 1 - w));
        p.drawText(QRectF(left, axis.top() + 4, w + 2, fm.height()), Qt::AlignLeft | Qt::AlignTop, labels[i]);
    }
    // The unit, left of the first label position.
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(QRect(0, axis.top() + 4, m_layout.yAxis.width() - 6, fm.height()), Qt::AlignRight | Qt::AlignTop,
               time ? tr("time") : tr("entry"));
}

void TimelineView::paintAnnotations(QPainter& p)
{
    const QRect plot = m_layout.plot;
    const QFontMetrics fm = fontMetrics();
    const bool time = m_axis.isTime();
    struct Label {
        double x;
        QString text;
        QColor color;
        bool oom;
    };
    std::vector<Label> labels;
    p.save();
    p.setClipRect(plot);
    // Bands: at most one per pixel column once they get thinner than a pixel (level of detail).
    int lastLeft = INT_MIN, lastRight = INT_MIN;
    for (const AnnotationSpan& span : m_annotations) {
        const double c0 = time ? double(span.beginUs) : m_axis.stateBegin(span.begin);
        const double c1 = time ? double(span.endUs) : m_axis.stateBegin(span.end);
        const double x0 = m_geometry.xAt(c0), x1 = std::max(m_geometry.xAt(c1), x0 + 1);
        if (x1 < plot.left() || x0 > plot.right() + 1)
            continue;
        QColor color = colors::categorical(hashName(span.name));
        if (int(x0) == lastLeft && int(x1) <= lastRight + 1)
            continue;
        lastLeft = int(x0);
        lastRight = int(x1);
        QColor fill = color;
        fill.setAlpha(34);
        p.fillRect(QRectF(x0, plot.top(), x1 - x0, plot.height()), fill);
        QColor edge = color;
        edge.setAlpha(150);
        p.fillRect(QRect(int(std::round(x0)), plot.top(), 1, plot.height()), edge);
        if (span.end != span.begin)
            p.fillRect(QRect(int(std::round(x1)) - 1, plot.top(), 1, plot.height()), edge);
        labels.push_back({ std::max(x0, double(plot.left())) + 3, span.name, color.darker(130), false });
    }
    // OOMs: a red line each, labelled.
    const QColor red = colors::oom();
    int lastOom = INT_MIN;
    for (int64_t index : m_ooms) {
        const double x = std::round(m_geometry.xAt(m_axis.stateMarker(index)));
        if (x < plot.left() || x > plot.right() + 1 || int(x) == lastOom)
            continue;
        lastOom = int(x);
        p.fillRect(QRect(int(x) - 1, plot.top(), 2, plot.height()), red);
        labels.push_back({ x + 3, tr("OOM"), red, true });
    }
    // Labels in rows along the top, never overlapping; those without room are left out.
    std::stable_sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) { return a.x < b.x; });
    std::vector<double> xs, widths;
    for (const Label& l : labels) {
        xs.push_back(l.x);
        widths.push_back(fm.horizontalAdvance(l.text) + 6);
    }
    const std::vector<int> rows = placeLabels(xs, widths, LabelRows, 4);
    const QPalette& pal = palette();
    QColor box = pal.color(QPalette::Base);
    box.setAlpha(215);
    for (size_t i = 0; i < labels.size(); ++i) {
        if (rows[i] < 0)
            continue;
        const QRectF r(xs[i], plot.top() + 2 + rows[i] * (fm.height() + 3), widths[i], fm.height() + 1);
        p.fillRect(r, box);
        if (labels[i].oom) {
            QFont bold = font();
            bold.setBold(true);
            p.setFont(bold);
        }
        p.setPen(labels[i].oom ? labels[i].color : pal.color(QPalette::Text));
        p.drawText(r, Qt::AlignCenter, labels[i].text);
        p.setFont(font());
        p.fillRect(QRectF(r.left(), r.top(), 2, r.height()), labels[i].color);
    }
    p.restore();
}

void TimelineView::paintOutline(QPainter& p, const Outline& outline, const QColor& color, qreal width)
{
    if (outline.item == NoTimelineItem || outline.item >= items().count())
        return;
    const TimelineItems& its = items();
    const double size = double(its.size[outline.item]);
    const qreal dpr = devicePixelRatioF();
    const double left = m_layout.plot.left();
    QColor fill = color;
    fill.setAlpha(50);
    // A halo in the base colour under the line keeps it visible on any mix of allocation colours.
    QColor halo = palette().color(QPalette::Base);
    halo.setAlpha(230);
    const QPen haloPen(halo, width + 2.5), linePen(color, width);
    auto draw = [&](const auto& shape) {
        p.setBrush(Qt::NoBrush);
        p.setPen(haloPen);
        p.drawPolygon(shape);
        p.setBrush(fill);
        p.setPen(linePen);
        p.drawPolygon(shape);
    };
    // One polygon per run of consecutive columns showing the item; a vertex only where its offset changes.
    bool drawn = false;
    QPolygonF top, bottom;
    auto flush = [&] {
        if (top.isEmpty())
            return;
        QPolygonF shape = top;
        for (auto it = bottom.crbegin(); it != bottom.crend(); ++it)
            shape << *it;
        draw(shape);
        top.clear();
        bottom.clear();
        drawn = true;
    };
    const auto& offsets = outline.offsets;
    for (size_t x = 0; x < offsets.size(); ++x) {
        if (offsets[x] < 0) {
            flush();
            continue;
        }
        const double x0 = left + double(x) / dpr, x1 = left + double(x + 1) / dpr;
        const double yb = m_geometry.yAt(double(offsets[x])),
                     yt = std::min(m_geometry.yAt(double(offsets[x]) + size), yb - 1);
        if (!top.isEmpty() && x > 0 && offsets[x] == offsets[x - 1]) {
            top.back().setX(x1);
            bottom.back().setX(x1);
            continue;
        }
        top << QPointF(x0, yt) << QPointF(x1, yt);
        bottom << QPointF(x0, yb) << QPointF(x1, yb);
    }
    flush();
    if (drawn)
        return;
    // Shown in no column (it lives between two columns' chosen states): mark where it lived, at its first offset.
    const int64_t first = int64_t(its.begin[outline.item]) + 1;
    std::vector<ByteCount> offset;
    const int64_t state = first;
    itemOffsets(its, visible(), outline.item, std::span<const int64_t>(&state, 1), offset);
    if (offset.empty() || offset[0] < 0)
        return;
    const double x0 = m_geometry.xAt(m_axis.stateBegin(first));
    const double x1 = std::max(m_geometry.xAt(m_axis.stateBegin(int64_t(its.end[outline.item]) + 1)), x0 + 3);
    const double yb = m_geometry.yAt(double(offset[0]));
    const double yt = std::min(m_geometry.yAt(double(offset[0]) + size), yb - 3);
    draw(QPolygonF(QRectF(QPointF(x0, yt), QPointF(x1, yb))));
}

QString TimelineView::cursorLabel(int64_t cursor) const
{
    return m_axis.isTime()
        ? tr("%1 · %2").arg(cursor).arg(ticks::timeLabel(m_axis.stateBegin(cursor), m_axis.domainBegin(), 1000))
        : QString::number(cursor);
}

QRegion TimelineView::cursorRegion(int64_t cursor) const
{
    // What paintCursor touches: the line, its label on the x axis (kept inside the plot's width, so it may sit
    // up to its width away), and the tick on the overview.
    const int x = int(std::round(m_geometry.xAt(m_axis.stateMarker(cursor))));
    const int w = fontMetrics().horizontalAdvance(cursorLabel(cursor)) + 12;
    const int ox = int(std::round(overviewX(m_axis.stateMarker(cursor))));
    QRegion region(QRect(x - 2, m_layout.plot.top(), 5, m_layout.plot.height() + 1));
    region += QRect(x - w, m_layout.xAxis.top(), 2 * w, m_layout.xAxis.height());
    region += QRect(ox - 2, m_layout.overview.top(), 5, m_layout.overview.height() + 1);
    return region;
}

void TimelineView::onCursorChanged()
{
    // Only the strips the old and the new cursor cover: the cached plot is blitted there, nothing is re-rendered.
    if (!m_session)
        return;
    if (m_paintedCursor >= 0)
        update(cursorRegion(m_paintedCursor) + cursorRegion(m_session->cursor()));
    else
        update();
}

void TimelineView::paintCursor(QPainter& p)
{
    const QPalette& pal = palette();
    const int64_t cursor = m_session->cursor();
    m_paintedCursor = cursor;
    const QRect plot = m_layout.plot;
    const double x = std::round(m_geometry.xAt(m_axis.stateMarker(cursor))) + 0.5;
    p.setRenderHint(QPainter::Antialiasing, false);
    if (x >= plot.left() && x <= plot.right() + 1) {
        p.setPen(QPen(colors::cursor(pal), 1));
        p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom() + 1));
        // Its label sits on the x axis, over the tick labels.
        const QFontMetrics fm = fontMetrics();
        const QString label = cursorLabel(cursor);
        const int w = fm.horizontalAdvance(label) + 8;
        const QRectF r(std::clamp(x - w / 2.0, double(plot.left()), double(plot.right() + 1 - w)),
                       m_layout.xAxis.top() + 2, w, fm.height() + 2);
        p.fillRect(r, colors::cursor(pal));
        p.setPen(pal.color(QPalette::Base));
        p.drawText(r, Qt::AlignCenter, label);
    }
    // And a tick on the overview.
    const QRect ov = m_layout.overview;
    const double ox = std::round(overviewX(m_axis.stateMarker(cursor))) + 0.5;
    p.setPen(QPen(colors::cursor(pal), 1));
    p.drawLine(QPointF(ox, ov.top()), QPointF(ox, ov.bottom() + 1));
}

double TimelineView::overviewX(double coord) const
{
    const QRect ov = m_layout.overview;
    return ov.left() + (coord - m_geometry.domainBegin) / (m_geometry.domainEnd - m_geometry.domainBegin) * ov.width();
}

double TimelineView::overviewCoord(double x) const
{
    const QRect ov = m_layout.overview;
    return m_geometry.domainBegin
        + (x - ov.left()) / std::max(ov.width(), 1) * (m_geometry.domainEnd - m_geometry.domainBegin);
}

void TimelineView::paintOverview(QPainter& p)
{
    const QPalette& pal = palette();
    const QRect ov = m_layout.overview;
    p.fillRect(ov, pal.color(QPalette::Base));
    // The envelope, one step per column.
    if (!m_overview.empty() && m_overviewMax > 0) {
        QPolygonF shape;
        shape.reserve(qsizetype(m_overview.size()) * 2 + 2);
        const double scale = (ov.height() - 2) / double(m_overviewMax);
        const double bottom = ov.bottom() + 1;
        shape << QPointF(ov.left(), bottom);
        for (size_t x = 0; x < m_overview.size(); ++x) {
            const double y = bottom - double(m_overview[x]) * scale;
            shape << QPointF(ov.left() + double(x), y) << QPointF(ov.left() + double(x + 1), y);
        }
        shape << QPointF(ov.left() + double(m_overview.size()), bottom);
        QColor fill = colors::mix(pal.color(QPalette::Base), pal.color(QPalette::Text), 0.4);
        p.setPen(Qt::NoPen);
        p.setBrush(fill);
        p.drawPolygon(shape);
    }
    // OOM ticks.
    p.setPen(QPen(colors::oom(), 1));
    for (int64_t index : m_ooms) {
        const double x = std::round(overviewX(m_axis.stateMarker(index))) + 0.5;
        p.drawLine(QPointF(x, ov.top()), QPointF(x, ov.bottom() + 1));
    }
    // The brush: the visible range; what is outside it is dimmed.
    const double b0 = overviewX(m_geometry.begin), b1 = std::max(overviewX(m_geometry.end), b0 + 3);
    QColor dim = pal.color(QPalette::Window);
    dim.setAlpha(150);
    p.fillRect(QRectF(ov.left(), ov.top(), b0 - ov.left(), ov.height()), dim);
    p.fillRect(QRectF(b1, ov.top(), ov.right() + 1 - b1, ov.height()), dim);
    QColor brush = colors::selection(pal);
    QColor brushFill = brush;
    brushFill.setAlpha(40);
    p.setPen(QPen(brush, 1.5));
    p.setBrush(brushFill);
    p.drawRect(QRectF(b0, ov.top() + 0.75, b1 - b0, ov.height() - 1.5));
    // Grips on the edges.
    p.setBrush(brush);
    p.setPen(Qt::NoPen);
    for (double x : { b0, b1 })
        p.drawRect(QRectF(x - 2, ov.top() + ov.height() / 2.0 - 6, 4, 12));
    p.setPen(pal.color(QPalette::Mid));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(ov).adjusted(-0.5, -0.5, 0.5, 0.5));
    // Its scale, left of it.
    p.setPen(pal.color(QPalette::PlaceholderText));
    const QFontMetrics fm = fontMetrics();
    p.drawText(QRect(0, ov.top(), m_layout.yAxis.width() - 6, fm.height()), Qt::AlignRight | Qt::AlignTop,
               Session::formatBytes(m_overviewMax));
    p.drawText(QRect(0, ov.bottom() - fm.height(), m_layout.yAxis.width() - 6, fm.height()),
               Qt::AlignRight | Qt::AlignBottom, m_showSegments ? tr("reserved") : tr("active"));
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
        const double b0 = overviewX(m_geometry.begin), b1 = std::max(overviewX(m_geometry.end), b0 + 3);
        m_pressCoord = overviewCoord(pos.x());
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
        const double delta = overviewCoord(pos.x()) - m_pressCoord;
        const double width = m_pressEnd - m_pressBegin;
        const double first = std::clamp(m_pressBegin + delta, m_geometry.domainBegin, m_geometry.domainEnd - width);
        setRange(first, first + width);
        break;
    }
    case Drag::BrushLeft:
        setRange(std::min(overviewCoord(pos.x()), m_pressEnd - m_geometry.minSpan), m_pressEnd);
        break;
    case Drag::BrushRight:
        setRange(m_pressBegin, std::max(overviewCoord(pos.x()), m_pressBegin + m_geometry.minSpan));
        break;
    case Drag::BrushNew:
        if (m_dragMoved)
            setRange(std::min(m_pressCoord, overviewCoord(pos.x())), std::max(m_pressCoord, overviewCoord(pos.x())));
        break;
    case Drag::None:
        if (m_layout.plot.contains(pos)) {
            setCursor(Qt::CrossCursor);
            updateHover(pos);
        } else {
            if (m_session)
                m_session->setHovered(NoAllocation);
            if (m_showSegments && m_hoverPiece != NoTimelineItem) {
                m_hoverPiece = NoTimelineItem;
                update();
            }
            const double b0 = overviewX(m_geometry.begin), b1 = std::max(overviewX(m_geometry.end), b0 + 3);
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
        m_session->setSelection(allocationAt(pos));
    } else if (m_drag == Drag::BrushNew && !m_dragMoved) {
        const double width = m_geometry.span();
        const double centre = overviewCoord(pos.x());
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
    const double anchor = m_axis.stateMarker(m_session->cursor());
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

} // namespace memscope::app
