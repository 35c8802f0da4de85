// LiveWindow: the tab of a running job. Owns a LiveReceiver (livereceiver.h) and shows its latest snapshot in a
// DocumentWindow, with a status line (endpoint, pid, events, lost, gaps, live / silent / the job exited) and a
// Save… button. Each new snapshot's Document (replays) is built on the thread pool (QtConcurrent), one build at a
// time; a result older than the one shown is dropped. When a build finishes a new DocumentWindow replaces the old
// one: the cursor follows the end of the trace unless the user moved it, then it keeps its index.
// This first version rebuilds the whole Document from the whole snapshot on every refresh (4 Hz at most, one build
// in flight); replaying only the new events onto the previous Document is the next step. GUI thread only.
#pragma once

#include "ingest/livereceiver.h"
#include "models/session.h"

#include <QWidget>

#include <memory>

class QLabel;
class QPushButton;
class QVBoxLayout;

namespace memscope::app {

class DocumentWindow;

class LiveWindow : public QWidget {
    Q_OBJECT
public:
    // Starts receiving from `endpoint` at once.
    explicit LiveWindow(const QString& endpoint, QWidget* parent = nullptr);
    ~LiveWindow() override;

    LiveReceiver* receiver() const { return m_receiver; }
    const QString& endpoint() const { return m_receiver->endpoint(); }
    // The DocumentWindow of the snapshot shown; null until the first Document is built.
    DocumentWindow* documentWindow() const { return m_document; }
    // The snapshot shown (the newest one built), or null.
    std::shared_ptr<const model::Snapshot> snapshot() const;
    // The newest snapshot received (it may still be building).
    std::shared_ptr<const model::Snapshot> latestSnapshot() const { return m_receiver->latest().snapshot; }
    QString statusText() const;
    // True once the recording ended (goodbye, failure, stop) and the final snapshot is shown.
    bool isSettled() const;
    // Writes the newest snapshot received to `path` (format by suffix, io::saveSnapshot); an error line or "".
    QString saveSnapshot(const QString& path) const;

Q_SIGNALS:
    // A new DocumentWindow replaced the old one.
    void documentChanged(memscope::app::DocumentWindow* document);
    void statusChanged();
    // isSettled() turned true.
    void settled();

private:
    void onUpdate(const LiveUpdate& update);
    void startBuild();
    void showDocument(uint64_t serial, std::shared_ptr<const Document> document);
    void chooseSave();
    void checkSettled();

    LiveReceiver* m_receiver = nullptr;
    QVBoxLayout* m_layout = nullptr;
    QLabel* m_status = nullptr;
    QLabel* m_placeholder = nullptr;
    QPushButton* m_save = nullptr;
    DocumentWindow* m_document = nullptr;
    uint64_t m_shownSerial = 0; // serial of the snapshot in m_document
    uint64_t m_buildingSerial = 0; // of the build in flight; 0: none
    bool m_settledEmitted = false;
};

} // namespace memscope::app
