// FreeBlocks and UnmappedSpace (freeblocks.h): ordered maps of free and unmapped ranges, changed by the rules of
// c10/cuda/CUDACachingAllocator.cpp that decide which Block object (and so which requested_size) survives.
#include "model/freeblocks.h"

#include <algorithm>

namespace memscope::model {

// --- UnmappedSpace ----------------------------------------------------------------------------------------------

void UnmappedSpace::cut(DeviceAddr start, DeviceAddr end)
{
    if (start >= end)
        return;
    auto it = m_ranges.upper_bound(start);
    if (it != m_ranges.begin() && std::prev(it)->second.end > start)
        --it;
    while (it != m_ranges.end() && it->first < end) {
        const DeviceAddr s = it->first;
        const Known k = it->second;
        it = m_ranges.erase(it);
        if (s < start)
            m_ranges[s] = Known { start, k.requested };
        if (k.end > end) {
            m_ranges[end] = Known { k.end, k.requested };
            break;
        }
    }
}

UnmappedSpace::Range UnmappedSpace::unmap(DeviceAddr start, DeviceAddr end, ByteCount requested)
{
    if (start >= end)
        return {};
    cut(start, end);
    DeviceAddr s = start, e = end;
    auto next = m_ranges.lower_bound(start);
    if (next != m_ranges.begin()) {
        auto prev = std::prev(next);
        if (prev->second.end == start) {
            s = prev->first;
            m_ranges.erase(prev);
        }
    }
    if (auto after = m_ranges.find(end); after != m_ranges.end()) {
        e = after->second.end;
        m_ranges.erase(after);
    }
    m_ranges[s] = Known { e, requested };
    return { s, e };
}

ByteCount UnmappedSpace::map(DeviceAddr start, DeviceAddr end)
{
    if (start >= end)
        return 0;
    const Range r = around(start);
    if (r.start == r.end) {
        cut(start, end);
        return 0;
    }
    const Known k = m_ranges[r.start];
    m_ranges.erase(r.start);
    if (r.start < start)
        m_ranges[r.start] = Known { start, k.requested }; // never PyTorch's: it maps at an unmapped block's front
    if (end < r.end)
        m_ranges[end] = Known { r.end, 0 }; // map_block: `remaining` is a new Block
    else
        cut(start, end);
    return k.requested;
}

UnmappedSpace::Range UnmappedSpace::around(DeviceAddr address) const
{
    auto it = m_ranges.upper_bound(address);
    if (it == m_ranges.begin())
        return {};
    --it;
    if (address >= it->second.end)
        return {};
    return { it->first, it->second.end };
}

void UnmappedSpace::forget(DeviceAddr start, DeviceAddr end) { cut(start, end); }

// --- FreeBlocks -------------------------------------------------------------------------------------------------

std::map<DeviceAddr, FreeBlocks::Block>::iterator FreeBlocks::put(DeviceAddr start, DeviceAddr end, ByteCount requested)
{
    auto [it, inserted] = m_blocks.insert_or_assign(start, Block { end, requested, UINT32_MAX });
    if (m_trackLargest) {
        m_heap.push_back({ end - start, start, end });
        std::push_heap(m_heap.begin(), m_heap.end(),
                       [](const HeapEntry& a, const HeapEntry& b) { return a.length < b.length; });
        if (m_heap.size() > 2 * m_blocks.size() + 4096)
            compactHeap();
    }
    return it;
}

// Whatever part of [start, end) is free stops being free; the parts outside it stay (the one after `end` keeps its
// object, the one before `start` is put anew).
static void cutFree(std::map<DeviceAddr, FreeBlocks::Block>& blocks, DeviceAddr start, DeviceAddr end, const auto& put)
{
    auto it = blocks.upper_bound(start);
    if (it != blocks.begin() && std::prev(it)->second.end > start)
        --it;
    while (it != blocks.end() && it->first < end) {
        const DeviceAddr s = it->first;
        const FreeBlocks::Block b = it->second;
        it = blocks.erase(it);
        if (s < start)
            put(s, start, b.requested, UINT32_MAX);
        if (b.end > end) {
            put(end, b.end, b.requested, b.tag);
            break;
        }
    }
}

FreeBlocks::Made FreeBlocks::insert(DeviceAddr start, DeviceAddr end, ByteCount requested)
{
    if (start >= end)
        return { start, start, 0 };
    cutFree(m_blocks, start, end,
            [&](DeviceAddr s, DeviceAddr e, ByteCount r, uint32_t tag) { put(s, e, r)->second.tag = tag; });
    put(start, end, requested);
    return { start, end, requested };
}

FreeBlocks::Made FreeBlocks::release(DeviceAddr start, DeviceAddr end, ByteCount requested, bool mergeLeft,
                                     bool mergeRight)
{
    if (start >= end)
        return { start, start, 0 };
    // The range was in use: nothing of it can be free (only an inconsistent trace gets here with some of it free).
    cutFree(m_blocks, start, end,
            [&](DeviceAddr s, DeviceAddr e, ByteCount r, uint32_t tag) { put(s, e, r)->second.tag = tag; });
    DeviceAddr s = start, e = end;
    if (mergeLeft) {
        auto next = m_blocks.lower_bound(start);
        if (next != m_blocks.begin()) {
            auto prev = std::prev(next);
            if (prev->second.end == start) {
                s = prev->first;
                m_blocks.erase(prev);
            }
        }
    }
    if (mergeRight) {
        if (auto after = m_blocks.find(end); after != m_blocks.end()) {
            e = after->second.end;
            m_blocks.erase(after);
        }
    }
    put(s, e, requested);
    return { s, e, requested };
}

FreeBlocks::Changes FreeBlocks::take(DeviceAddr start, DeviceAddr end)
{
    Changes changes;
    if (start >= end)
        return changes;
    auto it = m_blocks.upper_bound(start);
    if (it != m_blocks.begin() && std::prev(it)->second.end > start)
        --it;
    while (it != m_blocks.end() && it->first < end) {
        const DeviceAddr s = it->first;
        const Block b = it->second;
        it = m_blocks.erase(it);
        if (s < start) {
            put(s, start, b.requested);
            if (changes.count < changes.made.size())
                changes.add({ s, start, b.requested });
        }
        if (b.end > end) {
            put(end, b.end, b.requested)->second.tag = b.tag; // alloc_found_block: the remainder is the old Block
            break;
        }
    }
    return changes;
}

void FreeBlocks::erase(DeviceAddr start, DeviceAddr end)
{
    if (start >= end)
        return;
    cutFree(m_blocks, start, end,
            [&](DeviceAddr s, DeviceAddr e, ByteCount r, uint32_t tag) { put(s, e, r)->second.tag = tag; });
}

FreeBlocks::Changes FreeBlocks::unmap(DeviceAddr start, DeviceAddr end)
{
    Changes changes;
    if (start >= end)
        return changes;
    ByteCount requested = 0;
    auto h = m_blocks.upper_bound(start);
    if (h != m_blocks.begin() && std::prev(h)->second.end >= end && std::prev(h)->first <= start) {
        --h;
        const DeviceAddr s = h->first;
        const Block b = h->second;
        m_blocks.erase(h);
        requested = b.requested;
        if (s < start) {
            put(s, start, 0);
            changes.add({ s, start, 0 });
        }
        if (b.end > end) {
            put(end, b.end, 0);
            changes.add({ end, b.end, 0 });
        }
    } else {
        erase(start, end); // not one free block: only in inconsistent traces
    }
    m_unmapped.unmap(start, end, requested);
    return changes;
}

FreeBlocks::Made FreeBlocks::map(DeviceAddr start, DeviceAddr end, bool mergeLeft, bool mergeRight)
{
    const ByteCount requested = m_unmapped.map(start, end);
    return release(start, end, requested, mergeLeft, mergeRight);
}

const FreeBlocks::Block* FreeBlocks::at(DeviceAddr start) const
{
    auto it = m_blocks.find(start);
    return it == m_blocks.end() ? nullptr : &it->second;
}

std::map<DeviceAddr, FreeBlocks::Block>::const_iterator FreeBlocks::holding(DeviceAddr address) const
{
    auto it = m_blocks.upper_bound(address);
    if (it == m_blocks.begin())
        return m_blocks.end();
    --it;
    return address < it->second.end ? it : m_blocks.end();
}

void FreeBlocks::setTag(DeviceAddr start, uint32_t tag)
{
    if (auto it = m_blocks.find(start); it != m_blocks.end())
        it->second.tag = tag;
}

ByteCount FreeBlocks::largest()
{
    auto shorter = [](const HeapEntry& a, const HeapEntry& b) { return a.length < b.length; };
    while (!m_heap.empty()) {
        const HeapEntry& top = m_heap.front();
        auto it = m_blocks.find(top.start);
        if (it != m_blocks.end() && it->second.end == top.end)
            return top.length;
        std::pop_heap(m_heap.begin(), m_heap.end(), shorter);
        m_heap.pop_back();
    }
    return 0;
}

// Drops stale entries (and duplicates of one block) and re-heapifies.
void FreeBlocks::compactHeap()
{
    std::erase_if(m_heap, [&](const HeapEntry& h) {
        auto it = m_blocks.find(h.start);
        return it == m_blocks.end() || it->second.end != h.end;
    });
    std::sort(m_heap.begin(), m_heap.end(), [](const HeapEntry& a, const HeapEntry& b) {
        return a.start != b.start ? a.start < b.start : a.end < b.end;
    });
    m_heap.erase(
        std::unique(m_heap.begin(), m_heap.end(),
                    [](const HeapEntry& a, const HeapEntry& b) { return a.start == b.start && a.end == b.end; }),
        m_heap.end());
    std::make_heap(m_heap.begin(), m_heap.end(),
                   [](const HeapEntry& a, const HeapEntry& b) { return a.length < b.length; });
}

void FreeBlocks::clear()
{
    m_blocks.clear();
    m_unmapped.clear();
    m_heap.clear();
}

} // namespace memscope::model
