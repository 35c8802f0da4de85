// The caching allocator. See allocator.h.
//
// Every function below is named after the PyTorch function in c10/cuda/CUDACachingAllocator.cpp
// (DeviceCachingAllocator, PyTorch 2.9-2.11) whose rules it implements; the comments cite it by name. Only what a
// snapshot can observe or what changes a later decision is kept: context capture, profiler hooks, IPC, the
// free-memory callbacks registry (empty in PyTorch unless a library registers one), MemPool fallbacks
// (use_on_oom), no_split pools and graph_capture_record_stream_reuse are left out.
#include "allocator.h"

#include "pools.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>

namespace memscope::agent {

namespace {

    struct BlockPool;
    struct ExpandableSegment;
    struct PrivatePool;

    // PyTorch's Block: one piece of a segment, allocated or free; split pieces are linked in address order.
    struct Block {
        Block(StreamId s, size_t sz, BlockPool* p, uintptr_t address)
            : ptr(address)
            , size(sz)
            , stream(s)
            , pool(p)
        {
        }

        uintptr_t ptr = 0;
        size_t size = 0;
        size_t requestedSize = 0;
        StreamId stream {};
        BlockPool* pool = nullptr;
        Block* prev = nullptr;
        Block* next = nullptr;
        ExpandableSegment* expandable = nullptr;
        int64_t gcCountBase = 0;
        int eventCount = 0;
        uint32_t stackId = 0; // while allocated: the observer's stack id for its Alloc (state replies)
        bool allocated = false;
        // Backed by physical pages; false only for the unmapped address space of an expandable segment.
        bool mapped = true;
        std::vector<StreamId> streamUses; // streams other than `stream` the block was used on (recordStream)

        bool isSplit() const { return prev != nullptr || next != nullptr; }
        // Block::splice
        void splice(Block* before, Block* after)
        {
            if (before)
                before->next = this;
            prev = before;
            if (after)
                after->prev = this;
            next = after;
        }
    };

    // A search key for the size-ordered pools (PyTorch builds a whole Block for it).
    struct SizeKey {
        StreamId stream;
        size_t size;
        uintptr_t ptr;
    };

    // What a size-ordered pool holds: the block with a copy of its sort key, so that a tree search compares
    // without touching the blocks (a block's stream, size and address only change while it is out of its pool).
    struct PoolEntry {
        PoolEntry(Block* b) // NOLINT: implicit, so that pools take and give blocks like PyTorch's std::set<Block*>
            : stream(b->stream)
            , size(b->size)
            , ptr(b->ptr)
            , block(b)
        {
        }
        operator Block*() const { return block; } // NOLINT
        Block* operator->() const { return block; }

        StreamId stream;
        size_t size;
        uintptr_t ptr;
        Block* block;
    };

    // BlockComparatorSize: pools are ordered by (stream, size, address), so that lower_bound finds the smallest
    // block of the request's stream that fits, the lowest address first among equals.
    struct SizeOrder {
        using is_transparent = void;
        template <class A, class B> bool operator()(const A& a, const B& b) const
        {
            if (a.stream != b.stream)
                return raw(a.stream) < raw(b.stream);
            if (a.size != b.size)
                return a.size < b.size;
            return a.ptr < b.ptr;
        }
    };
    // BlockComparatorAddress: the unmapped ranges of expandable segments, by (stream, address).
    struct AddressOrder {
        bool operator()(const Block* a, const Block* b) const
        {
            if (a->stream != b->stream)
                return raw(a->stream) < raw(b->stream);
            return a->ptr < b->ptr;
        }
    };

    using SizeSet = std::set<PoolEntry, SizeOrder, NodeAllocator<PoolEntry>>;
    using AddressSet = std::set<Block*, AddressOrder, NodeAllocator<Block*>>;

    // BlockPool: the free blocks of one size class (small: <= 1 MiB) of the default pool or of a private pool.
    struct BlockPool {
        BlockPool(bool small, PrivatePool* owner, NodeArena* arena)
            : blocks(SizeOrder {}, NodeAllocator<Block*>(arena))
            , unmapped(AddressOrder {}, NodeAllocator<Block*>(arena))
            , isSmall(small)
            , ownerPrivatePool(owner)
        {
        }

        // BlockPool::insert_into_blocks: remembers the gc counter at insertion (garbage collection ages).
        void insertIntoBlocks(Block* b)
        {
            b->gcCountBase = getFreeBlocksCallCount;
            blocks.insert(b);
        }

        SizeSet blocks;
        AddressSet unmapped;
        const bool isSmall;
        PrivatePool* ownerPrivatePool;
        int64_t getFreeBlocksCallCount = 0;
    };

    // PrivatePool: the pools of one CUDA graph (or MemPool) id.
    struct PrivatePool {
        PrivatePool(PoolId poolId, NodeArena* arena)
            : id(poolId)
            , largeBlocks(false, this, arena)
            , smallBlocks(true, this, arena)
        {
        }
        PoolId id;
        int useCount = 1; // live graphs using the pool
        int cudaMallocCount = 0; // segments not yet released
        BlockPool largeBlocks;
        BlockPool smallBlocks;
    };

    PoolId ownerPoolId(const BlockPool* pool)
    {
        return pool->ownerPrivatePool ? pool->ownerPrivatePool->id : PoolId {};
    }

    // ExpandableSegment: a large reserved address range of which whole pages are mapped on demand.
    struct ExpandableSegment {
        StreamId stream {};
        size_t segmentSize = 0; // page size: 2 MiB in the small pool, 20 MiB in the large pool
        size_t maxHandles = 0;
        uintptr_t base = 0;
        std::vector<bool> handles; // which pages are mapped
        size_t mappedSize = 0;

        size_t size() const { return maxHandles * segmentSize; }
        size_t numSegments(size_t bytes) const { return (bytes + segmentSize - 1) / segmentSize; }
        size_t segmentLeft(uintptr_t p) const { return (p - base) / segmentSize; }
        size_t segmentRight(uintptr_t p) const { return numSegments(p - base); }
    };

    struct SegmentRange {
        uintptr_t ptr = 0;
        size_t size = 0;
    };

    struct PoolIdHash {
        size_t operator()(const PoolId& id) const
        {
            // MempoolIdHash
            return static_cast<size_t>(id.first != 0 ? id.first : id.second);
        }
    };

    bool isPowerOf2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }
    size_t powerOf2Floor(size_t v) { return v == 0 ? 0 : size_t(1) << (63 - std::countl_zero(uint64_t(v))); }

    // roundup_power2_next_division: round `size` up to the next of `divisions` equal steps between the powers of
    // two around it (1200 with 4 divisions: 1024, 1280, 1536, 1792 -> 1280).
    size_t roundupPower2NextDivision(size_t size, size_t divisions)
    {
        if (isPowerOf2(size))
            return size;
        const size_t floor = powerOf2Floor(size);
        const size_t step = floor >> (63 - std::countl_zero(uint64_t(divisions)));
        if (step == 0)
            return floor << 1;
        const size_t roundedFloor = size & ~(step - 1);
        return roundedFloor == size ? size : roundedFloor + step;
    }

} // namespace

// The allocator of one device: PyTorch's DeviceCachingAllocator.
class DeviceAllocator {
public:
    DeviceAllocator(int device, Backend& backend, const AllocatorConfig& config, TraceObserver* const* observer)
        : m_device(device)
        , m_backend(backend)
        , m_config(config)
        , m_observer(observer)
        , m_largeBlocks(false, nullptr, &m_arena)
        , m_smallBlocks(true, nullptr, &m_arena)
    {
        // DeviceCachingAllocator constructor: per_process_memory_fraction from the config, max_split_size stat.
        setMemoryFraction(config.perProcessMemoryFraction);
        m_stats.maxSplitSize = static_cast<int64_t>(config.maxSplitSize);
    }

    ~DeviceAllocator()
    {
        // Segments live as long as the process in PyTorch; here they go back to the backend so that an allocator
        // can be created and destroyed (tests, replays).
        const std::vector<Block*> all = allBlocks(true);
        for (Block* head : all) {
            if (head->prev || head->expandable)
                continue;
            size_t total = 0;
            for (const Block* b = head; b; b = b->next)
                total += b->size;
            m_backend.release(m_device, DevicePtr { head->ptr }, total);
        }
        for (Block* b : all)
            deleteBlock(b);
        for (ExpandableSegment* es : m_expandableSegments)
            destroyExpandableSegment(es);
        for (EventId e : m_eventPool)
            m_backend.destroyEvent(m_device, e);
        for (auto& se : m_cudaEvents) {
            for (auto& pe : se.events)
                m_backend.destroyEvent(m_device, pe.first);
        }
    }

    MallocResult malloc(size_t origSize, StreamId stream);
    Status free(DevicePtr ptr);
    Status recordStream(DevicePtr ptr, StreamId stream);
    void emptyCache(PoolId pool);
    Status setMemoryLimitLocked(std::optional<size_t> bytes)
    {
        std::lock_guard lock(m_mutex);
        m_allowedMemoryMaximum = bytes;
        return Status::Ok;
    }
    Status setMemoryFractionLocked(double fraction)
    {
        std::lock_guard lock(m_mutex);
        return setMemoryFraction(fraction);
    }
    DeviceStats stats() const
    {
        std::lock_guard lock(m_mutex);
        return m_stats;
    }
    void resetPeakStats();
    void resetAccumulatedStats();
    std::vector<SegmentInfo> snapshot() const;
    std::vector<SegmentInfo> snapshotLocked() const; // the caller holds mutex()
    std::mutex& mutex() const { return m_mutex; }
    bool cachedBlockAvailable(size_t origSize, StreamId stream);
    bool reservationReleasesFirst(size_t origSize);
    Status beginAllocateToPool(PoolId id, std::function<bool(StreamId)> filter);
    Status endAllocateToPool(PoolId id);
    Status releasePool(PoolId id);

private:
    struct AllocParams {
        size_t size = 0;
        StreamId stream {};
        BlockPool* pool = nullptr;
        size_t allocSize = 0;
        bool expandableActive = false;
        Block* block = nullptr;
        BackendStatus err = BackendStatus::Ok;
    };
    struct StreamEvents {
        StreamId stream {};
        std::deque<std::pair<EventId, Block*>> events;
    };

    Status setMemoryFraction(double fraction);
    // Reports one event of the current call; returns the stack id the observer attached (0: none).
    uint32_t trace(TraceAction action, uintptr_t addr, size_t size, StreamId stream, PoolId pool, size_t blockSize = 0)
    {
        if (TraceObserver* o = *m_observer)
            return o->onTraceEventWithStack(
                TraceEvent { action, m_device, addr, size, stream, pool, blockSize, m_call });
        return 0;
    }
    StatArray* statArrays();
    void increase(StatArray& a, const BlockPool& pool, size_t amount)
    {
        a[size_t(StatType::Aggregate)].increase(amount);
        a[size_t(pool.isSmall ? StatType::SmallPool : StatType::LargePool)].increase(amount);
    }
    void decrease(StatArray& a, const BlockPool& pool, size_t amount)
    {
        a[size_t(StatType::Aggregate)].decrease(amount);
        a[size_t(pool.isSmall ? StatType::SmallPool : StatType::LargePool)].decrease(amount);
    }

    Block* newBlock(StreamId stream, size_t size, BlockPool* pool, uintptr_t ptr)
    {
        return m_blockPool.make(stream, size, pool, ptr);
    }
    void deleteBlock(Block* b) { m_blockPool.destroy(b); }

    BlockPool& getPool(size_t size, StreamId stream);
    bool shouldSplit(const Block* block, size_t size, bool expandableActive) const;
    bool getFreeBlock(AllocParams& p);
    SizeSet::iterator findFreeBlock(const AllocParams& p);
    void garbageCollectCachedBlocks();
    bool allocBlock(AllocParams& p, bool isRetry);
    bool releaseAvailableCachedBlocks(const AllocParams& p);
    bool releaseCachedBlocks(PoolId pool);
    void releaseBlock(Block* block);
    void releaseBlocks(BlockPool& pool);
    Block* allocFoundBlock(const AllocParams& p, size_t origSize, bool splitRemainder);
    void freeBlock(Block* block);
    size_t tryMergeBlocks(Block* dst, Block* src, BlockPool& pool);

    Block* findExpandableBlock(StreamId stream, BlockPool* pool, size_t size);
    bool mapBlock(Block* toMap, size_t size, BackendStatus& err);
    Block* tryAllocateExpandableBlock(StreamId stream, BlockPool* pool, size_t size, BackendStatus& err);
    void unmapBlock(Block* block);
    void releaseExpandableSegment(Block* block);
    SegmentRange esMap(ExpandableSegment& es, SegmentRange range, BackendStatus& err);
    SegmentRange esUnmap(ExpandableSegment& es, SegmentRange range);
    void destroyExpandableSegment(ExpandableSegment* es);

    void insertEvents(Block* block);
    void processEvents();
    void synchronizeAndFreeEvents(const PrivatePool* pool);
    void insertEventsDeferredUntilNoCapture();
    void removeCudagraphStreamUses(Block* block);
    bool takeEvent(EventId& out);
    void giveEvent(EventId e) { m_eventPool.push_back(e); }

    std::vector<Block*> allBlocks(bool includeUnmapped) const;

    const int m_device;
    Backend& m_backend;
    const AllocatorConfig& m_config;
    TraceObserver* const* m_observer;

    mutable std::mutex m_mutex;
    uint64_t m_call = 0; // under m_mutex: +1 per public call that may report events (TraceEvent::call)
    DeviceStats m_stats;
    NodeArena m_arena; // declared before the pools that allocate from it
    ObjectPool<Block> m_blockPool;
    BlockPool m_largeBlocks; // cached blocks larger than 1 MiB
    BlockPool m_smallBlocks; // cached blocks of 1 MiB or less
    // active_blocks: allocated or pending-free blocks by address (NativeCachingAllocator's allocated_blocks too).
    PtrMap<Block*> m_activeBlocks;
    std::vector<std::pair<PoolId, std::function<bool(StreamId)>>> m_capturesUnderway;
    std::vector<Block*> m_deferredBlocks; // frees with stream uses during a capture
    std::vector<StreamEvents> m_cudaEvents; // outstanding events per stream, FIFO each
    std::vector<EventId> m_eventPool;
    size_t m_totalAllocatedMemory = 0; // bytes reserved from the backend
    std::optional<size_t> m_allowedMemoryMaximum;
    std::vector<ExpandableSegment*> m_expandableSegments;
    std::unordered_map<PoolId, std::unique_ptr<PrivatePool>, PoolIdHash> m_graphPools;
    std::unordered_map<PoolId, PrivatePool*, PoolIdHash> m_graphPoolsFreeable;
    std::unordered_map<Block*, std::vector<StreamId>> m_blockToCudagraphStreamUses;
};

// --- sizes ------------------------------------------------------------------------------------------------------

size_t CachingAllocator::roundSize(size_t size, const AllocatorConfig& config)
{
    // round_size: at least kMinBlockSize; power-of-two divisions when configured for the size's interval and the
    // size exceeds 512 B per division; otherwise a multiple of 512 B.
    if (size < MinBlockSize)
        return MinBlockSize;
    const size_t divisions = config.roundupDivisionsFor(size);
    if (divisions > 1 && size > MinBlockSize * divisions)
        return roundupPower2NextDivision(size, divisions);
    return MinBlockSize * ((size + MinBlockSize - 1) / MinBlockSize);
}

size_t CachingAllocator::allocationSize(size_t size, const AllocatorConfig&)
{
    // get_allocation_size: small requests share 2 MiB segments, 1-10 MiB requests 20 MiB segments
    // (large_segment_size), larger ones get their own segment rounded up to 2 MiB.
    if (size <= SmallSize)
        return SmallBuffer;
    if (size < MinLargeAlloc)
        return LargeBuffer;
    return RoundLarge * ((size + RoundLarge - 1) / RoundLarge);
}

// --- malloc -----------------------------------------------------------------------------------------------------

MallocResult DeviceAllocator::malloc(size_t origSize, StreamId stream)
{
    std::unique_lock lock(m_mutex);
    ++m_call;
    // malloc: completed cross-stream frees are recycled first, except while a graph capture is underway (event
    // queries are illegal during capture).
    if (m_capturesUnderway.empty() && (!m_cudaEvents.empty() || !m_deferredBlocks.empty()))
        processEvents();

    const size_t size = CachingAllocator::roundSize(origSize, m_config);
    BlockPool& pool = getPool(size, stream);
    AllocParams p;
    p.size = size;
    p.stream = stream;
    p.pool = &pool;
    p.allocSize = CachingAllocator::allocationSize(size, m_config);
    // Expandable segments are active unless the pool has its own allocator (user MemPools; not supported here).
    p.expandableActive = m_config.expandableSegments;

    bool found = getFreeBlock(p);
    if (!found) {
        // garbage_collection_threshold only acts when a memory fraction is set.
        if (m_allowedMemoryMaximum && m_config.garbageCollectionThreshold > 0.0)
            garbageCollectCachedBlocks();
        // Reserve; on failure free just enough oversize cached blocks and retry; then free every unsplit cached
        // block (not during a capture) and retry once more.
        found = allocBlock(p, false);
        if (!found && p.err == BackendStatus::OutOfMemory)
            found = releaseAvailableCachedBlocks(p) && allocBlock(p, false);
        if (!found && p.err == BackendStatus::OutOfMemory && m_capturesUnderway.empty())
            found = releaseCachedBlocks(PoolId {}) && allocBlock(p, true);
    }

    MallocResult result;
    if (!found) {
        if (p.err == BackendStatus::Error) {
            result.status = Status::BackendError;
            return result;
        }
        const MemoryInfo info = m_backend.memoryInfo(m_device);
        trace(TraceAction::Oom, info.freeBytes, p.size, stream, ownerPoolId(p.pool));
        m_stats.numOoms += 1;
        result.status = Status::OutOfMemory;
        result.requestedBytes = origSize;
        result.allocationSize = p.allocSize;
        result.deviceFree = info.freeBytes;
        result.deviceTotal = info.totalBytes;
        result.allowedBytes = m_allowedMemoryMaximum.value_or(0);
        result.allocatedBytes = size_t(m_stats.allocatedBytes[size_t(StatType::Aggregate)].current);
        result.reservedBytes = size_t(m_stats.reservedBytes[size_t(StatType::Aggregate)].current);
        return result;
    }

    const bool split = shouldSplit(p.block, p.size, p.expandableActive);
    Block* block = allocFoundBlock(p, origSize, split);
    result.ptr = DevicePtr { block->ptr };
    return result;
}

BlockPool& DeviceAllocator::getPool(size_t size, StreamId stream)
{
    // get_pool: an allocation on a stream that an underway capture filters in goes to that capture's private
    // pool (the most recent capture first); otherwise to the default small or large pool.
    for (auto it = m_capturesUnderway.rbegin(); it != m_capturesUnderway.rend(); ++it) {
        if (it->second(stream)) {
            PrivatePool* pp = m_graphPools.at(it->first).get();
            return size <= SmallSize ? pp->smallBlocks : pp->largeBlocks;
        }
    }
    return size <= SmallSize ? m_smallBlocks : m_largeBlocks;
}

bool DeviceAllocator::shouldSplit(const Block* block, size_t size, bool expandableActive) const
{
    // should_split: small-pool and expandable blocks split whenever 512 B or more remain; large blocks only below
    // max_split_size and when more than 1 MiB (kSmallSize) remains.
    const size_t remaining = block->size - size;
    if (block->pool->isSmall || expandableActive)
        return remaining >= MinBlockSize;
    return size < m_config.maxSplitSize && remaining > SmallSize;
}

bool DeviceAllocator::getFreeBlock(AllocParams& p)
{
    // get_free_block: block reuse intervals are only counted when garbage collection can run.
    if (m_allowedMemoryMaximum && m_config.garbageCollectionThreshold > 0.0)
        ++p.pool->getFreeBlocksCallCount;
    auto it = findFreeBlock(p);
    if (it == p.pool->blocks.end())
        return false;
    p.block = *it;
    p.pool->blocks.erase(it);
    return true;
}

SizeSet::iterator DeviceAllocator::findFreeBlock(const AllocParams& p)
{
    // get_free_block's choice (end() for none).
    BlockPool& pool = *p.pool;
    auto it = pool.blocks.lower_bound(SizeKey { p.stream, p.size, 0 });
    if (it == pool.blocks.end() || (*it)->stream != p.stream)
        return pool.blocks.end();

    if ((*it)->expandable) {
        if (p.expandableActive) {
            // For best fit a free block at the end of an expandable segment counts with the unmapped space after
            // it, since it can grow into it: take a later (bigger) block if it can grow to less.
            auto expandableSize
                = [](const Block* b) { return b->size + (b->next && !b->next->mapped ? b->next->size : 0); };
            auto next = std::next(it);
            while ((*it)->expandable && next != pool.blocks.end() && (*next)->stream == p.stream
                   && expandableSize(*next) < expandableSize(*it)) {
                it = next++;
            }
        } else {
            // Expandable segments were turned off after some were made: only non-expandable blocks qualify.
            do {
                ++it;
            } while (it != pool.blocks.end() && (*it)->expandable && (*it)->stream == p.stream);
            if (it == pool.blocks.end() || (*it)->stream != p.stream)
                return pool.blocks.end();
        }
    }

    // Do not return an oversize block (>= max_split_size) for a request below max_split_size...
    if (p.size < m_config.maxSplitSize && (*it)->size >= m_config.maxSplitSize)
        return pool.blocks.end();
    // ...and an oversize request takes an oversize block only within max_non_split_rounding_size of its size.
    if (p.size >= m_config.maxSplitSize && (*it)->size >= p.size + m_config.maxNonSplitRoundingSize)
        return pool.blocks.end();
    return it;
}

bool DeviceAllocator::cachedBlockAvailable(size_t origSize, StreamId stream)
{
    std::lock_guard lock(m_mutex);
    AllocParams p;
    p.size = CachingAllocator::roundSize(origSize, m_config);
    p.stream = stream;
    p.pool = &getPool(p.size, stream);
    p.expandableActive = m_config.expandableSegments;
    return findFreeBlock(p) != p.pool->blocks.end();
}

bool DeviceAllocator::reservationReleasesFirst(size_t origSize)
{
    // What malloc() would do before its first reservation, for a request no cached block serves: garbage
    // collection runs when reserved bytes exceed the threshold's share of the cap, and the cap itself refuses a
    // reservation that would pass it (then the cache is released and the reservation retried).
    std::lock_guard lock(m_mutex);
    if (!m_allowedMemoryMaximum)
        return false;
    const size_t size = CachingAllocator::roundSize(origSize, m_config);
    if (m_config.garbageCollectionThreshold > 0.0
        && m_totalAllocatedMemory
            > static_cast<size_t>(m_config.garbageCollectionThreshold * static_cast<double>(*m_allowedMemoryMaximum)))
        return true;
    return m_totalAllocatedMemory + CachingAllocator::allocationSize(size, m_config) > *m_allowedMemoryMaximum;
}

void DeviceAllocator::garbageCollectCachedBlocks()
{
    // garbage_collect_cached_blocks: when reserved memory exceeds threshold * allowed memory, release unsplit
    // large cached blocks whose age (get_free_block calls since they were cached) is at least the average age,
    // repeating until enough was reclaimed or nothing could be.
    const size_t gcThreshold = static_cast<size_t>(m_config.garbageCollectionThreshold
                                                   * static_cast<double>(m_allowedMemoryMaximum.value()));
    if (m_totalAllocatedMemory <= gcThreshold)
        return;
    const size_t targetSize = m_totalAllocatedMemory - gcThreshold;
    size_t gcReclaimed = 0;

    auto age = [](const Block* b) {
        return static_cast<size_t>(static_cast<int>(b->pool->getFreeBlocksCallCount - b->gcCountBase));
    };
    size_t totalAge = 0;
    int freeableBlockCount = 0;
    for (const Block* b : m_largeBlocks.blocks) {
        if (!b->isSplit()) {
            totalAge += age(b);
            ++freeableBlockCount;
        }
    }
    if (freeableBlockCount == 0)
        return;

    bool blockFreed = true;
    while (gcReclaimed < targetSize && blockFreed && freeableBlockCount > 0) {
        const double ageThreshold = static_cast<double>(totalAge) / freeableBlockCount;
        blockFreed = false;
        auto it = m_largeBlocks.blocks.begin();
        while (it != m_largeBlocks.blocks.end()) {
            Block* block = *it;
            ++it;
            if (!block->isSplit() && !block->expandable && static_cast<double>(age(block)) >= ageThreshold) {
                blockFreed = true;
                gcReclaimed += block->size;
                totalAge -= age(block);
                --freeableBlockCount;
                releaseBlock(block);
            }
        }
    }
}

bool DeviceAllocator::allocBlock(AllocParams& p, bool isRetry)
{
    // alloc_block
    const size_t size = p.allocSize;
    if (isRetry)
        m_stats.numAllocRetries += 1;

    if (m_allowedMemoryMaximum && m_totalAllocatedMemory + size > *m_allowedMemoryMaximum) {
        // The memory fraction is a cap of the allocator's own: no device call at all.
        p.err = BackendStatus::OutOfMemory;
        return false;
    }
    if (p.expandableActive) {
        BackendStatus err = BackendStatus::OutOfMemory;
        p.block = tryAllocateExpandableBlock(p.stream, p.pool, p.size, err);
        if (p.block) {
            p.err = BackendStatus::Ok;
            if (p.pool->ownerPrivatePool)
                p.pool->ownerPrivatePool->cudaMallocCount++;
        } else {
            p.err = err == BackendStatus::Error ? BackendStatus::Error : BackendStatus::OutOfMemory;
        }
        return p.block != nullptr;
    }

    DevicePtr ptr {};
    p.err = m_backend.allocate(m_device, size, p.stream, &ptr);
    if (p.err != BackendStatus::Ok)
        return false;

    if (p.pool->ownerPrivatePool)
        p.pool->ownerPrivatePool->cudaMallocCount++;
    m_totalAllocatedMemory += size;
    p.block = newBlock(p.stream, size, p.pool, raw(ptr));
    increase(m_stats.segment, *p.pool, 1);
    increase(m_stats.reservedBytes, *p.pool, size);
    if (size >= m_config.maxSplitSize)
        m_stats.oversizeSegments.increase(1);
    m_stats.numDeviceAlloc++;
    trace(TraceAction::SegmentAlloc, p.block->ptr, p.block->size, p.stream, ownerPoolId(p.pool));
    return true;
}

bool DeviceAllocator::releaseAvailableCachedBlocks(const AllocParams& p)
{
    // release_available_cached_blocks: with max_split_size set, free the smallest single oversize cached block of
    // the stream that is at least as big as the request (or max_split_size); failing that, free oversize blocks
    // from the largest down until their sizes add up to that much.
    if (m_config.maxSplitSize == std::numeric_limits<size_t>::max())
        return false;
    BlockPool& pool = *p.pool;
    const SizeKey key { p.stream, std::max(p.size, m_config.maxSplitSize), 0 };
    auto it = pool.blocks.lower_bound(key);
    if (it == pool.blocks.end() || (*it)->stream != p.stream || (*it)->expandable) {
        if (it == pool.blocks.begin())
            return false;
        size_t totalReleased = 0;
        --it; // the largest block of the stream, if the stream has any
        while (totalReleased < key.size && (*it)->size >= m_config.maxSplitSize && (*it)->stream == p.stream) {
            auto cur = it;
            const bool isFirst = cur == pool.blocks.begin();
            if (!isFirst)
                --it;
            // Oversize blocks are never split; the check only guards against a max_split_size changed at run time.
            if (!(*cur)->expandable && !(*cur)->isSplit()) {
                totalReleased += (*cur)->size;
                releaseBlock(*cur);
            }
            if (isFirst)
                break;
        }
        if (totalReleased < key.size)
            return false;
    } else {
        releaseBlock(*it);
    }
    return true;
}

bool DeviceAllocator::releaseCachedBlocks(PoolId poolId)
{
    // release_cached_blocks: for the default pool (and no capture underway) wait for every outstanding event,
    // then release every unsplit cached block, large pool first; then the pools of destroyed graphs.
    if (poolId.isDefault() && m_capturesUnderway.empty()) {
        synchronizeAndFreeEvents(nullptr);
        releaseBlocks(m_largeBlocks);
        releaseBlocks(m_smallBlocks);
    }
    for (auto it = m_graphPoolsFreeable.begin(); it != m_graphPoolsFreeable.end();) {
        if (!poolId.isDefault()) {
            if (it->first == poolId) {
                synchronizeAndFreeEvents(it->second);
            } else {
                ++it;
                continue;
            }
        }
        releaseBlocks(it->second->smallBlocks);
        releaseBlocks(it->second->largeBlocks);
        if (it->second->cudaMallocCount == 0) {
            m_graphPools.erase(it->first);
            it = m_graphPoolsFreeable.erase(it);
        } else {
            ++it;
        }
    }
    return true;
}

void DeviceAllocator::releaseBlock(Block* block)
{
    // release_block: cudaFree a whole cached segment.
    m_stats.numDeviceFree++;
    BlockPool* pool = block->pool;
    trace(TraceAction::SegmentFree, block->ptr, block->size, block->stream, ownerPoolId(pool));
    m_backend.release(m_device, DevicePtr { block->ptr }, block->size);
    m_totalAllocatedMemory -= block->size;
    if (pool->ownerPrivatePool)
        pool->ownerPrivatePool->cudaMallocCount--;
    decrease(m_stats.segment, *pool, 1);
    decrease(m_stats.reservedBytes, *pool, block->size);
    if (block->size >= m_config.maxSplitSize)
        m_stats.oversizeSegments.decrease(1);
    pool->blocks.erase(block);
    deleteBlock(block);
}

void DeviceAllocator::releaseBlocks(BlockPool& pool)
{
    // release_blocks: every unsplit block goes back to the device in pool order (stream, size, address); free
    // blocks of expandable segments have their whole pages unmapped afterwards, and a segment left with nothing
    // mapped gives its address space back.
    std::vector<Block*> toUnmap;
    auto it = pool.blocks.begin();
    while (it != pool.blocks.end()) {
        Block* block = *it;
        ++it;
        if (block->expandable)
            toUnmap.push_back(block);
        else if (!block->prev && !block->next)
            releaseBlock(block);
    }
    for (Block* block : toUnmap) {
        unmapBlock(block);
        if (!block->prev && !block->next)
            releaseExpandableSegment(block);
    }
}

Block* DeviceAllocator::allocFoundBlock(const AllocParams& p, size_t origSize, bool splitRemainder)
{
    // alloc_found_block: the front of the found block becomes the allocation, the rest stays cached.
    const size_t size = p.size;
    BlockPool* pool = p.pool;
    Block* block = p.block;
    const bool alreadySplit = block->isSplit();
    if (splitRemainder) {
        Block* remaining = block;
        block = newBlock(p.stream, size, pool, remaining->ptr);
        block->expandable = remaining->expandable;
        block->prev = remaining->prev;
        if (block->prev)
            block->prev->next = block;
        block->next = remaining;
        remaining->prev = block;
        remaining->ptr += size;
        remaining->size -= size;
        pool->insertIntoBlocks(remaining);
        if (alreadySplit && !block->expandable) {
            // An already split free block shrinks by `size`.
            decrease(m_stats.inactiveSplitBytes, *pool, block->size);
        } else if (!block->expandable) {
            // A new split free block appears.
            increase(m_stats.inactiveSplitBytes, *pool, remaining->size);
            increase(m_stats.inactiveSplit, *pool, 1);
        }
    } else if (alreadySplit && !block->expandable) {
        decrease(m_stats.inactiveSplitBytes, *pool, block->size);
        decrease(m_stats.inactiveSplit, *pool, 1);
    }

    block->allocated = true;
    block->requestedSize = origSize;
    block->stackId = trace(TraceAction::Alloc, block->ptr, origSize, block->stream, ownerPoolId(pool), block->size);
    m_activeBlocks.insert(block->ptr, block);

    increase(m_stats.allocation, *pool, 1);
    increase(m_stats.allocatedBytes, *pool, block->size);
    increase(m_stats.active, *pool, 1);
    increase(m_stats.activeBytes, *pool, block->size);
    increase(m_stats.requestedBytes, *pool, block->requestedSize);
    if (block->size >= m_config.maxSplitSize)
        m_stats.oversizeAllocations.increase(1);
    return block;
}

// --- free -------------------------------------------------------------------------------------------------------

Status DeviceAllocator::free(DevicePtr ptr)
{
    std::lock_guard lock(m_mutex);
    ++m_call;
    Block** found = m_activeBlocks.find(raw(ptr));
    if (!found || !(*found)->allocated)
        return Status::InvalidPointer; // NativeCachingAllocator::free: "invalid device pointer"
    Block* block = *found;

    // free
    block->allocated = false;
    decrease(m_stats.allocation, *block->pool, 1);
    decrease(m_stats.allocatedBytes, *block->pool, block->size);
    trace(TraceAction::FreeRequested, block->ptr, block->requestedSize, block->stream, ownerPoolId(block->pool),
          block->size);
    if (block->size >= m_config.maxSplitSize)
        m_stats.oversizeAllocations.decrease(1);

    if (!block->streamUses.empty()) {
        // Used on other streams: it returns to the pool once events recorded on those streams complete. During
        // a capture events cannot be queried, so the events are only inserted after it.
        if (!m_capturesUnderway.empty())
            m_deferredBlocks.push_back(block);
        else
            insertEvents(block);
    } else {
        freeBlock(block);
    }
    return Status::Ok;
}

void DeviceAllocator::freeBlock(Block* block)
{
    // free_block: merge with free neighbours, back into the pool.
    trace(TraceAction::FreeCompleted, block->ptr, block->requestedSize, block->stream, ownerPoolId(block->pool),
          block->size);
    const uintptr_t originalPtr = block->ptr;
    const size_t originalBlockSize = block->size;
    const size_t requestedSize = block->requestedSize;
    BlockPool& pool = *block->pool;
    int64_t netInactiveSplitBlocks = 0;
    int64_t netInactiveSplitSize = 0;

    Block* const candidates[2] = { block->prev, block->next };
    for (Block* candidate : candidates) {
        const size_t subsumed = tryMergeBlocks(block, candidate, pool);
        if (subsumed > 0) {
            netInactiveSplitBlocks -= 1;
            netInactiveSplitSize -= static_cast<int64_t>(subsumed);
        }
    }
    m_activeBlocks.erase(originalPtr);
    pool.insertIntoBlocks(block);
    if (block->isSplit()) {
        netInactiveSplitBlocks += 1;
        netInactiveSplitSize += static_cast<int64_t>(block->size);
    }

    // Expandable segments are left out of inactive_split: their free pages can always be released.
    if (!block->expandable) {
        if (netInactiveSplitBlocks > 0)
            increase(m_stats.inactiveSplit, pool, size_t(netInactiveSplitBlocks));
        else if (netInactiveSplitBlocks < 0)
            decrease(m_stats.inactiveSplit, pool, size_t(-netInactiveSplitBlocks));
        if (netInactiveSplitSize > 0)
            increase(m_stats.inactiveSplitBytes, pool, size_t(netInactiveSplitSize));
        else if (netInactiveSplitSize < 0)
            decrease(m_stats.inactiveSplitBytes, pool, size_t(-netInactiveSplitSize));
    }
    decrease(m_stats.active, pool, 1);
    decrease(m_stats.activeBytes, pool, originalBlockSize);
    decrease(m_stats.requestedBytes, pool, requestedSize);
}

size_t DeviceAllocator::tryMergeBlocks(Block* dst, Block* src, BlockPool& pool)
{
    // try_merge_blocks: only with a neighbour that is free, has no pending events or stream uses, and is mapped
    // the same way; returns the bytes taken over.
    if (!src || src->allocated || src->eventCount > 0 || !src->streamUses.empty() || dst->mapped != src->mapped)
        return 0;
    if (dst->prev == src) { // [src dst]
        dst->ptr = src->ptr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
    } else { // [dst src]
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    const size_t subsumed = src->size;
    dst->size += subsumed;
    if (src->mapped)
        pool.blocks.erase(src);
    else
        pool.unmapped.erase(src);
    deleteBlock(src);
    return subsumed;
}

Status DeviceAllocator::recordStream(DevicePtr ptr, StreamId stream)
{
    std::lock_guard lock(m_mutex);
    ++m_call;
    Block** found = m_activeBlocks.find(raw(ptr));
    if (!found || !(*found)->allocated)
        return Status::InvalidPointer;
    Block* block = *found;
    // recordStream: uses on the allocation stream need no synchronisation.
    if (stream == block->stream)
        return Status::Ok;
    if (std::find(block->streamUses.begin(), block->streamUses.end(), stream) == block->streamUses.end())
        block->streamUses.push_back(stream);
    if (!m_capturesUnderway.empty()) {
        auto& uses = m_blockToCudagraphStreamUses[block];
        if (std::find(uses.begin(), uses.end(), stream) == uses.end())
            uses.push_back(stream);
    }
    return Status::Ok;
}

// --- events -----------------------------------------------------------------------------------------------------

bool DeviceAllocator::takeEvent(EventId& out)
{
    // EventPool: events are reused rather than created per free.
    if (!m_eventPool.empty()) {
        out = m_eventPool.back();
        m_eventPool.pop_back();
        return true;
    }
    return m_backend.createEvent(m_device, &out) == BackendStatus::Ok;
}

void DeviceAllocator::insertEvents(Block* block)
{
    // insert_events: one event per stream the block was used on, recorded now; the block returns to its pool when
    // the last of them completes.
    std::vector<StreamId> streams = std::move(block->streamUses);
    block->streamUses.clear();
    for (StreamId s : streams) {
        EventId event {};
        if (!takeEvent(event) || m_backend.recordEvent(m_device, event, s) != BackendStatus::Ok) {
            // PyTorch would throw here; waiting for the stream keeps the block safe instead.
            m_backend.synchronizeStream(m_device, s);
            continue;
        }
        block->eventCount++;
        auto it = std::find_if(m_cudaEvents.begin(), m_cudaEvents.end(),
                               [&](const StreamEvents& se) { return se.stream == s; });
        if (it == m_cudaEvents.end()) {
            m_cudaEvents.push_back(StreamEvents { s, {} });
            it = std::prev(m_cudaEvents.end());
        }
        it->events.emplace_back(event, block);
    }
    if (block->eventCount == 0)
        freeBlock(block);
}

void DeviceAllocator::removeCudagraphStreamUses(Block* block)
{
    // remove_cudagraph_stream_uses: streams recorded during the capture are done once it is over.
    auto it = m_blockToCudagraphStreamUses.find(block);
    if (it == m_blockToCudagraphStreamUses.end())
        return;
    std::vector<StreamId> kept;
    for (StreamId s : block->streamUses) {
        if (std::find(it->second.begin(), it->second.end(), s) == it->second.end())
            kept.push_back(s);
    }
    block->streamUses = std::move(kept);
    m_blockToCudagraphStreamUses.erase(it);
}

void DeviceAllocator::insertEventsDeferredUntilNoCapture()
{
    // insert_events_deferred_until_no_capture
    if (m_deferredBlocks.empty())
        return;
    std::vector<Block*> blocks = std::move(m_deferredBlocks);
    m_deferredBlocks.clear();
    for (Block* block : blocks) {
        removeCudagraphStreamUses(block);
        if (block->streamUses.empty())
            freeBlock(block);
        else
            insertEvents(block);
    }
}

void DeviceAllocator::processEvents()
{
    // process_events: per stream, complete events are taken from the front until one is still pending (later
    // events of the same stream cannot be complete before it).
    insertEventsDeferredUntilNoCapture();
    for (auto it = m_cudaEvents.begin(); it != m_cudaEvents.end();) {
        while (!it->events.empty()) {
            auto [event, block] = it->events.front();
            if (!m_backend.queryEvent(m_device, event))
                break;
            giveEvent(event);
            it->events.pop_front();
            if (--block->eventCount == 0)
                freeBlock(block);
        }
        if (it->events.empty())
            it = m_cudaEvents.erase(it);
        else
            ++it;
    }
}

void DeviceAllocator::synchronizeAndFreeEvents(const PrivatePool* pool)
{
    // synchronize_and_free_events: wait for every outstanding event (of `pool` only, if given) and free the
    // blocks they held.
    m_stats.numSyncAllStreams++;
    insertEventsDeferredUntilNoCapture();
    for (auto it = m_cudaEvents.begin(); it != m_cudaEvents.end();) {
        for (auto e = it->events.begin(); e != it->events.end();) {
            Block* block = e->second;
            if (pool && block->pool->ownerPrivatePool != pool) {
                ++e;
                continue;
            }
            m_backend.synchronizeEvent(m_device, e->first);
            giveEvent(e->first);
            e = it->events.erase(e);
            if (--block->eventCount == 0)
                freeBlock(block);
        }
        if (it->events.empty())
            it = m_cudaEvents.erase(it);
        else
            ++it;
    }
}

// --- expandable segments ----------------------------------------------------------------------------------------

SegmentRange DeviceAllocator::esMap(ExpandableSegment& es, SegmentRange range, BackendStatus& err)
{
    // ExpandableSegment::map: whole pages covering the range; all or nothing.
    const size_t begin = es.segmentLeft(range.ptr);
    const size_t end = es.segmentRight(range.ptr + range.size);
    const SegmentRange full { es.base + es.segmentSize * begin, es.segmentSize * (end - begin) };
    if (begin == end)
        return full;
    err = m_backend.mapPages(m_device, DevicePtr { full.ptr }, es.segmentSize, end - begin);
    if (err != BackendStatus::Ok)
        return SegmentRange { full.ptr, 0 };
    if (es.handles.size() < end)
        es.handles.resize(end, false);
    for (size_t i = begin; i < end; ++i)
        es.handles[i] = true;
    es.mappedSize += full.size;
    return full;
}

SegmentRange DeviceAllocator::esUnmap(ExpandableSegment& es, SegmentRange range)
{
    // ExpandableSegment::unmap: only the pages entirely inside the range; waits for the segment's stream first
    // (unmapping does not synchronise by itself).
    const size_t begin = es.segmentRight(range.ptr);
    const size_t end = es.segmentLeft(range.ptr + range.size);
    if (begin >= end)
        return SegmentRange { range.ptr, 0 };
    m_backend.synchronizeStream(m_device, es.stream);
    m_backend.unmapPages(m_device, DevicePtr { es.base + es.segmentSize * begin }, es.segmentSize, end - begin);
    for (size_t i = begin; i < end; ++i)
        es.handles[i] = false;
    while (!es.handles.empty() && !es.handles.back())
        es.handles.pop_back();
    es.mappedSize -= (end - begin) * es.segmentSize;
    return SegmentRange { es.base + es.segmentSize * begin, es.segmentSize * (end - begin) };
}

void DeviceAllocator::destroyExpandableSegment(ExpandableSegment* es)
{
    // ~ExpandableSegment: unmap every mapped run, give back the address space.
    size_t i = 0;
    while (i < es->handles.size()) {
        if (!es->handles[i]) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < es->handles.size() && es->handles[j])
            ++j;
        m_backend.synchronizeStream(m_device, es->stream);
        m_backend.unmapPages(m_device, DevicePtr { es->base + es->segmentSize * i }, es->segmentSize, j - i);
        i = j;
    }
    m_backend.freeAddressSpace(m_device, DevicePtr { es->base }, es->size());
    delete es;
}

Block* DeviceAllocator::findExpandableBlock(StreamId stream, BlockPool* pool, size_t size)
{
    // find_expandable_block: the lowest-address unmapped range of the stream (with the free block right before
    // it) that offers `size` bytes of free or unmapped space; else a new segment whose whole range is unmapped.
    auto allocatable = [](const Block* b) { return b && !b->allocated && b->eventCount == 0 && b->streamUses.empty(); };
    auto hasAvailableAddressSpace = [&](const Block* b) {
        size_t bytes = 0;
        while (bytes < size && allocatable(b)) {
            bytes += b->size;
            b = b->next;
        }
        return bytes >= size;
    };
    Block key(stream, 0, nullptr, 0);
    for (auto it = pool->unmapped.lower_bound(&key); it != pool->unmapped.end() && (*it)->stream == stream; ++it) {
        Block* c = *it;
        if (allocatable(c->prev))
            c = c->prev;
        if (hasAvailableAddressSpace(c))
            return c;
    }

    // Address space for 1 1/8 of the device's memory, in pages of 2 MiB (small pool) or 20 MiB (large pool).
    auto* es = new ExpandableSegment;
    es->stream = stream;
    es->segmentSize = pool->isSmall ? SmallBuffer : LargeBuffer;
    const MemoryInfo info = m_backend.memoryInfo(m_device);
    es->maxHandles = es->numSegments(info.totalBytes + info.totalBytes / 8);
    if (es->maxHandles == 0)
        es->maxHandles = 1;
    DevicePtr base {};
    if (m_backend.reserveAddressSpace(m_device, es->size(), es->segmentSize, &base) != BackendStatus::Ok) {
        delete es;
        return nullptr;
    }
    es->base = raw(base);
    m_expandableSegments.push_back(es);
    Block* candidate = newBlock(stream, es->size(), pool, es->base);
    candidate->mapped = false;
    candidate->expandable = es;
    pool->unmapped.insert(candidate);
    return candidate;
}

bool DeviceAllocator::mapBlock(Block* toMap, size_t size, BackendStatus& err)
{
    // map_block: map pages at the start of an unmapped block, split off what stays unmapped, merge with free
    // neighbours.
    ExpandableSegment& es = *toMap->expandable;
    const SegmentRange mapped = esMap(es, SegmentRange { toMap->ptr, size }, err);
    if (mapped.size == 0)
        return false;
    BlockPool& pool = *toMap->pool;
    pool.unmapped.erase(toMap);
    toMap->mapped = true;
    if (mapped.size < toMap->size) {
        Block* remaining = newBlock(toMap->stream, toMap->size - mapped.size, &pool, toMap->ptr + mapped.size);
        remaining->mapped = false;
        remaining->expandable = toMap->expandable;
        remaining->splice(toMap, toMap->next);
        pool.unmapped.insert(remaining);
        toMap->size = mapped.size;
    }
    tryMergeBlocks(toMap, toMap->prev, pool);
    tryMergeBlocks(toMap, toMap->next, pool);
    pool.insertIntoBlocks(toMap);

    m_totalAllocatedMemory += mapped.size;
    increase(m_stats.reservedBytes, pool, mapped.size);
    m_stats.numDeviceAlloc++;
    trace(TraceAction::SegmentMap, mapped.ptr, mapped.size, toMap->stream, ownerPoolId(&pool));
    return true;
}

Block* DeviceAllocator::tryAllocateExpandableBlock(StreamId stream, BlockPool* pool, size_t size, BackendStatus& err)
{
    // try_allocate_expandable_block: the candidate is unmapped, or free with unmapped space after it; map until
    // the (merged) free block is big enough.
    Block* candidate = findExpandableBlock(stream, pool, size);
    if (!candidate)
        return nullptr;
    if (!candidate->mapped && !mapBlock(candidate, std::min(candidate->size, size), err))
        return nullptr;
    while (candidate->size < size) {
        const size_t remaining = size - candidate->size;
        Block* newCandidate = candidate->next;
        if (!mapBlock(newCandidate, std::min(remaining, newCandidate->size), err))
            return nullptr;
        candidate = newCandidate;
    }
    pool->blocks.erase(candidate);
    return candidate;
}

void DeviceAllocator::unmapBlock(Block* block)
{
    // unmap_block: unmap the whole pages inside a free block; the partial pages at its ends stay as free blocks.
    ExpandableSegment& es = *block->expandable;
    const SegmentRange unmapped = esUnmap(es, SegmentRange { block->ptr, block->size });
    if (unmapped.size == 0)
        return;
    BlockPool& pool = *block->pool;
    pool.blocks.erase(block);

    const size_t beforeSize = unmapped.ptr - block->ptr;
    if (beforeSize > 0) {
        Block* beforeFree = newBlock(block->stream, beforeSize, &pool, block->ptr);
        beforeFree->expandable = block->expandable;
        beforeFree->splice(block->prev, block);
        pool.insertIntoBlocks(beforeFree);
    }
    const size_t afterSize = block->size - (beforeSize + unmapped.size);
    if (afterSize > 0) {
        Block* afterFree = newBlock(block->stream, afterSize, &pool, unmapped.ptr + unmapped.size);
        afterFree->expandable = block->expandable;
        afterFree->splice(block, block->next);
        pool.insertIntoBlocks(afterFree);
    }
    block->ptr = unmapped.ptr;
    block->size = unmapped.size;
    block->mapped = false;
    tryMergeBlocks(block, block->prev, pool);
    tryMergeBlocks(block, block->next, pool);
    pool.unmapped.insert(block);

    m_totalAllocatedMemory -= unmapped.size;
    decrease(m_stats.reservedBytes, pool, unmapped.size);
    if (pool.ownerPrivatePool)
        pool.ownerPrivatePool->cudaMallocCount--;
    m_stats.numDeviceFree++;
    trace(TraceAction::SegmentUnmap, unmapped.ptr, unmapped.size, block->stream, ownerPoolId(&pool));
}

void DeviceAllocator::releaseExpandableSegment(Block* block)
{
    // release_expandable_segment: nothing of the segment is mapped any more.
    auto it = std::find(m_expandableSegments.begin(), m_expandableSegments.end(), block->expandable);
    if (it != m_expandableSegments.end())
        m_expandableSegments.erase(it);
    block->pool->unmapped.erase(block);
    destroyExpandableSegment(block->expandable);
    deleteBlock(block);
}

// --- cache control, pools, memory fraction ---------------------------------------------------------------------

void DeviceAllocator::emptyCache(PoolId pool)
{
    std::lock_guard lock(m_mutex);
    ++m_call;
    releaseCachedBlocks(pool);
}

Status DeviceAllocator::setMemoryFraction(double fraction)
{
    // setMemoryFraction: a fraction below 1 caps the bytes this device may reserve.
    if (!(fraction >= 0.0 && fraction <= 1.0))
        return Status::InvalidArgument;
    m_allowedMemoryMaximum.reset();
    if (fraction < 1.0) {
        const MemoryInfo info = m_backend.memoryInfo(m_device);
        m_allowedMemoryMaximum = static_cast<size_t>(fraction * static_cast<double>(info.totalBytes));
    }
    return Status::Ok;
}

void DeviceAllocator::resetPeakStats()
{
    std::lock_guard lock(m_mutex);
    for (StatArray* a :
         { &m_stats.allocation, &m_stats.segment, &m_stats.active, &m_stats.inactiveSplit, &m_stats.allocatedBytes,
           &m_stats.reservedBytes, &m_stats.activeBytes, &m_stats.inactiveSplitBytes, &m_stats.requestedBytes }) {
        for (Stat& s : *a)
            s.resetPeak();
    }
    m_stats.oversizeAllocations.resetPeak();
    m_stats.oversizeSegments.resetPeak();
}

void DeviceAllocator::resetAccumulatedStats()
{
    std::lock_guard lock(m_mutex);
    for (StatArray* a :
         { &m_stats.allocation, &m_stats.segment, &m_stats.active, &m_stats.inactiveSplit, &m_stats.allocatedBytes,
           &m_stats.reservedBytes, &m_stats.activeBytes, &m_stats.inactiveSplitBytes, &m_stats.requestedBytes }) {
        for (Stat& s : *a)
            s.resetAccumulated();
    }
    m_stats.numAllocRetries = 0;
    m_stats.numOoms = 0;
    m_stats.numSyncAllStreams = 0;
    m_stats.numDeviceAlloc = 0;
    m_stats.numDeviceFree = 0;
    m_stats.oversizeAllocations.resetAccumulated();
    m_stats.oversizeSegments.resetAccumulated();
}

Status DeviceAllocator::beginAllocateToPool(PoolId id, std::function<bool(StreamId)> filter)
{
    std::lock_guard lock(m_mutex);
    ++m_call;
    if (id.isDefault() || !filter)
        return Status::InvalidArgument;
    for (const auto& c : m_capturesUnderway) {
        if (c.first == id)
            return Status::InvalidArgument; // "beginAllocateToPool: already recording to mempool_id"
    }
    // create_or_incref_pool
    auto it = m_graphPools.find(id);
    if (it == m_graphPools.end())
        m_graphPools.emplace(id, std::make_unique<PrivatePool>(id, &m_arena));
    else
        it->second->useCount++;
    m_capturesUnderway.emplace_back(id, std::move(filter));
    return Status::Ok;
}

Status DeviceAllocator::endAllocateToPool(PoolId id)
{
    std::lock_guard lock(m_mutex);
    ++m_call;
    for (auto it = m_capturesUnderway.begin(); it != m_capturesUnderway.end(); ++it) {
        if (it->first == id) {
            m_capturesUnderway.erase(it);
            return Status::Ok;
        }
    }
    return Status::InvalidArgument;
}

Status DeviceAllocator::releasePool(PoolId id)
{
    // releasePool: when no graph uses the pool any more, emptyCache may release its segments.
    std::lock_guard lock(m_mutex);
    ++m_call;
    auto it = m_graphPools.find(id);
    if (it == m_graphPools.end() || it->second->useCount <= 0)
        return Status::InvalidArgument;
    if (--it->second->useCount == 0)
        m_graphPoolsFreeable.emplace(id, it->second.get());
    return Status::Ok;
}

// --- snapshot ---------------------------------------------------------------------------------------------------

std::vector<Block*> DeviceAllocator::allBlocks(bool includeUnmapped) const
{
    // get_all_blocks: cached blocks of every pool, then the active ones.
    std::vector<Block*> blocks;
    auto addPool = [&](const BlockPool& p) {
        blocks.insert(blocks.end(), p.blocks.begin(), p.blocks.end());
        if (includeUnmapped)
            blocks.insert(blocks.end(), p.unmapped.begin(), p.unmapped.end());
    };
    addPool(m_smallBlocks);
    addPool(m_largeBlocks);
    for (const auto& gp : m_graphPools) {
        addPool(gp.second->smallBlocks);
        addPool(gp.second->largeBlocks);
    }
    m_activeBlocks.forEach([&](uintptr_t, Block* b) { blocks.push_back(b); });
    return blocks;
}

std::vector<SegmentInfo> DeviceAllocator::snapshot() const
{
    std::lock_guard lock(m_mutex);
    return snapshotLocked();
}

std::vector<SegmentInfo> DeviceAllocator::snapshotLocked() const
{
    std::vector<SegmentInfo> result;
    for (const Block* head : allBlocks(false)) {
        // snapshot: one segment per contiguous mapped range (a head has no mapped predecessor).
        if (head->prev && head->prev->mapped)
            continue;
        SegmentInfo s;
        s.device = m_device;
        s.address = head->ptr;
        s.stream = head->stream;
        s.isLarge = !head->pool->isSmall;
        s.isExpandable = head->expandable != nullptr;
        s.pool = ownerPoolId(head->pool);
        for (const Block* b = head; b && b->mapped; b = b->next) {
            BlockInfo bi;
            bi.address = b->ptr;
            bi.size = b->size;
            bi.requestedSize = b->requestedSize;
            bi.allocated = b->allocated;
            bi.active = b->allocated || b->eventCount > 0 || !b->streamUses.empty();
            bi.stackId = bi.active ? b->stackId : 0;
            s.totalSize += bi.size;
            if (bi.allocated)
                s.allocatedSize += bi.size;
            if (bi.active) {
                s.activeSize += bi.size;
                s.requestedSize += bi.requestedSize;
            }
            s.blocks.push_back(bi);
        }
        result.push_back(std::move(s));
    }
    std::sort(result.begin(), result.end(),
              [](const SegmentInfo& a, const SegmentInfo& b) { return a.address < b.address; });
    return result;
}

// --- CachingAllocator -------------------------------------------------------------------------------------------

CachingAllocator::CachingAllocator(Backend& backend, const AllocatorConfig& config)
    : m_config(config)
{
    const int n = backend.deviceCount();
    m_devices.reserve(size_t(n > 0 ? n : 0));
    for (int i = 0; i < n; ++i)
        m_devices.push_back(std::make_unique<DeviceAllocator>(i, backend, m_config, &m_observer));
}

CachingAllocator::~CachingAllocator() = default;

DeviceAllocator* CachingAllocator::device(int index) const
{
    return index >= 0 && index < static_cast<int>(m_devices.size()) ? m_devices[size_t(index)].get() : nullptr;
}

MallocResult CachingAllocator::malloc(int device, size_t size, StreamId stream)
{
    DeviceAllocator* d = this->device(device);
    if (!d) {
        MallocResult r;
        r.status = Status::InvalidDevice;
        return r;
    }
    return d->malloc(size, stream);
}

Status CachingAllocator::free(int device, DevicePtr ptr)
{
    DeviceAllocator* d = this->device(device);
    return d ? d->free(ptr) : Status::InvalidDevice;
}

Status CachingAllocator::recordStream(int device, DevicePtr ptr, StreamId stream)
{
    DeviceAllocator* d = this->device(device);
    return d ? d->recordStream(ptr, stream) : Status::InvalidDevice;
}

void CachingAllocator::emptyCache()
{
    for (auto& d : m_devices)
        d->emptyCache(PoolId {});
}

Status CachingAllocator::emptyCache(int device)
{
    DeviceAllocator* d = this->device(device);
    if (!d)
        return Status::InvalidDevice;
    d->emptyCache(PoolId {});
    return Status::Ok;
}

Status CachingAllocator::setMemoryLimit(int device, std::optional<size_t> bytes)
{
    DeviceAllocator* d = this->device(device);
    return d ? d->setMemoryLimitLocked(bytes) : Status::InvalidDevice;
}

Status CachingAllocator::setMemoryFraction(int device, double fraction)
{
    DeviceAllocator* d = this->device(device);
    return d ? d->setMemoryFractionLocked(fraction) : Status::InvalidDevice;
}

DeviceStats CachingAllocator::stats(int device) const
{
    DeviceAllocator* d = this->device(device);
    return d ? d->stats() : DeviceStats {};
}

void CachingAllocator::resetPeakStats(int device)
{
    if (DeviceAllocator* d = this->device(device))
        d->resetPeakStats();
}

void CachingAllocator::resetAccumulatedStats(int device)
{
    if (DeviceAllocator* d = this->device(device))
        d->resetAccumulatedStats();
}

std::vector<SegmentInfo> CachingAllocator::snapshot(int device) const
{
    DeviceAllocator* d = this->device(device);
    return d ? d->snapshot() : std::vector<SegmentInfo> {};
}

std::vector<SegmentInfo> CachingAllocator::snapshotAll(const std::function<void()>& whileLocked) const
{
    std::vector<std::unique_lock<std::mutex>> locks;
    locks.reserve(m_devices.size());
    for (const auto& d : m_devices)
        locks.emplace_back(d->mutex());
    if (whileLocked)
        whileLocked();
    std::vector<SegmentInfo> result;
    for (const auto& d : m_devices) {
        std::vector<SegmentInfo> one = d->snapshotLocked();
        result.insert(result.end(), std::make_move_iterator(one.begin()), std::make_move_iterator(one.end()));
    }
    return result;
}

bool CachingAllocator::reservationReleasesFirst(int device, size_t size) const
{
    DeviceAllocator* d = this->device(device);
    return d && d->reservationReleasesFirst(size);
}

bool CachingAllocator::cachedBlockAvailable(int device, size_t size, StreamId stream) const
{
    DeviceAllocator* d = this->device(device);
    return d && d->cachedBlockAvailable(size, stream);
}

Status CachingAllocator::beginAllocateToPool(int device, PoolId pool, std::function<bool(StreamId)> filter)
{
    DeviceAllocator* d = this->device(device);
    return d ? d->beginAllocateToPool(pool, std::move(filter)) : Status::InvalidDevice;
}

Status CachingAllocator::endAllocateToPool(int device, PoolId pool)
{
    DeviceAllocator* d = this->device(device);
    return d ? d->endAllocateToPool(pool) : Status::InvalidDevice;
}

Status CachingAllocator::releasePool(int device, PoolId pool)
{
    DeviceAllocator* d = this->device(device);
    return d ? d->releasePool(pool) : Status::InvalidDevice;
}

void CachingAllocator::setTraceObserver(TraceObserver* observer) { m_observer = observer; }

// --- names and messages -----------------------------------------------------------------------------------------

std::string_view traceActionName(TraceAction action)
{
    // The action names of a snapshot's trace entries (torch/csrc/cuda/memory_snapshot.cpp).
    switch (action) {
    case TraceAction::Alloc:
        return "alloc";
    case TraceAction::FreeRequested:
        return "free_requested";
    case TraceAction::FreeCompleted:
        return "free_completed";
    case TraceAction::SegmentAlloc:
        return "segment_alloc";
    case TraceAction::SegmentFree:
        return "segment_free";
    case TraceAction::SegmentMap:
        return "segment_map";
    case TraceAction::SegmentUnmap:
        return "segment_unmap";
    case TraceAction::Oom:
        return "oom";
    case TraceAction::Count:
        break;
    }
    return "unknown";
}

std::string_view statusName(Status status)
{
    switch (status) {
    case Status::Ok:
        return "ok";
    case Status::OutOfMemory:
        return "out of memory";
    case Status::InvalidDevice:
        return "invalid device";
    case Status::InvalidPointer:
        return "invalid device pointer";
    case Status::InvalidArgument:
        return "invalid argument";
    case Status::BackendError:
        return "device error";
    }
    return "unknown";
}

std::string formatSize(uint64_t size)
{
    // format_size in CUDACachingAllocator.cpp: bytes up to 1 KiB, then KiB/MiB/GiB with two decimals.
    char buf[64];
    if (size <= 1024)
        std::snprintf(buf, sizeof buf, "%" PRIu64 " bytes", size);
    else if (size <= 1048576)
        std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(size) / 1024.0);
    else if (size <= 1073741824ull)
        std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(size) / 1048576.0);
    else
        std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(size) / 1073741824.0);
    return buf;
}

std::string describeOutOfMemory(int device, const MallocResult& r)
{
    // DeviceCachingAllocator::malloc's OutOfMemoryError text (without the per-process NVML part).
    std::string s = "CUDA out of memory. Tried to allocate " + formatSize(r.allocationSize) + ". GPU "
        + std::to_string(device) + " has a total capacity of " + formatSize(r.deviceTotal) + " of which "
        + formatSize(r.deviceFree) + " is free. ";
    if (r.allowedBytes)
        s += formatSize(r.allowedBytes) + " allowed; ";
    s += "Of the allocated memory " + formatSize(r.allocatedBytes) + " is allocated by PyTorch, and "
        + formatSize(r.reservedBytes - std::min(r.reservedBytes, r.allocatedBytes))
        + " is reserved by PyTorch but unallocated.";
    return s;
}

} // namespace memscope::agent
