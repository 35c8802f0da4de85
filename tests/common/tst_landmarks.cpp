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

// annotationRanges() written the obvious way: a linear search for each time, the latest open START of the same name,
// a stable sort by begin; state indices clamped to `limit`.
std::vector<AnnotationRange> obviousRanges(const Snapshot& s, int device, int64_t limit)
{
    const Trace& t = s.deviceTraces[size_t(device)];
    auto stateAt = [&](int64_t us) {
        for (size_t j = 0; j < t.size(); ++j)
            if (t[j].timeUs >= us)
                return std::min(j == 0 ? int64_t(0) : int64_t(j) + 1, limit);
        return std::min(int64_t(t.size()), limit);
    };
    std::vector<AnnotationRange> out;
    std::vector<size_t> open;
    for (const Annotation& a : s.annotations) {
        if (a.device != device)
            continue;
        const std::string name(s.str(a.name));
        if (a.stage == Annotation::Stage::Start) {
            AnnotationRange r;
            r.name = name;
            r.beginUs = r.endUs = a.timeUs;
            r.begin = r.end = stateAt(a.timeUs);
            open.push_back(out.size());
            out.push_back(r);
        } else if (a.stage == Annotation::Stage::End) {
            for (size_t k = open.size(); k-- > 0;)
                if (out[open[k]].name == name) {
                    AnnotationRange& r = out[open[k]];
                    r.endUs = a.timeUs;
                    r.end = stateAt(a.timeUs);
                    r.closed = true;
                    open.erase(open.begin() + std::ptrdiff_t(k));
                    break;
                }
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    return out;
}

bool sameRanges(const std::vector<AnnotationRange>& a, const std::vector<AnnotationRange>& b, QString& why)
{
    if (a.size() != b.size()) {
        why = QStringLiteral("%1 ranges, expected %2").arg(a.size()).arg(b.size());
        return false;
    }
    for (size_t i = 0; i < a.size(); ++i) {
        const AnnotationRange &x = a[i], &y = b[i];
        if (x.name != y.name || x.begin != y.begin || x.end != y.end || x.beginUs != y.beginUs || x.endUs != y.endUs
            || x.closed != y.closed) {
            why = QStringLiteral("range %1: %2 [%3, %4] closed %5, expected %6 [%7, %8] closed %9")
                      .arg(i)
                      .arg(QString::fromStdString(x.name))
                      .arg(x.begin)
                      .arg(x.end)
                      .arg(x.closed)
                      .arg(QString::fromStdString(y.name))
                      .arg(y.begin)
                      .arg(y.end)
                      .arg(y.closed);
            return false;
        }
    }
    return true;
}

// A trace of 400 entries 10 us apart (some times repeated) and annotations that nest, repeat a name inside itself,
// never end, end without a start, belong to another device, come before the first entry, after the last one, at
// equal times and once out of time order.
std::shared_ptr<Snapshot> handMadeAnnotations()
{
    auto s = std::make_shared<Snapshot>();
    s->deviceTraces.resize(2);
    for (int i = 0; i < 400; ++i) {
        TraceEntry e;
        e.action = Action::Alloc;
        e.addr = DeviceAddr(0x1000 + i * 512);
        e.size = 512;
        e.timeUs = 1000 + (i / 3) * 30 + (i % 3 == 2 ? 10 : 0); // pairs share a time
        s->deviceTraces[0].push_back(e);
    }
    auto note = [&](Annotation::Stage stage, const char* name, int64_t us, int device = 0) {
        Annotation a;
        a.stage = stage;
        a.stageName = s->strings.intern(stage == Annotation::Stage::Start ? "START" : "END");
        a.name = s->strings.intern(name);
        a.device = device;
        a.timeUs = us;
        s->annotations.push_back(a);
    };
    using St = Annotation::Stage;
    note(St::Start, "before", 10);
    note(St::End, "before", 500);
    for (int step = 0; step < 12; ++step) {
        const int64_t t0 = 1000 + step * 330;
        note(St::Start, "step", t0);
        note(St::Start, "forward", t0 + 40);
        note(St::Start, "forward", t0 + 60); // the same name inside itself
        note(St::End, "forward", t0 + 90);
        note(St::End, "forward", t0 + 120);
        note(St::Start, "other device", t0 + 100, 1);
        note(St::End, "never started", t0 + 130);
        note(St::Start, "equal", t0 + 150);
        note(St::End, "equal", t0 + 150);
        if (step % 5 == 3)
            note(St::Start, "never ended", t0 + 200);
        note(St::End, "step", t0 + 320);
    }
    note(St::Start, "late", 2000); // out of time order
    note(St::End, "late", 2100);
    note(St::Start, "after", 99999);
    note(St::End, "after", 100500);
    note(St::Start, "open at the end", 100600);
    return s;
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
    void annotationsGrowing_data();
    void annotationsGrowing();
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
        if (s->str(s->form(t[j]).actionName) == "oom")
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

// A live document's annotations (model::AnnotationTracker) equal the obvious computation after every growth: the
// trace and the annotations appended in steps (annotations ahead of the entries by `lead` us, so that indices past the
// trace's end must be looked at again; states known lagging by `lag` entries), and the changes it reports, applied to
// a copy as the Session applies them, give the same ranges.
void TestLandmarks::annotationsGrowing_data()
{
    QTest::addColumn<QString>("file"); // "" for the hand-made snapshot
    QTest::addColumn<int>("step"); // entries appended at a time
    QTest::addColumn<int>("lead");
    QTest::addColumn<int>("lag");
    QTest::newRow("hand-made, 1 at a time") << "" << 1 << 0 << 0;
    QTest::newRow("hand-made, 7, ahead 300 us") << "" << 7 << 300 << 0;
    QTest::newRow("hand-made, 13, ahead, states lagging") << "" << 13 << 500 << 5;
    QTest::newRow("hand-made, all at once") << "" << 100000 << 0 << 0;
    QTest::newRow("transformer_train, 50") << "transformer_train.pickle" << 50 << 0 << 0;
    QTest::newRow("transformer_train, 997, ahead, lagging") << "transformer_train.pickle" << 997 << 200000 << 100;
    QTest::newRow("diff_after, 3, ahead") << "diff_after.pickle" << 3 << 5000 << 0;
}

void TestLandmarks::annotationsGrowing()
{
    QFETCH(QString, file);
    QFETCH(int, step);
    QFETCH(int, lead);
    QFETCH(int, lag);
    // The whole snapshot, and a second copy of it emptied and grown again (the same strings, the same ids).
    const std::shared_ptr<const Snapshot> whole = file.isEmpty() ? handMadeAnnotations() : load(fixture(file));
    const std::shared_ptr<Snapshot> grown
        = file.isEmpty() ? handMadeAnnotations() : std::const_pointer_cast<Snapshot>(load(fixture(file)));
    const Trace& all = whole->deviceTraces[0];
    grown->deviceTraces[0].clear();
    grown->annotations.clear();
    QVERIFY(!whole->annotations.empty());

    AnnotationTracker tracker(0);
    std::vector<AnnotationRange> applied; // the changes applied as Session::annotationSpans applies them
    size_t entries = 0, notes = 0, updates = 0;
    while (true) {
        const size_t more = std::min(all.size() - entries, size_t(step));
        for (size_t i = 0; i < more; ++i)
            grown->deviceTraces[0].push_back(all[entries + i]);
        entries += more;
        const bool last = entries == all.size();
        const int64_t until = entries == 0 ? 0 : all[entries - 1].timeUs + lead;
        while (notes < whole->annotations.size() && (last || whole->annotations[notes].timeUs <= until))
            grown->annotations.push_back(whole->annotations[notes++]);
        const int64_t limit = last ? int64_t(entries) : std::max<int64_t>(int64_t(entries) - lag, 0);

        const AnnotationTracker::Change change = tracker.update(*grown, limit);
        const std::vector<AnnotationRange>& ranges = tracker.ranges();
        QVERIFY(change.from <= ranges.size());
        QVERIFY(change.from <= applied.size());
        for (size_t i : change.changed) { // indices only: the name, the start time and the place stay
            QVERIFY(i < change.from);
            applied[i].begin = ranges[i].begin;
            applied[i].end = ranges[i].end;
            applied[i].endUs = ranges[i].endUs;
            applied[i].closed = ranges[i].closed;
        }
        applied.resize(change.from);
        applied.insert(applied.end(), ranges.begin() + std::ptrdiff_t(change.from), ranges.end());

        const std::vector<AnnotationRange> expected = obviousRanges(*grown, 0, limit);
        QString why;
        QVERIFY2(sameRanges(ranges, expected, why),
                 qPrintable(QStringLiteral("after %1 entries: %2").arg(entries).arg(why)));
        QVERIFY2(sameRanges(applied, expected, why),
                 qPrintable(QStringLiteral("changes applied, after %1 entries: %2").arg(entries).arg(why)));
        ++updates;
        if (last)
            break;
    }
    // The end: what a file's annotationRanges() gives, and a second update with nothing new changes nothing.
    QString why;
    QVERIFY2(sameRanges(tracker.ranges(), annotationRanges(*whole, 0), why), qPrintable(why));
    const AnnotationTracker::Change none = tracker.update(*grown, int64_t(all.size()));
    QVERIFY(!none.any(tracker.ranges().size()));
    QVERIFY(updates > 1 || step >= int(all.size()));
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
    // Given the oom entries found before (a file's Document keeps them), the same.
    const ResolvedMoment given = openingMoment(*s, replay, oomEntries(s->deviceTraces[0]));
    QVERIFY(given.ok);
    QCOMPARE(given.index, m.index);
    QCOMPARE(given.why, m.why);
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
