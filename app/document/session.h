// One opened snapshot and the small shared state every view of it observes: the device shown, the cursor (a
// trace index), the selected and hovered allocation, stream/pool filters and the time axis. Views never call each
// other: they change the Session and repaint on its signals (the hotspot pattern). GUI thread only; the Document
// it shares is immutable and may be read from worker threads.
#pragma once

#include "document/replaylabelling.h"
#include "model/landmarks.h"
#include "model/replay.h"
#include "model/snapshot.h"
#include "model/timeline.h"

#include <QObject>
#include <QString>
#include <QTimer>

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <utility>
#include <vector>

namespace memscope::app {

// Everything derived once from a loaded file, off the GUI thread: the snapshot and one replay per device.
// A live job's Document grows instead (document/livedocument.h): on the GUI thread, between events, and never while
// a reader on another thread holds readLock(). Work on other threads takes readLock() for as long as it reads.
struct Document {
    QString path; // as opened (a file, or a ":/" resource)
    std::shared_ptr<const model::Snapshot> snapshot;
    std::vector<model::Replay> replays; // index = device; a device without a trace has an empty replay
    // What was wrong with the file: the snapshot's load warnings, then what its replays could not reconcile with
    // the final state (model/consistency.h). Set by makeDocument; a live document has none.
    std::vector<model::LoadWarning> warnings;
    std::shared_ptr<std::shared_mutex> growth; // set on live documents only
    // The timeline's items (model/timeline.h) of the device a Session shows first, built by makeDocument beside
    // that device's replay (its forward pass), so that the timeline does not build them after the load. Null where
    // not built (a live document) or for another device.
    struct FirstItems {
        int device = -1;
        std::shared_ptr<const model::TimelineItems> allocs, pieces;
    } firstItems;
    // Per device: the trace indices of its oom entries (model::oomEntries), found by makeDocument, so that opening
    // a file's window and its timeline do not each read every entry again on the GUI thread (13.4 M entries: 50 ms
    // a pass). Empty for a live document, whose trace grows.
    std::vector<std::vector<int64_t>> oomEntries;
    // A file's replays are labelled on a thread of their own after makeDocument (document/replaylabelling.h); null
    // where they are labelled already (a live document). Declared last: it goes first, stopping that thread before
    // the replays and the snapshot it reads.
    std::unique_ptr<ReplayLabelling> labelling;
    // Whether every replay's labels are there (model::Replay::labelled), or will never be.
    bool labelsDone() const { return !labelling || labelling->isDone(); }

    // Holds off growth while held (an empty lock for a file's Document, which never changes).
    std::shared_lock<std::shared_mutex> readLock() const
    {
        return growth ? std::shared_lock<std::shared_mutex>(*growth) : std::shared_lock<std::shared_mutex>();
    }
    // The growth's side of that lock, for the GUI thread to change what readers read (the document, and what views
    // derive from it and share with jobs). Never waits: the lock returned owns nothing while a reader holds the
    // document (and for a file's Document, which never grows).
    std::unique_lock<std::shared_mutex> tryWriteLock() const
    {
        return growth ? std::unique_lock<std::shared_mutex>(*growth, std::try_to_lock)
                      : std::unique_lock<std::shared_mutex>();
    }
    bool isLive() const { return growth != nullptr; }
};

// The devices with a segment or a trace entry, ascending, among the `deviceCount` first (Session::devices()).
std::vector<int> devicesWithData(const model::Snapshot& snapshot, int deviceCount);

// Builds a Document (replays of every device). Pure; any thread. `progress`, when given, is called now and then
// with the share done, in [0, 1]; when it returns false the build stops and the result is null.
std::shared_ptr<const Document> makeDocument(QString path, std::shared_ptr<const model::Snapshot> snapshot,
                                             const std::function<bool(double done)>& progress = {});

// A named time range from external_annotations (record_function START/END pairs), in state indices of one device.
struct AnnotationSpan {
    QString name;
    int64_t begin = 0; // state index at START
    int64_t end = 0; // state index at END (== begin for an unmatched START)
    int64_t beginUs = 0;
    int64_t endUs = 0;
};

enum class TimeAxis : uint8_t { Index, Time };

// How the views colour allocations (style/colors.h): one colour per allocation (by address, as MemoryViz.js), per
// call stack, or per stream. The timeline and the segment map follow the Session's, so both say the same.
enum class ColorMode : uint8_t { Allocation, Stack, Stream, Metadata };

class Session : public QObject {
    Q_OBJECT
public:
    explicit Session(std::shared_ptr<const Document> document, QObject* parent = nullptr);

    const Document& document() const { return *m_document; }
    std::shared_ptr<const Document> documentPtr() const { return m_document; }
    const model::Snapshot& snapshot() const { return *m_document->snapshot; }

    // Devices with a segment or a trace entry; the device shown.
    std::vector<int> devices() const;
    int device() const { return m_device; }
    void setDevice(int device);
    const model::Replay& replay() const { return m_document->replays[size_t(m_device)]; }
    const model::Trace& entries() const;
    int64_t entryCount() const { return replay().entryCount(); } // states are 0..entryCount()

    // The cursor: a state index, 0 (before the first entry) .. entryCount() (the snapshot's final state).
    int64_t cursor() const { return m_cursor; }
    void setCursor(int64_t index); // clamps; emits cursorChanged when it moves
    // The allocator state at the cursor, computed on demand and cached until the cursor or device changes.
    const model::ReplayState& state() const;

    // Time of a state index: time_us of the entry that led to it (entry index - 1), or of the first entry for 0.
    int64_t timeUsAt(int64_t index) const;
    // The first state index whose time is >= timeUs.
    int64_t indexAtTimeUs(int64_t timeUs) const;

    // A live Document grew (LiveDocument::flush): the cursor follows the new end when it was at the old one, and
    // grown() tells the views to take in the new entries without losing what the user set up.
    void documentGrew();
    // Whether the cursor follows the end of a live document (it is at the end); moving it elsewhere pauses
    // following, moving it back to the end resumes it.
    bool isFollowing() const { return m_cursor >= entryCount(); }
    // Whether the document may still grow: a live one until its job has ended (LiveWindow says so); views keep
    // room for the growth meanwhile (the timeline's domain runs ahead of the data).
    bool isGrowing() const { return m_growing; }
    void setGrowing(bool growing);

    TimeAxis timeAxis() const { return m_timeAxis; }
    void setTimeAxis(TimeAxis axis);

    ColorMode colorMode() const { return m_colorMode; }
    void setColorMode(ColorMode mode); // emits colorModeChanged

    // Selection (pinned, e.g. by a click) and hover, as allocations of the current device's replay.
    model::AllocationId selection() const { return m_selection; }
    void setSelection(model::AllocationId id);
    model::AllocationId hovered() const { return m_hovered; }
    void setHovered(model::AllocationId id);
    // The allocation whose details the details pane shows: the hovered one, else the selection.
    model::AllocationId focused() const { return m_hovered != model::NoAllocation ? m_hovered : m_selection; }

    // Filters: streams (raw handles) and pools hidden from every view. Empty sets show everything.
    bool isStreamVisible(int64_t stream) const { return !m_hiddenStreams.count(stream); }
    bool isPoolVisible(std::pair<int64_t, int64_t> pool) const { return !m_hiddenPools.count(pool); }
    void setStreamVisible(int64_t stream, bool visible);
    void setPoolVisible(std::pair<int64_t, int64_t> pool, bool visible);
    // Streams and pools present on the current device.
    std::vector<int64_t> streams() const;
    std::vector<std::pair<int64_t, int64_t>> pools() const;

    // PyTorch's frame filter (torch/cuda/_memory_viz.py _frame_filter) applied in stack displays; on by default.
    bool frameFilter() const { return m_frameFilter; }
    void setFrameFilter(bool on);

    // The record_function ranges of the current device, by begin (model/landmarks.h), without torch.compile's own
    // ones unless compilerAnnotationsShown(). Kept and brought up to date as a live document grows (only what is new
    // is read: model::AnnotationTracker); annotations() is valid until the next call of either.
    std::shared_ptr<const std::vector<AnnotationSpan>> annotationSpans() const;
    const std::vector<AnnotationSpan>& annotations() const { return *annotationSpans(); }
    // torch.compile's internal record_function ranges (model::isCompilerAnnotation) are hidden by default.
    bool compilerAnnotationsShown() const { return m_compilerAnnotations; }
    void setCompilerAnnotationsShown(bool shown); // emits filterChanged
    // State indices right after each oom entry of the current device (from entry `fromEntry` on).
    std::vector<int64_t> oomIndices(int64_t fromEntry = 0) const;

    // Starts the replays' labels (Document::labelling) if they are not under way or there.
    void startLabels();
    static constexpr int LabelsAtTheLatestMs = 3000; // after the Session is made, if nobody started them
    // Waits for the replays' labels and emits labelled() now if it is still due (pictures that show them).
    void waitForLabels();

    // Text for people. Names follow PyTorch's viewer: b<hex address>_<version> for blocks, s<...> for segments.
    QString allocationName(model::AllocationId id) const;
    // Size, address, stream, pool, times, stack. `shortPaths`: files of installed packages without the folders up to
    // site-packages/ or dist-packages/ ("torch/nn/functional.py"), so a narrow pane shows whole frames.
    QString describeAllocation(model::AllocationId id, bool shortPaths = false) const;
    // The failed request of the OOM entry just before the cursor (the state after an OOM), for the details pane: its
    // size, stream, the device's free memory then and its stack. "" when the entry before the cursor is no OOM.
    QString describeOomAtCursor(bool shortPaths = false) const;
    QString stackText(model::StackId stack, bool shortPaths = false) const; // one frame per line, innermost first
    // The user metadata of an allocation's alloc entry (EmptyString: none, or made before the trace), and whether
    // any entry of the device shown has some (torch.cuda.memory._set_memory_metadata).
    model::StringId userMetadata(model::AllocationId id) const;
    // The stack the call stacks file an allocation under: its own, or, for one made in backward without a stack of
    // its own, the forward pass its alloc entry names (forward_frames, anomaly mode).
    model::StackId treeStack(model::AllocationId id) const;
    bool hasUserMetadata() const;
    // What the device shown held before its trace's first entry, said for people: "" when the trace starts with no
    // memory in use (or there is no trace); else how many blocks and bytes, and why (PyTorch's history ring
    // overwrote older events, allocator_settings.trace_alloc_overflowed, or recording began late).
    QString aliveBeforeTheTrace() const;
    static QString formatBytes(int64_t bytes); // "1.5 MiB"

Q_SIGNALS:
    void deviceChanged(int device);
    void cursorChanged(int64_t index);
    void selectionChanged(memscope::model::AllocationId id);
    void hoveredChanged(memscope::model::AllocationId id);
    void filterChanged();
    void timeAxisChanged();
    void colorModeChanged();
    void growingChanged(bool growing);
    // The live Document grew from `previousCount` entries of the current device (emitted before the cursor moves).
    void grown(int64_t previousCount);
    // The replays' labels are there (Document::labelling): Replay::largestFree() and the inactive blocks' requests.
    // Once per Session, and only for a document that was not labelled when the Session was made.
    void labelled();

private:
    std::shared_ptr<const Document> m_document;
    int m_device = 0;
    int64_t m_cursor = 0;
    TimeAxis m_timeAxis = TimeAxis::Index;
    ColorMode m_colorMode = ColorMode::Allocation;
    model::AllocationId m_selection = model::NoAllocation;
    model::AllocationId m_hovered = model::NoAllocation;
    std::set<int64_t> m_hiddenStreams;
    std::set<std::pair<int64_t, int64_t>> m_hiddenPools;
    bool m_frameFilter = true;
    bool m_compilerAnnotations = false;
    bool m_growing = false;
    int64_t m_knownCount = 0; // entryCount() when the views last heard of it
    mutable model::ReplayState m_state;
    mutable bool m_stateValid = false;
    // annotationSpans(): the tracker (null: start again), the spans, and for each of the tracker's ranges its span
    // (-1: hidden).
    mutable std::unique_ptr<model::AnnotationTracker> m_annotationTracker;
    mutable std::shared_ptr<std::vector<AnnotationSpan>> m_annotationSpans;
    mutable std::vector<int32_t> m_spanOfRange;
    QTimer* m_labelPoll = nullptr; // until the document's labels are there
};

} // namespace memscope::app

Q_DECLARE_METATYPE(memscope::model::AllocationId)
Q_DECLARE_METATYPE(memscope::app::ColorMode)
