// Bad input of every kind must give one clear error naming the file and the reason: never a crash, a hang or
// unbounded memory. Hostile pickles (code-executing opcodes) are refused. Inputs are hand-assembled pickles
// (opcode bytes as listed in CPython's Lib/pickletools.py) and damaged copies of real snapshots.
#include "io/snapshotio.h"
#include "testutil.h"

#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <lzma.h>
#include <sys/resource.h>

#include <random>

using namespace memscope;

Q_DECLARE_METATYPE(io::ErrorCode)

namespace {

QByteArray bytes(std::initializer_list<QByteArray> parts)
{
    QByteArray out;
    for (const auto& p : parts)
        out += p;
    return out;
}

io::LoadResult loadBytes(const QByteArray& data, const std::string& name = "input.pickle")
{
    return io::loadSnapshotFromMemory(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.constData()), size_t(data.size())), name);
}

QByteArray readAll(const std::string& path)
{
    QFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::ReadOnly))
        return {};
    return f.readAll();
}

// A minimal valid protocol-2 snapshot: {'segments': []}, then `tail` inserted before the closing ops.
QByteArray snapshotWith(const QByteArray& extraKeyValue)
{
    return bytes({ QByteArray("\x80\x02}(", 4), QByteArray("X\x08\x00\x00\x00segments]", 14), extraKeyValue,
                   QByteArray("u.", 2) });
}

QByteArray nestedLists(int depth)
{
    // ] ] ] ... then APPEND each list into the one below it: a list nested `depth` levels deep, with no MARK.
    QByteArray out("\x80\x02", 2);
    out += QByteArray(depth, ']');
    out += QByteArray(depth - 1, 'a');
    return out;
}

// BINUNICODE 'device_traces'
const QByteArray DeviceTracesKey = QByteArray("X\x0d\x00\x00\x00", 5) + "device_traces";

// {'segments': [], 'device_traces': body}: `body` is the opcodes that leave the value on the stack.
QByteArray deviceTracesWith(const QByteArray& body) { return snapshotWith(DeviceTracesKey + body); }

// `unit` repeated `count` times.
QByteArray repeated(const QByteArray& unit, int count)
{
    QByteArray out;
    out.reserve(unit.size() * count);
    for (int i = 0; i < count; ++i)
        out += unit;
    return out;
}

// `data` as one .xz stream (liblzma's one-call encoder, preset 0: the fastest); empty if the encoder failed.
QByteArray xz(const QByteArray& data)
{
    QByteArray out(qsizetype(lzma_stream_buffer_bound(size_t(data.size()))), Qt::Uninitialized);
    size_t written = 0;
    if (lzma_easy_buffer_encode(0, LZMA_CHECK_CRC64, nullptr, reinterpret_cast<const uint8_t*>(data.constData()),
                                size_t(data.size()), reinterpret_cast<uint8_t*>(out.data()), &written,
                                size_t(out.size()))
        != LZMA_OK)
        return {};
    out.truncate(qsizetype(written));
    return out;
}

// `data` and then 1 GiB of zeros, as an .xz file of 17 streams: `data` and 64 MiB of zeros in the first, 64 MiB of
// zeros in each of the others (a file may hold streams one after another: The .xz File Format 1.1.0, section 2,
// "Overall Structure of .xz File"; the reader decodes them as one, LZMA_CONCATENATED). About 170 KB.
QByteArray xzWithZerosAfter(const QByteArray& data)
{
    QByteArray zeros(64 << 20, '\0');
    QByteArray out = xz(data + zeros);
    const QByteArray more = xz(zeros);
    for (int i = 0; i < 15; ++i)
        out += more;
    return out;
}

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"), or -1.
long statusKiB(const char* field)
{
    QFile f(QStringLiteral("/proc/self/status"));
    if (!f.open(QIODevice::ReadOnly))
        return -1;
    const QByteArray name = QByteArray(field) + ':';
    for (const QByteArray& line : f.readAll().split('\n'))
        if (line.startsWith(name))
            return line.mid(name.size()).trimmed().split(' ').value(0).toLong();
    return -1;
}

// How far the process's peak resident memory rose above what it held before `load` ran, in KiB. The peak is reset
// first where the kernel lets us (proc(5), /proc/pid/clear_refs: writing 5 resets the high water mark to the
// current RSS, since Linux 4.0), so that an earlier test's peak does not hide this one's; otherwise the growth of
// ru_maxrss (KiB on Linux), which it may.
template <typename F> long peakGrowthKiB(F&& load)
{
    QFile clear(QStringLiteral("/proc/self/clear_refs"));
    const bool reset = clear.open(QIODevice::WriteOnly) && clear.write("5") == 1 && clear.flush();
    const long rssBefore = statusKiB("VmRSS");
    rusage before {};
    getrusage(RUSAGE_SELF, &before);
    load();
    if (reset && rssBefore >= 0 && statusKiB("VmHWM") >= 0)
        return statusKiB("VmHWM") - rssBefore;
    rusage after {};
    getrusage(RUSAGE_SELF, &after);
    return after.ru_maxrss - before.ru_maxrss;
}

} // namespace

class TestBadInput : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void refusedAndBroken_data();
    void refusedAndBroken();
    void messageNamesFileAndReason();
    void everyTruncationFails();
    void fuzzRegressions();
    void corruptedBytesNeverCrash();
    void validButOddInputs_data();
    void validButOddInputs();
    void compressionBombRefusedEarly();
    void hostileShapesEnd_data();
    void hostileShapesEnd();
    void xzReadToThePicklesEnd();
    void xzExpansionRefused_data();
    void xzExpansionRefused();
};

void TestBadInput::refusedAndBroken_data()
{
    QTest::addColumn<QByteArray>("input");
    QTest::addColumn<io::ErrorCode>("code");
    QTest::addColumn<QString>("reason"); // a word the message must contain

    // Hostile: what `pickle.dumps(os.system)`-style payloads are made of.
    QTest::newRow("GLOBAL + REDUCE (protocol 0 os.system)")
        << QByteArray("cos\nsystem\n(S'echo pwned'\ntR.") << io::ErrorCode::Refused << "GLOBAL";
    QTest::newRow("STACK_GLOBAL (protocol 4)")
        << QByteArray("\x80\x04\x8c\x02os\x8c\x06system\x93.", 15) << io::ErrorCode::Refused << "STACK_GLOBAL";
    QTest::newRow("REDUCE alone") << QByteArray("\x80\x02NN\x85R.", 7) << io::ErrorCode::Refused << "REDUCE";
    QTest::newRow("BUILD") << QByteArray("\x80\x02}}b.", 6) << io::ErrorCode::Refused << "BUILD";
    QTest::newRow("INST") << QByteArray("(ios\nsystem\n.") << io::ErrorCode::Refused << "INST";
    QTest::newRow("OBJ") << QByteArray("(No.") << io::ErrorCode::Refused << "OBJ";
    QTest::newRow("NEWOBJ") << QByteArray("\x80\x02N)\x81.", 6) << io::ErrorCode::Refused << "NEWOBJ";
    QTest::newRow("persistent id") << QByteArray("Pfoo\n.") << io::ErrorCode::Refused << "PERSID";
    QTest::newRow("binary persistent id") << QByteArray("\x80\x02NQ.", 5) << io::ErrorCode::Refused << "BINPERSID";

    // Broken
    QTest::newRow("empty") << QByteArray() << io::ErrorCode::Empty << "empty";
    QTest::newRow("plain text") << QByteArray("hello, world\n") << io::ErrorCode::NotPickle << "neither";
    QTest::newRow("protocol 6 from the future") << QByteArray("\x80\x06}.", 4) << io::ErrorCode::TooNew << "protocol 6";
    QTest::newRow("no STOP") << QByteArray("\x80\x02}", 3) << io::ErrorCode::Truncated << "truncated";
    QTest::newRow("string longer than the file")
        << QByteArray("\x80\x02X\xff\xff\x00\x00" "abc", 10) << io::ErrorCode::Truncated << "truncated";
    QTest::newRow("FRAME longer than the file")
        << QByteArray("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00}.", 13) << io::ErrorCode::Truncated << "truncated";
    QTest::newRow("unknown opcode") << QByteArray("\x80\x02\xff.", 4) << io::ErrorCode::Corrupt << "0xff";
    QTest::newRow("stack underflow") << QByteArray("\x80\x02" "a.", 4) << io::ErrorCode::Corrupt << "stack";
    QTest::newRow("memo get never stored") << QByteArray("\x80\x02h\x05.", 5) << io::ErrorCode::Corrupt << "memo";
    QTest::newRow("memo index beyond any file")
        << QByteArray("\x80\x02Nr\xff\xff\xff\x7f.", 9) << io::ErrorCode::TooDeep << "memo";
    QTest::newRow("SETITEMS on a list") << QByteArray("\x80\x02](NNu.", 7) << io::ErrorCode::Corrupt << "dict";
    QTest::newRow("unclosed MARK at STOP") << QByteArray("\x80\x02(}.", 5) << io::ErrorCode::Corrupt << "MARK";
    // An integer no 64-bit field holds is read (as a placeholder: tst_picklereader); alone, it is no snapshot.
    QTest::newRow("LONG1 beyond 64 bits")
        << QByteArray("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01.", 14) << io::ErrorCode::NotSnapshot
        << "wider than 64 bits";
    QTest::newRow("LONG4 beyond 64 bits")
        << QByteArray("\x80\x02\x8b\x10\x00\x00\x00", 7) + QByteArray(15, '\x00') + QByteArray("\x01.", 2)
        << io::ErrorCode::NotSnapshot << "wider than 64 bits";
    QTest::newRow("text INT beyond 64 bits")
        << QByteArray("I123456789012345678901234567890\n.") << io::ErrorCode::NotSnapshot << "wider than 64 bits";
    QTest::newRow("LONG4 truncated") << QByteArray("\x80\x02\x8b\x10\x00\x00\x00\xff.", 9) << io::ErrorCode::Truncated
                                     << "truncated";
    QTest::newRow("text INT that is not a number") << QByteArray("I12x4\n.") << io::ErrorCode::Corrupt << "malformed";
    QTest::newRow("absurdly nested MARKs") << QByteArray("\x80\x02", 2) + QByteArray(100000, '(')
                                           << io::ErrorCode::TooDeep << "nested";

    // Valid pickles that are not snapshots
    QTest::newRow("an int") << QByteArray("\x80\x02K\x05.", 5) << io::ErrorCode::NotSnapshot << "int";
    QTest::newRow("a dict without segments")
        << QByteArray("\x80\x02}X\x01\x00\x00\x00" "aK\x01s.", 13) << io::ErrorCode::NotSnapshot << "'segments'";
    QTest::newRow("segment address is a string")
        << QByteArray("\x80\x02}X\x08\x00\x00\x00segments]}X\x07\x00\x00\x00" "addressX\x03\x00\x00\x00" "abcsas.", 42)
        << io::ErrorCode::NotSnapshot << "'address'";
    QTest::newRow("a list nested 100000 deep (no MARKs)")
        << nestedLists(100000) + "." << io::ErrorCode::NotSnapshot << "segment 0";
    // {'segments': [], 'x': l} where l contains itself: a cycle must not hang the reader.
    QTest::newRow("a list that contains itself")
        << snapshotWith(QByteArray("X\x01\x00\x00\x00x]q\x01h\x01" "a", 12)) << io::ErrorCode::NotSnapshot << "'x'";
    // 40 levels of [x, x]: 2^40 leaves if expanded naively ("billion laughs"); the reader must stop early.
    {
        QByteArray laughs("X\x01\x00\x00\x00y", 6);
        laughs += "N";
        for (int i = 0; i < 40; ++i)
            laughs += "q\x01h\x01\x86"; // BINPUT 1, BINGET 1, TUPLE2: (x, x)
        QTest::newRow("shared references expanding to 2^40 values") << snapshotWith(laughs) << io::ErrorCode::NotSnapshot
                                                                   << "'y'";
    }
}

void TestBadInput::refusedAndBroken()
{
    QFETCH(QByteArray, input);
    QFETCH(io::ErrorCode, code);
    QFETCH(QString, reason);
    const io::LoadResult r = loadBytes(input, "bad.pickle");
    QVERIFY2(!r.ok(), "a bad input was accepted");
    QVERIFY2(r.error.code == code, (std::string("wrong error code: ") + std::string(io::errorCodeName(r.error.code))
                                    + " — " + r.error.toString())
                                       .c_str());
    const QString message = QString::fromStdString(r.error.toString());
    QVERIFY2(message.startsWith(QLatin1String("bad.pickle: ")), qPrintable(message));
    QVERIFY2(message.contains(reason), qPrintable(message));
    if (code == io::ErrorCode::Refused)
        QVERIFY2(message.contains(QLatin1String("not a memory snapshot")) && message.contains(QLatin1String("unsafe")),
                 qPrintable(message));
}

void TestBadInput::messageNamesFileAndReason()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string missing = dir.filePath(QStringLiteral("does-not-exist.pickle")).toStdString();
    io::LoadResult r = io::loadSnapshot(missing);
    QCOMPARE(r.error.code, io::ErrorCode::Io);
    QVERIFY(QString::fromStdString(r.error.toString()).startsWith(QString::fromStdString(missing) + QLatin1String(": ")));
    QVERIFY(QString::fromStdString(r.error.message).contains(QLatin1String("No such file")));

    r = io::loadSnapshot(dir.path().toStdString());
    QCOMPARE(r.error.code, io::ErrorCode::Io);
    QVERIFY(QString::fromStdString(r.error.message).contains(QLatin1String("not a regular file")));

    const QString truncated = dir.filePath(QStringLiteral("half.pickle"));
    QFile f(truncated);
    QVERIFY(f.open(QIODevice::WriteOnly));
    const QByteArray real = readAll(test::snapshotPath("mlp_train.pickle"));
    QVERIFY(!real.isEmpty());
    f.write(real.left(real.size() / 2));
    f.close();
    r = io::loadSnapshot(truncated.toStdString());
    QCOMPARE(r.error.code, io::ErrorCode::Truncated);
    const QString message = QString::fromStdString(r.error.toString());
    QVERIFY2(message.startsWith(truncated + QLatin1String(": ")) && message.contains(QLatin1String("truncated")),
             qPrintable(message));
}

void TestBadInput::everyTruncationFails()
{
    // Every prefix of a real snapshot is an error (a pickle is only complete at its STOP), never a crash.
    const QByteArray real = readAll(test::dataPath("cudagraph.pickle"));
    QVERIFY(!real.isEmpty());
    for (qsizetype n = 0; n < real.size(); ++n) {
        const io::LoadResult r = loadBytes(real.left(n));
        QVERIFY2(!r.ok(), qPrintable(QStringLiteral("a %1-byte prefix was accepted").arg(n)));
        QVERIFY(r.error.code == io::ErrorCode::Truncated || r.error.code == io::ErrorCode::Empty
                || r.error.code == io::ErrorCode::NotPickle);
    }
    QVERIFY(loadBytes(real).ok());
}

void TestBadInput::fuzzRegressions()
{
    // Inputs that once crashed a fuzz target, and the hand-made bad files: each must give a clean error.
    const QDir dir(QString::fromStdString(test::dataPath("fuzz-regressions")));
    QStringList files;
    for (const QString& name : dir.entryList(QDir::Files | QDir::NoDotAndDotDot))
        if (!name.startsWith(QLatin1Char('.')))
            files << dir.filePath(name);
    files << QString::fromStdString(test::dataPath("hostile-reduce.pickle"))
          << QString::fromStdString(test::dataPath("truncated-multistream.pickle"));
    for (const QString& file : files) {
        const io::LoadResult r = io::loadSnapshot(file.toStdString());
        if (!r.ok())
            QVERIFY2(QString::fromStdString(r.error.toString()).startsWith(file), r.error.toString().c_str());
        // The same outcome through the value tree (what fuzz_directpath compares).
        io::LoadOptions tree;
        tree.directTraces = false;
        const io::LoadResult again = io::loadSnapshot(file.toStdString(), tree);
        QCOMPARE(again.ok(), r.ok());
        QCOMPARE(again.error.toString(), r.error.toString());
    }
    QCOMPARE(io::loadSnapshot(test::dataPath("hostile-reduce.pickle")).error.code, io::ErrorCode::Refused);
    QCOMPARE(io::loadSnapshot(test::dataPath("truncated-multistream.pickle")).error.code, io::ErrorCode::Truncated);
}

void TestBadInput::corruptedBytesNeverCrash()
{
    // Random byte damage must end in a clean error or a (possibly odd) snapshot; the test fails on a crash.
    const QByteArray real = readAll(test::snapshotPath("multistream.pickle"));
    QVERIFY(!real.isEmpty());
    std::mt19937 rng(12345);
    int errors = 0;
    for (int round = 0; round < 2000; ++round) {
        QByteArray damaged = real;
        const int flips = 1 + int(rng() % 8);
        for (int i = 0; i < flips; ++i)
            damaged[qsizetype(rng() % uint32_t(damaged.size()))] = char(rng() & 0xff);
        const io::LoadResult r = loadBytes(damaged);
        if (!r.ok()) {
            ++errors;
            QVERIFY(!r.error.message.empty());
        }
    }
    QVERIFY(errors > 0);
}

void TestBadInput::validButOddInputs_data()
{
    QTest::addColumn<QByteArray>("input");
    QTest::addColumn<int>("segments");
    QTest::addColumn<int>("blocks");
    // A legacy file: a bare list holding one segment dict with one block, written with protocol 0 text opcodes.
    QTest::newRow("protocol 0 bare list of segments (legacy)")
        << QByteArray("(lp0\n(dp1\nVaddress\np2\nI1024\nsVtotal_size\np3\nI2048\nsVstream\np4\nI0\nsVblocks\np5\n"
                      "(lp6\n(dp7\nVsize\np8\nI2048\nsVstate\np9\nVinactive\np10\nsasa.")
        << 1 << 1;
    QTest::newRow("JSON with a UTF-8 byte order mark") << QByteArray("\xef\xbb\xbf{\"segments\": []}") << 0 << 0;
    QTest::newRow("protocol 2 empty snapshot") << snapshotWith(QByteArray()) << 0 << 0;
    QTest::newRow("unknown top-level key kept")
        << snapshotWith(QByteArray("X\x03\x00\x00\x00newK\x07", 10)) << 0 << 0;
}

void TestBadInput::validButOddInputs()
{
    QFETCH(QByteArray, input);
    QFETCH(int, segments);
    QFETCH(int, blocks);
    const io::LoadResult r = loadBytes(input);
    QVERIFY2(r.ok(), r.error.toString().c_str());
    QCOMPARE(int(r.snapshot->segments.size()), segments);
    QCOMPARE(int(r.snapshot->blocks.size()), blocks);
}

// A 153 KB .xz of 1 GiB of zeros (tests/data/bomb-zeros-1g.xz): refused as "neither a pickle nor JSON" from its first
// 4 KiB, without decompressing the rest: the process's peak memory hardly moves.
void TestBadInput::compressionBombRefusedEarly()
{
    const std::string path = test::dataPath("bomb-zeros-1g.xz");
    rusage before {};
    getrusage(RUSAGE_SELF, &before);
    const io::LoadResult r = io::loadSnapshot(path);
    rusage after {};
    getrusage(RUSAGE_SELF, &after);
    QCOMPARE(r.error.code, io::ErrorCode::NotPickle);
    QCOMPARE(QString::fromStdString(r.error.toString()),
             QString::fromStdString(path) + QStringLiteral(": the xz file holds neither a pickle nor JSON: not a memory "
                                                           "snapshot"));
    const long grewKiB = after.ru_maxrss - before.ru_maxrss; // ru_maxrss: KiB on Linux
    QVERIFY2(grewKiB < 64 * 1024, qPrintable(QStringLiteral("peak memory grew by %1 KiB").arg(grewKiB)));
}

// Shapes of device_traces that PyTorch never writes, a few bytes per list: each load ends, with the snapshot they
// make or one error that names the input and the reason, both ways of reading trace entries. (A search of the
// trace lists per opcode once made 10,000 lists in 10 KB take 86 s, 30,000 more than 300 s: ctest's timeout
// catches a return of that.)
void TestBadInput::hostileShapesEnd_data()
{
    QTest::addColumn<QByteArray>("input");
    QTest::addColumn<int>("devices"); // -1: an error
    QTest::addColumn<QString>("reason"); // a word the error must contain
    // ] ( ] ] ] ... e: the lists all on the stack at once, then one APPENDS.
    for (int n : { 10'000, 100'000 })
        QTest::addRow("%d lists under one MARK", n)
            << deviceTracesWith("](" + QByteArray(n, ']') + "e") << n << QString();
    // ] ] ] ... a a a: each list appended to the one below it.
    for (int n : { 10'000, 1'000'000 })
        QTest::addRow("%d nested lists", n) << deviceTracesWith("]" + QByteArray(n, ']') + QByteArray(n, 'a')) << -1
                                            << QStringLiteral("device 0, trace entry 0: is a list, expected a dict");
    // ] ( ] DUP ] DUP ... e: every list twice (a copy of a trace list on top of the stack).
    QTest::newRow("50000 lists each twice (DUP)")
        << deviceTracesWith("](" + repeated("]2", 50'000) + "e") << 100'000 << QString();
    // 'device_traces' [[]] 'device_traces' [[]] ...: 100,000 outer lists in the top-level dict's one SETITEMS; the
    // last key wins (Modules/_pickle.c, load_setitems: PyDict_SetItem one pair after the other).
    QTest::newRow("100000 device_traces keys")
        << snapshotWith(repeated(DeviceTracesKey + "]]a", 100'000)) << 1 << QString();
}

void TestBadInput::hostileShapesEnd()
{
    QFETCH(QByteArray, input);
    QFETCH(int, devices);
    QFETCH(QString, reason);
    for (const bool direct : { true, false }) {
        io::LoadOptions options;
        options.directTraces = direct;
        const io::LoadResult r = io::loadSnapshotFromMemory(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(input.constData()), size_t(input.size())),
            "hostile.pickle", options);
        if (devices < 0) {
            QVERIFY2(!r.ok(), "the input was accepted");
            const QString message = QString::fromStdString(r.error.toString());
            QVERIFY2(message.startsWith(QLatin1String("hostile.pickle: ")) && message.contains(reason),
                     qPrintable(message));
            continue;
        }
        QVERIFY2(r.ok(), r.error.toString().c_str());
        QCOMPARE(int(r.snapshot->deviceTraces.size()), devices);
        for (const auto& trace : r.snapshot->deviceTraces)
            QVERIFY(trace.empty());
    }
}

// A real snapshot with 1 GiB of zeros after its STOP in the same .xz file (PyTorch's reader never looks past the
// STOP either): it loads, the same as without the zeros, and the zeros are never decompressed (a file of 388 KB with
// 2 GiB of them once took 4.7 GB and 16 s). Auto-detected and as a pickle named.
void TestBadInput::xzReadToThePicklesEnd()
{
    const QByteArray plain = readAll(test::snapshotPath("scripted_allocs.pickle"));
    QVERIFY(!plain.isEmpty());
    const QByteArray file = xzWithZerosAfter(plain);
    QVERIFY(!file.isEmpty());
    const io::LoadResult expected = loadBytes(plain);
    QVERIFY2(expected.ok(), expected.error.toString().c_str());
    for (const io::Format format : { io::Format::Auto, io::Format::Pickle }) {
        io::LoadOptions options;
        options.format = format;
        io::LoadResult r;
        const long grewKiB = peakGrowthKiB([&] {
            r = io::loadSnapshotFromMemory(
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(file.constData()), size_t(file.size())),
                "zeros-after.pickle.xz", options);
        });
        QVERIFY2(r.ok(), r.error.toString().c_str());
        QCOMPARE(r.snapshot->segments.size(), expected.snapshot->segments.size());
        QCOMPARE(r.snapshot->blocks.size(), expected.snapshot->blocks.size());
        QCOMPARE(r.snapshot->deviceTraces.size(), expected.snapshot->deviceTraces.size());
        QVERIFY(!r.snapshot->deviceTraces.empty());
        QCOMPARE(r.snapshot->deviceTraces[0].size(), expected.snapshot->deviceTraces[0].size());
        QVERIFY2(grewKiB < 64 * 1024, qPrintable(QStringLiteral("peak memory grew by %1 KiB").arg(grewKiB)));
    }
}

void TestBadInput::xzExpansionRefused_data()
{
    QTest::addColumn<QByteArray>("pickle"); // the start of a pickle, followed by 1 GiB of zeros in the .xz file
    QTest::addColumn<io::ErrorCode>("code");
    QTest::addColumn<QString>("reason");
    // The zeros are no opcode: the parse fails at the first, and nothing after it is decompressed.
    QTest::newRow("a pickle's start, then zeros")
        << QByteArray("\x80\x04}", 3) << io::ErrorCode::Corrupt << QStringLiteral("unknown pickle opcode 0x00");
    // A value or FRAME longer than snapshots hold is refused at its length, before its bytes are decompressed: what
    // it announces may fit the machine's memory (before: 1 GiB of BINBYTES8 took the load 1 GiB and more, then
    // failed), or not (2^40 bytes).
    const QString offset2 = QStringLiteral(" at offset 2 of the decompressed data, longer than the 16 MiB the reader "
                                           "decompresses for strings, bytes and integers of 64 KiB or more: no memory "
                                           "snapshot holds one; not decompressed");
    const auto length8 = [](char code, uint64_t length) {
        QByteArray p("\x80\x04", 2);
        p += code;
        for (int i = 0; i < 8; ++i)
            p += char((length >> (8 * i)) & 0xff);
        return p;
    };
    QTest::newRow("BINBYTES8 of 2^40 bytes") << length8('\x8e', uint64_t(1) << 40) << io::ErrorCode::TooLarge
                                             << QStringLiteral("its pickle holds a BINBYTES8 value of 1099511627776 "
                                                               "bytes")
            + offset2;
    QTest::newRow("BINBYTES8 of 1 GiB") << length8('\x8e', uint64_t(1) << 30) << io::ErrorCode::TooLarge
                                        << QStringLiteral("its pickle holds a BINBYTES8 value of 1073741824 bytes")
            + offset2;
    QTest::newRow("BINUNICODE8 of 1 GiB")
        << length8('\x8d', uint64_t(1) << 30) << io::ErrorCode::TooLarge
        << QStringLiteral("its pickle holds a BINUNICODE8 value of 1073741824 bytes") + offset2;
    QTest::newRow("BINUNICODE of 512 MiB")
        << QByteArray("\x80\x04X\x00\x00\x00\x20", 7) << io::ErrorCode::TooLarge
        << QStringLiteral("its pickle holds a BINUNICODE value of 536870912 bytes") + offset2;
    QTest::newRow("BINBYTES8 of 16 MiB + 1")
        << length8('\x8e', (uint64_t(16) << 20) + 1) << io::ErrorCode::TooLarge
        << QStringLiteral("its pickle holds a BINBYTES8 value of 16777217 bytes") + offset2;
    QTest::newRow("FRAME of 1 GiB") << length8('\x95', uint64_t(1) << 30) + '}' << io::ErrorCode::TooLarge
                                    << QStringLiteral("its pickle holds a FRAME of 1073741824 bytes at offset 2 of the "
                                                      "decompressed data, longer than the 16 MiB the reader "
                                                      "decompresses for one (CPython's are about 64 KiB)");
    QTest::newRow("FRAME of 2^40 bytes") << length8('\x95', uint64_t(1) << 40) + '}' << io::ErrorCode::TooLarge
                                         << QStringLiteral("its pickle holds a FRAME of 1099511627776 bytes");
    // A text STRING whose line never ends (the zeros are its text): decompressed to the limit, no further.
    QTest::newRow("a STRING line without its end")
        << QByteArray("(S'") << io::ErrorCode::TooLarge
        << QStringLiteral("its pickle holds a STRING line of more than "); // the bytes so far: as they were decoded
    // Long values, each under the limit, add up: 17 BINBYTES of 1 MiB are refused at the 17th, before its bytes.
    {
        QByteArray values("\x80\x04(", 3);
        for (int i = 0; i < 17; ++i) {
            values += QByteArray("B\x00\x00\x10\x00", 5);
            if (i < 16)
                values += QByteArray(1 << 20, 'x');
        }
        QTest::newRow("17 BINBYTES of 1 MiB")
            << values << io::ErrorCode::TooLarge
            << QStringLiteral("its pickle holds a BINBYTES value of 1048576 bytes at offset %1 of the decompressed "
                              "data, past the 16 MiB the reader decompresses for strings, bytes and integers of 64 "
                              "KiB or more (17825792 bytes of them so far): no memory snapshot holds one; not "
                              "decompressed")
                   .arg(3 + 16 * (5 + (1 << 20)));
    }
}

void TestBadInput::xzExpansionRefused()
{
    QFETCH(QByteArray, pickle);
    QFETCH(io::ErrorCode, code);
    QFETCH(QString, reason);
    const QByteArray file = xzWithZerosAfter(pickle);
    QVERIFY(!file.isEmpty());
    io::LoadResult r;
    QElapsedTimer timer;
    timer.start();
    const long grewKiB = peakGrowthKiB([&] { r = loadBytes(file, "expands.pickle.xz"); });
    qInfo("%lld-byte .xz refused in %lld ms, peak memory +%ld KiB: %s", qlonglong(file.size()), timer.elapsed(),
          grewKiB, r.error.message.c_str());
    QVERIFY2(!r.ok(), "the input was accepted");
    QVERIFY2(r.error.code == code, r.error.toString().c_str());
    const QString message = QString::fromStdString(r.error.toString());
    QVERIFY2(message.startsWith(QLatin1String("expands.pickle.xz: ")) && message.contains(reason), qPrintable(message));
    QVERIFY2(grewKiB < 64 * 1024, qPrintable(QStringLiteral("peak memory grew by %1 KiB").arg(grewKiB)));
}

QTEST_GUILESS_MAIN(TestBadInput)
#include "tst_badinput.moc"
