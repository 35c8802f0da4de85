// EventTrace: the one engine that turns allocator events into a trace. It keeps a caching allocator's state as
// PyTorch's snapshot shows it (per device: segments with their active blocks, and the free blocks with the request
// each Block object carries, by PyTorch's split and merge rules, model/freeblocks.h), applies events to it (an event
// that does not fit is refused and changes nothing), synthesises the events that turn it into another state (after
// a resync, a job's restart, or between a file's end and a live recording's start), and numbers a trace's entries
// as PyTorch's viewer does (TraceNumbering: address versions and stream numbers).
//
// Events are TraceEvents: PyTorch's trace fields as an agent sends them (unsigned 64-bit), plus what a live source
// knows beyond them (the block's bytes, the segment's pool), with stack ids that are the source's own (0: none):
// one type from the Recorder (its trace entries and deltas, common/viewer) to the live document. Users: the Recorder
// (events applied, resyncs and restarts), the live document (the bridge to an earlier file, the numbering) and io's
// builder (the numbering of a file read). Plain C++, no Qt; not thread-safe: one owner.
#pragma once

#include "model/addressmap.h"
#include "model/freeblocks.h"
#include "model/replay.h"
#include "model/snapshot.h"

#include <cstdint>
#include <iterator>
#include <map>
#include <unordered_set>
#include <vector>

namespace memscope::model {

struct TraceEvent {
    Action action;
    uint8_t device;
    uint64_t addr, size, stream, timeUs; // size: PyTorch's trace size (requested bytes for block actions)
    uint64_t stack; // 0 or the source's stack id
    uint64_t blockSize = 0; // alloc: the block's bytes
    int32_t poolFirst = 0, poolSecond = 0; // the segment's pool (segment actions; 0 when not known)
};

// Address versions and stream numbers exactly as PyTorch's viewer assigns them (torch/utils/viz/MemoryViz.js,
// annotate_snapshot): one version counter per block address and one per segment address, shared by all devices,
// walked over every device's trace in order and then the final segments. A free_completed (segment_free,
// segment_unmap) takes the current version and then moves it on, so an alloc and its frees share a version and the
// next use of the address gets the next one. Streams are numbered in order of first appearance (raw stream 0, which
// a snapshot always lists first, is number 0: the caller sees it first).
class TraceNumbering {
public:
    // The version of `action` at `address` (and the counter moved on after a free_completed, segment_free or
    // segment_unmap); 0 for actions without one. Called once per trace entry on every load of a file: a flat map
    // (model/addressmap.h), no allocation per entry.
    uint32_t version(Action action, DeviceAddr address)
    {
        switch (action) {
        case Action::FreeCompleted:
            return take(m_blocks, address, true);
        case Action::Alloc:
        case Action::FreeRequested:
            return take(m_blocks, address, false);
        case Action::SegmentFree:
        case Action::SegmentUnmap:
            return take(m_segments, address, true);
        case Action::SegmentAlloc:
        case Action::SegmentMap:
            return take(m_segments, address, false);
        default:
            return 0;
        }
    }
    // A hint: version(action, address) will be asked soon (AddressMap::prefetch).
    [[gnu::always_inline]] void prefetch(Action action, DeviceAddr address) const
    {
        if (action == Action::Alloc || action == Action::FreeRequested || action == Action::FreeCompleted)
            m_blocks.prefetch(address);
    }
    // The current version of a final block or segment (nothing moves on).
    uint32_t blockVersion(DeviceAddr address) { return take(m_blocks, address, false); }
    uint32_t segmentVersion(DeviceAddr address) { return take(m_segments, address, false); }
    // True the first time `stream` is seen (the caller appends it to Snapshot::streams). Most entries are on the
    // stream of the entry before, which costs one comparison.
    bool addStream(int64_t stream)
    {
        if (m_anyStream && stream == m_lastStream)
            return false;
        m_anyStream = true;
        m_lastStream = stream;
        return m_streams.insert(stream).second;
    }

private:
    static uint32_t take(AddressMap& space, DeviceAddr address, bool advance)
    {
        const uint32_t current = space.find(address);
        if (current == AddressMap::None) {
            space.insert(address, advance ? 1 : 0);
            return 0;
        }
        if (advance)
            space.assign(address, current + 1);
        return current;
    }
    AddressMap m_blocks { 1024 }, m_segments { 64 };
    std::unordered_set<int64_t> m_streams;
    int64_t m_lastStream = 0;
    bool m_anyStream = false;
};

// Whether [address, address + size) overlaps nothing in `map` (keys: start addresses; values with a `size`) and
// does not wrap around the address space.
template <class Map> bool rangeIsFree(const Map& map, uint64_t address, uint64_t size)
{
    if (size == 0 || address + size < address)
        return false;
    auto next = map.lower_bound(address);
    if (next != map.end() && next->first < address + size)
        return false;
    if (next != map.begin()) {
        auto prev = std::prev(next);
        if (prev->first + prev->second.size > address)
            return false;
    }
    return true;
}

class EventTrace {
public:
    // A block in use (state 1 active_allocated, 2 active_pending_free); free blocks are in Device::free.
    struct Block {
        uint64_t size = 0;
        uint64_t requestedSize = 0;
        uint8_t state = 1;
        uint64_t stack = 0;
    };
    struct Segment {
        uint64_t size = 0;
        uint64_t stream = 0;
        int32_t poolFirst = 0;
        int32_t poolSecond = 0;
        bool isExpandable = false;
        bool isSmall = false;
        uint64_t stack = 0;
        std::map<uint64_t, Block> blocks; // active blocks by address
    };
    struct Device {
        std::map<uint64_t, Segment> segments; // by address
        FreeBlocks free; // the inactive blocks, with the requests PyTorch leaves on them
    };
    using Devices = std::vector<Device>; // by device index
    // PyTorch's small pool has 2 MiB segments (CUDACachingAllocator.cpp, kSmallBuffer).
    static constexpr uint64_t SmallSegmentSize = uint64_t(2) << 20;

    // The state of one device at one index of a replay (its inactive blocks with the requests the replay knows: 0
    // where it does not), stack ids as `stackBase | id` (0 stays 0). Its unmapped space is not known.
    static Device deviceOf(const ReplayState& state, uint64_t stackBase = 0);

    const Devices& devices() const { return m_devices; }
    // Replaces the state (e.g. an agent's state reply, or a replay's state by device).
    void setState(Devices devices) { m_devices = std::move(devices); }

    // Applies `e` to the state; false (and the state unchanged) when it does not fit. `e.size` becomes what
    // PyTorch's trace records as the entry's size (CUDACachingAllocator.cpp, record_trace calls): the request for
    // alloc (e.size on input; the block's bytes are e.blockSize), free_requested and free_completed (the block's
    // request, whatever e.size was), the segment's bytes for segment actions, the request for oom (no change).
    bool apply(TraceEvent& e);

    // How resync() turns the state into another.
    struct Resync {
        // A restarted job: another allocator; nothing is kept, even at the same addresses. Its removals come at
        // startUs (where the old one was last heard of), the new state at timeUs.
        bool restart = false;
        uint64_t startUs = 0, timeUs = 0;
        // Whether a block's stack id takes part in "the same block" (ids of one source, comparable; false when the
        // two states name stacks in different tables).
        bool compareStacks = true;
        // Whether the state's unmapped space is known (an engine that followed every event); when not, a range the
        // target maps is taken as carrying an unknown request, so that its free blocks' requests are always set.
        bool unmappedKnown = true;
    };
    // Appends to `out` the events that turn the state into `target` (a state taken after the events applied so
    // far, or a restarted job's first), all at the resync's times, in an order a Replay can undo: per device,
    // free_requested (blocks still allocated) and free_completed for blocks that vanished or changed, segment_free /
    // segment_unmap for segments that vanished or changed, then segment_alloc / segment_map for new segments, alloc
    // (and free_requested for pending-free ones) for new blocks, and last, for each free block whose request the
    // events so far would not leave as `target` shows it (by PyTorch's rules), an alloc, free_requested and
    // free_completed of the whole block with that request (free_block leaves it on the block). A block whose only
    // change is allocated -> pending free gets a free_requested. The state becomes `target`, with the free blocks
    // (and unmapped space) as the events leave them and the stacks of segments that stayed.
    void resync(Devices target, const Resync& how, std::vector<TraceEvent>& out);

private:
    Device& device(uint8_t d);
    std::pair<uint64_t, Segment*> segmentAt(uint8_t d, uint64_t address, uint64_t size);
    void unmapFree(Device& dev, uint64_t address, uint64_t size);

    Devices m_devices;
};

} // namespace memscope::model
