// LiveController (livecontroller.h): the receiver thread decodes and records; this GUI-thread object grows one
// LiveDocument from its deltas, paces how often the views take the growth in, and writes and reads files on the
// thread pool.
#include "live/livecontroller.h"

#include "io/snapshotio.h"
#include "viewer/recorder.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QSettings>
#include <QStandardPaths>
#include <QThreadPool>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
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

LiveController::LiveController(const QString& endpoint, AfterExit afterExit, const Keys& keys, QObject* parent)
    : QObject(parent)
    , m_receiver(new LiveReceiver(endpoint, this))
    , m_flushTimer(new QTimer(this))
{
    const QSettings settings;
    m_historyLimit = size_t(std::max(0LL, settings.value(QStringLiteral("live/historyLimitMiB"), 4096).toLongLong()))
        << 20;
    const QString defaultFolder
        = QStandardPaths::writableLocation(QStandardPaths::CacheLocation) + QStringLiteral("/live-history");
    m_spillFolder = settings.value(QStringLiteral("live/spillFolder"), defaultFolder).toString();
    m_flushTimer->setSingleShot(true);
    connect(m_flushTimer, &QTimer::timeout, this, &LiveController::flush);
    m_sinceGrowth.start();

    connect(m_receiver, &LiveReceiver::updated, this, &LiveController::onUpdate);
    m_receiver->setIncremental(true);
    m_receiver->setReconnect(afterExit == AfterExit::Reconnect);
    m_receiver->setWaitForJob(afterExit == AfterExit::Reconnect); // an interactive tab waits for the job to come up
    m_receiver->setCurveKeys(keys.serverPublicKey, keys.secretKey);
}

LiveController::~LiveController() { stop(); }

void LiveController::start() { m_receiver->start(); }

void LiveController::stop() { m_receiver->stop(); }

void LiveController::retry()
{
    m_settledEmitted = false;
    m_receiver->restart();
    Q_EMIT statusChanged();
}

QString LiveController::statusText() const
{
    const LiveUpdate& u = m_receiver->latest();
    QString text = endpoint();
    if (u.pid)
        text += tr(" (pid %1 on %2)").arg(u.pid).arg(u.host);
    text += tr(" — %1 events, %2 lost, %3 gaps")
                .arg(u.stats.applied)
                .arg(u.stats.agentDropped())
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

bool LiveController::isSettled() const
{
    const LiveUpdate& u = m_receiver->latest();
    const bool ended = u.state == LiveState::Exited || u.state == LiveState::Failed || u.state == LiveState::Stopped;
    return ended && backlog() == 0 && !m_growthPending && (m_live == nullptr || !m_live->hasPending())
        && m_writing == 0;
}

void LiveController::checkSettled()
{
    const bool done = isSettled();
    if (m_document) {
        const bool growing = m_live != nullptr && !done; // the views stop keeping room to grow
        if (growing != m_announcedGrowing) {
            m_announcedGrowing = growing;
            Q_EMIT growingChanged(growing);
        }
    }
    if (!m_settledEmitted && done) {
        m_settledEmitted = true;
        Q_EMIT settled();
    }
}

void LiveController::setDocument(std::shared_ptr<const Document> document)
{
    m_document = std::move(document);
    m_announcedGrowing = m_document->isLive(); // a new Session's default (Session::isGrowing)
    Q_EMIT documentChanged(m_document);
}

void LiveController::onUpdate(const LiveUpdate& update)
{
    if (update.initial && !m_live) {
        m_live = std::make_unique<LiveDocument>(endpoint(), *update.initial, update.deviceCount);
        setDocument(m_live->document());
    }
    if (update.delta && m_live)
        m_live->append(update.delta); // the Recorder's delta itself, entries and all: nothing copied
    if (!m_live && update.snapshot && !m_document)
        setDocument(makeDocument(endpoint(), update.snapshot)); // ended before any delta: the whole recording
    Q_EMIT updated(update);
    flush();
    Q_EMIT statusChanged();
    checkSettled();
}

// Applies what is queued (unless a job holds the document: then again shortly), and tells the views when their
// pacing allows.
void LiveController::flush()
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
            if (!m_growthPending
                || m_sinceGrowth.elapsed() < std::max(MinGrowthIntervalMs, GrowthCostFactor * m_growthCostMs))
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
    Q_EMIT growthReady();
    checkTriggers();
    m_growthCostMs = cost.elapsed();
    if (m_historyLimit > 0 && m_live->memoryBytes() > m_historyLimit)
        rotate();
    Q_EMIT grew();
    Q_EMIT statusChanged();
    checkSettled();
}

void LiveController::setTrigger(LiveTrigger trigger)
{
    m_trigger = std::move(trigger);
    m_armed.clear(); // re-armed on every device from the states shown now on
    m_checkedUpTo.clear();
    if (m_live)
        for (const model::Replay& r : m_live->document()->replays)
            m_checkedUpTo.push_back(r.entryCount());
    Q_EMIT statusChanged();
}

// Looks at the states shown since the last check: reserved memory rising above the threshold, or an OOM entry.
void LiveController::checkTriggers()
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
    const QString path
        = QDir(m_trigger.folder)
              .filePath(QStringLiteral("memscope-%1-%2-%3.pickle").arg(pid).arg(reason).arg(++m_triggerCount));
    std::shared_ptr<model::Snapshot> copy = m_live->copySnapshot();
    copy->topLevelExtras = recordingInfo();
    writeInBackground(std::move(copy), path, [this, path](const QString& error) {
        if (error.isEmpty())
            m_triggered << path;
        Q_EMIT triggered(path, error);
        Q_EMIT statusChanged();
    });
}

void LiveController::writeInBackground(std::shared_ptr<const model::Snapshot> snapshot, const QString& path,
                                       std::function<void(const QString&)> done)
{
    auto write = [snapshot = std::move(snapshot), path]() -> QString {
        if (io::Error e = io::saveSnapshot(*snapshot, path.toStdString()))
            return QString::fromStdString(e.toString());
        return {};
    };
    // One write at a time, in the order asked for: two saves to one file never race, and a later one wins. The
    // chain lives in the futures, not in this object: writes asked for finish even if the window closes.
    m_lastWrite = m_lastWrite.isFinished()
        ? QtConcurrent::run(std::move(write))
        : m_lastWrite.then(QThreadPool::globalInstance(),
                           [write = std::move(write)](const QString&) { return write(); });
    ++m_writing;
    auto* watcher = new QFutureWatcher<QString>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, done = std::move(done)] {
        watcher->deleteLater();
        --m_writing;
        done(watcher->result());
        checkSettled();
    });
    watcher->setFuture(m_lastWrite);
}

// The history passed its bound: the document so far is written to the spill folder as a snapshot file (PyTorch's
// format, openable like any other) and the recording goes on with a new document that starts from its final state.
void LiveController::rotate()
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
        Q_EMIT spilled(path, error);
        Q_EMIT statusChanged();
    });
    m_checkedUpTo.assign(m_checkedUpTo.size(), 0); // the triggers look at the new document from its start
    setDocument(m_live->document());
}

QString LiveController::refusedPrepend(const QString& path) const
{
    if (!m_live)
        return tr("%1: nothing recorded yet from %2").arg(path, endpoint());
    if (!m_spilled.isEmpty() || m_spillsWriting > 0)
        return tr("%1: this recording's start was written to disk to bound its memory; open those parts instead")
            .arg(path);
    return {};
}

void LiveController::loadEarlierHistory(const QString& path)
{
    if (const QString refused = refusedPrepend(path); !refused.isEmpty()) {
        QTimer::singleShot(0, this, [this, path, refused] { Q_EMIT earlierHistoryLoaded(path, refused); });
        return;
    }
    auto* watcher = new QFutureWatcher<io::LoadResult>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, path] {
        watcher->deleteLater();
        const io::LoadResult& loaded = watcher->future().result();
        if (!loaded.ok())
            Q_EMIT earlierHistoryLoaded(path, QString::fromStdString(loaded.error.toString()));
        else
            prependLoaded(path, loaded.snapshot);
    });
    watcher->setFuture(QtConcurrent::run([file = path.toStdString()] { return io::loadSnapshot(file); }));
}

void LiveController::prependLoaded(const QString& path, std::shared_ptr<const model::Snapshot> earlier)
{
    // (The recording went on while the file was read: it may have spilled meanwhile.)
    if (const QString refused = refusedPrepend(path); !refused.isEmpty()) {
        Q_EMIT earlierHistoryLoaded(path, refused);
        return;
    }
    m_live = LiveDocument::prepend(*earlier, QFileInfo(path).fileName(), *m_live);
    // The triggers have seen what was live; the prepended part is history, not news.
    m_checkedUpTo.clear();
    for (const model::Replay& r : m_live->document()->replays)
        m_checkedUpTo.push_back(r.entryCount());
    setDocument(m_live->document());
    Q_EMIT statusChanged();
    Q_EMIT earlierHistoryLoaded(path, QString());
}

model::Extras LiveController::recordingInfo(int part) const
{
    const LiveUpdate& u = m_receiver->latest();
    viewer::RecordingInfo info;
    info.endpoint = endpoint().toStdString();
    info.host = u.host.toStdString();
    info.pid = u.pid;
    info.devices = u.deviceCount;
    info.events = u.stats.applied;
    info.lost = u.stats.agentDropped();
    info.missing = u.stats.missing;
    info.gaps = u.stats.gaps;
    info.resyncs = u.stats.resyncs;
    info.restarts = u.stats.restarts;
    info.part = part;
    info.savedAtUs = QDateTime::currentMSecsSinceEpoch() * 1000;
    return viewer::recordingExtras(info);
}

void LiveController::save(const QString& path, SaveFormat format)
{
    if (!m_live) {
        const QString error = tr("%1: nothing recorded yet from %2").arg(path, endpoint());
        QTimer::singleShot(0, this, [this, path, error] { Q_EMIT saved(path, error); });
        return;
    }
    std::shared_ptr<model::Snapshot> copy = m_live->copySnapshot();
    if (format == SaveFormat::Recording)
        copy->topLevelExtras = recordingInfo();
    writeInBackground(std::move(copy), path, [this, path](const QString& error) { Q_EMIT saved(path, error); });
}

} // namespace memscope::app
