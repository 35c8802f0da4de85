// MainWindow: tabs, menus, loading, errors, export, settings. See mainwindow.h.
#include "views/mainwindow.h"

#include "views/attachdialog.h"
#include "views/diffwindow.h"
#include "views/livewindow.h"
#include "views/rankgroupview.h"
#include "views/timelineview.h"

#include "model/diff.h"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QDir>
#include <QImage>
#include <QPainter>
#include <QPointer>
#include <QProgressBar>
#include <QPushButton>
#include <QScreen>
#include <QSettings>
#include <QSignalBlocker>
#include <QStatusBar>
#include <QSvgGenerator>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <utility>

namespace memscope::app {

namespace {
    constexpr int MaxRecent = 10;
    const QString RecentKey = QStringLiteral("recentFiles");
    const QString GeometryKey = QStringLiteral("mainWindow/geometry");
    const QString StateKey = QStringLiteral("mainWindow/state");
    const QString DocStateKey = QStringLiteral("documentWindow/state");
} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
{
    setWindowTitle(QStringLiteral("memscope"));
    setAcceptDrops(true);
    // The first window fits the screen it opens on (a 1280x720 laptop, a 4K monitor at 2x): 1500x950 at most, 90 %
    // of the available area at least as small. A saved geometry (restoreGeometry below) wins.
    QSize first(1500, 950);
    if (const QScreen* screen = QGuiApplication::primaryScreen())
        first = first.boundedTo(screen->availableGeometry().size() * 9 / 10);
    resize(first);

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);

    m_errorBanner = new QWidget(central);
    m_errorBanner->setObjectName(QStringLiteral("errorBanner"));
    m_errorBanner->setAutoFillBackground(true);
    QPalette bannerPalette = m_errorBanner->palette();
    bannerPalette.setColor(QPalette::Window, QColor(0xfd, 0xe2, 0xe1));
    bannerPalette.setColor(QPalette::WindowText, QColor(0x80, 0x10, 0x10));
    m_errorBanner->setPalette(bannerPalette);
    auto* bannerLayout = new QHBoxLayout(m_errorBanner);
    m_errorLabel = new QLabel(m_errorBanner);
    m_errorLabel->setObjectName(QStringLiteral("errorLabel"));
    m_errorLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_errorLabel->setWordWrap(true);
    auto* dismiss = new QPushButton(tr("Dismiss"), m_errorBanner);
    connect(dismiss, &QPushButton::clicked, this, [this] {
        m_errors.clear();
        m_errorBanner->hide();
    });
    bannerLayout->addWidget(m_errorLabel, 1);
    bannerLayout->addWidget(dismiss);
    m_errorBanner->hide();

    m_tabs = new QTabWidget(central);
    m_tabs->setObjectName(QStringLiteral("documentTabs"));
    m_tabs->setTabsClosable(true);
    m_tabs->setDocumentMode(true);
    m_tabs->setMovable(true);
    connect(m_tabs, &QTabWidget::tabCloseRequested, this, [this](int i) {
        QWidget* w = m_tabs->widget(i);
        m_tabs->removeTab(i);
        w->deleteLater();
        m_emptyHint->setVisible(m_tabs->count() == 0);
        updateStatus();
    });
    connect(m_tabs, &QTabWidget::currentChanged, this, [this] {
        updateStatus();
        if (m_saveLive)
            m_saveLive->setEnabled(currentLive() != nullptr);
        if (currentLive())
            setWindowTitle(QStringLiteral("memscope — ") + m_tabs->tabText(m_tabs->currentIndex()));
        else if (auto* doc = currentDocument())
            setWindowTitle(QStringLiteral("memscope — ") + QFileInfo(doc->session()->document().path).fileName());
        else if (auto* diff = currentDiff())
            setWindowTitle(QStringLiteral("memscope — ") + diff->title());
        else if (currentRankGroup())
            setWindowTitle(QStringLiteral("memscope — ") + m_tabs->tabText(m_tabs->currentIndex()));
        else
            setWindowTitle(QStringLiteral("memscope"));
    });

    m_emptyHint = new QLabel(tr("Open a PyTorch memory snapshot (File ▸ Open, or drop it here).\n\n"
                                "Record one with torch.cuda.memory._record_memory_history() and "
                                "torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")."),
                             central);
    m_emptyHint->setAlignment(Qt::AlignCenter);
    m_emptyHint->setWordWrap(true);

    layout->addWidget(m_errorBanner);
    layout->addWidget(m_tabs, 1);
    layout->addWidget(m_emptyHint, 1);
    setCentralWidget(central);

    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("cursorStatus"));
    // A long line (the cursor, why it is there, the totals) is cut at the window's edge, never widens the window
    // past the screen (a label's minimum width is its text's); the whole line is its tooltip.
    m_status->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    statusBar()->addWidget(m_status, 1);
    m_progress = new QProgressBar(this);
    m_progress->setObjectName(QStringLiteral("loadProgress"));
    // Wide enough for "Loading <a long file name>… 100%" (the text is drawn inside the bar).
    m_progress->setMinimumWidth(
        fontMetrics().horizontalAdvance(QStringLiteral("Loading transformer_train.pickle… 100%")) + 24);
    m_progress->setMaximumWidth(m_progress->minimumWidth() * 3 / 2);
    m_progress->setRange(0, 100);
    m_progress->hide();
    m_cancel = new QPushButton(tr("Cancel"), this);
    m_cancel->setObjectName(QStringLiteral("cancelLoad"));
    m_cancel->setToolTip(tr("Stop loading"));
    m_cancel->hide();
    connect(m_cancel, &QPushButton::clicked, this, [this] {
        for (auto it = m_pending.cbegin(); it != m_pending.cend(); ++it)
            m_loader.cancel(it.key());
    });
    statusBar()->addPermanentWidget(m_progress);
    statusBar()->addPermanentWidget(m_cancel);

    connect(&m_loader, &SnapshotLoader::progress, this, [this](uint64_t job, int percent) {
        m_percent[job] = percent;
        updateProgress();
    });
    connect(&m_loader, &SnapshotLoader::finished, this, &MainWindow::onLoaded);

    buildMenus();

    QSettings settings;
    restoreGeometry(settings.value(GeometryKey).toByteArray());
    restoreState(settings.value(StateKey).toByteArray());
}

MainWindow::~MainWindow()
{
    // Before the tabs go: a live tab's receiver hands over its last update when stopped, which grows the session
    // and reaches this window's lambdas (status, current tab) through the views' signals. Stopped here, that runs
    // while every widget still exists; then nothing inside may call back into this half-destroyed window.
    stopLiveTabs();
    for (QObject* child : findChildren<QObject*>())
        QObject::disconnect(child, nullptr, this, nullptr);
}

void MainWindow::stopLiveTabs()
{
    for (LiveWindow* live : findChildren<LiveWindow*>())
        live->controller()->stop();
}

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* open = file->addAction(tr("&Open…"), this, &MainWindow::chooseFiles);
    open->setShortcut(QKeySequence::Open);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    updateRecentMenu();
    file->addSeparator();
    file->addAction(tr("&Attach to Job…"), this, &MainWindow::chooseAttach)
        ->setToolTip(tr("Record a running PyTorch job through its memscope agent and watch it live"));
    QAction* saveLive = file->addAction(tr("&Save Live Recording…"), this, [this] {
        if (LiveWindow* live = currentLive())
            live->chooseSave();
    });
    saveLive->setObjectName(QStringLiteral("saveLiveAction"));
    saveLive->setShortcut(QKeySequence::Save);
    saveLive->setToolTip(tr("Write what the current live tab has recorded as a snapshot (pickle or JSON)"));
    saveLive->setEnabled(currentLive() != nullptr); // with a live tab current only
    m_saveLive = saveLive;
    file->addAction(tr("Compare &Files…"), this, &MainWindow::chooseCompareFiles)
        ->setObjectName(QStringLiteral("compareFilesAction"));
    file->addAction(tr("Compare Two &Moments…"), this, &MainWindow::chooseCompareMoments)
        ->setObjectName(QStringLiteral("compareMomentsAction"));
    QAction* baseline = file->addAction(tr("Set &Baseline"), this, &MainWindow::setBaseline);
    baseline->setObjectName(QStringLiteral("setBaselineAction"));
    baseline->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_B));
    baseline->setToolTip(tr("Remember the current tab's cursor as side A of a later comparison"));
    QAction* compareBaseline = file->addAction(tr("Compare with Baseline"), this, [this] {
        if (!compareWithBaseline())
            showError(tr("Compare with Baseline: set a baseline first (Ctrl+B on a snapshot tab), then move the "
                         "cursor or switch tabs"));
    });
    compareBaseline->setObjectName(QStringLiteral("compareBaselineAction"));
    compareBaseline->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_B));
    file->addAction(tr("Open Rank &Group…"), this, &MainWindow::chooseRankGroup)
        ->setObjectName(QStringLiteral("openRankGroupAction"));
    file->addSeparator();
    QAction* exportAction = file->addAction(tr("&Export View…"), this, &MainWindow::chooseExport);
    exportAction->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_E));
    QAction* copyStack = file->addAction(tr("&Copy Selection's Stack"), this, [this] {
        if (auto* doc = currentDocument())
            QApplication::clipboard()->setText(doc->detailsText());
    });
    copyStack->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    file->addSeparator();
    QAction* close = file->addAction(tr("Close &Tab"), this, [this] {
        if (m_tabs->count())
            Q_EMIT m_tabs->tabCloseRequested(m_tabs->currentIndex());
    });
    close->setShortcut(QKeySequence::Close);
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);
    quit->setObjectName(QStringLiteral("quitAction"));

    QMenu* go = menuBar()->addMenu(tr("&Go"));
    auto addGo = [&](const QString& text, const QKeySequence& key, auto&& fn) {
        QAction* a = go->addAction(text, this, [this, fn] {
            if (auto* doc = currentDocument())
                fn(doc);
        });
        a->setShortcut(key);
        a->setShortcutContext(Qt::WindowShortcut);
    };
    addGo(tr("Previous Entry"), QKeySequence(Qt::Key_Left), [](DocumentWindow* d) { d->stepCursor(-1); });
    addGo(tr("Next Entry"), QKeySequence(Qt::Key_Right), [](DocumentWindow* d) { d->stepCursor(1); });
    addGo(tr("Previous Annotation"), QKeySequence(Qt::Key_PageUp), [](DocumentWindow* d) { d->stepAnnotation(-1); });
    addGo(tr("Next Annotation"), QKeySequence(Qt::Key_PageDown), [](DocumentWindow* d) { d->stepAnnotation(1); });
    addGo(tr("Start of Trace"), QKeySequence(Qt::Key_Home), [](DocumentWindow* d) { d->session()->setCursor(0); });
    addGo(tr("End of Trace"), QKeySequence(Qt::Key_End),
          [](DocumentWindow* d) { d->session()->setCursor(d->session()->entryCount()); });
    addGo(tr("Clear Selection"), QKeySequence(Qt::Key_Escape),
          [](DocumentWindow* d) { d->session()->setSelection(model::NoAllocation); });
    go->addSeparator();
    // Landmarks (model/landmarks.h): the same moments `--at`, Compare Two Moments and `memscope-cli diff A@peak`
    // take. Each selects what it is about and says why in the status line.
    auto goMoment = [this](model::MomentKind kind) {
        return [this, kind](DocumentWindow* d) {
            const QString error = d->goTo(model::Moment { kind, 1, {} });
            if (!error.isEmpty())
                statusBar()->showMessage(error, 5000);
        };
    };
    addGo(tr("Peak Allocated"), QKeySequence(Qt::Key_P), goMoment(model::MomentKind::PeakAllocated));
    addGo(tr("Peak Reserved"), QKeySequence(Qt::SHIFT | Qt::Key_P), goMoment(model::MomentKind::PeakReserved));
    addGo(tr("Next OOM"), QKeySequence(Qt::Key_O), [](DocumentWindow* d) { d->stepOom(1); });
    addGo(tr("Previous OOM"), QKeySequence(Qt::SHIFT | Qt::Key_O), [](DocumentWindow* d) { d->stepOom(-1); });
    addGo(tr("Largest Allocation"), QKeySequence(Qt::Key_L), goMoment(model::MomentKind::Largest));
    addGo(tr("Go to Moment…"), QKeySequence(Qt::CTRL | Qt::Key_G), [this](DocumentWindow* d) {
        bool ok = false;
        const QString text = QInputDialog::getText(
            this, tr("Go to moment"),
            tr("An entry index, end, peak, peak-reserved, oom, oom2…, largest, or a record_function name "
               "(NAME:end for its end):"),
            QLineEdit::Normal, QStringLiteral("peak"), &ok);
        if (!ok)
            return;
        const auto moment = model::parseMoment(text.trimmed().toStdString());
        const QString error = moment ? d->goTo(*moment) : tr("no moment given");
        if (!error.isEmpty())
            showError(text + QStringLiteral(": ") + error);
    });

    QMenu* view = menuBar()->addMenu(tr("&View"));
    const std::pair<DocumentWindow::View, QString> views[] = {
        { DocumentWindow::View::Timeline, tr("&Timeline") }, { DocumentWindow::View::Segments, tr("&Segment Map") },
        { DocumentWindow::View::Tree, tr("&Call Stacks") },  { DocumentWindow::View::Events, tr("&Events") },
        { DocumentWindow::View::Overview, tr("&Overview") }, { DocumentWindow::View::Insights, tr("&Insights") },
        { DocumentWindow::View::WhatIf, tr("&What If") },
    };
    int n = 1;
    for (const auto& [v, name] : views) {
        QAction* a = view->addAction(name, this, [this, v = v] {
            if (auto* doc = currentDocument())
                doc->showView(v);
        });
        a->setShortcut(QKeySequence(Qt::ALT | (Qt::Key_0 + n++)));
    }
    QAction* flame = view->addAction(tr("&Flame Graph"), this, [this] {
        if (auto* doc = currentDocument())
            doc->showFlameGraph(true);
    });
    flame->setObjectName(QStringLiteral("showFlameGraphAction"));
    flame->setShortcut(QKeySequence(Qt::ALT | Qt::Key_8)); // after the views, Alt+1 to Alt+7
    flame->setToolTip(tr("The call stacks at the cursor as a flame graph (the Call Stacks dock's Tree / Flame graph)"));
    QAction* find = view->addAction(tr("F&ind in Call Stacks"), this, [this] {
        if (auto* doc = currentDocument())
            doc->findInCallStacks();
    });
    find->setObjectName(QStringLiteral("findInCallStacksAction"));
    find->setShortcut(QKeySequence::Find);
    view->addSeparator();
    QAction* reset = view->addAction(tr("&Reset Layout"), this, [this] {
        if (auto* doc = currentDocument()) {
            doc->resetLayout();
            QSettings().remove(DocStateKey); // the next window opens with the defaults too
        }
    });
    reset->setObjectName(QStringLiteral("resetLayoutAction"));
    reset->setToolTip(tr("Put the docks back where a first launch puts them, in the same proportions"));
    view->addSeparator();
    QAction* compiler = view->addAction(tr("torch.compile's Own Annotations"));
    compiler->setObjectName(QStringLiteral("compilerAnnotationsAction"));
    compiler->setCheckable(true);
    compiler->setToolTip(tr("Show the record_function ranges torch.compile opens for itself (Torch-Compiled Region, "
                            "CompiledFunction, ## Call CompiledFxGraph ##...): hidden by default"));
    connect(compiler, &QAction::toggled, this, [this](bool on) {
        if (auto* doc = currentDocument())
            doc->session()->setCompilerAnnotationsShown(on);
    });
    connect(m_tabs, &QTabWidget::currentChanged, compiler, [this, compiler] {
        const QSignalBlocker block(compiler);
        auto* doc = currentDocument();
        compiler->setEnabled(doc != nullptr);
        compiler->setChecked(doc && doc->session()->compilerAnnotationsShown());
    });

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Keyboard Shortcuts"), this, &MainWindow::showShortcuts)
        ->setShortcut(QKeySequence::HelpContents);
    help->addAction(tr("&About memscope"), this, [this] {
        QMessageBox::about(this, tr("About memscope"),
                           tr("<b>memscope</b> %1<br>A GPU memory inspector for PyTorch memory snapshots.")
                               .arg(QApplication::applicationVersion()));
    });
}

void MainWindow::showShortcuts()
{
    QString text = QStringLiteral("<table>");
    for (QAction* menu : menuBar()->actions()) {
        if (!menu->menu())
            continue;
        for (QAction* a : menu->menu()->actions()) {
            if (a->shortcut().isEmpty())
                continue;
            text += QStringLiteral("<tr><td>%1&nbsp;&nbsp;</td><td><b>%2</b></td></tr>")
                        .arg(QString(a->text()).remove(QLatin1Char('&')),
                             a->shortcut().toString(QKeySequence::NativeText));
        }
    }
    text += tr("<tr><td>Drag on the timeline or overview</td><td><b>move the cursor</b></td></tr>"
               "<tr><td>Mouse wheel on a plot</td><td><b>zoom</b></td></tr>"
               "<tr><td>Click an allocation</td><td><b>select it in every view</b></td></tr>");
    text += QStringLiteral("</table>");
    QMessageBox box(this);
    box.setWindowTitle(tr("Keyboard Shortcuts"));
    box.setTextFormat(Qt::RichText);
    box.setText(text);
    box.exec();
}

void MainWindow::openFile(const QString& path)
{
    // A file already open in a tab is shown, not loaded into a second one (Open Recent, Open, a drop).
    const QString absolute = QFileInfo(path).absoluteFilePath();
    for (int i = 0; i < m_tabs->count(); ++i) {
        auto* doc = qobject_cast<DocumentWindow*>(m_tabs->widget(i));
        if (doc && !path.startsWith(QLatin1Char(':'))
            && QFileInfo(doc->session()->document().path).absoluteFilePath() == absolute) {
            m_tabs->setCurrentIndex(i);
            statusBar()->showMessage(tr("%1 is open already: shown").arg(QFileInfo(path).fileName()), 5000);
            QMetaObject::invokeMethod(
                this, [this] { Q_EMIT loadFinished(true); }, Qt::QueuedConnection); // as a load
            return;
        }
    }
    const uint64_t job = m_loader.load(path);
    m_pending.insert(job, path);
    m_percent.insert(job, 0);
    updateProgress();
}

void MainWindow::openFiles(const QStringList& paths)
{
    for (const QString& p : paths)
        openFile(p);
}

void MainWindow::updateProgress()
{
    const bool busy = !m_pending.isEmpty();
    m_progress->setVisible(busy);
    m_cancel->setVisible(busy);
    if (!busy)
        return;
    int sum = 0;
    for (int p : std::as_const(m_percent))
        sum += p;
    m_progress->setValue(m_percent.isEmpty() ? 0 : sum / int(m_percent.size()));
    m_progress->setFormat(m_pending.size() == 1
                              ? tr("Loading %1… %p%").arg(QFileInfo(m_pending.cbegin().value()).fileName())
                              : tr("Loading %1 files… %p%").arg(m_pending.size()));
}

void MainWindow::onLoaded(uint64_t job, const LoadOutcome& outcome)
{
    m_pending.remove(job);
    m_percent.remove(job);
    updateProgress();
    if (m_groupJobs.contains(job)) {
        const auto [group, position] = m_groupJobs.take(job);
        groupLoaded(group, position, outcome);
        return;
    }
    if (!outcome.ok()) {
        if (!outcome.cancelled)
            showError(outcome.error);
        Q_EMIT loadFinished(false);
        return;
    }
    auto* doc = new DocumentWindow(outcome.document, m_tabs);
    QSettings settings;
    doc->restoreLayout(settings.value(DocStateKey).toByteArray());
    connect(doc, &DocumentWindow::statusChanged, this, [this, doc] {
        if (doc == currentDocument())
            updateStatus();
    });
    addTab(doc, QFileInfo(outcome.path).fileName(), outcome.path);
    if (!outcome.path.startsWith(QLatin1Char(':')))
        addRecent(QFileInfo(outcome.path).absoluteFilePath());
    updateStatus();
    Q_EMIT loadFinished(true);
}

void MainWindow::addTab(QWidget* widget, const QString& title, const QString& toolTip)
{
    const int index = m_tabs->addTab(widget, title);
    m_tabs->setTabToolTip(index, toolTip);
    m_tabs->setCurrentIndex(index);
    m_emptyHint->hide();
}

void MainWindow::startGroup(LoadGroup::Kind kind, const QStringList& paths)
{
    const int id = m_nextGroup++;
    LoadGroup& g = m_groups[id];
    g.kind = kind;
    g.paths = paths;
    g.documents.resize(size_t(paths.size()));
    g.remaining = int(paths.size());
    for (int i = 0; i < paths.size(); ++i) {
        const uint64_t job = m_loader.load(paths[i]);
        m_pending.insert(job, paths[i]);
        m_percent.insert(job, 0);
        m_groupJobs.insert(job, { id, i });
    }
    updateProgress();
}

void MainWindow::groupLoaded(int id, int position, const LoadOutcome& outcome)
{
    auto it = m_groups.find(id);
    if (it == m_groups.end())
        return;
    LoadGroup& g = it.value();
    if (outcome.ok()) {
        g.documents[size_t(position)] = outcome.document;
    } else {
        if (!outcome.cancelled)
            showError(outcome.error);
        g.failed = true;
    }
    if (--g.remaining > 0)
        return;
    const LoadGroup done = g;
    m_groups.erase(it);
    if (done.failed) {
        Q_EMIT loadFinished(false);
        return;
    }
    if (done.kind == LoadGroup::Kind::Diff) {
        DiffInput sides[2];
        sides[0].document = done.documents[0];
        sides[1].document = done.documents.size() > 1 ? done.documents[1] : done.documents[0];
        for (size_t i = 0; i < 2; ++i) {
            const model::Moment& moment = done.moments[i];
            if (moment.kind == model::MomentKind::End)
                continue;
            // A moment belongs to one device's trace: the first device that has one.
            const auto& traces = sides[i].document->snapshot->deviceTraces;
            int device = 0;
            while (size_t(device) < traces.size() && traces[size_t(device)].empty())
                ++device;
            device = std::min<int>(device, int(sides[i].document->replays.size()) - 1);
            const model::ResolvedMoment r = model::resolveMoment(moment, *sides[i].document->snapshot,
                                                                 sides[i].document->replays[size_t(device)]);
            if (!r.ok) {
                showError(done.paths[done.paths.size() > 1 ? qsizetype(i) : 0] + QStringLiteral(": ")
                          + QString::fromStdString(r.error));
                Q_EMIT loadFinished(false);
                return;
            }
            sides[i].device = device;
            sides[i].index = r.index;
        }
        openDiffTab(sides[0], sides[1]);
    } else {
        auto group = std::make_shared<RankGroup>(makeRankGroup(done.documents));
        auto* view = new RankGroupView(group, m_tabs);
        connect(view, &RankGroupView::diffRequested, this, [this, group](int a, int b) {
            DiffInput sa, sb;
            sa.document = group->documents[size_t(a)];
            sb.document = group->documents[size_t(b)];
            openDiffTab(sa, sb);
        });
        addTab(view, tr("Ranks (%1 files)").arg(done.paths.size()), done.paths.join(QLatin1Char('\n')));
    }
    updateStatus();
    Q_EMIT loadFinished(true);
}

void MainWindow::openDiff(const QString& a, const QString& b)
{
    // Each side may be FILE@MOMENT (an index, peak, oom, an annotation...), as `memscope-cli diff` takes them.
    QString paths[2];
    std::array<model::Moment, 2> moments {};
    const QString specs[2] = { a, b };
    for (int i = 0; i < 2; ++i) {
        std::string path, error;
        if (!model::parseDiffSideSpec(specs[i].toStdString(), path, moments[size_t(i)], error)) {
            showError(specs[i] + QStringLiteral(": ") + QString::fromStdString(error));
            // Reported after the caller returns, like every other load, so it can connect first.
            QMetaObject::invokeMethod(
                this, [this] { Q_EMIT loadFinished(false); }, Qt::QueuedConnection);
            return;
        }
        paths[i] = QString::fromStdString(path);
    }
    if (paths[0] == paths[1]) // one file named twice: load it once, so that both sides share one snapshot
        startGroup(LoadGroup::Kind::Diff, { paths[0] });
    else
        startGroup(LoadGroup::Kind::Diff, { paths[0], paths[1] });
    m_groups[m_nextGroup - 1].moments = moments;
}

void MainWindow::openRankGroup(const QStringList& paths)
{
    if (!paths.isEmpty())
        startGroup(LoadGroup::Kind::Ranks, paths);
}

DiffWindow* MainWindow::openDiffTab(DiffInput a, DiffInput b)
{
    auto* diff = new DiffWindow(std::move(a), std::move(b), m_tabs);
    const QString tip
        = diffInputLabel(diff->session()->sideA()) + QStringLiteral("\n→ ") + diffInputLabel(diff->session()->sideB());
    addTab(diff, diff->title(), tip);
    connect(diff->session(), &DiffSession::diffChanged, this, [this, diff] {
        const int i = m_tabs->indexOf(diff);
        if (i >= 0)
            m_tabs->setTabText(i, diff->title());
    });
    return diff;
}

void MainWindow::setBaseline()
{
    auto* doc = currentDocument();
    if (!doc)
        return;
    m_baseline = DiffInput {};
    m_baseline.document = doc->session()->documentPtr();
    m_baseline.device = doc->session()->device();
    m_baseline.index = doc->session()->cursor();
    statusBar()->showMessage(tr("Baseline: %1").arg(diffInputLabel(m_baseline)), 5000);
}

DiffWindow* MainWindow::compareWithBaseline()
{
    auto* doc = currentDocument();
    if (!doc || !m_baseline.document)
        return nullptr;
    DiffInput b;
    b.document = doc->session()->documentPtr();
    b.device = doc->session()->device();
    b.index = doc->session()->cursor();
    DiffInput a = m_baseline;
    if (a.document != b.document) {
        // Two files: devices and indices of one trace mean nothing in the other; compare the devices shown.
        if (a.index == a.document->replays[size_t(a.device)].entryCount())
            a.index = model::EndOfTrace;
        if (b.index == b.document->replays[size_t(b.device)].entryCount())
            b.index = model::EndOfTrace;
    }
    return openDiffTab(a, b);
}

void MainWindow::chooseCompareFiles()
{
    QSettings settings;
    const QString dir = settings.value(QStringLiteral("lastDir")).toString();
    const QString filter = tr("Memory snapshots (*.pickle *.pkl *.json *.xz);;All files (*)");
    const QString a = QFileDialog::getOpenFileName(this, tr("Compare: side A (before)"), dir, filter);
    if (a.isEmpty())
        return;
    const QString b
        = QFileDialog::getOpenFileName(this, tr("Compare: side B (after)"), QFileInfo(a).absolutePath(), filter);
    if (b.isEmpty())
        return;
    settings.setValue(QStringLiteral("lastDir"), QFileInfo(b).absolutePath());
    openDiff(a, b);
}

void MainWindow::chooseCompareMoments()
{
    auto* doc = currentDocument();
    if (!doc) {
        showError(tr("Compare Two Moments: open a snapshot first"));
        return;
    }
    Session* s = doc->session();
    const QString suggested
        = m_baseline.document == s->documentPtr() ? QString::number(m_baseline.index) : QStringLiteral("peak");
    bool ok = false;
    const QString text = QInputDialog::getText(
        this, tr("Compare two moments"),
        tr("Side A: an entry index, peak, peak-reserved, oom, oom2…, largest or a record_function name (B is the "
           "cursor, entry %1)")
            .arg(s->cursor()),
        QLineEdit::Normal, suggested, &ok);
    if (!ok)
        return;
    const auto moment = model::parseMoment(text.trimmed().toStdString());
    const model::ResolvedMoment a = moment ? model::resolveMoment(*moment, s->snapshot(), s->replay())
                                           : model::ResolvedMoment { false, 0, "no moment given", {}, 0 };
    if (!a.ok) {
        showError(tr("Compare Two Moments: %1: %2").arg(text, QString::fromStdString(a.error)));
        return;
    }
    DiffInput sa, sb;
    sa.document = sb.document = s->documentPtr();
    sa.device = sb.device = s->device();
    sa.index = a.index;
    sb.index = s->cursor();
    openDiffTab(sa, sb);
}

void MainWindow::chooseRankGroup()
{
    QSettings settings;
    const QStringList files = QFileDialog::getOpenFileNames(
        this, tr("Open the snapshots of one job (one per rank)"), settings.value(QStringLiteral("lastDir")).toString(),
        tr("Memory snapshots (*.pickle *.pkl *.json *.xz);;All files (*)"));
    if (files.isEmpty())
        return;
    settings.setValue(QStringLiteral("lastDir"), QFileInfo(files.first()).absolutePath());
    openRankGroup(files);
}

void MainWindow::showError(const QString& message)
{
    // One banner: the newest message, the earlier ones counted and in its tooltip; a message said again is not
    // repeated.
    m_errors.removeAll(message);
    m_errors << message;
    QString text = message;
    if (m_errors.size() > 1) {
        text += tr("\n(%n earlier message(s): hover to read them; Dismiss clears all)", nullptr,
                   int(m_errors.size() - 1));
        m_errorLabel->setToolTip(m_errors.join(QLatin1String("\n\n")));
    } else {
        m_errorLabel->setToolTip({});
    }
    m_errorLabel->setText(text);
    m_errorBanner->show();
}

void MainWindow::updateStatus()
{
    auto* doc = currentDocument();
    m_status->setText(doc ? doc->statusText() : QString());
    m_status->setToolTip(m_status->text());
}

DocumentWindow* MainWindow::currentDocument() const
{
    if (auto* live = currentLive())
        return live->documentWindow();
    return qobject_cast<DocumentWindow*>(m_tabs->currentWidget());
}

LiveWindow* MainWindow::currentLive() const { return qobject_cast<LiveWindow*>(m_tabs->currentWidget()); }

LiveWindow* MainWindow::openLive(const QString& endpoint, bool reconnect, const QString& curveServerKey,
                                 const QString& curveSecretKey)
{
    AttachDialog::rememberEndpoint(endpoint, curveServerKey, curveSecretKey);
    auto* live = new LiveWindow(endpoint, reconnect ? LiveWindow::AfterExit::Reconnect : LiveWindow::AfterExit::End,
                                m_tabs, { curveServerKey, curveSecretKey });
    connect(live, &LiveWindow::documentChanged, this, [this, live](DocumentWindow* doc) {
        connect(doc, &DocumentWindow::statusChanged, this, [this, doc] {
            if (doc == currentDocument())
                updateStatus();
        });
        if (live == currentLive())
            updateStatus();
    });
    connect(live, &LiveWindow::openRequested, this, &MainWindow::openFile);
    connect(live->controller()->receiver(), &LiveReceiver::finished, this, [this, live](LiveState state) {
        if (state == LiveState::Failed)
            showError(live->controller()->receiver()->latest().message);
    });
    addTab(live, tr("Live: %1").arg(endpoint.section(QLatin1Char('/'), -1)), endpoint);
    return live;
}

RankGroupView* MainWindow::openLiveGroup(const QStringList& endpoints, bool reconnect, const QString& curveServerKey,
                                         const QString& curveSecretKey)
{
    std::vector<QPointer<LiveWindow>> lives;
    for (const QString& endpoint : endpoints)
        lives.emplace_back(openLive(endpoint, reconnect, curveServerKey, curveSecretKey));
    auto* view = new RankGroupView(std::make_shared<RankGroup>(), m_tabs);
    auto group = std::make_shared<std::shared_ptr<const RankGroup>>(std::make_shared<RankGroup>());
    auto dirty = std::make_shared<bool>(true);
    auto* timer = new QTimer(view);
    timer->setInterval(500);
    connect(timer, &QTimer::timeout, view, [view, lives, group, dirty] {
        if (!std::exchange(*dirty, false))
            return;
        std::vector<std::shared_ptr<const Document>> documents;
        for (const QPointer<LiveWindow>& live : lives)
            if (live && live->documentWindow())
                documents.push_back(live->documentWindow()->session()->documentPtr());
        *group = std::make_shared<const RankGroup>(makeRankGroup(std::move(documents)));
        view->setGroup(*group);
    });
    for (const QPointer<LiveWindow>& live : lives) {
        connect(live, &LiveWindow::grew, view, [dirty] { *dirty = true; });
        connect(live, &LiveWindow::documentChanged, view, [dirty] { *dirty = true; });
    }
    timer->start();
    connect(view, &RankGroupView::diffRequested, this, [this, group](int a, int b) {
        const std::shared_ptr<const RankGroup> g = *group;
        if (size_t(std::max(a, b)) >= g->documents.size())
            return;
        DiffInput sa, sb;
        sa.document = g->documents[size_t(a)];
        sb.document = g->documents[size_t(b)];
        openDiffTab(sa, sb);
    });
    addTab(view, tr("Ranks (%1 live)").arg(endpoints.size()), endpoints.join(QLatin1Char('\n')));
    return view;
}

void MainWindow::chooseAttach()
{
    AttachDialog dialog(this);
    if (dialog.exec() != QDialog::Accepted || dialog.endpoint().isEmpty())
        return;
    openLive(dialog.endpoint(), true, dialog.curveServerKey(), dialog.curveSecretKey());
}

DiffWindow* MainWindow::currentDiff() const { return qobject_cast<DiffWindow*>(m_tabs->currentWidget()); }

RankGroupView* MainWindow::currentRankGroup() const { return qobject_cast<RankGroupView*>(m_tabs->currentWidget()); }

int MainWindow::documentCount() const { return m_tabs->count(); }

std::shared_ptr<const model::Snapshot> MainWindow::snapshot() const
{
    auto* doc = currentDocument();
    return doc ? doc->session()->document().snapshot : nullptr;
}

void MainWindow::chooseFiles()
{
    QSettings settings;
    const QStringList files = QFileDialog::getOpenFileNames(
        this, tr("Open memory snapshots"), settings.value(QStringLiteral("lastDir")).toString(),
        tr("Memory snapshots (*.pickle *.pkl *.json *.xz);;All files (*)"));
    if (files.isEmpty())
        return;
    settings.setValue(QStringLiteral("lastDir"), QFileInfo(files.first()).absolutePath());
    openFiles(files);
}

QString MainWindow::exportView(const QString& path, QWidget* view, qreal scale)
{
    auto* doc = currentDocument();
    if (!view)
        view = doc ? doc->currentView() : currentDiff() ? currentDiff()->currentView() : currentRankGroup();
    if (!view)
        return tr("nothing to export: no snapshot is open");
    // A timeline renders its plot in the background and paints the previous one meanwhile: an export waits for it.
    finishTimelineBuilds(view);
    if (path.endsWith(QLatin1String(".svg"), Qt::CaseInsensitive)) {
        QSvgGenerator svg;
        svg.setFileName(path);
        svg.setSize(view->size());
        svg.setViewBox(view->rect());
        svg.setTitle(QFileInfo(doc ? doc->session()->document().path : QString()).fileName());
        QPainter painter;
        if (!painter.begin(&svg))
            return path + tr(": cannot write the SVG file");
        view->render(&painter);
        painter.end();
        return {};
    }
    // Rendered, not grabbed from the screen: the whole view at `scale` device pixels per logical one.
    const qreal dpr = std::max<qreal>(1.0, scale);
    QImage image((QSizeF(view->size()) * dpr).toSize(), QImage::Format_ARGB32_Premultiplied);
    image.setDevicePixelRatio(dpr);
    image.fill(view->palette().color(QPalette::Window));
    {
        QPainter painter(&image);
        view->render(&painter);
    }
    if (!image.save(path))
        return path + tr(": cannot write the image (use a .png or .svg name in a writable folder)");
    return {};
}

void MainWindow::chooseExport()
{
    if (!currentDocument() && !currentDiff() && !currentRankGroup())
        return;
    const QString png2x = tr("PNG image, 2x: for hi-DPI screens and documents (*.png)");
    const QString png1x = tr("PNG image, 1x (*.png)");
    QString filter = png2x;
    QString path = QFileDialog::getSaveFileName(this, tr("Export view"), QString(),
                                                png2x + QLatin1String(";;") + png1x + tr(";;SVG drawing (*.svg)"),
                                                &filter);
    if (path.isEmpty())
        return;
    if (QFileInfo(path).suffix().isEmpty())
        path += filter.contains(QLatin1String("*.svg")) ? QLatin1String(".svg") : QLatin1String(".png");
    const qreal scale = filter == png1x ? 1.0 : 2.0;
    const QString error = exportView(path, nullptr, scale);
    if (!error.isEmpty()) {
        showError(error);
        return;
    }
    statusBar()->showMessage(tr("Exported the view to %1").arg(QDir::toNativeSeparators(path)), 8000);
}

void MainWindow::addRecent(const QString& path)
{
    QSettings settings;
    QStringList recent = settings.value(RecentKey).toStringList();
    recent.removeAll(path);
    recent.prepend(path);
    while (recent.size() > MaxRecent)
        recent.removeLast();
    settings.setValue(RecentKey, recent);
    updateRecentMenu();
}

void MainWindow::updateRecentMenu()
{
    m_recentMenu->clear();
    const QStringList recent = QSettings().value(RecentKey).toStringList();
    for (const QString& path : recent)
        m_recentMenu->addAction(path, this, [this, path] { openFile(path); });
    m_recentMenu->setEnabled(!recent.isEmpty());
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (event->mimeData()->hasUrls())
        event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    QStringList files;
    for (const QUrl& url : event->mimeData()->urls())
        if (url.isLocalFile())
            files << url.toLocalFile();
    openFiles(files);
    event->acceptProposedAction();
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    QSettings settings;
    settings.setValue(GeometryKey, saveGeometry());
    settings.setValue(StateKey, saveState());
    if (auto* doc = currentDocument())
        settings.setValue(DocStateKey, doc->saveLayout());
    // Quitting ends the recordings while the window is whole (the destructor does it too, for a window deleted
    // without being closed).
    stopLiveTabs();
    QMainWindow::closeEvent(event);
}

} // namespace memscope::app
