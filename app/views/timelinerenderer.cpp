// Paints the memory timeline. See timelinerenderer.h.
#include "views/timelinerenderer.h"

#include "style/colors.h"

#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFuture>
#include <QFutureWatcher>
#include <QLocale>
#include <QPainter>
#include <QPainterPath>
#include <QStringBuilder>
#include <QThread>
#include <QThreadPool>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <mutex>

namespace memscope::app {

using namespace memscope::model;

namespace {

    // Threads that rasterise one plot (the columns are split between them).
    constexpr int MaxRenderThreads = 4;
    // Headroom above the largest visible total.
    constexpr double Headroom = 1.06;

    uint64_t hashName(const QString& s) { return qHash(s); }

    // The user-visible words are the timeline view's (one translation context for the widget and its painter).
    QString tr(const char* text) { return QCoreApplication::translate("memscope::app::TimelineView", text); }

} // namespace

// ---- rendering ----------------------------------------------------------------------------------------------------

namespace {

    // One per rendering thread: a stack positioned at its first column, and working memory.
    struct RenderPart {
        TimelineStack stack;
        TimelineRasterScratch scratch;
        std::vector<AllocationId> live, liveScratch;
        std::vector<TimelineItem> liveItems;
    };

} // namespace

// The rendering threads' working memory, kept between renders (a stack's vectors grow to the live items once): a
// render takes parts and gives them back. Shared with the jobs, which may outlive the renderer; any thread.
struct TimelineRenderParts {
    std::mutex mutex;
    std::vector<std::unique_ptr<RenderPart>> free;

    std::vector<std::unique_ptr<RenderPart>> take(int count)
    {
        std::vector<std::unique_ptr<RenderPart>> parts;
        {
            const std::lock_guard lock(mutex);
            while (int(parts.size()) < count && !free.empty()) {
                parts.push_back(std::move(free.back()));
                free.pop_back();
            }
        }
        while (int(parts.size()) < count)
            parts.push_back(std::make_unique<RenderPart>());
        return parts;
    }
    void giveBack(std::vector<std::unique_ptr<RenderPart>>& parts)
    {
        const std::lock_guard lock(mutex);
        for (auto& part : parts)
            if (free.size() < size_t(MaxRenderThreads))
                free.push_back(std::move(part));
        parts.clear();
    }
};

// Everything a render needs, copied on the GUI thread (the axis and the palette are the view's): a job reads only
// this, the immutable data it holds, and the document under its read lock.
struct TimelineRenderer::PlotRequest {
    PlotKey key;
    std::shared_ptr<const TimelineData> data;
    std::shared_ptr<TimelineRenderParts> parts;
    std::vector<int64_t> lo, hi; // the state range of each column with data
    // The entry count the ranges were made for: a live document's data may have grown by the time a job reads it
    // (in place, views/timelinedata.h), and the plot then shows this many entries (the next growth renders the rest).
    int64_t entries = 0;
    double headroom = Headroom;
    bool growing = false;
    double keptBytesTop = 0; // a live document's scale so far
    uint32_t background = 0, neutral = 0, pending = 0;
};

namespace {

    // The y scale of a plot whose largest total is `maxTotal`. A live document's scale keeps room to grow (up to
    // LiveBytesAhead × what its data needs), so that a new scale, which renders every column again, is rare; a
    // render of everything keeps that scale too when it fits.
    double plotBytesTop(ByteCount maxTotal, double headroom, bool growing, double kept)
    {
        const double needed = std::max(double(maxTotal) * headroom, 1024.0);
        if (!growing)
            return needed;
        return kept >= needed && kept <= needed * TimelineRenderer::LiveBytesAhead
            ? kept
            : needed * TimelineRenderer::LiveBytesAhead;
    }

    // Rasterises columns [from, columns.state.size()) of `image` and paints the columns past them (past the data)
    // in the background colour. Columns are independent given a stack at each part's first column: they are split
    // over the cores (this thread takes the first part and waits for the rest; an idle pool thread or this thread
    // itself runs them). A render of the new columns only is small: one part. Any thread.
    void rasterizeColumns(const TimelineData& data, bool segments, const TimelineColumns& columnsShown, QImage& image,
                          double bytesTop, uint32_t background, uint32_t neutral, uint32_t pending, int from,
                          TimelineRenderParts& pool)
    {
        TimelineRaster raster;
        raster.pixels = reinterpret_cast<uint32_t*>(image.bits());
        raster.stride = image.bytesPerLine() / 4;
        raster.width = image.width();
        raster.height = image.height();
        raster.bytesPerPixel = bytesTop / image.height();
        raster.background = background;
        raster.neutral = neutral;
        raster.pending = pending;
        const int width = image.width();
        const int columns = int(columnsShown.state.size());
        if (columns < width)
            for (int y = 0; y < image.height(); ++y)
                std::fill_n(raster.pixels + ptrdiff_t(y) * raster.stride + columns, width - columns, raster.background);
        const int parts = columns - from >= 256 ? std::clamp(QThread::idealThreadCount(), 1, MaxRenderThreads) : 1;
        auto taken = pool.take(parts);
        const TimelineItems& its = data.items(segments);
        const Replay& replay = data.replay();
        auto renderPart = [&](int i) {
            RenderPart& part = *taken[size_t(i)];
            const int begin = from + (columns - from) * i / parts, end = from + (columns - from) * (i + 1) / parts;
            if (begin >= end)
                return;
            part.stack.bind(&its, data.visible(segments), data.colors(segments));
            part.stack.setColours(tallBytes(raster), raster.neutral, raster.pending); // before stacking: no re-stack
            const int64_t state = columnsShown.state[size_t(begin)];
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
            rasterize(part.stack, columnsShown, raster, part.scratch, begin, end);
        };
        std::vector<QFuture<void>> futures;
        for (int i = 1; i < parts; ++i)
            futures.push_back(QtConcurrent::run(TimelineRenderer::threadPool(), renderPart, i));
        renderPart(0);
        for (QFuture<void>& f : futures)
            f.waitForFinished();
        pool.giveBack(taken);
    }

} // namespace

QThreadPool* TimelineRenderer::threadPool()
{
    // Not the global pool: Qt's raster engine splits a large fill over the global pool and waits for it (Qt 6.4's
    // qdrawhelper.cpp, QT_THREAD_PARALLEL_FILLS), so that a plot rendering there would hold up the GUI thread's own
    // paints until a thread came free.
    struct Pool : QThreadPool {
        Pool() { setMaxThreadCount(std::max(2, QThread::idealThreadCount())); }
    };
    static Pool pool;
    return &pool;
}

TimelineRenderer::TimelineRenderer()
    : m_parts(std::make_shared<TimelineRenderParts>())
{
}

// A job under way runs to its end (it holds what it reads); its watcher goes, so nothing is told of it.
TimelineRenderer::~TimelineRenderer() { delete m_job; }

TimelineRenderer::PlotKey TimelineRenderer::plotKey(const TimelineFrame& frame) const
{
    const TimelineGeometry& g = *frame.geometry;
    const QRect plot = frame.layout.plot;
    const qreal dpr = frame.dpr;
    const QSize pixels(std::max(1, int(std::lround(plot.width() * dpr))),
                       std::max(1, int(std::lround(plot.height() * dpr))));
    const QPalette& pal = frame.palette;
    return { g.begin,
             g.end,
             pixels,
             dpr,
             frame.device,
             frame.segments,
             frame.axis->isTime(),
             m_data->revision,
             pal.color(QPalette::Base).rgb(),
             pal.color(QPalette::Text).rgb() };
}

TimelineRenderer::PlotRequest TimelineRenderer::plotRequest(const TimelineFrame& frame, const PlotKey& key) const
{
    const TimelineGeometry& g = *frame.geometry;
    const StateAxis& axis = *frame.axis;
    PlotRequest r;
    r.key = key;
    r.data = m_data;
    r.parts = m_parts;
    r.entries = m_data->items(key.segments).entryCount;
    const int width = key.pixels.width();
    axis.columnRanges(g.begin, g.end, width, r.lo, r.hi);
    // Columns that begin past the data (a live domain runs ahead of it) show nothing.
    const double columnWidth = (g.end - g.begin) / width;
    size_t dataColumns = r.lo.size();
    while (dataColumns > 0 && g.begin + double(dataColumns - 1) * columnWidth >= axis.domainEnd())
        --dataColumns;
    r.lo.resize(dataColumns);
    r.hi.resize(dataColumns);
    // Headroom above the largest total; with annotations or OOMs, enough for their label rows too, so that the
    // labels never cover the data.
    const QRect plot = frame.layout.plot;
    if (!m_data->annotations->empty() || !m_data->ooms.empty()) {
        const double reserved = LabelRows * (QFontMetrics(frame.font).height() + 3) + 6;
        r.headroom = std::max(r.headroom, plot.height() / std::max(1.0, plot.height() - reserved));
    }
    r.growing = frame.growing;
    r.keptBytesTop = g.bytesTop;
    const QColor base = frame.palette.color(QPalette::Base), text = frame.palette.color(QPalette::Text);
    r.background = base.rgb();
    r.neutral = colors::mix(base, text, 0.45).rgb();
    r.pending = colors::pendingFree().rgb();
    return r;
}

TimelineRenderer::Plot TimelineRenderer::renderPlot(PlotRequest request)
{
    QElapsedTimer timer;
    timer.start();
    const TimelineData& data = *request.data;
    // A live document grows its replay in place, on the GUI thread, under its growth lock, and the timeline's data
    // with it under the data's own (views/timelinedata.h): the job holds both for reading while it reads, as the
    // data's build does, and flush() leaves what arrives queued for its next call meanwhile (document/livedocument.h),
    // the timeline's growth waits for the job to end, rather than change what is being read.
    const auto lock = data.document->readLock();
    const auto dataLock = data.readLock();
    const bool segments = request.key.segments;
    const TimelineItems& its = data.items(segments);
    Plot plot;
    plot.key = request.key;
    plot.valid = true;
    plot.entries = request.entries;
    plot.lo = std::move(request.lo);
    plot.hi = std::move(request.hi);
    sampleColumns(its, data.visible(segments), plot.lo, plot.hi, plot.columns, 0);
    plot.bytesTop = plotBytesTop(plot.columns.maxTotal, request.headroom, request.growing, request.keptBytesTop);
    plot.image = QImage(request.key.pixels, QImage::Format_RGB32);
    plot.image.setDevicePixelRatio(request.key.dpr);
    rasterizeColumns(data, segments, plot.columns, plot.image, plot.bytesTop, request.background, request.neutral,
                     request.pending, 0, *request.parts);
    plot.renderMs = double(timer.nsecsElapsed()) / 1e6;
    return plot;
}

// Only entries were appended since the plot shown was rendered, with the same key: the columns before the first
// whose state range changed are as they were (appending changes no earlier state), the others are rendered here.
// A live document's growth keeps this synchronous: it costs the new columns only (its domain runs ahead of the data,
// so the old columns keep their states, and its scale keeps room to grow), and this thread is the one that grows the
// replay, so that it reads it without a lock and the picture follows the data without a job's round trip.
void TimelineRenderer::growPlot(const TimelineFrame& frame)
{
    QElapsedTimer timer;
    timer.start();
    PlotRequest r = plotRequest(frame, m_shown.key);
    Plot& plot = m_shown;
    const TimelineItems& its = m_data->items(frame.segments);
    size_t first = 0;
    const size_t common = std::min(plot.lo.size(), r.lo.size());
    while (first < common && plot.lo[first] == r.lo[first] && plot.hi[first] == r.hi[first])
        ++first;
    plot.lo = std::move(r.lo);
    plot.hi = std::move(r.hi);
    sampleColumns(its, m_data->visible(frame.segments), plot.lo, plot.hi, plot.columns, first);
    const double bytesTop = plotBytesTop(plot.columns.maxTotal, r.headroom, r.growing, plot.bytesTop);
    if (bytesTop != plot.bytesTop)
        first = 0;
    plot.bytesTop = bytesTop;
    rasterizeColumns(*m_data, frame.segments, plot.columns, plot.image, plot.bytesTop, r.background, r.neutral,
                     r.pending, int(first), *m_parts);
    plot.entries = its.entryCount;
    plot.renderMs = double(timer.nsecsElapsed()) / 1e6;
    plot.firstColumn = int(first);
    ++m_renderCount;
    ++m_renderGeneration;
}

void TimelineRenderer::startJob(const TimelineFrame& frame, const PlotKey& key)
{
    dropJob();
    const uint64_t id = ++m_jobId;
    m_jobKey = key;
    auto* watcher = new QFutureWatcher<Plot>();
    m_job = watcher;
    QObject::connect(watcher, &QFutureWatcherBase::finished, watcher, [this, watcher, id] {
        // Stale (a newer key was asked for) or already shown by finishPlot(): dropped.
        if (id != m_jobId || watcher != m_job)
            return;
        Plot plot = watcher->future().takeResult();
        m_job = nullptr;
        watcher->deleteLater();
        show(std::move(plot));
        if (m_plotReady)
            m_plotReady();
    });
    watcher->setFuture(QtConcurrent::run(threadPool(), &TimelineRenderer::renderPlot, plotRequest(frame, key)));
}

// The job under way is superseded: it runs to its end (nothing waits for it), its result is dropped. Its watcher is
// cut off first: a finished notification already queued must not reach a renderer that may be gone by then.
void TimelineRenderer::dropJob()
{
    if (!m_job)
        return;
    ++m_jobId;
    QObject::disconnect(m_job, nullptr, nullptr, nullptr);
    m_job->deleteLater();
    m_job = nullptr;
}

void TimelineRenderer::finishPlot()
{
    if (!m_job)
        return;
    QFutureWatcher<Plot>* watcher = std::exchange(m_job, nullptr);
    QFuture<Plot> future = watcher->future();
    future.waitForFinished(); // runs the job here if no pool thread has taken it yet
    ++m_jobId;
    QObject::disconnect(watcher, nullptr, nullptr, nullptr); // its finished notification, if queued, is dropped
    watcher->deleteLater();
    show(future.takeResult());
}

void TimelineRenderer::show(Plot plot)
{
    m_shown = std::move(plot);
    ++m_renderCount;
    ++m_renderGeneration;
}

bool TimelineRenderer::hasPlot(const TimelineFrame& frame) const
{
    return m_shown.valid && m_shown.key.device == frame.device && m_shown.key.segments == frame.segments
        && m_shown.key.time == frame.axis->isTime();
}

bool TimelineRenderer::plotFits(const TimelineFrame& frame) const
{
    const PlotKey& key = m_shown.key;
    const TimelineGeometry& g = *frame.geometry;
    return key.begin == g.begin && key.end == g.end && key.dpr == frame.dpr
        && key.pixels.width() == std::max(1, int(std::lround(frame.layout.plot.width() * frame.dpr)))
        && key.pixels.height() == std::max(1, int(std::lround(frame.layout.plot.height() * frame.dpr)));
}

bool TimelineRenderer::isPlotCurrent(const TimelineFrame& frame) const
{
    return hasData(frame) && m_shown.valid && m_shown.key == plotKey(frame)
        && m_shown.entries == m_data->items(frame.segments).entryCount;
}

double TimelineRenderer::columnX(const TimelineFrame& frame, double column) const
{
    if (plotFits(frame))
        return frame.layout.plot.left() + column / frame.dpr;
    const PlotKey& key = m_shown.key;
    return frame.geometry->xAt(key.begin + column * (key.end - key.begin) / key.pixels.width());
}

int TimelineRenderer::columnAt(const TimelineFrame& frame, double x) const
{
    if (!hasPlot(frame))
        return -1;
    int column;
    if (plotFits(frame)) {
        column = int(std::floor((x - frame.layout.plot.left()) * frame.dpr));
    } else {
        // Where the plot shown is painted: its range mapped onto the frame's.
        const PlotKey& key = m_shown.key;
        column = int(std::floor((frame.geometry->coordAt(x) - key.begin) / (key.end - key.begin) * key.pixels.width()));
    }
    return column >= 0 && column < int(m_shown.columns.state.size()) ? column : -1;
}

double TimelineRenderer::bytesAt(const TimelineFrame& frame, double y) const
{
    TimelineGeometry g = *frame.geometry;
    g.bytesTop = m_shown.bytesTop;
    return g.bytesAt(y);
}

void TimelineRenderer::ensureOverview(const TimelineFrame& frame)
{
    const TimelineGeometry& g = *frame.geometry;
    const StateAxis& axis = *frame.axis;
    const QSize size = frame.layout.overview.size();
    const int64_t entries = m_data->items(frame.segments).entryCount; // as ensurePlot
    const bool same = size == m_overviewKeySize && frame.device == m_overviewKeyDevice
        && frame.segments == m_overviewKeySegments && axis.isTime() == m_overviewKeyTime
        && g.domainBegin == m_overviewKeyBegin && g.domainEnd == m_overviewKeyEnd;
    if (same && entries == m_overviewKeyEntries)
        return;
    m_overviewKeySize = size;
    m_overviewKeyDevice = frame.device;
    m_overviewKeySegments = frame.segments;
    m_overviewKeyTime = axis.isTime();
    m_overviewKeyBegin = g.domainBegin;
    m_overviewKeyEnd = g.domainEnd;
    m_overviewKeyEntries = entries;
    // ≈ one point per pixel: the largest value of each overview column (STYLE.md, charts reduced before painting).
    // Over the whole domain (a live one runs ahead of the data: columns past it stay 0). When only entries were
    // appended, the columns before the first whose state range changed keep their value.
    const ReplaySeries& series = m_data->replay().series();
    const auto& values = frame.segments ? series.reserved : series.active;
    std::vector<int64_t> lo, hi;
    const int width = std::max(size.width(), 1);
    axis.columnRanges(g.domainBegin, g.domainEnd, width, lo, hi);
    const double columnWidth = (g.domainEnd - g.domainBegin) / width;
    size_t first = 0;
    if (same && m_overviewLo.size() == lo.size())
        while (first < lo.size() && m_overviewLo[first] == lo[first] && m_overviewHi[first] == hi[first])
            ++first;
    m_overview.resize(lo.size(), 0);
    std::array<ByteCount, PackedSeries::BlockSize> chunk; // the series is packed: read a block at a time
    for (size_t x = first; x < lo.size(); ++x) {
        ByteCount best = 0;
        if (g.domainBegin + double(x) * columnWidth < axis.domainEnd()) {
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

void TimelineRenderer::ensureOutline(const TimelineFrame& frame, Outline& outline, TimelineItem item)
{
    if (outline.item == item && outline.renderGeneration == m_renderGeneration)
        return;
    outline.item = item;
    outline.renderGeneration = m_renderGeneration;
    if (item == NoTimelineItem || item >= m_data->items(frame.segments).count())
        outline.offsets.clear();
    else
        itemOffsets(m_data->items(frame.segments), m_data->visible(frame.segments), item, m_shown.columns.state,
                    outline.offsets);
}

// ---- painting -----------------------------------------------------------------------------------------------------

void TimelineRenderer::prepare(const TimelineFrame& frame)
{
    if (!hasData(frame))
        return;
    const PlotKey key = plotKey(frame);
    if (m_shown.valid && key == m_shown.key) {
        dropJob(); // back to the plot shown (a zoom undone before its job ended)
        if (m_shown.entries < m_data->items(frame.segments).entryCount)
            growPlot(frame);
    } else if (!m_job || !(key == m_jobKey)) {
        startJob(frame, key);
    }
    if (hasPlot(frame))
        frame.geometry->bytesTop = m_shown.bytesTop;
    ensureOverview(frame);
}

void TimelineRenderer::preparePlotNow(const TimelineFrame& frame)
{
    if (!hasData(frame))
        return;
    const PlotKey key = plotKey(frame);
    if (!m_shown.valid || !(key == m_shown.key)) {
        if (m_job && key == m_jobKey) {
            finishPlot();
        } else {
            dropJob();
            show(renderPlot(plotRequest(frame, key)));
        }
    }
    prepare(frame); // the columns new entries changed, the y scale, the overview
}

void TimelineRenderer::paint(QPainter& p, const TimelineFrame& frame)
{
    const QPalette& pal = frame.palette;
    p.fillRect(frame.bounds, pal.color(QPalette::Window));
    if (!hasData(frame)) {
        paintBuilding(p, frame);
        return;
    }
    prepare(frame);
    const bool plotShown = hasPlot(frame);

    paintHeader(p, frame);
    if (plotShown) {
        paintPlot(p, frame);
        paintYAxis(p, frame);
    } else {
        paintBuilding(p, frame);
    }
    paintAnnotations(p, frame);

    if (plotShown) {
        p.save();
        p.setClipRect(frame.layout.plot);
        p.setRenderHint(QPainter::Antialiasing, true);
        ensureOutline(frame, m_selectOutline, frame.selected);
        paintOutline(p, frame, m_selectOutline, colors::selection(pal), 2.5);
        if (frame.hovered != frame.selected) {
            ensureOutline(frame, m_hoverOutline, frame.hovered);
            paintOutline(p, frame, m_hoverOutline, pal.color(QPalette::Text), 1.5);
        }
        p.restore();
    }

    p.setPen(pal.color(QPalette::Mid));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(frame.layout.plot).adjusted(-0.5, -0.5, 0.5, 0.5));
    paintXAxis(p, frame);
    paintOverview(p, frame);
    paintCursor(p, frame);
}

// The plot shown: as it is when it was rendered for this range and size; else moved and stretched onto the frame's
// range and the plot's size (what a zoom or pan shows until its plot comes), the background where it has nothing.
void TimelineRenderer::paintPlot(QPainter& p, const TimelineFrame& frame)
{
    const QRect plot = frame.layout.plot;
    if (plotFits(frame)) {
        p.drawImage(plot.topLeft(), m_shown.image);
        return;
    }
    p.fillRect(plot, frame.palette.color(QPalette::Base));
    const double x0 = columnX(frame, 0), x1 = columnX(frame, m_shown.key.pixels.width());
    p.save();
    p.setClipRect(plot);
    p.drawImage(QRectF(x0, plot.top(), x1 - x0, plot.height()), m_shown.image);
    p.restore();
}

QImage TimelineRenderer::render(const TimelineFrame& frame)
{
    QImage image(frame.bounds.size() * frame.dpr, QImage::Format_ARGB32_Premultiplied);
    image.setDevicePixelRatio(frame.dpr);
    image.fill(Qt::transparent);
    preparePlotNow(frame);
    QPainter p(&image);
    p.setFont(frame.font);
    p.setPen(frame.palette.color(QPalette::WindowText));
    p.translate(-frame.bounds.topLeft());
    paint(p, frame);
    return image;
}

// No data for the device yet (its first build is under way): the frame and the title, and a word in the plot, so
// that the view never flashes blank.
void TimelineRenderer::paintBuilding(QPainter& p, const TimelineFrame& frame)
{
    const QPalette& pal = frame.palette;
    p.fillRect(frame.layout.plot, pal.color(QPalette::Base));
    p.setPen(pal.color(QPalette::Mid));
    p.setBrush(Qt::NoBrush);
    p.drawRect(QRectF(frame.layout.plot).adjusted(-0.5, -0.5, 0.5, 0.5));
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(frame.layout.plot, Qt::AlignCenter, tr("Building the timeline…"));
}

void TimelineRenderer::paintHeader(QPainter& p, const TimelineFrame& frame)
{
    const QPalette& pal = frame.palette;
    QFont bold = frame.font;
    bold.setBold(true);
    p.setFont(bold);
    p.setPen(pal.color(QPalette::WindowText));
    const QString title = frame.segments ? tr("Active Cached Memory Timeline") : tr("Active Memory Timeline");
    QRect r = frame.layout.header.adjusted(8, 0, 0, 0);
    r.setRight(frame.titleRight);
    p.drawText(r, Qt::AlignVCenter | Qt::AlignLeft, title);
    const int titleWidth = QFontMetrics(bold).horizontalAdvance(title);
    p.setFont(frame.font);
    const QLocale locale;
    QString detail;
    if (frame.segments)
        detail = (m_data->pieces->count() == 1
                      ? tr("1 segment")
                      : tr("%1 segments").arg(locale.toString(qulonglong(m_data->pieces->count()))))
            + tr(", reserved bytes");
    else
        detail = (m_data->allocs->count() == 1
                      ? tr("1 allocation")
                      : tr("%1 allocations").arg(locale.toString(qulonglong(m_data->allocs->count()))))
            + tr(", block bytes");
    if (!m_data->allocVisible.empty() || !m_data->pieceVisible.empty())
        detail += tr(" (filtered)");
    if (!frame.segments && m_data->allocs->entryCount > 0) {
        // The replay puts the allocations alive before the trace's first entry first (model::Replay::allocations).
        const model::TimelineItems& items = *m_data->allocs;
        size_t before = 0;
        while (before < items.count() && items.begin[before] < 0)
            ++before;
        if (before > 0)
            detail += tr(" · %1 alive before the trace began").arg(locale.toString(qulonglong(before)));
    }
    if (hasPlot(frame))
        detail += tr(" · largest in view %1").arg(Session::formatBytes(m_shown.columns.maxTotal));
    if (!frame.segments && m_data->colorMode == ColorMode::Metadata && !m_data->metadataLegend.empty()) {
        // The legend instead: a swatch and the text of each metadata value, as many as fit.
        const QFontMetrics fm(frame.font);
        int x = r.left() + titleWidth + 12;
        const int box = fm.height() * 2 / 3;
        const size_t count = m_data->metadataLegend.size();
        for (size_t i = 0; i < count; ++i) {
            const auto& [text, rgb] = m_data->metadataLegend[i];
            const QString label = text.empty() ? tr("no metadata") : QString::fromStdString(text);
            const int w = box + 4 + fm.horizontalAdvance(label) + 12;
            const QString more = tr("+%1 more").arg(count - i);
            if (x + w + (i + 1 < count ? fm.horizontalAdvance(more) : 0) > r.right()) {
                p.setPen(pal.color(QPalette::PlaceholderText));
                p.drawText(QRect(x, r.top(), r.right() - x, r.height()), Qt::AlignVCenter | Qt::AlignLeft,
                           fm.elidedText(more, Qt::ElideRight, std::max(0, r.right() - x)));
                break;
            }
            p.fillRect(QRect(x, r.center().y() - box / 2, box, box), QColor::fromRgb(rgb));
            p.setPen(pal.color(QPalette::WindowText));
            p.drawText(QRect(x + box + 4, r.top(), w, r.height()), Qt::AlignVCenter | Qt::AlignLeft, label);
            x += w;
        }
        return;
    }
    p.setPen(pal.color(QPalette::PlaceholderText));
    p.drawText(r.adjusted(titleWidth + 12, 0, 0, 0), Qt::AlignVCenter | Qt::AlignLeft,
               QFontMetrics(frame.font).elidedText(detail, Qt::ElideRight, std::max(0, r.width() - titleWidth - 12)));
}

void TimelineRenderer::paintYAxis(QPainter& p, const TimelineFrame& frame)
{
    const TimelineGeometry& g = *frame.geometry;
    const QPalette& pal = frame.palette;
    const QRect plot = frame.layout.plot;
    const QFontMetrics fm(frame.font);
    const int maxCount = std::max(1, plot.height() / (fm.height() * 3));
    const auto values = ticks::bytes(g.bytesTop, maxCount);
    QColor grid = pal.color(QPalette::Text);
    grid.setAlpha(40);
    for (int64_t v : values) {
        const double y = std::round(g.yAt(double(v))) + 0.5;
        // 1-pixel fills, here and for other translucent rules: the raster engine fills a rectangle ~50× faster than
        // it strokes a translucent line (6 ms for this grid at 1920×1080).
        if (v != 0)
            p.fillRect(QRect(plot.left(), int(y), plot.width(), 1), grid);
        p.setPen(pal.color(QPalette::WindowText));
        const QRectF label(frame.layout.yAxis.left(), y - fm.height() / 2.0, frame.layout.yAxis.width() - 6,
                           fm.height());
        if (label.top() >= frame.layout.yAxis.top() - fm.height() / 2.0)
            p.drawText(label, Qt::AlignRight | Qt::AlignVCenter, ticks::bytesLabel(v));
    }
}

void TimelineRenderer::paintXAxis(QPainter& p, const TimelineFrame& frame)
{
    const TimelineGeometry& g = *frame.geometry;
    const QPalette& pal = frame.palette;
    const QRect axis = frame.layout.xAxis;
    const QFontMetrics fm(frame.font);
    const bool time = frame.axis->isTime();
    const double origin = frame.axis->domainBegin();
    // Fewer ticks until the widest label fits between neighbours.
    int maxCount = std::max(1, axis.width() / (fm.horizontalAdvance(QStringLiteral("888.88 ms")) + 24));
    std::vector<double> values;
    std::vector<QString> labels;
    for (int attempt = 0; attempt < 4; ++attempt) {
        values = time ? ticks::linear(g.begin, g.end, maxCount, origin)
                      : ticks::states(g.begin, g.end, maxCount, frame.axis->entryCount());
        const double step = values.size() > 1 ? values[1] - values[0] : g.span();
        labels.clear();
        int widest = 0;
        for (double v : values) {
            labels.push_back(time ? ticks::timeLabel(v, origin, step) : ticks::indexLabel(v));
            widest = std::max(widest, fm.horizontalAdvance(labels.back()));
        }
        const double pixelStep = step / g.span() * axis.width();
        if (pixelStep >= widest + 16 || maxCount == 1)
            break;
        maxCount = std::max(1, int(axis.width() / (widest + 16)));
    }
    p.setPen(pal.color(QPalette::WindowText));
    for (size_t i = 0; i < values.size(); ++i) {
        const double x = std::round(g.xAt(values[i])) + 0.5;
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
    p.drawText(QRect(0, axis.top() + 4, frame.layout.yAxis.width() - 6, fm.height()), Qt::AlignRight | Qt::AlignTop,
               time ? tr("time") : tr("entry"));
}

void TimelineRenderer::paintAnnotations(QPainter& p, const TimelineFrame& frame)
{
    const TimelineGeometry& g = *frame.geometry;
    const StateAxis& axis = *frame.axis;
    const QRect plot = frame.layout.plot;
    const QFontMetrics fm(frame.font);
    const bool time = axis.isTime();
    struct Label {
        double x;
        QString text;
        QColor color;
        bool oom;
    };
    std::vector<Label> labels;
    p.save();
    p.setClipRect(plot);
    // Bands: at most one per pixel column once they get thinner than a pixel (level of detail). When they average
    // under 4 pixels (a live job that opens a range per step has hundreds of thousands), translucent full-height
    // bands would only hide the plot, and thousands of full-height fills cost more than the plot itself: then each
    // range is a short tick along the plot's bottom edge instead, and the labels say which.
    struct Band {
        double x0, x1;
        const AnnotationSpan* span;
    };
    std::vector<Band> bands;
    int lastLeft = INT_MIN, lastRight = INT_MIN;
    for (const AnnotationSpan& span : *m_data->annotations) {
        const double c0 = time ? double(span.beginUs) : axis.stateBegin(span.begin);
        const double c1 = time ? double(span.endUs) : axis.stateBegin(span.end);
        const double x0 = g.xAt(c0), x1 = std::max(g.xAt(c1), x0 + 1);
        if (x1 < plot.left() || x0 > plot.right() + 1)
            continue;
        if (int(x0) == lastLeft && int(x1) <= lastRight + 1)
            continue;
        lastLeft = int(x0);
        lastRight = int(x1);
        bands.push_back({ x0, x1, &span });
    }
    const bool ticks = bands.size() > size_t(std::max(plot.width(), 0) / 4);
    constexpr int TickHeight = 5;
    int lastTick = INT_MIN;
    for (const Band& band : bands) {
        const QColor color = colors::categorical(hashName(band.span->name));
        QColor edge = color;
        edge.setAlpha(150);
        if (ticks) {
            const int x = int(std::round(band.x0));
            if (x != lastTick)
                p.fillRect(QRect(x, plot.bottom() + 1 - TickHeight, 1, TickHeight), edge);
            lastTick = x;
        } else {
            QColor fill = color;
            fill.setAlpha(34);
            p.fillRect(QRectF(band.x0, plot.top(), band.x1 - band.x0, plot.height()), fill);
            p.fillRect(QRect(int(std::round(band.x0)), plot.top(), 1, plot.height()), edge);
            if (band.span->end != band.span->begin)
                p.fillRect(QRect(int(std::round(band.x1)) - 1, plot.top(), 1, plot.height()), edge);
        }
        labels.push_back({ std::max(band.x0, double(plot.left())) + 3, band.span->name, color.darker(130), false });
    }
    // OOMs: a red line each, labelled.
    const QColor red = colors::oom();
    int lastOom = INT_MIN;
    for (int64_t index : m_data->ooms) {
        const double x = std::round(g.xAt(axis.stateMarker(index)));
        if (x < plot.left() || x > plot.right() + 1 || int(x) == lastOom)
            continue;
        lastOom = int(x);
        p.fillRect(QRect(int(x) - 1, plot.top(), 2, plot.height()), red);
        labels.push_back({ x + 3, tr("OOM"), red, true });
    }
    // Labels in rows along the top, never overlapping; those without room are left out (and never measured).
    std::stable_sort(labels.begin(), labels.end(), [](const Label& a, const Label& b) { return a.x < b.x; });
    std::vector<double> xs, widths(labels.size(), 0);
    xs.reserve(labels.size());
    for (const Label& l : labels)
        xs.push_back(l.x);
    const std::vector<int> rows = placeLabels(
        xs,
        [&](size_t i) {
            widths[i] = fm.horizontalAdvance(labels[i].text) + 6;
            return widths[i];
        },
        LabelRows, 4);
    const QPalette& pal = frame.palette;
    QColor box = pal.color(QPalette::Base);
    box.setAlpha(215);
    for (size_t i = 0; i < labels.size(); ++i) {
        if (rows[i] < 0)
            continue;
        const QRectF r(xs[i], plot.top() + 2 + rows[i] * (fm.height() + 3), widths[i], fm.height() + 1);
        p.fillRect(r, box);
        if (labels[i].oom) {
            QFont bold = frame.font;
            bold.setBold(true);
            p.setFont(bold);
        }
        p.setPen(labels[i].oom ? labels[i].color : pal.color(QPalette::Text));
        p.drawText(r, Qt::AlignCenter, labels[i].text);
        p.setFont(frame.font);
        p.fillRect(QRectF(r.left(), r.top(), 2, r.height()), labels[i].color);
    }
    p.restore();
}

void TimelineRenderer::paintOutline(QPainter& p, const TimelineFrame& frame, const Outline& outline,
                                    const QColor& color, qreal width)
{
    const TimelineGeometry& g = *frame.geometry;
    const StateAxis& axis = *frame.axis;
    if (outline.item == NoTimelineItem || outline.item >= m_data->items(frame.segments).count())
        return;
    const TimelineItems& its = m_data->items(frame.segments);
    const double size = double(its.size[outline.item]);
    QColor fill = color;
    fill.setAlpha(50);
    // A halo in the base colour under the line keeps it visible on any mix of allocation colours.
    QColor halo = frame.palette.color(QPalette::Base);
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
        const double x0 = columnX(frame, double(x)), x1 = columnX(frame, double(x + 1));
        const double yb = g.yAt(double(offsets[x])), yt = std::min(g.yAt(double(offsets[x]) + size), yb - 1);
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
    itemOffsets(its, m_data->visible(frame.segments), outline.item, std::span<const int64_t>(&state, 1), offset);
    if (offset.empty() || offset[0] < 0)
        return;
    const double x0 = g.xAt(axis.stateBegin(first));
    const double x1 = std::max(g.xAt(axis.stateBegin(int64_t(its.end[outline.item]) + 1)), x0 + 3);
    const double yb = g.yAt(double(offset[0]));
    const double yt = std::min(g.yAt(double(offset[0]) + size), yb - 3);
    draw(QPolygonF(QRectF(QPointF(x0, yt), QPointF(x1, yb))));
}

QString TimelineRenderer::cursorLabel(const TimelineFrame& frame, int64_t cursor) const
{
    const StateAxis& axis = *frame.axis;
    return axis.isTime()
        ? tr("%1 · %2").arg(cursor).arg(ticks::timeLabel(axis.stateBegin(cursor), axis.domainBegin(), 1000))
        : QString::number(cursor);
}

QRegion TimelineRenderer::cursorRegion(const TimelineFrame& frame, int64_t cursor) const
{
    const TimelineGeometry& g = *frame.geometry;
    const StateAxis& axis = *frame.axis;
    // What paintCursor touches: the line, its label on the x axis (kept inside the plot's width, so it may sit
    // up to its width away), and the tick on the overview.
    const int x = int(std::round(g.xAt(axis.stateMarker(cursor))));
    const int w = QFontMetrics(frame.font).horizontalAdvance(cursorLabel(frame, cursor)) + 12;
    const int ox = int(std::round(overviewX(frame.layout.overview, *frame.geometry, axis.stateMarker(cursor))));
    QRegion region(QRect(x - 2, frame.layout.plot.top(), 5, frame.layout.plot.height() + 1));
    region += QRect(x - w, frame.layout.xAxis.top(), 2 * w, frame.layout.xAxis.height());
    region += QRect(ox - 2, frame.layout.overview.top(), 5, frame.layout.overview.height() + 1);
    return region;
}

void TimelineRenderer::paintCursor(QPainter& p, const TimelineFrame& frame)
{
    const TimelineGeometry& g = *frame.geometry;
    const StateAxis& axis = *frame.axis;
    const QPalette& pal = frame.palette;
    const int64_t cursor = frame.cursor;
    m_paintedCursor = cursor;
    const QRect plot = frame.layout.plot;
    const double x = std::round(g.xAt(axis.stateMarker(cursor))) + 0.5;
    p.setRenderHint(QPainter::Antialiasing, false);
    if (x >= plot.left() && x <= plot.right() + 1) {
        p.setPen(QPen(colors::cursor(pal), 1));
        p.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom() + 1));
        // Its label sits on the x axis, over the tick labels.
        const QFontMetrics fm(frame.font);
        const QString label = cursorLabel(frame, cursor);
        const int w = fm.horizontalAdvance(label) + 8;
        const QRectF r(std::clamp(x - w / 2.0, double(plot.left()), double(plot.right() + 1 - w)),
                       frame.layout.xAxis.top() + 2, w, fm.height() + 2);
        p.fillRect(r, colors::cursor(pal));
        p.setPen(pal.color(QPalette::Base));
        p.drawText(r, Qt::AlignCenter, label);
    }
    // And a tick on the overview.
    const QRect ov = frame.layout.overview;
    const double ox = std::round(overviewX(frame.layout.overview, *frame.geometry, axis.stateMarker(cursor))) + 0.5;
    p.setPen(QPen(colors::cursor(pal), 1));
    p.drawLine(QPointF(ox, ov.top()), QPointF(ox, ov.bottom() + 1));
}

double TimelineRenderer::overviewX(const QRect& ov, const TimelineGeometry& g, double coord)
{
    return ov.left() + (coord - g.domainBegin) / (g.domainEnd - g.domainBegin) * ov.width();
}

double TimelineRenderer::overviewCoord(const QRect& ov, const TimelineGeometry& g, double x)
{
    return g.domainBegin + (x - ov.left()) / std::max(ov.width(), 1) * (g.domainEnd - g.domainBegin);
}

void TimelineRenderer::paintOverview(QPainter& p, const TimelineFrame& frame)
{
    const TimelineGeometry& g = *frame.geometry;
    const StateAxis& axis = *frame.axis;
    const QPalette& pal = frame.palette;
    const QRect ov = frame.layout.overview;
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
    for (int64_t index : m_data->ooms) {
        const double x = std::round(overviewX(frame.layout.overview, *frame.geometry, axis.stateMarker(index))) + 0.5;
        p.drawLine(QPointF(x, ov.top()), QPointF(x, ov.bottom() + 1));
    }
    // The brush: the visible range; what is outside it is dimmed.
    const double b0 = overviewX(frame.layout.overview, *frame.geometry, g.begin),
                 b1 = std::max(overviewX(frame.layout.overview, *frame.geometry, g.end), b0 + 3);
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
    const QFontMetrics fm(frame.font);
    p.drawText(QRect(0, ov.top(), frame.layout.yAxis.width() - 6, fm.height()), Qt::AlignRight | Qt::AlignTop,
               Session::formatBytes(m_overviewMax));
    p.drawText(QRect(0, ov.bottom() - fm.height(), frame.layout.yAxis.width() - 6, fm.height()),
               Qt::AlignRight | Qt::AlignBottom, frame.segments ? tr("reserved") : tr("active"));
}

} // namespace memscope::app
