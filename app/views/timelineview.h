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
// A zoomed view follows a cursor that leaves it (landmarks, Home/End, the overview): it pans to centre it.
//
// The data (views/timelinedata.h: items, colours, filters) is built in a job on the global QThreadPool whenever the
// device, the colour mode or the filters change; meanwhile the view paints the data it has (or, before its first
// data, a "building" state), and a newer request supersedes an older one, whose result is dropped. A live document's
// growth extends the data in place on the GUI thread (O(new items)), under the data's write lock. Painting is
// TimelineRenderer's (views/timelinerenderer.h), which renders a new range's plot in a job too and paints the plot it
// has, moved onto the range, until it comes (a repaint follows); hit testing uses the plot shown. This widget handles
// input and keeps the axis and the geometry. GUI thread only.
#pragma once

#include "model/timeline.h"
#include "document/session.h"
#include "views/timelinedata.h"
#include "views/timelinegeometry.h"
#include "views/timelinerenderer.h"

#include <QFutureWatcher>
#include <QPointer>
#include <QRegion>
#include <QWidget>

#include <memory>
#include <utility>
#include <vector>

class QTimer;
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
    // The x axis shown: the data's time axis when the Session asks for time and the data has it (its build makes
    // it), else the index axis.
    const StateAxis& axis() const { return *m_axis; }
    // The data shown now (null before the first build finished): shareable with any thread, which reads it holding
    // its read lock (a live document's growth extends it in place: views/timelinedata.h).
    std::shared_ptr<const TimelineData> data() const { return m_data; }
    // Whether a build of the data is under way (the view shows the previous data, or "building", meanwhile).
    bool isBuilding() const { return m_buildWatcher != nullptr; }
    // Whether a render of the plot is under way (the view shows the previous plot, moved, meanwhile).
    bool isRendering() const { return m_renderer.isPlotPending(); }
    // Waits for the build under way, if any, and shows its data, and renders the plot of its range and size now
    // (here, or its job under way waited for). For screenshots, exports and tests (finishTimelineBuilds): a grab that
    // follows shows them.
    void finishBuild();
    const TimelineRenderer& renderer() const { return m_renderer; }

    // The state index the plot column at widget x shows (each column shows the state of its largest total among
    // the states it covers); -1 outside the plot. Finishes a build under way and renders the plot first if needed
    // (here: these three wait, the mouse's hit testing does not).
    int64_t stateAtX(int x);
    // The allocation under a widget point: the one drawn there, or in segments mode the one at that address of the
    // segment drawn there; NoAllocation if none. Finishes a build under way first, as segmentPieceAt.
    model::AllocationId allocationAt(QPoint pos);
    // The segment piece (index into Replay::segmentPieces()) under a point in segments mode, else -1.
    int64_t segmentPieceAt(QPoint pos);
    // Milliseconds the last full render of the plot took (sampling + rasterising), and how many it did.
    double lastRenderMs() const { return m_renderer.lastRenderMs(); }
    int renderCount() const { return m_renderer.renderCount(); }
    // The first column the last render drew: 0 unless a live document grew (then only the columns it changed).
    int lastRenderFirstColumn() const { return m_renderer.lastRenderFirstColumn(); }

Q_SIGNALS:
    void visibleRangeChanged(int64_t first, int64_t last);
    void showSegmentsChanged(bool on);
    // New data is shown (a build finished, or a live document grew).
    void dataChanged();

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
    // What is under a point of the plot.
    struct Hit {
        model::TimelineItem item = model::NoTimelineItem;
        model::AllocationId allocation = model::NoAllocation;
        int64_t state = -1;
    };
    enum class Drag : uint8_t { None, Scrub, Pan, BrushMove, BrushLeft, BrushRight, BrushNew };

    void onDeviceChanged();
    void onGrown();
    void onColorModeChanged();
    void onCursorChanged();
    void onFilterChanged();
    void onTimeAxisChanged();
    // Starts a build of the data for `changes` (TimelineDataRequest::Change) on the global thread pool, superseding
    // the one under way (whose changes it takes over).
    void startBuild(uint8_t changes);
    // Waits for the data build under way, if any, and shows its data.
    void finishDataBuild();
    // finishDataBuild(), and the plot of the range and size now rendered (whether visible or not).
    void finishPlot();
    // Shows `data` (a build's result) and its time axis.
    void adopt(std::shared_ptr<const TimelineData> data);
    // What follows new data, or the data shown grown: a repaint, and hit testing anew.
    void takeInData();
    // How the axis is made again: from scratch (a new device, axis kind, ...) or after entries were appended.
    enum class AxisChange : uint8_t { Rebuilt, Grown };
    void rebuildAxis(AxisChange change = AxisChange::Rebuilt);
    void relayout();
    void setRange(double begin, double end);
    void emitRangeIfChanged();

    // Whether the data shown is the current device's.
    bool hasData() const { return m_data && m_data->device == m_device; }
    const model::TimelineItems& items() const { return m_data->items(m_showSegments); }
    const model::GrowingArray<uint8_t>& visible() const { return m_data->visible(m_showSegments); }
    const std::vector<model::TimelineItem>& allocationPieces();
    // What the renderer paints now, besides the data.
    TimelineFrame frame();

    // What hit testing needs of a frame (no palette, font or outlines).
    TimelineFrame hitFrame();
    Hit hitTest(QPoint pos);
    int64_t stateAtPixel(double x) const;
    model::TimelineItem selectedItem();
    model::TimelineItem hoveredItem();
    void updateHover(QPoint pos);
    // The hover found in another range's plot, found again in the plot shown now.
    void refreshHover();
    QString tooltipText(QPoint pos);

    QPointer<Session> m_session;
    bool m_showSegments = false;
    QToolButton* m_segmentsButton = nullptr;
    QToolButton* m_timeButton = nullptr;

    // The data shown, and the build under way: its watcher (null: none), the generation of the newest request (an
    // older one's result is dropped), and the changes it was asked for.
    int m_device = -1;
    std::shared_ptr<const TimelineData> m_data;
    QFutureWatcher<std::shared_ptr<const TimelineData>>* m_buildWatcher = nullptr;
    uint64_t m_buildGeneration = 0;
    uint8_t m_buildChanges = 0;
    bool m_buildTimeAxis = false; // the build under way makes the time axis
    uint64_t m_revision = 0; // the last data revision handed out
    // A growth put off (a job read the data, or a build was under way): taken in when the build comes, or tried
    // again by the timer.
    bool m_growthOwed = false;
    QTimer* m_growthRetry = nullptr;
    // The segment piece of each allocation, when the data has none (segments mode's selection needs it), for the
    // data m_allocPieceData (null: none); extended when that data grows.
    std::vector<model::TimelineItem> m_allocPiece;
    const TimelineData* m_allocPieceData = nullptr;

    // The axis shown (never null): the data's time axis, or the index axis.
    std::shared_ptr<const StateAxis> m_axis = std::make_shared<const StateAxis>();
    TimelineGeometry m_geometry;
    // A live document's domain end, ahead of its data (rebuildAxis): x LiveDomainAhead of the data's length when
    // the data reaches it. Its y scale keeps room to grow likewise (TimelineRenderer::LiveBytesAhead).
    static constexpr double LiveDomainAhead = 1.25;
    double m_liveDomainEnd = 0;
    TimelineLayout m_layout;
    QSize m_layoutSize; // the widget's size m_layout was computed for
    std::pair<int64_t, int64_t> m_emittedRange { -1, -1 };

    TimelineRenderer m_renderer;

    // Hit testing reuses a stack positioned at the last column asked about.
    model::TimelineStack m_hitStack;
    uint64_t m_hitGeneration = UINT64_MAX;
    const TimelineData* m_hitData = nullptr;
    std::vector<model::AllocationId> m_live, m_liveScratch;
    std::vector<model::TimelineItem> m_liveItems;

    model::TimelineItem m_hoverPiece = model::NoTimelineItem; // segments mode: the piece under the mouse
    // The mouse's last place on the plot, and whether its hover was found in a plot of another range.
    QPoint m_hoverPos;
    bool m_hoverStale = false;

    Drag m_drag = Drag::None;
    QPoint m_pressPos;
    bool m_dragMoved = false;
    double m_pressBegin = 0, m_pressEnd = 0; // the range when the drag began
    double m_pressCoord = 0; // the axis coordinate under the press (overview drags)
};

// Finishes the data builds and plot renders of `root` and every TimelineView inside it (TimelineView::finishBuild), so
// that a grab at their present sizes shows their finished data and plots: what --screenshot, exports and the tests
// call before rendering. GUI thread.
void finishTimelineBuilds(QWidget* root);

} // namespace memscope::app
