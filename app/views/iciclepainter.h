// IciclePainter, the painting both flame graphs share (FlameGraphView's call tree, DiffFlameGraphView's Δ tree): the
// breadcrumb rows of the zoomed node and its ancestors, then its subtree depth first, each node a bar with a
// one-pixel gap to its neighbours and its label elided on the right in black or white by the bar's luminance, then
// the hover and selection outlines. What the two differ in, each node's colour and label and what happens to
// children narrower than a pixel, is an IcicleStyle the view hands in: a small policy, so one painter serves plain and
// diff data. GUI thread only (it paints); the layout and tree it reads are the view's.
#pragma once

#include "model/calltree.h"
#include "views/iciclelayout.h"

#include <QColor>
#include <QString>

#include <vector>

class QFontMetrics;
class QPainter;
class QPalette;
class QRect;

namespace memscope::app {

// What a flame graph says about its nodes. Called only while painting, for nodes in the exposed rows.
class IcicleStyle {
public:
    // The node's fill, before fading.
    virtual QColor fill(model::CallNodeId node) const = 0;
    // Whether the node is faded (mixed 75 % towards the base colour: a search that it does not match). Else ancestors
    // of the zoomed node are mixed 35 % towards it.
    virtual bool faded(model::CallNodeId) const { return false; }
    // The node's label for a bar `width` pixels wide (at least the width below which bars go unlabelled);
    // `breadcrumb`: the node is the zoomed node or one of its ancestors (a full-width row). Elided by the painter.
    virtual QString label(model::CallNodeId node, bool breadcrumb, double width, const QFontMetrics& metrics) const = 0;
    // Centred in the view when the tree has nothing below its root.
    virtual QString emptyText() const = 0;
    // Children narrower than a pixel (and so every later sibling: children are sorted by bytes) are summed into one
    // muted "rest" bar when true, left out when false.
    virtual bool drawsRest() const { return false; }

protected:
    ~IcicleStyle() = default;
};

class IciclePainter {
public:
    // Paints `layout` (its tree, zoom, width and row height) over `exposed`, the paint event's rectangle of a widget
    // whose whole rectangle is `bounds`: the background, the bars (clipped to the exposed rows and columns: about one
    // primitive per pixel column however large the tree, the level of detail of Qt's "chip" example), then outlines
    // around `hovered` (in the text colour) and `highlighted` (the selection colour). No allocation once the
    // reused stack has grown.
    void paint(QPainter& p, const QRect& exposed, const QRect& bounds, const QPalette& palette,
               const IcicleLayout& layout, const IcicleStyle& style, model::CallNodeId hovered,
               model::CallNodeId highlighted = model::NoCallNode);

    // Bars narrower than this are not drawn (summed into a "rest" bar, or left out).
    static constexpr double MinNodeWidth = 1.0;
    // Bars narrower than this carry no label.
    static constexpr double MinLabelWidth = 28.0;

private:
    void drawNode(QPainter& p, const QPalette& palette, const IcicleLayout& layout, const IcicleStyle& style,
                  model::CallNodeId node, const QRectF& r, bool breadcrumb);

    std::vector<model::CallNodeId> m_stack; // the depth-first walk's, reused
};

} // namespace memscope::app
