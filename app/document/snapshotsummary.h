// The numbers the main window's summary shows for one snapshot, per device and in total: a plain value computed once
// from an immutable Snapshot. summarize() is pure and may run on any thread (the loader runs it on its worker).
#pragma once

#include "model/snapshot.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memscope::app {

struct DeviceSummary {
    int device = -1; // -1 for the total over all devices
    size_t segments = 0;
    size_t blocks = 0;
    size_t traceEntries = 0;
    bool hasTime = false; // false when no trace entry was recorded
    int64_t firstTimeUs = 0; // earliest and latest trace entry time_us (µs since the epoch)
    int64_t lastTimeUs = 0;
    model::ByteCount reserved = 0; // sum of segments' total_size: what the caching allocator got from cudaMalloc
    model::ByteCount allocated = 0; // sum of segments' allocated_size: blocks handed out to tensors
    model::ByteCount active = 0; // sum of segments' active_size: allocated plus blocks waiting on streams
};

struct SnapshotSummary {
    DeviceSummary total;
    std::vector<DeviceSummary> devices; // those with a segment or a trace entry, by device number
};

SnapshotSummary summarize(const model::Snapshot& snapshot);

} // namespace memscope::app
