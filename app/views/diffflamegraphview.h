// The differential flame graph of a diff: an icicle (outermost frames at the top) whose widths are the gross change
// under each frame (Σ|Δ bytes| of its stacks: growth and shrink both take room, so a frame whose callees grew by as
// much as others shrank is still visible) and whose colour is the sign of the net change: red for growth, green for
// shrink, the more saturated the more one-sided (Brendan Gregg's differential flame graphs colour by sign the same
// way). An IcicleView (icicleview.h: layout, painting, hover, tooltips) over the Gross DiffTree, as the call tree's
// flame graph. A click zooms into a frame, a double click or Esc zooms out. Follows its
// DiffSession; GUI thread only.
#pragma once

#include "itemmodels/diffmodel.h"
#include "views/icicleview.h"

#include <QPointer>
#include <QWidget>

#include <memory>
#include <vector>

namespace memscope::app {

class DiffFlameGraphView : public IcicleView {
    Q_OBJECT
public:
    // `session` must outlive the view.
    explicit DiffFlameGraphView(DiffSession* session, QWidget* parent = nullptr);

    const DiffTree& diffTree() const { return *m_tree; }
    void setZoom(model::CallNodeId node);
    model::CallNodeId nodeAt(QPointF pos) const { return m_layout.nodeAt(pos); }

    // The fill of a node: red ∝ growth share, green ∝ shrink share, grey when unchanged. Pure.
    static QColor deltaColor(int64_t growth, int64_t shrink, bool dark);

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override { return { 300, 120 }; }

protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseDoubleClickEvent(QMouseEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;

private:
    void rebuild();
    QString toolTipFor(model::CallNodeId id) const override;

    QPointer<DiffSession> m_session;
    std::shared_ptr<const DiffTree> m_tree;
};

} // namespace memscope::app
