// Builds the memory timeline's data. See timelinedata.h.
#include "views/timelinedata.h"

#include "style/colors.h"

#include <algorithm>
#include <cassert>

namespace memscope::app {

using namespace memscope::model;

namespace {

    // The segment piece holding each allocation, computed once per build when something needs it.
    const std::vector<TimelineItem>& allocationPieces(TimelineData& data, const Replay& replay)
    {
        if (!data.allocPiece)
            data.allocPiece = std::make_shared<const std::vector<TimelineItem>>(pieceOfAllocations(replay));
        return *data.allocPiece;
    }

    // Colours of the items that have none yet, by the colour mode, as the segment map colours blocks: by address
    // (MemoryViz.js hashes block addresses), by stack, or by the stream of the segment holding the allocation.
    void fillColors(TimelineData& data, const Replay& replay, const Snapshot& snapshot)
    {
        const TimelineItems& allocs = *data.allocs;
        const TimelineItems& pieceItems = *data.pieces;
        const auto& allocations = replay.allocations(); // item k is allocation k, piece item k piece k
        const auto& pieces = replay.segmentPieces();
        auto streamRgb = [&](int64_t stream) { return colors::stream(snapshot.streamNumber(stream)).rgb(); };
        const size_t allocFrom = std::min(data.allocColors.size(), allocs.count());
        // Every new colour is written below, in 2 MiB pages (4.5 M items: 18 MB that 4 KiB faults made slow).
        data.allocColors.setHugePages(true);
        data.allocColors.resizeForOverwrite(allocs.count());
        const std::vector<TimelineItem>* holder = nullptr;
        if (data.colorMode == ColorMode::Stream && allocFrom < allocs.count())
            holder = &allocationPieces(data, replay);
        static const Trace none;
        const auto& traces = snapshot.deviceTraces;
        const Trace& entries = size_t(data.device) < traces.size() ? traces[size_t(data.device)] : none;
        StringId lastText = EmptyString;
        for (size_t k = allocFrom; k < allocs.count(); ++k) {
            switch (data.colorMode) {
            case ColorMode::Allocation:
                data.allocColors[k] = colors::allocation(allocations[k].address).rgb();
                break;
            case ColorMode::Metadata: {
                const int64_t entry = replay.firstEntry() + allocations[k].allocIndex;
                const bool known = allocations[k].allocIndex >= 0 && entry < int64_t(entries.size());
                const StringId text = known ? snapshot.form(entries[size_t(entry)]).userMetadata : EmptyString;
                data.allocColors[k] = colors::metadata(text).rgb();
                // Neighbouring allocations mostly share their text: the legend is searched only when it changes,
                // and holds the first MaxMetadataLegend texts met.
                if (k == allocFrom || text != lastText) {
                    lastText = text;
                    const std::string_view shown = snapshot.str(text);
                    if (data.metadataLegend.size() < TimelineData::MaxMetadataLegend
                        && std::none_of(data.metadataLegend.begin(), data.metadataLegend.end(),
                                        [&](const auto& l) { return l.first == shown; }))
                        data.metadataLegend.emplace_back(std::string(shown), data.allocColors[k]);
                }
                break;
            }
            case ColorMode::Stack:
                data.allocColors[k] = colors::stack(allocations[k].stack).rgb();
                break;
            case ColorMode::Stream: {
                const TimelineItem piece = k < holder->size() ? (*holder)[k] : NoTimelineItem;
                data.allocColors[k] = streamRgb(piece != NoTimelineItem ? pieces[piece].stream : 0);
                break;
            }
            }
        }
        const size_t pieceFrom = std::min(data.pieceColors.size(), pieceItems.count());
        data.pieceColors.resize(pieceItems.count());
        for (size_t k = pieceFrom; k < pieceItems.count(); ++k) {
            switch (data.colorMode) {
            case ColorMode::Allocation:
                data.pieceColors[k] = colors::allocation(pieces[k].address).rgb();
                break;
            case ColorMode::Stack:
                data.pieceColors[k] = colors::stack(pieces[k].stack).rgb();
                break;
            case ColorMode::Stream:
                data.pieceColors[k] = streamRgb(pieces[k].stream);
                break;
            case ColorMode::Metadata: // segments carry none a user set for a tensor
                data.pieceColors[k] = colors::metadata(EmptyString).rgb();
                break;
            }
        }
    }

    // Which items the filters show: empty vectors when the filters hide nothing. With `grown`, the flags the data has
    // stay when they were made for the same filters (an item's stream and pool never change): only the new items'
    // are added.
    void fillVisibility(TimelineData& data, const TimelineDataRequest& request, const Replay& replay,
                        bool grown = false)
    {
        if (!grown || data.hiddenStreams != request.hiddenStreams || data.hiddenPools != request.hiddenPools) {
            data.allocVisible.clear();
            data.pieceVisible.clear();
            data.hiddenStreams = request.hiddenStreams;
            data.hiddenPools = request.hiddenPools;
        }
        if (request.hiddenStreams.empty() && request.hiddenPools.empty())
            return;
        // Few distinct (stream, pool) pairs: remember the last answer rather than look up two sets per item.
        struct Key {
            int64_t stream;
            std::pair<int64_t, int64_t> pool;
            bool operator==(const Key&) const = default;
        };
        auto isVisible = [&](const Key& key) {
            return !request.hiddenStreams.count(key.stream) && !request.hiddenPools.count(key.pool);
        };
        Key lastKey { 0, { -1, -1 } };
        bool lastVisible = isVisible(lastKey);
        auto visibleFor = [&](const Key& key) {
            if (!(key == lastKey)) {
                lastKey = key;
                lastVisible = isVisible(key);
            }
            return lastVisible;
        };
        const auto& pieces = replay.segmentPieces();
        const size_t pieceFrom = std::min(data.pieceVisible.size(), pieces.size());
        data.pieceVisible.resize(pieces.size());
        for (size_t k = pieceFrom; k < pieces.size(); ++k)
            data.pieceVisible[k] = visibleFor({ pieces[k].stream, pieces[k].poolId });
        // An allocation's stream is its alloc entry's; its pool, and the stream of one alive before the trace, come
        // from the segment piece holding it.
        const auto& allocs = replay.allocations();
        const auto& traces = request.document->snapshot->deviceTraces;
        static const Trace none;
        const Trace& entries = size_t(request.device) < traces.size() ? traces[size_t(request.device)] : none;
        const auto& holder = allocationPieces(data, replay);
        const int64_t first = replay.firstEntry();
        const size_t allocFrom = std::min(data.allocVisible.size(), allocs.size());
        data.allocVisible.resize(allocs.size());
        for (size_t k = allocFrom; k < allocs.size(); ++k) {
            const TimelineItem piece = holder[k];
            Key key { 0, { 0, 0 } };
            if (piece != NoTimelineItem)
                key = { pieces[piece].stream, pieces[piece].poolId };
            const int64_t entry = first + allocs[k].allocIndex;
            if (allocs[k].allocIndex >= 0 && entry < int64_t(entries.size()))
                key.stream = request.document->snapshot->stream(entries[size_t(entry)]);
            data.allocVisible[k] = visibleFor(key);
        }
    }

    // `shared` for changing: itself when nothing else holds it, else a copy.
    template <typename T> std::shared_ptr<T> mutableCopy(std::shared_ptr<const T>& shared)
    {
        if (shared.use_count() == 1)
            return std::const_pointer_cast<T>(std::exchange(shared, nullptr));
        return std::make_shared<T>(*shared);
    }

    // The time of states [from, to] of `device`, as Session::timeUsAt gives them: the time of the entry that made
    // the state (state 0 takes the first entry's).
    std::vector<int64_t> stateTimes(const Trace& entries, int64_t from, int64_t to)
    {
        std::vector<int64_t> times;
        times.reserve(size_t(std::max<int64_t>(0, to - from + 1)));
        const int64_t last = int64_t(entries.size()) - 1;
        for (int64_t s = from; s <= to; ++s)
            times.push_back(entries.empty() ? 0 : entries[size_t(std::clamp<int64_t>(s - 1, 0, last))].timeUs);
        return times;
    }

    // The time axis the request asks for: `base`'s when it is of the same states (or, for a growth, extended by
    // the new ones: in place when nothing else holds it), made from the entries otherwise; null when not asked for.
    std::shared_ptr<const StateAxis> timeAxisFor(const TimelineDataRequest& request,
                                                 std::shared_ptr<const StateAxis> base, const Trace& entries,
                                                 int64_t entryCount)
    {
        if (!request.timeAxis)
            return nullptr;
        if (base && base->entryCount() == entryCount)
            return base;
        if (base && base->entryCount() < entryCount && (request.changes & TimelineDataRequest::Grown)) {
            auto axis = mutableCopy(base);
            axis->appendTimes(stateTimes(entries, axis->entryCount() + 1, entryCount));
            return axis;
        }
        return std::make_shared<const StateAxis>(StateAxis::time(stateTimes(entries, 0, entryCount)));
    }

} // namespace

TimelineDataRequest makeTimelineDataRequest(const Session& session, uint8_t changes,
                                            std::shared_ptr<const TimelineData> base, uint64_t revision)
{
    TimelineDataRequest r;
    r.changes = changes;
    r.base = std::move(base);
    r.revision = revision;
    r.document = session.documentPtr();
    r.device = session.device();
    r.colorMode = session.colorMode();
    for (int64_t stream : session.streams())
        if (!session.isStreamVisible(stream))
            r.hiddenStreams.insert(stream);
    for (const auto& pool : session.pools())
        if (!session.isPoolVisible(pool))
            r.hiddenPools.insert(pool);
    r.annotations = session.annotationSpans();
    r.timeAxis = session.timeAxis() == TimeAxis::Time && !session.entries().empty();
    if ((changes & TimelineDataRequest::Grown) && r.base && r.base->allocs) {
        // Only the new entries are looked at for OOMs.
        r.ooms = r.base->ooms;
        const std::vector<int64_t> more = session.oomIndices(r.base->allocs->entryCount);
        r.ooms.insert(r.ooms.end(), more.begin(), more.end());
    } else {
        r.ooms = session.oomIndices();
    }
    return r;
}

std::shared_ptr<const TimelineData> buildTimelineData(TimelineDataRequest request)
{
    const auto lock = request.document->readLock();
    // The base is read too (what did not change is taken from it): a live growth must not extend it meanwhile.
    std::shared_lock<std::shared_mutex> baseLock;
    if (request.base)
        baseLock = request.base->readLock();
    const Replay& replay = request.document->replays[size_t(request.device)];
    const Snapshot& snapshot = *request.document->snapshot;
    static const Trace none;
    const Trace& entries
        = size_t(request.device) < snapshot.deviceTraces.size() ? snapshot.deviceTraces[size_t(request.device)] : none;
    uint8_t changes = request.changes & uint8_t(~TimelineDataRequest::Grown);
    const TimelineData* base = request.base.get();
    if (!base || base->document != request.document || base->device != request.device
        || (changes & TimelineDataRequest::Items))
        changes = TimelineDataRequest::Items | TimelineDataRequest::Colors | TimelineDataRequest::Visibility;
    if (base && base->colorMode != request.colorMode)
        changes |= TimelineDataRequest::Colors;

    auto data = std::make_shared<TimelineData>();
    data->document = request.document;
    data->device = request.device;
    data->colorMode = request.colorMode;
    data->annotations = std::move(request.annotations);
    data->ooms = std::move(request.ooms);
    data->timeAxis = timeAxisFor(request, base && !(changes & TimelineDataRequest::Items) ? base->timeAxis : nullptr,
                                 entries, replay.entryCount());
    if (changes & TimelineDataRequest::Items) {
        const Document::FirstItems& first = request.document->firstItems;
        if (first.device == request.device && first.allocs && first.allocs->entryCount == replay.entryCount()) {
            data->allocs = first.allocs; // built beside the replay (makeDocument)
            data->pieces = first.pieces;
        } else {
            data->allocs = std::make_shared<const TimelineItems>(TimelineItems::fromAllocations(replay));
            data->pieces = std::make_shared<const TimelineItems>(TimelineItems::fromSegments(replay));
        }
    } else {
        data->allocs = base->allocs;
        data->pieces = base->pieces;
        data->allocPiece = base->allocPiece;
    }
    if (changes & TimelineDataRequest::Colors) {
        fillColors(*data, replay, snapshot);
    } else {
        data->allocColors = base->allocColors;
        data->pieceColors = base->pieceColors;
        data->metadataLegend = base->metadataLegend;
    }
    if (changes & TimelineDataRequest::Visibility) {
        fillVisibility(*data, request, replay);
    } else {
        data->allocVisible = base->allocVisible;
        data->pieceVisible = base->pieceVisible;
        data->hiddenStreams = base->hiddenStreams;
        data->hiddenPools = base->hiddenPools;
    }
    const bool samePicture = !(changes & (TimelineDataRequest::Items | TimelineDataRequest::Colors))
        && data->allocVisible == base->allocVisible && data->pieceVisible == base->pieceVisible;
    data->revision = samePicture ? base->revision : request.revision;
    return data;
}

void growTimelineData(TimelineData& data, TimelineDataRequest request)
{
    assert(data.document == request.document && data.device == request.device);
    const Replay& replay = data.replay();
    const Snapshot& snapshot = *data.document->snapshot;
    static const Trace none;
    const Trace& entries
        = size_t(data.device) < snapshot.deviceTraces.size() ? snapshot.deviceTraces[size_t(data.device)] : none;
    // Items only append: their colours, filter flags and pieces stay, the new ones get theirs.
    auto allocs = mutableCopy(data.allocs);
    auto pieces = mutableCopy(data.pieces);
    allocs->extendAllocations(replay);
    pieces->extendSegments(replay);
    data.allocs = std::move(allocs);
    data.pieces = std::move(pieces);
    if (data.allocPiece) {
        auto holder = mutableCopy(data.allocPiece);
        extendPieceOfAllocations(replay, *data.pieces, *holder);
        data.allocPiece = std::move(holder);
    }
    data.annotations = std::move(request.annotations);
    data.ooms = std::move(request.ooms);
    request.changes |= TimelineDataRequest::Grown;
    data.timeAxis = timeAxisFor(request, std::exchange(data.timeAxis, nullptr), entries, replay.entryCount());
    const bool recolor = data.colorMode != request.colorMode;
    if (recolor) {
        data.colorMode = request.colorMode;
        data.allocColors.clear();
        data.pieceColors.clear();
        data.metadataLegend.clear();
    }
    const bool refilter = data.hiddenStreams != request.hiddenStreams || data.hiddenPools != request.hiddenPools;
    fillColors(data, replay, snapshot);
    fillVisibility(data, request, replay, true);
    // The plot renders only the new columns unless the picture changed: other colours, or other filters.
    if (recolor || refilter)
        data.revision = request.revision;
}

} // namespace memscope::app
