// SnapshotLoader reads snapshot files on the global thread pool (QtConcurrent) and hands the finished snapshot, with
// its summary, back to the GUI thread. Only the latest load() counts: a result that arrives after a newer load() was
// started is dropped. Lives on, and is called from, the GUI thread; the worker touches nothing but its own copies.
#pragma once

#include "models/snapshotsummary.h"

#include <QObject>
#include <QString>

#include <cstdint>
#include <memory>

namespace memscope::app {

struct LoadOutcome {
    QString path; // as given to load()
    std::shared_ptr<const model::Snapshot> snapshot; // null when loading failed
    SnapshotSummary summary;
    QString error; // one line naming the file and the reason; empty on success
    bool ok() const { return snapshot != nullptr; }
};

// Loads one file, or a ":/" Qt resource, on the calling thread. Never throws.
LoadOutcome loadOutcome(const QString& path);

class SnapshotLoader : public QObject {
    Q_OBJECT
public:
    explicit SnapshotLoader(QObject* parent = nullptr);

    // Starts loading `path` in the background and returns at once; finished() follows, unless load() is called
    // again first.
    void load(const QString& path);

Q_SIGNALS:
    void finished(const memscope::app::LoadOutcome& outcome);

private:
    uint64_t m_latestJob = 0;
};

} // namespace memscope::app
