// Tests of common/viewer: the frame decoders (valid frames and every kind of malformed one, each with an error that
// names the reason and the byte offset) and the Recorder (a state plus events, and what went missing, become a
// snapshot that reads back from its own pickle and replays to the same final state with no warnings).
#include "io/snapshotio.h"
#include "model/replay.h"
#include "model/replayextender.h"
#include "testutil.h"
#include "viewer/decoder.h"
#include "viewer/recorder.h"
#include "wirerecords.h"

#include <QDir>
#include <QFile>
#include <QTest>

#include <cstring>
#include <optional>
#include <vector>

using namespace memscope;
using namespace memscope::wire;
using namespace memscope::viewer;

Q_DECLARE_METATYPE(std::vector<uint8_t>)
Q_DECLARE_METATYPE(std::vector<memscope::wire::SegmentRecord>)
Q_DECLARE_METATYPE(std::vector<memscope::wire::BlockRecord>)
Q_DECLARE_METATYPE(std::vector<memscope::wire::EventRecord>)

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr uint64_t A = 0x7f0000000000, B = 0x7f0010000000, C = 0x7f0020000000;

EventRecord makeEvent(uint64_t sequence, EventType type, uint64_t address, uint64_t size, uint64_t requested = 0,
                      uint64_t stream = 0)
{
    return test::eventRecord(sequence, type, address, size, requested, stream);
}

std::vector<uint8_t> validCompressedBatch()
{
    return encodeBatch(
        std::vector { makeEvent(1, EventType::Alloc, A, 512, 100), makeEvent(2, EventType::FreeCompleted, A, 512) },
        uint16_t(BatchFlags::Compressed));
}

std::vector<uint8_t> validBatch()
{
    return encodeBatch(
        std::vector { makeEvent(1, EventType::Alloc, A, 512, 100), makeEvent(2, EventType::FreeCompleted, A, 512) });
}

template <class T> void poke(std::vector<uint8_t>& bytes, size_t offset, T value)
{
    std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

SegmentRecord segment(uint64_t address, uint64_t size, bool expandable = false)
{
    return test::segmentRecord(address, size, expandable);
}

BlockRecord block(uint64_t address, uint64_t size, uint64_t requested, uint8_t state = 1)
{
    return test::blockRecord(address, size, requested, state);
}

std::vector<uint8_t> validState()
{
    const std::vector segs { segment(A, 20 * MiB) };
    const std::vector blocks { block(A, MiB, 1'000'000), block(A + MiB, MiB, 0, 0), block(A + 2 * MiB, MiB, 999) };
    return encodeState(makeHello(42, 1, "node1", "0.1"), 10, segs, blocks);
}

// The inactive blocks of a snapshot or a replay state: "offset size request" (offset from A and size in MiB, the
// request in bytes), joined by "; ".
template <class Blocks> QString inactiveOf(const Blocks& blocks)
{
    QStringList out;
    for (const auto& b : blocks)
        if (b.state == model::BlockState::Inactive)
            out << QStringLiteral("%1 %2 %3")
                       .arg(double(uint64_t(b.address) - A) / double(MiB))
                       .arg(double(b.size) / double(MiB))
                       .arg(b.requestedSize);
    return out.join(QStringLiteral("; "));
}
QString inactiveBlocks(const model::Snapshot& s) { return inactiveOf(s.blocks); }
QString inactiveBlocks(const model::ReplayState& s) { return inactiveOf(s.blocks); }

// The state a ReplayExtender reaches from the Recorder's join state through its trace (what a live view shows).
// `details`: what the agent knows beyond the trace, per entry so far (grown here from the Recorder's deltas).
model::ReplayState extendedEnd(Recorder& rec, std::vector<model::EntryDetail>& details)
{
    const model::Snapshot join = rec.joinSnapshot(), whole = rec.snapshot();
    Recorder::Delta delta;
    rec.takeDelta(delta);
    for (const Recorder::Entry& e : delta.entries)
        details.push_back({ model::ByteCount(e.blockSize), { e.poolFirst, e.poolSecond } });
    model::Replay replay;
    model::ReplayExtender extender;
    extender.start(replay, join, 0);
    const auto& trace = whole.deviceTraces[0];
    extender.append(replay, whole.entryForms, std::span(trace.data(), trace.size()), details);
    if (replay.warnings() != 0)
        qWarning("the extended replay has %llu warnings", static_cast<unsigned long long>(replay.warnings()));
    return replay.stateAt(replay.entryCount());
}

std::vector<uint8_t> validStackDef()
{
    const std::vector<DecodedFrame> frames { { 0x401000, "inner(int)", "/usr/lib/libx.so", 0 },
                                             { 0x402000, "??", "??", 0 },
                                             { 0x403000, "main", "/bin/job", 12 } };
    return encodeStackDef(7, frames);
}

} // namespace

class TestViewer : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void agentDroppedNeverSums_data();
    void agentDroppedNeverSums();
    void decodeBatch_data()
    {
        QTest::addColumn<std::vector<uint8_t>>("bytes");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("reason");
        QTest::addColumn<qulonglong>("offset");
        const auto ok = int(DecodeErrorCode::None);
        QTest::newRow("two events") << validBatch() << ok << QString() << 0ULL;
        QTest::newRow("empty batch") << encodeBatch({}) << ok << QString() << 0ULL;
        QTest::newRow("empty frame") << std::vector<uint8_t> {} << int(DecodeErrorCode::Truncated)
                                     << QStringLiteral("truncated event batch header: 0 bytes, 24 needed") << 0ULL;
        std::vector<uint8_t> b = validBatch();
        b.resize(10);
        QTest::newRow("truncated header")
            << b << int(DecodeErrorCode::Truncated) << QStringLiteral("truncated event batch header") << 10ULL;
        b = validBatch();
        b.pop_back();
        QTest::newRow("truncated record")
            << b << int(DecodeErrorCode::Truncated)
            << QStringLiteral("announces 2 records (144 bytes) but carries 143 bytes") << qulonglong(b.size());
        b = validBatch();
        poke<uint32_t>(b, 0, 0xdeadbeef);
        QTest::newRow("wrong magic") << b << int(DecodeErrorCode::BadMagic)
                                     << QStringLiteral("not a memscope event batch: magic 0xdeadbeef") << 0ULL;
        b = validBatch();
        poke<uint16_t>(b, 4, ProtocolVersion + 1);
        QTest::newRow("newer version") << b << int(DecodeErrorCode::TooNew)
                                       << QStringLiteral("protocol version 2 is newer than 1") << 4ULL;
        b = validBatch();
        poke<uint16_t>(b, 4, 0);
        QTest::newRow("version zero") << b << int(DecodeErrorCode::TooOld) << QStringLiteral("version 0") << 4ULL;
        b = validBatch();
        poke<uint32_t>(b, 8, 1);
        QTest::newRow("count smaller than payload")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("announces 1 records (72 bytes) but carries 144")
            << 8ULL;
        b = validBatch();
        poke<uint32_t>(b, 8, 0xffffffff);
        QTest::newRow("huge count") << b << int(DecodeErrorCode::Truncated)
                                    << QStringLiteral("announces 4294967295 records") << qulonglong(b.size());
        b = validBatch();
        poke<uint16_t>(b, 6, uint16_t(2));
        QTest::newRow("unknown flag") << b << int(DecodeErrorCode::Unsupported)
                                      << QStringLiteral("unsupported batch flags 0x0002") << 6ULL;
        b = validBatch();
        poke<uint16_t>(b, 6, uint16_t(3));
        QTest::newRow("compressed and an unknown flag")
            << b << int(DecodeErrorCode::Unsupported) << QStringLiteral("unsupported batch flags 0x0003") << 6ULL;

        // Compressed batches (BatchFlags::Compressed: an LZ4 block of count * 72 bytes after the header).
        QTest::newRow("compressed: two events") << validCompressedBatch() << ok << QString() << 0ULL;
        QTest::newRow("compressed: empty batch")
            << encodeBatch({}, uint16_t(BatchFlags::Compressed)) << ok << QString() << 0ULL;
        b = validBatch();
        poke<uint16_t>(b, 6, uint16_t(BatchFlags::Compressed));
        QTest::newRow("compressed: flag on plain records")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("compressed event batch") << 24ULL;
        b = validCompressedBatch();
        b.resize(b.size() - 3);
        QTest::newRow("compressed: truncated LZ4 data")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("the LZ4 data is corrupt") << 24ULL;
        b = validCompressedBatch();
        for (size_t i = 24; i < b.size(); ++i)
            b[i] ^= 0x5a;
        QTest::newRow("compressed: scrambled LZ4 data")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("compressed event batch") << 24ULL;
        b = validCompressedBatch();
        poke<uint32_t>(b, 8, 1);
        QTest::newRow("compressed: more records than announced")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("compressed event batch") << 24ULL;
        b = validCompressedBatch();
        poke<uint32_t>(b, 8, 3);
        QTest::newRow("compressed: fewer records than announced")
            << b << int(DecodeErrorCode::Corrupt)
            << QStringLiteral("decompresses to 144 bytes, but announces 3 records (216 bytes)") << 24ULL;
        b = validCompressedBatch();
        poke<uint32_t>(b, 8, 0xffffffff);
        QTest::newRow("compressed: huge count")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("announces 4294967295 records (at most 1048576)")
            << 8ULL;
        b = validCompressedBatch();
        poke<uint32_t>(b, 8, MaxCompressedBatchRecords);
        QTest::newRow("compressed: count beyond what the data can hold")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("cannot hold that many") << 8ULL;
        b = validCompressedBatch();
        b.resize(b.size() + 400, 0);
        QTest::newRow("compressed: more data than the records compress to")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("more than 2 records (144 bytes) can compress to")
            << 24ULL;
        std::vector<EventRecord> bad { makeEvent(1, EventType::Alloc, A, 512, 100),
                                       makeEvent(2, EventType::FreeCompleted, A, 512) };
        bad[1].type = uint8_t(EventType::Count);
        QTest::newRow("compressed: unknown event type")
            << encodeBatch(bad, uint16_t(BatchFlags::Compressed)) << int(DecodeErrorCode::Corrupt)
            << QStringLiteral("decompressed event record 1 has unknown type 9") << 24ULL;
        b = validBatch();
        b[24 + 72 + offsetof(EventRecord, type)] = uint8_t(EventType::Count);
        QTest::newRow("unknown event type")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("event record 1 has unknown type 9")
            << qulonglong(24 + 72 + offsetof(EventRecord, type));
        b = validBatch();
        b[24 + offsetof(EventRecord, device)] = 200;
        QTest::newRow("device out of range")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("event record 0 names device 200")
            << qulonglong(24 + offsetof(EventRecord, device));
    }
    void decodeBatch()
    {
        QFETCH(std::vector<uint8_t>, bytes);
        QFETCH(int, code);
        QFETCH(QString, reason);
        QFETCH(qulonglong, offset);
        const DecodedBatch r = viewer::decodeBatch(bytes);
        QCOMPARE(int(r.error.code), code);
        if (code == int(DecodeErrorCode::None)) {
            QCOMPARE(r.events.size(), size_t(r.header.count));
            if (!r.events.empty()) {
                QCOMPARE(r.events[0].sequence, 1ULL);
                QCOMPARE(r.events[1].type, uint8_t(EventType::FreeCompleted));
                QCOMPARE(r.header.firstSequence, 1ULL);
            }
            return;
        }
        const QString text = QString::fromStdString(r.error.toString("ipc:///tmp/job"));
        QVERIFY2(text.startsWith(QStringLiteral("ipc:///tmp/job: ")), qPrintable(text));
        QVERIFY2(text.contains(reason), qPrintable(text));
        QCOMPARE(r.error.offset, offset);
        QVERIFY(r.events.empty());
    }

    // A compressed batch of many records: the round trip gives the records back, smaller on the wire, and the
    // decoded batch owns them: copies and moves of it stay valid after the frame and the original are gone.
    void compressedRoundTrip()
    {
        std::vector<EventRecord> events;
        for (uint64_t i = 0; i < 4096; ++i)
            events.push_back(makeEvent(100 + i, i % 3 == 0 ? EventType::Alloc : EventType::FreeCompleted,
                                       A + (i % 64) * 4096, 4096 * (1 + i % 5), 4000, i % 2));
        std::optional<DecodedBatch> moved, copied;
        size_t wireBytes = 0;
        {
            const std::vector<uint8_t> frame = encodeBatch(events, uint16_t(BatchFlags::Compressed));
            wireBytes = frame.size();
            DecodedBatch decoded = viewer::decodeBatch(frame);
            QVERIFY2(decoded.ok(), decoded.error.message.c_str());
            QVERIFY(decoded.compressed());
            copied = decoded;
            moved = std::move(decoded);
        }
        QVERIFY2(wireBytes < events.size() * sizeof(EventRecord) / 2, qPrintable(QString::number(wireBytes)));
        for (const DecodedBatch* b : { &*moved, &*copied }) {
            QCOMPARE(b->header.count, 4096u);
            QCOMPARE(b->header.firstSequence, 100ULL);
            QCOMPARE(b->events.size(), events.size());
            QCOMPARE(static_cast<const void*>(b->events.data()), static_cast<const void*>(b->decompressed.data()));
            QVERIFY(std::memcmp(b->events.data(), events.data(), events.size() * sizeof(EventRecord)) == 0);
        }
        // An uncompressed batch's copy still views the frame, as before.
        const std::vector<uint8_t> plain = encodeBatch(events);
        const DecodedBatch p = viewer::decodeBatch(plain);
        const DecodedBatch pc = p;
        QVERIFY(pc.decompressed.empty());
        QCOMPARE(static_cast<const void*>(pc.events.data()), static_cast<const void*>(plain.data() + 24));
    }

    void decodeState_data()
    {
        QTest::addColumn<std::vector<uint8_t>>("bytes");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("reason");
        QTest::newRow("one segment three blocks") << validState() << int(DecodeErrorCode::None) << QString();
        std::vector<uint8_t> b = validState();
        b.resize(100);
        QTest::newRow("truncated hello") << b << int(DecodeErrorCode::Truncated)
                                         << QStringLiteral("truncated state reply header: 100 bytes, 144 needed");
        b = validState();
        b.resize(b.size() - 40);
        QTest::newRow("missing block") << b << int(DecodeErrorCode::Truncated)
                                       << QStringLiteral(
                                              "announces 1 segments and 3 blocks (160 bytes) but carries 120");
        b = validState();
        b.push_back(0);
        QTest::newRow("trailing byte") << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("but carries 161");
        b = validState();
        std::memset(b.data() + offsetof(Hello, host), 'x', 64);
        QTest::newRow("host without NUL")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("host name in the hello is not NUL-terminated");
        b = validState();
        std::memset(b.data() + offsetof(Hello, agentVersion), 'v', 40);
        QTest::newRow("agent version without NUL")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("agent version in the hello");
        b = validState();
        poke<uint16_t>(b, 4, 7);
        QTest::newRow("newer version") << b << int(DecodeErrorCode::TooNew)
                                       << QStringLiteral("protocol version 7 is newer than 1");
        b = validState();
        b[128 + 16 + 40 + offsetof(BlockRecord, state)] = 3;
        QTest::newRow("unknown block state")
            << b << int(DecodeErrorCode::Corrupt) << QStringLiteral("block record 0 has unknown state 3");
        b = validState();
        poke<uint32_t>(b, 128 + 8, 0x80000000);
        QTest::newRow("huge segment count")
            << b << int(DecodeErrorCode::Truncated) << QStringLiteral("announces 2147483648 segments");
    }
    void decodeState()
    {
        QFETCH(std::vector<uint8_t>, bytes);
        QFETCH(int, code);
        QFETCH(QString, reason);
        const DecodedState r = viewer::decodeState(bytes);
        QCOMPARE(int(r.error.code), code);
        if (code == int(DecodeErrorCode::None)) {
            QCOMPARE(r.header.lastSequence, 10ULL);
            QCOMPARE(r.segments.size(), size_t(1));
            QCOMPARE(r.blocks.size(), size_t(3));
            QCOMPARE(QByteArray(r.hello.host), QByteArray("node1"));
            QCOMPARE(r.hello.pid, 42U);
            return;
        }
        const QString text = QString::fromStdString(r.error.toString("ipc:///tmp/job-state"));
        QVERIFY2(text.contains(reason), qPrintable(text));
        QVERIFY2(text.contains(QStringLiteral("(at byte ")), qPrintable(text));
    }

    void decodeGoodbye_data()
    {
        QTest::addColumn<std::vector<uint8_t>>("bytes");
        QTest::addColumn<int>("code");
        QTest::newRow("valid") << encodeGoodbye(99, 3) << int(DecodeErrorCode::None);
        std::vector<uint8_t> b = encodeGoodbye(99, 3);
        b.pop_back();
        QTest::newRow("short") << b << int(DecodeErrorCode::Truncated);
        b = encodeGoodbye(99, 3);
        b.push_back(1);
        QTest::newRow("trailing byte") << b << int(DecodeErrorCode::Corrupt);
        b = encodeGoodbye(99, 3);
        b[0] ^= 1;
        QTest::newRow("wrong magic") << b << int(DecodeErrorCode::BadMagic);
        b = encodeGoodbye(99, 3);
        poke<uint16_t>(b, 4, 2);
        QTest::newRow("newer version") << b << int(DecodeErrorCode::TooNew);
    }
    void decodeGoodbye()
    {
        QFETCH(std::vector<uint8_t>, bytes);
        QFETCH(int, code);
        const DecodedGoodbye r = viewer::decodeGoodbye(bytes);
        QCOMPARE(int(r.error.code), code);
        if (r.ok()) {
            QCOMPARE(r.goodbye.lastSequence, 99ULL);
            QCOMPARE(r.goodbye.lost, 3ULL);
        } else {
            QVERIFY(!r.error.message.empty());
        }
    }

    void decodeStackDef_data()
    {
        QTest::addColumn<std::vector<uint8_t>>("frame");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("reason");
        const std::vector<uint8_t> good = validStackDef();
        QTest::newRow("valid") << good << int(DecodeErrorCode::None) << QString();
        QTest::newRow("no frames") << encodeStackDef(9, {}) << int(DecodeErrorCode::None) << QString();
        QTest::newRow("empty") << std::vector<uint8_t>() << int(DecodeErrorCode::Truncated)
                               << QStringLiteral("truncated stack definition header");
        std::vector<uint8_t> magic = good;
        poke<uint32_t>(magic, 0, 0x12345678);
        QTest::newRow("bad magic") << magic << int(DecodeErrorCode::BadMagic)
                                   << QStringLiteral("not a memscope stack definition");
        std::vector<uint8_t> newer = good;
        poke<uint16_t>(newer, 4, 2);
        QTest::newRow("too new") << newer << int(DecodeErrorCode::TooNew) << QStringLiteral("newer than 1");
        std::vector<uint8_t> flags = good;
        poke<uint16_t>(flags, offsetof(StackDefHeader, flags), 1);
        QTest::newRow("flags") << flags << int(DecodeErrorCode::Unsupported) << QStringLiteral("flags");
        std::vector<uint8_t> idZero = good;
        poke<uint32_t>(idZero, offsetof(StackDefHeader, stackId), 0);
        QTest::newRow("stack id 0") << idZero << int(DecodeErrorCode::Corrupt) << QStringLiteral("stack id 0");
        std::vector<uint8_t> many = good;
        poke<uint32_t>(many, offsetof(StackDefHeader, frameCount), 0xffffffffu);
        QTest::newRow("huge frame count") << many << int(DecodeErrorCode::Corrupt) << QStringLiteral("at most 64");
        std::vector<uint8_t> shortFrame(good.begin(), good.end() - 1);
        QTest::newRow("truncated strings")
            << shortFrame << int(DecodeErrorCode::Truncated) << QStringLiteral("but carries");
        std::vector<uint8_t> trailing = good;
        trailing.push_back(0);
        QTest::newRow("trailing byte") << trailing << int(DecodeErrorCode::Corrupt) << QStringLiteral("but carries");
        std::vector<uint8_t> outside = good;
        poke<uint32_t>(outside, sizeof(StackDefHeader) + offsetof(FrameRecord, fileOffset), 100000);
        QTest::newRow("string offset outside")
            << outside << int(DecodeErrorCode::Corrupt) << QStringLiteral("outside the string table");
        std::vector<uint8_t> noNul = good;
        noNul.back() = 'x';
        QTest::newRow("last string without NUL")
            << noNul << int(DecodeErrorCode::Corrupt) << QStringLiteral("without its NUL");
    }
    void decodeStackDef()
    {
        QFETCH(std::vector<uint8_t>, frame);
        QFETCH(int, code);
        QFETCH(QString, reason);
        const DecodedStackDef d = viewer::decodeStackDef(frame);
        QCOMPARE(int(d.error.code), code);
        QVERIFY(d.error.offset <= frame.size());
        if (code != int(DecodeErrorCode::None)) {
            QVERIFY2(QString::fromStdString(d.error.message).contains(reason), d.error.message.c_str());
            QVERIFY(d.frames.empty());
            return;
        }
        if (d.header.stackId == 7) {
            QCOMPARE(d.frames.size(), size_t(3));
            QCOMPARE(d.frames[0].address, 0x401000ULL);
            QCOMPARE(d.frames[0].name, std::string_view("inner(int)"));
            QCOMPARE(d.frames[0].file, std::string_view("/usr/lib/libx.so"));
            QCOMPARE(d.frames[1].name, std::string_view("??"));
            QCOMPARE(d.frames[2].line, 12);
        } else {
            QVERIFY(d.frames.empty());
        }
    }

    void decodeNotes_data()
    {
        QTest::addColumn<std::vector<uint8_t>>("frame");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("reason");
        std::vector<uint8_t> two;
        viewer::appendNote(two, 0, 1, 5000, "step_0");
        viewer::appendNote(two, 1, 1, 9000, "step_0");
        QTest::newRow("two notes") << two << int(DecodeErrorCode::None) << QString();
        std::vector<uint8_t> empty;
        QTest::newRow("empty frame") << empty << int(DecodeErrorCode::Truncated) << QStringLiteral("note header");
        std::vector<uint8_t> cut(two.begin(), two.end() - 1);
        QTest::newRow("second name cut") << cut << int(DecodeErrorCode::Truncated) << QStringLiteral("are left");
        std::vector<uint8_t> tail = two;
        tail.push_back(7);
        QTest::newRow("stray byte after the notes")
            << tail << int(DecodeErrorCode::Truncated) << QStringLiteral("note header needs");
        std::vector<uint8_t> stage = two;
        stage[offsetof(NoteHeader, stage)] = 2;
        QTest::newRow("stage 2") << stage << int(DecodeErrorCode::Corrupt) << QStringLiteral("stage 2");
        std::vector<uint8_t> huge = two;
        poke<uint32_t>(huge, offsetof(NoteHeader, nameBytes), 0xffffffffu);
        QTest::newRow("huge name") << huge << int(DecodeErrorCode::Corrupt) << QStringLiteral("at most 4096");
        std::vector<uint8_t> magic = two;
        poke<uint32_t>(magic, sizeof(NoteHeader) + 6, 0x12345678); // the second note's
        QTest::newRow("second note's magic") << magic << int(DecodeErrorCode::BadMagic) << QStringLiteral("note");
        std::vector<uint8_t> longName;
        viewer::appendNote(longName, 0, 0, 1, std::string(5000, 'n'));
        QTest::newRow("a name cut at 4096 by the encoder") << longName << int(DecodeErrorCode::None) << QString();
    }
    void decodeNotes()
    {
        QFETCH(std::vector<uint8_t>, frame);
        QFETCH(int, code);
        QFETCH(QString, reason);
        const viewer::DecodedNotes d = viewer::decodeNotes(frame);
        QCOMPARE(int(d.error.code), code);
        QVERIFY(d.error.offset <= frame.size());
        if (code != int(DecodeErrorCode::None)) {
            QVERIFY2(QString::fromStdString(d.error.message).contains(reason), d.error.message.c_str());
            QVERIFY(d.notes.empty()); // all or nothing
            return;
        }
        if (d.notes.size() == 1) {
            QCOMPARE(d.notes[0].name, std::string(4096, 'n'));
            return;
        }
        QCOMPARE(d.notes.size(), size_t(2));
        QCOMPARE(d.notes[0].name, std::string("step_0"));
        QCOMPARE(int(d.notes[0].header.stage), 0);
        QCOMPARE(int(d.notes[1].header.stage), 1);
        QCOMPARE(int(d.notes[1].header.device), 1);
        QCOMPARE(d.notes[1].header.timeNs, 9000ULL);
    }

    void decodeSettings_data()
    {
        QTest::addColumn<QByteArray>("text");
        QTest::addColumn<int>("code");
        QTest::addColumn<int>("count");
        QTest::newRow("every type") << QByteArray("PYTORCH_CUDA_ALLOC_CONF=s:expandable_segments:True,a=b\n"
                                                  "max_split_size=i:-1\ngarbage_collection_threshold=f:0.5\n"
                                                  "expandable_segments=b:1\nroundup_power2_divisions=d:1:4,2:0\n")
                                    << int(DecodeErrorCode::None) << 5;
        QTest::newRow("no final newline")
            << QByteArray("max_split_size=i:134217728") << int(DecodeErrorCode::None) << 1;
        QTest::newRow("empty dict") << QByteArray("roundup_power2_divisions=d:\n") << int(DecodeErrorCode::None) << 1;
        QTest::newRow("nothing") << QByteArray() << int(DecodeErrorCode::None) << 0;
        QTest::newRow("no equals") << QByteArray("max_split_size\n") << int(DecodeErrorCode::Corrupt) << 0;
        QTest::newRow("unknown type") << QByteArray("a=x:1\n") << int(DecodeErrorCode::Corrupt) << 0;
        QTest::newRow("integer not a number") << QByteArray("a=i:12a\n") << int(DecodeErrorCode::Corrupt) << 0;
        QTest::newRow("boolean 2") << QByteArray("a=b:2\n") << int(DecodeErrorCode::Corrupt) << 0;
        QTest::newRow("real not a number") << QByteArray("a=f:half\n") << int(DecodeErrorCode::Corrupt) << 0;
        QTest::newRow("dict pair without value") << QByteArray("a=d:1:4,2\n") << int(DecodeErrorCode::Corrupt) << 0;
        QTest::newRow("a bad line after good ones")
            << QByteArray("a=i:1\nb=i:2\nc\n") << int(DecodeErrorCode::Corrupt) << 0;
    }
    void decodeSettings()
    {
        QFETCH(QByteArray, text);
        QFETCH(int, code);
        QFETCH(int, count);
        const std::vector<uint8_t> frame
            = viewer::encodeSettings(std::string_view(text.constData(), size_t(text.size())));
        const viewer::DecodedSettings d = viewer::decodeSettings(frame);
        QCOMPARE(int(d.error.code), code);
        QCOMPARE(int(d.settings.size()), count);
        if (count == 5) {
            QCOMPARE(d.settings[0].key, std::string("PYTORCH_CUDA_ALLOC_CONF"));
            QCOMPARE(d.settings[0].value, std::string("expandable_segments:True,a=b")); // ':' and '=' in a string
            QCOMPARE(d.settings[4].type, 'd');
        }
        // A header announcing more than it carries, or more than the limit.
        std::vector<uint8_t> cut = frame;
        poke<uint32_t>(cut, offsetof(SettingsHeader, textBytes), uint32_t(text.size() + 1));
        QCOMPARE(int(viewer::decodeSettings(cut).error.code), int(DecodeErrorCode::Truncated));
        poke<uint32_t>(cut, offsetof(SettingsHeader, textBytes), wire::MaxSettingsBytes + 1);
        QCOMPARE(int(viewer::decodeSettings(cut).error.code), int(DecodeErrorCode::Corrupt));
    }

    // Notes become the snapshot's external_annotations in order, settings its allocator_settings dict with PyTorch's
    // types, whatever the order they came in relative to the state.
    void recorderNotesAndSettings()
    {
        viewer::Recorder recorder;
        std::vector<uint8_t> notes;
        viewer::appendNote(notes, 0, 0, 1'000'000, "step_0");
        for (const viewer::DecodedNote& n : viewer::decodeNotes(notes).notes)
            recorder.addNote(n); // before any state
        recorder.setSettings(viewer::decodeSettings(viewer::encodeSettings(
            "PYTORCH_CUDA_ALLOC_CONF=s:max_split_size_mb:128\nmax_split_size=i:134217728\n"
            "garbage_collection_threshold=f:0.5\nexpandable_segments=b:0\nroundup_power2_divisions=d:1:4,2:0\n")));
        QVERIFY(
            recorder.setState(viewer::decodeState(viewer::encodeState(viewer::makeHello(42, 1, "h", "v"), 0, {}, {}))));
        notes.clear();
        viewer::appendNote(notes, 1, 0, 3'000'000, "step_0");
        for (const viewer::DecodedNote& n : viewer::decodeNotes(notes).notes)
            recorder.addNote(n);
        const model::Snapshot s = recorder.snapshot();
        QCOMPARE(s.annotations.size(), size_t(2));
        QCOMPARE(s.strings.get(s.annotations[0].name), std::string_view("step_0"));
        QCOMPARE(int(s.annotations[0].stage), int(model::Annotation::Stage::Start));
        QCOMPARE(s.annotations[0].timeUs, int64_t(1000));
        QCOMPARE(int(s.annotations[1].stage), int(model::Annotation::Stage::End));
        QCOMPARE(s.annotations[1].timeUs, int64_t(3000));
        QVERIFY(s.allocatorSettings);
        const model::Value& v = *s.allocatorSettings;
        QCOMPARE(v.entries.size(), size_t(5));
        QCOMPARE(v.entries[0].first, std::string("PYTORCH_CUDA_ALLOC_CONF"));
        QCOMPARE(v.entries[0].second.text, std::string("max_split_size_mb:128"));
        QCOMPARE(int(v.find("max_split_size")->kind), int(model::Value::Kind::Int));
        QCOMPARE(v.find("max_split_size")->integer, int64_t(134217728));
        QCOMPARE(v.find("garbage_collection_threshold")->real, 0.5);
        QCOMPARE(int(v.find("expandable_segments")->kind), int(model::Value::Kind::Bool));
        QVERIFY(!v.find("expandable_segments")->boolean);
        const model::Value* divisions = v.find("roundup_power2_divisions");
        QCOMPARE(divisions->entries.size(), size_t(2));
        QCOMPARE(divisions->entries[0].first, std::string("1"));
        QCOMPARE(divisions->entries[0].second.integer, int64_t(4));
        // A model grown from deltas (the app's live document) gets them once, in the next delta.
        viewer::Recorder::Delta delta;
        recorder.takeDelta(delta);
        QVERIFY(delta.settings);
        QCOMPARE(delta.settings->entries.size(), size_t(5));
        QCOMPARE(delta.settings->find("max_split_size")->integer, int64_t(134217728));
        recorder.takeDelta(delta);
        QVERIFY(!delta.settings);
    }

    // Trace entries, blocks and segments get the frames of their stack id, innermost first; an id never defined
    // (its definition lost) gives empty frames, and a definition after its events still counts.
    void recorderStacks()
    {
        Recorder rec;
        QVERIFY(rec.setState(viewer::decodeState(validState())));
        rec.addStackDef(viewer::decodeStackDef(validStackDef()));
        QCOMPARE(rec.stackCount(), size_t(1));
        EventRecord seg = makeEvent(11, EventType::SegmentAlloc, B, 2 * MiB);
        seg.stackId = 7;
        EventRecord alloc = makeEvent(12, EventType::Alloc, B, 512, 100);
        alloc.stackId = 7;
        EventRecord unknown = makeEvent(13, EventType::Alloc, B + 512, 512, 100);
        unknown.stackId = 99;
        EventRecord later = makeEvent(14, EventType::Alloc, B + 1024, 512, 100);
        later.stackId = 8;
        rec.addEvents(std::vector { seg, alloc, unknown, later });
        const std::vector<DecodedFrame> laterFrames { { 0x500000, "later", "/bin/job", 3 } };
        rec.addStackDef(viewer::decodeStackDef(encodeStackDef(8, laterFrames)));
        QCOMPARE(rec.stats().applied, 4ULL);

        const model::Snapshot s = rec.snapshot();
        const auto names = [&](model::StackId id) {
            QStringList out;
            for (const model::FrameId* f = s.stackBegin(id); f != s.stackEnd(id); ++f)
                out << QString::fromUtf8(s.str(s.frame(*f).name)) + QLatin1Char('@')
                        + QString::fromUtf8(s.str(s.frame(*f).filename)) + QLatin1Char(':')
                        + QString::fromStdString(s.frame(*f).line.toString());
            return out;
        };
        const QStringList expected { QStringLiteral("inner(int)@/usr/lib/libx.so:0"), QStringLiteral("??@??:0"),
                                     QStringLiteral("main@/bin/job:12") };
        const auto& trace = s.deviceTraces.at(0);
        QCOMPARE(trace.size(), size_t(4));
        QCOMPARE(names(trace[0].stack), expected);
        QCOMPARE(names(trace[1].stack), expected);
        QCOMPARE(trace[1].stack, trace[0].stack); // interned once
        QVERIFY(names(trace[2].stack).isEmpty());
        QCOMPARE(names(trace[3].stack), QStringList { QStringLiteral("later@/bin/job:3") });
        bool sawSegment = false, sawBlock = false;
        for (const model::Segment& sg : s.segments) {
            if (uint64_t(sg.address) != B)
                continue;
            sawSegment = true;
            QCOMPARE(names(sg.stack), expected);
            const model::Block& b = s.blocks[sg.blockBegin];
            QCOMPARE(uint64_t(b.address), B);
            QCOMPARE(names(b.stack), expected);
            sawBlock = true;
        }
        QVERIFY(sawSegment && sawBlock);
        // A broken definition changes nothing.
        DecodedStackDef broken = viewer::decodeStackDef(std::vector<uint8_t>(3));
        rec.addStackDef(broken);
        QCOMPARE(rec.stackCount(), size_t(2));
    }

    // A bounded recording's part is built off the reading thread from the history the Recorder hands over: the
    // history's snapshot is the one snapshot() gave when it was taken, byte for byte, whatever the Recorder does
    // next (more events, notes, a stack redefined, new settings), and the Recorder goes on from that state with only
    // what follows; two parts chain (the second's trace applies to the first's final state).
    void recorderHandsItsHistoryOver()
    {
        Recorder rec;
        QVERIFY(rec.setState(viewer::decodeState(validState())));
        rec.addStackDef(viewer::decodeStackDef(validStackDef()));
        rec.setSettings(viewer::decodeSettings(viewer::encodeSettings("max_split_size=i:134217728\n")));
        EventRecord seg = makeEvent(11, EventType::SegmentAlloc, B, 2 * MiB);
        seg.stackId = 7;
        EventRecord alloc = makeEvent(12, EventType::Alloc, B, 512, 100);
        alloc.stackId = 7;
        rec.addEvents(std::vector { seg, alloc });
        std::vector<uint8_t> notes;
        viewer::appendNote(notes, 0, 0, 1'000'000, "step_0");
        for (const viewer::DecodedNote& n : viewer::decodeNotes(notes).notes)
            rec.addNote(n);
        const std::string whole = io::encodePickle(rec.snapshot());

        const Recorder::History first = rec.takeHistory();
        QCOMPARE(first.entryCount(), size_t(2));
        QCOMPARE(rec.entryCount(), size_t(0));
        // After the take: no trace, the state as it was (the segment and its block in it).
        const model::Snapshot afterTake = rec.snapshot();
        QCOMPARE(afterTake.deviceTraces.at(0).size(), size_t(0));
        QVERIFY(std::any_of(afterTake.segments.begin(), afterTake.segments.end(),
                            [](const model::Segment& seg) { return uint64_t(seg.address) == B; }));
        const std::vector<DecodedFrame> other { { 0x600000, "redefined", "/bin/job", 5 } };
        rec.addStackDef(viewer::decodeStackDef(encodeStackDef(7, other)));
        rec.setSettings(viewer::decodeSettings(viewer::encodeSettings("max_split_size=i:1\n")));
        EventRecord free = makeEvent(13, EventType::FreeCompleted, B, 512);
        rec.addEvents(std::vector { free, makeEvent(14, EventType::SegmentFree, B, 2 * MiB) });
        notes.clear();
        viewer::appendNote(notes, 1, 0, 3'000'000, "step_0");
        for (const viewer::DecodedNote& n : viewer::decodeNotes(notes).notes)
            rec.addNote(n);
        QVERIFY(io::encodePickle(first.snapshot()) == whole);

        const Recorder::History second = rec.takeHistory();
        const model::Snapshot s = second.snapshot();
        QCOMPARE(s.deviceTraces.at(0).size(), size_t(2));
        QCOMPARE(int(s.deviceTraces[0][0].action), int(model::Action::FreeCompleted));
        QCOMPARE(s.annotations.size(), size_t(1));
        QVERIFY(std::none_of(s.segments.begin(), s.segments.end(),
                             [](const model::Segment& seg) { return uint64_t(seg.address) == B; }));
        QCOMPARE(s.allocatorSettings->find("max_split_size")->integer, int64_t(1));
        QVERIFY(io::encodePickle(first.snapshot()) == whole); // still: the second take shared nothing with it
    }

    void requestRoundTrip()
    {
        const DecodedRequest r = decodeRequest(encodeRequest(RequestType::State));
        QVERIFY(r.ok());
        QCOMPARE(r.request.type, uint16_t(RequestType::State));
        std::vector<uint8_t> bad = encodeRequest(RequestType::State);
        poke<uint16_t>(bad, 6, 9);
        QCOMPARE(decodeRequest(bad).error.code, DecodeErrorCode::Corrupt);
    }

    // A state (one large segment with two live blocks) and the events after it: frees of blocks alive in the
    // state, a new small segment, a heartbeat, a jump over a record with records the agent dropped (as
    // client::AgentClient::flush hands them over, with addMissing and addLost), expandable mappings that join, and
    // an oom. (Sequences, stale records and holding records until a state are the client's: tst_client.)
    void recorderSnapshot()
    {
        Recorder rec;
        const std::vector<uint8_t> stateFrame = validState();
        // Before the state: ignored (the client holds records until there is one).
        rec.addEvents(std::vector { makeEvent(5, EventType::Alloc, A, MiB, 1'000'000) });
        const DecodedState state = viewer::decodeState(stateFrame);
        QVERIFY(state.ok());
        QVERIFY(rec.setState(state));
        rec.addEvents(std::vector { makeEvent(11, EventType::Alloc, A + MiB, 512 * 1024, 500'000) });
        EventRecord gapped = makeEvent(18, EventType::FreeRequested, A + 2 * MiB, MiB);
        EventRecord small = makeEvent(14, EventType::SegmentAlloc, B, 2 * MiB, 0, 7);
        EventRecord expanding = makeEvent(20, EventType::SegmentMap, C, 2 * MiB, 0, 7);
        expanding.poolFirst = 1;
        EventRecord expanding2 = makeEvent(21, EventType::SegmentMap, C + 2 * MiB, 2 * MiB, 0, 7);
        expanding2.poolFirst = 1;
        const std::vector events {
            makeEvent(12, EventType::FreeRequested, A, MiB),
            makeEvent(13, EventType::FreeCompleted, A, MiB),
            small,
            makeEvent(15, EventType::Alloc, B, 512, 100, 7),
            makeEvent(16, EventType::Heartbeat, 0, 0),
            gapped,
            makeEvent(19, EventType::FreeCompleted, A + 2 * MiB, MiB),
            expanding,
            expanding2,
            makeEvent(22, EventType::Alloc, C + MiB, 2 * MiB, 2 * MiB - 5, 7),
            makeEvent(23, EventType::Oom, 12345, 64 * MiB),
        };
        rec.addEvents(events);
        QVERIFY(!rec.stats().resyncNeeded());
        rec.addMissing(1, 1); // 17
        rec.addLost(3);
        QVERIFY(!rec.setState(state)); // too late: events were applied

        const RecorderStats& st = rec.stats();
        QCOMPARE(st.applied, 11ULL);
        QCOMPARE(st.heartbeats, 1ULL);
        QCOMPARE(st.gaps, 1ULL);
        QCOMPARE(st.missing, 1ULL);
        QCOMPARE(st.lost, 3ULL);
        QCOMPARE(st.inconsistent, 0ULL);
        QVERIFY(st.resyncNeeded());
        QCOMPARE(rec.lastSequence(), 23ULL);

        const model::Snapshot s = rec.snapshot();
        QCOMPARE(s.segments.size(), size_t(3));
        QCOMPARE(s.deviceTraces.size(), size_t(1));
        QCOMPARE(s.deviceTraces[0].size(), size_t(11));
        const auto& t = s.deviceTraces[0];
        QCOMPARE(t[0].action, model::Action::Alloc);
        QCOMPARE(t[0].size, int64_t(500'000)); // the requested size, as PyTorch records it
        QCOMPARE(t[1].action, model::Action::FreeRequested);
        QCOMPARE(t[1].size, int64_t(1'000'000)); // the freed block's requested size from the state
        QCOMPARE(t[0].timeUs, int64_t(1'000'011));
        QCOMPARE(t[10].action, model::Action::Oom);
        QCOMPARE(t[10].addr, int64_t(12345));
        // A: [inactive 1 MiB][512 KiB active][inactive rest]
        const model::Segment& a = s.segments[0];
        QCOMPARE(a.address, int64_t(A));
        QCOMPARE(a.totalSize, int64_t(20 * MiB));
        QCOMPARE(a.blockCount, 3U);
        QCOMPARE(s.blocks[a.blockBegin + 1].state, model::BlockState::ActiveAllocated);
        QCOMPARE(a.allocatedSize, int64_t(512 * 1024));
        QCOMPARE(s.str(s.segments[1].segmentType), std::string_view("small"));
        QCOMPARE(s.segments[2].totalSize, int64_t(4 * MiB)); // two adjacent mappings: one segment
        QVERIFY(s.segments[2].isExpandable);
        QCOMPARE(s.segments[2].poolId, (std::pair<int64_t, int64_t>(1, 0)));
        QCOMPARE(s.segments[2].blockCount, 3U);

        // The pickle reads back as the same snapshot, and replays with no warnings to the recorder's final state.
        const std::string pickle = io::encodePickle(s);
        const io::LoadResult r = io::loadSnapshotFromMemory(
            { reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size() }, "recorded");
        QVERIFY2(r.ok(), r.error.toString().c_str());
        const model::Snapshot& back = *r.snapshot;
        QCOMPARE(back.segments.size(), s.segments.size());
        QCOMPARE(back.blocks.size(), s.blocks.size());
        QCOMPARE(back.streams, s.streams);
        for (size_t i = 0; i < s.blocks.size(); ++i)
            QCOMPARE(back.blocks[i].version, s.blocks[i].version);
        const model::Replay replay
            = model::Replay::build(back, 0, { .minCheckpointInterval = 0, .checkpointSpacing = 0 });
        QCOMPARE(replay.warnings(), 0ULL);
        QCOMPARE(replay.entryCount(), int64_t(11));
        const model::ReplayState end = replay.stateAt(replay.entryCount());
        QCOMPARE(end.segments.size(), s.segments.size());
        QCOMPARE(end.blocks.size(), s.blocks.size());
        for (size_t i = 0; i < s.segments.size(); ++i) {
            QCOMPARE(end.segments[i].address, s.segments[i].address);
            QCOMPARE(end.segments[i].totalSize, s.segments[i].totalSize);
            QCOMPARE(end.segments[i].allocatedSize, s.segments[i].allocatedSize);
        }
        for (size_t i = 0; i < s.blocks.size(); ++i) {
            QCOMPARE(end.blocks[i].address, s.blocks[i].address);
            QCOMPARE(end.blocks[i].size, s.blocks[i].size);
            QCOMPARE(end.blocks[i].state, s.blocks[i].state);
        }
        // The state before the first entry is the agent's state reply: one segment, two live blocks.
        const model::ReplayState begin = replay.stateAt(0);
        QCOMPARE(begin.segments.size(), size_t(1));
        QCOMPARE(begin.allocations.size(), size_t(2));
    }

    // Inactive blocks keep the request of their Block object's last user, as the job's own snapshot shows it
    // (c10/cuda/CUDACachingAllocator.cpp; model/freeblocks.h has the rules): from the state reply, through splits,
    // merges, new segments, unmaps and maps.
    void recorderKeepsStaleRequests_data()
    {
        QTest::addColumn<std::vector<SegmentRecord>>("segments");
        QTest::addColumn<std::vector<BlockRecord>>("blocks");
        QTest::addColumn<std::vector<EventRecord>>("events");
        QTest::addColumn<QString>("inactive"); // "offset-from-A size request" per inactive block, in MiB
        // A: [1 MiB active][1 MiB free, 777][1 MiB active][17 MiB free, 555]
        const std::vector segs { segment(A, 20 * MiB) };
        const std::vector blocks { block(A, MiB, 1000), block(A + MiB, MiB, 777, 0), block(A + 2 * MiB, MiB, 999),
                                   block(A + 3 * MiB, 17 * MiB, 555, 0) };
        QTest::newRow("the state reply's inactive blocks, with their requests")
            << segs << blocks << std::vector<EventRecord> {} << QStringLiteral("1 1 777; 3 17 555");
        QTest::newRow("alloc_found_block: an allocation takes the front, the rest keeps the request")
            << segs << blocks << std::vector { makeEvent(11, EventType::Alloc, A + 3 * MiB, MiB, 10) }
            << QStringLiteral("1 1 777; 4 16 555");
        QTest::newRow("free_block: the freed block absorbs both free neighbours with its own request")
            << segs << blocks
            << std::vector { makeEvent(11, EventType::FreeRequested, A + 2 * MiB, MiB),
                             makeEvent(12, EventType::FreeCompleted, A + 2 * MiB, MiB) }
            << QStringLiteral("1 19 999");
        QTest::newRow("alloc_block: a new segment is a block no one requested")
            << segs << blocks << std::vector { makeEvent(11, EventType::SegmentAlloc, A + 20 * MiB, 2 * MiB) }
            << QStringLiteral("1 1 777; 3 17 555; 20 2 0");
        QTest::newRow("an agent that lists no inactive blocks: the gaps carry no request")
            << segs << std::vector { block(A, MiB, 1000), block(A + 2 * MiB, MiB, 999) } << std::vector<EventRecord> {}
            << QStringLiteral("1 1 0; 3 17 0");
        // An expandable segment's mapped 4 MiB, all free, last used for 321 bytes.
        const std::vector expandable { segment(A, 4 * MiB, true) };
        const std::vector freeBlock { block(A, 4 * MiB, 321, 0) };
        QTest::newRow("unmap_block, map_block: a range mapped again brings back the request it was unmapped with")
            << expandable << freeBlock
            << std::vector { makeEvent(11, EventType::SegmentUnmap, A + 2 * MiB, 2 * MiB),
                             makeEvent(12, EventType::SegmentMap, A + 2 * MiB, 2 * MiB) }
            << QStringLiteral("0 4 321");
        QTest::newRow("unmap_block: the pages left free around the unmapped ones are new blocks")
            << expandable << freeBlock << std::vector { makeEvent(11, EventType::SegmentUnmap, A + 2 * MiB, 2 * MiB) }
            << QStringLiteral("0 2 0");
        QTest::newRow("release_expandable_segment: nothing mapped any more, the space is new when mapped again")
            << expandable << freeBlock
            << std::vector { makeEvent(11, EventType::SegmentUnmap, A, 4 * MiB),
                             makeEvent(12, EventType::SegmentMap, A, 2 * MiB) }
            << QStringLiteral("0 2 0");
    }
    void recorderKeepsStaleRequests()
    {
        QFETCH(std::vector<SegmentRecord>, segments);
        QFETCH(std::vector<BlockRecord>, blocks);
        QFETCH(std::vector<EventRecord>, events);
        QFETCH(QString, inactive);
        Recorder rec;
        QVERIFY(rec.setState(viewer::decodeState(encodeState(makeHello(42, 1, "node1", "0.1"), 10, segments, blocks))));
        rec.addEvents(events);
        QCOMPARE(rec.stats().inconsistent, 0ULL);
        const model::Snapshot s = rec.snapshot();
        QCOMPARE(inactiveBlocks(s), inactive);
        // A replay of the recording's trace from its join state (what a live view grows) ends with the same.
        std::vector<model::EntryDetail> details;
        QCOMPARE(inactiveBlocks(extendedEnd(rec, details)), inactive);
    }

    // After a resync (records missed, or the job restarted) the recording's free blocks carry the fresh state's
    // requests, and the synthetic entries bring a replay of its trace to exactly that state too.
    void recorderResyncKeepsStaleRequests_data()
    {
        QTest::addColumn<bool>("restart");
        QTest::newRow("records missed") << false;
        QTest::newRow("the job restarted") << true;
    }
    void recorderResyncKeepsStaleRequests()
    {
        QFETCH(bool, restart);
        Recorder rec;
        const std::vector segs { segment(A, 20 * MiB) };
        const std::vector before { block(A, MiB, 1000), block(A + MiB, MiB, 777, 0), block(A + 2 * MiB, MiB, 999),
                                   block(A + 3 * MiB, 17 * MiB, 555, 0) };
        QVERIFY(rec.setState(viewer::decodeState(encodeState(makeHello(42, 1, "node1", "0.1"), 10, segs, before))));
        rec.addEvents(std::vector { makeEvent(11, EventType::Alloc, A + 3 * MiB, MiB, 10) });
        // The fresh state: the first block freed, its space and the next free block taken by one free block last
        // requested with 4242 (what a missed free and merge left), the 1 MiB allocation gone, its space merged with
        // the rest under yet another request; and a new segment whose rest of a split carries an old request.
        const std::vector fresh { segment(A, 20 * MiB), segment(B, 2 * MiB) };
        const std::vector freshBlocks { block(A, 2 * MiB, 4242, 0), block(A + 2 * MiB, MiB, 999),
                                        block(A + 3 * MiB, 17 * MiB, 31, 0), block(B, MiB, 100),
                                        block(B + MiB, MiB, 64, 0) };
        // The decoded state's records are views into these bytes: they must outlive it.
        const std::vector<uint8_t> freshBytes
            = encodeState(makeHello(restart ? 43 : 42, 1, "node1", "0.1"), 20, fresh, freshBlocks);
        const DecodedState state = viewer::decodeState(freshBytes);
        ResyncReason reason;
        reason.kind = restart ? ResyncReason::Kind::Restart : ResyncReason::Kind::Gap;
        reason.missing = 8;
        rec.resync(state, reason);
        QCOMPARE(rec.stats().inconsistent, 0ULL);
        const QString expected = QStringLiteral("0 2 4242; 3 17 31; 257 1 64"); // B is A + 256 MiB
        QCOMPARE(inactiveBlocks(rec.snapshot()), expected);
        std::vector<model::EntryDetail> details;
        QCOMPARE(inactiveBlocks(extendedEnd(rec, details)), expected);
        // And the recorder goes on from there by the rules.
        rec.addEvents(std::vector { makeEvent(21, EventType::Alloc, A, MiB, 5) });
        QCOMPARE(inactiveBlocks(rec.snapshot()), QStringLiteral("1 1 4242; 3 17 31; 257 1 64"));
        QCOMPARE(inactiveBlocks(extendedEnd(rec, details)), QStringLiteral("1 1 4242; 3 17 31; 257 1 64"));
    }

    // Across a restart of the job, the old run's memory drops to zero at the moment it was last heard of (its last
    // record), even where the new run holds segments at the same addresses; the new run's state comes at its own
    // time. A replay of the recording says so at every index.
    void recorderRestartEmptiesWhereTheJobDied()
    {
        Recorder rec;
        const std::vector segs { segment(A, 20 * MiB) };
        const std::vector blocks { block(A, MiB, 1000), block(A + MiB, 19 * MiB, 777, 0) };
        QVERIFY(rec.setState(viewer::decodeState(encodeState(makeHello(42, 1, "node1", "0.1"), 10, segs, blocks))));
        rec.addEvents(std::vector { makeEvent(11, EventType::Alloc, A + MiB, 2 * MiB, 2 * MiB) });
        const uint64_t diedUs = makeEvent(11, EventType::Alloc, 0, 0).timeNs / 1000;
        // The next run: the same segment address (a deterministic allocator), other blocks.
        const std::vector freshBlocks { block(A, 4 * MiB, 4000), block(A + 4 * MiB, 16 * MiB, 0, 0) };
        const std::vector<uint8_t> freshBytes = encodeState(makeHello(43, 1, "node1", "0.1"), 5, segs, freshBlocks);
        ResyncReason reason;
        reason.kind = ResyncReason::Kind::Restart;
        reason.timeNs = 9'000'000'000; // its first record, 8 s later
        rec.resync(viewer::decodeState(freshBytes), reason);
        QCOMPARE(rec.stats().inconsistent, 0ULL);
        QCOMPARE(rec.stats().restarts, 1ULL);
        const model::Snapshot s = rec.snapshot();
        QCOMPARE(s.deviceTraces.size(), size_t(1));
        const model::Trace& trace = s.deviceTraces[0];
        // alloc (the old run's), then its frees and segment_free at its last record, then the new run's.
        size_t firstNew = 0;
        while (firstNew < trace.size() && trace[firstNew].timeUs == int64_t(diedUs))
            ++firstNew;
        QCOMPARE(firstNew, size_t(6)); // alloc, 2 x (free_requested, free_completed), segment_free
        QCOMPARE(trace[firstNew - 1].action, model::Action::SegmentFree);
        for (size_t i = firstNew; i < trace.size(); ++i)
            QCOMPARE(trace[i].timeUs, int64_t(reason.timeNs / 1000));
        QCOMPARE(trace[firstNew].action, model::Action::SegmentAlloc);
        const model::Replay replay = model::Replay::build(s, 0);
        const auto atDeath = replay.stateAt(firstNew);
        QVERIFY(atDeath.segments.empty());
        QVERIFY(atDeath.allocations.empty());
        const auto before = replay.stateAt(1); // the old run's last state: two blocks allocated in A
        QCOMPARE(before.segments.size(), size_t(1));
        QCOMPARE(before.allocations.size(), size_t(2));
        const auto end = replay.stateAt(trace.size());
        QCOMPARE(end.segments.size(), size_t(1));
        QCOMPARE(end.allocations.size(), size_t(1));
        QCOMPARE(inactiveBlocks(s), QStringLiteral("4 16 0"));
    }

    void recorderSkipsWhatDoesNotFit_data()
    {
        QTest::addColumn<int>("type");
        QTest::addColumn<qulonglong>("address");
        QTest::addColumn<qulonglong>("size");
        QTest::newRow("free of an unknown block") << int(EventType::FreeCompleted) << qulonglong(A + 8 * MiB) << 512ULL;
        QTest::newRow("alloc outside every segment") << int(EventType::Alloc) << qulonglong(C) << 512ULL;
        QTest::newRow("alloc over a live block") << int(EventType::Alloc) << qulonglong(A + 512) << 512ULL;
        QTest::newRow("segment over a segment")
            << int(EventType::SegmentAlloc) << qulonglong(A + MiB) << qulonglong(MiB);
        QTest::newRow("free of a segment in use")
            << int(EventType::SegmentFree) << qulonglong(A) << qulonglong(20 * MiB);
        QTest::newRow("unmap of a plain segment") << int(EventType::SegmentUnmap) << qulonglong(A) << qulonglong(MiB);
        // What no allocator produces, and the model's signed 64-bit fields cannot hold (found by fuzz_wire).
        constexpr qulonglong Half = 1ULL << 63;
        QTest::newRow("segment at 2^63") << int(EventType::SegmentAlloc) << Half << qulonglong(MiB);
        QTest::newRow("segment at 2^64 - 1 MiB") << int(EventType::SegmentAlloc) << qulonglong(-MiB) << qulonglong(MiB);
        QTest::newRow("segment of 2^63 bytes") << int(EventType::SegmentAlloc) << qulonglong(C) << Half;
        QTest::newRow("segment across 2^63") << int(EventType::SegmentAlloc) << Half - MiB << qulonglong(2 * MiB);
        QTest::newRow("mapping at 2^63") << int(EventType::SegmentMap) << Half << qulonglong(MiB);
        QTest::newRow("oom of 2^63 bytes") << int(EventType::Oom) << qulonglong(MiB) << Half;
        QTest::newRow("oom with 2^63 bytes free") << int(EventType::Oom) << Half << qulonglong(MiB);
    }
    void recorderSkipsWhatDoesNotFit()
    {
        QFETCH(int, type);
        QFETCH(qulonglong, address);
        QFETCH(qulonglong, size);
        Recorder rec;
        QVERIFY(rec.setState(viewer::decodeState(validState())));
        rec.addEvents(std::vector { makeEvent(11, EventType(type), address, size, size) });
        QCOMPARE(rec.stats().inconsistent, 1ULL);
        QCOMPARE(rec.stats().applied, 0ULL);
        QVERIFY(rec.stats().resyncNeeded());
        const model::Snapshot s = rec.snapshot();
        QVERIFY(s.deviceTraces.empty() || s.deviceTraces[0].empty());
        QCOMPARE(s.segments.size(), size_t(1));
    }

    // A state reply's segments and blocks at 2^63 and beyond (the model's addresses and sizes are signed 64-bit):
    // each counted as a misfit and left out, the rest kept, and the blocks still tile their segment.
    void recorderStateBeyond2e63()
    {
        constexpr uint64_t Half = uint64_t(1) << 63;
        const std::vector segs { segment(A, 20 * MiB), segment(Half, MiB), segment(Half - MiB, 2 * MiB),
                                 segment(C, Half) };
        const std::vector blocks { block(A, MiB, 1'000), block(A + MiB, MiB, Half), block(Half, MiB, 1'000),
                                   block(Half, MiB, 0, 0) };
        Recorder rec;
        QVERIFY(rec.setState(viewer::decodeState(encodeState(makeHello(42, 1, "node1", "0.1"), 10, segs, blocks))));
        QCOMPARE(rec.stats().inconsistent, 6ULL);
        QVERIFY(rec.stats().resyncNeeded());
        const model::Snapshot s = rec.snapshot();
        QCOMPARE(s.segments.size(), size_t(1));
        QCOMPARE(uint64_t(s.segments[0].address), A);
        QCOMPARE(s.blocks.size(), size_t(2)); // the block at A and the free rest of the segment
        QCOMPARE(uint64_t(s.blocks[0].size), MiB);
        QCOMPARE(uint64_t(s.blocks[1].address), A + MiB);
        QCOMPARE(uint64_t(s.blocks[1].size), 19 * MiB);
    }

    // Inputs that once broke fuzz_wire (tests/data/fuzz-regressions/wire-*): decoded as a state, with the rest of
    // the bytes as events, the Recorder's blocks must still tile its segments.
    void fuzzRegressions()
    {
        const QDir dir(QString::fromStdString(test::dataPath("fuzz-regressions")));
        const QStringList names = dir.entryList({ QStringLiteral("wire-*") }, QDir::Files);
        QVERIFY(!names.isEmpty());
        for (const QString& name : names) {
            QFile f(dir.filePath(name));
            QVERIFY(f.open(QIODevice::ReadOnly));
            const QByteArray bytes = f.readAll();
            const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes.constData()),
                                                size_t(bytes.size()));
            const DecodedState state = viewer::decodeState(data);
            Recorder rec;
            if (state.ok())
                rec.setState(state);
            const model::Snapshot s = rec.snapshot();
            for (const model::Segment& seg : s.segments) {
                uint64_t cursor = uint64_t(seg.address);
                for (uint32_t i = 0; i < seg.blockCount; ++i) {
                    QCOMPARE(uint64_t(s.blocks[seg.blockBegin + i].address), cursor);
                    cursor += uint64_t(s.blocks[seg.blockBegin + i].size);
                }
                QCOMPARE(cursor, uint64_t(seg.address) + uint64_t(seg.totalSize));
            }
        }
    }
};

void TestViewer::agentDroppedNeverSums_data()
{
    // The drops records announced and the goodbye's count are two views of the same drops (the app's live status
    // and Save used to add them).
    QTest::addColumn<qulonglong>("announced");
    QTest::addColumn<qulonglong>("goodbye");
    QTest::addColumn<qulonglong>("dropped");
    QTest::newRow("none") << 0ull << 0ull << 0ull;
    QTest::newRow("announced, no goodbye yet") << 153515ull << 0ull << 153515ull;
    QTest::newRow("the goodbye says the same") << 153515ull << 153515ull << 153515ull;
    QTest::newRow("the goodbye says more (drops after the last record)") << 100ull << 153515ull << 153515ull;
}

void TestViewer::agentDroppedNeverSums()
{
    QFETCH(qulonglong, announced);
    QFETCH(qulonglong, goodbye);
    QFETCH(qulonglong, dropped);
    viewer::RecorderStats stats;
    stats.lost = announced;
    stats.agentLost = goodbye;
    QCOMPARE(qulonglong(stats.agentDropped()), dropped);
}

QTEST_GUILESS_MAIN(TestViewer)
#include "tst_viewer.moc"
