// The decision oracle. See allocatorreplay.h.
//
// How a trace becomes calls. PyTorch records what its allocator did, not what it was asked, so the asks are
// recovered from the shape of the trace (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator):
//  - `alloc`/`oom` ends one malloc() call. The entries just before it belong to that call: `free_completed` of
//    blocks whose free waited for other streams (process_events, or synchronize_and_free_events on a retry),
//    `segment_free`/`segment_unmap` (the cache released after a failed reservation: release_cached_blocks),
//    `segment_alloc`/`segment_map` (alloc_block / map_block). The backend is scripted to hand out exactly the
//    trace's segment addresses, to fail the first reservation when the call released cached segments first, and
//    every reservation when it ended in `oom`. The call's size is the alloc's requested size (the oom entry's
//    rounded size; rounding is idempotent), its stream the entry's stream.
//  - `free_requested` is a free() call. When its `free_completed` does not follow at once the block was used on
//    another stream (record_stream): the replay records a use on a stream of its own before freeing, and completes
//    that stream's event where the trace shows the `free_completed`.
//  - `segment_free`/`segment_unmap`/`free_completed` runs that no malloc explains are an empty_cache() call.
//  - Allocations that land in a segment of a private pool (CUDA graphs, pool (1, 0)...; a MemPool, (0, 1)...) were
//    made during a capture or a use_mem_pool block: the replay begins allocating to that pool on their stream just
//    before the first of a run of them and ends after the last, a run being the stream's allocations up to one that
//    goes to another pool (beginAllocateToPool / endAllocateToPool; no capture spans an empty_cache either).
//    A segment's pool is the final snapshot's for segments alive at the end. For one freed before, the trace does
//    not say (PyTorch 2.11 writes no pool on trace entries): it is taken as the default pool until the replay shows
//    it cannot be (a default request that PyTorch gave a new segment while this one had a block that fits), and the
//    replay starts again with that segment in a pool of its own; a private pool whose segments the trace frees was
//    released first (releasePool: its MemPool deleted, its graph reset).
// Every event the allocator reports must equal the next trace entry (action, address, size, stream); only the
// order of `free_completed` entries of one process_events pass may differ (PyTorch walks a hash map of streams).
#include "allocatorreplay.h"

#include "agent/allocator.h"
#include "agent/config.h"
#include "agent/hostbackend.h"
#include "diffcommand.h"
#include "io/snapshotio.h"
#include "model/snapshot.h"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

namespace memscope {

namespace {

    using model::Action;

    std::string hex(uintptr_t v)
    {
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, v);
        return buf;
    }

    // Replay streams of our own for record_stream uses: far from any real cudaStream_t value.
    constexpr uintptr_t SyntheticStreamBase = uintptr_t(0x5eed) << 48;

    struct Entry {
        Action action = Action::Unknown;
        uintptr_t addr = 0;
        size_t size = 0;
        uintptr_t stream = 0;
        size_t index = 0; // in the device's trace, as the snapshot numbers it
        agent::PoolId pool; // allocs: the pool the final state puts their segment in
    };

    class Recorder final : public agent::TraceObserver {
    public:
        void onTraceEvent(const agent::TraceEvent& event) override { events.push_back(event); }
        std::vector<agent::TraceEvent> events;
    };

    Action actionOf(agent::TraceAction a)
    {
        switch (a) {
        case agent::TraceAction::Alloc:
            return Action::Alloc;
        case agent::TraceAction::FreeRequested:
            return Action::FreeRequested;
        case agent::TraceAction::FreeCompleted:
            return Action::FreeCompleted;
        case agent::TraceAction::SegmentAlloc:
            return Action::SegmentAlloc;
        case agent::TraceAction::SegmentFree:
            return Action::SegmentFree;
        case agent::TraceAction::SegmentMap:
            return Action::SegmentMap;
        case agent::TraceAction::SegmentUnmap:
            return Action::SegmentUnmap;
        case agent::TraceAction::Oom:
            return Action::Oom;
        case agent::TraceAction::Count:
            break;
        }
        return Action::Unknown;
    }

    bool matches(const agent::TraceEvent& ev, const Entry& e)
    {
        if (actionOf(ev.action) != e.action || raw(ev.stream) != e.stream || ev.size != e.size)
            return false;
        // An oom entry's address is the device's free memory, which only the real device knew.
        return e.action == Action::Oom || ev.addr == e.addr;
    }

    std::string describeEntry(const Entry& e)
    {
        std::string s = std::string(model::actionName(e.action));
        if (e.action == Action::Oom)
            return s + " of " + std::to_string(e.size) + " B on stream " + std::to_string(e.stream);
        return s + " " + hex(e.addr) + " of " + std::to_string(e.size) + " B on stream " + std::to_string(e.stream);
    }

    std::string describeEvent(const agent::TraceEvent& ev)
    {
        std::string s = std::string(agent::traceActionName(ev.action));
        if (ev.action == agent::TraceAction::Oom)
            return s + " of " + std::to_string(ev.size) + " B on stream " + std::to_string(raw(ev.stream));
        return s + " " + hex(ev.addr) + " of " + std::to_string(ev.size) + " B on stream "
            + std::to_string(raw(ev.stream));
    }

    // The allocator settings a snapshot recorded (torch/csrc/cuda/memory_snapshot.cpp, allocator_settings):
    // the settings string first, then the parsed values PyTorch reports, which win.
    agent::AllocatorConfig configFromSettings(const model::Value* settings, std::string& problem)
    {
        agent::AllocatorConfig c;
        if (!settings || settings->kind != model::Value::Kind::Dict)
            return c;
        if (const model::Value* text = settings->find("PYTORCH_CUDA_ALLOC_CONF");
            text && text->kind == model::Value::Kind::String && !text->text.empty()) {
            agent::ConfigParse p = agent::parseAllocatorConfig(text->text);
            if (p.ok)
                c = p.config;
            else
                problem = "its PYTORCH_CUDA_ALLOC_CONF '" + text->text + "' does not parse: " + p.error;
        }
        auto integer = [](const model::Value* v, int64_t& out) {
            if (!v)
                return false;
            if (v->kind == model::Value::Kind::Int)
                out = v->integer;
            else if (v->kind == model::Value::Kind::Float)
                out = static_cast<int64_t>(v->real);
            else if (v->kind == model::Value::Kind::Bool)
                out = v->boolean ? 1 : 0;
            else
                return false;
            return true;
        };
        int64_t n = 0;
        if (integer(settings->find("max_split_size"), n))
            c.maxSplitSize = n < 0 ? std::numeric_limits<size_t>::max() : size_t(n);
        if (integer(settings->find("max_non_split_rounding_size"), n) && n > 0)
            c.maxNonSplitRoundingSize = size_t(n);
        if (const model::Value* v = settings->find("garbage_collection_threshold")) {
            if (v->kind == model::Value::Kind::Float)
                c.garbageCollectionThreshold = v->real;
            else if (v->kind == model::Value::Kind::Int)
                c.garbageCollectionThreshold = double(v->integer);
        }
        if (integer(settings->find("expandable_segments"), n))
            c.expandableSegments = n != 0;
        if (const model::Value* v = settings->find("roundup_power2_divisions")) {
            // A dict {interval start in MB: divisions} ('1', '2', ... '32768'), or a list by interval in older files.
            if (v->kind == model::Value::Kind::Dict) {
                for (const auto& [key, value] : v->entries) {
                    int64_t mb = 0, div = 0;
                    try {
                        mb = std::stoll(key);
                    } catch (...) {
                        continue;
                    }
                    if (mb <= 0 || !integer(&value, div))
                        continue;
                    const size_t index = size_t(63 - std::countl_zero(uint64_t(mb)));
                    if (index < c.roundupPower2Divisions.size())
                        c.roundupPower2Divisions[index] = size_t(std::max<int64_t>(div, 0));
                }
            } else if (v->kind == model::Value::Kind::List) {
                for (size_t i = 0; i < v->items.size() && i < c.roundupPower2Divisions.size(); ++i) {
                    int64_t div = 0;
                    if (integer(&v->items[i], div))
                        c.roundupPower2Divisions[i] = size_t(std::max<int64_t>(div, 0));
                }
            }
        }
        return c;
    }

    // The device memory to give the replay's backend when the command line does not say: small enough that each
    // expandable segment's address reservation (9/8 of the device's memory in whole 20 MiB pages, as
    // ExpandableSegment reserves it) ends before the next one the trace shows. Distinct segments are a device's
    // memory or more apart, pages of one segment less, so the smallest gap of 1 GiB or more between the trace's
    // mapped addresses is one reservation plus the driver's alignment. 0: no expandable segment, or only one.
    size_t estimateDeviceMemory(const model::Trace& trace)
    {
        std::vector<uint64_t> maps;
        for (const model::TraceEntry& e : trace) {
            if (e.action == Action::SegmentMap)
                maps.push_back(uint64_t(e.addr));
        }
        std::sort(maps.begin(), maps.end());
        maps.erase(std::unique(maps.begin(), maps.end()), maps.end());
        constexpr uint64_t MinGap = uint64_t(1) << 30;
        uint64_t reservation = 0;
        for (size_t i = 1; i < maps.size(); ++i) {
            const uint64_t gap = maps[i] - maps[i - 1];
            if (gap >= MinGap && (reservation == 0 || gap < reservation))
                reservation = gap;
        }
        if (reservation == 0)
            return 0;
        constexpr uint64_t LargePage = 20 << 20; // kLargeBuffer, the large pool's page
        const uint64_t pages = reservation / LargePage; // whole pages that fit
        return size_t((pages * LargePage) / 9 * 8) - LargePage;
    }

    struct DeviceResult {
        size_t allocs = 0; // alloc entries in the trace
        size_t matchedAllocs = 0;
        size_t counts[size_t(Action::Count)] = {};
        bool replayed = false; // the whole trace went through without divergence
        std::string divergence; // first diverging event and why
        bool stateIdentical = false;
        std::string stateDifference;
        size_t segments = 0;
        size_t blocks = 0;
        // When the divergence shows that a segment freed before the end was in a private pool: the trace index of
        // its segment_alloc (a replay that knows it can go further).
        std::optional<size_t> privateSegment;
    };

    // Segments (by the trace index of their segment_alloc) found to be in a pool of their own, and that pool.
    using PrivateSegments = std::map<size_t, agent::PoolId>;

    class DeviceReplay {
    public:
        DeviceReplay(int device, const model::Snapshot& s, agent::CachingAllocator& allocator,
                     agent::HostBackend& backend, Recorder& recorder, size_t memoryLimit,
                     const PrivateSegments& privateSegments)
            : m_device(device)
            , m_snapshot(s)
            , m_allocator(allocator)
            , m_backend(backend)
            , m_recorder(recorder)
            , m_memoryLimit(memoryLimit)
            , m_privateSegments(privateSegments)
            , m_windows(allocator, device)
        {
        }

        DeviceResult run()
        {
            collect();
            for (const Entry& e : m_entries) {
                m_result.counts[size_t(e.action)]++;
                if (e.action == Action::Alloc)
                    m_result.allocs++;
            }
            if (!m_unreplayable.empty()) {
                m_result.divergence = m_unreplayable;
                return m_result;
            }
            if (replayAll())
                m_result.replayed = true;
            compareFinalState();
            finishOutcome(m_allocator, m_device, outcome);
            return m_result;
        }

    private:
        // The device's trace entries the allocator can produce, and which pool each alloc went to.
        void collect()
        {
            const auto& trace = size_t(m_device) < m_snapshot.deviceTraces.size()
                ? m_snapshot.deviceTraces[size_t(m_device)]
                : model::Trace {};
            for (size_t i = 0; i < trace.size(); ++i) {
                const model::TraceEntry& t = trace[i];
                switch (t.action) {
                case Action::Alloc:
                case Action::FreeRequested:
                case Action::FreeCompleted:
                case Action::SegmentAlloc:
                case Action::SegmentFree:
                case Action::SegmentMap:
                case Action::SegmentUnmap:
                case Action::Oom:
                    m_entries.push_back(
                        Entry { t.action, uintptr_t(t.addr), size_t(t.size), uintptr_t(m_snapshot.stream(t)), i, {} });
                    break;
                default:
                    break; // snapshot markers and actions this allocator never reports
                }
            }

            bool anyRequested = false, anyCompleted = false;
            for (const Entry& e : m_entries) {
                anyRequested = anyRequested || e.action == Action::FreeRequested;
                anyCompleted = anyCompleted || e.action == Action::FreeCompleted;
            }
            m_skipsFreeRequested = anyCompleted && !anyRequested;

            // Reserved bytes before each entry, and the peak (see replayAll).
            m_reservedBefore.resize(m_entries.size() + 1);
            size_t reserved = 0;
            for (size_t k = 0; k < m_entries.size(); ++k) {
                m_reservedBefore[k] = reserved;
                const Entry& e = m_entries[k];
                if (e.action == Action::SegmentAlloc || e.action == Action::SegmentMap)
                    reserved += e.size;
                else if (e.action == Action::SegmentFree || e.action == Action::SegmentUnmap)
                    reserved -= std::min(reserved, e.size);
                m_peakReserved = std::max(m_peakReserved, reserved);
            }
            m_reservedBefore[m_entries.size()] = reserved;

            // Segments alive at the end must come from this trace, else it does not start with the process.
            // An expandable segment is reported as each contiguous mapped range (snapshot()), so it may begin
            // inside a range the trace mapped, after pages before it were unmapped.
            std::set<uintptr_t> created;
            std::map<uintptr_t, uintptr_t> mapped; // start -> end of every range the trace mapped
            for (const Entry& e : m_entries) {
                if (e.action == Action::SegmentAlloc)
                    created.insert(e.addr);
                if (e.action == Action::SegmentMap) {
                    uintptr_t& end = mapped[e.addr];
                    end = std::max(end, e.addr + e.size);
                }
            }
            auto wasMapped = [&](uintptr_t a) {
                auto it = mapped.upper_bound(a);
                if (it == mapped.begin())
                    return false;
                for (--it;; --it) {
                    if (a < it->second)
                        return true;
                    if (it == mapped.begin())
                        return false;
                }
            };
            for (const model::Segment& seg : m_snapshot.segments) {
                if (seg.device != m_device)
                    continue;
                const uintptr_t a = uintptr_t(seg.address);
                if (!(seg.isExpandable ? wasMapped(a) : created.count(a))) {
                    m_unreplayable = "the trace is incomplete: segment " + hex(uintptr_t(seg.address))
                        + " of the final state was never allocated in it (recording started late, or the "
                          "max_entries ring buffer wrapped); only a complete trace can be replayed";
                    return;
                }
            }

            // Private pools: allocations made after the last segment_alloc of a segment that ends up in a private
            // pool, inside that segment, were made while a capture was allocating to that pool.
            for (const model::Segment& seg : m_snapshot.segments) {
                if (seg.device != m_device || (seg.poolId.first == 0 && seg.poolId.second == 0))
                    continue;
                const uintptr_t lo = uintptr_t(seg.address);
                const uintptr_t hi = lo + uintptr_t(seg.totalSize);
                size_t start = 0;
                for (size_t k = 0; k < m_entries.size(); ++k) {
                    if ((m_entries[k].action == Action::SegmentAlloc || m_entries[k].action == Action::SegmentMap)
                        && m_entries[k].addr == lo)
                        start = k;
                }
                for (size_t k = start; k < m_entries.size(); ++k) {
                    Entry& e = m_entries[k];
                    if (e.action == Action::Alloc && e.addr >= lo && e.addr < hi)
                        e.pool = agent::PoolId { seg.poolId.first, seg.poolId.second };
                }
            }
            // Every segment's life in the trace (segment_alloc to its segment_free); those found private before
            // put their allocations in their pool.
            std::map<uintptr_t, size_t> alive; // address -> its Life
            for (size_t k = 0; k < m_entries.size(); ++k) {
                const Entry& e = m_entries[k];
                if (e.action == Action::SegmentAlloc) {
                    alive[e.addr] = m_lives.size();
                    m_lives.push_back(Life { k, m_entries.size(), e.addr, e.addr + e.size });
                } else if (e.action == Action::SegmentFree) {
                    if (auto it = alive.find(e.addr); it != alive.end()) {
                        m_lives[it->second].end = k;
                        alive.erase(it);
                    }
                }
            }
            for (const Life& life : m_lives) {
                auto hint = m_privateSegments.find(m_entries[life.begin].index);
                if (hint == m_privateSegments.end())
                    continue;
                for (size_t k = life.begin; k < life.end; ++k) {
                    Entry& e = m_entries[k];
                    if (e.action == Action::Alloc && e.addr >= life.lo && e.addr < life.hi)
                        e.pool = hint->second;
                }
            }
            // A run of private allocations on a stream ends where the stream's next allocation goes to another pool.
            std::map<uintptr_t, size_t> lastOnStream; // stream -> its latest allocation
            for (size_t k = 0; k < m_entries.size(); ++k) {
                const Entry& e = m_entries[k];
                if (e.action != Action::Alloc)
                    continue;
                auto it = lastOnStream.find(e.stream);
                if (it != lastOnStream.end() && !(m_entries[it->second].pool == e.pool)
                    && !m_entries[it->second].pool.isDefault())
                    m_runEnds.insert(it->second);
                lastOnStream[e.stream] = k;
            }
            for (const auto& [stream, k] : lastOnStream)
                if (!m_entries[k].pool.isDefault())
                    m_runEnds.insert(k);
        }

        // The pool of the segment at `address` alive at entry k (default when unknown or none).
        agent::PoolId poolAt(uintptr_t address, size_t k) const
        {
            for (const Life& life : m_lives) {
                if (address >= life.lo && address < life.hi && life.begin <= k && k <= life.end) {
                    auto hint = m_privateSegments.find(m_entries[life.begin].index);
                    if (hint != m_privateSegments.end())
                        return hint->second;
                    if (life.end == m_entries.size()) {
                        for (const model::Segment& seg : m_snapshot.segments)
                            if (seg.device == m_device && uintptr_t(seg.address) == life.lo)
                                return agent::PoolId { seg.poolId.first, seg.poolId.second };
                    }
                    return {};
                }
            }
            return {};
        }
        // The life of the segment at `address` alive at entry k; SIZE_MAX when none.
        size_t lifeAt(uintptr_t address, size_t k) const
        {
            for (size_t i = 0; i < m_lives.size(); ++i) {
                const Life& life = m_lives[i];
                if (address >= life.lo && address < life.hi && life.begin <= k && k <= life.end)
                    return i;
            }
            return SIZE_MAX;
        }

        bool diverge(const Entry* expected, const std::string& why)
        {
            if (expected)
                m_result.divergence = "first divergence at event " + std::to_string(expected->index) + " ("
                    + describeEntry(*expected) + "): " + why;
            else
                m_result.divergence = "after the last trace event: " + why;
            return false;
        }

        // Where an address lies in the allocator's current state, for explanations.
        std::string locate(uintptr_t addr) const
        {
            for (const agent::SegmentInfo& s : m_allocator.snapshot(m_device)) {
                if (addr >= s.address && addr < s.address + s.totalSize)
                    return "in memscope's " + std::string(s.isLarge ? "large" : "small") + " segment " + hex(s.address)
                        + " of " + std::to_string(s.totalSize) + " B on stream " + std::to_string(raw(s.stream));
            }
            return "in no segment memscope holds";
        }

        std::string explain(const agent::TraceEvent& got, const Entry& expected) const
        {
            if (actionOf(got.action) == expected.action && got.action == agent::TraceAction::Alloc) {
                return "expected address " + hex(expected.addr) + ", got " + hex(got.addr) + ": memscope placed the "
                    + std::to_string(agent::CachingAllocator::roundSize(expected.size, m_allocator.config()))
                    + " B block " + locate(got.addr) + "; PyTorch's address is " + locate(expected.addr);
            }
            if (actionOf(got.action) == expected.action && got.addr == expected.addr && got.size != expected.size) {
                if (expected.action == Action::FreeRequested || expected.action == Action::FreeCompleted)
                    return "memscope's block there was requested with " + std::to_string(got.size)
                        + " B, the trace frees " + std::to_string(expected.size) + " B";
                return "same address, but memscope's " + std::string(agent::traceActionName(got.action)) + " is "
                    + std::to_string(got.size) + " B where PyTorch's is " + std::to_string(expected.size) + " B";
            }
            if (actionOf(got.action) == expected.action && got.addr != expected.addr)
                return "expected address " + hex(expected.addr) + ", got " + hex(got.addr) + " (" + describeEvent(got)
                    + ")";
            return "memscope did " + describeEvent(got) + " where PyTorch's trace has " + describeEntry(expected);
        }

        // Matches what the last call reported against the trace from m_next on.
        bool consume()
        {
            for (const agent::TraceEvent& ev : m_recorder.events) {
                if (m_skipsFreeRequested && ev.action == agent::TraceAction::FreeRequested)
                    continue; // the trace does not record them
                if (m_next >= m_entries.size())
                    return diverge(nullptr, "memscope did " + describeEvent(ev) + " after PyTorch's trace ended");
                Entry& expected = m_entries[m_next];
                if (!matches(ev, expected)) {
                    bool swapped = false;
                    if (ev.action == agent::TraceAction::FreeCompleted && expected.action == Action::FreeCompleted) {
                        // One process_events pass frees in stream order, which PyTorch takes from a hash map.
                        for (size_t k = m_next + 1;
                             k < m_entries.size() && m_entries[k].action == Action::FreeCompleted; ++k) {
                            if (matches(ev, m_entries[k])) {
                                std::swap(m_entries[m_next], m_entries[k]);
                                swapped = true;
                                break;
                            }
                        }
                    }
                    if (ev.action == agent::TraceAction::SegmentFree && expected.action == Action::SegmentFree) {
                        // One release_cached_blocks frees the freeable private pools in the order of a hash map
                        // (graph_pools_freeable, an unordered_map), and the replay may split one pool in several.
                        for (size_t k = m_next + 1; k < m_entries.size() && m_entries[k].action == Action::SegmentFree;
                             ++k) {
                            if (matches(ev, m_entries[k])) {
                                std::swap(m_entries[m_next], m_entries[k]);
                                swapped = true;
                                break;
                            }
                        }
                    }
                    if (!swapped) {
                        notePrivateSegment(ev, expected);
                        return diverge(&expected, explain(ev, expected));
                    }
                }
                const Entry& e = m_entries[m_next];
                if (e.action == Action::Alloc)
                    m_result.matchedAllocs++;
                if (e.action == Action::FreeCompleted) {
                    m_pending.erase(e.addr);
                    logCompletion(e.addr); // one the allocator completed itself (a synchronize)
                }
                ++m_next;
            }
            m_recorder.events.clear();
            watchOutcome(m_allocator, m_device, outcome, m_next ? m_entries[m_next - 1].index : 0);
            return true;
        }

        // PyTorch reserved a new segment (or used another) where memscope placed the block in a segment it had: the
        // request and that segment were in different pools. A segment freed before the end whose pool is not known yet (taken as the
        // default one) was private; else the request was, and so is the segment PyTorch reserved for it.
        void notePrivateSegment(const agent::TraceEvent& got, const Entry& expected)
        {
            const size_t used = lifeAt(got.addr, m_next);
            auto unknown = [&](size_t life) {
                return life != SIZE_MAX && m_lives[life].end < m_entries.size()
                    && !m_privateSegments.count(m_entries[m_lives[life].begin].index);
            };
            // memscope released a cached segment that PyTorch kept until later: it was in a pool not released yet.
            if (got.action == agent::TraceAction::SegmentFree) {
                if (unknown(used) && m_lives[used].end > m_next)
                    m_result.privateSegment = m_entries[m_lives[used].begin].index;
                return;
            }
            if (got.action != agent::TraceAction::Alloc
                || (expected.action != Action::SegmentAlloc && expected.action != Action::Alloc))
                return;
            // PyTorch placed it in another segment it had: the one memscope chose was not the request's pool's.
            if (expected.action == Action::Alloc) {
                if (used != lifeAt(expected.addr, m_next) && unknown(used))
                    m_result.privateSegment = m_entries[m_lives[used].begin].index;
                return;
            }
            if (unknown(used)) {
                m_result.privateSegment = m_entries[m_lives[used].begin].index;
                return;
            }
            if (m_privateSegments.count(expected.index))
                return;
            for (const Life& life : m_lives)
                if (life.begin == m_next && life.end < m_entries.size())
                    m_result.privateSegment = expected.index;
        }

        bool isPendingCompletion(const Entry& e) const
        {
            return e.action == Action::FreeCompleted && m_pending.count(e.addr);
        }

        bool replayFree(const Entry& e)
        {
            // A free_completed standing for its own free (m_skipsFreeRequested) completes at once.
            const bool immediate = e.action == Action::FreeCompleted
                || (m_next + 1 < m_entries.size() && m_entries[m_next + 1].action == Action::FreeCompleted
                    && m_entries[m_next + 1].addr == e.addr);
            JobCall call;
            call.block = m_liveBlock.count(e.addr) ? m_liveBlock[e.addr] : UINT32_MAX;
            call.entry = e.index;
            m_liveBlock.erase(e.addr);
            if (!immediate) {
                // record_stream: a use on a stream of our own, completed where the trace completes the free.
                call.use = uint32_t(m_syntheticStreams);
                const agent::StreamId use { SyntheticStreamBase + m_syntheticStreams++ };
                if (m_allocator.recordStream(m_device, agent::DevicePtr { e.addr }, use) != agent::Status::Ok)
                    return diverge(&e, "memscope holds no allocated block at " + hex(e.addr));
                m_pending[e.addr] = use;
                m_pendingUse[e.addr] = call.use;
                call.kind = JobCall::Kind::RecordUse;
                log(call);
            }
            call.kind = JobCall::Kind::Free;
            log(call);
            const agent::Status s = m_allocator.free(m_device, agent::DevicePtr { e.addr });
            if (s != agent::Status::Ok)
                return diverge(&e, "memscope holds no allocated block at " + hex(e.addr));
            return consume();
        }

        bool beginCaptureFor(const Entry& alloc)
        {
            std::pair<int64_t, int64_t> open;
            const bool inWindow = m_windows.openOn(alloc.stream, open);
            if (inWindow && open != std::make_pair(alloc.pool.first, alloc.pool.second))
                return diverge(&alloc,
                               "cannot replay: this allocation on stream " + std::to_string(alloc.stream)
                                   + " went to another pool while its stream was being captured into pool ("
                                   + std::to_string(open.first) + ", " + std::to_string(open.second) + ")");
            if (alloc.pool.isDefault() || inWindow)
                return true;
            m_windows.begin(alloc.pool.first, alloc.pool.second, alloc.stream);
            logPoolStream(JobCall::Kind::PoolStreamBegin, alloc.pool.first, alloc.pool.second, alloc.stream,
                          alloc.index);
            return true;
        }

        void endCaptureAfter(size_t k)
        {
            const Entry& alloc = m_entries[k];
            if (alloc.pool.isDefault() || !m_runEnds.count(k))
                return;
            m_windows.end(alloc.pool.first, alloc.pool.second, alloc.stream);
            logPoolStream(JobCall::Kind::PoolStreamEnd, alloc.pool.first, alloc.pool.second, alloc.stream, alloc.index);
        }

        void endAllCaptures(size_t entry)
        {
            m_windows.endAll([&](std::pair<int64_t, int64_t> pool, uintptr_t stream) {
                logPoolStream(JobCall::Kind::PoolStreamEnd, pool.first, pool.second, stream, entry);
            });
        }

        // Before an empty_cache that frees entries [from, to)'s segments: the private pools among them were released.
        void releasePoolsFreedIn(size_t from, size_t to)
        {
            std::set<std::pair<int64_t, int64_t>> released;
            for (size_t k = from; k < to; ++k) {
                const Entry& e = m_entries[k];
                if (e.action != Action::SegmentFree)
                    continue;
                const agent::PoolId pool = poolAt(e.addr, k);
                if (pool.isDefault() || !released.insert({ pool.first, pool.second }).second)
                    continue;
                m_windows.release(pool.first, pool.second);
                JobCall c;
                c.kind = JobCall::Kind::ReleasePool;
                c.poolFirst = pool.first;
                c.poolSecond = pool.second;
                c.entry = e.index;
                log(c);
            }
        }

        bool replayAll()
        {
            while (m_next < m_entries.size()) {
                const Entry& e = m_entries[m_next];
                if (e.action == Action::FreeRequested) {
                    if (!replayFree(e))
                        return false;
                    continue;
                }
                if (e.action == Action::FreeCompleted && !isPendingCompletion(e) && m_skipsFreeRequested) {
                    if (!replayFree(e))
                        return false;
                    continue;
                }
                if (e.action == Action::FreeCompleted && !isPendingCompletion(e))
                    return diverge(
                        &e, "memscope holds no block at " + hex(e.addr) + " whose free waits for another stream");

                // A group: what one malloc (ending in alloc/oom) or one empty_cache reported.
                size_t j = m_next;
                bool reserves = false, releases = false;
                size_t firstRelease = SIZE_MAX;
                while (j < m_entries.size()) {
                    const Entry& g = m_entries[j];
                    if (g.action == Action::SegmentAlloc || g.action == Action::SegmentMap) {
                        reserves = true;
                    } else if (g.action == Action::SegmentFree || g.action == Action::SegmentUnmap) {
                        releases = true;
                        firstRelease = std::min(firstRelease, j);
                    } else if (!isPendingCompletion(g)) {
                        break;
                    }
                    ++j;
                }
                const bool endsInMalloc = j < m_entries.size()
                    && (m_entries[j].action == Action::Alloc || m_entries[j].action == Action::Oom);
                if (!endsInMalloc && reserves)
                    return diverge(&m_entries[m_next], "a segment was reserved without an allocation after it");

                // Releases before a malloc are the malloc's own (release_cached_blocks after a failed reservation)
                // only if its reservation could have failed: no cached block served the request, and the
                // reservation would have taken the device past its peak (the trace's highest reserved total, which
                // every successful reservation respected). Otherwise they were an empty_cache() just before it.
                bool emptyCacheFirst = !endsInMalloc || (releases && !reserves && m_entries[j].action == Action::Alloc);
                if (endsInMalloc && releases && !emptyCacheFirst) {
                    const Entry& term = m_entries[j];
                    size_t firstReserve = 0;
                    for (size_t k = m_next; k < j; ++k) {
                        if (m_entries[k].action == Action::SegmentAlloc || m_entries[k].action == Action::SegmentMap) {
                            firstReserve = m_entries[k].size;
                            break;
                        }
                    }
                    if (m_allocator.cachedBlockAvailable(m_device, term.size, agent::StreamId { term.stream }))
                        emptyCacheFirst = true;
                    else if (m_memoryLimit)
                        emptyCacheFirst = !m_allocator.reservationReleasesFirst(m_device, term.size);
                    else if (term.action == Action::Alloc && m_reservedBefore[m_next] + firstReserve <= m_peakReserved)
                        emptyCacheFirst = true;
                }
                if (emptyCacheFirst) {
                    // empty_cache(): waits for every pending free, releases unsplit cached segments.
                    size_t end = m_next;
                    while (end < j && m_entries[end].action != Action::SegmentAlloc
                           && m_entries[end].action != Action::SegmentMap)
                        ++end;
                    // No capture is underway at an empty_cache (release_cached_blocks asserts captures_underway is
                    // empty, c10/cuda/CUDACachingAllocator.cpp synchronize_and_free_events): a pool's window that
                    // spans one was two captures, and ends here; the next private allocation begins it again.
                    endAllCaptures(m_entries[m_next].index);
                    releasePoolsFreedIn(m_next, end);
                    JobCall c;
                    c.kind = JobCall::Kind::EmptyCache;
                    c.entry = m_entries[m_next].index;
                    log(c);
                    m_allocator.emptyCache(m_device);
                    if (!consume())
                        return false;
                    if (m_next < end)
                        return diverge(&m_entries[m_next],
                                       "memscope's empty_cache did nothing more, PyTorch did "
                                           + describeEntry(m_entries[m_next]));
                    continue;
                }

                // malloc(): complete the events of frees the trace completes before any release (process_events);
                // those after one are completed by the release itself (synchronize_and_free_events).
                for (size_t k = m_next; k < j && k < firstRelease; ++k) {
                    if (isPendingCompletion(m_entries[k])) {
                        m_backend.completeStream(m_device, m_pending[m_entries[k].addr]);
                        logCompletion(m_entries[k].addr);
                    }
                }
                bool firstMap = true;
                for (size_t k = m_next; k < j; ++k) {
                    const Entry& g = m_entries[k];
                    if (g.action == Action::SegmentAlloc) {
                        m_backend.queueSegmentAddress(m_device, agent::DevicePtr { g.addr });
                    }
                    if (g.action == Action::SegmentMap && firstMap) {
                        // A new expandable segment is mapped from the start of its address range.
                        m_backend.queueAddressSpace(m_device, agent::DevicePtr { g.addr });
                        firstMap = false;
                    }
                }
                const Entry& term = m_entries[j];
                // Under a memory cap the allocator refuses by itself (no device call), as PyTorch's did; without
                // one, the device said no: the backend is told to.
                if (!m_memoryLimit && term.action == Action::Oom)
                    m_backend.failNextReservations(m_device, -1);
                else if (!m_memoryLimit && releases)
                    m_backend.failNextReservations(m_device, 1);
                if (term.action == Action::Alloc && !beginCaptureFor(term))
                    return false;
                JobCall call;
                call.kind = JobCall::Kind::Malloc;
                call.size = term.size;
                call.stream = term.stream;
                call.poolFirst = term.pool.first;
                call.poolSecond = term.pool.second;
                call.failed = term.action == Action::Oom;
                call.entry = term.index;
                call.block = call.failed ? UINT32_MAX : m_nextBlock++;
                if (!call.failed)
                    m_liveBlock[term.addr] = call.block;
                else
                    outcome.ooms.push_back({ m_requests, term.index, term.size });
                ++m_requests;
                log(call);
                const agent::MallocResult r = m_allocator.malloc(m_device, term.size, agent::StreamId { term.stream });
                m_backend.clearScript(m_device);
                if (r.status != agent::Status::Ok && r.status != agent::Status::OutOfMemory)
                    return diverge(&term, "memscope's malloc failed: " + std::string(agent::statusName(r.status)));
                const size_t termIndex = j;
                if (!consume())
                    return false;
                if (m_next <= termIndex)
                    return diverge(&m_entries[m_next], "memscope's malloc stopped short of this event");
                if (term.action == Action::Alloc)
                    endCaptureAfter(termIndex);
            }
            return true;
        }

        static std::string stateName(const agent::BlockInfo& b)
        {
            return b.allocated ? "active_allocated" : (b.active ? "active_pending_free" : "inactive");
        }

        void compareFinalState()
        {
            std::vector<const model::Segment*> expected;
            for (const model::Segment& seg : m_snapshot.segments) {
                if (seg.device == m_device)
                    expected.push_back(&seg);
            }
            std::sort(expected.begin(), expected.end(),
                      [](const model::Segment* a, const model::Segment* b) { return a->address < b->address; });
            const std::vector<agent::SegmentInfo> got = m_allocator.snapshot(m_device);
            m_result.segments = got.size();
            for (const agent::SegmentInfo& s : got)
                m_result.blocks += s.blocks.size();

            auto differ = [&](const std::string& why) {
                m_result.stateIdentical = false;
                m_result.stateDifference = why;
            };
            const size_t n = std::min(expected.size(), got.size());
            for (size_t i = 0; i < n; ++i) {
                const model::Segment& e = *expected[i];
                const agent::SegmentInfo& g = got[i];
                const std::string where = "segment " + hex(uintptr_t(e.address));
                if (uintptr_t(e.address) != g.address)
                    return differ("the snapshot has segment " + hex(uintptr_t(e.address)) + " where memscope has "
                                  + hex(g.address));
                if (size_t(e.totalSize) != g.totalSize)
                    return differ(where + " is " + std::to_string(e.totalSize) + " B in the snapshot, "
                                  + std::to_string(g.totalSize) + " B in memscope");
                if (uintptr_t(e.stream) != raw(g.stream))
                    return differ(where + " belongs to stream " + std::to_string(e.stream) + ", memscope's to "
                                  + std::to_string(raw(g.stream)));
                const std::string type(m_snapshot.str(e.segmentType));
                if (type != (g.isLarge ? "large" : "small"))
                    return differ(where + " is " + type + " in the snapshot, " + (g.isLarge ? "large" : "small")
                                  + " in memscope");
                if (e.isExpandable != g.isExpandable)
                    return differ(where + ": is_expandable differs");
                if (e.poolId.first != g.pool.first || e.poolId.second != g.pool.second)
                    return differ(where + " is in pool (" + std::to_string(e.poolId.first) + ", "
                                  + std::to_string(e.poolId.second) + ") in the snapshot, ("
                                  + std::to_string(g.pool.first) + ", " + std::to_string(g.pool.second)
                                  + ") in memscope");
                const model::Block* blocks = m_snapshot.segmentBlocks(e);
                if (e.blockCount != g.blocks.size())
                    return differ(where + " has " + std::to_string(e.blockCount) + " blocks in the snapshot, "
                                  + std::to_string(g.blocks.size()) + " in memscope");
                for (size_t b = 0; b < g.blocks.size(); ++b) {
                    const model::Block& eb = blocks[b];
                    const agent::BlockInfo& gb = g.blocks[b];
                    const std::string bwhere = "block " + hex(uintptr_t(eb.address)) + " of " + where;
                    if (uintptr_t(eb.address) != gb.address || size_t(eb.size) != gb.size)
                        return differ(where + ": the snapshot's block " + std::to_string(b) + " is "
                                      + hex(uintptr_t(eb.address)) + " of " + std::to_string(eb.size)
                                      + " B, memscope's " + hex(gb.address) + " of " + std::to_string(gb.size) + " B");
                    const std::string state(model::blockStateName(eb.state));
                    if (state != stateName(gb))
                        return differ(bwhere + " is " + state + " in the snapshot, " + stateName(gb) + " in memscope");
                    // Inactive blocks too: PyTorch leaves the last user's requested_size on a cached block, and
                    // which one survives a split or merge is part of its decisions.
                    if (eb.hasRequestedSize && size_t(eb.requestedSize) != gb.requestedSize)
                        return differ(bwhere + " was requested with " + std::to_string(eb.requestedSize)
                                      + " B in the snapshot, " + std::to_string(gb.requestedSize) + " B in memscope");
                }
            }
            if (expected.size() != got.size()) {
                if (expected.size() > got.size())
                    return differ("the snapshot has " + std::to_string(expected.size()) + " segments, memscope "
                                  + std::to_string(got.size()) + "; the first missing one is "
                                  + hex(uintptr_t(expected[n]->address)));
                return differ("the snapshot has " + std::to_string(expected.size()) + " segments, memscope "
                              + std::to_string(got.size()) + "; the first extra one is " + hex(got[n].address));
            }
            m_result.stateIdentical = true;
        }

        const int m_device;
        const model::Snapshot& m_snapshot;
        agent::CachingAllocator& m_allocator;
        agent::HostBackend& m_backend;
        Recorder& m_recorder;
        const size_t m_memoryLimit; // the cap the trace was made under (0: none)
        std::vector<Entry> m_entries;
        std::string m_unreplayable;
        size_t m_next = 0;
        std::map<uintptr_t, agent::StreamId> m_pending; // deferred frees: block -> our use stream
        uintptr_t m_syntheticStreams = 0;
        struct Life {
            size_t begin = 0, end = 0; // m_entries of its segment_alloc and segment_free (end: none)
            uintptr_t lo = 0, hi = 0;
        };
        std::vector<Life> m_lives;
        std::set<size_t> m_runEnds; // private allocations after which their pool's window on the stream ends
        const PrivateSegments& m_privateSegments;
        PoolWindows m_windows;
        std::vector<size_t> m_reservedBefore; // bytes reserved before each entry
        size_t m_peakReserved = 0;
        DeviceResult m_result;

    public:
        // The job's calls as replayed (meaningful when the replay was exact), and PyTorch's outcome.
        std::vector<JobCall> calls;
        MemoryOutcome outcome;

    private:
        std::map<uintptr_t, uint32_t> m_liveBlock; // address -> the block number of its Malloc call
        std::map<uintptr_t, uint32_t> m_pendingUse; // deferred frees: block address -> its use's number
        uint32_t m_nextBlock = 0;
        // The trace was recorded with skip_actions=["free_requested"] (model::Replay::freeRequestedSkipped): a
        // free_completed of a block not waiting for another stream is the free() call itself.
        bool m_skipsFreeRequested = false;
        size_t m_requests = 0; // Malloc calls so far

        void log(JobCall c) { calls.push_back(c); }
        void logPoolStream(JobCall::Kind kind, int64_t poolFirst, int64_t poolSecond, uintptr_t stream, size_t entry)
        {
            JobCall c;
            c.kind = kind;
            c.stream = stream;
            c.poolFirst = poolFirst;
            c.poolSecond = poolSecond;
            c.entry = entry;
            log(c);
        }
        void logCompletion(uintptr_t addr)
        {
            auto it = m_pendingUse.find(addr);
            if (it == m_pendingUse.end())
                return;
            JobCall c;
            c.kind = JobCall::Kind::CompleteUse;
            c.use = it->second;
            log(c);
            m_pendingUse.erase(it);
        }
    };

} // namespace

namespace {

    // One pass over every device with what is known of the pools of segments freed before the end; `retry` when it
    // learnt more (a pass that knows it may go further).
    AllocatorReplayOutput replayPass(const model::Snapshot& snapshot, const std::string& name,
                                     const AllocatorReplayOptions& replayOptions, RecoveredJob* job,
                                     std::vector<PrivateSegments>& privateSegments, bool& retry)
    {
        static const PrivateSegments none;
        AllocatorReplayOutput out;
        std::string settingsProblem;
        const agent::AllocatorConfig config
            = configFromSettings(snapshot.allocatorSettings ? &*snapshot.allocatorSettings : nullptr, settingsProblem);
        if (!settingsProblem.empty())
            out.out += name + ": " + settingsProblem + "; using the parsed values the snapshot reports\n";

        const int devices = std::max(snapshot.deviceCount(), 1);
        agent::HostBackend::Options options;
        options.deviceCount = devices;
        options.scripted = true;
        options.completeEventsImmediately = false;
        agent::HostBackend backend(options);
        for (int d = 0; d < snapshot.deviceCount(); ++d) {
            const size_t memory = replayOptions.deviceMemory ? replayOptions.deviceMemory
                                                             : estimateDeviceMemory(snapshot.deviceTraces[size_t(d)]);
            if (memory)
                backend.setCapacity(d, memory);
        }
        agent::CachingAllocator allocator(backend, config);
        Recorder recorder;
        allocator.setTraceObserver(&recorder);
        if (replayOptions.memoryLimit) {
            for (int d = 0; d < devices; ++d)
                allocator.setMemoryLimit(d, replayOptions.memoryLimit);
        }

        size_t matched = 0, total = 0;
        bool identical = true;
        for (int d = 0; d < snapshot.deviceCount(); ++d) {
            DeviceReplay replay(d, snapshot, allocator, backend, recorder, replayOptions.memoryLimit,
                                privateSegments.size() > size_t(d) ? privateSegments[size_t(d)] : none);
            replay.outcome.keepCurve = replayOptions.curves;
            const DeviceResult r = replay.run();
            recorder.events.clear();
            if (r.privateSegment) {
                if (privateSegments.size() <= size_t(d))
                    privateSegments.resize(size_t(d) + 1);
                if (!privateSegments[size_t(d)].count(*r.privateSegment)) {
                    // A pool of its own, numbered apart from PyTorch's (graphs (n, 0), MemPools (0, n)).
                    privateSegments[size_t(d)][*r.privateSegment]
                        = agent::PoolId { -1, int64_t(*r.privateSegment) + 1 };
                    retry = true;
                }
            }
            matched += r.matchedAllocs;
            total += r.allocs;
            const bool ok = r.replayed && r.stateIdentical && r.matchedAllocs == r.allocs;
            identical = identical && ok;
            if (job) {
                RecoveredDevice rd;
                rd.device = d;
                rd.exact = ok;
                rd.why = r.replayed ? (r.stateIdentical ? "" : "the final state differs: " + r.stateDifference)
                                    : r.divergence;
                rd.calls = std::move(replay.calls);
                rd.original = replay.outcome;
                job->devices.push_back(std::move(rd));
            }
            size_t events = 0;
            for (size_t c : r.counts)
                events += c;
            std::string line = "device " + std::to_string(d) + ": " + std::to_string(events) + " events, "
                + std::to_string(r.matchedAllocs) + "/" + std::to_string(r.allocs)
                + " allocations at PyTorch's addresses, " + std::to_string(r.counts[size_t(Action::FreeRequested)])
                + " frees, " + std::to_string(r.counts[size_t(Action::SegmentAlloc)]) + " segment allocs, "
                + std::to_string(r.counts[size_t(Action::SegmentFree)]) + " segment frees, "
                + std::to_string(r.counts[size_t(Action::SegmentMap)]) + " maps, "
                + std::to_string(r.counts[size_t(Action::SegmentUnmap)]) + " unmaps, "
                + std::to_string(r.counts[size_t(Action::Oom)]) + " OOMs";
            if (r.replayed)
                line += r.stateIdentical ? "; final state identical (" + std::to_string(r.segments) + " segments, "
                        + std::to_string(r.blocks) + " blocks)"
                                         : "; final state differs: " + r.stateDifference;
            else
                line += "; " + r.divergence;
            out.out += line + "\n";
        }
        out.out += "matched " + std::to_string(matched) + "/" + std::to_string(total)
            + " allocations, final state identical: " + (identical ? "yes" : "no") + "\n";
        out.exitCode = identical ? 0 : 1;
        return out;
    }

    // Replays until a pass learns nothing more of the private pools (one pass per segment found private, at most
    // MaxPasses).
    AllocatorReplayOutput replayOnce(const model::Snapshot& snapshot, const std::string& name,
                                     const AllocatorReplayOptions& replayOptions, RecoveredJob* job = nullptr)
    {
        constexpr int MaxPasses = 256;
        std::vector<PrivateSegments> privateSegments;
        AllocatorReplayOutput out;
        for (int pass = 0; pass < MaxPasses; ++pass) {
            bool retry = false;
            if (job)
                job->devices.clear();
            out = replayPass(snapshot, name, replayOptions, job, privateSegments, retry);
            if (out.exitCode == 0 || !retry)
                break;
        }
        return out;
    }

    // The cap a trace was made under, when the command line does not give it: every reservation respected it, so
    // it is at least the trace's peak reservation, and the peak is where the allocator's own decisions (garbage
    // collection at a share of the cap, refusing a reservation past it) reproduce best. 0: the trace shows no sign
    // of a cap (no oom entry, no garbage_collection_threshold).
    size_t capCandidate(const model::Snapshot& snapshot, const agent::AllocatorConfig& config)
    {
        bool capSigns = config.garbageCollectionThreshold > 0.0;
        size_t peak = 0;
        for (const model::Trace& trace : snapshot.deviceTraces) {
            size_t reserved = 0;
            for (const model::TraceEntry& e : trace) {
                if (e.action == Action::SegmentAlloc || e.action == Action::SegmentMap)
                    reserved += size_t(e.size);
                else if (e.action == Action::SegmentFree || e.action == Action::SegmentUnmap)
                    reserved -= std::min(reserved, size_t(e.size));
                else if (e.action == Action::Oom)
                    capSigns = true;
                peak = std::max(peak, reserved);
            }
        }
        return capSigns ? peak : 0;
    }

} // namespace

AllocatorReplayOutput allocatorReplaySnapshot(const model::Snapshot& snapshot, const std::string& name,
                                              const AllocatorReplayOptions& replayOptions)
{
    AllocatorReplayOutput out = replayOnce(snapshot, name, replayOptions);
    if (out.exitCode == 0 || replayOptions.memoryLimit)
        return out;
    // torch.cuda.set_per_process_memory_fraction is not in the snapshot: try the cap the trace implies.
    std::string ignored;
    const agent::AllocatorConfig config
        = configFromSettings(snapshot.allocatorSettings ? &*snapshot.allocatorSettings : nullptr, ignored);
    AllocatorReplayOptions capped = replayOptions;
    capped.memoryLimit = capCandidate(snapshot, config);
    if (!capped.memoryLimit)
        return out;
    AllocatorReplayOutput withCap = replayOnce(snapshot, name, capped);
    if (withCap.exitCode != 0) {
        out.out += name
            + ": no memory cap given, and none found that replays it either; if the job called "
              "torch.cuda.set_per_process_memory_fraction, pass --memory-limit (the fraction times the "
              "device's total memory)\n";
        return out;
    }
    withCap.out = name + ": no memory cap given; replayed under a cap of " + std::to_string(capped.memoryLimit)
        + " B (its peak reservation), as torch.cuda.set_per_process_memory_fraction sets one; --memory-limit gives "
          "the real one\n"
        + withCap.out;
    return withCap;
}

void PoolWindows::begin(int64_t poolFirst, int64_t poolSecond, uintptr_t stream)
{
    const auto key = std::make_pair(poolFirst, poolSecond);
    auto it = m_windows.find(key);
    if (it == m_windows.end()) {
        Window w;
        w.streams = std::make_shared<std::vector<uintptr_t>>();
        std::shared_ptr<std::vector<uintptr_t>> filter = w.streams;
        m_allocator.beginAllocateToPool(m_device, agent::PoolId { poolFirst, poolSecond }, [filter](agent::StreamId s) {
            return std::find(filter->begin(), filter->end(), raw(s)) != filter->end();
        });
        w.extraUse = !m_made.insert(key).second;
        it = m_windows.emplace(key, std::move(w)).first;
    }
    auto& streams = *it->second.streams;
    if (std::find(streams.begin(), streams.end(), stream) == streams.end())
        streams.push_back(stream);
}

void PoolWindows::end(int64_t poolFirst, int64_t poolSecond, uintptr_t stream)
{
    auto it = m_windows.find({ poolFirst, poolSecond });
    if (it == m_windows.end())
        return;
    auto& streams = *it->second.streams;
    streams.erase(std::remove(streams.begin(), streams.end(), stream), streams.end());
    if (!streams.empty())
        return;
    m_allocator.endAllocateToPool(m_device, agent::PoolId { poolFirst, poolSecond });
    if (it->second.extraUse)
        m_allocator.releasePool(m_device, agent::PoolId { poolFirst, poolSecond });
    m_windows.erase(it);
}

bool PoolWindows::openOn(uintptr_t stream, std::pair<int64_t, int64_t>& pool) const
{
    for (const auto& [key, w] : m_windows) {
        if (std::find(w.streams->begin(), w.streams->end(), stream) != w.streams->end()) {
            pool = key;
            return true;
        }
    }
    return false;
}

void PoolWindows::release(int64_t poolFirst, int64_t poolSecond)
{
    if (m_made.erase({ poolFirst, poolSecond }))
        m_allocator.releasePool(m_device, agent::PoolId { poolFirst, poolSecond });
}

void watchOutcome(const agent::CachingAllocator& allocator, int device, MemoryOutcome& outcome, size_t entry)
{
    const agent::DeviceStats st = allocator.stats(device);
    const auto agg = size_t(agent::StatType::Aggregate);
    const size_t reserved = size_t(st.reservedBytes[agg].current);
    if (outcome.keepCurve)
        outcome.curve.push_back({ entry, reserved, size_t(st.allocatedBytes[agg].current) });
    if (reserved <= outcome.peakReserved)
        return;
    outcome.peakReserved = reserved;
    outcome.allocatedAtPeak = size_t(st.allocatedBytes[agg].current);
    size_t largest = 0;
    for (const agent::SegmentInfo& seg : allocator.snapshot(device))
        for (const agent::BlockInfo& b : seg.blocks)
            if (!b.active)
                largest = std::max(largest, b.size);
    outcome.largestFreeAtPeak = largest;
}

void finishOutcome(const agent::CachingAllocator& allocator, int device, MemoryOutcome& outcome)
{
    const agent::DeviceStats st = allocator.stats(device);
    outcome.peakAllocated = size_t(st.allocatedBytes[size_t(agent::StatType::Aggregate)].peak);
    outcome.deviceAllocs = size_t(st.numDeviceAlloc);
    outcome.segmentsAtEnd = allocator.snapshot(device).size();
}

RecoveredJob recoverJob(const model::Snapshot& snapshot, const AllocatorReplayOptions& options)
{
    RecoveredJob job;
    std::string problem;
    const agent::AllocatorConfig config
        = configFromSettings(snapshot.allocatorSettings ? &*snapshot.allocatorSettings : nullptr, problem);
    job.note = problem;
    if (snapshot.allocatorSettings) {
        if (const model::Value* text = snapshot.allocatorSettings->find("PYTORCH_CUDA_ALLOC_CONF");
            text && text->kind == model::Value::Kind::String)
            job.settings = text->text;
    }
    job.memoryLimit = options.memoryLimit;
    AllocatorReplayOutput first = replayOnce(snapshot, "", options, &job);
    if (options.memoryLimit)
        return job;
    // A trace with OOMs may replay exactly without a cap (the replay's device refuses where PyTorch's trace shows a
    // refusal), but other settings are then asked without one: the cap the trace implies is preferred when it
    // replays the trace exactly too.
    bool ooms = false;
    for (const RecoveredDevice& d : job.devices)
        ooms = ooms || !d.original.ooms.empty();
    if (first.exitCode == 0 && !ooms)
        return job;
    // As allocatorReplaySnapshot: the cap the trace implies, if the file shows signs of one.
    AllocatorReplayOptions capped = options;
    capped.memoryLimit = capCandidate(snapshot, config);
    if (!capped.memoryLimit)
        return job;
    RecoveredJob withCap;
    withCap.settings = job.settings;
    withCap.note = job.note;
    withCap.memoryLimit = capped.memoryLimit;
    withCap.memoryLimitInferred = true;
    if (replayOnce(snapshot, "", capped, &withCap).exitCode == 0)
        return withCap;
    return job;
}

AllocatorReplayOutput allocatorReplay(const std::vector<std::string>& args)
{
    AllocatorReplayOutput out;
    constexpr const char* Usage
        = "usage: memscope-cli allocator-replay SNAPSHOT [--memory-limit BYTES] [--device-memory BYTES]\n";
    auto usage = [&](const std::string& why) {
        out.exitCode = 2;
        out.err = "memscope-cli: " + why + "\n" + Usage;
        return out;
    };
    std::vector<std::string> files;
    AllocatorReplayOptions options;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--memory-limit" || a == "--device-memory") {
            model::ByteCount bytes = 0;
            if (i + 1 >= args.size())
                return usage(a + " needs a byte count");
            if (!parseByteCount(args[i + 1], bytes) || bytes <= 0)
                return usage(a + " needs a positive byte count (e.g. 340069974, 80GiB), not '" + args[i + 1] + "'");
            (a == "--memory-limit" ? options.memoryLimit : options.deviceMemory) = size_t(bytes);
            ++i;
        } else if (a.size() > 1 && a[0] == '-') {
            return usage("unknown option '" + a + "' for 'allocator-replay'");
        } else {
            files.push_back(a);
        }
    }
    if (files.size() != 1)
        return usage("'allocator-replay' needs exactly one SNAPSHOT");
    io::LoadResult loaded = io::loadSnapshot(files[0]);
    if (!loaded.ok()) {
        out.exitCode = 1;
        out.err = "memscope-cli: " + loaded.error.toString() + "\n";
        return out;
    }
    return allocatorReplaySnapshot(*loaded.snapshot, files[0], options);
}

int runAllocatorReplay(const std::vector<std::string>& args)
{
    const AllocatorReplayOutput r = allocatorReplay(args);
    std::fwrite(r.out.data(), 1, r.out.size(), stdout);
    std::fwrite(r.err.data(), 1, r.err.size(), stderr);
    std::fflush(stdout);
    return r.exitCode;
}

} // namespace memscope
