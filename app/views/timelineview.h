// The memory timeline: every live allocation (or, toggled, every mapped segment piece) stacked in allocation order
// at every moment, as PyTorch's "Active Memory Timeline" / "Active Cached Memory Timeline" (MemoryViz.js) draw them,
// but with every item represented (model/timeline.h rasterises column by column). Above it: annotations from
// external_annotations as labelled bands, OOMs as red lines, the shared cursor, the hovered and selected allocation
// outlined over their whole lifetime. Below it: the x axis (entries or time) and an overview of the whole trace with
// a brush for the visible range.
//
// Mouse: left-drag on the plot or on the x axis moves the Session cursor continuously; a left click (no drag) on the
// plot also selects the allocation under it (empty space clears the selection); right-, middle- or Shift+left-drag
// pans; the wheel zooms around the mouse (a horizontal wheel pans); double-click shows everything. On the overview:
// drag the brush to move it, its edges to resize it, or drag elsewhere to draw a new one; a click centres it.
// Keys: Left/Right move the cursor (Shift: by a tenth of the view), +/- zoom around the cursor, 0 shows everything.
//
// The plot is rendered into a cached QImage keyed by everything it depends on (range, size, device, filters, mode,
// axis, palette); cursor, hover and selection are overlays, so moving them repaints without re-rendering (a cursor
// move repaints two thin strips). GUI thread only; a render splits its columns over up to 4 threads of the global
// QThreadPool (read-only work on the immutable Replay) and waits for them.
#pragma once

#include "model/timeline.h"
#include "models/session.h"
#include "views/timelinegeometry.h"

#include <QImage>
#include <QPointer>
#include <QRegion>
#include <QWidget>

#include <memory>
#include <utility>
#include <vector>

class QToolButton;

namespace memscope::app {

class TimelineView : public QWidget {
    Q_OBJECT
public:
    explicit TimelineView(Session* session, QWidget* parent = nullptr);

    // Cached segments ("Active Cached Memory Timeline") instead of allocations.
    void setShowSegments(bool on);
    bool showSegments() const { return m_showSegments; }
    // Shows the states first..last (inclusive; clamped, widened to the deepest zoom if needed).
    void zoomToRange(int64_t first, int64_t last);
    // The first and last state index (inclusive) at least partly visible.
    std::pair<int64_t, int64_t> visibleRange() const;
    void resetZoom();

    QSize sizeHint() const override { return { 900, 400 }; }
    QSize minimumSizeHint() const override { return { 320, 200 }; }

    // For tests and the main window's status line. Widget coordinates.
    QRect plotRect() const { return m_layout.plot; }
    QRect axisRect() const { return m_layout.xAxis; }
    QRect overviewRect() const { return m_layout.overview; }
    const TimelineGeometry& geometry() const { return m_geometry; }
    // The state index the plot column at widget x shows (each column shows the state of its largest total among
    // the states it covers); -1 outside the plot. Renders the plot first if needed.
    int64_t stateAtX(int x);
    // The allocation under a widget point: the one drawn there, or in segments mode the one at that address of the
    // segment drawn there; NoAllocation if none.
    model::AllocationId allocationAt(QPoint pos);
    // The segment piece (index into Replay::segmentPieces()) under a point in segments mode, else -1.
    int64_t segmentPieceAt(QPoint pos);
    // Milliseconds the last full render of the plot took (sampling + rasterising), and how many it did.
    double lastRenderMs() const { return m_renderMs; }
    int renderCount() const { return m_renderCount; }
    // The first column the last render drew: 0 unless a live document grew (then only the columns it changed).
    int lastRenderFirstColumn() const { return m_renderFirstColumn; }

Q_SIGNALS:
    void visibleRangeChanged(int64_t first, int64_t last);
    void showSegmentsChanged(bool on);

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void changeEvent(QEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;

private:
    // What the cached plot image was rendered for.
    struct PlotKey {
        double begin = 0, end = 0;
        QSize pixels;
        qreal dpr = 1;
        int device = -1;
        bool segments = false;
        bool time = false;
        uint64_t filterGeneration = 0;
        QRgb base = 0, text = 0;
        bool operator==(const PlotKey&) const = default;
    };
    // An item outlined across its lifetime: its offset at every column (-1 where not shown).
    struct Outline {
        model::TimelineItem item = model::NoTimelineItem;
        uint64_t renderGeneration = 0;
        std::vector<model::ByteCount> offsets;
    };
    // What is under a point of the plot.
    struct Hit {
        model::TimelineItem item = model::NoTimelineItem;
        model::AllocationId allocation = model::NoAllocation;
        int64_t state = -1;
    };
    enum class Drag : uint8_t { None, Scrub, Pan, BrushMove, BrushLeft, BrushRight, BrushNew };

    void onDeviceChanged();
    void onGrown();
    void itemsChanged(int64_t fromEntry = 0);
    void fillColors();
    void onColorModeChanged();
    void onCursorChanged();
    QString cursorLabel(int64_t cursor) const;
    QRegion cursorRegion(int64_t cursor) const;
    void onFilterChanged();
    void onTimeAxisChanged();
    // How the axis is made again: from scratch (a new device, axis kind, ...) or after entries were appended.
    enum class AxisChange : uint8_t { Rebuilt, Grown };
    void rebuildAxis(AxisChange change = AxisChange::Rebuilt);
    void relayout();
    void setRange(double begin, double end);
    void emitRangeIfChanged();

    const model::TimelineItems& items() const { return m_showSegments ? m_pieces : m_allocs; }
    const std::vector<uint8_t>& visible() const { return m_showSegments ? m_pieceVisible : m_allocVisible; }
    const std::vector<uint32_t>& itemColors() const { return m_showSegments ? m_pieceColors : m_allocColors; }
    const std::vector<model::TimelineItem>& allocationPieces();

    void ensurePlot();
    void ensureOverview();
    void ensureOutline(Outline& outline, model::TimelineItem item);
    Hit hitTest(QPoint pos);
    int columnAt(double x) const;
    int64_t stateAtPixel(double x) const;
    model::TimelineItem selectedItem();
    model::TimelineItem hoveredItem();
    void updateHover(QPoint pos);
    QString tooltipText(QPoint pos);

    void paintHeader(QPainter& p);
    void paintYAxis(QPainter& p);
    void paintXAxis(QPainter& p);
    void paintAnnotations(QPainter& p);
    void paintOutline(QPainter& p, const Outline& outline, const QColor& color, qreal width);
    void paintCursor(QPainter& p);
    void paintOverview(QPainter& p);

    double overviewX(double coord) const;
    double overviewCoord(double x) const;

    QPointer<Session> m_session;
    bool m_showSegments = false;
    QToolButton* m_segmentsButton = nullptr;
    QToolButton* m_timeButton = nullptr;

    // Per device: the stacked items of both modes, their colours, visibility (empty = all visible).
    int m_device = -1;
    model::TimelineItems m_allocs, m_pieces;
    std::vector<uint32_t> m_allocColors, m_pieceColors;
    std::vector<uint8_t> m_allocVisible, m_pieceVisible;
    std::vector<model::TimelineItem> m_allocPiece;
    bool m_allocPieceValid = false;
    uint64_t m_filterGeneration = 0;
    std::vector<AnnotationSpan> m_annotations;
    std::vector<int64_t> m_ooms;

    StateAxis m_axis;
    TimelineGeometry m_geometry;
    // A live document's domain end, ahead of its data (rebuildAxis): x LiveDomainAhead of the data's length when
    // the data reaches it. Its y scale keeps room to grow likewise (ensurePlot).
    static constexpr double LiveDomainAhead = 1.25;
    static constexpr double LiveBytesAhead = 1.25;
    double m_liveDomainEnd = 0;
    TimelineLayout m_layout;
    std::pair<int64_t, int64_t> m_emittedRange { -1, -1 };

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
    std::vector<model::AllocationId> m_live, m_liveScratch;
    std::vector<model::TimelineItem> m_liveItems;
    double m_renderMs = 0;
    int m_renderCount = 0;
    int m_renderFirstColumn = 0;

    // Hit testing reuses a stack positioned at the last column asked about.
    model::TimelineStack m_hitStack;
    uint64_t m_hitGeneration = UINT64_MAX;

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
    int64_t m_paintedCursor = -1; // the cursor the last paint drew (-1: none), for partial updates
    model::TimelineItem m_hoverPiece = model::NoTimelineItem; // segments mode: the piece under the mouse

    Drag m_drag = Drag::None;
    QPoint m_pressPos;
    bool m_dragMoved = false;
    double m_pressBegin = 0, m_pressEnd = 0; // the range when the drag began
    double m_pressCoord = 0; // the axis coordinate under the press (overview drags)
};

} // namespace memscope::app
