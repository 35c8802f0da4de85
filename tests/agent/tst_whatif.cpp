// The what-if replay against the truth: one job (tools/corpus/make_corpus.py whatif_job: the same requests in the
// same order whatever the allocator decides) was run on an H200 under five allocator settings with the same seed
// (tests/data/corpus/whatif_s*_*.pickle). `whatif` of one run under another run's settings must predict that run's
// peak reservation and which of its requests failed, request for request. Also: every corpus trace replayed under
// its own settings gives its own figures back, the text names what it compared, and bad input gets one message.
#include "whatif/whatif.h"
#include "io/snapshotio.h"
#include "model/snapshot.h"
#include "testutil.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTest>

#include <algorithm>

using namespace memscope;

namespace {

QString corpus(const QString& name) { return QString::fromStdString(test::dataPath("corpus/" + name.toStdString())); }

QJsonObject meta(const QString& pickle)
{
    const QString path = pickle.left(pickle.lastIndexOf(QLatin1String(".pickle"))) + QLatin1String(".meta.json");
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(path));
    return QJsonDocument::fromJson(f.readAll()).object();
}

std::shared_ptr<const model::Snapshot> load(const QString& path)
{
    io::LoadResult r = io::loadSnapshot(path.toStdString());
    if (!r.ok())
        qFatal("cannot load %s: %s", qPrintable(path), r.error.toString().c_str());
    return r.snapshot;
}

std::vector<std::pair<size_t, size_t>> oomsOf(const MemoryOutcome& o)
{
    std::vector<std::pair<size_t, size_t>> v;
    for (const auto& oom : o.ooms)
        v.emplace_back(oom.request, oom.size);
    return v;
}

QString describe(const std::vector<std::pair<size_t, size_t>>& v)
{
    QStringList parts;
    for (const auto& [request, size] : v)
        parts << QStringLiteral("%1:%2").arg(request).arg(size);
    return parts.join(QLatin1Char(' '));
}

} // namespace

class TestWhatIf : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void predictsAnotherRun_data();
    void predictsAnotherRun();
    void realModelPredictions_data();
    void realModelPredictions();
    void realOomPair();
    void curvesAndStates();
    void ownSettingsGiveTheFileBack_data();
    void ownSettingsGiveTheFileBack();
    void textAndJson();
    void sweep();
    void badInput_data();
    void badInput();
};

void TestWhatIf::predictsAnotherRun_data()
{
    QTest::addColumn<QString>("from");
    QTest::addColumn<QStringList>("sets");
    QTest::addColumn<QString>("truth");
    for (const char* seed : { "s0", "s1" }) {
        const QString base = QStringLiteral("whatif_%1_").arg(QLatin1String(seed));
        auto row = [&](const char* from, QStringList sets, const char* to) {
            QTest::addRow("%s %s -> %s", seed, from, to)
                << base + QLatin1String(from) + QLatin1String(".pickle") << sets
                << base + QLatin1String(to) + QLatin1String(".pickle");
        };
        row("default", { QStringLiteral("expandable_segments:True") }, "expandable");
        row("default", { QStringLiteral("max_split_size_mb:64") }, "max_split64");
        row("default", { QStringLiteral("max_split_size_mb:128") }, "max_split128");
        row("default", { QStringLiteral("garbage_collection_threshold:0.6") }, "gc06");
        // And back, and across: every run predicts the others.
        row("expandable", { QStringLiteral("expandable_segments:False") }, "default");
        row("expandable", { QStringLiteral("expandable_segments:False"), QStringLiteral("max_split_size_mb:64") },
            "max_split64");
        row("max_split128", { QStringLiteral("max_split_size_mb:64") }, "max_split64");
        row("expandable", { QStringLiteral("expandable_segments:False"), QStringLiteral("garbage_collection_threshold:0.6") },
            "gc06");
        row("max_split64", { QStringLiteral("max_split_size_mb:128") }, "max_split128");
    }
}

void TestWhatIf::predictsAnotherRun()
{
    QFETCH(QString, from);
    QFETCH(QStringList, sets);
    QFETCH(QString, truth);
    const QString fromPath = corpus(from), truthPath = corpus(truth);
    const size_t cap = size_t(meta(fromPath)[QLatin1String("allowed_memory_maximum")].toDouble());
    QVERIFY(cap > 0);

    WhatIfOptions options;
    options.original.memoryLimit = cap;
    for (const QString& s : sets)
        options.sets.push_back(s.toStdString());
    const WhatIfResult predicted = whatIf(*load(fromPath), options);
    QVERIFY2(predicted.ok, predicted.error.c_str());
    QCOMPARE(predicted.devices.size(), size_t(1));

    // The truth: the other run's own outcome, read off its exact replay.
    WhatIfOptions self;
    self.original.memoryLimit = cap;
    self.cap = cap;
    const WhatIfResult actual = whatIf(*load(truthPath), self);
    QVERIFY2(actual.ok, actual.error.c_str());
    const WhatIfDevice& p = predicted.devices[0];
    const WhatIfDevice& a = actual.devices[0];
    QCOMPARE(p.requests, a.requests); // the same job
    QCOMPARE(a.original.peakReserved,
             size_t(meta(truthPath)[QLatin1String("max_memory_reserved")].toDouble())); // PyTorch's own figure
    QVERIFY2(oomsOf(p.replayed) == oomsOf(a.original),
             qPrintable(QStringLiteral("predicted %1, the run had %2")
                            .arg(describe(oomsOf(p.replayed)), describe(oomsOf(a.original)))));
    QCOMPARE(p.replayed.peakReserved, a.original.peakReserved);
    QCOMPARE(p.replayed.peakAllocated, a.original.peakAllocated);
    QCOMPARE(p.replayed.deviceAllocs, a.original.deviceAllocs);
    // Which cached segments a release frees goes by address among equal sizes (made up here): three of the 16 rows
    // ends with one segment fewer than the run did.
    if (p.replayed.segmentsAtEnd != a.original.segmentsAtEnd)
        qInfo("segments at the end: %zu predicted, %zu in the run", p.replayed.segmentsAtEnd, a.original.segmentsAtEnd);
}

void TestWhatIf::realModelPredictions_data()
{
    // GPT-2 (transformers, 4 layers, 512 wide) trained 12 steps with another sequence length each step, the same
    // seed, under four settings on an H200 (tools/corpus/make_corpus.py gpt2_varlen_*): the default run is in the
    // corpus, and each other run's peak reservation as PyTorch reported it (torch.cuda.max_memory_reserved) beside.
    QTest::addColumn<QString>("set");
    QTest::addColumn<QString>("run");
    QTest::newRow("expandable_segments:True") << "expandable_segments:True" << "gpt2_varlen_expandable";
    QTest::newRow("max_split_size_mb:128") << "max_split_size_mb:128" << "gpt2_varlen_max_split128";
    QTest::newRow("roundup_power2_divisions:4") << "roundup_power2_divisions:4" << "gpt2_varlen_roundup4";
}

void TestWhatIf::realModelPredictions()
{
    QFETCH(QString, set);
    QFETCH(QString, run);
    const QString from = corpus(QStringLiteral("gpt2_varlen_default.pickle.xz"));
    WhatIfOptions options;
    options.sets = { set.toStdString() };
    const WhatIfResult r = whatIf(*load(from), options);
    QVERIFY2(r.ok, r.error.c_str());
    const WhatIfDevice& d = r.devices[0];
    QCOMPARE(d.original.peakReserved, size_t(meta(from)[QLatin1String("max_memory_reserved")].toDouble()));
    QCOMPARE(d.baseline.peakReserved, d.original.peakReserved);
    QVERIFY(d.replayed.ooms.empty());
    const size_t truth = size_t(meta(corpus(run + QLatin1String(".pickle")))[QLatin1String("max_memory_reserved")].toDouble());
    qInfo("%s: predicted %zu B, the run %zu B (the default run %zu B)", qPrintable(set), d.replayed.peakReserved, truth,
          d.original.peakReserved);
    QCOMPARE(d.replayed.peakReserved, truth);
}

// A real model meeting real OOMs: the same GPT-2 training under a 2.85 GB cap (make_corpus.py gpt2_oom2850_*), which
// skips a step that runs out of memory. Under the default settings it skipped 7 steps; under expandable_segments it
// skipped none. From the run without an OOM, the replay under the default settings names the other run's first OOM
// (its request and size, read from that run's own file); from the run with OOMs, the replay under expandable
// segments says the first would not happen, and says where the replay stops being exact.
void TestWhatIf::realOomPair()
{
    const QString withOoms = corpus(QStringLiteral("gpt2_oom2850_default.pickle.xz"));
    const QString without = corpus(QStringLiteral("gpt2_oom2850_expandable.pickle.xz"));
    const size_t cap = size_t(meta(withOoms)[QLatin1String("allowed_memory_maximum")].toDouble());
    QCOMPARE(cap, size_t(meta(without)[QLatin1String("allowed_memory_maximum")].toDouble()));

    WhatIfOptions options;
    options.original.memoryLimit = cap;
    const WhatIfResult truth = whatIf(*load(withOoms), options); // the file's own OOMs, as recovered
    QVERIFY2(truth.ok, truth.error.c_str());
    const auto realOoms = oomsOf(truth.devices[0].original);
    QCOMPARE(realOoms.size(), size_t(7));

    options.sets = { "expandable_segments:False" };
    const WhatIfResult fromWithout = whatIf(*load(without), options);
    QVERIFY2(fromWithout.ok, fromWithout.error.c_str());
    const WhatIfDevice& a = fromWithout.devices[0];
    QVERIFY(a.original.ooms.empty());
    QVERIFY(!a.replayed.ooms.empty());
    qInfo("from the run without OOMs: first OOM predicted at request %zu (%zu B); the default run's first at %zu (%zu B)",
          a.replayed.ooms[0].request, a.replayed.ooms[0].size, realOoms[0].first, realOoms[0].second);
    QCOMPARE(oomsOf(a.replayed).front(), realOoms.front());
    QCOMPARE(a.firstChangedOom, realOoms.front().first);

    options.sets = { "expandable_segments:True" };
    const WhatIfResult fromWith = whatIf(*load(withOoms), options);
    QVERIFY2(fromWith.ok, fromWith.error.c_str());
    const WhatIfDevice& b = fromWith.devices[0];
    const auto after = oomsOf(b.replayed);
    QVERIFY(std::find(after.begin(), after.end(), realOoms.front()) == after.end());
    QCOMPARE(b.firstChangedOom, realOoms.front().first);
    const std::string text = whatIfText(fromWith, "f");
    std::string number = std::to_string(realOoms.front().first); // grouped by thousands, as the text prints it
    for (int i = int(number.size()) - 3; i > 0; i -= 3)
        number.insert(size_t(i), ",");
    const std::string exactUpTo
        = "exact up to request " + number + ": there the job as recorded met an OOM that would not happen";
    QVERIFY2(text.find(exactUpTo) != std::string::npos, text.c_str());
    const QJsonObject json = QJsonDocument::fromJson(QByteArray::fromStdString(whatIfJson({ fromWith }, "f"))).object();
    QCOMPARE(json[QLatin1String("runs")].toArray()[0].toObject()[QLatin1String("devices")].toArray()[0].toObject()
                 [QLatin1String("first_changed_oom_request")].toInteger(),
             qint64(realOoms.front().first));
}

// What the app's What-if panel draws: each run's reserved bytes after every call, and the replayed segments at a
// moment. The curves peak where the outcome says; the segments at any entry add up to the curve's reserved bytes
// there and hold its allocated bytes; the original's curve is PyTorch's own reservation (the trace's segment sums).
void TestWhatIf::curvesAndStates()
{
    const QString path = corpus(QStringLiteral("whatif_s0_default.pickle"));
    const auto snapshot = load(path);
    WhatIfOptions options;
    options.original.memoryLimit = size_t(meta(path)[QLatin1String("allowed_memory_maximum")].toDouble());
    options.original.curves = true;
    options.curves = true;
    options.sets = { "expandable_segments:True" };
    const RecoveredJob job = recoverJob(*snapshot, options.original);
    const WhatIfResult r = whatIf(job, options);
    QVERIFY2(r.ok, r.error.c_str());
    const WhatIfDevice& d = r.devices[0];
    auto peakOf = [](const std::vector<CurvePoint>& curve) {
        size_t peak = 0;
        for (const CurvePoint& p : curve)
            peak = std::max(peak, p.reserved);
        return peak;
    };
    QVERIFY(d.replayed.curve.size() >= d.requests);
    QCOMPARE(peakOf(d.replayed.curve), d.replayed.peakReserved);
    QCOMPARE(peakOf(d.original.curve), d.original.peakReserved);
    // The original curve against the trace: the reserved bytes after each call's last entry.
    const model::Trace& trace = snapshot->deviceTraces[0];
    std::vector<size_t> reservedAfter(trace.size(), 0);
    size_t reserved = 0;
    for (size_t i = 0; i < trace.size(); ++i) {
        const model::TraceEntry& e = trace[i];
        if (e.action == model::Action::SegmentAlloc || e.action == model::Action::SegmentMap)
            reserved += size_t(e.size);
        else if (e.action == model::Action::SegmentFree || e.action == model::Action::SegmentUnmap)
            reserved -= size_t(e.size);
        reservedAfter[i] = reserved;
    }
    for (const CurvePoint& p : d.original.curve)
        QCOMPARE(p.reserved, reservedAfter[p.entry]);
    // The replayed segments at a few moments against the curve.
    for (size_t k : { size_t(0), d.replayed.curve.size() / 3, d.replayed.curve.size() / 2, d.replayed.curve.size() - 1 }) {
        const CurvePoint& p = d.replayed.curve[k];
        if (k + 1 < d.replayed.curve.size() && d.replayed.curve[k + 1].entry == p.entry)
            continue; // several calls end at one entry: the state is the last one's
        std::string error;
        const std::vector<WhatIfSegment> state = whatIfStateAt(job, options, 0, p.entry, &error);
        QVERIFY2(error.empty(), error.c_str());
        size_t segmentBytes = 0, allocatedBytes = 0;
        for (const WhatIfSegment& seg : state) {
            segmentBytes += seg.size;
            size_t tiled = 0;
            for (const WhatIfBlock& b : seg.blocks) {
                tiled += b.size;
                allocatedBytes += b.allocated ? b.size : 0;
            }
            QCOMPARE(tiled, seg.size);
        }
        QCOMPARE(segmentBytes, p.reserved);
        QCOMPARE(allocatedBytes, p.allocated);
    }
}

void TestWhatIf::ownSettingsGiveTheFileBack_data()
{
    QTest::addColumn<QString>("path");
    const QDir dir(QString::fromStdString(test::dataPath("corpus")));
    for (const QString& f :
         dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name))
        QTest::newRow(qPrintable(f)) << dir.filePath(f);
}

// The baseline (the file's own settings, made-up addresses) is the error bar of an answer. On the what-if runs it is
// zero; wherever it is not, the text says so with both figures. Replayed under its own settings and cap, a file
// gives its own figures as the baseline's.
void TestWhatIf::ownSettingsGiveTheFileBack()
{
    QFETCH(QString, path);
    const qlonglong cap = qlonglong(meta(path)[QLatin1String("allowed_memory_maximum")].toDouble());
    WhatIfOptions options;
    options.original.memoryLimit = size_t(cap);
    options.cap = size_t(cap);
    const WhatIfResult r = whatIf(*load(path), options);
    QVERIFY2(r.ok, r.error.c_str());
    const std::string text = whatIfText(r, "f");
    for (const WhatIfDevice& d : r.devices) {
        QCOMPARE(d.replayed.peakReserved, d.baseline.peakReserved);
        QVERIFY(oomsOf(d.replayed) == oomsOf(d.baseline));
        const bool exact = d.baseline.peakReserved == d.original.peakReserved && oomsOf(d.baseline) == oomsOf(d.original);
        if (path.contains(QLatin1String("whatif_")))
            QVERIFY2(exact, qPrintable(describe(oomsOf(d.baseline)) + QLatin1String(" | ") + describe(oomsOf(d.original))));
        QCOMPARE(text.find("note: under the file's own settings this replay gives") != std::string::npos, !exact);
        if (!exact)
            qInfo("%s: error bar: peak reserved %zu against %zu, %zu OOMs against %zu", qPrintable(path),
                  d.baseline.peakReserved, d.original.peakReserved, d.baseline.ooms.size(), d.original.ooms.size());
    }
}

void TestWhatIf::textAndJson()
{
    const std::string file = corpus(QStringLiteral("whatif_s0_default.pickle")).toStdString();
    const WhatIfOutput text = whatIfCommand({ file, "--memory-limit", "2684354560", "--set", "expandable_segments:True" });
    QCOMPARE(text.exitCode, 0);
    QVERIFY2(text.err.empty(), text.err.c_str());
    for (const char* want : { "replayed under expandable_segments:True, against the file (PyTorch's defaults)",
                              "memory cap 2,684,354,560 B", "peak reserved", "2,680,160,256 B", "2,642,411,520 B",
                              "OOMs: 42 would not happen, 7 would still happen, 0 would be new",
                              "a job that reacts to an OOM" })
        QVERIFY2(text.out.find(want) != std::string::npos, (std::string(want) + "\n" + text.out).c_str());
    QVERIFY2(text.out.find("note: under the file's own settings") == std::string::npos, text.out.c_str());

    const WhatIfOutput json = whatIfCommand(
        { file, "--memory-limit", "2684354560", "--set", "expandable_segments:True", "--format", "json" });
    QCOMPARE(json.exitCode, 0);
    const QJsonObject doc = QJsonDocument::fromJson(QByteArray::fromStdString(json.out)).object();
    QCOMPARE(doc[QLatin1String("format")].toString(), QStringLiteral("memscope-whatif"));
    const QJsonObject run = doc[QLatin1String("runs")].toArray()[0].toObject();
    const QJsonObject original = run[QLatin1String("original")].toObject();
    const QJsonObject replayed = run[QLatin1String("replayed")].toObject();
    QCOMPARE(original[QLatin1String("peak_reserved_bytes")].toDouble(), 2680160256.0);
    QCOMPARE(original[QLatin1String("oom_count")].toInt(), 49);
    QCOMPARE(original[QLatin1String("settings")].toString(), QString());
    QCOMPARE(replayed[QLatin1String("peak_reserved_bytes")].toDouble(), 2642411520.0);
    QCOMPARE(replayed[QLatin1String("oom_count")].toInt(), 7);
    QCOMPARE(replayed[QLatin1String("settings")].toString(), QStringLiteral("expandable_segments:True"));
    QCOMPARE(replayed[QLatin1String("ooms")].toArray().size(), 7);
}

void TestWhatIf::sweep()
{
    const std::string file = corpus(QStringLiteral("whatif_s1_default.pickle")).toStdString();
    const WhatIfOutput r = whatIfCommand(
        { file, "--memory-limit", "2684354560", "--sweep", "max_split_size_mb:64,128", "--format", "json" });
    QCOMPARE(r.exitCode, 0);
    const QJsonArray runs = QJsonDocument::fromJson(QByteArray::fromStdString(r.out)).object()[QLatin1String("runs")].toArray();
    QCOMPARE(runs.size(), 2);
    QCOMPARE(runs[0].toObject()[QLatin1String("settings")].toString(), QStringLiteral("max_split_size_mb:64"));
    QCOMPARE(runs[1].toObject()[QLatin1String("settings")].toString(), QStringLiteral("max_split_size_mb:128"));
    // As the runs made with those settings had: none, then 2 (tests/data/corpus/README.md).
    QCOMPARE(runs[0].toObject()[QLatin1String("replayed")].toObject()[QLatin1String("oom_count")].toInt(), 0);
    QCOMPARE(runs[1].toObject()[QLatin1String("replayed")].toObject()[QLatin1String("oom_count")].toInt(), 2);
}

void TestWhatIf::badInput_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("message");
    const QString good = corpus(QStringLiteral("whatif_s0_default.pickle"));
    QTest::newRow("nothing to change") << QStringList { good } << 2 << "needs at least one --set, --sweep or --cap";
    QTest::newRow("not KEY:VALUE") << QStringList { good, QStringLiteral("--set"), QStringLiteral("expandable") } << 1
                                   << "'expandable' is not KEY:VALUE";
    QTest::newRow("a key that decides nothing")
        << QStringList { good, QStringLiteral("--set"), QStringLiteral("pinned_num_register_threads:4") } << 1
        << "'pinned_num_register_threads' is not a setting that changes the allocator's decisions";
    QTest::newRow("a value PyTorch refuses")
        << QStringList { good, QStringLiteral("--set"), QStringLiteral("garbage_collection_threshold:1.5") } << 1
        << "'garbage_collection_threshold:1.5': ";
    QTest::newRow("an empty sweep value")
        << QStringList { good, QStringLiteral("--sweep"), QStringLiteral("max_split_size_mb:64,,128") } << 2
        << "--sweep has an empty value";
    QTest::newRow("two files") << QStringList { good, good, QStringLiteral("--cap"), QStringLiteral("3GiB") } << 2
                               << "needs exactly one SNAPSHOT";
    QTest::newRow("no such file") << QStringList { QStringLiteral("/nonexistent/x.pickle"), QStringLiteral("--cap"),
                                                   QStringLiteral("3GiB") }
                                  << 1 << "/nonexistent/x.pickle";
    // A ring that wrapped: memory was in use before the first entry, so no replay of it can be exact.
    QTest::newRow("not replayed exactly")
        << QStringList { QString::fromStdString(test::dataPath("long/gpt2_long.pickle.xz")), QStringLiteral("--set"),
                         QStringLiteral("expandable_segments:True") }
        << 1 << "does not replay device 0's trace exactly, so it cannot tell what other settings would change "
                "(allocator-replay: the trace is incomplete";
}

void TestWhatIf::badInput()
{
    QFETCH(QStringList, args);
    QFETCH(int, status);
    QFETCH(QString, message);
    std::vector<std::string> a;
    for (const QString& s : args)
        a.push_back(s.toStdString());
    const WhatIfOutput r = whatIfCommand(a);
    QCOMPARE(r.exitCode, status);
    if (status == 0)
        return;
    QVERIFY(r.out.empty());
    QVERIFY2(r.err.rfind("memscope-cli: ", 0) == 0, r.err.c_str());
    QVERIFY2(r.err.find(message.toStdString()) != std::string::npos, r.err.c_str());
    QCOMPARE(std::count(r.err.begin(), r.err.end(), '\n') <= 3, true);
}

QTEST_GUILESS_MAIN(TestWhatIf)
#include "tst_whatif.moc"
