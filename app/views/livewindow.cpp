// LiveWindow (livewindow.h): a live recording's tab. Documents are built off the GUI thread on immutable
// snapshots; the GUI thread only swaps widgets.
#include "views/livewindow.h"

#include "io/snapshotio.h"
#include "views/documentwindow.h"

#include <QFileDialog>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

namespace memscope::app {

LiveWindow::LiveWindow(const QString& endpoint, QWidget* parent)
    : QWidget(parent)
    , m_receiver(new LiveReceiver(endpoint, this))
{
    m_layout = new QVBoxLayout(this);
    m_layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    bar->setContentsMargins(6, 4, 6, 0);
    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("liveStatus"));
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_save = new QPushButton(tr("Save…"), this);
    m_save->setObjectName(QStringLiteral("liveSave"));
    m_save->setToolTip(tr("Write what has been recorded so far as a snapshot file"));
    m_save->setEnabled(false);
    connect(m_save, &QPushButton::clicked, this, &LiveWindow::chooseSave);
    bar->addWidget(m_status, 1);
    bar->addWidget(m_save);
    m_layout->addLayout(bar);
    m_placeholder = new QLabel(tr("Waiting for %1…").arg(endpoint), this);
    m_placeholder->setAlignment(Qt::AlignCenter);
    m_layout->addWidget(m_placeholder, 1);

    connect(m_receiver, &LiveReceiver::updated, this, &LiveWindow::onUpdate);
    m_status->setText(statusText());
    m_receiver->start();
}

LiveWindow::~LiveWindow()
{
    // Join the receiver thread before the widgets go; a build still in flight only touches its own copies, and
    // its watcher (a child) is deleted with this window, so its result is dropped.
    m_receiver->stop();
}

std::shared_ptr<const model::Snapshot> LiveWindow::snapshot() const
{
    return m_document ? m_document->session()->document().snapshot : nullptr;
}

QString LiveWindow::statusText() const
{
    const LiveUpdate& u = m_receiver->latest();
    QString text = endpoint();
    if (u.pid)
        text += tr(" (pid %1 on %2)").arg(u.pid).arg(u.host);
    text += tr(" — %1 events, %2 lost, %3 gaps — %4")
                .arg(u.stats.applied)
                .arg(u.stats.lost + u.stats.agentLost)
                .arg(u.stats.gaps)
                .arg(LiveReceiver::stateName(u.state));
    if (u.stats.resyncNeeded())
        text += tr(" (events missed: the trace is incomplete)");
    if (!u.message.isEmpty())
        text += QStringLiteral(" — ") + u.message;
    return text;
}

bool LiveWindow::isSettled() const
{
    const LiveUpdate& u = m_receiver->latest();
    const bool ended = u.state == LiveState::Exited || u.state == LiveState::Failed || u.state == LiveState::Stopped;
    return ended && m_buildingSerial == 0 && m_shownSerial == u.snapshotSerial;
}

void LiveWindow::checkSettled()
{
    if (!m_settledEmitted && isSettled()) {
        m_settledEmitted = true;
        Q_EMIT settled();
    }
}

void LiveWindow::onUpdate(const LiveUpdate& update)
{
    m_status->setText(statusText());
    m_save->setEnabled(update.snapshot != nullptr);
    if (update.state == LiveState::Failed && !m_document)
        m_placeholder->setText(update.message);
    if (update.snapshot && update.snapshotSerial > m_shownSerial && m_buildingSerial == 0)
        startBuild();
    Q_EMIT statusChanged();
    checkSettled();
}

void LiveWindow::startBuild()
{
    const LiveUpdate& u = m_receiver->latest();
    m_buildingSerial = u.snapshotSerial;
    auto* watcher = new QFutureWatcher<std::shared_ptr<const Document>>(this);
    const uint64_t serial = u.snapshotSerial;
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, serial] {
        watcher->deleteLater();
        m_buildingSerial = 0;
        showDocument(serial, watcher->result());
        // A newer snapshot arrived while this one was building: build it now (at most one build in flight).
        if (m_receiver->latest().snapshotSerial > m_shownSerial && m_receiver->latest().snapshot)
            startBuild();
        checkSettled();
    });
    watcher->setFuture(QtConcurrent::run(makeDocument, endpoint(), u.snapshot));
}

void LiveWindow::showDocument(uint64_t serial, std::shared_ptr<const Document> document)
{
    if (serial <= m_shownSerial || !document)
        return; // stale: a newer one is shown already
    m_shownSerial = serial;
    auto* next = new DocumentWindow(std::move(document), this);
    next->setWindowFlags(Qt::Widget); // a QMainWindow is a top-level window unless told otherwise
    if (DocumentWindow* old = m_document) {
        Session* was = old->session();
        Session* now = next->session();
        const std::vector<int> devices = now->devices();
        if (std::find(devices.begin(), devices.end(), was->device()) != devices.end())
            now->setDevice(was->device()); // resets the cursor to the end
        // Following the end unless the user moved the cursor back: then it keeps its index.
        if (was->cursor() < was->entryCount())
            now->setCursor(was->cursor());
        next->restoreState(old->saveState());
        m_layout->replaceWidget(old, next);
        old->hide(); // out of the layout but still a child until the event loop deletes it
        old->deleteLater();
    } else {
        m_layout->replaceWidget(m_placeholder, next);
        m_placeholder->hide();
    }
    m_document = next;
    next->show();
    Q_EMIT documentChanged(next);
}

QString LiveWindow::saveSnapshot(const QString& path) const
{
    const std::shared_ptr<const model::Snapshot> snap = latestSnapshot();
    if (!snap)
        return tr("%1: nothing recorded yet from %2").arg(path, endpoint());
    if (io::Error e = io::saveSnapshot(*snap, path.toStdString()))
        return QString::fromStdString(e.toString());
    return {};
}

void LiveWindow::chooseSave()
{
    const QString path = QFileDialog::getSaveFileName(this, tr("Save the recording"), QStringLiteral("live.pickle"),
                                                      tr("Snapshots (*.pickle *.json)"));
    if (path.isEmpty())
        return;
    const QString error = saveSnapshot(path);
    if (!error.isEmpty())
        QMessageBox::warning(this, tr("Save failed"), error);
}

} // namespace memscope::app
