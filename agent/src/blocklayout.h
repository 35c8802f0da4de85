// BlockLayout: how an observed caching allocator has cut its segments into blocks, followed from its events alone.
//
// PyTorch's trace events (c10/core/CachingDeviceAllocator.h, TraceEntry) name a block by its address and the size
// the caller asked for, not the size of the block it got; a viewer needs the block's. The layout keeps every
// segment's blocks (allocated, freed but waiting for other streams, free) and applies each event with PyTorch's own
// rules (c10/cuda/CUDACachingAllocator.cpp): an allocation takes the start of the free block at its address and
// splits it when should_split() says so (round_size() of the request is the block then, else the whole free block);
// a completed free merges with free neighbours of the same segment (try_merge_blocks); mapped pages of an
// expandable segment become a free block merged with the one before; unmapped pages leave the segment. Because
// those rules are memscope's allocator's too, the tests check the layout against that allocator's own blocks.
//
// It starts from a state (a snapshot of the allocator, reset()) and is rebased on every later one. Not
// thread-safe: one owner (the publisher thread).
#pragma once

#include "allocator.h"
#include "wire/protocol.h"

#include <cstdint>
#include <map>
#include <vector>

namespace memscope::agent {

class BlockLayout {
public:
    explicit BlockLayout(const AllocatorConfig& config);

    // Starts again from `state`: every device's segments with their blocks in address order (SegmentInfo as
    // CachingAllocator::snapshot and the observer's state give them).
    void reset(const std::vector<SegmentInfo>& state);

    // Applies one event record and completes it: for Alloc, FreeRequested and FreeCompleted, `requestedSize` holds
    // what the caller asked for and `size` is set to the block's bytes. False when the record does not fit the
    // layout (no free block at an allocation's address, no block where a free points): the record keeps the
    // rounded request as its size and the layout is unreliable until the next reset().
    bool apply(wire::EventRecord& record);

    // The layout of `device` as a snapshot (segments sorted by address; blocks' stack ids 0).
    std::vector<SegmentInfo> segments(int device) const;
    // Records that did not fit since the last reset().
    uint64_t misses() const { return m_misses; }

private:
    enum class State : uint8_t { Free, Allocated, PendingFree };
    struct Block {
        uint64_t size = 0;
        uint64_t requested = 0;
        State state = State::Free;
    };
    struct Segment {
        uint64_t end = 0;
        uint64_t stream = 0;
        PoolId pool;
        bool small = false;
        bool expandable = false;
    };
    struct Device {
        std::map<uint64_t, Segment> segments; // by start address
        std::map<uint64_t, Block> blocks; // every block of every segment, by address
        // Expandable segments' unmapped ranges seen unmapped (their Block objects keep a stale requested_size that
        // the pages take back when mapped again); ranges never mapped are not here.
        std::map<uint64_t, Block> unmapped;
    };

    Device& device(uint8_t index);
    std::map<uint64_t, Segment>::iterator segmentAt(Device& d, uint64_t address);
    bool alloc(Device& d, wire::EventRecord& r);
    bool freeCompleted(Device& d, uint64_t address);
    void mergeFree(Device& d, std::map<uint64_t, Block>::iterator it, const Segment& segment);
    bool map(Device& d, const wire::EventRecord& r);
    bool unmap(Device& d, uint64_t address, uint64_t size);

    AllocatorConfig m_config;
    std::vector<Device> m_devices;
    uint64_t m_misses = 0;
};

} // namespace memscope::agent
