// EventTrace and TraceNumbering (eventtrace.h): a caching allocator's state followed event by event, the events
// between two states, and a trace's numbering.
#include "model/eventtrace.h"

#include <algorithm>
#include <iterator>

namespace memscope::model {

EventTrace::Device EventTrace::deviceOf(const ReplayState& state, uint64_t stackBase)
{
    auto key = [stackBase](StackId id) { return raw(id) == 0 ? 0 : stackBase | raw(id); };
    Device dev;
    for (const ReplaySegment& seg : state.segments) {
        Segment s;
        s.size = uint64_t(seg.totalSize);
        s.stream = uint64_t(seg.stream);
        s.poolFirst = int32_t(seg.poolId.first);
        s.poolSecond = int32_t(seg.poolId.second);
        s.isExpandable = seg.isExpandable;
        s.isSmall = !seg.isExpandable && s.size == SmallSegmentSize;
        s.stack = key(seg.stack);
        for (uint32_t k = seg.blockBegin; k < seg.blockBegin + seg.blockCount; ++k) {
            const ReplayBlock& b = state.blocks[k];
            if (b.state == BlockState::Inactive)
                dev.free.insert(b.address, b.address + b.size, b.requestedSize);
            else
                s.blocks.emplace(uint64_t(b.address),
                                 Block { uint64_t(b.size), uint64_t(b.requestedSize),
                                         uint8_t(b.state == BlockState::ActiveAllocated ? 1 : 2), key(b.stack) });
        }
        dev.segments.emplace(uint64_t(seg.address), std::move(s));
    }
    return dev;
}

EventTrace::Device& EventTrace::device(uint8_t d)
{
    if (d >= m_devices.size())
        m_devices.resize(size_t(d) + 1);
    return m_devices[d];
}

std::pair<uint64_t, EventTrace::Segment*> EventTrace::segmentAt(uint8_t d, uint64_t address, uint64_t size)
{
    auto& segments = device(d).segments;
    auto it = segments.upper_bound(address);
    if (it == segments.begin())
        return { 0, nullptr };
    --it;
    if (address >= it->first + it->second.size || size > it->first + it->second.size - address)
        return { 0, nullptr };
    return { it->first, &it->second };
}

bool EventTrace::apply(TraceEvent& e)
{
    const uint8_t d = e.device;
    switch (e.action) {
    case Action::Alloc: {
        auto [base, seg] = segmentAt(d, e.addr, e.blockSize);
        if (!seg || !rangeIsFree(seg->blocks, e.addr, e.blockSize))
            return false;
        seg->blocks.emplace(e.addr, Block { e.blockSize, e.size, 1, e.stack });
        device(d).free.take(DeviceAddr(e.addr), DeviceAddr(e.addr + e.blockSize));
        return true;
    }
    case Action::FreeRequested:
    case Action::FreeCompleted: {
        auto [base, seg] = segmentAt(d, e.addr, 1);
        if (!seg)
            return false;
        auto it = seg->blocks.find(e.addr);
        if (it == seg->blocks.end())
            return false;
        if (e.action == Action::FreeRequested) {
            if (it->second.state != 1)
                return false;
            it->second.state = 2;
        } else {
            // free_block: the block keeps its request and absorbs the free blocks beside it in its segment.
            const uint64_t end = e.addr + it->second.size;
            device(d).free.release(DeviceAddr(e.addr), DeviceAddr(end), ByteCount(it->second.requestedSize),
                                   e.addr > base, end < base + seg->size);
        }
        e.size = it->second.requestedSize;
        if (e.action == Action::FreeCompleted)
            seg->blocks.erase(it);
        return true;
    }
    case Action::SegmentAlloc:
    case Action::SegmentMap: {
        Device& dev = device(d);
        auto& segments = dev.segments;
        if (!rangeIsFree(segments, e.addr, e.size))
            return false;
        auto next = segments.lower_bound(e.addr);
        auto prev = next == segments.begin() ? segments.end() : std::prev(next);
        Segment s;
        s.size = e.size;
        s.stream = e.stream;
        s.poolFirst = e.poolFirst;
        s.poolSecond = e.poolSecond;
        s.isExpandable = e.action == Action::SegmentMap;
        s.isSmall = !s.isExpandable && e.size == SmallSegmentSize;
        s.stack = e.stack;
        if (!s.isExpandable) {
            segments.emplace(e.addr, std::move(s));
            dev.free.release(DeviceAddr(e.addr), DeviceAddr(e.addr + e.size), 0, false, false);
            return true;
        }
        // PyTorch reports one segment per contiguous mapped range of an expandable segment (CUDACachingAllocator.cpp
        // snapshot()), so a mapping joins the mapped neighbours of its stream and pool.
        auto joins = [&](const Segment& other) {
            return other.isExpandable && other.stream == s.stream && other.poolFirst == s.poolFirst
                && other.poolSecond == s.poolSecond;
        };
        uint64_t address = e.addr;
        const bool joinLeft
            = prev != segments.end() && prev->first + prev->second.size == e.addr && joins(prev->second);
        const bool joinRight = next != segments.end() && next->first == e.addr + e.size && joins(next->second);
        if (joinLeft) {
            address = prev->first;
            prev->second.size += s.size;
        } else {
            segments.emplace(e.addr, s);
        }
        Segment& merged = segments[address];
        if (joinRight) {
            merged.size += next->second.size;
            merged.blocks.merge(next->second.blocks);
            segments.erase(next);
        }
        dev.free.map(DeviceAddr(e.addr), DeviceAddr(e.addr + e.size), joinLeft, joinRight);
        return true;
    }
    case Action::SegmentFree: {
        Device& dev = device(d);
        auto it = dev.segments.find(e.addr);
        if (it == dev.segments.end() || !it->second.blocks.empty())
            return false;
        e.size = it->second.size;
        dev.free.erase(DeviceAddr(e.addr), DeviceAddr(e.addr + it->second.size));
        dev.segments.erase(it);
        return true;
    }
    case Action::SegmentUnmap: {
        Device& dev = device(d);
        auto [base, seg] = segmentAt(d, e.addr, e.size);
        if (!seg || e.size == 0 || !seg->isExpandable)
            return false;
        for (const auto& [addr, b] : seg->blocks)
            if (addr < e.addr + e.size && addr + b.size > e.addr)
                return false; // an active block in the range: PyTorch unmaps free pages only
        auto it = dev.segments.find(base);
        const uint64_t begin = it->first, end = it->first + it->second.size;
        Segment whole = std::move(it->second);
        dev.segments.erase(it);
        if (e.addr > begin) {
            Segment left = whole;
            left.size = e.addr - begin;
            left.blocks.clear();
            for (const auto& [addr, b] : whole.blocks)
                if (addr < e.addr)
                    left.blocks.emplace(addr, b);
            dev.segments.emplace(begin, std::move(left));
        }
        if (e.addr + e.size < end) {
            Segment right = whole;
            right.size = end - (e.addr + e.size);
            right.blocks.clear();
            for (const auto& [addr, b] : whole.blocks)
                if (addr >= e.addr + e.size)
                    right.blocks.emplace(addr, b);
            dev.segments.emplace(e.addr + e.size, std::move(right));
        }
        unmapFree(dev, e.addr, e.size);
        return true;
    }
    case Action::Oom:
        return true; // address = free device bytes, size = the request: no state change
    default:
        return false;
    }
}

// The free blocks of `dev` after [address, address + size) was unmapped (unmap_block), its segments already split.
// An expandable segment left with nothing mapped beside the unmapped space is released with it
// (CUDACachingAllocator.cpp release_blocks: an unmapped block with no prev and no next), and so is its address
// space: a segment mapped there later starts from new Blocks.
void EventTrace::unmapFree(Device& dev, uint64_t address, uint64_t size)
{
    dev.free.unmap(DeviceAddr(address), DeviceAddr(address + size));
    const UnmappedSpace::Range around = dev.free.unmapped().around(DeviceAddr(address));
    if (around.start >= around.end)
        return;
    auto mapped = [&](uint64_t at, bool endsThere) {
        auto it = dev.segments.lower_bound(at);
        if (endsThere) {
            if (it == dev.segments.begin())
                return false;
            --it;
            return it->second.isExpandable && it->first + it->second.size == at;
        }
        return it != dev.segments.end() && it->first == at && it->second.isExpandable;
    };
    if (!mapped(uint64_t(around.start), true) && !mapped(uint64_t(around.end), false))
        dev.free.unmapped().forget(around.start, around.end);
}

void EventTrace::resync(Devices target, const Resync& how, std::vector<TraceEvent>& out)
{
    const bool restart = how.restart;
    uint64_t entryUs = how.timeUs;
    auto emit
        = [&](Action action, size_t d, uint64_t addr, uint64_t size, uint64_t stream, uint64_t stack) -> TraceEvent& {
        out.push_back(TraceEvent { action, uint8_t(d), addr, size, stream, entryUs, stack });
        return out.back();
    };
    auto sameSegment = [](const Segment& a, const Segment& b) {
        return a.size == b.size && a.isExpandable == b.isExpandable && a.stream == b.stream
            && a.poolFirst == b.poolFirst && a.poolSecond == b.poolSecond;
    };
    auto sameBlock = [&how](const Block& a, const Block& b) {
        return a.size == b.size && a.requestedSize == b.requestedSize && (!how.compareStacks || a.stack == b.stack);
    };
    const Device none;
    const size_t devices = std::max(m_devices.size(), target.size());
    for (size_t d = 0; d < devices; ++d) {
        const Device& fromDevice = d < m_devices.size() ? m_devices[d] : none;
        const Device& toDevice = d < target.size() ? target[d] : none;
        const auto& from = fromDevice.segments;
        const auto& to = toDevice.segments;
        // The free blocks the synthetic events leave, as anything applying PyTorch's rules to them derives them (a
        // Replay of the trace, a live view's): they start as the current state's and follow every event below.
        FreeBlocks sim = fromDevice.free;
        // The mapped ranges while the removals go on (for what an unmap releases, as unmapFree decides it).
        std::map<uint64_t, uint64_t> mapped; // address -> end
        for (const auto& [address, seg] : from)
            if (seg.isExpandable)
                mapped.emplace(address, address + seg.size);
        auto unmap = [&](uint64_t address, uint64_t end) {
            mapped.erase(address);
            sim.unmap(DeviceAddr(address), DeviceAddr(end));
            const UnmappedSpace::Range around = sim.unmapped().around(DeviceAddr(address));
            auto before = mapped.lower_bound(uint64_t(around.start));
            const bool left = before != mapped.begin() && std::prev(before)->second == uint64_t(around.start);
            if (around.start < around.end && !left && !mapped.count(uint64_t(around.end)))
                sim.unmapped().forget(around.start, around.end);
        };
        // Removals first, so that whatever replaces a block or segment finds its range free. A block that is still
        // allocated gets a free_requested before its free_completed, as PyTorch records every free (and a Replay
        // warns about a free_completed whose alloc has no free_requested).
        entryUs = restart ? how.startUs : how.timeUs;
        for (const auto& [address, seg] : from) {
            auto kept = to.find(address);
            const bool segmentKept = !restart && kept != to.end() && sameSegment(seg, kept->second);
            for (const auto& [addr, block] : seg.blocks) {
                if (segmentKept) {
                    auto now = kept->second.blocks.find(addr);
                    if (now != kept->second.blocks.end() && sameBlock(block, now->second)) {
                        if (block.state == now->second.state)
                            continue;
                        if (block.state == 1 && now->second.state == 2) {
                            emit(Action::FreeRequested, d, addr, block.requestedSize, seg.stream, block.stack);
                            continue;
                        }
                    }
                }
                if (block.state == 1)
                    emit(Action::FreeRequested, d, addr, block.requestedSize, seg.stream, block.stack);
                emit(Action::FreeCompleted, d, addr, block.requestedSize, seg.stream, block.stack);
                sim.release(DeviceAddr(addr), DeviceAddr(addr + block.size), ByteCount(block.requestedSize),
                            addr > address, addr + block.size < address + seg.size);
            }
            if (!segmentKept) {
                emit(seg.isExpandable ? Action::SegmentUnmap : Action::SegmentFree, d, address, seg.size, seg.stream,
                     seg.stack);
                if (seg.isExpandable)
                    unmap(address, address + seg.size);
                else
                    sim.erase(DeviceAddr(address), DeviceAddr(address + seg.size));
            }
        }
        // Then what is new: segments, then their blocks.
        entryUs = how.timeUs;
        for (const auto& [address, seg] : to) {
            auto was = from.find(address);
            if (restart || was == from.end() || !sameSegment(was->second, seg)) {
                TraceEvent& e = emit(seg.isExpandable ? Action::SegmentMap : Action::SegmentAlloc, d, address, seg.size,
                                     seg.stream, seg.stack);
                e.poolFirst = seg.poolFirst;
                e.poolSecond = seg.poolSecond;
                if (seg.isExpandable && !how.unmappedKnown)
                    // What the mapped range brings back is what the unmapped space carried, which only the
                    // replay that reads these events knows: never taken as right here.
                    sim.insert(DeviceAddr(address), DeviceAddr(address + seg.size), -1);
                else if (seg.isExpandable)
                    // (A new mapped range never joins another: one it would join would be part of this segment.)
                    sim.map(DeviceAddr(address), DeviceAddr(address + seg.size), false, false);
                else
                    sim.release(DeviceAddr(address), DeviceAddr(address + seg.size), 0, false, false);
            }
        }
        for (const auto& [address, seg] : to) {
            auto was = from.find(address);
            const bool segmentKept = !restart && was != from.end() && sameSegment(was->second, seg);
            for (const auto& [addr, block] : seg.blocks) {
                if (segmentKept) {
                    auto before = was->second.blocks.find(addr);
                    if (before != was->second.blocks.end() && sameBlock(before->second, block)
                        && (before->second.state == block.state || (before->second.state == 1 && block.state == 2)))
                        continue; // kept (its free_requested, if any, is above)
                }
                emit(Action::Alloc, d, addr, block.requestedSize, seg.stream, block.stack).blockSize = block.size;
                sim.take(DeviceAddr(addr), DeviceAddr(addr + block.size));
                if (block.state == 2)
                    emit(Action::FreeRequested, d, addr, block.requestedSize, seg.stream, block.stack);
            }
        }
        // Last, the stale requests: a free block whose request the events above do not leave as the target shows
        // it is handed out and freed again with that request (free_block leaves it on the block; its neighbours
        // are in use or other segments, so it merges with nothing).
        for (const auto& [start, block] : toDevice.free.blocks()) {
            const FreeBlocks::Block* now = sim.at(start);
            if (now && now->end == block.end && now->requested == block.requested)
                continue;
            auto seg = to.upper_bound(uint64_t(start));
            if (seg == to.begin())
                continue;
            --seg;
            const uint64_t addr = uint64_t(start), size = uint64_t(block.end - start);
            emit(Action::Alloc, d, addr, uint64_t(block.requested), seg->second.stream, 0).blockSize = size;
            emit(Action::FreeRequested, d, addr, uint64_t(block.requested), seg->second.stream, 0);
            emit(Action::FreeCompleted, d, addr, uint64_t(block.requested), seg->second.stream, 0);
            sim.take(start, block.end);
            sim.release(start, block.end, block.requested, addr > seg->first,
                        addr + size < seg->first + seg->second.size);
        }
        // The free blocks are now the target's; what the engine keeps is what the events leave (the same, with
        // what they leave of the unmapped space), so that it goes on exactly as a Replay of its trace would.
        if (d < target.size())
            target[d].free = std::move(sim);
    }
    // Segments keep their own stack; carry over those of segments that stayed (a state reply has none).
    for (size_t d = 0; !restart && d < target.size() && d < m_devices.size(); ++d)
        for (auto& [address, seg] : target[d].segments) {
            auto was = m_devices[d].segments.find(address);
            if (was != m_devices[d].segments.end() && sameSegment(was->second, seg))
                seg.stack = was->second.stack;
        }
    m_devices = std::move(target);
}

} // namespace memscope::model
