// Recorder (recorder.h): a state reply loaded into model::EventTrace, events applied to it in sequence order, and
// the snapshot made from them in the shape PyTorch's torch.cuda.memory._snapshot() has. One thread (the Recorder's
// owner) calls it.
#include "viewer/recorder.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace memscope::viewer {

namespace {

    model::Action actionOf(EventType type)
    {
        switch (type) {
        case EventType::Alloc:
            return model::Action::Alloc;
        case EventType::FreeRequested:
            return model::Action::FreeRequested;
        case EventType::FreeCompleted:
            return model::Action::FreeCompleted;
        case EventType::SegmentAlloc:
            return model::Action::SegmentAlloc;
        case EventType::SegmentFree:
            return model::Action::SegmentFree;
        case EventType::SegmentMap:
            return model::Action::SegmentMap;
        case EventType::SegmentUnmap:
            return model::Action::SegmentUnmap;
        case EventType::Oom:
            return model::Action::Oom;
        case EventType::Heartbeat:
        case EventType::Count:
            break;
        }
        return model::Action::Unknown;
    }

    // Whether [address, address + size) lies below 2^63, as the model's addresses and sizes (signed 64-bit:
    // model::DeviceAddr, model::ByteCount) hold it. No allocator produces a range beyond (a CUDA device's addresses
    // and memory are far below): a record that claims one is a broken or hostile agent's, and is a misfit here, as
    // tests/fuzz/fuzz_wire.cpp found such records breaking its invariant that blocks tile their segment (issue 34).
    bool fitsTheModel(uint64_t address, uint64_t size)
    {
        constexpr uint64_t Limit = uint64_t(1) << 63;
        return address < Limit && size < Limit && address + size <= Limit;
    }

} // namespace

model::EventTrace::Devices Recorder::loadState(const DecodedState& state)
{
    using Segment = model::EventTrace::Segment;
    using Block = model::EventTrace::Block;
    model::EventTrace::Devices devices;
    auto deviceOf = [&](uint8_t d) -> model::EventTrace::Device& {
        if (d >= devices.size())
            devices.resize(size_t(d) + 1);
        return devices[d];
    };
    auto misfit = [&] {
        ++m_stats.inconsistent;
        ++m_stats.unsynced;
    };
    for (const SegmentRecord& r : state.segments) {
        if (!fitsTheModel(r.address, r.size)) {
            misfit();
            continue;
        }
        Segment s;
        s.size = r.size;
        s.stream = r.stream;
        s.poolFirst = r.poolFirst;
        s.poolSecond = r.poolSecond;
        s.isExpandable = r.isExpandable != 0;
        s.isSmall = r.isSmall != 0;
        if (model::rangeIsFree(deviceOf(r.device).segments, r.address, r.size))
            deviceOf(r.device).segments.emplace(uint64_t(r.address), std::move(s));
        else
            misfit();
    }
    // Inactive blocks by device and address, with the request each carries.
    std::vector<std::map<uint64_t, std::pair<uint64_t, uint64_t>>> inactive; // address -> end, requested
    for (const BlockRecord& r : state.blocks) {
        if (!fitsTheModel(r.address, r.size) || !fitsTheModel(0, r.requestedSize)) {
            misfit();
            continue;
        }
        if (r.state == 0) {
            if (r.device >= inactive.size())
                inactive.resize(size_t(r.device) + 1);
            if (r.address + r.size > r.address)
                inactive[r.device][uint64_t(r.address)] = { r.address + r.size, uint64_t(r.requestedSize) };
            continue;
        }
        // (Copies: a packed record's fields are not aligned for the references the map's lookups bind.)
        const uint64_t address = r.address, size = r.size;
        auto& segments = deviceOf(r.device).segments;
        auto it = segments.upper_bound(address);
        Segment* seg = nullptr;
        if (it != segments.begin()) {
            --it;
            if (address < it->first + it->second.size && size <= it->first + it->second.size - address)
                seg = &it->second;
        }
        if (seg && model::rangeIsFree(seg->blocks, address, size))
            seg->blocks.emplace(address, Block { size, r.requestedSize, r.state, stackKey(r.stackId) });
        else
            misfit();
    }
    // The space between active blocks is free: as the inactive blocks the state lists there (PyTorch leaves the
    // last user's request on each, c10/cuda/CUDACachingAllocator.cpp: free_block), or, where they do not tile it
    // (an agent that lists none), one free block of no known request.
    for (size_t d = 0; d < devices.size(); ++d) {
        static const std::map<uint64_t, std::pair<uint64_t, uint64_t>> none;
        const auto& listed = d < inactive.size() ? inactive[d] : none;
        model::FreeBlocks& free = devices[d].free;
        auto gap = [&](uint64_t from, uint64_t to) {
            std::vector<std::pair<uint64_t, std::pair<uint64_t, uint64_t>>> tiles;
            uint64_t at = from;
            for (auto it = listed.find(from); it != listed.end() && it->first == at && it->second.first <= to; ++it) {
                tiles.emplace_back(it->first, it->second);
                at = it->second.first;
            }
            if (at != to) {
                free.insert(model::DeviceAddr(from), model::DeviceAddr(to), 0);
                return;
            }
            for (const auto& [start, block] : tiles)
                free.insert(model::DeviceAddr(start), model::DeviceAddr(block.first), model::ByteCount(block.second));
        };
        for (const auto& [address, seg] : devices[d].segments) {
            uint64_t cursor = address;
            for (const auto& [addr, blk] : seg.blocks) {
                if (addr > cursor)
                    gap(cursor, addr);
                cursor = addr + blk.size;
            }
            if (cursor < address + seg.size)
                gap(cursor, address + seg.size);
        }
    }
    return devices;
}

bool Recorder::setState(const DecodedState& state)
{
    if (started())
        return false;
    m_hasState = true;
    m_hello = state.hello;
    m_lastSequence = state.header.lastSequence;
    m_stats.joinedAfter = state.header.lastSequence;
    m_entries.clear();
    m_deltaEntries = 0;
    m_trace.setState(loadState(state));
    m_joinDevices = std::make_shared<const model::EventTrace::Devices>(m_trace.devices());
    return true;
}

void Recorder::addMissing(uint64_t gaps, uint64_t missing)
{
    if (gaps == 0 && missing == 0)
        return;
    m_stats.gaps += gaps;
    m_stats.missing += missing;
    m_stats.unsynced += std::max<uint64_t>(gaps, 1);
}

void Recorder::addLost(uint64_t records)
{
    if (records == 0)
        return;
    m_stats.lost += records;
    ++m_stats.unsynced;
}

void Recorder::resync(const DecodedState& fresh, const ResyncReason& reason)
{
    if (!m_hasState) {
        setState(fresh);
        return;
    }
    const bool restart = reason.kind == ResyncReason::Kind::Restart;
    const uint32_t previousPid = m_hello.pid;
    const uint64_t startUs = m_lastTimeNs / 1000;
    const uint64_t timeUs = std::max(reason.timeNs == 0 ? m_lastTimeNs : reason.timeNs, m_lastTimeNs) / 1000;
    const size_t entriesBefore = m_entries.size();
    if (restart)
        ++m_epoch; // the new job's stack ids are its own (stackKey)
    model::EventTrace::Devices target = loadState(fresh);
    const size_t devices = std::max(m_trace.devices().size(), target.size());
    // A restarted job is another allocator: everything the old one held goes, at the moment it was last heard
    // of (its memory drops to zero where it died, not when the new run was first heard), and the new run's state
    // comes at its own time. Stack keys compare (both states use stackKey()), and the Recorder followed every
    // event it applied, so its unmapped space is known.
    model::EventTrace::Resync how;
    how.restart = restart;
    how.startUs = startUs;
    how.timeUs = timeUs;
    how.compareStacks = true;
    how.unmappedKnown = true;
    m_trace.resync(std::move(target), how, m_entries);

    const std::string name = restart
        ? "memscope: job restarted (pid " + std::to_string(fresh.hello.pid) + ", was " + std::to_string(previousPid)
            + ")"
        : "memscope: resync after " + std::to_string(reason.missing + reason.lost) + " missing records";
    const size_t annotated = std::max<size_t>({ size_t(1), fresh.hello.deviceCount, m_hello.deviceCount, devices });
    for (size_t d = 0; d < annotated; ++d) {
        m_notes.push_back(Note { model::Annotation::Stage::Start, int32_t(d), std::min(startUs, timeUs), name });
        m_notes.push_back(Note { model::Annotation::Stage::End, int32_t(d), timeUs, name });
    }

    m_hello = fresh.hello;
    m_lastSequence = fresh.header.lastSequence;
    m_lastTimeNs = std::max(m_lastTimeNs, timeUs * 1000);
    m_started = true;
    m_stats.gaps += reason.gaps;
    m_stats.missing += reason.missing;
    m_stats.lost += reason.lost;
    m_stats.synthetic += m_entries.size() - entriesBefore;
    ++m_stats.resyncs;
    if (restart)
        ++m_stats.restarts;
    m_stats.unsynced = 0;
}

void Recorder::addEvents(std::span<const EventRecord> events)
{
    if (!m_hasState)
        return;
    for (const EventRecord& e : events)
        apply(e);
}

void Recorder::addStackDef(const DecodedStackDef& def)
{
    if (!def.ok() || def.header.stackId == 0)
        return;
    std::vector<StackFrame> frames;
    frames.reserve(def.frames.size());
    for (const DecodedFrame& f : def.frames)
        frames.push_back(StackFrame { std::string(f.name.empty() ? std::string_view("??") : f.name),
                                      std::string(f.file.empty() ? std::string_view("??") : f.file), f.line });
    m_stacks[stackKey(def.header.stackId)] = std::make_shared<const std::vector<StackFrame>>(std::move(frames));
    m_newStacks.push_back(stackKey(def.header.stackId));
}

void Recorder::setGoodbye(const Goodbye& goodbye) { m_stats.agentLost = goodbye.lost; }

void Recorder::apply(const EventRecord& e)
{
    m_lastSequence = e.sequence;
    m_lastTimeNs = std::max(m_lastTimeNs, uint64_t(e.timeNs));
    m_started = true;
    if (e.type == uint8_t(EventType::Heartbeat) || e.type >= uint8_t(EventType::Count)) {
        ++m_stats.heartbeats;
        return;
    }
    // An OOM's address is the device's free bytes and its size the request (wire/protocol.h): no range, but each
    // a field of the model all the same.
    const bool oom = e.type == uint8_t(EventType::Oom);
    if (!fitsTheModel(e.address, oom ? 0 : e.size) || !fitsTheModel(0, e.size) || !fitsTheModel(0, e.requestedSize)) {
        ++m_stats.inconsistent;
        ++m_stats.unsynced;
        return;
    }
    // The engine's event: for an alloc, the request as the trace's size and the wire size as the block's bytes.
    const bool alloc = e.type == uint8_t(EventType::Alloc);
    Entry ev { actionOf(EventType(e.type)),
               e.device,
               e.address,
               alloc ? uint64_t(e.requestedSize) : uint64_t(e.size),
               e.stream,
               e.timeNs / 1000,
               stackKey(e.stackId) };
    if (alloc)
        ev.blockSize = e.size;
    ev.poolFirst = e.poolFirst;
    ev.poolSecond = e.poolSecond;
    if (!m_trace.apply(ev)) {
        ++m_stats.inconsistent;
        ++m_stats.unsynced;
        return;
    }
    ++m_stats.applied;
    m_entries.push_back(ev);
}

void Recorder::addNote(const DecodedNote& note)
{
    m_notes.push_back(Note { note.header.stage == 0 ? model::Annotation::Stage::Start : model::Annotation::Stage::End,
                             int32_t(note.header.device), note.header.timeNs / 1000, note.name });
}

void Recorder::setSettings(const DecodedSettings& settings)
{
    model::Value dict;
    dict.kind = model::Value::Kind::Dict;
    for (const DecodedSettings::Setting& s : settings.settings) {
        model::Value v;
        switch (s.type) {
        case 'i':
            v.kind = model::Value::Kind::Int;
            v.integer = std::strtoll(s.value.c_str(), nullptr, 10);
            break;
        case 'f':
            v.kind = model::Value::Kind::Float;
            v.real = std::strtod(s.value.c_str(), nullptr);
            break;
        case 'b':
            v.kind = model::Value::Kind::Bool;
            v.boolean = s.value == "1";
            break;
        case 'd': {
            v.kind = model::Value::Kind::Dict;
            std::string_view rest = s.value;
            while (!rest.empty()) {
                const size_t comma = rest.find(',');
                const std::string_view pair = rest.substr(0, comma);
                const size_t colon = pair.rfind(':');
                model::Value n;
                n.kind = model::Value::Kind::Int;
                n.integer = std::strtoll(std::string(pair.substr(colon + 1)).c_str(), nullptr, 10);
                v.entries.emplace_back(std::string(pair.substr(0, colon)), std::move(n));
                rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
            }
            break;
        }
        default:
            v.kind = model::Value::Kind::String;
            v.text = s.value;
            break;
        }
        dict.entries.emplace_back(s.key, std::move(v));
    }
    m_settings = std::move(dict);
    m_newSettings = true;
}

model::Snapshot Recorder::snapshot() const
{
    return build(m_trace.devices(), m_entries, m_notes, m_stacks, m_settings, m_hello.deviceCount);
}

Recorder::History Recorder::takeHistory()
{
    History h;
    m_joinDevices = std::make_shared<const model::EventTrace::Devices>(m_trace.devices());
    h.m_devices = m_joinDevices; // the state now: the part's final one, and the next part's join state
    h.m_entries = std::exchange(m_entries, {}); // moved: the memory goes with the history
    h.m_notes = std::exchange(m_notes, {});
    h.m_stacks = m_stacks;
    h.m_settings = m_settings;
    h.m_deviceCount = m_hello.deviceCount;
    m_deltaEntries = m_deltaNotes = 0;
    return h;
}

model::Snapshot Recorder::History::snapshot() const
{
    return build(*m_devices, m_entries, m_notes, m_stacks, m_settings, m_deviceCount);
}

model::Snapshot Recorder::joinSnapshot() const
{
    return build(*m_joinDevices, {}, {}, m_stacks, m_settings, m_hello.deviceCount);
}

void Recorder::takeDelta(Delta& out)
{
    out.entries.assign(m_entries.begin() + ptrdiff_t(std::min(m_deltaEntries, m_entries.size())), m_entries.end());
    m_deltaEntries = m_entries.size();
    out.notes.assign(m_notes.begin() + ptrdiff_t(std::min(m_deltaNotes, m_notes.size())), m_notes.end());
    m_deltaNotes = m_notes.size();
    out.stacks.clear();
    for (uint64_t key : m_newStacks)
        if (auto it = m_stacks.find(key); it != m_stacks.end())
            out.stacks.emplace_back(key, *it->second);
    m_newStacks.clear();
    out.settings.reset();
    if (std::exchange(m_newSettings, false))
        out.settings = m_settings;
    if (!m_keepTaken) {
        // The taker keeps the history: the Recorder's memory stays the state, not the run.
        m_entries.clear();
        m_notes.clear();
        m_deltaEntries = m_deltaNotes = 0;
        m_joinDevices = std::make_shared<const model::EventTrace::Devices>(m_trace.devices());
    }
}

// The snapshot of `devices` with `entries` as its trace and `notes` as its annotations, written by the one writer of
// recordings (viewer/recordingbuilder.h), which the app's live document uses too. Static: a History builds with it
// on another thread.
model::Snapshot Recorder::build(const model::EventTrace::Devices& devices, std::span<const Entry> entries,
                                std::span<const Note> notes, const StackDefs& stacks, const model::Value& settings,
                                size_t deviceCount)
{
    model::Snapshot s;
    RecordingBuilder builder(s);
    // Only the stacks the snapshot uses are interned.
    auto use = [&](uint64_t key) {
        if (key == 0 || builder.hasStack(key))
            return;
        if (auto def = stacks.find(key); def != stacks.end())
            builder.defineStack(key, *def->second);
    };
    deviceCount = std::max(deviceCount, devices.size());
    for (const Entry& e : entries)
        deviceCount = std::max<size_t>(deviceCount, size_t(e.device) + 1);
    s.deviceTraces.resize(deviceCount);
    s.hasDeviceTraces = true;
    // Numbered device after device, each trace in order, then the final segments: as a file of it read back is.
    for (size_t d = 0; d < deviceCount; ++d) {
        for (const Entry& e : entries) {
            if (e.device != d)
                continue;
            use(e.stack);
            s.deviceTraces[d].push_back(builder.entry(e));
        }
    }
    for (const model::EventTrace::Device& device : devices) {
        for (const auto& [address, seg] : device.segments) {
            use(seg.stack);
            for (const auto& [at, block] : seg.blocks)
                use(block.stack);
        }
    }
    builder.writeState(devices, RecordingBuilder::StackKeys::Source, s);
    for (const Note& n : notes)
        builder.annotate(n);
    s.hasAnnotationsKey = true;
    s.allocatorSettings = settings;
    return s;
}

model::Extras recordingExtras(const RecordingInfo& info)
{
    auto integer = [](int64_t v) {
        model::Value out;
        out.kind = model::Value::Kind::Int;
        out.integer = v;
        return out;
    };
    auto count = [&](uint64_t v) { return integer(int64_t(std::min<uint64_t>(v, INT64_MAX))); };
    auto text = [](const std::string& v) {
        model::Value out;
        out.kind = model::Value::Kind::String;
        out.text = v;
        return out;
    };
    model::Value v;
    v.kind = model::Value::Kind::Dict;
    v.entries.emplace_back("format", integer(1));
    v.entries.emplace_back("endpoint", text(info.endpoint));
    v.entries.emplace_back("host", text(info.host));
    v.entries.emplace_back("pid", integer(info.pid));
    v.entries.emplace_back("devices", integer(info.devices));
    v.entries.emplace_back("events", count(info.events));
    v.entries.emplace_back("lost", count(info.lost));
    v.entries.emplace_back("missing", count(info.missing));
    v.entries.emplace_back("gaps", count(info.gaps));
    v.entries.emplace_back("resyncs", count(info.resyncs));
    v.entries.emplace_back("restarts", count(info.restarts));
    v.entries.emplace_back("part", integer(info.part));
    v.entries.emplace_back("saved_at_us", integer(info.savedAtUs));
    if (!info.ended.empty())
        v.entries.emplace_back("ended", text(info.ended));
    model::Extras out;
    out.emplace_back("memscope_recording", std::move(v));
    return out;
}

std::optional<RecordingInfo> recordingInfoOf(const model::Snapshot& snapshot)
{
    for (const auto& [key, value] : snapshot.topLevelExtras) {
        if (key != "memscope_recording" || value.kind != model::Value::Kind::Dict)
            continue;
        RecordingInfo info;
        // The lambdas capture a plain reference, not the structured binding: capturing one is C++20 (P1091R3,
        // P1381R1), which clang implements only from 16 (Debian 12 has 14).
        const model::Value& dict = value;
        auto integer = [&dict](const char* k, auto& out) {
            const model::Value* v = dict.find(k);
            if (v && v->kind == model::Value::Kind::Int && v->integer >= 0)
                out = static_cast<std::remove_reference_t<decltype(out)>>(v->integer);
        };
        auto text = [&dict](const char* k, std::string& out) {
            const model::Value* v = dict.find(k);
            if (v && v->kind == model::Value::Kind::String)
                out = v->text;
        };
        text("endpoint", info.endpoint);
        text("host", info.host);
        text("ended", info.ended);
        integer("pid", info.pid);
        integer("devices", info.devices);
        integer("events", info.events);
        integer("lost", info.lost);
        integer("missing", info.missing);
        integer("gaps", info.gaps);
        integer("resyncs", info.resyncs);
        integer("restarts", info.restarts);
        integer("part", info.part);
        integer("saved_at_us", info.savedAtUs);
        return info;
    }
    return std::nullopt;
}

} // namespace memscope::viewer
