// BlockLayout: see blocklayout.h. Every rule cites the function of c10/cuda/CUDACachingAllocator.cpp it follows.
#include "blocklayout.h"

#include <algorithm>
#include <iterator>

namespace memscope::agent {

namespace {

    using Type = wire::EventType;

} // namespace

BlockLayout::BlockLayout(const AllocatorConfig& config)
    : m_config(config)
{
}

BlockLayout::Device& BlockLayout::device(uint8_t index)
{
    if (index >= m_devices.size())
        m_devices.resize(size_t(index) + 1);
    return m_devices[index];
}

void BlockLayout::reset(const std::vector<SegmentInfo>& state)
{
    m_devices.clear();
    m_misses = 0;
    for (const SegmentInfo& s : state) {
        if (s.device < 0 || s.device > 63)
            continue;
        Device& d = device(uint8_t(s.device));
        Segment seg;
        seg.end = s.address + s.totalSize;
        seg.stream = raw(s.stream);
        seg.pool = s.pool;
        seg.small = !s.isLarge;
        seg.expandable = s.isExpandable;
        d.segments[s.address] = seg;
        for (const BlockInfo& b : s.blocks) {
            Block block;
            block.size = b.size;
            block.requested = b.requestedSize;
            block.state = b.allocated ? State::Allocated : (b.active ? State::PendingFree : State::Free);
            d.blocks[b.address] = block;
        }
    }
}

std::map<uint64_t, BlockLayout::Segment>::iterator BlockLayout::segmentAt(Device& d, uint64_t address)
{
    auto it = d.segments.upper_bound(address);
    if (it == d.segments.begin())
        return d.segments.end();
    --it;
    return address < it->second.end ? it : d.segments.end();
}

bool BlockLayout::apply(wire::EventRecord& r)
{
    if (r.type >= uint8_t(Type::Heartbeat) || r.device > 63)
        return true;
    Device& d = device(r.device);
    bool fits = true;
    switch (Type(r.type)) {
    case Type::Alloc:
        fits = alloc(d, r);
        break;
    case Type::FreeRequested:
    case Type::FreeCompleted: {
        auto it = d.blocks.find(r.address);
        if (it == d.blocks.end() || it->second.state == State::Free) {
            fits = false;
            r.size = CachingAllocator::roundSize(r.requestedSize, m_config);
            break;
        }
        r.size = it->second.size;
        if (r.type == uint8_t(Type::FreeRequested))
            it->second.state = State::PendingFree; // free(): not reusable until its events complete
        else
            fits = freeCompleted(d, r.address);
        break;
    }
    case Type::SegmentAlloc: {
        // alloc_block: a new segment is one free block; kSmallBuffer segments are the small pool's
        // (get_allocation_size hands every other request at least kLargeBuffer or 10 MiB).
        if (segmentAt(d, r.address) != d.segments.end()) {
            fits = false;
            break;
        }
        Segment seg;
        seg.end = r.address + r.size;
        seg.stream = r.stream;
        seg.pool = PoolId { r.poolFirst, r.poolSecond };
        seg.small = r.size == SmallBuffer;
        d.segments[r.address] = seg;
        d.blocks[r.address] = Block { r.size, 0, State::Free };
        break;
    }
    case Type::SegmentFree: {
        // release_block: only a segment that is one free block is returned.
        auto seg = d.segments.find(r.address);
        auto block = d.blocks.find(r.address);
        if (seg == d.segments.end() || block == d.blocks.end() || block->second.state != State::Free
            || r.address + block->second.size != seg->second.end) {
            fits = false;
            break;
        }
        d.blocks.erase(block);
        d.segments.erase(seg);
        break;
    }
    case Type::SegmentMap:
        fits = map(d, r);
        break;
    case Type::SegmentUnmap:
        fits = unmap(d, r.address, r.size);
        break;
    case Type::Oom:
    case Type::Heartbeat:
    case Type::Count:
        break;
    }
    if (!fits)
        ++m_misses;
    return fits;
}

bool BlockLayout::alloc(Device& d, wire::EventRecord& r)
{
    const size_t rounded = CachingAllocator::roundSize(r.requestedSize, m_config);
    r.size = rounded;
    auto seg = segmentAt(d, r.address);
    auto it = d.blocks.find(r.address);
    if (seg == d.segments.end() || it == d.blocks.end() || it->second.state != State::Free || it->second.size < rounded)
        return false;
    // alloc_found_block: the block is the start of the free block found; should_split decides whether the rest
    // stays a free block of its own. The rest keeps the free block's old Block object, and with it the stale
    // requested_size of its last user.
    const uint64_t remaining = it->second.size - rounded;
    const bool split = seg->second.small || m_config.expandableSegments
        ? remaining >= MinBlockSize
        : rounded < m_config.maxSplitSize && remaining > SmallSize;
    if (split) {
        d.blocks[r.address + rounded] = Block { remaining, it->second.requested, State::Free };
        it->second.size = rounded;
    }
    it->second.state = State::Allocated;
    it->second.requested = r.requestedSize;
    r.size = it->second.size;
    return true;
}

bool BlockLayout::freeCompleted(Device& d, uint64_t address)
{
    auto seg = segmentAt(d, address);
    auto it = d.blocks.find(address);
    if (seg == d.segments.end() || it == d.blocks.end())
        return false;
    it->second.state = State::Free;
    mergeFree(d, it, seg->second);
    return true;
}

void BlockLayout::mergeFree(Device& d, std::map<uint64_t, Block>::iterator it, const Segment& segment)
{
    // free_block / try_merge_blocks: the freed block absorbs a free neighbour on either side within its segment
    // (a neighbour still waiting for other streams is not free). The freed block survives and keeps its
    // requested_size; it takes the lower neighbour's address when that one merges.
    const uint64_t segStart = std::prev(d.segments.upper_bound(it->first))->first;
    auto next = std::next(it);
    if (next != d.blocks.end() && next->first == it->first + it->second.size && next->first < segment.end
        && next->second.state == State::Free) {
        it->second.size += next->second.size;
        d.blocks.erase(next);
    }
    if (it != d.blocks.begin()) {
        auto prev = std::prev(it);
        if (prev->first >= segStart && prev->first + prev->second.size == it->first
            && prev->second.state == State::Free) {
            prev->second.size += it->second.size;
            prev->second.requested = it->second.requested;
            d.blocks.erase(it);
        }
    }
}

bool BlockLayout::map(Device& d, const wire::EventRecord& r)
{
    // map_block: pages mapped at the end of an expandable segment's mapped range (or in a gap between two ranges
    // of it) become a free block, merged with the free blocks around it. A range that touches no other is a new
    // segment as snapshot() reports them (one per contiguous mapped range); the small pool maps 2 MiB pages, the
    // large pool 20 MiB ones.
    const uint64_t start = r.address;
    const uint64_t end = r.address + r.size;
    if (segmentAt(d, start) != d.segments.end())
        return false;
    auto next = d.segments.find(end);
    auto seg = d.segments.end();
    if (!d.segments.empty()) {
        auto before = d.segments.upper_bound(start);
        if (before != d.segments.begin()) {
            --before;
            if (before->second.end == start && before->second.expandable)
                seg = before;
        }
    }
    if (seg == d.segments.end()) {
        Segment s;
        s.end = end;
        s.stream = r.stream;
        s.pool = PoolId { r.poolFirst, r.poolSecond };
        s.small = r.size % LargeBuffer != 0;
        s.expandable = true;
        seg = d.segments.emplace(start, s).first;
    } else {
        seg->second.end = end;
    }
    if (next != d.segments.end() && next->second.expandable) {
        seg->second.end = next->second.end;
        d.segments.erase(next);
    }
    // The pages come from the unmapped block at `start` (map_block maps from an unmapped block's start): it is
    // the mapped block now, with whatever requested_size it kept; what stays unmapped is a new Block.
    uint64_t requested = 0;
    if (auto u = d.unmapped.find(start); u != d.unmapped.end()) {
        requested = u->second.requested;
        if (u->second.size > r.size)
            d.unmapped[end] = Block { u->second.size - r.size, 0, State::Free };
        d.unmapped.erase(u);
    }
    auto it = d.blocks.emplace(start, Block { r.size, requested, State::Free }).first;
    mergeFree(d, it, seg->second);
    return true;
}

bool BlockLayout::unmap(Device& d, uint64_t address, uint64_t size)
{
    // release_expandable_segment / unmap_block: the pages leave the free block holding them, which may split the
    // mapped range (and so the segment snapshot() reports) in two.
    const uint64_t end = address + size;
    auto seg = segmentAt(d, address);
    if (seg == d.segments.end() || end > seg->second.end)
        return false;
    auto it = d.blocks.upper_bound(address);
    if (it == d.blocks.begin())
        return false;
    --it;
    const uint64_t blockStart = it->first;
    const Block block = it->second;
    if (block.state != State::Free || blockStart + block.size < end)
        return false;
    // unmap_block: the pages before and after the unmapped range are new Blocks (requested_size 0); the free
    // block itself becomes the unmapped one and merges with unmapped neighbours, keeping its requested_size.
    d.blocks.erase(it);
    if (blockStart < address)
        d.blocks[blockStart] = Block { address - blockStart, 0, State::Free };
    if (end < blockStart + block.size)
        d.blocks[end] = Block { blockStart + block.size - end, 0, State::Free };
    Block gone { size, block.requested, State::Free };
    uint64_t goneStart = address;
    if (auto next = d.unmapped.find(end); next != d.unmapped.end()) {
        gone.size += next->second.size;
        d.unmapped.erase(next);
    }
    if (auto prev = d.unmapped.lower_bound(address); prev != d.unmapped.begin()) {
        --prev;
        if (prev->first + prev->second.size == address) {
            goneStart = prev->first;
            gone.size += prev->second.size;
            d.unmapped.erase(prev);
        }
    }
    d.unmapped[goneStart] = gone;
    const Segment whole = seg->second;
    const uint64_t segStart = seg->first;
    d.segments.erase(seg);
    if (segStart < address) {
        Segment left = whole;
        left.end = address;
        d.segments[segStart] = left;
    }
    if (end < whole.end) {
        Segment right = whole;
        d.segments[end] = right;
    }
    return true;
}

std::vector<SegmentInfo> BlockLayout::segments(int device) const
{
    std::vector<SegmentInfo> out;
    if (device < 0 || size_t(device) >= m_devices.size())
        return out;
    const Device& d = m_devices[size_t(device)];
    for (const auto& [start, seg] : d.segments) {
        SegmentInfo s;
        s.device = device;
        s.address = start;
        s.totalSize = seg.end - start;
        s.stream = StreamId { seg.stream };
        s.isLarge = !seg.small;
        s.isExpandable = seg.expandable;
        s.pool = seg.pool;
        for (auto it = d.blocks.lower_bound(start); it != d.blocks.end() && it->first < seg.end; ++it) {
            BlockInfo b;
            b.address = it->first;
            b.size = it->second.size;
            b.requestedSize = it->second.requested;
            b.allocated = it->second.state == State::Allocated;
            b.active = it->second.state != State::Free;
            if (b.allocated)
                s.allocatedSize += b.size;
            if (b.active) {
                s.activeSize += b.size;
                s.requestedSize += b.requestedSize;
            }
            s.blocks.push_back(b);
        }
        out.push_back(std::move(s));
    }
    return out;
}

} // namespace memscope::agent
