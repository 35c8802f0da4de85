// The load-time consistency check (common/model/consistency.cpp) and the replay's warnings: a real snapshot made
// inconsistent one way per row (loaded, changed in the model, written with the pickle writer, loaded again as a file
// would be) gives the warning of that kind, once per kind, with a count and its first example, naming the file; and
// no real snapshot gives any warning at all, from the load or from its replays. Test thread only.
#include "io/picklereader.h"
#include "io/snapshotbuilder.h"
#include "io/snapshotio.h"
#include "model/consistency.h"
#include "model/replay.h"
#include "testutil.h"

#include <QDir>
#include <QFileInfo>
#include <QTest>

#include <map>
#include <memory>

using namespace memscope;
using model::LoadWarning;

Q_DECLARE_METATYPE(LoadWarning::Kind)

namespace {

// A snapshot file as a model that can still be changed (loadSnapshot hands out const ones).
std::unique_ptr<model::Snapshot> mutableSnapshot(const std::string& path)
{
    std::vector<uint8_t> bytes;
    if (io::readFile(path, bytes))
        return nullptr;
    io::ValueTree tree(bytes);
    io::NodeId root = io::NoNode;
    if (io::parsePickle(bytes, tree, root))
        return nullptr;
    auto s = std::make_unique<model::Snapshot>();
    if (io::buildSnapshot(tree, root, *s))
        return nullptr;
    return s;
}

io::LoadResult reload(const model::Snapshot& s, const std::string& name)
{
    const std::string bytes = io::encodePickle(s);
    return io::loadSnapshotFromMemory(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), name);
}

// The load's warnings and then the replays' (as the app's Document and `memscope-cli info` have them).
std::vector<LoadWarning> allWarnings(const model::Snapshot& s)
{
    std::vector<LoadWarning> out = s.warnings;
    const std::vector<model::Replay> replays = model::Replay::buildAll(s);
    model::WarningCollector replayIssues;
    model::addReplayWarnings(s, replays, replayIssues);
    replayIssues.appendTo(out);
    return out;
}

enum class Change {
    GrowFirstBlock,
    MoveSegmentStart,
    GrowTotalSize,
    NegativeBlockSize,
    NegativeTotalSize,
    BlockLargerThanSegment,
    AllocatedSizeOff,
    ActiveSizeOff,
    RequestedSizeOff,
    SegmentInsideAnother,
    SameAddressOtherDevice,
    NegativeTraceSize,
    LostFreeCompleted,
};

// The corpus file every row changes: 10 segments on 3 streams, 361 entries (tests/data/corpus/README.md).
const char* const Source = "corpus/streams_record_stream.pickle";

void apply(model::Snapshot& s, Change change)
{
    using model::Segment;
    Segment& seg0 = s.segments[0]; // 5 blocks: inactive, active_allocated, inactive, active_allocated, inactive
    Segment& seg1 = s.segments[1]; // one active_allocated block of 32 MiB
    Segment& seg2 = s.segments[2]; // 5 blocks, 20 MiB
    Segment& seg3 = s.segments[3]; // one inactive block of 2 MiB
    switch (change) {
    case Change::GrowFirstBlock:
        s.blocks[seg0.blockBegin].size += 512;
        break;
    case Change::MoveSegmentStart:
        seg0.address += 512;
        break;
    case Change::GrowTotalSize:
        seg3.totalSize += 512;
        break;
    case Change::NegativeBlockSize:
        s.blocks[seg3.blockBegin].size = -512;
        break;
    case Change::NegativeTotalSize:
        seg3.totalSize = -2097152;
        break;
    case Change::BlockLargerThanSegment:
        s.blocks[seg3.blockBegin].size = seg3.totalSize + 512;
        break;
    case Change::AllocatedSizeOff:
        seg0.allocatedSize += 512;
        break;
    case Change::ActiveSizeOff:
        seg0.activeSize -= 512;
        break;
    case Change::RequestedSizeOff:
        seg0.requestedSize += 1;
        break;
    case Change::SegmentInsideAnother:
    case Change::SameAddressOtherDevice: {
        // Segment 2 and its blocks move to 512 B into segment 1.
        const int64_t delta = seg1.address + 512 - seg2.address;
        seg2.address += delta;
        for (uint32_t b = 0; b < seg2.blockCount; ++b)
            s.blocks[seg2.blockBegin + b].address += delta;
        if (change == Change::SameAddressOtherDevice)
            seg2.device = 1;
        break;
    }
    case Change::NegativeTraceSize:
        s.deviceTraces[0][7].size = -1;
        break;
    case Change::LostFreeCompleted: {
        // Entry 6 frees what entry 1 allocated and entry 5 free_requested: as an action nobody knows, entry 5 frees
        // a block that is not live and entry 1 allocates one that is not live after it (the earliest is shown).
        model::TraceEntry& e = s.deviceTraces[0][6];
        e.action = model::Action::Unknown;
        e.form = s.entryForms.intern({ .actionName = s.strings.intern("teleport") });
        break;
    }
    }
}

} // namespace

class TestConsistency : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void inconsistentFilesWarn_data();
    void inconsistentFilesWarn();
    void manyProblemsOneLinePerKind();
    void realFilesGiveNoWarning_data();
    void realFilesGiveNoWarning();
};

void TestConsistency::inconsistentFilesWarn_data()
{
    QTest::addColumn<int>("change");
    QTest::addColumn<LoadWarning::Kind>("kind"); // a warning of this kind must be among them
    QTest::addColumn<QString>("example"); // ... whose message contains this
    QTest::addColumn<LoadWarning::Kind>("absent"); // and none of this kind (Count: no such condition)
    QTest::addColumn<int>("count"); // how many of `kind`
    using K = LoadWarning::Kind;
    QTest::newRow("a block grows: the next one does not start where it ends")
        << int(Change::GrowFirstBlock) << K::BlocksDoNotTile
        << "segment 0x7f1e68000000 (device 0): block 1 starts at 0x7f1e68282a00, where the previous block ends at "
           "0x7f1e68282c00"
        << K::Count << 1;
    QTest::newRow("the segment starts 512 B after its first block")
        << int(Change::MoveSegmentStart) << K::BlocksDoNotTile
        << "segment 0x7f1e68000200 (device 0): block 0 starts at 0x7f1e68000000, where the segment starts at "
           "0x7f1e68000200"
        << K::Count << 1;
    QTest::newRow("total_size beyond its blocks") << int(Change::GrowTotalSize) << K::BlocksDoNotTile
                                                  << "its 1 blocks hold 2097152 B of its 2097664 B" << K::Count << 1;
    QTest::newRow("a negative block size")
        << int(Change::NegativeBlockSize) << K::NegativeSize
        << "block 0x7f1e6d400000 of segment 0x7f1e6d400000 (device 0): size -512" << K::Count << 1;
    QTest::newRow("a negative total_size") << int(Change::NegativeTotalSize) << K::NegativeSize
                                           << "segment 0x7f1e6d400000 (device 0): total_size -2097152" << K::Count << 1;
    QTest::newRow("a block larger than its segment")
        << int(Change::BlockLargerThanSegment) << K::BlockLargerThanSegment
        << "block 0x7f1e6d400000 of segment 0x7f1e6d400000 (device 0): 2097664 B in a segment of 2097152 B" << K::Count
        << 1;
    QTest::newRow("allocated_size is not the allocated blocks' sum")
        << int(Change::AllocatedSizeOff) << K::SegmentTotals << "allocated_size 4822016, its blocks add up to 4821504"
        << K::BlocksDoNotTile << 1;
    QTest::newRow("active_size is not the active blocks' sum")
        << int(Change::ActiveSizeOff) << K::SegmentTotals << "active_size 4820992, its blocks add up to 4821504"
        << K::BlocksDoNotTile << 1;
    QTest::newRow("requested_size is not the active blocks' requested sum")
        << int(Change::RequestedSizeOff) << K::SegmentTotals << ": requested_size " << K::BlocksDoNotTile << 1;
    QTest::newRow("a segment inside another of its device")
        << int(Change::SegmentInsideAnother) << K::OverlappingSegments
        << "segment 0x7f1e6a000200 (device 0), 20971520 B, starts inside segment 0x7f1e6a000000 (33554432 B)"
        << K::BlocksDoNotTile << 1;
    QTest::newRow("the same addresses on another device do not overlap")
        << int(Change::SameAddressOtherDevice) << K::TraceDoesNotReplay << "device 0" << K::OverlappingSegments << 3;
    QTest::newRow("a trace entry with a negative size")
        << int(Change::NegativeTraceSize) << K::NegativeTraceSize
        << "device 0, entry 7 (segment_alloc at 0x7f1e7ec00000): size -1" << K::Count << 1;
    QTest::newRow("a free_completed lost: the trace does not replay to the final state")
        << int(Change::LostFreeCompleted) << K::TraceDoesNotReplay
        << "device 0, entry 1 (alloc at 0x7f1e7e600000): an alloc of a block that is not live after it"
        << K::BlocksDoNotTile << 2;
}

void TestConsistency::inconsistentFilesWarn()
{
    QFETCH(int, change);
    QFETCH(LoadWarning::Kind, kind);
    QFETCH(QString, example);
    QFETCH(LoadWarning::Kind, absent);
    QFETCH(int, count);
    const auto s = mutableSnapshot(test::dataPath(Source));
    QVERIFY(s);
    QVERIFY(s->warnings.empty());
    apply(*s, Change(change));
    const io::LoadResult r = reload(*s, "changed.pickle");
    QVERIFY2(r.ok(), r.error.toString().c_str()); // never refused: the file still opens
    const std::vector<LoadWarning> warnings = allWarnings(*r.snapshot);
    const LoadWarning* found = nullptr;
    for (const LoadWarning& w : warnings) {
        QVERIFY2(w.kind != absent, w.message.c_str());
        if (w.kind == kind)
            found = &w;
    }
    QVERIFY2(found, qPrintable(QStringLiteral("no %1 warning").arg(QLatin1String(model::warningKindName(kind)))));
    QCOMPARE(found->count, uint64_t(count));
    QVERIFY2(found->message.find(", first: ") != std::string::npos, found->message.c_str());
    QVERIFY2(found->message.find(example.toStdString()) != std::string::npos, found->message.c_str());
    const std::string line = model::warningLine("changed.pickle", *found);
    QVERIFY2(line.rfind("changed.pickle: warning: ", 0) == 0, line.c_str());
    // One line per kind.
    for (size_t i = 0; i < warnings.size(); ++i)
        for (size_t j = i + 1; j < warnings.size(); ++j)
            QVERIFY(warnings[i].kind != warnings[j].kind);
}

void TestConsistency::manyProblemsOneLinePerKind()
{
    const auto s = mutableSnapshot(test::dataPath(Source));
    QVERIFY(s);
    for (size_t j = 0; j < s->deviceTraces[0].size(); ++j)
        s->deviceTraces[0][j].size = -int64_t(j) - 1;
    for (model::Segment& seg : s->segments)
        seg.allocatedSize = -1;
    const io::LoadResult r = reload(*s, "many.pickle");
    QVERIFY2(r.ok(), r.error.toString().c_str());
    std::map<LoadWarning::Kind, const LoadWarning*> byKind;
    for (const LoadWarning& w : r.snapshot->warnings)
        QVERIFY2(byKind.emplace(w.kind, &w).second, w.message.c_str());
    QVERIFY(byKind.count(LoadWarning::Kind::NegativeTraceSize));
    const LoadWarning& trace = *byKind[LoadWarning::Kind::NegativeTraceSize];
    QCOMPARE(trace.count, uint64_t(361));
    QVERIFY2(trace.message.rfind("361 trace entries have negative sizes, first: device 0, entry 0 (", 0) == 0,
             trace.message.c_str());
    QVERIFY(byKind.count(LoadWarning::Kind::NegativeSize));
    QCOMPARE(byKind[LoadWarning::Kind::NegativeSize]->count, uint64_t(10)); // each segment's allocated_size
    QVERIFY(byKind.count(LoadWarning::Kind::SegmentTotals));
    QCOMPARE(byKind[LoadWarning::Kind::SegmentTotals]->count, uint64_t(10));
}

void TestConsistency::realFilesGiveNoWarning_data()
{
    QTest::addColumn<QString>("path");
    QStringList paths;
    const QDir shared(QString::fromStdString(test::snapshotPath("")));
    for (const QString& f :
         shared.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files))
        paths << shared.filePath(f);
    const QDir corpus(QString::fromStdString(test::dataPath("corpus")));
    for (const QString& f : corpus.entryList({ QStringLiteral("*.pickle") }, QDir::Files))
        paths << corpus.filePath(f);
    paths << QString::fromStdString(test::dataPath("cudagraph.pickle"))
          << QString::fromStdString(test::dataPath("oom.pickle"));
    QVERIFY(paths.size() >= 30);
    for (const QString& p : paths)
        QTest::newRow(qPrintable(QFileInfo(p).dir().dirName() + QLatin1Char('/') + QFileInfo(p).fileName())) << p;
}

void TestConsistency::realFilesGiveNoWarning()
{
    QFETCH(QString, path);
    const io::LoadResult r = io::loadSnapshot(path.toStdString());
    QVERIFY2(r.ok(), r.error.toString().c_str());
    for (const LoadWarning& w : allWarnings(*r.snapshot))
        QFAIL(model::warningLine(path.toStdString(), w).c_str());
}

QTEST_GUILESS_MAIN(TestConsistency)
#include "tst_consistency.moc"
