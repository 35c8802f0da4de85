// Paints the memory timeline from its data (views/timelinedata.h) and a frame (the axis, the geometry, the layout,
// palette, font, cursor, hovered and selected items) into any QPainter: the header's title, the plot, the axes,
// annotations and OOM marks, the outlines of the hovered and selected item, the cursor and the overview. No widget
// and no input: TimelineView owns one and asks it to paint; tests render it into a QImage.
//
// The plot is rendered into a cached QImage keyed by everything it depends on (range, size, device, the data's
// revision, mode, axis, palette), so that moving the cursor, hover or selection repaints without re-rendering, and a
// live document that grew renders only the columns its new entries changed. A render splits its columns over up to
// 4 threads of the global QThreadPool (read-only work on the immutable data) and waits for them. One thread at a
// time (the GUI thread in the app).
#pragma once

#include "views/timelinedata.h"
#include "views/timelinegeometry.h"

#include <QFont>
#include <QImage>
#include <QPalette>
#include <QRegion>

#include <memory>
#include <vector>

class QPainter;

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

class TimelineRenderer {
public:
    // Rows of annotation labels at the top of the plot.
    static constexpr int LabelRows = 3;
    // A live document's y scale keeps room to grow: up to this factor of what its data needs.
    static constexpr double LiveBytesAhead = 1.25;

    // The data painted from now on (null: none yet, a "building" state is painted). Cached renders stay valid when
    // the new data has the same device and revision.
    void setData(std::shared_ptr<const TimelineData> data) { m_data = std::move(data); }
    const std::shared_ptr<const TimelineData>& data() const { return m_data; }
    // Whether there is data for the frame's device.
    bool hasData(const TimelineFrame& frame) const { return m_data && m_data->device == frame.device; }

    // Renders the plot image (if its key changed) and the overview envelope; sets frame.geometry->bytesTop.
    void prepare(const TimelineFrame& frame);
    // Paints everything in frame.bounds (prepares first). The painter's font and pen are the caller's.
    void paint(QPainter& p, const TimelineFrame& frame);
    // The whole picture into an image of frame.bounds' size (for tests and exports).
    QImage render(const TimelineFrame& frame);

    // What the last prepare() rendered: per plot column, the state shown and its stacked total.
    const model::TimelineColumns& columns() const { return m_columns; }
    // Changes whenever the plot's columns do (hit testing and outlines follow it).
    uint64_t renderGeneration() const { return m_renderGeneration; }
    double lastRenderMs() const { return m_renderMs; }
    int renderCount() const { return m_renderCount; }
    int lastRenderFirstColumn() const { return m_renderFirstColumn; }

    // The widget pixels the cursor at `cursor` touches (the line, its label, the overview's tick), and the cursor
    // the last paint drew (-1: none), so that a cursor move repaints two thin strips.
    QRegion cursorRegion(const TimelineFrame& frame, int64_t cursor) const;
    int64_t paintedCursor() const { return m_paintedCursor; }
    // Overview x of an axis coordinate, and back (the overview shows the geometry's whole domain).
    static double overviewX(const QRect& overview, const TimelineGeometry& geometry, double coord);
    static double overviewCoord(const QRect& overview, const TimelineGeometry& geometry, double x);

private:
    // What the cached plot image was rendered for.
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
    // An item outlined across its lifetime: its offset at every column (-1 where not shown).
    struct Outline {
        model::TimelineItem item = model::NoTimelineItem;
        uint64_t renderGeneration = 0;
        std::vector<model::ByteCount> offsets;
    };

    void ensurePlot(const TimelineFrame& frame);
    void ensureOverview(const TimelineFrame& frame);
    void ensureOutline(const TimelineFrame& frame, Outline& outline, model::TimelineItem item);
    QString cursorLabel(const TimelineFrame& frame, int64_t cursor) const;

    void paintHeader(QPainter& p, const TimelineFrame& frame);
    void paintBuilding(QPainter& p, const TimelineFrame& frame);
    void paintYAxis(QPainter& p, const TimelineFrame& frame);
    void paintXAxis(QPainter& p, const TimelineFrame& frame);
    void paintAnnotations(QPainter& p, const TimelineFrame& frame);
    void paintOutline(QPainter& p, const TimelineFrame& frame, const Outline& outline, const QColor& color,
                      qreal width);
    void paintCursor(QPainter& p, const TimelineFrame& frame);
    void paintOverview(QPainter& p, const TimelineFrame& frame);

    std::shared_ptr<const TimelineData> m_data;

    // The cached plot and what its columns show.
    QImage m_plot;
    PlotKey m_plotKey;
    int64_t m_plotEntries = 0; // the entry count the plot was rendered with (a live document grows)
    bool m_plotValid = false;
    uint64_t m_renderGeneration = 0;
    model::TimelineColumns m_columns;
    std::vector<int64_t> m_lo, m_hi;
    // One per rendering thread: a stack positioned at its first column, and working memory.
    struct RenderPart {
        model::TimelineStack stack;
        model::TimelineRasterScratch scratch;
        std::vector<model::AllocationId> live, liveScratch;
        std::vector<model::TimelineItem> liveItems;
    };
    std::vector<std::unique_ptr<RenderPart>> m_parts;
    double m_renderMs = 0;
    int m_renderCount = 0;
    int m_renderFirstColumn = 0;

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
