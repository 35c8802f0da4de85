// Tests of model/landmarks.h: moments resolved on real snapshots against the trace read independently here (peaks
// by summing the replay's own series would be circular, so peaks are checked against what `memscope-cli info`
// prints and a forward sum of alloc/free sizes), annotation ranges against their time stamps, the spec parser,
// the compiler-annotation rule and where a file opens. Test thread only.
#include "io/snapshotio.h"
#include "model/landmarks.h"
#include "testutil.h"

#include <QtTest>

#include <algorithm>
#include <map>

using namespace memscope;
using namespace memscope::model;

namespace {

std::shared_ptr<const Snapshot> load(const std::string& path)
{
    io::LoadResult r = io::loadSnapshot(path);
    if (!r.ok())
        qFatal("cannot load %s: %s", path.c_str(), r.error.toString().c_str());
    return r.snapshot;
}

std::string fixture(const QString& name)
{
    return name.startsWith(QLatin1String("corpus/")) ? test::dataPath(name.toStdString())
                                                     : test::snapshotPath(name.toStdString());
}

} // namespace

class TestLandmarks : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void peaks_data();
    void peaks();
    void ooms_data();
    void ooms();
    void annotations();
    void largest();
    void parse_data();
    void parse();
    void compilerAnnotations_data();
    void compilerAnnotations();
    void opening_data();
    void opening();
    void errors_data();
    void errors();
};

void TestLandmarks::peaks_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<qint64>("peakIndex"); // as `memscope-cli info` prints it ("peak allocated ... after N entries")
    QTest::newRow("transformer_train") << "transformer_train.pickle" << qint64(9796);
    QTest::newRow("oom") << "oom.pickle" << qint64(50);
    QTest::newRow("diff_after") << "diff_after.pickle" << qint64(456);
    QTest::newRow("gc05_fraction") << "corpus/gc05_fraction.pickle" << qint64(2596);
}

void TestLandmarks::peaks()
{
    QFETCH(QString, file);
    QFETCH(qint64, peakIndex);
    const auto s = load(fixture(file));
    const Replay replay = Replay::build(*s, 0);
    const ResolvedMoment peak = resolveMoment(*parseMoment("peak"), *s, replay);
    QVERIFY(peak.ok);
    QCOMPARE(peak.index, peakIndex);
    QCOMPARE(peak.bytes, replay.peakAllocated().bytes);
    // Independently: these traces are complete (nothing alive before the first entry), so the requested bytes
    // live after entry j are the running sum of alloc minus free_completed sizes; its first maximum is where the
    // peak of requested bytes lies, and the peak of allocated (block) bytes is within a rounding of it.
    const Trace& t = s->deviceTraces[0];
    int64_t live = 0, best = -1, bestIndex = 0;
    for (size_t j = 0; j < t.size(); ++j) {
        if (t[j].action == Action::Alloc)
            live += t[j].size;
        else if (t[j].action == Action::FreeCompleted)
            live -= t[j].size;
        if (live > best) {
            best = live;
            bestIndex = int64_t(j) + 1;
        }
    }
    QCOMPARE(replay.series().requested[size_t(peak.index)], best);
    QCOMPARE(bestIndex, peakIndex);
    const ResolvedMoment reserved = resolveMoment(*parseMoment("peak-reserved"), *s, replay);
    QVERIFY(reserved.ok);
    QCOMPARE(reserved.bytes, replay.peakReserved().bytes);
}

void TestLandmarks::ooms_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("count");
    QTest::newRow("oom") << "oom.pickle" << 1;
    QTest::newRow("gc05_fraction") << "corpus/gc05_fraction.pickle" << 29;
    QTest::newRow("oom_retry") << "corpus/oom_retry.pickle" << 81;
    QTest::newRow("none") << "transformer_train.pickle" << 0;
}

void TestLandmarks::ooms()
{
    QFETCH(QString, file);
    QFETCH(int, count);
    const auto s = load(fixture(file));
    const Replay replay = Replay::build(*s, 0);
    std::vector<int64_t> expected;
    const Trace& t = s->deviceTraces[0];
    for (size_t j = 0; j < t.size(); ++j)
        if (s->str(t[j].actionName) == "oom")
            expected.push_back(int64_t(j));
    QCOMPARE(int(expected.size()), count);
    QCOMPARE(oomEntries(t), expected);
    for (size_t k = 0; k < expected.size(); ++k) {
        const ResolvedMoment m = resolveMoment(Moment { MomentKind::Oom, int64_t(k) + 1, {} }, *s, replay);
        QVERIFY(m.ok);
        QCOMPARE(m.index, expected[k] + 1); // the state right after the oom entry
        QCOMPARE(m.bytes, t[size_t(expected[k])].size);
    }
    const ResolvedMoment beyond = resolveMoment(Moment { MomentKind::Oom, count + 1, {} }, *s, replay);
    QVERIFY(!beyond.ok);
    QVERIFY(!beyond.error.empty());
}

void TestLandmarks::annotations()
{
    const auto s = load(test::snapshotPath("diff_after.pickle"));
    const auto ranges = annotationRanges(*s, 0);
    QCOMPARE(ranges.size(), size_t(16)); // 8 Optimizer.step and 8 zero_grad, START and END each
    const Trace& t = s->deviceTraces[0];
    auto stateAt = [&](int64_t us) { // one past the first entry at or after `us`
        for (size_t j = 0; j < t.size(); ++j)
            if (t[j].timeUs >= us)
                return j == 0 ? int64_t(0) : int64_t(j) + 1;
        return int64_t(t.size());
    };
    for (const AnnotationRange& r : ranges) {
        QVERIFY(r.closed);
        QCOMPARE(r.begin, stateAt(r.beginUs));
        QCOMPARE(r.end, stateAt(r.endUs));
        QVERIFY(r.begin <= r.end);
    }
    QVERIFY(std::is_sorted(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.begin < b.begin; }));
    const Replay replay = Replay::build(*s, 0);
    const auto first = std::find_if(ranges.begin(), ranges.end(),
                                    [](const AnnotationRange& r) { return r.name == "Optimizer.step#SGD.step"; });
    QVERIFY(first != ranges.end());
    const ResolvedMoment begin = resolveMoment(*parseMoment("Optimizer.step#SGD.step"), *s, replay);
    const ResolvedMoment end = resolveMoment(*parseMoment("Optimizer.step#SGD.step:end"), *s, replay);
    QVERIFY(begin.ok && end.ok);
    QCOMPARE(begin.index, first->begin);
    QCOMPARE(end.index, first->end);
}

void TestLandmarks::largest()
{
    const auto s = load(test::snapshotPath("transformer_train.pickle"));
    const Replay replay = Replay::build(*s, 0);
    const AllocationId id = largestAllocation(replay);
    QVERIFY(id != NoAllocation);
    const Allocation& a = replay.allocation(id);
    int64_t maxRequested = 0;
    for (const TraceEntry& e : s->deviceTraces[0])
        if (e.action == Action::Alloc)
            maxRequested = std::max(maxRequested, e.size);
    QCOMPARE(a.requestedSize, maxRequested);
    const ResolvedMoment m = resolveMoment(*parseMoment("largest"), *s, replay);
    QVERIFY(m.ok);
    QCOMPARE(m.index, int64_t(a.allocIndex) + 1);
    QCOMPARE(s->deviceTraces[0][size_t(a.allocIndex)].addr, a.address);
    const std::vector<AllocationId> live = replay.liveAt(m.index);
    QCOMPARE(std::count(live.begin(), live.end(), id), 1);
}

void TestLandmarks::parse_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<int>("kind");
    QTest::addColumn<qint64>("number");
    QTest::addColumn<QString>("spec");
    using K = MomentKind;
    QTest::newRow("index") << "42" << int(K::Index) << qint64(42) << "42";
    QTest::newRow("zero") << "0" << int(K::Index) << qint64(0) << "0";
    QTest::newRow("end") << "end" << int(K::End) << qint64(0) << "end";
    QTest::newRow("peak") << "peak" << int(K::PeakAllocated) << qint64(0) << "peak";
    QTest::newRow("peak-reserved") << "peak-reserved" << int(K::PeakReserved) << qint64(0) << "peak-reserved";
    QTest::newRow("oom") << "oom" << int(K::Oom) << qint64(1) << "oom";
    QTest::newRow("oom12") << "oom12" << int(K::Oom) << qint64(12) << "oom12";
    QTest::newRow("oom:2") << "oom:2" << int(K::Oom) << qint64(2) << "oom2";
    QTest::newRow("oom0 is a name") << "oom0" << int(K::Annotation) << qint64(0) << "oom0";
    QTest::newRow("largest") << "largest" << int(K::Largest) << qint64(0) << "largest";
    QTest::newRow("negative is a name") << "-3" << int(K::Annotation) << qint64(0) << "-3";
    QTest::newRow("annotation") << "step_2" << int(K::Annotation) << qint64(0) << "step_2";
}

void TestLandmarks::parse()
{
    QFETCH(QString, text);
    QFETCH(int, kind);
    QFETCH(qint64, number);
    QFETCH(QString, spec);
    const auto m = parseMoment(text.toStdString());
    QVERIFY(m);
    QCOMPARE(int(m->kind), kind);
    QCOMPARE(m->number, number);
    QCOMPARE(QString::fromStdString(momentSpec(*m)), spec);
    QCOMPARE(parseMoment(momentSpec(*m)), m);
    QVERIFY(!parseMoment(""));
}

void TestLandmarks::compilerAnnotations_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("compiler");
    QTest::newRow("dynamo region") << "Torch-Compiled Region: 0/0" << true;
    QTest::newRow("cache lookup") << "TorchDynamo Cache Lookup" << true;
    QTest::newRow("aot forward") << "CompiledFunction" << true;
    QTest::newRow("aot backward") << "CompiledFunctionBackward" << true;
    QTest::newRow("aot wrapper") << "AOTDispatcher Runtime Wrapper Prologue" << true;
    QTest::newRow("inductor graph") << "## Call CompiledFxGraph fkq3xyz ##" << true;
    QTest::newRow("step") << "step_3" << false;
    QTest::newRow("optimizer") << "Optimizer.step#AdamW.step" << false;
    QTest::newRow("user forward") << "forward" << false;
    QTest::newRow("hash inside") << "loss ## total" << false;
}

void TestLandmarks::compilerAnnotations()
{
    QFETCH(QString, name);
    QFETCH(bool, compiler);
    QCOMPARE(isCompilerAnnotation(name.toStdString()), compiler);
}

void TestLandmarks::opening_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<qint64>("index"); // -1: the end
    QTest::addColumn<QString>("why");
    QTest::newRow("one OOM") << "oom.pickle" << qint64(51) << "at the OOM";
    QTest::newRow("many OOMs") << "corpus/gc05_fraction.pickle" << qint64(369) << "at the first of 29 OOMs";
    QTest::newRow("no OOM") << "transformer_train.pickle" << qint64(-1) << "at the end of the trace: no OOM in it";
}

void TestLandmarks::opening()
{
    QFETCH(QString, file);
    QFETCH(qint64, index);
    QFETCH(QString, why);
    const auto s = load(fixture(file));
    const Replay replay = Replay::build(*s, 0);
    const ResolvedMoment m = openingMoment(*s, replay);
    QVERIFY(m.ok);
    QCOMPARE(m.index, index < 0 ? replay.entryCount() : index);
    QCOMPARE(QString::fromStdString(m.why), why);
}

void TestLandmarks::errors_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<QString>("spec");
    QTest::addColumn<QString>("error");
    QTest::newRow("no OOM") << "transformer_train.pickle"
                            << "oom"
                            << "the trace has no OOM";
    QTest::newRow("too few OOMs") << "oom.pickle"
                                  << "oom2"
                                  << "the trace has 1 OOM, not 2";
    QTest::newRow("beyond the trace") << "oom.pickle"
                                      << "78"
                                      << "index 78 is beyond the trace (77 entries)";
    QTest::newRow("no such annotation") << "oom.pickle"
                                        << "step_1"
                                        << "no annotation named 'step_1'";
}

void TestLandmarks::errors()
{
    QFETCH(QString, file);
    QFETCH(QString, spec);
    QFETCH(QString, error);
    const auto s = load(fixture(file));
    const Replay replay = Replay::build(*s, 0);
    const ResolvedMoment m = resolveMoment(*parseMoment(spec.toStdString()), *s, replay);
    QVERIFY(!m.ok);
    QVERIFY2(QString::fromStdString(m.error).startsWith(error), m.error.c_str());
}

QTEST_GUILESS_MAIN(TestLandmarks)
#include "tst_landmarks.moc"
