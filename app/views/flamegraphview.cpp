// IcicleLayout (pure geometry) and FlameGraphView (painting, zoom, hover, tooltips). Painting walks the zoomed
// subtree depth first with a reused explicit stack and stops at the first child narrower than a pixel: children
// are sorted by bytes, so every later sibling is narrower too, and their sum is drawn as one muted "rest" bar (the
// level of detail of Qt's "chip" example: about one primitive per pixel column). GUI thread only.
#include "views/flamegraphview.h"

#include "models/displaytext.h"
#include "models/session.h"
#include "style/colors.h"

#include <QEvent>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QPaintEvent>
#include <QPainter>
#include <QStringBuilder>
#include <QToolTip>

#include <algorithm>
#include <cmath>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;
using model::CallTreeRoot;
using model::NoCallNode;

// ---- IcicleLayout ----

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

// ---- FlameGraphView ----

namespace {

    constexpr double MinNodeWidth = 1.0; // narrower nodes are summed into their parent's "rest" bar
    constexpr double MinLabelWidth = 28.0;

    bool isDark(const QPalette& p) { return p.color(QPalette::Base).lightness() < 128; }

    QColor textOn(QColor fill)
    {
        // Relative luminance (ITU-R BT.709 weights) decides black or white text.
        const double l = 0.2126 * fill.redF() + 0.7152 * fill.greenF() + 0.0722 * fill.blueF();
        return l > 0.5 ? QColor(0x10, 0x10, 0x10) : QColor(0xf4, 0xf4, 0xf4);
    }

    const QLocale& numberLocale()
    {
        static const QLocale locale(QLocale::English, QLocale::UnitedStates);
        return locale;
    }

} // namespace

FlameGraphView::FlameGraphView(QWidget* parent)
    : QWidget(parent)
{
    setObjectName(QStringLiteral("flameGraph"));
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    setAttribute(Qt::WA_OpaquePaintEvent);
    m_layout.setRowHeight(fontMetrics().height() + 5);
    m_layout.setTree(std::make_shared<model::CallTree>());
}

void FlameGraphView::setTree(std::shared_ptr<const model::Snapshot> snapshot,
                             std::shared_ptr<const model::CallTree> tree)
{
    // Keep the zoom and the highlight on the same call paths (the cursor moved, the paths are still there).
    std::vector<model::FrameId> zoomPath, highlightPath;
    const model::CallTree* old = m_layout.tree();
    const bool sameFrames = snapshot == m_snapshot;
    if (old && sameFrames) {
        zoomPath = old->framePath(m_layout.zoom());
        if (m_highlighted != NoCallNode)
            highlightPath = old->framePath(m_highlighted);
    }
    const bool hadHighlight = m_highlighted != NoCallNode;
    if (!sameFrames) {
        m_labels.clear();
        m_fills.clear();
    }
    m_snapshot = std::move(snapshot);
    if (m_snapshot) {
        m_labels.resize(m_snapshot->frames.size());
        m_fills.resize(m_snapshot->frames.size(), 0);
    }
    m_layout.setTree(tree ? std::move(tree) : std::make_shared<model::CallTree>());
    const CallNodeId zoom = m_layout.tree()->findPath(zoomPath);
    m_layout.setZoom(zoom == NoCallNode ? CallTreeRoot : zoom);
    m_highlighted = hadHighlight && sameFrames ? m_layout.tree()->findPath(highlightPath) : NoCallNode;
    m_hovered = NoCallNode;
    updateMatches();
    updateGeometry();
    setMinimumHeight(int(std::ceil(m_layout.contentHeight())) + 2);
    update();
}

void FlameGraphView::setZoom(CallNodeId node)
{
    const CallNodeId before = m_layout.zoom();
    m_layout.setZoom(node);
    if (m_layout.zoom() != before) {
        update();
        Q_EMIT zoomChanged(m_layout.zoom());
    }
}

void FlameGraphView::zoomOut()
{
    const CallNodeId parent = m_layout.tree()->node(m_layout.zoom()).parent;
    setZoom(parent == NoCallNode ? CallTreeRoot : parent);
}

void FlameGraphView::resetZoom() { setZoom(CallTreeRoot); }

void FlameGraphView::setHighlighted(CallNodeId node)
{
    if (node == m_highlighted)
        return;
    m_highlighted = node;
    update();
}

void FlameGraphView::setSearchText(const QString& text)
{
    if (text == m_search)
        return;
    m_search = text;
    updateMatches();
    update();
}

void FlameGraphView::setColoring(FrameColoring coloring)
{
    if (coloring == m_coloring)
        return;
    m_coloring = coloring;
    std::fill(m_fills.begin(), m_fills.end(), 0);
    update();
}

void FlameGraphView::updateMatches()
{
    m_matches.clear();
    const model::CallTree* tree = m_layout.tree();
    if (m_search.isEmpty() || !tree || !m_snapshot)
        return;
    // Each frame's text is searched once; nodes copy their frame's answer.
    std::vector<uint8_t> frameMatch(m_snapshot->frames.size(), 2); // 2: not known yet
    m_matches.resize(tree->size(), 0);
    for (size_t i = 0; i < tree->size(); ++i) {
        const model::FrameId f = tree->nodes()[i].frame;
        if (model::isPseudoFrame(f)) {
            m_matches[i] = frameFullText(*m_snapshot, f).contains(m_search, Qt::CaseInsensitive);
            continue;
        }
        uint8_t& m = frameMatch[model::raw(f)];
        if (m == 2)
            m = frameFullText(*m_snapshot, f).contains(m_search, Qt::CaseInsensitive) ? 1 : 0;
        m_matches[i] = m;
    }
}

const QString& FlameGraphView::label(model::FrameId frame) const
{
    static const QString root = tr("all live allocations");
    if (!m_snapshot || frame == model::RootFrame)
        return root;
    if (model::isPseudoFrame(frame)) {
        static const QString none = frameLabel(*m_snapshot, model::NoStackFrame);
        static const QString hidden = frameLabel(*m_snapshot, model::HiddenFramesFrame);
        return frame == model::NoStackFrame ? none : hidden;
    }
    QString& l = m_labels[model::raw(frame)];
    if (l.isNull()) {
        // The function first (what flame graphs label), then where it is, so eliding keeps the name. Of a C++
        // name only the last two components ("Class::method(…)"): bars are narrow, the tooltip has the rest.
        const model::Frame& f = m_snapshot->frame(frame);
        QString name = shortFunctionName(*m_snapshot, frame);
        // shortFunctionName left no "::" inside brackets, so the last two separators are the real ones.
        if (const qsizetype last = name.lastIndexOf(QLatin1String("::")); last > 0) {
            if (const qsizetype previous = name.lastIndexOf(QLatin1String("::"), last - 1); previous >= 0)
                name = name.mid(previous + 2);
        }
        std::string_view file = m_snapshot->str(f.filename);
        if (const size_t slash = file.rfind('/'); slash != std::string_view::npos)
            file.remove_prefix(slash + 1);
        l = name;
        // "??:0" says nothing (no debug info); a file without a line is still worth its name.
        if (!file.empty() && file != "??") {
            l += QLatin1String("  ") + displayText(file);
            if (f.line.isPositive())
                l += QLatin1Char(':') + QString::fromStdString(f.line.toString());
        }
    }
    return l;
}

QRgb FlameGraphView::fill(model::FrameId frame) const
{
    if (!m_snapshot || model::isPseudoFrame(frame)) {
        static const model::Snapshot none; // pseudo frames are coloured without looking at a snapshot
        return frameColor(none, model::isPseudoFrame(frame) ? frame : model::RootFrame, m_coloring, isDark(palette()))
            .rgb();
    }
    QRgb& c = m_fills[model::raw(frame)];
    if (c == 0)
        c = frameColor(*m_snapshot, frame, m_coloring, isDark(palette())).rgb() | 0xff000000u;
    return c;
}

void FlameGraphView::drawNode(QPainter& p, CallNodeId id, const QRectF& r, bool breadcrumb)
{
    const CallNode& n = m_layout.tree()->node(id);
    const QPalette& pal = palette();
    QColor c = QColor::fromRgb(fill(n.frame));
    if (!m_matches.empty() && !m_matches[model::raw(id)])
        c = colors::mix(c, pal.color(QPalette::Base), 0.75);
    else if (breadcrumb && id != m_layout.zoom())
        c = colors::mix(c, pal.color(QPalette::Base), 0.35);
    // A one-pixel gap between neighbours and rows keeps the bars apart without outlines.
    const QRectF bar(r.x(), r.y(), std::max(r.width() - (r.width() > 3 ? 1.0 : 0.0), 1.0), r.height() - 1);
    p.fillRect(bar, c);
    if (r.width() < MinLabelWidth)
        return;
    QString text = label(n.frame);
    if (breadcrumb)
        text = text % QLatin1String("  ") % QChar(0x2014) % QLatin1String("  ") % Session::formatBytes(n.bytes);
    p.setPen(textOn(c));
    const QRectF textRect = bar.adjusted(4, 0, -3, 0);
    p.drawText(textRect, Qt::AlignLeft | Qt::AlignVCenter,
               p.fontMetrics().elidedText(text, Qt::ElideRight, int(textRect.width())));
}

void FlameGraphView::paintEvent(QPaintEvent* event)
{
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(event->rect(), pal.color(QPalette::Base));
    const model::CallTree* tree = m_layout.tree();
    if (!tree || tree->root().childCount == 0) {
        p.setPen(pal.color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter, tr("No live allocations at this point"));
        return;
    }
    const double rowH = m_layout.rowHeight();
    const double clipTop = event->rect().top(), clipBottom = event->rect().bottom() + 1;
    auto rowVisible = [&](uint32_t depth) {
        const double y = depth * rowH;
        return y + rowH > clipTop && y < clipBottom;
    };

    // The breadcrumb: the zoomed node and its ancestors, full width.
    for (CallNodeId a = m_layout.zoom(); a != NoCallNode; a = tree->node(a).parent)
        if (rowVisible(tree->node(a).depth))
            drawNode(p, a, m_layout.rect(a), true);

    // The zoomed subtree, depth first.
    const double k = m_layout.scale();
    const int64_t origin = m_layout.start(m_layout.zoom());
    const QColor restColor = colors::mix(pal.color(QPalette::Text), pal.color(QPalette::Base), 0.72);
    m_stack.clear();
    m_stack.push_back(m_layout.zoom());
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
            const double x = double(m_layout.start(child) - origin) * k;
            const double w = double(m_layout.span(child)) * k;
            if (w < MinNodeWidth) {
                // Sorted by bytes: this child and every later one are narrower than a pixel. One bar for all.
                const CallNodeId last { n.firstChild + n.childCount - 1 };
                const double restW = double(m_layout.start(last) + m_layout.span(last) - origin) * k - x;
                if (restW >= MinNodeWidth && rowVisible(childDepth))
                    p.fillRect(QRectF(x, y, restW, rowH - 1), restColor);
                break;
            }
            if (x + w < event->rect().left() || x > event->rect().right() + 1)
                continue;
            if (rowVisible(childDepth))
                drawNode(p, child, QRectF(x, y, w, rowH), false);
            if (tree->node(child).childCount > 0)
                m_stack.push_back(child);
        }
    }

    // Hover and selection outlines on top.
    auto outline = [&](CallNodeId id, const QPen& pen) {
        if (id == NoCallNode || model::raw(id) >= tree->size())
            return;
        const QRectF r = m_layout.rect(id);
        if (r.isNull() || r.width() <= 0)
            return;
        p.setPen(pen);
        p.setBrush(Qt::NoBrush);
        p.drawRect(r.adjusted(0.5, 0.5, -1.5, -1.5));
    };
    outline(m_hovered, QPen(pal.color(QPalette::Text), 1));
    outline(m_highlighted, QPen(colors::selection(pal), 2));
}

QString FlameGraphView::toolTipFor(CallNodeId id) const
{
    const model::CallTree& tree = *m_layout.tree();
    const CallNode& n = tree.node(id);
    const int64_t total = tree.root().bytes;
    const int64_t zoomBytes = tree.node(m_layout.zoom()).bytes;
    auto pct = [](int64_t part, int64_t whole) {
        return whole != 0 ? QString::number(100.0 * double(part) / double(std::abs(whole)), 'f', 2)
                          : QStringLiteral("0");
    };
    QString text = (m_snapshot ? frameFullText(*m_snapshot, n.frame) : label(n.frame)).toHtmlEscaped();
    text = QLatin1String("<p style='white-space:pre-wrap'><b>") % text % QLatin1String("</b><br>")
        % tr("%1 (%2 B) in %3 allocations")
              .arg(Session::formatBytes(n.bytes), numberLocale().toString(qlonglong(n.bytes)),
                   numberLocale().toString(qlonglong(n.count)))
        % QLatin1String("<br>") % tr("%1 % of live").arg(pct(n.bytes, total));
    if (m_layout.zoom() != CallTreeRoot)
        text += tr(", %1 % of the zoomed node").arg(pct(n.bytes, zoomBytes));
    text += QLatin1String("<br>")
        % tr("self: %1 in %2 allocations")
              .arg(Session::formatBytes(n.selfBytes), numberLocale().toString(qlonglong(n.selfCount)))
        % QLatin1String("<br><i>")
        % (m_layout.isAncestorOrSelf(id, m_layout.zoom()) && id != m_layout.zoom()
               ? tr("click to zoom out to here")
               : tr("click to zoom in; double-click or Esc to zoom out"))
        % QLatin1String("</i></p>");
    return text;
}

bool FlameGraphView::event(QEvent* event)
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

void FlameGraphView::resizeEvent(QResizeEvent* event)
{
    m_layout.setWidth(width());
    QWidget::resizeEvent(event);
}

void FlameGraphView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() == Qt::BackButton) {
        zoomOut();
        return;
    }
    if (event->button() != Qt::LeftButton)
        return QWidget::mousePressEvent(event);
    const CallNodeId id = m_layout.nodeAt(event->position());
    if (id == NoCallNode)
        return;
    setZoom(id);
    Q_EMIT nodeClicked(id);
}

void FlameGraphView::mouseDoubleClickEvent(QMouseEvent* event)
{
    if (event->button() == Qt::LeftButton)
        resetZoom();
}

void FlameGraphView::mouseMoveEvent(QMouseEvent* event)
{
    setHovered(m_layout.nodeAt(event->position()));
    QWidget::mouseMoveEvent(event);
}

void FlameGraphView::leaveEvent(QEvent* event)
{
    setHovered(NoCallNode);
    QWidget::leaveEvent(event);
}

void FlameGraphView::setHovered(CallNodeId node)
{
    if (node == m_hovered)
        return;
    m_hovered = node;
    update();
}

void FlameGraphView::keyPressEvent(QKeyEvent* event)
{
    if (event->key() == Qt::Key_Escape && m_layout.zoom() != CallTreeRoot)
        resetZoom();
    else if (event->key() == Qt::Key_Backspace)
        zoomOut();
    else
        QWidget::keyPressEvent(event);
}

void FlameGraphView::changeEvent(QEvent* event)
{
    if (event->type() == QEvent::PaletteChange || event->type() == QEvent::FontChange) {
        std::fill(m_fills.begin(), m_fills.end(), 0);
        m_layout.setRowHeight(fontMetrics().height() + 5);
        setMinimumHeight(int(std::ceil(m_layout.contentHeight())) + 2);
        update();
    }
    QWidget::changeEvent(event);
}

QSize FlameGraphView::sizeHint() const { return { 600, int(std::ceil(m_layout.contentHeight())) + 2 }; }

QSize FlameGraphView::minimumSizeHint() const { return { 100, int(std::ceil(m_layout.rowHeight())) }; }

} // namespace memscope::app
