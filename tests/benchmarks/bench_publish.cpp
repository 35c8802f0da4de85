// What publishing costs the allocator's hot path: malloc + free of a cached block (three trace records: Alloc,
// FreeRequested, FreeCompleted; two time stamps) with no observer, and with the real Publisher attached (per-device
// ring + "memscope-pub" thread draining it to a PUB socket on an ipc endpoint in a temporary folder), for several
// ring capacities (the default is 16384). Target: publishing adds < 50 ns per pair. The counter `lost` says how
// many records the ring dropped: a loop that does nothing but allocate (~25 M records/s) outruns the drain thread,
// which a real job (< 1 M/s) does not; a dropped record costs less than one that gets in.
#include "allocator.h"
#include "hostbackend.h"
#include "publisher.h"

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>

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

void mallocFree(benchmark::State& state, bool publish, size_t ringCapacity)
{
    HostBackend backend;
    CachingAllocator allocator(backend, AllocatorConfig {});
    PublisherOptions options;
    options.endpoint = temporaryEndpoint();
    options.ringCapacity = ringCapacity;
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
    for (auto _ : state) {
        const MallocResult r = allocator.malloc(0, 4096, StreamId {});
        benchmark::DoNotOptimize(r.ptr);
        allocator.free(0, r.ptr);
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["lost"] = double(publisher.lost());
    allocator.setTraceObserver(nullptr);
    publisher.stop();
}

void BM_mallocFree_publishOff(benchmark::State& state) { mallocFree(state, false, 2); }
// Argument: the ring's capacity in records.
void BM_mallocFree_publishOn(benchmark::State& state) { mallocFree(state, true, size_t(state.range(0))); }

} // namespace

BENCHMARK(BM_mallocFree_publishOff);
BENCHMARK(BM_mallocFree_publishOn)->Arg(1 << 12)->Arg(1 << 14)->Arg(1 << 16)->Arg(1 << 20);
