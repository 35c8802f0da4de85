// Live attach: a real publishing job (`memscope-cli demo`, the binary beside this test) recorded by a LiveWindow
// (LiveReceiver thread + Document builds), the attach dialog's discovery of default endpoints, and the
// `memscope --attach --screenshot` path. Widgets offscreen; GUI thread.
#include "apptestutil.h"
#include "ingest/livereceiver.h"
#include "views/attachdialog.h"
#include "views/documentwindow.h"
#include "views/livewindow.h"

#include <QCoreApplication>
#include <QImage>
#include <QProcess>
#include <QRegularExpression>
#include <QSet>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using namespace memscope;
using namespace memscope::app;

namespace {

QString binary(const char* name)
{
    return QCoreApplication::applicationDirPath() + QLatin1Char('/') + QLatin1String(name);
}

// Starts `memscope-cli demo ARGS` and returns its endpoint (the first stdout line); empty on failure.
QString startDemo(QProcess& demo, const QStringList& args,
                  const QProcessEnvironment& env = QProcessEnvironment::systemEnvironment())
{
    demo.setProcessEnvironment(env);
    demo.start(binary("memscope-cli"), QStringList { QStringLiteral("demo") } + args);
    if (!demo.waitForStarted(10000))
        return {};
    while (!demo.canReadLine()) {
        if (!demo.waitForReadyRead(10000))
            return {};
    }
    return QString::fromUtf8(demo.readLine()).trimmed();
}

// "memscope-cli demo: 297 steps, 50069 events in 2.50 s, 0 lost": the events (the last sequence published).
qint64 demoEvents(const QString& output)
{
    const QRegularExpressionMatch m
        = QRegularExpression(QStringLiteral("demo: \\d+ steps, (\\d+) events in [0-9.]+ s, (\\d+) lost")).match(output);
    return m.hasMatch() ? m.captured(1).toLongLong() : -1;
}

int distinctColors(const QImage& image)
{
    QSet<QRgb> colors;
    for (int y = 0; y < image.height(); y += 7)
        for (int x = 0; x < image.width(); x += 7)
            colors.insert(image.pixel(x, y));
    return int(colors.size());
}

} // namespace

class TestLive : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void recordsWholeJob();
    void keepsMovedCursor();
    void attachDialogListsEndpoints();
    void screenshotOption();
    void noAgent();
};

void TestLive::recordsWholeJob()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QProcess demo;
    const QString endpoint = startDemo(
        demo,
        { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
          QStringLiteral("--events"), QStringLiteral("50000"), QStringLiteral("--delay"), QStringLiteral("300") });
    QCOMPARE(endpoint, QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"));

    LiveWindow live(endpoint);
    QSignalSpy settled(&live, &LiveWindow::settled);
    QSignalSpy documents(&live, &LiveWindow::documentChanged);
    QVERIFY(settled.wait(60000));
    // (waitForFinished is false for a process that has finished already.)
    QVERIFY(demo.state() == QProcess::NotRunning || demo.waitForFinished(20000));
    QCOMPARE(demo.exitCode(), 0);
    const qint64 published = demoEvents(QString::fromUtf8(demo.readAllStandardError()));
    QVERIFY2(published > 0, "the demo's summary line");

    const LiveUpdate& last = live.receiver()->latest();
    QCOMPARE(last.state, LiveState::Exited);
    QCOMPARE(qint64(last.lastSequence), published); // every record up to the goodbye's last one
    QCOMPARE(last.stats.gaps, uint64_t(0));
    QCOMPARE(last.stats.missing, uint64_t(0));
    QCOMPARE(last.stats.lost, uint64_t(0));
    QCOMPARE(last.stats.inconsistent, uint64_t(0));
    QVERIFY(last.stats.applied > 10000);
    // The snapshot shown is the final one and holds exactly the events recorded.
    QVERIFY(live.snapshot());
    QCOMPARE(live.snapshot(), last.snapshot);
    QCOMPARE(live.snapshot()->deviceTraces.size(), size_t(1));
    QCOMPARE(uint64_t(live.snapshot()->deviceTraces[0].size()), last.stats.applied);
    DocumentWindow* doc = live.documentWindow();
    QVERIFY(doc);
    QCOMPARE(uint64_t(doc->session()->entryCount()), last.stats.applied);
    QCOMPARE(doc->session()->cursor(), doc->session()->entryCount()); // followed the end
    QVERIFY(documents.count() >= 1);
    QVERIFY(live.statusText().contains(QStringLiteral("the job exited")));
    QVERIFY(live.statusText().contains(QString::number(last.stats.applied)));

    // Save… writes what was recorded.
    const QString saved = dir.filePath(QStringLiteral("live.pickle"));
    QCOMPARE(live.saveSnapshot(saved), QString());
    io::LoadResult reread = io::loadSnapshot(saved.toStdString());
    QVERIFY(reread.ok());
    QCOMPARE(uint64_t(reread.snapshot->deviceTraces[0].size()), last.stats.applied);

    QVERIFY(test::saveScreenshot(live, QStringLiteral("live")));
    // The document fills the tab under the status line (not a separate window).
    QVERIFY(!doc->isWindow());
    QVERIFY(doc->isVisible());
    QVERIFY(doc->geometry().height() > 500);
    const QImage shot(test::screenshotDir() + QStringLiteral("/live.png"));
    QVERIFY(!shot.isNull());
    QVERIFY2(distinctColors(shot) > 8, "the screenshot is not blank");
}

// While the job runs, each refresh follows the end; once the user moves the cursor back, refreshes keep its index.
void TestLive::keepsMovedCursor()
{
    QTemporaryDir dir;
    QProcess demo;
    const QString endpoint
        = startDemo(demo,
                    { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
                      QStringLiteral("--events"), QStringLiteral("20000"), QStringLiteral("--rate"),
                      QStringLiteral("5000"), QStringLiteral("--delay"), QStringLiteral("300") });
    QVERIFY(!endpoint.isEmpty());
    LiveWindow live(endpoint);
    QSignalSpy documents(&live, &LiveWindow::documentChanged);
    QSignalSpy settled(&live, &LiveWindow::settled);
    QTRY_VERIFY_WITH_TIMEOUT(live.documentWindow() && live.documentWindow()->session()->entryCount() > 20, 20000);
    QCOMPARE(live.documentWindow()->session()->cursor(), live.documentWindow()->session()->entryCount());
    live.documentWindow()->session()->setCursor(10);
    DocumentWindow* moved = live.documentWindow();
    QTRY_VERIFY_WITH_TIMEOUT(live.documentWindow() != moved, 20000);
    QCOMPARE(live.documentWindow()->session()->cursor(), int64_t(10));
    QVERIFY(live.documentWindow()->session()->entryCount() > 20);
    QVERIFY(settled.wait(30000));
    QCOMPARE(live.documentWindow()->session()->cursor(), int64_t(10));
    QVERIFY(demo.state() == QProcess::NotRunning || demo.waitForFinished(20000));
}

void TestLive::attachDialogListsEndpoints()
{
    QTemporaryDir runtime;
    QVERIFY(runtime.isValid());
    // A dead job's socket: a pid no process can have (above Linux's pid_max limit of 2^22).
    const QByteArray deadPath = QFile::encodeName(runtime.filePath(QStringLiteral("memscope-99999999")));
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    QVERIFY(fd >= 0);
    sockaddr_un addr {};
    addr.sun_family = AF_UNIX;
    qstrncpy(addr.sun_path, deadPath.constData(), sizeof(addr.sun_path));
    QCOMPARE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ::close(fd); // the file stays, as a crashed job's would

    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("XDG_RUNTIME_DIR"), runtime.path());
    QProcess demo;
    const QString endpoint = startDemo(
        demo, { QStringLiteral("--events"), QStringLiteral("1000"), QStringLiteral("--delay"), QStringLiteral("5000") },
        env);
    const qint64 pid = demo.processId();
    QCOMPARE(endpoint, QStringLiteral("ipc://%1/memscope-%2").arg(runtime.path()).arg(pid));

    const QByteArray saved = qgetenv("XDG_RUNTIME_DIR");
    qputenv("XDG_RUNTIME_DIR", runtime.path().toLocal8Bit());
    const std::vector<FoundEndpoint> found = discoverEndpoints();
    AttachDialog dialog;
    const QStringList rows = dialog.listedRows();
    qputenv("XDG_RUNTIME_DIR", saved);
    demo.kill();
    demo.waitForFinished(5000);

    QVERIFY(std::any_of(found.begin(), found.end(),
                        [&](const FoundEndpoint& e) { return e.endpoint == endpoint && e.alive && e.pid == pid; }));
    QVERIFY2(rows.contains(QStringLiteral("%1 — pid %2").arg(endpoint).arg(pid)), qPrintable(rows.join(u'\n')));
    QVERIFY2(rows.contains(QStringLiteral("ipc://%1/memscope-99999999 — pid 99999999, exited").arg(runtime.path())),
             qPrintable(rows.join(u'\n')));
    QCOMPARE(dialog.endpoint(), endpoint); // the live one first, preselected
    QVERIFY(test::saveScreenshot(dialog, QStringLiteral("live-attach-dialog"), QSize(560, 360)));
}

void TestLive::screenshotOption()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QProcess demo;
    const QString endpoint = startDemo(
        demo,
        { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
          QStringLiteral("--events"), QStringLiteral("20000"), QStringLiteral("--delay"), QStringLiteral("1000") });
    QVERIFY(!endpoint.isEmpty());
    const QString out = test::screenshotDir() + QStringLiteral("/live-attach-cli.png");
    QProcess app;
    app.start(binary("memscope"),
              { QStringLiteral("--attach"), endpoint, QStringLiteral("--screenshot"), out,
                QStringLiteral("--attach-seconds"), QStringLiteral("30") });
    QVERIFY(app.waitForFinished(60000));
    QVERIFY2(app.exitCode() == 0, app.readAllStandardError().constData());
    QVERIFY(QString::fromUtf8(app.readAllStandardOutput()).contains(QStringLiteral("the job exited")));
    QVERIFY(demo.state() == QProcess::NotRunning || demo.waitForFinished(20000));
    QVERIFY(distinctColors(QImage(out)) > 8);
}

void TestLive::noAgent()
{
    QTemporaryDir dir;
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/nobody");
    LiveReceiver receiver(endpoint);
    receiver.setAnswerTimeout(0.5);
    QSignalSpy finished(&receiver, &LiveReceiver::finished);
    QVERIFY(receiver.start());
    QVERIFY(finished.wait(10000));
    QCOMPARE(receiver.latest().state, LiveState::Failed);
    QCOMPARE(receiver.latest().message,
             endpoint + QStringLiteral(": no memscope agent answered (is the job running?)"));

    LiveReceiver bad(QStringLiteral("udp://x"));
    QVERIFY(!bad.start());
    QCOMPARE(bad.latest().state, LiveState::Failed);
    QVERIFY(bad.latest().message.startsWith(QStringLiteral("udp://x: ")));
}

QTEST_MAIN(TestLive)
#include "tst_live.moc"
