// The snapshot model: one PyTorch CUDA memory snapshot held as plain, immutable-after-load value types.
//
// Strings, frames and stacks are interned (a string table, a frame table, a stack table) and every block, segment
// and trace entry refers to its stack by StackId, so the many identical stacks of a real trace cost one id each.
// Everything a reader found but does not understand (unknown keys, unknown actions, unknown block states) is kept,
// so it can be shown and written back. A Snapshot is built once by io::SnapshotBuilder and then only read; it may
// be read from any number of threads at once.
#pragma once

#include "model/growingarray.h"
#include "model/loadwarning.h"

#include <array>
#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memscope::model {

// Strong ids: indices into the tables of one Snapshot. Never mix ids of two snapshots.
enum class StringId : uint32_t {};
enum class FrameId : uint32_t {};
enum class StackId : uint32_t {};
enum class LayoutId : uint16_t {};

constexpr uint32_t raw(StringId id) { return static_cast<uint32_t>(id); }
constexpr uint32_t raw(FrameId id) { return static_cast<uint32_t>(id); }
constexpr uint32_t raw(StackId id) { return static_cast<uint32_t>(id); }
constexpr uint16_t raw(LayoutId id) { return static_cast<uint16_t>(id); }

// String 0 is always "", stack 0 is always the empty stack, layout 0 is always the empty layout.
constexpr StringId EmptyString {};
constexpr StackId EmptyStack {};

// Device addresses, sizes and stream handles arrive as Python ints. PyTorch's outputs do signed arithmetic on
// them (e.g. negative "<gaps>" on blocks with a stale requested_size), so they are kept as int64_t.
//
// What a value >= 2^63 does, field by field (io/snapshotbuilder.cpp applies it; PyTorch's types are those of
// c10/cuda/CUDACachingAllocator.h, as written by torch/csrc/cuda/Module.cpp and torch/csrc/cuda/memory_snapshot.cpp):
// - addresses (segment, block, trace `addr`), sizes (total/allocated/active/requested, block size and
//   requested_size, trace `size`, oom `device_free`): size_t in PyTorch, so an unsigned Python int. No device has
//   2^63 bytes or addresses that high (x86-64 and CUDA virtual addresses use 48-57 bits), so such a value is not a
//   real one: the field keeps its default and the load records a warning (LoadWarning::Kind::LostInteger).
// - `stream`: int64_t(cudaStream_t) in both writers, `time_us`: time_t, `device`: c10::DeviceIndex (int8_t), history
//   `addr`: (int64_t) in Module.cpp: signed, so >= 2^63 cannot come from PyTorch: left out, with a warning.
// - `segment_pool_id`: MempoolId_t, a pair of CaptureId_t (unsigned long long) counted up from 1, written as a
//   tuple of int64_t by memory_snapshot.cpp: left out (0) with a warning, as no job makes 2^63 pools.
// - a frame's `line`: kept exactly (LineNumber), because PyTorch writes it from uint64_t and prints it.
// - allocator settings and unknown keys (Value): kept exactly (Value::Kind::UInt), because they are written back.
// Anything wider than 64 bits, or below -2^63, cannot be a C integer at all: that one field is left out, with a
// warning naming where it was.
using DeviceAddr = int64_t;
using ByteCount = int64_t;

// A frame's source line exactly as the file holds it, anywhere in [-2^63, 2^64). PyTorch keeps a line as
// unwind::Frame's uint64_t lineno and writes it two ways: as an unsigned Python int from Python
// (torch/csrc/profiler/python/combined_traceback.cpp, py_symbolize; PyCode_Addr2Line's -1 for "no line", as in
// torch.compile's generated code, becomes 18446744073709551615) and as int64_t(lineno) from C++
// (torch/csrc/cuda/memory_snapshot.cpp, ivalue_symbolize; the same line becomes -1). _memory_viz.py prints either as
// is, so both are kept and told apart. Plain value type.
class LineNumber {
public:
    constexpr LineNumber() = default;
    // From any signed integer (implicit: every source of lines but the readers has int32_t or int64_t lines).
    template <typename T>
    requires(std::is_integral_v<T>&& std::is_signed_v<T>) constexpr LineNumber(T line)
        : m_bits(static_cast<uint64_t>(static_cast<int64_t>(line)))
    {
    }
    static constexpr LineNumber fromUnsigned(uint64_t line)
    {
        LineNumber l;
        l.m_bits = line;
        l.m_unsigned = line >> 63;
        return l;
    }

    // True for values at or above 2^63 (only an unsigned int can hold them).
    constexpr bool isAboveInt64() const { return m_unsigned; }
    // The value as int64_t when !isAboveInt64(); otherwise the same bits (e.g. -1 for 2^64 - 1).
    constexpr int64_t bits() const { return static_cast<int64_t>(m_bits); }
    constexpr uint64_t unsignedBits() const { return m_bits; }
    constexpr bool isPositive() const { return m_unsigned || static_cast<int64_t>(m_bits) > 0; }

    // The decimal text, as Python's str(int) prints it.
    std::string toString() const;
    // Writes the decimal text to [first, last) (21 characters always suffice); returns the end.
    char* toChars(char* first, char* last) const;

    friend constexpr bool operator==(const LineNumber&, const LineNumber&) = default;
    friend constexpr std::strong_ordering operator<=>(const LineNumber& a, const LineNumber& b)
    {
        if (a.m_unsigned != b.m_unsigned)
            return a.m_unsigned ? std::strong_ordering::greater : std::strong_ordering::less;
        return a.m_unsigned ? a.m_bits <=> b.m_bits : a.bits() <=> b.bits();
    }

private:
    uint64_t m_bits = 0;
    bool m_unsigned = false; // m_bits is a value >= 2^63 (never set below it, so equal values compare equal)
};

// An owned generic value, used only for what the model does not know by name: allocator settings, unknown keys.
struct Value {
    enum class Kind : uint8_t { None, Bool, Int, UInt, Float, String, List, Tuple, Dict };
    Kind kind = Kind::None;
    bool boolean = false;
    int64_t integer = 0; // Int
    uint64_t unsignedInteger = 0; // UInt: a value in [2^63, 2^64) (smaller ones are Int)
    double real = 0;
    std::string text;
    std::vector<Value> items; // List and Tuple
    struct Entry; // a (key, value) pair, like std::pair (a pair of an incomplete type is not allowed here)
    std::vector<Entry> entries; // Dict, in file order

    const Value* find(std::string_view key) const;
};

struct Value::Entry {
    Entry() = default;
    Entry(std::string key, Value value)
        : first(std::move(key))
        , second(std::move(value))
    {
    }
    std::string first;
    Value second;
};

struct Frame {
    StringId name;
    StringId filename;
    LineNumber line;
};

enum class BlockState : uint8_t { ActiveAllocated, ActivePendingFree, Inactive, Unknown };

enum class Action : uint8_t {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Snapshot,
    Oom,
    Unknown,
    Count
};

std::string_view actionName(Action action);
std::string_view blockStateName(BlockState state);

// A legacy block's allocation history (files older than PyTorch 2.1: `history: [{addr, real_size, frames}]`).
struct HistoryItem {
    DeviceAddr addr = 0;
    ByteCount realSize = 0;
    StackId stack = EmptyStack;
    bool hasFrames = false;
};

struct Block {
    DeviceAddr address = 0;
    ByteCount size = 0;
    ByteCount requestedSize = 0; // stale on inactive blocks: PyTorch leaves the last user's value there
    BlockState state = BlockState::Inactive;
    StringId stateName = EmptyString; // the state as written in the file (kept for Unknown states)
    StackId stack = EmptyStack;
    bool hasFrames = false; // a `frames` key was present (absent in legacy files)
    bool hasRequestedSize = false;
    bool hasAddress = false;
    uint32_t version = 0; // the address's version at the end, as PyTorch's viewer counts (io/snapshotbuilder.cpp)
    uint32_t historyBegin = 0; // legacy history: range in Snapshot::history
    uint32_t historyCount = 0;
    bool hasHistory = false;
    LayoutId layout {};
    uint32_t extraIndex = UINT32_MAX; // unknown keys, in Snapshot::extras
};

struct Segment {
    int32_t device = 0;
    DeviceAddr address = 0;
    ByteCount totalSize = 0;
    ByteCount allocatedSize = 0;
    ByteCount activeSize = 0;
    ByteCount requestedSize = 0;
    int64_t stream = 0; // the raw cudaStream_t handle
    StringId segmentType = EmptyString; // "small" | "large"
    std::pair<int64_t, int64_t> poolId { 0, 0 };
    bool isExpandable = false;
    StackId stack = EmptyStack;
    bool hasFrames = false;
    uint32_t version = 0; // the segment address's version at the end (segment_free/unmap move it on)
    uint32_t blockBegin = 0; // range in Snapshot::blocks
    uint32_t blockCount = 0;
    LayoutId layout {};
    uint32_t extraIndex = UINT32_MAX;
};

// What a trace entry shares with many others: its stream, and how it was written (the key layout the writers
// reproduce, the action's spelling, compile_context, user_metadata, its unknown keys). A real trace has a handful of
// distinct ones (a few streams times the actions' spellings), so each distinct form is stored once, in
// Snapshot::entryForms, and an entry holds its FormId: this keeps TraceEntry at 40 bytes (64 with these fields
// inline, 0.86 GB of a 13.4 M-entry trace). An entry with unknown keys has a form of its own (its extraIndex).
struct EntryForm {
    int64_t stream = 0; // the raw cudaStream_t handle, bit for bit (above: what a value >= 2^63 does)
    StringId actionName = EmptyString; // the action as written in the file (kept for Unknown actions)
    StringId compileContext = EmptyString;
    StringId userMetadata = EmptyString;
    uint32_t extraIndex = UINT32_MAX; // unknown keys, in Snapshot::extras
    LayoutId layout {};

    friend bool operator==(const EntryForm&, const EntryForm&) = default;
};

enum class FormId : uint32_t {};
constexpr uint32_t raw(FormId id) { return static_cast<uint32_t>(id); }
// Form 0 is always the default form: stream 0, no names, no extras, the empty layout.
constexpr FormId DefaultForm {};

// One allocator event of a device's trace. The fields every view and the replay read per entry are inline; the rest
// is its form (Snapshot::form(entry), Snapshot::stream(entry)).
struct TraceEntry {
    DeviceAddr addr = 0; // `device_free` for oom entries
    ByteCount size = 0;
    int64_t timeUs = 0;
    StackId stack = EmptyStack;
    // The address's version, so one address reused is told apart (PyTorch's viewer names them `b7f..._3` and
    // `s7f..._1`): for block actions, how many free_completed at this address came before (the free_completed
    // itself included its own alloc's version); for segment actions, the same over segment_free/segment_unmap.
    uint32_t version = 0;
    FormId form = DefaultForm; // in Snapshot::entryForms
    Action action = Action::Unknown;
    bool hasFrames = false;
};
// 13.4 M entries of a 1 GB snapshot are most of what its model holds: keep them small (docs/speed.md).
static_assert(sizeof(TraceEntry) <= 40);
static_assert(std::is_trivially_copyable_v<TraceEntry>);

// One device's trace. A GrowingArray, because a live document appends millions of entries a second to it.
using Trace = GrowingArray<TraceEntry>;

struct Annotation {
    enum class Stage : uint8_t { Start, End, Other };
    Stage stage = Stage::Other;
    StringId stageName = EmptyString;
    StringId name = EmptyString;
    int32_t device = 0;
    int64_t timeUs = 0;
};

// Unknown keys of one object, in file order.
using Extras = std::vector<std::pair<std::string, Value>>;

class StringTable {
public:
    StringTable();
    StringId intern(std::string_view text);
    std::string_view get(StringId id) const { return m_strings[raw(id)]; }
    size_t size() const { return m_strings.size(); }

private:
    struct Hash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view> {}(s); }
    };
    std::vector<std::string_view> m_strings;
    std::vector<std::unique_ptr<char[]>> m_chunks;
    size_t m_chunkUsed = 0;
    size_t m_chunkSize = 0;
    std::unordered_map<std::string_view, StringId, Hash, std::equal_to<>> m_index;
};

// Each distinct key order of an object kind is stored once; objects keep a LayoutId so writers reproduce the
// file's key order exactly and PyTorch's dict repr can be matched.
class LayoutTable {
public:
    LayoutTable();
    LayoutId intern(const std::vector<StringId>& keys);
    const std::vector<StringId>& get(LayoutId id) const { return m_layouts[raw(id)]; }
    size_t size() const { return m_layouts.size(); }

private:
    std::vector<std::vector<StringId>> m_layouts;
};

// The distinct EntryForms of one snapshot, each stored once (see EntryForm); it grows with the trace (a live document
// interns under the lock its readers take). Interning looks in a small cache of recent forms first: consecutive
// entries mostly repeat one of a few forms (alloc, free_requested, free_completed on one stream).
class EntryFormTable {
public:
    EntryFormTable();
    FormId intern(const EntryForm& form);
    const EntryForm& get(FormId id) const { return m_forms[raw(id)]; }
    size_t size() const { return m_forms.size(); }

private:
    struct Hash {
        size_t operator()(const EntryForm& f) const;
    };
    static constexpr size_t RecentSlots = 64;
    std::vector<EntryForm> m_forms;
    std::unordered_map<EntryForm, FormId, Hash> m_index;
    std::array<uint32_t, RecentSlots> m_recent {}; // form ids by hash: 0, the default form, until filled
};

struct Snapshot {
    StringTable strings;
    LayoutTable layouts;
    std::vector<Frame> frames;
    // Stack k is frames[stackFrames[stackOffsets[k]] .. stackFrames[stackOffsets[k+1]]), innermost first.
    std::vector<uint32_t> stackOffsets { 0, 0 };
    std::vector<FrameId> stackFrames;

    std::vector<Segment> segments; // file order (PyTorch sorts them by address)
    std::vector<Block> blocks;
    std::vector<HistoryItem> history;
    std::vector<Trace> deviceTraces; // index = device
    EntryFormTable entryForms; // what the entries of deviceTraces refer to by FormId
    std::vector<Annotation> annotations;
    std::optional<Value> allocatorSettings;

    std::vector<Extras> extras; // referenced by extraIndex
    Extras topLevelExtras; // unknown top-level keys
    // Per entry form, the forward pass's stack of a backward allocation (its `forward_frames`, model/forwardframes.h);
    // empty when no entry has any.
    std::vector<StackId> forwardStacks;
    bool legacyTopLevelList = false; // the file was a bare list of segments
    bool hasDeviceTraces = false;
    bool hasAnnotationsKey = false;
    LayoutId topLevelLayout {};

    // What was wrong with the file but did not stop it loading (io/snapshotio.cpp fills it: the builder's lost
    // fields, then model::checkConsistency). Empty for every real PyTorch snapshot memscope has seen.
    std::vector<LoadWarning> warnings;

    // Raw stream handle -> small stream number: raw 0 is 0, the others count from 1 in order of first appearance
    // (trace entries of device 0.., then segments), as PyTorch's viewer numbers them.
    std::vector<int64_t> streams;

    size_t stackCount() const { return stackOffsets.size() - 1; }
    uint32_t stackSize(StackId id) const { return stackOffsets[raw(id) + 1] - stackOffsets[raw(id)]; }
    const FrameId* stackBegin(StackId id) const { return stackFrames.data() + stackOffsets[raw(id)]; }
    const FrameId* stackEnd(StackId id) const { return stackFrames.data() + stackOffsets[raw(id) + 1]; }
    const Frame& frame(FrameId id) const { return frames[raw(id)]; }
    std::string_view str(StringId id) const { return strings.get(id); }
    const EntryForm& form(const TraceEntry& e) const { return entryForms.get(e.form); }
    // The entry's raw stream handle.
    int64_t stream(const TraceEntry& e) const { return entryForms.get(e.form).stream; }
    StackId forwardStack(const TraceEntry& e) const
    {
        return raw(e.form) < forwardStacks.size() ? forwardStacks[raw(e.form)] : EmptyStack;
    }

    const Block* segmentBlocks(const Segment& seg) const { return blocks.data() + seg.blockBegin; }
    int streamNumber(int64_t rawStream) const;
    size_t entryCount() const;
    int deviceCount() const;
};

// Content-based interning of frames and stacks, used by builders and by code that makes snapshots.
class StackInterner {
public:
    explicit StackInterner(Snapshot& snapshot);
    FrameId frame(StringId name, StringId filename, LineNumber line);
    StackId stack(const std::vector<FrameId>& frames);

private:
    struct FrameKey {
        uint32_t name, filename;
        LineNumber line;
        bool operator==(const FrameKey&) const = default;
    };
    struct FrameKeyHash {
        size_t operator()(const FrameKey& k) const;
    };
    struct StackHash {
        size_t operator()(const std::vector<FrameId>& v) const;
    };
    Snapshot& m_snapshot;
    std::unordered_map<FrameKey, FrameId, FrameKeyHash> m_frames;
    std::unordered_map<std::vector<FrameId>, StackId, StackHash> m_stacks;
};

} // namespace memscope::model
