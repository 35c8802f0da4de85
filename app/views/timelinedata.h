// The memory timeline's data: for one device of a Document, the stacked items of both modes (allocations and
// segment pieces, model/timeline.h), their colours by the Session's colour mode, which of them the stream and pool
// filters show, the segment piece holding each allocation, the annotations and the OOM marks, and the time axis
// (each state's time: O(entries) to make, so that it is made here and not on the GUI thread). Shared
// (std::shared_ptr<const TimelineData>): the timeline view paints it, and jobs on other threads read it while they
// hold its read lock (TimelineData::readLock; and the document's, for the replay). Immutable once built, but for a
// live document's growth, which extends it in place on the GUI thread under its write lock (growTimelineData), so
// that no reader sees it change. buildTimelineData() makes it from a TimelineDataRequest, a plain copy of what it
// needs from the Session, so that it runs in a job off the GUI thread (views/timelineview.h starts those jobs and
// drops stale results).
#pragma once

#include "document/session.h"
#include "model/timeline.h"
#include "views/timelinegeometry.h"

#include <cstdint>
#include <memory>
#include <set>
#include <shared_mutex>
#include <utility>
#include <vector>

namespace memscope::app {

struct TimelineData {
    std::shared_ptr<const Document> document; // keeps the replay alive
    int device = -1;
    // Changes whenever what the plot shows changes (items of another device, colours, visibility); kept when only
    // entries were appended (a live document grew) or only the annotations changed, so that the plot renders only
    // what is new.
    uint64_t revision = 0;
    ColorMode colorMode = ColorMode::Allocation;
    std::shared_ptr<const model::TimelineItems> allocs, pieces;
    // Per item. GrowingArrays: a live document's growth appends to them, which a std::vector would copy whole now
    // and then (80 MB of colours at 20 M allocations, on the GUI thread).
    model::GrowingArray<uint32_t> allocColors, pieceColors;
    model::GrowingArray<uint8_t> allocVisible, pieceVisible; // empty: everything visible
    // The streams and pools hidden when they were made (the request's), so that a growth adds the new items' flags.
    std::set<int64_t> hiddenStreams;
    std::set<std::pair<int64_t, int64_t>> hiddenPools;
    // The segment piece holding each allocation (model::pieceOfAllocations), or null when nothing built needed it
    // (the stream colours and the filters do): TimelineView computes it on demand then.
    std::shared_ptr<const std::vector<model::TimelineItem>> allocPiece;
    std::shared_ptr<const std::vector<AnnotationSpan>> annotations; // the Session's (never null)
    std::vector<int64_t> ooms; // state indices
    // Colour by user metadata: each distinct text of the allocations and its colour, in the order first met ("" for
    // none), the first MaxMetadataLegend of them, for the header's legend.
    static constexpr size_t MaxMetadataLegend = 64;
    std::vector<std::pair<std::string, uint32_t>> metadataLegend;
    // The x axis in time (each state's time_us) when the Session asks for it; null otherwise (the index axis costs
    // nothing to make: TimelineView makes it).
    std::shared_ptr<const StateAxis> timeAxis;

    const model::Replay& replay() const { return document->replays[size_t(device)]; }
    const model::TimelineItems& items(bool segments) const { return segments ? *pieces : *allocs; }
    const model::GrowingArray<uint8_t>& visible(bool segments) const { return segments ? pieceVisible : allocVisible; }
    const model::GrowingArray<uint32_t>& colors(bool segments) const { return segments ? pieceColors : allocColors; }
    bool filtered() const { return !allocVisible.empty() || !pieceVisible.empty(); }

    // Held by a job on another thread while it reads the data (a plot's render, a build from it as its base): a live
    // growth waits for it. Its own and not the document's, so that the jobs that read only the document (a call tree
    // rebuilt at every cursor move, insights) never hold off the timeline's growth.
    std::shared_lock<std::shared_mutex> readLock() const { return std::shared_lock(m_lock.mutex); }
    // The growth's side (GUI thread): owns nothing while a job reads the data.
    std::unique_lock<std::shared_mutex> tryWriteLock() const
    {
        return std::unique_lock(m_lock.mutex, std::try_to_lock);
    }

private:
    // Not copied with the data: a copy is another object, which no job reads yet.
    struct Lock {
        mutable std::shared_mutex mutex;
        Lock() = default;
        Lock(const Lock&) { }
        Lock& operator=(const Lock&) { return *this; }
    };
    Lock m_lock;
};

// What a build starts from: what changed since `base` (the data shown now, or null), and a copy of the Session's
// state the data depends on. Made on the GUI thread (makeTimelineDataRequest); built on any thread.
struct TimelineDataRequest {
    enum Change : uint8_t {
        Items = 1, // another device, or a new document: everything is built again
        Colors = 2, // the colour mode
        Visibility = 4, // the stream and pool filters
        Grown = 8, // a live document grew: items extended, colours and visibility of the new items added
        Axis = 16, // the time axis was asked for, or no longer
    };
    uint8_t changes = Items | Colors | Visibility;
    std::shared_ptr<const TimelineData> base;
    uint64_t revision = 0; // the new data's revision, when it differs from base's
    std::shared_ptr<const Document> document;
    int device = -1;
    ColorMode colorMode = ColorMode::Allocation;
    // The device's streams and pools the Session hides (Session::streams(), pools(): an allocation's stream is its
    // segment's).
    std::set<int64_t> hiddenStreams;
    std::set<std::pair<int64_t, int64_t>> hiddenPools;
    std::shared_ptr<const std::vector<AnnotationSpan>> annotations;
    std::vector<int64_t> ooms;
    bool timeAxis = false; // the time axis is asked for (and the device has entries)
};

// A request for the Session's state now. GUI thread (reads the Session).
TimelineDataRequest makeTimelineDataRequest(const Session& session, uint8_t changes,
                                            std::shared_ptr<const TimelineData> base, uint64_t revision);

// Builds the data a request asks for, reusing from its base what did not change; returns the base itself when
// nothing the data holds changed. Holds the document's read lock while it reads (a live document does not grow
// meanwhile). Any thread. Not for a Grown request (growTimelineData).
std::shared_ptr<const TimelineData> buildTimelineData(TimelineDataRequest request);

// A live document grew: extends `data` in place by its new entries (items alive at the old end updated, new items
// appended with their colours and filter flags, the segment piece of each new allocation, OOMs, annotations, the time
// axis), O(new entries + items alive at the old end) whatever the colours and filters. `request` is
// makeTimelineDataRequest(session, TimelineDataRequest::Grown, data, revision) for `data`'s document and device. GUI
// thread (the document's writer), holding the data's write lock (TimelineData::tryWriteLock): no job reads the data
// meanwhile, so that nothing is copied however many jobs hold it; one that reads it later (a plot job still queued)
// finds at every state it was asked for what it would have found before, as entries are only appended. The items are
// copied only when another TimelineData shares them (a build that changed only colours or filters reuses its base's),
// as that one's colours and filters are of fewer items. The revision changes when the picture of the states before does
// (other colours, or the filters).
void growTimelineData(TimelineData& data, TimelineDataRequest request);

} // namespace memscope::app
