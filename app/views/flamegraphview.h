// The flame graph of a call tree, drawn as an icicle (root row at the top, callees below): width ∝ bytes, one row
// per depth, a click zooms into a node (its ancestors stay above it as full-width rows: the breadcrumb), a
// double-click, Esc or a click on an ancestor row zooms out. IcicleLayout is the pure geometry (node ↔ rectangle at
// a zoom), tested without a widget. GUI thread only; the trees it shows are immutable and shared.
#pragma once

#include "model/calltree.h"
#include "model/snapshot.h"
#include "models/calltreemodel.h"

#include <QRectF>
#include <QWidget>

#include <memory>
#include <vector>

namespace memscope::app {

// Where each node of a CallTree lies when `zoom` fills the width: x ∝ bytes inside the zoomed node, y = depth ×
// rowHeight. The zoomed node and its ancestors span the whole width (the breadcrumb rows); nodes outside the zoomed
// subtree are not shown. Widths are the positive part of the bytes; in a tree with negative costs (a diff) a
// child is clipped to what its parent's width leaves, so children always nest inside their parent. Pure value; any
// thread. O(nodes) to set a tree, O(depth) per query (O(depth × log children) for nodeAt).
class IcicleLayout {
public:
    void setTree(std::shared_ptr<const model::CallTree> tree);
    const model::CallTree* tree() const { return m_tree.get(); }
    void setWidth(double width) { m_width = width; }
    double width() const { return m_width; }
    void setRowHeight(double height) { m_rowHeight = height; }
    double rowHeight() const { return m_rowHeight; }
    // The node filling the width (CallTreeRoot at first). An unknown id zooms out to the root.
    void setZoom(model::CallNodeId node);
    model::CallNodeId zoom() const { return m_zoom; }
    double contentHeight() const; // (maxDepth + 1) rows

    // The node's extent on the byte axis: [start, start + span) with the root at [0, max(0, root bytes)).
    int64_t start(model::CallNodeId node) const { return m_start[model::raw(node)]; }
    int64_t span(model::CallNodeId node) const { return m_span[model::raw(node)]; }
    // Pixels per byte at the current zoom (0 when the zoomed node has no positive bytes).
    double scale() const;

    bool isAncestorOrSelf(model::CallNodeId ancestor, model::CallNodeId node) const;
    // The node's rectangle at the current zoom; a null QRectF when the node is not shown (outside the zoomed
    // subtree). Zero-width nodes get a zero-width rectangle.
    QRectF rect(model::CallNodeId node) const;
    // The node drawn at `pos`, or NoCallNode (outside the tree, or in a node's self part below it).
    model::CallNodeId nodeAt(QPointF pos) const;

private:
    std::shared_ptr<const model::CallTree> m_tree;
    std::vector<int64_t> m_start, m_span;
    model::CallNodeId m_zoom = model::CallTreeRoot;
    double m_width = 0;
    double m_rowHeight = 18;
};

class FlameGraphView : public QWidget {
    Q_OBJECT
public:
    explicit FlameGraphView(QWidget* parent = nullptr);

    // Shows `tree` (frames named by `snapshot`). Zoom and highlight follow the same call paths in the new tree when
    // they still exist (a cursor move rebuilds the tree), else reset to the root / nothing.
    void setTree(std::shared_ptr<const model::Snapshot> snapshot, std::shared_ptr<const model::CallTree> tree);
    const IcicleLayout& layout() const { return m_layout; }

    model::CallNodeId zoom() const { return m_layout.zoom(); }
    void setZoom(model::CallNodeId node);
    void zoomOut(); // one level
    void resetZoom();

    // The node outlined as selected (the tree view's current row), or NoCallNode.
    void setHighlighted(model::CallNodeId node);
    model::CallNodeId highlighted() const { return m_highlighted; }

    // Nodes whose frame text contains `text` (case-insensitive) keep their colour; the others fade. Empty: none fade.
    void setSearchText(const QString& text);

    void setColoring(FrameColoring coloring);
    FrameColoring coloring() const { return m_coloring; }

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override;

Q_SIGNALS:
    void zoomChanged(memscope::model::CallNodeId node);
    // A node was clicked (after the zoom moved to it).
    void nodeClicked(memscope::model::CallNodeId node);

protected:
    bool event(QEvent* event) override;
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    void changeEvent(QEvent* event) override;

private:
    void drawNode(QPainter& p, model::CallNodeId node, const QRectF& r, bool breadcrumb);
    const QString& label(model::FrameId frame) const;
    QRgb fill(model::FrameId frame) const;
    void updateMatches();
    void setHovered(model::CallNodeId node);
    QString toolTipFor(model::CallNodeId node) const;

    std::shared_ptr<const model::Snapshot> m_snapshot;
    IcicleLayout m_layout;
    model::CallNodeId m_highlighted = model::NoCallNode;
    model::CallNodeId m_hovered = model::NoCallNode;
    FrameColoring m_coloring = FrameColoring::ByFunction;
    QString m_search;
    std::vector<uint8_t> m_matches; // per node, when searching: 1 the frame text contains the search text
    mutable std::vector<QString> m_labels; // per frame, filled on first use
    mutable std::vector<QRgb> m_fills; // per frame; 0 = not computed yet
    std::vector<model::CallNodeId> m_stack; // reused by paintEvent (no allocation per paint once grown)
};

} // namespace memscope::app
