// LiveWindow (livewindow.h): a live recording's tab. The receiver thread decodes and records; this GUI-thread
// widget grows one LiveDocument from its deltas and paces how often the views take the growth in.
#include "views/livewindow.h"

#include "io/snapshotio.h"
#include "viewer/recorder.h"
#include "views/documentwindow.h"

#include <QCheckBox>
#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QMenu>
#include <QSettings>
#include <QStandardPaths>
#include <QToolButton>
#include <QtConcurrent/QtConcurrentRun>
#include <QFileInfo>
#include <QFormLayout>
#include <QLineEdit>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <numeric>
#include <utility>

namespace memscope::app {

namespace {
    // The views hear of growth at most this often (from the start of one growth to the next: 50 a second, so that
    // they repaint 30 times a second or more with the event loop's own delays during a flood; bench_live), and
    // never more often than 4 × their last cost.
    constexpr qint64 MinGrowthIntervalMs = 20;
    constexpr qint64 GrowthCostFactor = 4;
    // Applying entries: slices of this many (~2 ms), for at most this long per turn of the event loop.
    constexpr size_t FlushSlice = 5000;
    constexpr qint64 FlushBudgetMs = 8;
} // namespace

LiveWindow::LiveWindow(const QString& endpoint, AfterExit afterExit, QWidget* parent, const Keys& keys)
    : QWidget(parent)
    , m_receiver(new LiveReceiver(endpoint, this))
    , m_flushTimer(new QTimer(this))
{
    m_layout = new QVBoxLayout(this);
    m_layout->setContentsMargins(0, 0, 0, 0);
    auto* bar = new QHBoxLayout;
    bar->setContentsMargins(6, 4, 6, 0);
    m_status = new QLabel(this);
    m_status->setObjectName(QStringLiteral("liveStatus"));
    m_status->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_status->setWordWrap(true); // a long message (an endpoint and its error) wraps instead of widening the tab
    m_status->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_save = new QPushButton(tr("Save…"), this);
    m_save->setObjectName(QStringLiteral("liveSave"));
    m_save->setToolTip(tr("Write what has been recorded so far as a snapshot file"));
    m_save->setEnabled(false);
    connect(m_save, &QPushButton::clicked, this, &LiveWindow::chooseSave);
    auto* triggers = new QPushButton(tr("Triggers…"), this);
    triggers->setObjectName(QStringLiteral("liveTriggers"));
    triggers->setToolTip(tr("Save the recording automatically when reserved memory crosses a threshold or at an OOM"));
    connect(triggers, &QPushButton::clicked, this, &LiveWindow::chooseTrigger);
    m_history = new QToolButton(this);
    m_history->setObjectName(QStringLiteral("liveHistory"));
    m_history->setText(tr("Earlier history"));
    m_history->setToolTip(tr("Prepend a snapshot of this job from before the attach; open the parts of this "
                             "recording written to disk to bound its memory"));
    m_history->setPopupMode(QToolButton::InstantPopup);
    m_historyMenu = new QMenu(m_history);
    m_history->setMenu(m_historyMenu);
    updateHistoryMenu();
    m_retry = new QPushButton(tr("Retry"), this);
    m_retry->setObjectName(QStringLiteral("liveRetry"));
    m_retry->setToolTip(tr("Attach to the job again"));
    m_retry->hide();
    connect(m_retry, &QPushButton::clicked, this, &LiveWindow::retry);
    bar->addWidget(m_status, 1);
    bar->addWidget(m_retry);
    bar->addWidget(m_history);
    bar->addWidget(triggers);
    bar->addWidget(m_save);
    m_layout->addLayout(bar);
    m_placeholder = new QLabel(tr("Waiting for %1…").arg(endpoint), this);
    m_placeholder->setAlignment(Qt::AlignCenter);
    m_layout->addWidget(m_placeholder, 1);

    // The history bound and where what passes it goes (QSettings live/historyLimitMiB, default 4096, and
    // live/spillFolder, default the app's cache folder).
    const QSettings settings;
    m_historyLimit = size_t(std::max(0LL, settings.value(QStringLiteral("live/historyLimitMiB"), 4096).toLongLong()))
        << 20;
    const QString defaultFolder
        = QStandardPaths::writableLocation(QStandardPaths::CacheLocation) + QStringLiteral("/live-history");
    m_spillFolder = settings.value(QStringLiteral("live/spillFolder"), defaultFolder).toString();
    m_flushTimer->setSingleShot(true);
    connect(m_flushTimer, &QTimer::timeout, this, &LiveWindow::flush);
    m_sinceGrowth.start();

    connect(m_receiver, &LiveReceiver::updated, this, &LiveWindow::onUpdate);
    m_status->setText(statusText());
    m_receiver->setIncremental(true);
    m_receiver->setReconnect(afterExit == AfterExit::Reconnect);
    m_receiver->setWaitForJob(afterExit == AfterExit::Reconnect); // an interactive tab waits for the job to come up
    m_receiver->setCurveKeys(keys.serverPublicKey, keys.secretKey);
    m_receiver->start();
}

LiveWindow::~LiveWindow()
{
    // Join the receiver thread before the widgets and the document go.
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
    text += tr(" — %1 events, %2 lost, %3 gaps")
                .arg(u.stats.applied)
                .arg(u.stats.lost + u.stats.agentLost)
                .arg(u.stats.gaps);
    if (u.stats.resyncs > 0)
        text += tr(", %n resync(s)", nullptr, int(u.stats.resyncs));
    if (u.stats.restarts > 0)
        text += tr(" (restarted, was pid %1)").arg(u.previousPid);
    text += QStringLiteral(" — ") + LiveReceiver::stateName(u.state);
    if (m_trigger.isOn())
        text += tr(" — triggers on (%n saved)", nullptr, int(m_triggered.size()));
    if (!m_spilled.isEmpty())
        text += tr(" — earlier history: %n file(s) in %1", nullptr, int(m_spilled.size())).arg(m_spillFolder);
    if (!m_spillError.isEmpty())
        text += QStringLiteral(" — ") + m_spillError;
    if (const size_t behind = backlog(); behind > 0)
        text += tr(" — behind by %L1 events").arg(qulonglong(behind));
    if (u.stats.resyncNeeded())
        text += tr(" (events missed: resyncing)");
    if (!u.message.isEmpty())
        text += QStringLiteral(" — ") + u.message;
    return text;
}

bool LiveWindow::isSettled() const
{
    const LiveUpdate& u = m_receiver->latest();
    const bool ended = u.state == LiveState::Exited || u.state == LiveState::Failed || u.state == LiveState::Stopped;
    return ended && backlog() == 0 && !m_growthPending && (m_live == nullptr || !m_live->hasPending())
        && m_writing == 0;
}

void LiveWindow::checkSettled()
{
    const bool done = isSettled();
    if (m_document)
        m_document->session()->setGrowing(m_live != nullptr && !done); // the views stop keeping room to grow
    if (!m_settledEmitted && done) {
        m_settledEmitted = true;
        Q_EMIT settled();
    }
}

void LiveWindow::onUpdate(const LiveUpdate& update)
{
    if (update.initial && !m_live) {
        m_live = std::make_unique<LiveDocument>(endpoint(), *update.initial, update.deviceCount);
        showDocument(m_live->document());
    }
    if (update.delta && m_live)
        takeDelta(*update.delta);
    if (!m_live && update.snapshot && !m_document)
        showDocument(makeDocument(endpoint(), update.snapshot)); // ended before any delta: the whole recording
    if (update.state == LiveState::Failed && !m_document)
        m_placeholder->setText(update.message);
    else if (!m_document && !update.message.isEmpty())
        m_placeholder->setText(tr("Waiting for %1…").arg(endpoint()) + QLatin1Char('\n') + update.message);
    m_retry->setVisible(update.state == LiveState::Failed && !m_document);
    m_save->setEnabled(m_live != nullptr || update.snapshot != nullptr);
    flush();
    m_status->setText(statusText());
    Q_EMIT statusChanged();
    checkSettled();
}

void LiveWindow::retry()
{
    if (m_document)
        return; // (the button shows only while nothing was recorded)
    m_retry->hide();
    m_settledEmitted = false;
    m_placeholder->setText(tr("Waiting for %1…").arg(endpoint()));
    m_receiver->restart();
    m_status->setText(statusText());
    Q_EMIT statusChanged();
}

void LiveWindow::takeDelta(const wire::Recorder::Delta& delta)
{
    for (const auto& [key, frames] : delta.stacks) {
        std::vector<LiveFrame> out;
        out.reserve(frames.size());
        for (const auto& f : frames)
            out.push_back({ f.name, f.file, f.line });
        m_live->defineStack(key, std::move(out));
    }
    for (const auto& n : delta.notes)
        m_live->annotate(n.device, n.stage, n.name, int64_t(n.timeUs));
    std::vector<LiveEntry> entries;
    entries.reserve(delta.entries.size());
    for (const auto& e : delta.entries) {
        LiveEntry l;
        l.action = e.action;
        l.device = e.device;
        l.address = int64_t(e.addr);
        l.size = int64_t(e.size);
        l.blockSize = int64_t(e.blockSize);
        l.stream = int64_t(e.stream);
        l.timeUs = int64_t(e.timeUs);
        l.stack = e.stack;
        l.poolId = { e.poolFirst, e.poolSecond };
        entries.push_back(l);
    }
    m_live->append(std::move(entries));
}

// Applies what is queued (unless a job holds the document: then again shortly), and tells the views when their
// pacing allows.
void LiveWindow::flush()
{
    if (!m_live)
        return;
    if (m_live->hasPending()) {
        // In slices, for at most FlushBudgetMs at a time, so that input and painting go on during a flood.
        QElapsedTimer budget;
        budget.start();
        bool busy = false;
        while (m_live->hasPending() && budget.elapsed() < FlushBudgetMs) {
            const size_t before = m_live->queued();
            m_live->flush(FlushSlice);
            m_growthPending = true; // definitions and annotations count too
            if (m_live->queued() == before && before > 0) {
                busy = true; // a reader holds the document
                break;
            }
            if (before == 0)
                break;
        }
        if (m_live->hasPending()) {
            m_flushTimer->start(busy ? 10 : 0);
            if (!m_growthPending || m_sinceGrowth.elapsed() < std::max(MinGrowthIntervalMs, GrowthCostFactor * m_growthCostMs))
                return;
        }
    }
    if (!m_growthPending || !m_document)
        return;
    const qint64 due = std::max(MinGrowthIntervalMs, GrowthCostFactor * m_growthCostMs);
    const qint64 since = m_sinceGrowth.elapsed();
    if (since < due) {
        if (!m_flushTimer->isActive())
            m_flushTimer->start(int(due - since));
        return;
    }
    QElapsedTimer cost;
    cost.start();
    m_sinceGrowth.restart();
    m_growthPending = false;
    m_document->session()->documentGrew();
    checkTriggers();
    m_growthCostMs = cost.elapsed();
    if (m_historyLimit > 0 && m_live->memoryBytes() > m_historyLimit)
        rotate();
    Q_EMIT grew();
    m_status->setText(statusText());
    checkSettled();
}

// After a rotation: a new DocumentWindow on the new document, with the old one's device, dock layout and follow
// mode; the old one goes (its document lives on while the spill writer holds it).
void LiveWindow::replaceDocument(std::shared_ptr<const Document> document)
{
    DocumentWindow* old = m_document;
    auto* next = new DocumentWindow(std::move(document), this);
    next->setWindowFlags(Qt::Widget);
    if (old) {
        const std::vector<int> devices = next->session()->devices();
        if (std::find(devices.begin(), devices.end(), old->session()->device()) != devices.end())
            next->session()->setDevice(old->session()->device());
        next->restoreLayout(old->saveLayout());
        delete m_layout->replaceWidget(old, next); // the old widget's layout item is ours to delete (QLayout docs)
        old->hide();
        // A rotated-out document holds gigabytes: giving them back to the system takes a good part of a second.
        // Its last reference goes to the thread pool once the old window (and its views) are gone.
        auto keep = std::make_shared<std::shared_ptr<const Document>>(old->session()->documentPtr());
        connect(old, &QObject::destroyed, this, [keep] {
            (void)QtConcurrent::run([document = std::move(*keep)]() mutable { document.reset(); });
        });
        old->deleteLater();
    }
    m_document = next;
    next->show();
    Q_EMIT documentChanged(next);
}

void LiveWindow::showDocument(std::shared_ptr<const Document> document)
{
    auto* next = new DocumentWindow(std::move(document), this);
    next->setWindowFlags(Qt::Widget); // a QMainWindow is a top-level window unless told otherwise
    delete m_layout->replaceWidget(m_placeholder, next); // the placeholder's layout item is ours to delete
    m_placeholder->hide();
    m_document = next;
    next->show();
    Q_EMIT documentChanged(next);
}

void LiveWindow::setTrigger(LiveTrigger trigger)
{
    m_trigger = std::move(trigger);
    m_armed.clear(); // re-armed on every device from the states shown now on
    m_checkedUpTo.clear();
    if (m_live)
        for (const model::Replay& r : m_live->document()->replays)
            m_checkedUpTo.push_back(r.entryCount());
    m_status->setText(statusText());
}

// Looks at the states shown since the last check: reserved memory rising above the threshold, or an OOM entry.
void LiveWindow::checkTriggers()
{
    if (!m_trigger.isOn() || !m_live)
        return;
    const Document& doc = *m_live->document();
    QString reason;
    for (size_t d = 0; d < doc.replays.size(); ++d) {
        if (m_checkedUpTo.size() <= d) {
            m_checkedUpTo.resize(d + 1, 0);
            m_armed.resize(d + 1, 1);
        }
        if (m_armed.size() <= d)
            m_armed.resize(d + 1, 1);
        const model::Replay& replay = doc.replays[d];
        const model::ReplaySeries& s = replay.series();
        const auto& trace = doc.snapshot->deviceTraces[d];
        for (int64_t i = m_checkedUpTo[d]; i < replay.entryCount(); ++i) {
            if (m_trigger.onOom && trace[size_t(i)].action == model::Action::Oom && reason.isEmpty())
                reason = QStringLiteral("oom");
            if (m_trigger.reservedAbove > 0) {
                const model::ByteCount reserved = s.reserved[size_t(i) + 1];
                if (reserved <= m_trigger.reservedAbove) {
                    m_armed[d] = 1;
                } else if (m_armed[d]) {
                    m_armed[d] = 0;
                    if (reason.isEmpty())
                        reason = QStringLiteral("reserved");
                }
            }
        }
        m_checkedUpTo[d] = replay.entryCount();
    }
    if (reason.isEmpty())
        return;
    const uint32_t pid = m_receiver->latest().pid;
    const QString path = QDir(m_trigger.folder)
                             .filePath(QStringLiteral("memscope-%1-%2-%3.pickle").arg(pid).arg(reason).arg(++m_triggerCount));
    std::shared_ptr<model::Snapshot> copy = m_live->copySnapshot();
    copy->topLevelExtras = recordingInfo();
    writeInBackground(std::move(copy), path, [this, path](const QString& error) {
        if (error.isEmpty())
            m_triggered << path;
        Q_EMIT triggered(path, error);
        m_status->setText(statusText());
    });
}

// Writes `snapshot` to `path` on the thread pool; `done` gets an error line or "" on the GUI thread (not at all if
// this window is gone by then).
void LiveWindow::writeInBackground(std::shared_ptr<const model::Snapshot> snapshot, const QString& path,
                                   std::function<void(const QString&)> done)
{
    ++m_writing;
    auto* watcher = new QFutureWatcher<QString>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, done = std::move(done)] {
        watcher->deleteLater();
        --m_writing;
        done(watcher->result());
        checkSettled();
    });
    watcher->setFuture(QtConcurrent::run([snapshot = std::move(snapshot), path]() -> QString {
        if (io::Error e = io::saveSnapshot(*snapshot, path.toStdString()))
            return QString::fromStdString(e.toString());
        return {};
    }));
}

// The history passed its bound: the document so far is written to the spill folder as a snapshot file (PyTorch's
// format, openable like any other) and the tab goes on with a new document that starts from its final state.
void LiveWindow::rotate()
{
    const int part = int(m_spilled.size()) + m_spillsWriting + 1;
    std::shared_ptr<const model::Snapshot> done = m_live->finish(recordingInfo(part));
    auto next = std::make_unique<LiveDocument>(endpoint(), *m_live);
    m_live = std::move(next);
    QDir().mkpath(m_spillFolder);
    const QString path = QDir(m_spillFolder)
                             .filePath(QStringLiteral("memscope-%1-part%2.pickle")
                                           .arg(m_receiver->latest().pid)
                                           .arg(part, 3, 10, QLatin1Char('0')));
    ++m_spillsWriting;
    writeInBackground(std::move(done), path, [this, path](const QString& error) {
        --m_spillsWriting;
        if (error.isEmpty())
            m_spilled << path;
        else
            m_spillError = error;
        updateHistoryMenu();
        m_status->setText(statusText());
    });
    m_checkedUpTo.assign(m_checkedUpTo.size(), 0); // the triggers look at the new document from its start
    replaceDocument(m_live->document());
}

void LiveWindow::updateHistoryMenu()
{
    m_historyMenu->clear();
    m_historyMenu->addAction(tr("Prepend a Snapshot of This Job…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            this, tr("A snapshot of this job from before the attach"), QString(),
            tr("Snapshots (*.pickle *.pkl *.json *.xz);;All files (*)"));
        if (path.isEmpty())
            return;
        const QString error = loadEarlierHistory(path);
        if (!error.isEmpty())
            QMessageBox::warning(this, tr("Earlier history"), error);
    });
    if (!m_spilled.isEmpty())
        m_historyMenu->addSection(tr("Written to disk (bounded history)"));
    for (const QString& path : m_spilled)
        m_historyMenu->addAction(QFileInfo(path).fileName(), this, [this, path] { Q_EMIT openRequested(path); });
}

QString LiveWindow::loadEarlierHistory(const QString& path)
{
    if (!m_live || !m_document)
        return tr("%1: nothing recorded yet from %2").arg(path, endpoint());
    if (!m_spilled.isEmpty() || m_spillsWriting > 0)
        return tr("%1: this recording's start was written to disk to bound its memory; open those parts instead")
            .arg(path);
    const io::LoadResult loaded = io::loadSnapshot(path.toStdString());
    if (!loaded.ok())
        return QString::fromStdString(loaded.error.toString());
    m_live = LiveDocument::prepend(*loaded.snapshot, QFileInfo(path).fileName(), *m_live);
    // The triggers have seen what was live; the prepended part is history, not news.
    m_checkedUpTo.clear();
    for (const model::Replay& r : m_live->document()->replays)
        m_checkedUpTo.push_back(r.entryCount());
    replaceDocument(m_live->document());
    m_status->setText(statusText());
    return {};
}

void LiveWindow::chooseTrigger()
{
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Capture triggers"));
    auto* form = new QFormLayout(&dialog);
    auto* reserved = new QDoubleSpinBox(&dialog);
    reserved->setRange(0, 1 << 20);
    reserved->setDecimals(2);
    reserved->setSuffix(tr(" GiB"));
    reserved->setSpecialValueText(tr("off"));
    reserved->setValue(double(m_trigger.reservedAbove) / double(1 << 30));
    auto* oom = new QCheckBox(tr("at an out-of-memory error"), &dialog);
    oom->setChecked(m_trigger.onOom);
    auto* folder = new QLineEdit(m_trigger.folder.isEmpty() ? QDir::homePath() : m_trigger.folder, &dialog);
    form->addRow(tr("Save when reserved memory rises above"), reserved);
    form->addRow(QString(), oom);
    form->addRow(tr("Into the folder"), folder);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    form->addRow(buttons);
    if (dialog.exec() != QDialog::Accepted)
        return;
    LiveTrigger t;
    t.reservedAbove = model::ByteCount(reserved->value() * double(1 << 30));
    t.onOom = oom->isChecked();
    t.folder = folder->text().trimmed();
    if (t.reservedAbove > 0 || t.onOom) {
        if (!QFileInfo(t.folder).isDir()) {
            QMessageBox::warning(this, tr("Capture triggers"), tr("%1: not a folder").arg(t.folder));
            return;
        }
    }
    setTrigger(std::move(t));
}

model::Extras LiveWindow::recordingInfo(int part) const
{
    const LiveUpdate& u = m_receiver->latest();
    wire::RecordingInfo info;
    info.endpoint = endpoint().toStdString();
    info.host = u.host.toStdString();
    info.pid = u.pid;
    info.devices = u.deviceCount;
    info.events = u.stats.applied;
    info.lost = u.stats.lost + u.stats.agentLost;
    info.missing = u.stats.missing;
    info.gaps = u.stats.gaps;
    info.resyncs = u.stats.resyncs;
    info.restarts = u.stats.restarts;
    info.part = part;
    info.savedAtUs = QDateTime::currentMSecsSinceEpoch() * 1000;
    return wire::recordingExtras(info);
}

QString LiveWindow::saveSnapshot(const QString& path, SaveFormat format) const
{
    if (!m_live)
        return tr("%1: nothing recorded yet from %2").arg(path, endpoint());
    std::shared_ptr<model::Snapshot> copy = m_live->copySnapshot();
    if (format == SaveFormat::Recording)
        copy->topLevelExtras = recordingInfo();
    if (io::Error e = io::saveSnapshot(*copy, path.toStdString()))
        return QString::fromStdString(e.toString());
    return {};
}

void LiveWindow::chooseSave()
{
    const QString recording = tr("memscope recording: PyTorch's format, with the job and its losses (*.pickle *.json)");
    const QString plain = tr("PyTorch snapshot (*.pickle *.json)");
    QString filter = recording;
    const QString path = QFileDialog::getSaveFileName(this, tr("Save the recording"), QStringLiteral("live.pickle"),
                                                      recording + QStringLiteral(";;") + plain, &filter);
    if (path.isEmpty())
        return;
    if (!m_live)
        return;
    std::shared_ptr<model::Snapshot> copy = m_live->copySnapshot();
    if (filter != plain)
        copy->topLevelExtras = recordingInfo();
    writeInBackground(std::move(copy), path, [this](const QString& error) {
        if (!error.isEmpty())
            QMessageBox::warning(this, tr("Save failed"), error);
    });
}

} // namespace memscope::app
