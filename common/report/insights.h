// Insights: the answers a user opens a snapshot for, computed from the model (the replay's exact peaks and states)
// rather than drawn: at the peak, which call stacks hold the memory and what share of it; leak suspects (stacks whose
// live bytes grow step over step across repeated record_function ranges, or, without them, blocks allocated late and
// never freed); pending-free stalls (record_stream: free_requested long before free_completed); fragmentation at the
// peak and at each OOM, telling "the memory was there but in pieces" from "the process hit its cap" and "the device
// was full", with PyTorch's allocator advice where it applies; and for a diff, what grew. Every insight carries a
// link (device, state index, allocation, stack) that a viewer follows by moving its cursor and selection.
//
// What `memscope-cli insights` prints and what the app's Insights dock lists. Pure functions of immutable snapshots,
// replays and diff results: any thread, any number at once (the app runs them in a background job).
#pragma once

#include "model/diff.h"
#include "model/replay.h"
#include "model/snapshot.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::report {

enum class InsightKind : uint8_t {
    Peak, // the peak of allocated bytes: where it is, what was reserved then
    TopConsumer, // one call stack's share of the peak
    Fragmentation, // reserved but free bytes at the peak
    Oom, // one OOM explained (or a summary of the rest)
    LeakSuspect, // a stack whose live bytes grow step over step
    LateSurvivor, // allocated in the second half of the trace and alive at its end
    PendingFree, // record_stream: blocks waiting for other streams
    Growth, // diffs: a stack that grew from A to B
    WhatIf, // an allocator setting that would have helped, found by replaying the job under it (whatif/)
    Count
};

// "peak", "top-consumer", "fragmentation", "oom", "leak-suspect", "late-survivor", "pending-free", "growth",
// "what-if".
std::string_view insightKindName(InsightKind kind);

struct Insight {
    InsightKind kind = InsightKind::Peak;
    // The link: the device and the state index a viewer moves its cursor to (-1: none), the allocation of that
    // device's replay it selects (NoAllocation: none), and the call stack it is about (of the snapshot, or for diff
    // insights of DiffResult::frames; EmptyStack: none).
    int device = 0;
    int64_t index = -1;
    model::AllocationId allocation = model::NoAllocation;
    model::StackId stack = model::EmptyStack;
    // For a backward allocation whose trace entry carries `forward_frames`: the forward pass that made its autograd
    // node (model/forwardframes.h), which its title names; EmptyStack otherwise.
    model::StackId forwardStack = model::EmptyStack;
    // The figures it is about: block bytes (signed for growth), allocations, requested bytes, share of the peak.
    model::ByteCount bytes = 0;
    int64_t count = 0;
    model::ByteCount requested = 0;
    double share = 0;
    std::string title; // one line
    std::string detail; // more lines: the numbers, the advice and its source, the stack (innermost frame first)
};

struct Insights {
    std::vector<Insight> items; // per device: peak, consumers, fragmentation, OOMs, leaks, pending frees
    std::string source; // what they are of (a file name, "A → B"), for reports
};

struct InsightOptions {
    size_t topConsumers = 5;
    size_t maxLeaks = 5;
    size_t maxOoms = 5; // OOMs explained one by one; the others are summed up in one more item
    size_t maxStalls = 3;
    size_t maxFrames = 12; // frames of a stack shown in `detail`
    bool frameFilter = true; // group and show stacks by their site, internal frames hidden (model/framefilter.h)
};

// The insights of every device of `snapshot` that has a trace (or segments: then only the end state is known).
// `replays[d]` must be Replay::build(snapshot, d). O(trace + live states at the few moments sampled).
Insights computeInsights(const model::Snapshot& snapshot, std::span<const model::Replay> replays,
                         const InsightOptions& options = {});
// What grew from A to B: the totals, the stacks that grew most (one more block of one size each step, when so),
// segments only in B, fragmentation. Stacks refer to result.frames.
Insights computeDiffInsights(const model::DiffResult& result, const InsightOptions& options = {});

// A readable report, and JSON: {"format": "memscope-insights", "version": 1, "source": ..., "items": [{"kind",
// "device", "index", "allocation", "bytes", "count", "requested", "share", "title", "detail", "frames"}]}
// (`frames`: the stack, innermost first, as basename:line:name; `allocation`: the replay's id or null).
// `frames` is the table the items' stacks refer to.
std::string insightsText(const Insights& insights);
std::string insightsJson(const Insights& insights, const model::Snapshot& frames, const InsightOptions& options = {});

// A stack in one line. With the frame filter on: its site (model/framefilter.h: the innermost frame of the user's
// code or a model library's, whether the stack holds C++ frames or not), then what allocated there, the innermost
// Python frame below it: "train.py:44:step via functional.py:1443:dropout". Off: its two innermost frames, then the
// innermost frame of the user's own code: "functional.py:1443:dropout <- dropout.py:73:forward ... train.py:44:step".
// Frames as basename:line:name (Windows paths cut at '\' too). "<no stack recorded>" without frames.
std::string stackLabel(const model::Snapshot& snapshot, model::StackId stack, bool frameFilter = true);
// An insight's "from ..." label and its stack lines: stackLabel / the stack, and for a backward allocation with a
// forward stack (Insight::forwardStack) the forward line that made its autograd node ("the backward of ...").
std::string insightLabel(const model::Snapshot& snapshot, const Insight& insight, bool frameFilter = true);
std::string insightStackText(const model::Snapshot& snapshot, const Insight& insight, const InsightOptions& options);

} // namespace memscope::report
