// ValueTree -> model::Snapshot. See snapshotbuilder.h.
//
// The schema: torch/csrc/cuda/memory_snapshot.cpp (_memory_snapshot_pickled) writes the dict keys; the legacy
// block layout (history/real_size) and the bare-list top level are handled as torch/cuda/_memory_viz.py does.
#include "io/snapshotbuilder.h"

#include "io/schema.h"

#include "model/consistency.h"
#include "model/eventtrace.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <unordered_map>

namespace memscope::io {

using namespace memscope::model;

namespace {

const char* typeName(NodeType t)
{
    switch (t) {
    case NodeType::None: return "None";
    case NodeType::Bool: return "a bool";
    case NodeType::Int:
    case NodeType::UInt: return "an int";
    case NodeType::BigInt: return "an int wider than 64 bits";
    case NodeType::Float: return "a float";
    case NodeType::String: return "a string";
    case NodeType::Bytes: return "bytes";
    case NodeType::List: return "a list";
    case NodeType::Tuple: return "a tuple";
    case NodeType::Dict: return "a dict";
    }
    return "?";
}

// Keys the builder knows, across all object kinds.
using Key = schema::Field;

Key keyFor(std::string_view k) { return schema::fieldFor(k); }

model::Action actionFor(std::string_view a)
{
    using A = model::Action;
    if (a == "alloc")
        return A::Alloc;
    if (a == "free_requested")
        return A::FreeRequested;
    if (a == "free_completed")
        return A::FreeCompleted;
    if (a == "segment_alloc")
        return A::SegmentAlloc;
    if (a == "segment_free")
        return A::SegmentFree;
    if (a == "segment_map")
        return A::SegmentMap;
    if (a == "segment_unmap")
        return A::SegmentUnmap;
    if (a == "snapshot")
        return A::Snapshot;
    if (a == "oom")
        return A::Oom;
    // "free" is what PyTorch before 2.1 wrote for a free; it meant free_completed.
    if (a == "free")
        return A::FreeCompleted;
    return A::Unknown;
}

BlockState stateFor(std::string_view s)
{
    if (s == "active_allocated")
        return BlockState::ActiveAllocated;
    if (s == "active_pending_free")
        return BlockState::ActivePendingFree;
    if (s == "inactive")
        return BlockState::Inactive;
    return BlockState::Unknown;
}

// Where an object is, for a warning: a string, or a callable that makes one (only when a warning needs it). A
// non-owning reference of one type, so the hot paths stay small and the warnings are made out of line.
class WhereRef {
public:
    WhereRef(const std::string& text)
        : m_object(&text)
        , m_call([](const void* o) { return *static_cast<const std::string*>(o); })
    {
    }
    template <typename F>
        requires std::is_invocable_r_v<std::string, const F&>
    WhereRef(const F& f)
        : m_object(&f)
        , m_call([](const void* o) { return std::string((*static_cast<const F*>(o))()); })
    {
    }
    std::string operator()() const { return m_call(m_object); }

private:
    const void* m_object;
    std::string (*m_call)(const void*);
};

class DirectTraces;

class Builder {
public:
    Builder(const ValueTree& tree, Snapshot& snapshot, DirectTraces* direct = nullptr)
        : m_tree(tree)
        , m_s(snapshot)
        , m_interner(snapshot)
        , m_direct(direct)
    {
    }

    // `entriesDone`, when set, hears the share of the trace entries the last pass over them has done (every 2^20
    // entries); false from it stops the build with ErrorCode::Cancelled.
    Error build(NodeId root, const std::function<bool(double entriesDone)>& entriesDone = {});
    // The direct path's entry (picklereader.h), into this builder's snapshot's tables: what traceEntry() makes of
    // the same dict, or false for anything traceEntry() would warn about, refuse or keep as an extra.
    bool directEntry(std::span<FastItem> items, TraceEntry& e);
    // True when build() gave up on a direct path's result (then its Error means nothing).
    bool declined() const { return m_declined; }

private:
    struct KeyInfo {
        Key key;
        StringId name;
    };

    // Resolves a dict key node. A pickle shares its key strings through the memo, so a small direct-mapped cache
    // by node id answers almost every lookup without hashing the text.
    bool keyInfo(NodeId keyNode, KeyInfo& info)
    {
        if (m_tree.type(keyNode) != NodeType::String)
            return false;
        KeySlot& slot = m_keyCache[keyNode % CacheSlots];
        if (slot.node == keyNode) {
            info = slot.info;
            return true;
        }
        const std::string_view text = m_tree.string(keyNode);
        info = KeyInfo { keyFor(text), m_s.strings.intern(text) };
        slot = KeySlot { keyNode, info };
        return true;
    }

    Error notSnapshot(const std::string& where, const std::string& what) const
    {
        Error e;
        e.code = ErrorCode::NotSnapshot;
        e.message = "not a memory snapshot: " + where + (where.empty() ? "" : ": ") + what;
        return e;
    }
    Error wrongType(const std::string& where, std::string_view key, NodeId node, const char* expected) const
    {
        return notSnapshot(where, "'" + std::string(key) + "' is " + typeName(m_tree.type(node)) + ", expected "
                               + expected);
    }

    // An int64_t field (model/snapshot.h says which fields these are, and why): an Int or Bool node is its value. A
    // UInt node (>= 2^63) or a BigInt node (wider than 64 bits) cannot be one: the field keeps its default and
    // `lost` is set, for the caller to name it in a LostInteger warning (lostInteger). False only for a node that
    // is not an integer at all. Runs for every number of every entry, so it only reads: the warning is made out of
    // line, once per key loop (callgrind on big_trace: passing the warning's words in here cost 3 % of a load).
    [[gnu::always_inline]] bool intField(NodeId n, int64_t& out, bool& lost) const
    {
        const NodeType t = m_tree.type(n);
        if (t == NodeType::Int || t == NodeType::Bool) [[likely]] {
            out = m_tree.integer(n);
            return true;
        }
        lost = t == NodeType::UInt || t == NodeType::BigInt;
        return lost;
    }
    // intField, then the warning when the field is lost: for objects that are few (segments, blocks, annotations).
    bool intField(NodeId n, int64_t& out, std::string_view object, std::string_view key, WhereRef where)
    {
        bool lost = false;
        const bool ok = intField(n, out, lost);
        if (lost)
            lostInteger(n, object, key, where);
        return ok;
    }
    [[gnu::noinline, gnu::cold]] void lostInteger(NodeId n, std::string_view object, std::string_view key,
                                                  WhereRef where)
    {
        m_warnings.add(LoadWarning::Kind::LostInteger, [&] {
            std::string text = "the " + std::string(object) + " " + std::string(key);
            if (m_tree.type(n) == NodeType::BigInt)
                return text + " at byte " + std::to_string(m_tree.bigIntOffset(n)) + " (" + where()
                    + ") is wider than 64 bits";
            return text + " (" + where() + ") is " + std::to_string(m_tree.unsignedInteger(n))
                + ", beyond the int64 memscope keeps it in";
        });
    }

    bool asString(NodeId n, StringId& out)
    {
        const NodeType t = m_tree.type(n);
        if (t != NodeType::String && t != NodeType::Bytes)
            return false;
        out = internText(m_tree.string(n));
        return true;
    }
    StringId internText(std::string_view text)
    {
        // PyTorch writes a fresh string object for most values ('alloc', 'N/A', ''), so they are not shared
        // through the memo: a small cache keyed by a cheap content hash avoids hashing every one in full.
        uint64_t head = 0;
        if (!text.empty())
            std::memcpy(&head, text.data(), std::min<size_t>(text.size(), 8));
        StringSlot& slot = m_stringCache[(((head ^ text.size()) * 0x9E3779B97F4A7C15ull) >> 54) % CacheSlots];
        if (slot.node == NoNode || m_s.str(slot.id) != text)
            slot = StringSlot { 0, m_s.strings.intern(text) };
        return slot.id;
    }

    // A generic value (allocator settings, unknown keys) as a model::Value. What holds an integer wider than 64
    // bits is left out with a warning: the innermost dict entry, or the whole value (then `lost` is set and the
    // caller leaves out its key). False when it is nested too deeply or too large.
    bool genericValue(NodeId node, std::string_view key, Value& out, bool& lost, WhereRef where)
    {
        ValueConversion conversion;
        conversion.lostEntry = [&](std::string_view entry, uint64_t offset) {
            m_warnings.add(LoadWarning::Kind::LostInteger, [&] {
                return "the entry '" + std::string(entry) + "' of '" + std::string(key) + "' at byte "
                    + std::to_string(offset) + " (" + where() + ") is wider than 64 bits";
            });
        };
        const ValueResult r = toValue(m_tree, node, out, conversion);
        lost = r == ValueResult::LostInteger;
        if (lost) {
            m_warnings.add(LoadWarning::Kind::LostInteger, [&] {
                return "the value of '" + std::string(key) + "' at byte " + std::to_string(conversion.lostOffset)
                    + " (" + where() + ") is an integer wider than 64 bits, or holds one";
            });
        }
        return r != ValueResult::TooLarge;
    }

    // Unknown keys: kept as owned values in Snapshot::extras. `keys` is the object's key order so far, ending with
    // `key`: a value that is lost (genericValue) takes its key out of it.
    Error keepExtra(uint32_t& extraIndex, StringId key, NodeId value, const std::string& where,
                    std::vector<StringId>& keys)
    {
        Value v;
        bool lost = false;
        if (!genericValue(value, m_s.str(key), v, lost, where))
            return notSnapshot(where, "the value of '" + std::string(m_s.str(key)) + "' is nested too deeply or too large");
        if (lost) {
            keys.pop_back();
            return {};
        }
        if (extraIndex == UINT32_MAX) {
            extraIndex = static_cast<uint32_t>(m_s.extras.size());
            m_s.extras.emplace_back();
        }
        m_s.extras[extraIndex].emplace_back(std::string(m_s.str(key)), std::move(v));
        return {};
    }

    LayoutId layout(const std::vector<StringId>& keys)
    {
        if (keys == m_lastLayoutKeys)
            return m_lastLayout;
        m_lastLayoutKeys = keys;
        m_lastLayout = m_s.layouts.intern(keys);
        return m_lastLayout;
    }

    // `where` is called only to describe an error (building the text per entry would dominate loading time).
    template <typename Where>
    Error stack(NodeId framesNode, StackId& out, const Where& where);
    // The stack of the frame dicts in m_frameNodes.
    template <typename Where>
    Error stackOfFrameNodes(StackId& out, const Where& where);
    Error stack(NodeId framesNode, StackId& out, const std::string& where)
    {
        return stack(framesNode, out, [&] { return where; });
    }
    Error segment(NodeId node, size_t index);
    Error block(NodeId node, Segment& seg, DeviceAddr& offset, const std::string& where);
    Error traceEntry(NodeId node, int device, size_t index, TraceEntry& e);
    Error annotations(NodeId node);

    const ValueTree& m_tree;
    Snapshot& m_s;
    StackInterner m_interner;
    static constexpr size_t CacheSlots = 1024;
    struct KeySlot {
        NodeId node = NoNode;
        KeyInfo info {};
    };
    struct StringSlot {
        NodeId node = NoNode;
        StringId id {};
    };
    std::vector<KeySlot> m_keyCache = std::vector<KeySlot>(CacheSlots);
    std::vector<StringSlot> m_stringCache = std::vector<StringSlot>(CacheSlots);
    std::vector<NodeId> m_frameNodes; // the frame dicts of the list being resolved
    std::vector<NodeId> m_lastFrameNodes; // ... and of the last list resolved, with its stack
    StackId m_lastStack = EmptyStack;
    std::unordered_map<NodeId, FrameId> m_frameByNode;
    std::vector<FrameId> m_frameScratch;
    std::vector<StringId> m_keys;
    std::vector<StringId> m_lastLayoutKeys;
    LayoutId m_lastLayout {};
    WarningCollector m_warnings;

    // The direct path: its entries, and (in the builder that adopts them) its tables' ids mapped to this snapshot's.
    Error decline()
    {
        m_declined = true;
        Error e;
        e.code = ErrorCode::Cancelled;
        return e;
    }
    void adoptTables(const Snapshot& direct);
    void remap(TraceEntry& e) const
    {
        e.stack = StackId { m_stackMap[raw(e.stack)] };
        e.form = FormId { m_formMap[raw(e.form)] };
    }
    DirectTraces* m_direct = nullptr;
    bool m_declined = false;
    bool m_adopted = false;
    std::vector<uint32_t> m_stringMap, m_stackMap, m_formMap;
    std::vector<uint16_t> m_layoutMap;
    std::vector<bool> m_remapDevice;
    std::vector<uint8_t> m_actionById; // directEntry: Action by StringId, Action::Count when not known yet
    struct DirectKey {
        uint32_t key;
        bool keyIsNode;
        KeyInfo info;
    };
    std::vector<DirectKey> m_lastDirectKeys; // directEntry: the last entry's keys, and their layout
    LayoutId m_lastDirectLayout {};
    struct ListStack {
        NodeId list = NoNode;
        uint32_t count = 0;
        StackId stack {};
    };
    std::vector<ListStack> m_stackByList = std::vector<ListStack>(CacheSlots);
};

// The direct path's sink: one trace per list of device_traces, built into tables of its own (a Snapshot that holds
// only strings, frames, stacks and layouts), because the general path interns the segments' strings and stacks
// before the trace's: Builder::build() maps the ids to the final snapshot's in the order the general path would have
// made them, so both paths give the same ids. Lives for one parse and build; one thread.
class DirectTraces final : public TraceSink {
public:
    explicit DirectTraces(const ValueTree& tree)
        : m_builder(tree, m_tables)
    {
    }
    bool entry(NodeId list, std::span<FastItem> items) override
    {
        if (m_last >= m_lists.size() || m_lists[m_last].list != list) {
            m_last = 0;
            while (m_last < m_lists.size() && m_lists[m_last].list != list)
                ++m_last;
            if (m_last == m_lists.size()) {
                m_lists.push_back(List { list, {}, false });
                // Huge pages: a 4 KiB page fault costs about 15 us on a virtual machine here, so the 0.54 GB of a
                // 13.4 M-entry trace cost a second of faults that the prefault thread could not keep ahead of;
                // 2 MiB pages fault 512 times less (memscope-cli stats on that file: 3.6 s -> 2.65 s).
                m_lists.back().trace.setHugePages(true);
            }
        }
        Trace& trace = m_lists[m_last].trace;
        // The entries' fresh pages are made present on another core (model/prefault.h) a few MB ahead of the
        // parse: on a large file their page faults and zeroing were a sixth of the parse thread's time.
        if ((trace.size() & (PrefaultEvery - 1)) == 0)
            trace.prefaultAhead(PrefaultAhead);
        return m_builder.directEntry(items, trace.emplace_back());
    }
    std::string_view text(StringId id) const override { return m_tables.str(id); }

    const Snapshot& tables() const { return m_tables; }
    // The trace of `list`, once; nullptr when `list` is not a list of the direct path. `twice`: it was taken before.
    Trace* take(NodeId list, bool& twice)
    {
        twice = false;
        for (List& l : m_lists) {
            if (l.list != list)
                continue;
            twice = l.taken;
            l.taken = true;
            return &l.trace;
        }
        return nullptr;
    }
    bool allTaken() const
    {
        return std::all_of(m_lists.begin(), m_lists.end(), [](const List& l) { return l.taken; });
    }
private:
    static constexpr size_t PrefaultEvery = size_t(1) << 15; // entries between two requests (2 MiB of entries)
    static constexpr size_t PrefaultAhead = size_t(1) << 18; // entries made present ahead (16 MiB)
    struct List {
        NodeId list;
        Trace trace;
        bool taken;
    };
    Snapshot m_tables;
    Builder m_builder;
    std::vector<List> m_lists;
    size_t m_last = 0;
};

template <typename Where>
Error Builder::stack(NodeId framesNode, StackId& out, const Where& whereFn)
{
    const NodeType t = m_tree.type(framesNode);
    if (t == NodeType::None) {
        out = EmptyStack;
        return {};
    }
    if (t != NodeType::List && t != NodeType::Tuple)
        return wrongType(whereFn(), "frames", framesNode, "a list");
    m_frameNodes.clear();
    m_tree.forEachChild(framesNode, [&](NodeId f) { m_frameNodes.push_back(f); });
    return stackOfFrameNodes(out, whereFn);
}

template <typename Where>
Error Builder::stackOfFrameNodes(StackId& out, const Where& whereFn)
{
    // Consecutive entries usually hold the same (memo-shared) frame dicts: then the stack is the last one.
    if (m_frameNodes == m_lastFrameNodes) {
        out = m_lastStack;
        return {};
    }
    m_frameScratch.clear();
    for (NodeId f : m_frameNodes) {
        if (auto it = m_frameByNode.find(f); it != m_frameByNode.end()) {
            m_frameScratch.push_back(it->second);
            continue;
        }
        if (m_tree.type(f) != NodeType::Dict)
            return notSnapshot(whereFn(), "a frame is " + std::string(typeName(m_tree.type(f))) + ", expected a dict");
        StringId name = EmptyString, filename = EmptyString;
        LineNumber line;
        Error err;
        m_tree.forEachItem(f, [&](NodeId k, NodeId v) {
            KeyInfo ki;
            if (err || !keyInfo(k, ki))
                return;
            switch (ki.key) {
            case Key::Name:
                if (!asString(v, name))
                    err = wrongType(whereFn() + ", frame", "name", v, "a string");
                break;
            case Key::Filename:
                if (!asString(v, filename))
                    err = wrongType(whereFn() + ", frame", "filename", v, "a string");
                break;
            case Key::Line:
                // Kept exactly, unsigned or not (model/snapshot.h, LineNumber).
                switch (m_tree.type(v)) {
                case NodeType::Int:
                case NodeType::Bool:
                    line = LineNumber(m_tree.integer(v));
                    break;
                case NodeType::UInt:
                    line = LineNumber::fromUnsigned(m_tree.unsignedInteger(v));
                    break;
                case NodeType::BigInt:
                    lostInteger(v, "frame", "line", [&] { return whereFn() + ", a frame"; });
                    break;
                default:
                    err = wrongType(whereFn() + ", frame", "line", v, "an int");
                }
                break;
            default: break; // unknown frame keys carry nothing a view can use
            }
        });
        if (err)
            return err;
        const FrameId id = m_interner.frame(name, filename, line);
        m_frameByNode.emplace(f, id);
        m_frameScratch.push_back(id);
    }
    out = m_interner.stack(m_frameScratch);
    m_lastFrameNodes = m_frameNodes;
    m_lastStack = out;
    return {};
}

Error Builder::block(NodeId node, Segment& seg, DeviceAddr& offset, const std::string& where)
{
    if (m_tree.type(node) != NodeType::Dict)
        return notSnapshot(where, "is " + std::string(typeName(m_tree.type(node))) + ", expected a dict");
    Block b;
    std::vector<StringId> keys;
    Error err;
    m_tree.forEachItem(node, [&](NodeId k, NodeId v) {
        KeyInfo ki;
        if (err)
            return;
        if (!keyInfo(k, ki)) {
            err = notSnapshot(where, "a key is " + std::string(typeName(m_tree.type(k))) + ", expected a string");
            return;
        }
        keys.push_back(ki.name);
        const std::string_view kn = m_s.str(ki.name);
        switch (ki.key) {
        case Key::Address:
            b.hasAddress = true;
            if (!intField(v, b.address, "block", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::Size:
            if (!intField(v, b.size, "block", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::RequestedSize:
            b.hasRequestedSize = true;
            if (!intField(v, b.requestedSize, "block", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::State:
            if (!asString(v, b.stateName))
                err = wrongType(where, kn, v, "a string");
            else
                b.state = stateFor(m_s.str(b.stateName));
            break;
        case Key::Frames:
            b.hasFrames = true;
            err = stack(v, b.stack, where);
            break;
        case Key::History: {
            if (m_tree.type(v) != NodeType::List) {
                err = wrongType(where, kn, v, "a list");
                break;
            }
            b.hasHistory = true;
            b.historyBegin = static_cast<uint32_t>(m_s.history.size());
            m_tree.forEachChild(v, [&](NodeId h) {
                if (err)
                    return;
                if (m_tree.type(h) != NodeType::Dict) {
                    err = notSnapshot(where, "a history item is not a dict");
                    return;
                }
                HistoryItem item;
                m_tree.forEachItem(h, [&](NodeId hk, NodeId hv) {
                    KeyInfo hki;
                    if (err || !keyInfo(hk, hki))
                        return;
                    if (hki.key == Key::Addr && !intField(hv, item.addr, "history", "addr", where))
                        err = wrongType(where + ", history", "addr", hv, "an int");
                    else if (hki.key == Key::RealSize
                             && !intField(hv, item.realSize, "history", "real_size", where))
                        err = wrongType(where + ", history", "real_size", hv, "an int");
                    else if (hki.key == Key::Frames) {
                        item.hasFrames = true;
                        err = stack(hv, item.stack, where + ", history");
                    }
                });
                m_s.history.push_back(item);
            });
            b.historyCount = static_cast<uint32_t>(m_s.history.size() - b.historyBegin);
            break;
        }
        default:
            err = keepExtra(b.extraIndex, ki.name, v, where, keys);
        }
    });
    if (err)
        return err;
    if (!b.hasAddress)
        b.address = seg.address + offset; // legacy blocks carry no address: they tile the segment in order
    if (b.stateName == EmptyString)
        b.stateName = m_s.strings.intern(blockStateName(b.state));
    offset += b.size;
    b.layout = layout(keys);
    m_s.blocks.push_back(b);
    return {};
}

Error Builder::segment(NodeId node, size_t index)
{
    const std::string where = "segment " + std::to_string(index);
    if (m_tree.type(node) != NodeType::Dict)
        return notSnapshot(where, "is " + std::string(typeName(m_tree.type(node))) + ", expected a dict");
    Segment seg;
    NodeId blocksNode = NoNode;
    std::vector<StringId> keys;
    Error err;
    m_tree.forEachItem(node, [&](NodeId k, NodeId v) {
        KeyInfo ki;
        if (err)
            return;
        if (!keyInfo(k, ki)) {
            err = notSnapshot(where, "a key is " + std::string(typeName(m_tree.type(k))) + ", expected a string");
            return;
        }
        keys.push_back(ki.name);
        const std::string_view kn = m_s.str(ki.name);
        int64_t v64 = 0;
        switch (ki.key) {
        case Key::Device:
            if (!intField(v, v64, "segment", kn, where) || v64 < 0 || v64 > 4096)
                err = wrongType(where, kn, v, "a device number");
            seg.device = static_cast<int32_t>(v64);
            break;
        case Key::Address:
            if (!intField(v, seg.address, "segment", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::TotalSize:
            if (!intField(v, seg.totalSize, "segment", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::AllocatedSize:
            if (!intField(v, seg.allocatedSize, "segment", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::ActiveSize:
            if (!intField(v, seg.activeSize, "segment", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::RequestedSize:
            if (!intField(v, seg.requestedSize, "segment", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::Stream:
            if (!intField(v, seg.stream, "segment", kn, where))
                err = wrongType(where, kn, v, "an int");
            break;
        case Key::SegmentType:
            if (!asString(v, seg.segmentType))
                err = wrongType(where, kn, v, "a string");
            break;
        case Key::SegmentPoolId: {
            const NodeType t = m_tree.type(v);
            if ((t != NodeType::Tuple && t != NodeType::List) || m_tree.childCount(v) != 2) {
                err = wrongType(where, kn, v, "a pair of ints");
                break;
            }
            int i = 0;
            m_tree.forEachChild(v, [&](NodeId c) {
                int64_t x = 0;
                if (!intField(c, x, "segment", kn, where))
                    err = wrongType(where, kn, c, "an int");
                (i++ == 0 ? seg.poolId.first : seg.poolId.second) = x;
            });
            break;
        }
        case Key::IsExpandable:
            if (!intField(v, v64, "segment", kn, where))
                err = wrongType(where, kn, v, "a bool");
            seg.isExpandable = v64 != 0;
            break;
        case Key::Frames:
            seg.hasFrames = true;
            err = stack(v, seg.stack, where);
            break;
        case Key::Blocks:
            if (m_tree.type(v) != NodeType::List)
                err = wrongType(where, kn, v, "a list");
            blocksNode = v;
            break;
        default:
            err = keepExtra(seg.extraIndex, ki.name, v, where, keys);
        }
    });
    if (err)
        return err;
    seg.layout = layout(keys);
    seg.blockBegin = static_cast<uint32_t>(m_s.blocks.size());
    if (blocksNode != NoNode) {
        DeviceAddr offset = 0;
        size_t bi = 0;
        m_tree.forEachChild(blocksNode, [&](NodeId b) {
            if (!err)
                err = block(b, seg, offset, where + ", block " + std::to_string(bi++));
        });
        if (err)
            return err;
    }
    seg.blockCount = static_cast<uint32_t>(m_s.blocks.size() - seg.blockBegin);
    m_s.segments.push_back(seg);
    return {};
}

Error Builder::traceEntry(NodeId node, int device, size_t index, TraceEntry& e)
{
    if (m_tree.type(node) != NodeType::Dict)
        return notSnapshot("device " + std::to_string(device) + ", trace entry " + std::to_string(index),
                           "is " + std::string(typeName(m_tree.type(node))) + ", expected a dict");
    m_keys.clear();
    Error err;
    EntryForm form;
    // Once per key of every entry: kept inline (out of line, its calls alone were 5 % of a load, callgrind on
    // big_trace).
    m_tree.forEachItem(node, [&](NodeId k, NodeId v) __attribute__((always_inline)) {
        KeyInfo ki;
        if (err)
            return;
        auto where = [&] { return "device " + std::to_string(device) + ", trace entry " + std::to_string(index); };
        if (!keyInfo(k, ki)) {
            err = notSnapshot(where(), "a key is not a string");
            return;
        }
        m_keys.push_back(ki.name);
        bool ok = true, lost = false;
        switch (ki.key) {
        case Key::Action:
            ok = asString(v, form.actionName);
            if (ok)
                e.action = actionFor(m_s.str(form.actionName));
            break;
        case Key::Addr:
        case Key::DeviceFree: ok = intField(v, e.addr, lost); break;
        case Key::Size: ok = intField(v, e.size, lost); break;
        case Key::Stream: ok = intField(v, form.stream, lost); break;
        case Key::TimeUs: ok = intField(v, e.timeUs, lost); break;
        case Key::CompileContext: ok = m_tree.type(v) == NodeType::None || asString(v, form.compileContext); break;
        case Key::UserMetadata: ok = m_tree.type(v) == NodeType::None || asString(v, form.userMetadata); break;
        case Key::Frames:
            e.hasFrames = true;
            err = stack(v, e.stack, where);
            break;
        default: err = keepExtra(form.extraIndex, ki.name, v, where(), m_keys);
        }
        if (lost) [[unlikely]]
            lostInteger(v, "trace entry", m_s.str(ki.name), where);
        if (!ok && !err)
            err = wrongType(where(), m_s.str(ki.name), v, ki.key == Key::Action || ki.key == Key::CompileContext
                                    || ki.key == Key::UserMetadata
                                ? "a string"
                                : "an int");
    });
    if (err)
        return err;
    form.layout = layout(m_keys);
    e.form = m_s.entryForms.intern(form);
    return {};
}

bool Builder::directEntry(std::span<FastItem> items, TraceEntry& e)
{
    // Entries mostly repeat the last one's keys (the same memo references): then its keys and layout hold.
    bool sameKeys = items.size() == m_lastDirectKeys.size();
    for (size_t i = 0; sameKeys && i < items.size(); ++i)
        sameKeys = items[i].key == m_lastDirectKeys[i].key && items[i].keyIsNode == m_lastDirectKeys[i].keyIsNode;
    if (!sameKeys) {
        m_lastDirectKeys.clear();
        m_keys.clear();
    }
    EntryForm form;
    for (size_t i = 0; i < items.size(); ++i) {
        FastItem& item = items[i];
        if (!sameKeys) {
            // Key then value, as traceEntry() interns them.
            KeyInfo ki;
            if (item.keyIsNode) {
                if (!keyInfo(item.key, ki))
                    return false;
            } else {
                ki = KeyInfo { keyFor(m_s.str(StringId { item.key })), StringId { item.key } };
            }
            m_keys.push_back(ki.name);
            m_lastDirectKeys.push_back(DirectKey { item.key, item.keyIsNode, ki });
        }
        const KeyInfo ki = m_lastDirectKeys[i].info;
        // Text is interned here, in item order, as traceEntry() interns it: the same ids in the same order.
        if (item.kind == FastItem::Kind::Text) {
            item.id = raw(internText(item.text));
            item.kind = FastItem::Kind::String;
        }
        // What traceEntry() does with each key, for the values it takes without a word; anything else declines.
        switch (ki.key) {
        case Key::Action: {
            if (item.kind == FastItem::Kind::Node) {
                if (!asString(item.id, form.actionName))
                    return false;
            } else if (item.kind == FastItem::Kind::String) {
                form.actionName = StringId { item.id };
            } else {
                return false;
            }
            const uint32_t id = raw(form.actionName);
            if (id >= m_actionById.size())
                m_actionById.resize(id + 1, uint8_t(Action::Count));
            if (m_actionById[id] == uint8_t(Action::Count))
                m_actionById[id] = uint8_t(actionFor(m_s.str(form.actionName)));
            e.action = Action(m_actionById[id]);
            break;
        }
        case Key::Addr:
        case Key::DeviceFree:
        case Key::Size:
        case Key::Stream:
        case Key::TimeUs: {
            int64_t v = 0;
            bool lost = false;
            if (item.kind == FastItem::Kind::Int)
                v = item.integer;
            else if (item.kind != FastItem::Kind::Node || !intField(item.id, v, lost) || lost)
                return false;
            (ki.key == Key::Size         ? e.size
                 : ki.key == Key::Stream ? form.stream
                 : ki.key == Key::TimeUs ? e.timeUs
                                         : e.addr)
                = v;
            break;
        }
        case Key::CompileContext:
        case Key::UserMetadata: {
            StringId& field = ki.key == Key::CompileContext ? form.compileContext : form.userMetadata;
            if (item.kind == FastItem::Kind::String)
                field = StringId { item.id };
            else if (item.kind == FastItem::Kind::Node && m_tree.type(item.id) != NodeType::None
                     && !asString(item.id, field))
                return false;
            else if (item.kind != FastItem::Kind::None && item.kind != FastItem::Kind::Node)
                return false;
            break;
        }
        case Key::Frames:
            e.hasFrames = true;
            if (item.kind == FastItem::Kind::None) {
                e.stack = EmptyStack;
            } else if (item.kind == FastItem::Kind::Node) {
                // Most entries share their frames list through the memo: one lookup by node.
                ListStack& slot = m_stackByList[item.id % CacheSlots];
                const uint32_t count = m_tree.isContainer(item.id) ? m_tree.childCount(item.id) : 0;
                if (slot.list == item.id && slot.count == count) {
                    e.stack = slot.stack;
                } else {
                    if (stack(item.id, e.stack, std::string()))
                        return false;
                    slot = ListStack { item.id, count, e.stack };
                }
            } else if (item.kind == FastItem::Kind::Frames) {
                // A list first met here: its frame dicts, resolved now, in item order, as stack() would.
                m_frameNodes.assign(item.frames.begin(), item.frames.end());
                if (stackOfFrameNodes(e.stack, [] { return std::string(); }))
                    return false;
                item.kind = FastItem::Kind::Stack;
                item.id = raw(e.stack);
            } else if (item.kind == FastItem::Kind::Stack) {
                e.stack = StackId { item.id };
            } else {
                return false;
            }
            break;
        default: return false; // an extra: the general path keeps it
        }
    }
    if (!sameKeys)
        m_lastDirectLayout = layout(m_keys);
    form.layout = m_lastDirectLayout;
    e.form = m_s.entryForms.intern(form);
    // A warning (a frame's line beyond 64 bits, the only one stack() gives) is the tree path's to give.
    return m_warnings.count(LoadWarning::Kind::LostInteger) == 0;
}

void Builder::adoptTables(const Snapshot& direct)
{
    m_adopted = true;
    m_stringMap.resize(direct.strings.size());
    for (uint32_t k = 0; k < m_stringMap.size(); ++k)
        m_stringMap[k] = raw(m_s.strings.intern(direct.strings.get(StringId { k })));
    std::vector<FrameId> frameMap(direct.frames.size());
    for (size_t k = 0; k < frameMap.size(); ++k) {
        const Frame& f = direct.frames[k];
        frameMap[k] = m_interner.frame(StringId { m_stringMap[raw(f.name)] }, StringId { m_stringMap[raw(f.filename)] },
                                       f.line);
    }
    m_stackMap.resize(direct.stackCount());
    for (uint32_t k = 0; k < m_stackMap.size(); ++k) {
        m_frameScratch.clear();
        for (const FrameId* f = direct.stackBegin(StackId { k }); f != direct.stackEnd(StackId { k }); ++f)
            m_frameScratch.push_back(frameMap[raw(*f)]);
        m_stackMap[k] = k == raw(EmptyStack) ? raw(EmptyStack) : raw(m_interner.stack(m_frameScratch));
    }
    m_layoutMap.resize(direct.layouts.size());
    for (size_t k = 0; k < m_layoutMap.size(); ++k) {
        std::vector<StringId> keys = direct.layouts.get(LayoutId { uint16_t(k) });
        for (StringId& key : keys)
            key = StringId { m_stringMap[raw(key)] };
        m_layoutMap[k] = k == 0 ? 0 : raw(m_s.layouts.intern(keys));
    }
    // The direct path's forms in their order, as the general path interns them entry by entry.
    m_formMap.resize(direct.entryForms.size());
    for (uint32_t k = 0; k < m_formMap.size(); ++k) {
        EntryForm form = direct.entryForms.get(FormId { k });
        form.actionName = StringId { m_stringMap[raw(form.actionName)] };
        form.compileContext = StringId { m_stringMap[raw(form.compileContext)] };
        form.userMetadata = StringId { m_stringMap[raw(form.userMetadata)] };
        form.layout = LayoutId { m_layoutMap[raw(form.layout)] };
        m_formMap[k] = raw(m_s.entryForms.intern(form));
    }
}

Error Builder::annotations(NodeId node)
{
    if (m_tree.type(node) != NodeType::List)
        return wrongType("", "external_annotations", node, "a list");
    Error err;
    size_t index = 0;
    m_tree.forEachChild(node, [&](NodeId a) {
        if (err)
            return;
        const std::string where = "annotation " + std::to_string(index++);
        if (m_tree.type(a) != NodeType::Dict) {
            err = notSnapshot(where, "is not a dict");
            return;
        }
        Annotation ann;
        m_tree.forEachItem(a, [&](NodeId k, NodeId v) {
            KeyInfo ki;
            if (err || !keyInfo(k, ki))
                return;
            int64_t d = 0;
            switch (ki.key) {
            case Key::Stage:
                if (!asString(v, ann.stageName))
                    err = wrongType(where, "stage", v, "a string");
                ann.stage = m_s.str(ann.stageName) == "START" ? Annotation::Stage::Start
                    : m_s.str(ann.stageName) == "END"         ? Annotation::Stage::End
                                                              : Annotation::Stage::Other;
                break;
            case Key::Name:
                if (!asString(v, ann.name))
                    err = wrongType(where, "name", v, "a string");
                break;
            case Key::Device:
                if (!intField(v, d, "annotation", "device", where))
                    err = wrongType(where, "device", v, "an int");
                ann.device = static_cast<int32_t>(d);
                break;
            case Key::TimeUs:
                if (!intField(v, ann.timeUs, "annotation", "time_us", where))
                    err = wrongType(where, "time_us", v, "an int");
                break;
            default: break;
            }
        });
        m_s.annotations.push_back(ann);
    });
    return err;
}

Error Builder::build(NodeId root, const std::function<bool(double entriesDone)>& entriesDone)
{
    NodeId segmentsNode = NoNode;
    NodeId tracesNode = NoNode;
    const NodeType rootType = root == NoNode ? NodeType::None : m_tree.type(root);
    if (rootType == NodeType::List) {
        // Very old files: the top level is the bare list of segments (torch/cuda/_memory_viz.py _read()).
        m_s.legacyTopLevelList = true;
        segmentsNode = root;
    } else if (rootType == NodeType::Dict) {
        std::vector<StringId> keys;
        Error err;
        m_tree.forEachItem(root, [&](NodeId k, NodeId v) {
            KeyInfo ki;
            if (err)
                return;
            if (!keyInfo(k, ki)) {
                err = notSnapshot("", "a top-level key is not a string");
                return;
            }
            keys.push_back(ki.name);
            switch (ki.key) {
            case Key::Segments: segmentsNode = v; break;
            case Key::DeviceTraces: tracesNode = v; break;
            case Key::AllocatorSettings: {
                Value settings;
                bool lost = false;
                if (!genericValue(v, "allocator_settings", settings, lost, std::string("the top level")))
                    err = notSnapshot("", "'allocator_settings' is nested too deeply or too large");
                if (lost)
                    keys.pop_back();
                else
                    m_s.allocatorSettings = std::move(settings);
                break;
            }
            case Key::ExternalAnnotations:
                m_s.hasAnnotationsKey = true;
                err = annotations(v);
                break;
            default: {
                Value extra;
                bool lost = false;
                if (!genericValue(v, m_s.str(ki.name), extra, lost, std::string("the top level")))
                    err = notSnapshot("", "the value of '" + std::string(m_s.str(ki.name)) + "' is too large");
                if (lost)
                    keys.pop_back();
                else
                    m_s.topLevelExtras.emplace_back(std::string(m_s.str(ki.name)), std::move(extra));
            }
            }
        });
        if (err)
            return err;
        m_s.topLevelLayout = m_s.layouts.intern(keys);
        if (segmentsNode == NoNode)
            return notSnapshot("", "the top-level dict has no 'segments' key");
    } else {
        return notSnapshot("", std::string("the file holds ") + typeName(rootType)
                               + ", expected a dict with 'segments' and 'device_traces'");
    }

    if (m_tree.type(segmentsNode) != NodeType::List)
        return wrongType("", "segments", segmentsNode, "a list");
    m_s.segments.reserve(m_tree.childCount(segmentsNode));
    Error err;
    size_t index = 0;
    m_tree.forEachChild(segmentsNode, [&](NodeId seg) {
        if (!err)
            err = segment(seg, index++);
    });
    if (err)
        return err;

    if (tracesNode != NoNode) {
        if (m_tree.type(tracesNode) != NodeType::List)
            return wrongType("", "device_traces", tracesNode, "a list");
        m_s.hasDeviceTraces = true;
        int device = 0;
        m_tree.forEachChild(tracesNode, [&](NodeId list) {
            if (err)
                return;
            if (m_tree.type(list) != NodeType::List) {
                err = notSnapshot("device_traces " + std::to_string(device), "is not a list");
                return;
            }
            if (m_direct) {
                // Every entry of a trace went to the direct path, or it declines.
                bool twice = false;
                Trace* direct = m_direct->take(list, twice);
                if (twice || m_tree.childCount(list) != 0) {
                    err = decline();
                    return;
                }
                if (direct) {
                    if (!m_adopted)
                        adoptTables(m_direct->tables());
                    m_remapDevice.resize(size_t(device) + 1);
                    m_remapDevice[size_t(device)] = true;
                    m_s.deviceTraces.emplace_back(std::move(*direct));
                    ++device;
                    return;
                }
            }
            auto& trace = m_s.deviceTraces.emplace_back();
            trace.setHugePages(true); // filled at once (DirectTraces::entry says why)
            trace.resize(m_tree.childCount(list));
            size_t i = 0;
            m_tree.forEachChild(list, [&](NodeId entry) {
                if (!err)
                    err = traceEntry(entry, device, i, trace[i]);
                ++i;
            });
            ++device;
        });
        if (err)
            return err;
    }
    if (m_direct && !m_direct->allTaken())
        return decline(); // entries of a list that is not the top level's device_traces

    // Address versions and stream numbers by the one rule every path uses (model::TraceNumbering, after
    // torch/utils/viz/MemoryViz.js annotate_snapshot): every device's trace in order, then the final segments.
    model::TraceNumbering numbering;
    m_s.streams.push_back(0);
    numbering.addStream(0);
    auto seeStream = [&](int64_t stream) {
        if (numbering.addStream(stream))
            m_s.streams.push_back(stream);
    };
    // The map of block addresses outgrows the cache on a large trace (4 M addresses: 48 MB), where each lookup was a
    // miss: perf on the 1 GB file had the lookups at a tenth of `stats`' samples, a third of that with the slots
    // asked for this many entries ahead.
    constexpr size_t NumberingAhead = 16;
    size_t entries = 0, done = 0;
    for (const auto& trace : m_s.deviceTraces)
        entries += trace.size();
    for (size_t device = 0; device < m_s.deviceTraces.size(); ++device) {
        auto& trace = m_s.deviceTraces[device];
        const bool remapped = device < m_remapDevice.size() && m_remapDevice[device];
        for (size_t j = 0; j < trace.size(); ++j, ++done) {
            if (entriesDone && done > 0 && done % (size_t(1) << 20) == 0
                && !entriesDone(double(done) / double(entries))) {
                Error e;
                e.code = ErrorCode::Cancelled;
                e.message = "loading was cancelled";
                return e;
            }
            if (j + NumberingAhead < trace.size())
                numbering.prefetch(trace[j + NumberingAhead].action, trace[j + NumberingAhead].addr);
            TraceEntry& e = trace[j];
            if (remapped)
                remap(e); // the direct path's ids, here where every entry is visited anyway
            // The consistency check's rules for an entry, here where every entry is visited anyway (a pass of its
            // own over a large trace was a few percent of the load: its entries had left the cache).
            model::checkTraceEntry(m_s, e, device, j, m_warnings);
            seeStream(m_s.stream(e));
            e.version = numbering.version(e.action, e.addr);
        }
    }
    for (Segment& seg : m_s.segments) {
        seeStream(seg.stream);
        seg.version = numbering.segmentVersion(seg.address);
        for (uint32_t bi = seg.blockBegin; bi < seg.blockBegin + seg.blockCount; ++bi)
            m_s.blocks[bi].version = numbering.blockVersion(m_s.blocks[bi].address);
    }
    m_warnings.appendTo(m_s.warnings);
    return {};
}

} // namespace

ValueResult toValue(const ValueTree& tree, NodeId node, Value& out, ValueConversion& conversion, int depth)
{
    if (conversion.budget == 0 || depth > 64)
        return ValueResult::TooLarge;
    --conversion.budget;
    switch (tree.type(node)) {
    case NodeType::None: out.kind = Value::Kind::None; return ValueResult::Ok;
    case NodeType::Bool:
        out.kind = Value::Kind::Bool;
        out.boolean = tree.boolean(node);
        return ValueResult::Ok;
    case NodeType::Int:
        out.kind = Value::Kind::Int;
        out.integer = tree.integer(node);
        return ValueResult::Ok;
    case NodeType::UInt:
        out.kind = Value::Kind::UInt;
        out.unsignedInteger = tree.unsignedInteger(node);
        return ValueResult::Ok;
    case NodeType::BigInt: conversion.lostOffset = tree.bigIntOffset(node); return ValueResult::LostInteger;
    case NodeType::Float:
        out.kind = Value::Kind::Float;
        out.real = tree.real(node);
        return ValueResult::Ok;
    case NodeType::String:
    case NodeType::Bytes:
        out.kind = Value::Kind::String;
        out.text = tree.string(node);
        return ValueResult::Ok;
    case NodeType::List:
    case NodeType::Tuple: {
        // An item cannot be left out without moving the others: what is lost loses the whole list.
        out.kind = tree.type(node) == NodeType::List ? Value::Kind::List : Value::Kind::Tuple;
        ValueResult result = ValueResult::Ok;
        tree.forEachChild(node, [&](NodeId c) {
            if (result != ValueResult::Ok)
                return;
            out.items.emplace_back();
            result = toValue(tree, c, out.items.back(), conversion, depth + 1);
        });
        return result;
    }
    case NodeType::Dict: {
        out.kind = Value::Kind::Dict;
        ValueResult result = ValueResult::Ok;
        tree.forEachItem(node, [&](NodeId k, NodeId v) {
            if (result != ValueResult::Ok)
                return;
            std::string key;
            if (tree.type(k) == NodeType::String)
                key = tree.string(k);
            else if (tree.type(k) == NodeType::Int)
                key = std::to_string(tree.integer(k));
            else if (tree.type(k) == NodeType::UInt)
                key = std::to_string(tree.unsignedInteger(k));
            else
                key = "?";
            out.entries.emplace_back(std::move(key), Value {});
            result = toValue(tree, v, out.entries.back().second, conversion, depth + 1);
            if (result == ValueResult::LostInteger) {
                // The entry is the field that is lost; the dict keeps the others.
                if (conversion.lostEntry)
                    conversion.lostEntry(out.entries.back().first, conversion.lostOffset);
                out.entries.pop_back();
                result = ValueResult::Ok;
            }
        });
        return result;
    }
    }
    return ValueResult::TooLarge;
}

Error buildSnapshot(const ValueTree& tree, NodeId root, Snapshot& snapshot)
{
    Builder builder(tree, snapshot);
    return builder.build(root);
}

Error buildSnapshotFromPickle(std::span<const uint8_t> data, Snapshot& snapshot, bool direct,
                              const ProgressFn& progress, const ConsumedFn& consumed)
{
    // The progress reported: the pickle machine's bytes, then the builder's pass over every trace entry (their
    // versions, streams and checks), which takes about a fifth of the load of a large trace (0.85 s of 4 s for the
    // 1 GB synthetic file), so that a Cancel is heard during it too.
    ProgressFn parsing;
    std::function<bool(double)> building;
    if (progress) {
        const uint64_t total = std::max<uint64_t>(data.size(), 1);
        parsing = [&progress](uint64_t done, uint64_t all) { return progress(done * 4, all * 5); };
        building = [&progress, total](double share) {
            return progress(total * 4 + uint64_t(share * double(total)), total * 5);
        };
    }
    if (direct) {
        {
            ValueTree tree(data);
            NodeId root = NoNode;
            bool declined = false;
            DirectTraces traces(tree);
            Error err = parsePickle(data, tree, root, traces, declined, {}, parsing, consumed);
            if (!declined) {
                if (err)
                    return err;
                Builder builder(tree, snapshot, &traces);
                err = builder.build(root, building);
                if (!builder.declined())
                    return err;
            }
        }
        snapshot = Snapshot(); // declined: the general path, from the start
    }
    ValueTree tree(data);
    NodeId root = NoNode;
    if (Error err = parsePickle(data, tree, root, {}, parsing))
        return err;
    Builder builder(tree, snapshot);
    return builder.build(root, building);
}

} // namespace memscope::io
