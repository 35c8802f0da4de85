// The caching allocator's hot path on the host backend: malloc + free of a block that comes from (and returns to)
// the cache, with an empty pool and with a thousand live blocks around it, through the C++ API and the C API, and
// from two threads on two devices. The backend is never called in the timed loops.
#include "agent/allocator.h"
#include "agent/hostbackend.h"
#include "memscope/agent.h"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <vector>

using namespace memscope::agent;

namespace {

void mallocFreeCached(benchmark::State& state, size_t size)
{
    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    allocator.free(0, allocator.malloc(0, size, StreamId {}).ptr); // warm-up: the segment is cached
    for (auto _ : state) {
        const MallocResult r = allocator.malloc(0, size, StreamId {});
        benchmark::DoNotOptimize(r.ptr);
        allocator.free(0, r.ptr);
    }
    state.SetItemsProcessed(state.iterations());
}

void BM_MallocFreeCachedSmall(benchmark::State& state) { mallocFreeCached(state, 4096); }
BENCHMARK(BM_MallocFreeCachedSmall);

void BM_MallocFreeCachedLarge(benchmark::State& state) { mallocFreeCached(state, 8u << 20); }
BENCHMARK(BM_MallocFreeCachedLarge);

// A realistic pool: 1000 live blocks of mixed sizes on two streams, requests cycling through mixed sizes.
void BM_MallocFreeAmongLiveBlocks(benchmark::State& state)
{
    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    std::mt19937 rng(1);
    const size_t sizes[] = { 512, 4096, 65536, 1u << 20, 3u << 20, 17u << 20 };
    std::vector<DevicePtr> live;
    for (int i = 0; i < 2000; ++i)
        live.push_back(allocator.malloc(0, sizes[rng() % 6] + rng() % 4096, StreamId { uintptr_t(rng() % 2) }).ptr);
    for (size_t i = 0; i < live.size(); i += 2)
        allocator.free(0, live[i]); // half of them cached, fragmenting the segments
    std::vector<size_t> requests;
    for (int i = 0; i < 256; ++i)
        requests.push_back(sizes[rng() % 6] + rng() % 4096);
    for (size_t r : requests) // warm-up: every request size has been served once
        allocator.free(0, allocator.malloc(0, r, StreamId {}).ptr);
    size_t i = 0;
    for (auto _ : state) {
        const MallocResult r = allocator.malloc(0, requests[i++ & 255], StreamId {});
        benchmark::DoNotOptimize(r.ptr);
        allocator.free(0, r.ptr);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MallocFreeAmongLiveBlocks);

void BM_MallocFreeCApi(benchmark::State& state)
{
    ::setenv("MEMSCOPE_AGENT_BACKEND", "host", 1);
    memscope_free(memscope_malloc(4096, 0, nullptr), 4096, 0, nullptr);
    for (auto _ : state) {
        void* p = memscope_malloc(4096, 0, nullptr);
        benchmark::DoNotOptimize(p);
        memscope_free(p, 4096, 0, nullptr);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MallocFreeCApi);

// Two threads, each on its own device: the per-device locks do not contend. One allocator for every run (set up
// before the threads meet at the loop's start barrier, never torn down).
CachingAllocator& twoDeviceAllocator()
{
    static HostBackend* backend = [] {
        HostBackend::Options o;
        o.deviceCount = 2;
        return new HostBackend(o);
    }();
    static CachingAllocator* allocator = [] {
        auto* a = new CachingAllocator(*backend, AllocatorConfig {});
        for (int d = 0; d < 2; ++d)
            a->free(d, a->malloc(d, 4096, StreamId {}).ptr);
        return a;
    }();
    return *allocator;
}

void BM_MallocFreeThreadPerDevice(benchmark::State& state)
{
    CachingAllocator& allocator = twoDeviceAllocator();
    const int device = state.thread_index() % 2;
    for (auto _ : state) {
        const MallocResult r = allocator.malloc(device, 4096, StreamId {});
        benchmark::DoNotOptimize(r.ptr);
        allocator.free(device, r.ptr);
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_MallocFreeThreadPerDevice)->Threads(2)->UseRealTime();

} // namespace
