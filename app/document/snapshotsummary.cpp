// summarize(): one pass over a snapshot's segments and traces. Pure; any thread.
#include "document/snapshotsummary.h"

#include <algorithm>
#include <map>

namespace memscope::app {

namespace {

    void addTime(DeviceSummary& summary, int64_t first, int64_t last)
    {
        summary.firstTimeUs = summary.hasTime ? std::min(summary.firstTimeUs, first) : first;
        summary.lastTimeUs = summary.hasTime ? std::max(summary.lastTimeUs, last) : last;
        summary.hasTime = true;
    }

    void addDevice(DeviceSummary& total, const DeviceSummary& device)
    {
        total.segments += device.segments;
        total.blocks += device.blocks;
        total.traceEntries += device.traceEntries;
        total.reserved += device.reserved;
        total.allocated += device.allocated;
        total.active += device.active;
        if (device.hasTime)
            addTime(total, device.firstTimeUs, device.lastTimeUs);
    }

} // namespace

SnapshotSummary summarize(const model::Snapshot& snapshot)
{
    std::map<int, DeviceSummary> byDevice;
    auto deviceSummary = [&](int device) -> DeviceSummary& {
        DeviceSummary& summary = byDevice[device];
        summary.device = device;
        return summary;
    };

    for (const model::Segment& segment : snapshot.segments) {
        DeviceSummary& summary = deviceSummary(segment.device);
        ++summary.segments;
        summary.blocks += segment.blockCount;
        summary.reserved += segment.totalSize;
        summary.allocated += segment.allocatedSize;
        summary.active += segment.activeSize;
    }
    for (size_t device = 0; device < snapshot.deviceTraces.size(); ++device) {
        const model::Trace& trace = snapshot.deviceTraces[device];
        if (trace.empty())
            continue; // PyTorch writes one (usually empty) list per visible device
        DeviceSummary& summary = deviceSummary(static_cast<int>(device));
        summary.traceEntries = trace.size();
        const auto [first, last] = std::minmax_element(
            trace.begin(), trace.end(),
            [](const model::TraceEntry& a, const model::TraceEntry& b) { return a.timeUs < b.timeUs; });
        addTime(summary, first->timeUs, last->timeUs);
    }

    SnapshotSummary result;
    for (const auto& [device, summary] : byDevice) {
        result.devices.push_back(summary);
        addDevice(result.total, summary);
    }
    return result;
}

} // namespace memscope::app
