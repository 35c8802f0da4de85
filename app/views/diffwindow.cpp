// DiffWindow: see diffwindow.h. Its overlays are in segmentdiffoverlay.h and timelinerangeoverlay.h.
#include "views/diffwindow.h"

#include "views/insightsview.h"

#include "itemmodels/calltreemodel.h"
#include "style/colors.h"
#include "views/diffflamegraphview.h"
#include "views/segmentdiffoverlay.h"
#include "views/segmentmapview.h"
#include "views/timelinerangeoverlay.h"
#include "views/timelineview.h"

#include <QAction>
#include <QCheckBox>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QScrollArea>
#include <QSplitter>
#include <QTabWidget>
#include <QToolBar>
#include <QTreeView>
#include <QTreeWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

namespace memscope::app {

using model::CallNodeId;

namespace {

    QString swatch(const QColor& c)
    {
        return QStringLiteral("<span style=\"color:%1\">■</span>").arg(c.name());
    }

    QString scopeTitle(const model::DiffTotals& t)
    {
        switch (t.scope) {
        case model::DiffScope::All:
            return DiffWindow::tr("All devices");
        case model::DiffScope::Device:
            return DiffWindow::tr("Device %1").arg(t.device);
        case model::DiffScope::Pool:
            return DiffWindow::tr("Device %1 · pool (%2, %3)").arg(t.device).arg(t.poolId.first).arg(t.poolId.second);
        case model::DiffScope::Stream:
            return t.stream == 0 ? DiffWindow::tr("Device %1 · default stream").arg(t.device)
                                 : DiffWindow::tr("Device %1 · stream 0x%2").arg(t.device).arg(QString::number(quint64(t.stream), 16));
        }
        return {};
    }

} // namespace

std::optional<DiffWindow::View> DiffWindow::viewFromName(const QString& name)
{
    for (View v : { View::Summary, View::Tree, View::Flame, View::Segments, View::Timeline, View::Insights })
        if (viewName(v) == name)
            return v;
    return std::nullopt;
}

QString DiffWindow::viewName(View view)
{
    switch (view) {
    case View::Summary:
        return QStringLiteral("diff-summary");
    case View::Tree:
        return QStringLiteral("diff-tree");
    case View::Flame:
        return QStringLiteral("diff-flame");
    case View::Segments:
        return QStringLiteral("diff-segments");
    case View::Timeline:
        return QStringLiteral("diff-timeline");
    case View::Insights:
        return QStringLiteral("diff-insights");
    }
    return {};
}

DiffWindow::DiffWindow(DiffInput a, DiffInput b, QWidget* parent)
    : QMainWindow(parent)
{
    setObjectName(QStringLiteral("diffWindow"));
    m_session = new DiffSession(std::move(a), std::move(b), this);

    // Toolbar: sides, swap, per step, filter, direction, search.
    QToolBar* bar = addToolBar(tr("Diff"));
    bar->setObjectName(QStringLiteral("diffToolBar"));
    bar->setMovable(false);
    QAction* swap = bar->addAction(tr("⇄ Swap A/B"), m_session, &DiffSession::swap);
    swap->setObjectName(QStringLiteral("swapAction"));
    swap->setToolTip(tr("Exchange the two sides: every Δ changes sign"));
    QAction* perStep = bar->addAction(tr("Per step"));
    perStep->setObjectName(QStringLiteral("perStepAction"));
    perStep->setCheckable(true);
    perStep->setEnabled(m_session->perStepAvailable());
    perStep->setToolTip(m_session->perStepAvailable()
                            ? tr("Divide A by its %1 and B by its %2 completed step_N annotations").arg(m_session->stepsA()).arg(m_session->stepsB())
                            : tr("Needs two files that both have step_N annotations"));
    connect(perStep, &QAction::toggled, m_session, &DiffSession::setPerStep);
    bar->addSeparator();
    auto* filterBox = new QComboBox(bar);
    filterBox->setObjectName(QStringLiteral("filterBox"));
    filterBox->addItem(tr("All changes"), int(DiffFilter::All));
    filterBox->addItem(tr("Growth only"), int(DiffFilter::Growth));
    filterBox->addItem(tr("Shrink only"), int(DiffFilter::Shrink));
    connect(filterBox, &QComboBox::currentIndexChanged, this,
            [this, filterBox](int i) { m_session->setFilter(DiffFilter(filterBox->itemData(i).toInt())); });
    bar->addWidget(filterBox);
    auto* directionBox = new QComboBox(bar);
    directionBox->setObjectName(QStringLiteral("directionBox"));
    directionBox->addItem(tr("Bottom-up (allocating frame first)"));
    directionBox->addItem(tr("Top-down (outermost frame first)"));
    connect(directionBox, &QComboBox::currentIndexChanged, this, [this](int i) {
        m_direction = i == 0 ? model::CallTreeDirection::BottomUp : model::CallTreeDirection::TopDown;
        rebuild();
    });
    bar->addWidget(directionBox);
    QAction* hideInternal = bar->addAction(tr("Hide internal frames"));
    hideInternal->setObjectName(QStringLiteral("diffHideInternalAction"));
    hideInternal->setCheckable(true);
    hideInternal->setChecked(m_session->hideInternal());
    hideInternal->setToolTip(tr("Hide the allocator's, PyTorch's, the dispatcher's and the interpreter's frames: "
                                "keep the user's code and model libraries"));
    connect(hideInternal, &QAction::toggled, m_session, &DiffSession::setHideInternal);
    auto* search = new QLineEdit(bar);
    search->setObjectName(QStringLiteral("diffSearch"));
    search->setPlaceholderText(tr("Search frames…"));
    search->setClearButtonEnabled(true);
    search->setMaximumWidth(260);
    bar->addWidget(search);

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(6, 4, 6, 0);
    m_sides = new QLabel(central);
    m_sides->setObjectName(QStringLiteral("sidesLabel"));
    m_sides->setTextFormat(Qt::RichText);
    m_sides->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_sides);
    m_tabs = new QTabWidget(central);
    m_tabs->setObjectName(QStringLiteral("diffTabs"));
    m_tabs->setDocumentMode(true);
    layout->addWidget(m_tabs, 1);
    setCentralWidget(central);

    // Summary.
    m_summary = new QTreeWidget(m_tabs);
    m_summary->setObjectName(QStringLiteral("diffSummary"));
    m_summary->setColumnCount(4);
    m_summary->setHeaderLabels({ tr("What"), tr("A"), tr("B"), tr("Δ (B − A)") });
    m_summary->setRootIsDecorated(true);
    m_summary->setAlternatingRowColors(true);
    m_summary->setUniformRowHeights(true);
    m_summary->header()->setStretchLastSection(false);
    m_summary->header()->setSectionResizeMode(0, QHeaderView::Stretch);
    for (int c = 1; c < 4; ++c)
        m_summary->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    m_tabs->addTab(m_summary, tr("Summary"));

    // Δ call tree.
    m_model = new DiffModel(this);
    m_proxy = new DiffProxyModel(this);
    m_proxy->setSourceModel(m_model);
    m_treeView = new QTreeView(m_tabs);
    m_treeView->setObjectName(QStringLiteral("diffTree"));
    m_treeView->setModel(m_proxy);
    m_treeView->setSortingEnabled(true);
    m_treeView->sortByColumn(DiffModel::DeltaBytesColumn, Qt::DescendingOrder);
    m_treeView->setUniformRowHeights(true);
    m_treeView->setAlternatingRowColors(true);
    m_treeView->header()->setStretchLastSection(false);
    m_treeView->header()->setSectionResizeMode(DiffModel::FunctionColumn, QHeaderView::Stretch);
    for (int c = DiffModel::BytesAColumn; c < DiffModel::ColumnCount; ++c)
        m_treeView->header()->setSectionResizeMode(c, QHeaderView::ResizeToContents);
    m_treePage = m_treeView;
    m_tabs->addTab(m_treeView, tr("Call Stacks Δ"));
    connect(search, &QLineEdit::textChanged, m_proxy, [this](const QString& text) {
        m_proxy->setFilterFixedString(text);
        if (!text.isEmpty())
            m_treeView->expandAll();
    });
    connect(m_session, &DiffSession::filterChanged, this, [this] {
        m_proxy->setFilter(m_session->filter());
        expandLargest();
    });

    // Insights: what grew (report/insights.h), first; an item with a stack selects it in the Δ call tree.
    m_insights = new InsightsModel(this);
    m_insightsView = new InsightsView(m_insights, nullptr, m_tabs);
    m_insightsView->setObjectName(QStringLiteral("diffInsights"));
    m_tabs->insertTab(0, m_insightsView, tr("Insights"));
    m_tabs->setCurrentIndex(0);
    connect(m_insightsView, &InsightsView::linkActivated, this, [this](const QModelIndex& index) {
        const report::Insight* it = m_insights->insightAt(index);
        if (!it || it->stack == model::EmptyStack || !m_model->diffTree())
            return;
        const model::CallTree& tree = *m_model->diffTree()->tree;
        model::CallNodeId node = tree.find(*m_session->result().frames, it->stack);
        if (node == model::NoCallNode)
            return;
        // Bottom-up, a stack ends at its outermost frame: select its allocating frame, the root's child, instead.
        if (tree.options().direction == model::CallTreeDirection::BottomUp)
            while (tree.node(node).parent != model::CallTreeRoot && tree.node(node).parent != model::NoCallNode)
                node = tree.node(node).parent;
        const QModelIndex at = m_proxy->mapFromSource(m_model->indexOf(node));
        if (!at.isValid())
            return;
        for (QModelIndex p = at.parent(); p.isValid(); p = p.parent())
            m_treeView->expand(p);
        m_treeView->setCurrentIndex(at);
        m_treeView->scrollTo(at);
        m_tabs->setCurrentWidget(m_treeView);
    });

    // Differential flame graph, in a scroll area for deep stacks, with a legend.
    m_flamePage = new QWidget(m_tabs);
    auto* flameLayout = new QVBoxLayout(m_flamePage);
    flameLayout->setContentsMargins(0, 4, 0, 0);
    auto* legend = new QLabel(tr("Width: bytes that changed below a frame (growth + shrink). %1 grew  %2 shrank  "
                                 "(paler: both). Click to zoom, double-click to zoom out.")
                                  .arg(swatch(colors::growth()), swatch(colors::shrink())),
                              m_flamePage);
    legend->setTextFormat(Qt::RichText);
    flameLayout->addWidget(legend);
    auto* flameScroll = new QScrollArea(m_flamePage);
    flameScroll->setWidgetResizable(true);
    flameScroll->setFrameShape(QFrame::NoFrame);
    m_flame = new DiffFlameGraphView(m_session, flameScroll);
    flameScroll->setWidget(m_flame);
    flameLayout->addWidget(flameScroll, 1);
    m_tabs->addTab(m_flamePage, tr("Flame Graph Δ"));

    // Segment maps side by side (filled by rebuildSides).
    m_segmentsPage = new QWidget(m_tabs);
    new QHBoxLayout(m_segmentsPage);
    m_tabs->addTab(m_segmentsPage, tr("Segments A | B"));

    // Timeline (same trace only).
    if (m_session->sameDocument()) {
        m_timelinePage = new QWidget(m_tabs);
        new QVBoxLayout(m_timelinePage);
        m_tabs->addTab(m_timelinePage, tr("Timeline"));
    }

    connect(m_session, &DiffSession::diffChanged, this, &DiffWindow::rebuild);
    connect(m_session, &DiffSession::hideInternalChanged, this, &DiffWindow::rebuild);
    connect(m_session, &DiffSession::normalisationChanged, this, &DiffWindow::applyNormalisation);
    rebuild();
}

DiffWindow::~DiffWindow() = default;

QWidget* DiffWindow::view(View view) const
{
    switch (view) {
    case View::Summary:
        return m_summary;
    case View::Tree:
        return m_treePage;
    case View::Flame:
        return m_flamePage;
    case View::Segments:
        return m_segmentsPage;
    case View::Timeline:
        return m_timelinePage;
    case View::Insights:
        return m_insightsView;
    }
    return nullptr;
}

void DiffWindow::showView(View v)
{
    if (QWidget* w = view(v))
        m_tabs->setCurrentWidget(w);
}

QWidget* DiffWindow::currentView() const { return m_tabs->currentWidget(); }

QString DiffWindow::title() const
{
    const auto name = [](const DiffInput& in) {
        QString s = in.document ? QFileInfo(in.document->path).fileName() : QString();
        if (in.index != model::EndOfTrace)
            s += QLatin1Char('@') + QString::number(in.index);
        return s;
    };
    return QStringLiteral("Δ ") + name(m_session->sideA()) + QStringLiteral(" → ") + name(m_session->sideB());
}

void DiffWindow::rebuild()
{
    const model::DiffResult& r = m_session->result();
    QString sides = tr("<b>A</b>: %1 &nbsp;&nbsp; <b>B</b>: %2")
                        .arg(diffInputLabel(m_session->sideA()).toHtmlEscaped(),
                             diffInputLabel(m_session->sideB()).toHtmlEscaped());
    if (!r.ok())
        sides += QStringLiteral(" &nbsp; <span style=\"color:#b01010\">") + QString::fromStdString(r.error).toHtmlEscaped()
            + QStringLiteral("</span>");
    m_sides->setText(sides);
    m_model->setTree(std::make_shared<DiffTree>(buildDiffTree(m_session->resultPtr(), m_direction, DiffWeight::Net, 1,
                                                              1, m_session->hideInternal())));
    m_model->setDivisors(m_session->divisorA(), m_session->divisorB());
    expandLargest();
    fillSummary();
    rebuildSides();
    auto insights = std::make_shared<report::Insights>(report::computeDiffInsights(r));
    m_insights->setInsights(std::move(insights));
}

void DiffWindow::applyNormalisation()
{
    m_model->setDivisors(m_session->divisorA(), m_session->divisorB());
    expandLargest();
    fillSummary();
}

void DiffWindow::expandLargest()
{
    m_treeView->collapseAll();
    QModelIndex at;
    QModelIndex child = m_proxy->index(0, 0);
    while (child.isValid()) {
        at = child;
        m_treeView->expand(at);
        child = m_proxy->index(0, 0, at);
    }
    if (at.isValid())
        m_treeView->setCurrentIndex(at);
}

void DiffWindow::fillSummary()
{
    m_summary->clear();
    const model::DiffResult& r = m_session->result();
    const QPalette pal = m_summary->palette();
    QFont bold = m_summary->font();
    bold.setBold(true);
    auto section = [&](const QString& title) {
        auto* item = new QTreeWidgetItem(m_summary, { title });
        item->setFont(0, bold);
        item->setFirstColumnSpanned(false);
        return item;
    };
    auto row = [&](QTreeWidgetItem* parent, const QString& label, const QString& a, const QString& b, double delta,
                   const QString& deltaText) {
        auto* item = new QTreeWidgetItem(parent, { label, a, b, deltaText });
        for (int c = 1; c < 4; ++c)
            item->setTextAlignment(c, Qt::AlignRight | Qt::AlignVCenter);
        item->setForeground(3, colors::deltaText(delta, pal));
        return item;
    };
    auto bytesRow = [&](QTreeWidgetItem* parent, const QString& label, int64_t a, int64_t b) {
        return row(parent, label, Session::formatBytes(a), Session::formatBytes(b), double(b - a),
                   DiffModel::formatSignedBytes(double(b - a)));
    };
    auto countRow = [&](QTreeWidgetItem* parent, const QString& label, int64_t a, int64_t b) {
        const int64_t d = b - a;
        return row(parent, label, QLocale().toString(qlonglong(a)), QLocale().toString(qlonglong(b)), double(d),
                   (d > 0 ? QStringLiteral("+") : d < 0 ? QString(QChar(0x2212)) : QString())
                       + QLocale().toString(qlonglong(std::abs(d))));
    };
    if (!r.ok()) {
        section(QString::fromStdString(r.error));
        return;
    }
    std::vector<QTreeWidgetItem*> expand;
    for (const model::DiffTotals& t : r.totals) {
        QTreeWidgetItem* s = section(scopeTitle(t));
        bytesRow(s, tr("allocated"), t.a.allocated, t.b.allocated);
        bytesRow(s, tr("active (allocated + pending free)"), t.a.active, t.b.active);
        bytesRow(s, tr("reserved"), t.a.reserved, t.b.reserved);
        bytesRow(s, tr("requested"), t.a.requested, t.b.requested);
        bytesRow(s, tr("fragmentation (reserved − active)"), t.a.fragmentation, t.b.fragmentation);
        bytesRow(s, tr("largest free block"), t.a.largestFree, t.b.largestFree);
        countRow(s, tr("segments"), t.a.segments, t.b.segments);
        countRow(s, tr("allocations"), t.a.allocations, t.b.allocations);
        if (t.scope == model::DiffScope::All)
            expand.push_back(s);
    }
    if (m_session->perStep()) {
        const double da = m_session->divisorA(), db = m_session->divisorB();
        QTreeWidgetItem* s = section(tr("Per step (A ÷ %1 steps, B ÷ %2 steps)").arg(m_session->stepsA()).arg(m_session->stepsB()));
        const model::DiffTotals& t = r.totals.front();
        auto perStepRow = [&](const QString& label, int64_t a, int64_t b) {
            const double pa = double(a) / da, pb = double(b) / db;
            row(s, label, Session::formatBytes(std::llround(pa)), Session::formatBytes(std::llround(pb)), pb - pa,
                DiffModel::formatSignedBytes(pb - pa));
        };
        perStepRow(tr("allocated per step"), t.a.allocated, t.b.allocated);
        perStepRow(tr("reserved per step"), t.a.reserved, t.b.reserved);
        expand.push_back(s);
    }
    {
        QTreeWidgetItem* s = section(tr("Segments"));
        const auto& seg = r.segments;
        auto* onlyA = row(s, tr("only in A (released)"), Session::formatBytes(seg.onlyA.bytes), QString(),
                          -double(seg.onlyA.bytes), tr("%1 segments").arg(seg.onlyA.count));
        onlyA->setForeground(3, colors::deltaText(seg.onlyA.count ? -1 : 0, pal));
        auto* onlyB = row(s, tr("only in B (added)"), QString(), Session::formatBytes(seg.onlyB.bytes),
                          double(seg.onlyB.bytes), tr("%1 segments").arg(seg.onlyB.count));
        onlyB->setForeground(3, colors::deltaText(seg.onlyB.count ? 1 : 0, pal));
        row(s, tr("in both"), Session::formatBytes(seg.both.bytes), Session::formatBytes(seg.both.bytes), 0,
            tr("%1 of %2 changed").arg(seg.bothChanged).arg(seg.both.count));
        expand.push_back(s);
    }
    if (r.sameTrace) {
        QTreeWidgetItem* s = section(tr("Allocations between A and B (same trace)"));
        const auto& l = r.lifetimes;
        auto life = [&](const QString& label, const model::DiffCountBytes& cb, double sign) {
            auto* item = row(s, label, QString(), Session::formatBytes(cb.bytes), sign * double(cb.bytes),
                             tr("%1 allocations").arg(QLocale().toString(qlonglong(cb.count))));
            item->setForeground(3, colors::deltaText(sign * double(cb.count), pal));
        };
        life(tr("new (live in B only)"), l.newAllocations, 1);
        life(tr("freed (live in A only)"), l.freed, -1);
        life(tr("surviving (live in both)"), l.surviving, 0);
        expand.push_back(s);
    }
    // The stacks that changed most, by their allocating frame (the innermost frame after the filter).
    const model::Snapshot& frames = *r.frames;
    auto stackLabel = [&](model::StackId stack) {
        if (frames.stackSize(stack) == 0)
            return frameLabel(frames, model::NoStackFrame);
        QString text = frameLabel(frames, *frames.stackBegin(stack));
        if (frames.stackSize(stack) > 1)
            text += QStringLiteral("  ← ") + frameLabel(frames, frames.stackBegin(stack)[1]);
        return text;
    };
    auto stackRows = [&](const QString& title, bool growth) {
        QTreeWidgetItem* s = nullptr;
        int n = 0;
        for (const model::DiffStackRow& sr : r.byStack) {
            if (growth ? sr.deltaBytes <= 0 : sr.deltaBytes >= 0)
                continue;
            if (!s)
                s = section(title);
            auto* item = row(s, stackLabel(sr.stack), Session::formatBytes(sr.bytesA), Session::formatBytes(sr.bytesB),
                             double(sr.deltaBytes),
                             DiffModel::formatSignedBytes(double(sr.deltaBytes)) + QStringLiteral(" (")
                                 + (sr.deltaCount > 0 ? QStringLiteral("+") : sr.deltaCount < 0 ? QString(QChar(0x2212)) : QString())
                                 + (std::abs(sr.deltaCount) == 1 ? tr("%1 alloc)") : tr("%1 allocs)")).arg(std::abs(sr.deltaCount)));
            QString tip;
            for (const model::FrameId* f = frames.stackBegin(sr.stack); f != frames.stackEnd(sr.stack); ++f)
                tip += frameFullText(frames, *f).toHtmlEscaped() + QStringLiteral("<br>");
            item->setToolTip(0, tip);
            if (++n == 8)
                break;
        }
        if (s)
            expand.push_back(s);
    };
    stackRows(tr("Largest growth (by allocating frame)"), true);
    stackRows(tr("Largest shrink"), false);
    for (QTreeWidgetItem* item : expand)
        item->setExpanded(true);
}

QString DiffWindow::summaryText() const
{
    QString out;
    std::function<void(QTreeWidgetItem*, int)> walk = [&](QTreeWidgetItem* item, int depth) {
        out += QString(depth * 2, QLatin1Char(' ')) + item->text(0) + QLatin1Char('\t') + item->text(1)
            + QLatin1Char('\t') + item->text(2) + QLatin1Char('\t') + item->text(3) + QLatin1Char('\n');
        for (int i = 0; i < item->childCount(); ++i)
            walk(item->child(i), depth + 1);
    };
    for (int i = 0; i < m_summary->topLevelItemCount(); ++i)
        walk(m_summary->topLevelItem(i), 0);
    return out;
}

void DiffWindow::rebuildSides()
{
    // Segment maps: one Session per side, its cursor at the side's index.
    QLayout* segLayout = m_segmentsPage->layout();
    while (QLayoutItem* item = segLayout->takeAt(0)) {
        delete item->widget();
        delete item;
    }
    delete m_sessionA;
    delete m_sessionB;
    m_sessionA = m_sessionB = nullptr;
    const model::DiffResult& r = m_session->result();
    auto makeSide = [&](const DiffInput& in, bool sideB) {
        auto* s = new Session(in.document, this);
        s->setDevice(in.viewDevice());
        s->setCursor(in.index == model::EndOfTrace ? s->entryCount() : in.index);
        auto* column = new QWidget(m_segmentsPage);
        auto* v = new QVBoxLayout(column);
        v->setContentsMargins(0, 0, 0, 0);
        auto* title = new QLabel(column);
        title->setTextFormat(Qt::RichText);
        title->setWordWrap(true);
        const model::DiffSegmentSummary& seg = r.segments;
        const QString what = sideB
            ? swatch(colors::growth()) + tr("%1 segments only in B (added)").arg(seg.onlyB.count)
                + (r.sameTrace ? tr(", %1 new blocks").arg(r.lifetimes.newAllocations.count) : QString())
            : swatch(colors::shrink()) + tr("%1 segments only in A (released)").arg(seg.onlyA.count)
                + (r.sameTrace ? tr(", %1 freed blocks").arg(r.lifetimes.freed.count) : QString());
        title->setText(QStringLiteral("<b>%1</b>: %2<br>%3; %4 %5 changed segments")
                           .arg(sideB ? QStringLiteral("B") : QStringLiteral("A"), diffInputLabel(in).toHtmlEscaped(),
                                what, swatch(colors::changed()), QString::number(seg.bothChanged)));
        v->addWidget(title);
        auto* map = new SegmentMapView(s, column);
        map->setObjectName(sideB ? QStringLiteral("segmentsB") : QStringLiteral("segmentsA"));
        new SegmentDiffOverlay(map, s, m_session, sideB);
        v->addWidget(map, 1);
        segLayout->addWidget(column);
        return s;
    };
    m_sessionA = makeSide(m_session->sideA(), false);
    m_sessionB = makeSide(m_session->sideB(), true);

    // Timeline of the one trace, cursor at B, range shaded.
    if (m_timelinePage) {
        QLayout* tl = m_timelinePage->layout();
        while (QLayoutItem* item = tl->takeAt(0)) {
            delete item->widget();
            delete item;
        }
        delete m_timelineSession;
        const DiffInput& a = m_session->sideA();
        const DiffInput& b = m_session->sideB();
        m_timelineSession = new Session(a.document, this);
        m_timelineSession->setDevice(b.viewDevice());
        m_timelineSession->setCursor(b.resolvedIndex());
        auto* label = new QLabel(tr("The range between A (index %1) and B (index %2) is shaded; the cursor is at B.")
                                     .arg(QLocale().toString(qlonglong(a.resolvedIndex())),
                                          QLocale().toString(qlonglong(b.resolvedIndex()))),
                                 m_timelinePage);
        tl->addWidget(label);
        m_timeline = new TimelineView(m_timelineSession, m_timelinePage);
        m_timeline->setObjectName(QStringLiteral("diffTimeline"));
        new TimelineRangeOverlay(m_timeline, m_timelineSession, a.resolvedIndex(), b.resolvedIndex());
        static_cast<QBoxLayout*>(tl)->addWidget(m_timeline, 1);
    }
}

} // namespace memscope::app
