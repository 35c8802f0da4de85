// memscope-cli as a user runs it: exit codes (0 ok, 1 unreadable input, 2 bad command line), messages that name the
// file and the reason (a truncated file: where its data ends), PyTorch-identical output through the binary, convert
// round trips (torch.compile's unsigned frame lines included), the info summary, load warnings on stderr that change
// neither stdout nor the status, and the manners: each command's --help, --version, did-you-mean.
#include "io/snapshotio.h"
#include "report/memoryviz.h"
#include "runprogram.h"
#include "testutil.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>

using namespace memscope;

namespace {

using test::Run;

Run runCli(const QStringList& args) { return test::runProgram(QStringLiteral("memscope-cli"), args); }

QString snapshot(const char* name)
{
    return QString::fromStdString(test::snapshotPath(name));
}

QByteArray reference(const std::string& name)
{
    QFile f(QString::fromStdString(test::referencePath(name)));
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestCli : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void badCommandLines_data();
    void badCommandLines();
    void unreadableFiles_data();
    void unreadableFiles();
    void parityThroughTheBinary_data();
    void parityThroughTheBinary();
    void severalFiles();
    void convertRoundTrips_data();
    void convertRoundTrips();
    void convertFailureLeavesNothing();
    void convertKeepsUnsignedLines();
    void warningsGoToStderr_data();
    void warningsGoToStderr();
    void realFilesAreQuiet_data();
    void realFilesAreQuiet();
    void info();
    void diffFindsTheLeak();
    void diffExitCodes_data();
    void diffExitCodes();
    void help_data();
    void help();
    void version_data();
    void version();
    void didYouMean_data();
    void didYouMean();
    void truncatedFileSaysWhereItEnds_data();
    void truncatedFileSaysWhereItEnds();
};

void TestCli::badCommandLines_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("reason");
    QTest::newRow("no command") << QStringList() << "no command";
    QTest::newRow("unknown command") << QStringList { QStringLiteral("frobnicate") } << "unknown command 'frobnicate'";
    QTest::newRow("stats without a file") << QStringList { QStringLiteral("stats") } << "needs at least one FILE";
    QTest::newRow("compare with one file") << QStringList { QStringLiteral("compare"), snapshot("oom.pickle") }
                                           << "exactly two files";
    QTest::newRow("unknown option") << QStringList { QStringLiteral("stats"), QStringLiteral("--bogus"),
                                                     snapshot("oom.pickle") }
                                    << "unknown option '--bogus'";
    QTest::newRow("convert with a bad format")
        << QStringList { QStringLiteral("convert"), QStringLiteral("--format"), QStringLiteral("xml"),
                         snapshot("oom.pickle"), QStringLiteral("out.xml") }
        << "unknown format 'xml'";
    QTest::newRow("convert without a value for --format")
        << QStringList { QStringLiteral("convert"), snapshot("oom.pickle"), QStringLiteral("x"), QStringLiteral("--format") }
        << "--format needs a value";
}

void TestCli::badCommandLines()
{
    QFETCH(QStringList, args);
    QFETCH(QString, reason);
    const Run r = runCli(args);
    QCOMPARE(r.status, 2);
    QVERIFY2(r.err.contains(reason.toUtf8()), r.err.constData());
    QVERIFY2(r.err.contains("usage: memscope-cli"), r.err.constData());
    QVERIFY(r.out.isEmpty());
}

void TestCli::unreadableFiles_data()
{
    QTest::addColumn<QByteArray>("content"); // empty with `missing` set: the file does not exist
    QTest::addColumn<bool>("missing");
    QTest::addColumn<QString>("reason");
    QTest::newRow("missing file") << QByteArray() << true << "No such file";
    QTest::newRow("empty file") << QByteArray() << false << "empty";
    QTest::newRow("a text file") << QByteArray("not a snapshot\n") << false << "neither a pickle nor JSON";
    QTest::newRow("hostile pickle") << QByteArray("cos\nsystem\n(S'touch pwned'\ntR.") << false << "unsafe";
    QTest::newRow("truncated pickle") << QByteArray("\x80\x04}(", 4) << false << "truncated";
}

void TestCli::unreadableFiles()
{
    QFETCH(QByteArray, content);
    QFETCH(bool, missing);
    QFETCH(QString, reason);
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("input.pickle"));
    if (!missing) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(content);
    }
    for (const char* command : { "stats", "trace", "segments", "memory", "info" }) {
        const Run r = runCli({ QString::fromLatin1(command), path });
        QCOMPARE(r.status, 1);
        const QByteArray firstLine = r.err.split('\n').first();
        QVERIFY2(firstLine.contains(path.toUtf8()) && firstLine.contains(reason.toUtf8()), r.err.constData());
        QCOMPARE(r.err.count('\n'), 1); // one line
    }
    QVERIFY(!QFile::exists(dir.filePath(QStringLiteral("pwned"))));
}

void TestCli::parityThroughTheBinary_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("reference");
    QTest::newRow("stats") << QStringList { QStringLiteral("stats"), snapshot("multistream.pickle") }
                           << "multistream.segsum.txt";
    QTest::newRow("trace, two devices") << QStringList { QStringLiteral("trace"), snapshot("two_device.pickle") }
                                        << "two_device.trace.txt";
    QTest::newRow("segments") << QStringList { QStringLiteral("segments"), snapshot("cudagraph.pickle") }
                              << "cudagraph.segments.folded";
    QTest::newRow("memory") << QStringList { QStringLiteral("memory"), snapshot("oom.pickle") } << "oom.memory.folded";
    QTest::newRow("compare") << QStringList { QStringLiteral("compare"), snapshot("oom.pickle"),
                                              snapshot("multistream.pickle") }
                             << "oom__multistream.compare.folded";
}

void TestCli::parityThroughTheBinary()
{
    QFETCH(QStringList, args);
    QFETCH(QString, reference);
    const Run r = runCli(args);
    QCOMPARE(r.status, 0);
    QVERIFY(r.err.isEmpty());
    const QByteArray want = ::reference(reference.toStdString());
    QVERIFY(!want.isEmpty());
    QCOMPARE(r.out, want);
}

void TestCli::severalFiles()
{
    const Run r = runCli({ QStringLiteral("stats"), snapshot("oom.pickle"), snapshot("cudagraph.pickle") });
    QCOMPARE(r.status, 0);
    QCOMPARE(r.out, reference("oom.segsum.txt") + reference("cudagraph.segsum.txt"));

    // One bad file among good ones: the good ones are still printed, the status says something failed.
    const Run bad = runCli({ QStringLiteral("stats"), snapshot("oom.pickle"), QStringLiteral("/nonexistent.pickle") });
    QCOMPARE(bad.status, 1);
    QCOMPARE(bad.out, reference("oom.segsum.txt"));
    QVERIFY(bad.err.contains("/nonexistent.pickle"));
}

void TestCli::convertRoundTrips_data()
{
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("suffix");
    QTest::newRow("pickle to JSON: transformer_train") << "transformer_train" << ".json";
    QTest::newRow("pickle to pickle: mlp_train (C++ frames)") << "mlp_train" << ".pickle";
    QTest::newRow("pickle to JSON: expandable_segments") << "expandable_segments" << ".json";
}

void TestCli::convertRoundTrips()
{
    QFETCH(QString, name);
    QFETCH(QString, suffix);
    QTemporaryDir dir;
    const QString out = dir.filePath(name + suffix);
    const Run c = runCli({ QStringLiteral("convert"), snapshot(qPrintable(name + QLatin1String(".pickle"))), out });
    QVERIFY2(c.status == 0, c.err.constData());
    // The converted file gives the same PyTorch reports as the original.
    for (const char* kind : { "stats", "segments", "memory" }) {
        const Run a = runCli({ QString::fromLatin1(kind), snapshot(qPrintable(name + QLatin1String(".pickle"))) });
        const Run b = runCli({ QString::fromLatin1(kind), out });
        QCOMPARE(b.status, 0);
        QCOMPARE(b.out, a.out);
    }
}

void TestCli::convertFailureLeavesNothing()
{
    QTemporaryDir dir;
    const QString out = dir.filePath(QStringLiteral("no/such/dir/out.pickle"));
    const Run r = runCli({ QStringLiteral("convert"), snapshot("oom.pickle"), out });
    QCOMPARE(r.status, 1);
    QVERIFY2(r.err.contains(out.toUtf8()), r.err.constData());
    QVERIFY(!QFile::exists(out));
    QCOMPARE(QDir(dir.path()).entryList(QDir::NoDotAndDotDot | QDir::AllEntries).size(), 0);
}

void TestCli::info()
{
    const Run r = runCli({ QStringLiteral("info"), snapshot("two_device.pickle") });
    QCOMPARE(r.status, 0);
    // Figures checked against the pickle with Python: 14 segments, 25 blocks; 2 devices with traces.
    QVERIFY2(r.out.contains("devices: 2"), r.out.constData());
    QVERIFY2(r.out.contains("segments: 14 (25 blocks)"), r.out.constData());
    QVERIFY2(r.out.contains("trace device 0:") && r.out.contains("trace device 1:"), r.out.constData());
    QVERIFY2(r.out.contains("complete (starts with no memory in use)"), r.out.constData());
    QVERIFY2(!r.out.contains("recording:"), r.out.constData()); // PyTorch's own snapshot
    QVERIFY2(!r.out.contains("skip_actions"), r.out.constData());
    // A trace recorded with skip_actions=["free_requested"] (a real one, made on an H200) says so.
    const Run skipped = runCli({ QStringLiteral("info"),
                                 QString::fromStdString(test::dataPath("corpus/skip_free_requested.pickle")) });
    QCOMPARE(skipped.status, 0);
    QVERIFY2(skipped.out.contains("complete (starts with no memory in use); recorded without free_requested entries "
                                  "(skip_actions): each free counts from its completion"),
             skipped.out.constData());
    QVERIFY2(skipped.err.isEmpty(), skipped.err.constData()); // no "does not replay" warning
    // A ring that overflowed (tests/data/ring-overflowed.pickle): what was alive before it, and why, as PyTorch said.
    const Run ring = runCli({ QStringLiteral("info"), QString::fromStdString(test::dataPath("ring-overflowed.pickle")) });
    QCOMPARE(ring.status, 0);
    QVERIFY2(ring.out.contains("truncated: 10 segments and 9 blocks were alive before the first entry (PyTorch's "
                               "history overwrote its older events: max_entries 150)"),
             ring.out.constData());

    // A memscope recording (the app's Save) says where it came from: a real snapshot with the key added.
    io::LoadResult loaded = io::loadSnapshot(snapshot("two_device.pickle").toStdString());
    QVERIFY(loaded.ok());
    // (The loader made it and nothing else holds it: adding a key is safe.)
    auto recording = std::const_pointer_cast<model::Snapshot>(loaded.snapshot);
    model::Value info;
    info.kind = model::Value::Kind::Dict;
    auto add = [&](const char* key, int64_t n, const char* text = nullptr) {
        model::Value v;
        v.kind = text ? model::Value::Kind::String : model::Value::Kind::Int;
        v.integer = n;
        v.text = text ? text : "";
        info.entries.emplace_back(key, std::move(v));
    };
    add("format", 1);
    add("endpoint", 0, "ipc:///tmp/job");
    add("host", 0, "gpu7");
    add("pid", 4242);
    add("events", 1234);
    add("lost", 5);
    add("missing", 7);
    add("gaps", 1);
    add("resyncs", 1);
    add("restarts", 0);
    add("part", 3);
    recording->topLevelExtras.emplace_back("memscope_recording", std::move(info));
    recording->topLevelLayout = {}; // PyTorch's key order, then the extras (as the app's recordings are made)
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("recording.pickle"));
    QVERIFY(!io::saveSnapshot(*recording, path.toStdString()));
    const Run rec = runCli({ QStringLiteral("info"), path });
    QCOMPARE(rec.status, 0);
    QVERIFY2(rec.out.contains("recording: from ipc:///tmp/job (pid 4242 on gpu7), 1234 events, 5 lost, 7 missing in "
                              "1 gaps, 1 resyncs, 0 restarts; part 3 of a bounded history"),
             rec.out.constData());
    // A trace with holes is never called complete, though it starts with no memory in use.
    QVERIFY2(!rec.out.contains("complete"), rec.out.constData());
    QVERIFY2(rec.out.contains("starts with no memory in use, but with holes: 7 records not received, 5 dropped by "
                              "the agent"),
             rec.out.constData());
    QVERIFY2(rec.out.contains("segments: 14 (25 blocks)"), rec.out.constData());
}

void TestCli::diffFindsTheLeak()
{
    // diff_after holds 6 more steps of a deliberate leak than diff_before, inside the same segments (PyTorch's
    // compare prints nothing for them). Expected figures: tst_diff derives them from the raw blocks.
    const Run r = runCli({ QStringLiteral("diff"), snapshot("diff_before.pickle"), snapshot("diff_after.pickle"),
                           QStringLiteral("--format"), QStringLiteral("folded") });
    QCOMPARE(r.status, 0);
    const QList<QByteArray> lines = r.out.trimmed().split('\n');
    QCOMPARE(lines.size(), 2);
    QVERIFY2(lines[0].endsWith(" 9486336") && lines[0].contains("gen_snapshots.py:126:step"), lines[0].constData());
    QVERIFY2(lines[1].endsWith(" 3072"), lines[1].constData());
    // Text: the leak's stack is at the top of the growth list.
    const Run text = runCli({ QStringLiteral("diff"), snapshot("diff_before.pickle"), snapshot("diff_after.pickle") });
    QCOMPARE(text.status, 0);
    QVERIFY2(text.out.contains("gen_snapshots.py:126:step"), text.out.constData());
}

void TestCli::diffExitCodes_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("message");
    QTest::newRow("growth over the limit") << QStringList { QStringLiteral("diff"), snapshot("diff_before.pickle"),
                                                            snapshot("diff_after.pickle"), QStringLiteral("--fail-if-growth"),
                                                            QStringLiteral("1MiB") }
                                           << 3 << "";
    QTest::newRow("growth under the limit") << QStringList { QStringLiteral("diff"), snapshot("diff_before.pickle"),
                                                             snapshot("diff_after.pickle"), QStringLiteral("--fail-if-growth"),
                                                             QStringLiteral("100MiB") }
                                            << 0 << "";
    QTest::newRow("one side only") << QStringList { QStringLiteral("diff"), snapshot("diff_before.pickle") } << 2
                                   << "usage: memscope-cli diff";
    QTest::newRow("unreadable file") << QStringList { QStringLiteral("diff"), QStringLiteral("/nonexistent.pickle"),
                                                      snapshot("diff_after.pickle") }
                                     << 1 << "/nonexistent.pickle";
    QTest::newRow("index beyond the trace") << QStringList { QStringLiteral("diff"), snapshot("diff_before.pickle"),
                                                             snapshot("diff_after.pickle") + QLatin1String("@9999") }
                                            << 2 << "beyond the trace";
}

void TestCli::diffExitCodes()
{
    QFETCH(QStringList, args);
    QFETCH(int, status);
    QFETCH(QString, message);
    const Run r = runCli(args);
    QCOMPARE(r.status, status);
    QVERIFY2(r.err.contains(message.toUtf8()), r.err.constData());
}

// torch.compile's frames have line 2^64 - 1 (tests/data/corpus/README.md): pickle -> JSON -> pickle keeps it, and
// the pickle that comes back is byte for byte the one a direct pickle -> pickle convert writes.
void TestCli::convertKeepsUnsignedLines()
{
    const QString original = QString::fromStdString(test::dataPath("corpus/compile_default.pickle"));
    QTemporaryDir dir;
    const QString direct = dir.filePath(QStringLiteral("direct.pickle"));
    const QString json = dir.filePath(QStringLiteral("via.json"));
    const QString back = dir.filePath(QStringLiteral("back.pickle"));
    for (const QStringList& args : { QStringList { QStringLiteral("convert"), original, direct },
                                     QStringList { QStringLiteral("convert"), original, json },
                                     QStringList { QStringLiteral("convert"), json, back } }) {
        const Run r = runCli(args);
        QVERIFY2(r.status == 0, r.err.constData());
        QVERIFY2(r.err.isEmpty(), r.err.constData());
    }
    auto read = [](const QString& path) {
        QFile f(path);
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    };
    QVERIFY(read(json).contains("\"line\":18446744073709551615}"));
    const QByteArray directBytes = read(direct);
    QVERIFY(!directBytes.isEmpty());
    QCOMPARE(read(back), directBytes);
    // LONG1 of 9 bytes, as Python's pickle writes 2^64 - 1.
    const QByteArray long1 = QByteArray("\x8a\x09", 2) + QByteArray(8, '\xff') + QByteArray(1, '\0');
    QVERIFY(directBytes.contains(long1));
    const io::LoadResult r = io::loadSnapshot(back.toStdString());
    QVERIFY(r.ok());
    const auto unsignedLine = std::find_if(r.snapshot->frames.begin(), r.snapshot->frames.end(),
                                           [](const model::Frame& f) { return f.line.isAboveInt64(); });
    QVERIFY(unsignedLine != r.snapshot->frames.end());
    QCOMPARE(unsignedLine->line.toString(), std::string("18446744073709551615"));
    QCOMPARE(report::formatFrame(*r.snapshot, *unsignedLine),
             std::string("fake_tensor.py:18446744073709551615:init_gpu_context"));
}

void TestCli::warningsGoToStderr_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QStringList>("warnings"); // one stderr line each, in this order, after "FILE: warning: "
    const QString inconsistent = QString::fromStdString(test::dataPath("inconsistent.pickle"));
    const QString wide = QString::fromStdString(test::dataPath("wide-integers.pickle"));
    // tests/data/README.md says how the fixtures were made.
    const QStringList three { QStringLiteral("1 segment is not tiled exactly by its blocks, first: segment "
                                             "0x7f1e68000000 (device 0): block 1 starts at 0x7f1e68282a00"),
                              QStringLiteral("1 segment overlaps another segment of its device, first: segment "
                                             "0x7f1e6a000200 (device 0)"),
                              QStringLiteral("1 trace entry has a negative size, first: device 0, entry 5 "
                                             "(free_requested at 0x7f1e7e600000): size -3") };
    for (const char* command : { "stats", "trace", "segments", "memory" })
        QTest::addRow("%s: three kinds", command)
            << QStringList { QString::fromLatin1(command), inconsistent } << three;
    QTest::newRow("info: and the replay's") << QStringList { QStringLiteral("info"), inconsistent }
                                            << three
            + QStringList { QStringLiteral("places where the trace does not "
                                           "replay to the final state") };
    QTest::newRow("stats: integers no field holds")
        << QStringList { QStringLiteral("stats"), wide }
        << QStringList { QStringLiteral("2 integers did not fit their fields and were left out, first: the trace "
                                        "entry time_us (device 0, trace entry 2) is 18446744073709551615") };
    QTest::newRow("diff") << QStringList { QStringLiteral("diff"), inconsistent, wide }
                          << three + QStringList { QStringLiteral("2 integers did not fit") };
}

// A file that loads with warnings is still read: exit status 0, stdout exactly the report, and one stderr line per
// kind of warning, prefixed as the CLI's errors are and naming the file.
void TestCli::warningsGoToStderr()
{
    QFETCH(QStringList, args);
    QFETCH(QStringList, warnings);
    const Run r = runCli(args);
    QCOMPARE(r.status, 0);
    const QStringList lines = QString::fromUtf8(r.err).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), warnings.size());
    for (int i = 0; i < lines.size(); ++i) {
        // (diff: the three of its first file, then the second file's)
        const QString file = args.at(args[0] == QLatin1String("diff") && i >= 3 ? 2 : 1);
        QVERIFY2(lines[i].startsWith(QLatin1String("memscope-cli: ") + file + QLatin1String(": warning: ")),
                 qPrintable(lines[i]));
        QVERIFY2(lines[i].contains(warnings[i]), qPrintable(lines[i] + QLatin1String("\nwanted: ") + warnings[i]));
    }
    QVERIFY(!r.out.contains("warning"));
    if (args[0] == QLatin1String("info") || args[0] == QLatin1String("diff"))
        return;
    const io::LoadResult loaded = io::loadSnapshot(args[1].toStdString());
    QVERIFY(loaded.ok());
    const model::Snapshot& s = *loaded.snapshot;
    const std::string want = args[0] == QLatin1String("stats") ? report::segsum(s)
        : args[0] == QLatin1String("trace")                    ? report::trace(s)
        : args[0] == QLatin1String("segments")                 ? report::segmentsFolded(s)
                                                               : report::memoryFolded(s);
    QCOMPARE(r.out, QByteArray::fromStdString(want));
}

void TestCli::realFilesAreQuiet_data()
{
    QTest::addColumn<QString>("path");
    for (const std::string& folder : { test::snapshotPath(""), test::dataPath("corpus") }) {
        const QDir dir(QString::fromStdString(folder));
        for (const QString& f :
             dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files))
            QTest::newRow(qPrintable(f)) << dir.filePath(f);
    }
}

// The consistency checks flag nothing PyTorch wrote: `stats` of every real file prints nothing on stderr.
void TestCli::realFilesAreQuiet()
{
    QFETCH(QString, path);
    const Run r = runCli({ QStringLiteral("stats"), path });
    QCOMPARE(r.status, 0);
    QVERIFY2(r.err.isEmpty(), r.err.constData());
    QVERIFY(!r.out.isEmpty());
}

void TestCli::help_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("usageLine"); // how stdout begins
    QTest::newRow("--help") << QStringList { QStringLiteral("--help") } << "usage: memscope-cli COMMAND";
    QTest::newRow("-h") << QStringList { QStringLiteral("-h") } << "usage: memscope-cli COMMAND";
    for (const char* command : { "stats", "trace", "segments", "memory", "compare", "info", "diff", "insights",
                                 "record", "keygen", "demo", "allocator-replay", "convert" }) {
        const QString c = QString::fromLatin1(command);
        QTest::addRow("%s --help", command) << QStringList { c, QStringLiteral("--help") }
                                            << QStringLiteral("usage: memscope-cli ") + c;
        QTest::addRow("%s -h", command) << QStringList { c, QStringLiteral("-h") }
                                        << QStringLiteral("usage: memscope-cli ") + c;
    }
    // After other arguments too: the command's help, not the whole usage, and nothing is run.
    QTest::newRow("stats FILE --help") << QStringList { QStringLiteral("stats"), snapshot("oom.pickle"),
                                                        QStringLiteral("--help") }
                                       << "usage: memscope-cli stats";
    QTest::newRow("demo --rate 5 -h") << QStringList { QStringLiteral("demo"), QStringLiteral("--rate"),
                                                       QStringLiteral("5"), QStringLiteral("-h") }
                                      << "usage: memscope-cli demo";
}

void TestCli::help()
{
    QFETCH(QStringList, args);
    QFETCH(QString, usageLine);
    const Run r = runCli(args);
    QCOMPARE(r.status, 0);
    QVERIFY2(r.out.startsWith(usageLine.toUtf8()), r.out.constData());
    QVERIFY(r.out.endsWith('\n'));
    QVERIFY2(r.err.isEmpty(), r.err.constData());
    if (args.size() == 1) {
        QVERIFY(r.out.contains("commands of memscope:")); // the whole usage
    } else {
        QVERIFY2(r.out.contains("\noptions:\n"), r.out.constData()); // its options
        QVERIFY2(!r.out.contains("commands of memscope:"), r.out.constData()); // that command's alone
    }
}

void TestCli::version_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::newRow("--version") << QStringList { QStringLiteral("--version") };
    QTest::newRow("--version, more after it") << QStringList { QStringLiteral("--version"), QStringLiteral("stats") };
}

void TestCli::version()
{
    QFETCH(QStringList, args);
    const Run r = runCli(args);
    QCOMPARE(r.status, 0);
    QCOMPARE(r.out, QByteArray("memscope-cli " MEMSCOPE_VERSION "\n"));
    QVERIFY(r.err.isEmpty());
}

void TestCli::didYouMean_data()
{
    QTest::addColumn<QString>("typed");
    QTest::addColumn<QString>("firstLine"); // the whole first line of stderr
    QTest::newRow("two letters swapped") << "stast" << "memscope-cli: unknown command 'stast': did you mean 'stats'?";
    QTest::newRow("a letter missing") << "inf" << "memscope-cli: unknown command 'inf': did you mean 'info'?";
    QTest::newRow("a letter more") << "diffs" << "memscope-cli: unknown command 'diffs': did you mean 'diff'?";
    QTest::newRow("swapped in a long name")
        << "segmnets" << "memscope-cli: unknown command 'segmnets': did you mean 'segments'?";
    QTest::newRow("two edits in a long name")
        << "alocator-reply" << "memscope-cli: unknown command 'alocator-reply': did you mean 'allocator-replay'?";
    QTest::newRow("a prefix") << "alloc" << "memscope-cli: unknown command 'alloc': did you mean 'allocator-replay'?";
    QTest::newRow("upper case") << "Stats" << "memscope-cli: unknown command 'Stats': did you mean 'stats'?";
    QTest::newRow("two edits in a short name") << "meme" << "memscope-cli: unknown command 'meme'";
    QTest::newRow("nothing near") << "frobnicate" << "memscope-cli: unknown command 'frobnicate'";
    QTest::newRow("a file where the command goes")
        << "snapshot.pickle" << "memscope-cli: unknown command 'snapshot.pickle'";
    QTest::newRow("an unknown option") << "--verbose" << "memscope-cli: unknown option '--verbose'";
}

void TestCli::didYouMean()
{
    QFETCH(QString, typed);
    QFETCH(QString, firstLine);
    const Run r = runCli({ typed, snapshot("oom.pickle") });
    QCOMPARE(r.status, 2);
    QVERIFY(r.out.isEmpty());
    const QList<QByteArray> lines = r.err.split('\n');
    // One line, one line of usage (and the newline ending it): not the whole usage.
    QCOMPARE(lines.size(), 3);
    QCOMPARE(QString::fromUtf8(lines[0]), firstLine);
    QVERIFY2(lines[1].startsWith("usage: memscope-cli COMMAND") && lines[1].contains("--help"), lines[1].constData());
    QVERIFY(lines[2].isEmpty());
}

void TestCli::truncatedFileSaysWhereItEnds_data()
{
    QTest::addColumn<QString>("source");
    QTest::addColumn<int>("size"); // bytes kept
    QTest::addColumn<QString>("where"); // what the message says besides the size
    // Inside the first 64 KiB frame, whose FRAME opcode is at byte 2: once said "(at byte 2)".
    QTest::newRow("transformer_train, 50 kB, inside the first frame")
        << snapshot("transformer_train.pickle") << 50000 << "inside a pickle frame (a chunk of the pickle's data) that starts at byte 11";
    QTest::newRow("multistream, 5000 bytes (tests/data/truncated-multistream.pickle)")
        << QString::fromStdString(test::dataPath("truncated-multistream.pickle")) << 5000
        << "inside a pickle frame (a chunk of the pickle's data) that starts at byte 11";
    QTest::newRow("inside a string") << QString() << 9 << "in the middle of the opcode that starts at byte 3";
    QTest::newRow("no STOP") << QString() << 4 << "without the pickle's STOP opcode";
}

void TestCli::truncatedFileSaysWhereItEnds()
{
    QFETCH(QString, source);
    QFETCH(int, size);
    QFETCH(QString, where);
    QByteArray bytes;
    if (source.isEmpty()) {
        // A protocol-2 pickle: {} then "abcdefgh" (SHORT_BINUNICODE at byte 3) cut inside the string, or after the {.
        bytes = size == 9 ? QByteArray("\x80\x02}\x8c\x08" "abcd", 9) : QByteArray("\x80\x02}(", 4);
    } else {
        QFile in(source);
        QVERIFY(in.open(QIODevice::ReadOnly));
        bytes = in.read(size);
    }
    QCOMPARE(bytes.size(), size);
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("cut.pickle"));
    QFile out(path);
    QVERIFY(out.open(QIODevice::WriteOnly));
    out.write(bytes);
    out.close();
    const Run r = runCli({ QStringLiteral("stats"), path });
    QCOMPARE(r.status, 1);
    const QString message = QString::fromUtf8(r.err).trimmed();
    // The file, that it is truncated, where its data ends (its size), and where that is in the pickle.
    QVERIFY2(message.startsWith(QStringLiteral("memscope-cli: ") + path + QStringLiteral(": the file is truncated: its data ends after ")
                                + QString::number(size) + QStringLiteral(" bytes")),
             qPrintable(message));
    QVERIFY2(message.endsWith(QStringLiteral("(at byte %1)").arg(size)), qPrintable(message));
    QVERIFY2(message.contains(where), qPrintable(message));
    QCOMPARE(r.err.count('\n'), 1);
}

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
