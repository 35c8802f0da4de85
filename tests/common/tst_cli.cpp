// memscope-cli as a user runs it: exit codes (0 ok, 1 unreadable input, 2 bad command line), messages that name the
// file and the reason, PyTorch-identical output through the binary, convert round trips and the info summary.
#include "io/snapshotio.h"
#include "testutil.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

using namespace memscope;

namespace {

struct Run {
    int status = -1;
    QByteArray out;
    QByteArray err;
};

Run runCli(const QStringList& args)
{
    QProcess p;
    p.start(QCoreApplication::applicationDirPath() + QLatin1String("/memscope-cli"), args);
    Run r;
    if (!p.waitForFinished(120000)) {
        p.kill();
        return r;
    }
    r.status = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

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
    void info();
    void diffFindsTheLeak();
    void diffExitCodes_data();
    void diffExitCodes();
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
    QVERIFY2(rec.out.contains("recording: from ipc:///tmp/job (pid 4242 on gpu7), 1234 events, 5 lost, 1 gaps, 1 "
                              "resyncs, 0 restarts; part 3 of a bounded history"),
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

QTEST_GUILESS_MAIN(TestCli)
#include "tst_cli.moc"
