// Tests of viewer::RecordingBuilder (common/viewer/recordingbuilder.h), the one writer of a recording's snapshot.
// The same records (a state reply, stack definitions, notes, settings, batches of events, a gap repaired by a fresh
// state) go to `memscope-cli record`'s Recorder and, through the Recorder's deltas as the app's receiver hands them
// over, to the app's live document; the three files they make (the Recorder's snapshot, the document's save while it
// grows, copySnapshot, and at its end, finish) must be the same pickle byte for byte. A real file's trace recorded
// this way must also end in the file's own final state, every segment and block (free ones with their stale
// requests). GUI thread only; no widgets.
#include "document/livedocument.h"
#include "loadsnapshot.h"
#include "testutil.h"
#include "wirerecords.h"

#include "io/snapshotio.h"
#include "model/replay.h"
#include "model/replayextender.h"
#include "viewer/decoder.h"
#include "viewer/recorder.h"

#include <QTest>

#include <functional>
#include <set>

using namespace memscope;
using namespace memscope::app;
using viewer::Recorder;
using wire::BlockRecord;
using wire::EventRecord;
using wire::EventType;
using wire::SegmentRecord;

namespace {

constexpr uint64_t MiB = 1 << 20;

// What an agent would send, in order: the state reply, then steps (stack definitions, notes, settings, events,
// or a fresh state after a gap), as client::AgentClient hands them to a Recorder.
struct Recording {
    std::vector<uint8_t> state;
    uint16_t devices = 1;
    std::vector<std::function<void(Recorder&)>> steps;
};

// Gives `r` to a Recorder that keeps everything (memscope-cli record) and returns its snapshot; and to a Recorder
// that hands its deltas over (the app's receiver) and to a live document grown from them, flushed after every
// step, returning the document's save while it grows (copySnapshot) and its end (finish).
struct Written {
    std::string recorder, liveCopy, liveFinished;
    model::Snapshot recorded;
    viewer::RecorderStats stats;
};

Written write(const Recording& r)
{
    Written out;
    Recorder whole;
    if (!whole.setState(viewer::decodeState(r.state)))
        qWarning("the recording's state reply does not decode");
    for (const auto& step : r.steps)
        step(whole);
    out.recorded = whole.snapshot();
    out.stats = whole.stats();
    out.recorder = io::encodePickle(out.recorded);

    Recorder handing;
    handing.setKeepTaken(false);
    handing.setState(viewer::decodeState(r.state));
    LiveDocument live(QStringLiteral("live"), handing.joinSnapshot(), r.devices);
    auto hand = [&] {
        auto delta = std::make_shared<Recorder::Delta>();
        handing.takeDelta(*delta);
        live.append(std::shared_ptr<const Recorder::Delta>(std::move(delta)));
        live.flush();
    };
    for (const auto& step : r.steps) {
        step(handing);
        hand();
    }
    out.liveCopy = io::encodePickle(*live.copySnapshot());
    out.liveFinished = io::encodePickle(*live.finish());
    return out;
}

EventRecord event(uint64_t sequence, EventType type, uint64_t address, uint64_t size, uint64_t requested = 0,
                  uint64_t stream = 0, uint32_t stack = 0, uint8_t device = 0)
{
    EventRecord e = test::eventRecord(sequence, type, address, size, requested, stream);
    e.stackId = stack;
    e.device = device;
    return e;
}

SegmentRecord segment(uint64_t address, uint64_t size, uint8_t device = 0, uint64_t stream = 0)
{
    SegmentRecord s = test::segmentRecord(address, size);
    s.stream = stream;
    s.device = device;
    s.isSmall = size == 2 * MiB;
    return s;
}

BlockRecord block(uint64_t address, uint64_t size, uint64_t requested, uint8_t state, uint8_t device = 0,
                  uint32_t stack = 0)
{
    BlockRecord b = test::blockRecord(address, size, requested, state);
    b.device = device;
    b.stackId = stack;
    return b;
}

std::function<void(Recorder&)> events(std::vector<EventRecord> records)
{
    return [records = std::move(records)](Recorder& r) { r.addEvents(records); };
}

std::function<void(Recorder&)> stackDef(uint32_t id, std::vector<viewer::DecodedFrame> frames)
{
    return [id, frames = std::move(frames)](Recorder& r) {
        r.addStackDef(viewer::decodeStackDef(viewer::encodeStackDef(id, frames)));
    };
}

// Two devices, two streams, stacks, a note pair, the allocator's settings, blocks pending free, free blocks with
// stale requests, and a gap repaired by a fresh state that differs. Stacks are defined before their first use, as
// the agent sends them (docs/protocol.md, topic "S"): a definition that comes after its events still reaches the
// Recorder's snapshot (tst_viewer recorderStacks), but a live document has already shown those entries without it
// and keeps them so.
Recording handMade()
{
    constexpr uint64_t A = 0x7f0000000000, B = 0x7f0010000000, D1 = 0x7e0000000000;
    Recording r;
    r.devices = 2;
    const std::vector segs { segment(A, 20 * MiB), segment(D1, 2 * MiB, 1) };
    const std::vector blocks { block(A, MiB, 1'000'000, 1, 0, 7), block(A + MiB, MiB, 4'000, 0),
                               block(A + 2 * MiB, MiB, 999, 2), block(D1, 512, 500, 1, 1) };
    r.state = viewer::encodeState(viewer::makeHello(42, 2, "node1", "0.1"), 10, segs, blocks);
    r.steps.push_back(
        stackDef(7, { { 0x401000, "inner(int)", "/usr/lib/libx.so", 0 }, { 0x403000, "main", "/bin/job", 12 } }));
    r.steps.push_back(stackDef(8, { { 0x500000, "later", "/bin/job", 3 } }));
    r.steps.push_back([](Recorder& rec) {
        std::vector<uint8_t> notes;
        viewer::appendNote(notes, 0, 0, 1'000'020'000, "step_0");
        for (const viewer::DecodedNote& n : viewer::decodeNotes(notes).notes)
            rec.addNote(n);
        rec.setSettings(
            viewer::decodeSettings(viewer::encodeSettings("expandable_segments=b:0\nmax_split_size=i:134217728\n")));
    });
    r.steps.push_back(events({ event(11, EventType::Alloc, A + MiB, 512 * 1024, 500'000, 0, 8),
                               event(12, EventType::FreeRequested, A, MiB), event(13, EventType::FreeCompleted, A, MiB),
                               event(14, EventType::SegmentAlloc, B, 2 * MiB, 0, 0x5555, 8),
                               event(15, EventType::Alloc, B, 4096, 4000, 0x5555, 8),
                               event(16, EventType::Alloc, D1 + 512, 1024, 1000, 0, 0, 1) }));
    r.steps.push_back([](Recorder& rec) {
        std::vector<uint8_t> notes;
        viewer::appendNote(notes, 1, 0, 1'000'030'000, "step_0");
        for (const viewer::DecodedNote& n : viewer::decodeNotes(notes).notes)
            rec.addNote(n);
        rec.addEvents(std::vector { event(17, EventType::FreeRequested, B, 4096, 0, 0x5555) });
    });
    // Records 18-19 never arrived; the fresh state at 20 differs: the block at B is gone, a new one at A.
    r.steps.push_back([=](Recorder& rec) {
        rec.addMissing(1, 2);
        const std::vector fresh { segment(A, 20 * MiB), segment(B, 2 * MiB, 0, 0x5555), segment(D1, 2 * MiB, 1) };
        const std::vector freshBlocks { block(A, 2 * MiB, 1'500'000, 1, 0, 8), block(A + 2 * MiB, MiB, 999, 2),
                                        block(B, 2 * MiB, 4000, 0), block(D1, 512, 500, 1, 1),
                                        block(D1 + 512, 1024, 1000, 1, 1) };
        viewer::ResyncReason why;
        why.gaps = 1;
        why.missing = 2;
        why.timeNs = 1'000'000'000 + 20 * 1000;
        rec.resync(
            viewer::decodeState(viewer::encodeState(viewer::makeHello(42, 2, "node1", "0.1"), 20, fresh, freshBlocks)),
            why);
    });
    r.steps.push_back(
        events({ event(21, EventType::FreeRequested, A, 2 * MiB), event(22, EventType::FreeCompleted, A, 2 * MiB),
                 event(23, EventType::Alloc, A, 256, 200, 0, 7) }));
    return r;
}

// A real file's device 0 as an agent would have sent it: the state before its first entry (stacks under ids
// file id + 1, defined first), then its trace in batches of `batch` records.
Recording fromFile(const model::Snapshot& file, const model::Replay& replay, size_t batch)
{
    Recording r;
    const model::ReplayState start = replay.stateAt(0);
    std::vector<SegmentRecord> segs;
    std::vector<BlockRecord> blocks;
    for (const model::ReplaySegment& s : start.segments) {
        SegmentRecord sr = segment(uint64_t(s.address), uint64_t(s.totalSize), 0, uint64_t(s.stream));
        sr.isSmall = !s.isExpandable && s.totalSize == model::ByteCount(2 * MiB);
        sr.isExpandable = s.isExpandable;
        sr.poolFirst = int32_t(s.poolId.first);
        sr.poolSecond = int32_t(s.poolId.second);
        segs.push_back(sr);
        for (uint32_t k = s.blockBegin; k < s.blockBegin + s.blockCount; ++k) {
            const model::ReplayBlock& b = start.blocks[k];
            const uint8_t state = b.state == model::BlockState::Inactive ? 0
                : b.state == model::BlockState::ActivePendingFree        ? 2
                                                                         : 1;
            blocks.push_back(block(uint64_t(b.address), uint64_t(b.size), uint64_t(b.requestedSize), state, 0,
                                   raw(b.stack) == 0 ? 0 : raw(b.stack) + 1));
        }
    }
    r.state = viewer::encodeState(viewer::makeHello(7, 1, "file", "0.1"), 0, segs, blocks);
    r.steps.push_back([&file](Recorder& rec) {
        for (uint32_t k = 1; k < file.stackCount(); ++k) {
            std::vector<viewer::DecodedFrame> frames;
            for (const model::FrameId* f = file.stackBegin(model::StackId { k });
                 f != file.stackEnd(model::StackId { k }); ++f) {
                const model::Frame& fr = file.frame(*f);
                frames.push_back({ 0, file.str(fr.name), file.str(fr.filename), int32_t(fr.line.bits()) });
            }
            rec.addStackDef(viewer::decodeStackDef(viewer::encodeStackDef(k + 1, frames)));
        }
    });
    const auto& trace = file.deviceTraces[0];
    std::vector<EventRecord> records;
    const auto& pieces = replay.segmentPieces();
    for (int64_t j = 0; j < replay.entryCount(); ++j) {
        const model::TraceEntry& e = trace[size_t(replay.firstEntry() + j)];
        EventType type = EventType::Count;
        switch (e.action) {
        case model::Action::Alloc:
            type = EventType::Alloc;
            break;
        case model::Action::FreeRequested:
            type = EventType::FreeRequested;
            break;
        case model::Action::FreeCompleted:
            type = EventType::FreeCompleted;
            break;
        case model::Action::SegmentAlloc:
            type = EventType::SegmentAlloc;
            break;
        case model::Action::SegmentFree:
            type = EventType::SegmentFree;
            break;
        case model::Action::SegmentMap:
            type = EventType::SegmentMap;
            break;
        case model::Action::SegmentUnmap:
            type = EventType::SegmentUnmap;
            break;
        case model::Action::Oom:
            type = EventType::Oom;
            break;
        default:
            continue; // (snapshot entries and others carry no allocator change)
        }
        EventRecord rec = event(records.size() + 1, type, uint64_t(e.addr), uint64_t(e.size), uint64_t(e.size),
                                uint64_t(file.stream(e)), raw(e.stack) == 0 ? 0 : raw(e.stack) + 1);
        rec.timeNs = uint64_t(e.timeUs) * 1000;
        if (e.action == model::Action::Alloc && replay.allocationOfEntry(j) != model::NoAllocation)
            rec.size = uint64_t(replay.allocation(replay.allocationOfEntry(j)).size);
        for (const model::SegmentPiece& p : pieces)
            if (p.beginIndex == j && p.address == e.addr) {
                rec.poolFirst = int32_t(p.poolId.first);
                rec.poolSecond = int32_t(p.poolId.second);
            }
        records.push_back(rec);
    }
    for (size_t at = 0; at < records.size(); at += batch)
        r.steps.push_back(events(std::vector<EventRecord>(
            records.begin() + ptrdiff_t(at), records.begin() + ptrdiff_t(std::min(records.size(), at + batch)))));
    return r;
}

// A state's segments and blocks as text lines, in order: "segment DEVICE ADDRESS SIZE STREAM TYPE (POOL)" and
// "  block ADDRESS SIZE STATE REQUESTED" (STATE: model::BlockState, 0 allocated, 1 pending free, 2 inactive).
QStringList stateLines(const model::Snapshot& s)
{
    QStringList out;
    for (const model::Segment& seg : s.segments) {
        out << QStringLiteral("segment %1 %2 %3 %4 %5 (%6,%7)")
                   .arg(seg.device)
                   .arg(uint64_t(seg.address), 0, 16)
                   .arg(seg.totalSize)
                   .arg(seg.stream)
                   .arg(QString::fromUtf8(s.str(seg.segmentType)))
                   .arg(seg.poolId.first)
                   .arg(seg.poolId.second);
        for (uint32_t b = seg.blockBegin; b < seg.blockBegin + seg.blockCount; ++b)
            out << QStringLiteral("  block %1 %2 %3 %4")
                       .arg(uint64_t(s.blocks[b].address), 0, 16)
                       .arg(s.blocks[b].size)
                       .arg(int(s.blocks[b].state))
                       .arg(s.blocks[b].requestedSize);
    }
    return out;
}

} // namespace

class TestRecordingBuilder : public QObject {
    Q_OBJECT
private Q_SLOTS:
    // The hand-made recording: the three files are one, and the file holds what was sent.
    void oneFileFromEveryPath()
    {
        const Written w = write(handMade());
        QCOMPARE(w.stats.resyncs, uint64_t(1));
        QCOMPARE(w.liveCopy.size(), w.recorder.size());
        QVERIFY(w.liveCopy == w.recorder);
        QVERIFY(w.liveFinished == w.recorder);
        // What the file holds, read back: both devices' traces, the note pair and the resync's, the settings,
        // frames on the entries whose stack was defined (before or after them).
        io::LoadResult back = io::loadSnapshotFromMemory(
            std::span(reinterpret_cast<const uint8_t*>(w.recorder.data()), w.recorder.size()), "recording");
        QVERIFY2(back.ok(), back.error.toString().c_str());
        const model::Snapshot& s = *back.snapshot;
        QCOMPARE(s.deviceTraces.size(), size_t(2));
        QCOMPARE(s.deviceTraces[1].size(), size_t(1));
        QCOMPARE(s.annotations.size(), size_t(6)); // step_0 START/END, and the resync's START/END per device
        QVERIFY(s.allocatorSettings && s.allocatorSettings->find("max_split_size"));
        QCOMPARE(s.stackSize(s.deviceTraces[0][0].stack), size_t(1)); // "later"
        QCOMPARE(s.stackSize(s.deviceTraces[0].back().stack), size_t(2)); // inner(int) in main
        QCOMPARE(s.str(s.form(s.deviceTraces[0][0]).compileContext), std::string_view("N/A"));
        QCOMPARE(stateLines(s), stateLines(w.recorded));
        // The whole final state: the block freed after the resync leaves its request on the remainder of the
        // split (1500000), the pending free block stays pending, the fresh state's free block keeps its stale
        // request (4000), and space no state listed is free with no known request.
        const QStringList expected {
            QStringLiteral("segment 0 7f0000000000 20971520 0 large (0,0)"),
            QStringLiteral("  block 7f0000000000 256 0 200"),
            QStringLiteral("  block 7f0000000100 2096896 2 1500000"),
            QStringLiteral("  block 7f0000200000 1048576 1 999"),
            QStringLiteral("  block 7f0000300000 17825792 2 0"),
            QStringLiteral("segment 0 7f0010000000 2097152 21845 small (0,0)"),
            QStringLiteral("  block 7f0010000000 2097152 2 4000"),
            QStringLiteral("segment 1 7e0000000000 2097152 0 small (0,0)"),
            QStringLiteral("  block 7e0000000000 512 0 500"),
            QStringLiteral("  block 7e0000000200 1024 0 1000"),
            QStringLiteral("  block 7e0000000600 2095616 2 0"),
        };
        QCOMPARE(stateLines(s), expected);
    }

    void realFileThroughBothPaths_data()
    {
        QTest::addColumn<std::string>("path");
        QTest::addColumn<int>("batch");
        QTest::newRow("scripted_allocs, batches of 100") << test::snapshotPath("scripted_allocs.pickle") << 100;
        QTest::newRow("expandable_segments, batches of 7") << test::snapshotPath("expandable_segments.pickle") << 7;
        QTest::newRow("multistream, one batch") << test::snapshotPath("multistream.pickle") << 1'000'000;
        QTest::newRow("corpus streams_record_stream") << test::dataPath("corpus/streams_record_stream.pickle") << 64;
        QTest::newRow("corpus expandable_empty_cache") << test::dataPath("corpus/expandable_empty_cache.pickle") << 64;
        QTest::newRow("corpus compile_reduce_overhead (private pool)")
            << test::dataPath("corpus/compile_reduce_overhead.pickle") << 500;
    }

    // A real trace recorded: the three files are one, and the recording ends in the file's own final state.
    void realFileThroughBothPaths()
    {
        QFETCH(std::string, path);
        QFETCH(int, batch);
        const auto file = test::loadSnapshotOrWarn(path);
        QVERIFY(file);
        const model::Replay replay = model::Replay::build(*file, 0);
        QCOMPARE(replay.warnings(), uint64_t(0));
        const Written w = write(fromFile(*file, replay, size_t(batch)));
        QCOMPARE(w.stats.inconsistent, uint64_t(0));
        QVERIFY(w.stats.applied > 0);
        QVERIFY(w.liveCopy == w.recorder);
        QVERIFY(w.liveFinished == w.recorder);
        // The file's final state of device 0, every segment and block (free ones with their requests).
        model::Snapshot fileEnd = model::snapshotOfState(replay.stateAt(replay.entryCount()), 0);
        for (model::Segment& seg : fileEnd.segments)
            seg.segmentType = fileEnd.strings.intern(
                !seg.isExpandable && seg.totalSize == model::ByteCount(2 * MiB) ? "small" : "large");
        QCOMPARE(stateLines(w.recorded), stateLines(fileEnd));
    }
};

QTEST_GUILESS_MAIN(TestRecordingBuilder)
#include "tst_recordingbuilder.moc"
