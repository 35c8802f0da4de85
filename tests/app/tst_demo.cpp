// Tests of the demo job (app/ingest/demojob.h) and `memscope --demo`: the app starts `memscope-cli demo` itself,
// attaches to it and shows what it records; a bad demo command line fails with a message naming the program;
// quitting with a live tab open is clean and ends the demo (in-process, and the binary on SIGTERM, SIGINT, and even
// SIGKILL). Offscreen; runs the memscope and memscope-cli binaries beside the test.
#include "apptestutil.h"
#include "ingest/demojob.h"
#include "views/livewindow.h"
#include "views/mainwindow.h"

#include <QAction>
#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTest>

#include <csignal>

using namespace memscope;
using namespace memscope::app;

namespace {

// The process's state letter from /proc/PID/stat ('R', 'S', 'Z', ...); 0 when there is no such process.
char processState(qint64 pid)
{
    QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
    if (!stat.open(QIODevice::ReadOnly))
        return 0;
    const QByteArray line = stat.readAll();
    const qsizetype close = line.lastIndexOf(')'); // after the command's name, which may hold anything
    return close >= 0 && close + 2 < line.size() ? line[close + 2] : 0;
}

// Gone, or a zombie nobody reaps (a container's init may not): it runs no more either way.
bool processGone(qint64 pid)
{
    const char state = processState(pid);
    return state == 0 || state == 'Z' || state == 'X';
}

// The children of `parent` (from each /proc/PID/stat's fourth field).
QList<qint64> childrenOf(qint64 parent)
{
    QList<qint64> children;
    for (const QString& name : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        bool ok = false;
        const qint64 pid = name.toLongLong(&ok);
        if (!ok)
            continue;
        QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
        if (!stat.open(QIODevice::ReadOnly))
            continue;
        const QByteArray line = stat.readAll();
        const QList<QByteArray> fields = line.mid(line.lastIndexOf(')') + 2).split(' ');
        if (fields.size() > 1 && fields[1].toLongLong() == parent)
            children << pid;
    }
    return children;
}

} // namespace

class TestDemo : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void demoJobPublishes();
    void demoJobFailsClearly();
    void appDemoRecordsAndRenders();
    void appDemoRejectsBadRate();
    void quitWithLiveDemoTab_data();
    void quitWithLiveDemoTab();
    void appDemoEndsWithTheApp_data();
    void appDemoEndsWithTheApp();
};

void TestDemo::demoJobPublishes()
{
    QVERIFY2(!DemoJob::cliPath().isEmpty(), "memscope-cli is built beside the tests");
    DemoJob job;
    QSignalSpy ready(&job, &DemoJob::ready);
    QSignalSpy failed(&job, &DemoJob::failed);
    QVERIFY(job.start({ QStringLiteral("--events"), QStringLiteral("1000000"), QStringLiteral("--rate"),
                        QStringLiteral("1000") }));
    QVERIFY(ready.wait(10000));
    QCOMPARE(failed.count(), 0);
    QVERIFY2(job.endpoint().startsWith(QStringLiteral("ipc://")), qPrintable(job.endpoint()));
    // The endpoint names a live socket owned by the demo.
    const QString socket = job.endpoint().mid(6);
    QVERIFY2(QFileInfo::exists(socket), qPrintable(socket));
    job.stop();
    QVERIFY(job.endpoint().size() > 0); // what was reported stays for the caller
}

void TestDemo::demoJobFailsClearly()
{
    DemoJob job;
    QSignalSpy ready(&job, &DemoJob::ready);
    QSignalSpy failed(&job, &DemoJob::failed);
    job.start({ QStringLiteral("--rate"), QStringLiteral("lots") });
    QVERIFY(failed.wait(10000));
    QCOMPARE(ready.count(), 0);
    const QString message = failed.first().first().toString();
    QVERIFY2(message.contains(QStringLiteral("memscope-cli")) && message.contains(QStringLiteral("--rate")),
             qPrintable(message));
}

void TestDemo::appDemoRecordsAndRenders()
{
    const QString out = test::screenshotDir() + QStringLiteral("/live-demo.png");
    QFile::remove(out);
    QProcess app;
    app.start(QCoreApplication::applicationDirPath() + QStringLiteral("/memscope"),
              { QStringLiteral("--demo"), QStringLiteral("--demo-rate"), QStringLiteral("20000"),
                QStringLiteral("--screenshot"), out, QStringLiteral("--attach-seconds"), QStringLiteral("3") });
    QVERIFY(app.waitForFinished(60000));
    const QString stdoutText = QString::fromUtf8(app.readAllStandardOutput());
    QVERIFY2(app.exitCode() == 0, qPrintable(QString::fromUtf8(app.readAllStandardError())));
    // The status line: the job's endpoint, how much was recorded, nothing lost at this rate.
    const QRegularExpression status(QStringLiteral("^ipc://\\S+ \\(pid \\d+ on .+\\) — (\\d+) events, 0 lost, 0 gaps"));
    const QRegularExpressionMatch m = status.match(stdoutText);
    QVERIFY2(m.hasMatch(), qPrintable(stdoutText));
    QVERIFY(m.captured(1).toLongLong() > 1000);
    const QImage shot(out);
    QVERIFY(!shot.isNull());
    QCOMPARE(shot.size(), QSize(1600, 1000));
}

void TestDemo::appDemoRejectsBadRate()
{
    QProcess app;
    app.start(QCoreApplication::applicationDirPath() + QStringLiteral("/memscope"),
              { QStringLiteral("--demo"), QStringLiteral("--demo-rate"), QStringLiteral("0"), QStringLiteral("--screenshot"),
                QStringLiteral("/dev/null") });
    QVERIFY(app.waitForFinished(20000));
    QCOMPARE(app.exitCode(), 2);
    QVERIFY(QString::fromUtf8(app.readAllStandardError()).contains(QStringLiteral("--demo-rate")));
}

void TestDemo::quitWithLiveDemoTab_data()
{
    QTest::addColumn<bool>("quitFirst"); // File ▸ Quit (Ctrl+Q) before the window is deleted, as the app does
    QTest::newRow("File > Quit, then the window deleted") << true;
    QTest::newRow("the window deleted while recording") << false;
}

void TestDemo::quitWithLiveDemoTab()
{
    // As `memscope --demo` runs: the demo job outlives the window, which is deleted when the event loop ends. The
    // live tab's receiver used to hand over its last update from ~LiveWindow, reaching the window's lambdas while
    // its tabs were being destroyed (a crash in QStackedLayout::currentWidget, 5 of 5).
    QFETCH(bool, quitFirst);
    qint64 pid = 0;
    {
        DemoJob demo;
        QSignalSpy ready(&demo, &DemoJob::ready);
        QVERIFY(demo.start({ QStringLiteral("--rate"), QStringLiteral("20000"), QStringLiteral("--events"),
                             QStringLiteral("1000000000"), QStringLiteral("--delay"), QStringLiteral("300"),
                             QStringLiteral("--leak") }));
        QVERIFY(ready.wait(10000));
        pid = demo.processId();
        QVERIFY(pid > 0);
        auto* window = new MainWindow;
        window->show();
        LiveWindow* live = window->openLive(demo.endpoint(), true);
        QTRY_VERIFY_WITH_TIMEOUT(live->documentWindow() != nullptr, 15000);
        QTest::qWait(2000); // growing, the views taking it in
        QVERIFY(live->controller()->receiver()->isRunning());
        if (quitFirst) {
            // (Found by name: the offscreen platform binds no keys to QKeySequence::Quit.)
            auto* quit = window->findChild<QAction*>(QStringLiteral("quitAction"));
            QVERIFY(quit);
            quit->trigger();
            QVERIFY(!window->isVisible());
            QVERIFY(!live->controller()->receiver()->isRunning()); // closing stopped the recording
        }
        delete window;
        QVERIFY(!processGone(pid)); // the job is the DemoJob's, which is still there
    }
    QVERIFY2(processGone(pid), qPrintable(QStringLiteral("the demo (pid %1) still runs").arg(pid)));
}

void TestDemo::appDemoEndsWithTheApp_data()
{
    QTest::addColumn<int>("signalNumber");
    QTest::addColumn<bool>("clean"); // exits normally with status 0 (the windows closed as by File ▸ Quit)
    QTest::newRow("SIGTERM") << int(SIGTERM) << true;
    QTest::newRow("SIGINT (Ctrl-C, timeout -s INT)") << int(SIGINT) << true;
    QTest::newRow("SIGKILL: no cleanup, the kernel still ends the demo") << int(SIGKILL) << false;
}

void TestDemo::appDemoEndsWithTheApp()
{
    QFETCH(int, signalNumber);
    QFETCH(bool, clean);
    QProcess app;
    app.start(QCoreApplication::applicationDirPath() + QStringLiteral("/memscope"), { QStringLiteral("--demo") });
    QVERIFY(app.waitForStarted(10000));
    // The demo is memscope-cli, memscope's child, once it publishes.
    qint64 demo = 0;
    const QDeadlineTimer started(15000);
    while (!demo && !started.hasExpired()) {
        QTest::qWait(100);
        for (qint64 child : childrenOf(app.processId()))
            if (QFileInfo(QStringLiteral("/proc/%1/exe").arg(child)).symLinkTarget().endsWith(QStringLiteral("/memscope-cli")))
                demo = child;
    }
    QVERIFY2(demo, "memscope --demo started no memscope-cli");
    QTest::qWait(4000); // recording live
    QCOMPARE(app.state(), QProcess::Running);
    QCOMPARE(::kill(pid_t(app.processId()), signalNumber), 0);
    QVERIFY(app.waitForFinished(20000));
    const QByteArray err = app.readAllStandardError();
    if (clean) {
        QVERIFY2(app.exitStatus() == QProcess::NormalExit, err.constData());
        QCOMPARE(app.exitCode(), 0);
    }
    // The demo ends too (at once when memscope stops it, within DemoJob's bound of about 3 s otherwise).
    QTRY_VERIFY2_WITH_TIMEOUT(processGone(demo), qPrintable(QStringLiteral("the demo (pid %1) still runs").arg(demo)),
                              10000);
}

QTEST_MAIN(TestDemo)
#include "tst_demo.moc"
