// Running one of the project's programs beside the test binary (memscope-cli, memscope) and taking what it printed:
// the helper the command-line tests share. Header-only; needs Qt Core.
#pragma once

#include <QCoreApplication>
#include <QProcess>
#include <QProcessEnvironment>
#include <QStringList>

namespace memscope::test {

struct Run {
    int status = -1; // the exit status; -1: it did not finish in time (killed); -2: it crashed
    QByteArray out;
    QByteArray err;
};

// The path of one of the project's programs (a file name in the test binary's folder: the build's bin/).
inline QString programPath(const QString& program)
{
    return QCoreApplication::applicationDirPath() + QLatin1Char('/') + program;
}

// Runs `program` (a file name in the test binary's folder) with `args` and `env`, waiting at most `timeoutMs`.
inline Run runProgram(const QString& program, const QStringList& args,
                      const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment(),
                      int timeoutMs = 300000)
{
    QProcess p;
    p.setProcessEnvironment(env);
    p.start(programPath(program), args);
    Run r;
    if (!p.waitForFinished(timeoutMs)) {
        p.kill();
        p.waitForFinished();
        return r;
    }
    r.status = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

} // namespace memscope::test
