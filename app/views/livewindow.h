// LiveWindow: the tab of a running job. Shows what its LiveController (live/livecontroller.h) records: a
// placeholder until the agent's state arrives, then one DocumentWindow on the controller's document (replaced when
// the controller rotates its bounded history or prepends an earlier snapshot, keeping the device, dock layout and
// follow mode), with a status line (endpoint, pid, events, lost, gaps, resyncs, live / silent / the job exited) and
// the user's actions: Save…, Triggers…, Earlier history, Retry. The controller receives, paces, spills, saves and
// loads; this widget tells the views when it says so (Session::documentGrew) and asks it for what the user asked.
// The cursor follows the end until the user moves it; End (or the slider's end) returns to live. GUI thread only.
#pragma once

#include "live/livecontroller.h"

#include <QSet>
#include <QWidget>

#include <memory>

class QLabel;
class QMenu;
class QToolButton;
class QPushButton;
class QVBoxLayout;

namespace memscope::app {

class DocumentWindow;

class LiveWindow : public QWidget {
    Q_OBJECT
public:
    using AfterExit = LiveController::AfterExit;
    using Keys = LiveController::Keys;
    // Starts receiving from `endpoint` at once.
    explicit LiveWindow(const QString& endpoint, AfterExit afterExit = AfterExit::End, QWidget* parent = nullptr,
                        const Keys& keys = {});
    ~LiveWindow() override; // stops the recording first, while the widgets are there to take its last update

    // The recording: receiver, document, pacing, triggers, bounded history, saving and loading.
    LiveController* controller() const { return m_controller; }
    // The DocumentWindow of the job; null until the agent's state arrived.
    DocumentWindow* documentWindow() const { return m_document; }
    // The snapshot the views show (the live document's: the join state plus every entry applied), or null.
    std::shared_ptr<const model::Snapshot> snapshot() const;
    // Save…: asks for a file name, then has the controller write what is shown there (off the GUI thread).
    void chooseSave();
    // A tab that failed before recording anything (the job not up, its socket refused) attaches again.
    void retry();

Q_SIGNALS:
    // The DocumentWindow was created or replaced (when the agent's state arrived; after a rotation or a prepend).
    void documentChanged(memscope::app::DocumentWindow* document);
    // The views took in more entries.
    void grew();
    // The user asked to open an earlier part of the history (a spilled file).
    void openRequested(const QString& path);

private:
    void onUpdate(const LiveUpdate& update);
    void onDocumentChanged(std::shared_ptr<const Document> document);
    void showDocument(std::shared_ptr<const Document> document);
    void replaceDocument(std::shared_ptr<const Document> document);
    void chooseTrigger();
    void chooseEarlierHistory();
    void updateHistoryMenu();

    LiveController* m_controller = nullptr;
    QVBoxLayout* m_layout = nullptr;
    QLabel* m_status = nullptr;
    QLabel* m_placeholder = nullptr;
    QPushButton* m_save = nullptr;
    QPushButton* m_retry = nullptr;
    DocumentWindow* m_document = nullptr;
    QToolButton* m_history = nullptr;
    QMenu* m_historyMenu = nullptr;
    QSet<QString> m_saving; // files the user asked to save to, until the controller says how it went
    QSet<QString> m_prepending; // files the user asked to prepend, likewise
};

} // namespace memscope::app
