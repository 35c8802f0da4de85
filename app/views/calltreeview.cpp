// CallTreeView: the toolbar, the tree and flame graph pages, the rebuild pipeline (Session change → coalescing
// timer → samples gathered on the GUI thread → CallTree built here or on the thread pool → applied if still the
// newest job, keeping the expanded call paths), and the two-way link with the Session selection (guarded by
// m_syncing). GUI thread only.
#include "views/calltreeview.h"

#include "views/flamegraphview.h"

#include <QAction>
#include <QActionGroup>
#include <QFutureWatcher>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QResizeEvent>
#include <QScrollArea>
#include <QSortFilterProxyModel>
#include <QStackedWidget>
#include <QTimer>
#include <QToolBar>
#include <QTreeView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace memscope::app {

using model::CallNodeId;
using model::CallTree;
using model::CallTreeDirection;

namespace {

    const QLocale& numberLocale()
    {
        static const QLocale locale(QLocale::English, QLocale::UnitedStates);
        return locale;
    }

    // Rows visited when deciding whether a search result is small enough to expand entirely.
    constexpr int ExpandAllLimit = 3000;

    int countRows(const QAbstractItemModel* m, const QModelIndex& parent, int limit)
    {
        int n = 0;
        for (int r = 0, rows = m->rowCount(parent); r < rows && n <= limit; ++r)
            n += 1 + countRows(m, m->index(r, 0, parent), limit - n);
        return n;
    }

} // namespace

CallTreeView::CallTreeView(Session* session, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
    , m_model(new CallTreeModel(this))
    , m_proxy(makeCallTreeProxy(m_model, this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);

    auto* bar = new QToolBar(this);
    bar->setToolButtonStyle(Qt::ToolButtonTextOnly);
    bar->setIconSize(QSize(16, 16));
    layout->addWidget(bar);

    // The page switch first: a narrow dock moves the last actions under the toolbar's overflow button, never it.
    auto* pages = new QActionGroup(this);
    m_treeAction = bar->addAction(tr("Tree"));
    m_treeAction->setObjectName(QStringLiteral("treeAction"));
    m_flameAction = bar->addAction(tr("Flame graph"));
    m_flameAction->setObjectName(QStringLiteral("flameGraphAction"));
    m_flameAction->setToolTip(tr("The same tree as a flame graph (icicle): width by bytes, click to zoom"));
    for (QAction* a : { m_treeAction, m_flameAction }) {
        a->setCheckable(true);
        pages->addAction(a);
    }
    m_treeAction->setChecked(true);
    connect(m_flameAction, &QAction::toggled, this, &CallTreeView::setFlameGraphShown);
    bar->addSeparator();
    auto* directions = new QActionGroup(this);
    m_topDown = bar->addAction(tr("Top-down"));
    m_topDown->setObjectName(QStringLiteral("topDownAction"));
    m_topDown->setToolTip(tr("Callers first: the outermost frames at the top level"));
    m_bottomUp = bar->addAction(tr("Bottom-up"));
    m_bottomUp->setObjectName(QStringLiteral("bottomUpAction"));
    m_bottomUp->setToolTip(tr("Allocating functions first: the innermost frames at the top level"));
    for (QAction* a : { m_topDown, m_bottomUp }) {
        a->setCheckable(true);
        directions->addAction(a);
    }
    m_topDown->setChecked(true);
    connect(m_topDown, &QAction::triggered, this, [this] { setDirection(CallTreeDirection::TopDown); });
    connect(m_bottomUp, &QAction::triggered, this, [this] { setDirection(CallTreeDirection::BottomUp); });
    bar->addSeparator();

    m_frameFilter = bar->addAction(tr("Hide internal frames"));
    m_frameFilter->setObjectName(QStringLiteral("frameFilterAction"));
    m_frameFilter->setToolTip(tr("Hide the allocator's, PyTorch's, the dispatcher's and the interpreter's frames: "
                                 "keep the user's code and model libraries"));
    m_frameFilter->setCheckable(true);
    m_frameFilter->setChecked(m_session->frameFilter());
    connect(m_frameFilter, &QAction::toggled, m_session, &Session::setFrameFilter);

    auto* expand = bar->addAction(tr("Expand largest"));
    expand->setObjectName(QStringLiteral("expandLargestAction"));
    expand->setToolTip(tr("Expand the largest call path down to where it allocates"));
    connect(expand, &QAction::triggered, this, [this] {
        setFlameGraphShown(false);
        expandToLargest();
    });
    bar->addSeparator();

    // The search on a row of its own, with the summary: always on screen (Ctrl+F), however narrow the dock.
    auto* searchRow = new QHBoxLayout;
    searchRow->setContentsMargins(4, 2, 0, 2);
    m_search = new QLineEdit(this);
    m_search->setObjectName(QStringLiteral("searchEdit"));
    m_search->setPlaceholderText(tr("Search frames (file, line, function)"));
    m_search->setClearButtonEnabled(true);
    m_search->setMaximumWidth(fontMetrics().horizontalAdvance(m_search->placeholderText()) * 3 / 2 + 40);
    searchRow->addWidget(m_search, 3);
    m_searchTimer = new QTimer(this);
    m_searchTimer->setSingleShot(true);
    m_searchTimer->setInterval(SearchDebounceMs);
    connect(m_search, &QLineEdit::textChanged, m_searchTimer, qOverload<>(&QTimer::start));
    connect(m_searchTimer, &QTimer::timeout, this, &CallTreeView::applySearch);

    auto* byFile = bar->addAction(tr("Colour by file"));
    byFile->setObjectName(QStringLiteral("colorByFileAction"));
    byFile->setToolTip(tr("Flame graph colours by source file instead of by function"));
    byFile->setCheckable(true);

    m_summary = new QLabel(this);
    m_summary->setObjectName(QStringLiteral("summaryLabel"));
    m_summary->setContentsMargins(4, 0, 6, 0);
    m_summary->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred); // cut, never widening the dock
    searchRow->addWidget(m_summary, 2);
    layout->addLayout(searchRow);

    m_stack = new QStackedWidget(this);
    layout->addWidget(m_stack, 1);

    m_treeView = new QTreeView(m_stack);
    m_treeView->setObjectName(QStringLiteral("callTree"));
    m_treeView->setModel(m_proxy);
    m_treeView->setUniformRowHeights(true); // lets QTreeView skip measuring every row
    m_treeView->setIndentation(12); // stacks are up to ~50 deep: keep room for the labels
    m_treeView->setSortingEnabled(true);
    m_treeView->sortByColumn(CallTreeModel::BytesColumn, Qt::DescendingOrder);
    m_treeView->setAlternatingRowColors(true);
    m_treeView->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_treeView->setSelectionMode(QAbstractItemView::SingleSelection);
    // A narrow column keeps both ends: the file's start and the line and function ("gen_sn…:149:big_trace").
    m_treeView->setTextElideMode(Qt::ElideMiddle);
    {
        QHeaderView* h = m_treeView->header();
        h->setStretchLastSection(false);
        h->setSectionResizeMode(CallTreeModel::FunctionColumn, QHeaderView::Stretch);
        const int numberWidth = fontMetrics().horizontalAdvance(QStringLiteral("1023.9 MiB")) + 24;
        for (int c = CallTreeModel::BytesColumn; c < CallTreeModel::ColumnCount; ++c) {
            h->setSectionResizeMode(c, QHeaderView::Interactive);
            h->resizeSection(c, numberWidth);
        }
    }
    m_stack->addWidget(m_treeView);
    connect(m_treeView->selectionModel(), &QItemSelectionModel::currentChanged, this,
            [this](const QModelIndex& current) { onCurrentChanged(current); });

    m_flameScroll = new QScrollArea(m_stack);
    m_flameScroll->setWidgetResizable(true);
    m_flameScroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    m_flameScroll->setFrameShape(QFrame::NoFrame);
    m_flame = new FlameGraphView(m_flameScroll);
    m_flameScroll->setWidget(m_flame);
    m_stack->addWidget(m_flameScroll);
    connect(m_flame, &FlameGraphView::nodeClicked, this, &CallTreeView::onFlameClicked);
    connect(byFile, &QAction::toggled, m_flame,
            [this](bool on) { m_flame->setColoring(on ? FrameColoring::ByFile : FrameColoring::ByFunction); });

    m_rebuildTimer = new QTimer(this);
    m_rebuildTimer->setSingleShot(true);
    m_rebuildTimer->setInterval(0); // coalesces a burst of cursor moves into one rebuild
    connect(m_rebuildTimer, &QTimer::timeout, this, [this] {
        if (m_pending && isVisible())
            startRebuild(Run::Auto);
    });

    connect(m_session, &Session::cursorChanged, this, [this] { scheduleRebuild(false); });
    connect(m_session, &Session::deviceChanged, this, [this] { scheduleRebuild(true); });
    connect(m_session, &Session::filterChanged, this, [this] {
        const QSignalBlocker block(m_frameFilter);
        m_frameFilter->setChecked(m_session->frameFilter());
        scheduleRebuild(false);
    });
    connect(m_session, &Session::selectionChanged, this, [this] {
        if (m_syncing)
            return; // the selection came from this tree's current row
        m_selectionPending = true;
        syncToSelection();
    });

    scheduleRebuild(true);
}

CallTreeView::~CallTreeView() = default;

void CallTreeView::setDirection(CallTreeDirection direction)
{
    if (direction == m_direction)
        return;
    m_direction = direction;
    (direction == CallTreeDirection::TopDown ? m_topDown : m_bottomUp)->setChecked(true);
    scheduleRebuild(true);
}

void CallTreeView::scheduleRebuild(bool resetLayout)
{
    m_pending = true;
    m_resetLayout = m_resetLayout || resetLayout;
    m_rebuildTimer->start();
}

void CallTreeView::resizeEvent(QResizeEvent* event)
{
    QWidget::resizeEvent(event);
    const int numberWidth = fontMetrics().horizontalAdvance(QStringLiteral("1023.9 MiB")) + 24;
    // The frame column keeps at least ~32 characters; the secondary numbers give way first.
    const bool narrow = width() < 4 * numberWidth + fontMetrics().horizontalAdvance(QLatin1Char('x')) * 32;
    m_treeView->setColumnHidden(CallTreeModel::CountColumn, narrow);
    m_treeView->setColumnHidden(CallTreeModel::SelfBytesColumn, narrow);
}

void CallTreeView::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    if (m_pending)
        m_rebuildTimer->start();
}

void CallTreeView::rebuildNow() { startRebuild(Run::Now); }

void CallTreeView::rebuildInBackground() { startRebuild(Run::InBackground); }

void CallTreeView::startRebuild(Run run)
{
    m_pending = false;
    m_rebuildTimer->stop();
    const uint64_t job = ++m_job;
    m_builtCursor = m_session->cursor();
    m_builtDevice = m_session->device();

    // Gathered here: Session::state() is the GUI thread's cache and changes with the cursor.
    std::vector<model::CallSample> samples;
    const Session* s = m_session;
    CallTree::appendActiveBlocks(s->state(), samples, [s](const model::ReplaySegment& seg) {
        return s->isStreamVisible(seg.stream) && s->isPoolVisible(seg.poolId);
    });
    // A backward allocation recorded without a stack is filed under the forward pass its autograd node came from,
    // where the trace kept it (forward_frames), instead of "<no stack recorded>".
    if (!s->snapshot().forwardStacks.empty()) {
        for (model::CallSample& sample : samples)
            if (sample.key != model::NoSampleKey)
                sample.stack = s->treeStack(model::AllocationId { sample.key });
    }
    // "Hide internal frames": PyTorch's filter and every frame that is not the user's code or a library's, but the
    // site (model/framefilter.h): a C++ stack's tree is as shallow as a Python one's, and bottom-up roots are sites.
    const model::CallTreeOptions options { m_direction, m_session->frameFilter(), m_session->frameFilter() };
    std::shared_ptr<const model::Snapshot> snapshot = m_session->document().snapshot;

    if (run == Run::Now || (run == Run::Auto && samples.size() <= m_asyncThreshold)) {
        applyTree(job, std::make_shared<const CallTree>(CallTree::build(*snapshot, samples, options)));
        return;
    }
    using Result = std::shared_ptr<const CallTree>;
    auto* watcher = new QFutureWatcher<Result>(this);
    connect(watcher, &QFutureWatcher<Result>::finished, this, [this, watcher, job] {
        applyTree(job, watcher->result());
        watcher->deleteLater();
    });
    watcher->setFuture(QtConcurrent::run(
        [doc = m_session->documentPtr(), snapshot, samples = std::move(samples), options]() -> Result {
            const auto lock = doc->readLock(); // a live document does not grow meanwhile
            return std::make_shared<const CallTree>(CallTree::build(*snapshot, samples, options));
        }));
}

void CallTreeView::collectExpanded(const QModelIndex& parent, std::vector<std::vector<model::FrameId>>& out) const
{
    for (int r = 0, rows = m_proxy->rowCount(parent); r < rows; ++r) {
        const QModelIndex i = m_proxy->index(r, 0, parent);
        if (!m_treeView->isExpanded(i))
            continue;
        out.push_back(m_model->tree().framePath(m_model->nodeOf(m_proxy->mapToSource(i))));
        collectExpanded(i, out);
    }
}

void CallTreeView::applyTree(uint64_t job, std::shared_ptr<const CallTree> tree)
{
    if (job != m_job)
        return; // a newer rebuild was started since: this result is stale

    // Keep what the user opened: the expanded call paths and the current row, found again by frames.
    std::vector<std::vector<model::FrameId>> expanded;
    std::vector<model::FrameId> current;
    const bool restore = !m_resetLayout;
    if (restore) {
        collectExpanded({}, expanded);
        const QModelIndex c = m_treeView->currentIndex();
        if (c.isValid())
            current = m_model->tree().framePath(m_model->nodeOf(m_proxy->mapToSource(c)));
    }
    m_resetLayout = false;
    m_shownJob = job;

    const QSignalBlocker blockFlame(m_flame);
    m_syncing = true;
    m_model->setTree(m_session->document().snapshot, tree);
    m_flame->setTree(m_session->document().snapshot, tree);
    bool restored = false;
    for (const auto& path : expanded) {
        const QModelIndex i = proxyIndex(m_model->tree().findPath(path));
        if (i.isValid()) {
            m_treeView->setExpanded(i, true);
            restored = true;
        }
    }
    if (!current.empty()) {
        const QModelIndex i = proxyIndex(m_model->tree().findPath(current));
        if (i.isValid())
            m_treeView->setCurrentIndex(i);
    }
    m_syncing = false;
    if (!restored && m_search->text().isEmpty())
        expandToLargest();
    else if (!m_search->text().isEmpty())
        applySearch();
    // A selection made while this tree was being built (P, L, O and a click elsewhere move the cursor and select at
    // once) is shown now that its allocation is in the tree.
    if (m_selectionPending)
        syncToSelection();
    updateSummary();
    Q_EMIT treeRebuilt();
}

QModelIndex CallTreeView::proxyIndex(CallNodeId node) const { return m_proxy->mapFromSource(m_model->indexOf(node)); }

void CallTreeView::focusSearch()
{
    m_search->setFocus(Qt::ShortcutFocusReason);
    m_search->selectAll();
}

void CallTreeView::setSearchText(const QString& text)
{
    if (m_search->text() != text)
        m_search->setText(text);
    applySearch();
}

void CallTreeView::applySearch()
{
    m_searchTimer->stop();
    const QString text = m_search->text().trimmed();
    m_proxy->setFilterFixedString(text);
    m_flame->setSearchText(text);
    if (text.isEmpty())
        return;
    // Show where the matches are: everything when that is a readable amount, else the first match's path.
    if (countRows(m_proxy, {}, ExpandAllLimit) <= ExpandAllLimit) {
        m_treeView->expandAll();
    } else {
        QModelIndex i = m_proxy->index(0, 0);
        while (i.isValid() && !i.data(CallTreeModel::FilterRole).toString().contains(text, Qt::CaseInsensitive)) {
            m_treeView->expand(i);
            i = m_proxy->index(0, 0, i);
        }
    }
}

CallNodeId CallTreeView::expandToLargest()
{
    QModelIndex parent;
    QModelIndex last;
    // Follow the largest child by raw bytes, whatever column the proxy is sorted by.
    while (true) {
        QModelIndex best;
        qlonglong bestBytes = 0;
        for (int r = 0, rows = m_proxy->rowCount(parent); r < rows; ++r) {
            const QModelIndex i = m_proxy->index(r, 0, parent);
            const qlonglong b = i.data(CallTreeModel::BytesRole).toLongLong();
            if (!best.isValid() || b > bestBytes) {
                best = i;
                bestBytes = b;
            }
        }
        if (!best.isValid())
            break;
        if (parent.isValid())
            m_treeView->expand(parent);
        last = best;
        parent = best;
    }
    if (!last.isValid())
        return model::NoCallNode;
    m_syncing = true;
    m_treeView->setCurrentIndex(last);
    m_syncing = false;
    m_treeView->scrollTo(last);
    return m_model->nodeOf(m_proxy->mapToSource(last));
}

bool CallTreeView::isFlameGraphShown() const { return m_stack->currentWidget() == m_flameScroll; }

void CallTreeView::setFlameGraphShown(bool shown)
{
    m_stack->setCurrentWidget(shown ? static_cast<QWidget*>(m_flameScroll) : m_treeView);
    (shown ? m_flameAction : m_treeAction)->setChecked(true);
}

void CallTreeView::onCurrentChanged(const QModelIndex& current)
{
    const CallNodeId node = current.isValid() ? m_model->nodeOf(m_proxy->mapToSource(current)) : model::NoCallNode;
    m_flame->setHighlighted(node);
    if (m_syncing || node == model::NoCallNode)
        return;
    m_selectionPending = false; // the user's row wins over a selection not shown yet
    const model::CallNode& n = m_model->tree().node(node);
    // A row reached by exactly one allocation stands for it: select it everywhere.
    if (n.samples == 1 && n.key != model::NoSampleKey && n.key < m_session->replay().allocations().size()) {
        m_syncing = true;
        m_session->setSelection(model::AllocationId { n.key });
        m_syncing = false;
    }
}

void CallTreeView::onFlameClicked(CallNodeId node)
{
    const QModelIndex i = proxyIndex(node);
    if (i.isValid()) {
        m_treeView->setCurrentIndex(i); // onCurrentChanged selects a single allocation in the Session
        m_treeView->scrollTo(i);
    }
}

void CallTreeView::syncToSelection()
{
    if (m_syncing)
        return;
    const model::AllocationId id = m_session->selection();
    if (id == model::NoAllocation || model::raw(id) >= m_session->replay().allocations().size()) {
        m_selectionPending = false;
        return;
    }
    // The tree holds the blocks live at the cursor it was built for: a selection at another cursor waits for the
    // tree of its cursor (applyTree).
    if (m_pending || m_shownJob != m_job || m_builtCursor != m_session->cursor()
        || m_builtDevice != m_session->device())
        return;
    const CallNodeId node = m_model->tree().find(m_session->snapshot(), m_session->treeStack(id));
    const QModelIndex i = proxyIndex(node);
    if (!i.isValid())
        return; // not live here: shown by the first tree that has it, unless the user picks a row first
    m_selectionPending = false;
    m_syncing = true;
    m_treeView->setCurrentIndex(i);
    m_treeView->scrollTo(i);
    m_syncing = false;
}

void CallTreeView::updateSummary()
{
    const model::CallNode& root = m_model->tree().root();
    m_summary->setText(tr("%1 live in %2 blocks at state %3")
                           .arg(Session::formatBytes(root.bytes), numberLocale().toString(qlonglong(root.count)),
                                numberLocale().toString(qlonglong(m_builtCursor))));
    m_summary->setToolTip(tr("Active blocks (allocated or pending free) of device %1 at the cursor, in the streams "
                             "and pools shown: %2 B")
                              .arg(m_builtDevice)
                              .arg(numberLocale().toString(qlonglong(root.bytes))));
}

} // namespace memscope::app
