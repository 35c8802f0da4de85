// Allocator statistics, the same counters as torch.cuda.memory_stats() (c10/core/CachingDeviceAllocator.h:
// Stat, StatType, DeviceStats; torch/cuda/memory.py names them "allocated_bytes.all.current" and so on).
// Plain values; the allocator updates them under its device lock and hands out copies.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace memscope::agent {

struct Stat {
    int64_t current = 0;
    int64_t peak = 0;
    int64_t allocated = 0; // cumulative increases
    int64_t freed = 0; // cumulative decreases

    void increase(size_t amount)
    {
        current += static_cast<int64_t>(amount);
        peak = current > peak ? current : peak;
        allocated += static_cast<int64_t>(amount);
    }
    void decrease(size_t amount)
    {
        current -= static_cast<int64_t>(amount);
        freed += static_cast<int64_t>(amount);
    }
    void resetAccumulated() { allocated = freed = 0; }
    void resetPeak() { peak = current; }
};

// StatType: the aggregate, and the small (<= 1 MiB) and large pools.
enum class StatType : uint8_t { Aggregate, SmallPool, LargePool, Count };
using StatArray = std::array<Stat, size_t(StatType::Count)>;

struct DeviceStats {
    StatArray allocation; // number of allocated blocks
    StatArray segment; // number of segments (cudaMalloc'ed)
    StatArray active; // number of allocated or pending-free blocks
    StatArray inactiveSplit; // number of free blocks that are part of a split segment
    StatArray allocatedBytes;
    StatArray reservedBytes;
    StatArray activeBytes;
    StatArray inactiveSplitBytes;
    StatArray requestedBytes; // what users asked for, before rounding
    int64_t numAllocRetries = 0; // mallocs that had to free the cache and retry
    int64_t numOoms = 0;
    int64_t numSyncAllStreams = 0;
    int64_t numDeviceAlloc = 0; // cudaMalloc / segment maps
    int64_t numDeviceFree = 0;
    Stat oversizeAllocations; // blocks >= max_split_size
    Stat oversizeSegments;
    int64_t maxSplitSize = 0; // -1 when unlimited
};

// The stats flattened with torch.cuda.memory_stats()'s key names, e.g. {"allocated_bytes.all.current", 512}.
std::vector<std::pair<std::string, int64_t>> statsAsDict(const DeviceStats& stats);

} // namespace memscope::agent
