// Tests of model::CallTree (common/model/calltree.h): hand-made stacks whose trees are written out in full, signed
// (diff) costs, and every real snapshot in ../shared/snapshots at several cursor positions, both directions, with
// and without PyTorch's frame filter, against an independent brute-force aggregation keyed by call-path string.
// Also QBENCHMARKs of the build (never timed assertions). Test thread only.
#include "io/snapshotio.h"
#include "model/calltree.h"
#include "model/framefilter.h"
#include "model/replay.h"
#include "report/memoryviz.h"
#include "testutil.h"

#include <QDir>
#include <QTest>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace memscope;
using model::CallNode;
using model::CallNodeId;
using model::CallSample;
using model::CallTree;
using model::CallTreeDirection;
using model::CallTreeOptions;
using model::FrameId;

Q_DECLARE_METATYPE(CallTreeDirection)

namespace {

struct Loaded {
    std::shared_ptr<const model::Snapshot> snapshot;
    std::vector<model::Replay> replays;
};

// Snapshots (and their replays) are loaded once per process: big_trace takes a while to decompress.
const Loaded& load(const std::string& name)
{
    static std::map<std::string, Loaded> cache;
    Loaded& slot = cache[name];
    if (!slot.snapshot) {
        io::LoadResult result = io::loadSnapshot(test::snapshotPath(name));
        if (!result.ok()) {
            qWarning("%s: %s", name.c_str(), result.error.message.c_str());
            return slot;
        }
        slot.snapshot = result.snapshot;
        slot.replays = model::Replay::buildAll(*slot.snapshot);
    }
    return slot;
}

QStringList snapshotFiles()
{
    const QDir dir(QString::fromStdString(test::snapshotPath("")));
    return dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
}

// ---- hand-made snapshots ----

// Frames are named by single words; a name starting with "PyEval_" is one keepFrame hides.
struct Made {
    model::Snapshot snapshot;
    std::vector<CallSample> samples;
};

// Each sample is "outer;middle;inner bytes count" ("- bytes count" for an empty stack).
Made makeSamples(const QStringList& lines)
{
    Made m;
    model::StackInterner interner(m.snapshot);
    const model::StringId file = m.snapshot.strings.intern("/src/model.py");
    uint32_t key = 0;
    for (const QString& line : lines) {
        const QStringList parts = line.split(QLatin1Char(' '));
        std::vector<FrameId> frames; // innermost first, as snapshots store them
        if (parts[0] != QLatin1String("-")) {
            const QStringList names = parts[0].split(QLatin1Char(';'));
            for (qsizetype i = names.size(); i-- > 0;)
                frames.push_back(interner.frame(m.snapshot.strings.intern(names[i].toStdString()), file, 1));
        }
        m.samples.push_back({ interner.stack(frames), parts[1].toLongLong(), parts[2].toLongLong(), key++ });
    }
    return m;
}

std::string frameText(const model::Snapshot& s, FrameId f)
{
    if (f == model::NoStackFrame)
        return "<no stack>";
    if (f == model::HiddenFramesFrame)
        return "<hidden>";
    if (f == model::RootFrame)
        return "<root>";
    return std::string(s.str(s.frame(f).name));
}

// Pre-order: "path bytes count selfBytes selfCount" per node, children in tree order.
void dump(const CallTree& t, const model::Snapshot& s, CallNodeId id, const std::string& prefix, QStringList& out)
{
    const CallNode& n = t.node(id);
    const std::string path = id == model::CallTreeRoot ? "<root>"
        : prefix.empty()                               ? frameText(s, n.frame)
                                                       : prefix + ";" + frameText(s, n.frame);
    out << QStringLiteral("%1 %2 %3 %4 %5")
               .arg(QString::fromStdString(path))
               .arg(n.bytes)
               .arg(n.count)
               .arg(n.selfBytes)
               .arg(n.selfCount);
    for (uint32_t r = 0; r < n.childCount; ++r)
        dump(t, s, t.childId(id, r), id == model::CallTreeRoot ? std::string() : path, out);
}

// ---- structural invariants ----

// "" when every structural invariant holds, else the first broken one.
std::string checkInvariants(const CallTree& t)
{
    const auto nodes = t.nodes();
    if (nodes.empty() || nodes[0].parent != model::NoCallNode || nodes[0].depth != 0)
        return "bad root";
    uint32_t maxDepth = 0;
    for (uint32_t i = 0; i < nodes.size(); ++i) {
        const CallNode& n = nodes[i];
        maxDepth = std::max(maxDepth, n.depth);
        int64_t bytes = n.selfBytes, count = n.selfCount;
        uint32_t samples = 0;
        for (uint32_t c = 0; c < n.childCount; ++c) {
            const CallNode& ch = nodes[n.firstChild + c];
            bytes += ch.bytes;
            count += ch.count;
            samples += ch.samples;
            if (ch.parent != CallNodeId { i })
                return "node " + std::to_string(n.firstChild + c) + ": wrong parent";
            if (ch.depth != n.depth + 1)
                return "node " + std::to_string(n.firstChild + c) + ": wrong depth";
            if (t.row(CallNodeId { n.firstChild + c }) != c)
                return "node " + std::to_string(n.firstChild + c) + ": wrong row";
            if (c > 0 && nodes[n.firstChild + c - 1].bytes < ch.bytes)
                return "children of node " + std::to_string(i) + " not by bytes descending";
            if (model::isPseudoFrame(ch.frame) && ch.frame != model::NoStackFrame
                && ch.frame != model::HiddenFramesFrame)
                return "root frame below the root";
        }
        if (bytes != n.bytes)
            return "node " + std::to_string(i) + ": inclusive bytes != self + children";
        if (count != n.count)
            return "node " + std::to_string(i) + ": inclusive count != self + children";
        if (samples > n.samples)
            return "node " + std::to_string(i) + ": fewer samples than its children";
        std::set<uint32_t> frames;
        for (uint32_t c = 0; c < n.childCount; ++c)
            if (!frames.insert(model::raw(nodes[n.firstChild + c].frame)).second)
                return "node " + std::to_string(i) + ": two children with one frame";
    }
    if (maxDepth != t.maxDepth())
        return "maxDepth";
    return {};
}

// ---- the brute-force oracle ----

struct Cost {
    int64_t bytes = 0, count = 0, selfBytes = 0, selfCount = 0;
    bool operator==(const Cost&) const = default;
};

// The path of a sample written independently of calltree.cpp: frame ids as decimal, ';'-joined, root's child first.
std::vector<std::string> bruteForcePath(const model::Snapshot& s, model::StackId stack, const CallTreeOptions& o)
{
    std::vector<FrameId> frames(s.stackBegin(stack), s.stackEnd(stack)); // innermost first
    if (o.direction == CallTreeDirection::TopDown)
        std::reverse(frames.begin(), frames.end());
    // With hideInternal: the site, the innermost frame of the user's code or a library's, found here by a walk of
    // its own (innermost first, the first not internal; else siteIndex's fallbacks, taken from it).
    int site = -1;
    if (o.frameFilter && o.hideInternal && !frames.empty()) {
        for (uint32_t i = 0; i < s.stackSize(stack) && site < 0; ++i) {
            const model::Frame& fr = s.frame(s.stackBegin(stack)[i]);
            if (!model::isInternalFrame(s.str(fr.name), s.str(fr.filename)))
                site = int(i);
        }
        if (site < 0)
            site = model::siteIndex(s, stack);
    }
    const FrameId siteFrame = site >= 0 ? s.stackBegin(stack)[site] : FrameId { UINT32_MAX };
    std::vector<std::string> out;
    for (FrameId f : frames) {
        const model::Frame& fr = s.frame(f);
        const bool internal = o.hideInternal && model::isInternalFrame(s.str(fr.name), s.str(fr.filename));
        if (o.frameFilter && f != siteFrame && (!model::keepFrame(s.str(fr.name), s.str(fr.filename)) || internal))
            continue;
        out.push_back(std::to_string(model::raw(f)));
    }
    if (frames.empty())
        out = { "nostack" };
    else if (out.empty())
        out = { "hidden" };
    return out;
}

std::map<std::string, Cost> bruteForce(const model::Snapshot& s, const std::vector<CallSample>& samples,
                                       const CallTreeOptions& o)
{
    std::map<std::string, Cost> out;
    for (const CallSample& sample : samples) {
        const auto path = bruteForcePath(s, sample.stack, o);
        Cost& root = out[""];
        root.bytes += sample.bytes;
        root.count += sample.count;
        std::string key;
        for (size_t k = 0; k < path.size(); ++k) {
            key += (k ? ";" : "") + path[k];
            Cost& c = out[key];
            c.bytes += sample.bytes;
            c.count += sample.count;
            if (k + 1 == path.size()) {
                c.selfBytes += sample.bytes;
                c.selfCount += sample.count;
            }
        }
        if (path.empty()) {
            root.selfBytes += sample.bytes;
            root.selfCount += sample.count;
        }
    }
    return out;
}

std::string treePathKey(const CallTree& t, CallNodeId id)
{
    std::string key;
    for (FrameId f : t.framePath(id)) {
        if (!key.empty())
            key += ';';
        key += f == model::NoStackFrame     ? "nostack"
            : f == model::HiddenFramesFrame ? "hidden"
                                            : std::to_string(model::raw(f));
    }
    return key;
}

// Cursor positions worth checking: the end, the peak, and a few in between (and 0 when the trace is empty).
std::vector<int64_t> cursorsOf(const model::Replay& r)
{
    std::vector<int64_t> out { r.entryCount(), r.peakActive().index, r.entryCount() / 2, r.entryCount() / 3 };
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

} // namespace

class TestCallTree : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void handMade_data()
    {
        QTest::addColumn<QStringList>("samples");
        QTest::addColumn<CallTreeDirection>("direction");
        QTest::addColumn<bool>("filter");
        QTest::addColumn<QStringList>("expected");

        const auto TD = CallTreeDirection::TopDown;
        const auto BU = CallTreeDirection::BottomUp;

        QTest::newRow("empty input: a root of zero cost")
            << QStringList() << TD << true << QStringList { QStringLiteral("<root> 0 0 0 0") };
        QTest::newRow("one sample, top-down")
            << QStringList { QStringLiteral("main;f;g 100 1") } << TD << true
            << QStringList { QStringLiteral("<root> 100 1 0 0"), QStringLiteral("main 100 1 0 0"),
                             QStringLiteral("main;f 100 1 0 0"), QStringLiteral("main;f;g 100 1 100 1") };
        QTest::newRow("one sample, bottom-up")
            << QStringList { QStringLiteral("main;f;g 100 1") } << BU << true
            << QStringList { QStringLiteral("<root> 100 1 0 0"), QStringLiteral("g 100 1 0 0"),
                             QStringLiteral("g;f 100 1 0 0"), QStringLiteral("g;f;main 100 1 100 1") };
        QTest::newRow("shared prefix, children by bytes descending")
            << QStringList { QStringLiteral("main;small 10 1"), QStringLiteral("main;big 300 2"),
                             QStringLiteral("main;mid 50 1"), QStringLiteral("main 7 1") }
            << TD << true
            << QStringList { QStringLiteral("<root> 367 5 0 0"), QStringLiteral("main 367 5 7 1"),
                             QStringLiteral("main;big 300 2 300 2"), QStringLiteral("main;mid 50 1 50 1"),
                             QStringLiteral("main;small 10 1 10 1") };
        QTest::newRow("same callee from two callers, bottom-up merges it")
            << QStringList { QStringLiteral("a;alloc 10 1"), QStringLiteral("b;alloc 20 1") } << BU << true
            << QStringList { QStringLiteral("<root> 30 2 0 0"), QStringLiteral("alloc 30 2 0 0"),
                             QStringLiteral("alloc;b 20 1 20 1"), QStringLiteral("alloc;a 10 1 10 1") };
        QTest::newRow("recursion keeps one node per depth")
            << QStringList { QStringLiteral("f;f;f 8 1"), QStringLiteral("f 2 1") } << TD << true
            << QStringList { QStringLiteral("<root> 10 2 0 0"), QStringLiteral("f 10 2 2 1"),
                             QStringLiteral("f;f 8 1 0 0"), QStringLiteral("f;f;f 8 1 8 1") };
        QTest::newRow("empty stack goes to <no stack>")
            << QStringList { QStringLiteral("- 64 1"), QStringLiteral("main 32 1") } << TD << true
            << QStringList { QStringLiteral("<root> 96 2 0 0"), QStringLiteral("<no stack> 64 1 64 1"),
                             QStringLiteral("main 32 1 32 1") };
        QTest::newRow("filter drops interpreter frames")
            << QStringList { QStringLiteral("main;PyEval_EvalFrame;f 16 1") } << TD << true
            << QStringList { QStringLiteral("<root> 16 1 0 0"), QStringLiteral("main 16 1 0 0"),
                             QStringLiteral("main;f 16 1 16 1") };
        QTest::newRow("filter off keeps them")
            << QStringList { QStringLiteral("main;PyEval_EvalFrame;f 16 1") } << TD << false
            << QStringList { QStringLiteral("<root> 16 1 0 0"), QStringLiteral("main 16 1 0 0"),
                             QStringLiteral("main;PyEval_EvalFrame 16 1 0 0"),
                             QStringLiteral("main;PyEval_EvalFrame;f 16 1 16 1") };
        QTest::newRow("every frame hidden goes to <hidden>")
            << QStringList { QStringLiteral("PyEval_A;PyEval_B 16 1") } << TD << true
            << QStringList { QStringLiteral("<root> 16 1 0 0"), QStringLiteral("<hidden> 16 1 16 1") };
        QTest::newRow("signed costs of a diff: growth first, shrinkage last")
            << QStringList { QStringLiteral("main;leak 4096 4"), QStringLiteral("main;freed -1024 -1"),
                             QStringLiteral("main;same 512 1"), QStringLiteral("main;same -512 -1") }
            << TD << true
            << QStringList { QStringLiteral("<root> 3072 3 0 0"), QStringLiteral("main 3072 3 0 0"),
                             QStringLiteral("main;leak 4096 4 4096 4"), QStringLiteral("main;same 0 0 0 0"),
                             QStringLiteral("main;freed -1024 -1 -1024 -1") };
        QTest::newRow("ties by count, then by first seen frame")
            << QStringList { QStringLiteral("x 10 1"), QStringLiteral("y 10 2"), QStringLiteral("z 10 1") } << TD
            << true
            << QStringList { QStringLiteral("<root> 30 4 0 0"), QStringLiteral("y 10 2 10 2"),
                             QStringLiteral("x 10 1 10 1"), QStringLiteral("z 10 1 10 1") };
    }

    void handMade()
    {
        QFETCH(QStringList, samples);
        QFETCH(CallTreeDirection, direction);
        QFETCH(bool, filter);
        QFETCH(QStringList, expected);

        const Made m = makeSamples(samples);
        const CallTree tree = CallTree::build(m.snapshot, m.samples, { direction, filter });
        QStringList got;
        dump(tree, m.snapshot, model::CallTreeRoot, {}, got);
        QCOMPARE(got, expected);
        const std::string broken = checkInvariants(tree);
        QVERIFY2(broken.empty(), broken.c_str());
        // find() lands where each sample's path ends, and a node reached by one sample carries its key.
        for (const CallSample& s : m.samples) {
            const CallNodeId at = tree.find(m.snapshot, s.stack);
            QVERIFY(at != model::NoCallNode);
            if (tree.node(at).samples == 1)
                QCOMPARE(tree.node(at).key, s.key);
        }
    }

    void builderPaths()
    {
        // The low-level builder takes oriented paths directly (what a diff of two snapshots would feed it).
        model::CallTreeBuilder b({ CallTreeDirection::TopDown, false });
        const FrameId a { 1 }, c { 2 }, d { 3 };
        b.add(std::vector<FrameId> { a, c }, 100, 1, 7);
        b.add(std::vector<FrameId> { a, d }, -40, -1, 8);
        b.add(std::vector<FrameId> {}, 5, 1);
        const CallTree t = b.finish();
        QCOMPARE(t.root().bytes, 65);
        QCOMPARE(t.root().selfBytes, 5);
        QCOMPARE(t.root().samples, 3u);
        const CallNodeId ac = t.findPath(std::vector<FrameId> { a, c });
        QVERIFY(ac != model::NoCallNode);
        QCOMPARE(t.node(ac).key, 7u);
        QCOMPARE(t.framePath(ac), (std::vector<FrameId> { a, c }));
        QCOMPARE(t.findPath(std::vector<FrameId> { c }), model::NoCallNode);
        QVERIFY(checkInvariants(t).empty());
        // The builder starts over after finish().
        QCOMPARE(b.finish().size(), size_t(1));
    }

    void realSnapshots_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<CallTreeDirection>("direction");
        QTest::addColumn<bool>("filter");
        QTest::addColumn<bool>("hideInternal");
        const QStringList files = snapshotFiles();
        QVERIFY2(files.contains(QStringLiteral("mlp_train.pickle")), "the shared snapshots are missing");
        for (const QString& f : files) {
            for (bool filter : { true, false }) {
                QTest::addRow("%s top-down%s", qPrintable(f), filter ? " filtered" : "")
                    << f << CallTreeDirection::TopDown << filter << false;
                QTest::addRow("%s bottom-up%s", qPrintable(f), filter ? " filtered" : "")
                    << f << CallTreeDirection::BottomUp << filter << false;
            }
            QTest::addRow("%s top-down, internal frames hidden", qPrintable(f))
                << f << CallTreeDirection::TopDown << true << true;
            QTest::addRow("%s bottom-up, internal frames hidden", qPrintable(f))
                << f << CallTreeDirection::BottomUp << true << true;
        }
    }

    void realSnapshots()
    {
        QFETCH(QString, file);
        QFETCH(CallTreeDirection, direction);
        QFETCH(bool, filter);
        QFETCH(bool, hideInternal);
        const Loaded& l = load(file.toStdString());
        QVERIFY(l.snapshot);
        const model::Snapshot& s = *l.snapshot;
        const CallTreeOptions options { direction, filter, hideInternal };
        size_t checkedNodes = 0;
        for (const model::Replay& r : l.replays) {
            for (int64_t cursor : cursorsOf(r)) {
                const model::ReplayState state = r.stateAt(cursor);
                std::vector<CallSample> samples;
                CallTree::appendActiveBlocks(state, samples);
                const CallTree tree = CallTree::build(s, samples, options);
                const std::string where = file.toStdString() + " device " + std::to_string(r.device()) + " cursor "
                    + std::to_string(cursor);

                // The root holds exactly the active blocks of the state.
                int64_t active = 0, blocks = 0;
                for (const model::ReplayBlock& b : state.blocks) {
                    if (b.state == model::BlockState::ActiveAllocated
                        || b.state == model::BlockState::ActivePendingFree) {
                        active += b.size;
                        ++blocks;
                    }
                }
                QVERIFY2(tree.root().bytes == active, where.c_str());
                QVERIFY2(tree.root().count == blocks, where.c_str());
                QCOMPARE(int64_t(tree.root().samples), blocks);
                if (cursor == r.entryCount() && state.strayBlocks == 0)
                    QCOMPARE(active, r.series().active[size_t(cursor)]);

                const std::string broken = checkInvariants(tree);
                QVERIFY2(broken.empty(), (where + ": " + broken).c_str());

                // Every node against the brute-force aggregation by path string, and nothing more.
                const auto oracle = bruteForce(s, samples, options);
                QVERIFY2(oracle.size() == tree.size() || (samples.empty() && tree.size() == 1), where.c_str());
                for (uint32_t i = 0; i < tree.size(); ++i) {
                    const CallNode& n = tree.nodes()[i];
                    const std::string key = treePathKey(tree, CallNodeId { i });
                    const auto it = oracle.find(key);
                    if (samples.empty())
                        break;
                    QVERIFY2(it != oracle.end(), (where + ": no such path " + key).c_str());
                    const Cost got { n.bytes, n.count, n.selfBytes, n.selfCount };
                    QVERIFY2(got == it->second, (where + ": costs differ at " + key).c_str());
                    ++checkedNodes;
                }

                // The filter removes exactly the frames keepFrame rejects.
                for (const CallNode& n : tree.nodes()) {
                    if (model::isPseudoFrame(n.frame))
                        continue;
                    const model::Frame& fr = s.frame(n.frame);
                    if (filter && !hideInternal) // (with it, a site PyTorch's filter drops may stay: checked below)
                        QVERIFY2(model::keepFrame(s.str(fr.name), s.str(fr.filename)), where.c_str());
                }
                if (filter) {
                    const CallTree unfiltered = CallTree::build(s, samples, { direction, false });
                    std::set<uint32_t> kept, expected;
                    for (const CallNode& n : tree.nodes())
                        if (!model::isPseudoFrame(n.frame))
                            kept.insert(model::raw(n.frame));
                    std::set<uint32_t> sites; // with hideInternal, every stack's site stays
                    for (const CallSample& sample : samples)
                        if (hideInternal && s.stackSize(sample.stack) > 0)
                            sites.insert(model::raw(s.stackBegin(sample.stack)[model::siteIndex(s, sample.stack)]));
                    for (const CallNode& n : unfiltered.nodes()) {
                        if (model::isPseudoFrame(n.frame))
                            continue;
                        const model::Frame& fr = s.frame(n.frame);
                        const bool internal
                            = hideInternal && model::isInternalFrame(s.str(fr.name), s.str(fr.filename));
                        if ((model::keepFrame(s.str(fr.name), s.str(fr.filename)) && !internal)
                            || sites.count(model::raw(n.frame)))
                            expected.insert(model::raw(n.frame));
                    }
                    QVERIFY2(kept == expected, where.c_str());
                    QCOMPARE(unfiltered.root().bytes, tree.root().bytes);
                }

                // The other direction has the same total, and its first level is this one's self cost by frame.
                const auto otherDirection = direction == CallTreeDirection::TopDown ? CallTreeDirection::BottomUp
                                                                                    : CallTreeDirection::TopDown;
                const CallTree other = CallTree::build(s, samples, { otherDirection, filter, hideInternal });
                QCOMPARE(other.root().bytes, tree.root().bytes);
                QCOMPARE(other.root().count, tree.root().count);
                std::map<uint32_t, int64_t> selfByFrame;
                for (const CallNode& n : tree.nodes())
                    if (n.selfBytes != 0 || n.selfCount != 0)
                        selfByFrame[model::raw(n.frame)] += n.selfBytes;
                for (const auto& [frame, bytes] : selfByFrame) {
                    const CallNodeId top = other.findChild(model::CallTreeRoot, FrameId { frame });
                    QVERIFY2(top != model::NoCallNode, where.c_str());
                    QVERIFY2(other.node(top).bytes == bytes, where.c_str());
                }

                // find() lands on the node of each sample's path; single-sample nodes carry its allocation.
                for (const CallSample& sample : samples) {
                    const CallNodeId at = tree.find(s, sample.stack);
                    QVERIFY2(at != model::NoCallNode, where.c_str());
                    QVERIFY(tree.node(at).selfCount >= 1);
                    if (tree.node(at).samples == 1)
                        QCOMPARE(tree.node(at).key, sample.key);
                }
            }
        }
        QVERIFY(checkedNodes > 0 || file.startsWith(QLatin1String("empty")));
    }

    void mlpStacksAreDeep()
    {
        // mlp_train was recorded with stacks='all': C++ and Python frames, ~50 deep (../shared/README.md).
        const Loaded& l = load("mlp_train.pickle");
        QVERIFY(l.snapshot);
        std::vector<CallSample> samples;
        CallTree::appendActiveBlocks(l.replays[0].stateAt(l.replays[0].entryCount()), samples);
        const CallTree unfiltered = CallTree::build(*l.snapshot, samples, { CallTreeDirection::TopDown, false });
        const CallTree filtered = CallTree::build(*l.snapshot, samples, { CallTreeDirection::TopDown, true });
        QVERIFY2(unfiltered.maxDepth() >= 40, QByteArray::number(unfiltered.maxDepth()).constData());
        QVERIFY(filtered.maxDepth() < unfiltered.maxDepth());
        QVERIFY(filtered.size() < unfiltered.size());
    }

    void benchmarkBuild_data()
    {
        QTest::addColumn<QString>("file"); // empty: synthetic
        QTest::addColumn<int>("blocks"); // synthetic only
        QTest::addColumn<CallTreeDirection>("direction");
        QTest::newRow("mlp_train peak, top-down")
            << QStringLiteral("mlp_train.pickle") << 0 << CallTreeDirection::TopDown;
        QTest::newRow("transformer_train peak, bottom-up")
            << QStringLiteral("transformer_train.pickle") << 0 << CallTreeDirection::BottomUp;
        QTest::newRow("big_trace peak, top-down")
            << QStringLiteral("big_trace.pickle.xz") << 0 << CallTreeDirection::TopDown;
        QTest::newRow("synthetic 3k blocks, 50 deep, top-down") << QString() << 3000 << CallTreeDirection::TopDown;
        QTest::newRow("synthetic 50k blocks, 50 deep, top-down") << QString() << 50000 << CallTreeDirection::TopDown;
        QTest::newRow("synthetic 50k blocks, 50 deep, bottom-up") << QString() << 50000 << CallTreeDirection::BottomUp;
        // No two stacks share more than their 20 outermost frames: the most nodes 50k blocks can make.
        QTest::newRow("worst case 3k blocks, 50 deep, top-down") << QString() << -3000 << CallTreeDirection::TopDown;
        QTest::newRow("worst case 50k blocks, 50 deep, top-down") << QString() << -50000 << CallTreeDirection::TopDown;
        QTest::newRow("worst case 50k blocks, 50 deep, bottom-up")
            << QString() << -50000 << CallTreeDirection::BottomUp;
    }

    void benchmarkBuild()
    {
        QFETCH(QString, file);
        QFETCH(int, blocks); // < 0: the worst case
        QFETCH(CallTreeDirection, direction);
        std::shared_ptr<const model::Snapshot> snapshot;
        std::vector<CallSample> samples;
        if (!file.isEmpty()) {
            const Loaded& l = load(file.toStdString());
            QVERIFY(l.snapshot);
            snapshot = l.snapshot;
            const model::Replay& r = l.replays[0];
            CallTree::appendActiveBlocks(r.stateAt(r.peakActive().index), samples);
        } else {
            // 50-deep stacks from 400 functions. Shared: 1,024 call sites, a call graph that branches two ways at
            // every fifth level (stacks share long prefixes, as a training loop's do). Worst case (blocks < 0): one
            // distinct stack per 3 blocks, every frame below the 20 outermost random.
            const bool worst = blocks < 0;
            blocks = std::abs(blocks);
            auto s = std::make_shared<model::Snapshot>();
            model::StackInterner interner(*s);
            const model::StringId fileName = s->strings.intern("/src/train.py");
            std::vector<FrameId> functions;
            for (int f = 0; f < 400; ++f)
                functions.push_back(interner.frame(s->strings.intern("fn" + std::to_string(f)), fileName, f));
            std::mt19937 rng(7);
            std::vector<model::StackId> stacks;
            for (int k = 0; k < (worst ? blocks / 3 : 1024); ++k) {
                std::vector<FrameId> frames;
                uint32_t path = 0; // the branches taken so far
                for (int d = 0; d < 50; ++d) {
                    uint32_t f = 0;
                    if (worst) {
                        f = d < 20 ? uint32_t(d) : uint32_t(rng() % functions.size());
                    } else {
                        if (d % 5 == 0)
                            path = path * 2 + ((uint32_t(k) >> (d / 5)) & 1);
                        f = (uint32_t(d) * 37 + path * 13) % uint32_t(functions.size());
                    }
                    frames.push_back(functions[f]);
                }
                std::reverse(frames.begin(), frames.end());
                stacks.push_back(interner.stack(frames));
            }
            for (int b = 0; b < blocks; ++b)
                samples.push_back({ stacks[rng() % stacks.size()], int64_t(512 << (rng() % 12)), 1, uint32_t(b) });
            snapshot = std::move(s);
        }
        size_t nodes = 0;
        QBENCHMARK { nodes = CallTree::build(*snapshot, samples, { direction, true }).size(); }
        QVERIFY(nodes > 1);
    }
};

QTEST_GUILESS_MAIN(TestCallTree)
#include "tst_calltree.moc"
