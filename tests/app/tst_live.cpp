// Live attach: a real publishing job (`memscope-cli demo`, the binary beside this test) recorded by a LiveWindow
// (LiveReceiver thread + Document builds), whose final state must be the job's own (its exit dump, free blocks and
// their stale requests included) whether it attached at the start, late, after a resync or across a restart; the
// attach dialog's discovery of default endpoints, and the `memscope --attach --screenshot` path. Widgets
// offscreen; GUI thread.
#include "apptestutil.h"
#include "live/livereceiver.h"
#include "runprogram.h"
#include "statelines.h"
#include "views/attachdialog.h"
#include "views/documentwindow.h"
#include "views/livewindow.h"
#include "views/mainwindow.h"
#include "views/rankgroupview.h"

#include "client/agentclient.h"
#include "viewer/decoder.h"
#include "wire/endpoint.h"

#include <QApplication>
#include <QCoreApplication>
#include <QDialog>
#include <QDoubleSpinBox>
#include <QFileInfo>
#include <QImage>
#include <QListWidget>
#include <QProcess>
#include <QPushButton>
#include <QRegularExpression>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <atomic>
#include <thread>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

using namespace memscope;
using namespace memscope::app;

namespace {

QString binary(const char* name) { return memscope::test::programPath(QLatin1String(name)); }

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

// The environment of a job that writes its final state to `dump` at exit (MEMSCOPE_DUMP_ON=exit): the truth a live
// tab's final state is compared with.
QProcessEnvironment dumpingAtExit(const QString& dump)
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("MEMSCOPE_DUMP_ON"), QStringLiteral("exit"));
    env.insert(QStringLiteral("MEMSCOPE_DUMP_PATH"), dump);
    return env;
}

// A snapshot file's state lines (empty when it cannot be read).
QStringList stateLinesOf(const QString& file)
{
    const io::LoadResult r = io::loadSnapshot(file.toStdString());
    return r.ok() ? test::stateLines(*r.snapshot) : QStringList();
}

// Runs `memscope-cli demo ARGS` at `endpoint` to its end while `memscope-cli record` writes the whole run to
// `reference` (for comparing a live tab's final state with); the job dumps its final state to `dump` if given.
void runRecorded(const QStringList& args, const QString& endpoint, const QString& reference, const QString& dump = {})
{
    QProcess demo;
    QCOMPARE(startDemo(demo, args, dump.isEmpty() ? QProcessEnvironment::systemEnvironment() : dumpingAtExit(dump)),
             endpoint);
    QProcess record;
    record.start(binary("memscope-cli"), { QStringLiteral("record"), endpoint, QStringLiteral("-o"), reference });
    // (waitForFinished is false for a process that has finished already.)
    QVERIFY(demo.waitForFinished(30000) || demo.state() == QProcess::NotRunning);
    QVERIFY(record.waitForFinished(30000) || record.state() == QProcess::NotRunning);
    QCOMPARE(record.exitCode(), 0);
}

// "memscope-cli demo: 297 steps, 50069 events in 2.50 s, 0 lost": the events (the last sequence published).
qint64 demoEvents(const QString& output)
{
    const QRegularExpressionMatch m
        = QRegularExpression(QStringLiteral("demo: \\d+ steps, (\\d+) events in [0-9.]+ s, (\\d+) lost")).match(output);
    return m.hasMatch() ? m.captured(1).toLongLong() : -1;
}

// Has the controller save what `live` shows to `path` (on the thread pool) and waits: the error line, or "".
QString saveAndWait(LiveWindow& live, const QString& path,
                    LiveController::SaveFormat format = LiveController::SaveFormat::Recording)
{
    QSignalSpy saved(live.controller(), &LiveController::saved);
    live.controller()->save(path, format);
    if (!saved.wait(60000))
        return QStringLiteral("no answer");
    return saved.front().at(1).toString();
}

// The same for prepending `path` to the history.
QString prependAndWait(LiveWindow& live, const QString& path)
{
    QSignalSpy loaded(live.controller(), &LiveController::earlierHistoryLoaded);
    live.controller()->loadEarlierHistory(path);
    if (!loaded.wait(60000))
        return QStringLiteral("no answer");
    return loaded.front().at(1).toString();
}

using test::StaleRequests; // tests/support/statelines.h
using test::stateLines;

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
    void attachMidRun();
    void reconnectsToRestartedJob();
    void reconnectsAfterKilledJob();
    void floodIsReportedAndRepaired();
    void ranksSideBySide();
    void triggerSavesOnReservedThreshold();
    void attachDialogListsEndpoints();
    // The attach dialog remembers ten endpoints and the key files of those it remembers, no more: keys of an endpoint
    // that left the list go (and any left from before), and an endpoint attached to without keys writes none.
    void rememberedKeysGoWithTheirEndpoint();
    void screenshotOption();
    void noAgent();
    void waitsForTheJobAndRetries();
    void malformedPublisher();
    void historyIsBoundedAndSpilled();
    void earlierHistoryPrepended();
};

void TestLive::recordsWholeJob()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QProcess demo;
    const QString exitDump = dir.filePath(QStringLiteral("exit.pickle"));
    const QString endpoint = startDemo(
        demo,
        { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
          QStringLiteral("--events"), QStringLiteral("50000"), QStringLiteral("--delay"), QStringLiteral("300") },
        dumpingAtExit(exitDump));
    QCOMPARE(endpoint, QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"));

    LiveWindow live(endpoint);
    QSignalSpy settled(live.controller(), &LiveController::settled);
    QSignalSpy documents(&live, &LiveWindow::documentChanged);
    QVERIFY(settled.wait(60000));
    // (waitForFinished is false for a process that has finished already.)
    QVERIFY(demo.state() == QProcess::NotRunning || demo.waitForFinished(20000));
    QCOMPARE(demo.exitCode(), 0);
    const qint64 published = demoEvents(QString::fromUtf8(demo.readAllStandardError()));
    QVERIFY2(published > 0, "the demo's summary line");

    const LiveUpdate& last = live.controller()->receiver()->latest();
    QCOMPARE(last.state, LiveState::Exited);
    QCOMPARE(qint64(last.lastSequence), published); // every record up to the goodbye's last one
    QCOMPARE(last.stats.gaps, uint64_t(0));
    QCOMPARE(last.stats.missing, uint64_t(0));
    QCOMPARE(last.stats.lost, uint64_t(0));
    QCOMPARE(last.stats.inconsistent, uint64_t(0));
    QVERIFY(last.stats.applied > 10000);
    // The document shown grew to hold exactly the events recorded, as the receiver's final copy does.
    QVERIFY(live.snapshot());
    QVERIFY(last.snapshot);
    QCOMPARE(live.snapshot()->deviceTraces.size(), size_t(1));
    QCOMPARE(uint64_t(live.snapshot()->deviceTraces[0].size()), last.stats.applied);
    QCOMPARE(live.controller()->backlog(), size_t(0));
    QCOMPARE(documents.count(), 1); // one document, grown in place
    // The state the views show at the end equals the recorder's, exactly (two engines: the recorder's state maps
    // and the replay the document grew), and both are the job's own, free blocks and their stale requests included.
    {
        Session* s = live.documentWindow()->session();
        QCOMPARE(s->cursor(), s->entryCount());
        QCOMPARE(s->replay().warnings(), 0u);
        const QStringList shown = stateLines(s->state()), recorded = stateLines(*last.snapshot);
        QVERIFY(recorded.size() > 10);
        QCOMPARE(shown, recorded);
        QCOMPARE(shown, stateLinesOf(exitDump));
    }
    DocumentWindow* doc = live.documentWindow();
    QVERIFY(doc);
    QCOMPARE(uint64_t(doc->session()->entryCount()), last.stats.applied);
    QCOMPARE(doc->session()->cursor(), doc->session()->entryCount()); // followed the end
    QVERIFY(!doc->session()->isGrowing()); // the job ended and everything is shown: no room kept to grow
    QVERIFY(documents.count() >= 1);
    QVERIFY(live.controller()->statusText().contains(QStringLiteral("the job exited")));
    QVERIFY(live.controller()->statusText().contains(QString::number(last.stats.applied)));

    // Save… writes what was recorded: as a memscope recording, PyTorch's format plus where it came from and what
    // was lost (a key PyTorch's readers ignore), or as a plain PyTorch snapshot; both read back whole.
    const QString saved = dir.filePath(QStringLiteral("live.pickle"));
    QCOMPARE(saveAndWait(live, saved), QString());
    io::LoadResult reread = io::loadSnapshot(saved.toStdString());
    QVERIFY(reread.ok());
    QCOMPARE(uint64_t(reread.snapshot->deviceTraces[0].size()), last.stats.applied);
    QCOMPARE(reread.snapshot->topLevelExtras.size(), size_t(1));
    QCOMPARE(reread.snapshot->topLevelExtras[0].first, std::string("memscope_recording"));
    const model::Value& info = reread.snapshot->topLevelExtras[0].second;
    auto field = [&](const char* key) -> int64_t {
        const model::Value* v = info.find(key);
        return v && v->kind == model::Value::Kind::Int ? v->integer : -1;
    };
    QCOMPARE(field("format"), int64_t(1));
    QVERIFY(last.pid > 0);
    QCOMPARE(field("pid"), int64_t(last.pid));
    QCOMPARE(field("events"), int64_t(last.stats.applied));
    QCOMPARE(field("lost"), int64_t(0));
    QCOMPARE(field("gaps"), int64_t(0));
    QCOMPARE(field("part"), int64_t(0));
    QVERIFY(info.find("endpoint") && info.find("endpoint")->text == live.controller()->endpoint().toStdString());
    const QString plain = dir.filePath(QStringLiteral("plain.json"));
    QCOMPARE(saveAndWait(live, plain, LiveController::SaveFormat::PyTorch), QString());
    io::LoadResult plainRead = io::loadSnapshot(plain.toStdString());
    QVERIFY(plainRead.ok());
    QVERIFY(plainRead.snapshot->topLevelExtras.empty());
    QCOMPARE(uint64_t(plainRead.snapshot->deviceTraces[0].size()), last.stats.applied);

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
    QSignalSpy settled(live.controller(), &LiveController::settled);
    QTRY_VERIFY_WITH_TIMEOUT(live.documentWindow() && live.documentWindow()->session()->entryCount() > 20, 20000);
    Session* session = live.documentWindow()->session();
    QCOMPARE(session->cursor(), session->entryCount()); // following
    session->setCursor(10);
    const int64_t before = session->entryCount();
    QTRY_VERIFY_WITH_TIMEOUT(session->entryCount() > before + 100, 20000); // data keeps coming
    QCOMPARE(session->cursor(), int64_t(10));
    QVERIFY(!session->isFollowing());
    QVERIFY(settled.wait(30000));
    QCOMPARE(live.documentWindow()->session(), session); // the same document, grown
    QCOMPARE(session->cursor(), int64_t(10));
    QVERIFY(demo.state() == QProcess::NotRunning || demo.waitForFinished(20000));
}

// Attached a second into the run: the views start from the agent's state at that moment and end exactly where a
// recording that saw the whole run ends.
void TestLive::attachMidRun()
{
    QTemporaryDir dir;
    QProcess demo;
    const QString exitDump = dir.filePath(QStringLiteral("exit.pickle"));
    const QString endpoint
        = startDemo(demo,
                    { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
                      QStringLiteral("--events"), QStringLiteral("60000"), QStringLiteral("--rate"),
                      QStringLiteral("30000"), QStringLiteral("--delay"), QStringLiteral("500") },
                    dumpingAtExit(exitDump));
    QVERIFY(!endpoint.isEmpty());
    // The reference: `memscope-cli record` from before the first event to the goodbye.
    const QString reference = dir.filePath(QStringLiteral("whole.pickle"));
    QProcess record;
    record.start(binary("memscope-cli"), { QStringLiteral("record"), endpoint, QStringLiteral("-o"), reference });
    QVERIFY(record.waitForStarted(10000));
    QTest::qWait(1500);
    QCOMPARE(demo.state(), QProcess::Running);

    LiveWindow live(endpoint);
    QSignalSpy settled(live.controller(), &LiveController::settled);
    QVERIFY(settled.wait(60000));
    QVERIFY2(record.waitForFinished(30000) || record.state() == QProcess::NotRunning,
             qPrintable(QString::fromUtf8(record.readAllStandardOutput() + record.readAllStandardError())));
    QCOMPARE(record.exitCode(), 0);
    QVERIFY(demo.state() == QProcess::NotRunning || demo.waitForFinished(20000));
    const qint64 published = demoEvents(QString::fromUtf8(demo.readAllStandardError()));

    const LiveUpdate& last = live.controller()->receiver()->latest();
    QCOMPARE(last.state, LiveState::Exited);
    if (last.stats.lost != 0)
        QSKIP("the agent dropped events on this machine: the final states cannot be compared");
    QCOMPARE(last.stats.inconsistent, uint64_t(0));
    QVERIFY(live.documentWindow());
    Session* s = live.documentWindow()->session();
    QVERIFY2(s->entryCount() > 0 && s->entryCount() < published, "it joined mid-run");
    // The join state is there at state 0: memory was in use before the first entry the views saw.
    QVERIFY(s->replay().series().reserved[0] > 0);
    const io::LoadResult whole = io::loadSnapshot(reference.toStdString());
    QVERIFY(whole.ok());
    QCOMPARE(stateLines(s->replay().stateAt(s->entryCount())), stateLines(*whole.snapshot));
    QCOMPARE(stateLines(s->replay().stateAt(s->entryCount())), stateLinesOf(exitDump)); // the job's own
}

// The job exits and runs again at the same endpoint: the tab keeps what it recorded, says it is reconnecting,
// picks the new run up, marks the restart in the trace, and ends exactly in the new run's state.
void TestLive::reconnectsToRestartedJob()
{
    QTemporaryDir dir;
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job");
    const QStringList args { QStringLiteral("--endpoint"), endpoint,
                             QStringLiteral("--events"),   QStringLiteral("15000"),
                             QStringLiteral("--rate"),     QStringLiteral("20000"),
                             QStringLiteral("--delay"),    QStringLiteral("300") };
    QProcess first;
    QCOMPARE(startDemo(first, args), endpoint);
    LiveWindow live(endpoint, LiveWindow::AfterExit::Reconnect);
    QVERIFY(first.waitForFinished(30000) || first.state() == QProcess::NotRunning);
    QTRY_COMPARE_WITH_TIMEOUT(live.controller()->receiver()->latest().state, LiveState::Reconnecting, 20000);
    QVERIFY(live.controller()->statusText().contains(QStringLiteral("reconnecting")));
    QVERIFY(live.documentWindow());
    Session* session = live.documentWindow()->session();
    QTRY_VERIFY_WITH_TIMEOUT(live.controller()->backlog() == 0 && session->entryCount() > 1000, 10000);
    const int64_t firstRun = session->entryCount();

    // The next run: recorded whole by `memscope-cli record` for reference, and dumped by the job at its exit.
    const QString reference = dir.filePath(QStringLiteral("second.pickle"));
    const QString exitDump = dir.filePath(QStringLiteral("second-exit.pickle"));
    runRecorded(args, endpoint, reference, exitDump);
    if (QTest::currentTestFailed())
        return;
    QTRY_COMPARE_WITH_TIMEOUT(live.controller()->receiver()->latest().stats.restarts, uint64_t(1), 20000);
    QTRY_COMPARE_WITH_TIMEOUT(live.controller()->receiver()->latest().state, LiveState::Reconnecting, 20000);
    QTRY_VERIFY_WITH_TIMEOUT(live.controller()->backlog() == 0 && session->entryCount() > firstRun + 1000, 10000);
    QCOMPARE(live.documentWindow()->session(), session); // one document, grown across the restart
    QVERIFY(live.controller()->statusText().contains(QStringLiteral("restarted")));
    const LiveUpdate& last = live.controller()->receiver()->latest();
    QCOMPARE(last.stats.inconsistent, uint64_t(0));
    QCOMPARE(session->replay().warnings(), 0u);
    // The restart is an annotation on the timeline.
    const auto spans = session->annotations();
    QVERIFY(std::any_of(spans.begin(), spans.end(), [](const AnnotationSpan& a) {
        return a.name.startsWith(QStringLiteral("memscope: job restarted"));
    }));
    // And the state shown at the end is the second run's, exactly.
    const io::LoadResult whole = io::loadSnapshot(reference.toStdString());
    QVERIFY(whole.ok());
    QCOMPARE(stateLines(session->replay().stateAt(session->entryCount())), stateLines(*whole.snapshot));
    QCOMPARE(stateLines(session->replay().stateAt(session->entryCount())), stateLinesOf(exitDump));
    live.controller()->stop();
}

// A job publishing faster than its agent's (deliberately tiny) ring drains: records are dropped and counted, the
// tab says so, resynchronises from the agent's state, and ends exactly in the state the job itself dumps at exit.
// The job is killed (no goodbye) and started again at the same endpoint: the tab notices the closed connection, keeps
// what it has, picks the new run up and ends exactly in its state.
void TestLive::reconnectsAfterKilledJob()
{
    QTemporaryDir dir;
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job");
    QProcess first;
    QCOMPARE(startDemo(first,
                       { QStringLiteral("--endpoint"), endpoint, QStringLiteral("--events"), QStringLiteral("10000000"),
                         QStringLiteral("--rate"), QStringLiteral("20000"), QStringLiteral("--delay"),
                         QStringLiteral("300") }),
             endpoint);
    LiveWindow live(endpoint, LiveWindow::AfterExit::Reconnect);
    QTRY_VERIFY_WITH_TIMEOUT(live.documentWindow() && live.documentWindow()->session()->entryCount() > 2000, 20000);
    first.kill();
    QVERIFY(first.waitForFinished(5000));
    // Its connection closed without a goodbye: it exited (not a silent, hung job); the tab waits for the next run.
    QTRY_COMPARE_WITH_TIMEOUT(live.controller()->receiver()->latest().state, LiveState::Reconnecting, 10000);
    Session* session = live.documentWindow()->session();
    const int64_t kept = session->entryCount();
    QVERIFY(live.controller()->statusText().contains(QStringLiteral("reconnecting")));

    const QString reference = dir.filePath(QStringLiteral("second.pickle"));
    runRecorded({ QStringLiteral("--endpoint"), endpoint, QStringLiteral("--events"), QStringLiteral("15000"),
                  QStringLiteral("--rate"), QStringLiteral("20000"), QStringLiteral("--delay"), QStringLiteral("300") },
                endpoint, reference);
    if (QTest::currentTestFailed())
        return;
    QTRY_COMPARE_WITH_TIMEOUT(live.controller()->receiver()->latest().stats.restarts, uint64_t(1), 20000);
    QTRY_COMPARE_WITH_TIMEOUT(live.controller()->receiver()->latest().state, LiveState::Reconnecting, 20000);
    QTRY_VERIFY_WITH_TIMEOUT(live.controller()->backlog() == 0 && session->entryCount() > kept + 1000, 10000);
    QCOMPARE(live.documentWindow()->session(), session); // what the killed run recorded stays
    QCOMPARE(session->replay().warnings(), 0u);
    const io::LoadResult whole = io::loadSnapshot(reference.toStdString());
    QVERIFY(whole.ok());
    QCOMPARE(stateLines(session->replay().stateAt(session->entryCount())), stateLines(*whole.snapshot));
    live.controller()->stop();
}

void TestLive::floodIsReportedAndRepaired()
{
    QTemporaryDir dir;
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job");
    const QString dump = dir.filePath(QStringLiteral("exit.pickle"));
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("MEMSCOPE_RING_RECORDS"), QStringLiteral("256"));
    env.insert(QStringLiteral("MEMSCOPE_DUMP_ON"), QStringLiteral("exit"));
    env.insert(QStringLiteral("MEMSCOPE_DUMP_PATH"), dump);
    // The job floods, writes its final state, then stays (answering state requests) until killed below: the viewer
    // may lag far behind the flood on a busy machine, and repairs only while the agent still answers.
    QProcess demo;
    QCOMPARE(startDemo(demo,
                       { QStringLiteral("--endpoint"), endpoint, QStringLiteral("--events"), QStringLiteral("300000"),
                         QStringLiteral("--rate"), QStringLiteral("0"), QStringLiteral("--delay"),
                         QStringLiteral("500"), QStringLiteral("--linger"), QStringLiteral("120000") },
                       env),
             endpoint);
    struct KillAtEnd {
        QProcess& p;
        ~KillAtEnd()
        {
            p.kill();
            p.waitForFinished(5000);
        }
    } killAtEnd { demo };
    LiveWindow live(endpoint);
    QTRY_VERIFY_WITH_TIMEOUT(QFileInfo::exists(dump), 60000); // the flood is over
    const io::LoadResult exitDump = io::loadSnapshot(dump.toStdString());
    QVERIFY2(exitDump.ok(), exitDump.error.toString().c_str());
    const QStringList finalState = stateLines(*exitDump.snapshot);
    // The viewer catches up, repairs, and shows exactly the job's final state.
    auto shown = [&] {
        DocumentWindow* doc = live.documentWindow();
        if (!doc || live.controller()->backlog() > 0)
            return QStringList();
        const Session* s = doc->session();
        return stateLines(s->replay().stateAt(s->entryCount()));
    };
    QTRY_VERIFY_WITH_TIMEOUT(!live.controller()->receiver()->latest().stats.resyncNeeded() && shown() == finalState,
                             60000);
    const LiveUpdate& last = live.controller()->receiver()->latest();
    if (last.stats.lost == 0 && last.stats.missing == 0)
        QSKIP("the agent kept up with the flood on this machine: nothing to repair");
    QVERIFY(last.stats.resyncs > 0);
    QVERIFY2(live.controller()->statusText().contains(QStringLiteral("resync")),
             qPrintable(live.controller()->statusText()));
    Session* s = live.documentWindow()->session();
    QCOMPARE(s->replay().warnings(), 0u);
    const auto spans = s->annotations();
    QVERIFY(std::any_of(spans.begin(), spans.end(), [](const AnnotationSpan& a) {
        return a.name.startsWith(QStringLiteral("memscope: resync after"));
    }));
}

// Three jobs at once (the ranks of one job): a live tab each and a Ranks tab whose figures follow each job's own
// document; one rank leaks, and stands out.
void TestLive::ranksSideBySide()
{
    QTemporaryDir dir;
    QStringList endpoints;
    std::vector<std::unique_ptr<QProcess>> demos;
    for (int rank = 0; rank < 3; ++rank) {
        const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/rank%1").arg(rank);
        QStringList args { QStringLiteral("--endpoint"), endpoint,
                           QStringLiteral("--events"),   QStringLiteral("40000"),
                           QStringLiteral("--rate"),     QStringLiteral("40000"),
                           QStringLiteral("--delay"),    QStringLiteral("500") };
        if (rank == 2)
            args << QStringLiteral("--leak");
        demos.push_back(std::make_unique<QProcess>());
        QCOMPARE(startDemo(*demos.back(), args), endpoint);
        endpoints << endpoint;
    }
    MainWindow window;
    window.resize(1400, 800);
    window.show();
    RankGroupView* ranks = window.openLiveGroup(endpoints, false);
    QVERIFY(ranks);
    const auto lives = window.findChildren<LiveWindow*>();
    QCOMPARE(lives.size(), 3);
    // While the jobs run, the table fills in.
    QTRY_COMPARE_WITH_TIMEOUT(ranks->model()->rowCount(), 3, 20000);
    for (LiveWindow* live : lives)
        QTRY_VERIFY_WITH_TIMEOUT(live->controller()->isSettled(), 60000);
    for (auto& demo : demos)
        QVERIFY(demo->waitForFinished(20000) || demo->state() == QProcess::NotRunning);
    QTest::qWait(800); // one more refresh of the table after the last growth
    const RankGroup& group = ranks->group();
    QCOMPARE(group.ranks.size(), size_t(3));
    for (size_t i = 0; i < group.ranks.size(); ++i) {
        const RankStats& r = group.ranks[i];
        const model::ReplaySeries& s = group.documents[i]->replays[0].series();
        QCOMPARE(r.reserved, s.reserved.back());
        QCOMPARE(r.allocated, s.allocated.back());
        QCOMPARE(r.peakReserved, *std::max_element(s.reserved.begin(), s.reserved.end()));
        QVERIFY(r.rank >= 0 && r.rank < 3);
    }
    // The leaking rank ends with the most allocated.
    const auto leaking
        = std::find_if(group.ranks.begin(), group.ranks.end(), [](const RankStats& r) { return r.rank == 2; });
    QVERIFY(leaking != group.ranks.end());
    for (const RankStats& r : group.ranks)
        if (r.rank != 2)
            QVERIFY2(leaking->allocated > r.allocated, "the leak shows in the allocated bytes");
    QVERIFY(test::saveScreenshot(window, QStringLiteral("live-ranks"), QSize(1400, 800)));
}

// A capture trigger: the recording is written once when reserved memory first rises above 1 GiB (the demo holds
// about 2.6 GiB, and never falls back below the threshold).
void TestLive::triggerSavesOnReservedThreshold()
{
    QTemporaryDir dir;
    QProcess demo;
    const QString endpoint
        = startDemo(demo,
                    { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
                      QStringLiteral("--events"), QStringLiteral("30000"), QStringLiteral("--rate"),
                      QStringLiteral("20000"), QStringLiteral("--delay"), QStringLiteral("500") });
    QVERIFY(!endpoint.isEmpty());
    LiveWindow live(endpoint);
    LiveTrigger trigger;
    trigger.reservedAbove = model::ByteCount(1) << 30;
    trigger.folder = dir.path();
    live.controller()->setTrigger(trigger);
    QSignalSpy triggered(live.controller(), &LiveController::triggered);
    QSignalSpy settled(live.controller(), &LiveController::settled);
    QVERIFY(settled.wait(60000));
    QTRY_COMPARE_WITH_TIMEOUT(triggered.count(), 1, 10000);
    QCOMPARE(triggered.first().at(1).toString(), QString()); // no error
    QCOMPARE(live.controller()->triggeredFiles().size(), 1);
    const QString path = live.controller()->triggeredFiles().front();
    QVERIFY2(path.contains(QStringLiteral("-reserved-1.pickle")), qPrintable(path));
    const io::LoadResult saved = io::loadSnapshot(path.toStdString());
    QVERIFY2(saved.ok(), saved.error.toString().c_str());
    model::ByteCount reserved = 0;
    for (const model::Segment& s : saved.snapshot->segments)
        reserved += s.totalSize;
    QVERIFY(reserved > trigger.reservedAbove);
    QVERIFY(live.controller()->statusText().contains(QStringLiteral("1 saved")));
    QVERIFY(demo.waitForFinished(20000) || demo.state() == QProcess::NotRunning);

    // The Triggers… dialog shows the trigger set, and Cancel changes nothing.
    live.resize(1200, 700);
    live.show();
    auto* button = live.findChild<QPushButton*>(QStringLiteral("liveTriggers"));
    QVERIFY(button);
    bool seen = false;
    QTimer::singleShot(200, &live, [&] {
        QWidget* dialog = QApplication::activeModalWidget();
        if (!dialog)
            return;
        seen = true;
        auto* spin = dialog->findChild<QDoubleSpinBox*>();
        QVERIFY(spin);
        QCOMPARE(spin->value(), 1.0);
        QVERIFY(test::saveScreenshot(*dialog, QStringLiteral("live-triggers-dialog"), QSize(520, 180)));
        qobject_cast<QDialog*>(dialog)->reject();
    });
    button->click();
    QVERIFY(seen);
    QCOMPARE(live.controller()->trigger().reservedAbove, trigger.reservedAbove);
}

void TestLive::attachDialogListsEndpoints()
{
    QTemporaryDir runtime;
    QVERIFY(runtime.isValid());
    // Dead jobs' sockets: pids no process can have (above Linux's pid_max limit of 2^22). The files stay, as a
    // crashed job's would.
    auto deadSocket = [&](const QString& name) {
        const QByteArray path = QFile::encodeName(runtime.filePath(name));
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un addr {};
        addr.sun_family = AF_UNIX;
        qstrncpy(addr.sun_path, path.constData(), sizeof(addr.sun_path));
        const bool bound = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
        ::close(fd);
        return bound;
    };
    // One that died before the next job started there: that job's agent removes it.
    QVERIFY(deadSocket(QStringLiteral("memscope-99999998")));

    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("XDG_RUNTIME_DIR"), runtime.path());
    QProcess demo;
    const QString endpoint = startDemo(
        demo, { QStringLiteral("--events"), QStringLiteral("1000"), QStringLiteral("--delay"), QStringLiteral("5000") },
        env);
    const qint64 pid = demo.processId();
    QCOMPARE(endpoint, QStringLiteral("ipc://%1/memscope-%2").arg(runtime.path()).arg(pid));
    QVERIFY(!QFile::exists(runtime.filePath(QStringLiteral("memscope-99999998"))));
    // One that died since: listed, last, as exited.
    QVERIFY(deadSocket(QStringLiteral("memscope-99999999")));

    // An endpoint attached to before, with its key files: listed as recent, and its keys come back with it.
    QStandardPaths::setTestModeEnabled(true);
    QSettings().remove(QStringLiteral("live"));
    AttachDialog::rememberEndpoint(QStringLiteral("tcp://gpu-node-7:5555"), QStringLiteral("/keys/agent.pub"),
                                   QStringLiteral("/keys/me.key"));

    const QByteArray saved = qgetenv("XDG_RUNTIME_DIR");
    qputenv("XDG_RUNTIME_DIR", runtime.path().toLocal8Bit());
    const std::vector<FoundEndpoint> found = discoverEndpoints();
    AttachDialog dialog;
    const QStringList rows = dialog.listedRows();
    qputenv("XDG_RUNTIME_DIR", saved);
    // (The demo waits 5 s before its first step: it answers state requests meanwhile; killed at the end.)
    struct KillAtEnd {
        QProcess& p;
        ~KillAtEnd()
        {
            p.kill();
            p.waitForFinished(5000);
        }
    } killAtEnd { demo };

    QVERIFY(std::any_of(found.begin(), found.end(), [&](const FoundEndpoint& e) {
        return e.endpoint == endpoint && e.alive && e.pid == pid && e.commandLine.contains(QStringLiteral("demo"))
            && e.ageSeconds >= 0;
    }));
    // The live job: its pid, how long it has published, and its command line.
    const QString liveRow = QStringLiteral("%1 — pid %2, publishing for ").arg(endpoint).arg(pid);
    QVERIFY2(std::any_of(rows.begin(), rows.end(),
                         [&](const QString& r) {
                             return r.startsWith(liveRow) && r.contains(QStringLiteral("memscope-cli demo --events"));
                         }),
             qPrintable(rows.join(u'\n')));
    QVERIFY2(rows.contains(QStringLiteral("tcp://gpu-node-7:5555 — recent")), qPrintable(rows.join(u'\n')));
    QVERIFY2(rows.contains(QStringLiteral("ipc://%1/memscope-99999999 — pid 99999999, exited").arg(runtime.path())),
             qPrintable(rows.join(u'\n')));
    // The agent answers for itself: devices, version, host.
    auto* list = dialog.findChild<QListWidget*>(QStringLiteral("endpoints"));
    QVERIFY(list);
    // (Other jobs may publish on this machine too, in /tmp/memscope-$UID: look for ours.)
    QListWidgetItem* ours = nullptr;
    for (int r = 0; r < list->count(); ++r)
        if (list->item(r)->data(Qt::UserRole).toString() == endpoint)
            ours = list->item(r);
    QVERIFY(ours);
    QTRY_VERIFY2_WITH_TIMEOUT(ours->text().contains(QStringLiteral("1 device, agent ")), qPrintable(ours->text()),
                              5000);
    const AgentInfo info = queryAgent(endpoint, 2000);
    QVERIFY(info.answered);
    QCOMPARE(info.devices, 1);
    QVERIFY(!info.agentVersion.isEmpty());
    QVERIFY(!queryAgent(QStringLiteral("ipc://%1/memscope-99999999").arg(runtime.path()), 300).answered);
    // A live job first, preselected (ours, unless another one publishes on this machine with a higher pid).
    QVERIFY(!list->item(0)->text().contains(QStringLiteral("exited")));
    QCOMPARE(dialog.endpoint(), list->item(0)->data(Qt::UserRole).toString());
    QVERIFY(dialog.curveServerKey().isEmpty());
    QVERIFY(test::saveScreenshot(dialog, QStringLiteral("live-attach-dialog"), QSize(760, 420)));
    list->setCurrentRow(int(rows.indexOf(QStringLiteral("tcp://gpu-node-7:5555 — recent"))));
    QCOMPARE(dialog.endpoint(), QStringLiteral("tcp://gpu-node-7:5555"));
    QCOMPARE(dialog.curveServerKey(), QStringLiteral("/keys/agent.pub"));
    QCOMPARE(dialog.curveSecretKey(), QStringLiteral("/keys/me.key"));
}

void TestLive::rememberedKeysGoWithTheirEndpoint()
{
    QStandardPaths::setTestModeEnabled(true);
    QSettings().remove(QStringLiteral("live"));
    auto hex = [](const QString& e) { return QString::fromLatin1(e.toUtf8().toHex()); };
    // Keys left from a build that never removed them.
    QSettings().setValue(QStringLiteral("live/keys/%1/server").arg(hex(QStringLiteral("tcp://old:1"))),
                         QStringLiteral("/keys/old.pub"));
    for (int i = 0; i < 12; ++i)
        AttachDialog::rememberEndpoint(QStringLiteral("tcp://node-%1:5555").arg(i),
                                       QStringLiteral("/keys/%1.pub").arg(i), QStringLiteral("/keys/%1.key").arg(i));
    AttachDialog::rememberEndpoint(QStringLiteral("ipc:///tmp/plain")); // no keys
    QSettings settings;
    QStringList expected { QStringLiteral("ipc:///tmp/plain") };
    for (int i = 11; i >= 3; --i)
        expected.append(QStringLiteral("tcp://node-%1:5555").arg(i));
    QCOMPARE(AttachDialog::recentEndpoints(), expected);
    settings.beginGroup(QStringLiteral("live/keys"));
    QStringList groups = settings.childGroups();
    groups.sort();
    QStringList withKeys;
    for (int i = 3; i < 12; ++i)
        withKeys.append(hex(QStringLiteral("tcp://node-%1:5555").arg(i)));
    withKeys.sort();
    QCOMPARE(groups, withKeys);
    QCOMPARE(settings.value(hex(QStringLiteral("tcp://node-7:5555")) + QStringLiteral("/server")).toString(),
             QStringLiteral("/keys/7.pub"));
    QCOMPARE(settings.value(hex(QStringLiteral("tcp://node-7:5555")) + QStringLiteral("/secret")).toString(),
             QStringLiteral("/keys/7.key"));
    settings.endGroup();
    // Attached to again without keys: its keys go.
    AttachDialog::rememberEndpoint(QStringLiteral("tcp://node-7:5555"));
    QVERIFY(!QSettings().contains(QStringLiteral("live/keys/%1/server").arg(hex(QStringLiteral("tcp://node-7:5555")))));
    QVERIFY(QSettings().contains(QStringLiteral("live/keys/%1/server").arg(hex(QStringLiteral("tcp://node-8:5555")))));
    QSettings().remove(QStringLiteral("live"));
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

// Attach that forgives: a tab opened before its job is up says it waits and starts recording once the job answers
// (the stale message goes); one that gave up attaches again on Retry; a job killed without a goodbye reads as
// exited (its connection closed), not as a silent one.
void TestLive::waitsForTheJobAndRetries()
{
    QTemporaryDir dir;
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/later");
    LiveWindow tab(endpoint, LiveWindow::AfterExit::Reconnect); // as File > Attach opens it
    LiveReceiver waiting(endpoint);
    waiting.setWaitForJob(true);
    waiting.setAnswerTimeout(0.3);
    QVERIFY(waiting.start());
    QTRY_VERIFY_WITH_TIMEOUT(waiting.latest().message.contains(QStringLiteral("waiting for it")), 10000);
    QCOMPARE(waiting.latest().state, LiveState::Connecting);
    QVERIFY2(waiting.latest().message.startsWith(endpoint + QStringLiteral(": no memscope agent answered")),
             qPrintable(waiting.latest().message));

    // The tab says what it waits for, in its status line and where the views will be (after its 5 s answer time).
    QTRY_VERIFY_WITH_TIMEOUT(tab.controller()->statusText().contains(QStringLiteral("waiting for it")), 15000);
    QVERIFY(test::saveScreenshot(tab, QStringLiteral("live-waiting"), QSize(1000, 300)));
    auto* retry = tab.findChild<QPushButton*>(QStringLiteral("liveRetry"));
    QVERIFY(retry && retry->isHidden()); // waiting is not failing

    LiveReceiver gaveUp(endpoint);
    gaveUp.setAnswerTimeout(0.3);
    QSignalSpy finished(&gaveUp, &LiveReceiver::finished);
    QVERIFY(gaveUp.start());
    QVERIFY(finished.wait(10000));
    QCOMPARE(gaveUp.latest().state, LiveState::Failed);

    QProcess demo;
    QCOMPARE(startDemo(demo,
                       { QStringLiteral("--endpoint"), endpoint, QStringLiteral("--events"), QStringLiteral("100000000"),
                         QStringLiteral("--rate"), QStringLiteral("20000"), QStringLiteral("--delay"),
                         QStringLiteral("300") }),
             endpoint);
    QTRY_VERIFY_WITH_TIMEOUT(waiting.latest().state == LiveState::Live && waiting.latest().stats.applied > 0, 15000);
    QVERIFY2(waiting.latest().message.isEmpty(), qPrintable(waiting.latest().message));
    QTRY_VERIFY_WITH_TIMEOUT(tab.documentWindow() != nullptr, 15000); // the tab attached by itself
    QVERIFY2(!tab.controller()->statusText().contains(QStringLiteral("no memscope agent")),
             qPrintable(tab.controller()->statusText()));
    QVERIFY(gaveUp.restart());
    QTRY_VERIFY_WITH_TIMEOUT(gaveUp.latest().state == LiveState::Live && gaveUp.latest().stats.applied > 0, 15000);
    QVERIFY2(gaveUp.latest().message.isEmpty(), qPrintable(gaveUp.latest().message));

    demo.kill();
    QVERIFY(demo.waitForFinished(10000));
    QTRY_COMPARE_WITH_TIMEOUT(waiting.latest().state, LiveState::Exited, 10000);
    QTRY_COMPARE_WITH_TIMEOUT(gaveUp.latest().state, LiveState::Exited, 10000);
}

// Something on the endpoint that speaks ZeroMQ but not memscope's protocol: the state reply has a wrong magic and
// a newer version. The tab fails with one line naming the endpoint and the reason; nothing crashes.
void TestLive::malformedPublisher()
{
    QTemporaryDir dir;
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/impostor");
    zmq::context_t context;
    zmq::socket_t pub(context, zmq::socket_type::pub);
    zmq::socket_t router(context, zmq::socket_type::router);
    pub.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::linger, 0);
    pub.bind(endpoint.toStdString());
    router.bind(wire::stateEndpointFor(endpoint.toStdString()));
    // Answers every state request with a frame from a future protocol version.
    std::atomic<bool> stop { false };
    std::thread impostor([&] {
        while (!stop) {
            zmq::pollitem_t item { router.handle(), 0, ZMQ_POLLIN, 0 };
            zmq::poll(&item, 1, std::chrono::milliseconds(20));
            if (!(item.revents & ZMQ_POLLIN))
                continue;
            std::vector<zmq::message_t> request;
            (void)zmq::recv_multipart(router, std::back_inserter(request));
            if (request.empty())
                continue;
            std::vector<uint8_t> reply = viewer::encodeState(viewer::makeHello(1, 1, "impostor", "0"), 0, {}, {});
            reply[4] = 0x63; // version 99
            router.send(zmq::buffer(request.front().data(), request.front().size()), zmq::send_flags::sndmore);
            router.send(zmq::buffer(reply), zmq::send_flags::none);
            // And some noise on the events socket.
            const char garbage[] = "not a batch";
            pub.send(zmq::str_buffer("E"), zmq::send_flags::sndmore);
            pub.send(zmq::buffer(garbage, sizeof garbage), zmq::send_flags::none);
        }
    });
    LiveWindow live(endpoint);
    QSignalSpy settled(live.controller(), &LiveController::settled);
    const bool ended = settled.wait(15000);
    stop = true;
    impostor.join();
    QVERIFY(ended);
    const LiveUpdate& last = live.controller()->receiver()->latest();
    QCOMPARE(last.state, LiveState::Failed);
    QVERIFY2(last.message.startsWith(endpoint), qPrintable(last.message)); // (its state socket: endpoint-state)
    QVERIFY2(last.message.contains(QStringLiteral("version")), qPrintable(last.message));
    QVERIFY(!live.documentWindow());
    QVERIFY(live.controller()->statusText().contains(QStringLiteral("failed")));
    // Nothing was recorded: the tab offers to attach again.
    auto* retry = live.findChild<QPushButton*>(QStringLiteral("liveRetry"));
    QVERIFY(retry && !retry->isHidden());
    QVERIFY(test::saveScreenshot(live, QStringLiteral("live-failed"), QSize(1000, 300)));
}

// A bound on the history in memory: the tab writes the document to disk as a snapshot file each time it passes the
// bound and goes on from its final state. The parts join up exactly, and together hold every event.
void TestLive::historyIsBoundedAndSpilled()
{
    QTemporaryDir dir;
    QProcess demo;
    const QString endpoint
        = startDemo(demo,
                    { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
                      QStringLiteral("--events"), QStringLiteral("150000"), QStringLiteral("--rate"),
                      QStringLiteral("150000"), QStringLiteral("--delay"), QStringLiteral("500") });
    QVERIFY(!endpoint.isEmpty());
    LiveWindow live(endpoint);
    const size_t limit = size_t(6) << 20;
    const QString folder = dir.filePath(QStringLiteral("history"));
    live.controller()->setHistoryLimit(limit, folder);
    QSignalSpy settled(live.controller(), &LiveController::settled);
    QVERIFY(settled.wait(60000));
    QVERIFY(demo.waitForFinished(20000) || demo.state() == QProcess::NotRunning);
    const LiveUpdate& last = live.controller()->receiver()->latest();
    QCOMPARE(last.state, LiveState::Exited);
    QCOMPARE(last.stats.lost, uint64_t(0));

    const QStringList parts = live.controller()->spilledFiles();
    QVERIFY2(parts.size() >= 2, qPrintable(QString::number(parts.size())));
    QVERIFY(live.controller()->statusText().contains(QStringLiteral("earlier history")));
    Session* session = live.documentWindow()->session();
    uint64_t total = uint64_t(session->entryCount());
    QStringList previousEnd, previousEndKnowable;
    int64_t partNumber = 0;
    for (const QString& part : parts) {
        QVERIFY(part.startsWith(folder));
        const io::LoadResult r = io::loadSnapshot(part.toStdString());
        QVERIFY2(r.ok(), r.error.toString().c_str());
        // Each part is a memscope recording that says which part it is.
        QCOMPARE(r.snapshot->topLevelExtras.size(), size_t(1));
        const model::Value* number = r.snapshot->topLevelExtras[0].second.find("part");
        QVERIFY(number);
        QCOMPARE(number->integer, ++partNumber);
        const model::Replay replay = model::Replay::build(*r.snapshot, 0);
        QCOMPARE(replay.warnings(), 0u);
        total += uint64_t(replay.entryCount());
        // Each part starts where the one before ended (a file does not say what its free blocks' Block objects
        // carried before its trace, unless they survive to its end: model::Replay::inactiveLabels).
        if (!previousEnd.isEmpty())
            QCOMPARE(stateLines(replay.stateAt(0), StaleRequests::Ignore), previousEndKnowable);
        previousEnd = stateLines(*r.snapshot);
        previousEndKnowable = stateLines(*r.snapshot, StaleRequests::Ignore);
    }
    QCOMPARE(stateLines(session->replay().stateAt(0)), previousEnd);
    QCOMPARE(total, last.stats.applied); // nothing lost across the parts
    // The document shown holds only what came after the last part: its history stays near the bound.
    QVERIFY(uint64_t(session->entryCount()) < last.stats.applied / 2);
    QCOMPARE(stateLines(session->replay().stateAt(session->entryCount())), stateLines(*last.snapshot));
    QVERIFY(test::saveScreenshot(live, QStringLiteral("live-history"), QSize(1400, 800)));
}

// A recording of the job's first events, made before the tab joined, prepended to the live history: the file's
// trace, a bridge to the join state (annotated as a gap), then the live entries; every state along the way exact.
void TestLive::earlierHistoryPrepended()
{
    QTemporaryDir dir;
    QProcess demo;
    const QString endpoint
        = startDemo(demo,
                    { QStringLiteral("--endpoint"), QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job"),
                      QStringLiteral("--events"), QStringLiteral("40000"), QStringLiteral("--rate"),
                      QStringLiteral("20000"), QStringLiteral("--delay"), QStringLiteral("500") });
    QVERIFY(!endpoint.isEmpty());
    // The first 5,000 events, as `memscope-cli record --events` writes them.
    const QString early = dir.filePath(QStringLiteral("early.pickle"));
    QProcess record;
    record.start(binary("memscope-cli"),
                 { QStringLiteral("record"), endpoint, QStringLiteral("-o"), early, QStringLiteral("--events"),
                   QStringLiteral("5000") });
    QVERIFY(record.waitForFinished(30000) || record.state() == QProcess::NotRunning);
    QCOMPARE(record.exitCode(), 0);
    QTest::qWait(300); // the job goes on: the tab joins later
    LiveWindow live(endpoint);
    QSignalSpy settled(live.controller(), &LiveController::settled);
    QVERIFY(settled.wait(60000));
    QVERIFY(demo.waitForFinished(20000) || demo.state() == QProcess::NotRunning);
    const LiveUpdate& last = live.controller()->receiver()->latest();
    QCOMPARE(last.stats.lost, uint64_t(0));
    Session* before = live.documentWindow()->session();
    const int64_t liveEntries = before->entryCount();
    const QStringList joinState = stateLines(before->replay().stateAt(0));
    const QStringList endState = stateLines(before->replay().stateAt(liveEntries));

    QCOMPARE(prependAndWait(live, dir.filePath(QStringLiteral("missing.pickle"))).isEmpty(), false);
    QCOMPARE(prependAndWait(live, early), QString());
    Session* session = live.documentWindow()->session();
    QVERIFY(session != before);
    const io::LoadResult file = io::loadSnapshot(early.toStdString());
    QVERIFY(file.ok());
    const int64_t fileEntries = int64_t(file.snapshot->deviceTraces[0].size());
    QVERIFY(fileEntries >= 5000);
    const model::Replay& r = session->replay();
    QCOMPARE(r.warnings(), 0u);
    // file entries, then the bridge, then the live entries
    const int64_t bridge = r.entryCount() - fileEntries - liveEntries;
    QVERIFY2(bridge > 0, qPrintable(QString::number(bridge)));
    QCOMPARE(stateLines(r.stateAt(fileEntries)), stateLines(*file.snapshot));
    QCOMPARE(stateLines(r.stateAt(fileEntries + bridge)), joinState);
    QCOMPARE(stateLines(r.stateAt(r.entryCount())), endState);
    const auto spans = session->annotations();
    QVERIFY(std::any_of(spans.begin(), spans.end(), [](const AnnotationSpan& a) {
        return a.name.startsWith(QStringLiteral("memscope: no record between early.pickle"));
    }));
    QCOMPARE(session->cursor(), session->entryCount());
    QVERIFY(test::saveScreenshot(live, QStringLiteral("live-earlier-history"), QSize(1400, 800)));
}

QTEST_MAIN(TestLive)
#include "tst_live.moc"
