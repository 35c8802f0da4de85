// RecordingBuilder (recordingbuilder.h): a recording's stacks, entries, notes and final state written into a
// model::Snapshot as PyTorch's torch.cuda.memory._snapshot() shapes them. One thread (the owner) calls it.
#include "viewer/recordingbuilder.h"

#include <algorithm>

namespace memscope::viewer {

RecordingBuilder::RecordingBuilder(model::Snapshot& out)
    : m_out(out)
    , m_interner(std::make_unique<model::StackInterner>(out))
{
    // PyTorch writes "N/A" as an entry's compile_context when torch.compile gave it none
    // (c10/cuda/CUDACachingAllocator.cpp, TraceEntry's compile_context; torch/cuda/memory.py _snapshot).
    m_noContext = out.strings.intern("N/A");
    m_start = out.strings.intern("START");
    m_end = out.strings.intern("END");
    if (out.streams.empty())
        out.streams.push_back(0); // raw stream 0 is number 0 (Snapshot::streams)
    for (const int64_t stream : out.streams)
        m_numbering.addStream(stream);
    for (const model::Segment& seg : out.segments)
        if (m_numbering.addStream(seg.stream))
            out.streams.push_back(seg.stream);
}

void RecordingBuilder::defineStack(uint64_t id, std::span<const StackFrame> frames)
{
    if (id == 0)
        return;
    std::vector<model::FrameId> ids;
    ids.reserve(frames.size());
    for (const StackFrame& f : frames)
        ids.push_back(m_interner->frame(m_out.strings.intern(f.name), m_out.strings.intern(f.file), f.line));
    m_stacks[id] = m_interner->stack(ids);
}

model::StackId RecordingBuilder::stack(uint64_t id) const
{
    if (id == 0)
        return model::EmptyStack;
    auto it = m_stacks.find(id);
    return it == m_stacks.end() ? model::EmptyStack : it->second;
}

model::StackId RecordingBuilder::copyStack(const model::Snapshot& from, model::StackId id)
{
    if (id == model::EmptyStack || raw(id) >= from.stackCount())
        return model::EmptyStack;
    std::vector<model::FrameId> frames;
    for (const model::FrameId* f = from.stackBegin(id); f != from.stackEnd(id); ++f) {
        const model::Frame& fr = from.frame(*f);
        frames.push_back(m_interner->frame(m_out.strings.intern(from.str(fr.name)),
                                           m_out.strings.intern(from.str(fr.filename)), fr.line));
    }
    return m_interner->stack(frames);
}

void RecordingBuilder::adoptStacks(const RecordingBuilder& from)
{
    for (const auto& [id, stackId] : from.m_stacks)
        m_stacks[id] = copyStack(from.m_out, stackId);
}

void RecordingBuilder::copyState(const model::Snapshot& state)
{
    std::unordered_map<uint32_t, model::StackId> copied; // state's id -> ours
    auto copy = [&](model::StackId id) {
        auto [it, inserted] = copied.emplace(raw(id), model::EmptyStack);
        if (inserted)
            it->second = copyStack(state, id);
        return it->second;
    };
    for (const model::Segment& from : state.segments) {
        model::Segment seg = from;
        seg.stack = copy(from.stack);
        seg.segmentType = m_out.strings.intern(state.str(from.segmentType));
        seg.extraIndex = UINT32_MAX;
        seg.layout = {};
        const size_t first = std::min<size_t>(from.blockBegin, state.blocks.size());
        const size_t count = std::min<size_t>(from.blockCount, state.blocks.size() - first);
        seg.blockBegin = uint32_t(m_out.blocks.size());
        seg.blockCount = uint32_t(count);
        for (size_t b = first; b < first + count; ++b) {
            model::Block block = state.blocks[b];
            block.stack = copy(block.stack);
            block.stateName = model::EmptyString;
            block.layout = {};
            block.historyCount = 0;
            block.hasHistory = false;
            block.extraIndex = UINT32_MAX;
            m_out.blocks.push_back(block);
        }
        m_out.segments.push_back(seg);
    }
    for (const int64_t stream : state.streams)
        if (m_numbering.addStream(stream))
            m_out.streams.push_back(stream);
    for (const model::Segment& seg : m_out.segments)
        if (m_numbering.addStream(seg.stream))
            m_out.streams.push_back(seg.stream);
    m_out.allocatorSettings = state.allocatorSettings;
}

model::TraceEntry RecordingBuilder::entry(const model::TraceEvent& event)
{
    // The agent's unsigned fields as the model's signed ones, bit for bit (an address or a stream handle at or
    // above 2^63 keeps its bits; model/snapshot.h).
    model::TraceEntry e;
    e.action = event.action;
    e.hasFrames = true;
    const int64_t stream = int64_t(event.stream);
    e.addr = model::DeviceAddr(event.addr);
    e.size = model::ByteCount(event.size);
    e.timeUs = int64_t(event.timeUs);
    // An entry's rarely varying fields are its form (model/snapshot.h): a recording has one per stream.
    e.form = m_out.entryForms.intern({ .stream = stream, .compileContext = m_noContext });
    e.stack = stack(event.stack);
    // Address versions and stream numbers by the one rule (model::TraceNumbering, after
    // torch/utils/viz/MemoryViz.js annotate_snapshot), so a recorded snapshot equals its own pickle read back.
    e.version = m_numbering.version(e.action, e.addr);
    if (m_numbering.addStream(stream))
        m_out.streams.push_back(stream);
    return e;
}

void RecordingBuilder::annotate(const Note& note)
{
    model::Annotation a;
    a.stage = note.stage;
    a.stageName = note.stage == model::Annotation::Stage::Start ? m_start : m_end;
    a.name = m_out.strings.intern(note.name);
    a.device = note.device;
    a.timeUs = int64_t(note.timeUs);
    m_out.annotations.push_back(a);
    m_out.hasAnnotationsKey = true;
}

void RecordingBuilder::writeState(const model::EventTrace::Devices& devices, StackKeys keys, model::Snapshot& out) const
{
    const model::StringId large = out.strings.intern("large");
    const model::StringId small = out.strings.intern("small");
    // The versions the trace leaves: a copy, so that writing a state changes nothing for the entries that follow.
    model::TraceNumbering numbering = m_numbering;
    auto stackOf
        = [&](uint64_t key) { return keys == StackKeys::Snapshot ? model::StackId { uint32_t(key) } : stack(key); };
    for (size_t d = 0; d < devices.size(); ++d) {
        const auto& freeBlocks = devices[d].free.blocks();
        for (const auto& [address, seg] : devices[d].segments) {
            model::Segment s;
            s.device = int32_t(d);
            s.address = model::DeviceAddr(address);
            s.totalSize = model::ByteCount(seg.size);
            s.stream = int64_t(seg.stream);
            s.segmentType = seg.isSmall ? small : large;
            s.poolId = { seg.poolFirst, seg.poolSecond };
            s.isExpandable = seg.isExpandable;
            s.hasFrames = true;
            s.stack = stackOf(seg.stack);
            s.version = numbering.segmentVersion(s.address);
            if (numbering.addStream(s.stream))
                out.streams.push_back(s.stream);
            s.blockBegin = uint32_t(out.blocks.size());
            auto inactiveBlock = [&](uint64_t from, uint64_t to, uint64_t requested) {
                model::Block b;
                b.address = model::DeviceAddr(from);
                b.size = model::ByteCount(to - from);
                b.requestedSize = model::ByteCount(requested); // stale: the last user's (PyTorch keeps it)
                b.state = model::BlockState::Inactive;
                b.hasFrames = b.hasRequestedSize = b.hasAddress = true;
                b.version = numbering.blockVersion(b.address);
                out.blocks.push_back(b);
            };
            // The free space in [from, to): the free blocks there (with their requests), and anything they do not
            // cover (only after inconsistent events) as free blocks of no known request.
            auto inactive = [&](uint64_t from, uint64_t to) {
                for (auto it = freeBlocks.lower_bound(model::DeviceAddr(from));
                     it != freeBlocks.end() && uint64_t(it->first) < to && from < to; ++it) {
                    const uint64_t start = uint64_t(it->first), end = std::min(uint64_t(it->second.end), to);
                    if (start > from)
                        inactiveBlock(from, start, 0);
                    inactiveBlock(start, end, uint64_t(it->second.requested));
                    from = end;
                }
                if (from < to)
                    inactiveBlock(from, to, 0);
            };
            uint64_t cursor = address;
            for (const auto& [addr, blk] : seg.blocks) {
                if (addr > cursor)
                    inactive(cursor, addr);
                model::Block b;
                b.address = model::DeviceAddr(addr);
                b.size = model::ByteCount(blk.size);
                b.requestedSize = model::ByteCount(blk.requestedSize);
                b.state = blk.state == 2 ? model::BlockState::ActivePendingFree : model::BlockState::ActiveAllocated;
                b.stack = stackOf(blk.stack);
                b.hasFrames = b.hasRequestedSize = b.hasAddress = true;
                b.version = numbering.blockVersion(b.address);
                out.blocks.push_back(b);
                // Sums in unsigned arithmetic: a corrupt requested size must not overflow a signed sum.
                s.activeSize = model::ByteCount(uint64_t(s.activeSize) + blk.size);
                s.requestedSize = model::ByteCount(uint64_t(s.requestedSize) + blk.requestedSize);
                if (blk.state != 2)
                    s.allocatedSize = model::ByteCount(uint64_t(s.allocatedSize) + blk.size);
                cursor = addr + blk.size;
            }
            if (cursor < address + seg.size)
                inactive(cursor, address + seg.size);
            s.blockCount = uint32_t(out.blocks.size()) - s.blockBegin;
            out.segments.push_back(s);
        }
    }
}

} // namespace memscope::viewer
