// What publishing costs the allocator's hot path: malloc + free of a cached block (three trace records: Alloc,
// FreeRequested, FreeCompleted; two time stamps, one per call) with no observer, with every record getting into the
// ring (BM_mallocFree_recorded: the cost a job below the drain rate pays), and with the real Publisher attached
// (per-device ring + "memscope-pub" thread draining it to a PUB socket on an ipc endpoint in a temporary folder), for
// several ring capacities (the default is 16384). Target: publishing adds < 50 ns per pair. The counter `lost` says how
// many records the ring dropped: a loop that does nothing but allocate (~25 M records/s) outruns the drain thread,
// which a real job (< 1 M/s) does not; a dropped record costs less than one that gets in.
// BM_mallocFree_stacks captures native stacks (MEMSCOPE_STACKS=N, frame-pointer walk + interning) with the loop
// run 16 calls deep, so every record walks at least `depth` frames (this file is built with frame pointers).
// Target: < 400 ns per pair with 16 frames.
#include "agent/allocator.h"
#include "agent/hostbackend.h"
#include "agent/publisher.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <unistd.h>

using namespace memscope::agent;

namespace {

std::string temporaryEndpoint()
{
    char dir[] = "/tmp/memscope-bench-XXXXXX";
    if (!mkdtemp(dir))
        return {};
    return "ipc://" + std::string(dir) + "/pub";
}

// Recurses `depth` frames, then runs the loop there: each capture has real frames to walk.
__attribute__((noinline)) void runDeep(benchmark::State& state, CachingAllocator& allocator, int depth)
{
    if (depth > 0) {
        runDeep(state, allocator, depth - 1);
        benchmark::ClobberMemory(); // not a tail call
        return;
    }
    for (auto _ : state) {
        const MallocResult r = allocator.malloc(0, 4096, StreamId {});
        benchmark::DoNotOptimize(r.ptr);
        allocator.free(0, r.ptr);
    }
}

void mallocFree(benchmark::State& state, bool publish, size_t ringCapacity, int stackDepth = 0)
{
    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    PublisherOptions options;
    options.endpoint = temporaryEndpoint();
    options.ringCapacity = ringCapacity;
    options.stackDepth = stackDepth;
    Publisher publisher(allocator, options);
    if (publish) {
        std::string error;
        if (!publisher.start(&error)) {
            state.SkipWithError(error.c_str());
            return;
        }
        allocator.setTraceObserver(&publisher);
    }
    allocator.free(0, allocator.malloc(0, 4096, StreamId {}).ptr); // warm-up: the segment is cached
    runDeep(state, allocator, stackDepth > 0 ? 16 : 0);
    state.SetItemsProcessed(state.iterations());
    state.counters["lost"] = double(publisher.lost());
    state.counters["stacksDropped"] = double(publisher.stacksDropped());
    allocator.setTraceObserver(nullptr);
    publisher.stop();
}

// The hot path's own cost when every record gets into the ring (what a job below the drain rate pays): no
// publisher thread; the loop empties the ring itself, outside the timed region, before it can fill.
void BM_mallocFree_recorded(benchmark::State& state)
{
    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    PublisherOptions options;
    options.ringCapacity = size_t(state.range(0));
    options.stackDepth = 0;
    options.startThread = false;
    Publisher publisher(allocator, options); // never started: onTraceEvent only writes the ring
    allocator.setTraceObserver(&publisher);
    std::vector<memscope::wire::EventRecord> sink(options.ringCapacity);
    allocator.free(0, allocator.malloc(0, 4096, StreamId {}).ptr);
    size_t sinceDrain = 0;
    for (auto _ : state) {
        const MallocResult r = allocator.malloc(0, 4096, StreamId {});
        benchmark::DoNotOptimize(r.ptr);
        allocator.free(0, r.ptr);
        if (++sinceDrain == options.ringCapacity / 4) { // 3 records per pair: 3/4 of the ring
            state.PauseTiming();
            while (publisher.ring().pop(sink.data(), sink.size()) > 0) { }
            sinceDrain = 0;
            state.ResumeTiming();
        }
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["lost"] = double(publisher.lost());
    allocator.setTraceObserver(nullptr);
}

// CPU time the "memscope-pub" thread has used so far (its schedstat), 0 when it cannot be read.
double publisherThreadCpuNs()
{
    DIR* tasks = opendir("/proc/self/task");
    if (!tasks)
        return 0;
    double ns = 0;
    while (const dirent* e = readdir(tasks)) {
        const std::string dir = std::string("/proc/self/task/") + e->d_name;
        std::ifstream comm(dir + "/comm");
        std::string name;
        if (!std::getline(comm, name) || name != "memscope-pub")
            continue;
        std::ifstream schedstat(dir + "/schedstat");
        schedstat >> ns; // first field: time on CPU, ns
    }
    closedir(tasks);
    return ns;
}

// The publisher thread's work on a training-like workload (the shape of `memscope-cli demo`'s: weights kept,
// activations of 24 layers on three streams allocated forward and freed backward while gradients come and go),
// uncompressed (argument 0) and LZ4-compressed (1), over a real PUB socket with nobody subscribed: counters give
// its CPU per event, the bytes per event on the wire and the compression ratio. A fixed number of steps that fits
// the ring, so that nothing is dropped. The timed figure is the workload's own (allocator + ring).
void BM_drainTrainingSteps(benchmark::State& state)
{
    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    PublisherOptions options;
    options.endpoint = temporaryEndpoint();
    options.ringCapacity = size_t(1) << 21;
    options.stackDepth = 0;
    options.compression = state.range(0) ? Compression::Lz4 : Compression::None;
    Publisher publisher(allocator, options);
    std::string error;
    if (!publisher.start(&error)) {
        state.SkipWithError(error.c_str());
        return;
    }
    allocator.setTraceObserver(&publisher);
    constexpr size_t MiB = size_t(1) << 20;
    std::vector<DevicePtr> kept;
    for (int layer = 0; layer < 24; ++layer)
        for (int copy = 0; copy < 3; ++copy)
            kept.push_back(
                allocator.malloc(0, (layer % 4 == 0 ? 64 : 16) * MiB + size_t(layer) * 4096, StreamId {}).ptr);
    const double cpuBefore = publisherThreadCpuNs();
    const uint64_t recordedBefore = publisher.recorded();
    std::vector<DevicePtr> activations, grads;
    uint64_t step = 0;
    for (auto _ : state) {
        for (int layer = 0; layer < 24; ++layer) {
            const StreamId stream { uintptr_t(layer % 8 == 7 ? 2 : (layer % 5 == 4 ? 1 : 0)) };
            activations.push_back(allocator.malloc(0, size_t(8 + (layer + step) % 5 * 4) * MiB, stream).ptr);
            activations.push_back(allocator.malloc(0, size_t(4096 * (1 + layer % 16)), stream).ptr);
        }
        while (!activations.empty()) {
            allocator.free(0, activations.back());
            activations.pop_back();
            if (activations.size() % 6 == 0)
                grads.push_back(allocator.malloc(0, 16 * MiB, StreamId {}).ptr);
        }
        for (DevicePtr g : grads)
            allocator.free(0, g);
        grads.clear();
        ++step;
    }
    const uint64_t events = publisher.recorded() - recordedBefore;
    // Until the thread has sent every record (sequences count heartbeats too, so >=), then its CPU time.
    while (publisher.lastPublished() < publisher.recorded())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const double cpu = publisherThreadCpuNs() - cpuBefore;
    publisher.stop(5000);
    allocator.setTraceObserver(nullptr);
    state.SetItemsProcessed(int64_t(events));
    state.counters["lost"] = double(publisher.lost());
    state.counters["pubNsPerEvent"] = events ? cpu / double(events) : 0;
    if (publisher.compressing()) {
        state.counters["ratio"]
            = publisher.sentBytes() ? double(publisher.rawBytes()) / double(publisher.sentBytes()) : 0;
        state.counters["wireBytesPerEvent"] = events ? double(publisher.sentBytes()) / double(events) : 0;
    } else {
        state.counters["wireBytesPerEvent"] = double(sizeof(memscope::wire::EventRecord));
    }
}

void BM_mallocFree_publishOff(benchmark::State& state) { mallocFree(state, false, 2); }
// Argument: the ring's capacity in records.
void BM_mallocFree_publishOn(benchmark::State& state) { mallocFree(state, true, size_t(state.range(0))); }
// Argument: frames captured per record (the default ring).
void BM_mallocFree_stacks(benchmark::State& state) { mallocFree(state, true, size_t(1) << 14, int(state.range(0))); }

} // namespace

BENCHMARK(BM_mallocFree_publishOff);
BENCHMARK(BM_mallocFree_recorded)->Arg(1 << 12)->Arg(1 << 14)->Arg(1 << 16);
BENCHMARK(BM_mallocFree_publishOn)->Arg(1 << 12)->Arg(1 << 14)->Arg(1 << 16)->Arg(1 << 20);
BENCHMARK(BM_mallocFree_stacks)->Arg(4)->Arg(16)->Arg(64);
// Argument: 0 uncompressed, 1 LZ4. 10000 steps of ~170 events: 1.7 M events, within the 2 M-record ring.
BENCHMARK(BM_drainTrainingSteps)->Arg(0)->Arg(1)->Iterations(10000)->Unit(benchmark::kMillisecond);
