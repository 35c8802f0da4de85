// The replay engine (see replay.h): a backward pass from the final state resolves every allocation and segment
// lifetime, a forward pass builds the per-index series and the checkpoints, and queries combine a checkpoint with
// the lifetimes that begin after it. A build runs on the calling thread, which owns all of its scratch, and on one
// helper thread it starts and joins: during the forward pass that one packs the series (ChunkPipe below). Queries are
// const and use only the caller's buffers, so any number of threads may query one Replay at once.
//
// Undo rules (the inverse of what c10/cuda/CUDACachingAllocator.cpp records, as torch/utils/viz/MemoryViz.js
// applies them in simulate_memory):
//   alloc            the block did not exist before it
//   free_requested   the block was active_allocated before it (active_pending_free after it)
//   free_completed   the block existed before it, active_pending_free when a free_requested precedes it
//   free (PyTorch < 2.1, read as free_completed by the snapshot builder) the block existed, active_allocated
//   segment_alloc    the segment did not exist before it;  segment_free: it existed (entry addr/size/stream)
//   segment_map      the range was not mapped before it;   segment_unmap: it was mapped
//   snapshot, oom, unknown actions: no change.
//
// The forward pass also follows which Block object each free block is (model/freeblocks.h has the rules: an
// allocation takes a free block's front and the rest keeps its object, a freed block survives the merges with its
// free neighbours, a new segment or a remapped range is a new object or the unmapped range's), and labels it with
// the request that object carries (InactiveLabel), so that every state shows the stale requests PyTorch's snapshot
// would. Free blocks from before the trace carry the final snapshot's request if they survive to the end
// unchanged, else an unknown one (0); at the last index the final snapshot's requests hold.
#include "model/replay.h"

#include "model/addressmap.h"
#include "model/freeblocks.h"
#include "model/prefault.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include <pthread.h>

namespace memscope::model {

namespace {

    constexpr uint32_t None = UINT32_MAX;

    // A set of integers in [0, size) with predecessor / successor search: a 64-ary tree of bit words, O(log64 size)
    // per operation, no allocation after construction.
    class BitTree {
    public:
        void reset(size_t size)
        {
            m_levels.clear();
            size_t words = std::max<size_t>(1, (size + 63) / 64);
            for (;;) {
                m_levels.emplace_back(words, 0);
                if (words == 1)
                    break;
                words = (words + 63) / 64;
            }
        }

        bool contains(size_t k) const { return (m_levels[0][k >> 6] >> (k & 63)) & 1; }

        void insert(size_t k)
        {
            for (auto& level : m_levels) {
                uint64_t& word = level[k >> 6];
                const bool wasEmpty = word == 0;
                word |= uint64_t(1) << (k & 63);
                if (!wasEmpty)
                    return;
                k >>= 6;
            }
        }

        void erase(size_t k)
        {
            for (auto& level : m_levels) {
                uint64_t& word = level[k >> 6];
                word &= ~(uint64_t(1) << (k & 63));
                if (word != 0)
                    return;
                k >>= 6;
            }
        }

        // The largest member <= k, or -1.
        int64_t prev(int64_t k) const
        {
            size_t level = 0;
            for (;;) {
                if (k < 0)
                    return -1;
                const uint64_t bits = m_levels[level][size_t(k) >> 6] & (~uint64_t(0) >> (63 - (k & 63)));
                if (bits) {
                    k = (k & ~int64_t(63)) | (63 - std::countl_zero(bits));
                    break;
                }
                k = (k >> 6) - 1;
                if (++level == m_levels.size())
                    return -1;
            }
            while (level-- > 0)
                k = (k << 6) | (63 - std::countl_zero(m_levels[level][size_t(k)]));
            return k;
        }

        // The smallest member >= k, or -1.
        int64_t next(int64_t k) const
        {
            size_t level = 0;
            for (;;) {
                if (size_t(k >> 6) >= m_levels[level].size())
                    return -1;
                const uint64_t bits = m_levels[level][size_t(k) >> 6] & (~uint64_t(0) << (k & 63));
                if (bits) {
                    k = (k & ~int64_t(63)) | std::countr_zero(bits);
                    break;
                }
                k = (k >> 6) + 1;
                if (++level == m_levels.size())
                    return -1;
            }
            while (level-- > 0)
                k = (k << 6) | std::countr_zero(m_levels[level][size_t(k)]);
            return k;
        }

    private:
        std::vector<std::vector<uint64_t>> m_levels;
    };

    // The free gaps of the forward pass, over compressed coordinates (every address where a block or a segment
    // piece starts or ends): each gap is [k, gapEnd[k]); the set of gap starts answers "which gap covers k". The
    // largest gap comes from a max-heap with lazy deletion: an entry is stale once its gap is gone, stale tops are
    // popped when asked, and the heap is rebuilt without stale or duplicate entries whenever it grows past twice
    // the live gaps. It stays about as small as the live state (cache-resident), unlike a tree over all
    // coordinates; a push is O(1) on average, a pop O(log live gaps).
    class GapTracker {
    public:
        void reset(const std::vector<DeviceAddr>& coords)
        {
            m_coords = coords.data();
            m_gapEnd.assign(coords.size(), None);
            m_gapLabel.assign(coords.size(), None);
            m_starts.reset(coords.size());
            m_heap.clear();
            m_liveGaps = 0;
        }

        ByteCount largest()
        {
            while (!m_heap.empty() && m_gapEnd[m_heap.front().start] != m_heap.front().end) {
                std::pop_heap(m_heap.begin(), m_heap.end(), shorter);
                m_heap.pop_back();
            }
            return m_heap.empty() ? 0 : m_heap.front().length;
        }

        // [cs, ce) becomes free, joined with the gap that ends at cs / starts at ce when allowed. Returns the
        // merged gap, whose label is None until setLabel().
        std::pair<uint32_t, uint32_t> add(uint32_t cs, uint32_t ce, bool mergeLeft, bool mergeRight)
        {
            if (cs >= ce)
                return { cs, cs };
            uint32_t start = cs, end = ce;
            if (mergeLeft && cs > 0) {
                const int64_t g = m_starts.prev(int64_t(cs) - 1);
                if (g >= 0 && m_gapEnd[size_t(g)] == cs) {
                    start = uint32_t(g);
                    eraseGap(start);
                }
            }
            if (mergeRight && m_gapEnd[ce] != None) {
                end = m_gapEnd[ce];
                eraseGap(ce);
            }
            insertGap(start, end, None);
            return { start, end };
        }

        // What remove() left of the gap that held cs: the part before cs (a new free block: leftStart != None) and
        // the part after ce (rightEnd != None), both with the gap's label until the caller says otherwise.
        struct Cut {
            uint32_t leftStart = None;
            uint32_t rightEnd = None;
            uint32_t label = None;
        };

        // Whatever part of [cs, ce) is free stops being free.
        Cut remove(uint32_t cs, uint32_t ce)
        {
            Cut cut;
            if (cs >= ce)
                return cut;
            const int64_t g = m_starts.prev(cs);
            if (g >= 0 && m_gapEnd[size_t(g)] > cs) {
                const uint32_t start = uint32_t(g), end = m_gapEnd[size_t(g)];
                cut.label = m_gapLabel[start];
                eraseGap(start);
                if (start < cs) {
                    insertGap(start, cs, cut.label);
                    cut.leftStart = start;
                }
                if (end >= ce) {
                    if (end > ce) {
                        insertGap(ce, end, cut.label);
                        cut.rightEnd = end;
                    }
                    return cut;
                }
            }
            // Only in inconsistent traces: gaps that start inside the range.
            for (int64_t k = m_starts.next(cs); k >= 0 && k < int64_t(ce); k = m_starts.next(k)) {
                const uint32_t end = m_gapEnd[size_t(k)], label = m_gapLabel[size_t(k)];
                eraseGap(uint32_t(k));
                if (end > ce) {
                    insertGap(ce, end, label);
                    break;
                }
            }
            return cut;
        }

        size_t count() const { return m_liveGaps; }
        void setLabel(uint32_t start, uint32_t label) { m_gapLabel[start] = label; }
        // The label of the gap that holds coordinate k (None: k is not free).
        uint32_t labelAt(uint32_t k) const
        {
            const int64_t g = m_starts.prev(k);
            return g >= 0 && m_gapEnd[size_t(g)] > k ? m_gapLabel[size_t(g)] : None;
        }
        // f(start, end, label) for every gap, by start.
        template <typename F> void forEach(F&& f) const
        {
            for (int64_t k = m_starts.next(0); k >= 0; k = m_starts.next(k + 1))
                f(uint32_t(k), m_gapEnd[size_t(k)], m_gapLabel[size_t(k)]);
        }

    private:
        struct HeapEntry {
            ByteCount length;
            uint32_t start, end;
        };
        static bool shorter(const HeapEntry& a, const HeapEntry& b) { return a.length < b.length; }

        void insertGap(uint32_t start, uint32_t end, uint32_t label)
        {
            m_gapEnd[start] = end;
            m_gapLabel[start] = label;
            m_starts.insert(start);
            ++m_liveGaps;
            m_heap.push_back({ m_coords[end] - m_coords[start], start, end });
            std::push_heap(m_heap.begin(), m_heap.end(), shorter);
            if (m_heap.size() > 2 * m_liveGaps + 4096)
                compact();
        }

        void eraseGap(uint32_t start)
        {
            m_gapEnd[start] = None;
            m_starts.erase(start);
            --m_liveGaps;
        }

        // Keeps one entry per live gap (a gap freed and re-made has several, all valid). The first entry kept for
        // a gap marks its gapEnd with Seen, so later copies no longer match; the marks are cleared afterwards.
        void compact()
        {
            std::erase_if(m_heap, [&](const HeapEntry& e) {
                if (m_gapEnd[e.start] != e.end)
                    return true;
                m_gapEnd[e.start] |= Seen;
                return false;
            });
            for (const HeapEntry& e : m_heap)
                m_gapEnd[e.start] &= ~Seen;
            std::make_heap(m_heap.begin(), m_heap.end(), shorter);
        }

        static constexpr uint32_t Seen = 0x80000000u; // coordinates stay below: MaxReplayEntries

        const DeviceAddr* m_coords = nullptr;
        std::vector<uint32_t> m_gapEnd;
        std::vector<uint32_t> m_gapLabel; // per gap start: the InactiveLabel of its free block
        BitTree m_starts;
        std::vector<HeapEntry> m_heap;
        size_t m_liveGaps = 0;
    };

    // out := the ids live at `index`: those listed at the checkpoint (sorted by `less`) that are still live, merged
    // with those that began in [checkpoint, index) and are live. `begins(id)` / `live(id)` describe an id.
    template <typename Id, typename Less, typename Live, typename BeginsBefore>
    void collectLive(const Id* checkpointBegin, const Id* checkpointEnd, uint32_t firstNew, uint32_t count, Less less,
                     Live live, BeginsBefore beginsBefore, std::vector<Id>& out, std::vector<Id>& scratch)
    {
        out.clear();
        scratch.clear();
        for (const Id* it = checkpointBegin; it != checkpointEnd; ++it)
            if (live(*it))
                out.push_back(*it);
        for (uint32_t k = firstNew; k < count && beginsBefore(Id { k }); ++k)
            if (live(Id { k }))
                scratch.push_back(Id { k });
        if (scratch.empty())
            return;
        std::sort(scratch.begin(), scratch.end(), less);
        // Merge from the back so no third buffer is needed.
        size_t i = out.size(), j = scratch.size();
        out.resize(i + j);
        for (size_t k = out.size(); j > 0;) {
            if (i > 0 && less(scratch[j - 1], out[i - 1]))
                out[--k] = out[--i];
            else
                out[--k] = scratch[--j];
        }
    }

    // f(0, half) here and f(half, n) on a thread of its own, at once; small ranges all here. Rethrows what either
    // threw. For loops over independent elements between the passes, when the second core has nothing else to do.
    template <typename F> void inTwoHalves(size_t n, size_t half, F&& f)
    {
        if (n < (size_t(1) << 16)) {
            f(0, n);
            return;
        }
        std::exception_ptr error;
        std::thread other([&] {
            pthread_setname_np(pthread_self(), "memscope-half");
            try {
                f(half, n);
            } catch (...) {
                error = std::current_exception();
            }
        });
        try {
            f(0, half);
        } catch (...) {
            other.join();
            throw;
        }
        other.join();
        if (error)
            std::rethrow_exception(error);
    }

    // A single-producer, single-consumer pipe of values in chunks, drained by a thread of its own. The producer (the
    // thread that made the pipe; push, finish and the destructor are its) fills a chunk in place and hands it over
    // whole, so the two threads meet once per ChunkSize values, under one mutex; at most Chunks chunks are in the
    // pipe, and the producer waits when the consumer is that far behind (the pipe's memory is fixed: 4 chunks).
    // The consumer thread calls `consume` on each chunk in order and touches nothing else of the pipe's. finish()
    // hands over the last chunk and waits until all are consumed; the destructor cuts the pipe short, waiting only
    // for the chunk being consumed (a build that was stopped). An exception the consumer throws is rethrown to the
    // producer at its next hand-over or at finish().
    template <typename T> class ChunkPipe {
    public:
        // 16384 values a chunk (640 KiB of a replay's series values): each hand-over may wake the consumer, which
        // then takes a core from the producer; at 2048 a 13.4 M-entry replay woke it about 2,600 times a second
        // while the forward pass ran, and the whole open took 0.2-0.4 s longer (docs/speed.md).
        static constexpr size_t ChunkSize = 16384, Chunks = 4;
        using Consume = std::function<void(const T* values, size_t count)>;

        ChunkPipe(const char* threadName, Consume consume)
            : m_consume(std::move(consume))
            , m_buffer(std::make_unique<T[]>(Chunks * ChunkSize))
            , m_fill(m_buffer.get())
            , m_thread([this, threadName] {
                pthread_setname_np(pthread_self(), threadName);
                run();
            })
        {
        }
        ChunkPipe(const ChunkPipe&) = delete;
        ChunkPipe& operator=(const ChunkPipe&) = delete;
        ~ChunkPipe() { stop(); }

        void push(const T& value)
        {
            m_fill[m_filled] = value;
            if (++m_filled == ChunkSize)
                handOver();
        }

        // Waits until every value pushed is consumed, then ends the thread.
        void finish()
        {
            if (m_filled > 0)
                handOver();
            std::unique_lock lock(m_mutex);
            m_room.wait(lock, [&] { return m_consumed == m_produced || m_error; });
            lock.unlock();
            stop();
            if (m_error)
                std::rethrow_exception(m_error);
        }

    private:
        void handOver()
        {
            std::unique_lock lock(m_mutex);
            m_counts[m_produced % Chunks] = m_filled;
            ++m_produced;
            m_work.notify_one();
            m_room.wait(lock, [&] { return m_produced - m_consumed < Chunks || m_error; });
            if (m_error)
                std::rethrow_exception(m_error);
            // Neither this chunk nor any chunk after it is the consumer's until handed over.
            m_fill = m_buffer.get() + (m_produced % Chunks) * ChunkSize;
            m_filled = 0;
        }

        void stop()
        {
            if (!m_thread.joinable())
                return;
            {
                const std::lock_guard lock(m_mutex);
                m_stop = true;
            }
            m_work.notify_one();
            m_thread.join();
        }

        void run()
        {
            std::unique_lock lock(m_mutex);
            for (;;) {
                m_work.wait(lock, [&] { return m_stop || m_consumed < m_produced; });
                if (m_stop)
                    return;
                const size_t chunk = m_consumed % Chunks, count = m_counts[chunk];
                lock.unlock();
                try {
                    m_consume(m_buffer.get() + chunk * ChunkSize, count);
                } catch (...) {
                    lock.lock();
                    m_error = std::current_exception();
                    m_room.notify_one();
                    return;
                }
                lock.lock();
                ++m_consumed;
                m_room.notify_one();
            }
        }

        const Consume m_consume;
        const std::unique_ptr<T[]> m_buffer;
        T* m_fill; // the producer's chunk
        size_t m_filled = 0; // values in it
        std::mutex m_mutex; // guards what follows
        std::condition_variable m_work; // the consumer waits for a chunk (or m_stop)
        std::condition_variable m_room; // the producer waits for a free chunk (or all consumed, or m_error)
        size_t m_counts[Chunks] = {}; // values in each chunk handed over
        size_t m_produced = 0, m_consumed = 0; // chunks handed over / consumed so far
        bool m_stop = false;
        std::exception_ptr m_error;
        std::thread m_thread; // last: starts once the members above exist
    };

    template <typename T> size_t bytesOf(const std::vector<T>& v) { return v.capacity() * sizeof(T); }
    template <typename T> size_t bytesOf(const GrowingArray<T>& v) { return v.memoryBytes(); }
    size_t bytesOf(const PackedSeries& v) { return v.memoryBytes(); }

} // namespace

// A build's progress (ReplayOptions::progress) over its steps, and whether it was asked to stop.
class BuildProgress {
public:
    // The steps of a whole build and where each ends in its share: about their shares of the time (the 1 GB
    // synthetic file: undoing the trace 0.3 s, ordering the allocations 0.1-0.3 s, the series and checkpoints
    // 0.4 s, the coordinates 0.5 s, the labels 1.2 s), so that the bar moves at an even pace and a stop is seen in
    // each step, none of which runs longer than a few 2^20 items unasked.
    enum Step { Backward, Order, Lifetimes, Coordinates, Labels, Steps };
    static constexpr double StepEnd[Steps] = { 0.1, 0.16, 0.3, 0.45, 1.0 };
    static constexpr size_t ReportEvery = size_t(1) << 20;

    // `progress` is told the share done of the steps [first, last] (a build that leaves the labels to later
    // reports its steps over [0, 1], and so does the labels' pass).
    BuildProgress(const std::function<bool(double)>& progress, Step first, Step last)
        : m_progress(progress)
        , m_from(first == Backward ? 0.0 : StepEnd[first - 1])
        , m_to(StepEnd[last])
    {
    }

    // Reports `part` (in [0, 1]) of `step` done; false once the caller asked to stop.
    bool report(Step step, double part)
    {
        if (!m_progress || m_stopped)
            return !m_stopped;
        const double begin = step == Backward ? 0.0 : StepEnd[step - 1];
        const double done = begin + (StepEnd[step] - begin) * std::clamp(part, 0.0, 1.0);
        if (!m_progress(std::clamp((done - m_from) / (m_to - m_from), 0.0, 1.0)))
            m_stopped = true;
        return !m_stopped;
    }
    // report() every ReportEvery items of a loop over `total` items, `done` of them done, that takes the share
    // [from, to] of `step`.
    bool proceed(size_t done, size_t total, Step step, double from = 0.0, double to = 1.0)
    {
        return done == 0 || (done % ReportEvery) != 0
            || report(step, from + (to - from) * (total == 0 ? 1.0 : double(done) / double(total)));
    }
    bool stopped() const { return m_stopped; }

private:
    const std::function<bool(double)>& m_progress;
    const double m_from, m_to;
    bool m_stopped = false;
};

// The labels' pass of one Replay whose lifetimes, series and checkpoints are built (the last steps of
// Replay::build, or Replay::buildLabels): forwards over the trace again, following every free block over compressed
// coordinates and which Block object it is, for the inactive labels, their lists at the checkpoints and the
// largest-free series. It writes nothing else of the Replay, so that other threads may query it meanwhile.
class ReplayLabeller {
public:
    ReplayLabeller(const Snapshot& snapshot, Replay& r, BuildProgress& progress)
        : m_snapshot(snapshot)
        , m_r(r)
        , m_progress(progress)
    {
        if (m_r.m_device >= 0 && size_t(m_r.m_device) < snapshot.deviceTraces.size()) {
            const Trace& trace = snapshot.deviceTraces[size_t(m_r.m_device)];
            assert(trace.size() == size_t(m_r.m_firstEntry + m_r.m_entryCount));
            m_entries = trace.data() + m_r.m_firstEntry;
            m_n = size_t(m_r.m_entryCount);
        }
        const auto& pieces = m_r.m_pieces;
        for (uint32_t p = 0; p < pieces.size(); ++p)
            if (pieces[p].endIndex < n())
                m_pieceEnds.push_back(p);
        std::sort(m_pieceEnds.begin(), m_pieceEnds.end(), [&](uint32_t a, uint32_t b) {
            return pieces[a].endIndex != pieces[b].endIndex ? pieces[a].endIndex < pieces[b].endIndex
                                                            : pieces[a].address < pieces[b].address;
        });
    }

    // False when asked to stop on the way; true once the replay is labelled().
    bool run()
    {
        // What a stopped pass left (a later buildLabels starts again).
        m_r.m_labels.clear();
        m_r.m_checkpointLabelOffsets.clear();
        m_r.m_checkpointLabels.clear();
        m_r.m_checkpointFirstLabel.clear();
        m_r.m_largestFree.clear();
        if (!buildCoordinates() || !replayFreeBlocks())
            return false;
        m_r.m_labelled.value.store(true, std::memory_order_release);
        return true;
    }

private:
    using Step = BuildProgress::Step;
    static constexpr Step Coordinates = BuildProgress::Coordinates, Labels = BuildProgress::Labels;
    static constexpr size_t ReportEvery = BuildProgress::ReportEvery;

    TraceIndex n() const { return TraceIndex(m_n); }

    // Every address where a block or a piece starts or ends, sorted, and each one's index in that list. False when
    // asked to stop on the way. What is sorted are (address, slot) keys, slot = 2 × object + (1 for its end), the
    // pieces' after the allocations': in 8 bytes where the bits in which the addresses differ and the slot fit (any
    // real trace: blocks 512-byte aligned within a device's memory), else in 16 (the 1 GB synthetic file: keys and
    // the sort's spare array 288 MB -> 144 MB, fresh memory while the window is already open).
    bool buildCoordinates()
    {
        if (!m_progress.report(Coordinates, 0))
            return false;
        const auto& allocations = m_r.m_allocations;
        const auto& pieces = m_r.m_pieces;
        uint64_t all = ~uint64_t(0), any = 0;
        forEachEnd([&](DeviceAddr address, uint32_t) {
            all &= orderBits(address);
            any |= orderBits(address);
        });
        const uint64_t varying = all ^ any;
        const int low = varying == 0 ? 0 : std::countr_zero(varying);
        const int width = varying == 0 ? 0 : 64 - std::countl_zero(varying) - low;
        const uint64_t slots = 2 * (uint64_t(allocations.size()) + pieces.size());
        const int slotBits = std::bit_width(slots);
        if (width + slotBits <= 64)
            return coordinatesFrom(PackedKeys { all & ~(lowBits(width) << low), low, width, slotBits });
        return coordinatesFrom(WideKeys {});
    }

    // Addresses as unsigned bits in the order of the signed addresses.
    static uint64_t orderBits(DeviceAddr address) { return uint64_t(address) ^ (uint64_t(1) << 63); }
    static DeviceAddr fromOrderBits(uint64_t bits) { return DeviceAddr(bits ^ (uint64_t(1) << 63)); }
    static uint64_t lowBits(int n) { return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1; }

    // f(address, slot) for both ends of every allocation, then of every piece.
    template <typename F> void forEachEnd(F&& f) const
    {
        const auto& allocations = m_r.m_allocations;
        const auto& pieces = m_r.m_pieces;
        for (uint32_t i = 0; i < allocations.size(); ++i) {
            f(allocations[i].address, 2 * i);
            f(allocations[i].address + allocations[i].size, 2 * i + 1);
        }
        const uint32_t pieceBase = uint32_t(2 * allocations.size());
        for (uint32_t i = 0; i < pieces.size(); ++i) {
            f(pieces[i].address, pieceBase + 2 * i);
            f(pieces[i].address + pieces[i].size, pieceBase + 2 * i + 1);
        }
    }

    // The two key layouts: make a key, its bits to sort by (the address's), its slot and its address.
    struct WideKeys {
        struct Key {
            DeviceAddr addr;
            uint32_t slot;
        };
        Key make(DeviceAddr address, uint32_t slot) const { return { address, slot }; }
        uint64_t sortBits(const Key& k) const { return orderBits(k.addr); }
        uint32_t slot(const Key& k) const { return k.slot; }
        DeviceAddr address(const Key& k) const { return k.addr; }
    };
    struct PackedKeys {
        using Key = uint64_t; // the address's varying bits above the slot
        uint64_t common; // the bits every address has (outside the varying ones)
        int low, width, slotBits;
        Key make(DeviceAddr address, uint32_t slot) const
        {
            return (((orderBits(address) >> low) & lowBits(width)) << slotBits) | slot;
        }
        uint64_t sortBits(Key k) const { return slotBits >= 64 ? 0 : k >> slotBits; }
        uint32_t slot(Key k) const { return uint32_t(k & lowBits(slotBits)); }
        DeviceAddr address(Key k) const { return fromOrderBits(common | (sortBits(k) << low)); }
    };

    template <typename Keys> bool coordinatesFrom(const Keys& layout)
    {
        using Key = typename Keys::Key;
        const auto& allocations = m_r.m_allocations;
        const auto& pieces = m_r.m_pieces;
        std::vector<Key> keys;
        keys.reserve(2 * (allocations.size() + pieces.size()));
        prefaultSpare(keys);
        forEachEnd([&](DeviceAddr address, uint32_t slot) { keys.push_back(layout.make(address, slot)); });
        if (!m_progress.report(Coordinates, 0.2))
            return false;
        if (!radixSort(keys, layout, [&](double part) { return m_progress.report(Coordinates, 0.2 + 0.6 * part); }))
            return false;
        const uint32_t pieceBase = uint32_t(2 * allocations.size());
        m_coords.clear();
        m_allocCoords.resize(2 * allocations.size());
        m_pieceCoords.resize(2 * pieces.size());
        uint64_t last = 0;
        for (size_t i = 0; i < keys.size(); ++i) {
            if (!m_progress.proceed(i, keys.size(), Coordinates, 0.8, 1.0))
                return false;
            const Key& k = keys[i];
            if (m_coords.empty() || layout.sortBits(k) != last) {
                m_coords.push_back(layout.address(k));
                last = layout.sortBits(k);
            }
            const uint32_t c = uint32_t(m_coords.size() - 1), slot = layout.slot(k);
            if (slot < pieceBase)
                m_allocCoords[slot] = c;
            else
                m_pieceCoords[slot - pieceBase] = c;
        }
        return true;
    }

    // LSD radix sort by the layout's sort bits, one byte per pass, skipping bytes that are the same in every key
    // (the high bytes of device addresses, the low ones of 512-byte aligned blocks). `proceed(share done)` is asked
    // before each pass and every ReportEvery keys of it; false from it stops the sort (the keys are then in no
    // useful order) and is returned. Stable: keys with equal sort bits keep their order.
    template <typename Keys, typename Key, typename Proceed>
    static bool radixSort(std::vector<Key>& keys, const Keys& layout, Proceed&& proceed)
    {
        if (keys.size() < 2)
            return true;
        uint64_t all = ~uint64_t(0), any = 0;
        for (const Key& k : keys) {
            all &= layout.sortBits(k);
            any |= layout.sortBits(k);
        }
        const uint64_t varying = all ^ any;
        int passes = 0, pass = 0;
        for (int shift = 0; shift < 64; shift += 8)
            passes += ((varying >> shift) & 0xff) != 0;
        if (passes == 0)
            return true;
        // The keys go back and forth between the vector and a spare array that the first pass fills whole: left
        // unwritten until then (zeroing it first cost the 1 GB file's build 0.5 s of fresh pages), and made present
        // by the prefault thread meanwhile.
        const size_t n = keys.size();
        static_assert(std::is_trivially_default_constructible_v<Key>);
        const std::unique_ptr<Key[]> spare(new Key[n]);
        prefaultAsync(spare.get(), n * sizeof(Key));
        Key* from = keys.data();
        Key* to = spare.get();
        for (int shift = 0; shift < 64; shift += 8) {
            if (((varying >> shift) & 0xff) == 0)
                continue;
            // A pass over the 45 M keys of a 5 GB file takes seconds (the first faults in the spare array's pages):
            // it asks at its start and every ReportEvery keys of each of its two loops.
            if (!proceed(double(pass) / double(passes)))
                return false;
            auto asks = [&](size_t i, double part) {
                return i == 0 || i % ReportEvery != 0 || proceed((double(pass) + part) / double(passes));
            };
            size_t count[257] = {};
            for (size_t i = 0; i < n; ++i) {
                if (!asks(i, 0.25 * double(i) / double(n)))
                    return false;
                ++count[((layout.sortBits(from[i]) >> shift) & 0xff) + 1];
            }
            for (int b = 0; b < 256; ++b)
                count[b + 1] += count[b];
            for (size_t i = 0; i < n; ++i) {
                if (!asks(i, 0.25 + 0.75 * double(i) / double(n)))
                    return false;
                to[count[(layout.sortBits(from[i]) >> shift) & 0xff]++] = from[i];
            }
            std::swap(from, to);
            ++pass;
        }
        if (from != keys.data())
            std::copy(from, from + n, keys.data());
        return true;
    }

    // --- the forward pass over free blocks ------------------------------------------------------------------

    bool compatibleExpandable(uint32_t a, uint32_t b) const
    {
        const SegmentPiece& pa = m_r.m_pieces[a];
        const SegmentPiece& pb = m_r.m_pieces[b];
        return pa.isExpandable && pb.isExpandable && pa.stream == pb.stream && pa.poolId == pb.poolId;
    }

    // Whether a free gap may not extend across coordinate k: k is where a segment starts, other than the join of
    // two mapped ranges of one expandable segment.
    bool barrier(uint32_t k) const
    {
        if (!((m_pieceStartBits[k >> 6] >> (k & 63)) & 1))
            return false; // the common case, answered from a small bitset
        const uint32_t ending = m_pieceEndAt.find(k);
        return ending == None || !compatibleExpandable(m_pieceStartAt.find(k), ending);
    }

    // A new inactive label (see InactiveLabel): from state `index` on, the free block ending at coordinate `end`
    // carries `requested`.
    uint32_t label(uint32_t end, ByteCount requested, TraceIndex index)
    {
        m_r.m_labels.push_back({ m_coords[end], requested, index });
        return uint32_t(m_r.m_labels.size() - 1);
    }
    ByteCount requestOf(uint32_t label) const { return label == None ? 0 : m_r.m_labels[label].requested; }

    // A segment (or a mapped range) becomes live on the way to state `after`; its free space is a Block object
    // carrying `requested` (0 for a new segment: alloc_block's new Block; what the unmapped range carried for a
    // mapped one: map_block). No label before the trace (state 0 is labelled as a whole).
    void addPiece(uint32_t p, TraceIndex after, ByteCount requested)
    {
        const uint32_t cs = m_pieceCoords[2 * p], ce = m_pieceCoords[2 * p + 1];
        const uint32_t before = m_pieceEndAt.find(cs), after_ = m_pieceStartAt.find(ce);
        const bool mergeLeft = before != None && compatibleExpandable(before, p);
        const bool mergeRight = after_ != None && compatibleExpandable(after_, p);
        if (m_pieceStartAt.find(cs) == None && m_pieceEndAt.find(ce) == None) {
            m_pieceStartAt.insert(cs, p);
            m_pieceStartBits[cs >> 6] |= uint64_t(1) << (cs & 63);
            m_pieceEndAt.insert(ce, p);
        }
        const auto [start, end] = m_gaps.add(cs, ce, mergeLeft, mergeRight);
        if (after > 0 && start < end)
            m_gaps.setLabel(start, label(end, requested, after));
    }

    // A segment (segment_free) or a mapped range (segment_unmap, `unmap`) stops being live on the way to state
    // `after`. An unmapped range leaves the partial pages around it free as new Blocks (unmap_block's before_free /
    // after_free: request 0).
    void removePiece(uint32_t p, TraceIndex after, bool unmap)
    {
        const uint32_t cs = m_pieceCoords[2 * p], ce = m_pieceCoords[2 * p + 1];
        const GapTracker::Cut cut = m_gaps.remove(cs, ce);
        if (unmap) {
            if (cut.leftStart != None)
                m_gaps.setLabel(cut.leftStart, label(cs, 0, after));
            if (cut.rightEnd != None)
                m_gaps.setLabel(ce, label(cut.rightEnd, 0, after));
        }
        if (m_pieceStartAt.find(cs) == p && m_pieceEndAt.find(ce) == p) {
            m_pieceStartAt.erase(cs);
            m_pieceStartBits[cs >> 6] &= ~(uint64_t(1) << (cs & 63));
            m_pieceEndAt.erase(ce);
        }
    }

    // The allocation becomes live on the way to state `after` (the state right after its alloc). It takes the
    // front of a free block, whose rest keeps its object (alloc_found_block); a start inside a free block (not
    // PyTorch's, but a trace may say so) leaves the part before it as a new free block with the same request.
    void addAllocation(uint32_t id, TraceIndex after)
    {
        const uint32_t cs = m_allocCoords[2 * id];
        const GapTracker::Cut cut = m_gaps.remove(cs, m_allocCoords[2 * id + 1]);
        if (after > 0 && cut.leftStart != None)
            m_gaps.setLabel(cut.leftStart, label(cs, requestOf(cut.label), after));
    }

    // The allocation stops being live at its free_completed, entry `index`: its block, merged with the free
    // neighbours, carries its request (free_block: the freed Block survives try_merge_blocks).
    void removeAllocation(uint32_t id, TraceIndex index)
    {
        const uint32_t cs = m_allocCoords[2 * id], ce = m_allocCoords[2 * id + 1];
        const auto [start, end] = m_gaps.add(cs, ce, !barrier(cs), !barrier(ce));
        m_gaps.setLabel(start, label(end, m_r.m_allocations[id].requestedSize, index + 1));
    }

    // A live expandable piece ends / starts at address `at` (the coordinates of mapped neighbours).
    bool mappedEndsAt(DeviceAddr at) const { return mappedAt(at, m_pieceEndAt); }
    bool mappedStartsAt(DeviceAddr at) const { return mappedAt(at, m_pieceStartAt); }
    bool mappedAt(DeviceAddr at, const AddressMap& pieces) const
    {
        auto it = std::lower_bound(m_coords.begin(), m_coords.end(), at);
        if (it == m_coords.end() || *it != at)
            return false;
        const uint32_t p = pieces.find(DeviceAddr(it - m_coords.begin()));
        return p != None && m_r.m_pieces[p].isExpandable;
    }

    // The largest free block of state `index`, and the labels of its free blocks if a checkpoint is there.
    void recordState(TraceIndex index)
    {
        m_r.m_largestFree.push_back(m_gaps.largest());
        if (m_nextCheckpoint >= m_r.m_checkpointIndex.size() || m_r.m_checkpointIndex[m_nextCheckpoint] != index)
            return;
        ++m_nextCheckpoint;
        m_sortScratch.clear();
        m_gaps.forEach([&](uint32_t, uint32_t end, uint32_t id) {
            if (id != None)
                m_sortScratch.emplace_back(m_coords[end], id);
        });
        m_r.checkpointLabels(m_sortScratch);
    }

    // The final snapshot's inactive blocks (device `m_r.m_device`) by end: start and request.
    std::unordered_map<DeviceAddr, std::pair<DeviceAddr, ByteCount>> finalInactive() const
    {
        std::unordered_map<DeviceAddr, std::pair<DeviceAddr, ByteCount>> out;
        for (const Segment& seg : m_snapshot.segments) {
            if (seg.device != m_r.m_device)
                continue;
            const Block* blocks = m_snapshot.segmentBlocks(seg);
            const size_t count = std::min<size_t>(
                seg.blockCount, m_snapshot.blocks.size() - std::min<size_t>(seg.blockBegin, m_snapshot.blocks.size()));
            for (size_t b = 0; b < count; ++b)
                if (blocks[b].state == BlockState::Inactive)
                    out[blocks[b].address + blocks[b].size] = { blocks[b].address, blocks[b].requestedSize };
        }
        return out;
    }

    // Forwards from the state before the trace, following the free blocks. False when asked to stop.
    bool replayFreeBlocks()
    {
        const auto& allocations = m_r.m_allocations;
        const auto& pieces = m_r.m_pieces;
        m_gaps.reset(m_coords);
        m_pieceStartBits.assign((m_coords.size() + 63) / 64, 0);
        m_r.m_largestFree.setHugePages(true);
        m_r.m_largestFree.reserve(m_n + 1);
        // The labels grew by 4 KiB faults and doublings: a third of this pass on a 1 GB file (5.2 M labels, 125 MB;
        // forward pass 1.7-2.0 s -> 1.1-1.4 s). About one per free and one per split of a free block.
        m_r.m_labels.setHugePages(true);
        m_r.m_labels.reserve(allocations.size() + allocations.size() / 4 + 2 * pieces.size() + 64);
        m_r.m_checkpointLabelOffsets.assign(1, 0);

        // State 0: what was alive before the trace (segments first, so blocks find their gaps). Its free blocks get
        // labels of unknown request (0), filled in below for those that survive to the end.
        uint32_t nextPiece = 0;
        while (nextPiece < pieces.size() && pieces[nextPiece].beginIndex < 0)
            addPiece(nextPiece++, 0, 0);
        const uint32_t preTraceAllocs = uint32_t(std::find_if(allocations.begin(), allocations.end(),
                                                              [](const Allocation& a) { return a.allocIndex >= 0; })
                                                 - allocations.begin());
        for (uint32_t id = 0; id < preTraceAllocs; ++id)
            addAllocation(id, 0);
        m_gaps.forEach([&](uint32_t start, uint32_t end, uint32_t) { m_gaps.setLabel(start, label(end, 0, 0)); });
        const uint32_t state0Labels = uint32_t(m_r.m_labels.size());
        recordState(0);

        size_t nextEnd = 0;
        const auto& entryAllocation = m_r.m_entryAllocation;
        for (size_t j = 0; j < m_n; ++j) {
            if (!m_progress.proceed(j + 1, m_n, Labels))
                return false;
            const TraceIndex index = TraceIndex(j);
            const uint32_t id = entryAllocation[j];
            const TraceEntry& e = m_entries[j];
            switch (e.action) {
            case Action::Alloc:
                if (id != None)
                    addAllocation(id, index + 1);
                break;
            case Action::FreeCompleted:
                if (id != None)
                    removeAllocation(id, index);
                break;
            default:
                break;
            }
            // Segment lifetimes are resolved per piece (one segment_map may begin several).
            const bool unmap = e.action == Action::SegmentUnmap;
            ByteCount unmappedRequest = 0; // the request of the free block an unmap takes
            bool unmapped = false;
            while (nextEnd < m_pieceEnds.size() && pieces[m_pieceEnds[nextEnd]].endIndex == index) {
                const uint32_t p = m_pieceEnds[nextEnd++];
                if (unmap && !unmapped) {
                    unmappedRequest = requestOf(m_gaps.labelAt(m_pieceCoords[2 * p]));
                    unmapped = true;
                }
                removePiece(p, index + 1, unmap);
            }
            if (unmapped) {
                // The unmapped range takes the free block's object with it (unmap_block); with nothing mapped on
                // either side the segment is released (release_blocks: no prev and no next), and so is its space.
                const UnmappedSpace::Range r = m_unmapped.unmap(e.addr, e.addr + e.size, unmappedRequest);
                if (!mappedEndsAt(r.start) && !mappedStartsAt(r.end))
                    m_unmapped.forget(r.start, r.end);
            }
            const ByteCount mappedRequest
                = e.action == Action::SegmentMap ? m_unmapped.map(e.addr, e.addr + e.size) : 0;
            while (nextPiece < pieces.size() && pieces[nextPiece].beginIndex == index)
                addPiece(nextPiece++, index + 1, mappedRequest);
            recordState(index + 1);
        }

        // The final snapshot says what each inactive block carries at the end: a free block from before the trace
        // that survived takes it from there on, and where the rules came to another request (a trace with estimated
        // block sizes) the snapshot's holds at the last index.
        const auto inactive = finalInactive();
        m_gaps.forEach([&](uint32_t start, uint32_t end, uint32_t id) {
            auto it = inactive.find(m_coords[end]);
            if (it == inactive.end() || it->second.first != m_coords[start] || id == None)
                return;
            if (id < state0Labels)
                m_r.m_labels[id].requested = it->second.second;
            else if (m_r.m_labels[id].requested != it->second.second)
                label(end, it->second.second, n());
        });
        return true;
    }

    const Snapshot& m_snapshot;
    Replay& m_r;
    BuildProgress& m_progress;
    const TraceEntry* m_entries = nullptr;
    size_t m_n = 0;
    std::vector<uint32_t> m_pieceEnds; // pieces that end in the trace, by endIndex

    // Coordinates.
    std::vector<DeviceAddr> m_coords;
    std::vector<uint32_t> m_allocCoords; // 2 per allocation: start, end
    std::vector<uint32_t> m_pieceCoords; // 2 per piece

    // The pass.
    GapTracker m_gaps;
    UnmappedSpace m_unmapped;
    AddressMap m_pieceStartAt { 64 }, m_pieceEndAt { 64 }; // coordinate -> the live piece starting / ending there
    std::vector<uint64_t> m_pieceStartBits; // per coordinate: whether a live piece starts there
    size_t m_nextCheckpoint = 0; // the first checkpoint whose labels are not listed yet
    std::vector<std::pair<DeviceAddr, uint32_t>> m_sortScratch;
};

// Builds one Replay; lives for the duration of Replay::build only.
class ReplayBuilder {
public:
    ReplayBuilder(const Snapshot& snapshot, int device, const ReplayOptions& options, Replay& out)
        : m_snapshot(snapshot)
        , m_options(options)
        , m_r(out)
        , m_progress(m_options.progress, BuildProgress::Backward,
                     options.deferLabels ? BuildProgress::Lifetimes : BuildProgress::Labels)
        , m_open(1024)
    {
        m_r.m_device = device;
        if (device >= 0 && size_t(device) < snapshot.deviceTraces.size()) {
            const auto& trace = snapshot.deviceTraces[size_t(device)];
            m_entries = trace.data();
            m_n = trace.size();
            if (m_n > MaxReplayEntries) {
                // Keep the newest entries, as PyTorch's ring buffer would have: the final state stays valid.
                m_r.m_firstEntry = int64_t(m_n - MaxReplayEntries);
                m_entries += m_r.m_firstEntry;
                m_n = MaxReplayEntries;
                ++m_r.m_warnings;
                m_r.m_firstWarning = ReplayIssue { 0, "entries older than the replay's limit were left out" };
            }
        }
        m_r.m_entryCount = int64_t(m_n);
        m_r.m_freeRequestedSkipped = skipsFreeRequested();
    }
    // A build that threw waits here for its work beside (ReplayOptions::beside), which reads the Replay's arrays.
    ~ReplayBuilder() { finishBeside(true); }

    void run()
    {
        loadFinalState();
        undoTrace();
        if (m_r.m_stopped || !orderAllocations())
            return;
        orderPieces();
        if (m_options.beside)
            startBeside();
        if (!replayLifetimes())
            return; // the destructor stops the work beside and waits for it
        if (!m_options.deferLabels && !ReplayLabeller(m_snapshot, m_r, m_progress).run())
            m_r.m_stopped = true;
        finishBeside(m_r.m_stopped);
    }

private:
    TraceIndex n() const { return TraceIndex(m_n); }

    using Step = BuildProgress::Step;
    static constexpr Step Backward = BuildProgress::Backward, Order = BuildProgress::Order,
                          Lifetimes = BuildProgress::Lifetimes;
    static constexpr size_t ReportEvery = BuildProgress::ReportEvery;

    // BuildProgress's, and a stop makes the replay incomplete (m_r.m_stopped).
    bool report(Step step, double part)
    {
        m_r.m_stopped = !m_progress.report(step, part);
        return !m_r.m_stopped;
    }
    bool proceed(size_t done, size_t total, Step step, double from = 0.0, double to = 1.0)
    {
        m_r.m_stopped = !m_progress.proceed(done, total, step, from, to);
        return !m_r.m_stopped;
    }

    // Counts an inconsistency; keeps the earliest in trace order as the example (the final state counts as entry n;
    // the backward pass meets later entries first).
    void warn(TraceIndex entry, const char* what)
    {
        if (m_r.m_warnings++ == 0 || entry <= m_r.m_firstWarning.entry)
            m_r.m_firstWarning = ReplayIssue { entry, what };
    }

    // A trace recorded with `skip_actions=["free_requested"]` (torch/cuda/memory.py _record_memory_history; the
    // allocator drops those entries as it records them): no free_requested at all, and a block allocated in the
    // trace has its free_completed with none before it. (A ring that wrapped between a block's free_requested and
    // its free_completed has such an entry too, but of a block allocated before the trace; PyTorch < 2.1's `free`
    // is neither.) The scan stops at the first free_requested, which a full trace has within its first entries.
    bool skipsFreeRequested() const
    {
        std::unordered_set<DeviceAddr> allocated;
        for (size_t j = 0; j < m_n; ++j) {
            const TraceEntry& e = m_entries[j];
            if (e.action == Action::FreeRequested)
                return false;
            if (e.action == Action::Alloc)
                allocated.insert(e.addr);
            else if (e.action == Action::FreeCompleted && allocated.count(e.addr)
                     && m_snapshot.str(m_snapshot.form(e).actionName) != "free")
                return true;
        }
        return false;
    }

    // --- backward pass -------------------------------------------------------------------------------------

    void loadFinalState()
    {
        // About one allocation per three entries (alloc, free_requested, free_completed).
        m_records.reserve(m_n / 3 + 64);
        // The big arrays of a build are filled by appends: their pages are made present on another core first
        // (model/prefault.h), as the parse does for the trace.
        prefaultSpare(m_records);
        m_allocOrder.reserve(m_n / 3 + 64);
        prefaultSpare(m_allocOrder);
        for (const Segment& seg : m_snapshot.segments) {
            if (seg.device != m_r.m_device)
                continue;
            if (seg.totalSize <= 0) {
                warn(n(), "a segment of the final state with no size");
                continue;
            }
            SegmentPiece piece;
            piece.address = seg.address;
            piece.size = seg.totalSize;
            piece.stream = seg.stream;
            piece.poolId = seg.poolId;
            piece.stack = seg.stack;
            piece.beginIndex = -1;
            piece.endIndex = n();
            piece.isExpandable = seg.isExpandable;
            openPiece(piece);
            const Block* blocks = m_snapshot.segmentBlocks(seg);
            const size_t blockCount = std::min<size_t>(
                seg.blockCount, m_snapshot.blocks.size() - std::min<size_t>(seg.blockBegin, m_snapshot.blocks.size()));
            for (size_t b = 0; b < blockCount; ++b) {
                const Block& block = blocks[b];
                if (block.state == BlockState::Inactive)
                    continue;
                if (block.state == BlockState::Unknown || block.size <= 0 || m_open.find(block.address) != None) {
                    warn(n(),
                         block.state == BlockState::Unknown
                             ? "a block of the final state in an unknown state"
                             : "a block of the final state with no size, or at the address of another");
                    continue;
                }
                Allocation a;
                a.address = block.address;
                a.size = block.size;
                a.requestedSize = block.requestedSize;
                a.stack = block.stack;
                a.version = block.version;
                a.allocIndex = -1;
                a.freeRequestedIndex = block.state == BlockState::ActivePendingFree ? -1 : n();
                a.freeCompletedIndex = n();
                a.sizeIsExact = true;
                m_open.insert(a.address, uint32_t(m_records.size()));
                m_records.push_back(a);
            }
        }
    }

    void undoTrace()
    {
        // The arrays a build fills at once take 2 MiB pages (GrowingArray::setHugePages); this one's 4 KiB faults
        // were a sixth of a 1 GB file's build's (perf, page-faults event).
        m_entryRecord.setHugePages(true);
        // Written below, entry by entry: no pass of its own to fill it first (0.55 s unasked for a 5 GB file's 67 M
        // entries).
        m_entryRecord.resizeForOverwrite(m_n);
        for (size_t j = m_n; j-- > 0;) {
            if (!proceed(m_n - j, m_n, Backward))
                return;
            m_entryRecord[j] = None; // unless a case below matches the entry to its record
            const TraceEntry& e = m_entries[j];
            const TraceIndex index = TraceIndex(j);
            switch (e.action) {
            case Action::Alloc: {
                const uint32_t id = m_open.find(e.addr);
                if (id == None) {
                    warn(index,
                         "an alloc of a block that is not live after it (a lost free, or an alloc over a live block)");
                    break;
                }
                Allocation& a = m_records[id];
                a.allocIndex = index;
                if (a.stack == EmptyStack)
                    a.stack = e.stack;
                if (a.freeRequestedIndex == -1)
                    warn(index, "an alloc of a block pending free with no free_requested after it");
                m_open.erase(e.addr);
                m_entryRecord[j] = id;
                m_allocOrder.push_back(id);
                break;
            }
            case Action::FreeRequested: {
                const uint32_t id = m_open.find(e.addr);
                if (id == None || m_records[id].freeRequestedIndex != -1) {
                    warn(index,
                         "a free_requested of a block that is not live, freed twice, or still active at its free");
                    break;
                }
                m_records[id].freeRequestedIndex = index;
                m_entryRecord[j] = id;
                break;
            }
            case Action::FreeCompleted: {
                if (m_open.find(e.addr) != None) {
                    warn(index, "a free_completed of a block that is still live after it (a double free)");
                    break;
                }
                // PyTorch < 2.1 wrote one `free` for both steps: nothing is pending before it.
                const bool legacyFree = m_snapshot.str(m_snapshot.form(e).actionName) == "free";
                Allocation a;
                a.address = e.addr;
                a.size = estimatedBlockSize(e.size);
                a.requestedSize = e.size;
                a.stack = EmptyStack; // set from the alloc entry when the trace has it
                a.version = e.version;
                a.allocIndex = -1;
                a.freeRequestedIndex = legacyFree || m_r.m_freeRequestedSkipped ? index : -1;
                a.freeCompletedIndex = index;
                a.sizeIsExact = false;
                m_open.insert(a.address, uint32_t(m_records.size()));
                m_entryRecord[j] = uint32_t(m_records.size());
                m_records.push_back(a);
                break;
            }
            case Action::SegmentAlloc:
                undoSegmentAlloc(e, index);
                break;
            case Action::SegmentFree:
                undoSegmentRelease(e, index, false);
                break;
            case Action::SegmentMap:
                undoSegmentMap(e, index);
                break;
            case Action::SegmentUnmap:
                undoSegmentRelease(e, index, true);
                break;
            case Action::Snapshot:
            case Action::Oom:
            case Action::Unknown:
            case Action::Count:
                break;
            }
        }
    }

    // Open pieces (live at the current point of the backward pass) are kept sorted by address; segment events
    // are rare, so a sorted vector is the simplest fit.
    size_t firstOpenEndingAfter(DeviceAddr addr) const
    {
        return size_t(std::partition_point(m_openPieces.begin(), m_openPieces.end(),
                                           [&](uint32_t p) { return m_pieces[p].address + m_pieces[p].size <= addr; })
                      - m_openPieces.begin());
    }

    bool overlapsOpen(DeviceAddr addr, ByteCount size) const
    {
        const size_t k = firstOpenEndingAfter(addr);
        return k < m_openPieces.size() && m_pieces[m_openPieces[k]].address < addr + size;
    }

    void openPiece(const SegmentPiece& piece)
    {
        if (overlapsOpen(piece.address, piece.size)) {
            warn(piece.endIndex, "a segment that overlaps another live segment");
            return;
        }
        const uint32_t id = uint32_t(m_pieces.size());
        m_pieces.push_back(piece);
        m_openPieces.insert(m_openPieces.begin() + ptrdiff_t(firstOpenEndingAfter(piece.address)), id);
    }

    void undoSegmentAlloc(const TraceEntry& e, TraceIndex index)
    {
        const size_t k = firstOpenEndingAfter(e.addr);
        if (k == m_openPieces.size() || m_pieces[m_openPieces[k]].address != e.addr
            || m_pieces[m_openPieces[k]].isExpandable) {
            warn(index, "a segment_alloc of a segment that is not live after it");
            return;
        }
        SegmentPiece& piece = m_pieces[m_openPieces[k]];
        if (piece.size != e.size)
            warn(index, "a segment_alloc whose size differs from the segment's");
        piece.beginIndex = index;
        if (piece.stack == EmptyStack)
            piece.stack = e.stack;
        m_openPieces.erase(m_openPieces.begin() + ptrdiff_t(k));
    }

    // Undo segment_free (a whole segment) or segment_unmap (a range of an expandable one): it was live before.
    void undoSegmentRelease(const TraceEntry& e, TraceIndex index, bool expandable)
    {
        if (e.size <= 0) {
            warn(index, "a segment_free or segment_unmap with no size");
            return;
        }
        SegmentPiece piece;
        piece.address = e.addr;
        piece.size = e.size;
        piece.stream = m_snapshot.stream(e);
        piece.stack = e.stack;
        piece.beginIndex = -1;
        piece.endIndex = index;
        piece.isExpandable = expandable;
        if (expandable) {
            // The pool is not in the entry: take it from an adjacent mapped range of the same stream, if any.
            const size_t k = firstOpenEndingAfter(e.addr);
            for (size_t neighbour : { k, k - 1 }) {
                if (neighbour >= m_openPieces.size())
                    continue;
                const SegmentPiece& other = m_pieces[m_openPieces[neighbour]];
                if (other.isExpandable && other.stream == piece.stream
                    && (other.address + other.size == e.addr || other.address == e.addr + e.size)) {
                    piece.poolId = other.poolId;
                    break;
                }
            }
        }
        openPiece(piece);
    }

    // Undo segment_map: the open expandable pieces inside the range began here; parts of them outside the range
    // stay open as pieces of their own.
    void undoSegmentMap(const TraceEntry& e, TraceIndex index)
    {
        const DeviceAddr begin = e.addr, end = e.addr + e.size;
        ByteCount covered = 0;
        size_t k = firstOpenEndingAfter(begin);
        while (k < m_openPieces.size() && m_pieces[m_openPieces[k]].address < end) {
            const uint32_t id = m_openPieces[k];
            if (!m_pieces[id].isExpandable) {
                ++k;
                continue;
            }
            const SegmentPiece whole = m_pieces[id];
            const DeviceAddr wholeEnd = whole.address + whole.size;
            SegmentPiece& inside = m_pieces[id];
            inside.address = std::max(whole.address, begin);
            inside.size = std::min(wholeEnd, end) - inside.address;
            inside.beginIndex = index;
            covered += inside.size;
            m_openPieces.erase(m_openPieces.begin() + ptrdiff_t(k));
            if (whole.address < begin) {
                SegmentPiece left = whole;
                left.size = begin - whole.address;
                openPiece(left); // lands at position k
                ++k;
            }
            if (wholeEnd > end) {
                SegmentPiece right = whole;
                right.address = end;
                right.size = wholeEnd - end;
                openPiece(right);
                break;
            }
        }
        if (covered != e.size)
            warn(index, "a segment_map of a range that is not mapped after it");
    }

    // --- ordering ------------------------------------------------------------------------------------------

    // Allocations alive before the trace first, by address; then one per matched alloc entry, in trace order (the
    // backward pass matched them in the reverse order). False when asked to stop on the way.
    bool orderAllocations()
    {
        if (!report(Order, 0))
            return false;
        // The records still open are those from before the trace (allocIndex -1); every other one met its alloc.
        std::vector<uint32_t> before;
        m_open.forEach([&](DeviceAddr, uint32_t id) { before.push_back(id); });
        std::sort(before.begin(), before.end(),
                  [&](uint32_t a, uint32_t b) { return m_records[a].address < m_records[b].address; });
        m_preTraceAllocs = uint32_t(before.size());
        // In the backward pass's array, so that the order costs no second array of one id per allocation.
        std::vector<uint32_t> order = std::move(m_allocOrder);
        std::reverse(order.begin(), order.end());
        order.reserve(m_records.size());
        order.insert(order.begin(), before.begin(), before.end());
        // Records neither matched to an alloc nor open (none in a consistent trace) cannot exist: every record is
        // created open and leaves the open set only at its alloc.
        assert(order.size() == m_records.size());

        std::vector<uint32_t> newId(m_records.size(), None);
        auto& allocations = m_r.m_allocations;
        allocations.clear();
        allocations.setHugePages(true);
        allocations.resizeForOverwrite(order.size());
        if (!report(Order, 0)) // the order and newId above: a few hundred MB written for a 5 GB file
            return false;
        // Gathered in two halves, one on the second core (idle between the passes): random reads of the records,
        // bound by memory latency. The prefault thread makes the second half's pages present first, then the
        // first's, as each half writes its own from its start.
        const size_t half = order.size() / 2;
        prefaultAsync(allocations.data() + half, (order.size() - half) * sizeof(Allocation));
        prefaultAsync(allocations.data(), half * sizeof(Allocation));
        // Each half looks at the stop now and then; the calling thread's half (the first) reports and sets it.
        std::atomic<bool> stop { false };
        auto keepGoing = [&](size_t k, size_t begin, size_t end, double from, double to) {
            if ((k - begin) % ReportEvery != 0 || k == begin)
                return true;
            if (begin == 0 && !report(Order, from + (to - from) * double(k) / double(end)))
                stop = true;
            return !stop.load(std::memory_order_relaxed);
        };
        inTwoHalves(order.size(), half, [&](size_t begin, size_t end) {
            for (size_t k = begin; k < end; ++k) {
                if (!keepGoing(k, begin, end, 0.0, 0.6))
                    return;
                const uint32_t id = order[k];
                newId[id] = uint32_t(k);
                allocations[k] = m_records[id];
            }
        });
        if (stop || !report(Order, 0.6))
            return false;
        // Freed now, not with the builder: `m_records = {}` picked vector's initializer-list assignment, which keeps
        // the capacity (one Allocation per allocation: 210 MB of a 1 GB snapshot's build, through the forward pass).
        std::vector<Allocation>().swap(m_records);
        inTwoHalves(m_entryRecord.size(), m_entryRecord.size() / 2, [&](size_t begin, size_t end) {
            for (size_t k = begin; k < end; ++k) {
                if (!keepGoing(k, begin, end, 0.6, 1.0))
                    return;
                m_entryRecord[k] = m_entryRecord[k] == None ? None : newId[m_entryRecord[k]];
            }
        });
        if (stop)
            return false;
        m_r.m_entryAllocation = std::move(m_entryRecord);
        assert(size_t(m_preTraceAllocs)
               == size_t(std::count_if(allocations.begin(), allocations.end(),
                                       [](const Allocation& a) { return a.allocIndex < 0; })));
        return true;
    }

    void orderPieces()
    {
        auto& pieces = m_pieces;
        std::stable_sort(pieces.begin(), pieces.end(), [](const SegmentPiece& a, const SegmentPiece& b) {
            return a.beginIndex != b.beginIndex ? a.beginIndex < b.beginIndex : a.address < b.address;
        });
        m_pieceEnds.clear();
        for (uint32_t p = 0; p < pieces.size(); ++p)
            if (pieces[p].endIndex < n())
                m_pieceEnds.push_back(p);
        std::sort(m_pieceEnds.begin(), m_pieceEnds.end(), [&](uint32_t a, uint32_t b) {
            return pieces[a].endIndex != pieces[b].endIndex ? pieces[a].endIndex < pieces[b].endIndex
                                                            : pieces[a].address < pieces[b].address;
        });
        m_r.m_pieces = std::move(pieces);
    }

    // --- series and checkpoints ---------------------------------------------------------------------------

    // Forwards from the state before the trace: the totals of every state (the series and the peaks, packed on a
    // thread of their own) and the checkpoints. False when asked to stop on the way.
    bool replayLifetimes()
    {
        if (!report(Lifetimes, 0))
            return false;
        const auto& allocations = m_r.m_allocations;
        const auto& pieces = m_r.m_pieces;
        m_allocPos.assign(allocations.size(), None);
        m_piecePos.assign(pieces.size(), None);
        ReplaySeries& s = m_r.m_series;
        // Huge pages: the series thread spent a third of its time in faults (in the app it shares the second core
        // with the timeline's items: 1.3 s -> 0.9 s of CPU for a 1 GB file).
        for (auto* v : { &s.allocated, &s.active, &s.reserved, &s.requested }) {
            v->setHugePages(true);
            v->reserve(m_n + 1);
        }
        m_r.m_checkpointAllocOffsets.assign(1, 0);
        m_r.m_checkpointPieceOffsets.assign(1, 0);

        // State 0: what was alive before the trace.
        uint32_t nextPiece = 0;
        while (nextPiece < pieces.size() && pieces[nextPiece].beginIndex < 0)
            addPiece(nextPiece++);
        uint32_t nextAlloc = 0;
        for (; nextAlloc < m_preTraceAllocs; ++nextAlloc)
            addAllocation(nextAlloc, 0);
        m_r.m_peakAllocated = { m_allocated, 0 };
        m_r.m_peakActive = { m_active, 0 };
        m_r.m_peakReserved = { m_reserved, 0 };
        // From here until finish() the pipe's thread alone touches the series and the peaks: it packs the values of
        // states 0, 1, ... in order while this thread goes on with the next states.
        m_seriesPipe.emplace("memscope-series", [this](const Replay::StateTotals* totals, size_t count) {
            for (size_t k = 0; k < count; ++k)
                m_r.recordSeries(TraceIndex(m_r.m_series.size()), totals[k]);
        });
        recordState(0, nextAlloc, nextPiece);

        size_t nextEnd = 0;
        const auto& entryAllocation = m_r.m_entryAllocation;
        for (size_t j = 0; j < m_n; ++j) {
            if (!proceed(j + 1, m_n, Lifetimes))
                return false;
            const TraceIndex index = TraceIndex(j);
            const uint32_t id = entryAllocation[j];
            switch (m_entries[j].action) {
            case Action::Alloc:
                if (id != None) {
                    addAllocation(id, index + 1);
                    nextAlloc = id + 1;
                }
                break;
            case Action::FreeRequested:
                if (id != None && allocations[id].freeCompletedIndex > index)
                    m_allocated -= allocations[id].size;
                break;
            case Action::FreeCompleted:
                if (id != None)
                    removeAllocation(id, index);
                break;
            default:
                break;
            }
            while (nextEnd < m_pieceEnds.size() && pieces[m_pieceEnds[nextEnd]].endIndex == index)
                removePiece(m_pieceEnds[nextEnd++]);
            while (nextPiece < pieces.size() && pieces[nextPiece].beginIndex == index)
                addPiece(nextPiece++);
            recordState(index + 1, nextAlloc, nextPiece);
        }
        m_seriesPipe->finish();
        std::vector<uint32_t>().swap(m_allocPos);
        return report(Lifetimes, 1.0);
    }

    // The allocation becomes live on the way to state `after` (the state right after its alloc).
    void addAllocation(uint32_t id, TraceIndex after)
    {
        const Allocation& a = m_r.m_allocations[id];
        m_active += a.size;
        m_requested += a.requestedSize;
        if (a.freeRequestedIndex >= after)
            m_allocated += a.size;
        m_allocPos[id] = uint32_t(m_liveAllocs.size());
        m_liveAllocs.push_back(id);
    }

    // The allocation stops being live at its free_completed, entry `index`.
    void removeAllocation(uint32_t id, TraceIndex index)
    {
        const Allocation& a = m_r.m_allocations[id];
        m_active -= a.size;
        m_requested -= a.requestedSize;
        if (a.freeRequestedIndex >= index)
            m_allocated -= a.size;
        eraseLive(m_liveAllocs, m_allocPos, id);
    }

    void addPiece(uint32_t p)
    {
        m_reserved += m_r.m_pieces[p].size;
        m_piecePos[p] = uint32_t(m_livePieces.size());
        m_livePieces.push_back(p);
    }

    void removePiece(uint32_t p)
    {
        m_reserved -= m_r.m_pieces[p].size;
        eraseLive(m_livePieces, m_piecePos, p);
    }

    static void eraseLive(std::vector<uint32_t>& live, std::vector<uint32_t>& pos, uint32_t id)
    {
        const uint32_t at = pos[id];
        if (at >= live.size() || live[at] != id)
            return;
        live[at] = live.back();
        pos[live[at]] = at;
        live.pop_back();
        pos[id] = None;
    }

    // The series values of state `index` go down the pipe (see m_seriesPipe); the checkpoint is this thread's.
    void recordState(TraceIndex index, uint32_t nextAlloc, uint32_t nextPiece)
    {
        m_seriesPipe->push({ m_allocated, m_active, m_reserved, m_requested, 0 });
        m_r.recordCheckpoint(index, m_liveAllocs, m_livePieces, nextAlloc, nextPiece, m_options, m_sortScratch);
    }


    // ReplayOptions::beside, on a thread of its own from when the allocations and pieces are final.
    void startBeside()
    {
        m_beside = std::thread([this] {
            pthread_setname_np(pthread_self(), "memscope-beside");
            try {
                const auto& allocations = m_r.m_allocations;
                m_options.beside(std::span<const Allocation>(allocations.data(), allocations.size()), m_r.m_pieces,
                                 m_r.m_entryCount, m_besideStop);
            } catch (...) {
                m_besideError = std::current_exception();
            }
        });
    }
    void finishBeside(bool stop)
    {
        if (!m_beside.joinable())
            return;
        if (stop)
            m_besideStop = true;
        m_beside.join();
        if (m_besideError && !stop)
            std::rethrow_exception(std::exchange(m_besideError, nullptr));
    }

    const Snapshot& m_snapshot;
    const ReplayOptions m_options;
    Replay& m_r;
    BuildProgress m_progress;
    const TraceEntry* m_entries = nullptr;
    size_t m_n = 0;

    // Backward pass.
    std::vector<Allocation> m_records; // creation order (by free, newest first)
    std::vector<uint32_t> m_allocOrder; // the records matched to an alloc entry, newest alloc first
    AddressMap m_open; // address -> record live at the current point
    GrowingArray<uint32_t> m_entryRecord; // per entry: the record it changed
    std::vector<SegmentPiece> m_pieces;
    std::vector<uint32_t> m_openPieces; // piece ids by address
    uint32_t m_preTraceAllocs = 0;

    std::vector<uint32_t> m_pieceEnds; // pieces that end in the trace, by endIndex

    // Series and checkpoints.
    std::vector<uint32_t> m_liveAllocs, m_allocPos;
    std::vector<uint32_t> m_livePieces, m_piecePos;
    std::vector<std::pair<DeviceAddr, uint32_t>> m_sortScratch;
    ByteCount m_allocated = 0, m_active = 0, m_reserved = 0, m_requested = 0;
    // Packing the series (PackedSeries::push_back and seal, more than this pass's own work) runs on a thread of its
    // own, fed by this pass through a pipe; a stopped build's pipe is cut short when the builder goes.
    std::optional<ChunkPipe<Replay::StateTotals>> m_seriesPipe;
    std::atomic<bool> m_besideStop { false };
    std::exception_ptr m_besideError;
    std::thread m_beside;
};

Replay Replay::build(const Snapshot& snapshot, int device, const ReplayOptions& options)
{
    Replay replay;
    ReplayBuilder(snapshot, device, options, replay).run();
    return replay;
}

std::vector<Replay> Replay::buildAll(const Snapshot& snapshot, const ReplayOptions& options)
{
    std::vector<Replay> replays;
    const int devices = snapshot.deviceCount();
    replays.reserve(size_t(std::max(devices, 0)));
    for (int d = 0; d < devices; ++d)
        replays.push_back(build(snapshot, d, options));
    return replays;
}

void Replay::recordSeries(TraceIndex index, const StateTotals& totals)
{
    ReplaySeries& s = m_series;
    s.allocated.push_back(totals.allocated);
    s.active.push_back(totals.active);
    s.reserved.push_back(totals.reserved);
    s.requested.push_back(totals.requested);
    auto peak = [&](Peak& p, ByteCount v) {
        if (v > p.bytes) {
            p.bytes = v;
            p.index = index;
        }
    };
    peak(m_peakAllocated, totals.allocated);
    peak(m_peakActive, totals.active);
    peak(m_peakReserved, totals.reserved);
}

bool Replay::recordCheckpoint(TraceIndex index, std::span<const uint32_t> liveAllocs,
                              std::span<const uint32_t> livePieces, uint32_t nextAlloc, uint32_t nextPiece,
                              const ReplayOptions& options, std::vector<std::pair<DeviceAddr, uint32_t>>& scratch)
{
    // Checkpoint once the entries since the last one outweigh the live state (see ReplayOptions), the free blocks
    // counted as their bound.
    const size_t live = 2 * (liveAllocs.size() + livePieces.size());
    const size_t spacing = std::max<size_t>(options.minCheckpointInterval, options.checkpointSpacing * live);
    if (!m_checkpointIndex.empty() && size_t(index - m_checkpointIndex.back()) < spacing)
        return false;
    m_checkpointIndex.push_back(index);
    m_checkpointFirstAlloc.push_back(nextAlloc);
    m_checkpointFirstPiece.push_back(nextPiece);
    // Sort (address, id) pairs rather than ids, so the sort does not chase the allocation records.
    scratch.clear();
    for (uint32_t id : liveAllocs)
        scratch.emplace_back(m_allocations[id].address, id);
    std::sort(scratch.begin(), scratch.end());
    for (const auto& [address, id] : scratch)
        m_checkpointAllocs.push_back(AllocationId { id });
    m_checkpointAllocOffsets.push_back(uint32_t(m_checkpointAllocs.size()));
    const size_t from = m_checkpointPieces.size();
    m_checkpointPieces.insert(m_checkpointPieces.end(), livePieces.begin(), livePieces.end());
    std::sort(m_checkpointPieces.begin() + ptrdiff_t(from), m_checkpointPieces.end(), [&](uint32_t a, uint32_t b) {
        return m_pieces[a].address != m_pieces[b].address ? m_pieces[a].address < m_pieces[b].address : a < b;
    });
    m_checkpointPieceOffsets.push_back(uint32_t(m_checkpointPieces.size()));
    return true;
}

void Replay::checkpointLabels(std::vector<std::pair<DeviceAddr, uint32_t>>& byEnd)
{
    m_checkpointFirstLabel.push_back(uint32_t(m_labels.size()));
    // By id: a query reads the labels in the order they are stored in.
    const size_t from = m_checkpointLabels.size();
    for (const auto& [end, id] : byEnd)
        m_checkpointLabels.push_back(id);
    std::sort(m_checkpointLabels.begin() + ptrdiff_t(from), m_checkpointLabels.end());
    m_checkpointLabelOffsets.push_back(uint32_t(m_checkpointLabels.size()));
}

void Replay::labelInactive(ReplayState& out) const
{
    if (!labelled() || m_labels.empty() || m_checkpointLabelOffsets.size() < m_checkpointIndex.size() + 1)
        return;
    const size_t c = checkpointFor(out.index);
    // The inactive blocks by end, in a small open-addressing table (an end is never 0; blocks are 512-byte aligned).
    size_t inactive = 0;
    for (const ReplayBlock& b : out.blocks)
        inactive += b.state == BlockState::Inactive;
    if (inactive == 0)
        return;
    const int bits = std::bit_width(2 * inactive - 1);
    const size_t mask = (size_t(1) << bits) - 1;
    auto& table = out.labelScratch;
    table.assign(mask + 1, { 0, 0 });
    auto slot
        = [&](DeviceAddr end) { return size_t((uint64_t(end) >> 9) * 0x9E3779B97F4A7C15ull >> (64 - bits)) & mask; };
    for (uint32_t b = 0; b < out.blocks.size(); ++b) {
        if (out.blocks[b].state != BlockState::Inactive)
            continue;
        const DeviceAddr end = out.blocks[b].address + out.blocks[b].size;
        size_t i = slot(end);
        while (table[i].first != 0)
            i = (i + 1) & mask;
        table[i] = { end, b };
    }
    // First the free blocks listed at the checkpoint (their ends distinct), then every label made since, up to the
    // index, in order: a later label of the same end replaces an earlier one. Both lists are in label order, so the
    // labels are read front to back.
    auto apply = [&](const InactiveLabel& l) {
        for (size_t i = slot(l.end); table[i].first != 0; i = (i + 1) & mask)
            if (table[i].first == l.end) {
                out.blocks[table[i].second].requestedSize = l.requested;
                return;
            }
    };
    const uint32_t* kept = m_checkpointLabels.data() + m_checkpointLabelOffsets[c];
    const uint32_t* keptEnd = m_checkpointLabels.data() + m_checkpointLabelOffsets[c + 1];
    for (const uint32_t* k = kept; k != keptEnd; ++k)
        apply(m_labels[*k]);
    for (size_t k = m_checkpointFirstLabel[c]; k < m_labels.size() && m_labels[k].index <= out.index; ++k)
        apply(m_labels[k]);
}

bool Replay::buildLabels(const Snapshot& snapshot, const std::function<bool(double done)>& progress)
{
    if (labelled())
        return true;
    BuildProgress steps(progress, BuildProgress::Coordinates, BuildProgress::Labels);
    return ReplayLabeller(snapshot, *this, steps).run();
}

ByteCount largestInactive(const ReplayState& state)
{
    ByteCount largest = 0;
    for (const ReplayBlock& b : state.blocks)
        if (b.state == BlockState::Inactive)
            largest = std::max(largest, b.size);
    return largest;
}

ByteCount Replay::largestFreeAt(int64_t index) const
{
    index = std::clamp<int64_t>(index, 0, m_entryCount);
    if (const PackedSeries* series = largestFree(); series && size_t(index) < series->size())
        return (*series)[size_t(index)];
    return largestInactive(stateAt(index));
}

const GrowingArray<InactiveLabel>& Replay::inactiveLabels() const
{
    static const GrowingArray<InactiveLabel> none;
    return labelled() ? m_labels : none;
}

AllocationId Replay::allocationOfEntry(int64_t entry) const
{
    if (entry < 0 || entry >= m_entryCount)
        return NoAllocation;
    return AllocationId { m_entryAllocation[size_t(entry)] };
}

size_t Replay::checkpointFor(int64_t index) const
{
    const auto it = std::upper_bound(m_checkpointIndex.begin(), m_checkpointIndex.end(), index);
    return size_t(it - m_checkpointIndex.begin()) - 1; // checkpoint 0 is at index 0
}

void Replay::liveAt(int64_t index, std::vector<AllocationId>& out, std::vector<AllocationId>& scratch) const
{
    out.clear();
    if (m_checkpointIndex.empty())
        return;
    index = std::clamp<int64_t>(index, 0, m_entryCount);
    const size_t c = checkpointFor(index);
    const AllocationId* ids = m_checkpointAllocs.data();
    collectLive(
        ids + m_checkpointAllocOffsets[c], ids + m_checkpointAllocOffsets[c + 1], m_checkpointFirstAlloc[c],
        uint32_t(m_allocations.size()),
        [&](AllocationId a, AllocationId b) {
            const DeviceAddr aa = m_allocations[raw(a)].address, ab = m_allocations[raw(b)].address;
            return aa != ab ? aa < ab : raw(a) < raw(b);
        },
        [&](AllocationId id) {
            const Allocation& a = m_allocations[raw(id)];
            return a.allocIndex < index && index <= a.freeCompletedIndex;
        },
        [&](AllocationId id) { return m_allocations[raw(id)].allocIndex < index; }, out, scratch);
}

std::vector<AllocationId> Replay::liveAt(int64_t index) const
{
    std::vector<AllocationId> out, scratch;
    liveAt(index, out, scratch);
    return out;
}

void Replay::collectPieces(int64_t index, std::vector<uint32_t>& out) const
{
    std::vector<uint32_t> scratch; // pieces that began since the checkpoint: few, and segment events are rare
    const size_t c = checkpointFor(index);
    const uint32_t* ids = m_checkpointPieces.data();
    collectLive(
        ids + m_checkpointPieceOffsets[c], ids + m_checkpointPieceOffsets[c + 1], m_checkpointFirstPiece[c],
        uint32_t(m_pieces.size()),
        [&](uint32_t a, uint32_t b) {
            return m_pieces[a].address != m_pieces[b].address ? m_pieces[a].address < m_pieces[b].address : a < b;
        },
        [&](uint32_t p) { return m_pieces[p].beginIndex < index && index <= m_pieces[p].endIndex; },
        [&](uint32_t p) { return m_pieces[p].beginIndex < index; }, out, scratch);
}

void Replay::stateAt(int64_t index, ReplayState& out) const
{
    index = std::clamp<int64_t>(index, 0, m_entryCount);
    out.index = index;
    out.segments.clear();
    out.blocks.clear();
    out.strayBlocks = 0;
    liveAt(index, out.allocations, out.scratch);
    out.pieces.clear();
    if (m_checkpointIndex.empty())
        return;
    collectPieces(index, out.pieces);

    // Segments: pieces by address, adjacent mapped ranges of one expandable segment joined.
    for (uint32_t p : out.pieces) {
        const SegmentPiece& piece = m_pieces[p];
        if (!out.segments.empty()) {
            ReplaySegment& last = out.segments.back();
            if (piece.isExpandable && last.isExpandable && last.address + last.totalSize == piece.address
                && last.stream == piece.stream && last.poolId == piece.poolId) {
                last.totalSize += piece.size;
                continue;
            }
        }
        ReplaySegment seg;
        seg.address = piece.address;
        seg.totalSize = piece.size;
        seg.stream = piece.stream;
        seg.poolId = piece.poolId;
        seg.stack = piece.stack;
        seg.device = m_device;
        seg.isExpandable = piece.isExpandable;
        out.segments.push_back(seg);
    }

    // Blocks: the live allocations tile their segments; the space between them is inactive.
    const auto& live = out.allocations;
    size_t next = 0;
    auto gap = [&](DeviceAddr address, ByteCount size) {
        ReplayBlock b;
        b.address = address;
        b.size = size;
        out.blocks.push_back(b);
    };
    for (ReplaySegment& seg : out.segments) {
        seg.blockBegin = uint32_t(out.blocks.size());
        DeviceAddr cursor = seg.address;
        const DeviceAddr end = seg.address + seg.totalSize;
        for (; next < live.size() && m_allocations[raw(live[next])].address < end; ++next) {
            const Allocation& a = m_allocations[raw(live[next])];
            if (a.address < cursor || a.address + a.size > end) {
                ++out.strayBlocks; // before this segment, overlapping the previous block, or past the segment end
                continue;
            }
            if (a.address > cursor)
                gap(cursor, a.address - cursor);
            ReplayBlock b;
            b.address = a.address;
            b.size = a.size;
            b.requestedSize = a.requestedSize;
            b.state = a.freeRequestedIndex < index ? BlockState::ActivePendingFree : BlockState::ActiveAllocated;
            b.stack = a.stack;
            b.version = a.version;
            b.allocIndex = a.allocIndex;
            b.allocation = live[next];
            out.blocks.push_back(b);
            seg.activeSize += a.size;
            seg.requestedSize += a.requestedSize;
            if (b.state == BlockState::ActiveAllocated)
                seg.allocatedSize += a.size;
            cursor = a.address + a.size;
        }
        if (cursor < end)
            gap(cursor, end - cursor);
        seg.blockCount = uint32_t(out.blocks.size()) - seg.blockBegin;
    }
    out.strayBlocks += uint32_t(live.size() - next);
    labelInactive(out);
}

ReplayState Replay::stateAt(int64_t index) const
{
    ReplayState state;
    stateAt(index, state);
    return state;
}

size_t Replay::checkpointBytes() const
{
    const size_t labels = labelled()
        ? bytesOf(m_checkpointLabelOffsets) + bytesOf(m_checkpointLabels) + bytesOf(m_checkpointFirstLabel)
        : 0;
    return bytesOf(m_checkpointIndex) + bytesOf(m_checkpointAllocOffsets) + bytesOf(m_checkpointAllocs)
        + bytesOf(m_checkpointPieceOffsets) + bytesOf(m_checkpointPieces) + bytesOf(m_checkpointFirstAlloc)
        + bytesOf(m_checkpointFirstPiece) + labels;
}

size_t Replay::memoryBytes() const
{
    const size_t labels = labelled() ? bytesOf(m_labels) + bytesOf(m_largestFree) : 0;
    return sizeof(*this) + bytesOf(m_allocations) + bytesOf(m_entryAllocation) + bytesOf(m_pieces)
        + bytesOf(m_series.allocated) + bytesOf(m_series.active) + bytesOf(m_series.reserved)
        + bytesOf(m_series.requested) + labels + checkpointBytes();
}

} // namespace memscope::model
