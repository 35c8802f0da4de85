// IcicleView, the widget both flame graphs are (FlameGraphView over a call tree, DiffFlameGraphView over a diff's Δ
// tree): an IcicleLayout as wide as the widget, painted by IciclePainter, the node under the mouse outlined and its
// tooltip shown. Subclasses hold the tree and say what it looks like (an IcicleStyle), what its tooltip says, and
// what clicks and keys do. GUI thread only.
#pragma once

#include "model/calltree.h"
#include "views/iciclelayout.h"
#include "views/iciclepainter.h"

#include <QWidget>

namespace memscope::app {

class IcicleView : public QWidget {
    Q_OBJECT
public:
    const IcicleLayout& layout() const { return m_layout; }
    model::CallNodeId zoom() const { return m_layout.zoom(); }
    // The node outlined as under the mouse, or NoCallNode.
    model::CallNodeId hovered() const { return m_hovered; }

protected:
    // Tracks the mouse (hover) and takes focus on click or tab (keys zoom).
    explicit IcicleView(QWidget* parent = nullptr);

    // The tooltip (rich text) of a node drawn in the view.
    virtual QString toolTipFor(model::CallNodeId node) const = 0;
    void setHovered(model::CallNodeId node); // repaints when it changes
    // Paints the exposed part of the view in `style`, `highlighted` outlined as selected.
    void paintIcicle(QPaintEvent* event, const IcicleStyle& style, model::CallNodeId highlighted = model::NoCallNode);

    bool event(QEvent* event) override; // tooltips
    void resizeEvent(QResizeEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;

    IcicleLayout m_layout;

private:
    IciclePainter m_painter;
    model::CallNodeId m_hovered = model::NoCallNode;
};

} // namespace memscope::app
