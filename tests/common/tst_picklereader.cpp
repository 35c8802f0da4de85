// Every integer PyTorch can write, through the pickle reader and the snapshot builder (common/io/picklereader.cpp,
// snapshotbuilder.cpp): hand-built pickles (opcode bytes as CPython's Lib/pickletools.py lists them, each checked
// with pickle.loads while the table was written) put one integer, in every encoding at the edges of 64 bits, into a
// frame's line (kept exactly, signed or not) and into a trace entry's size (an int64 field: what it cannot hold is
// left out with a warning naming the field and the integer's byte offset). Exact lines also survive both writers.
// Test thread only.
#include "io/picklereader.h"
#include "io/snapshotio.h"
#include "model/loadwarning.h"
#include "testutil.h"

#include <QDir>
#include <QFile>
#include <QTest>

#include <limits>
#include <string>
#include <vector>

using namespace memscope;

namespace {

QByteArray text(const char* s)
{
    const QByteArray b(s);
    QByteArray out("X");
    const uint32_t n = uint32_t(b.size());
    out += QByteArray(reinterpret_cast<const char*>(&n), 4); // BINUNICODE: a 4-byte little-endian length
    return out + b;
}

// {'segments': [], 'device_traces': [[{'action': 'alloc', 'addr': 4096, 'size': SIZE, 'stream': 0,
//   'frames': [{'name': 'f', 'filename': 'x.py', 'line': LINE}]}]]} as protocol 2, SIZE and LINE given as opcodes.
// `sizeAt` / `lineAt` receive the byte offset of each.
QByteArray snapshotWith(const QByteArray& size, const QByteArray& line, qint64* sizeAt = nullptr,
                        qint64* lineAt = nullptr)
{
    QByteArray out = QByteArray("\x80\x02}(", 4) + text("segments") + "]" + text("device_traces") + "]]}("
        + text("action") + text("alloc") + text("addr") + QByteArray("J\x00\x10\x00\x00", 5) + text("size");
    if (sizeAt)
        *sizeAt = out.size();
    out += size + text("stream") + QByteArray("K\x00", 2) + text("frames") + "]}(" + text("name") + text("f")
        + text("filename") + text("x.py") + text("line");
    if (lineAt)
        *lineAt = out.size();
    return out + line + "uauaau.";
}

io::LoadResult load(const QByteArray& bytes, const std::string& name = "ints.pickle")
{
    return io::loadSnapshotFromMemory(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.constData()), size_t(bytes.size())), name);
}

QByteArray repeat(char byte, int n) { return QByteArray(n, byte); }

const QByteArray Five("K\x05", 2); // BININT1 5

} // namespace

class TestPickleReader : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void frameLines_data();
    void frameLines();
    void int64Fields_data();
    void int64Fields();
    void genericValues();
    void extentEndsAtStop();
    void extentEndsWhereTheParseFails_data();
    void extentEndsWhereTheParseFails();
};

void TestPickleReader::frameLines_data()
{
    QTest::addColumn<QByteArray>("line"); // the opcode and its argument
    QTest::addColumn<QString>("value"); // the line as Python prints it; empty: no 64-bit integer holds it

    const QByteArray long1_8("\x8a\x08", 2), long1_9("\x8a\x09", 2);
    // LONG1: little-endian two's complement; Python's pickler writes the fewest bytes that keep the sign.
    QTest::newRow("LONG1 8 bytes: 2^63 - 1") << long1_8 + repeat('\xff', 7) + "\x7f"
                                             << "9223372036854775807";
    QTest::newRow("LONG1 9 bytes: 2^63") << long1_9 + repeat('\x00', 7) + "\x80" + repeat('\x00', 1)
                                         << "9223372036854775808";
    QTest::newRow("LONG1 9 bytes: 2^64 - 1 (torch.compile's line, from Python)")
        << long1_9 + repeat('\xff', 8) + repeat('\x00', 1) << "18446744073709551615";
    QTest::newRow("LONG1 8 bytes: -2^63") << long1_8 + repeat('\x00', 7) + "\x80"
                                          << "-9223372036854775808";
    QTest::newRow("LONG1 8 bytes: -1 (the same line from PyTorch's C++ writer)") << long1_8 + repeat('\xff', 8) << "-1";
    QTest::newRow("LONG1 9 bytes: -1, sign-extended beyond need") << long1_9 + repeat('\xff', 9) << "-1";
    QTest::newRow("LONG1 0 bytes: 0") << QByteArray("\x8a\x00", 2) << "0";
    QTest::newRow("LONG1 9 bytes: -2^63 - 1") << long1_9 + repeat('\xff', 7) + "\x7f\xff"
                                              << "";
    QTest::newRow("LONG1 9 bytes: 2^64") << long1_9 + repeat('\x00', 8) + "\x01"
                                         << "";
    QTest::newRow("LONG1 9 bytes: -2^64") << long1_9 + repeat('\x00', 8) + "\xff"
                                          << "";
    // LONG4: the same with a 4-byte length.
    QTest::newRow("LONG4 9 bytes: 2^64 - 1")
        << QByteArray("\x8b\x09\x00\x00\x00", 5) + repeat('\xff', 8) + repeat('\x00', 1) << "18446744073709551615";
    QTest::newRow("LONG4 16 bytes: 2^64 - 1, zero-padded")
        << QByteArray("\x8b\x10\x00\x00\x00", 5) + repeat('\xff', 8) + repeat('\x00', 8) << "18446744073709551615";
    QTest::newRow("LONG4 16 bytes: -2^63, sign-padded") << QByteArray("\x8b\x10\x00\x00\x00", 5) + repeat('\x00', 7)
            + "\x80" + repeat('\xff', 8) << "-9223372036854775808";
    QTest::newRow("LONG4 16 bytes: 2^127") << QByteArray("\x8b\x10\x00\x00\x00", 5) + repeat('\x00', 15) + "\x7f"
                                           << "";
    // Protocol 0 text forms: INT (I...\n) and LONG (L...L\n), any size.
    QTest::newRow("text INT: 2^64 - 1") << QByteArray("I18446744073709551615\n") << "18446744073709551615";
    QTest::newRow("text INT: 2^63") << QByteArray("I9223372036854775808\n") << "9223372036854775808";
    QTest::newRow("text INT: -2^63") << QByteArray("I-9223372036854775808\n") << "-9223372036854775808";
    QTest::newRow("text INT: -2^63 - 1") << QByteArray("I-9223372036854775809\n") << "";
    QTest::newRow("text INT: +7") << QByteArray("I+7\n") << "7";
    QTest::newRow("text LONG: 2^64 - 1") << QByteArray("L18446744073709551615L\n") << "18446744073709551615";
    QTest::newRow("text LONG: 2^63 - 1") << QByteArray("L9223372036854775807L\n") << "9223372036854775807";
    QTest::newRow("text LONG: 2^64") << QByteArray("L18446744073709551616L\n") << "";
    QTest::newRow("text LONG: 40 digits") << QByteArray("L1234567890123456789012345678901234567890L\n") << "";
    // The usual binary forms.
    QTest::newRow("BININT: -1") << QByteArray("J\xff\xff\xff\xff") << "-1";
    QTest::newRow("BININT2: 1066") << QByteArray("M\x2a\x04", 3) << "1066";
}

void TestPickleReader::frameLines()
{
    QFETCH(QByteArray, line);
    QFETCH(QString, value);
    qint64 lineAt = 0;
    const io::LoadResult r = load(snapshotWith(Five, line, nullptr, &lineAt));
    QVERIFY2(r.ok(), r.error.toString().c_str());
    const model::Snapshot& s = *r.snapshot;
    QCOMPARE(s.frames.size(), size_t(1));
    if (!value.isEmpty()) {
        QCOMPARE(QString::fromStdString(s.frames[0].line.toString()), value);
        QVERIFY(s.warnings.empty());
        // Both writers write it back exactly, and read back it is the same line.
        for (const bool json : { false, true }) {
            const std::string bytes = json ? io::encodeJson(s) : io::encodePickle(s);
            const io::LoadResult again = load(QByteArray::fromStdString(bytes));
            QVERIFY2(again.ok(), again.error.toString().c_str());
            QCOMPARE(QString::fromStdString(again.snapshot->frames[0].line.toString()), value);
            QVERIFY(again.snapshot->frames[0].line == s.frames[0].line);
            if (json)
                QVERIFY(bytes.find("\"line\":" + value.toStdString() + "}") != std::string::npos);
        }
        return;
    }
    // Lost: the frame stays (its line at the default 0); one warning names the file, the field and the offset.
    QCOMPARE(s.frames[0].line.toString(), std::string("0"));
    QCOMPARE(s.warnings.size(), size_t(1));
    const model::LoadWarning& w = s.warnings[0];
    QCOMPARE(w.kind, model::LoadWarning::Kind::LostInteger);
    QCOMPARE(w.count, uint64_t(1));
    const std::string expected = "the frame line at byte " + std::to_string(lineAt) + " (";
    QVERIFY2(w.message.find(expected) != std::string::npos, w.message.c_str());
    QVERIFY2(w.message.find("wider than 64 bits") != std::string::npos, w.message.c_str());
    const std::string shown = model::warningLine("ints.pickle", w);
    QVERIFY2(shown.rfind("ints.pickle: warning: 1 integer did not fit its field", 0) == 0, shown.c_str());
    // The rest of the entry is intact.
    QCOMPARE(s.deviceTraces.at(0)[0].size, int64_t(5));
}

void TestPickleReader::int64Fields_data()
{
    QTest::addColumn<QByteArray>("size");
    QTest::addColumn<qint64>("value"); // the entry's size as loaded
    QTest::addColumn<QString>("warning"); // what the warning says after "the trace entry size"; empty: none

    QTest::newRow("2^63 - 1 fits") << QByteArray("\x8a\x08", 2) + repeat('\xff', 7) + "\x7f"
                                   << std::numeric_limits<qint64>::max() << "";
    QTest::newRow("-2^63 fits (negative: the consistency check's warning, not this one)")
        << QByteArray("\x8a\x08", 2) + repeat('\x00', 7) + "\x80" << std::numeric_limits<qint64>::min() << "";
    QTest::newRow("2^63 is beyond int64: left out") << QByteArray("\x8a\x09", 2) + repeat('\x00', 7) + "\x80"
            + repeat('\x00', 1) << qint64(0) << " (device 0, trace entry 0) is 9223372036854775808, beyond the int64";
    QTest::newRow("2^64 - 1 is beyond int64: left out")
        << QByteArray("L18446744073709551615L\n") << qint64(0)
        << " (device 0, trace entry 0) is 18446744073709551615, beyond the int64";
    QTest::newRow("2^64 is wider than 64 bits: left out at its offset") << QByteArray("\x8a\x09", 2) + repeat('\x00', 8)
            + "\x01" << qint64(0) << " at byte @ (device 0, trace entry 0) is wider than 64 bits";
}

void TestPickleReader::int64Fields()
{
    QFETCH(QByteArray, size);
    QFETCH(qint64, value);
    QFETCH(QString, warning);
    qint64 sizeAt = 0;
    const io::LoadResult r = load(snapshotWith(size, QByteArray("K\x07", 2), &sizeAt));
    QVERIFY2(r.ok(), r.error.toString().c_str());
    QCOMPARE(r.snapshot->deviceTraces.at(0)[0].size, int64_t(value));
    // (A negative size is another warning, the consistency check's: only lost integers count here.)
    std::vector<model::LoadWarning> lost;
    for (const model::LoadWarning& w : r.snapshot->warnings)
        if (w.kind == model::LoadWarning::Kind::LostInteger)
            lost.push_back(w);
    if (warning.isEmpty()) {
        QVERIFY(lost.empty());
        return;
    }
    QCOMPARE(lost.size(), size_t(1));
    const std::string expected
        = "the trace entry size" + warning.replace(QLatin1Char('@'), QString::number(sizeAt)).toStdString();
    QVERIFY2(lost[0].message.find(expected) != std::string::npos, lost[0].message.c_str());
}

// Allocator settings and unknown keys hold any value: unsigned ones exactly; an entry wider than 64 bits is left
// out of its dict (the rest stays), with a warning naming the key and the offset.
void TestPickleReader::genericValues()
{
    // {'segments': [], 'allocator_settings': {'a': 2^64 - 1, 'b': 2^64, 'c': 1}}
    QByteArray bytes = QByteArray("\x80\x02}(", 4) + text("segments") + "]" + text("allocator_settings") + "}("
        + text("a") + QByteArray("\x8a\x09", 2) + repeat('\xff', 8) + repeat('\x00', 1) + text("b");
    const qint64 bAt = bytes.size();
    bytes += QByteArray("\x8a\x09", 2) + repeat('\x00', 8) + "\x01" + text("c") + "K\x01uu.";
    const io::LoadResult r = load(bytes);
    QVERIFY2(r.ok(), r.error.toString().c_str());
    const model::Snapshot& s = *r.snapshot;
    QVERIFY(s.allocatorSettings);
    QCOMPARE(s.allocatorSettings->entries.size(), size_t(2));
    const model::Value* a = s.allocatorSettings->find("a");
    QVERIFY(a);
    QCOMPARE(a->kind, model::Value::Kind::UInt);
    QCOMPARE(a->unsignedInteger, ~uint64_t(0));
    QVERIFY(!s.allocatorSettings->find("b"));
    QVERIFY(s.allocatorSettings->find("c"));
    QCOMPARE(s.warnings.size(), size_t(1));
    const std::string expected = "the entry 'b' of 'allocator_settings' at byte " + std::to_string(bAt);
    QVERIFY2(s.warnings[0].message.find(expected) != std::string::npos, s.warnings[0].message.c_str());
    // Written back: 'a' as LONG1 of 9 bytes (what Python writes for it), and as its digits in JSON.
    const std::string pickle = io::encodePickle(s);
    QVERIFY(pickle.find(std::string("\x8a\x09") + std::string(8, '\xff') + std::string(1, '\0')) != std::string::npos);
    QVERIFY(io::encodeJson(s).find("\"a\":18446744073709551615") != std::string::npos);
}

// PickleExtent (what an .xz file is decompressed as far as) over every pickle at hand: the real snapshots, the test
// data and a protocol-0 file (text opcodes). Each ends at its STOP, which is its last byte, whether the bytes come
// at once, with more after them, or a few at a time as the decompressor hands them over.
void TestPickleReader::extentEndsAtStop()
{
    QStringList files;
    for (const std::string& folder :
         { test::sharedDir() + "/snapshots", test::dataPath(""), test::dataPath("corpus") }) {
        const QDir dir(QString::fromStdString(folder));
        for (const QString& name : dir.entryList({ QStringLiteral("*.pickle") }, QDir::Files))
            if (!name.startsWith(QLatin1String("truncated")) && !name.startsWith(QLatin1String("hostile")))
                files << dir.filePath(name);
    }
    QVERIFY2(files.size() >= 10, qPrintable(files.join(QLatin1Char(' '))));
    QList<QByteArray> pickles;
    for (const QString& file : files) {
        QFile f(file);
        QVERIFY(f.open(QIODevice::ReadOnly));
        pickles << f.readAll();
    }
    pickles << QByteArray("(lp0\n(dp1\nVaddress\np2\nI1024\nsVstream\np4\nI0\nsVblocks\np5\n(lp6\nsa.");
    for (const QByteArray& pickle : pickles) {
        const auto bytes = [&](const QByteArray& b) {
            return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.constData()), size_t(b.size()));
        };
        const uint64_t size = uint64_t(pickle.size());
        io::PickleExtent whole;
        QCOMPARE(whole.scan(bytes(pickle)), io::PickleExtent::State::Stop);
        QCOMPARE(whole.needed(), size);
        io::PickleExtent followed;
        QCOMPARE(followed.scan(bytes(pickle + QByteArray(100, '\0'))), io::PickleExtent::State::Stop);
        QCOMPARE(followed.needed(), size);
        // In pieces of 7 bytes (a prime: pieces end inside every kind of opcode somewhere), then of 64 KiB.
        io::PickleExtent pieces;
        uint64_t given = 0;
        while (pieces.state() == io::PickleExtent::State::More && given < size) {
            given = std::min<uint64_t>(size, given + (given < (1 << 16) ? 7 : 1 << 16));
            pieces.scan(bytes(pickle.left(qsizetype(given))));
            QVERIFY(pieces.needed() <= size);
            if (pieces.state() == io::PickleExtent::State::More)
                QVERIFY(pieces.needed() > given); // what it waits for is not here yet
        }
        QCOMPARE(pieces.state(), io::PickleExtent::State::Stop);
        QCOMPARE(pieces.needed(), size);
    }
}

void TestPickleReader::extentEndsWhereTheParseFails_data()
{
    QTest::addColumn<QByteArray>("pickle");
    QTest::addColumn<qulonglong>("needed");
    // The parse fails at the opcode: unknown, refused, LONG4 with a negative length.
    QTest::newRow("unknown opcode") << QByteArray("\x80\x02\xff.", 4) << 3ULL;
    QTest::newRow("GLOBAL") << QByteArray("cos\nsystem\n(S'echo'\ntR.") << 1ULL;
    QTest::newRow("STACK_GLOBAL") << QByteArray("\x80\x04\x8c\x02os\x8c\x06system\x93.", 15) << 15ULL;
    QTest::newRow("LONG4 of a negative length") << QByteArray("\x80\x02\x8b\xff\xff\xff\xff.", 8) << 7ULL;
    // A FRAME the parse wants whole when it meets it: its end, though the STOP inside it comes first.
    QTest::newRow("FRAME past the STOP") << QByteArray("\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}.", 13) << 27ULL;
}

void TestPickleReader::extentEndsWhereTheParseFails()
{
    QFETCH(QByteArray, pickle);
    QFETCH(qulonglong, needed);
    io::PickleExtent extent;
    extent.scan(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(pickle.constData()), size_t(pickle.size())));
    QVERIFY(extent.state() != io::PickleExtent::State::More || needed > qulonglong(pickle.size()));
    QCOMPARE(qulonglong(extent.needed()), needed);
}

QTEST_GUILESS_MAIN(TestPickleReader)
#include "tst_picklereader.moc"
