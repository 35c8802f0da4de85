// IcicleView: see icicleview.h.
#include "views/icicleview.h"

#include <QEvent>
#include <QHelpEvent>
#include <QMouseEvent>
#include <QPaintEvent>
#include <QPainter>
#include <QToolTip>

namespace memscope::app {

using model::CallNodeId;
using model::NoCallNode;

IcicleView::IcicleView(QWidget* parent)
    : QWidget(parent)
{
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
}

void IcicleView::setHovered(CallNodeId node)
{
    if (node == m_hovered)
        return;
    m_hovered = node;
    update();
}

void IcicleView::paintIcicle(QPaintEvent* event, const IcicleStyle& style, CallNodeId highlighted)
{
    QPainter p(this);
    m_painter.paint(p, event->rect(), rect(), palette(), m_layout, style, m_hovered, highlighted);
}

bool IcicleView::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const CallNodeId id = m_layout.nodeAt(help->pos());
        if (id == NoCallNode)
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), toolTipFor(id), this);
        return true;
    }
    return QWidget::event(event);
}

void IcicleView::resizeEvent(QResizeEvent* event)
{
    m_layout.setWidth(width());
    QWidget::resizeEvent(event);
}

void IcicleView::mouseMoveEvent(QMouseEvent* event)
{
    setHovered(m_layout.nodeAt(event->position()));
    QWidget::mouseMoveEvent(event);
}

void IcicleView::leaveEvent(QEvent* event)
{
    setHovered(NoCallNode);
    QWidget::leaveEvent(event);
}

} // namespace memscope::app
