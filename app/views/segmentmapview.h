// The segment map: the caching allocator's state at the Session's cursor, every segment drawn to one byte scale with
// its blocks (allocations coloured by address, stack or stream; pending-free blocks hatched red; rounding waste as
// a darker tail of its block; free space), wrapped into rows and grouped by device → pool → stream. The native
// counterpart of the "Allocator State History" segment drawing of PyTorch's MemoryViz.js. Wheel zooms around the
// pointer, dragging pans, a double click resets; hovering sets the Session's hovered allocation and shows a tooltip
// with the segment's fragmentation figures, a click selects. GUI thread only.
//
// Painting: the layout (SegmentMapGeometry) is cached and recomputed only when the cursor, device, filters, zoom,
// size or font change; the map itself is cached in a pixmap and redrawn only when the layout, pan, colours or palette
// change, so hover and selection repaints only blit it and draw the outlines. Blocks narrower than a pixel are
// merged into one run per pixel column (the column takes the colour covering most of it); nothing is allocated per
// block. The layout costs O(segments log segments + blocks), under a millisecond for big_trace, so it runs on the
// GUI thread rather than as a background job.
#pragma once

#include "document/session.h"
#include "views/segmentmapgeometry.h"

#include <QFont>
#include <QHash>
#include <QPixmap>
#include <QPointer>
#include <QStaticText>
#include <QWidget>

#include <array>
#include <vector>

namespace memscope::app {

class SegmentMapView : public QWidget {
    Q_OBJECT
public:
    using ColorMode = app::ColorMode; // the Session's: the timeline colours the same way

    // `session` must outlive the view (the view stops drawing if it is destroyed first).
    explicit SegmentMapView(Session* session, QWidget* parent = nullptr);
    ~SegmentMapView() override;

    ColorMode colorMode() const { return m_session ? m_session->colorMode() : ColorMode::Allocation; }
    void setColorMode(ColorMode mode); // sets the Session's

    // 1 = the whole state at the peak of reserved memory fits the view; larger zooms in (up to 16 bytes/pixel).
    double zoom() const { return m_zoom; }
    // Zooms keeping the byte under `anchor` (widget coordinates) under it vertically; the view's centre by default.
    void setZoom(double zoom, QPointF anchor = QPointF(-1, -1));
    void resetZoom(); // zoom 1, scrolled to the top
    double maxZoom() const;

    // Vertical scroll offset in pixels.
    double pan() const { return m_geometry.pan(); }
    void setPan(double pan);

    // The layout at the current size, state and zoom (laid out first if anything changed). For tests and for
    // callers that need to find a segment on screen. Valid until the Session's state or the view changes.
    const SegmentMapGeometry& geometry() const;

    // The tooltip text for a widget point ("" over nothing).
    QString toolTipAt(QPointF point) const;
    // The blocks (indices in the state at the cursor) the last paint gave a label: each at most once, on the row
    // where most of it shows when it wraps over rows. For tests.
    std::vector<int32_t> labelledBlocks() const;

    QSize sizeHint() const override { return { 900, 500 }; }
    QSize minimumSizeHint() const override { return { 200, 120 }; }

Q_SIGNALS:
    void zoomChanged(double zoom);
    void colorModeChanged(memscope::app::ColorMode mode);

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void wheelEvent(QWheelEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void changeEvent(QEvent* event) override;

private:
    // A label to draw once a row's runs are filled (collected so that no run paints over it).
    struct Label {
        double x0, x1;
        int32_t block;
        QRgb background;
    };

    // Whether the block at segment bytes [b0, b0 + bodyBytes) of `placement` gets its label on `row`, where the
    // placement's piece is `piece` (a body wrapped over rows is labelled on one of them).
    bool labelsHere(uint32_t placement, int64_t row, double b0, double bodyBytes,
                    const SegmentMapGeometry::Piece& piece, double pxPerByte) const;
    void invalidateFit(); // device, filters, size or font changed
    void invalidateLayout(); // cursor changed
    void invalidatePixmap() { m_pixmapValid = false; }
    void ensureLayout() const;
    SegmentMapGeometry::Metrics metrics() const;
    bool isShown(const model::ReplaySegment& segment) const; // by the Session's stream/pool filters
    void renderMap(QPainter& painter) const;
    void paintRow(QPainter& painter, uint32_t group, int64_t row, double y) const;
    void paintOutline(QPainter& painter, model::AllocationId id, const QColor& color, int width) const;
    int32_t blockOf(model::AllocationId id) const; // index into the state's blocks, or -1
    QRgb blockColor(const model::ReplayBlock& block, QRgb streamColor) const;
    QString segmentName(const model::ReplaySegment& segment) const;
    QString streamName(int64_t stream) const;
    double textWidth(const QString& text) const; // in the small font; no shaping
    void drawCachedText(QPainter& painter, QPointF topLeft, const QString& text) const;
    void updateHover(QPointF point);

    QPointer<Session> m_session;
    double m_zoom = 1;

    // Cached layout, rebuilt by ensureLayout() when a key changed.
    mutable SegmentMapGeometry m_geometry;
    mutable bool m_fitValid = false;
    mutable bool m_layoutValid = false;
    mutable double m_fitScale = 1;
    mutable model::ReplayState m_peakState; // the state the fit is computed on (peak reserved)
    mutable int m_peakDevice = -1;
    mutable int64_t m_peakIndex = -1; // the state m_peakState was taken at
    mutable int64_t m_layoutIndex = -1;
    mutable std::vector<QString> m_groupTitles;
    mutable std::vector<QRgb> m_streamColors; // per state segment
    mutable QPixmap m_pixmap;
    mutable bool m_pixmapValid = false;

    // Scratch buffers reused by every paint, so that painting allocates nothing per block.
    mutable std::vector<Label> m_labels;
    mutable std::vector<int32_t> m_labelled; // the blocks the last render labelled (labelledBlocks())
    mutable std::vector<QRectF> m_hatches;
    mutable std::vector<QRect> m_separators;
    mutable QString m_text;
    mutable std::array<double, 256> m_advances {}; // of smallFont(), per Latin-1 character
    mutable QFont m_advancesFont;
    mutable bool m_advancesValid = false;
    mutable QHash<QString, QStaticText> m_textCache; // laid-out captions and labels in the small font
    mutable QFont m_textCacheFont;

    // The byte a zoom keeps in place: found under the pointer, kept while the pointer and the state stay put.
    struct ZoomAnchor {
        QPointF pos { -1, -1 };
        int64_t stateIndex = -1;
        int32_t segment = -1; // index into the state's segments; -1: keep the relative height instead
        double offset = 0; // bytes into the segment
        double inRow = 0; // pixels below the top of its row
    };
    ZoomAnchor m_anchor;

    // Pointer interaction.
    QPointF m_pressPos;
    double m_pressPan = 0;
    bool m_pressed = false;
    bool m_dragging = false;
    bool m_hoverOwned = false; // the Session's hovered allocation was set by this view
};

} // namespace memscope::app
