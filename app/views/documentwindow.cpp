// DocumentWindow: the views of one snapshot around one Session. See documentwindow.h.
#include "views/documentwindow.h"

#include "views/calltreeview.h"
#include "views/eventlistview.h"
#include "views/overviewview.h"
#include "views/segmentmapview.h"
#include "views/timelineview.h"

#include <QApplication>
#include <QClipboard>
#include <QComboBox>
#include <QDateTime>
#include <QDockWidget>
#include <QEvent>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSlider>
#include <QSpinBox>
#include <QToolBar>
#include <QToolButton>
#include <QVBoxLayout>

namespace memscope::app {

using namespace memscope::model;

std::optional<DocumentWindow::View> DocumentWindow::viewFromName(const QString& name)
{
    for (View v : { View::Timeline, View::Segments, View::Tree, View::Events, View::Overview })
        if (viewName(v) == name)
            return v;
    return std::nullopt;
}

QString DocumentWindow::viewName(View view)
{
    switch (view) {
    case View::Timeline: return QStringLiteral("timeline");
    case View::Segments: return QStringLiteral("segments");
    case View::Tree: return QStringLiteral("tree");
    case View::Events: return QStringLiteral("events");
    case View::Overview: return QStringLiteral("overview");
    }
    return {};
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
    m_details->setLineWrapMode(QPlainTextEdit::NoWrap);
    m_details->setFont(QFontDatabase::systemFont(QFontDatabase::FixedFont));
    m_details->setPlaceholderText(tr("Hover or click an allocation to see its size, address, stream and stack."));
    auto* copy = new QPushButton(tr("Copy"), detailsBox);
    copy->setToolTip(tr("Copy the details and stack of the selection as text"));
    connect(copy, &QPushButton::clicked, this, [this] { QApplication::clipboard()->setText(detailsText()); });
    detailsLayout->addWidget(m_details);
    detailsLayout->addWidget(copy, 0, Qt::AlignRight);

    QDockWidget* segDock = addView(m_segments, tr("Segment map"), Qt::RightDockWidgetArea);
    QDockWidget* treeDock = addView(m_tree, tr("Call stacks"), Qt::RightDockWidgetArea);
    tabifyDockWidget(segDock, treeDock);
    segDock->raise();
    QDockWidget* eventsDock = addView(m_events, tr("Events"), Qt::BottomDockWidgetArea);
    QDockWidget* overviewDock = addView(m_overview, tr("Overview"), Qt::BottomDockWidgetArea);
    QDockWidget* detailsDock = addView(detailsBox, tr("Details"), Qt::BottomDockWidgetArea);
    splitDockWidget(eventsDock, detailsDock, Qt::Horizontal);
    tabifyDockWidget(eventsDock, overviewDock);
    eventsDock->raise();
    resizeDocks({ segDock }, { 560 }, Qt::Horizontal);
    resizeDocks({ eventsDock }, { 260 }, Qt::Vertical);

    buildControls();

    connect(m_session, &Session::cursorChanged, this, [this] {
        updateControls();
        updateDetails();
        Q_EMIT statusChanged();
    });
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
    connect(m_session, &Session::filterChanged, this, &DocumentWindow::updateDetails);

    // Track which view the user works in, for File > Export.
    for (QWidget* w : { static_cast<QWidget*>(m_timeline), static_cast<QWidget*>(m_segments),
                        static_cast<QWidget*>(m_tree), static_cast<QWidget*>(m_events),
                        static_cast<QWidget*>(m_overview) })
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
    colourBox->setToolTip(tr("How the segment map colours blocks"));
    colourBox->addItem(tr("Colour by allocation"), int(SegmentMapView::ColorMode::Allocation));
    colourBox->addItem(tr("Colour by stack"), int(SegmentMapView::ColorMode::Stack));
    colourBox->addItem(tr("Colour by stream"), int(SegmentMapView::ColorMode::Stream));
    connect(colourBox, &QComboBox::currentIndexChanged, this, [this, colourBox](int i) {
        m_segments->setColorMode(SegmentMapView::ColorMode(colourBox->itemData(i).toInt()));
    });
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
        QAction* a = menu->addAction(tr("stream %1 (0x%2)").arg(s.streamNumber(stream)).arg(QString::number(quint64(stream), 16)));
        a->setCheckable(true);
        a->setChecked(m_session->isStreamVisible(stream));
        connect(a, &QAction::toggled, this, [this, stream](bool on) { m_session->setStreamVisible(stream, on); });
    }
    menu->addSection(tr("Pools"));
    for (auto pool : m_session->pools()) {
        const QString name = pool == std::pair<int64_t, int64_t> { 0, 0 }
            ? tr("default pool (0, 0)")
            : tr("pool (%1, %2)%3").arg(pool.first).arg(pool.second).arg(pool.first > 0 ? tr(" (CUDA graph)") : QString());
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
    return {};
}

void DocumentWindow::updateDetails()
{
    const QString text = detailsText();
    if (text != m_details->toPlainText())
        m_details->setPlainText(text);
}

QString DocumentWindow::statusText() const
{
    const int64_t i = m_session->cursor();
    const auto& series = m_session->replay().series();
    QString text = tr("entry %L1 of %L2").arg(i).arg(m_session->entryCount());
    if (!m_session->entries().empty()) {
        const double seconds = double(m_session->timeUsAt(i) - m_session->entries().front().timeUs) / 1e6;
        text += tr(" · %1 s").arg(seconds, 0, 'f', 3);
    }
    if (size_t(i) < series.size()) {
        text += tr(" · allocated %1 · active %2 · reserved %3 · largest free %4")
                    .arg(Session::formatBytes(series.allocated[size_t(i)]))
                    .arg(Session::formatBytes(series.active[size_t(i)]))
                    .arg(Session::formatBytes(series.reserved[size_t(i)]))
                    .arg(Session::formatBytes(series.largestFree[size_t(i)]));
    }
    return text;
}

QWidget* DocumentWindow::view(View v) const
{
    switch (v) {
    case View::Timeline: return m_timeline;
    case View::Segments: return m_segments;
    case View::Tree: return m_tree;
    case View::Events: return m_events;
    case View::Overview: return m_overview;
    }
    return nullptr;
}

QWidget* DocumentWindow::currentView() const
{
    return m_current;
}

void DocumentWindow::showView(View v)
{
    QWidget* w = view(v);
    if (auto* dock = qobject_cast<QDockWidget*>(w->parentWidget())) {
        dock->show();
        dock->raise();
    }
    m_current = w;
}

void DocumentWindow::stepCursor(int64_t delta)
{
    m_session->setCursor(m_session->cursor() + delta);
}

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

bool DocumentWindow::eventFilter(QObject* watched, QEvent* event)
{
    // Called with a null event for focus changes anywhere in the application.
    if (!event || event->type() == QEvent::MouseButtonPress || event->type() == QEvent::FocusIn) {
        // The view that contains the widget the user pressed or focused becomes the current one.
        for (QWidget* w : { static_cast<QWidget*>(m_timeline), static_cast<QWidget*>(m_segments),
                            static_cast<QWidget*>(m_tree), static_cast<QWidget*>(m_events),
                            static_cast<QWidget*>(m_overview) }) {
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
