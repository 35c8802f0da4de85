// DocumentWindow: the views of one snapshot around one Session. See documentwindow.h.
#include "views/documentwindow.h"

#include "views/calltreeview.h"
#include "views/eventlistview.h"
#include "views/insightsview.h"
#include "views/overviewview.h"
#include "views/segmentmapview.h"
#include "views/timelineview.h"
#include "views/whatifview.h"

#include "document/whatifanalysis.h"
#include "itemmodels/insightsmodel.h"

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDataStream>
#include <QDateTime>
#include <QDockWidget>
#include <QEvent>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QPalette>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QResizeEvent>
#include <QSlider>
#include <QSpinBox>
#include <QTimer>
#include <QToolBar>
#include <QToolButton>
#include <QVBoxLayout>

namespace memscope::app {

using namespace memscope::model;

std::optional<DocumentWindow::View> DocumentWindow::viewFromName(const QString& name)
{
    for (View v :
         { View::Timeline, View::Segments, View::Tree, View::Events, View::Overview, View::Insights, View::WhatIf })
        if (viewName(v) == name)
            return v;
    return std::nullopt;
}

QString DocumentWindow::viewName(View view)
{
    switch (view) {
    case View::Timeline:
        return QStringLiteral("timeline");
    case View::Segments:
        return QStringLiteral("segments");
    case View::Tree:
        return QStringLiteral("tree");
    case View::Events:
        return QStringLiteral("events");
    case View::Overview:
        return QStringLiteral("overview");
    case View::Insights:
        return QStringLiteral("insights");
    case View::WhatIf:
        return QStringLiteral("whatif");
    }
    return {};
}

namespace {
    // 2: insights dock, call stacks and details beside the timeline; 3: what-if dock; 4: proportions kept beside
    // QMainWindow's state.
    constexpr int LayoutVersion = 4;
    constexpr quint32 LayoutMagic = 0x6d734c79; // "msLy"
} // namespace

DocumentWindow::Proportions DocumentWindow::currentProportions() const
{
    Proportions p = m_proportions;
    if (width() < 200 || height() < 200)
        return p;
    auto fraction = [](int part, int whole, double fallback) {
        return whole > 0 && part > 0 ? std::clamp(double(part) / whole, 0.1, 0.9) : fallback;
    };
    if (m_treeDock->isVisible() && !m_treeDock->isFloating())
        p.right = fraction(m_treeDock->width(), width(), p.right);
    if (m_treeDock->isVisible() && m_detailsDock->isVisible() && !m_detailsDock->isFloating())
        p.tree = fraction(m_treeDock->height(), m_treeDock->height() + m_detailsDock->height(), p.tree);
    if (m_insightsDock->isVisible() && !m_insightsDock->isFloating())
        p.bottom = fraction(m_insightsDock->height(), height(), p.bottom);
    return p;
}

QByteArray DocumentWindow::saveLayout() const
{
    QByteArray out;
    QDataStream stream(&out, QIODevice::WriteOnly);
    const Proportions p = currentProportions();
    stream << LayoutMagic << qint32(LayoutVersion) << saveState(LayoutVersion) << p.right << p.tree << p.bottom;
    return out;
}

bool DocumentWindow::restoreLayout(const QByteArray& saved)
{
    QDataStream stream(saved);
    quint32 magic = 0;
    qint32 version = 0;
    QByteArray state;
    Proportions p;
    stream >> magic >> version >> state >> p.right >> p.tree >> p.bottom;
    // An older memscope's layout (QMainWindow's state alone), or another version's: the defaults stay.
    if (stream.status() != QDataStream::Ok || magic != LayoutMagic || version != LayoutVersion
        || !restoreState(state, LayoutVersion))
        return false;
    auto sane = [](double v, double fallback) { return v >= 0.1 && v <= 0.9 ? v : fallback; };
    const Proportions defaults;
    m_proportions = { sane(p.right, defaults.right), sane(p.tree, defaults.tree), sane(p.bottom, defaults.bottom) };
    m_sized = false;
    applyProportions();
    return true;
}

void DocumentWindow::resetLayout()
{
    restoreState(m_defaultState, LayoutVersion);
    m_proportions = Proportions {};
    m_sized = false;
    applyProportions();
}

DocumentWindow::DocumentWindow(std::shared_ptr<const Document> document, QWidget* parent)
    : QMainWindow(parent)
    , m_session(new Session(std::move(document), this))
{
    setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks | QMainWindow::AllowNestedDocks);
    setDockNestingEnabled(true);

    m_timeline = new TimelineView(m_session, this);
    m_timeline->setObjectName(QStringLiteral("timelineView"));
    setCentralWidget(m_timeline);
    m_current = m_timeline;

    m_segments = new SegmentMapView(m_session, this);
    m_segments->setObjectName(QStringLiteral("segmentMapView"));
    m_tree = new CallTreeView(m_session, this);
    m_tree->setObjectName(QStringLiteral("callTreeView"));
    m_events = new EventListView(m_session, this);
    m_events->setObjectName(QStringLiteral("eventListView"));
    m_overview = new OverviewView(m_session, this);
    m_overview->setObjectName(QStringLiteral("overviewView"));

    auto* detailsBox = new QWidget(this);
    auto* detailsLayout = new QVBoxLayout(detailsBox);
    detailsLayout->setContentsMargins(2, 2, 2, 2);
    m_details = new QPlainTextEdit(detailsBox);
    m_details->setObjectName(QStringLiteral("detailsText"));
    m_details->setReadOnly(true);
    // Wrapped, so a long frame is read whole without a horizontal scroll bar.
    m_details->setLineWrapMode(QPlainTextEdit::WidgetWidth);
    m_details->setWordWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
    m_details->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_details->setPlaceholderText(tr("Hover or click an allocation to see its size, address, stream and stack."));
    auto* copy = new QPushButton(tr("Copy"), detailsBox);
    copy->setToolTip(tr("Copy the details and stack of the selection as text"));
    connect(copy, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(detailsText()); });
    detailsLayout->addWidget(m_details);
    detailsLayout->addWidget(copy, 0, Qt::AlignRight);

    m_insights = new InsightsModel(this);
    m_insightsView = new InsightsView(m_insights, m_session, this);
    m_insightsView->setObjectName(QStringLiteral("insightsView"));

    // The default layout answers first: beside the timeline the call stacks at the cursor and, under them, the
    // details of the hovered or selected allocation with its whole stack; under the timeline the insights (the
    // peak's top consumers, OOMs, leaks), the events and the overview chart. The segment map shares the call
    // stacks' place. Sizes are proportions of the window, set when it is first shown (showEvent).
    m_treeDock = addView(m_tree, tr("Call stacks"), Qt::RightDockWidgetArea);
    m_detailsDock = addView(detailsBox, tr("Details"), Qt::RightDockWidgetArea);
    splitDockWidget(m_treeDock, m_detailsDock, Qt::Vertical);
    QDockWidget* segDock = addView(m_segments, tr("Segment map"), Qt::RightDockWidgetArea);
    tabifyDockWidget(m_treeDock, segDock);
    m_treeDock->raise();
    m_insightsDock = addView(m_insightsView, tr("Insights"), Qt::BottomDockWidgetArea);
    QDockWidget* eventsDock = addView(m_events, tr("Events"), Qt::BottomDockWidgetArea);
    QDockWidget* overviewDock = addView(m_overview, tr("Overview"), Qt::BottomDockWidgetArea);
    tabifyDockWidget(m_insightsDock, eventsDock);
    tabifyDockWidget(m_insightsDock, overviewDock);
    // The what-if needs the whole trace: files only.
    if (!m_session->document().isLive()) {
        m_whatIf = new WhatIfAnalysis(m_session->documentPtr(), this);
        m_whatIfView = new WhatIfView(m_whatIf, m_session, this);
        m_whatIfView->setObjectName(QStringLiteral("whatIfView"));
        QDockWidget* whatIfDock = addView(m_whatIfView, tr("What if"), Qt::BottomDockWidgetArea);
        tabifyDockWidget(m_insightsDock, whatIfDock);
        connect(m_whatIf, &WhatIfAnalysis::suggestionReady, this,
                [this](std::vector<report::Insight> insights, QString settings) {
                    m_suggesting = false;
                    m_suggested = settings;
                    m_insights->setExtraInsights(std::move(insights));
                    Q_EMIT suggestionDone();
                });
        connect(m_insightsView, &InsightsView::linkActivated, this, [this](const QModelIndex& index) {
            if (index.data(InsightsModel::KindRole).toInt() == int(report::InsightKind::WhatIf)
                && !m_suggested.isEmpty())
                showWhatIf(m_suggested);
        });
    }
    m_insightsDock->raise();
    // The right column runs the full height, so the stack in the details pane gets room.
    setCorner(Qt::BottomRightCorner, Qt::RightDockWidgetArea);
    setCorner(Qt::TopRightCorner, Qt::RightDockWidgetArea);

    buildControls();
    buildWarningBanner();
    m_defaultState = saveState(LayoutVersion);

    connect(m_session, &Session::cursorChanged, this, [this] {
        if (!m_settingCursor)
            m_reason.clear();
        updateControls();
        updateDetails();
        Q_EMIT statusChanged();
    });

    // The replays' labels start once the document is shown (document/replaylabelling.h): its insights computed and
    // the timeline's first data in, then after the events already queued (the paint).
    if (!m_session->document().labelsDone()) {
        auto pending = std::make_shared<int>(2);
        auto shown = [this, pending] {
            if (--*pending == 0)
                QTimer::singleShot(0, m_session, &Session::startLabels);
        };
        connect(m_insights, &InsightsModel::computed, m_session, shown, Qt::SingleShotConnection);
        connect(m_timeline, &TimelineView::dataChanged, m_session, shown, Qt::SingleShotConnection);
    }
    // Insights: once for a file; for a live document again as it grows, at most every 2 s. A file's what-if
    // suggestion comes after them, on the thread pool too.
    m_insights->compute(m_session->documentPtr());
    if (m_whatIf) {
        m_suggesting = true;
        connect(m_insights, &InsightsModel::computed, m_whatIf, &WhatIfAnalysis::suggest, Qt::SingleShotConnection);
    }
    if (m_session->document().isLive()) {
        m_insightsTimer = new QTimer(this);
        m_insightsTimer->setSingleShot(true);
        m_insightsTimer->setInterval(2000);
        connect(m_insightsTimer, &QTimer::timeout, this, [this] { m_insights->compute(m_session->documentPtr()); });
        connect(m_session, &Session::grown, m_insightsTimer, [this] {
            if (!m_insightsTimer->isActive())
                m_insightsTimer->start();
        });
    } else {
        // A file opens where it says the most: at the first OOM if there is one, else at the end (model/landmarks.h).
        // An OOM on another device than the first shown one is found too: the window opens on that device.
        const auto& ooms = m_session->documentPtr()->oomEntries; // found at the load: no pass over the entries
        if (size_t(m_session->device()) >= ooms.size() || ooms[size_t(m_session->device())].empty()) {
            for (int d : m_session->devices()) {
                if (size_t(d) < ooms.size() && !ooms[size_t(d)].empty()) {
                    m_session->setDevice(d);
                    break;
                }
            }
        }
        const size_t device = size_t(m_session->device());
        const model::ResolvedMoment landing = device < ooms.size()
            ? model::openingMoment(m_session->snapshot(), m_session->replay(), ooms[device])
            : model::openingMoment(m_session->snapshot(), m_session->replay());
        if (landing.ok) {
            m_settingCursor = true;
            m_session->setCursor(landing.index);
            m_settingCursor = false;
            m_reason = tr("opened %1").arg(QString::fromStdString(landing.why));
            if (m_session->devices().size() > 1 && landing.index < m_session->entryCount())
                m_reason += tr(" on cuda:%1").arg(m_session->device());
            if (landing.index < m_session->entryCount())
                m_reason += tr(" (Go ▸ Next OOM for the others; the Insights say why it failed)");
            if (const QString before = m_session->aliveBeforeTheTrace(); !before.isEmpty())
                m_reason += QStringLiteral("; ") + before;
        }
    }
    connect(m_session, &Session::deviceChanged, this, [this] {
        updateControls();
        fillFilterMenu();
        Q_EMIT statusChanged();
    });
    connect(m_session, &Session::grown, this, [this] {
        // A live job may start using another device.
        for (int d : m_session->devices())
            if (m_deviceBox->findData(d) < 0)
                m_deviceBox->addItem(tr("cuda:%1").arg(d), d);
        m_deviceBox->setEnabled(m_deviceBox->count() > 1);
        updateControls();
        updateDetails();
        Q_EMIT statusChanged();
    });
    connect(m_session, &Session::hoveredChanged, this, &DocumentWindow::updateDetails);
    connect(m_session, &Session::selectionChanged, this, &DocumentWindow::updateDetails);
    connect(m_session, &Session::cursorChanged, this, &DocumentWindow::updateDetails);
    connect(m_session, &Session::filterChanged, this, &DocumentWindow::updateDetails);

    // Track which view the user works in, for File > Export.
    for (QWidget* w :
         { static_cast<QWidget*>(m_timeline), static_cast<QWidget*>(m_segments), static_cast<QWidget*>(m_tree),
           static_cast<QWidget*>(m_events), static_cast<QWidget*>(m_overview), static_cast<QWidget*>(m_insightsView) })
        w->installEventFilter(this);
    connect(qApp, &QApplication::focusChanged, this, [this](QWidget*, QWidget* now) {
        if (now)
            eventFilter(now, nullptr);
    });
    updateControls();
}

DocumentWindow::~DocumentWindow() = default;

QDockWidget* DocumentWindow::addView(QWidget* widget, const QString& title, Qt::DockWidgetArea area)
{
    auto* dock = new QDockWidget(title, this);
    dock->setObjectName(widget->objectName().isEmpty() ? title : widget->objectName() + QLatin1String("Dock"));
    dock->setWidget(widget);
    dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable
                      | QDockWidget::DockWidgetClosable);
    addDockWidget(area, dock);
    return dock;
}

// A file that loaded with warnings (model/loadwarning.h) is shown as usual, under a banner that says, one line per
// kind, what is wrong with it; the banner is the window's menu widget, so it spans the tab above every view.
void DocumentWindow::buildWarningBanner()
{
    const Document& doc = m_session->document();
    if (doc.warnings.empty())
        return;
    auto* banner = new QWidget(this);
    banner->setObjectName(QStringLiteral("warningBanner"));
    banner->setAutoFillBackground(true);
    QPalette palette = banner->palette();
    palette.setColor(QPalette::Window, QColor(0xff, 0xf4, 0xce));
    palette.setColor(QPalette::WindowText, QColor(0x5c, 0x40, 0x00));
    banner->setPalette(palette);
    auto* layout = new QHBoxLayout(banner);
    QStringList lines;
    const std::string file = doc.path.toStdString();
    for (const LoadWarning& w : doc.warnings)
        lines << QString::fromStdString(warningLine(file, w));
    auto* label = new QLabel(lines.join(QLatin1Char('\n')), banner);
    label->setObjectName(QStringLiteral("warningLabel"));
    label->setTextFormat(Qt::PlainText);
    label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    label->setWordWrap(true);
    label->setToolTip(tr("The file was opened anyway; figures that depend on what is wrong may be off."));
    auto* dismiss = new QPushButton(tr("Dismiss"), banner);
    dismiss->setObjectName(QStringLiteral("warningDismiss"));
    connect(dismiss, &QPushButton::clicked, banner, &QWidget::hide);
    layout->addWidget(label, 1);
    layout->addWidget(dismiss, 0, Qt::AlignTop);
    setMenuWidget(banner);
}

void DocumentWindow::buildControls()
{
    auto* bar = new QToolBar(tr("Cursor"), this);
    bar->setObjectName(QStringLiteral("cursorToolBar"));
    bar->setMovable(false);
    addToolBar(Qt::TopToolBarArea, bar);

    m_deviceBox = new QComboBox(bar);
    m_deviceBox->setObjectName(QStringLiteral("deviceBox"));
    m_deviceBox->setToolTip(tr("The device whose memory the views show"));
    for (int d : m_session->devices())
        m_deviceBox->addItem(tr("cuda:%1").arg(d), d);
    m_deviceBox->setEnabled(m_deviceBox->count() > 1);
    connect(m_deviceBox, &QComboBox::currentIndexChanged, this, [this](int i) {
        if (!m_updating && i >= 0)
            m_session->setDevice(m_deviceBox->itemData(i).toInt());
    });
    bar->addWidget(m_deviceBox);

    m_filterButton = new QToolButton(bar);
    m_filterButton->setObjectName(QStringLiteral("filterButton"));
    m_filterButton->setText(tr("Streams && pools"));
    m_filterButton->setToolTip(tr("Show or hide the memory of each stream and pool"));
    m_filterButton->setPopupMode(QToolButton::InstantPopup);
    m_filterButton->setMenu(new QMenu(m_filterButton));
    fillFilterMenu();
    bar->addWidget(m_filterButton);

    auto* colourBox = new QComboBox(bar);
    colourBox->setObjectName(QStringLiteral("colourBox"));
    colourBox->setToolTip(tr("How the timeline and the segment map colour allocations"));
    colourBox->addItem(tr("Colour by allocation"), int(ColorMode::Allocation));
    colourBox->addItem(tr("Colour by stack"), int(ColorMode::Stack));
    colourBox->addItem(tr("Colour by stream"), int(ColorMode::Stream));
    if (m_session->hasUserMetadata()) // torch.cuda.memory._set_memory_metadata was used
        colourBox->addItem(tr("Colour by user metadata"), int(ColorMode::Metadata));
    connect(colourBox, &QComboBox::currentIndexChanged, this,
            [this, colourBox](int i) { m_session->setColorMode(ColorMode(colourBox->itemData(i).toInt())); });
    bar->addWidget(colourBox);

    // The time axis and the cached-segments toggle live in the timeline's own header.
    bar->addSeparator();

    bar->addWidget(new QLabel(tr(" Entry "), bar));
    m_slider = new QSlider(Qt::Horizontal, bar);
    m_slider->setObjectName(QStringLiteral("cursorSlider"));
    m_slider->setMinimumWidth(240);
    m_slider->setToolTip(tr("The cursor: drag to scrub through the trace"));
    connect(m_slider, &QSlider::valueChanged, this, [this](int v) {
        if (!m_updating)
            m_session->setCursor(v);
    });
    bar->addWidget(m_slider);
    m_indexBox = new QSpinBox(bar);
    m_indexBox->setObjectName(QStringLiteral("cursorIndex"));
    m_indexBox->setToolTip(tr("State index: the state after this many trace entries"));
    m_indexBox->setKeyboardTracking(false);
    connect(m_indexBox, &QSpinBox::valueChanged, this, [this](int v) {
        if (!m_updating)
            m_session->setCursor(v);
    });
    bar->addWidget(m_indexBox);
}

void DocumentWindow::fillFilterMenu()
{
    QMenu* menu = m_filterButton->menu();
    menu->clear();
    const Snapshot& s = m_session->snapshot();
    menu->addSection(tr("Streams"));
    for (int64_t stream : m_session->streams()) {
        QAction* a = menu->addAction(
            tr("stream %1 (0x%2)").arg(s.streamNumber(stream)).arg(QString::number(quint64(stream), 16)));
        a->setCheckable(true);
        a->setChecked(m_session->isStreamVisible(stream));
        connect(a, &QAction::toggled, this, [this, stream](bool on) { m_session->setStreamVisible(stream, on); });
    }
    menu->addSection(tr("Pools"));
    for (auto pool : m_session->pools()) {
        const QString name = pool == std::pair<int64_t, int64_t> { 0, 0 }
            ? tr("default pool (0, 0)")
            : tr("pool (%1, %2)%3")
                  .arg(pool.first)
                  .arg(pool.second)
                  .arg(pool.first > 0 ? tr(" (CUDA graph)") : QString());
        QAction* a = menu->addAction(name);
        a->setCheckable(true);
        a->setChecked(m_session->isPoolVisible(pool));
        connect(a, &QAction::toggled, this, [this, pool](bool on) { m_session->setPoolVisible(pool, on); });
    }
}

void DocumentWindow::updateControls()
{
    m_updating = true;
    const int n = int(std::min<int64_t>(m_session->entryCount(), INT32_MAX));
    m_slider->setRange(0, n);
    m_slider->setValue(int(m_session->cursor()));
    m_slider->setPageStep(std::max(1, n / 50));
    m_indexBox->setRange(0, n);
    m_indexBox->setValue(int(m_session->cursor()));
    const int deviceIndex = m_deviceBox->findData(m_session->device());
    if (deviceIndex >= 0)
        m_deviceBox->setCurrentIndex(deviceIndex);
    m_updating = false;
}

QString DocumentWindow::detailsText() const
{
    const AllocationId id = m_session->focused();
    if (id != NoAllocation)
        return m_session->describeAllocation(id);
    return m_session->describeOomAtCursor();
}

void DocumentWindow::updateDetails()
{
    // The pane shows package files from their package folder on (Copy takes the full paths: detailsText()). With
    // nothing selected or hovered and the cursor just after an OOM: the failed request.
    const AllocationId id = m_session->focused();
    const QString text
        = id != NoAllocation ? m_session->describeAllocation(id, true) : m_session->describeOomAtCursor(true);
    if (text != m_details->toPlainText())
        m_details->setPlainText(text);
}

QString DocumentWindow::statusText() const
{
    const int64_t i = m_session->cursor();
    const auto& series = m_session->replay().series();
    // Until the replay is labelled (a file's, shortly after it opens), from the state the views show.
    const model::PackedSeries* largestFree = m_session->replay().largestFree();
    QString text = tr("entry %L1 of %L2").arg(i).arg(m_session->entryCount());
    if (!m_reason.isEmpty())
        text += QStringLiteral(" · ") + m_reason;
    if (!m_session->entries().empty()) {
        const double seconds = double(m_session->timeUsAt(i) - m_session->entries().front().timeUs) / 1e6;
        text += tr(" · %1 s").arg(seconds, 0, 'f', 3);
    }
    if (size_t(i) < series.size()) {
        text += tr(" · allocated %1 · active %2 · reserved %3 · largest free %4")
                    .arg(Session::formatBytes(series.allocated[size_t(i)]))
                    .arg(Session::formatBytes(series.active[size_t(i)]))
                    .arg(Session::formatBytes(series.reserved[size_t(i)]))
                    .arg(Session::formatBytes(largestFree ? (*largestFree)[size_t(i)]
                                                          : model::largestInactive(m_session->state())));
    }
    return text;
}

QWidget* DocumentWindow::view(View v) const
{
    switch (v) {
    case View::Timeline:
        return m_timeline;
    case View::Segments:
        return m_segments;
    case View::Tree:
        return m_tree;
    case View::Events:
        return m_events;
    case View::Overview:
        return m_overview;
    case View::Insights:
        return m_insightsView;
    case View::WhatIf:
        return m_whatIfView;
    }
    return nullptr;
}

void DocumentWindow::showWhatIf(const QString& settings)
{
    if (!m_whatIfView)
        return;
    showView(View::WhatIf);
    // Asked for: room for its curves (the dock shares the area under the timeline with the insights).
    if (auto* dock = qobject_cast<QDockWidget*>(m_whatIfView->parentWidget()))
        resizeDocks({ dock }, { height() * 9 / 20 }, Qt::Vertical);
    m_whatIfView->replay(settings);
}

QWidget* DocumentWindow::currentView() const { return m_current; }

void DocumentWindow::showView(View v)
{
    QWidget* w = view(v);
    if (!w)
        return;
    if (auto* dock = qobject_cast<QDockWidget*>(w->parentWidget())) {
        dock->show();
        dock->raise();
    }
    m_current = w;
}

void DocumentWindow::showFlameGraph(bool shown)
{
    showView(View::Tree);
    m_tree->setFlameGraphShown(shown);
}

void DocumentWindow::findInCallStacks()
{
    showView(View::Tree);
    m_tree->focusSearch();
}

void DocumentWindow::stepCursor(int64_t delta) { m_session->setCursor(m_session->cursor() + delta); }

void DocumentWindow::stepAnnotation(int direction)
{
    // Annotation boundaries (both ends of every span) in index order; jump to the nearest one past the cursor.
    std::vector<int64_t> marks;
    for (const AnnotationSpan& span : m_session->annotations()) {
        marks.push_back(span.begin);
        marks.push_back(span.end);
    }
    std::sort(marks.begin(), marks.end());
    const int64_t c = m_session->cursor();
    if (direction > 0) {
        auto it = std::upper_bound(marks.begin(), marks.end(), c);
        m_session->setCursor(it == marks.end() ? m_session->entryCount() : *it);
    } else {
        auto it = std::lower_bound(marks.begin(), marks.end(), c);
        m_session->setCursor(it == marks.begin() ? 0 : *std::prev(it));
    }
}

void DocumentWindow::setReason(const QString& reason)
{
    m_reason = reason;
    Q_EMIT statusChanged();
}

// Selects `preferred`, else the largest block live at `index`.
void DocumentWindow::selectAt(int64_t index, AllocationId preferred)
{
    if (preferred == NoAllocation) {
        ByteCount largest = -1;
        ReplayState state;
        m_session->replay().stateAt(index, state);
        for (const ReplayBlock& b : state.blocks)
            if (b.state != BlockState::Inactive && b.size > largest) {
                largest = b.size;
                preferred = b.allocation;
            }
    }
    m_session->setSelection(preferred);
}

QString DocumentWindow::goTo(const model::Moment& moment)
{
    const model::ResolvedMoment r = model::resolveMoment(moment, m_session->snapshot(), m_session->replay());
    if (!r.ok)
        return QString::fromStdString(r.error);
    m_settingCursor = true;
    m_session->setCursor(r.index);
    m_settingCursor = false;
    AllocationId select = NoAllocation;
    if (moment.kind == model::MomentKind::Largest) {
        select = model::largestAllocation(m_session->replay());
    } else if (moment.kind == model::MomentKind::PeakAllocated && m_insights->insights()) {
        // The peak's top consumer, as the Insights dock lists it first.
        for (const report::Insight& it : m_insights->insights()->items)
            if (it.kind == report::InsightKind::TopConsumer && it.device == m_session->device()) {
                select = it.allocation;
                break;
            }
    }
    if (moment.kind == model::MomentKind::Oom)
        m_session->setSelection(NoAllocation); // the failed request is the answer: the details pane shows it
    else if (moment.kind != model::MomentKind::Index && moment.kind != model::MomentKind::End)
        selectAt(r.index, select);
    QString why = QString::fromStdString(r.why);
    if (r.bytes > 0)
        why += QStringLiteral(": ") + Session::formatBytes(r.bytes);
    setReason(why);
    return {};
}

bool DocumentWindow::stepOom(int direction)
{
    const std::vector<int64_t> ooms = m_session->oomIndices();
    const int64_t c = m_session->cursor();
    int64_t target = -1;
    size_t which = 0;
    for (size_t k = 0; k < ooms.size(); ++k) {
        if (direction > 0 && ooms[k] > c) {
            target = ooms[k];
            which = k;
            break;
        }
        if (direction < 0 && ooms[k] < c) {
            target = ooms[k];
            which = k;
        }
    }
    if (ooms.empty()) {
        // None on this device: the first OOM of another one (the device box follows).
        const auto& all = m_session->documentPtr()->oomEntries;
        for (int d : m_session->devices()) {
            if (d != m_session->device() && size_t(d) < all.size() && !all[size_t(d)].empty()) {
                m_session->setDevice(d);
                goTo(model::Moment { model::MomentKind::Oom, 1, {} });
                setReason(tr("on cuda:%1 (no OOM on the device shown): %2").arg(d).arg(m_reason));
                return true;
            }
        }
    }
    if (target < 0) {
        setReason(ooms.empty()        ? tr("no OOM in this trace")
                      : direction > 0 ? tr("no OOM after the cursor")
                                      : tr("no OOM before the cursor"));
        return false;
    }
    goTo(model::Moment { model::MomentKind::Oom, int64_t(which) + 1, {} });
    return true;
}

// Until the user drags a separator (or a saved layout was restored), the docks keep proportions of the window, so
// the first window reads alike at 1280x720, at 4K and at 2x scale, and after maximizing.
void DocumentWindow::resizeEvent(QResizeEvent* event)
{
    QMainWindow::resizeEvent(event);
    if (!m_sized)
        applyProportions();
}

void DocumentWindow::applyProportions()
{
    if (width() < 200 || height() < 200)
        return;
    // By default the right column 40 % of the width (at least 360 px), its call stacks over the details 45:55; the
    // bottom area (insights, events, overview) a third of the height (at least 170 px). A dock comes out smaller
    // than asked by what its area adds around it (tab bars, separators): asked once more with that added, it comes
    // out as asked, so that the proportions saved from it are the ones applied.
    const Proportions& p = m_proportions;
    const int right = std::max(360, int(width() * p.right));
    const int tree = int(height() * p.tree), bottom = std::max(170, int(height() * p.bottom));
    for (int pass = 0; pass < 2; ++pass) {
        const int dr = pass ? right - m_treeDock->width() : 0;
        const int dt = pass ? tree - m_treeDock->height() : 0;
        const int db = pass ? bottom - m_insightsDock->height() : 0;
        resizeDocks({ m_treeDock }, { right + dr }, Qt::Horizontal);
        resizeDocks({ m_treeDock, m_detailsDock }, { tree + dt, height() - tree - dt }, Qt::Vertical);
        resizeDocks({ m_insightsDock }, { bottom + db }, Qt::Vertical);
        if (QLayout* l = layout())
            l->activate();
    }
}

bool DocumentWindow::event(QEvent* event)
{
    // A press on the window itself (not on a view) is on a dock separator: the user sizes the docks from now on.
    if (event->type() == QEvent::MouseButtonPress)
        m_sized = true;
    return QMainWindow::event(event);
}

bool DocumentWindow::eventFilter(QObject* watched, QEvent* event)
{
    // Called with a null event for focus changes anywhere in the application.
    if (!event || event->type() == QEvent::MouseButtonPress || event->type() == QEvent::FocusIn) {
        // The view that contains the widget the user pressed or focused becomes the current one.
        for (QWidget* w : { static_cast<QWidget*>(m_timeline), static_cast<QWidget*>(m_segments),
                            static_cast<QWidget*>(m_tree), static_cast<QWidget*>(m_events),
                            static_cast<QWidget*>(m_overview), static_cast<QWidget*>(m_insightsView) }) {
            auto* target = qobject_cast<QWidget*>(watched);
            if (target && (target == w || w->isAncestorOf(target))) {
                m_current = w;
                break;
            }
        }
    }
    return event ? QMainWindow::eventFilter(watched, event) : false;
}

} // namespace memscope::app
