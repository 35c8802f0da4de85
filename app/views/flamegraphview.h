// The flame graph of a call tree, drawn as an icicle (root row at the top, callees below): width ∝ bytes, one row
// per depth, a click zooms into a node (its ancestors stay above it as full-width rows: the breadcrumb), a
// double-click, Esc or a click on an ancestor row zooms out. An IcicleView (icicleview.h: layout, painting, hover,
// tooltips), as the diff's flame graph. GUI thread only; the trees it
// shows are immutable and shared.
#pragma once

#include "model/calltree.h"
#include "model/snapshot.h"
#include "itemmodels/calltreemodel.h"
#include "views/icicleview.h"

#include <memory>
#include <vector>

namespace memscope::app {

class FlameGraphView : public IcicleView {
    Q_OBJECT
public:
    explicit FlameGraphView(QWidget* parent = nullptr);

    // Shows `tree` (frames named by `snapshot`). Zoom and highlight follow the same call paths in the new tree when
    // they still exist (a cursor move rebuilds the tree), else reset to the root / nothing.
    void setTree(std::shared_ptr<const model::Snapshot> snapshot, std::shared_ptr<const model::CallTree> tree);

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

    // The text drawn on a frame's bars: the function, then its file's name and line.
    const QString& label(model::FrameId frame) const;

Q_SIGNALS:
    void zoomChanged(memscope::model::CallNodeId node);
    // A node was clicked (after the zoom moved to it).
    void nodeClicked(memscope::model::CallNodeId node);

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    void changeEvent(QEvent* event) override;

private:
    QRgb fill(model::FrameId frame) const;
    void updateMatches();
    QString toolTipFor(model::CallNodeId node) const override;

    std::shared_ptr<const model::Snapshot> m_snapshot;
    model::CallNodeId m_highlighted = model::NoCallNode;
    FrameColoring m_coloring = FrameColoring::ByFunction;
    QString m_search;
    std::vector<uint8_t> m_matches; // per node, when searching: 1 the frame text contains the search text
    mutable std::vector<QString> m_labels; // per frame, filled on first use
    mutable std::vector<QRgb> m_fills; // per frame; 0 = not computed yet
};

} // namespace memscope::app
