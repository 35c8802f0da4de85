// DiffFlameGraphView: see diffflamegraphview.h.
#include "views/diffflamegraphview.h"

#include "itemmodels/calltreemodel.h"
#include "style/colors.h"

#include <QKeyEvent>
#include <QLocale>
#include <QMouseEvent>

#include <cmath>

namespace memscope::app {

using model::CallNode;
using model::CallNodeId;

namespace {
    constexpr double RowHeight = 20.0;
} // namespace

DiffFlameGraphView::DiffFlameGraphView(DiffSession* session, QWidget* parent)
    : IcicleView(parent)
    , m_session(session)
{
    setObjectName(QStringLiteral("diffFlameGraph"));
    m_layout.setRowHeight(RowHeight);
    connect(session, &DiffSession::diffChanged, this, &DiffFlameGraphView::rebuild);
    connect(session, &DiffSession::normalisationChanged, this, &DiffFlameGraphView::rebuild);
    connect(session, &DiffSession::hideInternalChanged, this, &DiffFlameGraphView::rebuild);
    rebuild();
}

void DiffFlameGraphView::rebuild()
{
    if (!m_session)
        return;
    m_tree = std::make_shared<DiffTree>(
        buildDiffTree(m_session->resultPtr(), model::CallTreeDirection::TopDown, DiffWeight::Gross,
                      m_session->divisorA(), m_session->divisorB(), m_session->hideInternal()));
    m_layout.setTree(m_tree->tree);
    m_layout.setWidth(width());
    setHovered(model::NoCallNode);
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

void DiffFlameGraphView::paintEvent(QPaintEvent* event)
{
    // The Δ tree's policy: colour by the sign of the net change (deltaColor; the root grey-blue), the function
    // (whole frame where it fits) and the net Δ as the label, children narrower than a pixel left out.
    class Style final : public IcicleStyle {
    public:
        explicit Style(const DiffFlameGraphView& view)
            : m_tree(*view.m_tree)
            , m_dark(view.palette().color(QPalette::Base).lightness() < 128)
        {
        }
        QColor fill(CallNodeId id) const override
        {
            const size_t k = model::raw(id);
            return id == model::CallTreeRoot ? (m_dark ? QColor(0x50, 0x50, 0x58) : QColor(0xc8, 0xc8, 0xd0))
                                             : deltaColor(m_tree.growth[k], m_tree.shrink[k], m_dark);
        }
        QString label(CallNodeId id, bool, double width, const QFontMetrics& metrics) const override
        {
            const CallNode& n = m_tree.tree->node(id);
            const size_t k = model::raw(id);
            const int64_t net = m_tree.growth[k] + m_tree.shrink[k];
            QString text = id == model::CallTreeRoot ? DiffFlameGraphView::tr("all changes")
                                                     : shortFunctionName(*m_tree.result->frames, n.frame);
            if (id != model::CallTreeRoot) {
                const QString full = frameLabel(*m_tree.result->frames, n.frame);
                if (metrics.horizontalAdvance(full) + 90 < width)
                    text = full;
            }
            text += QStringLiteral("  ") + DiffModel::formatSignedBytes(double(net));
            return text;
        }
        QString emptyText() const override { return DiffFlameGraphView::tr("No allocation changed between A and B"); }

    private:
        const DiffTree& m_tree;
        const bool m_dark;
    };
    paintIcicle(event, Style(*this));
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

void DiffFlameGraphView::mousePressEvent(QMouseEvent* event)
{
    if (event->button() != Qt::LeftButton)
        return;
    const CallNodeId id = m_layout.nodeAt(event->position());
    if (id != model::NoCallNode)
        setZoom(id);
}

void DiffFlameGraphView::mouseDoubleClickEvent(QMouseEvent*) { setZoom(model::CallTreeRoot); }

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
