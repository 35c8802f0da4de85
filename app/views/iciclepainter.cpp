// IciclePainter: see iciclepainter.h. The walk stops at the first child narrower than a pixel: children are sorted
// by bytes, so every later sibling is narrower too.
#include "views/iciclepainter.h"

#include "style/colors.h"

#include <QPainter>
#include <QPalette>
#include <QRect>

#include <algorithm>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;
using model::NoCallNode;

namespace {

    QColor textOn(const QColor& fill)
    {
        // Relative luminance (ITU-R BT.709 weights) decides black or white text.
        const double l = 0.2126 * fill.redF() + 0.7152 * fill.greenF() + 0.0722 * fill.blueF();
        return l > 0.5 ? QColor(0x10, 0x10, 0x10) : QColor(0xf4, 0xf4, 0xf4);
    }

} // namespace

void IciclePainter::drawNode(QPainter& p, const QPalette& palette, const IcicleLayout& layout, const IcicleStyle& style,
                             CallNodeId id, const QRectF& r, bool breadcrumb)
{
    QColor c = style.fill(id);
    if (style.faded(id))
        c = colors::mix(c, palette.color(QPalette::Base), 0.75);
    else if (breadcrumb && id != layout.zoom())
        c = colors::mix(c, palette.color(QPalette::Base), 0.35);
    // A one-pixel gap between neighbours and rows keeps the bars apart without outlines.
    const QRectF bar(r.x(), r.y(), std::max(r.width() - (r.width() > 3 ? 1.0 : 0.0), 1.0), r.height() - 1);
    p.fillRect(bar, c);
    if (r.width() < MinLabelWidth)
        return;
    const QString text = style.label(id, breadcrumb, r.width(), p.fontMetrics());
    p.setPen(textOn(c));
    const QRectF textRect = bar.adjusted(4, 0, -3, 0);
    p.drawText(textRect, Qt::AlignLeft | Qt::AlignVCenter,
               p.fontMetrics().elidedText(text, Qt::ElideRight, int(textRect.width())));
}

void IciclePainter::paint(QPainter& p, const QRect& exposed, const QRect& bounds, const QPalette& pal,
                          const IcicleLayout& layout, const IcicleStyle& style, CallNodeId hovered,
                          CallNodeId highlighted)
{
    p.fillRect(exposed, pal.color(QPalette::Base));
    const model::CallTree* tree = layout.tree();
    if (!tree || tree->root().childCount == 0) {
        p.setPen(pal.color(QPalette::PlaceholderText));
        p.drawText(bounds, Qt::AlignCenter, style.emptyText());
        return;
    }
    const double rowH = layout.rowHeight();
    const double clipTop = exposed.top(), clipBottom = exposed.bottom() + 1;
    auto rowVisible = [&](uint32_t depth) {
        const double y = depth * rowH;
        return y + rowH > clipTop && y < clipBottom;
    };

    // The breadcrumb: the zoomed node and its ancestors, full width.
    for (CallNodeId a = layout.zoom(); a != NoCallNode; a = tree->node(a).parent)
        if (rowVisible(tree->node(a).depth))
            drawNode(p, pal, layout, style, a, layout.rect(a), true);

    // The zoomed subtree, depth first.
    const double k = layout.scale();
    const int64_t origin = layout.start(layout.zoom());
    const bool drawsRest = style.drawsRest();
    const QColor restColor = colors::mix(pal.color(QPalette::Text), pal.color(QPalette::Base), 0.72);
    m_stack.clear();
    m_stack.push_back(layout.zoom());
    while (!m_stack.empty()) {
        const CallNodeId at = m_stack.back();
        m_stack.pop_back();
        const CallNode& n = tree->node(at);
        const uint32_t childDepth = n.depth + 1;
        if (double(childDepth) * rowH >= clipBottom)
            continue; // rows below the exposed area
        const double y = double(childDepth) * rowH;
        for (uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
            const CallNodeId child { c };
            const double x = double(layout.start(child) - origin) * k;
            const double w = double(layout.span(child)) * k;
            if (w < MinNodeWidth) {
                // Sorted by bytes: this child and every later one are narrower than a pixel. One bar for all.
                const CallNodeId last { n.firstChild + n.childCount - 1 };
                const double restW = double(layout.start(last) + layout.span(last) - origin) * k - x;
                if (drawsRest && restW >= MinNodeWidth && rowVisible(childDepth))
                    p.fillRect(QRectF(x, y, restW, rowH - 1), restColor);
                break;
            }
            if (x + w < exposed.left() || x > exposed.right() + 1)
                continue;
            if (rowVisible(childDepth))
                drawNode(p, pal, layout, style, child, QRectF(x, y, w, rowH), false);
            if (tree->node(child).childCount > 0)
                m_stack.push_back(child);
        }
    }

    // Hover and selection outlines on top.
    auto outline = [&](CallNodeId id, const QPen& pen) {
        if (id == NoCallNode || model::raw(id) >= tree->size())
            return;
        const QRectF r = layout.rect(id);
        if (r.isNull() || r.width() <= 0)
            return;
        p.setPen(pen);
        p.setBrush(Qt::NoBrush);
        p.drawRect(r.adjusted(0.5, 0.5, -1.5, -1.5));
    };
    outline(hovered, QPen(pal.color(QPalette::Text), 1));
    outline(highlighted, QPen(colors::selection(pal), 2));
}

} // namespace memscope::app
