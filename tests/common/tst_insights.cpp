// Tests of report/insights.h and `memscope-cli insights` (tools/cli/insightscommand.h, run in-process): every
// figure checked against arithmetic done here on the raw trace of real snapshots, not against the replay the
// insights use: the peak's top consumer of transformer_train, the leak of diff_after (and of the diff
// diff_before -> diff_after), the OOMs of oom.pickle, gc05_fraction and oom_retry (memory caps), record_stream waits,
// and the three OOM causes on small hand-made traces. Test thread only.
#include "insightscommand.h"
#include "io/snapshotio.h"
#include "model/landmarks.h"
#include "report/insights.h"
#include "testutil.h"

#include <QRegularExpression>
#include <QtTest>

#include <map>

using namespace memscope;
using namespace memscope::model;
using report::Insight;
using report::InsightKind;

namespace {

std::shared_ptr<const Snapshot> load(const std::string& path)
{
    io::LoadResult r = io::loadSnapshot(path);
    if (!r.ok())
        qFatal("cannot load %s: %s", path.c_str(), r.error.toString().c_str());
    return r.snapshot;
}

std::string fixture(const QString& name)
{
    return name.startsWith(QLatin1String("corpus/")) ? test::dataPath(name.toStdString())
                                                     : test::snapshotPath(name.toStdString());
}

struct Loaded {
    std::shared_ptr<const Snapshot> snapshot;
    std::vector<Replay> replays;
    report::Insights insights;
};

Loaded insightsOf(const std::string& path)
{
    Loaded l;
    l.snapshot = load(path);
    l.replays = Replay::buildAll(*l.snapshot);
    l.insights = report::computeInsights(*l.snapshot, l.replays);
    return l;
}

std::vector<Insight> ofKind(const report::Insights& in, InsightKind kind)
{
    std::vector<Insight> out;
    for (const Insight& it : in.items)
        if (it.kind == kind)
            out.push_back(it);
    return out;
}

std::string_view basename(std::string_view path)
{
    const size_t slash = path.rfind('/');
    return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// "file:line:name" of a stack's frames, innermost first, as a key.
std::string stackKey(const Snapshot& s, StackId stack, size_t frames = 99)
{
    std::string key;
    for (const FrameId* f = s.stackBegin(stack); f != s.stackEnd(stack) && frames-- > 0; ++f)
        key += std::string(basename(s.str(s.frame(*f).filename))) + ":" + s.frame(*f).line.toString() + ":"
            + std::string(s.str(s.frame(*f).name)) + ";";
    return key;
}

// Independently of the replay: the live allocations after `entries` entries of a complete trace, by address, as
// (requested bytes, stack), from alloc and free_completed entries alone.
std::map<DeviceAddr, std::pair<ByteCount, StackId>> liveAfter(const Trace& t, int64_t entries)
{
    std::map<DeviceAddr, std::pair<ByteCount, StackId>> live;
    for (int64_t j = 0; j < entries; ++j) {
        const TraceEntry& e = t[size_t(j)];
        if (e.action == Action::Alloc)
            live[e.addr] = { e.size, e.stack };
        else if (e.action == Action::FreeCompleted)
            live.erase(e.addr);
    }
    return live;
}

// Reserved bytes after `entries` entries of a complete trace: segment_alloc/map minus segment_free/unmap.
ByteCount reservedAfter(const Trace& t, int64_t entries)
{
    ByteCount reserved = 0;
    for (int64_t j = 0; j < entries; ++j) {
        const TraceEntry& e = t[size_t(j)];
        if (e.action == Action::SegmentAlloc || e.action == Action::SegmentMap)
            reserved += e.size;
        else if (e.action == Action::SegmentFree || e.action == Action::SegmentUnmap)
            reserved -= e.size;
    }
    return reserved;
}

// The exact figure after `label` in an OOM's detail ("reserved 1.6GiB (1677721600 B)").
qint64 figure(const Insight& it, const char* label)
{
    const QRegularExpression re(QLatin1String(label) + QLatin1String(" [^ ]+ \\((\\d+) B\\)"));
    const auto m = re.match(QString::fromStdString(it.detail));
    return m.hasMatch() ? m.captured(1).toLongLong() : -1;
}

DiffCommandOutput command(const QStringList& args)
{
    std::vector<std::string> a;
    for (const QString& s : args)
        a.push_back(s.toStdString());
    const DiffLoader loader = [](const std::string& path, std::string& error) {
        io::LoadResult r = io::loadSnapshot(path);
        if (!r.ok())
            error = r.error.toString();
        return r.snapshot;
    };
    return runInsightsCommand(a, loader);
}

// A tiny complete trace in PyTorch's JSON form: one 20 MiB segment holding three blocks (8, 4 and 8 MiB), the outer
// two freed or not, then an OOM of `request` bytes with `deviceFree` bytes free on the device.
QByteArray smallTrace(bool freeOuter, qint64 request, qint64 deviceFree)
{
    const qint64 MiB = 1 << 20, base = 0x7f0000000000;
    QString entries;
    auto entry = [&](const char* action, qint64 addr, qint64 size) {
        entries += QStringLiteral("{\"action\":\"%1\",\"addr\":%2,\"size\":%3,\"stream\":0,\"time_us\":%4,"
                                  "\"frames\":[{\"name\":\"step\",\"filename\":\"train.py\",\"line\":7}]},")
                       .arg(QLatin1String(action))
                       .arg(addr)
                       .arg(size)
                       .arg(1000 + entries.count(QLatin1Char('{')));
    };
    entry("segment_alloc", base, 20 * MiB);
    entry("alloc", base, 8 * MiB);
    entry("alloc", base + 8 * MiB, 4 * MiB);
    entry("alloc", base + 12 * MiB, 8 * MiB);
    if (freeOuter) {
        for (qint64 at : { base, base + 12 * MiB }) {
            entry("free_requested", at, 8 * MiB);
            entry("free_completed", at, 8 * MiB);
        }
    }
    entries += QStringLiteral("{\"action\":\"oom\",\"device_free\":%1,\"size\":%2,\"stream\":0,\"time_us\":9000,"
                              "\"frames\":[{\"name\":\"step\",\"filename\":\"train.py\",\"line\":9}]}")
                   .arg(deviceFree)
                   .arg(request);
    const char* outer = freeOuter ? "inactive" : "active_allocated";
    auto block = [&](qint64 addr, qint64 size, const char* state) {
        return QStringLiteral("{\"address\":%1,\"size\":%2,\"requested_size\":%2,\"state\":\"%3\",\"frames\":[]}")
            .arg(addr)
            .arg(size)
            .arg(QLatin1String(state));
    };
    const QString blocks = block(base, 8 * MiB, outer) + QLatin1Char(',')
        + block(base + 8 * MiB, 4 * MiB, "active_allocated") + QLatin1Char(',')
        + block(base + 12 * MiB, 8 * MiB, outer);
    const qint64 allocated = freeOuter ? 4 * MiB : 20 * MiB;
    const QString json = QStringLiteral("{\"segments\":[{\"device\":0,\"address\":%1,\"total_size\":%2,"
                                        "\"allocated_size\":%3,\"active_size\":%3,\"requested_size\":%3,\"stream\":0,"
                                        "\"segment_type\":\"large\",\"segment_pool_id\":[0,0],\"is_expandable\":false,"
                                        "\"frames\":[],\"blocks\":[%4]}],\"device_traces\":[[%5]]}")
                             .arg(base)
                             .arg(20 * MiB)
                             .arg(allocated)
                             .arg(blocks, entries);
    return json.toUtf8();
}

} // namespace

class TestInsights : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void topConsumerAtThePeak();
    void sharesAddUp_data();
    void sharesAddUp();
    void leakInDiffAfter();
    void leakInTheDiff();
    void oomsUnderACap_data();
    void oomsUnderACap();
    void oomCauses_data();
    void oomCauses();
    void stateOnlySnapshot();
    void pendingFrees();
    void linksAreValid_data();
    void linksAreValid();
    void commandLine_data();
    void commandLine();
};

void TestInsights::topConsumerAtThePeak()
{
    const Loaded l = insightsOf(test::snapshotPath("transformer_train.pickle"));
    const auto peaks = ofKind(l.insights, InsightKind::Peak);
    QCOMPARE(peaks.size(), size_t(1));
    QCOMPARE(peaks[0].index, int64_t(9796)); // what `memscope-cli info` prints
    const auto top = ofKind(l.insights, InsightKind::TopConsumer);
    QVERIFY(!top.empty());
    // Independently: the live allocations after 9796 entries grouped by what their label says (their site and
    // what allocated there: consumers never read the same); the largest group by requested bytes.
    const Snapshot& s = *l.snapshot;
    std::map<std::string, std::pair<ByteCount, int64_t>> groups;
    for (const auto& [addr, v] : liveAfter(s.deviceTraces[0], 9796)) {
        auto& g = groups[report::stackLabel(s, v.second)];
        g.first += v.first;
        ++g.second;
    }
    // Blocks alive before the trace have no alloc entry: transformer_train's trace is complete, so none.
    QCOMPARE(l.replays[0].stateAt(0).allocations.size(), size_t(0));
    auto best = std::max_element(groups.begin(), groups.end(),
                                 [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
    QCOMPARE(report::stackLabel(s, top[0].stack), best->first);
    QCOMPARE(top[0].requested, best->second.first);
    QCOMPARE(top[0].count, best->second.second);
    QCOMPARE(top[0].index, int64_t(9796));
    QCOMPARE(QString::fromStdString(top[0].title).left(16), QStringLiteral("18.9% of the pea"));
    // The link selects the group's largest block, alive at the peak.
    const std::vector<AllocationId> live = l.replays[0].liveAt(9796);
    QVERIFY(std::find(live.begin(), live.end(), top[0].allocation) != live.end());
    QCOMPARE(l.replays[0].allocation(top[0].allocation).stack, top[0].stack);
}

void TestInsights::sharesAddUp_data()
{
    QTest::addColumn<QString>("file");
    for (const char* f : { "transformer_train.pickle", "mlp_train.pickle", "oom.pickle", "diff_after.pickle",
                           "corpus/hf_gpt2.pickle", "corpus/gc05_fraction.pickle" })
        QTest::newRow(f) << QString::fromLatin1(f);
}

void TestInsights::sharesAddUp()
{
    QFETCH(QString, file);
    const Loaded l = insightsOf(fixture(file));
    const auto peak = ofKind(l.insights, InsightKind::Peak);
    QCOMPARE(peak.size(), size_t(1));
    double shares = 0;
    ByteCount bytes = 0, previous = INT64_MAX;
    for (const Insight& it : ofKind(l.insights, InsightKind::TopConsumer)) {
        shares += it.share;
        bytes += it.bytes;
        QVERIFY(it.bytes <= previous); // largest first
        previous = it.bytes;
        QCOMPARE(it.share, double(it.bytes) / double(peak[0].bytes));
    }
    QVERIFY(shares <= 1.0 + 1e-9);
    QVERIFY(bytes <= peak[0].bytes);
    // Fragmentation at the peak: reserved minus active there, from the segments of the trace itself.
    const auto frag = ofKind(l.insights, InsightKind::Fragmentation);
    QCOMPARE(frag.size(), size_t(1));
    QCOMPARE(frag[0].index, peak[0].index);
    if (l.replays[0].stateAt(0).segments.empty()) // complete traces
        QVERIFY(frag[0].bytes <= reservedAfter(l.snapshot->deviceTraces[0], peak[0].index));
}

void TestInsights::leakInDiffAfter()
{
    // diff_after: "the same job ... after 6 more steps of a deliberate leak" (../shared/README.md). The README's
    // diff finds gen_snapshots.py:126:step +9,486,336 B in +3 allocations from diff_pair's second loop; within
    // diff_after alone the line grows across its Optimizer.step ranges.
    const Loaded l = insightsOf(test::snapshotPath("diff_after.pickle"));
    const auto leaks = ofKind(l.insights, InsightKind::LeakSuspect);
    QVERIFY(!leaks.empty());
    const Insight& leak = leaks.front();
    const Snapshot& s = *l.snapshot;
    QVERIFY2(stackKey(s, leak.stack, 1).find("gen_snapshots.py:126:step") != std::string::npos,
             stackKey(s, leak.stack).c_str());
    QVERIFY(QString::fromStdString(leak.title).contains(QLatin1String("Optimizer.step#SGD.step")));
    // Independently: live requested bytes of that stack at the first and the last END of Optimizer.step.
    std::vector<int64_t> ends;
    for (const Annotation& a : s.annotations)
        if (a.stage == Annotation::Stage::End && s.str(a.name) == "Optimizer.step#SGD.step")
            ends.push_back(stateIndexAtTime(s.deviceTraces[0], a.timeUs));
    QCOMPARE(ends.size(), size_t(8));
    auto bytesOf = [&](int64_t at) {
        ByteCount sum = 0;
        int64_t count = 0;
        for (const auto& [addr, v] : liveAfter(s.deviceTraces[0], at))
            if (report::stackLabel(s, v.second) == report::stackLabel(s, leak.stack)) {
                sum += v.first;
                ++count;
            }
        return std::make_pair(sum, count);
    };
    const auto first = bytesOf(ends.front()), last = bytesOf(ends.back());
    QCOMPARE(leak.requested, last.first - first.first);
    // Grouped by site, the leaking line (gen_snapshots.py:126, `leak.append(torch.empty(...))`) counts from both
    // of its callers (diff_pair's lines 128 and 132): four blocks, 3 MiB + 2 x 4 KiB steps each.
    QCOMPARE(leak.requested, ByteCount(12632064));
    QCOMPARE(leak.count, last.second - first.second);
    QCOMPARE(leak.count, int64_t(4));
    QCOMPARE(leak.index, ends.back());
    // The newest block of the leak is selected.
    QCOMPARE(report::stackLabel(s, l.replays[0].allocation(leak.allocation).stack), report::stackLabel(s, leak.stack));
}

void TestInsights::leakInTheDiff()
{
    DiffSide a, b;
    a.snapshot = load(test::snapshotPath("diff_before.pickle"));
    b.snapshot = load(test::snapshotPath("diff_after.pickle"));
    const DiffResult r = computeDiff(a, b);
    QVERIFY(r.ok());
    const report::Insights in = report::computeDiffInsights(r);
    QVERIFY(in.items.size() >= 2);
    // Independently: the final blocks of each file from that call site.
    auto finalBytes = [](const Snapshot& s) {
        ByteCount sum = 0;
        for (const Block& blk : s.blocks)
            if (blk.state == BlockState::ActiveAllocated
                && stackKey(s, blk.stack).starts_with("gen_snapshots.py:126:step;gen_snapshots.py:132:"))
                sum += blk.size;
        return sum;
    };
    const ByteCount grew = finalBytes(*b.snapshot) - finalBytes(*a.snapshot);
    QCOMPARE(grew, ByteCount(9486336));
    const Insight& top = in.items[1];
    QCOMPARE(top.kind, InsightKind::Growth);
    QCOMPARE(top.bytes, grew);
    QCOMPARE(top.count, int64_t(3));
    QVERIFY(QString::fromStdString(top.title).contains(QLatin1String("gen_snapshots.py:126:step")));
    QCOMPARE(in.items[0].bytes, r.totals.front().delta.active);
    // The first item's words follow the signs: the same files swapped shrink, with fewer allocations.
    const QString forward = QString::fromStdString(in.items[0].title);
    QVERIFY2(forward.startsWith(QLatin1String("Active memory grew by ")) && forward.endsWith(QLatin1String(" more")),
             qPrintable(forward));
    const DiffResult back = computeDiff(b, a);
    const QString backward = QString::fromStdString(report::computeDiffInsights(back).items[0].title);
    QVERIFY2(backward.startsWith(QLatin1String("Active memory shrank by ")) && backward.endsWith(QLatin1String(" fewer"))
                 && !backward.contains(QLatin1String(", -")),
             qPrintable(backward));
}

void TestInsights::oomsUnderACap_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("ooms");
    QTest::newRow("oom") << "oom.pickle" << 1;
    QTest::newRow("gc05_fraction") << "corpus/gc05_fraction.pickle" << 29;
    QTest::newRow("oom_retry") << "corpus/oom_retry.pickle" << 81;
}

void TestInsights::oomsUnderACap()
{
    QFETCH(QString, file);
    QFETCH(int, ooms);
    const Loaded l = insightsOf(fixture(file));
    const Trace& t = l.snapshot->deviceTraces[0];
    const auto items = ofKind(l.insights, InsightKind::Oom);
    const size_t explained = std::min<size_t>(size_t(ooms), report::InsightOptions {}.maxOoms);
    QCOMPARE(items.size(), explained + (size_t(ooms) > explained ? 1 : 0));
    int k = 0;
    for (size_t j = 0; j < t.size() && size_t(k) < explained; ++j) {
        if (t[j].action != Action::Oom)
            continue;
        const Insight& it = items[size_t(k++)];
        QCOMPARE(it.index, int64_t(j) + 1);
        QCOMPARE(it.bytes, t[j].size);
        QCOMPARE(it.stack, t[j].stack); // the failed request's, and no allocation: it made none
        QCOMPARE(it.allocation, model::NoAllocation);
        // Independently: reserved bytes from the segment entries before the OOM, and the device's free bytes as
        // the entry says. These jobs ran under set_per_process_memory_fraction on an 80 GB device: never full.
        const ByteCount reserved = reservedAfter(t, int64_t(j));
        QCOMPARE(figure(it, "reserved"), reserved);
        QCOMPARE(figure(it, "free on the device"), t[j].addr);
        QVERIFY(t[j].addr > t[j].size);
        const QString title = QString::fromStdString(it.title);
        QVERIFY2(!title.contains(QLatin1String("device was full")), it.title.c_str());
        const qint64 freeCached = figure(it, "reserved but free"), largest = figure(it, "largest free block");
        QCOMPARE(freeCached, reserved - figure(it, "active"));
        if (title.contains(QLatin1String("in pieces"))) {
            QVERIFY(freeCached >= t[j].size);
            QVERIFY(largest < estimatedBlockSize(t[j].size));
            QVERIFY(it.detail.find("PyTorch's advice") != std::string::npos);
        } else {
            QVERIFY2(title.contains(QLatin1String("cap")), it.title.c_str());
        }
    }
    if (size_t(ooms) > explained) {
        const QString summary = QString::fromStdString(items.back().title);
        QVERIFY2(summary.startsWith(QStringLiteral("All %1 OOMs").arg(ooms)), items.back().title.c_str());
        // The three causes add up to every OOM.
        const auto numbers = QRegularExpression(QStringLiteral(": (\\d+) .* (\\d+) at .* (\\d+) with")).match(summary);
        QVERIFY(numbers.hasMatch());
        QCOMPARE(numbers.captured(1).toInt() + numbers.captured(2).toInt() + numbers.captured(3).toInt(), ooms);
    }
}

void TestInsights::oomCauses_data()
{
    QTest::addColumn<bool>("freeOuter");
    QTest::addColumn<qint64>("request");
    QTest::addColumn<qint64>("deviceFree");
    QTest::addColumn<QString>("cause");
    const qint64 MiB = 1 << 20;
    // 16 MiB free in two 8 MiB blocks; 12 MiB asked.
    QTest::newRow("in pieces") << true << 12 * MiB << 1 * MiB << "the memory was there but in pieces";
    // Nothing free in the segment, the device has room: a cap.
    QTest::newRow("cap") << false << 12 * MiB << 40000 * MiB << "the process hit its memory cap";
    // Nothing free anywhere.
    QTest::newRow("device full") << false << 12 * MiB << 1 * MiB << "the device was full";
    // 16 MiB free but 20 MiB asked, the device full: not a matter of pieces.
    QTest::newRow("too big for what is free") << true << 20 * MiB << 1 * MiB << "the device was full";
}

void TestInsights::oomCauses()
{
    QFETCH(bool, freeOuter);
    QFETCH(qint64, request);
    QFETCH(qint64, deviceFree);
    QFETCH(QString, cause);
    const QByteArray json = smallTrace(freeOuter, request, deviceFree);
    io::LoadResult r = io::loadSnapshotFromMemory(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.constData()), size_t(json.size())),
        "small.json");
    QVERIFY2(r.ok(), r.error.toString().c_str());
    const std::vector<Replay> replays = Replay::buildAll(*r.snapshot);
    QCOMPARE(replays[0].warnings(), uint64_t(0));
    const auto ooms = ofKind(report::computeInsights(*r.snapshot, replays), InsightKind::Oom);
    QCOMPARE(ooms.size(), size_t(1));
    QVERIFY2(QString::fromStdString(ooms[0].title).contains(cause), ooms[0].title.c_str());
    QCOMPARE(figure(ooms[0], "largest free block"), freeOuter ? qint64(8 << 20) : qint64(0));
}

// A snapshot without a trace: its state is all there is, and the first item says so instead of "entry 0 of 0".
void TestInsights::stateOnlySnapshot()
{
    const Loaded l = insightsOf(test::dataPath("state-only.pickle"));
    const auto peaks = ofKind(l.insights, InsightKind::Peak);
    QCOMPARE(peaks.size(), size_t(1));
    const QString title = QString::fromStdString(peaks[0].title);
    QVERIFY2(title.startsWith(QLatin1String("In the snapshot: ")), qPrintable(title));
    QVERIFY2(title.contains(QLatin1String("no trace recorded")), qPrintable(title));
    QVERIFY(!title.contains(QLatin1String("entry 0 of 0")));
    QVERIFY(!ofKind(l.insights, InsightKind::TopConsumer).empty()); // the state still says who holds the memory
}

void TestInsights::pendingFrees()
{
    const Loaded l = insightsOf(test::dataPath("corpus/streams_record_stream.pickle"));
    const auto items = ofKind(l.insights, InsightKind::PendingFree);
    QVERIFY(items.size() >= 2);
    // Independently: blocks whose free_requested and free_completed are not adjacent entries, and the most
    // requested bytes waiting at once.
    const Trace& t = l.snapshot->deviceTraces[0];
    std::map<DeviceAddr, std::pair<size_t, ByteCount>> requested; // addr -> (entry, bytes)
    int64_t waited = 0;
    ByteCount waiting = 0, most = 0;
    for (size_t j = 0; j < t.size(); ++j) {
        if (t[j].action == Action::FreeRequested) {
            requested[t[j].addr] = { j, t[j].size };
            waiting += t[j].size;
        } else if (t[j].action == Action::FreeCompleted) {
            auto it = requested.find(t[j].addr);
            if (it != requested.end()) {
                waited += j - it->second.first > 1;
                waiting -= it->second.second;
                requested.erase(it);
            }
        }
        most = std::max(most, waiting);
    }
    QCOMPARE(items[0].count, waited);
    // Block bytes are requested bytes rounded up to 512 B, at most 511 B more per block.
    QVERIFY(items[0].bytes >= most);
    QVERIFY(items[0].bytes <= most + 512 * int64_t(t.size()));
    QVERIFY(QString::fromStdString(items[0].detail).contains(QLatin1String("record_stream")));
}

void TestInsights::linksAreValid_data()
{
    QTest::addColumn<QString>("file");
    for (const char* f : { "transformer_train.pickle", "diff_after.pickle", "multistream.pickle", "two_device.pickle",
                           "corpus/oom_retry.pickle", "corpus/streams_record_stream.pickle" })
        QTest::newRow(f) << QString::fromLatin1(f);
}

void TestInsights::linksAreValid()
{
    QFETCH(QString, file);
    const Loaded l = insightsOf(fixture(file));
    QVERIFY(!l.insights.items.empty());
    for (const Insight& it : l.insights.items) {
        QVERIFY(!it.title.empty());
        QVERIFY(size_t(it.device) < l.replays.size());
        const Replay& replay = l.replays[size_t(it.device)];
        QVERIFY2(it.index >= -1 && it.index <= replay.entryCount(), it.title.c_str());
        QVERIFY(raw(it.stack) < l.snapshot->stackCount());
        if (it.allocation != NoAllocation) {
            QVERIFY(raw(it.allocation) < replay.allocations().size());
            // The allocation a link selects is alive at the moment it goes to, except a pending free's (selected
            // at its free_requested, when it still is).
            const std::vector<AllocationId> live = replay.liveAt(it.index);
            QVERIFY2(std::find(live.begin(), live.end(), it.allocation) != live.end(), it.title.c_str());
        }
    }
}

void TestInsights::commandLine_data()
{
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("out");
    QTest::addColumn<QString>("err");
    const QString train = QString::fromStdString(test::snapshotPath("transformer_train.pickle"));
    const QString before = QString::fromStdString(test::snapshotPath("diff_before.pickle"));
    const QString after = QString::fromStdString(test::snapshotPath("diff_after.pickle"));
    QTest::newRow("text") << QStringList { train } << 0 << "Peak: 1.2GiB allocated at entry 9796 of 11137"
                          << "";
    QTest::newRow("json") << QStringList { train, QStringLiteral("--format"), QStringLiteral("json") } << 0
                          << "\"format\": \"memscope-insights\""
                          << "";
    QTest::newRow("json, = form") << QStringList { after, QStringLiteral("--format=json") } << 0
                                  << "\"kind\": \"leak-suspect\""
                                  << "";
    QTest::newRow("diff") << QStringList { QStringLiteral("--diff"), before, after } << 0
                          << "+9.0MiB in +3 blocks from gen_snapshots.py:126:step"
                          << "";
    QTest::newRow("diff of two moments") << QStringList { QStringLiteral("--diff"), train + QLatin1String("@step_1"),
                                                          train + QLatin1String("@peak") }
                                         << 0 << "Active memory grew"
                                         << "";
    QTest::newRow("top 1") << QStringList { train, QStringLiteral("--top"), QStringLiteral("1") } << 0 << "18.9%"
                           << "";
    QTest::newRow("no file") << QStringList {} << 2 << ""
                             << "needs a FILE";
    QTest::newRow("bad format") << QStringList { train, QStringLiteral("--format"), QStringLiteral("xml") } << 2 << ""
                                << "unknown format 'xml'";
    QTest::newRow("bad top") << QStringList { train, QStringLiteral("--top"), QStringLiteral("x") } << 2 << ""
                             << "--top needs a number";
    QTest::newRow("diff of one") << QStringList { QStringLiteral("--diff"), train } << 2 << ""
                                 << "--diff needs exactly two snapshots";
    QTest::newRow("no such moment") << QStringList { QStringLiteral("--diff"), train + QLatin1String("@oom"), train }
                                    << 2 << ""
                                    << "the trace has no OOM";
    QTest::newRow("unreadable") << QStringList { QStringLiteral("/nonexistent/x.pickle") } << 1 << ""
                                << "/nonexistent/x.pickle: cannot open";
}

void TestInsights::commandLine()
{
    QFETCH(QStringList, args);
    QFETCH(int, status);
    QFETCH(QString, out);
    QFETCH(QString, err);
    const DiffCommandOutput r = command(args);
    QCOMPARE(r.exitCode, status);
    QVERIFY2(QString::fromStdString(r.out).contains(out), r.out.c_str());
    if (err.isEmpty())
        QVERIFY2(r.err.empty(), r.err.c_str());
    else
        QVERIFY2(QString::fromStdString(r.err).contains(err), r.err.c_str());
    if (args.contains(QLatin1String("--format")) && status == 0)
        QVERIFY(r.out.ends_with("}\n"));
}

QTEST_GUILESS_MAIN(TestInsights)
#include "tst_insights.moc"
