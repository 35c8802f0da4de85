// The main window's widgets: a summary tree (hidden while there is nothing to show) above an error label (shown only
// when the last load failed). GUI thread only.
#include "views/mainwindow.h"

#include <QAction>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QLocale>
#include <QMenu>
#include <QMenuBar>
#include <QStatusBar>
#include <QTreeWidget>
#include <QVBoxLayout>

namespace memscope::app {

namespace {

    // Fixed English formatting, so the numbers read the same on every machine (and in tests).
    const QLocale& numberLocale()
    {
        static const QLocale locale(QLocale::English, QLocale::UnitedStates);
        return locale;
    }

    QString count(size_t n) { return numberLocale().toString(static_cast<qulonglong>(n)); }

    QString bytes(model::ByteCount n)
    {
        return QStringLiteral("%1 (%2 B)")
            .arg(numberLocale().formattedDataSize(n, 2, QLocale::DataSizeIecFormat),
                 numberLocale().toString(static_cast<qlonglong>(n)));
    }

    QString timeSpan(const DeviceSummary& device)
    {
        if (!device.hasTime)
            return QStringLiteral("no trace recorded");
        const double seconds = static_cast<double>(device.lastTimeUs - device.firstTimeUs) / 1e6;
        return QStringLiteral("%1 s").arg(numberLocale().toString(seconds, 'f', 3));
    }

    QTreeWidgetItem* addRow(QTreeWidgetItem* parent, const QString& name, const QString& value)
    {
        return new QTreeWidgetItem(parent, { name, value });
    }

} // namespace

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent)
{
    setWindowTitle(QStringLiteral("memscope"));
    resize(900, 600);

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);

    m_summary = new QTreeWidget(central);
    m_summary->setObjectName(QStringLiteral("summaryTree"));
    m_summary->setColumnCount(2);
    m_summary->setHeaderLabels({ QStringLiteral("Property"), QStringLiteral("Value") });
    m_summary->setAlternatingRowColors(true);
    m_summary->setUniformRowHeights(true);
    m_summary->header()->setStretchLastSection(true);
    layout->addWidget(m_summary);

    m_errorLabel = new QLabel(central);
    m_errorLabel->setObjectName(QStringLiteral("errorLabel"));
    m_errorLabel->setTextFormat(Qt::PlainText); // file names are not HTML
    m_errorLabel->setWordWrap(true);
    m_errorLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_errorLabel->setAlignment(Qt::AlignCenter);
    m_errorLabel->hide();
    layout->addWidget(m_errorLabel);

    setCentralWidget(central);

    QMenu* fileMenu = menuBar()->addMenu(QStringLiteral("&File"));
    QAction* open = fileMenu->addAction(QStringLiteral("&Open…"), this, &MainWindow::chooseFile);
    open->setShortcut(QKeySequence::Open);
    fileMenu->addSeparator();
    QAction* quit = fileMenu->addAction(QStringLiteral("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    connect(&m_loader, &SnapshotLoader::finished, this, &MainWindow::showOutcome);
}

void MainWindow::openFile(const QString& path)
{
    const QString name = QFileInfo(path).fileName();
    setWindowTitle(QStringLiteral("memscope — %1").arg(name));
    statusBar()->showMessage(QStringLiteral("Loading %1…").arg(path));
    m_loader.load(path);
}

void MainWindow::showOutcome(const LoadOutcome& outcome)
{
    m_snapshot = outcome.snapshot;
    m_errorText = outcome.error;
    m_summary->clear();
    if (outcome.ok()) {
        fillSummary(QFileInfo(outcome.path).fileName(), outcome.summary);
        statusBar()->showMessage(QStringLiteral("Loaded %1").arg(outcome.path));
    } else {
        m_errorLabel->setText(QStringLiteral("Cannot show this snapshot.\n\n") + outcome.error);
        statusBar()->clearMessage();
    }
    m_summary->setVisible(outcome.ok());
    m_errorLabel->setVisible(!outcome.ok());
    Q_EMIT loadFinished(outcome.ok());
}

void MainWindow::fillSummary(const QString& fileName, const SnapshotSummary& summary)
{
    QTreeWidgetItem* root = m_summary->invisibleRootItem();
    addRow(root, QStringLiteral("File"), fileName);
    addRow(root, QStringLiteral("Devices"), count(summary.devices.size()));
    addDeviceRows(root, summary.total);
    for (const DeviceSummary& device : summary.devices) {
        QTreeWidgetItem* item = addRow(root, QStringLiteral("cuda:%1").arg(device.device), QString());
        addDeviceRows(item, device);
        item->setExpanded(true);
    }
    m_summary->resizeColumnToContents(0);
}

void MainWindow::addDeviceRows(QTreeWidgetItem* parent, const DeviceSummary& device)
{
    addRow(parent, QStringLiteral("Segments"), count(device.segments));
    addRow(parent, QStringLiteral("Blocks"), count(device.blocks));
    addRow(parent, QStringLiteral("Trace entries"), count(device.traceEntries));
    addRow(parent, QStringLiteral("Time span"), timeSpan(device));
    addRow(parent, QStringLiteral("Reserved"), bytes(device.reserved));
    addRow(parent, QStringLiteral("Allocated"), bytes(device.allocated));
    addRow(parent, QStringLiteral("Active"), bytes(device.active));
}

void MainWindow::chooseFile()
{
    const QString path
        = QFileDialog::getOpenFileName(this, QStringLiteral("Open snapshot"), QString(),
                                       QStringLiteral("Snapshots (*.pickle *.pkl *.json *.xz);;All files (*)"));
    if (!path.isEmpty())
        openFile(path);
}

} // namespace memscope::app
