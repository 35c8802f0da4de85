// Loading on the thread pool: loadOutcome() runs on a worker, the QFutureWatcher delivers its result on the GUI
// thread, where stale results are dropped by job number.
#include "ingest/snapshotloader.h"

#include "io/snapshotio.h"
#include "model/prefault.h"

#include <QFile>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>
#include <span>
#include <utility>

namespace memscope::app {

namespace {

    io::LoadResult loadResource(const QString& path, QString& error, const io::LoadOptions& options)
    {
        QFile file(path);
        if (!file.open(QIODevice::ReadOnly)) {
            error = path + QStringLiteral(": ") + file.errorString();
            return {};
        }
        // Read, not map(): rcc compresses resources, and compressed ones cannot be mapped.
        const QByteArray data = file.readAll();
        const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(data.constData()),
                                             static_cast<size_t>(data.size()));
        return io::loadSnapshotFromMemory(bytes, QFileInfo(path).fileName().toStdString(), options);
    }

} // namespace

LoadOutcome loadOutcome(const QString& path, const std::function<bool(int)>& progress)
{
    LoadOutcome outcome;
    outcome.path = path;
    try {
        // The replays below fault in about as much memory as the file has bytes; warmed while the parse leaves the
        // second core idle, and given back to the kernel just before they start (model/prefault.h).
        const size_t warmBytes
            = path.startsWith(u':') ? 0 : model::WarmPages::sizeForFile(QFile::encodeName(path).toStdString());
        model::WarmPages warm(warmBytes);
        io::LoadOptions options;
        if (progress) {
            // Reading is about half of the work, the replays the other half (13 M entries: 1.8 s and 2 s).
            options.progress
                = [&progress](uint64_t done, uint64_t total) { return progress(total ? int(done * 50 / total) : 0); };
        }
        io::LoadResult result = path.startsWith(u':')
            ? loadResource(path, outcome.error, options)
            : io::loadSnapshot(QFile::encodeName(path).toStdString(), options);
        if (!outcome.error.isEmpty())
            return outcome;
        if (!result.ok()) {
            outcome.cancelled = result.error.code == io::ErrorCode::Cancelled;
            outcome.error = QString::fromStdString(result.error.toString());
            if (outcome.error.isEmpty())
                outcome.error = path + QStringLiteral(": cannot load the snapshot");
            return outcome;
        }
        warm.release();
        if (progress && !progress(50)) {
            outcome.cancelled = true;
            outcome.error = path + QStringLiteral(": loading was cancelled");
            return outcome;
        }
        outcome.summary = summarize(*result.snapshot);
        std::function<bool(double)> replayProgress;
        if (progress)
            replayProgress = [&progress](double done) { return progress(50 + int(done * 49)); };
        outcome.document = makeDocument(path, result.snapshot, replayProgress);
        if (!outcome.document) {
            outcome.cancelled = true;
            outcome.error = path + QStringLiteral(": loading was cancelled");
            return outcome;
        }
        outcome.snapshot = std::move(result.snapshot);
        if (progress)
            progress(100);
    } catch (const std::exception& e) {
        // The readers report bad input as errors; this is for running out of memory and the like. An exception
        // must not reach QFuture::result() on the GUI thread.
        outcome.snapshot.reset();
        outcome.document.reset();
        outcome.error = path + QStringLiteral(": ") + QString::fromLocal8Bit(e.what());
    }
    return outcome;
}

SnapshotLoader::SnapshotLoader(QObject* parent)
    : QObject(parent)
{
    m_poll.setInterval(50);
    connect(&m_poll, &QTimer::timeout, this, &SnapshotLoader::pollProgress);
}

SnapshotLoader::~SnapshotLoader()
{
    // Running workers stop at their next progress check; their results go nowhere.
    for (auto& state : m_jobs)
        state->cancelled.store(true);
}

uint64_t SnapshotLoader::load(const QString& path)
{
    const uint64_t job = ++m_nextJob;
    auto state = std::make_shared<JobState>();
    m_jobs.insert(job, state);
    auto* watcher = new QFutureWatcher<LoadOutcome>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, job] {
        watcher->deleteLater();
        m_jobs.remove(job);
        if (m_jobs.isEmpty())
            m_poll.stop();
        Q_EMIT finished(job, watcher->result());
    });
    // The worker only writes atomics; a GUI-thread timer turns them into progress() signals.
    watcher->setFuture(QtConcurrent::run([path, state] {
        return loadOutcome(path, [&state](int percent) {
            state->percent.store(percent);
            return !state->cancelled.load();
        });
    }));
    if (!m_poll.isActive())
        m_poll.start();
    return job;
}

void SnapshotLoader::pollProgress()
{
    for (auto it = m_jobs.begin(); it != m_jobs.end(); ++it) {
        const int percent = it.value()->percent.load();
        if (percent != it.value()->reported) {
            it.value()->reported = percent;
            Q_EMIT progress(it.key(), percent);
        }
    }
}

void SnapshotLoader::cancel(uint64_t job)
{
    if (auto it = m_jobs.find(job); it != m_jobs.end())
        (*it)->cancelled.store(true);
}

} // namespace memscope::app
