// LiveDocument (livedocument.h): appends to a Document in place, on the GUI thread.
#include "document/livedocument.h"

#include "model/eventtrace.h"

#include <algorithm>
#include <cstddef>
#include <mutex>

namespace memscope::app {

using namespace memscope::model;

LiveDocument::LiveDocument(QString path, const Snapshot& initial, int deviceCount)
    : m_document(std::make_shared<Document>())
    , m_snapshot(std::make_shared<Snapshot>())
{
    Snapshot& s = *m_snapshot;
    m_builder = std::make_unique<viewer::RecordingBuilder>(s);
    m_builder->copyState(initial); // the join state, its stacks interned again into this document's own tables
    const int devices = std::max({ 1, deviceCount, s.deviceCount() });
    s.deviceTraces.assign(size_t(devices), {});
    s.hasDeviceTraces = true;
    m_extenders.resize(size_t(devices));
    m_document->path = std::move(path);
    m_document->growth = std::make_shared<std::shared_mutex>();
    m_document->replays.resize(size_t(devices));
    for (int d = 0; d < devices; ++d)
        m_extenders[size_t(d)].start(m_document->replays[size_t(d)], s, d);
    m_document->snapshot = m_snapshot;
}

LiveDocument::LiveDocument(QString path, LiveDocument& previous)
    : LiveDocument(std::move(path), *previous.m_snapshot, int(previous.m_extenders.size()))
{
    adoptStacksAndQueue(previous);
    // Its address versions go on; its streams are this one's already (the join state lists them, in order).
    m_builder->continueNumbering(*previous.m_builder);
}

void LiveDocument::adoptStacksAndQueue(LiveDocument& from)
{
    m_builder->adoptStacks(*from.m_builder);
    for (auto& delta : from.m_pendingDefinitions)
        m_pendingDefinitions.push_back(std::move(delta));
    from.m_pendingDefinitions.clear();
    from.m_ownDefinitions = nullptr;
    for (Batch& batch : from.m_queue)
        m_queue.push_back(std::move(batch));
    m_queued += from.m_queued;
    from.m_queue.clear();
    from.m_queued = 0;
}

namespace {

    // Pseudo agent ids for stacks that come from snapshots rather than from the agent (whose ids are the restart
    // count in the high half and the agent's id in the low one: far below these).
    constexpr uint64_t EarlierStacks = uint64_t(1) << 62;
    constexpr uint64_t CurrentStacks = uint64_t(1) << 61;

    std::vector<LiveDocument::StackFrame> framesOf(const Snapshot& s, StackId id)
    {
        std::vector<LiveDocument::StackFrame> out;
        for (const FrameId* f = s.stackBegin(id); f != s.stackEnd(id); ++f) {
            const Frame& fr = s.frame(*f);
            out.push_back({ std::string(s.str(fr.name)), std::string(s.str(fr.filename)), int32_t(fr.line.bits()) });
        }
        return out;
    }

    // The Recorder's entries carry the agent's pool ids, two int32s; a snapshot's are PyTorch's MempoolId_t, two
    // unsigned counters from 1 (model/snapshot.h) that fit them in any real job.
    void setPool(LiveDocument::Entry& e, std::pair<int64_t, int64_t> pool)
    {
        e.poolFirst = int32_t(pool.first);
        e.poolSecond = int32_t(pool.second);
    }

    // Synthetic entries that turn `from` into `to` (two states of one device, from two sources: the earlier file
    // and the live recording), by the engine that does it after a resync (model::EventTrace::resync): removals,
    // then additions, then the free blocks whose stale requests are not yet `to`'s. Stacks of `from` are named
    // `fromStacks | id`, those of `to` `toStacks | id`; as the two name stacks in different tables, a block is
    // "the same" by its place, size, request and state only.
    std::vector<LiveDocument::Entry> bridge(const ReplayState& from, const ReplayState& to, int device, int64_t timeUs,
                                            uint64_t fromStacks, uint64_t toStacks)
    {
        std::vector<EventTrace::Device> start(size_t(device) + 1), target(size_t(device) + 1);
        start[size_t(device)] = EventTrace::deviceOf(from, fromStacks);
        target[size_t(device)] = EventTrace::deviceOf(to, toStacks);
        EventTrace engine;
        engine.setState(std::move(start));
        EventTrace::Resync how;
        how.startUs = how.timeUs = uint64_t(timeUs);
        how.compareStacks = false;
        // (The earlier file's unmapped space is the replay's that reads these entries, not the state's.)
        how.unmappedKnown = false;
        std::vector<LiveDocument::Entry> out; // (the engine's events are the Recorder's entries: one type)
        engine.resync(std::move(target), how, out);
        return out;
    }

    void copyTables(const Snapshot& from, Snapshot& to)
    {
        // Interning every string in id order gives every string the same id in the copy.
        for (uint32_t id = 1; id < from.strings.size(); ++id)
            to.strings.intern(from.str(StringId { id }));
        to.frames = from.frames;
        to.stackOffsets = from.stackOffsets;
        to.stackFrames = from.stackFrames;
    }

} // namespace

void LiveDocument::appendReplayed(const Snapshot& s, const Replay& replay, uint64_t base)
{
    for (uint32_t k = 1; k < s.stackCount(); ++k)
        defineStack(base | k, framesOf(s, StackId { k }));
    const int d = replay.device();
    if (size_t(d) >= s.deviceTraces.size())
        return;
    const auto& trace = s.deviceTraces[size_t(d)];
    std::vector<Entry> entries;
    entries.reserve(size_t(replay.entryCount()));
    const auto& pieces = replay.segmentPieces();
    size_t nextPiece = 0;
    for (int64_t j = 0; j < replay.entryCount(); ++j) {
        const TraceEntry& e = trace[size_t(replay.firstEntry() + j)];
        Entry l {};
        l.action = e.action;
        l.device = uint8_t(d);
        l.addr = uint64_t(e.addr);
        l.size = uint64_t(e.size);
        l.stream = uint64_t(s.stream(e));
        l.timeUs = uint64_t(e.timeUs);
        l.stack = raw(e.stack) == 0 ? 0 : base | raw(e.stack);
        if (e.action == Action::Alloc && replay.allocationOfEntry(j) != NoAllocation)
            l.blockSize = uint64_t(replay.allocation(replay.allocationOfEntry(j)).size);
        // Pieces are by begin index: the one this entry begins, if any, gives the pool.
        while (nextPiece < pieces.size() && pieces[nextPiece].beginIndex < j)
            ++nextPiece;
        if (nextPiece < pieces.size() && pieces[nextPiece].beginIndex == j)
            setPool(l, pieces[nextPiece].poolId);
        entries.push_back(l);
    }
    append(std::move(entries));
}

std::unique_ptr<LiveDocument> LiveDocument::prepend(const Snapshot& earlier, const QString& earlierName,
                                                    LiveDocument& current)
{
    const int devices = std::max<int>(int(current.m_extenders.size()), earlier.deviceCount());
    std::vector<Replay> replays;
    for (int d = 0; d < devices; ++d)
        replays.push_back(Replay::build(earlier, d));
    // The state before the earlier file's first entry, with its tables.
    Snapshot initial;
    copyTables(earlier, initial);
    for (const Replay& r : replays) {
        const Snapshot state = snapshotOfState(r.stateAt(0), r.device());
        for (Segment seg : state.segments) {
            const uint32_t first = seg.blockBegin;
            seg.blockBegin = uint32_t(initial.blocks.size());
            initial.blocks.insert(initial.blocks.end(), state.blocks.begin() + first,
                                  state.blocks.begin() + first + seg.blockCount);
            initial.segments.push_back(seg);
        }
    }
    auto merged = std::make_unique<LiveDocument>(current.m_document->path, initial, devices);
    const Snapshot& now = *current.m_snapshot;
    for (uint32_t k = 1; k < now.stackCount(); ++k)
        merged->defineStack(CurrentStacks | k, framesOf(now, StackId { k }));
    for (const Replay& r : replays) {
        const int d = r.device();
        merged->appendReplayed(earlier, r, EarlierStacks);
        // The bridge: from the file's last state to the state the live recording joined at.
        const auto& liveTrace = size_t(d) < now.deviceTraces.size() ? now.deviceTraces[size_t(d)] : Trace {};
        const auto& fileTrace = size_t(d) < earlier.deviceTraces.size() ? earlier.deviceTraces[size_t(d)] : Trace {};
        const int64_t fileEnd = fileTrace.empty() ? 0 : fileTrace.back().timeUs;
        const int64_t joinAt = liveTrace.empty() ? fileEnd : std::max(fileEnd, liveTrace.front().timeUs);
        const ReplayState to = size_t(d) < current.m_document->replays.size()
            ? current.m_document->replays[size_t(d)].stateAt(0)
            : ReplayState {};
        merged->append(bridge(r.stateAt(r.entryCount()), to, d, joinAt, EarlierStacks, CurrentStacks));
        const std::string gap = "memscope: no record between " + earlierName.toStdString() + " and the attach";
        merged->annotate(d, Annotation::Stage::Start, gap, fileEnd);
        merged->annotate(d, Annotation::Stage::End, gap, joinAt);
        if (size_t(d) < current.m_document->replays.size())
            merged->appendReplayed(now, current.m_document->replays[size_t(d)], CurrentStacks);
    }
    merged->m_snapshot->allocatorSettings = now.allocatorSettings; // the live job's settings
    merged->adoptStacksAndQueue(current);
    merged->flush();
    return merged;
}

void LiveDocument::append(std::shared_ptr<const Delta> delta)
{
    if (!delta)
        return;
    if (!delta->stacks.empty() || delta->settings)
        m_pendingDefinitions.push_back(delta);
    if (!delta->entries.empty() || !delta->notes.empty()) {
        m_queued += delta->entries.size();
        m_queue.push_back({ std::move(delta), 0 });
    }
}

LiveDocument::Delta& LiveDocument::ownDefinitions()
{
    if (m_pendingDefinitions.empty() || m_pendingDefinitions.back().get() != m_ownDefinitions) {
        auto delta = std::make_shared<Delta>();
        m_ownDefinitions = delta.get();
        m_pendingDefinitions.push_back(std::move(delta));
    }
    return *m_ownDefinitions;
}

void LiveDocument::defineStack(uint64_t agentId, std::vector<StackFrame> frames)
{
    if (agentId != 0)
        ownDefinitions().stacks.emplace_back(agentId, std::move(frames));
}

LiveDocument::Delta& LiveDocument::ownNotes()
{
    if (m_queue.empty() || !m_queue.back().own || m_queue.back().notesApplied) {
        m_queue.push_back({ std::make_shared<Delta>(), 0 });
        m_queue.back().own = true;
    }
    // Made here as a Delta, not a const one: this document's own to add to.
    return const_cast<Delta&>(*m_queue.back().delta);
}

void LiveDocument::annotate(int device, Annotation::Stage stage, std::string name, int64_t timeUs)
{
    ownNotes().notes.push_back({ stage, int32_t(device), uint64_t(timeUs), std::move(name) });
}

// Stack definitions and settings queued since the last flush; the caller holds the growth lock (interning appends
// to the snapshot's tables, whose vectors may move).
void LiveDocument::applyDefinitions()
{
    for (const auto& delta : m_pendingDefinitions)
        for (const auto& [agentId, frames] : delta->stacks)
            m_builder->defineStack(agentId, frames);
    for (const auto& delta : m_pendingDefinitions)
        if (delta->settings)
            m_snapshot->allocatorSettings = delta->settings; // the job's, as the Recorder's snapshot() has them
    m_pendingDefinitions.clear();
    m_ownDefinitions = nullptr;
}

size_t LiveDocument::memoryBytes() const
{
    size_t bytes = 0;
    for (const auto& trace : m_snapshot->deviceTraces)
        bytes += trace.capacity() * sizeof(TraceEntry);
    for (const Replay& r : m_document->replays)
        bytes += r.memoryBytes();
    return bytes;
}

void LiveDocument::writeFinalState(Snapshot& out) const
{
    out.segments.clear();
    out.blocks.clear();
    // Each device's state after its last entry, written as the Recorder writes its own (viewer::RecordingBuilder).
    EventTrace::Devices devices;
    for (const Replay& replay : m_document->replays) {
        const size_t d = size_t(std::max(0, replay.device()));
        if (devices.size() <= d)
            devices.resize(d + 1);
        devices[d] = EventTrace::deviceOf(replay.stateAt(replay.entryCount()));
    }
    m_builder->writeState(devices, viewer::RecordingBuilder::StackKeys::Snapshot, out);
}

std::shared_ptr<Snapshot> LiveDocument::copySnapshot() const
{
    const Snapshot& s = *m_snapshot;
    auto out = std::make_shared<Snapshot>();
    // Interning every string in id order gives every string the same id in the copy.
    for (uint32_t id = 1; id < s.strings.size(); ++id)
        out->strings.intern(s.str(StringId { id }));
    out->frames = s.frames;
    out->stackOffsets = s.stackOffsets;
    out->stackFrames = s.stackFrames;
    out->deviceTraces = s.deviceTraces;
    out->entryForms = s.entryForms;
    out->annotations = s.annotations;
    out->streams = s.streams;
    out->allocatorSettings = s.allocatorSettings;
    out->hasDeviceTraces = true;
    out->hasAnnotationsKey = true;
    writeFinalState(*out);
    return out;
}

std::shared_ptr<const Snapshot> LiveDocument::finish(Extras topLevel)
{
    const std::unique_lock lock(*m_document->growth); // jobs reading the old document are done with it
    writeFinalState(*m_snapshot);
    m_snapshot->topLevelExtras = std::move(topLevel);
    return m_snapshot;
}

void LiveDocument::append(std::vector<Entry> entries)
{
    if (entries.empty())
        return;
    auto delta = std::make_shared<Delta>();
    delta->entries = std::move(entries); // a batch of its own: queueing copies nothing
    append(std::shared_ptr<const Delta>(std::move(delta)));
}

size_t LiveDocument::flush(size_t maxEntries)
{
    // The trace's next pages are faulted in on another thread (model/prefault.h): ~60 ms of entries at 2 M/s.
    constexpr size_t TraceAhead = size_t(1) << 17;
    if (!hasPending())
        return 0;
    const auto lock = m_document->tryWriteLock();
    if (!lock.owns_lock())
        return 0; // a job is reading: everything waits for the next flush
    applyDefinitions();
    Snapshot& s = *m_snapshot;
    // Entries as the Recorder's snapshot has them, numbered as every path numbers a trace (viewer::RecordingBuilder).
    const size_t applied = std::min(queued(), maxEntries);
    const size_t devices = m_extenders.size();
    size_t done = 0;
    while (!m_queue.empty()) {
        Batch& front = m_queue.front();
        // Its notes, then its entries: notes take effect in queue order (livedocument.h: append).
        if (!front.notesApplied) {
            for (const viewer::Note& n : front.delta->notes)
                m_builder->annotate(n);
            front.notesApplied = true;
        }
        const std::vector<Entry>& batch = front.delta->entries;
        if (front.begin < batch.size()) {
            if (done == applied)
                break;
            const size_t limit = std::min(batch.size(), front.begin + (applied - done));
            // Entries are appended per device in runs, so that each extender sees its device's entries in order.
            size_t i = front.begin;
            while (i < limit) {
                const uint8_t device = batch[i].device;
                size_t end = i;
                m_entryScratch.clear();
                m_detailScratch.clear();
                for (; end < limit && batch[end].device == device; ++end) {
                    const Entry& l = batch[end];
                    m_entryScratch.push_back(m_builder->entry(l));
                    m_detailScratch.push_back({ ByteCount(l.blockSize), { l.poolFirst, l.poolSecond } });
                }
                if (device < devices) {
                    auto& trace = s.deviceTraces[device];
                    trace.append(m_entryScratch.begin(), m_entryScratch.end());
                    trace.prefaultAhead(TraceAhead);
                    m_extenders[device].append(m_document->replays[device], s.entryForms, m_entryScratch,
                                               m_detailScratch);
                } else {
                    m_dropped += end - i;
                }
                i = end;
            }
            done += limit - front.begin;
            front.begin = limit;
            if (front.begin < batch.size())
                break;
        }
        m_queue.pop_front(); // the delta goes once its notes and entries are in the document
    }
    m_queued -= applied;
    return applied;
}

} // namespace memscope::app
