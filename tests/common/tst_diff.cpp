// Tests of model::computeDiff and the diff reports and command (common/model/diff.h): the deliberate leak of
// diff_before/diff_after found on top with the right deltas (checked against independent per-stack arithmetic on
// the model's blocks and against constants computed by Python on the pickles), identity, symmetry, same-trace cursor
// diffs against the replay engine, cross-file stack matching by content, the frame filter, the differential call
// tree, and the CLI's outputs and exit codes through runDiffCommand (the code memscope-cli runs). Test thread only.
#include "diffcommand.h"
#include "io/snapshotio.h"
#include "model/diff.h"
#include "model/framefilter.h"
#include "model/replay.h"
#include "report/diffreport.h"
#include "report/memoryviz.h"
#include "testutil.h"

#include <QDir>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

using namespace memscope;
using model::BlockState;
using model::ByteCount;
using model::DiffResult;
using model::DiffSide;

namespace {

// Snapshots are loaded once per process (big_trace takes a while to decompress). `copy` loads a second, separate
// object of the same file, so that a diff of the two is a cross-file diff (stacks matched by content).
std::shared_ptr<const model::Snapshot> load(const std::string& name, bool copy = false)
{
    static std::map<std::pair<std::string, bool>, std::shared_ptr<const model::Snapshot>> cache;
    auto& slot = cache[{ name, copy }];
    if (!slot) {
        io::LoadResult result = io::loadSnapshot(test::snapshotPath(name));
        if (!result.ok())
            qWarning("%s: %s", name.c_str(), result.error.toString().c_str());
        slot = result.snapshot;
    }
    return slot;
}

QStringList snapshotFiles()
{
    const QDir dir(QString::fromStdString(test::snapshotPath("")));
    return dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
}

DiffSide side(std::shared_ptr<const model::Snapshot> s, int64_t index = model::EndOfTrace,
              int device = model::AllDevices)
{
    DiffSide d;
    d.snapshot = std::move(s);
    d.index = index;
    d.device = device;
    return d;
}

// ---- Independent arithmetic: what the diff must find, from the model's raw blocks, with plain maps ----

// A stack as PyTorch's folded outputs write it: outermost first, frames PyTorch's viewers show, basename:line:name.
std::string folded(const model::Snapshot& s, model::StackId stack)
{
    if (s.stackSize(stack) == 0)
        return "<non-python>";
    std::vector<std::string> frames;
    for (const model::FrameId* f = s.stackBegin(stack); f != s.stackEnd(stack); ++f) {
        const model::Frame& fr = s.frame(*f);
        if (model::keepFrame(s.str(fr.name), s.str(fr.filename)))
            frames.push_back(report::formatFrame(s, fr));
    }
    if (frames.empty())
        return "<all frames hidden>";
    std::string out;
    for (auto it = frames.rbegin(); it != frames.rend(); ++it)
        out += (out.empty() ? "" : ";") + *it;
    return out;
}

struct BytesCount {
    int64_t bytes = 0, count = 0;
    bool operator==(const BytesCount&) const = default;
};
using StackMap = std::map<std::string, BytesCount>;

// Active blocks (allocated + pending free) of the final state by folded stack, optionally with the block size.
StackMap liveByStack(const model::Snapshot& s, bool withSize)
{
    StackMap out;
    for (const model::Segment& seg : s.segments) {
        for (uint32_t i = 0; i < seg.blockCount; ++i) {
            const model::Block& b = s.blocks[seg.blockBegin + i];
            if (b.state != BlockState::ActiveAllocated && b.state != BlockState::ActivePendingFree)
                continue;
            std::string key = folded(s, b.stack);
            if (withSize)
                key += "#" + std::to_string(b.size);
            out[key].bytes += b.size;
            out[key].count += 1;
        }
    }
    return out;
}

// B - A of two such maps, without the zero entries.
StackMap minus(const StackMap& b, const StackMap& a)
{
    StackMap out;
    for (const auto& [k, v] : b) {
        out[k].bytes += v.bytes;
        out[k].count += v.count;
    }
    for (const auto& [k, v] : a) {
        out[k].bytes -= v.bytes;
        out[k].count -= v.count;
    }
    std::erase_if(out, [](const auto& kv) { return kv.second == BytesCount {}; });
    return out;
}

// The diff's rows in the same shape (rows whose folded text coincides, e.g. two files with one basename, summed).
StackMap rowsAsMap(const DiffResult& r, bool withSize)
{
    StackMap out;
    for (const model::DiffStackRow& row : withSize ? r.byStackAndSize : r.byStack) {
        std::string key = folded(*r.frames, row.stack);
        if (withSize)
            key += "#" + std::to_string(row.size);
        out[key].bytes += row.deltaBytes;
        out[key].count += row.deltaCount;
    }
    std::erase_if(out, [](const auto& kv) { return kv.second == BytesCount {}; });
    return out;
}

bool allZero(const model::DiffMetrics& m) { return m == model::DiffMetrics {}; }

// The leak of diff_before -> diff_after (../shared/tools/gen_snapshots.py, diff_pair): every even step keeps a
// `torch.empty(3 * 2**20 + i * 4096, dtype=torch.uint8)` (line 126) and every step keeps its `loss` (line 122, a
// 4-byte tensor in a 512-byte block). Steps 2..7 ran between the two snapshots: steps 2, 4, 6 leak 3 MiB + 8 KiB,
// + 16 KiB, + 24 KiB = 9,486,336 bytes in 3 blocks; six losses leak 6 × 512 = 3,072 bytes.
// Cross-checked once with Python on the pickles themselves (no torch needed; these stacks are Python-only, so the
// frame filter hides nothing), run in ../shared/snapshots:
//   python3 -c "
//   import pickle,collections as C,os
//   def m(p):
//     c=C.Counter()
//     for s in pickle.load(open(p,'rb'))['segments']:
//       for b in s['blocks']:
//         if b['state']!='inactive': k=';'.join('%s:%d:%s'%(os.path.basename(f['filename']),f['line'],f['name'])
//                                              for f in b['frames'][::-1]); c[k,'B']+=b['size']; c[k,'n']+=1
//     return c
//   a,b=m('diff_before.pickle'),m('diff_after.pickle')
//   for k in sorted(set(a)|set(b)):
//     if b[k]!=a[k]: print(k[1],b[k]-a[k],k[0])"
// prints B 3072 / n 6 for the line-122 stack and B 9486336 / n 3 for the line-126 stack, and nothing else.
constexpr const char* LeakStack
    = "gen_snapshots.py:198:<module>;gen_snapshots.py:184:main;gen_snapshots.py:180:run_one;"
      "gen_snapshots.py:132:diff_pair;gen_snapshots.py:126:step";
constexpr const char* LossStack
    = "gen_snapshots.py:198:<module>;gen_snapshots.py:184:main;gen_snapshots.py:180:run_one;"
      "gen_snapshots.py:132:diff_pair;gen_snapshots.py:122:step";
constexpr ByteCount LeakBytes = 9486336; // 3153920 + 3162112 + 3170304
constexpr int64_t LeakCount = 3;
constexpr ByteCount LossBytes = 3072;
constexpr int64_t LossCount = 6;

// A small in-memory snapshot: one segment of `blocks` on device 0, frames interned in the order given.
struct MadeBlock {
    ByteCount size;
    std::vector<std::tuple<std::string, std::string, int>> frames; // innermost first; empty: a free block
};

std::shared_ptr<const model::Snapshot>
makeSnapshot(const std::vector<MadeBlock>& blocks,
             const std::vector<std::tuple<std::string, std::string, int>>& preintern = {})
{
    auto s = std::make_shared<model::Snapshot>();
    model::StackInterner interner(*s);
    for (const auto& [name, file, line] : preintern)
        interner.frame(s->strings.intern(name), s->strings.intern(file), line);
    model::Segment seg;
    seg.address = 0x10000000;
    seg.segmentType = s->strings.intern("large");
    seg.blockBegin = 0;
    model::DeviceAddr at = seg.address;
    for (const MadeBlock& mb : blocks) {
        model::Block b;
        b.address = at;
        b.size = mb.size;
        b.requestedSize = mb.size;
        b.hasRequestedSize = true;
        b.hasFrames = true;
        b.state = mb.frames.empty() ? BlockState::Inactive : BlockState::ActiveAllocated;
        std::vector<model::FrameId> ids;
        for (const auto& [name, file, line] : mb.frames)
            ids.push_back(interner.frame(s->strings.intern(name), s->strings.intern(file), line));
        b.stack = interner.stack(ids);
        s->blocks.push_back(b);
        at += mb.size;
        seg.totalSize += mb.size;
        if (b.state == BlockState::ActiveAllocated)
            seg.allocatedSize += mb.size;
    }
    seg.activeSize = seg.allocatedSize;
    seg.blockCount = uint32_t(s->blocks.size());
    s->segments.push_back(seg);
    return s;
}

DiffCommandOutput command(const QStringList& args)
{
    std::vector<std::string> a;
    for (const QString& s : args)
        a.push_back(s.toStdString());
    const DiffLoader loader = [](const std::string& path, std::string& error) {
        io::LoadResult r = io::loadSnapshot(path);
        if (!r.ok())
            error = r.error.toString();
        return r.snapshot;
    };
    return runDiffCommand(a, loader);
}

QString snap(const char* name) { return QString::fromStdString(test::snapshotPath(name)); }

} // namespace

class TestDiff : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void leakIsOnTopOfTheGrowthList();
    void stackDeltasMatchIndependentArithmetic_data();
    void stackDeltasMatchIndependentArithmetic();
    void identity_data();
    void identity();
    void symmetry_data();
    void symmetry();
    void sameTraceAgreesWithReplay_data();
    void sameTraceAgreesWithReplay();
    void prebuiltReplayGivesTheSameResult();
    void framesMatchByContentAcrossFiles();
    void frameFilterMergesStacks();
    void segmentsMatchLikePyTorchCompare();
    void sideErrors_data();
    void sideErrors();
    void differentialCallTree();
    void foldedOutputs();
    void jsonOutput();
    void textOutput();
    void commandLine_data();
    void commandLine();
    void byteCounts_data();
    void byteCounts();
    void sideSpecs_data();
    void sideSpecs();
};

void TestDiff::leakIsOnTopOfTheGrowthList()
{
    const auto before = load("diff_before.pickle"), after = load("diff_after.pickle");
    QVERIFY(before && after);
    const DiffResult r = model::computeDiff(side(before), side(after));
    QVERIFY2(r.ok(), r.error.c_str());
    QVERIFY(!r.sameTrace);

    // Segments are identical (PyTorch's compare prints nothing for this pair); the blocks are not.
    QCOMPARE(r.segments.onlyA.count, 0);
    QCOMPARE(r.segments.onlyB.count, 0);
    QCOMPARE(r.segments.both.count, int64_t(before->segments.size()));
    QVERIFY(r.segments.bothChanged > 0);
    QCOMPARE(r.totals.front().delta.reserved, 0);

    // The leak's stack tops the growth list, then the losses; nothing else changes.
    QVERIFY(r.byStack.size() >= 2);
    QCOMPARE(folded(*r.frames, r.byStack[0].stack), std::string(LeakStack));
    QCOMPARE(r.byStack[0].deltaBytes, LeakBytes);
    QCOMPARE(r.byStack[0].deltaCount, LeakCount);
    QCOMPARE(r.byStack[0].bytesA, 0);
    QCOMPARE(r.byStack[0].countB, LeakCount);
    QCOMPARE(folded(*r.frames, r.byStack[1].stack), std::string(LossStack));
    QCOMPARE(r.byStack[1].deltaBytes, LossBytes);
    QCOMPARE(r.byStack[1].deltaCount, LossCount);
    for (size_t i = 2; i < r.byStack.size(); ++i)
        QCOMPARE(r.byStack[i].deltaBytes, 0);
    QCOMPARE(r.totals.front().delta.active, LeakBytes + LossBytes);
    QCOMPARE(r.totals.front().delta.allocations, LeakCount + LossCount);
    QCOMPARE(model::diffGrowth(r), LeakBytes + LossBytes);

    // By (stack, size): "the same tensor, one more each step": six more 512-byte losses on one row.
    bool foundLoss = false;
    for (const model::DiffStackRow& row : r.byStackAndSize) {
        if (folded(*r.frames, row.stack) == LossStack && row.size == 512) {
            QCOMPARE(row.deltaCount, LossCount);
            QCOMPARE(row.deltaBytes, LossBytes);
            foundLoss = true;
        }
    }
    QVERIFY(foundLoss);
    // The three leaked empties differ in size (3 MiB + i × 4 KiB): three rows of one block each.
    std::set<ByteCount> leakSizes;
    for (const model::DiffStackRow& row : r.byStackAndSize)
        if (folded(*r.frames, row.stack) == LeakStack && row.deltaCount == 1)
            leakSizes.insert(row.size);
    QCOMPARE(leakSizes, (std::set<ByteCount> { 3153920, 3162112, 3170304 }));

    // The same numbers by independent arithmetic on the model's blocks.
    const StackMap expected = minus(liveByStack(*after, false), liveByStack(*before, false));
    QCOMPARE(expected.size(), size_t(2));
    QCOMPARE(expected.at(LeakStack), (BytesCount { LeakBytes, LeakCount }));
    QCOMPARE(expected.at(LossStack), (BytesCount { LossBytes, LossCount }));
}

void TestDiff::stackDeltasMatchIndependentArithmetic_data()
{
    QTest::addColumn<QString>("a");
    QTest::addColumn<QString>("b");
    QTest::newRow("leak: diff_before -> diff_after") << "diff_before.pickle"
                                                     << "diff_after.pickle";
    QTest::newRow("leak reversed: diff_after -> diff_before") << "diff_after.pickle"
                                                              << "diff_before.pickle";
    QTest::newRow("two jobs: mlp_train -> transformer_train") << "mlp_train.pickle"
                                                              << "transformer_train.pickle";
    QTest::newRow("C++ frames filtered: transformer_train -> mlp_train") << "transformer_train.pickle"
                                                                         << "mlp_train.pickle";
    QTest::newRow("oom -> multistream (pending frees)") << "oom.pickle"
                                                        << "multistream.pickle";
    QTest::newRow("cudagraph pool -> two devices") << "cudagraph.pickle"
                                                   << "two_device.pickle";
    QTest::newRow("expandable -> scripted allocs") << "expandable_segments.pickle"
                                                   << "scripted_allocs.pickle";
    QTest::newRow("big_trace -> diff_after") << "big_trace.pickle.xz"
                                             << "diff_after.pickle";
}

void TestDiff::stackDeltasMatchIndependentArithmetic()
{
    QFETCH(QString, a);
    QFETCH(QString, b);
    const auto sa = load(a.toStdString()), sb = load(b.toStdString());
    QVERIFY(sa && sb);
    const DiffResult r = model::computeDiff(side(sa), side(sb));
    QVERIFY2(r.ok(), r.error.c_str());
    for (bool withSize : { false, true }) {
        const StackMap expected = minus(liveByStack(*sb, withSize), liveByStack(*sa, withSize));
        const StackMap got = rowsAsMap(r, withSize);
        QCOMPARE(got.size(), expected.size());
        for (const auto& [key, value] : expected) {
            QVERIFY2(got.count(key), key.c_str());
            QCOMPARE(got.at(key), value);
        }
    }
    // Rows are ordered: growth by size, then shrink by size, then unchanged.
    for (size_t i = 1; i < r.byStack.size(); ++i) {
        const auto& p = r.byStack[i - 1];
        const auto& q = r.byStack[i];
        auto cls = [](ByteCount d) { return d > 0 ? 0 : d < 0 ? 1 : 2; };
        QVERIFY(cls(p.deltaBytes) <= cls(q.deltaBytes));
        if (cls(p.deltaBytes) == cls(q.deltaBytes))
            QVERIFY(std::llabs(p.deltaBytes) >= std::llabs(q.deltaBytes));
    }
    // Totals: Σ rows == totals; a file's totals are its blocks'.
    ByteCount sum = 0;
    int64_t count = 0;
    for (const auto& row : r.byStack) {
        sum += row.deltaBytes;
        count += row.deltaCount;
    }
    QCOMPARE(sum, r.totals.front().delta.active);
    QCOMPARE(count, r.totals.front().delta.allocations);
    ByteCount reservedB = 0;
    for (const model::Segment& seg : sb->segments)
        reservedB += seg.totalSize;
    QCOMPARE(r.totals.front().b.reserved, reservedB);
}

void TestDiff::identity_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<bool>("sameObject");
    for (const QString& f : snapshotFiles()) {
        QTest::addRow("%s against a second load of itself", qPrintable(f)) << f << false;
        QTest::addRow("%s against itself (same trace)", qPrintable(f)) << f << true;
    }
}

void TestDiff::identity()
{
    QFETCH(QString, file);
    QFETCH(bool, sameObject);
    const auto a = load(file.toStdString());
    const auto b = load(file.toStdString(), !sameObject);
    QVERIFY(a && b);
    QCOMPARE(a.get() == b.get(), sameObject);
    const DiffResult r = model::computeDiff(side(a), side(b));
    QVERIFY2(r.ok(), r.error.c_str());
    QCOMPARE(r.sameTrace, sameObject);
    for (const model::DiffTotals& t : r.totals) {
        QVERIFY(allZero(t.delta));
        QCOMPARE(t.a, t.b);
    }
    QCOMPARE(r.totals.front().a.segments, int64_t(a->segments.size()));
    for (const auto* rows : { &r.byStack, &r.byStackAndSize })
        for (const model::DiffStackRow& row : *rows) {
            QCOMPARE(row.deltaBytes, 0);
            QCOMPARE(row.deltaCount, 0);
            QCOMPARE(row.newCount + row.freedCount, 0);
        }
    QCOMPARE(r.segments.onlyA.count + r.segments.onlyB.count, 0);
    QCOMPARE(r.segments.both.count, int64_t(a->segments.size()));
    QCOMPARE(r.segments.bothChanged, 0);
    QCOMPARE(r.lifetimes.newAllocations.count + r.lifetimes.freed.count, 0);
    if (sameObject)
        QCOMPARE(r.lifetimes.surviving.count, r.totals.front().a.allocations);
    QVERIFY(report::diffFolded(r).empty());
    QVERIFY(model::diffCallSamples(r).empty());
}

void TestDiff::symmetry_data()
{
    QTest::addColumn<QString>("a");
    QTest::addColumn<QString>("b");
    QTest::addColumn<qint64>("indexA");
    QTest::addColumn<qint64>("indexB");
    QTest::addColumn<int>("device");
    const qint64 End = model::EndOfTrace;
    QTest::newRow("leak pair, ends") << "diff_before.pickle"
                                     << "diff_after.pickle" << End << End << -1;
    QTest::newRow("two jobs, ends") << "mlp_train.pickle"
                                    << "transformer_train.pickle" << End << End << -1;
    QTest::newRow("two files at cursors") << "diff_before.pickle"
                                          << "diff_after.pickle" << qint64(50) << qint64(300) << -1;
    QTest::newRow("same trace, two cursors") << "transformer_train.pickle"
                                             << "transformer_train.pickle" << qint64(2000) << qint64(9000) << -1;
    QTest::newRow("same trace, cursor against the end") << "multistream.pickle"
                                                        << "multistream.pickle" << qint64(40) << End << -1;
    QTest::newRow("two devices, device 1 cursors") << "two_device.pickle"
                                                   << "two_device.pickle" << qint64(10) << qint64(60) << 1;
}

void TestDiff::symmetry()
{
    QFETCH(QString, a);
    QFETCH(QString, b);
    QFETCH(qint64, indexA);
    QFETCH(qint64, indexB);
    QFETCH(int, device);
    const auto sa = load(a.toStdString()), sb = load(b.toStdString());
    QVERIFY(sa && sb);
    const DiffResult ab = model::computeDiff(side(sa, indexA, device), side(sb, indexB, device));
    const DiffResult ba = model::computeDiff(side(sb, indexB, device), side(sa, indexA, device));
    QVERIFY2(ab.ok() && ba.ok(), (ab.error + ba.error).c_str());
    QCOMPARE(ab.totals.size(), ba.totals.size());
    for (size_t i = 0; i < ab.totals.size(); ++i) {
        QCOMPARE(ab.totals[i].a, ba.totals[i].b);
        QCOMPARE(ab.totals[i].b, ba.totals[i].a);
        QCOMPARE(ab.totals[i].delta, model::DiffMetrics {} - ba.totals[i].delta);
    }
    for (bool withSize : { false, true }) {
        StackMap x = rowsAsMap(ab, withSize), y = rowsAsMap(ba, withSize);
        for (auto& [k, v] : y)
            v = { -v.bytes, -v.count };
        QCOMPARE(x, y);
    }
    QCOMPARE(ab.segments.onlyA, ba.segments.onlyB);
    QCOMPARE(ab.segments.onlyB, ba.segments.onlyA);
    QCOMPARE(ab.segments.both, ba.segments.both);
    QCOMPARE(ab.segments.bothChanged, ba.segments.bothChanged);
    QCOMPARE(ab.lifetimes.newAllocations, ba.lifetimes.freed);
    QCOMPARE(ab.lifetimes.freed, ba.lifetimes.newAllocations);
    QCOMPARE(ab.lifetimes.surviving, ba.lifetimes.surviving);
    // The signed folded lines of one are the other's, negated.
    std::multiset<std::string> fx, fy;
    for (const QByteArray& line : QByteArray::fromStdString(report::diffFolded(ab)).split('\n'))
        if (!line.isEmpty())
            fx.insert(line.toStdString());
    for (const QByteArray& line : QByteArray::fromStdString(report::diffFolded(ba)).split('\n')) {
        if (line.isEmpty())
            continue;
        const qsizetype sp = line.lastIndexOf(' ');
        fy.insert(line.left(sp).toStdString() + " " + std::to_string(-line.mid(sp + 1).toLongLong()));
    }
    QCOMPARE(fx, fy);
}

void TestDiff::sameTraceAgreesWithReplay_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("device");
    QTest::addColumn<double>("from"); // fractions of the trace; -1: the end (the snapshot's final state)
    QTest::addColumn<double>("to");
    const char* files[] = { "transformer_train.pickle", "multistream.pickle", "expandable_segments.pickle",
                            "cudagraph.pickle",         "oom.pickle",         "scripted_allocs.pickle",
                            "diff_after.pickle",        "big_trace.pickle.xz" };
    for (const char* f : files) {
        QTest::addRow("%s: start -> a third", f) << QString::fromLatin1(f) << 0 << 0.0 << 1.0 / 3;
        QTest::addRow("%s: a third -> two thirds", f) << QString::fromLatin1(f) << 0 << 1.0 / 3 << 2.0 / 3;
        QTest::addRow("%s: two thirds -> a third (shrinking)", f) << QString::fromLatin1(f) << 0 << 2.0 / 3 << 1.0 / 3;
        QTest::addRow("%s: last index -> the end", f) << QString::fromLatin1(f) << 0 << 1.0 << -1.0;
        QTest::addRow("%s: half -> the end", f) << QString::fromLatin1(f) << 0 << 0.5 << -1.0;
    }
    QTest::newRow("two_device.pickle device 1: a third -> the end") << "two_device.pickle" << 1 << 1.0 / 3 << -1.0;
    QTest::newRow("two_device.pickle device 0: start -> half") << "two_device.pickle" << 0 << 0.0 << 0.5;
}

void TestDiff::sameTraceAgreesWithReplay()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    QFETCH(double, from);
    QFETCH(double, to);
    const auto s = load(file.toStdString());
    QVERIFY(s);
    const model::Replay replay = model::Replay::build(*s, device);
    const int64_t n = replay.entryCount();
    auto indexOf = [&](double f) { return f < 0 ? model::EndOfTrace : int64_t(f * double(n)); };
    const int64_t i = indexOf(from), j = indexOf(to);
    const DiffResult r = model::computeDiff(side(s, i, device), side(s, j, device));
    QVERIFY2(r.ok(), r.error.c_str());
    QVERIFY(r.sameTrace);

    // Totals against the replay's per-index series (the end == index n).
    const auto& series = replay.series();
    const size_t si = size_t(i == model::EndOfTrace ? n : i), sj = size_t(j == model::EndOfTrace ? n : j);
    const model::DiffMetrics& d = r.totals.front().delta;
    QCOMPARE(d.allocated, series.allocated[sj] - series.allocated[si]);
    QCOMPARE(d.active, series.active[sj] - series.active[si]);
    QCOMPARE(d.reserved, series.reserved[sj] - series.reserved[si]);
    QCOMPARE(d.requested, series.requested[sj] - series.requested[si]);
    QVERIFY(replay.largestFree());
    QCOMPARE(d.largestFree, (*replay.largestFree())[sj] - (*replay.largestFree())[si]);
    QCOMPARE(r.totals.front().b.active, series.active[sj]);

    // New / freed / surviving against the replay's live allocation ids.
    const std::vector<model::AllocationId> liveA = replay.liveAt(int64_t(si)), liveB = replay.liveAt(int64_t(sj));
    std::set<uint32_t> setA, setB;
    for (auto id : liveA)
        setA.insert(model::raw(id));
    for (auto id : liveB)
        setB.insert(model::raw(id));
    std::set<std::pair<model::DeviceAddr, uint32_t>> expectNew, expectFreed;
    ByteCount newBytes = 0, freedBytes = 0;
    for (uint32_t id : setB)
        if (!setA.count(id)) {
            const model::Allocation& a = replay.allocation(model::AllocationId { id });
            expectNew.insert({ a.address, a.version });
            newBytes += a.size;
        }
    for (uint32_t id : setA)
        if (!setB.count(id)) {
            const model::Allocation& a = replay.allocation(model::AllocationId { id });
            expectFreed.insert({ a.address, a.version });
            freedBytes += a.size;
        }
    std::set<std::pair<model::DeviceAddr, uint32_t>> gotNew, gotFreed;
    for (const auto& a : r.lifetimes.newList)
        gotNew.insert({ a.address, a.version });
    for (const auto& a : r.lifetimes.freedList)
        gotFreed.insert({ a.address, a.version });
    QCOMPARE(gotNew, expectNew);
    QCOMPARE(gotFreed, expectFreed);
    QCOMPARE(r.lifetimes.newAllocations.count, int64_t(expectNew.size()));
    QCOMPARE(r.lifetimes.freed.count, int64_t(expectFreed.size()));
    QCOMPARE(r.lifetimes.newAllocations.bytes, newBytes);
    QCOMPARE(r.lifetimes.freed.bytes, freedBytes);
    QCOMPARE(r.lifetimes.surviving.count + r.lifetimes.freed.count, int64_t(setA.size()));
    QCOMPARE(r.lifetimes.surviving.count + r.lifetimes.newAllocations.count, int64_t(setB.size()));
    // Per stack: B - A == new - freed.
    for (const auto* rows : { &r.byStack, &r.byStackAndSize })
        for (const model::DiffStackRow& row : *rows) {
            QCOMPARE(row.deltaCount, row.newCount - row.freedCount);
            QCOMPARE(row.deltaBytes, row.newBytes - row.freedBytes);
        }
}

void TestDiff::prebuiltReplayGivesTheSameResult()
{
    const auto s = load("transformer_train.pickle");
    QVERIFY(s);
    const model::Replay replay = model::Replay::build(*s, 0);
    DiffSide a = side(s, 1000), b = side(s, 7000);
    const DiffResult own = model::computeDiff(a, b);
    a.replay = &replay;
    b.replay = &replay;
    const DiffResult borrowed = model::computeDiff(a, b);
    QVERIFY(own.ok() && borrowed.ok());
    QCOMPARE(report::diffJson(own), report::diffJson(borrowed));
    // A cross-file diff at cursors, each side with its own file's replay: the same state, all zeros.
    const auto other = load("transformer_train.pickle", true);
    const model::Replay otherReplay = model::Replay::build(*other, 0);
    DiffSide c = side(other, 7000);
    c.replay = &otherReplay;
    const DiffResult cross = model::computeDiff(b, c);
    QVERIFY(cross.ok());
    QVERIFY(!cross.sameTrace);
    for (const auto& t : cross.totals)
        QVERIFY(allZero(t.delta));
}

void TestDiff::framesMatchByContentAcrossFiles()
{
    // The same call sites, interned in other orders in the two files: ids differ, content matches.
    const std::tuple<std::string, std::string, int> f1 { "forward", "/src/model.py", 10 },
        f2 { "main", "/src/train.py", 5 }, f3 { "step", "/src/train.py", 20 };
    const auto a = makeSnapshot({ { 1024, { f1, f2 } }, { 512, {} }, { 2048, { f3, f2 } } });
    const auto b = makeSnapshot({ { 2048, { f3, f2 } }, { 1024, { f1, f2 } }, { 1024, { f1, f2 } } },
                                { f3, { "unused", "/x.py", 1 }, f2, f1 });
    QVERIFY(a->frames[0].line != b->frames[0].line); // the ids really differ
    const DiffResult r = model::computeDiff(side(a), side(b));
    QVERIFY2(r.ok(), r.error.c_str());
    QCOMPARE(r.byStack.size(), size_t(2));
    QCOMPARE(folded(*r.frames, r.byStack[0].stack), std::string("train.py:5:main;model.py:10:forward"));
    QCOMPARE(r.byStack[0].deltaBytes, 1024);
    QCOMPARE(r.byStack[0].deltaCount, 1);
    QCOMPARE(r.byStack[1].deltaBytes, 0);
    QCOMPARE(folded(*r.frames, r.byStack[1].stack), std::string("train.py:5:main;train.py:20:step"));
    // Segments match by address and size: the segment grew from 3.5 KiB to 5 KiB, so it is in one side each.
    QCOMPARE(r.segments.onlyA.count, 1);
    QCOMPARE(r.segments.onlyB.count, 1);
}

void TestDiff::frameFilterMergesStacks()
{
    // Two stacks that differ only in frames PyTorch's viewers hide are one row; without the filter, two.
    const std::tuple<std::string, std::string, int> user { "forward", "model.py", 3 },
        hiddenA { "PyEval_EvalFrame", "ceval.c", 100 }, hiddenB { "_PyObject_Call", "Objects/call.c", 7 },
        onlyHidden { "__libc_start_main", "libc.so", 0 };
    const auto a = makeSnapshot({ { 512, { user, hiddenA } } });
    const auto b = makeSnapshot({ { 512, { user, hiddenB } }, { 1024, { onlyHidden } } });
    const DiffResult filtered = model::computeDiff(side(a), side(b));
    QVERIFY(filtered.ok());
    QCOMPARE(filtered.byStack.size(), size_t(2));
    QCOMPARE(folded(*filtered.frames, filtered.byStack[0].stack), std::string("<all frames hidden>"));
    QCOMPARE(filtered.byStack[0].deltaBytes, 1024);
    QCOMPARE(folded(*filtered.frames, filtered.byStack[1].stack), std::string("model.py:3:forward"));
    QCOMPARE(filtered.byStack[1].deltaCount, 0);
    QCOMPARE(report::diffFolded(filtered), std::string("<all frames hidden> 1024\n"));

    model::DiffOptions all;
    all.frameFilter = false;
    const DiffResult unfiltered = model::computeDiff(side(a), side(b), all);
    QVERIFY(unfiltered.ok());
    QCOMPARE(unfiltered.byStack.size(), size_t(3));
    QCOMPARE(report::diffFolded(unfiltered, { model::DiffGrouping::Stack, 0 }),
             std::string("libc.so:0:__libc_start_main 1024\n"
                         "call.c:7:_PyObject_Call;model.py:3:forward 512\n"
                         "ceval.c:100:PyEval_EvalFrame;model.py:3:forward -512\n"));
}

void TestDiff::segmentsMatchLikePyTorchCompare()
{
    // PyTorch's compare lists segments only in one side by (address, total_size); the diff finds the same ones.
    const auto a = load("mlp_train.pickle"), b = load("transformer_train.pickle");
    QVERIFY(a && b);
    const DiffResult r = model::computeDiff(side(a), side(b));
    QVERIFY(r.ok());
    std::set<std::pair<model::DeviceAddr, ByteCount>> ka, kb;
    for (const auto& seg : a->segments)
        ka.insert({ seg.address, seg.totalSize });
    for (const auto& seg : b->segments)
        kb.insert({ seg.address, seg.totalSize });
    int64_t onlyA = 0, onlyB = 0;
    for (const auto& k : ka)
        onlyA += !kb.count(k);
    for (const auto& k : kb)
        onlyB += !ka.count(k);
    QCOMPARE(r.segments.onlyA.count, onlyA);
    QCOMPARE(r.segments.onlyB.count, onlyB);
    QCOMPARE(int64_t(r.segmentList.size()), r.segments.onlyA.count + r.segments.onlyB.count + r.segments.both.count);
    QCOMPARE(r.segmentList.front().status, model::DiffSegmentStatus::OnlyB);
    // The reference compare output has one line per block of those segments, prefixed only_before / only_after.
    QFile ref(QString::fromStdString(test::referencePath("mlp_train__transformer_train.compare.folded")));
    QVERIFY(ref.open(QIODevice::ReadOnly));
    std::set<std::string> refSegments[2];
    for (const QByteArray& line : ref.readAll().split('\n')) {
        if (line.isEmpty())
            continue;
        const QList<QByteArray> parts = line.split(';');
        refSegments[parts[0] == "only_after" ? 1 : 0].insert(parts[1].toStdString() + ";" + parts[2].toStdString());
    }
    QCOMPARE(int64_t(refSegments[0].size()), onlyA);
    QCOMPARE(int64_t(refSegments[1].size()), onlyB);
}

void TestDiff::sideErrors_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<qint64>("index");
    QTest::addColumn<int>("device");
    QTest::addColumn<int>("code");
    QTest::addColumn<QString>("message");
    QTest::newRow("index past the end") << "diff_after.pickle" << qint64(471) << -1
                                        << int(model::DiffErrorCode::IndexOutOfRange)
                                        << "index 471 is beyond the trace of device 0, which has 470 entries";
    QTest::newRow("last index is fine") << "diff_after.pickle" << qint64(470) << -1 << int(model::DiffErrorCode::None)
                                        << "";
    QTest::newRow("index with two traced devices")
        << "two_device.pickle" << qint64(3) << -1 << int(model::DiffErrorCode::AmbiguousTrace)
        << "devices 0, 1 have traces";
    QTest::newRow("index on one of two devices")
        << "two_device.pickle" << qint64(3) << 1 << int(model::DiffErrorCode::None) << "";
    QTest::newRow("no such device") << "diff_after.pickle" << qint64(model::EndOfTrace) << 4
                                    << int(model::DiffErrorCode::NoSuchDevice) << "no device 4";
    QTest::newRow("negative index") << "diff_after.pickle" << qint64(-5) << -1
                                    << int(model::DiffErrorCode::IndexOutOfRange) << "beyond the trace";
}

void TestDiff::sideErrors()
{
    QFETCH(QString, file);
    QFETCH(qint64, index);
    QFETCH(int, device);
    QFETCH(int, code);
    QFETCH(QString, message);
    DiffSide a = side(load(file.toStdString()), index, device);
    a.name = "A.pickle";
    const DiffResult r = model::computeDiff(a, side(load(file.toStdString()), model::EndOfTrace, device));
    QCOMPARE(int(r.errorCode), code);
    if (code != int(model::DiffErrorCode::None)) {
        QVERIFY2(QString::fromStdString(r.error).contains(message), r.error.c_str());
        QVERIFY2(QString::fromStdString(r.error).startsWith(QLatin1String("A.pickle: ")), r.error.c_str());
    }
    // A snapshot without a trace: only index 0 (its one state) exists.
    const auto noTrace = makeSnapshot({ { 512, { { "f", "a.py", 1 } } } });
    QVERIFY(model::computeDiff(side(noTrace, 0), side(noTrace)).ok());
    QCOMPARE(model::computeDiff(side(noTrace, 1), side(noTrace)).errorCode, model::DiffErrorCode::IndexOutOfRange);
    QCOMPARE(model::computeDiff(DiffSide {}, side(noTrace)).errorCode, model::DiffErrorCode::NoSnapshot);
}

void TestDiff::differentialCallTree()
{
    const DiffResult r = model::computeDiff(side(load("diff_before.pickle")), side(load("diff_after.pickle")));
    QVERIFY(r.ok());
    const model::CallTree tree = model::diffCallTree(r);
    QCOMPARE(tree.root().bytes, LeakBytes + LossBytes);
    QCOMPARE(tree.root().count, LeakCount + LossCount);
    const model::CallNodeId leak = tree.find(*r.frames, r.byStack[0].stack);
    QVERIFY(leak != model::NoCallNode);
    QCOMPARE(tree.node(leak).selfBytes, LeakBytes);
    QCOMPARE(tree.node(leak).key, 0u); // the row index
    // Signed costs: the reversed diff is the same tree with negated costs.
    const DiffResult back = model::computeDiff(side(load("diff_after.pickle")), side(load("diff_before.pickle")));
    const model::CallTree negative = model::diffCallTree(back);
    QCOMPARE(negative.root().bytes, -(LeakBytes + LossBytes));
    const std::vector<model::CallSample> samples = model::diffCallSamples(back);
    QCOMPARE(samples.size(), size_t(2));
    QCOMPARE(samples[0].bytes + samples[1].bytes, -(LeakBytes + LossBytes));
    // Bottom-up: the allocating frames are the root's children.
    const model::CallTree bottomUp = model::diffCallTree(r, { model::CallTreeDirection::BottomUp, true });
    QCOMPARE(bottomUp.root().bytes, LeakBytes + LossBytes);
    QCOMPARE(bottomUp.children(model::CallTreeRoot).size(), size_t(2));
}

void TestDiff::foldedOutputs()
{
    const DiffResult r = model::computeDiff(side(load("diff_before.pickle")), side(load("diff_after.pickle")));
    QVERIFY(r.ok());
    QCOMPARE(report::diffFolded(r), std::string(LeakStack) + " 9486336\n" + std::string(LossStack) + " 3072\n");
    QCOMPARE(report::diffFolded(r, { model::DiffGrouping::Stack, 1 }), std::string(LeakStack) + " 9486336\n");
    const std::string sized = report::diffFolded(r, { model::DiffGrouping::StackAndSize, 0 });
    QVERIFY(QString::fromStdString(sized).contains(QLatin1String(";gen_snapshots.py:122:step;<512 B> 3072\n")));
    QCOMPARE(QString::fromStdString(sized).count(QLatin1Char('\n')), 4);
    QVERIFY(report::diffFolded(r, { model::DiffGrouping::Segment, 0 }).empty());
    // Two columns, every stack live on either side (flamegraph.pl's differential input); Σ columns == active bytes.
    ByteCount sumA = 0, sumB = 0;
    const std::string two = report::diffFoldedTwoColumn(r);
    for (const QByteArray& line : QByteArray::fromStdString(two).split('\n')) {
        if (line.isEmpty())
            continue;
        const QList<QByteArray> parts = line.split(' ');
        QVERIFY(parts.size() >= 3);
        sumA += parts[parts.size() - 2].toLongLong();
        sumB += parts.back().toLongLong();
    }
    QCOMPARE(sumA, r.totals.front().a.active);
    QCOMPARE(sumB, r.totals.front().b.active);
    QVERIFY(QString::fromStdString(two).startsWith(QString::fromLatin1(LeakStack) + QLatin1String(" 0 9486336\n")));
}

void TestDiff::jsonOutput()
{
    DiffSide a = side(load("diff_before.pickle")), b = side(load("diff_after.pickle"));
    a.name = "diff_before.pickle";
    b.name = "diff_after.pickle";
    const DiffResult r = model::computeDiff(a, b);
    QVERIFY(r.ok());
    QJsonParseError error;
    const QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString(report::diffJson(r)), &error);
    QVERIFY2(error.error == QJsonParseError::NoError, qPrintable(error.errorString()));
    const QJsonObject o = doc.object();
    QCOMPARE(o[QLatin1String("format")].toString(), QLatin1String("memscope-diff"));
    QCOMPARE(o[QLatin1String("version")].toInt(), 1);
    QCOMPARE(o[QLatin1String("a")][QLatin1String("name")].toString(), QLatin1String("diff_before.pickle"));
    QCOMPARE(o[QLatin1String("a")][QLatin1String("device")].toString(), QLatin1String("all"));
    QVERIFY(o[QLatin1String("a")][QLatin1String("index")].isNull());
    QCOMPARE(o[QLatin1String("same_trace")].toBool(), false);
    QVERIFY(o[QLatin1String("lifetimes")].isNull());
    QCOMPARE(o[QLatin1String("growth")][QLatin1String("bytes")].toInteger(), LeakBytes + LossBytes);
    const QJsonArray totals = o[QLatin1String("totals")].toArray();
    QCOMPARE(totals.size(), qsizetype(r.totals.size()));
    QCOMPARE(totals[0][QLatin1String("scope")].toString(), QLatin1String("all"));
    QCOMPARE(totals[0][QLatin1String("delta")][QLatin1String("allocations")].toInteger(), LeakCount + LossCount);
    QCOMPARE(totals[0][QLatin1String("a")][QLatin1String("reserved")].toInteger(), r.totals[0].a.reserved);
    QCOMPARE(totals[2][QLatin1String("pool")].toArray().size(), 2);
    QCOMPARE(o[QLatin1String("segments")][QLatin1String("both")][QLatin1String("count")].toInteger(),
             r.segments.both.count);
    QCOMPARE(o[QLatin1String("by")].toString(), QLatin1String("stack"));
    const QJsonArray rows = o[QLatin1String("rows")].toArray();
    QCOMPARE(rows.size(), qsizetype(r.byStack.size()));
    QCOMPARE(o[QLatin1String("row_count")].toInteger(), qint64(r.byStack.size()));
    const QJsonObject top = rows[0].toObject();
    QCOMPARE(top[QLatin1String("folded")].toString(), QLatin1String(LeakStack));
    QCOMPARE(top[QLatin1String("delta")][QLatin1String("bytes")].toInteger(), LeakBytes);
    QCOMPARE(top[QLatin1String("delta")][QLatin1String("count")].toInteger(), LeakCount);
    QCOMPARE(top[QLatin1String("b")][QLatin1String("count")].toInteger(), LeakCount);
    const QJsonArray frames = top[QLatin1String("frames")].toArray();
    QCOMPARE(frames[0][QLatin1String("name")].toString(), QLatin1String("step"));
    QCOMPARE(frames[0][QLatin1String("line")].toInt(), 126);
    QVERIFY(frames[0][QLatin1String("filename")].toString().endsWith(QLatin1String("gen_snapshots.py")));

    // --top and the other groupings.
    const QJsonObject limited
        = QJsonDocument::fromJson(
              QByteArray::fromStdString(report::diffJson(r, { model::DiffGrouping::StackAndSize, 3 })))
              .object();
    QCOMPARE(limited[QLatin1String("rows")].toArray().size(), 3);
    QVERIFY(limited[QLatin1String("rows")][0][QLatin1String("size")].toInteger() > 0);
    const QJsonObject segs
        = QJsonDocument::fromJson(QByteArray::fromStdString(report::diffJson(r, { model::DiffGrouping::Segment, 0 })))
              .object();
    QCOMPARE(segs[QLatin1String("rows")].toArray().size(), qsizetype(r.segmentList.size()));
    QCOMPARE(segs[QLatin1String("rows")][0][QLatin1String("status")].toString(), QLatin1String("both"));

    // Same trace: lifetimes and per-row new / freed.
    const auto t = load("transformer_train.pickle");
    const DiffResult same = model::computeDiff(side(t, 3000), side(t, 6000));
    const QJsonObject so = QJsonDocument::fromJson(QByteArray::fromStdString(report::diffJson(same))).object();
    QCOMPARE(so[QLatin1String("same_trace")].toBool(), true);
    QCOMPARE(so[QLatin1String("a")][QLatin1String("index")].toInteger(), 3000);
    QCOMPARE(so[QLatin1String("a")][QLatin1String("entries")].toInteger(), qint64(t->deviceTraces[0].size()));
    QCOMPARE(so[QLatin1String("lifetimes")][QLatin1String("new")][QLatin1String("count")].toInteger(),
             same.lifetimes.newAllocations.count);
    QVERIFY(so[QLatin1String("rows")][0].toObject().contains(QLatin1String("new")));
}

void TestDiff::textOutput()
{
    DiffSide a = side(load("diff_before.pickle")), b = side(load("diff_after.pickle"));
    a.name = "diff_before.pickle";
    b.name = "diff_after.pickle";
    const DiffResult r = model::computeDiff(a, b);
    const QString text = QString::fromStdString(report::diffText(r));
    QVERIFY(text.contains(QLatin1String("  A: diff_before.pickle, final state, all devices\n")));
    QVERIFY(text.contains(QLatin1String("  allocations                     14            23            +9\n")));
    QVERIFY(text.contains(QLatin1String("top growth by call stack: 2 stacks grew by +9.0MiB (+9489408 B) in +9 "
                                        "allocations\n     +9.0MiB (+9486336 B)  +3 allocs   A: 0.0B in 0   B: "
                                        "9.0MiB in 3\n        gen_snapshots.py:126:step\n")));
    QVERIFY(text.contains(QLatin1String("top shrink by call stack: none\n")));
    QVERIFY(text.contains(QLatin1String("0 only in A (0.0B), 0 only in B (0.0B)")));
    const QString segments = QString::fromStdString(report::diffText(r, { model::DiffGrouping::Segment, 10 }));
    QVERIFY(segments.contains(QLatin1String("segments in both whose active bytes changed: 2 of 2\n")));
}

void TestDiff::commandLine_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("out"); // a substring of stdout ("" : anything)
    QTest::addColumn<QString>("err"); // a substring of stderr ("" : must be empty)
    const QString before = snap("diff_before.pickle"), after = snap("diff_after.pickle");
    const QString two = snap("two_device.pickle");
    QTest::newRow("text report") << QStringList { before, after } << 0 << "top growth by call stack"
                                 << "";
    QTest::newRow("json") << QStringList { before, after, QStringLiteral("--format"), QStringLiteral("json") } << 0
                          << "\"format\": \"memscope-diff\""
                          << "";
    QTest::newRow("folded, option=value form") << QStringList { before, after, QStringLiteral("--format=folded") } << 0
                                               << "gen_snapshots.py:126:step 9486336\n"
                                               << "";
    QTest::newRow("difffolded") << QStringList { before, after, QStringLiteral("--format"),
                                                 QStringLiteral("difffolded") }
                                << 0 << "gen_snapshots.py:126:step 0 9486336\n"
                                << "";
    QTest::newRow("by stack+size, top 1") << QStringList { before,
                                                           after,
                                                           QStringLiteral("--by"),
                                                           QStringLiteral("stack+size"),
                                                           QStringLiteral("--top"),
                                                           QStringLiteral("1") }
                                          << 0 << "top growth by stack and size"
                                          << "";
    QTest::newRow("by segment") << QStringList { before, after, QStringLiteral("--by"), QStringLiteral("segment") } << 0
                                << "segments only in B: none"
                                << "";
    QTest::newRow("same file at two cursors: exact lifetimes")
        << QStringList { after + QLatin1String("@100"), after + QLatin1String("@200") } << 0
        << "allocations (same trace, exact): 9 new"
        << "";
    QTest::newRow("a file against itself") << QStringList { before, before } << 0 << "no change"
                                           << "";
    QTest::newRow("growth under the threshold")
        << QStringList { before, after, QStringLiteral("--fail-if-growth"), QStringLiteral("10MiB") } << 0 << ""
        << "";
    QTest::newRow("growth over the threshold")
        << QStringList { before, after, QStringLiteral("--fail-if-growth"), QStringLiteral("9489407") } << 3
        << "top growth"
        << "active bytes grew by 9.0MiB (9489408 B)";
    QTest::newRow("growth equal to the threshold")
        << QStringList { before, after, QStringLiteral("--fail-if-growth"), QStringLiteral("9489408") } << 0 << ""
        << "";
    QTest::newRow("reserved growth is zero")
        << QStringList { before, after, QStringLiteral("--fail-if-growth=0"), QStringLiteral("--growth-of=reserved") }
        << 0 << ""
        << "";
    QTest::newRow("shrink is no growth") << QStringList { after, before, QStringLiteral("--fail-if-growth"),
                                                          QStringLiteral("0") }
                                         << 0 << "top shrink"
                                         << "";
    QTest::newRow("one device of two") << QStringList { two + QLatin1String("@5"), two, QStringLiteral("--device"),
                                                        QStringLiteral("1") }
                                       << 0 << "device 1's trace"
                                       << "";
    QTest::newRow("peak against the end, by moment")
        << QStringList { snap("transformer_train.pickle") + QLatin1String("@peak"), snap("transformer_train.pickle") }
        << 0 << "state 9796 of 11137"
        << "";
    QTest::newRow("an annotation against the next one")
        << QStringList { after + QLatin1String("@Optimizer.step#SGD.step"),
                         after + QLatin1String("@Optimizer.step#SGD.step:end") }
        << 0 << "allocations (same trace, exact)"
        << "";
    QTest::newRow("the OOM against the end")
        << QStringList { snap("oom.pickle") + QLatin1String("@oom"), snap("oom.pickle") } << 0 << "state 51 of 77"
        << "";
    // Errors.
    QTest::newRow("no OOM to go to") << QStringList { after + QLatin1String("@oom"), after } << 2 << ""
                                     << "the trace has no OOM";
    QTest::newRow("no such annotation") << QStringList { after + QLatin1String("@step_9"), after } << 2 << ""
                                        << "no annotation named 'step_9'";
    QTest::newRow("one file") << QStringList { before } << 2 << ""
                              << "needs exactly two snapshots";
    QTest::newRow("three files") << QStringList { before, after, before } << 2 << ""
                                 << "needs exactly two snapshots";
    QTest::newRow("unknown option") << QStringList { before, after, QStringLiteral("--bogus") } << 2 << ""
                                    << "unknown option '--bogus'";
    QTest::newRow("bad format") << QStringList { before, after, QStringLiteral("--format"), QStringLiteral("xml") } << 2
                                << ""
                                << "unknown format 'xml'";
    QTest::newRow("bad grouping") << QStringList { before, after, QStringLiteral("--by"), QStringLiteral("file") } << 2
                                  << ""
                                  << "unknown --by 'file'";
    QTest::newRow("missing value") << QStringList { before, after, QStringLiteral("--top") } << 2 << ""
                                   << "--top needs a number";
    QTest::newRow("bad top") << QStringList { before, after, QStringLiteral("--top"), QStringLiteral("-3") } << 2 << ""
                             << "--top needs a number, not '-3'";
    QTest::newRow("bad threshold") << QStringList { before, after, QStringLiteral("--fail-if-growth"),
                                                    QStringLiteral("lots") }
                                   << 2 << ""
                                   << "--fail-if-growth needs a byte count";
    QTest::newRow("folded by segment") << QStringList { before, after, QStringLiteral("--format=folded"),
                                                        QStringLiteral("--by=segment") }
                                       << 2 << ""
                                       << "folded output is by call stack";
    QTest::newRow("index beyond the trace") << QStringList { after + QLatin1String("@9999"), after } << 2 << ""
                                            << "index 9999 is beyond the trace of device 0, which has 470 entries";
    QTest::newRow("index with two traced devices") << QStringList { two + QLatin1String("@5"), two } << 2 << ""
                                                   << "--device";
    QTest::newRow("unreadable file") << QStringList { QStringLiteral("/nonexistent/x.pickle"), after } << 1 << ""
                                     << "/nonexistent/x.pickle: cannot open";
    QTest::newRow("not a snapshot") << QStringList { before, QString::fromStdString(test::dataPath("README.md")) } << 1
                                    << ""
                                    << "README.md: ";
}

void TestDiff::commandLine()
{
    QFETCH(QStringList, args);
    QFETCH(int, status);
    QFETCH(QString, out);
    QFETCH(QString, err);
    const DiffCommandOutput r = command(args);
    QCOMPARE(r.exitCode, status);
    QVERIFY2(QString::fromStdString(r.out).contains(out), r.out.c_str());
    if (err.isEmpty())
        QVERIFY2(r.err.empty(), r.err.c_str());
    else
        QVERIFY2(QString::fromStdString(r.err).contains(err), r.err.c_str());
    if (status == 2 && !args.isEmpty() && QString::fromStdString(r.err).contains(QLatin1String("needs")))
        QVERIFY(QString::fromStdString(r.err).contains(QLatin1String("usage: memscope-cli diff")));
    if (status == 1) {
        QVERIFY(r.out.empty());
        QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n'), 1); // one line naming the file and the reason
    }
}

void TestDiff::byteCounts_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("ok");
    QTest::addColumn<qint64>("bytes");
    QTest::newRow("plain") << "1048576" << true << qint64(1048576);
    QTest::newRow("zero") << "0" << true << qint64(0);
    QTest::newRow("bytes suffix") << "512B" << true << qint64(512);
    QTest::newRow("KiB") << "4KiB" << true << qint64(4096);
    QTest::newRow("K") << "4K" << true << qint64(4096);
    QTest::newRow("MB means MiB") << "10MB" << true << qint64(10 << 20);
    QTest::newRow("fractional GiB") << "1.5GiB" << true << qint64(3) * (1 << 29);
    QTest::newRow("lower case") << "2mib" << true << qint64(2 << 20);
    QTest::newRow("negative") << "-1" << false << qint64(0);
    QTest::newRow("empty") << "" << false << qint64(0);
    QTest::newRow("unit only") << "MiB" << false << qint64(0);
    QTest::newRow("unknown unit") << "3XB" << false << qint64(0);
    QTest::newRow("two dots") << "1.2.3" << false << qint64(0);
    QTest::newRow("trailing junk") << "12MiBs" << false << qint64(0);
}

void TestDiff::byteCounts()
{
    QFETCH(QString, text);
    QFETCH(bool, ok);
    QFETCH(qint64, bytes);
    ByteCount got = -1;
    QCOMPARE(parseByteCount(text.toStdString(), got), ok);
    if (ok)
        QCOMPARE(got, bytes);
}

void TestDiff::sideSpecs_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<bool>("ok");
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("moment"); // model::momentSpec of the parsed moment
    QTest::addColumn<int>("kind");
    using K = model::MomentKind;
    QTest::newRow("file") << "a.pickle" << true << "a.pickle"
                          << "end" << int(K::End);
    QTest::newRow("file at index") << "a.pickle@123" << true << "a.pickle"
                                   << "123" << int(K::Index);
    QTest::newRow("file at zero") << "a.pickle@0" << true << "a.pickle"
                                  << "0" << int(K::Index);
    QTest::newRow("file at end") << "a.pickle@end" << true << "a.pickle"
                                 << "end" << int(K::End);
    QTest::newRow("@ inside the name") << "runs/job@3/a.pickle" << true << "runs/job@3/a.pickle"
                                       << "end" << int(K::End);
    QTest::newRow("@ inside the name and an index") << "job@3/a.pickle@7" << true << "job@3/a.pickle"
                                                    << "7" << int(K::Index);
    QTest::newRow("@ in a file name") << "run@2.pickle" << true << "run@2.pickle"
                                      << "end" << int(K::End);
    QTest::newRow("no index after @") << "a.pickle@" << true << "a.pickle@"
                                      << "end" << int(K::End);
    QTest::newRow("no file") << "@12" << false << ""
                             << "end" << int(K::End);
    QTest::newRow("peak") << "a.pickle@peak" << true << "a.pickle"
                          << "peak" << int(K::PeakAllocated);
    QTest::newRow("peak-allocated") << "a.pickle@peak-allocated" << true << "a.pickle"
                                    << "peak" << int(K::PeakAllocated);
    QTest::newRow("peak-reserved") << "a.pickle@peak-reserved" << true << "a.pickle"
                                   << "peak-reserved" << int(K::PeakReserved);
    QTest::newRow("oom") << "a.pickle@oom" << true << "a.pickle"
                         << "oom" << int(K::Oom);
    QTest::newRow("third oom") << "a.pickle@oom3" << true << "a.pickle"
                               << "oom3" << int(K::Oom);
    QTest::newRow("third oom, dashed") << "a.pickle@oom-3" << true << "a.pickle"
                                       << "oom3" << int(K::Oom);
    QTest::newRow("largest") << "a.pickle@largest" << true << "a.pickle"
                             << "largest" << int(K::Largest);
    QTest::newRow("annotation") << "a.pickle@step_3" << true << "a.pickle"
                                << "step_3" << int(K::Annotation);
    QTest::newRow("annotation with dots") << "a.pickle@Optimizer.step#AdamW.step" << true << "a.pickle"
                                          << "Optimizer.step#AdamW.step" << int(K::Annotation);
    QTest::newRow("annotation's end") << "a.pickle@step_3:end" << true << "a.pickle"
                                      << "step_3:end" << int(K::Annotation);
    QTest::newRow("oom-like annotation") << "a.pickle@oom_guard" << true << "a.pickle"
                                         << "oom_guard" << int(K::Annotation);
}

void TestDiff::sideSpecs()
{
    QFETCH(QString, text);
    QFETCH(bool, ok);
    QFETCH(QString, path);
    QFETCH(QString, moment);
    QFETCH(int, kind);
    std::string gotPath, error;
    model::Moment got;
    QCOMPARE(model::parseDiffSideSpec(text.toStdString(), gotPath, got, error), ok);
    if (ok) {
        QCOMPARE(QString::fromStdString(gotPath), path);
        QCOMPARE(QString::fromStdString(model::momentSpec(got)), moment);
        QCOMPARE(int(got.kind), kind);
    } else {
        QVERIFY(!error.empty());
    }
}

QTEST_GUILESS_MAIN(TestDiff)
#include "tst_diff.moc"
