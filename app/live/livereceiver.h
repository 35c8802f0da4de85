// LiveReceiver: attaches to a running job's agent (docs/protocol.md, the Clone pattern). One QThread, started by
// start() and owned by this object, owns a client::AgentClient (common/client: the SUB and DEALER sockets, decoding,
// automatic resyncs after gaps, reconnection to a restarted job) feeding one viewer::Recorder; nothing else touches
// them. The thread hands immutable LiveUpdates (counters, state, and what was recorded) to the GUI thread as queued
// calls, which emit updated(): in incremental mode (the app's live tabs) the join state once and then the Recorder's
// deltas about every 30 ms, the Recorder keeping only the allocator state; otherwise a copy of the Recorder's whole
// snapshot about every 250 ms. Either way at once at a goodbye, a resync or restart, when the agent goes silent, or
// on an error. The LiveReceiver object itself lives on, and is called from, the GUI thread; stop() (and the
// destructor) ask the thread to end and join it (it polls every 50 ms, so this waits at most about that long).
#pragma once

#include "client/agentclient.h"
#include "model/snapshot.h"
#include "viewer/recorder.h"

#include <QObject>
#include <QString>

#include <atomic>
#include <cstdint>
#include <memory>

class QThread;

namespace memscope::app {

// Where a live recording stands.
enum class LiveState : uint8_t {
    Connecting, // waiting for the agent's state reply
    Live, // recording; the agent was heard within the silence limit
    Silent, // recording, but nothing (not even a heartbeat) for 2 s: the job may have died or hung
    Exited, // the job said goodbye: the recording is complete
    Failed, // no agent answered, or it speaks an incompatible protocol; `message` says why
    Stopped, // stop() was called
    Reconnecting, // (setReconnect(true)) the job said goodbye: waiting for its next run; what was recorded stays
};

// One hand-over from the receiver thread: immutable once emitted.
struct LiveUpdate {
    LiveState state = LiveState::Connecting;
    std::shared_ptr<const model::Snapshot> snapshot; // null until the state reply arrived
    uint64_t snapshotSerial = 0; // +1 per new snapshot copy; 0: none yet
    viewer::RecorderStats stats; // stats.resyncs, stats.restarts: fresh states applied after gaps and restarts
    client::ClientStats clientStats; // state requests, malformed frames skipped, ...
    uint64_t lastSequence = 0;
    uint32_t pid = 0; // the job's, from its Hello (the current run's after a restart)
    uint32_t previousPid = 0; // the run before the last restart; 0: none
    QString host;
    QString message; // an error or warning for people, naming the endpoint; empty when none
    // Incremental mode (setIncremental): `initial` is the state the recording starts from (in the first update
    // that has one), `delta` what was recorded since the previous update (every update in order, none dropped),
    // `snapshot` the whole recording only at the end (Exited, Stopped) and after requestSnapshot().
    std::shared_ptr<const model::Snapshot> initial;
    std::shared_ptr<const viewer::Recorder::Delta> delta;
    int deviceCount = 0; // the job's devices (its Hello)
};

class LiveReceiver : public QObject {
    Q_OBJECT
public:
    // `endpoint`: the job's MEMSCOPE_ENDPOINT (ipc://PATH or tcp://HOST:PORT).
    explicit LiveReceiver(QString endpoint, QObject* parent = nullptr);
    ~LiveReceiver() override; // stop()s

    const QString& endpoint() const { return m_endpoint; }
    // Starts the receiver thread; false (and a Failed update) when the endpoint is neither ipc:// nor tcp://.
    bool start();
    // Ends the thread and joins it; emits one last Stopped update unless the recording had ended already.
    void stop();
    bool isRunning() const;
    // The last update handed over (GUI thread).
    const LiveUpdate& latest() const { return m_latest; }
    // Seconds without a state reply before giving up (default 5, as `memscope-cli record`).
    void setAnswerTimeout(double seconds) { m_answerTimeout = seconds; }
    // CURVE (common/wire/keyfile.h): the agent's public key file and our secret key file; both empty (the
    // default): no CURVE. Before start().
    void setCurveKeys(const QString& serverPublicKeyFile, const QString& secretKeyFile)
    {
        m_curveServerKey = serverPublicKeyFile;
        m_curveSecretKey = secretKeyFile;
    }
    // After a goodbye, wait for the job's next run at the same endpoint (Reconnecting) instead of ending (Exited);
    // its state then continues the recording (stats.restarts, an annotation in the trace). Off by default. Before
    // start().
    void setReconnect(bool on) { m_reconnect = on; }
    // While no agent answers (the job is not up yet), keep asking instead of failing after the answer timeout: the
    // update's message says so, and the recording starts once the job is there. Off by default. Before start().
    void setWaitForJob(bool on) { m_waitForJob = on; }
    // After the recording failed (or ended), starts anew: a fresh connection, nothing of the old recording kept.
    bool restart();
    // Hand over deltas about every 30 ms instead of a whole snapshot copy every 250 ms (LiveUpdate). Before start().
    void setIncremental(bool on) { m_incremental = on; }
    bool isIncremental() const { return m_incremental; }
    // Incremental mode: the next update carries the whole recording in `snapshot` (e.g. to save it).
    void requestSnapshot() { m_wantSnapshot = true; }

    static QString stateName(LiveState state); // "connecting", "live", "silent", "the job exited", "reconnecting…"

Q_SIGNALS:
    // On the GUI thread, at most about every 30 ms (incremental) or 250 ms while events flow, and once when the
    // recording ends.
    void updated(const memscope::app::LiveUpdate& update);
    // The recording ended: Exited, Failed or Stopped (after the last updated()).
    void finished(memscope::app::LiveState state);

private:
    void run(); // the receiver thread
    void deliver(LiveUpdate update); // GUI thread

    QString m_endpoint;
    double m_answerTimeout = 5;
    QString m_curveServerKey, m_curveSecretKey;
    bool m_reconnect = false;
    bool m_waitForJob = false;
    bool m_incremental = false;
    std::atomic<bool> m_wantSnapshot { false };
    // Written by the receiver thread as it ends (incremental mode), read by stop() after joining it.
    std::shared_ptr<const viewer::Recorder::Delta> m_lastDelta;
    std::shared_ptr<const model::Snapshot> m_lastSnapshot;
    viewer::RecorderStats m_lastStats;
    uint64_t m_lastSequence = 0;
    bool m_haveLast = false;
    QThread* m_thread = nullptr;
    std::atomic<bool> m_stop { false };
    LiveUpdate m_latest;
    bool m_finished = false;
};

} // namespace memscope::app
