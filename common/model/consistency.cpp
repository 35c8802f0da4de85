// The load-time consistency check and the replay's warnings. See consistency.h.
//
// The rules are those of c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::snapshot(): a segment's blocks
// are its whole chain of blocks in address order (so they tile it: each starts where the previous ends, the first at
// the segment's address, their sizes add up to total_size); allocated_size is the sum of the sizes of the allocated
// blocks, active_size of the active ones (allocated, or pending free: active_pending_free), requested_size of the
// requested sizes of the active ones. Segments come from distinct cudaMalloc calls or mapped ranges, so two of one
// device never overlap. Sizes are size_t there, never negative.
#include "model/consistency.h"

#include "model/replay.h"

#include <algorithm>
#include <unordered_map>

namespace memscope::model {

namespace {

    std::string segmentName(const Segment& seg)
    {
        return "segment " + hexAddress(seg.address) + " (device " + std::to_string(seg.device) + ")";
    }

    // Which of the size keys a segment's layout has (a file may leave them out: then there is nothing to check).
    struct SizeKeys {
        bool allocated = false, active = false, requested = false;
    };

    class Checker {
    public:
        Checker(const Snapshot& s, WarningCollector& out)
            : m_s(s)
            , m_out(out)
        {
        }

        void run()
        {
            for (const Segment& seg : m_s.segments)
                segment(seg);
            overlaps();
        }

    private:
        using Kind = LoadWarning::Kind;

        const SizeKeys& keysOf(LayoutId layout)
        {
            auto [it, inserted] = m_keys.try_emplace(raw(layout));
            if (inserted) {
                for (StringId k : m_s.layouts.get(layout)) {
                    const std::string_view name = m_s.str(k);
                    it->second.allocated |= name == "allocated_size";
                    it->second.active |= name == "active_size";
                    it->second.requested |= name == "requested_size";
                }
            }
            return it->second;
        }

        void negative(const Segment& seg, const char* field, ByteCount value, const Block* block = nullptr)
        {
            m_out.add(Kind::NegativeSize, [&] {
                std::string where = block ? "block " + hexAddress(block->address) + " of " : std::string();
                return where + segmentName(seg) + ": " + field + " " + std::to_string(value);
            });
        }

        void segment(const Segment& seg)
        {
            const size_t available = m_s.blocks.size() - std::min<size_t>(seg.blockBegin, m_s.blocks.size());
            const uint32_t blockCount = uint32_t(std::min<size_t>(seg.blockCount, available));
            const Block* blocks = m_s.blocks.data() + std::min<size_t>(seg.blockBegin, m_s.blocks.size());

            if (seg.totalSize < 0)
                negative(seg, "total_size", seg.totalSize);
            if (seg.allocatedSize < 0)
                negative(seg, "allocated_size", seg.allocatedSize);
            if (seg.activeSize < 0)
                negative(seg, "active_size", seg.activeSize);
            if (seg.requestedSize < 0)
                negative(seg, "requested_size", seg.requestedSize);

            // Tiling: each block starts where the previous one ended, the first at the segment's address, and the
            // sizes add up to the total. Reported once per segment, at the first block that breaks it.
            DeviceAddr expected = seg.address;
            ByteCount sum = 0, allocated = 0, active = 0, requested = 0;
            bool tiles = true, knownStates = true, allRequested = true;
            std::string tilingProblem;
            for (uint32_t i = 0; i < blockCount; ++i) {
                const Block& b = blocks[i];
                if (b.size < 0)
                    negative(seg, "size", b.size, &b);
                if (b.hasRequestedSize && b.requestedSize < 0 && b.state != BlockState::Inactive)
                    negative(seg, "requested_size", b.requestedSize, &b);
                if (b.size > seg.totalSize && seg.totalSize >= 0) {
                    m_out.add(Kind::BlockLargerThanSegment, [&] {
                        return "block " + hexAddress(b.address) + " of " + segmentName(seg) + ": "
                            + std::to_string(b.size) + " B in a segment of " + std::to_string(seg.totalSize) + " B";
                    });
                }
                if (tiles && b.address != expected) {
                    tiles = false;
                    tilingProblem = "block " + std::to_string(i) + " starts at " + hexAddress(b.address) + ", where "
                        + (i == 0 ? "the segment starts at " : "the previous block ends at ") + hexAddress(expected);
                }
                expected = b.address + b.size;
                sum += b.size;
                switch (b.state) {
                case BlockState::ActiveAllocated:
                    allocated += b.size;
                    [[fallthrough]];
                case BlockState::ActivePendingFree:
                    active += b.size;
                    requested += b.requestedSize;
                    allRequested &= b.hasRequestedSize;
                    break;
                case BlockState::Inactive:
                    break;
                case BlockState::Unknown:
                    knownStates = false;
                    break;
                }
            }
            if (tiles && sum != seg.totalSize) {
                tiles = false;
                tilingProblem = "its " + std::to_string(blockCount) + " blocks hold " + std::to_string(sum)
                    + " B of its " + std::to_string(seg.totalSize) + " B";
            }
            if (!tiles)
                m_out.add(Kind::BlocksDoNotTile, [&] { return segmentName(seg) + ": " + tilingProblem; });

            // The totals PyTorch computes from the same blocks. A block in a state this reader does not know could
            // count either way: then only requested bytes of the known ones could be compared, so nothing is.
            if (!knownStates)
                return;
            const SizeKeys& keys = keysOf(seg.layout);
            const char* field = nullptr;
            ByteCount inFile = 0, fromBlocks = 0;
            if (keys.allocated && seg.allocatedSize != allocated)
                field = "allocated_size", inFile = seg.allocatedSize, fromBlocks = allocated;
            else if (keys.active && seg.activeSize != active)
                field = "active_size", inFile = seg.activeSize, fromBlocks = active;
            else if (keys.requested && allRequested && seg.requestedSize != requested)
                field = "requested_size", inFile = seg.requestedSize, fromBlocks = requested;
            if (field) {
                m_out.add(Kind::SegmentTotals, [&] {
                    return segmentName(seg) + ": " + field + " " + std::to_string(inFile) + ", its blocks add up to "
                        + std::to_string(fromBlocks);
                });
            }
        }

        void overlaps()
        {
            std::vector<const Segment*> order;
            order.reserve(m_s.segments.size());
            for (const Segment& seg : m_s.segments)
                if (seg.totalSize > 0)
                    order.push_back(&seg);
            // PyTorch writes segments sorted by address (per device in newer versions): usually nothing moves.
            auto before = [](const Segment* a, const Segment* b) {
                return a->device != b->device ? a->device < b->device : a->address < b->address;
            };
            if (!std::is_sorted(order.begin(), order.end(), before))
                std::stable_sort(order.begin(), order.end(), before);
            // Each segment against the furthest end so far on its device, so a long one is not forgotten.
            const Segment* reach = nullptr;
            for (const Segment* seg : order) {
                if (reach && reach->device == seg->device && seg->address < reach->address + reach->totalSize) {
                    m_out.add(Kind::OverlappingSegments, [&] {
                        return segmentName(*seg) + ", " + std::to_string(seg->totalSize) + " B, starts inside segment "
                            + hexAddress(reach->address) + " (" + std::to_string(reach->totalSize) + " B)";
                    });
                }
                if (!reach || reach->device != seg->device
                    || seg->address + seg->totalSize > reach->address + reach->totalSize)
                    reach = seg;
            }
        }

        const Snapshot& m_s;
        WarningCollector& m_out;
        std::unordered_map<uint16_t, SizeKeys> m_keys;
    };

} // namespace

void checkFinalState(const Snapshot& snapshot, WarningCollector& out) { Checker(snapshot, out).run(); }

void checkConsistency(const Snapshot& snapshot, WarningCollector& out)
{
    checkFinalState(snapshot, out);
    for (size_t device = 0; device < snapshot.deviceTraces.size(); ++device) {
        const Trace& trace = snapshot.deviceTraces[device];
        for (size_t j = 0; j < trace.size(); ++j)
            checkTraceEntry(snapshot, trace[j], device, j, out);
    }
}

void negativeTraceSize(const Snapshot& s, const TraceEntry& e, size_t device, size_t index, WarningCollector& out)
{
    out.add(LoadWarning::Kind::NegativeTraceSize, [&] {
        return "device " + std::to_string(device) + ", entry " + std::to_string(index) + " ("
            + std::string(s.str(s.form(e).actionName)) + " at " + hexAddress(e.addr)
            + "): size " + std::to_string(e.size);
    });
}

void addReplayWarnings(const Snapshot& snapshot, std::span<const Replay> replays, WarningCollector& out)
{
    for (const Replay& r : replays) {
        if (r.warnings() == 0)
            continue;
        const ReplayIssue& first = r.firstWarning();
        out.add(
            LoadWarning::Kind::TraceDoesNotReplay,
            [&] {
                std::string where = "device " + std::to_string(r.device()) + ", ";
                if (first.entry >= r.entryCount()) {
                    where += "the final state";
                } else {
                    const int64_t j = r.firstEntry() + first.entry;
                    where += "entry " + std::to_string(j);
                    const auto& trace = snapshot.deviceTraces[size_t(r.device())];
                    if (j >= 0 && size_t(j) < trace.size())
                        where += " (" + std::string(snapshot.str(snapshot.form(trace[size_t(j)]).actionName)) + " at "
                            + hexAddress(trace[size_t(j)].addr) + ")";
                }
                return where + ": " + first.what;
            },
            r.warnings());
    }
}

} // namespace memscope::model
