// DemoJob (demojob.h): a `memscope-cli demo` child process.
#include "ingest/demojob.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>

#include <csignal>

#include <sys/prctl.h>
#include <unistd.h>

namespace memscope::app {

DemoJob::DemoJob(QObject* parent)
    : QObject(parent)
{
}

DemoJob::~DemoJob() { stop(); }

QString DemoJob::cliPath()
{
    const QString beside = QCoreApplication::applicationDirPath() + QStringLiteral("/memscope-cli");
    if (QFileInfo(beside).isExecutable())
        return beside;
    return QStandardPaths::findExecutable(QStringLiteral("memscope-cli"));
}

bool DemoJob::start(const QStringList& args)
{
    stop();
    const QString program = cliPath();
    if (program.isEmpty()) {
        Q_EMIT failed(tr("memscope-cli: not found beside %1 or on PATH: the demo job needs it")
                          .arg(QCoreApplication::applicationDirPath()));
        return false;
    }
    m_process = new QProcess(this);
    m_process->setProcessChannelMode(QProcess::SeparateChannels);
    m_output.clear();
    m_endpoint.clear();
    connect(m_process, &QProcess::readyReadStandardOutput, this, [this] {
        m_output += m_process->readAllStandardOutput();
        const qsizetype newline = m_output.indexOf('\n');
        if (m_endpoint.isEmpty() && newline >= 0) {
            m_endpoint = QString::fromUtf8(m_output.left(newline)).trimmed();
            Q_EMIT ready(m_endpoint);
        }
    });
    connect(m_process, &QProcess::errorOccurred, this, [this, program](QProcess::ProcessError error) {
        if (error == QProcess::FailedToStart)
            Q_EMIT failed(tr("%1: cannot start: %2").arg(program, m_process->errorString()));
    });
    connect(m_process, &QProcess::finished, this, [this, program](int code, QProcess::ExitStatus status) {
        if (m_endpoint.isEmpty()) {
            const QString why = QString::fromUtf8(m_process->readAllStandardError()).trimmed();
            Q_EMIT failed(status == QProcess::CrashExit
                              ? tr("%1 demo crashed before publishing").arg(program)
                              : tr("%1 demo exited with %2 before publishing: %3").arg(program).arg(code).arg(why));
        }
    });
    // The child ends with this process however it ends (prctl(2), PR_SET_PDEATHSIG: the signal comes when the
    // thread that forked exits, here the GUI thread, i.e. the process). Otherwise a crashed or killed viewer would
    // leave a demo publishing for up to three hours. Run in the child between fork and exec: async-signal-safe
    // calls only.
    const pid_t parent = getpid();
    m_process->setChildProcessModifier([parent] {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) // the parent died before prctl took effect
            _exit(1);
    });
    m_process->start(program, QStringList { QStringLiteral("demo") } + args);
    return true;
}

qint64 DemoJob::processId() const
{
    return m_process && m_process->state() != QProcess::NotRunning ? m_process->processId() : 0;
}

void DemoJob::stop()
{
    if (!m_process)
        return;
    QProcess* p = m_process;
    m_process = nullptr;
    p->disconnect(this);
    if (p->state() != QProcess::NotRunning) {
        p->terminate(); // SIGTERM ends it; the viewer keeps what it recorded
        if (!p->waitForFinished(2000)) {
            p->kill();
            p->waitForFinished(1000);
        }
    }
    delete p;
}

} // namespace memscope::app
