// Test data for the benchmarks: big_trace (the real 329k-entry snapshot, decompressed by loadSnapshot) and
// synthetic traces of any length made by repeating it at shifted addresses and times, so that costs can be shown to
// grow linearly. Loaded once per process and cached; main thread only.
#pragma once

#include "io/snapshotio.h"
#include "model/snapshot.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>

namespace memscope::bench {

using namespace memscope;


inline std::string sharedDir()
{
    const char* env = std::getenv("MEMSCOPE_SHARED_DIR");
    return env && *env ? std::string(env) : std::string(MEMSCOPE_DEFAULT_SHARED_DIR);
}

inline const model::Snapshot& bigTrace()
{
    static const std::shared_ptr<const model::Snapshot> snapshot = [] {
        const std::string path = sharedDir() + "/snapshots/big_trace.pickle.xz";
        io::LoadResult result = io::loadSnapshot(path);
        if (!result.ok()) {
            std::fprintf(stderr, "%s: %s\n", path.c_str(), result.error.message.c_str());
            std::exit(1);
        }
        return result.snapshot;
    }();
    return *snapshot;
}

// How a synthetic trace treats what one repetition leaves alive.
enum class Survivors : uint8_t {
    Freed, // freed (and their segments released) before the next repetition: the live state stays big_trace's
    Kept, // alive to the end: the live state grows with every repetition
};

// big_trace's device-0 trace repeated `reps` times; repetition r lives `r × stride` bytes higher and `r × span`
// microseconds later, so every repetition is a complete, consistent trace of its own. The final state is the last
// repetition's (Freed) or the union of all of them (Kept).
inline std::unique_ptr<model::Snapshot> repeated(const model::Snapshot& s, size_t reps, Survivors survivors)
{
    auto out = std::make_unique<model::Snapshot>();
    for (uint32_t k = 1; k < s.strings.size(); ++k)
        out->strings.intern(s.strings.get(model::StringId { k })); // same ids
    out->frames = s.frames;
    out->stackOffsets = s.stackOffsets;
    out->stackFrames = s.stackFrames;
    out->entryForms = s.entryForms; // same ids
    out->hasDeviceTraces = true;

    const auto& trace = s.deviceTraces.at(0);
    model::DeviceAddr low = INT64_MAX, high = 0;
    for (const auto& seg : s.segments) {
        low = std::min(low, seg.address);
        high = std::max(high, seg.address + seg.totalSize);
    }
    for (const auto& e : trace) {
        if (e.action == model::Action::SegmentAlloc || e.action == model::Action::SegmentFree) {
            low = std::min(low, e.addr);
            high = std::max(high, e.addr + e.size);
        }
    }
    constexpr model::ByteCount Align = 2 << 20;
    const model::DeviceAddr stride = (high - low + 2 * Align - 1) / Align * Align;
    const int64_t span = trace.empty() ? 1 : trace.back().timeUs - trace.front().timeUs + 1;

    auto& outTrace = out->deviceTraces.emplace_back();
    outTrace.reserve((trace.size() + s.blocks.size() * 2 + s.segments.size()) * reps);
    for (size_t r = 0; r < reps; ++r) {
        const model::DeviceAddr shift = model::DeviceAddr(r) * stride;
        for (model::TraceEntry e : trace) {
            if (e.action != model::Action::Snapshot && e.action != model::Action::Oom)
                e.addr += shift;
            e.timeUs += int64_t(r) * span;
            outTrace.push_back(e);
        }
        if (survivors == Survivors::Freed && r + 1 < reps) {
            // Free what this repetition left, then release its segments, as a job tearing down would.
            model::TraceEntry e = outTrace.back();
            e.stack = model::EmptyStack;
            e.hasFrames = false;
            // The action as written is its action's own name (a writer writes actionName where there is one: the
            // copied entry's would turn every free_requested below into that entry's action in the file).
            model::EntryForm form = s.form(e);
            form.actionName = model::EmptyString;
            e.form = out->entryForms.intern(form);
            for (const model::Segment& seg : s.segments) {
                if (seg.device != 0)
                    continue;
                const model::Block* blocks = s.segmentBlocks(seg);
                for (uint32_t b = 0; b < seg.blockCount; ++b) {
                    if (blocks[b].state == model::BlockState::Inactive)
                        continue;
                    e.addr = blocks[b].address + shift;
                    e.size = blocks[b].requestedSize;
                    if (blocks[b].state == model::BlockState::ActiveAllocated) {
                        e.action = model::Action::FreeRequested;
                        outTrace.push_back(e);
                    }
                    e.action = model::Action::FreeCompleted;
                    outTrace.push_back(e);
                }
            }
            for (const model::Segment& seg : s.segments) {
                if (seg.device != 0)
                    continue;
                e.action = model::Action::SegmentFree;
                e.addr = seg.address + shift;
                e.size = seg.totalSize;
                outTrace.push_back(e);
            }
            continue;
        }
        for (model::Segment seg : s.segments) {
            if (seg.device != 0)
                continue;
            const model::Block* blocks = s.segmentBlocks(seg);
            seg.address += shift;
            seg.blockBegin = uint32_t(out->blocks.size());
            for (uint32_t b = 0; b < seg.blockCount; ++b) {
                model::Block block = blocks[b];
                block.address += shift;
                out->blocks.push_back(block);
            }
            out->segments.push_back(seg);
        }
    }
    return out;
}

// About `targetEntries` entries: a whole number of repetitions (3 -> ~0.99M, 30 -> ~9.9M).
inline const model::Snapshot& synthetic(int64_t targetEntries, Survivors survivors)
{
    static std::map<std::pair<int64_t, Survivors>, std::unique_ptr<model::Snapshot>> cache;
    auto& slot = cache[{ targetEntries, survivors }];
    if (!slot) {
        const auto& big = bigTrace();
        const size_t n = big.deviceTraces.at(0).size();
        slot = repeated(big, std::max<size_t>(1, (size_t(targetEntries) + n / 2) / n), survivors);
    }
    return *slot;
}

} // namespace memscope::bench
