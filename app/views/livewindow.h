// LiveWindow: the tab of a running job. Owns a LiveReceiver (ingest/livereceiver.h, incremental mode) and grows a
// LiveDocument (models/livedocument.h) shown in one DocumentWindow, with a status line (endpoint, pid, events,
// lost, gaps, resyncs, live / silent / the job exited) and a Save… button.
//
// The receiver hands over the join state once and then what is new about every 30 ms. Each delta is queued on the
// LiveDocument and flushed at once; the views hear of the growth (Session::documentGrew) at most every max(30 ms,
// 4 × what the last growth cost them), so a flood of events never starves painting and input: what is still
// queued shows as "behind by N events" in the status line. The cursor follows the end until the user moves it;
// End (or the slider's end) returns to live. GUI thread only.
#pragma once

#include "ingest/livereceiver.h"
#include "models/livedocument.h"
#include "models/session.h"

#include <QElapsedTimer>
#include <QWidget>

#include <functional>
#include <memory>

class QLabel;
class QMenu;
class QToolButton;
class QPushButton;
class QTimer;
class QVBoxLayout;

namespace memscope::app {

class DocumentWindow;

// Trigger-based capture: write the recording to a folder when a job's reserved memory rises above a threshold
// (again each time after it fell back to or below it) or when it reports an OOM.
struct LiveTrigger {
    model::ByteCount reservedAbove = 0; // 0: off
    bool onOom = false;
    QString folder; // where the files go: memscope-<pid>-<reason>-<n>.pickle
    bool isOn() const { return (reservedAbove > 0 || onOom) && !folder.isEmpty(); }
};

class LiveWindow : public QWidget {
    Q_OBJECT
public:
    // What the tab does when the job goes away.
    enum class AfterExit : uint8_t {
        End, // the recording ends (Exited) and settles
        Reconnect, // keep what was recorded and wait for the job to run again at the endpoint (Reconnecting): its
                   // next run continues the recording, the restart marked in the trace
    };
    // CURVE key files (common/client/curvekeys.h) for agents that require them; both empty: none.
    struct Keys {
        QString serverPublicKey;
        QString secretKey;
    };
    // Starts receiving from `endpoint` at once.
    explicit LiveWindow(const QString& endpoint, AfterExit afterExit = AfterExit::End, QWidget* parent = nullptr,
                        const Keys& keys = {});
    ~LiveWindow() override;

    LiveReceiver* receiver() const { return m_receiver; }
    const QString& endpoint() const { return m_receiver->endpoint(); }
    // The DocumentWindow of the job; null until the agent's state arrived.
    DocumentWindow* documentWindow() const { return m_document; }
    // The snapshot the views show (the live document's: the join state plus every entry applied), or null.
    std::shared_ptr<const model::Snapshot> snapshot() const;
    // The receiver's last copy of the allocator state (at the end of the recording); null while the job runs.
    std::shared_ptr<const model::Snapshot> latestSnapshot() const { return m_receiver->latest().snapshot; }
    QString statusText() const;
    // True once the recording ended (goodbye, failure, stop) and everything received is shown.
    bool isSettled() const;
    // What Save… writes. Both are PyTorch snapshots (pickle, or JSON by the file's suffix) that every tool opens; a
    // memscope recording also says where it came from and what was lost, under the top-level key
    // "memscope_recording" (which PyTorch's readers ignore): endpoint, host, pid, devices; events, lost, missing,
    // gaps, resyncs, restarts (the receiver's counts since the tab started, when it was written); part (of a
    // bounded history; 0: not a part), saved_at_us.
    enum class SaveFormat : uint8_t { Recording, PyTorch };
    // Writes what is shown (the current document: since the tab started, or since its last rotation) to `path`;
    // an error line, or "" when written. Save… does the same on the thread pool.
    QString saveSnapshot(const QString& path, SaveFormat format = SaveFormat::Recording) const;
    // The "memscope_recording" key of what is shown now, as `part` of a bounded history (0: not a part).
    model::Extras recordingInfo(int part = 0) const;
    // Bounded history: when the document's memory passes `bytes` (0: no bound) it is written to `folder` as a
    // snapshot file and the tab continues with a new document from its final state. Defaults from QSettings.
    void setHistoryLimit(size_t bytes, const QString& folder)
    {
        m_historyLimit = bytes;
        m_spillFolder = folder;
    }
    // Files the bounded history wrote, oldest first.
    const QStringList& spilledFiles() const { return m_spilled; }
    // Extends the history backwards with a snapshot of the same job from before this tab joined (the agent's dump,
    // a recording, PyTorch's own snapshot): LiveDocument::prepend. An error line, or "" when done.
    QString loadEarlierHistory(const QString& path);
    void setTrigger(LiveTrigger trigger);
    const LiveTrigger& trigger() const { return m_trigger; }
    // Files the triggers wrote, oldest first.
    const QStringList& triggeredFiles() const { return m_triggered; }
    // Save…: asks for a file name, then writes what is shown there on the thread pool.
    void chooseSave();
    // A tab that failed before recording anything (the job not up, its socket refused) attaches again.
    void retry();
    // Entries received but not shown yet.
    size_t backlog() const { return m_live ? m_live->queued() : 0; }

Q_SIGNALS:
    // The DocumentWindow was created (once, when the agent's state arrived).
    void documentChanged(memscope::app::DocumentWindow* document);
    void statusChanged();
    // isSettled() turned true.
    void settled();
    // The views took in more entries.
    void grew();
    // A trigger wrote `path` (or failed to: `error`).
    void triggered(const QString& path, const QString& error);
    // The user asked to open an earlier part of the history (a spilled file).
    void openRequested(const QString& path);

private:
    void onUpdate(const LiveUpdate& update);
    void takeDelta(const wire::Recorder::Delta& delta);
    void flush();
    void showDocument(std::shared_ptr<const Document> document);
    void checkSettled();
    void checkTriggers();
    void chooseTrigger();
    void rotate();
    void replaceDocument(std::shared_ptr<const Document> document);
    void updateHistoryMenu();
    void writeInBackground(std::shared_ptr<const model::Snapshot> snapshot, const QString& path,
                           std::function<void(const QString&)> done);

    LiveReceiver* m_receiver = nullptr;
    std::unique_ptr<LiveDocument> m_live;
    QVBoxLayout* m_layout = nullptr;
    QLabel* m_status = nullptr;
    QLabel* m_placeholder = nullptr;
    QPushButton* m_save = nullptr;
    QPushButton* m_retry = nullptr;
    DocumentWindow* m_document = nullptr;
    QTimer* m_flushTimer = nullptr;
    QElapsedTimer m_sinceGrowth;
    qint64 m_growthCostMs = 0;
    bool m_growthPending = false; // entries applied that the views have not heard of
    LiveTrigger m_trigger;
    size_t m_historyLimit = 0;
    QString m_spillFolder;
    QStringList m_spilled;
    int m_spillsWriting = 0;
    QString m_spillError;
    int m_writing = 0; // background writes in flight
    QToolButton* m_history = nullptr;
    QMenu* m_historyMenu = nullptr;
    QStringList m_triggered;
    std::vector<int64_t> m_checkedUpTo; // per device: states already checked by the triggers
    std::vector<uint8_t> m_armed; // per device: reserved memory is at or below the threshold since the last firing
    int m_triggerCount = 0;
    bool m_settledEmitted = false;
};

} // namespace memscope::app
