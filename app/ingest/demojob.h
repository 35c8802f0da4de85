// DemoJob: runs `memscope-cli demo` (a training-like workload through memscope's real allocator on the host
// backend, publishing like an agent in a GPU job) as a child process, so that live attach can be seen on a machine
// without a GPU (`memscope --demo`). It reads the endpoint the demo prints on its first line and reports it; the
// child is stopped (SIGTERM, then SIGKILL after a moment) when the DemoJob goes, and gets SIGTERM from the kernel
// should this process die without stopping it (a crash, a signal). GUI thread only.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>

class QProcess;

namespace memscope::app {

class DemoJob : public QObject {
    Q_OBJECT
public:
    explicit DemoJob(QObject* parent = nullptr);
    ~DemoJob() override; // stops the child

    // memscope-cli beside this program, else the one on PATH; empty when there is none.
    static QString cliPath();
    // Starts `memscope-cli demo ARGS` (e.g. --rate N --leak); false (and failed()) when it cannot start.
    bool start(const QStringList& args);
    void stop();
    const QString& endpoint() const { return m_endpoint; }
    // The child's process id while it runs; 0 when none.
    qint64 processId() const;

Q_SIGNALS:
    // The demo is publishing at `endpoint`.
    void ready(const QString& endpoint);
    // It could not start or ended before publishing; `message` names the program and the reason.
    void failed(const QString& message);

private:
    QProcess* m_process = nullptr;
    QString m_endpoint;
    QByteArray m_output;
};

} // namespace memscope::app
