// DiffFlameGraphView: see diffflamegraphview.h.
#include "views/diffflamegraphview.h"

#include "models/calltreemodel.h"
#include "style/colors.h"

#include <QHelpEvent>
#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>
#include <QPainter>
#include <QPaintEvent>
#include <QToolTip>

#include <cmath>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;

namespace {
    constexpr double MinNodeWidth = 1.0;
    constexpr double MinLabelWidth = 28.0;
    constexpr double RowHeight = 20.0;

    QColor textOn(QColor fill)
    {
        const double l = 0.2126 * fill.redF() + 0.7152 * fill.greenF() + 0.0722 * fill.blueF();
        return l > 0.5 ? QColor(0x10, 0x10, 0x10) : QColor(0xf4, 0xf4, 0xf4);
    }
} // namespace

DiffFlameGraphView::DiffFlameGraphView(DiffSession* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
{
    setObjectName(QStringLiteral("diffFlameGraph"));
    setMouseTracking(true);
    setFocusPolicy(Qt::StrongFocus);
    m_layout.setRowHeight(RowHeight);
    connect(session, &DiffSession::diffChanged, this, &DiffFlameGraphView::rebuild);
    connect(session, &DiffSession::normalisationChanged, this, &DiffFlameGraphView::rebuild);
    rebuild();
}

void DiffFlameGraphView::rebuild()
{
    if (!m_session)
        return;
    m_tree = std::make_shared<DiffTree>(
        buildDiffTree(m_session->resultPtr(), model::CallTreeDirection::TopDown, DiffWeight::Gross,
                      m_session->divisorA(), m_session->divisorB()));
    m_layout.setTree(m_tree->tree);
    m_layout.setWidth(width());
    m_hovered = model::NoCallNode;
    updateGeometry();
    update();
}

void DiffFlameGraphView::setZoom(CallNodeId node)
{
    m_layout.setZoom(node);
    update();
}

QColor DiffFlameGraphView::deltaColor(int64_t growth, int64_t shrink, bool dark)
{
    const double gross = double(growth) - double(shrink);
    const QColor grey = dark ? QColor(0x5a, 0x5a, 0x5a) : QColor(0xd0, 0xd0, 0xd0);
    if (gross <= 0)
        return grey;
    const double share = (double(growth) + double(shrink)) / gross; // -1 all shrink .. +1 all growth
    const QColor red = dark ? QColor(0xd0, 0x40, 0x30) : QColor(0xe0, 0x4a, 0x3a);
    const QColor green = dark ? QColor(0x3a, 0xa0, 0x4a) : QColor(0x4c, 0xb0, 0x5a);
    // Mixed nodes fade towards grey, one-sided ones are fully saturated.
    return colors::mix(grey, share >= 0 ? red : green, 0.25 + 0.75 * std::abs(share));
}

QSize DiffFlameGraphView::sizeHint() const { return { 900, int(m_layout.contentHeight()) + 4 }; }

void DiffFlameGraphView::resizeEvent(QResizeEvent*)
{
    m_layout.setWidth(width());
}

void DiffFlameGraphView::drawNode(QPainter& p, CallNodeId id, const QRectF& r, bool breadcrumb)
{
    const CallNode& n = m_tree->tree->node(id);
    const size_t k = model::raw(id);
    const bool dark = palette().color(QPalette::Base).lightness() < 128;
    QColor c = id == model::CallTreeRoot ? (dark ? QColor(0x50, 0x50, 0x58) : QColor(0xc8, 0xc8, 0xd0))
                                         : deltaColor(m_tree->growth[k], m_tree->shrink[k], dark);
    if (breadcrumb && id != m_layout.zoom())
        c = colors::mix(c, palette().color(QPalette::Base), 0.35);
    const QRectF bar(r.x(), r.y(), std::max(r.width() - (r.width() > 3 ? 1.0 : 0.0), 1.0), r.height() - 1);
    p.fillRect(bar, c);
    if (r.width() < MinLabelWidth)
        return;
    const int64_t net = m_tree->growth[k] + m_tree->shrink[k];
    QString text = id == model::CallTreeRoot ? tr("all changes") : shortFunctionName(*m_tree->result->frames, n.frame);
    if (id != model::CallTreeRoot) {
        const QString full = frameLabel(*m_tree->result->frames, n.frame);
        if (p.fontMetrics().horizontalAdvance(full) + 90 < r.width())
            text = full;
    }
    text += QStringLiteral("  ") + DiffModel::formatSignedBytes(double(net));
    p.setPen(textOn(c));
    const QRectF textRect = bar.adjusted(4, 0, -3, 0);
    p.drawText(textRect, Qt::AlignLeft | Qt::AlignVCenter,
               p.fontMetrics().elidedText(text, Qt::ElideRight, int(textRect.width())));
}

void DiffFlameGraphView::paintEvent(QPaintEvent* event)
{
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(event->rect(), pal.color(QPalette::Base));
    const model::CallTree* tree = m_layout.tree();
    if (!tree || tree->root().childCount == 0) {
        p.setPen(pal.color(QPalette::PlaceholderText));
        p.drawText(rect(), Qt::AlignCenter, tr("No allocation changed between A and B"));
        return;
    }
    const double rowH = m_layout.rowHeight();
    for (CallNodeId a = m_layout.zoom(); a != model::NoCallNode; a = tree->node(a).parent)
        drawNode(p, a, m_layout.rect(a), true);
    const double k = m_layout.scale();
    const int64_t origin = m_layout.start(m_layout.zoom());
    m_stack.clear();
    m_stack.push_back(m_layout.zoom());
    while (!m_stack.empty()) {
        const CallNodeId at = m_stack.back();
        m_stack.pop_back();
        const CallNode& n = tree->node(at);
        const double y = double(n.depth + 1) * rowH;
        if (y >= event->rect().bottom() + 1)
            continue;
        for (uint32_t c = n.firstChild; c < n.firstChild + n.childCount; ++c) {
            const CallNodeId child { c };
            const double x = double(m_layout.start(child) - origin) * k;
            const double w = double(m_layout.span(child)) * k;
            if (w < MinNodeWidth)
                break; // children are sorted by bytes: the rest are narrower still
            drawNode(p, child, QRectF(x, y, w, rowH), false);
            if (tree->node(child).childCount > 0)
                m_stack.push_back(child);
        }
    }
    if (m_hovered != model::NoCallNode) {
        const QRectF r = m_layout.rect(m_hovered);
        if (!r.isNull() && r.width() > 0) {
            p.setPen(QPen(pal.color(QPalette::Text), 1));
            p.setBrush(Qt::NoBrush);
            p.drawRect(r.adjusted(0.5, 0.5, -1.5, -1.5));
        }
    }
}

QString DiffFlameGraphView::toolTipFor(CallNodeId id) const
{
    const CallNode& n = m_tree->tree->node(id);
    const size_t k = model::raw(id);
    QString tip = (id == model::CallTreeRoot ? tr("all changes") : frameFullText(*m_tree->result->frames, n.frame))
                      .toHtmlEscaped();
    tip += tr("<br>net Δ: <b>%1</b><br>growth %2, shrink %3<br>A %4 → B %5 (stacks that changed)")
               .arg(DiffModel::formatSignedBytes(double(m_tree->growth[k] + m_tree->shrink[k])),
                    DiffModel::formatSignedBytes(double(m_tree->growth[k])),
                    DiffModel::formatSignedBytes(double(m_tree->shrink[k])), Session::formatBytes(m_tree->bytesA[k]),
                    Session::formatBytes(m_tree->bytesB[k]));
    return tip;
}

bool DiffFlameGraphView::event(QEvent* event)
{
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const CallNodeId id = m_layout.nodeAt(help->pos());
        if (id != model::NoCallNode)
            QToolTip::showText(help->globalPos(), toolTipFor(id), this);
        else
            QToolTip::hideText();
        return true;
    }
    return QWidget::event(event);
}

void DiffFlameGraphView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton)
        return;
    const CallNodeId id = m_layout.nodeAt(event->position());
    if (id != model::NoCallNode)
        setZoom(id);
}

void DiffFlameGraphView::mouseDoubleClickEvent(QMouseEvent*) { setZoom(model::CallTreeRoot); }

void DiffFlameGraphView::mouseMoveEvent(QMouseEvent* event)
{
    const CallNodeId id = m_layout.nodeAt(event->position());
    if (id != m_hovered) {
        m_hovered = id;
        update();
    }
}

void DiffFlameGraphView::leaveEvent(QEvent*)
{
    m_hovered = model::NoCallNode;
    update();
}

void DiffFlameGraphView::keyPressEvent(QKeyEvent* event)
{
    if (event->key() == Qt::Key_Escape && m_layout.zoom() != model::CallTreeRoot) {
        const CallNodeId parent = m_layout.tree()->node(m_layout.zoom()).parent;
        setZoom(parent == model::NoCallNode ? model::CallTreeRoot : parent);
        return;
    }
    QWidget::keyPressEvent(event);
}

} // namespace memscope::app
