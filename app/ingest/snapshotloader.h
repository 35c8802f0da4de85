// SnapshotLoader reads snapshot files on the global thread pool (QtConcurrent): parse, build the model, replay every
// device (the Document the views need), and hands the result back to the GUI thread. Several loads may run at once
// (several files open as tabs); each has a job id, reports progress and can be cancelled. Lives on, and is called
// from, the GUI thread; the worker touches nothing but its own copies and an atomic cancel flag.
#pragma once

#include "document/session.h"
#include "document/snapshotsummary.h"

#include <QHash>
#include <QObject>
#include <QString>
#include <QTimer>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

namespace memscope::app {

struct LoadOutcome {
    QString path; // as given to load()
    std::shared_ptr<const model::Snapshot> snapshot; // null when loading failed
    std::shared_ptr<const Document> document; // the snapshot with its replays; null when loading failed
    SnapshotSummary summary;
    QString error; // one line naming the file and the reason; empty on success
    bool cancelled = false;
    bool ok() const { return snapshot != nullptr; }
};

// Loads one file, or a ":/" Qt resource, on the calling thread. `progress` gets a percentage and returns false to
// cancel; it may be empty. Never throws.
LoadOutcome loadOutcome(const QString& path, const std::function<bool(int)>& progress = {});

class SnapshotLoader : public QObject {
    Q_OBJECT
public:
    explicit SnapshotLoader(QObject* parent = nullptr);
    ~SnapshotLoader() override;

    // Starts loading `path` in the background and returns its job id at once; progress() and finished() follow.
    uint64_t load(const QString& path);
    // Asks a running job to stop; its finished() then reports `cancelled`.
    void cancel(uint64_t job);
    bool isRunning(uint64_t job) const { return m_jobs.contains(job); }

Q_SIGNALS:
    void progress(uint64_t job, int percent);
    void finished(uint64_t job, const memscope::app::LoadOutcome& outcome);

private:
    struct JobState {
        std::atomic<int> percent { 0 }; // written by the worker
        std::atomic<bool> cancelled { false }; // written by the GUI thread
        int reported = -1; // GUI thread only
    };
    void pollProgress();

    uint64_t m_nextJob = 0;
    QHash<uint64_t, std::shared_ptr<JobState>> m_jobs;
    QTimer m_poll;
};

} // namespace memscope::app
