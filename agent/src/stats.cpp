// Flattening of DeviceStats the way torch/cuda/memory.py memory_stats() does. See stats.h.
#include "stats.h"

namespace memscope::agent {

std::vector<std::pair<std::string, int64_t>> statsAsDict(const DeviceStats& stats)
{
    std::vector<std::pair<std::string, int64_t>> out;
    auto addStat = [&](const std::string& prefix, const Stat& s) {
        out.emplace_back(prefix + ".current", s.current);
        out.emplace_back(prefix + ".peak", s.peak);
        out.emplace_back(prefix + ".allocated", s.allocated);
        out.emplace_back(prefix + ".freed", s.freed);
    };
    auto addArray = [&](const std::string& name, const StatArray& a) {
        // torch.cuda.memory_stats(): "all", "small_pool", "large_pool".
        addStat(name + ".all", a[size_t(StatType::Aggregate)]);
        addStat(name + ".small_pool", a[size_t(StatType::SmallPool)]);
        addStat(name + ".large_pool", a[size_t(StatType::LargePool)]);
    };
    addArray("allocation", stats.allocation);
    addArray("segment", stats.segment);
    addArray("active", stats.active);
    addArray("inactive_split", stats.inactiveSplit);
    addArray("allocated_bytes", stats.allocatedBytes);
    addArray("reserved_bytes", stats.reservedBytes);
    addArray("active_bytes", stats.activeBytes);
    addArray("inactive_split_bytes", stats.inactiveSplitBytes);
    addArray("requested_bytes", stats.requestedBytes);
    out.emplace_back("num_alloc_retries", stats.numAllocRetries);
    out.emplace_back("num_ooms", stats.numOoms);
    out.emplace_back("num_sync_all_streams", stats.numSyncAllStreams);
    out.emplace_back("num_device_alloc", stats.numDeviceAlloc);
    out.emplace_back("num_device_free", stats.numDeviceFree);
    addStat("oversize_allocations", stats.oversizeAllocations);
    addStat("oversize_segments", stats.oversizeSegments);
    out.emplace_back("max_split_size", stats.maxSplitSize);
    return out;
}

} // namespace memscope::agent
