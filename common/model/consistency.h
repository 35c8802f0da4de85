// The consistency check every load runs (io/snapshotio.cpp): does the final state obey the rules PyTorch's
// allocator keeps when it writes a snapshot? Blocks tile their segment exactly, no size is negative, no block is
// larger than its segment, segments of one device do not overlap, each segment's allocated/active/requested sizes
// are the sums over its blocks, and no trace entry has a negative size. What breaks a rule is counted per kind in a
// WarningCollector with its first example; nothing is changed or refused. Whether the trace replays to the final
// state is the replay's to say (replayWarnings, model/replay.h), where a replay is built anyway.
//
// Pure functions of an immutable Snapshot: any thread. Cost: one pass over segments and blocks; the entries are checked
// one by one by whoever visits them anyway (checkTraceEntry).
#pragma once

#include "model/loadwarning.h"
#include "model/snapshot.h"

#include <span>

namespace memscope::model {

class Replay;

// Adds to `out` what the final state and the trace entries of `snapshot` break: checkFinalState, then
// checkTraceEntry for every entry.
void checkConsistency(const Snapshot& snapshot, WarningCollector& out);
// The rules of segments and blocks alone (what a load runs after building; the builder checks the entries).
void checkFinalState(const Snapshot& snapshot, WarningCollector& out);

// The rule of one trace entry: its size is not negative. For whoever visits the entries anyway (the snapshot builder,
// io/snapshotbuilder.cpp), so that the check costs no pass of its own over millions of entries.
void negativeTraceSize(const Snapshot& snapshot, const TraceEntry& entry, size_t device, size_t index,
                       WarningCollector& out);
inline void checkTraceEntry(const Snapshot& snapshot, const TraceEntry& entry, size_t device, size_t index,
                            WarningCollector& out)
{
    if (entry.size < 0) [[unlikely]]
        negativeTraceSize(snapshot, entry, device, index, out);
}

// The inconsistencies the replays met while undoing the trace from the final state (Replay::warnings()), as one
// TraceDoesNotReplay kind with the first one's device, entry and reason. Costs nothing more than reading them.
void addReplayWarnings(const Snapshot& snapshot, std::span<const Replay> replays, WarningCollector& out);

} // namespace memscope::model
