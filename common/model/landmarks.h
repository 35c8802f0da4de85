// Landmarks of one device's trace: the moments worth jumping to (the peaks of allocated and reserved bytes, each
// OOM, the largest allocation, the record_function annotations), the moment a file opens at, and the "moment" specs
// that name them wherever a state index is accepted (`memscope --screenshot --at peak`, Compare Two Moments,
// `memscope-cli diff A@peak B@oom`). The app's Go menu, the insights and the command line all resolve moments here,
// so a peak is the same index everywhere: the replay's (model/replay.h), as `memscope-cli info` prints it.
// Pure functions of an immutable Snapshot and Replay; any thread.
#pragma once

#include "model/replay.h"
#include "model/snapshot.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace memscope::model {

// The first state index whose time is at or after `timeUs`: state i follows entry i - 1, so it is one past the first
// entry at or after that time (0 when the first entry is already there). O(log n).
int64_t stateIndexAtTime(const Trace& trace, int64_t timeUs);

// One record_function range (external_annotations START/END of one name), in state indices of one device.
struct AnnotationRange {
    std::string name;
    int64_t begin = 0; // state index at START
    int64_t end = 0; // state index at END (== begin for a START without END)
    int64_t beginUs = 0;
    int64_t endUs = 0;
    bool closed = false; // an END was found
};

// The annotations of `device`, START paired with the latest open START of the same name (record_function nests),
// sorted by begin (stable). O(annotations × log n), less when they come in time order (AnnotationTracker).
std::vector<AnnotationRange> annotationRanges(const Snapshot& snapshot, int device);

// annotationRanges() kept up to date while a live document grows (its annotations and its trace are only appended
// to): update() reads the annotations added since the last call, and looks again only at the ranges an index of which
// was not known yet (a time past the trace's last entry, or past `limit`, so clamped). A growth then costs
// O(new annotations + those ranges) instead of every annotation again: a live job that opens a range per step has
// hundreds of thousands of them by 20 M entries. After any update, ranges() equals what annotationRanges() (with its
// indices clamped to `limit`) gives for the same snapshot, provided the trace's times do not go backwards (a
// binary search on a trace that does is answered by its partition point, which may move as it grows).
class AnnotationTracker {
public:
    explicit AnnotationTracker(int device)
        : m_device(device)
    {
    }

    // What an update changed: the ranges from `from` on are new or moved (ranges() is sorted again from there); before
    // it, only the indices (begin, end) of the ranges listed in `changed` did. `from` == ranges().size() and nothing
    // `changed`: nothing.
    struct Change {
        size_t from = 0;
        std::vector<size_t> changed;
        bool any(size_t count) const { return from < count || !changed.empty(); }
    };
    // Reads the annotations of `snapshot` added since the last call (the same snapshot, grown), state indices clamped
    // to `limit` (at most the trace's length: the states known).
    Change update(const Snapshot& snapshot, int64_t limit);
    const std::vector<AnnotationRange>& ranges() const { return m_ranges; }
    std::vector<AnnotationRange> takeRanges() && { return std::move(m_ranges); }

private:
    enum Unknown : uint8_t { BeginUnknown = 1, EndUnknown = 2 };
    int m_device;
    size_t m_read = 0; // snapshot.annotations read
    std::vector<AnnotationRange> m_ranges; // sorted by (begin, sequence)
    std::vector<uint32_t> m_sequence; // m_ranges[i]'s order of creation
    std::vector<uint32_t> m_position; // creation order -> index in m_ranges
    std::vector<uint8_t> m_unknown; // creation order -> which of its indices are not known yet (Unknown)
    std::vector<uint32_t> m_pending; // the ranges (creation order) with an index not known yet
    std::unordered_map<std::string, std::vector<uint32_t>> m_open; // name -> open ranges (sequence), latest last
    size_t m_hint = 0; // the last search's answer, where the next one starts (annotations come in time order)
};

// Whether a record_function name is one torch.compile gives its own machinery rather than one the user wrote:
// Dynamo's "Torch-Compiled Region: N/M" and "TorchDynamo Cache Lookup", AOTAutograd's "CompiledFunction",
// "CompiledFunctionBackward" and "AOTDispatcher ..." wrappers, Inductor's "## Call CompiledFxGraph <hash> ##" (and any
// other "## ... ##" marker), "Pregraph bytecode". Views hide them by default, as desktop-memory-viz does.
bool isCompilerAnnotation(std::string_view name);

// Entry indices of the oom entries of `trace` from entry `from` on, in order.
std::vector<int64_t> oomEntries(const Trace& trace, size_t from = 0);

// The largest allocation of a replay (block bytes, then requested bytes; the earliest on ties), or NoAllocation.
AllocationId largestAllocation(const Replay& replay);

// ---- Moments ----

enum class MomentKind : uint8_t {
    Index, // a state index
    End, // the end of the trace (for a diff side: the snapshot's own final state)
    PeakAllocated, // "peak", "peak-allocated": the first state with the most allocated bytes
    PeakReserved, // "peak-reserved"
    Oom, // "oom" (the first), "oom2", "oom-2" ...: the state right after the Nth oom entry
    Largest, // "largest": the state right after the largest allocation's alloc
    Annotation, // any other text: the START of the first record_function range of that name ("NAME:end": its END)
    Count
};

struct Moment {
    MomentKind kind = MomentKind::End;
    int64_t number = 0; // Index: the state index; Oom: which OOM, from 1
    std::string name; // Annotation: the record_function name as given (maybe with ":end")
    bool operator==(const Moment&) const = default;
};

// Reads a moment spec. Never fails for non-empty text: what is no number or keyword names an annotation. Empty text
// gives nullopt.
std::optional<Moment> parseMoment(std::string_view text);
// Whether `text` would parse as a number or a keyword (not as an annotation name).
bool isMomentKeyword(std::string_view text);
// The spec again ("peak", "oom3", "1234", "end", the annotation's name).
std::string momentSpec(const Moment& moment);

struct ResolvedMoment {
    bool ok = false;
    int64_t index = 0; // a state index in [0, replay.entryCount()]
    std::string error; // when !ok: one line naming what was not found
    std::string why; // a few words saying what the index is ("the peak of allocated bytes", "OOM 1 of 3")
    ByteCount bytes = 0; // the peak's bytes, the failed request of an OOM, the largest allocation's block bytes
};

// The state index `moment` names in the trace of `device` (its replay). End resolves to entryCount().
ResolvedMoment resolveMoment(const Moment& moment, const Snapshot& snapshot, const Replay& replay);

// Where a file opens: the first OOM when there is one (what a user with an OOM came for), else the end of the trace
// (the state the snapshot itself holds). `why` says which, for the status line.
ResolvedMoment openingMoment(const Snapshot& snapshot, const Replay& replay);
// The same, given the trace indices of the replay's device's oom entries (oomEntries of its trace), which a caller
// that keeps them saves a pass over every entry.
ResolvedMoment openingMoment(const Snapshot& snapshot, const Replay& replay, std::span<const int64_t> ooms);

} // namespace memscope::model
