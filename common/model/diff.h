// Memory diffs: what changed between two allocator states, each the state of one snapshot at one trace index (by
// default the end). The two sides may come from two files (two commits of a training script, two ranks) or from one
// file at two cursor positions. Computed here, in the data layer, as plain values with signed bytes and counts, so
// that the CLI's text, JSON and folded outputs, the app's views and the differential call tree all show one result
// (heaptrack's pattern: the diff is data, fed to the same models with signed costs). The text, JSON and folded
// reports are common/report/diffreport.h.
//
// A diff has four parts: totals (reserved, allocated, active, requested, largest free block, fragmentation, segment
// and allocation counts; all devices, per device, per pool, per stream), segments matched by (device, address, size)
// as PyTorch's `_memory_viz.py compare` matches them, live allocations matched by call stack after the frame filter
// (per stack, and per (stack, block size) to find "the same tensor, one more each step"), and, when both sides come
// from the same trace, the exact new / freed / surviving allocations (matched by device, address and the address's
// version, which is the replay's allocation identity).
//
// Call stacks of two files are compared by content (frame name, filename, line), never by id: every StackId of a
// DiffResult refers to the result's own frame table (DiffResult::frames), into which both sides' frames are
// interned by content.
//
// computeDiff and the report functions are pure: any thread, any number at once, on immutable snapshots and replays.
// The command-line front end (`memscope-cli diff`: options, exit codes) is tools/cli/diffcommand.h.
#pragma once

#include "model/calltree.h"
#include "model/landmarks.h"
#include "model/replay.h"
#include "model/snapshot.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace memscope::model {

constexpr int AllDevices = -1;
constexpr int64_t EndOfTrace = -1;

// One side of a diff.
struct DiffSide {
    std::shared_ptr<const Snapshot> snapshot;
    // AllDevices, or one device (its segments only).
    int device = AllDevices;
    // EndOfTrace: the snapshot's own final state (its segments and blocks, exact). Otherwise a state index of the
    // trace (replay.h: 0 = before the first entry, n = after the last), of `device`'s trace, or with AllDevices of
    // the only device that has a non-empty trace (devices without one are constant: their final state).
    int64_t index = EndOfTrace;
    // The replay of that trace, when the caller has one (borrowed for the call; must be Replay::build of this
    // snapshot and device). Without it computeDiff builds one when `index` needs it, once for both sides when they
    // share snapshot and trace.
    const Replay* replay = nullptr;
    // How reports name this side (e.g. the file path); may be empty.
    std::string name;
};

struct DiffOptions {
    // Match stacks after dropping the frames PyTorch's viewers hide (model/framefilter.h). A stack whose every frame
    // is hidden keeps its full frames (it then matches only an identical stack).
    bool frameFilter = true;
};

enum class DiffErrorCode : uint8_t {
    None,
    NoSnapshot, // a side has no snapshot
    NoSuchDevice, // the device has neither segments nor a trace in that snapshot
    IndexOutOfRange, // the index is beyond the trace
    AmbiguousTrace, // an index with AllDevices, but several devices have traces
    Count
};

// The resolved description of a side.
struct DiffSideInfo {
    std::string name;
    int device = AllDevices;
    int traceDevice = -1; // the device whose trace `index` refers to; -1 for the end state
    int64_t index = EndOfTrace; // EndOfTrace or the state index used
    int64_t entryCount = 0; // entries in that trace (0 for the end state)
};

// Totals of one scope on one side. fragmentation = reserved - active (bytes reserved but backing no live block).
struct DiffMetrics {
    ByteCount reserved = 0;
    ByteCount allocated = 0; // Σ active_allocated blocks
    ByteCount active = 0; // + active_pending_free blocks
    ByteCount requested = 0; // Σ requested bytes of active blocks
    ByteCount largestFree = 0; // the largest inactive block (for a delta: B's largest minus A's)
    ByteCount fragmentation = 0;
    int64_t segments = 0;
    int64_t allocations = 0; // active blocks
    bool operator==(const DiffMetrics&) const = default;
};

DiffMetrics operator-(const DiffMetrics& b, const DiffMetrics& a);

enum class DiffScope : uint8_t { All, Device, Pool, Stream };

struct DiffTotals {
    DiffScope scope = DiffScope::All;
    int32_t device = 0; // Device, Pool, Stream
    std::pair<int64_t, int64_t> poolId { 0, 0 }; // Pool
    int64_t stream = 0; // Stream: the raw cudaStream_t handle (0 = default stream)
    DiffMetrics a, b, delta; // delta = b - a
};

// One call stack (and, for by-size rows, one block size): live allocations on each side and the difference.
struct DiffStackRow {
    StackId stack = EmptyStack; // in DiffResult::frames
    ByteCount size = 0; // block size, for DiffResult::byStackAndSize; 0 in byStack
    ByteCount bytesA = 0, bytesB = 0, deltaBytes = 0; // block bytes (what the allocator holds)
    int64_t countA = 0, countB = 0, deltaCount = 0;
    ByteCount requestedA = 0, requestedB = 0; // requested bytes
    // Same-trace diffs only (DiffResult::sameTrace), else 0: allocations live in B only / in A only.
    int64_t newCount = 0, freedCount = 0;
    ByteCount newBytes = 0, freedBytes = 0;
};

enum class DiffSegmentStatus : uint8_t { OnlyA, OnlyB, Both };

// One segment, matched by (device, address, total size) as _memory_viz.compare's _seg_key (plus the device).
struct DiffSegment {
    DiffSegmentStatus status = DiffSegmentStatus::Both;
    int32_t device = 0;
    DeviceAddr address = 0;
    ByteCount size = 0;
    int64_t stream = 0;
    std::pair<int64_t, int64_t> poolId { 0, 0 };
    bool isExpandable = false;
    // Contents on each side (0 on the side that lacks it).
    ByteCount allocatedA = 0, allocatedB = 0, activeA = 0, activeB = 0;
    int64_t allocationsA = 0, allocationsB = 0;
    ByteCount deltaActive() const { return activeB - activeA; }
};

struct DiffCountBytes {
    int64_t count = 0;
    ByteCount bytes = 0;
    bool operator==(const DiffCountBytes&) const = default;
};

struct DiffSegmentSummary {
    DiffCountBytes onlyA, onlyB, both;
    int64_t bothChanged = 0; // in both, with different blocks (other allocated/active bytes or allocation counts)
};

// One allocation of a same-trace diff.
struct DiffAllocation {
    int32_t device = 0;
    DeviceAddr address = 0;
    ByteCount size = 0;
    ByteCount requestedSize = 0;
    uint32_t version = 0;
    StackId stack = EmptyStack; // in DiffResult::frames
    TraceIndex allocIndex = -1; // entry index of its alloc when the side came from a replay, else -1
};

// Same-trace diffs: allocations by identity (device, address, version).
struct DiffLifetimes {
    DiffCountBytes newAllocations, freed, surviving;
    std::vector<DiffAllocation> newList; // live in B only, by (device, address)
    std::vector<DiffAllocation> freedList; // live in A only, by (device, address)
};

struct DiffResult {
    DiffErrorCode errorCode = DiffErrorCode::None;
    std::string error; // one line for a user, naming the side and the reason
    bool ok() const { return errorCode == DiffErrorCode::None; }

    DiffSideInfo a, b;
    DiffOptions options;
    // Both sides come from one snapshot (the same object) and the same devices: `lifetimes` is exact.
    bool sameTrace = false;

    // The frame table every StackId below refers to: strings, frames and stacks only (no segments, no trace).
    // Stacks here are already filtered when options.frameFilter is set.
    std::shared_ptr<const Snapshot> frames;

    // [0] all devices, then per device, per (device, pool), per (device, stream), each ascending.
    std::vector<DiffTotals> totals;
    // Every stack live on either side. Sorted: growth first (deltaBytes descending), then shrink (by |deltaBytes|
    // descending), then unchanged bytes; ties by |deltaCount| descending, then by frame content, so the order does
    // not depend on ids.
    std::vector<DiffStackRow> byStack;
    std::vector<DiffStackRow> byStackAndSize; // likewise, ties then by size
    // Every segment of either side: only in B (by size descending), only in A (likewise), then in both (by
    // |deltaActive| descending, then address).
    std::vector<DiffSegment> segmentList;
    DiffSegmentSummary segments;
    DiffLifetimes lifetimes; // empty unless sameTrace
};

// Computes the diff B - A. Never throws for bad input: a side that cannot be resolved gives a result with
// errorCode/error set and nothing else. O(live blocks of both sides + distinct stacks × depth), plus a replay's
// stateAt per indexed side (and Replay::build when a side needs one and brings none). Any thread.
DiffResult computeDiff(const DiffSide& a, const DiffSide& b, const DiffOptions& options = {});

// Signed samples for the differential call tree: one per byStack row whose bytes or count changed, with
// deltaBytes / deltaCount and key = the row's index. Build with CallTree::build(*result.frames, samples, options).
std::vector<CallSample> diffCallSamples(const DiffResult& result);
// The same, built: a CallTree over result.frames with signed costs.
CallTree diffCallTree(const DiffResult& result, const CallTreeOptions& options = {});

// ---- What the reports (report/diffreport.h) group by and measure ----

enum class DiffGrouping : uint8_t { Stack, StackAndSize, Segment };
enum class DiffGrowthMetric : uint8_t { Active, Allocated, Reserved };

// The growth a CI check compares with its threshold: totals[0].delta's active, allocated or reserved bytes.
ByteCount diffGrowth(const DiffResult& result, DiffGrowthMetric metric = DiffGrowthMetric::Active);

// ---- Diff sides ----

// "FILE[@MOMENT]": FILE and the moment (model/landmarks.h: an index, end, peak, peak-reserved, oom, oomN, largest
// or a record_function name), End without one. The suffix after the last '@' is a moment unless it is empty,
// contains '/' or ends like a snapshot file (.pickle, .pkl, .json, .xz): then the whole text is the file. Returns
// false (with `error`) for an empty file name. (memscope-cli diff and the app's --diff name their sides this way.)
bool parseDiffSideSpec(const std::string& text, std::string& path, Moment& moment, std::string& error);
// Puts `moment` of side.snapshot into side.index: EndOfTrace for End, else a state index of the trace side.device
// names (with AllDevices, of the only device that has a trace). Builds that trace's replay into `replay` when the
// moment needs one and the side brings none, and sets side.replay to it (keep `replay` alive for computeDiff).
// False with a one-line `error` naming the side (side.name) and the reason. Any thread.
bool resolveDiffSide(DiffSide& side, const Moment& moment, std::unique_ptr<Replay>& replay, std::string& error);
// "active", "allocated", "reserved".
std::string_view diffGrowthMetricName(DiffGrowthMetric metric);

} // namespace memscope::model
