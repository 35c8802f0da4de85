// Tests of model::Replay (common/model/replay.h): the state at every index of the real snapshots in
// ../shared/snapshots against the snapshot's final state, against the per-index series, against an independent
// forward replay written here, and under truncated, multi-stream, expandable, multi-device, OOM and inconsistent
// traces. Test thread only.
#include "io/snapshotio.h"
#include "model/replay.h"
#include "model/replayextender.h"
#include "model/timeline.h"
#include "testutil.h"
#include "vmflags.h"

#include <QDir>
#include <QTest>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

// bench::repeated only (a trace long enough for progress reports); big_trace is read from the test data.
#define MEMSCOPE_DEFAULT_SHARED_DIR ""
#include "../benchmarks/synthetic.h"

using namespace memscope;
using model::Action;
using model::BlockState;
using model::ByteCount;
using model::DeviceAddr;

namespace {

// Snapshots are loaded once per process: big_trace takes a while to decompress.
std::shared_ptr<const model::Snapshot> load(const std::string& name)
{
    static std::map<std::string, std::shared_ptr<const model::Snapshot>> cache;
    auto& slot = cache[name];
    if (!slot) {
        // "long/..." names the long real trace of the source tree (tests/data/long), others ../shared's snapshots.
        const bool inSourceTree = name.rfind("long/", 0) == 0;
        io::LoadResult result = io::loadSnapshot(inSourceTree ? test::dataPath(name) : test::snapshotPath(name));
        if (!result.ok())
            qWarning("%s: %s", name.c_str(), result.error.message.c_str());
        slot = result.snapshot;
    }
    return slot;
}

// Every real snapshot beside the checkout.
QStringList snapshotFiles()
{
    const QDir dir(QString::fromStdString(test::snapshotPath("")));
    return dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
}

bool isBig(const model::Snapshot& s, int device)
{
    return size_t(device) < s.deviceTraces.size() && s.deviceTraces[size_t(device)].size() > 20000;
}

// The indices to check: all of them for small traces, a fixed random sample plus both ends for big ones.
std::vector<int64_t> sampleIndices(int64_t n, bool big, size_t samples = 1500)
{
    std::vector<int64_t> out;
    if (!big) {
        for (int64_t i = 0; i <= n; ++i)
            out.push_back(i);
        return out;
    }
    std::mt19937_64 rng(42);
    std::uniform_int_distribution<int64_t> pick(0, n);
    out = { 0, 1, n - 1, n };
    for (size_t k = 0; k < samples; ++k)
        out.push_back(pick(rng));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

// Segments and blocks in a form both a ReplayState and a Snapshot give, for exact comparison.
struct FlatBlock {
    DeviceAddr address = 0;
    ByteCount size = 0;
    ByteCount requested = 0; // inactive blocks: the stale request PyTorch leaves on the Block object
    BlockState state = BlockState::Inactive;
    bool operator==(const FlatBlock&) const = default;
};

struct FlatSegment {
    DeviceAddr address = 0;
    ByteCount size = 0;
    int64_t stream = 0;
    bool expandable = false;
    ByteCount allocated = 0, active = 0, requested = 0;
    std::vector<FlatBlock> blocks;
    bool operator==(const FlatSegment&) const = default;
};

// inactiveRequests false: inactive blocks with request 0, for states whose stale requests the replay cannot know.
std::vector<FlatSegment> flatten(const model::ReplayState& state, bool withInactive = true,
                                 bool inactiveRequests = true)
{
    std::vector<FlatSegment> out;
    for (const auto& seg : state.segments) {
        FlatSegment f { seg.address,       seg.totalSize,  seg.stream,        seg.isExpandable,
                        seg.allocatedSize, seg.activeSize, seg.requestedSize, {} };
        for (uint32_t b = seg.blockBegin; b < seg.blockBegin + seg.blockCount; ++b) {
            const auto& block = state.blocks[b];
            const bool inactive = block.state == BlockState::Inactive;
            if (withInactive || !inactive)
                f.blocks.push_back({ block.address, block.size, inactive && !inactiveRequests ? 0 : block.requestedSize,
                                     block.state });
        }
        out.push_back(std::move(f));
    }
    return out;
}

std::vector<FlatSegment> flattenFinal(const model::Snapshot& s, int device)
{
    std::vector<FlatSegment> out;
    for (const auto& seg : s.segments) {
        if (seg.device != device)
            continue;
        FlatSegment f { seg.address,       seg.totalSize,  seg.stream,        seg.isExpandable,
                        seg.allocatedSize, seg.activeSize, seg.requestedSize, {} };
        const model::Block* blocks = s.segmentBlocks(seg);
        for (uint32_t b = 0; b < seg.blockCount; ++b) {
            const auto& block = blocks[b];
            f.blocks.push_back({ block.address, block.size, block.requestedSize, block.state });
        }
        out.push_back(std::move(f));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.address < b.address; });
    return out;
}

std::string hex(DeviceAddr a)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
    return buf;
}

// "" when equal, else where the first difference is.
std::string difference(const std::vector<FlatSegment>& got, const std::vector<FlatSegment>& want)
{
    for (size_t i = 0; i < std::max(got.size(), want.size()); ++i) {
        if (i >= got.size())
            return "missing segment " + hex(want[i].address);
        if (i >= want.size())
            return "extra segment " + hex(got[i].address);
        const FlatSegment &g = got[i], &w = want[i];
        const std::string where = "segment " + hex(w.address);
        if (g.address != w.address || g.size != w.size || g.expandable != w.expandable || g.stream != w.stream)
            return where + ": got " + hex(g.address) + " size " + std::to_string(g.size) + ", want size "
                + std::to_string(w.size);
        for (size_t b = 0; b < std::max(g.blocks.size(), w.blocks.size()); ++b) {
            if (b >= g.blocks.size())
                return where + ": missing block " + hex(w.blocks[b].address);
            if (b >= w.blocks.size())
                return where + ": extra block " + hex(g.blocks[b].address);
            const FlatBlock &gb = g.blocks[b], &wb = w.blocks[b];
            if (!(gb == wb))
                return where + ": block " + hex(wb.address) + " want size " + std::to_string(wb.size) + " req "
                    + std::to_string(wb.requested) + " " + std::string(model::blockStateName(wb.state)) + ", got "
                    + hex(gb.address) + " size " + std::to_string(gb.size) + " req " + std::to_string(gb.requested)
                    + " " + std::string(model::blockStateName(gb.state));
        }
        if (g.allocated != w.allocated || g.active != w.active || g.requested != w.requested)
            return where + ": segment totals differ";
    }
    return {};
}

// An independent forward replay of a COMPLETE trace: live blocks, whole segments and mapped ranges in std::maps.
struct ForwardModel {
    struct Live {
        ByteCount requested = 0;
        bool pending = false;
    };
    std::map<DeviceAddr, Live> blocks;
    std::map<DeviceAddr, ByteCount> segments; // cudaMalloc'ed: base -> size
    std::map<DeviceAddr, DeviceAddr> mapped; // expandable: start -> end, adjacent ranges joined

    void apply(const model::TraceEntry& e)
    {
        switch (e.action) {
        case Action::Alloc:
            blocks[e.addr] = { e.size, false };
            break;
        case Action::FreeRequested:
            blocks[e.addr].pending = true;
            break;
        case Action::FreeCompleted:
            blocks.erase(e.addr);
            break;
        case Action::SegmentAlloc:
            segments[e.addr] = e.size;
            break;
        case Action::SegmentFree:
            segments.erase(e.addr);
            break;
        case Action::SegmentMap: {
            DeviceAddr start = e.addr, end = e.addr + e.size;
            auto it = mapped.lower_bound(start);
            if (it != mapped.begin() && std::prev(it)->second == start) {
                start = std::prev(it)->first;
                mapped.erase(std::prev(it));
            }
            if (it != mapped.end() && it->first == end) {
                end = it->second;
                mapped.erase(it);
            }
            mapped[start] = end;
            break;
        }
        case Action::SegmentUnmap: {
            auto it = mapped.upper_bound(e.addr);
            if (it == mapped.begin())
                break;
            --it;
            const DeviceAddr start = it->first, end = it->second;
            mapped.erase(it);
            if (start < e.addr)
                mapped[start] = e.addr;
            if (e.addr + e.size < end)
                mapped[e.addr + e.size] = end;
            break;
        }
        default:
            break;
        }
    }

    // "" when the replay's state has the same segments and allocations (address, requested size, pending).
    std::string difference(const model::ReplayState& state) const
    {
        std::map<DeviceAddr, std::pair<ByteCount, bool>> segs; // address -> size, expandable
        for (const auto& [a, s] : segments)
            segs[a] = { s, false };
        for (const auto& [a, e] : mapped)
            segs[a] = { e - a, true };
        if (segs.size() != state.segments.size())
            return "segment count " + std::to_string(state.segments.size()) + ", want " + std::to_string(segs.size());
        auto it = segs.begin();
        for (const auto& seg : state.segments) {
            if (seg.address != it->first || seg.totalSize != it->second.first || seg.isExpandable != it->second.second)
                return "segment " + hex(seg.address) + " size " + std::to_string(seg.totalSize) + ", want "
                    + hex(it->first) + " size " + std::to_string(it->second.first);
            ++it;
        }
        auto bit = blocks.begin();
        for (const auto& b : state.blocks) {
            if (b.state == BlockState::Inactive)
                continue;
            if (bit == blocks.end())
                return "extra block " + hex(b.address);
            if (b.address != bit->first || b.requestedSize != bit->second.requested
                || (b.state == BlockState::ActivePendingFree) != bit->second.pending)
                return "block " + hex(b.address) + ", want " + hex(bit->first);
            ++bit;
        }
        if (bit != blocks.end())
            return "missing block " + hex(bit->first);
        if (state.strayBlocks != 0)
            return "stray blocks";
        return {};
    }
};

// A copy of the parts of `s` a Replay reads, with the first `drop` entries of one device's trace removed: what
// PyTorch's ring buffer would have kept of a longer run.
std::unique_ptr<model::Snapshot> truncatedCopy(const model::Snapshot& s, int device, size_t drop)
{
    auto t = std::make_unique<model::Snapshot>();
    for (uint32_t k = 1; k < s.strings.size(); ++k)
        t->strings.intern(s.strings.get(model::StringId { k })); // same ids, in the same order
    t->frames = s.frames;
    t->stackOffsets = s.stackOffsets;
    t->stackFrames = s.stackFrames;
    t->segments = s.segments;
    t->blocks = s.blocks;
    t->deviceTraces = s.deviceTraces;
    t->entryForms = s.entryForms;
    t->hasDeviceTraces = true;
    auto& trace = t->deviceTraces[size_t(device)];
    trace.erase(trace.begin(), trace.begin() + ptrdiff_t(std::min(drop, trace.size())));
    return t;
}

model::TraceEntry entry(Action action, DeviceAddr addr, ByteCount size)
{
    model::TraceEntry e;
    e.action = action;
    e.addr = addr;
    e.size = size;
    return e;
}

// A toy caching allocator that writes a consistent trace and knows its true state after every entry: cudaMalloc'ed
// segments (some placed right after another, as cudaMalloc often does), one expandable segment mapped and unmapped
// in 2 MiB pages (also in the middle, which splits it), first-fit blocks of 512-byte multiples (so the replay's
// size estimate is exact), frees deferred as under record_stream, and oom entries.
class AllocatorSim {
public:
    explicit AllocatorSim(uint32_t seed)
        : m_rng(seed)
    {
    }

    void run(int steps)
    {
        m_truth.push_back(flat());
        for (int k = 0; k < steps; ++k)
            step();
    }

    const std::vector<model::TraceEntry>& trace() const { return m_trace; }
    const std::vector<FlatSegment>& truth(size_t i) const { return m_truth[i]; }
    // The state after i entries as a replay of the trace without its first `cut` entries can know it: a free block
    // whose request comes from a Block object that existed before the cut (free then, or unmapped then) carries a
    // request such a replay cannot know (0) unless that very block was free at the cut and is still free at the
    // end without having been unmapped in between, where the snapshot shows it; at the last state the snapshot
    // says everything.
    std::vector<FlatSegment> knowable(size_t i, size_t cut) const
    {
        std::vector<FlatSegment> out = m_truth[i];
        if (cut == 0 || i + 1 == m_truth.size())
            return out;
        std::set<uint32_t> atEnd, freeAtCut;
        for (const auto& [address, id] : m_truthObjects.back())
            atEnd.insert(id);
        for (const auto& [address, id] : m_truthObjects[cut])
            freeAtCut.insert(id);
        std::map<DeviceAddr, uint32_t> objects(m_truthObjects[i].begin(), m_truthObjects[i].end());
        for (FlatSegment& seg : out)
            for (FlatBlock& b : seg.blocks) {
                if (b.state != BlockState::Inactive)
                    continue;
                const uint32_t id = objects[b.address], origin = m_objectOrigin[id];
                const bool followed
                    = origin == id && freeAtCut.count(id) && atEnd.count(id) && m_objectUnmapped[id] <= cut;
                if (m_objectBorn[origin] <= cut && !followed)
                    b.requested = 0;
            }
        return out;
    }

    // The final state as a snapshot.
    std::unique_ptr<model::Snapshot> snapshot() const
    {
        auto s = std::make_unique<model::Snapshot>();
        s->deviceTraces = { model::Trace(m_trace.begin(), m_trace.end()) };
        s->entryForms = m_forms;
        for (const FlatSegment& f : m_truth.back()) {
            model::Segment seg;
            seg.address = f.address;
            seg.totalSize = f.size;
            seg.stream = f.stream;
            seg.isExpandable = f.expandable;
            seg.allocatedSize = f.allocated;
            seg.activeSize = f.active;
            seg.requestedSize = f.requested;
            seg.blockBegin = uint32_t(s->blocks.size());
            seg.blockCount = uint32_t(f.blocks.size());
            for (const FlatBlock& fb : f.blocks) {
                model::Block b;
                b.address = fb.address;
                b.size = fb.size;
                b.requestedSize = fb.requested;
                b.state = fb.state;
                s->blocks.push_back(b);
            }
            s->segments.push_back(seg);
        }
        return s;
    }

private:
    static constexpr ByteCount Page = 2 << 20;
    static constexpr int Pages = 12;
    static constexpr DeviceAddr ExpandableBase = 0x7f0000000000;
    struct Seg {
        DeviceAddr address;
        ByteCount size;
        int64_t stream;
        bool expandable;
    };
    struct Live {
        ByteCount size, requested;
        bool pending;
    };
    // A free (or unmapped) Block object of PyTorch's allocator: what c10/cuda/CUDACachingAllocator.cpp keeps, written
    // here independently of model/freeblocks.h. The request is the last user's; `id` names the object.
    struct Object {
        DeviceAddr end;
        ByteCount requested;
        uint32_t id;
    };
    // A new object; `origin`: the one whose request it carries, if not its own (a mapped range's, from the
    // unmapped object).
    uint32_t newObject(uint32_t origin = UINT32_MAX)
    {
        const uint32_t id = uint32_t(m_objectBorn.size());
        m_objectBorn.push_back(m_trace.size() + 1);
        m_objectUnmapped.push_back(0);
        m_objectOrigin.push_back(origin == UINT32_MAX ? id : m_objectOrigin[origin]);
        return id;
    }
    // The reserved run (segment or mapped range) holding `address`.
    std::pair<DeviceAddr, DeviceAddr> runOf(DeviceAddr address) const
    {
        for (const Seg& seg : runs())
            if (seg.address <= address && address < seg.address + seg.size)
                return { seg.address, seg.address + seg.size };
        return { address, address };
    }
    // [start, end) becomes a free object carrying `requested`, absorbing the free objects beside it in its run
    // (free_block / map_block: the new one survives try_merge_blocks).
    void freeObject(DeviceAddr start, DeviceAddr end, ByteCount requested, uint32_t origin = UINT32_MAX)
    {
        const auto [runStart, runEnd] = runOf(start);
        if (start > runStart) {
            auto it = m_free.lower_bound(start);
            if (it != m_free.begin() && std::prev(it)->second.end == start) {
                start = std::prev(it)->first;
                m_free.erase(std::prev(it));
            }
        }
        if (end < runEnd) {
            if (auto it = m_free.find(end); it != m_free.end()) {
                end = it->second.end;
                m_free.erase(it);
            }
        }
        m_free[start] = { end, requested, newObject(origin) };
    }

    int pick(int n) { return int(m_rng() % uint32_t(n)); }

    // Reserved memory as PyTorch reports it: each cudaMalloc'ed segment, each contiguous mapped run.
    std::vector<Seg> runs() const
    {
        std::vector<Seg> out(m_segments.begin(), m_segments.end());
        for (int p = 0; p < Pages;) {
            if (!m_mapped[size_t(p)]) {
                ++p;
                continue;
            }
            int q = p;
            while (q < Pages && m_mapped[size_t(q)])
                ++q;
            out.push_back({ ExpandableBase + p * Page, (q - p) * Page, 0, true });
            p = q;
        }
        std::sort(out.begin(), out.end(), [](const Seg& a, const Seg& b) { return a.address < b.address; });
        return out;
    }

    std::vector<FlatSegment> flat()
    {
        std::vector<FlatSegment> out;
        std::vector<std::pair<DeviceAddr, uint32_t>> objects;
        auto inactive = [&](FlatSegment& f, DeviceAddr from, DeviceAddr to) {
            auto it = m_free.find(from);
            const bool known = it != m_free.end() && it->second.end == to;
            f.blocks.push_back({ from, to - from, known ? it->second.requested : -1, BlockState::Inactive });
            objects.emplace_back(from, known ? it->second.id : UINT32_MAX);
        };
        for (const Seg& seg : runs()) {
            FlatSegment f { seg.address, seg.size, seg.stream, seg.expandable, 0, 0, 0, {} };
            DeviceAddr cursor = seg.address;
            for (auto it = m_blocks.lower_bound(seg.address);
                 it != m_blocks.end() && it->first < seg.address + seg.size; ++it) {
                if (it->first > cursor)
                    inactive(f, cursor, it->first);
                const auto state = it->second.pending ? BlockState::ActivePendingFree : BlockState::ActiveAllocated;
                f.blocks.push_back({ it->first, it->second.size, it->second.requested, state });
                f.active += it->second.size;
                f.requested += it->second.requested;
                if (!it->second.pending)
                    f.allocated += it->second.size;
                cursor = it->first + it->second.size;
            }
            if (cursor < seg.address + seg.size)
                inactive(f, cursor, seg.address + seg.size);
            out.push_back(std::move(f));
        }
        m_truthObjects.push_back(std::move(objects));
        return out;
    }

    void emit(Action action, DeviceAddr addr, ByteCount size, int64_t stream = 0)
    {
        model::TraceEntry e = entry(action, addr, size);
        e.form = m_forms.intern({ .stream = stream });
        m_trace.push_back(e);
        m_truth.push_back(flat());
    }

    bool isFree(DeviceAddr addr, ByteCount size) const
    {
        auto it = m_blocks.lower_bound(addr);
        if (it != m_blocks.begin() && std::prev(it)->first + std::prev(it)->second.size > addr)
            return false;
        return it == m_blocks.end() || it->first >= addr + size;
    }

    DeviceAddr findGap(ByteCount size) const
    {
        for (const Seg& seg : runs()) {
            DeviceAddr cursor = seg.address;
            const DeviceAddr end = seg.address + seg.size;
            for (auto it = m_blocks.lower_bound(seg.address); cursor < end; ++it) {
                const DeviceAddr next = it == m_blocks.end() ? end : std::min(it->first, end);
                if (next - cursor >= size)
                    return cursor;
                if (it == m_blocks.end())
                    break;
                cursor = it->first + it->second.size;
            }
        }
        return -1;
    }

    void grow(ByteCount size)
    {
        if (pick(2)) {
            const int pages = int((size + Page - 1) / Page);
            for (int p = 0; p + pages <= Pages; ++p) {
                if (std::none_of(m_mapped.begin() + p, m_mapped.begin() + p + pages, [](bool m) { return m; })) {
                    // map_block at the front of the unmapped object there: it becomes the mapped block (with its
                    // request), what stays unmapped after it is a new object (request 0).
                    const DeviceAddr start = ExpandableBase + p * Page, end = start + pages * Page;
                    auto u = std::prev(m_unmapped.upper_bound(start));
                    const Object object = u->second;
                    m_unmapped.erase(u);
                    if (end < object.end)
                        m_unmapped[end] = { object.end, 0, newObject() };
                    std::fill(m_mapped.begin() + p, m_mapped.begin() + p + pages, true);
                    freeObject(start, end, object.requested, object.id);
                    emit(Action::SegmentMap, start, end - start);
                    return;
                }
            }
        }
        const ByteCount segSize = std::max<ByteCount>(Page, (size + Page - 1) / Page * Page);
        DeviceAddr addr = m_nextSegment;
        // Often right after the newest segment, as cudaMalloc tends to place them.
        if (!m_segments.empty() && pick(2)) {
            const Seg& last = m_segments.back();
            const DeviceAddr after = last.address + last.size;
            if (std::none_of(m_segments.begin(), m_segments.end(),
                             [&](const Seg& s) { return s.address < after + segSize && after < s.address + s.size; }))
                addr = after;
        }
        if (addr == m_nextSegment)
            m_nextSegment += segSize + Page;
        else
            m_nextSegment = std::max(m_nextSegment, addr + segSize + Page);
        const int64_t stream = pick(3) == 0 ? 0x5000 : 0;
        m_segments.push_back({ addr, segSize, stream, false });
        m_free[addr] = { addr + segSize, 0, newObject() }; // alloc_block: a new Block
        emit(Action::SegmentAlloc, addr, segSize, stream);
    }

    void step()
    {
        const int r = pick(100);
        if (r < 45) {
            const ByteCount requested = pick(4) ? 1 + pick(8 * 512) : 1 + pick(3 * int(Page));
            const ByteCount size = model::estimatedBlockSize(requested);
            DeviceAddr addr = findGap(size);
            if (addr < 0) {
                grow(size);
                addr = findGap(size);
            }
            if (addr < 0)
                return;
            // alloc_found_block: the front of a free object; the rest keeps the object (and its request).
            auto f = m_free.find(addr);
            const Object object = f->second;
            m_free.erase(f);
            if (object.end > addr + size)
                m_free[addr + size] = object;
            m_blocks[addr] = { size, requested, false };
            emit(Action::Alloc, addr, requested);
        } else if (r < 75) {
            std::vector<DeviceAddr> active;
            for (const auto& [a, b] : m_blocks)
                if (!b.pending)
                    active.push_back(a);
            if (active.empty())
                return;
            const DeviceAddr addr = active[size_t(pick(int(active.size())))];
            Live& b = m_blocks[addr];
            b.pending = true;
            emit(Action::FreeRequested, addr, b.requested);
            if (pick(10) < 7) {
                const ByteCount requested = b.requested, size = b.size;
                m_blocks.erase(addr);
                freeObject(addr, addr + size, requested);
                emit(Action::FreeCompleted, addr, requested);
            }
        } else if (r < 85) {
            std::vector<DeviceAddr> pending;
            for (const auto& [a, b] : m_blocks)
                if (b.pending)
                    pending.push_back(a);
            if (pending.empty())
                return;
            const DeviceAddr addr = pending[size_t(pick(int(pending.size())))];
            const ByteCount requested = m_blocks[addr].requested, size = m_blocks[addr].size;
            m_blocks.erase(addr);
            freeObject(addr, addr + size, requested);
            emit(Action::FreeCompleted, addr, requested);
        } else if (r < 92) {
            if (m_segments.empty())
                return;
            const size_t k = size_t(pick(int(m_segments.size())));
            const Seg seg = m_segments[k];
            if (!isFree(seg.address, seg.size))
                return;
            m_segments.erase(m_segments.begin() + ptrdiff_t(k));
            m_free.erase(seg.address);
            emit(Action::SegmentFree, seg.address, seg.size, seg.stream);
        } else if (r < 98) {
            // Unmap a run of free pages, anywhere in the mapped range.
            int p = pick(Pages);
            if (!m_mapped[size_t(p)] || !isFree(ExpandableBase + p * Page, Page))
                return;
            int q = p + 1;
            while (q < Pages && m_mapped[size_t(q)] && isFree(ExpandableBase + q * Page, Page) && pick(3))
                ++q;
            // unmap_block: the free object there becomes the unmapped one (absorbing unmapped neighbours); the
            // free parts around the pages are new objects (request 0).
            const DeviceAddr start = ExpandableBase + p * Page, end = ExpandableBase + q * Page;
            auto f = std::prev(m_free.upper_bound(start));
            const DeviceAddr freeStart = f->first;
            Object object = f->second;
            m_free.erase(f);
            if (freeStart < start)
                m_free[freeStart] = { start, 0, newObject() };
            if (object.end > end)
                m_free[end] = { object.end, 0, newObject() };
            std::fill(m_mapped.begin() + p, m_mapped.begin() + q, false);
            m_objectUnmapped[object.id] = m_trace.size() + 1;
            DeviceAddr uStart = start;
            object.end = end;
            auto after = m_unmapped.lower_bound(start);
            if (after != m_unmapped.begin() && std::prev(after)->second.end == start) {
                uStart = std::prev(after)->first;
                m_unmapped.erase(std::prev(after));
            }
            if (auto next = m_unmapped.find(end); next != m_unmapped.end()) {
                object.end = next->second.end;
                m_unmapped.erase(next);
            }
            m_unmapped[uStart] = object;
            // Nothing mapped any more: the segment and its address space go (release_expandable_segment).
            if (std::none_of(m_mapped.begin(), m_mapped.end(), [](bool m) { return m; }))
                m_unmapped = { { ExpandableBase, { ExpandableBase + Pages * Page, 0, newObject() } } };
            emit(Action::SegmentUnmap, start, end - start);
        } else {
            emit(Action::Oom, 0, 1 << 30);
        }
    }

    std::mt19937 m_rng;
    std::vector<Seg> m_segments;
    std::vector<bool> m_mapped = std::vector<bool>(Pages, false);
    std::map<DeviceAddr, Live> m_blocks;
    std::map<DeviceAddr, Object> m_free; // free objects by start
    // Unmapped objects by start: at first the whole expandable segment, one object never mapped.
    std::map<DeviceAddr, Object> m_unmapped { { ExpandableBase, { ExpandableBase + Pages * Page, 0, 0 } } };
    std::vector<size_t> m_objectBorn { 0 }; // per object: the first state index it exists at
    std::vector<size_t> m_objectUnmapped { 0 }; // per object: the last state index it became unmapped at (0: never)
    std::vector<uint32_t> m_objectOrigin { 0 }; // per object: the object whose request it carries
    DeviceAddr m_nextSegment = 0x10000000;
    std::vector<model::TraceEntry> m_trace;
    model::EntryFormTable m_forms; // the entries' streams
    std::vector<std::vector<FlatSegment>> m_truth; // m_truth[i]: the state after i entries
    std::vector<std::vector<std::pair<DeviceAddr, uint32_t>>> m_truthObjects; // its inactive blocks' objects
};

struct Sums {
    ByteCount allocated = 0, active = 0, reserved = 0, requested = 0, largestFree = 0;
};

Sums sumsOf(const model::ReplayState& state)
{
    Sums s;
    for (const auto& seg : state.segments)
        s.reserved += seg.totalSize;
    for (const auto& b : state.blocks) {
        if (b.state == BlockState::Inactive) {
            s.largestFree = std::max(s.largestFree, b.size);
            continue;
        }
        s.active += b.size;
        s.requested += b.requestedSize;
        if (b.state == BlockState::ActiveAllocated)
            s.allocated += b.size;
    }
    return s;
}

} // namespace

class TestReplay : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // Which arrays ask for huge pages is tested as on a machine where they pay (model/processmemory.h: hugePagesPay()
    // decides once, on its first call).
    void initTestCase() { setenv("MEMSCOPE_HUGE_PAGES", "1", 1); }
    // Every snapshot of ../shared, and the long real trace whose ring wrapped (tests/data/long).
    void finalStateMatchesSnapshot_data() { snapshotFiles_data(true); }
    void finalStateMatchesSnapshot();
    void initialStateIsEmpty_data() { snapshotFiles_data(false); }
    void initialStateIsEmpty();
    void seriesMatchState_data() { snapshotFiles_data(true); }
    void seriesMatchState();
    // The independent forward model starts from nothing: complete traces only.
    void forwardReplayAgrees_data() { snapshotFiles_data(false); }
    void forwardReplayAgrees();
    void allocationIntervals_data() { snapshotFiles_data(false); }
    void allocationIntervals();
    void checkpointSpacingDoesNotChangeState_data();
    void checkpointSpacingDoesNotChangeState();
    void truncatedTrace_data();
    void truncatedTrace();
    void pendingFreeBetweenRequestAndCompletion();
    void deferredFreeStaysPending_data();
    void deferredFreeStaysPending();
    void expandableSegmentGrowsAndShrinks();
    void addressesFromTheTopHalf();
    void devicesReplaySeparately();
    void oomChangesNothing();
    void legacyFreeIsNeverPending();
    void skippedFreeRequestedReplaysWhole_data() { snapshotFiles_data(true); }
    void skippedFreeRequestedReplaysWhole();
    void inconsistentTraceIsCounted_data();
    void inconsistentTraceIsCounted();
    void simulatedAllocatorAtEveryIndex_data();
    void simulatedAllocatorAtEveryIndex();
    void randomGarbageNeverCrashes_data();
    void randomGarbageNeverCrashes();
    void progressReportsAndStops();
    void everyReportIsAStop();
    // ReplayOptions::beside: run beside the forward pass on the replay's own final allocations and pieces, waited
    // for, told to stop when the build stops, its exception rethrown.
    void besideSeesTheFinalArrays_data() { snapshotFiles_data(false); }
    void besideSeesTheFinalArrays();
    void besideStopsAndThrows();
    // The arrays a build fills at once ask for transparent huge pages (4 KiB faults were a third of a 1 GB file's
    // forward pass), and so does a timeline sampling's scratch; those of a replay grown while the GUI waits
    // (ReplayExtender) do not.
    void arraysFilledAtOnceAskForHugePages();
    // ReplayOptions::deferLabels: everything but the labels and the largest-free series at once, the same as a whole
    // build; after buildLabels, all of it the same. Queries meanwhile on another thread see one or the other; a
    // stopped buildLabels leaves the replay unlabelled and may be called again.
    void labelsLater_data() { snapshotFiles_data(true); }
    void labelsLater();
    void labelsWhileQueried();
    void labelsStopAndStartAgain();
    // Addresses whose varying bits and the key's slot do not fit 8 bytes take the 16-byte keys of the coordinates'
    // sort: the same states as the same trace at nearby addresses.
    void farApartAddresses();

private:
    void snapshotFiles_data(bool withLongTrace);
};

void TestReplay::snapshotFiles_data(bool withLongTrace)
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<int>("device");
    QStringList files = snapshotFiles();
    QVERIFY2(!files.isEmpty(), "no snapshots in MEMSCOPE_SHARED_DIR/snapshots");
    if (withLongTrace)
        files << QStringLiteral("long/gpt2_long.pickle.xz");
    for (const QString& file : files) {
        auto s = load(file.toStdString());
        QVERIFY2(s, qPrintable(file));
        for (int d = 0; d < std::max(1, s->deviceCount()); ++d)
            QTest::addRow("%s device %d", qPrintable(file), d) << file << d;
    }
}

void TestReplay::finalStateMatchesSnapshot()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, device);
    QCOMPARE(replay.warnings(), uint64_t(0));
    const auto state = replay.stateAt(replay.entryCount());
    QCOMPARE(state.strayBlocks, 0u);
    const std::string diff = difference(flatten(state), flattenFinal(*s, device));
    QVERIFY2(diff.empty(), diff.c_str());
    // Live blocks keep the snapshot's stacks and versions.
    for (const auto& b : state.blocks) {
        if (b.state == BlockState::Inactive)
            continue;
        const auto& a = replay.allocation(b.allocation);
        QVERIFY(a.sizeIsExact);
        QCOMPARE(b.stack, a.stack);
    }
}

void TestReplay::initialStateIsEmpty()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, device);
    const auto state = replay.stateAt(0);
    // These traces start with the process: nothing was alive before the first entry.
    QCOMPARE(state.segments.size(), size_t(0));
    QCOMPARE(state.blocks.size(), size_t(0));
    QCOMPARE(state.allocations.size(), size_t(0));
    QCOMPARE(replay.series().reserved[0], ByteCount(0));
    for (const auto& a : replay.allocations())
        QVERIFY(a.allocIndex >= 0);
    for (const auto& p : replay.segmentPieces())
        QVERIFY(p.beginIndex >= 0);
}

void TestReplay::seriesMatchState()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, device);
    const auto& series = replay.series();
    QCOMPARE(int64_t(series.size()), replay.entryCount() + 1);
    model::ReplayState state;
    for (int64_t i : sampleIndices(replay.entryCount(), isBig(*s, device))) {
        replay.stateAt(i, state);
        QCOMPARE(state.index, i);
        QCOMPARE(state.strayBlocks, 0u);
        const Sums sums = sumsOf(state);
        const size_t k = size_t(i);
        QCOMPARE(series.allocated[k], sums.allocated);
        QCOMPARE(series.active[k], sums.active);
        QCOMPARE(series.reserved[k], sums.reserved);
        QCOMPARE(series.requested[k], sums.requested);
        QCOMPARE((*replay.largestFree())[k], sums.largestFree);
        QCOMPARE(replay.largestFreeAt(i), sums.largestFree);
        QCOMPARE(series.fragmentation(k), sums.reserved - sums.active);
        QVERIFY(series.fragmentationRatio(k) >= 0.0 && series.fragmentationRatio(k) <= 1.0);
    }
    // The peaks are the series' maxima, at their first index.
    auto checkPeak = [](const model::PackedSeries& v, model::Peak p) {
        const auto it = std::max_element(v.begin(), v.end());
        return p.bytes == *it && p.index == it - v.begin();
    };
    QVERIFY(checkPeak(series.allocated, replay.peakAllocated()));
    QVERIFY(checkPeak(series.active, replay.peakActive()));
    QVERIFY(checkPeak(series.reserved, replay.peakReserved()));
}

void TestReplay::forwardReplayAgrees()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, device);
    const auto indices = sampleIndices(replay.entryCount(), isBig(*s, device), 400);
    const auto& trace = size_t(device) < s->deviceTraces.size() ? s->deviceTraces[size_t(device)] : model::Trace {};
    ForwardModel model;
    model::ReplayState state;
    int64_t applied = 0;
    for (int64_t i : indices) {
        for (; applied < i; ++applied)
            model.apply(trace[size_t(applied)]);
        replay.stateAt(i, state);
        const std::string diff = model.difference(state);
        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
    }
}

void TestReplay::allocationIntervals()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, device);
    const auto& trace = size_t(device) < s->deviceTraces.size() ? s->deviceTraces[size_t(device)] : model::Trace {};
    const auto& allocations = replay.allocations();
    size_t allocEntries = 0;
    for (size_t j = 0; j < trace.size(); ++j) {
        const auto id = replay.allocationOfEntry(int64_t(j));
        const auto action = trace[j].action;
        if (action == Action::Alloc || action == Action::FreeRequested || action == Action::FreeCompleted) {
            QVERIFY(id != model::NoAllocation);
            QCOMPARE(replay.allocation(id).address, trace[j].addr);
        } else {
            QVERIFY(id == model::NoAllocation);
        }
        allocEntries += action == Action::Alloc;
    }
    // One allocation per alloc entry, in trace order, each with its own entries at its indices.
    QCOMPARE(allocations.size(), allocEntries);
    for (size_t k = 0; k < allocations.size(); ++k) {
        const auto& a = allocations[k];
        QVERIFY(k == 0 || allocations[k - 1].allocIndex < a.allocIndex);
        QCOMPARE(trace[size_t(a.allocIndex)].action, Action::Alloc);
        QCOMPARE(raw(replay.allocationOfEntry(a.allocIndex)), uint32_t(k));
        QVERIFY(a.allocIndex < a.freeRequestedIndex && a.freeRequestedIndex <= a.freeCompletedIndex);
        QVERIFY(a.freeCompletedIndex <= replay.entryCount());
        if (a.freeCompletedIndex < replay.entryCount())
            QCOMPARE(trace[size_t(a.freeCompletedIndex)].action, Action::FreeCompleted);
        QCOMPARE(a.stack, trace[size_t(a.allocIndex)].stack);
        QCOMPARE(a.requestedSize, trace[size_t(a.allocIndex)].size);
    }
    // liveAt(i) is exactly the allocations whose interval holds i, by address.
    for (int64_t i : sampleIndices(replay.entryCount(), isBig(*s, device), 200)) {
        std::vector<model::AllocationId> want;
        for (uint32_t k = 0; k < allocations.size(); ++k)
            if (allocations[k].allocIndex < i && i <= allocations[k].freeCompletedIndex)
                want.push_back(model::AllocationId { k });
        std::sort(want.begin(), want.end(),
                  [&](auto a, auto b) { return allocations[raw(a)].address < allocations[raw(b)].address; });
        QVERIFY(replay.liveAt(i) == want);
    }
}

void TestReplay::checkpointSpacingDoesNotChangeState_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<uint>("minInterval");
    QTest::addColumn<uint>("spacing");
    for (const char* f : { "transformer_train.pickle", "expandable_segments.pickle", "multistream.pickle" }) {
        QTest::addRow("%s, a checkpoint per entry", f) << QString::fromLatin1(f) << 0u << 0u;
        QTest::addRow("%s, every 7 entries", f) << QString::fromLatin1(f) << 7u << 0u;
        QTest::addRow("%s, only at index 0", f) << QString::fromLatin1(f) << UINT32_MAX << 0u;
    }
}

void TestReplay::checkpointSpacingDoesNotChangeState()
{
    QFETCH(QString, file);
    QFETCH(uint, minInterval);
    QFETCH(uint, spacing);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto reference = model::Replay::build(*s, 0);
    const auto replay = model::Replay::build(*s, 0, { .minCheckpointInterval = minInterval, .checkpointSpacing = spacing });
    if (minInterval == 0)
        QCOMPARE(int64_t(replay.checkpointCount()), replay.entryCount() + 1);
    if (minInterval == UINT32_MAX)
        QCOMPARE(replay.checkpointCount(), size_t(1));
    QVERIFY(*replay.largestFree() == *reference.largestFree());
    for (int64_t i = 0; i <= replay.entryCount(); ++i) {
        const std::string diff = difference(flatten(replay.stateAt(i)), flatten(reference.stateAt(i)));
        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
    }
}

void TestReplay::truncatedTrace_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<double>("dropFraction");
    for (const char* f : { "transformer_train.pickle", "mlp_train.pickle", "multistream.pickle",
                           "expandable_segments.pickle", "scripted_allocs.pickle", "big_trace.pickle.xz" }) {
        QTest::addRow("%s, first half dropped", f) << QString::fromLatin1(f) << 0.5;
        QTest::addRow("%s, first 90%% dropped", f) << QString::fromLatin1(f) << 0.9;
    }
    QTest::addRow("multistream.pickle, all but the last entry dropped")
        << QStringLiteral("multistream.pickle") << 0.999;
    QTest::addRow("oom.pickle, every entry dropped") << QStringLiteral("oom.pickle") << 1.0;
}

void TestReplay::truncatedTrace()
{
    QFETCH(QString, file);
    QFETCH(double, dropFraction);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto full = model::Replay::build(*s, 0);
    const size_t cut = size_t(double(full.entryCount()) * dropFraction);
    const auto t = truncatedCopy(*s, 0, cut);
    const auto replay = model::Replay::build(*t, 0);
    QCOMPARE(replay.warnings(), uint64_t(0));
    QCOMPARE(replay.entryCount(), full.entryCount() - int64_t(cut));

    // The end is the snapshot's; the start is what the full trace had at the cut, blocks alive before it included.
    // (Not the stale requests of free blocks from before the cut, which the truncated trace cannot know unless they
    // survive to the end: simulatedAllocatorAtEveryIndex checks exactly which it knows.)
    std::string diff = difference(flatten(replay.stateAt(replay.entryCount())), flattenFinal(*s, 0));
    QVERIFY2(diff.empty(), ("final: " + diff).c_str());
    const auto initial = replay.stateAt(0);
    QCOMPARE(initial.strayBlocks, 0u);
    diff = difference(flatten(initial, true, false), flatten(full.stateAt(int64_t(cut)), true, false));
    QVERIFY2(diff.empty(), ("initial: " + diff).c_str());
    if (full.series().active[cut] > 0)
        QVERIFY(!initial.allocations.empty());
    for (auto id : initial.allocations)
        QCOMPARE(replay.allocation(id).allocIndex, -1);

    // Every later state is the full trace's, shifted.
    const auto& a = replay.series();
    const auto& b = full.series();
    for (size_t k = 0; k < a.size(); ++k) {
        QCOMPARE(a.allocated[k], b.allocated[k + cut]);
        QCOMPARE(a.active[k], b.active[k + cut]);
        QCOMPARE(a.reserved[k], b.reserved[k + cut]);
        QCOMPARE(a.requested[k], b.requested[k + cut]);
        QCOMPARE((*replay.largestFree())[k], (*full.largestFree())[k + cut]);
    }
    for (int64_t k : sampleIndices(replay.entryCount(), isBig(*t, 0), 100)) {
        const bool last = k == replay.entryCount();
        diff = difference(flatten(replay.stateAt(k), true, last), flatten(full.stateAt(k + int64_t(cut)), true, last));
        QVERIFY2(diff.empty(), ("index " + std::to_string(k) + ": " + diff).c_str());
    }
}

void TestReplay::pendingFreeBetweenRequestAndCompletion()
{
    auto s = load("multistream.pickle");
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, 0);
    const auto& trace = s->deviceTraces[0];
    // In this file each free_completed directly follows its free_requested (the side streams had finished by
    // then); between the two the block is active_pending_free.
    int pairs = 0;
    for (size_t j = 0; j < trace.size(); ++j) {
        if (trace[j].action != Action::FreeRequested)
            continue;
        const auto id = replay.allocationOfEntry(int64_t(j));
        QVERIFY(id != model::NoAllocation);
        const auto& a = replay.allocation(id);
        QCOMPARE(a.freeRequestedIndex, int32_t(j));
        const int64_t completed = a.freeCompletedIndex;
        QVERIFY(completed > int64_t(j) && completed < replay.entryCount());
        QCOMPARE(trace[size_t(completed)].action, Action::FreeCompleted);
        QCOMPARE(trace[size_t(completed)].addr, trace[j].addr);
        ++pairs;
        auto stateOf = [&](int64_t i) {
            const auto st = replay.stateAt(i);
            for (const auto& b : st.blocks)
                if (b.address == trace[j].addr && b.state != BlockState::Inactive)
                    return b.state;
            return BlockState::Inactive;
        };
        QCOMPARE(stateOf(int64_t(j)), BlockState::ActiveAllocated);
        for (int64_t i = int64_t(j) + 1; i <= completed; ++i)
            QCOMPARE(stateOf(i), BlockState::ActivePendingFree);
        QVERIFY(stateOf(completed + 1) != BlockState::ActivePendingFree);
        // Pending bytes are active but not allocated.
        const auto& series = replay.series();
        QCOMPARE(series.active[size_t(j) + 1] - series.allocated[size_t(j) + 1]
                     - (series.active[size_t(j)] - series.allocated[size_t(j)]),
                 a.size);
    }
    QCOMPARE(pairs, 52);
}

void TestReplay::deferredFreeStaysPending_data()
{
    QTest::addColumn<int>("drop");
    QTest::newRow("complete trace") << 0;
    QTest::newRow("trace starting between free_requested and free_completed") << 4;
}

void TestReplay::deferredFreeStaysPending()
{
    // record_stream: A is freed by the user at entry 3 but returns to the pool only at entry 5, after C's alloc.
    QFETCH(int, drop);
    model::Snapshot s;
    s.deviceTraces.resize(1);
    auto& t = s.deviceTraces[0];
    const DeviceAddr base = 0x7f0000000000;
    t.push_back(entry(Action::SegmentAlloc, base, 2 << 20)); // 0
    t.push_back(entry(Action::Alloc, base, 1000)); // 1: A
    t.push_back(entry(Action::Alloc, base + 1024, 512)); // 2: B
    t.push_back(entry(Action::FreeRequested, base, 1000)); // 3
    t.push_back(entry(Action::Alloc, base + 1536, 4096)); // 4: C
    t.push_back(entry(Action::FreeCompleted, base, 1000)); // 5
    t.erase(t.begin(), t.begin() + drop);
    model::Segment seg;
    seg.address = base;
    seg.totalSize = 2 << 20;
    seg.allocatedSize = seg.activeSize = 512 + 4096;
    seg.requestedSize = 512 + 4096;
    model::Block gap, b, c, rest;
    gap.address = base;
    gap.size = 1024;
    b.address = base + 1024;
    b.size = b.requestedSize = 512;
    b.state = BlockState::ActiveAllocated;
    c.address = base + 1536;
    c.size = c.requestedSize = 4096;
    c.state = BlockState::ActiveAllocated;
    rest.address = base + 1536 + 4096;
    rest.size = (2 << 20) - 1536 - 4096;
    s.blocks = { gap, b, c, rest };
    seg.blockCount = 4;
    s.segments.push_back(seg);

    const auto replay = model::Replay::build(s, 0);
    QCOMPARE(replay.warnings(), uint64_t(0));
    auto stateOfA = [&](int64_t full) {
        const auto st = replay.stateAt(full - drop);
        return st.blocks.empty() || st.blocks[0].state == BlockState::Inactive ? BlockState::Inactive
                                                                               : st.blocks[0].state;
    };
    if (drop == 0) {
        QCOMPARE(stateOfA(1), BlockState::Inactive);
        QCOMPARE(stateOfA(2), BlockState::ActiveAllocated);
        QCOMPARE(stateOfA(3), BlockState::ActiveAllocated);
    }
    QCOMPARE(stateOfA(4), BlockState::ActivePendingFree);
    QCOMPARE(stateOfA(5), BlockState::ActivePendingFree);
    QCOMPARE(stateOfA(6), BlockState::Inactive);
    const auto& series = replay.series();
    QCOMPARE(series.active[size_t(5 - drop)] - series.allocated[size_t(5 - drop)], ByteCount(1024));
    QCOMPARE(series.active[size_t(6 - drop)], ByteCount(512 + 4096));
    QCOMPARE(series.allocated[size_t(6 - drop)], ByteCount(512 + 4096));
}

void TestReplay::expandableSegmentGrowsAndShrinks()
{
    auto s = load("expandable_segments.pickle");
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, 0);
    QCOMPARE(replay.warnings(), uint64_t(0));
    const auto& trace = s->deviceTraces[0];
    const auto& reserved = replay.series().reserved;
    ByteCount mapped = 0;
    int grew = 0, shrank = 0;
    for (size_t j = 0; j < trace.size(); ++j) {
        const auto& e = trace[j];
        if (e.action == Action::SegmentMap) {
            mapped += e.size;
            ++grew;
        } else if (e.action == Action::SegmentUnmap) {
            mapped -= e.size;
            ++shrank;
        }
        QCOMPARE(reserved[j + 1], mapped);
        const auto state = replay.stateAt(int64_t(j) + 1);
        ByteCount total = 0;
        for (const auto& seg : state.segments) {
            QVERIFY(seg.isExpandable);
            total += seg.totalSize;
        }
        QCOMPARE(total, mapped);
        // The mapped ranges are contiguous here, so they read as one segment, as PyTorch reports them.
        QCOMPARE(state.segments.size(), size_t(mapped > 0 ? 1 : 0));
    }
    QVERIFY(grew > 0 && shrank > 0);
    QVERIFY(*std::max_element(reserved.begin(), reserved.end()) > reserved.back());
    QCOMPARE(replay.peakReserved().bytes, *std::max_element(reserved.begin(), reserved.end()));
}

void TestReplay::devicesReplaySeparately()
{
    auto s = load("two_device.pickle");
    QVERIFY(s);
    const auto replays = model::Replay::buildAll(*s);
    QCOMPARE(replays.size(), size_t(2));
    for (int d = 0; d < 2; ++d) {
        const auto& replay = replays[size_t(d)];
        QCOMPARE(replay.device(), d);
        QCOMPARE(replay.entryCount(), int64_t(s->deviceTraces[size_t(d)].size()));
        QVERIFY(replay.entryCount() > 0);
        const auto state = replay.stateAt(replay.entryCount());
        size_t want = 0;
        ByteCount reserved = 0;
        for (const auto& seg : s->segments) {
            if (seg.device == d) {
                ++want;
                reserved += seg.totalSize;
            }
        }
        QCOMPARE(state.segments.size(), want);
        QCOMPARE(replay.series().reserved.back(), reserved);
        for (const auto& seg : state.segments)
            QCOMPARE(seg.device, d);
    }
    // A device without a trace or segments replays to nothing.
    const auto none = model::Replay::build(*s, 7);
    QCOMPARE(none.entryCount(), int64_t(0));
    QCOMPARE(none.stateAt(0).segments.size(), size_t(0));
}

void TestReplay::oomChangesNothing()
{
    auto s = load("oom.pickle");
    QVERIFY(s);
    const auto replay = model::Replay::build(*s, 0);
    const auto& trace = s->deviceTraces[0];
    int ooms = 0;
    for (size_t j = 0; j < trace.size(); ++j) {
        if (trace[j].action != Action::Oom)
            continue;
        ++ooms;
        const auto& series = replay.series();
        QCOMPARE(series.allocated[j + 1], series.allocated[j]);
        QCOMPARE(series.active[j + 1], series.active[j]);
        QCOMPARE(series.reserved[j + 1], series.reserved[j]);
        QCOMPARE((*replay.largestFree())[j + 1], (*replay.largestFree())[j]);
        const std::string diff
            = difference(flatten(replay.stateAt(int64_t(j) + 1)), flatten(replay.stateAt(int64_t(j))));
        QVERIFY2(diff.empty(), diff.c_str());
        QVERIFY(replay.allocationOfEntry(int64_t(j)) == model::NoAllocation);
    }
    QCOMPARE(ooms, 1);
}

void TestReplay::legacyFreeIsNeverPending()
{
    // PyTorch < 2.1 wrote `free` (read as free_completed) with no free_requested before it.
    model::Snapshot s;
    const auto legacy = s.strings.intern("free");
    s.deviceTraces.resize(1);
    auto& t = s.deviceTraces[0];
    t.push_back(entry(Action::SegmentAlloc, 0x10000, 2 << 20));
    t.push_back(entry(Action::Alloc, 0x10000, 1000));
    t.push_back(entry(Action::FreeCompleted, 0x10000, 1000));
    t.back().form = s.entryForms.intern({ .actionName = legacy });
    model::Segment seg;
    seg.address = 0x10000;
    seg.totalSize = 2 << 20;
    seg.blockCount = 1;
    s.segments.push_back(seg);
    model::Block free;
    free.address = 0x10000;
    free.size = 2 << 20;
    s.blocks.push_back(free);

    const auto replay = model::Replay::build(s, 0);
    QCOMPARE(replay.warnings(), uint64_t(0));
    const auto state = replay.stateAt(2);
    QCOMPARE(state.blocks.size(), size_t(2));
    QCOMPARE(state.blocks[0].state, BlockState::ActiveAllocated);
    QCOMPARE(state.blocks[0].size, model::estimatedBlockSize(1000));
    QCOMPARE(state.blocks[0].size, ByteCount(1024));
    QCOMPARE(replay.series().allocated[2], ByteCount(1024));
    QCOMPARE((*replay.largestFree())[2], ByteCount((2 << 20) - 1024));
    QCOMPARE((*replay.largestFree())[3], ByteCount(2 << 20));
}

void TestReplay::skippedFreeRequestedReplaysWhole()
{
    // What `_record_memory_history(skip_actions=["free_requested"])` would have recorded of the same job: the real
    // trace without its free_requested entries. It replays without an inconsistency to the same final state, and
    // after every entry it kept, the memory in use (active: allocated or pending free) and reserved are the full
    // trace's at the same moment; only the allocated series differs (a free counts from its completion).
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    auto skipped = truncatedCopy(*s, device, 0);
    auto& trace = skipped->deviceTraces[size_t(device)];
    std::vector<size_t> fullIndex; // per kept entry: its index in the full trace
    const auto& full = s->deviceTraces[size_t(device)];
    for (size_t j = 0; j < full.size(); ++j)
        if (full[j].action != Action::FreeRequested)
            fullIndex.push_back(j);
    if (fullIndex.size() == full.size())
        QSKIP("no free_requested entries on this device");
    size_t kept = 0;
    for (size_t j = 0; j < trace.size(); ++j)
        if (trace[j].action != Action::FreeRequested)
            trace[kept++] = trace[j];
    trace.resize(kept);
    QCOMPARE(trace.size(), fullIndex.size());

    const auto whole = model::Replay::build(*s, device);
    const auto replay = model::Replay::build(*skipped, device);
    QVERIFY(!whole.freeRequestedSkipped());
    QVERIFY(replay.freeRequestedSkipped());
    QCOMPARE(replay.warnings(), whole.warnings());
    const std::string diff = difference(flatten(replay.stateAt(replay.entryCount())), flattenFinal(*s, device));
    QVERIFY2(diff.empty(), diff.c_str());
    const auto& a = replay.series();
    const auto& b = whole.series();
    for (size_t k = 0; k < fullIndex.size(); ++k) {
        QCOMPARE(a.reserved[k + 1], b.reserved[fullIndex[k] + 1]);
        QCOMPARE(a.active[k + 1], b.active[fullIndex[k] + 1]);
        QVERIFY(a.allocated[k + 1] >= b.allocated[fullIndex[k] + 1]);
    }
    QCOMPARE(replay.peakReserved().bytes, whole.peakReserved().bytes);
    QCOMPARE(replay.peakActive().bytes, whole.peakActive().bytes);
}

void TestReplay::inconsistentTraceIsCounted_data()
{
    QTest::addColumn<QList<int>>("actions"); // Action values
    QTest::addColumn<QList<qlonglong>>("addrs");
    QTest::addColumn<bool>("finalBlock"); // the final state has a live block at 0x1000
    QTest::addColumn<bool>("warns");
    using A = Action;
    auto row = [](const char* name, std::vector<A> a, QList<qlonglong> addrs, bool finalBlock, bool warns) {
        QList<int> actions;
        for (A x : a)
            actions << int(x);
        QTest::newRow(name) << actions << addrs << finalBlock << warns;
    };
    row("alloc over a live block", { A::Alloc, A::Alloc }, { 0x1000, 0x1000 }, true, true);
    row("double free", { A::Alloc, A::FreeRequested, A::FreeCompleted, A::FreeRequested, A::FreeCompleted },
        { 0x1000, 0x1000, 0x1000, 0x1000, 0x1000 }, false, true);
    row("free_requested of an unknown address", { A::FreeRequested }, { 0x1000 }, false, true);
    row("free_requested of a block still active at the end", { A::Alloc, A::FreeRequested }, { 0x1000, 0x1000 }, true,
        true);
    row("free_completed of a block live at the end", { A::FreeCompleted }, { 0x1000 }, true, true);
    row("segment_alloc of a segment not live after", { A::SegmentAlloc }, { 0x200000 }, false, true);
    row("segment_map of a range not mapped after", { A::SegmentMap }, { 0x200000 }, false, true);
    row("segment_free over a live segment", { A::SegmentFree }, { 0x0 }, false, true);
    row("free of a block before the trace (truncation, not an error)", { A::FreeRequested, A::FreeCompleted },
        { 0x2000, 0x2000 }, false, false);
    row("oom, snapshot and unknown actions", { A::Oom, A::Snapshot, A::Unknown }, { 0, 0, 0 }, false, false);
}

void TestReplay::inconsistentTraceIsCounted()
{
    QFETCH(QList<int>, actions);
    QFETCH(QList<qlonglong>, addrs);
    QFETCH(bool, finalBlock);
    QFETCH(bool, warns);
    // Final state: one 2 MiB segment at 0, with or without a live 512-byte block at 0x1000.
    model::Snapshot s;
    model::Segment seg;
    seg.totalSize = 2 << 20;
    model::Block gapBefore, live, gapAfter;
    gapBefore.size = 0x1000;
    live.address = 0x1000;
    live.size = 512;
    live.requestedSize = 500;
    live.state = BlockState::ActiveAllocated;
    gapAfter.address = 0x1200;
    gapAfter.size = (2 << 20) - 0x1200;
    if (finalBlock) {
        s.blocks = { gapBefore, live, gapAfter };
        seg.allocatedSize = seg.activeSize = live.size;
        seg.requestedSize = live.requestedSize;
    } else {
        model::Block whole;
        whole.size = 2 << 20;
        s.blocks = { whole };
    }
    seg.blockCount = uint32_t(s.blocks.size());
    s.segments.push_back(seg);
    s.deviceTraces.resize(1);
    for (qsizetype k = 0; k < actions.size(); ++k)
        s.deviceTraces[0].push_back(entry(Action(actions[k]), addrs[k], 500));

    const auto replay = model::Replay::build(s, 0);
    QCOMPARE(replay.warnings() > 0, warns);
    model::ReplayState state;
    for (int64_t i = -1; i <= replay.entryCount() + 1; ++i) {
        replay.stateAt(i, state);
        QVERIFY(state.index >= 0 && state.index <= replay.entryCount());
    }
    const std::string diff = difference(flatten(replay.stateAt(replay.entryCount())), flattenFinal(s, 0));
    QVERIFY2(diff.empty(), diff.c_str());
}

void TestReplay::simulatedAllocatorAtEveryIndex_data()
{
    QTest::addColumn<uint>("seed");
    QTest::addColumn<double>("dropFraction");
    for (uint seed = 1; seed <= 30; ++seed)
        QTest::addRow("seed %u, complete", seed) << seed << 0.0;
    for (uint seed = 1; seed <= 10; ++seed)
        QTest::addRow("seed %u, first 40%% dropped", seed) << seed << 0.4;
}

void TestReplay::simulatedAllocatorAtEveryIndex()
{
    QFETCH(uint, seed);
    QFETCH(double, dropFraction);
    AllocatorSim sim(seed);
    sim.run(700);
    auto s = sim.snapshot();
    const size_t cut = size_t(double(sim.trace().size()) * dropFraction);
    auto& trace = s->deviceTraces[0];
    trace.erase(trace.begin(), trace.begin() + ptrdiff_t(cut));
    // Small checkpoint spacing, so queries start from many different checkpoints.
    const auto replay = model::Replay::build(*s, 0, { .minCheckpointInterval = 16, .checkpointSpacing = 1 });
    QCOMPARE(replay.warnings(), uint64_t(0));
    model::ReplayState state;
    for (int64_t i = 0; i <= replay.entryCount(); ++i) {
        replay.stateAt(i, state);
        QCOMPARE(state.strayBlocks, 0u);
        const std::string diff = difference(flatten(state), sim.knowable(size_t(i) + cut, cut));

        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
        const Sums sums = sumsOf(state);
        QCOMPARE(replay.series().allocated[size_t(i)], sums.allocated);
        QCOMPARE(replay.series().active[size_t(i)], sums.active);
        QCOMPARE(replay.series().reserved[size_t(i)], sums.reserved);
        QCOMPARE(replay.series().requested[size_t(i)], sums.requested);
        QCOMPARE((*replay.largestFree())[size_t(i)], sums.largestFree);
    }
}

void TestReplay::randomGarbageNeverCrashes_data()
{
    QTest::addColumn<int>("seed");
    for (int seed = 1; seed <= 12; ++seed)
        QTest::addRow("seed %d", seed) << seed;
}

void TestReplay::randomGarbageNeverCrashes()
{
    QFETCH(int, seed);
    std::mt19937 rng { uint32_t(seed) };
    auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
    const DeviceAddr addrs[] = { 0, 0x200, 0x400, 0x1000, 0x200000, 0x400000, 0x600000 };
    const ByteCount sizes[] = { 1, 512, 1000, 0x1000, 0x200000, 0x400000, -5, 0 };
    model::Snapshot s;
    for (int k = 0; k < 3; ++k) {
        model::Segment seg;
        seg.address = addrs[pick(7)];
        seg.totalSize = sizes[pick(8)];
        seg.isExpandable = pick(2);
        seg.blockBegin = uint32_t(s.blocks.size());
        for (int b = pick(4); b > 0; --b) {
            model::Block block;
            block.address = addrs[pick(7)];
            block.size = sizes[pick(8)];
            block.state = BlockState(pick(4));
            s.blocks.push_back(block);
            ++seg.blockCount;
        }
        s.segments.push_back(seg);
    }
    s.deviceTraces.resize(1);
    for (int k = 0; k < 400; ++k)
        s.deviceTraces[0].push_back(entry(Action(pick(int(Action::Count))), addrs[pick(7)], sizes[pick(8)]));

    const auto replay = model::Replay::build(s, 0, { .minCheckpointInterval = uint32_t(pick(3)), .checkpointSpacing = uint32_t(pick(3)) });
    model::ReplayState state;
    for (int64_t i = 0; i <= replay.entryCount(); ++i) {
        replay.stateAt(i, state);
        QCOMPARE(replay.liveAt(i), state.allocations);
    }
    QCOMPARE(replay.series().size(), size_t(replay.entryCount() + 1));
}

// ReplayOptions::progress: reports rise through both passes to the end without changing the replay, and returning
// false stops the build in either pass (Replay::stopped).
void TestReplay::progressReportsAndStops()
{
    const auto big = load("big_trace.pickle.xz");
    QVERIFY(big);
    // 1.3 M entries: a few reports per pass (every 2^20 entries).
    const auto s = bench::repeated(*big, 4, bench::Survivors::Freed);
    const auto plain = model::Replay::build(*s, 0);
    QCOMPARE(plain.warnings(), 0u);

    std::vector<double> seen;
    model::ReplayOptions options;
    options.progress = [&](double done) {
        seen.push_back(done);
        return true;
    };
    const auto reported = model::Replay::build(*s, 0, options);
    QVERIFY(!reported.stopped());
    QVERIFY(!plain.stopped());
    QVERIFY(seen.size() >= 2);
    QVERIFY(std::is_sorted(seen.begin(), seen.end()));
    QVERIFY(seen.front() > 0 && seen.back() <= 1);
    QVERIFY(std::any_of(seen.begin(), seen.end(), [](double d) { return d < 1.0 / 3; })); // the backward pass
    QVERIFY(std::any_of(seen.begin(), seen.end(), [](double d) { return d > 1.0 / 3; })); // the forward pass
    QVERIFY(reported.series().allocated == plain.series().allocated);
    QVERIFY(*reported.largestFree() == *plain.largestFree());
    QCOMPARE(reported.checkpointCount(), plain.checkpointCount());
    for (int64_t i : sampleIndices(plain.entryCount(), true, 50)) {
        const std::string diff = difference(flatten(reported.stateAt(i)), flatten(plain.stateAt(i)));
        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
    }

    for (double stopAt : { 0.0, 0.5 }) {
        size_t asked = 0;
        options.progress = [&](double done) {
            ++asked;
            return done < stopAt;
        };
        const auto stopped = model::Replay::build(*s, 0, options);
        QVERIFY(stopped.stopped());
        QCOMPARE(asked,
                 stopAt == 0.0 ? size_t(1)
                               : size_t(std::count_if(seen.begin(), seen.end(), [](double d) { return d < 0.5; }) + 1));
    }
}

// Each step of a build reports (ordering the allocations and their coordinates too, not only the two passes over
// the trace), so no large share of it goes by unasked; and every report is a place where a build stops: asked to
// stop at the k-th report, for each k, it stops there and asks nothing more, also with work beside it started.
void TestReplay::everyReportIsAStop()
{
    const auto big = load("big_trace.pickle.xz");
    QVERIFY(big);
    const auto s = bench::repeated(*big, 4, bench::Survivors::Freed); // 1.3 M entries
    std::vector<double> seen;
    model::ReplayOptions options;
    options.progress = [&](double done) {
        seen.push_back(done);
        return true;
    };
    QVERIFY(!model::Replay::build(*s, 0, options).stopped());
    QVERIFY(std::is_sorted(seen.begin(), seen.end()));
    QVERIFY(seen.front() >= 0 && seen.back() <= 1);
    // Two reports a pass (every 2^20 entries) would leave 0.26 to 0.87 unreported; the steps between report too.
    double largestJump = seen.front();
    for (size_t k = 1; k < seen.size(); ++k)
        largestJump = std::max(largestJump, seen[k] - seen[k - 1]);
    largestJump = std::max(largestJump, 1.0 - seen.back());
    QVERIFY2(largestJump < 0.55, qPrintable(QString::number(largestJump)));

    std::atomic<int> besideRuns { 0 };
    std::atomic<int> besideSawStop { 0 };
    options.beside = [&](std::span<const model::Allocation>, std::span<const model::SegmentPiece>, int64_t,
                         const std::atomic<bool>& stop) {
        ++besideRuns;
        const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!stop && std::chrono::steady_clock::now() < giveUp)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        besideSawStop += stop ? 1 : 0;
    };
    for (size_t k = 1; k <= seen.size(); ++k) {
        size_t asked = 0;
        options.progress = [&](double) { return ++asked < k; };
        const auto stopped = model::Replay::build(*s, 0, options);
        QVERIFY2(stopped.stopped(), qPrintable(QStringLiteral("report %1").arg(k)));
        QCOMPARE(asked, k);
    }
    QVERIFY(besideRuns > 0); // some stops came after the work beside had started ...
    QCOMPARE(besideSawStop.load(), besideRuns.load()); // ... and each of those told it to stop
}

void TestReplay::besideSeesTheFinalArrays()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto plain = model::Replay::build(*s, device);
    std::vector<model::Allocation> seenAllocations;
    std::vector<model::SegmentPiece> seenPieces;
    int64_t seenCount = -1;
    int calls = 0;
    bool stopSet = false;
    const model::Allocation* seenData = nullptr;
    model::ReplayOptions options;
    options.beside = [&](std::span<const model::Allocation> allocations, std::span<const model::SegmentPiece> pieces,
                         int64_t entryCount, const std::atomic<bool>& stop) {
        ++calls; // (no QVERIFY on this thread: QtTest's checks are the test thread's)
        stopSet = stop;
        seenAllocations.assign(allocations.begin(), allocations.end());
        seenPieces.assign(pieces.begin(), pieces.end());
        seenCount = entryCount;
        seenData = allocations.data();
    };
    const auto built = model::Replay::build(*s, device, options);
    QCOMPARE(calls, 1);
    QVERIFY(!stopSet);
    QCOMPARE(seenCount, plain.entryCount());
    // What the work saw is the final replay's arrays, whole, in their storage (a Replay moved keeps it).
    QCOMPARE(seenData, built.allocations().data());
    QCOMPARE(seenAllocations.size(), plain.allocations().size());
    QVERIFY(std::equal(seenAllocations.begin(), seenAllocations.end(), plain.allocations().begin(),
                       [](const model::Allocation& a, const model::Allocation& b) {
                           return std::tie(a.address, a.size, a.requestedSize, a.stack, a.version, a.allocIndex,
                                           a.freeRequestedIndex, a.freeCompletedIndex, a.sizeIsExact)
                               == std::tie(b.address, b.size, b.requestedSize, b.stack, b.version, b.allocIndex,
                                           b.freeRequestedIndex, b.freeCompletedIndex, b.sizeIsExact);
                       }));
    QCOMPARE(seenPieces.size(), plain.segmentPieces().size());
    QVERIFY(std::equal(seenPieces.begin(), seenPieces.end(), plain.segmentPieces().begin(),
                       [](const model::SegmentPiece& a, const model::SegmentPiece& b) {
                           return std::tie(a.address, a.size, a.stream, a.poolId, a.stack, a.beginIndex, a.endIndex,
                                           a.isExpandable)
                               == std::tie(b.address, b.size, b.stream, b.poolId, b.stack, b.beginIndex, b.endIndex,
                                           b.isExpandable);
                       }));
    // And the build beside it changed nothing of the replay.
    QVERIFY(built.series().allocated == plain.series().allocated);
    QVERIFY(*built.largestFree() == *plain.largestFree());
    const std::string diff = difference(flatten(built.stateAt(built.entryCount() / 2)),
                                        flatten(plain.stateAt(plain.entryCount() / 2)));
    QVERIFY2(diff.empty(), diff.c_str());
}

void TestReplay::besideStopsAndThrows()
{
    const auto big = load("big_trace.pickle.xz");
    QVERIFY(big);
    const auto s = bench::repeated(*big, 4, bench::Survivors::Freed); // 1.3 M entries: progress reports
    // A build stopped in its forward pass tells the work to stop and waits for it to end.
    std::atomic<bool> sawStop { false };
    std::atomic<bool> ended { false };
    model::ReplayOptions options;
    options.progress = [](double done) { return done < 0.5; };
    options.beside = [&](std::span<const model::Allocation>, std::span<const model::SegmentPiece>, int64_t,
                         const std::atomic<bool>& stop) {
        // Bounded, so that a build which never says stop fails the test instead of hanging it.
        const auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!stop && std::chrono::steady_clock::now() < giveUp)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        sawStop = stop.load();
        ended = true;
    };
    const auto stopped = model::Replay::build(*s, 0, options);
    QVERIFY(stopped.stopped());
    QVERIFY(sawStop);
    QVERIFY(ended); // waited for before build() returned

    // The work's own exception comes out of build(), after the forward pass.
    options.progress = {};
    options.beside = [](std::span<const model::Allocation>, std::span<const model::SegmentPiece>, int64_t,
                        const std::atomic<bool>&) { throw std::runtime_error("beside failed"); };
    bool thrown = false;
    try {
        (void)model::Replay::build(*s, 0, options);
    } catch (const std::runtime_error& e) {
        thrown = std::string(e.what()) == "beside failed";
    }
    QVERIFY(thrown);
}

void TestReplay::arraysFilledAtOnceAskForHugePages()
{
    const auto big = load("big_trace.pickle.xz");
    QVERIFY(big);
    const auto s = bench::repeated(*big, 4, bench::Survivors::Freed); // 1.3 M entries: every array mapped
    const auto built = model::Replay::build(*s, 0);
    QVERIFY(built.inactiveLabels().isMapped() && built.allocations().isMapped());
    if (test::vmFlagsOf(built.allocations().data()).empty())
        QSKIP("no /proc/self/smaps with VmFlags here");
    QVERIFY(test::advisedHugePages(built.allocations().data()));
    QVERIFY(test::advisedHugePages(built.inactiveLabels().data()));
    const auto once = model::TimelineItems::fromAllocations(
        std::span(built.allocations().data(), built.allocations().size()), built.entryCount(), nullptr, true);
    const auto growing = model::TimelineItems::fromAllocations(built);
    QVERIFY(once.begin.isMapped() && growing.begin.isMapped());
    QVERIFY(test::advisedHugePages(once.begin.data()) && test::advisedHugePages(once.byEnd.data()));
    QVERIFY(!test::advisedHugePages(growing.begin.data()) && !test::advisedHugePages(growing.byEnd.data()));
    QCOMPARE(once, growing);
    // The timeline's per-item scratch of a sampling where a filter hides items (filled at once, on the GUI thread)
    // too; without a filter the sampling has none (it reads the items' sizes).
    const std::vector<int64_t> lo { 0, built.entryCount() / 2 }, hi { built.entryCount() / 2, built.entryCount() + 1 };
    model::TimelineColumns columns;
    model::sampleColumns(once, {}, lo, hi, columns);
    QCOMPARE(columns.scratch.size(), size_t(0));
    QCOMPARE(columns.maxTotal, std::max(built.peakActive().bytes, built.series().active[0]));
    const std::vector<uint8_t> allButTheFirst = [&] {
        std::vector<uint8_t> v(once.count(), 1);
        v[0] = 0;
        return v;
    }();
    model::sampleColumns(once, allButTheFirst, lo, hi, columns);
    QVERIFY(columns.scratch.isMapped() && test::advisedHugePages(columns.scratch.data()));

    model::Snapshot empty;
    model::Replay grown;
    model::ReplayExtender extender;
    extender.start(grown, empty, 0);
    const auto& trace = s->deviceTraces[0];
    extender.append(grown, s->entryForms, std::span(trace.data(), trace.size()));
    QVERIFY(grown.inactiveLabels().isMapped() && grown.allocations().isMapped());
    QVERIFY(!test::advisedHugePages(grown.allocations().data()));
    QVERIFY(!test::advisedHugePages(grown.inactiveLabels().data()));
}

// Addresses of 2^63 and above (a file's: a model::DeviceAddr is signed, so they read as negative ones) are addresses
// like any other. The lowest, INT64_MIN, was the backward pass's map's mark of an empty slot (model::AddressMap): a
// block freed there twice was taken for one still live, its earlier alloc matched the later allocation's record (one
// record listed twice among the allocations in order), and the map's count went wrong.
void TestReplay::addressesFromTheTopHalf()
{
    model::Snapshot s;
    s.deviceTraces.resize(1);
    auto& t = s.deviceTraces[0];
    const DeviceAddr base = INT64_MIN; // 0x8000000000000000
    t.push_back(entry(Action::SegmentAlloc, base, 2 << 20));
    for (int life = 0; life < 2; ++life) {
        t.push_back(entry(Action::Alloc, base, 512));
        t.push_back(entry(Action::Alloc, base + 512, 1024));
        t.push_back(entry(Action::FreeRequested, base, 512));
        t.push_back(entry(Action::FreeCompleted, base, 512));
        t.push_back(entry(Action::FreeRequested, base + 512, 1024));
        t.push_back(entry(Action::FreeCompleted, base + 512, 1024));
    }
    model::Segment seg;
    seg.address = base;
    seg.totalSize = 2 << 20;
    model::Block free;
    free.address = base;
    free.size = 2 << 20;
    s.blocks = { free };
    seg.blockCount = 1;
    s.segments.push_back(seg);

    const auto replay = model::Replay::build(s, 0);
    QCOMPARE(replay.warnings(), uint64_t(0));
    QCOMPARE(replay.allocations().size(), size_t(4));
    for (int life = 0; life < 2; ++life) {
        const int64_t alloc = 1 + 6 * life;
        const auto id = replay.allocationOfEntry(alloc);
        QVERIFY(id != model::NoAllocation);
        QCOMPARE(replay.allocation(id).allocIndex, int32_t(alloc));
        QCOMPARE(replay.allocation(id).freeCompletedIndex, int32_t(alloc + 3));
        const auto st = replay.stateAt(alloc + 1);
        QVERIFY(!st.blocks.empty());
        QCOMPARE(st.blocks[0].address, base);
        QCOMPARE(st.blocks[0].state, BlockState::ActiveAllocated);
    }
    QCOMPARE(replay.series().allocated[2], ByteCount(512));
    QCOMPARE(replay.series().allocated[13], ByteCount(0));
}

QTEST_GUILESS_MAIN(TestReplay)
void TestReplay::labelsLater()
{
    QFETCH(QString, file);
    QFETCH(int, device);
    auto s = load(file.toStdString());
    QVERIFY(s);
    const auto whole = model::Replay::build(*s, device);
    model::ReplayOptions options;
    options.deferLabels = true;
    auto later = model::Replay::build(*s, device, options);
    QVERIFY(whole.labelled());
    QVERIFY(!later.labelled());
    QVERIFY(!later.largestFree());
    QVERIFY(later.inactiveLabels().empty());
    QCOMPARE(later.warnings(), whole.warnings());
    QCOMPARE(later.checkpointCount(), whole.checkpointCount());
    QCOMPARE(later.peakAllocated().index, whole.peakAllocated().index);
    QCOMPARE(later.peakReserved().bytes, whole.peakReserved().bytes);
    QVERIFY(later.series().allocated == whole.series().allocated);
    QVERIFY(later.series().active == whole.series().active);
    QVERIFY(later.series().reserved == whole.series().reserved);
    QVERIFY(later.series().requested == whole.series().requested);
    QCOMPARE(later.allocations().size(), whole.allocations().size());
    const auto indices = sampleIndices(whole.entryCount(), isBig(*s, device), 300);
    for (int64_t i : indices) {
        // Every segment and block as the whole build's, but the inactive blocks' requests (unknown: 0).
        const model::ReplayState state = later.stateAt(i);
        for (const auto& b : state.blocks)
            if (b.state == BlockState::Inactive)
                QCOMPARE(b.requestedSize, ByteCount(0));
        const std::string diff = difference(flatten(state, true, false), flatten(whole.stateAt(i), true, false));
        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
        QCOMPARE(later.largestFreeAt(i), (*whole.largestFree())[size_t(i)]);
    }

    QVERIFY(later.buildLabels(*s));
    QVERIFY(later.labelled());
    QVERIFY(*later.largestFree() == *whole.largestFree());
    const auto& got = later.inactiveLabels();
    const auto& want = whole.inactiveLabels();
    QCOMPARE(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k)
        QVERIFY2(got[k].end == want[k].end && got[k].requested == want[k].requested && got[k].index == want[k].index,
                 qPrintable(QStringLiteral("label %1").arg(k)));
    QCOMPARE(later.checkpointBytes(), whole.checkpointBytes());
    for (int64_t i : indices) {
        const std::string diff = difference(flatten(later.stateAt(i)), flatten(whole.stateAt(i)));
        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
    }
    QVERIFY(later.buildLabels(*s)); // labelled already: nothing to do
}

void TestReplay::labelsWhileQueried()
{
    const auto big = load("big_trace.pickle.xz");
    QVERIFY(big);
    const auto s = bench::repeated(*big, 2, bench::Survivors::Freed);
    const auto whole = model::Replay::build(*s, 0);
    model::ReplayOptions options;
    options.deferLabels = true;
    auto later = model::Replay::build(*s, 0, options);
    const auto indices = sampleIndices(whole.entryCount(), true, 40);
    std::vector<std::vector<FlatSegment>> unlabelled, labelled;
    for (int64_t i : indices) {
        unlabelled.push_back(flatten(whole.stateAt(i), true, false));
        labelled.push_back(flatten(whole.stateAt(i)));
    }
    std::atomic<bool> done { false };
    std::thread labeller([&] {
        later.buildLabels(*s);
        done = true;
    });
    // Until the labels are there and once more after: each state is the unlabelled one or the whole one.
    int rounds = 0, seenLabelled = 0;
    for (bool last = false; !last; ++rounds) {
        last = done.load();
        model::ReplayState state;
        for (size_t k = 0; k < indices.size(); ++k) {
            const bool wasLabelled = later.labelled();
            later.stateAt(indices[k], state);
            const auto flat = flatten(state);
            const bool asLabelled = flat == labelled[k];
            QVERIFY2(asLabelled || (!wasLabelled && flat == unlabelled[k]),
                     ("index " + std::to_string(indices[k])).c_str());
            seenLabelled += asLabelled;
        }
    }
    labeller.join();
    QVERIFY(later.labelled());
    QVERIFY(seenLabelled >= int(indices.size()));
    QVERIFY(*later.largestFree() == *whole.largestFree());
    qInfo("%d rounds of %zu queries while labelling", rounds, indices.size());
}

void TestReplay::labelsStopAndStartAgain()
{
    const auto big = load("big_trace.pickle.xz");
    QVERIFY(big);
    // 2.6 M entries: several reports in each of the pass's two steps.
    const auto s = bench::repeated(*big, 8, bench::Survivors::Freed);
    const auto whole = model::Replay::build(*s, 0);
    model::ReplayOptions options;
    options.deferLabels = true;
    std::vector<double> seen;
    options.progress = [&](double done) {
        seen.push_back(done);
        return true;
    };
    auto later = model::Replay::build(*s, 0, options);
    QVERIFY(!later.stopped());
    QVERIFY(std::is_sorted(seen.begin(), seen.end()));
    QVERIFY(seen.back() >= 0.99 && seen.back() <= 1.0); // the share is of what build() does

    for (double stopAt : { 0.0, 0.3, 0.8 }) {
        seen.clear();
        const bool labelled = later.buildLabels(*s, [&](double done) {
            seen.push_back(done);
            return done < stopAt;
        });
        QVERIFY(!labelled);
        QVERIFY(!later.labelled());
        QVERIFY(!later.largestFree());
        QVERIFY(later.inactiveLabels().empty());
        QVERIFY(!seen.empty() && seen.back() >= stopAt);
        QCOMPARE(later.stateAt(whole.entryCount() / 2).blocks.size(), whole.stateAt(whole.entryCount() / 2).blocks.size());
    }
    seen.clear();
    QVERIFY(later.buildLabels(*s, [&](double done) {
        seen.push_back(done);
        return true;
    }));
    QVERIFY(seen.size() >= 4);
    QVERIFY(std::is_sorted(seen.begin(), seen.end()));
    QVERIFY(seen.front() < 0.5 && seen.back() <= 1.0);
    QVERIFY(*later.largestFree() == *whole.largestFree());
    QCOMPARE(later.inactiveLabels().size(), whole.inactiveLabels().size());
    for (int64_t i : sampleIndices(whole.entryCount(), true, 50)) {
        const std::string diff = difference(flatten(later.stateAt(i)), flatten(whole.stateAt(i)));
        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
    }
}

void TestReplay::farApartAddresses()
{
    // Two segments: one low, one at `second`; blocks come and go in both (first fit from each segment's start).
    auto make = [](DeviceAddr second) {
        auto s = std::make_shared<model::Snapshot>();
        s->deviceTraces.resize(1);
        auto& t = s->deviceTraces[0];
        const DeviceAddr bases[2] = { 0x7f0000000000, second };
        constexpr ByteCount SegmentSize = 2 << 20;
        for (DeviceAddr base : bases)
            t.push_back(entry(Action::SegmentAlloc, base, SegmentSize));
        std::vector<std::pair<DeviceAddr, ByteCount>> live[2];
        std::mt19937 random(7);
        for (int k = 0; k < 400; ++k) {
            const int seg = int(random() % 2);
            auto& blocks = live[seg];
            if (!blocks.empty() && (random() % 3 == 0 || blocks.size() > 12)) {
                const size_t victim = random() % blocks.size();
                t.push_back(entry(Action::FreeRequested, blocks[victim].first, blocks[victim].second));
                t.push_back(entry(Action::FreeCompleted, blocks[victim].first, blocks[victim].second));
                blocks.erase(blocks.begin() + ptrdiff_t(victim));
                continue;
            }
            const ByteCount size = ByteCount(512 * (1 + random() % 64));
            std::sort(blocks.begin(), blocks.end());
            DeviceAddr at = bases[seg];
            for (const auto& [address, used] : blocks) {
                if (address - at >= size)
                    break;
                at = address + used;
            }
            if (at + size > bases[seg] + SegmentSize)
                continue;
            t.push_back(entry(Action::Alloc, at, size));
            blocks.emplace_back(at, size);
        }
        for (int seg = 0; seg < 2; ++seg) {
            std::sort(live[seg].begin(), live[seg].end());
            model::Segment segment;
            segment.address = bases[seg];
            segment.totalSize = SegmentSize;
            segment.blockBegin = uint32_t(s->blocks.size());
            DeviceAddr at = bases[seg];
            auto block = [&](DeviceAddr address, ByteCount size, BlockState state) {
                model::Block b;
                b.address = address;
                b.size = size;
                b.requestedSize = state == BlockState::Inactive ? 0 : size;
                b.state = state;
                s->blocks.push_back(b);
            };
            for (const auto& [address, size] : live[seg]) {
                if (address > at)
                    block(at, address - at, BlockState::Inactive);
                block(address, size, BlockState::ActiveAllocated);
                segment.allocatedSize += size;
                segment.activeSize += size;
                segment.requestedSize += size;
                at = address + size;
            }
            if (at < bases[seg] + SegmentSize)
                block(at, bases[seg] + SegmentSize - at, BlockState::Inactive);
            segment.blockCount = uint32_t(s->blocks.size()) - segment.blockBegin;
            s->segments.push_back(segment);
        }
        return s;
    };
    // Near: 8-byte keys. Far: the addresses differ in 63 bits (an odd base far from the first), 16-byte keys.
    const DeviceAddr nearBase = 0x7f0000200000, farBase = DeviceAddr(0x3000000000000001);
    const auto near = make(nearBase), far = make(farBase);
    const auto a = model::Replay::build(*near, 0), b = model::Replay::build(*far, 0);
    QCOMPARE(a.warnings(), 0u);
    QCOMPARE(b.warnings(), 0u);
    QCOMPARE(a.entryCount(), b.entryCount());
    QVERIFY(a.entryCount() > 500);
    auto moved = [&](std::vector<FlatSegment> segments) {
        for (auto& seg : segments) {
            if (seg.address < farBase)
                continue;
            seg.address = seg.address - farBase + nearBase;
            for (auto& block : seg.blocks)
                block.address = block.address - farBase + nearBase;
        }
        std::sort(segments.begin(), segments.end(), [](const auto& x, const auto& y) { return x.address < y.address; });
        return segments;
    };
    for (int64_t i = 0; i <= a.entryCount(); ++i) {
        const std::string diff = difference(moved(flatten(b.stateAt(i))), flatten(a.stateAt(i)));
        QVERIFY2(diff.empty(), ("index " + std::to_string(i) + ": " + diff).c_str());
    }
    QVERIFY(*a.largestFree() == *b.largestFree());
    QCOMPARE(a.inactiveLabels().size(), b.inactiveLabels().size());
}

#include "tst_replay.moc"
