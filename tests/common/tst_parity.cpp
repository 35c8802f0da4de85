// Parity with PyTorch: for every real snapshot, memscope's reports must equal, byte for byte, what
// torch.cuda._memory_viz printed for it (../shared/reference, made by PyTorch 2.11 on the GPU machine; and the
// wider corpus in tests/data/corpus, each X.pickle beside its four outputs, tests/data/corpus/README.md).
#include "io/snapshotio.h"
#include "report/memoryviz.h"
#include "testutil.h"

#include <QDir>
#include <QFileInfo>
#include <QTest>

using namespace memscope;

namespace {

std::string firstDifference(const std::string& got, const std::string& want)
{
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i])
        ++i;
    const size_t lineStart = want.rfind('\n', i == 0 ? 0 : i - 1);
    const size_t from = lineStart == std::string::npos ? 0 : lineStart + 1;
    return "first difference at byte " + std::to_string(i) + "\n  got:  " + got.substr(from, 160)
        + "\n  want: " + want.substr(from, 160);
}

// The report `kind` ("segsum", "trace", "segments", "memory") of a snapshot, as memscope-cli prints it.
std::string reportOf(const model::Snapshot& s, const QString& kind)
{
    if (kind == QLatin1String("segsum"))
        return report::segsum(s);
    if (kind == QLatin1String("trace"))
        return report::trace(s);
    if (kind == QLatin1String("segments"))
        return report::segmentsFolded(s);
    return report::memoryFolded(s);
}

QString referenceSuffix(const char* kind)
{
    const bool folded = std::string(kind) == "segments" || std::string(kind) == "memory";
    return QLatin1Char('.') + QLatin1String(kind) + QLatin1String(folded ? ".folded" : ".txt");
}

} // namespace

class TestParity : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void reports_data();
    void reports();
    void corpus_data();
    void corpus();
    void longTrace();
    void compare_data();
    void compare();
    void corpusCompare_data();
    void corpusCompare();
    void formatSize_data();
    void formatSize();
};

void TestParity::reports_data()
{
    QTest::addColumn<QString>("snapshot");
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("reference");
    const char* names[]
        = { "mlp_train",   "transformer_train", "expandable_segments", "oom",        "multistream", "cudagraph",
            "diff_before", "diff_after",        "scripted_allocs",     "two_device", "big_trace" };
    for (const char* name : names) {
        const std::string file = std::string(name) + (std::string(name) == "big_trace" ? ".pickle.xz" : ".pickle");
        for (const char* kind : { "segsum", "trace", "segments", "memory" }) {
            const bool folded = std::string(kind) == "segments" || std::string(kind) == "memory";
            std::string ref = std::string(name) + "." + kind + (folded ? ".folded" : ".txt");
            if (!QFileInfo::exists(QString::fromStdString(test::referencePath(ref))))
                ref += ".xz";
            // PyTorch prints some entries of expandable segments as Python dicts; no reference exists for those.
            if (!QFileInfo::exists(QString::fromStdString(test::referencePath(ref))))
                continue;
            QTest::addRow("%s %s", name, kind) << QString::fromStdString(test::snapshotPath(file))
                                               << QString::fromLatin1(kind) << QString::fromStdString(ref);
        }
    }
}

void TestParity::reports()
{
    QFETCH(QString, snapshot);
    QFETCH(QString, kind);
    QFETCH(QString, reference);
    const io::LoadResult r = io::loadSnapshot(snapshot.toStdString());
    QVERIFY2(r.ok(), r.error.toString().c_str());
    std::vector<uint8_t> bytes;
    const io::Error e = io::readFile(test::referencePath(reference.toStdString()), bytes);
    QVERIFY2(!e, e.toString().c_str());
    const std::string want(bytes.begin(), bytes.end());
    const std::string got = reportOf(*r.snapshot, kind);
    QVERIFY2(got == want, firstDifference(got, want).c_str());
}

void TestParity::corpus_data()
{
    QTest::addColumn<QString>("snapshot");
    QTest::addColumn<QString>("kind");
    QTest::addColumn<QString>("reference");
    const QDir dir(QString::fromStdString(test::dataPath("corpus")));
    const QStringList files
        = dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
    QVERIFY2(files.size() >= 17, "the corpus is missing");
    for (const QString& file : files) {
        const QString base = dir.filePath(file.left(file.indexOf(QLatin1String(".pickle"))));
        for (const char* kind : { "segsum", "trace", "segments", "memory" })
            QTest::addRow("%s %s", qPrintable(file), kind)
                << dir.filePath(file) << QString::fromLatin1(kind) << base + referenceSuffix(kind);
    }
}

// Every corpus file and every one of its four outputs: a missing reference fails, it is not skipped.
void TestParity::corpus()
{
    QFETCH(QString, snapshot);
    QFETCH(QString, kind);
    QFETCH(QString, reference);
    const io::LoadResult r = io::loadSnapshot(snapshot.toStdString());
    QVERIFY2(r.ok(), r.error.toString().c_str());
    for (const model::LoadWarning& w : r.snapshot->warnings)
        QFAIL(model::warningLine(snapshot.toStdString(), w).c_str());
    std::vector<uint8_t> bytes;
    const io::Error e = io::readFile(reference.toStdString(), bytes);
    QVERIFY2(!e, e.toString().c_str());
    const std::string want(bytes.begin(), bytes.end());
    const std::string got = reportOf(*r.snapshot, kind);
    QVERIFY2(got == want, firstDifference(got, want).c_str());
}

// The long real trace whose ring wrapped (tests/data/long), read through the .xz reader: PyTorch's segsum of it.
void TestParity::longTrace()
{
    const std::string path = test::dataPath("long/gpt2_long.pickle.xz");
    const io::LoadResult r = io::loadSnapshot(path);
    QVERIFY2(r.ok(), r.error.toString().c_str());
    for (const model::LoadWarning& w : r.snapshot->warnings)
        QFAIL(model::warningLine(path, w).c_str());
    QCOMPARE(r.snapshot->deviceTraces.size(), size_t(1));
    QCOMPARE(r.snapshot->deviceTraces[0].size(), size_t(1250000)); // max_entries of its ring (gpt2_long.meta.json)
    std::vector<uint8_t> bytes;
    const io::Error e = io::readFile(test::dataPath("long/gpt2_long.segsum.txt"), bytes);
    QVERIFY2(!e, e.toString().c_str());
    const std::string want(bytes.begin(), bytes.end());
    const std::string got = reportOf(*r.snapshot, QStringLiteral("segsum"));
    QVERIFY2(got == want, firstDifference(got, want).c_str());
}

void TestParity::compare_data()
{
    QTest::addColumn<QString>("before");
    QTest::addColumn<QString>("after");
    QTest::newRow("mlp_train vs transformer_train: every segment differs") << "mlp_train"
                                                                           << "transformer_train";
    QTest::newRow("oom vs multistream") << "oom"
                                        << "multistream";
    QTest::newRow("diff_before vs diff_after: same segments, so empty") << "diff_before"
                                                                        << "diff_after";
}

void TestParity::compare()
{
    QFETCH(QString, before);
    QFETCH(QString, after);
    const io::LoadResult a = io::loadSnapshot(test::snapshotPath(before.toStdString() + ".pickle"));
    const io::LoadResult b = io::loadSnapshot(test::snapshotPath(after.toStdString() + ".pickle"));
    QVERIFY(a.ok() && b.ok());
    std::vector<uint8_t> bytes;
    const io::Error e = io::readFile(
        test::referencePath(before.toStdString() + "__" + after.toStdString() + ".compare.folded"), bytes);
    QVERIFY2(!e, e.toString().c_str());
    const std::string want(bytes.begin(), bytes.end());
    const std::string got = report::compareFolded(*a.snapshot, *b.snapshot);
    QVERIFY2(got == want, firstDifference(got, want).c_str());
}

void TestParity::corpusCompare_data()
{
    // Every A__B.compare.folded of the corpus: PyTorch's _memory_viz.compare on that pair.
    QTest::addColumn<QString>("reference");
    const QDir dir(QString::fromStdString(test::dataPath("corpus")));
    const QStringList files = dir.entryList({ QStringLiteral("*.compare.folded") }, QDir::Files, QDir::Name);
    QVERIFY2(files.size() >= 5, "the corpus's compare references are missing");
    for (const QString& file : files)
        QTest::newRow(qPrintable(file)) << dir.filePath(file);
}

void TestParity::corpusCompare()
{
    QFETCH(QString, reference);
    const QString name = QFileInfo(reference).fileName().chopped(int(qstrlen(".compare.folded")));
    const QStringList sides = name.split(QStringLiteral("__"));
    QCOMPARE(sides.size(), 2);
    const QString dir = QFileInfo(reference).absolutePath() + QLatin1Char('/');
    const io::LoadResult a = io::loadSnapshot(QString(dir + sides[0] + QLatin1String(".pickle")).toStdString());
    const io::LoadResult b = io::loadSnapshot(QString(dir + sides[1] + QLatin1String(".pickle")).toStdString());
    QVERIFY(a.ok() && b.ok());
    std::vector<uint8_t> bytes;
    const io::Error e = io::readFile(reference.toStdString(), bytes);
    QVERIFY2(!e, e.toString().c_str());
    const std::string want(bytes.begin(), bytes.end());
    const std::string got = report::compareFolded(*a.snapshot, *b.snapshot);
    QVERIFY(!want.empty());
    QVERIFY2(got == want, firstDifference(got, want).c_str());
}

void TestParity::formatSize_data()
{
    // Expected strings computed with Python: _memory_viz._format_size(n).
    QTest::addColumn<double>("bytes");
    QTest::addColumn<QString>("text");
    QTest::newRow("zero") << 0.0 << "0.0B";
    QTest::newRow("below a KiB") << 1023.0 << "1023.0B";
    QTest::newRow("one KiB") << 1024.0 << "1.0KiB";
    QTest::newRow("rounds half to even on the binary value") << 1024.0 * 1.25 << "1.2KiB";
    QTest::newRow("just below a MiB prints 1024.0KiB") << 1048575.0 << "1024.0KiB";
    QTest::newRow("negative") << -3145728.0 << "-3.0MiB";
    QTest::newRow("beyond zebibytes") << 1208925819614629174706176.0 * 3 << "3.0YiB";
}

void TestParity::formatSize()
{
    QFETCH(double, bytes);
    QFETCH(QString, text);
    QCOMPARE(QString::fromStdString(report::formatSize(bytes)), text);
}

QTEST_GUILESS_MAIN(TestParity)
#include "tst_parity.moc"
