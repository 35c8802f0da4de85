// The overview: a small Qt Charts line chart of the Session device's memory over its trace (allocated, active,
// reserved, largest free block; Replay::series()), with x = state index or seconds (Session::timeAxis) and y in
// MiB or GiB. Each series is reduced to the minimum and maximum of every pixel column's bucket (so no peak is lost)
// and reduced again on resize and zoom. A vertical line shows the Session cursor; pressing or dragging on the plot
// moves it (scrubbing); the wheel zooms the x axis around the mouse and a double click shows the whole trace.
// The chart follows the palette (light or dark theme). GUI thread only; the reduction is a pure function.
#pragma once

#include "document/session.h"

#include <QElapsedTimer>
#include <QWidget>

#include <cstdint>
#include <span>
#include <vector>

QT_BEGIN_NAMESPACE
class QChart;
class QTimer;
class QChartView;
class QGraphicsLineItem;
class QLineSeries;
class QValueAxis;
QT_END_NAMESPACE

namespace memscope::app {

namespace overview {

    struct SeriesPoint {
        int64_t index = 0; // state index
        int64_t value = 0;
        bool operator==(const SeriesPoint&) const = default;
    };

    // The index of the minimum and of the maximum (first occurrence) of every block of BlockSize samples, so that a
    // bucket of many samples costs its blocks plus two partial blocks instead of every sample. 24 bytes per block.
    struct MinMaxBlocks {
        // A packed series' block (model::PackedSeries keeps each sealed block's minimum and maximum).
        static constexpr int64_t BlockSize = model::PackedSeries::BlockSize;
        std::vector<uint32_t> minIndex, maxIndex;
        std::vector<int64_t> minValue, maxValue; // values[minIndex[b]], values[maxIndex[b]]
        size_t samples = 0; // the values it covers (a live document's series may have grown past them)
        static MinMaxBlocks build(std::span<const int64_t> values); // O(samples); any thread
        static MinMaxBlocks build(const model::PackedSeries& values);
        // The same as build(values) for `values` that grew (appended to) since this was built: O(new samples).
        void extend(std::span<const int64_t> values);
        void extend(const model::PackedSeries& values);
    };

    // Min/max reduction: for every bucket [boundaries[k], boundaries[k + 1]) (ascending state indices, clamped to
    // [0, values.size()]) emits the bucket's minimum and maximum samples (first occurrences), in index order (one
    // point when they are the same sample); empty buckets emit nothing. At most 2 × buckets points; every bucket's
    // true maximum and minimum are among them. `blocks` (built from the same values) only makes it faster: the
    // result is the same. Pure; any thread; O(samples covered), or O(blocks covered + 2 × BlockSize per bucket).
    std::vector<SeriesPoint> downsampleMinMax(std::span<const int64_t> values, std::span<const int64_t> boundaries,
                                              const MinMaxBlocks* blocks = nullptr);
    // The same over the first `count` values of a replay's series.
    std::vector<SeriesPoint> downsampleMinMax(const model::PackedSeries& values, size_t count,
                                              std::span<const int64_t> boundaries,
                                              const MinMaxBlocks* blocks = nullptr);

    // `buckets` + 1 boundaries splitting [begin, end) into buckets of (almost) equal length.
    std::vector<int64_t> uniformBoundaries(int64_t begin, int64_t end, int buckets);

} // namespace overview

class OverviewView : public QWidget {
    Q_OBJECT
public:
    explicit OverviewView(Session* session, QWidget* parent = nullptr);
    ~OverviewView() override;

    QChartView* chartView() const { return m_view; }
    QChart* chart() const { return m_chart; }
    // The series in legend order: allocated, active, reserved, largest free block.
    std::vector<QLineSeries*> series() const { return { m_allocated, m_active, m_reserved, m_largestFree }; }

    // The state index under a position of chartView()'s viewport (the x inside the plot area, clamped to it).
    int64_t stateIndexAt(QPointF viewportPos) const;
    // The viewport x of a state index (for tests and for the cursor line).
    double viewportXOf(int64_t stateIndex) const;

    // The visible x range, in state indices [begin, end]; zooming keeps at least a few states visible.
    std::pair<int64_t, int64_t> visibleStates() const;
    void zoomToStates(int64_t begin, int64_t end);
    void showAll();

    // Bytes per y axis unit (1 MiB or 1 GiB) now.
    double bytesPerUnit() const { return m_bytesPerUnit; }

protected:
    void changeEvent(QEvent* event) override;
    void showEvent(QShowEvent* event) override;

private:
    friend class ScrubChartView;
    double axisValueOf(int64_t stateIndex) const; // x axis value (index or seconds) of a state
    int64_t stateOfAxisValue(double x) const;
    void rebuild(); // device or time axis changed: reset the zoom and refresh
    void takeInGrowth(int64_t previous); // a live document grew: extend the blocks, keep a zoomed range
    void updateTitles(); // units from the device's peaks, axis titles, chart title
    void refresh(); // recompute the reduced series for the visible range and plot width
    void scheduleRefresh();
    void updateCursorLine();
    void applyPalette();
    void scrubTo(QPointF viewportPos);
    void zoomAround(QPointF viewportPos, double factor);

    Session* m_session;
    QChartView* m_view = nullptr;
    QChart* m_chart = nullptr;
    QLineSeries* m_allocated = nullptr;
    QLineSeries* m_active = nullptr;
    QLineSeries* m_reserved = nullptr;
    QLineSeries* m_largestFree = nullptr;
    QValueAxis* m_x = nullptr;
    QValueAxis* m_y = nullptr;
    QGraphicsLineItem* m_cursorLine = nullptr;
    std::vector<overview::MinMaxBlocks> m_blocks; // per series, in series() order, of the device shown
    double m_xMin = 0, m_xMax = 1; // visible x range, in axis units
    bool m_grownWhileHidden = false; // a live document grew while this view was hidden
    // Growth is shown at a pace (takeInGrowth): whether it is due, whether the view then shows everything, when it
    // was shown last and what that cost.
    static constexpr qint64 LiveRefreshMs = 100;
    void applyGrowth();
    QTimer* m_growthTimer = nullptr;
    bool m_growthPending = false;
    bool m_growthShowsAll = false;
    QElapsedTimer m_sinceGrowthRefresh;
    qint64 m_growthRefreshMs = 0;
    double m_bytesPerUnit = 1024.0 * 1024.0;
    int m_refreshedWidth = -1; // plot width the series were reduced for
    bool m_refreshPending = false;
};

} // namespace memscope::app
