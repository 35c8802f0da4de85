// AttachDialog: File ▸ Attach to Job…: lists the ipc:// endpoints agents bind by default (memscope-<pid> sockets in
// $XDG_RUNTIME_DIR and /tmp/memscope-<uid>, as common/wire/endpoint.h names them) with each job's command line and
// how long it has published, marking those whose process is gone; then the endpoints attached to recently (kept in
// QSettings); plus a free-text endpoint (any ipc:// or tcp://HOST:PORT) and, for agents that require CURVE, the key
// files (common/wire/keyfile.h). GUI thread only; the scan reads two folders and /proc.
#pragma once

#include <QDialog>
#include <QString>

#include <vector>

class QLineEdit;
class QListWidget;

namespace memscope::app {

struct FoundEndpoint {
    QString endpoint; // ipc://PATH
    qint64 pid = 0; // from the name; 0 when the name carries none
    bool alive = false; // the process exists
    QString commandLine; // /proc/<pid>/cmdline, arguments joined by spaces; empty when unknown
    qint64 ageSeconds = -1; // since the socket was bound (its file's time); -1 unknown
};

// The agents' default sockets, newest pid first. Reads $XDG_RUNTIME_DIR and /tmp/memscope-$UID.
std::vector<FoundEndpoint> discoverEndpoints();

// What an agent says of itself (its Hello), asked with one state request.
struct AgentInfo {
    bool answered = false;
    int devices = 0;
    QString agentVersion;
    QString host;
    qint64 startedMsecsSinceEpoch = 0; // the agent's clock base
    QString error; // when it did not answer in time, or spoke something else
};
// Asks the agent at `endpoint` for its state and keeps the Hello; waits at most `timeoutMs`. Any thread.
AgentInfo queryAgent(const QString& endpoint, int timeoutMs);

class AttachDialog : public QDialog {
    Q_OBJECT
public:
    explicit AttachDialog(QWidget* parent = nullptr);

    // The endpoint chosen (the text field, filled by a click in the list).
    QString endpoint() const;
    // CURVE key files for the chosen endpoint; empty when not needed.
    QString curveServerKey() const;
    QString curveSecretKey() const;

    // Endpoints attached to before, newest first (at most 10), and remembering one (with its key files).
    static QStringList recentEndpoints();
    static void rememberEndpoint(const QString& endpoint, const QString& serverKey = {}, const QString& secretKey = {});
    // The list's rows, as shown ("ipc://… — pid 123" or "… — pid 123, exited").
    QStringList listedRows() const;
    void refresh();

private:
    QListWidget* m_list = nullptr;
    QLineEdit* m_edit = nullptr;
    QLineEdit* m_serverKey = nullptr;
    QLineEdit* m_secretKey = nullptr;
    int m_generation = 0; // refresh() count: answers from an older scan are dropped
};

} // namespace memscope::app
