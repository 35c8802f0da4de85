// FlameGraphView: zoom, clicks and keys, tooltips, and what its bars say (colours, labels; narrow children summed
// into one muted "rest" bar); layout, painting and hover are IcicleView's (icicleview.h). GUI thread only.
#include "views/flamegraphview.h"

#include "style/displaytext.h"
#include "document/session.h"
#include "style/colors.h"

#include <QEvent>
#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QStringBuilder>

#include <algorithm>
#include <cmath>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;
using model::CallTreeRoot;
using model::NoCallNode;

namespace {

    bool isDark(const QPalette& p) { return p.color(QPalette::Base).lightness() < 128; }

    const QLocale& numberLocale()
    {
        static const QLocale locale(QLocale::English, QLocale::UnitedStates);
        return locale;
    }

} // namespace

FlameGraphView::FlameGraphView(QWidget* parent)
    : IcicleView(parent)
{
    setObjectName(QStringLiteral("flameGraph"));
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
    setHovered(NoCallNode);
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
        if (const size_t slash = file.find_last_of("/\\"); slash != std::string_view::npos) // Windows paths too
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

void FlameGraphView::paintEvent(QPaintEvent* event)
{
    // The call tree's policy: each frame's colour (faded where a search does not match it), its label (with the
    // bytes on breadcrumb rows), children narrower than a pixel summed into one "rest" bar.
    class Style final : public IcicleStyle {
    public:
        explicit Style(const FlameGraphView& view)
            : m_view(view)
        {
        }
        QColor fill(CallNodeId id) const override { return QColor::fromRgb(m_view.fill(node(id).frame)); }
        bool faded(CallNodeId id) const override
        {
            return !m_view.m_matches.empty() && !m_view.m_matches[model::raw(id)];
        }
        QString label(CallNodeId id, bool breadcrumb, double, const QFontMetrics&) const override
        {
            const CallNode& n = node(id);
            if (!breadcrumb)
                return m_view.label(n.frame);
            return m_view.label(n.frame) % QLatin1String("  ") % QChar(0x2014) % QLatin1String("  ")
                % Session::formatBytes(n.bytes);
        }
        QString emptyText() const override { return FlameGraphView::tr("No live allocations at this point"); }
        bool drawsRest() const override { return true; }

    private:
        const CallNode& node(CallNodeId id) const { return m_view.m_layout.tree()->node(id); }
        const FlameGraphView& m_view;
    };
    paintIcicle(event, Style(*this), m_highlighted);
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
