// Paints the memory timeline from its data (views/timelinedata.h) and a frame (the axis, the geometry, the layout,
// palette, font, cursor, hovered and selected items) into any QPainter: the header's title, the plot, the axes,
// annotations and OOM marks, the outlines of the hovered and selected item, the cursor and the overview. No widget
// and no input: TimelineView owns one and asks it to paint; tests render it into a QImage.
//
// The plot is a cached QImage keyed by everything it depends on (range, size, device, the data's revision, mode,
// axis, palette), so that moving the cursor, hover or selection repaints without rendering. A new key is rendered in
// a job (which splits its columns over up to 4 threads): paint() never waits for it, it
// paints the plot it has, moved and stretched onto the new range and size (or a "building" plot when it has none of
// this device, mode and axis), and the job's result is shown when it comes (the plot-ready callback asks for a
// repaint); a job superseded by a newer key is dropped (job ids). Jobs run on a pool of their own (threadPool()). Hit
// testing and outlines use the columns of the plot shown, so that they match the picture. render() and preparePlotNow()
// render synchronously (tests, exports, screenshots). A live document that grew renders, on the calling thread, only
// the columns its new entries changed. One thread at a time (the GUI thread in the app); the jobs read the data and
// the document under their read locks (a live document's growth changes both, under their write locks).
#pragma once

#include "views/timelinedata.h"
#include "views/timelinegeometry.h"

#include <QFont>
#include <QImage>
#include <QPalette>
#include <QRegion>

#include <functional>
#include <memory>
#include <vector>

class QPainter;
class QThreadPool;
template <typename T> class QFutureWatcher;

namespace memscope::app {

// What one paint shows besides the data. The axis and the geometry belong to the caller; prepare() sets
// geometry->bytesTop (the y scale follows the largest total in view).
struct TimelineFrame {
    const StateAxis* axis = nullptr;
    TimelineGeometry* geometry = nullptr;
    TimelineLayout layout;
    QRect bounds; // everything painted (the widget's rect)
    int titleRight = 0; // the header's text ends here (toggle buttons sit right of it)
    QPalette palette;
    QFont font;
    qreal dpr = 1;
    int device = -1; // the device shown: data of another one is not painted (a build for this one is under way)
    bool segments = false; // segment pieces ("Active Cached Memory Timeline") instead of allocations
    bool growing = false; // a live document: the y scale keeps room to grow
    int64_t cursor = -1; // -1: none
    model::TimelineItem selected = model::NoTimelineItem;
    model::TimelineItem hovered = model::NoTimelineItem;
};

struct TimelineRenderParts;

class TimelineRenderer {
public:
    // Rows of annotation labels at the top of the plot.
    static constexpr int LabelRows = 3;
    // A live document's y scale keeps room to grow: up to this factor of what its data needs.
    static constexpr double LiveBytesAhead = 1.25;

    TimelineRenderer();
    ~TimelineRenderer();
    TimelineRenderer(const TimelineRenderer&) = delete;
    TimelineRenderer& operator=(const TimelineRenderer&) = delete;

    // The data painted from now on (null: none yet, a "building" state is painted). Cached renders stay valid when
    // the new data has the same device and revision.
    void setData(std::shared_ptr<const TimelineData> data) { m_data = std::move(data); }
    const std::shared_ptr<const TimelineData>& data() const { return m_data; }
    // Whether there is data for the frame's device.
    bool hasData(const TimelineFrame& frame) const { return m_data && m_data->device == frame.device; }

    // Makes the overview envelope, and asks for the frame's plot: nothing when the plot shown is the frame's; a
    // render of the new columns only, here, when just entries were appended; else a job (unless one for this key is
    // under way). Never waits. Sets frame.geometry->bytesTop to the y scale of the plot shown.
    void prepare(const TimelineFrame& frame);
    // The same, and the frame's plot is shown when it returns: the job for it waited for (run here if no pool
    // thread has taken it), or rendered here. For tests, exports and screenshots.
    void preparePlotNow(const TimelineFrame& frame);
    // Waits for the plot job under way, if any, and shows its result.
    void finishPlot();
    // Whether a plot job is under way (its result not shown yet).
    bool isPlotPending() const { return m_job != nullptr; }
    // Called (on this thread, from the event loop) when a job's plot is shown, so that the owner repaints.
    void setPlotReadyCallback(std::function<void()> callback) { m_plotReady = std::move(callback); }
    // The threads plots render on, shared by every renderer (tests hold them busy to keep a render under way).
    static QThreadPool* threadPool();

    // Paints everything in frame.bounds (prepares first, without waiting). The painter's font and pen are the
    // caller's.
    void paint(QPainter& p, const TimelineFrame& frame);
    // The whole picture into an image of frame.bounds' size, with the frame's plot rendered (preparePlotNow): for
    // tests and exports.
    QImage render(const TimelineFrame& frame);

    // The plot shown: per plot column, the state shown and its stacked total.
    const model::TimelineColumns& columns() const { return m_shown.columns; }
    // The axis range the plot shown was rendered for (it is drawn moved onto the frame's range until the frame's
    // plot comes).
    std::pair<double, double> plotRange() const { return { m_shown.key.begin, m_shown.key.end }; }
    // Whether the plot shown was rendered for this frame, entries included.
    bool isPlotCurrent(const TimelineFrame& frame) const;
    // The column of the plot shown under widget x (as painted: mapped onto the frame's range), or -1 (outside it,
    // or no plot of the frame's device, mode and axis shown).
    int columnAt(const TimelineFrame& frame, double x) const;
    // The bytes at widget y by the y scale of the plot shown.
    double bytesAt(const TimelineFrame& frame, double y) const;
    // Changes whenever the plot shown does (hit testing and outlines follow it).
    uint64_t renderGeneration() const { return m_renderGeneration; }
    // Of the last plot shown: how long its render took (sampling + rasterising), the plots shown so far (a dropped
    // job's plot is never counted), the first column it rendered (0 unless a live document grew).
    double lastRenderMs() const { return m_shown.renderMs; }
    int renderCount() const { return m_renderCount; }
    int lastRenderFirstColumn() const { return m_shown.firstColumn; }

    // The widget pixels the cursor at `cursor` touches (the line, its label, the overview's tick), and the cursor
    // the last paint drew (-1: none), so that a cursor move repaints two thin strips.
    QRegion cursorRegion(const TimelineFrame& frame, int64_t cursor) const;
    int64_t paintedCursor() const { return m_paintedCursor; }
    // Overview x of an axis coordinate, and back (the overview shows the geometry's whole domain).
    static double overviewX(const QRect& overview, const TimelineGeometry& geometry, double coord);
    static double overviewCoord(const QRect& overview, const TimelineGeometry& geometry, double x);

private:
    // What a plot image was rendered for.
    struct PlotKey {
        double begin = 0, end = 0;
        QSize pixels;
        qreal dpr = 1;
        int device = -1;
        bool segments = false;
        bool time = false;
        uint64_t revision = 0;
        QRgb base = 0, text = 0;
        bool operator==(const PlotKey&) const = default;
    };
    // A rendered plot: its image and what its columns show.
    struct Plot {
        PlotKey key;
        bool valid = false;
        int64_t entries = 0; // the entry count it was rendered with (a live document grows)
        QImage image;
        model::TimelineColumns columns;
        std::vector<int64_t> lo, hi; // the state range of each column with data
        double bytesTop = 1; // its y scale
        double renderMs = 0;
        int firstColumn = 0;
    };
    struct PlotRequest;
    // An item outlined across its lifetime: its offset at every column (-1 where not shown).
    struct Outline {
        model::TimelineItem item = model::NoTimelineItem;
        uint64_t renderGeneration = 0;
        std::vector<model::ByteCount> offsets;
    };

    PlotKey plotKey(const TimelineFrame& frame) const;
    PlotRequest plotRequest(const TimelineFrame& frame, const PlotKey& key) const;
    // Renders a whole plot. Any thread: reads the request's data, and the document under its read lock.
    static Plot renderPlot(PlotRequest request);
    // Renders the columns of the plot shown that entries appended since changed. This thread.
    void growPlot(const TimelineFrame& frame);
    void startJob(const TimelineFrame& frame, const PlotKey& key);
    void dropJob();
    void show(Plot plot);
    // Whether the plot shown is of the frame's device, mode and axis (then it is painted, mapped onto its range).
    bool hasPlot(const TimelineFrame& frame) const;
    // Whether the plot shown was rendered for the frame's range and size (its columns are the frame's pixels).
    bool plotFits(const TimelineFrame& frame) const;
    // Widget x of the left edge of column `column` of the plot shown.
    double columnX(const TimelineFrame& frame, double column) const;

    void ensureOverview(const TimelineFrame& frame);
    void ensureOutline(const TimelineFrame& frame, Outline& outline, model::TimelineItem item);
    QString cursorLabel(const TimelineFrame& frame, int64_t cursor) const;

    void paintHeader(QPainter& p, const TimelineFrame& frame);
    void paintBuilding(QPainter& p, const TimelineFrame& frame);
    void paintPlot(QPainter& p, const TimelineFrame& frame);
    void paintYAxis(QPainter& p, const TimelineFrame& frame);
    void paintXAxis(QPainter& p, const TimelineFrame& frame);
    void paintAnnotations(QPainter& p, const TimelineFrame& frame);
    void paintOutline(QPainter& p, const TimelineFrame& frame, const Outline& outline, const QColor& color,
                      qreal width);
    void paintCursor(QPainter& p, const TimelineFrame& frame);
    void paintOverview(QPainter& p, const TimelineFrame& frame);

    std::shared_ptr<const TimelineData> m_data;

    // The plot shown, and the job rendering the next one: its watcher (null: none), id (a result whose id is not
    // the newest is dropped) and key.
    Plot m_shown;
    uint64_t m_renderGeneration = 0;
    int m_renderCount = 0;
    QFutureWatcher<Plot>* m_job = nullptr;
    uint64_t m_jobId = 0;
    PlotKey m_jobKey;
    std::function<void()> m_plotReady;
    // Rendering threads' working memory, reused across renders and shared with the jobs.
    std::shared_ptr<TimelineRenderParts> m_parts;

    // The overview's envelope: the largest total per overview column.
    std::vector<model::ByteCount> m_overview;
    model::ByteCount m_overviewMax = 0;
    QSize m_overviewKeySize;
    int m_overviewKeyDevice = -1;
    bool m_overviewKeySegments = false, m_overviewKeyTime = false;
    double m_overviewKeyBegin = 0, m_overviewKeyEnd = 0;
    int64_t m_overviewKeyEntries = -1;
    std::vector<int64_t> m_overviewLo, m_overviewHi; // the state range of each overview column

    Outline m_hoverOutline, m_selectOutline;
    int64_t m_paintedCursor = -1;
};

} // namespace memscope::app
