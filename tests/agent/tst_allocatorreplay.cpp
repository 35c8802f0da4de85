// The decision oracle: `allocator-replay` must say yes for every complete trace PyTorch recorded in ../shared
// (every allocation at PyTorch's address, the same segments reserved, released, mapped and unmapped in the same
// order, the same final segments and blocks), say no with the first diverging event when a trace is altered or its
// allocator settings are not the ones it was recorded with, refuse incomplete traces, and behave like the rest of
// memscope-cli on bad command lines and unreadable files.
#include "whatif/allocatorreplay.h"
#include "io/snapshotio.h"
#include "model/snapshot.h"
#include "testutil.h"

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTest>

using namespace memscope;

namespace {

std::string lastLine(const std::string& text)
{
    std::string t = text;
    while (!t.empty() && t.back() == '\n')
        t.pop_back();
    const size_t nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
}

// The loader builds a non-const Snapshot and hands out the only reference: the tests below alter it in place.
std::shared_ptr<model::Snapshot> loadMutable(const std::string& name)
{
    io::LoadResult r = io::loadSnapshot(test::snapshotPath(name));
    if (!r.ok())
        qFatal("cannot load %s: %s", name.c_str(), r.error.toString().c_str());
    return std::const_pointer_cast<model::Snapshot>(r.snapshot);
}

// Index of the n-th alloc entry of a device's trace.
size_t nthAlloc(const model::Snapshot& s, int device, size_t n)
{
    const auto& t = s.deviceTraces[size_t(device)];
    for (size_t i = 0; i < t.size(); ++i) {
        if (t[i].action == model::Action::Alloc && n-- == 0)
            return i;
    }
    qFatal("trace has too few allocations");
    return 0;
}

// The cap a corpus trace was made under (tests/data/corpus/X.meta.json: allowed_memory_maximum), 0 for none.
qlonglong corpusCap(const QString& pickle)
{
    QString meta = pickle.left(pickle.lastIndexOf(QLatin1String(".pickle"))) + QLatin1String(".meta.json");
    QFile f(meta);
    if (!f.open(QIODevice::ReadOnly))
        qFatal("cannot read %s", qPrintable(meta));
    return QJsonDocument::fromJson(f.readAll()).object().value(QLatin1String("allowed_memory_maximum")).toInteger();
}

} // namespace

class TestAllocatorReplay : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void everySharedTraceMatches_data();
    void everySharedTraceMatches();
    void everyCorpusTraceMatches_data();
    void everyCorpusTraceMatches();
    void wrongCapDiverges_data();
    void wrongCapDiverges();
    void deviceMemoryDecidesExpandableAddresses_data();
    void deviceMemoryDecidesExpandableAddresses();
    void throughTheBinary();
    void alteredTraceDiverges_data();
    void alteredTraceDiverges();
    void settingsAreApplied();
    void incompleteTraceIsRefused();
    void badCommandLines_data();
    void badCommandLines();
    void unreadableInput_data();
    void unreadableInput();
};

void TestAllocatorReplay::everySharedTraceMatches_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("allocations");
    QTest::newRow("scripted_allocs: 3,000 requests of boundary sizes")
        << QStringLiteral("scripted_allocs.pickle") << 1669;
    QTest::newRow("transformer_train: bf16 autocast training") << QStringLiteral("transformer_train.pickle") << 3831;
    QTest::newRow("mlp_train: MLP + Adam") << QStringLiteral("mlp_train.pickle") << 107;
    QTest::newRow("multistream: two side streams, record_stream") << QStringLiteral("multistream.pickle") << 68;
    QTest::newRow("cudagraph: private pool (1, 0) during capture") << QStringLiteral("cudagraph.pickle") << 13;
    QTest::newRow("expandable_segments: maps, empty_cache unmap, regrow")
        << QStringLiteral("expandable_segments.pickle") << 43;
    QTest::newRow("two_device: two device traces") << QStringLiteral("two_device.pickle") << 67;
    QTest::newRow("oom: memory fraction, OOM entry") << QStringLiteral("oom.pickle") << 25;
    QTest::newRow("diff_before") << QStringLiteral("diff_before.pickle") << 50;
    QTest::newRow("diff_after") << QStringLiteral("diff_after.pickle") << 167;
    QTest::newRow("big_trace: 329k entries, empty_cache") << QStringLiteral("big_trace.pickle.xz") << 111496;
}

void TestAllocatorReplay::everySharedTraceMatches()
{
    QFETCH(QString, file);
    QFETCH(int, allocations);
    const AllocatorReplayOutput r = allocatorReplay({ test::snapshotPath(file.toStdString()) });
    QVERIFY2(r.exitCode == 0, (r.out + r.err).c_str());
    QVERIFY2(r.err.empty(), r.err.c_str());
    const std::string n = std::to_string(allocations);
    QCOMPARE(lastLine(r.out), "matched " + n + "/" + n + " allocations, final state identical: yes");
    QVERIFY(r.out.find("device 0: ") == 0);
    QVERIFY(r.out.find("final state identical (") != std::string::npos);
}

void TestAllocatorReplay::everyCorpusTraceMatches_data()
{
    // Every trace of the wider corpus (tests/data/corpus/README.md), made under every allocator setting: with the
    // memory cap it was made under, and without it (allocator-replay then finds one the trace implies).
    QTest::addColumn<QString>("file");
    QTest::addColumn<qlonglong>("cap");
    QTest::addColumn<bool>("capGiven");
    const QDir dir(QString::fromStdString(test::dataPath("corpus")));
    const QStringList files
        = dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
    QVERIFY(files.size() >= 17);
    for (const QString& name : files) {
        const QString path = dir.filePath(name);
        const qlonglong cap = corpusCap(path);
        QTest::newRow(qPrintable(name)) << path << cap << true;
        if (cap)
            QTest::newRow(qPrintable(name + QLatin1String(", cap not given"))) << path << cap << false;
    }
}

void TestAllocatorReplay::everyCorpusTraceMatches()
{
    QFETCH(QString, file);
    QFETCH(qlonglong, cap);
    QFETCH(bool, capGiven);
    std::vector<std::string> args { file.toStdString() };
    if (cap && capGiven)
        args.insert(args.end(), { "--memory-limit", std::to_string(cap) });
    const AllocatorReplayOutput r = allocatorReplay(args);
    QVERIFY2(r.exitCode == 0, (r.out + r.err).c_str());
    QVERIFY2(r.err.empty(), r.err.c_str());
    const std::string last = lastLine(r.out);
    const size_t slash = last.find('/');
    QVERIFY2(last.rfind("matched ", 0) == 0 && slash != std::string::npos, last.c_str());
    const std::string matched = last.substr(8, slash - 8);
    QCOMPARE(last, "matched " + matched + "/" + matched + " allocations, final state identical: yes");
    QVERIFY(std::stoul(matched) >= 30); // graph_pool, the smallest, makes 35
    // The scripted garbage-collection traces need the cap (their collections free segments no OOM explains):
    // without it the output says which one it replayed under. (The what-if job's gc06 runs collect only on the way
    // to an OOM, which replays without a cap.)
    const bool inferred = r.out.find("no memory cap given; replayed under a cap of ") != std::string::npos;
    if (capGiven || !cap)
        QVERIFY(!inferred);
    else if (file.contains(QLatin1String("gc")) && file.endsWith(QLatin1String("_fraction.pickle")))
        QVERIFY2(inferred, r.out.c_str());
}

void TestAllocatorReplay::wrongCapDiverges_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<double>("factor"); // of the real cap
    QTest::newRow("gc 0.5: half the cap") << QStringLiteral("gc05_fraction.pickle") << 0.5;
    QTest::newRow("gc 0.7: 1.3 times the cap") << QStringLiteral("gc07_fraction.pickle") << 1.3;
    QTest::newRow("release and retry: 0.9 times the cap") << QStringLiteral("oom_retry.pickle") << 0.9;
    QTest::newRow("expandable, gc: 1.5 times the cap") << QStringLiteral("expandable_gc_fraction.pickle") << 1.5;
}

void TestAllocatorReplay::wrongCapDiverges()
{
    // The cap decides: garbage collection's threshold and release-and-retry follow it, so a wrong one must show.
    QFETCH(QString, file);
    QFETCH(double, factor);
    const QString path = QString::fromStdString(test::dataPath("corpus/" + file.toStdString()));
    const qlonglong cap = qlonglong(double(corpusCap(path)) * factor);
    const AllocatorReplayOutput r = allocatorReplay({ path.toStdString(), "--memory-limit", std::to_string(cap) });
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.out.find("first divergence at event ") != std::string::npos, r.out.c_str());
    QVERIFY2(lastLine(r.out).find("final state identical: no") != std::string::npos, r.out.c_str());
}

void TestAllocatorReplay::deviceMemoryDecidesExpandableAddresses_data()
{
    QTest::addColumn<QString>("memory"); // --device-memory, empty: estimated from the trace
    QTest::addColumn<bool>("identical");
    QTest::newRow("estimated from the trace") << QString() << true;
    QTest::newRow("the H100's 85017493504 B it was made on") << QStringLiteral("85017493504") << true;
    QTest::newRow("an H200's 141 GiB: reservations overlap the trace's next segment")
        << QStringLiteral("141GiB") << false;
    QTest::newRow("1 GiB: less than the trace reserved (1.7 GiB on stream 0)") << QStringLiteral("1GiB") << false;
}

void TestAllocatorReplay::deviceMemoryDecidesExpandableAddresses()
{
    // Each expandable segment reserves address space for 9/8 of the device's memory; the trace's segments on two
    // streams lie one reservation apart, and one grows to 1.4 GiB.
    QFETCH(QString, memory);
    QFETCH(bool, identical);
    std::vector<std::string> args { test::dataPath("corpus/expandable_scripted.pickle") };
    if (!memory.isEmpty())
        args.insert(args.end(), { "--device-memory", memory.toStdString() });
    const AllocatorReplayOutput r = allocatorReplay(args);
    QCOMPARE(r.exitCode, identical ? 0 : 1);
    QVERIFY2((lastLine(r.out).find("final state identical: yes") != std::string::npos) == identical, r.out.c_str());
}

void TestAllocatorReplay::throughTheBinary()
{
    QProcess p;
    p.start(
        QCoreApplication::applicationDirPath() + QLatin1String("/memscope-cli"),
        { QStringLiteral("allocator-replay"), QString::fromStdString(test::snapshotPath("scripted_allocs.pickle")) });
    QVERIFY(p.waitForFinished(120000));
    const QByteArray out = p.readAllStandardOutput();
    const QByteArray err = p.readAllStandardError();
    if (p.exitCode() == 2 && err.contains("unknown command 'allocator-replay'"))
        QSKIP("tools/cli/main.cpp does not route 'allocator-replay' to runAllocatorReplay() yet");
    QCOMPARE(p.exitCode(), 0);
    QCOMPARE(QByteArray::fromStdString(lastLine(out.toStdString())),
             QByteArray("matched 1669/1669 allocations, final state identical: yes"));
}

void TestAllocatorReplay::alteredTraceDiverges_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("device");
    QTest::addColumn<int>("allocation"); // which alloc entry of the device's trace to alter
    QTest::addColumn<qlonglong>("delta"); // bytes added to its requested size
    QTest::newRow("scripted: allocation 200 asks for 1 MiB more")
        << QStringLiteral("scripted_allocs.pickle") << 0 << 200 << 1048576LL;
    QTest::newRow("scripted: allocation 7 asks for 1 B more")
        << QStringLiteral("scripted_allocs.pickle") << 0 << 7 << 1LL;
    QTest::newRow("transformer: allocation 1000 asks for 512 B less")
        << QStringLiteral("transformer_train.pickle") << 0 << 1000 << -512LL;
    QTest::newRow("expandable: allocation 3 asks for 20 MiB more")
        << QStringLiteral("expandable_segments.pickle") << 0 << 3 << 20971520LL;
    QTest::newRow("two_device: only device 1 is altered") << QStringLiteral("two_device.pickle") << 1 << 5 << 4194304LL;
}

void TestAllocatorReplay::alteredTraceDiverges()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    QFETCH(int, allocation);
    QFETCH(qlonglong, delta);
    auto s = loadMutable(file.toStdString());
    const size_t index = nthAlloc(*s, device, size_t(allocation));
    s->deviceTraces[size_t(device)][index].size += delta;

    const AllocatorReplayOutput r = allocatorReplaySnapshot(*s, file.toStdString());
    QCOMPARE(r.exitCode, 1);
    const std::string last = lastLine(r.out);
    QVERIFY2(last.rfind("matched ", 0) == 0 && last.size() > 4 && last.substr(last.size() - 4) == ": no", last.c_str());
    // The device's line names the first diverging event: at or after the altered one, with the reason.
    const std::string prefix = "device " + std::to_string(device) + ": ";
    const size_t at = r.out.find(prefix);
    QVERIFY(at != std::string::npos);
    const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
    const size_t marker = line.find("first divergence at event ");
    QVERIFY2(marker != std::string::npos, line.c_str());
    // The altered malloc's events start with the segments it reserved or released just before its alloc entry.
    size_t callStart = index;
    const auto& trace = s->deviceTraces[size_t(device)];
    while (callStart > 0 && trace[callStart - 1].action != model::Action::Alloc
           && trace[callStart - 1].action != model::Action::FreeRequested
           && trace[callStart - 1].action != model::Action::FreeCompleted)
        --callStart;
    const size_t diverged = std::stoul(line.substr(marker + 26));
    QVERIFY2(diverged >= callStart, line.c_str());
    QVERIFY2(line.find("expected address") != std::string::npos
                 || line.find("where PyTorch's trace has") != std::string::npos
                 || line.find(" B where PyTorch's is ") != std::string::npos
                 || line.find("the trace frees") != std::string::npos,
             line.c_str());
    if (device == 1)
        QVERIFY2(r.out.find("device 0: ") == 0 && r.out.find("final state identical (") != std::string::npos,
                 r.out.c_str());
}

void TestAllocatorReplay::settingsAreApplied()
{
    // The expandable_segments trace replayed as if expandable segments were off: the very first reservation is a
    // cudaMalloc'ed segment where PyTorch mapped pages.
    auto s = loadMutable("expandable_segments.pickle");
    QVERIFY(s->allocatorSettings);
    for (auto& [key, value] : s->allocatorSettings->entries) {
        if (key == "expandable_segments")
            value.boolean = false;
        if (key == "PYTORCH_CUDA_ALLOC_CONF")
            value.text.clear();
    }
    const AllocatorReplayOutput r = allocatorReplaySnapshot(*s, "expandable_segments.pickle");
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.out.find("first divergence at event 0 (segment_map") != std::string::npos, r.out.c_str());
    QVERIFY2(r.out.find("memscope did segment_alloc") != std::string::npos, r.out.c_str());
}

void TestAllocatorReplay::incompleteTraceIsRefused()
{
    // What a wrapped max_entries ring buffer leaves: the first segment_alloc and its allocation are gone.
    auto s = loadMutable("scripted_allocs.pickle");
    auto& t = s->deviceTraces[0];
    t.erase(t.begin(), t.begin() + 2);
    const AllocatorReplayOutput r = allocatorReplaySnapshot(*s, "scripted_allocs.pickle");
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.out.find("the trace is incomplete") != std::string::npos, r.out.c_str());
    QCOMPARE(lastLine(r.out), std::string("matched 0/1668 allocations, final state identical: no"));
}

void TestAllocatorReplay::badCommandLines_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("reason");
    QTest::newRow("no file") << QStringList() << QStringLiteral("needs exactly one SNAPSHOT");
    QTest::newRow("two files") << QStringList { QStringLiteral("a.pickle"), QStringLiteral("b.pickle") }
                               << QStringLiteral("needs exactly one SNAPSHOT");
    QTest::newRow("unknown option") << QStringList { QStringLiteral("--verbose"), QStringLiteral("a.pickle") }
                                    << QStringLiteral("unknown option '--verbose'");
    QTest::newRow("cap without a value") << QStringList { QStringLiteral("a.pickle"), QStringLiteral("--memory-limit") }
                                         << QStringLiteral("--memory-limit needs a byte count");
    QTest::newRow("cap not a size") << QStringList { QStringLiteral("a.pickle"), QStringLiteral("--memory-limit"),
                                                     QStringLiteral("lots") }
                                    << QStringLiteral("not 'lots'");
    QTest::newRow("zero device memory") << QStringList { QStringLiteral("--device-memory"), QStringLiteral("0"),
                                                         QStringLiteral("a.pickle") }
                                        << QStringLiteral("--device-memory needs a positive byte count");
}

void TestAllocatorReplay::badCommandLines()
{
    QFETCH(QStringList, args);
    QFETCH(QString, reason);
    std::vector<std::string> a;
    for (const QString& s : args)
        a.push_back(s.toStdString());
    const AllocatorReplayOutput r = allocatorReplay(a);
    QCOMPARE(r.exitCode, 2);
    QVERIFY(r.out.empty());
    QVERIFY2(QString::fromStdString(r.err).contains(reason), r.err.c_str());
}

void TestAllocatorReplay::unreadableInput_data()
{
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("reason");
    QTest::newRow("missing file") << QStringLiteral("/nonexistent/dir/trace.pickle") << QStringLiteral("trace.pickle");
    QTest::newRow("pickle that would run code")
        << QString::fromStdString(test::dataPath("hostile-reduce.pickle")) << QStringLiteral("hostile-reduce.pickle");
    QTest::newRow("truncated pickle") << QString::fromStdString(test::dataPath("truncated-multistream.pickle"))
                                      << QStringLiteral("truncated-multistream.pickle");
}

void TestAllocatorReplay::unreadableInput()
{
    QFETCH(QString, path);
    QFETCH(QString, reason);
    const AllocatorReplayOutput r = allocatorReplay({ path.toStdString() });
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(QString::fromStdString(r.err).contains(reason), r.err.c_str());
    QVERIFY2(QString::fromStdString(r.err).contains(path), r.err.c_str());
}

QTEST_GUILESS_MAIN(TestAllocatorReplay)
#include "tst_allocatorreplay.moc"
