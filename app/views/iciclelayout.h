// IcicleLayout, the pure geometry of an icicle (a flame graph drawn root row first): which rectangle each node of a
// model::CallTree takes at a zoom, and which node lies under a point. Both flame graphs (FlameGraphView's call tree,
// DiffFlameGraphView's Δ tree) use it; tested without a widget. Pure value; any thread.
#pragma once

#include "model/calltree.h"

#include <QPointF>
#include <QRectF>

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

} // namespace memscope::app
