// FreeBlocks: the free (inactive) blocks of one device's segments, each with the request PyTorch leaves on it, kept
// by the rules c10/cuda/CUDACachingAllocator.cpp applies to its Block objects when they are split and merged. A
// snapshot's inactive block carries the `requested_size` of the Block object behind it, which is whatever the last
// user of that object asked for; these rules say which object survives each step, so an engine that sees every
// allocator event from a known state on (viewer::Recorder, model::ReplayExtender) knows every free block's request,
// stale ones included, exactly as the job's own snapshot shows it. The expandable segments' unmapped address space
// is kept too (UnmappedSpace, with the request its Block object carries), because mapping it again brings that
// request back.
//
// The caller decides where merging is allowed (mergeLeft / mergeRight: the neighbour is in the same segment, or the
// same expandable segment's adjacent mapped range); FreeBlocks merges only with a free block that is really there.
// Operations that make a new Block object report it (Made), so that an engine keeping the history of free blocks
// (Replay's inactive labels) can note when each came to be. Not thread-safe: one owner.
#pragma once

#include "model/snapshot.h"

#include <array>
#include <cstdint>
#include <map>
#include <vector>

namespace memscope::model {

// The unmapped address space of expandable segments that an engine saw being unmapped, with the request of the
// Block object behind each unmapped range (unmap_block turns the free block's object into the unmapped one). Space
// never mapped, or unmapped before the engine started, is not known: its request is 0 (find_expandable_block makes
// a new Block for a new segment's whole range, map_block a new one for what stays unmapped).
class UnmappedSpace {
public:
    struct Range {
        DeviceAddr start = 0, end = 0;
    };
    // [start, end) is unmapped from a free block whose object carried `requested`; it absorbs the unmapped ranges
    // that touch it (try_merge_blocks(block, prev / next) in unmap_block: the newly unmapped block survives).
    // Returns the merged range.
    Range unmap(DeviceAddr start, DeviceAddr end, ByteCount requested);
    // [start, end) is mapped (map_block, at the front of an unmapped block): the request of the unmapped Block that
    // becomes the mapped one. What stays unmapped after `end` is a new Block (request 0).
    ByteCount map(DeviceAddr start, DeviceAddr end);
    // The known unmapped range holding `address` (start == end: none).
    Range around(DeviceAddr address) const;
    // [start, end) is no longer this device's address space (release_expandable_segment: an expandable segment with
    // nothing mapped any more gives its whole range back; a new segment there starts from new Blocks).
    void forget(DeviceAddr start, DeviceAddr end);
    void clear() { m_ranges.clear(); }

private:
    struct Known {
        DeviceAddr end = 0;
        ByteCount requested = 0;
    };
    void cut(DeviceAddr start, DeviceAddr end); // drops [start, end) from the known ranges
    std::map<DeviceAddr, Known> m_ranges; // by start; never adjacent (merged as PyTorch merges)
};

class FreeBlocks {
public:
    struct Block {
        DeviceAddr end = 0;
        ByteCount requested = 0; // the request left on the Block object (0: a new object, never handed out)
        uint32_t tag = UINT32_MAX; // the owner's (e.g. a label id); kept while the object lives, reset when made
    };
    // A free Block object that came into being: its range and request.
    struct Made {
        DeviceAddr start = 0, end = 0;
        ByteCount requested = 0;
    };
    // What one operation made: at most two objects.
    struct Changes {
        std::array<Made, 2> made {};
        uint8_t count = 0;
        void add(const Made& m) { made[count++] = m; }
    };

    // trackLargest: keep a lazily pruned heap of block sizes so that largest() is cheap (the replay's series).
    explicit FreeBlocks(bool trackLargest = false)
        : m_trackLargest(trackLargest)
    {
    }

    // A free block as a state shows it (a state reply's inactive block, a join state's), merged with nothing.
    // Whatever free part of [start, end) was there is replaced. Returns it as made.
    Made insert(DeviceAddr start, DeviceAddr end, ByteCount requested);
    // free_completed (free_block): [start, end) returns to the pool with the request of the Block being freed, and
    // absorbs the free block that ends at `start` (mergeLeft) and the one that starts at `end` (mergeRight); the
    // freed Block survives every merge (try_merge_blocks(dst = the freed block, src = its neighbour)), so the merged
    // block carries the freed one's request. Also a new segment (alloc_block: a new Block's requested_size is 0).
    Made release(DeviceAddr start, DeviceAddr end, ByteCount requested, bool mergeLeft, bool mergeRight);
    // alloc (alloc_found_block): [start, end) is handed out. PyTorch takes the front of a free block and, when it
    // splits, keeps the old Block object as the remainder ("remaining = block; block = new Block(...)"), so the rest
    // [end, blockEnd) keeps the free block's request and object. A start inside a free block (never PyTorch's
    // choice; a viewer's synthetic entries) leaves [blockStart, start) as a new object with the same request.
    // Whatever part of [start, end) is free stops being free (several blocks only in inconsistent traces).
    Changes take(DeviceAddr start, DeviceAddr end);
    // segment_free: the free blocks inside [start, end) are gone (release_block deletes the Block).
    void erase(DeviceAddr start, DeviceAddr end);
    // segment_unmap (unmap_block): the whole pages [start, end) of a free block are unmapped. The free block's
    // object becomes the unmapped range (its request goes with it, see UnmappedSpace); the partial pages before and
    // after stay free as new Blocks (before_free / after_free: request 0). The caller tells unmapped() when the
    // segment had nothing mapped left (see UnmappedSpace::forget).
    Changes unmap(DeviceAddr start, DeviceAddr end);
    // segment_map (map_block): [start, end) is mapped at the front of an unmapped range; that range's Block object
    // becomes the mapped block (with its request: 0 for address space never mapped, or what an earlier unmap left),
    // what stays unmapped after it is a new Block (request 0), and the mapped block absorbs the free neighbours
    // (try_merge_blocks(to_map, prev / next): to_map survives).
    Made map(DeviceAddr start, DeviceAddr end, bool mergeLeft, bool mergeRight);

    const std::map<DeviceAddr, Block>& blocks() const { return m_blocks; }
    UnmappedSpace& unmapped() { return m_unmapped; }
    const Block* at(DeviceAddr start) const;
    // The free block that holds `address`, or end().
    std::map<DeviceAddr, Block>::const_iterator holding(DeviceAddr address) const;
    void setTag(DeviceAddr start, uint32_t tag);
    // The largest free block (0: none); only with trackLargest.
    ByteCount largest();
    bool empty() const { return m_blocks.empty(); }
    void clear();

private:
    struct HeapEntry {
        ByteCount length;
        DeviceAddr start, end;
    };

    std::map<DeviceAddr, Block>::iterator put(DeviceAddr start, DeviceAddr end, ByteCount requested);
    void compactHeap();

    std::map<DeviceAddr, Block> m_blocks; // by start
    UnmappedSpace m_unmapped;
    bool m_trackLargest = false;
    std::vector<HeapEntry> m_heap;
};

} // namespace memscope::model
