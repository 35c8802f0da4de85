// LiveController: a live recording from receiver to document, without widgets. Owns the LiveReceiver (its thread
// decodes and records; live/livereceiver.h, incremental mode) and the LiveDocument the Recorder's deltas grow
// (document/livedocument.h), and does everything a live tab does beside showing it: pacing how often the views take
// the growth in, the capture triggers, the bounded history (spilling the document to disk and going on from its
// final state), saving the recording and prepending an earlier snapshot, both off the GUI thread. A window
// (views/livewindow.h) shows what it announces: documentChanged() gives it the document to show, growthReady() says
// when to tell the views, statusChanged() when to read statusText() again.
//
// Pacing: the receiver hands over the join state once and then what is new about every 30 ms. Each delta is queued
// on the LiveDocument and flushed at once, in slices of at most ~8 ms per turn of the event loop; the views hear of
// the growth (growthReady()) at most every max(20 ms, 4 × what the slots connected to it took last time), so a
// flood of events never starves painting and input: what is still queued shows as "behind by N events" in
// statusText(). Writes (Save, the triggers' files, the bounded history's parts) run one after another on the thread
// pool, in the order asked for: two never race, and a write asked for outlives the controller. Threads: GUI thread
// only (the object, its signals and its document).
#pragma once

#include "live/livereceiver.h"
#include "document/livedocument.h"
#include "document/session.h"

#include <QElapsedTimer>
#include <QFuture>
#include <QObject>
#include <QStringList>

#include <functional>
#include <memory>
#include <vector>

class QTimer;

namespace memscope::app {

// Trigger-based capture: write the recording to a folder when a job's reserved memory rises above a threshold
// (again each time after it fell back to or below it) or when it reports an OOM.
struct LiveTrigger {
    model::ByteCount reservedAbove = 0; // 0: off
    bool onOom = false;
    QString folder; // where the files go: memscope-<pid>-<reason>-<n>.pickle
    bool isOn() const { return (reservedAbove > 0 || onOom) && !folder.isEmpty(); }
};

class LiveController : public QObject {
    Q_OBJECT
public:
    // What the recording does when the job goes away.
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
    // What save() writes. Both are PyTorch snapshots (pickle, or JSON by the file's suffix) that every tool opens; a
    // memscope recording also says where it came from and what was lost, under the top-level key
    // "memscope_recording" (which PyTorch's readers ignore): endpoint, host, pid, devices; events, lost, missing,
    // gaps, resyncs, restarts (the receiver's counts since the recording started, when it was written); part (of a
    // bounded history; 0: not a part), saved_at_us.
    enum class SaveFormat : uint8_t { Recording, PyTorch };

    // Receives from `endpoint` once start() is called (connect to the signals first). The history bound and the
    // folder it spills to come from QSettings (live/historyLimitMiB, default 4096; live/spillFolder, default the
    // app's cache folder + "/live-history").
    explicit LiveController(const QString& endpoint, AfterExit afterExit = AfterExit::End, const Keys& keys = {},
                            QObject* parent = nullptr);
    ~LiveController() override; // stop()s
    void start();
    // Ends the recording (joins the receiver thread; its last update is taken in before this returns).
    void stop();
    // A recording that failed before recording anything (the job not up, its socket refused) attaches again.
    void retry();

    LiveReceiver* receiver() const { return m_receiver; }
    const QString& endpoint() const { return m_receiver->endpoint(); }
    // The document shown: the live one (the join state plus every entry applied), or the whole recording when it
    // ended before anything was handed over; null before either.
    std::shared_ptr<const Document> document() const { return m_document; }
    // The live document; null until the agent's state arrived.
    const LiveDocument* liveDocument() const { return m_live.get(); }
    // Entries received but not applied yet.
    size_t backlog() const { return m_live ? m_live->queued() : 0; }
    // The status line: endpoint, pid, events, lost, gaps, resyncs, live / silent / the job exited, triggers,
    // earlier history, what is behind, the receiver's message.
    QString statusText() const;
    // True once the recording ended (goodbye, failure, stop), everything received is applied and announced, and no
    // write is under way.
    bool isSettled() const;

    // Writes what is shown (the current document: since the recording started, or since its last rotation) to
    // `path` on the thread pool, after the writes asked for before; saved() says how it went.
    void save(const QString& path, SaveFormat format = SaveFormat::Recording);
    // The "memscope_recording" key of what is shown now, as `part` of a bounded history (0: not a part).
    model::Extras recordingInfo(int part = 0) const;

    // Bounded history: when the document's memory passes `bytes` (0: no bound) it is written to `folder` as a
    // snapshot file and the recording goes on with a new document from its final state.
    void setHistoryLimit(size_t bytes, const QString& folder)
    {
        m_historyLimit = bytes;
        m_spillFolder = folder;
    }
    // Files the bounded history wrote, oldest first.
    const QStringList& spilledFiles() const { return m_spilled; }
    // Extends the history backwards with a snapshot of the same job from before the recording joined (the agent's
    // dump, a recording, PyTorch's own snapshot): read on the thread pool, then LiveDocument::prepend on the GUI
    // thread and documentChanged(). earlierHistoryLoaded() says how it went (always later, never from this call).
    void loadEarlierHistory(const QString& path);

    void setTrigger(LiveTrigger trigger);
    const LiveTrigger& trigger() const { return m_trigger; }
    // Files the triggers wrote, oldest first.
    const QStringList& triggeredFiles() const { return m_triggered; }

Q_SIGNALS:
    // A document to show instead of the one before (first when the agent's state arrived; then after each
    // rotation of the bounded history and each prepended snapshot, the new one continuing the old).
    void documentChanged(std::shared_ptr<const memscope::app::Document> document);
    // Entries were applied to document(): the views take them in now (Session::documentGrew). The time the
    // connected slots take paces the next one.
    void growthReady();
    // After growthReady(), once the triggers have looked at the new entries and the history bound was applied
    // (which may have changed the document).
    void grew();
    // Whether document() may still grow changed (Session::setGrowing): false once settled.
    void growingChanged(bool growing);
    // What the receiver handed over (after the controller took it in, before pacing it): for the window's
    // placeholder and buttons.
    void updated(const memscope::app::LiveUpdate& update);
    void statusChanged();
    // isSettled() turned true.
    void settled();
    // save(`path`) wrote it ("") or failed (`error` names the file and the reason).
    void saved(const QString& path, const QString& error);
    // A trigger wrote `path` (or failed to: `error`).
    void triggered(const QString& path, const QString& error);
    // The bounded history wrote a part to `path` (or failed to: `error`).
    void spilled(const QString& path, const QString& error);
    // loadEarlierHistory(`path`) prepended it ("") or failed (`error` names the file and the reason).
    void earlierHistoryLoaded(const QString& path, const QString& error);

private:
    void onUpdate(const LiveUpdate& update);
    void flush();
    void setDocument(std::shared_ptr<const Document> document);
    void checkSettled();
    void checkTriggers();
    void rotate();
    void prependLoaded(const QString& path, std::shared_ptr<const model::Snapshot> earlier);
    // Writes `snapshot` to `path` on the thread pool after the writes before it; `done` gets an error line or ""
    // on the GUI thread (not at all if this controller is gone by then).
    void writeInBackground(std::shared_ptr<const model::Snapshot> snapshot, const QString& path,
                           std::function<void(const QString&)> done);
    QString refusedPrepend(const QString& path) const; // why a snapshot cannot be prepended now, or ""

    LiveReceiver* m_receiver = nullptr;
    std::unique_ptr<LiveDocument> m_live;
    std::shared_ptr<const Document> m_document;
    bool m_announcedGrowing = false; // what the views were last told (growingChanged, or a new document's default)
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
    int m_writing = 0; // background writes asked for and not reported yet
    QFuture<QString> m_lastWrite; // the last of them: the next one starts after it
    QStringList m_triggered;
    std::vector<int64_t> m_checkedUpTo; // per device: states already checked by the triggers
    std::vector<uint8_t> m_armed; // per device: reserved memory is at or below the threshold since the last firing
    int m_triggerCount = 0;
    bool m_settledEmitted = false;
};

} // namespace memscope::app
