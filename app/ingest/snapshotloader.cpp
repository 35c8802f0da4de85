// Loading on the thread pool: loadOutcome() runs on a worker, the QFutureWatcher delivers its result on the GUI
// thread, where stale results are dropped by job number.
#include "ingest/snapshotloader.h"

#include "io/snapshotio.h"

#include <QFile>
#include <QFileInfo>
#include <QFutureWatcher>
#include <QtConcurrent/QtConcurrentRun>

#include <exception>
#include <span>
#include <utility>

namespace memscope::app {

namespace {

    io::LoadResult loadResource(const QString& path, QString& error)
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
        return io::loadSnapshotFromMemory(bytes, QFileInfo(path).fileName().toStdString());
    }

} // namespace

LoadOutcome loadOutcome(const QString& path)
{
    LoadOutcome outcome;
    outcome.path = path;
    try {
        io::LoadResult result = path.startsWith(u':') ? loadResource(path, outcome.error)
                                                      : io::loadSnapshot(QFile::encodeName(path).toStdString());
        if (!outcome.error.isEmpty())
            return outcome;
        if (!result.ok()) {
            outcome.error = QString::fromStdString(result.error.toString());
            if (outcome.error.isEmpty())
                outcome.error = path + QStringLiteral(": cannot load the snapshot");
            return outcome;
        }
        outcome.summary = summarize(*result.snapshot);
        outcome.snapshot = std::move(result.snapshot);
    } catch (const std::exception& e) {
        // The readers report bad input as errors; this is for running out of memory and the like. An exception
        // must not reach QFuture::result() on the GUI thread.
        outcome.error = path + QStringLiteral(": ") + QString::fromLocal8Bit(e.what());
    }
    return outcome;
}

SnapshotLoader::SnapshotLoader(QObject* parent)
    : QObject(parent)
{
}

void SnapshotLoader::load(const QString& path)
{
    const uint64_t job = ++m_latestJob;
    auto* watcher = new QFutureWatcher<LoadOutcome>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, job] {
        watcher->deleteLater();
        if (job == m_latestJob)
            Q_EMIT finished(watcher->result());
    });
    watcher->setFuture(QtConcurrent::run(loadOutcome, path));
}

} // namespace memscope::app
