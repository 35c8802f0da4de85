// MainWindow: tabs, menus, loading, errors, export, settings. See mainwindow.h.
#include "views/mainwindow.h"

#include <QAction>
#include <QApplication>
#include <QClipboard>
#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QKeySequence>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QStatusBar>
#include <QSvgGenerator>
#include <QTabWidget>
#include <QVBoxLayout>

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
    resize(1500, 950);

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
        if (auto* doc = currentDocument())
            setWindowTitle(QStringLiteral("memscope — ") + QFileInfo(doc->session()->document().path).fileName());
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
    statusBar()->addWidget(m_status, 1);
    m_progress = new QProgressBar(this);
    m_progress->setObjectName(QStringLiteral("loadProgress"));
    m_progress->setMaximumWidth(220);
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

MainWindow::~MainWindow() = default;

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* open = file->addAction(tr("&Open…"), this, &MainWindow::chooseFiles);
    open->setShortcut(QKeySequence::Open);
    m_recentMenu = file->addMenu(tr("Open &Recent"));
    updateRecentMenu();
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
    addGo(tr("Start of Trace"), QKeySequence(Qt::Key_Home),
          [](DocumentWindow* d) { d->session()->setCursor(0); });
    addGo(tr("End of Trace"), QKeySequence(Qt::Key_End),
          [](DocumentWindow* d) { d->session()->setCursor(d->session()->entryCount()); });
    addGo(tr("Clear Selection"), QKeySequence(Qt::Key_Escape),
          [](DocumentWindow* d) { d->session()->setSelection(model::NoAllocation); });

    QMenu* view = menuBar()->addMenu(tr("&View"));
    const std::pair<DocumentWindow::View, QString> views[] = {
        { DocumentWindow::View::Timeline, tr("&Timeline") },   { DocumentWindow::View::Segments, tr("&Segment Map") },
        { DocumentWindow::View::Tree, tr("&Call Stacks") },    { DocumentWindow::View::Events, tr("&Events") },
        { DocumentWindow::View::Overview, tr("&Overview") },
    };
    int n = 1;
    for (const auto& [v, name] : views) {
        QAction* a = view->addAction(name, this, [this, v = v] {
            if (auto* doc = currentDocument())
                doc->showView(v);
        });
        a->setShortcut(QKeySequence(Qt::ALT | (Qt::Key_0 + n++)));
    }

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&Keyboard Shortcuts"), this, &MainWindow::showShortcuts)->setShortcut(QKeySequence::HelpContents);
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
                        .arg(QString(a->text()).remove(QLatin1Char('&')), a->shortcut().toString(QKeySequence::NativeText));
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
    m_progress->setFormat(m_pending.size() == 1 ? tr("Loading %1… %p%").arg(QFileInfo(m_pending.cbegin().value()).fileName())
                                                : tr("Loading %1 files… %p%").arg(m_pending.size()));
}

void MainWindow::onLoaded(uint64_t job, const LoadOutcome& outcome)
{
    m_pending.remove(job);
    m_percent.remove(job);
    updateProgress();
    if (!outcome.ok()) {
        if (!outcome.cancelled)
            showError(outcome.error);
        Q_EMIT loadFinished(false);
        return;
    }
    auto* doc = new DocumentWindow(outcome.document, m_tabs);
    QSettings settings;
    doc->restoreState(settings.value(DocStateKey).toByteArray());
    connect(doc, &DocumentWindow::statusChanged, this, [this, doc] {
        if (doc == currentDocument())
            updateStatus();
    });
    const int index = m_tabs->addTab(doc, QFileInfo(outcome.path).fileName());
    m_tabs->setTabToolTip(index, outcome.path);
    m_tabs->setCurrentIndex(index);
    m_emptyHint->hide();
    if (!outcome.path.startsWith(QLatin1Char(':')))
        addRecent(QFileInfo(outcome.path).absoluteFilePath());
    updateStatus();
    Q_EMIT loadFinished(true);
}

void MainWindow::showError(const QString& message)
{
    m_errors << message;
    m_errorLabel->setText(m_errors.join(QLatin1Char('\n')));
    m_errorBanner->show();
}

void MainWindow::updateStatus()
{
    auto* doc = currentDocument();
    m_status->setText(doc ? doc->statusText() : QString());
}

DocumentWindow* MainWindow::currentDocument() const
{
    return qobject_cast<DocumentWindow*>(m_tabs->currentWidget());
}

int MainWindow::documentCount() const
{
    return m_tabs->count();
}

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

QString MainWindow::exportView(const QString& path, QWidget* view)
{
    auto* doc = currentDocument();
    if (!view)
        view = doc ? doc->currentView() : nullptr;
    if (!view)
        return tr("nothing to export: no snapshot is open");
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
    if (!view->grab().save(path))
        return path + tr(": cannot write the image (use a .png or .svg name in a writable folder)");
    return {};
}

void MainWindow::chooseExport()
{
    if (!currentDocument())
        return;
    const QString path = QFileDialog::getSaveFileName(this, tr("Export view"), QString(),
                                                      tr("PNG image (*.png);;SVG drawing (*.svg)"));
    if (path.isEmpty())
        return;
    const QString error = exportView(path);
    if (!error.isEmpty())
        showError(error);
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
        settings.setValue(DocStateKey, doc->saveState());
    QMainWindow::closeEvent(event);
}

} // namespace memscope::app
