// Tests of model::ReplayExtender (common/model/replayextender.h): a replay grown forwards in chunks, from the state
// at some index of a real snapshot in ../shared/snapshots, must answer exactly as Replay::build does on the whole
// snapshot at every later index: series, peaks, and the segments and blocks of the state. Test thread only.
#include "io/snapshotio.h"
#include "model/replay.h"
#include "model/replayextender.h"
#include "model/timeline.h"
#include "testutil.h"

#include <QDir>
#include <QTest>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

using namespace memscope;
using model::ByteCount;
using model::DeviceAddr;

namespace {

std::shared_ptr<const model::Snapshot> load(const std::string& name)
{
    static std::map<std::string, std::shared_ptr<const model::Snapshot>> cache;
    auto& slot = cache[name];
    if (!slot) {
        io::LoadResult result = io::loadSnapshot(test::snapshotPath(name));
        if (!result.ok())
            qWarning("%s: %s", name.c_str(), result.error.message.c_str());
        slot = result.snapshot;
    }
    return slot;
}

struct FlatSegment {
    DeviceAddr address;
    ByteCount total, allocated, active, requested;
    int64_t stream;
    std::pair<int64_t, int64_t> pool;
    bool expandable;
    bool operator==(const FlatSegment&) const = default;
};
struct FlatBlock {
    DeviceAddr address;
    ByteCount size, requested;
    model::BlockState state;
    uint32_t version;
    model::StackId stack;
    bool operator==(const FlatBlock&) const = default;
};

std::vector<FlatSegment> segmentsOf(const model::ReplayState& s)
{
    std::vector<FlatSegment> out;
    for (const auto& g : s.segments)
        out.push_back({ g.address, g.totalSize, g.allocatedSize, g.activeSize, g.requestedSize, g.stream, g.poolId,
                        g.isExpandable });
    return out;
}

std::vector<FlatBlock> blocksOf(const model::ReplayState& s)
{
    std::vector<FlatBlock> out;
    for (const auto& b : s.blocks)
        out.push_back({ b.address, b.size, b.requestedSize, b.state, b.version, b.stack });
    return out;
}

} // namespace

class TestReplayExtender : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void matchesBuild_data();
    void matchesBuild();
    void emptyStart();
    void timelineItemsGrowToo_data();
    void timelineItemsGrowToo();
    void timelineItemsPendingAcrossAppends();
    void inconsistentEntriesAreCounted();
};

void TestReplayExtender::matchesBuild_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<double>("joinAt"); // where the viewer joins, as a fraction of the trace
    QTest::addColumn<int>("chunk"); // largest append; chunks are random in [1, chunk]
    const QDir dir(QString::fromStdString(test::snapshotPath("")));
    for (const QString& f :
         dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name)) {
        for (double at : { 0.0, 0.37 }) {
            for (int chunk : { 1, 5000 }) {
                if (f.startsWith(QStringLiteral("big_trace")) && chunk == 1)
                    continue; // one entry per append is covered by the small traces
                QTest::addRow("%s@%.2f/%d", qPrintable(f), at, chunk) << f << at << chunk;
            }
        }
    }
}

void TestReplayExtender::matchesBuild()
{
    QFETCH(QString, file);
    QFETCH(double, joinAt);
    QFETCH(int, chunk);
    const auto snapshot = load(file.toStdString());
    QVERIFY(snapshot);
    for (int device = 0; device < snapshot->deviceCount(); ++device) {
        const model::Replay ref = model::Replay::build(*snapshot, device);
        const int64_t n = ref.entryCount();
        const int64_t k = int64_t(double(n) * joinAt);
        const auto& trace = snapshot->deviceTraces[size_t(device)];
        const int64_t first = ref.firstEntry();

        // What a live source knows: exact block sizes and pools (taken from the reference here).
        std::vector<model::EntryDetail> details(size_t(n - k));
        for (int64_t j = k; j < n; ++j) {
            const model::TraceEntry& e = trace[size_t(first + j)];
            model::EntryDetail& d = details[size_t(j - k)];
            if (e.action == model::Action::Alloc && ref.allocationOfEntry(j) != model::NoAllocation)
                d.blockSize = ref.allocation(ref.allocationOfEntry(j)).size;
            if (e.action == model::Action::SegmentAlloc || e.action == model::Action::SegmentMap) {
                for (const model::SegmentPiece& p : ref.segmentPieces())
                    if (p.beginIndex == j && p.address >= e.addr && p.address < e.addr + e.size) {
                        d.poolId = p.poolId;
                        break;
                    }
            }
        }

        const model::Snapshot initial = model::snapshotOfState(ref.stateAt(k), device);
        model::Replay grown;
        model::ReplayExtender extender({ .minCheckpointInterval = 64, .checkpointSpacing = 2 });
        extender.start(grown, initial, device);
        QCOMPARE(grown.entryCount(), 0);

        std::mt19937 rng(7);
        std::uniform_int_distribution<int> pick(1, chunk);
        std::vector<int64_t> checks;
        for (int64_t j = k; j < n;) {
            const int64_t take = std::min<int64_t>(pick(rng), n - j);
            extender.append(grown, snapshot->entryForms, std::span(trace).subspan(size_t(first + j), size_t(take)),
                            std::span(details).subspan(size_t(j - k), size_t(take)));
            j += take;
            QCOMPARE(grown.entryCount(), j - k);
            // The newest state right after an append (what a live view shows) and one random earlier one; at most
            // 400 of them, for the big traces.
            if (checks.size() < 400) {
                checks.push_back(j - k);
                checks.push_back(std::uniform_int_distribution<int64_t>(0, j - k)(rng));
            }
        }
        checks.push_back(0);
        checks.push_back(n - k);
        QCOMPARE(grown.warnings(), 0u);

        // Series: every index.
        const model::ReplaySeries& gs = grown.series();
        const model::ReplaySeries& rs = ref.series();
        QCOMPARE(int64_t(gs.size()), n - k + 1);
        for (int64_t i = 0; i <= n - k; ++i) {
            const size_t a = size_t(i), b = size_t(k + i);
            if (gs.allocated[a] != rs.allocated[b] || gs.active[a] != rs.active[b] || gs.reserved[a] != rs.reserved[b]
                || gs.requested[a] != rs.requested[b] || (*grown.largestFree())[a] != (*ref.largestFree())[b])
                QFAIL(qPrintable(QStringLiteral("device %1, state %2 (%3 of the whole trace): series differ: "
                                                "allocated %4/%5 active %6/%7 reserved %8/%9 largest free %10/%11")
                                     .arg(device)
                                     .arg(i)
                                     .arg(k + i)
                                     .arg(gs.allocated[a])
                                     .arg(rs.allocated[b])
                                     .arg(gs.active[a])
                                     .arg(rs.active[b])
                                     .arg(gs.reserved[a])
                                     .arg(rs.reserved[b])
                                     .arg((*grown.largestFree())[a])
                                     .arg((*ref.largestFree())[b])));
        }
        // States: after appends and at random earlier indices.
        model::ReplayState g, r;
        for (int64_t i : checks) {
            grown.stateAt(i, g);
            ref.stateAt(k + i, r);
            QCOMPARE(segmentsOf(g), segmentsOf(r));
            QCOMPARE(blocksOf(g), blocksOf(r));
            QCOMPARE(g.strayBlocks, 0u);
        }
        // Lifetimes of what is alive at the end: ended by the entry count, as Replay::build does.
        for (const model::Allocation& a : grown.allocations())
            QVERIFY(a.freeCompletedIndex <= grown.entryCount() && a.freeRequestedIndex <= grown.entryCount());
        for (const model::SegmentPiece& p : grown.segmentPieces())
            QVERIFY(p.endIndex <= grown.entryCount());
    }
}

void TestReplayExtender::timelineItemsGrowToo_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("chunk");
    for (const char* f : { "mlp_train.pickle", "multistream.pickle", "expandable_segments.pickle", "oom.pickle" })
        for (int chunk : { 1, 7, 40 })
            QTest::addRow("%s/%d", f, chunk) << QString::fromLatin1(f) << chunk;
    QTest::addRow("transformer_train.pickle/800") << QStringLiteral("transformer_train.pickle") << 800;
}

// Timeline items extended after every append equal the items made from scratch of the grown replay, and so do the
// segment pieces holding the allocations; columns sampled again from the first one that changed equal columns
// sampled from scratch.
void TestReplayExtender::timelineItemsGrowToo()
{
    QFETCH(QString, file);
    QFETCH(int, chunk);
    const auto snapshot = load(file.toStdString());
    QVERIFY(snapshot);
    const model::Replay ref = model::Replay::build(*snapshot, 0);
    const int64_t k = ref.entryCount() / 4;
    const model::Snapshot initial = model::snapshotOfState(ref.stateAt(k), 0);
    model::Replay grown;
    model::ReplayExtender extender;
    extender.start(grown, initial, 0);
    model::TimelineItems allocs = model::TimelineItems::fromAllocations(grown);
    model::TimelineItems pieces = model::TimelineItems::fromSegments(grown);
    std::vector<model::TimelineItem> holders = model::pieceOfAllocations(grown);
    const auto& trace = snapshot->deviceTraces[0];
    auto same = [](const model::TimelineItems& a, const model::TimelineItems& b) { return a == b; };
    // Columns as a live timeline lays them out: a fixed domain (the final length), split into equal columns, of
    // which those that begin within the data are sampled; a column's state range grows as entries arrive.
    const int64_t finalCount = ref.entryCount() - k;
    constexpr int64_t Columns = 97;
    auto layout = [&](int64_t n, std::vector<int64_t>& lo, std::vector<int64_t>& hi) {
        lo.clear();
        hi.clear();
        for (int64_t x = 0; x < Columns && x * finalCount / Columns <= n; ++x) {
            lo.push_back(x * finalCount / Columns);
            hi.push_back(std::min(std::max((x + 1) * finalCount / Columns, lo.back() + 1), n + 1));
        }
    };
    model::TimelineColumns resumedAllocs, resumedPieces;
    std::vector<int64_t> oldLo, oldHi, lo, hi;
    int resumedLate = 0; // resumes that kept some columns
    // Resuming at the first column whose range changed gives what sampling every column again gives.
    auto checkResume = [&](const model::TimelineItems& items, model::TimelineColumns& resumed, const char* what) {
        size_t first = 0;
        while (first < std::min(oldLo.size(), lo.size()) && oldLo[first] == lo[first] && oldHi[first] == hi[first])
            ++first;
        model::sampleColumns(items, {}, lo, hi, resumed, first);
        resumedLate += first > 0;
        model::TimelineColumns fresh;
        model::sampleColumns(items, {}, lo, hi, fresh);
        if (resumed.state != fresh.state || resumed.total != fresh.total || resumed.maxTotal != fresh.maxTotal)
            QFAIL(qPrintable(QStringLiteral("%1 columns resumed at %2 differ at %3 entries")
                                 .arg(QLatin1String(what))
                                 .arg(first)
                                 .arg(items.entryCount)));
    };
    layout(0, lo, hi);
    model::sampleColumns(allocs, {}, lo, hi, resumedAllocs);
    model::sampleColumns(pieces, {}, lo, hi, resumedPieces);
    int appends = 0;
    for (int64_t j = k; j < ref.entryCount(); j += chunk) {
        const int64_t take = std::min<int64_t>(chunk, ref.entryCount() - j);
        extender.append(grown, snapshot->entryForms,
                        std::span(trace).subspan(size_t(ref.firstEntry() + j), size_t(take)));
        allocs.extendAllocations(grown);
        pieces.extendSegments(grown);
        if (!same(allocs, model::TimelineItems::fromAllocations(grown)))
            QFAIL(qPrintable(QStringLiteral("allocation items differ after %1 entries").arg(j + take - k)));
        if (!same(pieces, model::TimelineItems::fromSegments(grown)))
            QFAIL(qPrintable(QStringLiteral("segment items differ after %1 entries").arg(j + take - k)));
        model::extendPieceOfAllocations(grown, pieces, holders);
        if (holders != model::pieceOfAllocations(grown))
            QFAIL(qPrintable(QStringLiteral("allocations' pieces differ after %1 entries").arg(j + take - k)));
        oldLo = lo;
        oldHi = hi;
        layout(grown.entryCount(), lo, hi);
        checkResume(allocs, resumedAllocs, "allocation");
        checkResume(pieces, resumedPieces, "segment");
        if (QTest::currentTestFailed())
            return;
        ++appends;
    }
    QVERIFY(appends > 1);
    QVERIFY(allocs.count() > 0);
    QVERIFY(resumedLate > 0);
}

// Blocks freed by the user while another stream still uses them (record_stream): pending across appends.
void TestReplayExtender::timelineItemsPendingAcrossAppends()
{
    using model::Action;
    auto entry = [](Action action, DeviceAddr addr, ByteCount size) {
        model::TraceEntry e;
        e.action = action;
        e.addr = addr;
        e.size = size;
        return e;
    };
    const DeviceAddr base = 0x7f0000000000;
    std::vector<model::TraceEntry> entries { entry(Action::SegmentAlloc, base, 2 << 20) };
    for (int i = 0; i < 12; ++i)
        entries.push_back(entry(Action::Alloc, base + i * 4096, 4096));
    for (int i = 0; i < 12; i += 2) // every other block: freed by the user, completed much later
        entries.push_back(entry(Action::FreeRequested, base + i * 4096, 4096));
    for (int i = 0; i < 12; ++i) {
        if (i % 2)
            entries.push_back(entry(Action::FreeRequested, base + i * 4096, 4096));
        entries.push_back(entry(Action::FreeCompleted, base + i * 4096, 4096));
    }
    for (size_t chunk : { size_t(1), size_t(3), size_t(5) }) {
        model::Snapshot empty;
        model::Replay grown;
        model::ReplayExtender extender;
        extender.start(grown, empty, 0);
        model::TimelineItems items = model::TimelineItems::fromAllocations(grown);
        bool sawPending = false;
        for (size_t j = 0; j < entries.size(); j += chunk) {
            extender.append(grown, empty.entryForms,
                            std::span(entries).subspan(j, std::min(chunk, entries.size() - j)));
            items.extendAllocations(grown);
            const model::TimelineItems fresh = model::TimelineItems::fromAllocations(grown);
            QCOMPARE(items.byPending, fresh.byPending);
            QCOMPARE(items.pendingByPending, fresh.pendingByPending);
            QCOMPARE(items.byEnd, fresh.byEnd);
            QCOMPARE(items.pendingFrom, fresh.pendingFrom);
            sawPending |= !fresh.byPending.empty();
        }
        QVERIFY(sawPending);
        QCOMPARE(grown.warnings(), 0u);
    }
}

void TestReplayExtender::emptyStart()
{
    // From nothing: a segment, two blocks, one freed through record_stream, then the segment freed.
    model::Snapshot empty;
    model::Replay r;
    model::ReplayExtender x;
    x.start(r, empty, 0);
    QCOMPARE(r.series().size(), size_t(1));
    auto entry = [](model::Action action, DeviceAddr addr, ByteCount size) {
        model::TraceEntry e;
        e.action = action;
        e.addr = addr;
        e.size = size;
        return e;
    };
    using model::Action;
    const std::vector<model::TraceEntry> entries {
        entry(Action::SegmentAlloc, 0x1000000, 2 << 20), entry(Action::Alloc, 0x1000000, 1000),
        entry(Action::Alloc, 0x1000400, 512),             entry(Action::FreeRequested, 0x1000000, 1000),
        entry(Action::FreeCompleted, 0x1000000, 1000),    entry(Action::FreeRequested, 0x1000400, 512),
        entry(Action::FreeCompleted, 0x1000400, 512),     entry(Action::SegmentFree, 0x1000000, 2 << 20),
    };
    x.append(r, empty.entryForms, std::span(entries).first(3));
    QCOMPARE(r.entryCount(), 3);
    QCOMPARE(r.series().active.back(), 1024 + 512);
    QCOMPARE(r.series().reserved.back(), ByteCount(2 << 20));
    QCOMPARE(r.largestFree()->back(), ByteCount(2 << 20) - 1536);
    // Alive at the end of what is known so far: ended by the entry count.
    QCOMPARE(r.allocations().size(), size_t(2));
    QCOMPARE(r.allocations()[0].freeCompletedIndex, 3);
    QCOMPARE(r.allocations()[0].freeRequestedIndex, 3);
    x.append(r, empty.entryForms, std::span(entries).subspan(3));
    QCOMPARE(r.entryCount(), 8);
    QCOMPARE(r.warnings(), 0u);
    QCOMPARE(r.allocations()[0].freeRequestedIndex, 3);
    QCOMPARE(r.allocations()[0].freeCompletedIndex, 4);
    QCOMPARE(r.series().allocated[4], 512); // state after the free_requested: only the second block counts
    QCOMPARE(r.series().active[4], 1024 + 512);
    QCOMPARE((*r.largestFree())[5], ByteCount(2 << 20) - 1536); // the freed head is a gap of its own
    QCOMPARE(r.series().reserved.back(), 0);
    QCOMPARE(r.segmentPieces().size(), size_t(1));
    QCOMPARE(r.segmentPieces()[0].endIndex, 7);
    const model::ReplayState s = r.stateAt(3);
    QCOMPARE(s.blocks.size(), size_t(3)); // two blocks and the free tail
    QCOMPARE(s.blocks[0].size, 1024);
}

void TestReplayExtender::inconsistentEntriesAreCounted()
{
    model::Snapshot empty;
    model::Replay r;
    model::ReplayExtender x;
    x.start(r, empty, 0);
    model::TraceEntry freeUnknown;
    freeUnknown.action = model::Action::FreeCompleted;
    freeUnknown.addr = 0x42;
    freeUnknown.size = 512;
    model::TraceEntry segmentFreeUnknown = freeUnknown;
    segmentFreeUnknown.action = model::Action::SegmentFree;
    const std::vector<model::TraceEntry> entries { freeUnknown, segmentFreeUnknown };
    x.append(r, empty.entryForms, entries);
    QCOMPARE(r.entryCount(), 2);
    QCOMPARE(r.warnings(), 2u);
    QCOMPARE(r.allocationOfEntry(0), model::NoAllocation);
    QCOMPARE(r.series().active.back(), 0);
}

QTEST_GUILESS_MAIN(TestReplayExtender)
#include "tst_replayextender.moc"
