// memscope's caching allocator: PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator) rule for rule, over a Backend, so that for the same requests, streams and device answers
// it makes the same decisions: which cached block serves a request, when a segment is split, merged, reserved or
// released, and in which order it reports that (the same trace events a memory snapshot records).
//
// Threads: every public function may be called from any thread. Each device has its own mutex (PyTorch's
// per-device DeviceCachingAllocator lock); calls for different devices run in parallel. A cached block is handed
// out and taken back without calling the system allocator: block nodes, pool tree nodes and the pointer map come
// from per-device free lists that only grow. Nothing here throws except std::bad_alloc while those grow.
#pragma once

#include "backend.h"
#include "config.h"
#include "stats.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::agent {

class DeviceAllocator;

// A memory pool id, PyTorch's MempoolId_t: (0, 0) is the default pool, (n, 0) the private pool of CUDA graph n,
// (0, n) a user MemPool.
struct PoolId {
    int64_t first = 0;
    int64_t second = 0;
    bool isDefault() const { return first == 0 && second == 0; }
    bool operator==(const PoolId&) const = default;
};

// What the allocator did, in the order it did it: PyTorch's TraceEntry actions (record_trace call sites).
enum class TraceAction : uint8_t {
    Alloc, // a block was handed out; addr = block, size = requested bytes
    FreeRequested, // the user freed it; size = requested bytes
    FreeCompleted, // it went back to the pool (later than FreeRequested after recordStream)
    SegmentAlloc, // addr/size = the new segment
    SegmentFree,
    SegmentMap, // expandable segments: pages mapped at [addr, addr + size)
    SegmentUnmap,
    Oom, // addr = the device's free bytes, size = the rounded request
    Count
};
std::string_view traceActionName(TraceAction action);

struct TraceEvent {
    TraceAction action = TraceAction::Alloc;
    int device = 0;
    uintptr_t addr = 0;
    size_t size = 0;
    StreamId stream {};
    PoolId pool;
    size_t blockSize = 0; // Alloc, FreeRequested, FreeCompleted: the block's own bytes (size is the request)
    // The allocator call that produced the event: per device, +1 per public call that takes the device's lock.
    // Events of one call (a malloc's SegmentAlloc and Alloc, a free's FreeRequested and FreeCompleted, an
    // emptyCache's SegmentFrees) share it, so an observer can time stamp a whole call with one clock read.
    uint64_t call = 0;
};

// Receives every TraceEvent, under the device's lock: keep it short, never call back into the allocator.
class TraceObserver {
public:
    virtual ~TraceObserver() = default;
    virtual void onTraceEvent(const TraceEvent& event) = 0;
    // What the allocator calls: onTraceEvent, and the id of the stack the observer attached to the event (0: none).
    // The allocator keeps an Alloc's id on the block for as long as it is active (BlockInfo::stackId).
    virtual uint32_t onTraceEventWithStack(const TraceEvent& event)
    {
        onTraceEvent(event);
        return 0;
    }
};

enum class Status : uint8_t { Ok, OutOfMemory, InvalidDevice, InvalidPointer, InvalidArgument, BackendError };
std::string_view statusName(Status status);

struct MallocResult {
    DevicePtr ptr {};
    Status status = Status::Ok;
    // Filled when status == OutOfMemory, with what PyTorch's OutOfMemoryError message reports.
    size_t requestedBytes = 0;
    size_t allocationSize = 0; // the segment size it tried to get
    size_t deviceFree = 0;
    size_t deviceTotal = 0;
    size_t allowedBytes = 0; // 0 when no memory fraction is set
    size_t allocatedBytes = 0;
    size_t reservedBytes = 0;
};

// PyTorch's "CUDA out of memory. Tried to allocate ..." text for an OutOfMemory result on `device`.
std::string describeOutOfMemory(int device, const MallocResult& result);
// c10::CachingAllocator::format_size: "512 bytes", "2.00 MiB", ...
std::string formatSize(uint64_t size);

// One block of a segment as torch.cuda.memory_snapshot() reports it.
struct BlockInfo {
    uintptr_t address = 0;
    size_t size = 0;
    size_t requestedSize = 0;
    bool allocated = false;
    bool active = false; // allocated, or freed but waiting for the events of other streams (pending free)
    uint32_t stackId = 0; // active blocks: the stack the observer attached to their Alloc (0: none)
};

struct SegmentInfo {
    int device = 0;
    uintptr_t address = 0;
    size_t totalSize = 0;
    size_t allocatedSize = 0;
    size_t activeSize = 0;
    size_t requestedSize = 0;
    StreamId stream {};
    bool isLarge = false;
    bool isExpandable = false;
    PoolId pool;
    std::vector<BlockInfo> blocks; // in address order, tiling the segment
};

class CachingAllocator {
public:
    // `backend` must outlive the allocator. One device allocator per backend device.
    CachingAllocator(Backend& backend, const AllocatorConfig& config);
    ~CachingAllocator();
    CachingAllocator(const CachingAllocator&) = delete;
    CachingAllocator& operator=(const CachingAllocator&) = delete;

    int deviceCount() const { return static_cast<int>(m_devices.size()); }
    const AllocatorConfig& config() const { return m_config; }

    // DeviceCachingAllocator::malloc: a block of at least `size` bytes for use on `stream`. On failure the result
    // says why; OutOfMemory comes after the cache was released and the reservation retried, as in PyTorch.
    MallocResult malloc(int device, size_t size, StreamId stream);
    // DeviceCachingAllocator::free: returns the block to its pool, or, if recordStream() named other streams,
    // once the events recorded on them complete (noticed by a later malloc or emptyCache).
    Status free(int device, DevicePtr ptr);
    // DeviceCachingAllocator::recordStream: `ptr` is also used on `stream`.
    Status recordStream(int device, DevicePtr ptr, StreamId stream);
    // DeviceCachingAllocator::emptyCache: waits for pending frees, then releases every cached segment that has no
    // block in use (expandable segments: unmaps every free page).
    void emptyCache();
    Status emptyCache(int device);
    // setMemoryFraction: cap the bytes `device` may reserve at fraction * total device memory (1 = no cap).
    Status setMemoryFraction(int device, double fraction);
    // The same cap given in bytes (PyTorch's allowed_memory_maximum, size_t(fraction * total)); nullopt: no cap.
    // For the decision oracle, which replays a trace made under a fraction of a device it does not have.
    Status setMemoryLimit(int device, std::optional<size_t> bytes);

    DeviceStats stats(int device) const;
    void resetPeakStats(int device);
    void resetAccumulatedStats(int device);
    // Whether malloc(device, size, stream) would be served by a cached block right now (get_free_block's choice),
    // without changing anything. For tools that must tell an empty_cache() from a malloc's own cache release.
    bool cachedBlockAvailable(int device, size_t size, StreamId stream) const;
    // Whether malloc(device, size, any stream), when no cached block serves it, releases cached blocks before its first
    // reservation: garbage collection (garbage_collection_threshold of the memory cap) or the cap refusing the
    // reservation. False without a cap. Changes nothing.
    bool reservationReleasesFirst(int device, size_t size) const;
    // torch.cuda.memory_snapshot() for one device: its segments sorted by address.
    std::vector<SegmentInfo> snapshot(int device) const;
    // Every device's segments (device by device, each sorted by address), taken while holding every device lock
    // at once (in device order); `whileLocked` runs under those locks, so what it reads of the trace (a sequence
    // number) matches the state exactly. It must not call back into the allocator. Allocates.
    std::vector<SegmentInfo> snapshotAll(const std::function<void()>& whileLocked) const;

    // CUDA graph private pools (beginAllocateToPool / endAllocateToPool / releasePool): while a pool is begun,
    // allocations whose stream passes `filter` come from it.
    Status beginAllocateToPool(int device, PoolId pool, std::function<bool(StreamId)> filter);
    Status endAllocateToPool(int device, PoolId pool);
    Status releasePool(int device, PoolId pool);

    // Every device reports its TraceEvents here (nullptr: nobody). Set it while no other call runs.
    void setTraceObserver(TraceObserver* observer);

    // DeviceCachingAllocator::round_size and get_allocation_size, exposed for tests and tools.
    static size_t roundSize(size_t size, const AllocatorConfig& config);
    static size_t allocationSize(size_t size, const AllocatorConfig& config);

private:
    DeviceAllocator* device(int index) const;

    AllocatorConfig m_config;
    TraceObserver* m_observer = nullptr; // read by the device allocators through a pointer to this member
    std::vector<std::unique_ptr<DeviceAllocator>> m_devices;
};

} // namespace memscope::agent
