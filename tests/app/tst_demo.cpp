// Tests of the demo job (app/ingest/demojob.h) and `memscope --demo`: the app starts `memscope-cli demo` itself,
// attaches to it and shows what it records; a bad demo command line fails with a message naming the program.
// Offscreen; runs the memscope and memscope-cli binaries beside the test.
#include "apptestutil.h"
#include "ingest/demojob.h"

#include <QCoreApplication>
#include <QFileInfo>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTest>

using namespace memscope;
using namespace memscope::app;

class TestDemo : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void demoJobPublishes();
    void demoJobFailsClearly();
    void appDemoRecordsAndRenders();
    void appDemoRejectsBadRate();
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

QTEST_MAIN(TestDemo)
#include "tst_demo.moc"
