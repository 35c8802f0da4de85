// BlockLayout follows a caching allocator from its events alone (block events carry only the requested size, as
// PyTorch's TraceEntry does). memscope's own allocator, whose decisions are PyTorch's, is the oracle: random
// workloads under each allocator setting run through it, every event goes through the layout, and the block size
// the layout derives must be the allocator's for every event, and its segments and blocks (free ones and their
// stale requested sizes included) the allocator's at the end and at checkpoints. A layout started from a state in
// the middle of a run (rebased) must go on exactly as well.
#include "agent/allocator.h"
#include "agent/blocklayout.h"
#include "agent/config.h"
#include "agent/hostbackend.h"

#include <QTest>

#include <random>

using namespace memscope;
using namespace memscope::agent;

namespace {

struct Recorder final : TraceObserver {
    void onTraceEvent(const TraceEvent& e) override { events.push_back(e); }
    std::vector<TraceEvent> events;
};

wire::EventType typeOf(TraceAction a)
{
    switch (a) {
    case TraceAction::Alloc:
        return wire::EventType::Alloc;
    case TraceAction::FreeRequested:
        return wire::EventType::FreeRequested;
    case TraceAction::FreeCompleted:
        return wire::EventType::FreeCompleted;
    case TraceAction::SegmentAlloc:
        return wire::EventType::SegmentAlloc;
    case TraceAction::SegmentFree:
        return wire::EventType::SegmentFree;
    case TraceAction::SegmentMap:
        return wire::EventType::SegmentMap;
    case TraceAction::SegmentUnmap:
        return wire::EventType::SegmentUnmap;
    default:
        return wire::EventType::Oom;
    }
}

// What an observer of PyTorch's allocator has: the event without the block's size.
wire::EventRecord observed(const TraceEvent& e)
{
    wire::EventRecord r {};
    r.type = uint8_t(typeOf(e.action));
    r.device = uint8_t(e.device);
    r.address = e.addr;
    r.stream = raw(e.stream);
    r.poolFirst = int32_t(e.pool.first);
    r.poolSecond = int32_t(e.pool.second);
    const bool block = e.action == TraceAction::Alloc || e.action == TraceAction::FreeRequested
        || e.action == TraceAction::FreeCompleted;
    r.size = block ? 0 : e.size;
    r.requestedSize = block ? e.size : 0;
    return r;
}

// Every field of every segment and block. `rebased`: a layout started from a state cannot know the stale
// requested_size that unmapped pages of an expandable segment keep (no snapshot shows unmapped pages), so free
// blocks of expandable segments are described without it.
QString describe(const std::vector<SegmentInfo>& segments, bool rebased = false)
{
    QString s;
    for (const SegmentInfo& seg : segments) {
        s += QStringLiteral("segment %1 size %2 stream %3 pool (%4,%5) %6%7\n")
                 .arg(seg.address, 0, 16)
                 .arg(seg.totalSize)
                 .arg(raw(seg.stream))
                 .arg(seg.pool.first)
                 .arg(seg.pool.second)
                 .arg(seg.isLarge ? QStringLiteral("large") : QStringLiteral("small"))
                 .arg(seg.isExpandable ? QStringLiteral(" expandable") : QString());
        for (const BlockInfo& b : seg.blocks)
            s += QStringLiteral("  block %1 size %2 requested %3 %4\n")
                     .arg(b.address, 0, 16)
                     .arg(b.size)
                     .arg(rebased && seg.isExpandable && !b.active ? QStringLiteral("?")
                                                                   : QString::number(b.requestedSize))
                     .arg(b.allocated ? QStringLiteral("allocated")
                                      : (b.active ? QStringLiteral("pending") : QStringLiteral("free")));
    }
    return s;
}

// The first line where two descriptions differ, with the segment line above it, for failure messages.
QString firstDifference(const QString& got, const QString& want)
{
    const QStringList a = got.split(QLatin1Char('\n')), b = want.split(QLatin1Char('\n'));
    QString segment;
    for (qsizetype i = 0; i < std::max(a.size(), b.size()); ++i) {
        const QString x = a.value(i), y = b.value(i);
        if (y.startsWith(QLatin1String("segment")))
            segment = y;
        if (x != y)
            return QStringLiteral("in %1:\n layout:    %2\n allocator: %3").arg(segment, x, y);
    }
    return QString();
}

} // namespace

#define COMPARE_LAYOUT(layout, allocator, rebased)                                                                     \
    do {                                                                                                               \
        const QString got_ = describe(layout, rebased), want_ = describe(allocator, rebased);                          \
        QVERIFY2(got_ == want_, qPrintable(firstDifference(got_, want_)));                                             \
    } while (false)

class TestBlockLayout : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void followsTheAllocator_data();
    void followsTheAllocator();
    void unknownAddressIsAMiss();
};

void TestBlockLayout::followsTheAllocator_data()
{
    QTest::addColumn<QString>("settings");
    QTest::addColumn<int>("seed");
    QTest::addColumn<int>("rebaseAt"); // operation after which a second layout starts from the state; -1 none
    QTest::newRow("default") << QString() << 1 << -1;
    QTest::newRow("default, rebased at 700") << QString() << 2 << 700;
    QTest::newRow("max_split_size_mb:20") << QStringLiteral("max_split_size_mb:20") << 3 << 900;
    QTest::newRow("roundup_power2_divisions:4") << QStringLiteral("roundup_power2_divisions:4") << 4 << -1;
    QTest::newRow("roundup_power2_divisions:[256:1,512:2,>:8]")
        << QStringLiteral("roundup_power2_divisions:[256:1,512:2,>:8]") << 5 << 1200;
    QTest::newRow("expandable_segments:True") << QStringLiteral("expandable_segments:True") << 6 << -1;
    QTest::newRow("expandable_segments, rebased at 1000") << QStringLiteral("expandable_segments:True") << 7 << 1000;
    QTest::newRow("expandable_segments, max_split_size_mb:64")
        << QStringLiteral("expandable_segments:True,max_split_size_mb:64") << 8 << -1;
}

void TestBlockLayout::followsTheAllocator()
{
    QFETCH(QString, settings);
    QFETCH(int, seed);
    QFETCH(int, rebaseAt);
    const ConfigParse parsed = parseAllocatorConfig(settings.toStdString());
    QVERIFY2(parsed.ok, parsed.error.c_str());
    HostBackend::Options options;
    options.capacity = size_t(4) << 30;
    options.completeEventsImmediately = false;
    HostBackend backend(options);
    CachingAllocator allocator(backend, parsed.config);
    Recorder recorder;
    allocator.setTraceObserver(&recorder);

    BlockLayout layout(parsed.config);
    std::unique_ptr<BlockLayout> rebased;
    size_t mainAt = 0, rebasedAt = 0; // events each layout has taken
    auto follow = [&](BlockLayout& l, size_t& at) {
        for (size_t& i = at; i < recorder.events.size(); ++i) {
            const TraceEvent& e = recorder.events[i];
            wire::EventRecord r = observed(e);
            const bool fits = l.apply(r);
            QVERIFY2(fits,
                     qPrintable(QStringLiteral("event %1 (action %2 at %3) does not fit")
                                    .arg(i)
                                    .arg(int(e.action))
                                    .arg(e.addr, 0, 16)));
            if (e.action == TraceAction::Alloc || e.action == TraceAction::FreeRequested
                || e.action == TraceAction::FreeCompleted)
                QCOMPARE(size_t(r.size), e.blockSize);
        }
    };

    std::mt19937_64 rng { uint64_t(seed) };
    const size_t sizes[] = { 1,        511,           512,     513,     4096,           (1 << 20) - 1,
                             1 << 20,  (1 << 20) + 1, 3 << 20, 5 << 20, (10 << 20) + 1, 25 << 20,
                             70 << 20, 130 << 20 };
    const uintptr_t streams[] = { 0, 0x7000, 0x8000 };
    std::vector<uintptr_t> live;
    for (int op = 0; op < 2500; ++op) {
        const double roll = std::uniform_real_distribution<double>(0, 1)(rng);
        if (!live.empty() && (roll < 0.45 || live.size() > 300)) {
            const size_t k = size_t(rng() % live.size());
            const uintptr_t p = live[k];
            live.erase(live.begin() + long(k));
            if (rng() % 4 == 0) // used on another stream: the free waits for it (record_stream)
                QCOMPARE(allocator.recordStream(0, DevicePtr { p }, StreamId { streams[1 + rng() % 2] + 1 }),
                         Status::Ok);
            QCOMPARE(allocator.free(0, DevicePtr { p }), Status::Ok);
        } else {
            const size_t base = sizes[rng() % std::size(sizes)];
            const size_t size
                = std::max<size_t>(1, size_t(double(base) * std::uniform_real_distribution<double>(0.75, 1.25)(rng)));
            const MallocResult r = allocator.malloc(0, size, StreamId { streams[rng() % 3] });
            if (r.status == Status::Ok)
                live.push_back(raw(r.ptr));
        }
        if (op % 97 == 96)
            backend.completeAllEvents();
        if (op % 600 == 599)
            allocator.emptyCache(0);
        if (op == rebaseAt) {
            rebased = std::make_unique<BlockLayout>(parsed.config);
            rebased->reset(allocator.snapshot(0));
            rebasedAt = recorder.events.size();
        }
        if (op % 250 == 249) {
            follow(layout, mainAt);
            if (QTest::currentTestFailed())
                return;
            COMPARE_LAYOUT(layout.segments(0), allocator.snapshot(0), false);
            if (rebased) {
                follow(*rebased, rebasedAt);
                if (QTest::currentTestFailed())
                    return;
                COMPARE_LAYOUT(rebased->segments(0), allocator.snapshot(0), true);
            }
        }
    }
    follow(layout, mainAt);
    COMPARE_LAYOUT(layout.segments(0), allocator.snapshot(0), false);
    QCOMPARE(layout.misses(), uint64_t(0));
}

void TestBlockLayout::unknownAddressIsAMiss()
{
    // A layout that missed events (an observer that started late and was not rebased) says so and still gives the
    // rounded request as the size.
    BlockLayout layout(AllocatorConfig {});
    wire::EventRecord r {};
    r.type = uint8_t(wire::EventType::Alloc);
    r.address = 0x7f0000000000;
    r.requestedSize = 1000;
    QVERIFY(!layout.apply(r));
    QCOMPARE(r.size, uint64_t(1024));
    QCOMPARE(layout.misses(), uint64_t(1));
}

QTEST_GUILESS_MAIN(TestBlockLayout)
#include "tst_blocklayout.moc"
