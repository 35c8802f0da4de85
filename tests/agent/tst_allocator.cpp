// The caching allocator's rules, one table per rule, against PyTorch's CUDACachingAllocator behaviour: size
// rounding (incl. roundup_power2_divisions), pool and segment size choice, splitting and the oversize-block rules
// of max_split_size, merging, per-stream pools, deferred frees after recordStream, empty_cache, OOM -> release ->
// retry -> OOM with the device's free memory, garbage collection, expandable segments, private pools, several
// devices, statistics, the settings parser and the C API. Everything runs on the host backend (no GPU).
#include "agent/allocator.h"
#include "agent/config.h"
#include "agent/hostbackend.h"
#include "memscope/agent.h"
#include "testutil.h"

#include <QTest>

#include <atomic>
#include <thread>

using namespace memscope::agent;

namespace {

constexpr size_t KiB = 1024;

struct Recorder final : TraceObserver {
    void onTraceEvent(const TraceEvent& e) override { events.push_back(e); }
    std::vector<TraceEvent> events;
    std::vector<TraceAction> actions() const
    {
        std::vector<TraceAction> a;
        for (const auto& e : events)
            a.push_back(e.action);
        return a;
    }
};

AllocatorConfig config(const char* text)
{
    const ConfigParse p = parseAllocatorConfig(text);
    if (!p.ok)
        qFatal("bad test config '%s': %s", text, p.error.c_str());
    return p.config;
}

// One allocator over one host backend, with a recorder attached.
struct Fixture {
    explicit Fixture(const AllocatorConfig& c = {}, HostBackend::Options o = {})
        : backend(o)
        , allocator(backend, c)
    {
        allocator.setTraceObserver(&recorder);
    }
    uintptr_t malloc(size_t size, uintptr_t stream = 0, int device = 0)
    {
        const MallocResult r = allocator.malloc(device, size, StreamId { stream });
        if (r.status != Status::Ok)
            qWarning("malloc(%zu) failed: %s", size, statusName(r.status).data());
        return raw(r.ptr);
    }
    void free(uintptr_t p, int device = 0) { QCOMPARE(allocator.free(device, DevicePtr { p }), Status::Ok); }
    std::vector<SegmentInfo> segments(int device = 0) const { return allocator.snapshot(device); }
    const SegmentInfo* segmentOf(uintptr_t p, int device = 0)
    {
        m_last = segments(device);
        for (const auto& s : m_last) {
            if (p >= s.address && p < s.address + s.totalSize)
                return &s;
        }
        return nullptr;
    }
    const BlockInfo* blockAt(uintptr_t p, int device = 0)
    {
        const SegmentInfo* s = segmentOf(p, device);
        if (!s)
            return nullptr;
        for (const auto& b : s->blocks) {
            if (b.address == p)
                return &b;
        }
        return nullptr;
    }

    HostBackend backend;
    CachingAllocator allocator;
    Recorder recorder;

private:
    std::vector<SegmentInfo> m_last;
};

} // namespace

class TestAllocator : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void roundSize_data();
    void roundSize();
    void allocationSize_data();
    void allocationSize();
    void poolAndSegmentChoice_data();
    void poolAndSegmentChoice();
    void splitting_data();
    void splitting();
    void oversizeBlocks_data();
    void oversizeBlocks();
    void mergingWithFreeNeighbours();
    void bestFitByStreamSizeAddress();
    void perStreamIsolation();
    void deferredFreeAfterRecordStream();
    void emptyCacheReleasesOnlyUnsplitSegments();
    void outOfMemoryReleasesCacheRetriesThenFails();
    void memoryFractionCapsReservations();
    void garbageCollectionReleasesOldBlocks();
    void expandableSegmentsGrowAndShrink();
    void privatePoolTakesCapturedStream();
    void devicesAreIndependent();
    void statistics();
    void invalidCalls();
    void traceCallsAndStackIds();
    void concurrentThreads();
    void configParses_data();
    void configParses();
    void configErrors_data();
    void configErrors();
    void configFromEnvironment();
    void cApi();
};

// --- sizes ------------------------------------------------------------------------------------------------------

void TestAllocator::roundSize_data()
{
    QTest::addColumn<QString>("conf");
    QTest::addColumn<size_t>("request");
    QTest::addColumn<size_t>("rounded");
    QTest::newRow("0 B -> 512") << QString() << size_t(0) << size_t(512);
    QTest::newRow("1 B -> 512") << QString() << size_t(1) << size_t(512);
    QTest::newRow("511 B -> 512") << QString() << size_t(511) << size_t(512);
    QTest::newRow("512 B stays") << QString() << size_t(512) << size_t(512);
    QTest::newRow("513 B -> 1024") << QString() << size_t(513) << size_t(1024);
    QTest::newRow("1 MiB - 1 -> 1 MiB") << QString() << MiB - 1 << MiB;
    QTest::newRow("1 MiB stays") << QString() << MiB << MiB;
    QTest::newRow("1 MiB + 1 -> 1 MiB + 512") << QString() << MiB + 1 << MiB + 512;
    QTest::newRow("10 MiB - 1 -> 10 MiB") << QString() << 10 * MiB - 1 << 10 * MiB;
    QTest::newRow("10 MiB stays") << QString() << 10 * MiB << 10 * MiB;
    QTest::newRow("10 MiB + 1 -> 10 MiB + 512") << QString() << 10 * MiB + 1 << 10 * MiB + 512;
    // roundup_power2_divisions:4 - sizes above 4 x 512 B go to the next quarter between powers of two.
    QTest::newRow("div 4: 1200 B is below 4 x 512 B, plain rounding")
        << QStringLiteral("roundup_power2_divisions:4") << size_t(1200) << size_t(1536);
    QTest::newRow("div 4: 5000 B -> 5120")
        << QStringLiteral("roundup_power2_divisions:4") << size_t(5000) << size_t(5120);
    QTest::newRow("div 4: 3 MiB + 1 -> 3.5 MiB")
        << QStringLiteral("roundup_power2_divisions:4") << 3 * MiB + 1 << 3 * MiB + 512 * KiB;
    QTest::newRow("div 4: a power of two stays") << QStringLiteral("roundup_power2_divisions:4") << 4 * MiB << 4 * MiB;
    QTest::newRow("div 4: on a division stays") << QStringLiteral("roundup_power2_divisions:4") << 5 * MiB << 5 * MiB;
    // The list form: the first boundary (1 MB) also covers everything below it, '>' everything above the last.
    QTest::newRow("list [1:2,>:8]: 1.5 MiB + 1 -> 2 MiB")
        << QStringLiteral("roundup_power2_divisions:[1:2,>:8]") << 3 * MiB / 2 + 1 << 2 * MiB;
    QTest::newRow("list [1:2,>:8]: 3 MiB + 1 -> 3.25 MiB")
        << QStringLiteral("roundup_power2_divisions:[1:2,>:8]") << 3 * MiB + 1 << 3 * MiB + 256 * KiB;
    QTest::newRow("list [256:4]: 100 MiB + 1 is below 256 MB, also 4 divisions")
        << QStringLiteral("roundup_power2_divisions:[256:4]") << 100 * MiB + 1 << 112 * MiB;
    QTest::newRow("list [2:1,>:0]: 0 divisions above means plain rounding")
        << QStringLiteral("roundup_power2_divisions:[2:1,>:0]") << 100 * MiB + 1 << 100 * MiB + 512;
}

void TestAllocator::roundSize()
{
    QFETCH(QString, conf);
    QFETCH(size_t, request);
    QFETCH(size_t, rounded);
    QCOMPARE(CachingAllocator::roundSize(request, config(conf.toUtf8().constData())), rounded);
}

void TestAllocator::allocationSize_data()
{
    QTest::addColumn<size_t>("size");
    QTest::addColumn<size_t>("segment");
    QTest::newRow("512 B: a 2 MiB small segment") << size_t(512) << 2 * MiB;
    QTest::newRow("1 MiB: still small") << MiB << 2 * MiB;
    QTest::newRow("1 MiB + 512: a 20 MiB large segment") << MiB + 512 << 20 * MiB;
    QTest::newRow("10 MiB - 512: 20 MiB") << 10 * MiB - 512 << 20 * MiB;
    QTest::newRow("10 MiB: its own segment") << 10 * MiB << 10 * MiB;
    QTest::newRow("10 MiB + 512: rounded up to 12 MiB") << 10 * MiB + 512 << 12 * MiB;
    QTest::newRow("25 MiB: 26 MiB") << 25 * MiB << 26 * MiB;
    QTest::newRow("200 MiB: exact") << 200 * MiB << 200 * MiB;
}

void TestAllocator::allocationSize()
{
    QFETCH(size_t, size);
    QFETCH(size_t, segment);
    QCOMPARE(CachingAllocator::allocationSize(size, AllocatorConfig {}), segment);
}

void TestAllocator::poolAndSegmentChoice_data()
{
    QTest::addColumn<size_t>("request");
    QTest::addColumn<bool>("large");
    QTest::addColumn<size_t>("segment");
    QTest::addColumn<size_t>("block");
    QTest::newRow("1 B: small pool, 512 B block of a 2 MiB segment") << size_t(1) << false << 2 * MiB << size_t(512);
    QTest::newRow("1 MiB: small pool") << MiB << false << 2 * MiB << MiB;
    QTest::newRow("1 MiB + 1: large pool, 20 MiB segment") << MiB + 1 << true << 20 * MiB << MiB + 512;
    QTest::newRow("10 MiB - 513: 20 MiB segment") << 10 * MiB - 513 << true << 20 * MiB << 10 * MiB - 512;
    QTest::newRow("10 MiB - 1 rounds to 10 MiB: its own segment") << 10 * MiB - 1 << true << 10 * MiB << 10 * MiB;
    QTest::newRow("10 MiB: own segment, whole") << 10 * MiB << true << 10 * MiB << 10 * MiB;
    QTest::newRow("10 MiB + 1: 12 MiB segment, 1.5 MiB left is split off")
        << 10 * MiB + 1 << true << 12 * MiB << 10 * MiB + 512;
    QTest::newRow("200 MiB: own segment") << 200 * MiB << true << 200 * MiB << 200 * MiB;
}

void TestAllocator::poolAndSegmentChoice()
{
    QFETCH(size_t, request);
    QFETCH(bool, large);
    QFETCH(size_t, segment);
    QFETCH(size_t, block);
    Fixture f;
    const uintptr_t p = f.malloc(request);
    const SegmentInfo* s = f.segmentOf(p);
    QVERIFY(s);
    QCOMPARE(s->isLarge, large);
    QCOMPARE(s->totalSize, segment);
    QCOMPARE(s->address, p);
    QCOMPARE(s->blocks.front().size, block);
    QCOMPARE(s->blocks.front().requestedSize, request);
    QVERIFY(s->blocks.front().allocated);
}

void TestAllocator::splitting_data()
{
    QTest::addColumn<size_t>("request");
    QTest::addColumn<size_t>("blocks");
    // should_split: small blocks split when >= 512 B remain; large blocks only when > 1 MiB remains.
    QTest::newRow("small: 2 MiB - 512 leaves 512 B: split") << 2 * MiB - 512 << size_t(2);
    QTest::newRow("small: 1 MiB leaves 1 MiB: split") << MiB << size_t(2);
    QTest::newRow("large: 9 MiB of 20 leaves 11: split") << 9 * MiB << size_t(2);
    QTest::newRow("large: 19 MiB gets 20, leaves 1 MiB exactly: kept whole") << 19 * MiB << size_t(1);
    QTest::newRow("large: 10 MiB + 1 gets 12, leaves 1.5 MiB: split") << 10 * MiB + 1 << size_t(2);
}

void TestAllocator::splitting()
{
    QFETCH(size_t, request);
    QFETCH(size_t, blocks);
    Fixture f;
    const SegmentInfo* s = f.segmentOf(f.malloc(request));
    QVERIFY(s);
    QCOMPARE(s->blocks.size(), blocks);
    if (blocks == 2)
        QVERIFY(!s->blocks[1].allocated);
}

void TestAllocator::oversizeBlocks_data()
{
    QTest::addColumn<size_t>("cached");
    QTest::addColumn<size_t>("request");
    QTest::addColumn<bool>("reused");
    QTest::addColumn<size_t>("blockSize");
    // max_split_size_mb:40: a cached oversize block serves only oversize requests, whole, and only if it is less
    // than max_non_split_rounding (kLargeBuffer, 20 MiB) bigger than the request.
    QTest::newRow("45 MiB into a cached 50 MiB block: whole, not split") << 50 * MiB << 45 * MiB << true << 50 * MiB;
    QTest::newRow("30 MiB (below max_split) never takes an oversize block")
        << 50 * MiB << 30 * MiB << false << 30 * MiB;
    QTest::newRow("85 MiB into 100 MiB: within 20 MiB of slack") << 100 * MiB << 85 * MiB << true << 100 * MiB;
    QTest::newRow("70 MiB into 100 MiB: 30 MiB of slack is too much") << 100 * MiB << 70 * MiB << false << 70 * MiB;
    QTest::newRow("80 MiB into 100 MiB: exactly 20 MiB of slack is too much")
        << 100 * MiB << 80 * MiB << false << 80 * MiB;
}

void TestAllocator::oversizeBlocks()
{
    QFETCH(size_t, cached);
    QFETCH(size_t, request);
    QFETCH(bool, reused);
    QFETCH(size_t, blockSize);
    Fixture f(config("max_split_size_mb:40"));
    const uintptr_t first = f.malloc(cached);
    f.free(first);
    const uintptr_t second = f.malloc(request);
    QCOMPARE(second == first, reused);
    const BlockInfo* b = f.blockAt(second);
    QVERIFY(b);
    QCOMPARE(b->size, blockSize);
}

// --- placement ----------------------------------------------------------------------------------------------------

void TestAllocator::mergingWithFreeNeighbours()
{
    Fixture f;
    const uintptr_t a = f.malloc(4096), b = f.malloc(4096), c = f.malloc(4096);
    QCOMPARE(b, a + 4096);
    QCOMPARE(c, b + 4096);
    f.free(b);
    QCOMPARE(f.segmentOf(a)->blocks.size(), size_t(4)); // a, free b, c, free rest
    f.free(a); // merges with b
    const SegmentInfo* s = f.segmentOf(a);
    QCOMPARE(s->blocks.size(), size_t(3));
    QCOMPARE(s->blocks[0].size, size_t(8192));
    QVERIFY(!s->blocks[0].allocated);
    f.free(c); // merges with both sides: the segment is one free block again
    s = f.segmentOf(a);
    QCOMPARE(s->blocks.size(), size_t(1));
    QCOMPARE(s->blocks[0].size, 2 * MiB);
    // and the next request starts at the segment again (lowest address among equal best fits)
    QCOMPARE(f.malloc(100), a);
}

void TestAllocator::bestFitByStreamSizeAddress()
{
    Fixture f;
    // Three large segments, then free blocks of 12, 6 and 6 MiB: a 5 MiB request takes the lower 6 MiB one.
    const uintptr_t x = f.malloc(12 * MiB); // own 12 MiB segment
    const uintptr_t y1 = f.malloc(6 * MiB); // 20 MiB segment: 6 + rest 14
    const uintptr_t y2 = f.malloc(6 * MiB); // same segment: 6 + rest 8
    const uintptr_t keep = f.malloc(8 * MiB); // takes the 8 MiB rest exactly
    Q_UNUSED(keep);
    f.free(x);
    f.free(y2);
    f.free(y1); // y1 and y2 merge into 12 MiB at y1
    const uintptr_t z = f.malloc(5 * MiB);
    // free blocks: 12 MiB at x (own segment) and 12 MiB at y1; equal sizes -> lower address wins
    QCOMPARE(z, std::min(x, y1));
}

void TestAllocator::perStreamIsolation()
{
    Fixture f;
    const uintptr_t a = f.malloc(4096, 1);
    f.free(a);
    const uintptr_t b = f.malloc(4096, 2); // stream 2 cannot use stream 1's cached block
    QVERIFY(f.segmentOf(b)->address != f.segmentOf(a)->address);
    QCOMPARE(raw(f.segmentOf(b)->stream), uintptr_t(2));
    const uintptr_t c = f.malloc(4096, 1); // stream 1 gets its block back
    QCOMPARE(c, a);
    QCOMPARE(f.segments().size(), size_t(2));
}

void TestAllocator::deferredFreeAfterRecordStream()
{
    HostBackend::Options o;
    o.completeEventsImmediately = false;
    Fixture f({}, o);
    const uintptr_t a = f.malloc(4096, 1);
    QCOMPARE(f.allocator.recordStream(0, DevicePtr { a }, StreamId { 1 }), Status::Ok); // own stream: ignored
    QCOMPARE(f.allocator.recordStream(0, DevicePtr { a }, StreamId { 7 }), Status::Ok);
    f.recorder.events.clear();
    f.free(a);
    QCOMPARE(f.recorder.actions(), std::vector<TraceAction> { TraceAction::FreeRequested });
    const BlockInfo* b = f.blockAt(a);
    QVERIFY(b && !b->allocated && b->active); // active_pending_free
    QCOMPARE(f.allocator.free(0, DevicePtr { a }), Status::InvalidPointer); // no double free

    const uintptr_t other = f.malloc(4096, 1); // event not complete: the block is not reused
    QVERIFY(other != a);
    f.backend.completeStream(0, StreamId { 7 });
    f.recorder.events.clear();
    const uintptr_t again = f.malloc(4096, 1); // process_events frees it first, then it is the best fit
    QCOMPARE(f.recorder.actions(), (std::vector<TraceAction> { TraceAction::FreeCompleted, TraceAction::Alloc }));
    QCOMPARE(again, a);

    // empty_cache waits for outstanding events itself.
    const uintptr_t big = f.malloc(30 * MiB, 1);
    f.allocator.recordStream(0, DevicePtr { big }, StreamId { 9 });
    f.free(big);
    f.recorder.events.clear();
    f.allocator.emptyCache();
    QCOMPARE(f.recorder.actions(), (std::vector<TraceAction> { TraceAction::FreeCompleted, TraceAction::SegmentFree }));
    QCOMPARE(f.allocator.stats(0).numSyncAllStreams, int64_t(1));
}

void TestAllocator::emptyCacheReleasesOnlyUnsplitSegments()
{
    Fixture f;
    const uintptr_t a = f.malloc(4096); // small segment, stays split
    const uintptr_t b = f.malloc(4096);
    const uintptr_t big = f.malloc(30 * MiB);
    const uintptr_t mid = f.malloc(3 * MiB);
    f.free(b);
    f.free(big);
    f.free(mid);
    QCOMPARE(f.segments().size(), size_t(3));
    f.recorder.events.clear();
    f.allocator.emptyCache();
    // release_cached_blocks: large pool first (stream, size, address order), then small; the small segment still
    // holds `a`.
    QCOMPARE(f.recorder.actions(), (std::vector<TraceAction> { TraceAction::SegmentFree, TraceAction::SegmentFree }));
    QCOMPARE(f.recorder.events[0].size, 20 * MiB);
    QCOMPARE(f.recorder.events[1].size, 30 * MiB);
    QCOMPARE(f.segments().size(), size_t(1));
    QCOMPARE(f.backend.usedBytes(0), 2 * MiB);
    f.free(a);
    f.allocator.emptyCache();
    QVERIFY(f.segments().empty());
    QCOMPARE(f.backend.usedBytes(0), size_t(0));
}

void TestAllocator::outOfMemoryReleasesCacheRetriesThenFails()
{
    HostBackend::Options o;
    o.capacity = 64 * MiB;
    Fixture f({}, o);
    const uintptr_t a = f.malloc(30 * MiB);
    f.free(a); // cached: 30 MiB reserved, nothing in use
    f.recorder.events.clear();
    const uintptr_t b = f.malloc(40 * MiB); // 30 + 40 > 64: fails, releases the cache, retries
    QVERIFY(b);
    QCOMPARE(f.recorder.actions(),
             (std::vector<TraceAction> { TraceAction::SegmentFree, TraceAction::SegmentAlloc, TraceAction::Alloc }));
    QCOMPARE(f.allocator.stats(0).numAllocRetries, int64_t(1));

    f.recorder.events.clear();
    const MallocResult r = f.allocator.malloc(0, 40 * MiB, StreamId {});
    QCOMPARE(r.status, Status::OutOfMemory);
    QCOMPARE(f.recorder.actions(), std::vector<TraceAction> { TraceAction::Oom });
    QCOMPARE(f.recorder.events[0].addr, 24 * MiB); // the device's free memory
    QCOMPARE(f.recorder.events[0].size, 40 * MiB);
    QCOMPARE(r.deviceFree, 24 * MiB);
    QCOMPARE(r.deviceTotal, 64 * MiB);
    QCOMPARE(f.allocator.stats(0).numOoms, int64_t(1));
    QCOMPARE(f.allocator.stats(0).numAllocRetries, int64_t(2));
    const std::string message = describeOutOfMemory(0, r);
    QVERIFY2(message.find("Tried to allocate 40.00 MiB") != std::string::npos, message.c_str());
    QVERIFY2(message.find("of which 24.00 MiB is free") != std::string::npos, message.c_str());
    QVERIFY2(message.find("40.00 MiB is allocated by PyTorch") != std::string::npos, message.c_str());
}

void TestAllocator::memoryFractionCapsReservations()
{
    HostBackend::Options o;
    o.capacity = 100 * MiB;
    Fixture f(config("per_process_memory_fraction:0.5"), o);
    QVERIFY(f.malloc(40 * MiB));
    const MallocResult r = f.allocator.malloc(0, 12 * MiB, StreamId {});
    QCOMPARE(r.status, Status::OutOfMemory); // 40 + 12 > 50 MiB allowed, although the device has room
    QCOMPARE(r.allowedBytes, 50 * MiB);
    QVERIFY(describeOutOfMemory(0, r).find("50.00 MiB allowed") != std::string::npos);
    QCOMPARE(f.allocator.setMemoryFraction(0, 1.0), Status::Ok);
    QVERIFY(f.malloc(12 * MiB));
    QCOMPARE(f.allocator.setMemoryFraction(0, 1.5), Status::InvalidArgument);
}

void TestAllocator::garbageCollectionReleasesOldBlocks()
{
    HostBackend::Options o;
    o.capacity = 100 * MiB;
    // allowed = 90 MiB; gc threshold 0.5 -> collect above 45 MiB reserved.
    Fixture f(config("garbage_collection_threshold:0.5,per_process_memory_fraction:0.9"), o);
    const uintptr_t a = f.malloc(30 * MiB);
    f.free(a);
    const uintptr_t b = f.malloc(36 * MiB); // 30 MiB block too small: new segment (30 <= 45: no collection yet)
    f.free(b);
    f.recorder.events.clear();
    // 66 MiB reserved > 45: blocks at least as old as the average go; the 30 MiB one (cached first) is enough.
    QVERIFY(f.malloc(50 * MiB));
    QCOMPARE(f.recorder.actions(),
             (std::vector<TraceAction> { TraceAction::SegmentFree, TraceAction::SegmentAlloc, TraceAction::Alloc }));
    QCOMPARE(f.recorder.events[0].size, 30 * MiB);
    QCOMPARE(f.allocator.stats(0).numAllocRetries, int64_t(0));
}

void TestAllocator::expandableSegmentsGrowAndShrink()
{
    Fixture f(config("expandable_segments:True"));
    const uintptr_t a = f.malloc(3 * MiB);
    QCOMPARE(f.recorder.actions(), (std::vector<TraceAction> { TraceAction::SegmentMap, TraceAction::Alloc }));
    QCOMPARE(f.recorder.events[0].size, 20 * MiB); // one 20 MiB page of the large pool
    const uintptr_t b = f.malloc(30 * MiB); // grows the same segment right after a
    QCOMPARE(b, a + 3 * MiB);
    std::vector<SegmentInfo> s = f.segments();
    QCOMPARE(s.size(), size_t(1));
    QVERIFY(s[0].isExpandable);
    QCOMPARE(s[0].totalSize, 40 * MiB);
    f.free(a);
    f.free(b);
    f.recorder.events.clear();
    f.allocator.emptyCache();
    QCOMPARE(f.recorder.actions(), std::vector<TraceAction> { TraceAction::SegmentUnmap });
    QCOMPARE(f.recorder.events[0].size, 40 * MiB);
    QVERIFY(f.segments().empty());
    QCOMPARE(f.backend.usedBytes(0), size_t(0));
    // small requests get their own expandable segment with 2 MiB pages
    f.recorder.events.clear();
    f.malloc(1000);
    QCOMPARE(f.recorder.events[0].size, 2 * MiB);
    QVERIFY(!f.segments()[0].isLarge);
}

void TestAllocator::privatePoolTakesCapturedStream()
{
    Fixture f;
    const PoolId graph { 1, 0 };
    const uintptr_t before = f.malloc(4096, 5);
    f.free(before); // a cached block on stream 5 in the default pool
    QCOMPARE(f.allocator.beginAllocateToPool(0, graph, [](StreamId s) { return raw(s) == 5; }), Status::Ok);
    const uintptr_t captured = f.malloc(4096, 5); // goes to the graph's pool: a new segment
    const uintptr_t elsewhere = f.malloc(4096, 6); // other streams are not captured
    QCOMPARE(f.allocator.endAllocateToPool(0, graph), Status::Ok);
    QVERIFY(captured != before);
    QCOMPARE(f.segmentOf(captured)->pool, graph);
    QVERIFY(f.segmentOf(elsewhere)->pool.isDefault());
    f.free(captured);
    QCOMPARE(f.malloc(4096, 5), before); // after the capture stream 5 uses the default pool again
    // the graph's pool keeps its segment through empty_cache while the graph lives, not after releasePool
    f.allocator.emptyCache();
    QVERIFY(f.segmentOf(captured));
    QCOMPARE(f.allocator.releasePool(0, graph), Status::Ok);
    f.allocator.emptyCache();
    QVERIFY(!f.segmentOf(captured));
}

void TestAllocator::devicesAreIndependent()
{
    HostBackend::Options o;
    o.deviceCount = 2;
    Fixture f({}, o);
    const uintptr_t a = f.malloc(4096, 0, 0);
    const uintptr_t b = f.malloc(4096, 0, 1);
    QVERIFY(a && b && a != b);
    QCOMPARE(f.segments(0).size(), size_t(1));
    QCOMPARE(f.segments(1).size(), size_t(1));
    QCOMPARE(f.allocator.free(1, DevicePtr { a }), Status::InvalidPointer); // a belongs to device 0
    f.free(b, 1);
    QCOMPARE(f.recorder.events.back().device, 1);
    QCOMPARE(f.allocator.stats(0).allocation[0].current, int64_t(1));
    QCOMPARE(f.allocator.stats(1).allocation[0].current, int64_t(0));
}

void TestAllocator::statistics()
{
    Fixture f;
    const uintptr_t a = f.malloc(1000); // 1024 B block in a 2 MiB small segment
    const uintptr_t b = f.malloc(5 * MiB); // large: 20 MiB segment
    f.free(a);
    const DeviceStats s = f.allocator.stats(0);
    constexpr size_t All = 0, Small = 1, Large = 2;
    QCOMPARE(s.allocatedBytes[All].current, int64_t(5 * MiB));
    QCOMPARE(s.allocatedBytes[All].peak, int64_t(5 * MiB + 1024));
    QCOMPARE(s.reservedBytes[All].current, int64_t(22 * MiB));
    QCOMPARE(s.reservedBytes[Small].current, int64_t(2 * MiB));
    QCOMPARE(s.reservedBytes[Large].current, int64_t(20 * MiB));
    QCOMPARE(s.requestedBytes[All].current, int64_t(5 * MiB));
    QCOMPARE(s.activeBytes[All].current, int64_t(5 * MiB));
    QCOMPARE(s.segment[All].current, int64_t(2));
    QCOMPARE(s.inactiveSplit[Large].current, int64_t(1)); // the 15 MiB remainder
    QCOMPARE(s.inactiveSplitBytes[Large].current, int64_t(15 * MiB));
    QCOMPARE(s.numDeviceAlloc, int64_t(2));
    QCOMPARE(s.maxSplitSize, int64_t(-1));
    const auto dict = statsAsDict(s);
    auto find = [&](const char* key) {
        for (const auto& [k, v] : dict) {
            if (k == key)
                return v;
        }
        return int64_t(-42);
    };
    QCOMPARE(find("allocated_bytes.all.current"), int64_t(5 * MiB));
    QCOMPARE(find("reserved_bytes.large_pool.peak"), int64_t(20 * MiB));
    QCOMPARE(find("num_alloc_retries"), int64_t(0));
    f.free(b);
    f.allocator.resetPeakStats(0);
    QCOMPARE(f.allocator.stats(0).allocatedBytes[All].peak, int64_t(0));
}

// Events of one allocator call share TraceEvent::call (one time stamp per call for the publisher); the stack id an
// observer returns for an Alloc stays on the block while it is active (state replies) and is gone once it is free.
void TestAllocator::traceCallsAndStackIds()
{
    struct StackRecorder final : TraceObserver {
        void onTraceEvent(const TraceEvent& e) override { events.push_back(e); }
        uint32_t onTraceEventWithStack(const TraceEvent& e) override
        {
            onTraceEvent(e);
            return 1000 + uint32_t(events.size());
        }
        std::vector<TraceEvent> events;
    } recorder;
    HostBackend backend;
    CachingAllocator allocator(backend, {});
    allocator.setTraceObserver(&recorder);
    const uintptr_t a = raw(allocator.malloc(0, 30 * MiB, StreamId {}).ptr); // SegmentAlloc, Alloc
    const uintptr_t b = raw(allocator.malloc(0, 4096, StreamId {}).ptr); // SegmentAlloc, Alloc
    QCOMPARE(allocator.free(0, DevicePtr { b }), Status::Ok); // FreeRequested, FreeCompleted
    allocator.setTraceObserver(nullptr);
    QCOMPARE(recorder.events.size(), size_t(6));
    QCOMPARE(recorder.events[0].call, recorder.events[1].call);
    QVERIFY(recorder.events[2].call != recorder.events[1].call);
    QCOMPARE(recorder.events[2].call, recorder.events[3].call);
    QCOMPARE(recorder.events[4].call, recorder.events[5].call);
    QVERIFY(recorder.events[4].call != recorder.events[3].call);
    QCOMPARE(recorder.events[1].action, TraceAction::Alloc);
    size_t seen = 0;
    for (const SegmentInfo& s : allocator.snapshot(0)) {
        for (const BlockInfo& blk : s.blocks) {
            if (blk.address == a) {
                QCOMPARE(blk.stackId, 1002u); // the id returned for its Alloc (the second event)
                ++seen;
            } else {
                QCOMPARE(blk.stackId, 0u); // free blocks, b included
            }
        }
    }
    QCOMPARE(seen, size_t(1));
}

void TestAllocator::invalidCalls()
{
    Fixture f;
    QCOMPARE(f.allocator.malloc(3, 100, StreamId {}).status, Status::InvalidDevice);
    QCOMPARE(f.allocator.malloc(-1, 100, StreamId {}).status, Status::InvalidDevice);
    QCOMPARE(f.allocator.free(0, DevicePtr { 0x1234 }), Status::InvalidPointer);
    QCOMPARE(f.allocator.recordStream(0, DevicePtr { 0x1234 }, StreamId { 1 }), Status::InvalidPointer);
    QCOMPARE(f.allocator.emptyCache(7), Status::InvalidDevice);
    QCOMPARE(f.allocator.endAllocateToPool(0, PoolId { 3, 0 }), Status::InvalidArgument);
    QCOMPARE(f.allocator.releasePool(0, PoolId { 3, 0 }), Status::InvalidArgument);
}

void TestAllocator::concurrentThreads()
{
    HostBackend::Options o;
    o.deviceCount = 2;
    Fixture f({}, o);
    f.allocator.setTraceObserver(nullptr);
    std::atomic<int> failures { 0 };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            std::vector<uintptr_t> live;
            for (int i = 0; i < 5000; ++i) {
                if (!live.empty() && (i % 3 == 0)) {
                    if (f.allocator.free(t % 2, DevicePtr { live.back() }) != Status::Ok)
                        ++failures;
                    live.pop_back();
                } else {
                    const MallocResult r
                        = f.allocator.malloc(t % 2, size_t(512) << (i % 13), StreamId { uintptr_t(t) });
                    if (r.status != Status::Ok)
                        ++failures;
                    else
                        live.push_back(raw(r.ptr));
                }
            }
            for (uintptr_t p : live)
                f.allocator.free(t % 2, DevicePtr { p });
        });
    }
    for (auto& th : threads)
        th.join();
    QCOMPARE(failures.load(), 0);
    QCOMPARE(f.allocator.stats(0).allocation[0].current + f.allocator.stats(1).allocation[0].current, int64_t(0));
}

// --- settings -------------------------------------------------------------------------------------------------------

void TestAllocator::configParses_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<size_t>("maxSplit");
    QTest::addColumn<bool>("expandable");
    QTest::addColumn<double>("gc");
    QTest::addColumn<size_t>("div1MiB");
    QTest::addColumn<size_t>("div1GiB");
    const size_t none = std::numeric_limits<size_t>::max();
    QTest::newRow("empty: PyTorch's defaults") << QString() << none << false << 0.0 << size_t(0) << size_t(0);
    QTest::newRow("max_split_size_mb:64")
        << QStringLiteral("max_split_size_mb:64") << 64 * MiB << false << 0.0 << size_t(0) << size_t(0);
    QTest::newRow("spaces and several keys")
        << QStringLiteral(" expandable_segments : True , garbage_collection_threshold:0.6") << none << true << 0.6
        << size_t(0) << size_t(0);
    QTest::newRow("divisions for every interval")
        << QStringLiteral("roundup_power2_divisions:8") << none << false << 0.0 << size_t(8) << size_t(8);
    QTest::newRow("divisions list") << QStringLiteral("roundup_power2_divisions:[256:4,512:2,>:1]") << none << false
                                    << 0.0 << size_t(4) << size_t(1);
    QTest::newRow("accepted CUDA and pinned keys")
        << QStringLiteral("backend:native,release_lock_on_cudamalloc:True,pinned_use_cuda_host_register:False,"
                          "pinned_num_register_threads:8,graph_capture_record_stream_reuse:False")
        << none << false << 0.0 << size_t(0) << size_t(0);
}

void TestAllocator::configParses()
{
    QFETCH(QString, text);
    QFETCH(size_t, maxSplit);
    QFETCH(bool, expandable);
    QFETCH(double, gc);
    QFETCH(size_t, div1MiB);
    QFETCH(size_t, div1GiB);
    const ConfigParse p = parseAllocatorConfig(text.toStdString());
    QVERIFY2(p.ok, p.error.c_str());
    QCOMPARE(p.config.maxSplitSize, maxSplit);
    QCOMPARE(p.config.expandableSegments, expandable);
    QCOMPARE(p.config.garbageCollectionThreshold, gc);
    QCOMPARE(p.config.roundupDivisionsFor(MiB), div1MiB);
    QCOMPARE(p.config.roundupDivisionsFor(1024 * MiB), div1GiB);
    QCOMPARE(p.config.text, text.toStdString());
}

void TestAllocator::configErrors_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("message");
    QTest::newRow("unknown key") << QStringLiteral("max_split:64") << QStringLiteral("unrecognized key 'max_split'");
    QTest::newRow("max_split_size_mb below 20")
        << QStringLiteral("max_split_size_mb:10") << QStringLiteral("max_split_size_mb: too small: 10, must be >= 20");
    QTest::newRow("not a number") << QStringLiteral("max_split_size_mb:lots")
                                  << QStringLiteral("max_split_size_mb: 'lots' is not a non-negative integer");
    QTest::newRow("missing colon") << QStringLiteral("max_split_size_mb")
                                   << QStringLiteral("max_split_size_mb: expected ':' but the text ended");
    QTest::newRow("not a bool") << QStringLiteral("expandable_segments:maybe")
                                << QStringLiteral("expandable_segments: expected True or False, found 'maybe'");
    QTest::newRow("threshold out of range") << QStringLiteral("garbage_collection_threshold:1.5")
                                            << QStringLiteral("garbage_collection_threshold: must be in (0.0, 1.0)");
    QTest::newRow("divisions not a power of two")
        << QStringLiteral("roundup_power2_divisions:3") << QStringLiteral("have to be a power of 2, found 3");
    QTest::newRow("unclosed list") << QStringLiteral("roundup_power2_divisions:[256:4")
                                   << QStringLiteral("expected a closing ']'");
    QTest::newRow("boundary not a power of two")
        << QStringLiteral("roundup_power2_divisions:[300:4]") << QStringLiteral("boundaries have to be powers of 2");
    QTest::newRow("cudaMallocAsync") << QStringLiteral("backend:cudaMallocAsync")
                                     << QStringLiteral("cudaMallocAsync is not supported");
    QTest::newRow("doubled comma") << QStringLiteral("expandable_segments:True,,")
                                   << QStringLiteral("expected a key, found ','");
    QTest::newRow("missing comma") << QStringLiteral("expandable_segments:True max_split_size_mb:40")
                                   << QStringLiteral("expected True or False, found 'Truemax_split_size_mb'");
}

void TestAllocator::configErrors()
{
    QFETCH(QString, text);
    QFETCH(QString, message);
    const ConfigParse p = parseAllocatorConfig(text.toStdString());
    QVERIFY(!p.ok);
    QVERIFY2(QString::fromStdString(p.error).contains(message), p.error.c_str());
}

void TestAllocator::configFromEnvironment()
{
    qputenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:100");
    qunsetenv("PYTORCH_ALLOC_CONF");
    qunsetenv("MEMSCOPE_ALLOC_CONF");
    std::string source;
    ConfigParse p = allocatorConfigFromEnvironment(&source);
    QCOMPARE(source, std::string("PYTORCH_CUDA_ALLOC_CONF"));
    QCOMPARE(p.config.maxSplitSize, 100 * MiB);
    qputenv("MEMSCOPE_ALLOC_CONF", "expandable_segments:True");
    p = allocatorConfigFromEnvironment(&source);
    QCOMPARE(source, std::string("MEMSCOPE_ALLOC_CONF")); // ours wins
    QVERIFY(p.config.expandableSegments);
    QCOMPARE(p.config.maxSplitSize, std::numeric_limits<size_t>::max());
    qputenv("MEMSCOPE_ALLOC_CONF", "bogus:1");
    p = allocatorConfigFromEnvironment(&source);
    QVERIFY(!p.ok);
    QCOMPARE(p.error, std::string("MEMSCOPE_ALLOC_CONF: unrecognized key 'bogus'"));
    qunsetenv("MEMSCOPE_ALLOC_CONF");
    qunsetenv("PYTORCH_CUDA_ALLOC_CONF");
}

void TestAllocator::cApi()
{
    // The process-wide allocator is set up on first use, from the environment: the host backend here.
    qputenv("MEMSCOPE_AGENT_BACKEND", "host");
    qunsetenv("MEMSCOPE_ALLOC_CONF");
    qunsetenv("PYTORCH_ALLOC_CONF");
    qunsetenv("PYTORCH_CUDA_ALLOC_CONF");
    QCOMPARE(QByteArray(memscope_backend_name()), QByteArray("host"));
    QVERIFY(memscope_malloc(0, 0, nullptr) == nullptr);
    void* p = memscope_malloc(1000, 0, nullptr);
    void* q = memscope_malloc(3 * MiB, 0, reinterpret_cast<void*>(uintptr_t(42)));
    QVERIFY(p && q);
    memscope_device_stats s {};
    QCOMPARE(memscope_get_device_stats(0, &s), 0);
    QCOMPARE(s.allocated_bytes_current, int64_t(1024 + 3 * MiB));
    QCOMPARE(s.reserved_bytes_current, int64_t(22 * MiB));
    QCOMPARE(memscope_record_stream(q, reinterpret_cast<void*>(uintptr_t(43))), 0);
    memscope_free(p, 1000, 0, nullptr);
    memscope_free(q, 3 * MiB, 0, nullptr);
    memscope_empty_cache();
    QCOMPARE(memscope_get_device_stats(0, &s), 0);
    QCOMPARE(s.reserved_bytes_current, int64_t(0));
    QCOMPARE(s.allocation_count, int64_t(0));
    // failures come back as values with a reason
    QVERIFY(memscope_malloc(100, 5, nullptr) == nullptr);
    QVERIFY(QByteArray(memscope_last_error()).contains("invalid device"));
    QCOMPARE(memscope_record_stream(reinterpret_cast<void*>(uintptr_t(0x1000)), nullptr), -1);
    QCOMPARE(memscope_get_device_stats(9, &s), -1);
    QCOMPARE(memscope_set_memory_fraction(2.0, 0), -1);
    QCOMPARE(memscope_set_memory_fraction(0.5, 0), 0);
    QVERIFY(memscope_malloc(size_t(50) << 30, 0, nullptr) == nullptr); // 50 GiB > half of the 80 GiB host device
    QVERIFY2(QByteArray(memscope_last_error()).contains("CUDA out of memory. Tried to allocate 50.00 GiB"),
             memscope_last_error());
    memscope_free(reinterpret_cast<void*>(uintptr_t(0x1000)), 1, 0, nullptr); // ignored, warned once
    QVERIFY(QByteArray(memscope_last_error()).contains("invalid device pointer"));
}

QTEST_GUILESS_MAIN(TestAllocator)
#include "tst_allocator.moc"
