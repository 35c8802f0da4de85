// AttachDialog: File ▸ Attach to Job…: lists the ipc:// endpoints agents bind by default (memscope-<pid> sockets in
// $XDG_RUNTIME_DIR and /tmp/memscope-<uid>, as agent/src/publisher.cpp names them), marking those whose process is
// gone, plus a free-text endpoint (any ipc:// or tcp://HOST:PORT). GUI thread only; the scan reads two folders.
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
};

// The agents' default sockets, newest pid first. Reads $XDG_RUNTIME_DIR and /tmp/memscope-$UID.
std::vector<FoundEndpoint> discoverEndpoints();

class AttachDialog : public QDialog {
    Q_OBJECT
public:
    explicit AttachDialog(QWidget* parent = nullptr);

    // The endpoint chosen (the text field, filled by a click in the list).
    QString endpoint() const;
    // The list's rows, as shown ("ipc://… — pid 123" or "… — pid 123, exited").
    QStringList listedRows() const;
    void refresh();

private:
    QListWidget* m_list = nullptr;
    QLineEdit* m_edit = nullptr;
};

} // namespace memscope::app
