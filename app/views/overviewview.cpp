// OverviewView: series reduction (min/max per pixel column, the heaptrack rule of ≈1 point per pixel), the Qt Charts
// scene, the cursor line, scrubbing and zooming. GUI thread only; downsampleMinMax is pure.
#include "views/overviewview.h"

#include "style/colors.h"

#include <QChart>
#include <QChartView>
#include <QElapsedTimer>
#include <QEvent>
#include <QGraphicsLineItem>
#include <QLegend>
#include <QLineSeries>
#include <QMouseEvent>
#include <QTimer>
#include <QVBoxLayout>
#include <QValueAxis>
#include <QWheelEvent>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <utility>

namespace memscope::app {

using namespace memscope::model;

namespace overview {

    namespace {

        // values[first .. first + count) into out: a span's directly, a packed series' a block at a time.
        void load(std::span<const int64_t> values, size_t first, size_t count, int64_t* out)
        {
            std::copy_n(values.data() + first, count, out);
        }
        void load(const PackedSeries& values, size_t first, size_t count, int64_t* out)
        {
            values.read(first, count, out);
        }

        template <typename Values> void extendBlocks(MinMaxBlocks& blocks, const Values& values, size_t size)
        {
            // The last block may have been partial: redo it, then the new ones.
            const size_t from = blocks.minIndex.empty() ? 0 : blocks.minIndex.size() - 1;
            blocks.samples = size;
            const size_t count = (size + MinMaxBlocks::BlockSize - 1) / MinMaxBlocks::BlockSize;
            blocks.minIndex.resize(count);
            blocks.maxIndex.resize(count);
            blocks.minValue.resize(count);
            blocks.maxValue.resize(count);
            std::array<int64_t, MinMaxBlocks::BlockSize> chunk;
            for (size_t b = from; b < count; ++b) {
                const size_t begin = b * MinMaxBlocks::BlockSize;
                if constexpr (std::is_same_v<Values, PackedSeries>) {
                    // A sealed block of a packed series knows its own (the same blocks, the same first occurrences).
                    if (b < values.sealedBlocks()) {
                        blocks.minIndex[b] = uint32_t(values.blockMinIndex(b));
                        blocks.maxIndex[b] = uint32_t(values.blockMaxIndex(b));
                        blocks.minValue[b] = values.blockMin(b);
                        blocks.maxValue[b] = values.blockMax(b);
                        continue;
                    }
                }
                const size_t length = std::min(size - begin, size_t(MinMaxBlocks::BlockSize));
                load(values, begin, length, chunk.data());
                size_t lo = 0, hi = 0;
                for (size_t i = 1; i < length; ++i) {
                    if (chunk[i] < chunk[lo])
                        lo = i;
                    if (chunk[i] > chunk[hi])
                        hi = i;
                }
                blocks.minIndex[b] = uint32_t(begin + lo);
                blocks.maxIndex[b] = uint32_t(begin + hi);
                blocks.minValue[b] = chunk[lo];
                blocks.maxValue[b] = chunk[hi];
            }
        }

        template <typename Values>
        std::vector<SeriesPoint> downsample(const Values& values, size_t size, std::span<const int64_t> boundaries,
                                            const MinMaxBlocks* blocks)
        {
            std::vector<SeriesPoint> out;
            if (boundaries.size() < 2)
                return out;
            out.reserve((boundaries.size() - 1) * 2);
            const int64_t n = int64_t(size);
            constexpr int64_t B = MinMaxBlocks::BlockSize;
            for (size_t k = 0; k + 1 < boundaries.size(); ++k) {
                const int64_t begin = std::clamp<int64_t>(boundaries[k], 0, n);
                const int64_t end = std::clamp<int64_t>(boundaries[k + 1], 0, n);
                if (begin >= end)
                    continue;
                // Strict comparisons over ascending candidates keep the first occurrence, with or without blocks.
                // A block is its minimum for the low side and its maximum for the high one (first occurrences
                // each), read from the blocks so that a wide bucket walks them in order instead of jumping into the
                // values.
                int64_t lo = begin, hi = begin;
                int64_t loValue = values[size_t(begin)], hiValue = loValue;
                auto consider = [&](int64_t i) {
                    const int64_t v = values[size_t(i)];
                    if (v < loValue)
                        lo = i, loValue = v;
                    if (v > hiValue)
                        hi = i, hiValue = v;
                };
                if (blocks && end - begin > 2 * B && size_t(end) <= blocks->samples) {
                    const int64_t firstBlock = (begin + B - 1) / B, endBlock = end / B;
                    for (int64_t i = begin + 1; i < firstBlock * B; ++i)
                        consider(i);
                    for (int64_t b = firstBlock; b < endBlock; ++b) {
                        if (blocks->minValue[size_t(b)] < loValue)
                            lo = blocks->minIndex[size_t(b)], loValue = blocks->minValue[size_t(b)];
                        if (blocks->maxValue[size_t(b)] > hiValue)
                            hi = blocks->maxIndex[size_t(b)], hiValue = blocks->maxValue[size_t(b)];
                    }
                    for (int64_t i = std::max(endBlock * B, begin + 1); i < end; ++i)
                        consider(i);
                } else {
                    for (int64_t i = begin + 1; i < end; ++i)
                        consider(i);
                }
                const int64_t first = std::min(lo, hi), second = std::max(lo, hi);
                out.push_back({ first, values[size_t(first)] });
                if (second != first)
                    out.push_back({ second, values[size_t(second)] });
            }
            return out;
        }

    } // namespace

    MinMaxBlocks MinMaxBlocks::build(std::span<const int64_t> values)
    {
        MinMaxBlocks out;
        out.extend(values);
        return out;
    }

    MinMaxBlocks MinMaxBlocks::build(const PackedSeries& values)
    {
        MinMaxBlocks out;
        out.extend(values);
        return out;
    }

    void MinMaxBlocks::extend(std::span<const int64_t> values) { extendBlocks(*this, values, values.size()); }
    void MinMaxBlocks::extend(const PackedSeries& values) { extendBlocks(*this, values, values.size()); }

    std::vector<SeriesPoint> downsampleMinMax(std::span<const int64_t> values, std::span<const int64_t> boundaries,
                                              const MinMaxBlocks* blocks)
    {
        return downsample(values, values.size(), boundaries, blocks);
    }

    std::vector<SeriesPoint> downsampleMinMax(const PackedSeries& values, size_t count,
                                              std::span<const int64_t> boundaries, const MinMaxBlocks* blocks)
    {
        return downsample(values, std::min(count, values.size()), boundaries, blocks);
    }

    std::vector<int64_t> uniformBoundaries(int64_t begin, int64_t end, int buckets)
    {
        buckets = std::max(1, buckets);
        std::vector<int64_t> out(size_t(buckets) + 1);
        const int64_t length = std::max<int64_t>(0, end - begin);
        for (int k = 0; k <= buckets; ++k) // exact integer split: bucket sizes differ by at most one
            out[size_t(k)] = begin + int64_t((__int128(length) * k) / buckets);
        return out;
    }

} // namespace overview

namespace {

    // A round step near span / parts: 1, 2 or 5 times a power of ten.
    double niceStep(double span, int parts)
    {
        const double raw = std::max(span / std::max(1, parts), 1e-12);
        const double power = std::pow(10.0, std::floor(std::log10(raw)));
        for (double m : { 1.0, 2.0, 5.0, 10.0 })
            if (m * power >= raw)
                return m * power;
        return 10 * power;
    }

    constexpr double MiB = 1024.0 * 1024.0;
    constexpr double GiB = 1024.0 * MiB;

} // namespace

// The chart view with the overview's mouse handling: press/drag scrubs, the wheel zooms x, a double click resets.
class ScrubChartView : public QChartView {
public:
    ScrubChartView(QChart* chart, OverviewView* owner)
        : QChartView(chart, owner)
        , m_owner(owner)
    {
    }

protected:
    void mousePressEvent(QMouseEvent* event) override
    {
        if (event->button() != Qt::LeftButton)
            return QChartView::mousePressEvent(event);
        m_dragging = true;
        m_owner->scrubTo(event->position());
        event->accept();
    }
    void mouseMoveEvent(QMouseEvent* event) override
    {
        if (m_dragging && (event->buttons() & Qt::LeftButton)) {
            m_owner->scrubTo(event->position());
            event->accept();
            return;
        }
        QChartView::mouseMoveEvent(event);
    }
    void mouseReleaseEvent(QMouseEvent* event) override
    {
        if (event->button() == Qt::LeftButton && m_dragging) {
            m_dragging = false;
            event->accept();
            return;
        }
        QChartView::mouseReleaseEvent(event);
    }
    void mouseDoubleClickEvent(QMouseEvent* event) override
    {
        m_owner->showAll();
        event->accept();
    }
    void wheelEvent(QWheelEvent* event) override
    {
        const int delta = event->angleDelta().y();
        if (delta == 0)
            return QChartView::wheelEvent(event);
        m_owner->zoomAround(event->position(), std::pow(0.8, double(delta) / 120.0));
        event->accept();
    }
    void resizeEvent(QResizeEvent* event) override
    {
        QChartView::resizeEvent(event);
        m_owner->scheduleRefresh();
    }

private:
    OverviewView* m_owner;
    bool m_dragging = false;
};

OverviewView::OverviewView(Session* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
{
    m_chart = new QChart;
    m_chart->setAnimationOptions(QChart::NoAnimation);
    m_chart->setMargins(QMargins(4, 4, 8, 4));
    m_chart->legend()->setAlignment(Qt::AlignTop);

    auto makeSeries = [this](const QString& name) {
        auto* s = new QLineSeries(m_chart);
        s->setName(name);
        return s;
    };
    m_allocated = makeSeries(tr("allocated"));
    m_active = makeSeries(tr("active"));
    m_reserved = makeSeries(tr("reserved"));
    m_largestFree = makeSeries(tr("largest free block"));
    m_x = new QValueAxis(m_chart);
    m_y = new QValueAxis(m_chart);
    m_chart->addAxis(m_x, Qt::AlignBottom);
    m_chart->addAxis(m_y, Qt::AlignLeft);
    // Drawn in add order: active under allocated (they coincide unless blocks wait on record_stream).
    for (QLineSeries* s : { m_reserved, m_active, m_allocated, m_largestFree }) {
        m_chart->addSeries(s);
        s->attachAxis(m_x);
        s->attachAxis(m_y);
    }

    m_cursorLine = new QGraphicsLineItem(m_chart);
    m_cursorLine->setZValue(100);

    m_view = new ScrubChartView(m_chart, this);
    m_view->setObjectName(QStringLiteral("overviewChart"));
    m_view->setRenderHint(QPainter::Antialiasing);
    m_view->setMinimumHeight(160);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_view);

    connect(m_chart, &QChart::plotAreaChanged, this, [this](const QRectF& area) {
        if (int(area.width()) != m_refreshedWidth)
            scheduleRefresh();
        updateCursorLine();
    });
    connect(session, &Session::cursorChanged, this, &OverviewView::updateCursorLine);
    connect(session, &Session::deviceChanged, this, &OverviewView::rebuild);
    connect(session, &Session::grown, this, [this](int64_t previous) {
        if (!isVisible()) {
            m_grownWhileHidden = true; // charts cost: catch up when shown (showEvent)
            return;
        }
        takeInGrowth(previous);
    });
    connect(session, &Session::timeAxisChanged, this, &OverviewView::rebuild);
    // The largest free block comes with the replay's labels: its line is added, the range shown kept.
    connect(session, &Session::labelled, this, [this] {
        if (!isVisible()) {
            m_grownWhileHidden = true;
            return;
        }
        const double from = m_xMin, to = m_xMax;
        rebuild();
        m_xMin = from;
        m_xMax = to;
        refresh();
    });
    m_growthTimer = new QTimer(this);
    m_growthTimer->setSingleShot(true);
    connect(m_growthTimer, &QTimer::timeout, this, &OverviewView::applyGrowth);

    applyPalette();
    rebuild();
}

OverviewView::~OverviewView() = default;

double OverviewView::axisValueOf(int64_t stateIndex) const
{
    if (m_session->timeAxis() == TimeAxis::Index)
        return double(stateIndex);
    return double(m_session->timeUsAt(stateIndex) - m_session->timeUsAt(0)) / 1e6;
}

int64_t OverviewView::stateOfAxisValue(double x) const
{
    const int64_t n = m_session->entryCount();
    if (m_session->timeAxis() == TimeAxis::Index)
        return std::clamp<int64_t>(std::llround(x), 0, n);
    const double us = std::clamp(x * 1e6, -1e18, 1e18);
    return std::clamp<int64_t>(m_session->indexAtTimeUs(m_session->timeUsAt(0) + std::llround(us)), 0, n);
}

void OverviewView::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    if (std::exchange(m_grownWhileHidden, false))
        rebuild();
}

void OverviewView::rebuild()
{
    const int64_t n = m_session->entryCount();
    const ReplaySeries& s = m_session->replay().series();
    m_blocks.clear();
    for (const auto* v : { &s.allocated, &s.active, &s.reserved })
        m_blocks.push_back(overview::MinMaxBlocks::build(*v));
    // The largest free block comes with the replay's labels, a moment after a file opens (Session::labelled).
    if (const PackedSeries* largestFree = m_session->replay().largestFree())
        m_blocks.push_back(overview::MinMaxBlocks::build(*largestFree));
    m_largestFree->setName(m_blocks.size() == 4 ? tr("largest free block") : tr("largest free block (working it out)"));
    (void)n;
    updateTitles();
    showAll();
}

void OverviewView::updateTitles()
{
    const Replay& replay = m_session->replay();
    // One unit per device, so that zooming never changes it (the peaks are the series' maxima).
    const ByteCount peak
        = std::max({ replay.peakReserved().bytes, replay.peakActive().bytes, replay.peakAllocated().bytes });
    m_bytesPerUnit = double(peak) >= GiB ? GiB : MiB;
    m_y->setTitleText(m_bytesPerUnit == GiB ? tr("GiB") : tr("MiB"));
    m_x->setTitleText(m_session->timeAxis() == TimeAxis::Index ? tr("event index") : tr("time (s)"));
    m_chart->setTitle(m_session->entryCount() == 0 ? tr("GPU %1 (no trace recorded)").arg(m_session->device())
                                                   : tr("GPU %1").arg(m_session->device()));
}

void OverviewView::takeInGrowth(int64_t previous)
{
    const ReplaySeries& s = m_session->replay().series();
    const PackedSeries* largestFree = m_session->replay().largestFree(); // a live replay is labelled as it grows
    if (m_blocks.size() != (largestFree ? 4 : 3)) {
        rebuild();
        return;
    }
    size_t k = 0;
    for (const auto* v : { &s.allocated, &s.active, &s.reserved, largestFree })
        if (v)
            m_blocks[k++].extend(*v);
    updateTitles();
    // Keep a zoomed range; a view of everything goes on showing everything.
    if (!m_growthPending)
        m_growthShowsAll = m_xMin <= 0 && m_xMax >= axisValueOf(previous);
    m_growthPending = true;
    // A summary chart, and Qt Charts re-lays out every point of a series it is given: while a document grows, at
    // most every LiveRefreshMs (longer if a refresh costs more), and in an event of its own, so that the plots
    // beside it keep their frame rate and the growth they are told of costs what they take in.
    const qint64 due = std::max<qint64>(LiveRefreshMs, 4 * m_growthRefreshMs);
    const qint64 since = m_sinceGrowthRefresh.isValid() ? m_sinceGrowthRefresh.elapsed() : due;
    if (!m_growthTimer->isActive())
        m_growthTimer->start(int(std::max<qint64>(0, due - since)));
}

void OverviewView::applyGrowth()
{
    if (!std::exchange(m_growthPending, false))
        return;
    m_growthTimer->stop();
    QElapsedTimer cost;
    cost.start();
    if (m_growthShowsAll)
        showAll();
    else
        refresh();
    m_growthRefreshMs = cost.elapsed();
    m_sinceGrowthRefresh.start();
}

void OverviewView::showAll()
{
    const int64_t n = m_session->entryCount();
    m_xMin = 0;
    m_xMax = std::max(axisValueOf(n), m_session->timeAxis() == TimeAxis::Index ? 1.0 : 1e-3);
    refresh();
}

void OverviewView::zoomToStates(int64_t begin, int64_t end)
{
    const int64_t n = m_session->entryCount();
    begin = std::clamp<int64_t>(begin, 0, n);
    end = std::clamp<int64_t>(end, begin, n);
    m_xMin = axisValueOf(begin);
    m_xMax = std::max(axisValueOf(end), m_xMin + (m_session->timeAxis() == TimeAxis::Index ? 1.0 : 1e-6));
    refresh();
}

std::pair<int64_t, int64_t> OverviewView::visibleStates() const
{
    return { stateOfAxisValue(m_xMin), stateOfAxisValue(m_xMax) };
}

void OverviewView::zoomAround(QPointF viewportPos, double factor)
{
    const QRectF plot = m_chart->plotArea();
    if (plot.width() <= 0)
        return;
    const QPointF chartPos = m_chart->mapFromScene(m_view->mapToScene(viewportPos.toPoint()));
    const double frac = std::clamp((chartPos.x() - plot.left()) / plot.width(), 0.0, 1.0);
    const double anchor = m_xMin + frac * (m_xMax - m_xMin);
    const double fullMax = std::max(axisValueOf(m_session->entryCount()), 1e-3);
    const double minSpan = m_session->timeAxis() == TimeAxis::Index ? 8.0 : 1e-5;
    const double span = std::clamp((m_xMax - m_xMin) * factor, minSpan, fullMax);
    double lo = anchor - frac * span;
    lo = std::clamp(lo, 0.0, fullMax - span);
    m_xMin = lo;
    m_xMax = lo + span;
    refresh();
}

void OverviewView::scheduleRefresh()
{
    if (m_refreshPending)
        return;
    m_refreshPending = true;
    QTimer::singleShot(0, this, [this] {
        m_refreshPending = false;
        refresh();
    });
}

void OverviewView::refresh()
{
    const ReplaySeries& s = m_session->replay().series();
    // The states the views were told of: a live document may have grown since (Session::grown comes after).
    const int64_t samples = !m_blocks.empty() ? int64_t(m_blocks[0].samples) : int64_t(s.size());
    const int width = std::max(1, int(m_chart->plotArea().width()));
    m_refreshedWidth = int(m_chart->plotArea().width());

    // Bucket boundaries in state indices: one bucket per pixel column of the visible range.
    std::vector<int64_t> bounds;
    if (m_session->timeAxis() == TimeAxis::Index) {
        const int64_t begin = std::max<int64_t>(0, int64_t(std::floor(m_xMin)));
        const int64_t end = std::min<int64_t>(samples, int64_t(std::ceil(m_xMax)) + 1);
        bounds
            = overview::uniformBoundaries(begin, end, int(std::min<int64_t>(width, std::max<int64_t>(1, end - begin))));
    } else {
        bounds.resize(size_t(width) + 1);
        for (int k = 0; k <= width; ++k)
            bounds[size_t(k)] = stateOfAxisValue(m_xMin + (m_xMax - m_xMin) * k / width);
        bounds.back() = std::min<int64_t>(samples, bounds.back() + 1);
    }
    // One sample beyond each edge, so that the lines run to the plot's borders (the chart clips them).
    if (!bounds.empty()) {
        bounds.front() = std::max<int64_t>(0, bounds.front() - 1);
        bounds.back() = std::min<int64_t>(samples, bounds.back() + 1);
    }

    // Runs of equal values become one segment (fewer points, and no joint marks on flat lines).
    auto append = [](QList<QPointF>& list, QPointF p) {
        const qsizetype n = list.size();
        if (n >= 2 && list[n - 1].y() == p.y() && list[n - 2].y() == p.y())
            list.back().setX(p.x());
        else
            list.append(p);
    };
    // Draw steps (state i holds from its x until state i + 1's) where a slope would mislead: on the time axis,
    // where events are unevenly spaced, and wherever every sample has a pixel or more.
    const bool steps = m_session->timeAxis() == TimeAxis::Time
        || (bounds.size() >= 2 && bounds.back() - bounds.front() <= width + 2);
    double yMax = 0;
    auto fill = [&](QLineSeries* series, const PackedSeries& values, const overview::MinMaxBlocks& blocks) {
        const auto points = overview::downsampleMinMax(values, size_t(samples), bounds, &blocks);
        QList<QPointF> list;
        list.reserve(qsizetype(points.size()) * (steps ? 2 : 1) + 1);
        for (const overview::SeriesPoint& p : points) {
            const double x = axisValueOf(p.index), y = double(p.value) / m_bytesPerUnit;
            if (steps && !list.isEmpty())
                append(list, QPointF(x, list.back().y()));
            append(list, QPointF(x, y));
            if (x >= m_xMin && x <= m_xMax)
                yMax = std::max(yMax, y);
        }
        if (list.size() == 1) // a device without a trace: its one state, drawn across the axis
            list.append(QPointF(m_xMax, list.front().y()));
        series->replace(list);
    };
    fill(m_allocated, s.allocated, m_blocks[0]);
    fill(m_active, s.active, m_blocks[1]);
    fill(m_reserved, s.reserved, m_blocks[2]);
    if (const PackedSeries* largestFree = m_session->replay().largestFree(); largestFree && m_blocks.size() == 4)
        fill(m_largestFree, *largestFree, m_blocks[3]);
    else
        m_largestFree->clear();

    // Round ticks on both axes (dynamic ticks anchored at 0).
    // The axis makes one item per tick whenever its range or interval changes: change them in the order that never
    // asks for more ticks than either end state has (a grown live trace can widen the range 1000-fold at once).
    const double span = m_xMax - m_xMin;
    const double xStep
        = m_session->timeAxis() == TimeAxis::Index ? std::max(1.0, niceStep(span, 6)) : niceStep(span, 6);
    m_x->setTickType(QValueAxis::TicksDynamic);
    m_x->setTickAnchor(0);
    if (xStep >= m_x->tickInterval()) {
        m_x->setTickInterval(xStep);
        m_x->setRange(m_xMin, m_xMax);
    } else {
        m_x->setRange(m_xMin, m_xMax);
        m_x->setTickInterval(xStep);
    }
    m_x->setLabelFormat(m_session->timeAxis() == TimeAxis::Index || xStep >= 1 ? QStringLiteral("%.0f")
                            : xStep >= 0.1                                     ? QStringLiteral("%.1f")
                            : xStep >= 0.01                                    ? QStringLiteral("%.2f")
                                                                               : QStringLiteral("%.4f"));
    const double yStep = niceStep(yMax > 0 ? yMax * 1.05 : 1.0, 5);
    const double yTop = std::max(yStep, std::ceil(yMax * 1.05 / yStep) * yStep);
    m_y->setTickType(QValueAxis::TicksDynamic);
    m_y->setTickAnchor(0);
    if (yStep >= m_y->tickInterval()) {
        m_y->setTickInterval(yStep);
        m_y->setRange(0, yTop);
    } else {
        m_y->setRange(0, yTop);
        m_y->setTickInterval(yStep);
    }
    m_y->setLabelFormat(yStep >= 1         ? QStringLiteral("%.0f")
                            : yStep >= 0.1 ? QStringLiteral("%.1f")
                                           : QStringLiteral("%.2f"));
    updateCursorLine();
}

double OverviewView::viewportXOf(int64_t stateIndex) const
{
    const QRectF plot = m_chart->plotArea();
    const double span = std::max(m_xMax - m_xMin, 1e-12);
    const double x = plot.left() + (axisValueOf(stateIndex) - m_xMin) / span * plot.width();
    return m_view->mapFromScene(m_chart->mapToScene(QPointF(x, plot.center().y()))).x();
}

int64_t OverviewView::stateIndexAt(QPointF viewportPos) const
{
    const QRectF plot = m_chart->plotArea();
    if (plot.width() <= 0)
        return stateOfAxisValue(m_xMin);
    const QPointF chartPos = m_chart->mapFromScene(m_view->mapToScene(viewportPos.toPoint()));
    const double frac = std::clamp((chartPos.x() - plot.left()) / plot.width(), 0.0, 1.0);
    return stateOfAxisValue(m_xMin + frac * (m_xMax - m_xMin));
}

void OverviewView::scrubTo(QPointF viewportPos) { m_session->setCursor(stateIndexAt(viewportPos)); }

void OverviewView::updateCursorLine()
{
    const QRectF plot = m_chart->plotArea();
    const double x = axisValueOf(m_session->cursor());
    if (plot.width() <= 0 || x < m_xMin || x > m_xMax) {
        m_cursorLine->hide();
        return;
    }
    const double px = plot.left() + (x - m_xMin) / std::max(m_xMax - m_xMin, 1e-12) * plot.width();
    m_cursorLine->setLine(px, plot.top(), px, plot.bottom());
    m_cursorLine->show();
}

void OverviewView::applyPalette()
{
    const QPalette p = palette();
    const bool dark = p.color(QPalette::Window).lightness() < 128;
    m_chart->setTheme(dark ? QChart::ChartThemeDark : QChart::ChartThemeLight);
    // The theme sets its own backgrounds and series colours: take the window's colours and ours back.
    m_chart->setBackgroundBrush(p.color(QPalette::Window));
    m_chart->setBackgroundRoundness(0);
    m_chart->setPlotAreaBackgroundBrush(p.color(QPalette::Base));
    m_chart->setPlotAreaBackgroundVisible(true);
    m_chart->setTitleBrush(p.color(QPalette::WindowText));
    m_chart->legend()->setLabelColor(p.color(QPalette::WindowText));
    QFont title = font();
    title.setBold(true);
    m_chart->setTitleFont(title);
    const QColor grid = colors::freeSpace(p);
    for (QValueAxis* axis : { m_x, m_y }) {
        axis->setLabelsColor(p.color(QPalette::WindowText));
        axis->setTitleBrush(p.color(QPalette::WindowText));
        axis->setGridLineColor(grid.darker(dark ? 70 : 110));
        axis->setLinePenColor(p.color(QPalette::Mid));
        axis->setLabelsFont(font());
    }
    // Tableau 10 (as colors::categorical and MemoryViz.js).
    auto pen = [](QRgb rgb, double width, Qt::PenStyle style = Qt::SolidLine) {
        QPen out { QColor(rgb) };
        out.setWidthF(width);
        out.setStyle(style);
        return out;
    };
    m_reserved->setPen(pen(0x59a14f, 2.0));
    m_active->setPen(pen(0xf28e2c, 3.0));
    m_allocated->setPen(pen(0x4e79a7, 1.5));
    m_largestFree->setPen(pen(0xaf7aa1, 1.5, Qt::DashLine));
    QPen cursor(colors::cursor(p));
    cursor.setWidthF(1.5);
    m_cursorLine->setPen(cursor);
}

void OverviewView::changeEvent(QEvent* event)
{
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::FontChange) {
        applyPalette();
        updateCursorLine();
    }
}

} // namespace memscope::app
