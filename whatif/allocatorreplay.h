// `memscope-cli allocator-replay SNAPSHOT`: the decision oracle of memscope's caching allocator. Replays each
// device's complete trace through agent::CachingAllocator (host backend, scripted to hand out the addresses the
// trace shows for new segments) and checks that every event the allocator reports - every allocation's address,
// every free, every segment it reserves, releases, maps or unmaps - is the one PyTorch recorded, in PyTorch's order,
// and that the final state equals the snapshot's segments and blocks.
//
// Single-threaded; reads the file, writes nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace memscope {

namespace model {
    struct Snapshot;
}
namespace agent {
    class CachingAllocator;
}

struct AllocatorReplayOutput {
    int exitCode = 0; // 0: every allocation matched and the final state is identical; 1: not, or unreadable; 2: usage
    std::string out; // one line per device, then "matched A/B allocations, final state identical: yes|no"
    std::string err; // why the input could not be read, or the usage
};

// What a snapshot does not record about how it was made.
struct AllocatorReplayOptions {
    // torch.cuda.set_per_process_memory_fraction's cap in bytes (PyTorch's allowed_memory_maximum: the fraction
    // times the device's total memory); 0: none. Garbage collection (garbage_collection_threshold) and the
    // allocator's own out-of-memory decisions depend on it, and no snapshot keeps it.
    size_t memoryLimit = 0;
    // recoverJob: keep the original's reserved and allocated bytes after each call (MemoryOutcome::curve).
    bool curves = false;
    // The device's total memory (torch.cuda.get_device_properties().total_memory); 0: estimated from the trace.
    // Expandable segments reserve address space for 9/8 of it each (c10/cuda/CUDACachingAllocator.cpp,
    // ExpandableSegment), so it decides whether the trace's next segment address is free to reserve.
    size_t deviceMemory = 0;
};

// One call the job made to its allocator, as the exact replay recovered it from the trace: what the job asked, not
// what the allocator decided, so the same calls can be replayed under other settings (whatif.h).
struct JobCall {
    enum class Kind : uint8_t {
        Malloc, // `size` bytes on `stream` (into `pool` when it is not the default one); `block` numbers it
        Free, // of `block`
        RecordUse, // record_stream(`block`, use stream `use`) just before its Free: the block waits for that use
        CompleteUse, // the work of use stream `use` completed (where the trace completes the deferred free)
        EmptyCache, // torch.cuda.empty_cache()
        PoolStreamBegin, // allocations of `stream` go to `pool` from here (a capture, or use_mem_pool)
        PoolStreamEnd, // ... until here
        ReleasePool, // the pool's owner is gone (a MemPool deleted, a graph reset): empty_cache may free it
    };
    Kind kind = Kind::Malloc;
    uint32_t block = 0;
    uint32_t use = 0;
    size_t size = 0;
    uintptr_t stream = 0;
    int64_t poolFirst = 0, poolSecond = 0;
    bool failed = false; // Malloc: PyTorch's ended in an OOM
    size_t entry = 0; // the trace entry the call ended at
};

// Bytes reserved and allocated after a call that ended at trace entry `entry`.
struct CurvePoint {
    size_t entry = 0;
    size_t reserved = 0;
    size_t allocated = 0;
};

// What one device's memory looked like over a replay (or over the trace itself): the decisions' outcome.
struct MemoryOutcome {
    size_t peakReserved = 0;
    size_t peakAllocated = 0;
    size_t allocatedAtPeak = 0; // allocated bytes when reserved first reached its peak
    size_t largestFreeAtPeak = 0; // the largest inactive block then
    size_t deviceAllocs = 0; // cudaMalloc calls and segment maps
    size_t segmentsAtEnd = 0;
    struct Oom {
        size_t request = 0; // which of the job's Malloc calls, from 0
        size_t entry = 0; // the trace entry of that call in the original
        size_t size = 0; // the bytes asked for
    };
    std::vector<Oom> ooms; // the Malloc calls that failed
    bool keepCurve = false; // asked for before the replay: then `curve` has a point after every call
    std::vector<CurvePoint> curve;
};

// The private-pool windows of a replay (a capture, or a use_mem_pool block: allocations of the window's streams go
// to its pool), with the pool's users counted as PyTorch counts them (c10/cuda/CUDACachingAllocator.cpp,
// create_or_incref_pool and releasePool): a pool's first window makes it and stands for its owner (the MemPool
// object or the graph), each later window holds one more use while open; release() drops the owner's, after which
// empty_cache may free the pool's segments (graph_pools_freeable).
class PoolWindows {
public:
    PoolWindows(agent::CachingAllocator& allocator, int device)
        : m_allocator(allocator)
        , m_device(device)
    {
    }
    void begin(int64_t poolFirst, int64_t poolSecond, uintptr_t stream);
    void end(int64_t poolFirst, int64_t poolSecond, uintptr_t stream);
    // The pool whose window holds `stream` now, if any.
    bool openOn(uintptr_t stream, std::pair<int64_t, int64_t>& pool) const;
    // Ends every window (no capture can be underway at an empty_cache); calls `each(pool, stream)` for each.
    template <typename Each> void endAll(Each&& each)
    {
        while (!m_windows.empty()) {
            const auto pool = m_windows.begin()->first;
            const uintptr_t stream = m_windows.begin()->second.streams->front();
            each(pool, stream);
            end(pool.first, pool.second, stream);
        }
    }
    void release(int64_t poolFirst, int64_t poolSecond);

private:
    struct Window {
        std::shared_ptr<std::vector<uintptr_t>> streams; // shared with the allocator's filter
        bool extraUse = false; // this window's begin counted a use beyond the owner's
    };
    agent::CachingAllocator& m_allocator;
    int m_device;
    std::map<std::pair<int64_t, int64_t>, Window> m_windows;
    std::set<std::pair<int64_t, int64_t>> m_made; // pools made so far
};

// Updates `outcome` after a call: a new reserved peak takes the allocated bytes and the largest free block of that
// moment. The end's figures (peakAllocated, deviceAllocs, segmentsAtEnd) are set by finishOutcome.
void watchOutcome(const agent::CachingAllocator& allocator, int device, MemoryOutcome& outcome, size_t entry = 0);
void finishOutcome(const agent::CachingAllocator& allocator, int device, MemoryOutcome& outcome);

// A device's calls, recovered when memscope's allocator replays its trace exactly (else `why` says where not).
struct RecoveredDevice {
    int device = 0;
    bool exact = false;
    std::string why;
    std::vector<JobCall> calls;
    MemoryOutcome original; // PyTorch's own, read off the exact replay
};

struct RecoveredJob {
    std::vector<RecoveredDevice> devices;
    std::string settings; // the file's PYTORCH_CUDA_ALLOC_CONF ("" when none)
    size_t memoryLimit = 0; // the cap the replay used (0: none)
    bool memoryLimitInferred = false; // not given: the trace's peak reservation, which replayed it exactly
    std::string note; // how the settings were read, when not plainly
};

// Replays `snapshot` exactly (as allocatorReplaySnapshot) and keeps each device's calls.
RecoveredJob recoverJob(const model::Snapshot& snapshot, const AllocatorReplayOptions& options = {});

// `args`: the command's arguments after "allocator-replay" (one snapshot file, [--memory-limit BYTES],
// [--device-memory BYTES]).
AllocatorReplayOutput allocatorReplay(const std::vector<std::string>& args);
// The same for a loaded snapshot; `name` is how messages call it.
AllocatorReplayOutput allocatorReplaySnapshot(const model::Snapshot& snapshot, const std::string& name,
                                              const AllocatorReplayOptions& options = {});

// allocatorReplay() writing to stdout/stderr; returns the exit code. For tools/cli/main.cpp.
int runAllocatorReplay(const std::vector<std::string>& args);

} // namespace memscope
