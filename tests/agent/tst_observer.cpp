// Observer mode (memscope/observe.h) end to end, without torch: memscope's own allocator plays the observed
// allocator (its decisions are PyTorch's), and a tracker of the test's hands every event to memscope_observe_event
// as PyTorch's TraceEntry has it (the block's requested size, no block size; a context per allocation), answers
// state requests from the allocator's snapshot with a snapshot stamp under its locks, and symbolises contexts into
// Python-like frames. `memscope-cli record` (in-process) joins at different moments; the recording's final state
// must be the allocator's, block for block (address, size, state, requested size of every active block), every
// allocated block must carry the frames of its allocation's context, and every context memscope was handed must
// be symbolised or released exactly once.
#include "agent/allocator.h"
#include "agent/hostbackend.h"
#include "io/snapshotio.h"
#include "memscope/observe.h"
#include "model/snapshot.h"
#include "recordcommand.h"

#include <QTemporaryDir>
#include <QTest>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

using namespace memscope;
using namespace memscope::agent;

namespace {

// The test's "torch": an allocator, a tracker that reports its events the way PyTorch's trace tracker sees them,
// and the hooks memscope calls back.
struct ObservedJob final : TraceObserver {
    HostBackend backend;
    CachingAllocator allocator { backend, AllocatorConfig {} };
    std::mutex mutex; // contexts: the tracker (allocator threads) and the hooks (publisher thread)
    uint32_t nextContext = 1;
    std::map<uintptr_t, uint32_t> blockContext; // active block -> its allocation's context
    std::set<uint32_t> outstanding; // handed to memscope, not yet symbolised or released
    std::atomic<uint64_t> symbolised { 0 }, released { 0 }, twice { 0 };

    ObservedJob() { allocator.setTraceObserver(this); }

    void onTraceEvent(const TraceEvent& e) override
    {
        memscope_observed_event o {};
        o.action = uint8_t(e.action); // TraceAction's order is observe.h's
        o.device = uint8_t(e.device);
        o.address = e.addr;
        o.size = e.size; // block events: the request, as PyTorch's TraceEntry
        o.stream = raw(e.stream);
        o.pool_first = e.pool.first;
        o.pool_second = e.pool.second;
        std::lock_guard lock(mutex);
        if (e.action == TraceAction::Alloc) {
            o.context = nextContext++;
            blockContext[e.addr] = o.context;
            outstanding.insert(o.context);
        }
        if (memscope_observe_event(&o) == 0 && o.context)
            outstanding.erase(o.context); // memscope will never ask about it
    }

    static std::vector<memscope_frame> framesOf(uint32_t context, std::vector<std::string>& names)
    {
        // Two Python-like frames per allocation site, innermost first: seven sites.
        names = { "forward", "model.py", "step", "train.py" };
        return { { names[0].c_str(), names[1].c_str(), int64_t(100 + context % 7) },
                 { names[2].c_str(), names[3].c_str(), int64_t(42) } };
    }

    static int state(void* user, memscope_observer_sink* sink)
    {
        auto* job = static_cast<ObservedJob*>(user);
        // As PyTorch's snapshot(): each device's part under its lock, with a snapshot event reported there.
        const std::vector<SegmentInfo> segments = job->allocator.snapshotAll([] {
            memscope_observed_event stamp {};
            stamp.action = MEMSCOPE_OBSERVED_SNAPSHOT;
            memscope_observe_event(&stamp);
        });
        std::lock_guard lock(job->mutex);
        for (const SegmentInfo& s : segments) {
            memscope_observer_segment(sink, s.device, s.address, raw(s.stream), s.pool.first, s.pool.second, s.isLarge,
                                      s.isExpandable);
            for (const BlockInfo& b : s.blocks) {
                std::vector<std::string> names;
                std::vector<memscope_frame> frames;
                if (b.active)
                    frames = framesOf(job->blockContext.at(b.address), names);
                memscope_observer_block(sink, b.size, b.requestedSize, b.allocated, b.active, frames.data(),
                                        frames.size());
            }
        }
        return 0;
    }

    static void symbolize(void* user, const uint32_t* contexts, size_t count, memscope_observer_sink* sink)
    {
        auto* job = static_cast<ObservedJob*>(user);
        std::lock_guard lock(job->mutex);
        for (size_t i = 0; i < count; ++i) {
            if (!job->outstanding.erase(contexts[i])) {
                job->twice++;
                continue;
            }
            std::vector<std::string> names;
            const std::vector<memscope_frame> frames = framesOf(contexts[i], names);
            memscope_observer_context_frames(sink, contexts[i], frames.data(), frames.size());
            job->symbolised++;
        }
    }

    static void release(void* user, const uint32_t* contexts, size_t count)
    {
        auto* job = static_cast<ObservedJob*>(user);
        std::lock_guard lock(job->mutex);
        for (size_t i = 0; i < count; ++i) {
            if (!job->outstanding.erase(contexts[i]))
                job->twice++;
            job->released++;
        }
    }

    memscope_observer_hooks hooks()
    {
        return { this, &ObservedJob::state, &ObservedJob::symbolize, &ObservedJob::release, nullptr };
    }

    // A training-like stretch: `ops` random allocations and frees of awkward sizes on two streams.
    void work(std::mt19937_64& rng, std::vector<uintptr_t>& live, int ops)
    {
        const size_t sizes[] = { 1, 700, 4096, 300000, (1 << 20) + 3, 3 << 20, 11 << 20, 40 << 20 };
        for (int i = 0; i < ops; ++i) {
            if (!live.empty() && (rng() % 100 < 45 || live.size() > 200)) {
                const size_t k = size_t(rng() % live.size());
                allocator.free(0, DevicePtr { live[k] });
                live.erase(live.begin() + long(k));
            } else {
                const MallocResult r = allocator.malloc(0, sizes[rng() % std::size(sizes)] + rng() % 512,
                                                        StreamId { rng() % 3 == 0 ? 0x7000u : 0u });
                if (r.status == Status::Ok)
                    live.push_back(raw(r.ptr));
            }
        }
    }
};

std::string describeState(const model::Snapshot& s)
{
    std::string out;
    for (const model::Segment& seg : s.segments) {
        out += "segment " + std::to_string(seg.address) + " " + std::to_string(seg.totalSize) + " stream "
            + std::to_string(seg.stream) + "\n";
        const model::Block* blocks = s.segmentBlocks(seg);
        for (uint32_t i = 0; i < seg.blockCount; ++i) {
            const model::Block& b = blocks[i];
            out += "  " + std::to_string(b.address) + " " + std::to_string(b.size) + " "
                + std::string(model::blockStateName(b.state));
            if (b.state != model::BlockState::Inactive)
                out += " requested " + std::to_string(b.requestedSize);
            out += "\n";
        }
    }
    return out;
}

std::string describeState(const std::vector<SegmentInfo>& segments)
{
    std::string out;
    for (const SegmentInfo& seg : segments) {
        out += "segment " + std::to_string(seg.address) + " " + std::to_string(seg.totalSize) + " stream "
            + std::to_string(raw(seg.stream)) + "\n";
        for (const BlockInfo& b : seg.blocks) {
            out += "  " + std::to_string(b.address) + " " + std::to_string(b.size) + " "
                + (b.allocated ? "active_allocated" : (b.active ? "active_pending_free" : "inactive"));
            if (b.active)
                out += " requested " + std::to_string(b.requestedSize);
            out += "\n";
        }
    }
    return out;
}

} // namespace

class TestObserver : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void recordingIsTheObservedState_data();
    void recordingIsTheObservedState();
    void badArguments();
};

void TestObserver::recordingIsTheObservedState_data()
{
    QTest::addColumn<int>("before"); // operations before observing starts (the first state holds them)
    QTest::addColumn<int>("beforeRecorder"); // operations observed before the recorder joins
    QTest::addColumn<int>("during"); // operations while it records
    QTest::newRow("observed from the start, recorder from the start") << 0 << 0 << 3000;
    QTest::newRow("job ran before observing") << 1500 << 0 << 3000;
    QTest::newRow("recorder joins late") << 800 << 2000 << 3000;
}

void TestObserver::recordingIsTheObservedState()
{
    QFETCH(int, before);
    QFETCH(int, beforeRecorder);
    QFETCH(int, during);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string endpoint = "ipc://" + dir.filePath(QStringLiteral("job")).toStdString();
    const std::string output = dir.filePath(QStringLiteral("rec.pickle")).toStdString();

    ObservedJob job;
    std::mt19937_64 rng { 42 };
    std::vector<uintptr_t> live;
    job.work(rng, live, before);
    const memscope_observer_hooks hooks = job.hooks();
    QVERIFY2(memscope_observe_start(endpoint.c_str(), 1, "", &hooks) == 0, memscope_last_error());
    QCOMPARE(std::string(memscope_observe_endpoint()), endpoint);
    job.work(rng, live, beforeRecorder);

    std::FILE* out = std::tmpfile();
    std::FILE* err = std::tmpfile();
    int rc = -1;
    std::thread recorder([&] { rc = runRecord({ endpoint, "-o", output, "--timeout", "20" }, out, err); });
    // Give the recorder its state before the job goes on (it may join at any point; the state stamps it).
    QTest::qWait(400);
    for (int i = 0; i < during; i += 100) {
        job.work(rng, live, 100);
        std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    QTest::qWait(200);
    const std::vector<SegmentInfo> expected = job.allocator.snapshot(0);
    memscope_observe_stop(); // a Goodbye: the recorder writes its file
    recorder.join();
    char text[4096] = {};
    std::rewind(err);
    const size_t n = std::fread(text, 1, sizeof text - 1, err);
    text[n] = 0;
    QVERIFY2(rc == 0, text);

    io::LoadResult loaded = io::loadSnapshot(output);
    QVERIFY2(loaded.ok(), loaded.error.toString().c_str());
    const model::Snapshot& s = *loaded.snapshot;
    QCOMPARE(describeState(s), describeState(expected));

    // Every allocated block carries its allocation's frames: model.py:forward at line 100 + context % 7.
    size_t withFrames = 0, allocated = 0;
    for (const model::Block& b : s.blocks) {
        if (b.state != model::BlockState::ActiveAllocated)
            continue;
        ++allocated;
        if (s.stackEnd(b.stack) - s.stackBegin(b.stack) != 2)
            continue;
        const model::Frame& inner = s.frame(*s.stackBegin(b.stack));
        const uint32_t context = job.blockContext.at(uintptr_t(b.address));
        QCOMPARE(std::string(s.str(inner.name)), std::string("forward"));
        QCOMPARE(std::string(s.str(inner.filename)), std::string("model.py"));
        QCOMPARE(inner.line, int64_t(100 + context % 7));
        ++withFrames;
    }
    QVERIFY(allocated > 20);
    QCOMPARE(withFrames, allocated);
    // Every context memscope took was asked about or released, once.
    QCOMPARE(job.twice.load(), uint64_t(0));
    QVERIFY(job.symbolised.load() > 0);
    QVERIFY2(job.outstanding.empty(), qPrintable(QString::number(job.outstanding.size())));
    QCOMPARE(memscope_observe_lost(), uint64_t(0));
}

void TestObserver::badArguments()
{
    ObservedJob job;
    memscope_observer_hooks hooks = job.hooks();
    QCOMPARE(memscope_observe_start("ipc:///nonexistent-dir/x/y", 1, "", &hooks), -1);
    QVERIFY2(std::string(memscope_last_error()).find("nonexistent-dir") != std::string::npos, memscope_last_error());
    QCOMPARE(memscope_observe_start(nullptr, 1, "max_split_size_mb:nope", &hooks), -1);
    QVERIFY2(std::string(memscope_last_error()).find("max_split_size_mb:nope") != std::string::npos,
             memscope_last_error());
    QCOMPARE(memscope_observe_start(nullptr, 0, "", &hooks), -1);
    hooks.symbolize = nullptr;
    QCOMPARE(memscope_observe_start(nullptr, 1, "", &hooks), -1);
    // Not observing: events are refused, nothing is asked.
    memscope_observed_event e {};
    QCOMPARE(memscope_observe_event(&e), 0);
    QCOMPARE(std::string(memscope_observe_endpoint()), std::string());
}

QTEST_GUILESS_MAIN(TestObserver)
#include "tst_observer.moc"
