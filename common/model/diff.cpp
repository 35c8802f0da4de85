// Memory diffs (diff.h): side resolution (final state or replay state), content interning of both sides' stacks into
// one frame table, aggregation by scope, segment, stack and (stack, size), same-trace lifetimes; then the text, JSON
// and folded reports and the `diff` command line. Pure functions; any thread.
#include "model/diff.h"

#include "model/framefilter.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <unordered_map>

namespace memscope::model {

DiffMetrics operator-(const DiffMetrics& b, const DiffMetrics& a)
{
    DiffMetrics d;
    d.reserved = b.reserved - a.reserved;
    d.allocated = b.allocated - a.allocated;
    d.active = b.active - a.active;
    d.requested = b.requested - a.requested;
    d.largestFree = b.largestFree - a.largestFree;
    d.fragmentation = b.fragmentation - a.fragmentation;
    d.segments = b.segments - a.segments;
    d.allocations = b.allocations - a.allocations;
    return d;
}

namespace {

    bool isActive(BlockState s) { return s == BlockState::ActiveAllocated || s == BlockState::ActivePendingFree; }

    // Interns one snapshot's stacks into the diff's frame table by content: strings, then frames (name, filename,
    // line), then stacks, each cached per source id. With the filter, a stack becomes its kept frames; a stack whose
    // every frame is hidden keeps them all (diff.h: DiffOptions::frameFilter).
    class StackMapper {
    public:
        StackMapper(const Snapshot& source, Snapshot& target, StackInterner& interner, bool filter)
            : m_source(source)
            , m_target(target)
            , m_interner(interner)
            , m_filter(filter)
        {
        }

        StackId map(StackId stack)
        {
            if (stack == EmptyStack || raw(stack) >= m_source.stackCount())
                return EmptyStack;
            if (auto it = m_stacks.find(raw(stack)); it != m_stacks.end())
                return it->second;
            m_path.clear();
            for (const FrameId* f = m_source.stackBegin(stack); f != m_source.stackEnd(stack); ++f)
                if (!m_filter || keep(*f))
                    m_path.push_back(mapFrame(*f));
            if (m_path.empty()) // every frame hidden: keep them all
                for (const FrameId* f = m_source.stackBegin(stack); f != m_source.stackEnd(stack); ++f)
                    m_path.push_back(mapFrame(*f));
            const StackId mapped = m_interner.stack(m_path);
            m_stacks.emplace(raw(stack), mapped);
            return mapped;
        }

    private:
        bool keep(FrameId f)
        {
            if (auto it = m_keep.find(raw(f)); it != m_keep.end())
                return it->second;
            const Frame& fr = m_source.frame(f);
            const bool k = model::keepFrame(m_source.str(fr.name), m_source.str(fr.filename));
            m_keep.emplace(raw(f), k);
            return k;
        }

        FrameId mapFrame(FrameId f)
        {
            if (auto it = m_frames.find(raw(f)); it != m_frames.end())
                return it->second;
            const Frame& fr = m_source.frame(f);
            const FrameId mapped = m_interner.frame(m_target.strings.intern(m_source.str(fr.name)),
                                                    m_target.strings.intern(m_source.str(fr.filename)), fr.line);
            m_frames.emplace(raw(f), mapped);
            return mapped;
        }

        const Snapshot& m_source;
        Snapshot& m_target;
        StackInterner& m_interner;
        bool m_filter;
        std::unordered_map<uint32_t, StackId> m_stacks;
        std::unordered_map<uint32_t, FrameId> m_frames;
        std::unordered_map<uint32_t, bool> m_keep;
        std::vector<FrameId> m_path;
    };

    struct LiveBlock {
        int32_t device = 0;
        DeviceAddr address = 0;
        ByteCount size = 0;
        ByteCount requested = 0;
        uint32_t version = 0;
        StackId stack = EmptyStack; // in the diff's frame table
        TraceIndex allocIndex = -1;
    };

    struct SideSegment {
        int32_t device = 0;
        DeviceAddr address = 0;
        ByteCount size = 0;
        int64_t stream = 0;
        std::pair<int64_t, int64_t> poolId { 0, 0 };
        bool isExpandable = false;
        ByteCount allocated = 0, active = 0, requested = 0, largestFree = 0;
        int64_t allocations = 0;
        uint64_t blockHash = 0xcbf29ce484222325ull; // FNV-1a over its active blocks (address, size, state, version)
    };

    struct SideState {
        std::vector<SideSegment> segments;
        std::vector<LiveBlock> blocks;
    };

    void hashIn(uint64_t& h, uint64_t v)
    {
        for (int i = 0; i < 8; ++i) {
            h ^= (v >> (8 * i)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }

    // Adds one block to a side; `seg` is the segment it lies in.
    void addBlock(SideState& side, SideSegment& seg, BlockState state, DeviceAddr address, ByteCount size,
                  ByteCount requested, uint32_t version, StackId stack, TraceIndex allocIndex)
    {
        if (state == BlockState::Inactive) {
            seg.largestFree = std::max(seg.largestFree, size);
            return;
        }
        if (!isActive(state))
            return; // an unknown state: neither live nor free
        seg.active += size;
        seg.requested += requested;
        if (state == BlockState::ActiveAllocated)
            seg.allocated += size;
        ++seg.allocations;
        hashIn(seg.blockHash, uint64_t(address));
        hashIn(seg.blockHash, uint64_t(size));
        hashIn(seg.blockHash, uint64_t(state));
        hashIn(seg.blockHash, version);
        side.blocks.push_back({ seg.device, address, size, requested, version, stack, allocIndex });
    }

    // The final state of `device` (or all) from the snapshot's own segments and blocks.
    void collectFinal(const Snapshot& s, int device, StackMapper& mapper, SideState& side)
    {
        for (const Segment& seg : s.segments) {
            if (device != AllDevices && seg.device != device)
                continue;
            SideSegment out;
            out.device = seg.device;
            out.address = seg.address;
            out.size = seg.totalSize;
            out.stream = seg.stream;
            out.poolId = seg.poolId;
            out.isExpandable = seg.isExpandable;
            const size_t begin = std::min<size_t>(seg.blockBegin, s.blocks.size());
            const size_t end = std::min<size_t>(begin + seg.blockCount, s.blocks.size());
            for (size_t i = begin; i < end; ++i) {
                const Block& b = s.blocks[i];
                // The block's frames; legacy files keep them in the first history item (as _memory_viz's
                // _block_extra_legacy).
                StackId stack = b.stack;
                if (!b.hasFrames && b.hasHistory && b.historyCount > 0 && b.historyBegin < s.history.size())
                    stack = s.history[b.historyBegin].stack;
                const ByteCount requested = b.hasRequestedSize ? b.requestedSize : b.size;
                addBlock(side, out, b.state, b.address, b.size, requested, b.version,
                         isActive(b.state) ? mapper.map(stack) : EmptyStack, -1);
            }
            side.segments.push_back(out);
        }
    }

    void collectReplay(const ReplayState& state, StackMapper& mapper, SideState& side)
    {
        for (const ReplaySegment& seg : state.segments) {
            SideSegment out;
            out.device = seg.device;
            out.address = seg.address;
            out.size = seg.totalSize;
            out.stream = seg.stream;
            out.poolId = seg.poolId;
            out.isExpandable = seg.isExpandable;
            for (uint32_t i = seg.blockBegin; i < seg.blockBegin + seg.blockCount; ++i) {
                const ReplayBlock& b = state.blocks[i];
                addBlock(side, out, b.state, b.address, b.size, b.requestedSize, b.version,
                         isActive(b.state) ? mapper.map(b.stack) : EmptyStack, b.allocIndex);
            }
            side.segments.push_back(out);
        }
    }

    std::string sideLabel(const DiffSide& side, const char* fallback)
    {
        return side.name.empty() ? std::string(fallback) : side.name;
    }

    // Checks a side and fills its info; returns an error message or "".
    std::string resolve(const DiffSide& side, const char* which, DiffSideInfo& info, DiffErrorCode& code)
    {
        info.name = side.name;
        info.device = side.device;
        info.index = side.index;
        const std::string label = sideLabel(side, which);
        if (!side.snapshot) {
            code = DiffErrorCode::NoSnapshot;
            return label + ": no snapshot";
        }
        const Snapshot& s = *side.snapshot;
        if (side.device != AllDevices && (side.device < 0 || side.device >= std::max(1, s.deviceCount()))) {
            code = DiffErrorCode::NoSuchDevice;
            return label + ": no device " + std::to_string(side.device) + " (the snapshot has "
                + std::to_string(s.deviceCount()) + ")";
        }
        if (side.index == EndOfTrace)
            return {};
        int traceDevice = side.device;
        if (traceDevice == AllDevices) {
            std::vector<int> traced;
            for (size_t d = 0; d < s.deviceTraces.size(); ++d)
                if (!s.deviceTraces[d].empty())
                    traced.push_back(int(d));
            if (traced.size() > 1) {
                code = DiffErrorCode::AmbiguousTrace;
                std::string list;
                for (int d : traced)
                    list += (list.empty() ? "" : ", ") + std::to_string(d);
                return label + ": index " + std::to_string(side.index) + " is ambiguous: devices " + list
                    + " have traces; pick one device";
            }
            traceDevice = traced.empty() ? 0 : traced.front();
        }
        const int64_t n = traceDevice < int(s.deviceTraces.size()) ? int64_t(s.deviceTraces[traceDevice].size()) : 0;
        if (side.index < 0 || side.index > n) {
            code = DiffErrorCode::IndexOutOfRange;
            return label + ": index " + std::to_string(side.index) + " is beyond the trace of device "
                + std::to_string(traceDevice) + ", which has " + std::to_string(n) + " entries (states 0.."
                + std::to_string(n) + ")";
        }
        info.traceDevice = traceDevice;
        info.entryCount = n;
        return {};
    }

    // Lexicographic comparison of two stacks of one table by content, outermost frame first.
    int compareStacks(const Snapshot& s, StackId a, StackId b)
    {
        if (a == b)
            return 0;
        const FrameId* ia = s.stackEnd(a);
        const FrameId* ib = s.stackEnd(b);
        const FrameId* ba = s.stackBegin(a);
        const FrameId* bb = s.stackBegin(b);
        while (ia != ba && ib != bb) {
            const Frame& fa = s.frame(*--ia);
            const Frame& fb = s.frame(*--ib);
            if (int c = s.str(fa.filename).compare(s.str(fb.filename)))
                return c;
            if (fa.line != fb.line)
                return fa.line < fb.line ? -1 : 1; // by value: 2^64 - 1 sorts after every signed line
            if (int c = s.str(fa.name).compare(s.str(fb.name)))
                return c;
        }
        if (ia == ba && ib == bb)
            return 0;
        return ia == ba ? -1 : 1;
    }

    // Growth first (largest first), then shrink (largest first), then unchanged bytes.
    int deltaClass(ByteCount d) { return d > 0 ? 0 : d < 0 ? 1 : 2; }

    void sortRows(std::vector<DiffStackRow>& rows, const Snapshot& table)
    {
        std::sort(rows.begin(), rows.end(), [&](const DiffStackRow& x, const DiffStackRow& y) {
            const int cx = deltaClass(x.deltaBytes), cy = deltaClass(y.deltaBytes);
            if (cx != cy)
                return cx < cy;
            const ByteCount ax = std::llabs(x.deltaBytes), ay = std::llabs(y.deltaBytes);
            if (ax != ay)
                return ax > ay;
            const int64_t nx = std::llabs(x.deltaCount), ny = std::llabs(y.deltaCount);
            if (nx != ny)
                return nx > ny;
            if (x.deltaCount != y.deltaCount)
                return x.deltaCount > y.deltaCount;
            if (int c = compareStacks(table, x.stack, y.stack))
                return c < 0;
            return x.size < y.size;
        });
    }

    struct PairHash {
        size_t operator()(const std::pair<uint32_t, int64_t>& k) const
        {
            return std::hash<uint64_t> {}((uint64_t(k.first) * 0x9E3779B97F4A7C15ull) ^ uint64_t(k.second));
        }
    };

    using ScopeKey = std::tuple<int, int32_t, int64_t, int64_t, int64_t>; // scope, device, pool, stream

} // namespace

DiffResult computeDiff(const DiffSide& a, const DiffSide& b, const DiffOptions& options)
{
    DiffResult result;
    result.options = options;
    if (std::string e = resolve(a, "A", result.a, result.errorCode); !e.empty()) {
        result.error = e;
        return result;
    }
    if (std::string e = resolve(b, "B", result.b, result.errorCode); !e.empty()) {
        result.error = e;
        return result;
    }
    result.sameTrace = a.snapshot.get() == b.snapshot.get() && a.device == b.device;

    // Replays: the caller's when it has one for that trace, else one built here, shared by both sides if they can.
    std::unique_ptr<Replay> ownReplays[2];
    const Replay* replays[2] = { nullptr, nullptr };
    const DiffSide* sides[2] = { &a, &b };
    const DiffSideInfo* infos[2] = { &result.a, &result.b };
    for (int i = 0; i < 2; ++i) {
        if (infos[i]->index == EndOfTrace)
            continue;
        const int device = infos[i]->traceDevice;
        auto fits = [&](const DiffSide& side, const DiffSideInfo& info) {
            return side.replay && side.snapshot == sides[i]->snapshot && info.traceDevice == device
                && side.replay->device() == device;
        };
        if (fits(*sides[i], *infos[i]))
            replays[i] = sides[i]->replay;
        else if (fits(*sides[1 - i], *infos[1 - i]))
            replays[i] = sides[1 - i]->replay;
        else if (i == 1 && replays[0] && a.snapshot == b.snapshot && result.a.traceDevice == device)
            replays[i] = replays[0];
        else {
            ownReplays[i] = std::make_unique<Replay>(Replay::build(*sides[i]->snapshot, device));
            replays[i] = ownReplays[i].get();
        }
    }

    auto table = std::make_shared<Snapshot>();
    StackInterner interner(*table);
    SideState state[2];
    ReplayState scratch;
    for (int i = 0; i < 2; ++i) {
        const Snapshot& s = *sides[i]->snapshot;
        StackMapper mapper(s, *table, interner, options.frameFilter);
        const DiffSideInfo& info = *infos[i];
        if (info.index == EndOfTrace) {
            collectFinal(s, info.device, mapper, state[i]);
            continue;
        }
        const Replay& replay = *replays[i];
        // Replay indices count from its first entry (replay.h: firstEntry, only non-zero beyond MaxReplayEntries).
        replay.stateAt(std::max<int64_t>(0, info.index - replay.firstEntry()), scratch);
        // Devices without a trace are constant: their final state, merged in address order per device.
        if (info.device == AllDevices) {
            for (int d = 0; d < s.deviceCount(); ++d) {
                if (d == info.traceDevice)
                    collectReplay(scratch, mapper, state[i]);
                else
                    collectFinal(s, d, mapper, state[i]);
            }
        } else {
            collectReplay(scratch, mapper, state[i]);
        }
    }
    result.frames = table;

    // ---- Totals ----
    {
        std::map<ScopeKey, std::pair<DiffMetrics, DiffMetrics>> scopes;
        for (int i = 0; i < 2; ++i) {
            for (const SideSegment& seg : state[i].segments) {
                const ScopeKey keys[] = {
                    { int(DiffScope::All), 0, 0, 0, 0 },
                    { int(DiffScope::Device), seg.device, 0, 0, 0 },
                    { int(DiffScope::Pool), seg.device, seg.poolId.first, seg.poolId.second, 0 },
                    { int(DiffScope::Stream), seg.device, 0, 0, seg.stream },
                };
                for (const ScopeKey& k : keys) {
                    auto& pair = scopes[k];
                    DiffMetrics& m = i == 0 ? pair.first : pair.second;
                    m.reserved += seg.size;
                    m.allocated += seg.allocated;
                    m.active += seg.active;
                    m.requested += seg.requested;
                    m.largestFree = std::max(m.largestFree, seg.largestFree);
                    m.segments += 1;
                    m.allocations += seg.allocations;
                }
            }
        }
        scopes.try_emplace(ScopeKey { int(DiffScope::All), 0, 0, 0, 0 });
        for (auto& [key, pair] : scopes) {
            DiffTotals t;
            t.scope = DiffScope(std::get<0>(key));
            t.device = std::get<1>(key);
            t.poolId = { std::get<2>(key), std::get<3>(key) };
            t.stream = std::get<4>(key);
            t.a = pair.first;
            t.b = pair.second;
            t.a.fragmentation = t.a.reserved - t.a.active;
            t.b.fragmentation = t.b.reserved - t.b.active;
            t.delta = t.b - t.a;
            result.totals.push_back(t);
        }
    }

    // ---- Stacks, and stacks by size ----
    {
        std::vector<uint32_t> rowOfStack(table->stackCount(), UINT32_MAX);
        std::unordered_map<std::pair<uint32_t, int64_t>, uint32_t, PairHash> rowOfSized;
        for (int i = 0; i < 2; ++i) {
            for (const LiveBlock& blk : state[i].blocks) {
                uint32_t& r = rowOfStack[raw(blk.stack)];
                if (r == UINT32_MAX) {
                    r = uint32_t(result.byStack.size());
                    result.byStack.emplace_back().stack = blk.stack;
                }
                auto [it, inserted]
                    = rowOfSized.try_emplace({ raw(blk.stack), blk.size }, uint32_t(result.byStackAndSize.size()));
                if (inserted) {
                    DiffStackRow& row = result.byStackAndSize.emplace_back();
                    row.stack = blk.stack;
                    row.size = blk.size;
                }
                for (DiffStackRow* row : { &result.byStack[r], &result.byStackAndSize[it->second] }) {
                    if (i == 0) {
                        row->bytesA += blk.size;
                        row->countA += 1;
                        row->requestedA += blk.requested;
                    } else {
                        row->bytesB += blk.size;
                        row->countB += 1;
                        row->requestedB += blk.requested;
                    }
                }
            }
        }

        // ---- Same-trace lifetimes: identity = (device, address, version) ----
        if (result.sameTrace) {
            auto byIdentity = [](const LiveBlock& x, const LiveBlock& y) {
                return std::tie(x.device, x.address, x.version) < std::tie(y.device, y.address, y.version);
            };
            std::vector<LiveBlock> la = state[0].blocks, lb = state[1].blocks;
            std::sort(la.begin(), la.end(), byIdentity);
            std::sort(lb.begin(), lb.end(), byIdentity);
            auto toAllocation = [](const LiveBlock& blk) {
                return DiffAllocation { blk.device,  blk.address, blk.size,      blk.requested,
                                        blk.version, blk.stack,   blk.allocIndex };
            };
            auto charge = [&](const LiveBlock& blk, bool isNew) {
                DiffStackRow* rows[] = { &result.byStack[rowOfStack[raw(blk.stack)]],
                                         &result.byStackAndSize[rowOfSized.at({ raw(blk.stack), blk.size })] };
                for (DiffStackRow* row : rows) {
                    if (isNew) {
                        row->newCount += 1;
                        row->newBytes += blk.size;
                    } else {
                        row->freedCount += 1;
                        row->freedBytes += blk.size;
                    }
                }
            };
            DiffLifetimes& lt = result.lifetimes;
            size_t i = 0, j = 0;
            while (i < la.size() || j < lb.size()) {
                if (j == lb.size() || (i < la.size() && byIdentity(la[i], lb[j]))) {
                    lt.freed.count += 1;
                    lt.freed.bytes += la[i].size;
                    lt.freedList.push_back(toAllocation(la[i]));
                    charge(la[i++], false);
                } else if (i == la.size() || byIdentity(lb[j], la[i])) {
                    lt.newAllocations.count += 1;
                    lt.newAllocations.bytes += lb[j].size;
                    lt.newList.push_back(toAllocation(lb[j]));
                    charge(lb[j++], true);
                } else {
                    lt.surviving.count += 1;
                    lt.surviving.bytes += lb[j].size;
                    ++i;
                    ++j;
                }
            }
        }

        for (auto* rows : { &result.byStack, &result.byStackAndSize }) {
            for (DiffStackRow& row : *rows) {
                row.deltaBytes = row.bytesB - row.bytesA;
                row.deltaCount = row.countB - row.countA;
            }
            sortRows(*rows, *table);
        }
    }

    // ---- Segments, by (device, address, size) ----
    {
        auto key = [](const SideSegment& s) { return std::make_tuple(s.device, s.address, s.size); };
        auto byKey = [&](const SideSegment& x, const SideSegment& y) { return key(x) < key(y); };
        std::vector<SideSegment> sa = state[0].segments, sb = state[1].segments;
        std::sort(sa.begin(), sa.end(), byKey);
        std::sort(sb.begin(), sb.end(), byKey);
        auto make = [](const SideSegment& s, DiffSegmentStatus status) {
            DiffSegment d;
            d.status = status;
            d.device = s.device;
            d.address = s.address;
            d.size = s.size;
            d.stream = s.stream;
            d.poolId = s.poolId;
            d.isExpandable = s.isExpandable;
            return d;
        };
        auto fillA = [](DiffSegment& d, const SideSegment& s) {
            d.allocatedA = s.allocated;
            d.activeA = s.active;
            d.allocationsA = s.allocations;
        };
        auto fillB = [](DiffSegment& d, const SideSegment& s) {
            d.allocatedB = s.allocated;
            d.activeB = s.active;
            d.allocationsB = s.allocations;
        };
        DiffSegmentSummary& sum = result.segments;
        size_t i = 0, j = 0;
        while (i < sa.size() || j < sb.size()) {
            if (j == sb.size() || (i < sa.size() && byKey(sa[i], sb[j]))) {
                DiffSegment d = make(sa[i], DiffSegmentStatus::OnlyA);
                fillA(d, sa[i++]);
                sum.onlyA.count += 1;
                sum.onlyA.bytes += d.size;
                result.segmentList.push_back(d);
            } else if (i == sa.size() || byKey(sb[j], sa[i])) {
                DiffSegment d = make(sb[j], DiffSegmentStatus::OnlyB);
                fillB(d, sb[j++]);
                sum.onlyB.count += 1;
                sum.onlyB.bytes += d.size;
                result.segmentList.push_back(d);
            } else {
                DiffSegment d = make(sb[j], DiffSegmentStatus::Both);
                fillA(d, sa[i]);
                fillB(d, sb[j]);
                sum.both.count += 1;
                sum.both.bytes += d.size;
                if (sa[i].blockHash != sb[j].blockHash)
                    sum.bothChanged += 1;
                result.segmentList.push_back(d);
                ++i;
                ++j;
            }
        }
        auto rank = [](const DiffSegment& s) {
            return s.status == DiffSegmentStatus::OnlyB ? 0 : s.status == DiffSegmentStatus::OnlyA ? 1 : 2;
        };
        std::stable_sort(result.segmentList.begin(), result.segmentList.end(),
                         [&](const DiffSegment& x, const DiffSegment& y) {
                             if (rank(x) != rank(y))
                                 return rank(x) < rank(y);
                             if (x.status != DiffSegmentStatus::Both)
                                 return x.size > y.size;
                             return std::llabs(x.deltaActive()) > std::llabs(y.deltaActive());
                         });
    }
    return result;
}

std::vector<CallSample> diffCallSamples(const DiffResult& result)
{
    std::vector<CallSample> samples;
    for (size_t i = 0; i < result.byStack.size(); ++i) {
        const DiffStackRow& row = result.byStack[i];
        if (row.deltaBytes != 0 || row.deltaCount != 0)
            samples.push_back({ row.stack, row.deltaBytes, row.deltaCount, uint32_t(i) });
    }
    return samples;
}

CallTree diffCallTree(const DiffResult& result, const CallTreeOptions& options)
{
    if (!result.frames)
        return CallTree();
    const std::vector<CallSample> samples = diffCallSamples(result);
    return CallTree::build(*result.frames, samples, options);
}

ByteCount diffGrowth(const DiffResult& result, DiffGrowthMetric metric)
{
    if (result.totals.empty())
        return 0;
    const DiffMetrics& d = result.totals.front().delta;
    switch (metric) {
    case DiffGrowthMetric::Allocated:
        return d.allocated;
    case DiffGrowthMetric::Reserved:
        return d.reserved;
    case DiffGrowthMetric::Active:
        break;
    }
    return d.active;
}

bool parseDiffSideSpec(const std::string& text, std::string& path, Moment& moment, std::string& error)
{
    path = text;
    moment = Moment {};
    const size_t at = text.rfind('@');
    if (at != std::string::npos) {
        const std::string suffix = text.substr(at + 1);
        auto endsWith = [&](std::string_view tail) { return std::string_view(suffix).ends_with(tail); };
        const bool looksLikeFile = suffix.find('/') != std::string::npos || endsWith(".pickle") || endsWith(".pkl")
            || endsWith(".json") || endsWith(".xz");
        if (!suffix.empty() && !looksLikeFile) {
            path = text.substr(0, at);
            moment = *parseMoment(suffix);
        }
    }
    if (path.empty()) {
        error = "'" + text + "' names no file";
        return false;
    }
    return true;
}

bool resolveDiffSide(DiffSide& side, const Moment& moment, std::unique_ptr<Replay>& replay, std::string& error)
{
    const std::string label = side.name.empty() ? std::string("side") : side.name;
    if (moment.kind == MomentKind::End) {
        side.index = EndOfTrace;
        return true;
    }
    if (moment.kind == MomentKind::Index) { // no replay needed: computeDiff checks the device and the range
        side.index = moment.number;
        return true;
    }
    if (!side.snapshot) {
        error = label + ": no snapshot";
        return false;
    }
    const Snapshot& s = *side.snapshot;
    int device = side.device;
    if (device == AllDevices) {
        std::vector<int> traced;
        for (size_t d = 0; d < s.deviceTraces.size(); ++d)
            if (!s.deviceTraces[d].empty())
                traced.push_back(int(d));
        if (traced.size() > 1) {
            error = label + ": '" + momentSpec(moment)
                + "' is ambiguous: several devices have traces; pick one device (--device N)";
            return false;
        }
        device = traced.empty() ? 0 : traced.front();
    }
    if (device < 0 || device >= std::max(1, s.deviceCount())) {
        error = label + ": no device " + std::to_string(device);
        return false;
    }
    if (!side.replay || side.replay->device() != device) {
        replay = std::make_unique<Replay>(Replay::build(s, device));
        side.replay = replay.get();
    }
    const ResolvedMoment r = resolveMoment(moment, s, *side.replay);
    if (!r.ok) {
        error = label + ": " + r.error;
        return false;
    }
    side.index = r.index + side.replay->firstEntry();
    return true;
}

std::string_view diffGrowthMetricName(DiffGrowthMetric metric)
{
    return metric == DiffGrowthMetric::Allocated ? "allocated" : metric == DiffGrowthMetric::Reserved ? "reserved" : "active";
}

} // namespace memscope::model
