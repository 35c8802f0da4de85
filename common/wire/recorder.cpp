// Recorder (recorder.h): the allocator's state as maps of segments and active blocks per device, events applied
// in sequence order, and the snapshot made from them in the shape PyTorch's torch.cuda.memory._snapshot() has.
#include "wire/recorder.h"

#include <algorithm>
#include <unordered_map>

namespace memscope::wire {

namespace {

// PyTorch's small pool allocates 2 MiB segments (c10/cuda/CUDACachingAllocator.cpp: kSmallBuffer) and the large
// pool never does (requests below kMinLargeAlloc get kLargeBuffer = 20 MiB), so a 2 MiB segment is a small one.
constexpr uint64_t SmallSegmentSize = 2 << 20;

model::Action actionOf(EventType type)
{
    switch (type) {
    case EventType::Alloc: return model::Action::Alloc;
    case EventType::FreeRequested: return model::Action::FreeRequested;
    case EventType::FreeCompleted: return model::Action::FreeCompleted;
    case EventType::SegmentAlloc: return model::Action::SegmentAlloc;
    case EventType::SegmentFree: return model::Action::SegmentFree;
    case EventType::SegmentMap: return model::Action::SegmentMap;
    case EventType::SegmentUnmap: return model::Action::SegmentUnmap;
    case EventType::Oom: return model::Action::Oom;
    case EventType::Heartbeat:
    case EventType::Count: break;
    }
    return model::Action::Unknown;
}

// True when [address, address + size) overlaps no entry of `map` (address -> object with a `size`), and does not
// wrap around the address space.
template <class Map>
bool isFree(const Map& map, uint64_t address, uint64_t size)
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

} // namespace

Recorder::Device& Recorder::device(uint8_t d)
{
    if (d >= m_devices.size())
        m_devices.resize(size_t(d) + 1);
    return m_devices[d];
}

Recorder::Segment* Recorder::segmentAt(uint8_t d, uint64_t address, uint64_t size)
{
    Device& dev = device(d);
    auto it = dev.upper_bound(address);
    if (it == dev.begin())
        return nullptr;
    --it;
    const uint64_t begin = it->first, end = it->first + it->second.size;
    if (address < begin || address >= end || size > end - address)
        return nullptr;
    return &it->second;
}

bool Recorder::setState(const DecodedState& state)
{
    if (started())
        return false;
    m_hasState = true;
    m_awaitingFresh = false;
    ++m_states;
    m_hello = state.hello;
    m_lastSequence = state.header.lastSequence;
    m_devices.clear();
    m_entries.clear();
    for (const SegmentRecord& r : state.segments) {
        Segment s;
        s.size = r.size;
        s.stream = r.stream;
        s.poolFirst = r.poolFirst;
        s.poolSecond = r.poolSecond;
        s.isExpandable = r.isExpandable != 0;
        s.isSmall = r.isSmall != 0;
        if (isFree(device(r.device), r.address, r.size))
            device(r.device).emplace(r.address, std::move(s));
        else
            ++m_stats.inconsistent;
    }
    for (const BlockRecord& r : state.blocks) {
        if (r.state == 0)
            continue; // inactive blocks are the gaps between active ones; snapshot() derives them
        Segment* seg = segmentAt(r.device, r.address, r.size);
        if (seg && isFree(seg->blocks, r.address, r.size))
            seg->blocks.emplace(r.address, Block { r.size, r.requestedSize, r.state, r.stackId });
        else
            ++m_stats.inconsistent;
    }
    drain();
    return true;
}

void Recorder::addEvents(std::span<const EventRecord> events)
{
    m_buffer.insert(m_buffer.end(), events.begin(), events.end());
    if (m_hasState && !m_awaitingFresh)
        drain();
}

void Recorder::drain()
{
    size_t i = 0;
    for (; i < m_buffer.size(); ++i) {
        const EventRecord& e = m_buffer[i];
        if (!started() && e.sequence > m_lastSequence + 1 && m_states < MaxStateRequests) {
            m_awaitingFresh = true;
            break;
        }
        apply(e);
    }
    m_buffer.erase(m_buffer.begin(), m_buffer.begin() + std::ptrdiff_t(i));
}

void Recorder::addStackDef(const DecodedStackDef& def)
{
    if (!def.ok() || def.header.stackId == 0)
        return;
    std::vector<StackFrame> frames;
    frames.reserve(def.frames.size());
    for (const DecodedFrame& f : def.frames)
        frames.push_back(StackFrame { std::string(f.name.empty() ? std::string_view("??") : f.name),
                                      std::string(f.file.empty() ? std::string_view("??") : f.file), f.line });
    m_stacks[def.header.stackId] = std::move(frames);
}

void Recorder::setGoodbye(const Goodbye& goodbye)
{
    m_stats.agentLost = goodbye.lost;
    if (m_hasState && goodbye.lastSequence > m_lastSequence) {
        ++m_stats.gaps;
        m_stats.missing += goodbye.lastSequence - m_lastSequence;
    }
}

void Recorder::apply(const EventRecord& e)
{
    if (e.sequence <= m_lastSequence) {
        ++m_stats.stale;
        return;
    }
    if (e.sequence > m_lastSequence + 1) {
        ++m_stats.gaps;
        m_stats.missing += e.sequence - m_lastSequence - 1;
    }
    m_stats.lost += e.lost;
    m_lastSequence = e.sequence;
    m_started = true;
    if (e.type == uint8_t(EventType::Heartbeat) || e.type >= uint8_t(EventType::Count)) {
        ++m_stats.heartbeats;
        return;
    }
    uint64_t traceSize = e.size;
    if (!applyToState(e, traceSize)) {
        ++m_stats.inconsistent;
        return;
    }
    ++m_stats.applied;
    m_entries.push_back(
        Entry { actionOf(EventType(e.type)), e.device, e.address, traceSize, e.stream, e.timeNs / 1000, e.stackId });
}

// Applies one event to the state; false (state unchanged) when it does not fit. `traceSize` is set to what
// PyTorch's trace records as the entry's size (CUDACachingAllocator.cpp, record_trace calls): the requested size
// for alloc, free_requested and free_completed; the segment size for segment actions; the request for oom.
bool Recorder::applyToState(const EventRecord& e, uint64_t& traceSize)
{
    const uint8_t d = e.device;
    switch (EventType(e.type)) {
    case EventType::Alloc: {
        Segment* seg = segmentAt(d, e.address, e.size);
        if (!seg || !isFree(seg->blocks, e.address, e.size))
            return false;
        seg->blocks.emplace(e.address, Block { e.size, e.requestedSize, 1, e.stackId });
        traceSize = e.requestedSize;
        return true;
    }
    case EventType::FreeRequested:
    case EventType::FreeCompleted: {
        Segment* seg = segmentAt(d, e.address, 1);
        if (!seg)
            return false;
        auto it = seg->blocks.find(e.address);
        if (it == seg->blocks.end())
            return false;
        traceSize = it->second.requestedSize;
        if (EventType(e.type) == EventType::FreeRequested) {
            if (it->second.state != 1)
                return false;
            it->second.state = 2;
        } else {
            seg->blocks.erase(it);
        }
        return true;
    }
    case EventType::SegmentAlloc:
    case EventType::SegmentMap: {
        Device& dev = device(d);
        if (!isFree(dev, e.address, e.size))
            return false;
        auto next = dev.lower_bound(e.address);
        auto prev = next == dev.begin() ? dev.end() : std::prev(next);
        Segment s;
        s.size = e.size;
        s.stream = e.stream;
        s.poolFirst = e.poolFirst;
        s.poolSecond = e.poolSecond;
        s.isExpandable = EventType(e.type) == EventType::SegmentMap;
        s.isSmall = !s.isExpandable && e.size == SmallSegmentSize;
        s.stackId = e.stackId;
        traceSize = e.size;
        if (!s.isExpandable) {
            dev.emplace(e.address, std::move(s));
            return true;
        }
        // PyTorch reports one segment per contiguous mapped range of an expandable segment (CUDACachingAllocator.cpp
        // snapshot()), so a mapping joins the mapped neighbours of its stream and pool.
        auto joins = [&](const Segment& other) {
            return other.isExpandable && other.stream == s.stream && other.poolFirst == s.poolFirst
                && other.poolSecond == s.poolSecond;
        };
        uint64_t address = e.address;
        if (prev != dev.end() && prev->first + prev->second.size == e.address && joins(prev->second)) {
            address = prev->first;
            prev->second.size += s.size;
        } else {
            dev.emplace(e.address, s);
        }
        Segment& merged = dev[address];
        if (next != dev.end() && next->first == e.address + e.size && joins(next->second)) {
            merged.size += next->second.size;
            merged.blocks.merge(next->second.blocks);
            dev.erase(next);
        }
        return true;
    }
    case EventType::SegmentFree: {
        Device& dev = device(d);
        auto it = dev.find(e.address);
        if (it == dev.end() || !it->second.blocks.empty())
            return false;
        traceSize = it->second.size;
        dev.erase(it);
        return true;
    }
    case EventType::SegmentUnmap: {
        Device& dev = device(d);
        Segment* seg = segmentAt(d, e.address, e.size);
        if (!seg || e.size == 0 || !seg->isExpandable)
            return false;
        for (const auto& [addr, b] : seg->blocks)
            if (addr < e.address + e.size && addr + b.size > e.address)
                return false; // an active block in the range: PyTorch unmaps free pages only
        auto it = std::prev(dev.upper_bound(e.address));
        const uint64_t begin = it->first, end = it->first + it->second.size;
        Segment whole = std::move(it->second);
        dev.erase(it);
        if (e.address > begin) {
            Segment left = whole;
            left.size = e.address - begin;
            left.blocks.clear();
            for (const auto& [addr, b] : whole.blocks)
                if (addr < e.address)
                    left.blocks.emplace(addr, b);
            dev.emplace(begin, std::move(left));
        }
        if (e.address + e.size < end) {
            Segment right = whole;
            right.size = end - (e.address + e.size);
            right.blocks.clear();
            for (const auto& [addr, b] : whole.blocks)
                if (addr >= e.address + e.size)
                    right.blocks.emplace(addr, b);
            dev.emplace(e.address + e.size, std::move(right));
        }
        traceSize = e.size;
        return true;
    }
    case EventType::Oom: return true; // address = free device bytes, size = the request: no state change
    case EventType::Heartbeat:
    case EventType::Count: break;
    }
    return false;
}

model::Snapshot Recorder::snapshot() const
{
    model::Snapshot s;
    const model::StringId large = s.strings.intern("large");
    const model::StringId small = s.strings.intern("small");
    const model::StringId noContext = s.strings.intern("N/A");
    model::StackInterner interner(s);
    std::map<uint32_t, model::StackId> stackIds; // wire id -> the snapshot's
    auto stackOf = [&](uint32_t wireId) {
        if (wireId == 0)
            return model::EmptyStack;
        auto known = stackIds.find(wireId);
        if (known != stackIds.end())
            return known->second;
        model::StackId id = model::EmptyStack;
        auto def = m_stacks.find(wireId);
        if (def != m_stacks.end()) {
            std::vector<model::FrameId> frames;
            frames.reserve(def->second.size());
            for (const StackFrame& f : def->second)
                frames.push_back(interner.frame(s.strings.intern(f.name), s.strings.intern(f.file), f.line));
            id = interner.stack(frames);
        }
        stackIds.emplace(wireId, id);
        return id;
    };

    for (size_t d = 0; d < m_devices.size(); ++d) {
        for (const auto& [address, seg] : m_devices[d]) {
            model::Segment out;
            out.device = int32_t(d);
            out.address = model::DeviceAddr(address);
            out.totalSize = model::ByteCount(seg.size);
            out.stream = int64_t(seg.stream);
            out.segmentType = seg.isSmall ? small : large;
            out.poolId = { seg.poolFirst, seg.poolSecond };
            out.isExpandable = seg.isExpandable;
            out.hasFrames = true;
            out.stack = stackOf(seg.stackId);
            out.blockBegin = uint32_t(s.blocks.size());
            auto inactive = [&](uint64_t from, uint64_t to) {
                model::Block b;
                b.address = model::DeviceAddr(from);
                b.size = model::ByteCount(to - from);
                b.state = model::BlockState::Inactive;
                b.hasFrames = b.hasRequestedSize = b.hasAddress = true;
                s.blocks.push_back(b);
            };
            uint64_t cursor = address;
            for (const auto& [addr, blk] : seg.blocks) {
                if (addr > cursor)
                    inactive(cursor, addr);
                model::Block b;
                b.address = model::DeviceAddr(addr);
                b.size = model::ByteCount(blk.size);
                b.requestedSize = model::ByteCount(blk.requestedSize);
                b.state = blk.state == 2 ? model::BlockState::ActivePendingFree : model::BlockState::ActiveAllocated;
                b.stack = stackOf(blk.stackId);
                b.hasFrames = b.hasRequestedSize = b.hasAddress = true;
                s.blocks.push_back(b);
                // Sums in unsigned arithmetic: a corrupt requested size must not overflow a signed sum.
                out.activeSize = model::ByteCount(uint64_t(out.activeSize) + blk.size);
                out.requestedSize = model::ByteCount(uint64_t(out.requestedSize) + blk.requestedSize);
                if (blk.state != 2)
                    out.allocatedSize = model::ByteCount(uint64_t(out.allocatedSize) + blk.size);
                cursor = addr + blk.size;
            }
            if (cursor < address + seg.size)
                inactive(cursor, address + seg.size);
            out.blockCount = uint32_t(s.blocks.size()) - out.blockBegin;
            s.segments.push_back(out);
        }
    }

    size_t devices = std::max<size_t>(m_hello.deviceCount, m_devices.size());
    for (const Entry& e : m_entries)
        devices = std::max<size_t>(devices, size_t(e.device) + 1);
    s.deviceTraces.resize(devices);
    for (const Entry& e : m_entries) {
        model::TraceEntry t;
        t.action = e.action;
        t.hasFrames = true;
        t.addr = model::DeviceAddr(e.addr);
        t.size = model::ByteCount(e.size);
        t.stream = int64_t(e.stream);
        t.timeUs = int64_t(e.timeUs);
        t.compileContext = noContext;
        t.stack = stackOf(e.stackId);
        s.deviceTraces[e.device].push_back(t);
    }
    s.hasDeviceTraces = true;
    s.hasAnnotationsKey = true;
    model::Value settings;
    settings.kind = model::Value::Kind::Dict;
    s.allocatorSettings = settings;

    // Address versions and stream numbers as io::buildSnapshot assigns them to a file read back (see there and
    // torch/utils/viz/MemoryViz.js annotate_snapshot), so a recorded snapshot equals its own pickle read back.
    std::unordered_map<int64_t, uint32_t> blockVersions, segmentVersions;
    auto version = [](std::unordered_map<int64_t, uint32_t>& space, int64_t addr, bool increment) {
        auto [it, inserted] = space.emplace(addr, 0);
        const uint32_t v = it->second;
        if (increment)
            ++it->second;
        return v;
    };
    std::unordered_map<int64_t, bool> seen { { 0, true } };
    s.streams.push_back(0);
    auto seeStream = [&](int64_t stream) {
        if (seen.emplace(stream, true).second)
            s.streams.push_back(stream);
    };
    for (auto& trace : s.deviceTraces) {
        for (model::TraceEntry& e : trace) {
            seeStream(e.stream);
            switch (e.action) {
            case model::Action::FreeCompleted: e.version = version(blockVersions, e.addr, true); break;
            case model::Action::FreeRequested:
            case model::Action::Alloc: e.version = version(blockVersions, e.addr, false); break;
            case model::Action::SegmentFree:
            case model::Action::SegmentUnmap: e.version = version(segmentVersions, e.addr, true); break;
            case model::Action::SegmentAlloc:
            case model::Action::SegmentMap: e.version = version(segmentVersions, e.addr, false); break;
            default: break;
            }
        }
    }
    for (model::Segment& seg : s.segments) {
        seeStream(seg.stream);
        seg.version = version(segmentVersions, seg.address, false);
        for (uint32_t bi = seg.blockBegin; bi < seg.blockBegin + seg.blockCount; ++bi)
            s.blocks[bi].version = version(blockVersions, s.blocks[bi].address, false);
    }
    return s;
}

} // namespace memscope::wire
