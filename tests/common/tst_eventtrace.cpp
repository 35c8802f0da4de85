// Tests of model::EventTrace and model::TraceNumbering (common/model/eventtrace.h) against the oracles the project
// has: the replay (Replay::build of real snapshots, model::ReplayExtender), io's builder (the versions and stream
// numbers of a file read back) and a real job's exit dump (`memscope-cli demo` with MEMSCOPE_DUMP_ON=exit, recorded
// from its start by `memscope-cli record`). States are compared whole: every segment and every block, free ones
// included, with the request PyTorch leaves on a free block wherever both sides can know it.
#include "loadsnapshot.h"
#include "model/eventtrace.h"
#include "model/replayextender.h"
#include "runprogram.h"
#include "statelines.h"
#include "testutil.h"

#include "io/snapshotio.h"

#include <QCoreApplication>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

using namespace memscope;
using model::EventTrace;
using model::TraceEvent;

namespace {

std::shared_ptr<const model::Snapshot> load(const std::string& path) { return test::loadSnapshotOrWarn(path); }

// The engine's state of `device` as state lines (tests/support/statelines.h): its segments with the sums PyTorch
// reports, and their blocks, the active ones and the free ones (with their requests) in address order.
QStringList linesOf(const EventTrace::Device& dev, int device, test::StaleRequests stale)
{
    QStringList lines;
    const auto& free = dev.free.blocks();
    for (const auto& [address, seg] : dev.segments) {
        model::ByteCount allocated = 0, active = 0, requested = 0;
        for (const auto& [addr, b] : seg.blocks) {
            active += model::ByteCount(b.size);
            requested += model::ByteCount(b.requestedSize);
            if (b.state == 1)
                allocated += model::ByteCount(b.size);
        }
        lines << test::segmentLine(model::DeviceAddr(address), device, model::ByteCount(seg.size), allocated, active,
                                   requested, int64_t(seg.stream), { seg.poolFirst, seg.poolSecond }, seg.isExpandable);
        std::map<uint64_t, QString> blocks;
        for (const auto& [addr, b] : seg.blocks)
            blocks[addr] = test::blockLine(
                model::DeviceAddr(addr), model::ByteCount(b.size), model::ByteCount(b.requestedSize),
                b.state == 1 ? model::BlockState::ActiveAllocated : model::BlockState::ActivePendingFree, stale);
        for (auto it = free.lower_bound(model::DeviceAddr(address));
             it != free.end() && uint64_t(it->first) < address + seg.size; ++it)
            blocks[uint64_t(it->first)] = test::blockLine(it->first, it->second.end - it->first, it->second.requested,
                                                          model::BlockState::Inactive, stale);
        for (const auto& [addr, line] : blocks)
            lines << line;
    }
    return lines;
}

// A state of one device by the engine's own reading of it (deviceOf), as lines.
QStringList linesOf(const model::ReplayState& state, int device, test::StaleRequests stale)
{
    return linesOf(EventTrace::deviceOf(state), device, stale);
}

// Entry `i` of `replay` (device 0 of `s`) as the event a live source sends: the block's bytes for an alloc, the
// pool for a segment action.
TraceEvent eventOf(const model::Snapshot& s, const model::Replay& replay, int64_t i)
{
    const model::TraceEntry& e = s.deviceTraces[0][size_t(replay.firstEntry() + i)];
    TraceEvent t {};
    t.action = e.action;
    t.device = 0;
    t.addr = uint64_t(e.addr);
    t.size = uint64_t(e.size);
    t.stream = uint64_t(s.stream(e));
    t.timeUs = uint64_t(e.timeUs);
    t.stack = model::raw(e.stack);
    if (e.action == model::Action::Alloc && replay.allocationOfEntry(i) != model::NoAllocation)
        t.blockSize = uint64_t(replay.allocation(replay.allocationOfEntry(i)).size);
    for (const model::SegmentPiece& p : replay.segmentPieces())
        if (p.beginIndex == i && p.address >= e.addr && p.address < e.addr + e.size) {
            t.poolFirst = int32_t(p.poolId.first);
            t.poolSecond = int32_t(p.poolId.second);
        }
    return t;
}

QString binary(const char* name) { return memscope::test::programPath(QLatin1String(name)); }

} // namespace

class TestEventTrace : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void appliesTraceToFinalState_data();
    void appliesTraceToFinalState();
    void resyncReachesTarget_data();
    void resyncReachesTarget();
    void numbersAsTheBuilder_data();
    void numbersAsTheBuilder();
    void recordedJobEndsInItsExitDump();
};

void TestEventTrace::appliesTraceToFinalState_data()
{
    QTest::addColumn<QString>("file");
    QTest::newRow("mlp_train") << "mlp_train.pickle";
    QTest::newRow("transformer_train") << "transformer_train.pickle";
    QTest::newRow("expandable_segments") << "expandable_segments.pickle";
    QTest::newRow("multistream") << "multistream.pickle";
}

// From the state before a file's first entry, every entry applies, with the size PyTorch's trace records, and the
// engine ends in the file's own final state (the replay's end): every segment and block, free ones included (their
// requests where the start state knows them: a replay does not know those of free blocks from before the trace).
void TestEventTrace::appliesTraceToFinalState()
{
    QFETCH(QString, file);
    const auto s = load(test::snapshotPath(file.toStdString()));
    QVERIFY(s);
    const model::Replay replay = model::Replay::build(*s, 0);
    QCOMPARE(replay.warnings(), 0u);
    EventTrace engine;
    engine.setState({ EventTrace::deviceOf(replay.stateAt(0)) });
    for (int64_t i = 0; i < replay.entryCount(); ++i) {
        TraceEvent e = eventOf(*s, replay, i);
        const uint64_t traced = e.size;
        if (e.action == model::Action::FreeRequested || e.action == model::Action::FreeCompleted)
            e.size = 0; // the engine knows the request
        QVERIFY2(engine.apply(e), qPrintable(QStringLiteral("entry %1").arg(i)));
        QCOMPARE(e.size, traced);
        if (i % 997 == 0 && i > 0)
            QCOMPARE(linesOf(engine.devices()[0], 0, test::StaleRequests::Ignore),
                     linesOf(replay.stateAt(i + 1), 0, test::StaleRequests::Ignore));
    }
    QCOMPARE(linesOf(engine.devices()[0], 0, test::StaleRequests::Ignore),
             test::stateLines(*s, test::StaleRequests::Ignore));
    // An event that does not fit changes nothing.
    const QStringList before = linesOf(engine.devices()[0], 0, test::StaleRequests::Compare);
    TraceEvent stray { model::Action::FreeCompleted, 0, 1, 0, 0, 0, 0 };
    QVERIFY(!engine.apply(stray));
    QCOMPARE(linesOf(engine.devices()[0], 0, test::StaleRequests::Compare), before);
}

void TestEventTrace::resyncReachesTarget_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<double>("from");
    QTest::addColumn<double>("to");
    QTest::addColumn<bool>("restart");
    QTest::newRow("mlp_train, start to end") << "mlp_train.pickle" << 0.0 << 1.0 << false;
    QTest::newRow("mlp_train, end back to a third") << "mlp_train.pickle" << 1.0 << 0.33 << false;
    QTest::newRow("transformer_train, a gap mid-run") << "transformer_train.pickle" << 0.4 << 0.6 << false;
    QTest::newRow("transformer_train, restarted") << "transformer_train.pickle" << 0.5 << 0.5 << true;
    QTest::newRow("expandable_segments, a gap") << "expandable_segments.pickle" << 0.2 << 0.7 << false;
    QTest::newRow("expandable_segments, back") << "expandable_segments.pickle" << 0.9 << 0.1 << false;
    QTest::newRow("multistream, a gap") << "multistream.pickle" << 0.1 << 0.9 << false;
}

// The events resync() synthesises turn one state into another exactly: the engine ends in the target, whole; a
// second engine applying them one by one ends there too, every free block's request included; and so does the
// replay oracle (a ReplayExtender from the first state fed the events as trace entries).
void TestEventTrace::resyncReachesTarget()
{
    QFETCH(QString, file);
    QFETCH(double, from);
    QFETCH(double, to);
    QFETCH(bool, restart);
    const auto s = load(test::snapshotPath(file.toStdString()));
    QVERIFY(s);
    const model::Replay replay = model::Replay::build(*s, 0);
    const model::ReplayState a = replay.stateAt(int64_t(double(replay.entryCount()) * from));
    const model::ReplayState b = replay.stateAt(int64_t(double(replay.entryCount()) * to));
    const QStringList target = linesOf(b, 0, test::StaleRequests::Compare);
    QVERIFY(target.size() > 2);

    EventTrace engine;
    engine.setState({ EventTrace::deviceOf(a) });
    std::vector<TraceEvent> events;
    EventTrace::Resync how;
    how.restart = restart;
    how.startUs = 100;
    how.timeUs = 200;
    engine.resync({ EventTrace::deviceOf(b) }, how, events);
    QVERIFY(!events.empty());
    QCOMPARE(linesOf(engine.devices()[0], 0, test::StaleRequests::Compare), target);
    // All at the resync's time; a restart's removals where the old job was last heard of, before the rest.
    for (size_t i = 0; i < events.size(); ++i) {
        QVERIFY(events[i].timeUs == 200 || (restart && events[i].timeUs == 100));
        QVERIFY(i == 0 || events[i].timeUs >= events[i - 1].timeUs);
    }

    EventTrace again;
    again.setState({ EventTrace::deviceOf(a) });
    for (size_t i = 0; i < events.size(); ++i) {
        TraceEvent e = events[i];
        QVERIFY2(again.apply(e), qPrintable(QStringLiteral("synthetic event %1").arg(i)));
        QCOMPARE(e.size, events[i].size);
    }
    QCOMPARE(linesOf(again.devices()[0], 0, test::StaleRequests::Compare), target);

    // The replay oracle: the state the events start from, then the events as a trace.
    model::Snapshot start = model::snapshotOfState(a, 0);
    start.deviceTraces.assign(1, {});
    model::Replay grown;
    model::ReplayExtender extender;
    extender.start(grown, start, 0);
    std::vector<model::TraceEntry> entries;
    std::vector<model::EntryDetail> details;
    model::EntryFormTable forms;
    for (const TraceEvent& e : events) {
        model::TraceEntry t;
        t.action = e.action;
        t.addr = int64_t(e.addr);
        t.size = int64_t(e.size);
        t.form = forms.intern({ .stream = int64_t(e.stream) });
        t.timeUs = int64_t(e.timeUs);
        entries.push_back(t);
        details.push_back({ model::ByteCount(e.blockSize), { e.poolFirst, e.poolSecond } });
    }
    extender.append(grown, forms, entries, details);
    QCOMPARE(grown.warnings(), 0u);
    QCOMPARE(linesOf(grown.stateAt(grown.entryCount()), 0, test::StaleRequests::Compare), target);
    QCOMPARE(test::stateLines(grown.stateAt(grown.entryCount()), test::StaleRequests::Compare),
             test::stateLines(b, test::StaleRequests::Compare));
}

void TestEventTrace::numbersAsTheBuilder_data()
{
    QTest::addColumn<QString>("file");
    QTest::newRow("mlp_train") << "mlp_train.pickle";
    QTest::newRow("expandable_segments") << "expandable_segments.pickle";
    QTest::newRow("multistream") << "multistream.pickle";
    QTest::newRow("cudagraph") << "cudagraph.pickle";
}

// Versions and stream numbers as io's builder gave them to a file read back: every entry of every device in order,
// then the final segments and blocks.
void TestEventTrace::numbersAsTheBuilder()
{
    QFETCH(QString, file);
    std::string path = test::snapshotPath(file.toStdString());
    if (file == QStringLiteral("cudagraph.pickle"))
        path = test::dataPath(file.toStdString());
    const auto s = load(path);
    QVERIFY(s);
    model::TraceNumbering numbering;
    std::vector<int64_t> streams;
    auto see = [&](int64_t stream) {
        if (numbering.addStream(stream))
            streams.push_back(stream);
    };
    see(0);
    size_t entries = 0;
    for (const auto& trace : s->deviceTraces)
        for (const model::TraceEntry& e : trace) {
            see(s->stream(e));
            QCOMPARE(numbering.version(e.action, e.addr), e.version);
            ++entries;
        }
    QVERIFY(entries > 0);
    for (const model::Segment& seg : s->segments) {
        see(seg.stream);
        QCOMPARE(numbering.segmentVersion(seg.address), seg.version);
        for (uint32_t b = seg.blockBegin; b < seg.blockBegin + seg.blockCount; ++b)
            QCOMPARE(numbering.blockVersion(s->blocks[b].address), s->blocks[b].version);
    }
    QCOMPARE(streams, s->streams);
}

// A real job recorded from its start: the recording's entries, applied from nothing by the engine, end in the
// job's own final state as it dumps it at exit, every free block's stale request included.
void TestEventTrace::recordedJobEndsInItsExitDump()
{
    QTemporaryDir dir;
    const QString endpoint = QStringLiteral("ipc://") + dir.path() + QStringLiteral("/job");
    const QString dump = dir.filePath(QStringLiteral("exit.pickle")),
                  recording = dir.filePath(QStringLiteral("recording.pickle"));
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("MEMSCOPE_DUMP_ON"), QStringLiteral("exit"));
    env.insert(QStringLiteral("MEMSCOPE_DUMP_PATH"), dump);
    QProcess demo;
    demo.setProcessEnvironment(env);
    demo.start(binary("memscope-cli"),
               { QStringLiteral("demo"), QStringLiteral("--endpoint"), endpoint, QStringLiteral("--events"),
                 QStringLiteral("40000"), QStringLiteral("--rate"), QStringLiteral("40000"), QStringLiteral("--delay"),
                 QStringLiteral("500"), QStringLiteral("--no-stacks") });
    QVERIFY(demo.waitForStarted(10000));
    while (!demo.canReadLine())
        QVERIFY(demo.waitForReadyRead(10000));
    QCOMPARE(QString::fromUtf8(demo.readLine()).trimmed(), endpoint);
    QProcess record;
    record.start(binary("memscope-cli"), { QStringLiteral("record"), endpoint, QStringLiteral("-o"), recording });
    QVERIFY(demo.waitForFinished(60000) || demo.state() == QProcess::NotRunning);
    QVERIFY(record.waitForFinished(60000) || record.state() == QProcess::NotRunning);
    QCOMPARE(demo.exitCode(), 0);
    QCOMPARE(record.exitCode(), 0);
    const auto job = load(dump.toStdString()), recorded = load(recording.toStdString());
    QVERIFY(job && recorded);
    const model::Replay replay = model::Replay::build(*recorded, 0);
    QCOMPARE(replay.warnings(), 0u);
    if (!replay.stateAt(0).segments.empty())
        QSKIP("the recording joined after the job's first segment: its start state's free blocks are not known");
    EventTrace engine;
    for (int64_t i = 0; i < replay.entryCount(); ++i) {
        TraceEvent e = eventOf(*recorded, replay, i);
        QVERIFY2(engine.apply(e), qPrintable(QStringLiteral("entry %1").arg(i)));
    }
    QVERIFY(!engine.devices().empty());
    const QStringList expected = test::stateLines(*job);
    QVERIFY(expected.size() > 10);
    QCOMPARE(linesOf(engine.devices()[0], 0, test::StaleRequests::Compare), expected);
}

QTEST_GUILESS_MAIN(TestEventTrace)
#include "tst_eventtrace.moc"
