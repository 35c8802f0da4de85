// IcicleLayout: see iciclelayout.h.
#include "views/iciclelayout.h"

#include <algorithm>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;
using model::CallTreeRoot;
using model::NoCallNode;

void IcicleLayout::setTree(std::shared_ptr<const model::CallTree> tree)
{
    m_tree = std::move(tree);
    const size_t n = m_tree ? m_tree->size() : 0;
    m_start.assign(n, 0);
    m_span.assign(n, 0);
    m_zoom = CallTreeRoot;
    if (n == 0)
        return;
    m_span[0] = std::max<int64_t>(0, m_tree->root().bytes);
    // Nodes are laid out breadth first, so a parent's extent is known before its children's.
    for (uint32_t i = 0; i < n; ++i) {
        const CallNode& p = m_tree->nodes()[i];
        int64_t cursor = m_start[i];
        const int64_t end = m_start[i] + m_span[i];
        for (uint32_t c = p.firstChild; c < p.firstChild + p.childCount; ++c) {
            const int64_t want = std::max<int64_t>(0, m_tree->nodes()[c].bytes);
            m_start[c] = cursor;
            m_span[c] = std::min(want, std::max<int64_t>(0, end - cursor));
            cursor += m_span[c];
        }
    }
}

void IcicleLayout::setZoom(CallNodeId node)
{
    m_zoom = m_tree && node != NoCallNode && model::raw(node) < m_tree->size() ? node : CallTreeRoot;
}

double IcicleLayout::contentHeight() const { return double((m_tree ? m_tree->maxDepth() : 0) + 1) * m_rowHeight; }

double IcicleLayout::scale() const
{
    const int64_t s = m_tree ? span(m_zoom) : 0;
    return s > 0 ? m_width / double(s) : 0.0;
}

bool IcicleLayout::isAncestorOrSelf(CallNodeId ancestor, CallNodeId node) const
{
    if (!m_tree || ancestor == NoCallNode || node == NoCallNode)
        return false;
    const uint32_t depth = m_tree->node(ancestor).depth;
    while (node != NoCallNode && m_tree->node(node).depth > depth)
        node = m_tree->node(node).parent;
    return node == ancestor;
}

QRectF IcicleLayout::rect(CallNodeId node) const
{
    if (!m_tree || node == NoCallNode || model::raw(node) >= m_tree->size())
        return {};
    const double y = double(m_tree->node(node).depth) * m_rowHeight;
    if (isAncestorOrSelf(node, m_zoom))
        return { 0, y, m_width, m_rowHeight };
    if (!isAncestorOrSelf(m_zoom, node))
        return {};
    const double k = scale();
    return { double(start(node) - start(m_zoom)) * k, y, double(span(node)) * k, m_rowHeight };
}

CallNodeId IcicleLayout::nodeAt(QPointF pos) const
{
    if (!m_tree || pos.x() < 0 || pos.x() >= m_width || pos.y() < 0 || m_rowHeight <= 0)
        return NoCallNode;
    const uint32_t row = uint32_t(pos.y() / m_rowHeight);
    if (row > m_tree->maxDepth())
        return NoCallNode;
    CallNodeId node = m_zoom;
    const uint32_t zoomDepth = m_tree->node(m_zoom).depth;
    if (row <= zoomDepth) {
        while (m_tree->node(node).depth > row)
            node = m_tree->node(node).parent;
        return node;
    }
    const double k = scale();
    if (k <= 0)
        return NoCallNode;
    // The byte under the pointer; children's starts grow with their row, so each level is a binary search.
    const double at = double(start(m_zoom)) + pos.x() / k;
    for (uint32_t depth = zoomDepth; depth < row; ++depth) {
        const CallNode& p = m_tree->node(node);
        const int64_t* first = m_start.data() + p.firstChild;
        const int64_t* last = first + p.childCount;
        const int64_t* it = std::upper_bound(first, last, at, [](double v, int64_t s) { return v < double(s); });
        if (it == first)
            return NoCallNode;
        const uint32_t c = p.firstChild + uint32_t(it - first - 1);
        if (at >= double(m_start[c] + m_span[c]))
            return NoCallNode; // in the parent's self part
        node = CallNodeId { c };
    }
    return node;
}

} // namespace memscope::app
