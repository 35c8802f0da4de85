// The pickle virtual machine. See picklereader.h.
//
// Opcode numbers and argument encodings: CPython Lib/pickletools.py. Behaviour copied from CPython's unpickler
// (Modules/_pickle.c) where it matters: MEMOIZE stores at the count of filled memo slots, INT "00"/"01" are
// False/True (protocol 0), LONG1/LONG4 are little-endian two's complement, a dict's last duplicate key wins.
//
// The direct path for trace entries (picklereader.h) reads the opcodes CPython's pickler writes for a dict of plain
// values (Lib/pickle.py, save_dict and _batch_setitems: EMPTY_DICT, the memo, MARK, key and value pairs, SETITEMS;
// ints as BININT1/BININT2/BININT/LONG1, str as SHORT_BINUNICODE/BINUNICODE, objects seen before as memo GETs) and
// declines anything else.
#include "io/picklereader.h"

#include "io/textcodec.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memscope::io {

namespace {

// The VM's helpers are lambdas called from many opcodes; left to itself the compiler calls them out of line, which
// cost a quarter of the parse time (measured with perf on big_trace).
#define HOT_INLINE __attribute__((always_inline))

namespace op {
    // Protocol 0/1 (text and early binary)
    constexpr uint8_t Mark = '(';
    constexpr uint8_t Stop = '.';
    constexpr uint8_t Pop = '0';
    constexpr uint8_t PopMark = '1';
    constexpr uint8_t Dup = '2';
    constexpr uint8_t Float = 'F';
    constexpr uint8_t Int = 'I';
    constexpr uint8_t BinInt = 'J';
    constexpr uint8_t BinInt1 = 'K';
    constexpr uint8_t Long = 'L';
    constexpr uint8_t BinInt2 = 'M';
    constexpr uint8_t None = 'N';
    constexpr uint8_t PersId = 'P';
    constexpr uint8_t BinPersId = 'Q';
    constexpr uint8_t Reduce = 'R';
    constexpr uint8_t String = 'S';
    constexpr uint8_t BinString = 'T';
    constexpr uint8_t ShortBinString = 'U';
    constexpr uint8_t Unicode = 'V';
    constexpr uint8_t BinUnicode = 'X';
    constexpr uint8_t Append = 'a';
    constexpr uint8_t Build = 'b';
    constexpr uint8_t Global = 'c';
    constexpr uint8_t Dict = 'd';
    constexpr uint8_t EmptyDict = '}';
    constexpr uint8_t Appends = 'e';
    constexpr uint8_t Get = 'g';
    constexpr uint8_t BinGet = 'h';
    constexpr uint8_t Inst = 'i';
    constexpr uint8_t LongBinGet = 'j';
    constexpr uint8_t List = 'l';
    constexpr uint8_t EmptyList = ']';
    constexpr uint8_t Obj = 'o';
    constexpr uint8_t Put = 'p';
    constexpr uint8_t BinPut = 'q';
    constexpr uint8_t LongBinPut = 'r';
    constexpr uint8_t SetItem = 's';
    constexpr uint8_t Tuple = 't';
    constexpr uint8_t EmptyTuple = ')';
    constexpr uint8_t SetItems = 'u';
    constexpr uint8_t BinFloat = 'G';
    // Protocol 2
    constexpr uint8_t Proto = 0x80;
    constexpr uint8_t NewObj = 0x81;
    constexpr uint8_t Ext1 = 0x82;
    constexpr uint8_t Ext2 = 0x83;
    constexpr uint8_t Ext4 = 0x84;
    constexpr uint8_t Tuple1 = 0x85;
    constexpr uint8_t Tuple2 = 0x86;
    constexpr uint8_t Tuple3 = 0x87;
    constexpr uint8_t NewTrue = 0x88;
    constexpr uint8_t NewFalse = 0x89;
    constexpr uint8_t Long1 = 0x8a;
    constexpr uint8_t Long4 = 0x8b;
    // Protocol 3
    constexpr uint8_t BinBytes = 'B';
    constexpr uint8_t ShortBinBytes = 'C';
    // Protocol 4
    constexpr uint8_t ShortBinUnicode = 0x8c;
    constexpr uint8_t BinUnicode8 = 0x8d;
    constexpr uint8_t BinBytes8 = 0x8e;
    constexpr uint8_t EmptySet = 0x8f;
    constexpr uint8_t AddItems = 0x90;
    constexpr uint8_t FrozenSet = 0x91;
    constexpr uint8_t NewObjEx = 0x92;
    constexpr uint8_t StackGlobal = 0x93;
    constexpr uint8_t Memoize = 0x94;
    constexpr uint8_t Frame = 0x95;
    // Protocol 5
    constexpr uint8_t ByteArray8 = 0x96;
    constexpr uint8_t NextBuffer = 0x97;
    constexpr uint8_t ReadonlyBuffer = 0x98;
} // namespace op

constexpr const char* TooManyValues = "more values on the pickle's stack than the reader allows";

const char* unsafeOpcodeName(uint8_t code)
{
    switch (code) {
    case op::Global: return "GLOBAL";
    case op::StackGlobal: return "STACK_GLOBAL";
    case op::Reduce: return "REDUCE";
    case op::Build: return "BUILD";
    case op::Inst: return "INST";
    case op::Obj: return "OBJ";
    case op::NewObj: return "NEWOBJ";
    case op::NewObjEx: return "NEWOBJ_EX";
    case op::Ext1: return "EXT1";
    case op::Ext2: return "EXT2";
    case op::Ext4: return "EXT4";
    case op::PersId: return "PERSID";
    case op::BinPersId: return "BINPERSID";
    case op::NextBuffer: return "NEXT_BUFFER";
    case op::ReadonlyBuffer: return "READONLY_BUFFER";
    default: return nullptr;
    }
}

// How each opcode's argument is laid out, as the Machine reads it (Lib/pickletools.py lists them): none, a fixed
// width, a length of 1, 4 or 8 bytes and then that many bytes, or text up to '\n'. Fails: an opcode the Machine
// does not know or refuses (unsafeOpcodeName), where its parse ends.
enum class Arg : uint8_t {
    Fails,
    None,
    Fixed1,
    Fixed2,
    Fixed4,
    Fixed8,
    Counted1,
    Counted4,
    Counted8,
    Line,
    Frame,
    Stop
};

constexpr std::array<Arg, 256> argLayouts()
{
    std::array<Arg, 256> a {};
    for (uint8_t c : { op::Mark,    op::Pop,        op::PopMark,  op::Dup,      op::None,      op::Append,
                       op::Dict,    op::EmptyDict,  op::Appends,  op::List,     op::EmptyList, op::SetItem,
                       op::Tuple,   op::EmptyTuple, op::SetItems, op::Tuple1,   op::Tuple2,    op::Tuple3,
                       op::NewTrue, op::NewFalse,   op::EmptySet, op::AddItems, op::FrozenSet, op::Memoize })
        a[c] = Arg::None;
    for (uint8_t c : { op::Proto, op::BinInt1, op::BinGet, op::BinPut })
        a[c] = Arg::Fixed1;
    a[op::BinInt2] = Arg::Fixed2;
    for (uint8_t c : { op::BinInt, op::LongBinGet, op::LongBinPut })
        a[c] = Arg::Fixed4;
    a[op::BinFloat] = Arg::Fixed8;
    for (uint8_t c : { op::Long1, op::ShortBinString, op::ShortBinBytes, op::ShortBinUnicode })
        a[c] = Arg::Counted1;
    for (uint8_t c : { op::Long4, op::BinString, op::BinUnicode, op::BinBytes })
        a[c] = Arg::Counted4;
    for (uint8_t c : { op::BinUnicode8, op::BinBytes8, op::ByteArray8 })
        a[c] = Arg::Counted8;
    for (uint8_t c : { op::Float, op::Int, op::Long, op::String, op::Unicode, op::Put, op::Get })
        a[c] = Arg::Line;
    a[op::Frame] = Arg::Frame;
    a[op::Stop] = Arg::Stop;
    return a;
}
constexpr std::array<Arg, 256> ArgLayouts = argLayouts();
static_assert(ArgLayouts[op::Global] == Arg::Fails && ArgLayouts[op::Reduce] == Arg::Fails
              && ArgLayouts[0] == Arg::Fails);

// Memo slots in the direct path hold a NodeId below 2^30, or a tagged value that has no node: a StringId of the sink
// (a string value of a trace entry), a StackId (a frames list), an item of the entry being decoded (its value is not interned yet), or an
// entry (nothing may refer to one: a reference declines). Without a sink every slot is a NodeId.
constexpr uint32_t TagMask = 0xC0000000u;
constexpr uint32_t TagString = 0x40000000u;
constexpr uint32_t TagStack = 0x80000000u; // | a StackId of the sink: a frames list first met in an entry
constexpr uint32_t TagPending = 0xC0000000u; // | the item's index
constexpr uint32_t OpaqueSlot = 0xFFFFFFFEu;
constexpr uint32_t MaxItems = 64; // keys of one entry the direct path takes (PyTorch writes 9)
static_assert(NoNode == 0xFFFFFFFFu && (OpaqueSlot & TagMask) == TagPending && MaxItems < OpaqueSlot - TagPending);

class Machine {
public:
    Machine(std::span<const uint8_t> data, ValueTree& tree, const PickleLimits& limits, const ProgressFn& progress,
            TraceSink* sink = nullptr, const ConsumedFn* consumed = nullptr)
        : m_data(data)
        , m_tree(tree)
        , m_limits(limits)
        , m_progress(progress)
        , m_sink(sink)
        , m_consumed(consumed)
        , m_prefetchInput(consumed && *consumed)
    {
    }

    Error run(NodeId& root);
    bool declined() const { return m_declined; }

private:
    // --- The direct path (sink only) ---------------------------------------------------------------------------
    bool decline()
    {
        m_declined = true;
        m_error = fail(ErrorCode::Cancelled, "the direct path declined", m_pos);
        return false;
    }
    // O(1) each (a flag per node, then a map only for the lists flagged), however many lists device_traces has: a
    // search of m_traceLists here, on every append and memo reference, made the reader cubic in them (issue 34).
    bool isTraceList(NodeId n) const { return flagged(n, TraceListFlag); }
    // The index of trace list `n` in m_traceLists, or m_traceLists.size() when `n` is none.
    size_t traceListIndex(NodeId n) const
    {
        if (!isTraceList(n))
            return m_traceLists.size();
        if (n != m_lastTraceList) {
            m_lastTraceList = n;
            m_lastTraceListIndex = m_traceListIndex.find(n)->second;
        }
        return m_lastTraceListIndex;
    }
    // Every append of the general path. With a sink, an entry the sink took is a placeholder on the stack, where
    // the tree path has its dict, so that whatever the opcodes do with it they do on both paths; it may only go into
    // its trace list, once (no DUP, no memo: so the placeholders of a list are its entries, in order), and the
    // trace list gets nothing else. Anything else declines; STOP checks the counts.
    [[gnu::always_inline]] bool place(NodeId target, std::span<const NodeId> children)
    {
        if (m_sink) [[unlikely]] {
            if ((target == m_placeholder && target != NoNode) || frozen(target))
                return decline();
            const size_t list = traceListIndex(target);
            if (list < m_traceLists.size()) {
                for (NodeId c : children)
                    if (c != m_placeholder)
                        return decline();
                m_placed[list] += children.size();
                return true;
            }
            if (m_placeholder != NoNode && std::find(children.begin(), children.end(), m_placeholder) != children.end())
                return decline();
        }
        m_tree.append(target, children);
        return true;
    }
    // At STOP: every entry the sink took is in its list (placeholders and entries counted alike, place()), and the
    // tree reaches the trace lists only through the root: each trace list is held once (by the outer list), each
    // outer list once (by the root), the root by nothing. Then no value but the root's device_traces could show the
    // trace lists, whose entries the tree does not have.
    bool directPathHolds(NodeId root)
    {
        if (root == m_placeholder || m_sunk != m_placed || isTraceList(root))
            return false;
        std::vector<uint32_t> listRefs(m_traceLists.size()), outerRefs(m_outerLists.size());
        uint32_t rootRefs = 0;
        m_tree.forEachReference([&](NodeId c) {
            const size_t l = traceListIndex(c);
            if (l < m_traceLists.size())
                ++listRefs[l];
            if (flagged(c, OuterListFlag))
                ++outerRefs[m_outerListIndex.find(c)->second];
            rootRefs += c == root;
        });
        return rootRefs == 0 && std::all_of(listRefs.begin(), listRefs.end(), [](uint32_t n) { return n == 1; })
            && std::all_of(outerRefs.begin(), outerRefs.end(), [](uint32_t n) { return n == 1; });
    }
    // The opcode at m_pos, past any FRAME (protocol 4: between any two opcodes); false at the end of the data or at
    // a frame the general path would refuse.
    [[gnu::always_inline]] bool peekOp(uint8_t& code)
    {
        while (true) {
            if (m_pos >= m_data.size())
                return false;
            code = m_data[m_pos];
            if (code != 0x95) // FRAME
                return true;
            if (!have(9))
                return false;
            uint64_t frameSize;
            std::memcpy(&frameSize, m_data.data() + m_pos + 1, 8);
            m_pos += 9;
            if (!have(frameSize))
                return false;
        }
    }
    // Stores `value` at memo slot `index` as memoStore does; false (declining) past the limits.
    bool fastMemoPut(uint64_t index, uint32_t value)
    {
        if (index >= m_limits.maxMemo || index > m_data.size())
            return decline();
        if (index == m_memo.size()) [[likely]] { // MEMOIZE: the next slot
            m_memo.push_back(value);
            ++m_memoFilled;
            return true;
        }
        if (index > m_memo.size())
            m_memo.resize(index + 1, NoNode);
        if (m_memo[index] == NoNode)
            ++m_memoFilled;
        m_memo[index] = value;
        ++m_memoRewrites;
        return true;
    }
    // The memo opcodes right after a value, storing `value` (or, with `slots`, noting the slots to fill later);
    // false declines.
    bool fastMemoAfter(uint32_t value, uint32_t pendingItem = UINT32_MAX);
    // An integer opcode (BININT1, BININT2, BININT, LONG1 of at most 8 bytes) at m_pos; false when it is none of them
    // (nothing consumed) or is cut (declined).
    bool fastInt(uint8_t code, int64_t& value, bool& isInt);
    // A str opcode (SHORT_BINUNICODE, BINUNICODE, BINUNICODE8) at m_pos: its offset and length in the input.
    bool fastText(uint8_t code, uint64_t& offset, uint32_t& length, bool& isText);
    // A memo GET's slot; false declines.
    bool fastGet(uint8_t code, uint32_t& slot);
    // The value item a memo reference to `slot` makes: a tree node's value (a string as text, an int, None, or the
    // node), an interned string or a stack. False for anything else: a trace list (its entries are the sink's: the
    // tree does not have them), a slot of the entry being decoded, an entry.
    [[gnu::always_inline]] bool referencedItem(uint32_t slot, FastItem& item) const
    {
        if (slot < TagString) {
            if (isTraceList(slot))
                return false;
            switch (m_tree.type(slot)) {
            case NodeType::String:
                item.kind = FastItem::Kind::Text;
                item.text = m_tree.string(slot);
                break;
            case NodeType::None: item.kind = FastItem::Kind::None; break;
            case NodeType::Int:
                item.kind = FastItem::Kind::Int;
                item.integer = m_tree.integer(slot);
                break;
            default:
                item.kind = FastItem::Kind::Node;
                item.id = slot;
            }
            return true;
        }
        if ((slot & TagMask) != TagString && (slot & TagMask) != TagStack)
            return false;
        item.kind = (slot & TagMask) == TagString ? FastItem::Kind::String : FastItem::Kind::Stack;
        item.id = slot & ~TagMask;
        return true;
    }
    // One value as a tree node (frames lists and their frame dicts, the first time they appear), `depth` levels
    // down; NoNode declines.
    NodeId fastNode(int depth);
    // The dict that starts at m_pos (just past its EMPTY_DICT, to its SETITEMS), an entry of trace list `list`.
    // False declines.
    bool fastEntry(NodeId list);
    // The frames list that starts at m_pos (an EMPTY_LIST in an entry): its frame dicts into m_frameBuffer (`item`
    // says where), for the sink to resolve; no node for the list itself. False declines.
    bool fastFrames(FastItem& item, uint32_t index);
    // The entry at m_pos (just past its EMPTY_DICT) when it has the keys of the last entry fastEntry() decoded
    // (m_shape: the same memo references, byte for byte) and values of the kinds PyTorch's pickler writes there
    // (int opcodes, None, text, memo references, a frames list of frame dicts met before, each with the MEMOIZE
    // fastEntry() takes after it): decoded in one pass over its bytes, without a look at FRAME or the general
    // path's checks per opcode, into the items fastEntry() would have made, and given to the sink. Entries mostly
    // repeat their keys (13.4 M of 13.4 M in a 1 GB file; 11,101 of 11,135 in a real training trace). `matched`
    // false: anything else, and nothing was consumed (fastEntry() decodes it); otherwise the result is the sink's.
    bool shapedEntry(NodeId list, bool& matched);
    // After fastEntry() decoded an entry whose keys were all memo references: they are the shape of the next ones.
    void learnShape(std::span<const uint64_t> keyAt);
    // The entry's items (m_items, m_frameBuffer) to the sink, the containers it read frozen, the memo slots of its
    // values (m_pendingSlots) set. False declines.
    bool sinkEntry(NodeId list);

private:
    Error fail(ErrorCode code, std::string message, uint64_t offset) const
    {
        Error e;
        e.code = code;
        e.message = std::move(message);
        e.offset = offset;
        e.hasOffset = true;
        return e;
    }
    bool setError(Error e)
    {
        m_error = std::move(e);
        return false;
    }
    bool have(uint64_t n) const { return m_pos + n <= m_data.size() && m_pos + n >= m_pos; }
    template <typename T>
    T readLE()
    {
        T v;
        std::memcpy(&v, m_data.data() + m_pos, sizeof(T));
        m_pos += sizeof(T);
        return v;
    }
    // A text argument up to (not including) '\n'; false when there is no newline.
    bool readLine(std::string_view& line)
    {
        const auto* begin = m_data.data() + m_pos;
        const auto* nl = static_cast<const uint8_t*>(std::memchr(begin, '\n', m_data.size() - m_pos));
        if (!nl)
            return false;
        line = std::string_view(reinterpret_cast<const char*>(begin), static_cast<size_t>(nl - begin));
        m_pos += line.size() + 1;
        return true;
    }

    // Pushes the node for a LONG1/LONG4 integer of more than 8 bytes at `p`, met at byte `at`; false (and m_error)
    // when the stack is full. Python's pickler writes the fewest bytes that hold the sign, so a uint64_t at or
    // above 2^63 (size_t(-1): torch.compile's frame lines) takes 9, the 9th 0x00: a UInt node. Bytes beyond that
    // only extending the sign still make an Int or UInt; anything else is wider than 64 bits: a BigInt placeholder
    // (valuetree.h). Out of line and capturing nothing: rare, and the main loop stays as small as it was.
    [[gnu::noinline]] bool pushWideLong(const uint8_t* p, uint64_t n, uint64_t at);
    // The node for an INT or LONG opcode's text argument (protocols 0-1), met at byte `at`: INT "00"/"01" are False
    // and True; other values an Int, UInt or BigInt node (valuetree.h). NoNode when the text is no integer. Out of
    // line: the binary protocols never use these opcodes, and the main loop stays as small as it was.
    [[gnu::noinline]] NodeId textInteger(uint8_t code, std::string_view line, uint64_t at);

    std::span<const uint8_t> m_data;
    ValueTree& m_tree;
    const PickleLimits& m_limits;
    const ProgressFn& m_progress;
    uint64_t m_pos = 0;
    std::vector<NodeId> m_stack;
    std::vector<size_t> m_marks;
    std::vector<NodeId> m_memo;
    uint64_t m_memoFilled = 0;
    uint64_t m_memoRewrites = 0; // writes to a memo slot but the next one's: a shape's key may mean another since
    Error m_error;
    TraceSink* m_sink = nullptr;
    const ConsumedFn* m_consumed = nullptr;
    bool m_prefetchInput = false; // a mapped file's (shapedEntry() says why)
    std::vector<NodeId> m_traceLists; // the lists of device_traces, whose entries go to the sink
    std::vector<uint64_t> m_sunk, m_placed; // per trace list: entries the sink took, placeholders appended to it
    // Per trace list: the stack slot it was pushed to, and the first slot of the run of trace lists it ended then
    // (the outer list lies right below that run).
    std::vector<size_t> m_pushedAt, m_runStart;
    std::unordered_map<NodeId, uint32_t> m_traceListIndex; // a trace list's index in m_traceLists
    mutable NodeId m_lastTraceList = NoNode; // traceListIndex()'s last answer: entries come list by list
    mutable size_t m_lastTraceListIndex = 0;
    NodeId m_placeholder = NoNode; // an empty dict standing for an entry the sink took
    std::vector<NodeId> m_outerLists; // the lists that hold the trace lists (device_traces)
    std::unordered_map<NodeId, uint32_t> m_outerListIndex; // an outer list's index in m_outerLists
    bool m_declined = false;
    std::vector<FastItem> m_items;
    // The keys of the entries shapedEntry() takes: each key's memo reference opcode (its bytes, little-endian, in
    // `bytes`, `mask` their width) and the item it makes.
    struct ShapeKey {
        uint64_t bytes = 0;
        uint64_t mask = 0;
        uint32_t length = 0;
        uint32_t key = 0;
        bool keyIsNode = true;
    };
    std::vector<ShapeKey> m_shape;
    uint64_t m_shapeRewrites = 0; // m_memoRewrites when m_shape was learned
    std::vector<std::pair<uint64_t, uint32_t>> m_pendingSlots; // (memo slot, item) of the entry being decoded
    std::vector<NodeId> m_frameBuffer; // the frame dicts of the entry's new frames lists
    // Flags per node, grown on demand: frozen, a container the sink has read (frames lists, frame dicts: the tree
    // path reads them after the whole parse, so one that gains children later declines, place()); a trace list; an
    // outer list. One byte for all three: frozen nodes reach past the trace lists, so the lists' flags cost nothing.
    static constexpr uint8_t FrozenFlag = 1, TraceListFlag = 2, OuterListFlag = 4;
    std::vector<uint8_t> m_flags;
    bool flagged(NodeId n, uint8_t flag) const { return n < m_flags.size() && (m_flags[n] & flag); }
    void flag(NodeId n, uint8_t flag)
    {
        if (n >= m_flags.size())
            m_flags.resize(std::max<size_t>(size_t(n) + 1, m_flags.size() * 2));
        m_flags[n] |= flag;
    }
    bool frozen(NodeId n) const { return flagged(n, FrozenFlag); }
    void freeze(NodeId n) { flag(n, FrozenFlag); }
};

// Parses a decimal integer as Python's int() would for pickle's text opcodes (sign, digits, optional 'L'). Returns
// false when the text is not an integer; otherwise sets `kind`: Int (`value`), UInt (`unsignedValue`, in
// [2^63, 2^64)) or BigInt (beyond both).
bool parseTextInt(std::string_view text, NodeType& kind, int64_t& value, uint64_t& unsignedValue)
{
    while (!text.empty() && (text.back() == ' ' || text.back() == '\r'))
        text.remove_suffix(1);
    if (!text.empty() && text.back() == 'L')
        text.remove_suffix(1);
    const char* begin = text.data();
    const char* end = text.data() + text.size();
    if (begin != end && *begin == '+')
        ++begin;
    if (begin == end)
        return false;
    auto [ptr, ec] = std::from_chars(begin, end, value);
    if (ec == std::errc {} && ptr == end) {
        kind = NodeType::Int;
        return true;
    }
    if (ec != std::errc::result_out_of_range)
        return false;
    // Beyond int64_t: still an integer if every character is a digit.
    const bool negative = *begin == '-';
    const char* digits = negative ? begin + 1 : begin;
    if (digits == end || !std::all_of(digits, end, [](char c) { return c >= '0' && c <= '9'; }))
        return false;
    kind = NodeType::BigInt;
    if (!negative) {
        auto [uptr, uec] = std::from_chars(digits, end, unsignedValue);
        if (uec == std::errc {} && uptr == end)
            kind = NodeType::UInt;
    }
    return true;
}

// Decodes the body of a Python string literal (STRING opcode, protocol 0): the escapes of codecs.escape_decode.
bool decodeEscapedString(std::string_view quoted, std::string& out)
{
    if (quoted.size() < 2 || (quoted.front() != '\'' && quoted.front() != '"') || quoted.back() != quoted.front())
        return false;
    std::string_view body = quoted.substr(1, quoted.size() - 2);
    out.clear();
    for (size_t i = 0; i < body.size(); ++i) {
        char c = body[i];
        if (c != '\\') {
            appendUtf8(out, static_cast<uint8_t>(c)); // bytes above 0x7f read as Latin-1
            continue;
        }
        if (++i >= body.size())
            return false;
        c = body[i];
        switch (c) {
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x': {
            if (i + 2 >= body.size())
                return false;
            int h = hexValue(body[i + 1]), l = hexValue(body[i + 2]);
            if (h < 0 || l < 0)
                return false;
            appendUtf8(out, static_cast<uint32_t>(h * 16 + l));
            i += 2;
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                uint32_t v = 0;
                size_t n = 0;
                while (n < 3 && i < body.size() && body[i] >= '0' && body[i] <= '7') {
                    v = v * 8 + static_cast<uint32_t>(body[i] - '0');
                    ++i;
                    ++n;
                }
                --i;
                appendUtf8(out, v & 0xFF);
            } else {
                out += '\\'; // unknown escapes stay as written, as in Python
                out += c;
            }
        }
    }
    return true;
}

// Decodes raw-unicode-escape (UNICODE opcode, protocol 0): Latin-1 bytes plus \uXXXX and \UXXXXXXXX.
bool decodeRawUnicodeEscape(std::string_view text, std::string& out)
{
    out.clear();
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c == '\\' && i + 1 < text.size() && (text[i + 1] == 'u' || text[i + 1] == 'U')) {
            const size_t digits = text[i + 1] == 'u' ? 4 : 8;
            if (i + 2 + digits > text.size())
                return false;
            uint32_t cp = 0;
            for (size_t k = 0; k < digits; ++k) {
                int h = hexValue(text[i + 2 + k]);
                if (h < 0)
                    return false;
                cp = cp * 16 + static_cast<uint32_t>(h);
            }
            if (cp > 0x10FFFF)
                return false;
            appendUtf8(out, cp);
            i += 1 + digits;
        } else {
            appendUtf8(out, static_cast<uint8_t>(c));
        }
    }
    return true;
}

bool Machine::pushWideLong(const uint8_t* p, uint64_t n, uint64_t at)
{
    if (m_stack.size() >= m_limits.maxStack)
        return setError(fail(ErrorCode::TooDeep, TooManyValues, at));
    const bool negative = (p[n - 1] & 0x80) != 0;
    bool extendsSign = true;
    for (uint64_t i = 8; i < n && extendsSign; ++i)
        extendsSign = p[i] == (negative ? 0xFF : 0x00);
    uint64_t v = 0;
    for (uint64_t i = 0; i < 8; ++i)
        v |= uint64_t(p[i]) << (8 * i);
    if (!extendsSign)
        m_stack.push_back(m_tree.addBigInt(at));
    else if (negative == ((p[7] & 0x80) != 0))
        m_stack.push_back(m_tree.addInt(static_cast<int64_t>(v))); // the 8th byte's top bit agrees with the sign
    else
        m_stack.push_back(negative ? m_tree.addBigInt(at) : m_tree.addUnsigned(v)); // below -2^63, or [2^63, 2^64)
    return true;
}

NodeId Machine::textInteger(uint8_t code, std::string_view line, uint64_t at)
{
    if (code == op::Int && (line == "00" || line == "01"))
        return m_tree.addBool(line == "01");
    NodeType kind = NodeType::Int;
    int64_t value = 0;
    uint64_t unsignedValue = 0;
    if (!parseTextInt(line, kind, value, unsignedValue))
        return NoNode;
    return kind == NodeType::Int ? m_tree.addInt(value)
        : kind == NodeType::UInt ? m_tree.addUnsigned(unsignedValue)
                                 : m_tree.addBigInt(at);
}

[[gnu::always_inline]] inline bool Machine::fastMemoAfter(uint32_t value, uint32_t pendingItem)
{
    uint8_t code;
    while (peekOp(code)) {
        uint64_t index;
        if (code == op::Memoize) {
            index = m_memoFilled;
            m_pos += 1;
        } else if (code == op::BinPut) {
            if (!have(2))
                return decline();
            index = m_data[m_pos + 1];
            m_pos += 2;
        } else if (code == op::LongBinPut) {
            if (!have(5))
                return decline();
            uint32_t v;
            std::memcpy(&v, m_data.data() + m_pos + 1, 4);
            index = v;
            m_pos += 5;
        } else {
            return true;
        }
        if (!fastMemoPut(index, pendingItem == UINT32_MAX ? value : TagPending | pendingItem))
            return false;
        if (pendingItem != UINT32_MAX)
            m_pendingSlots.emplace_back(index, pendingItem);
    }
    return decline(); // the data ends
}

[[gnu::always_inline]] inline bool Machine::fastGet(uint8_t code, uint32_t& slot)
{
    uint64_t index;
    if (code == op::BinGet) {
        if (!have(2))
            return decline();
        index = m_data[m_pos + 1];
        m_pos += 2;
    } else {
        if (!have(5))
            return decline();
        uint32_t v;
        std::memcpy(&v, m_data.data() + m_pos + 1, 4);
        index = v;
        m_pos += 5;
    }
    if (index >= m_memo.size() || m_memo[index] == NoNode)
        return decline();
    slot = m_memo[index];
    return true;
}

[[gnu::always_inline]] inline bool Machine::fastInt(uint8_t code, int64_t& value, bool& isInt)
{
    isInt = true;
    switch (code) {
    case op::BinInt1:
        if (!have(2))
            return decline();
        value = m_data[m_pos + 1];
        m_pos += 2;
        return true;
    case op::BinInt2: {
        if (!have(3))
            return decline();
        uint16_t v;
        std::memcpy(&v, m_data.data() + m_pos + 1, 2);
        value = v;
        m_pos += 3;
        return true;
    }
    case op::BinInt: {
        if (!have(5))
            return decline();
        int32_t v;
        std::memcpy(&v, m_data.data() + m_pos + 1, 4);
        value = v;
        m_pos += 5;
        return true;
    }
    case op::Long1: {
        if (!have(2))
            return decline();
        const uint64_t n = m_data[m_pos + 1];
        if (n > 8 || !have(2 + n))
            return decline(); // wider: the general path says what it is
        uint64_t raw = 0;
        if (m_data.size() - m_pos >= 10) {
            std::memcpy(&raw, m_data.data() + m_pos + 2, 8); // the bytes past the n-th are shifted out below
        } else {
            for (uint64_t i = 0; i < n; ++i)
                raw |= uint64_t(m_data[m_pos + 2 + i]) << (8 * i);
        }
        const unsigned shift = unsigned(64 - 8 * n);
        value = n == 0 ? 0 : static_cast<int64_t>(raw << shift) >> shift; // as longBytes
        m_pos += 2 + n;
        return true;
    }
    default: isInt = false; return false;
    }
}

[[gnu::always_inline]] inline bool Machine::fastText(uint8_t code, uint64_t& offset, uint32_t& length, bool& isText)
{
    isText = true;
    uint64_t n = 0, header = 0;
    switch (code) {
    case op::ShortBinUnicode:
        if (!have(2))
            return decline();
        n = m_data[m_pos + 1];
        header = 2;
        break;
    case op::BinUnicode: {
        if (!have(5))
            return decline();
        uint32_t v;
        std::memcpy(&v, m_data.data() + m_pos + 1, 4);
        n = v;
        header = 5;
        break;
    }
    case op::BinUnicode8:
        if (!have(9))
            return decline();
        std::memcpy(&n, m_data.data() + m_pos + 1, 8);
        header = 9;
        break;
    default: isText = false; return false;
    }
    if (n > UINT32_MAX || !have(header + n))
        return decline();
    offset = m_pos + header;
    length = static_cast<uint32_t>(n);
    m_pos += header + n;
    return true;
}

NodeId Machine::fastNode(int depth)
{
    uint8_t code;
    if (depth > 8 || !peekOp(code)) {
        decline();
        return NoNode;
    }
    NodeId node = NoNode;
    int64_t integer = 0;
    uint64_t offset = 0;
    uint32_t length = 0;
    bool matched = false;
    if (fastInt(code, integer, matched)) {
        node = m_tree.addInt(integer);
    } else if (matched) {
        return NoNode;
    } else if (fastText(code, offset, length, matched)) {
        node = m_tree.addInputString(NodeType::String, offset, length);
    } else if (matched) {
        return NoNode;
    } else {
        switch (code) {
        case op::None: node = m_tree.addNone(); ++m_pos; break;
        case op::NewTrue:
        case op::NewFalse: node = m_tree.addBool(code == op::NewTrue); ++m_pos; break;
        case op::EmptyList:
        case op::EmptyDict: node = m_tree.addContainer(code == op::EmptyDict ? NodeType::Dict : NodeType::List); ++m_pos; break;
        case op::BinGet:
        case op::LongBinGet: {
            uint32_t slot = NoNode;
            if (!fastGet(code, slot))
                return NoNode;
            if (slot >= TagString) {
                if ((slot & TagMask) != TagString) {
                    decline();
                    return NoNode;
                }
                slot = m_tree.addOwnedString(NodeType::String, m_sink->text(model::StringId { slot & ~TagMask }));
            }
            node = slot;
            break;
        }
        default: decline(); return NoNode;
        }
    }
    if (node >= TagString || !fastMemoAfter(node)) {
        decline();
        return NoNode;
    }
    const NodeType type = m_tree.type(node);
    if (type != NodeType::List && type != NodeType::Dict)
        return node;
    if (code != op::EmptyList && code != op::EmptyDict)
        return node; // a container seen before: complete
    // Its items: MARK ... APPENDS/SETITEMS batches (save_list, save_dict), or one list item and APPEND. Another
    // opcode ends it: the value after it is not ours.
    const bool isDict = type == NodeType::Dict;
    while (true) {
        if (!peekOp(code)) {
            decline();
            return NoNode;
        }
        if (code == op::Mark) {
            ++m_pos;
            const size_t base = m_stack.size();
            while (true) {
                if (!peekOp(code)) {
                    decline();
                    return NoNode;
                }
                if (code == (isDict ? op::SetItems : op::Appends)) {
                    ++m_pos;
                    break;
                }
                const NodeId child = fastNode(depth + 1);
                if (child == NoNode || m_stack.size() >= m_limits.maxStack) {
                    decline();
                    return NoNode;
                }
                m_stack.push_back(child);
            }
            const size_t count = m_stack.size() - base;
            if (isDict && count % 2 != 0) {
                decline();
                return NoNode;
            }
            m_tree.append(node, std::span<const NodeId>(m_stack.data() + base, count));
            m_stack.resize(base);
            continue;
        }
        // One item and APPEND (a one-frame stack): the item is a frame dict, new or from the memo; a key of the
        // entry (a str) is not one.
        bool item = !isDict && code == op::EmptyDict;
        if (!isDict && (code == op::BinGet || code == op::LongBinGet)) {
            const uint64_t at = m_pos;
            uint32_t slot = NoNode;
            if (!fastGet(code, slot))
                return NoNode;
            m_pos = at;
            item = slot < TagString && m_tree.type(slot) == NodeType::Dict;
        }
        if (!item)
            return node;
        const NodeId child = fastNode(depth + 1);
        if (child == NoNode || !peekOp(code) || code != op::Append) {
            decline();
            return NoNode;
        }
        ++m_pos;
        m_tree.append(node, std::span<const NodeId>(&child, 1));
    }
}

bool Machine::fastFrames(FastItem& item, uint32_t index)
{
    ++m_pos; // EMPTY_LIST
    if (!fastMemoAfter(0, index)) // its slots get its stack once the sink has it
        return false;
    const size_t begin = m_frameBuffer.size();
    uint8_t code;
    while (true) {
        if (!peekOp(code))
            return decline();
        if (code == op::Mark) {
            ++m_pos;
            while (true) {
                if (!peekOp(code))
                    return decline();
                if (code == op::Appends) {
                    ++m_pos;
                    break;
                }
                const NodeId frame = fastNode(1);
                if (frame == NoNode)
                    return false;
                m_frameBuffer.push_back(frame);
            }
            continue;
        }
        // One frame and APPEND (a one-frame stack): a frame dict, new or from the memo; a key of the entry (a str)
        // or its SETITEMS ends the list.
        bool frameNext = code == op::EmptyDict;
        if (code == op::BinGet || code == op::LongBinGet) {
            const uint64_t at = m_pos;
            uint32_t slot = NoNode;
            if (!fastGet(code, slot))
                return false;
            m_pos = at;
            frameNext = slot < TagString && m_tree.type(slot) == NodeType::Dict;
        }
        if (!frameNext)
            break;
        const NodeId frame = fastNode(1);
        if (frame == NoNode)
            return false;
        if (!peekOp(code) || code != op::Append)
            return decline();
        ++m_pos;
        m_frameBuffer.push_back(frame);
    }
    item.kind = FastItem::Kind::Frames;
    item.integer = int64_t(begin);
    item.id = uint32_t(m_frameBuffer.size() - begin);
    return true;
}

bool Machine::fastEntry(NodeId list)
{
    if (!m_shape.empty()) {
        bool matched = false;
        const bool ok = shapedEntry(list, matched);
        if (matched)
            return ok;
    }
    if (!fastMemoAfter(OpaqueSlot))
        return false;
    uint8_t code;
    if (!peekOp(code) || code != op::Mark)
        return decline();
    ++m_pos;
    m_items.clear();
    m_pendingSlots.clear();
    m_frameBuffer.clear();
    // Where each key's memo reference is, while every key is one (the entry's shape, learnShape()); a memo slot
    // rewritten meanwhile may be one of them, which then means another key.
    const uint64_t rewritesBefore = m_memoRewrites;
    uint64_t keyAtBuffer[MaxItems];
    size_t keyAtCount = 0;
    bool keysAreReferences = true;
    while (true) {
        if (!peekOp(code))
            return decline();
        if (code == op::SetItems) {
            ++m_pos;
            break;
        }
        if (m_items.size() >= MaxItems)
            return decline();
        const uint32_t index = static_cast<uint32_t>(m_items.size());
        FastItem& item = m_items.emplace_back();
        // The key: a str seen before (a memo reference), or new (then a node, for the entries after it).
        uint64_t offset = 0;
        uint32_t length = 0;
        bool matched = false;
        if (code == op::BinGet || code == op::LongBinGet) {
            keyAtBuffer[keyAtCount++] = m_pos;
            uint32_t slot = NoNode;
            if (!fastGet(code, slot))
                return false;
            if (slot < TagString) {
                if (m_tree.type(slot) != NodeType::String)
                    return decline();
                item.key = slot;
            } else if ((slot & TagMask) == TagString) {
                item.key = slot & ~TagMask;
                item.keyIsNode = false;
            } else {
                return decline();
            }
        } else if (fastText(code, offset, length, matched)) {
            keysAreReferences = false;
            const NodeId node = m_tree.addInputString(NodeType::String, offset, length);
            if (node >= TagString || !fastMemoAfter(node))
                return decline();
            item.key = node;
        } else {
            return decline();
        }
        // The value.
        if (!peekOp(code))
            return decline();
        if (fastInt(code, item.integer, matched)) {
            item.kind = FastItem::Kind::Int;
            if (!fastMemoAfter(0, index))
                return false;
        } else if (matched) {
            return false;
        } else if (fastText(code, offset, length, matched)) {
            item.kind = FastItem::Kind::Text;
            item.text = std::string_view(reinterpret_cast<const char*>(m_data.data()) + offset, length);
            if (!fastMemoAfter(0, index))
                return false;
        } else if (matched) {
            return false;
        } else if (code == op::None) {
            ++m_pos;
            item.kind = FastItem::Kind::None;
            if (!fastMemoAfter(0, index))
                return false;
        } else if (code == op::BinGet || code == op::LongBinGet) {
            uint32_t slot = NoNode;
            if (!fastGet(code, slot))
                return false;
            if (!referencedItem(slot, item)) {
                // Else only a value of this entry, not interned yet.
                if ((slot & TagMask) != TagPending || slot == OpaqueSlot || slot == NoNode
                    || (slot & ~TagMask) >= index)
                    return decline();
                const FastItem& earlier = m_items[slot & ~TagMask];
                item.kind = earlier.kind;
                item.integer = earlier.integer;
                item.text = earlier.text;
                item.id = earlier.id;
            }
        } else if (code == op::EmptyList) {
            if (!fastFrames(item, index))
                return false;
        } else if (code == op::NewTrue || code == op::NewFalse) {
            const NodeId node = fastNode(0);
            if (node == NoNode)
                return false;
            item.kind = FastItem::Kind::Node;
            item.id = node;
        } else {
            return decline();
        }
    }
    if (!sinkEntry(list))
        return false;
    if (keysAreReferences && m_memoRewrites == rewritesBefore)
        learnShape(std::span<const uint64_t>(keyAtBuffer, keyAtCount));
    return true;
}

bool Machine::sinkEntry(NodeId list)
{
    for (FastItem& item : m_items)
        if (item.kind == FastItem::Kind::Frames) // (the buffer has stopped moving)
            item.frames = std::span<const NodeId>(m_frameBuffer.data() + item.integer, item.id);
    if (!m_sink->entry(list, m_items))
        return decline();
    for (const FastItem& item : m_items) {
        if (item.kind == FastItem::Kind::Node && !frozen(item.id) && m_tree.isContainer(item.id)) {
            freeze(item.id);
            m_tree.forEachChild(item.id, [&](NodeId c) { freeze(c); });
        }
        for (NodeId frame : item.frames)
            if (!frozen(frame))
                freeze(frame);
    }
    // The memo slots that named this entry's values, now that they have ids (or, rarely, nodes). (Slots made in this
    // entry: no key of a shape names them.)
    for (const auto& [slot, index] : m_pendingSlots) {
        const FastItem& item = m_items[index];
        uint32_t value = NoNode;
        switch (item.kind) {
        case FastItem::Kind::String: value = item.id < TagString ? TagString | item.id : NoNode; break;
        case FastItem::Kind::Int: value = m_tree.addInt(item.integer); break;
        case FastItem::Kind::None: value = m_tree.addNone(); break;
        case FastItem::Kind::Node: value = item.id; break;
        case FastItem::Kind::Stack: value = item.id < TagString ? TagStack | item.id : NoNode; break;
        case FastItem::Kind::Text:
        case FastItem::Kind::Frames: break;
        }
        if (value == NoNode || (value >= TagString && (value & TagMask) != TagString && (value & TagMask) != TagStack))
            return decline();
        m_memo[slot] = value;
    }
    return true;
}

void Machine::learnShape(std::span<const uint64_t> keyAt)
{
    m_shape.clear();
    for (size_t i = 0; i < keyAt.size(); ++i) {
        const uint64_t at = keyAt[i];
        ShapeKey k;
        k.length = m_data[at] == op::BinGet ? 2 : 5;
        k.mask = (uint64_t(1) << (8 * k.length)) - 1;
        for (uint32_t b = 0; b < k.length; ++b)
            k.bytes |= uint64_t(m_data[at + b]) << (8 * b);
        k.key = m_items[i].key;
        k.keyIsNode = m_items[i].keyIsNode;
        m_shape.push_back(k);
    }
    m_shapeRewrites = m_memoRewrites;
}

[[gnu::always_inline]] inline uint64_t loadLE64(const uint8_t* p)
{
    uint64_t v;
    std::memcpy(&v, p, 8); // little-endian hosts, as every integer of the pickle is read here
    return v;
}

constexpr ptrdiff_t PrefetchAhead = 4096;

bool Machine::shapedEntry(NodeId list, bool& matched)
{
    matched = false;
    // The entry's MEMOIZE must take the next slot (no holes in the memo), so that no slot a reference below reads is
    // one fastEntry() would have stored first; and no slot a key names may have changed since the shape was learned.
    if (m_shapeRewrites != m_memoRewrites || m_memoFilled != m_memo.size())
        return false;
    const uint8_t* const begin = m_data.data() + m_pos;
    const uint8_t* const end = m_data.data() + m_data.size();
    // Room for a key and an int value (at most 5 + 10 bytes), SETITEMS after them, and the 8 bytes the loads below
    // read past an opcode: checked before each item (and before each frame of a list, each text).
    constexpr ptrdiff_t Room = 15 + 1 + 8;
    const uint8_t* p = begin;
    if (end - p < Room || p[0] != op::Memoize || p[1] != op::Mark)
        return false;
    // A mapped file's input a page ahead (a hint: it never faults): its 4 KiB pages each cost the parse a miss of
    // the TLB and then of the cache, which the hardware's prefetcher does not start across a page boundary; the
    // reads of the entries' first bytes were two fifths of this function (perf on the 1 GB file). memscope-cli
    // stats of that file: 2.41-2.68 s -> 2.22-2.35 s, four runs each, alternating. Input in memory (huge pages,
    // bench_load's LoadSynthetic) parsed 4 % slower with it: only a mapped file, whose pages go as the parse
    // consumes them (a ConsumedFn), gets it.
    if (m_prefetchInput)
        __builtin_prefetch(p + PrefetchAhead);
    p += 2;
    const NodeId* const memo = m_memo.data();
    const size_t memoSize = m_memo.size();
    const size_t count = m_shape.size();
    m_items.resize(count);
    m_frameBuffer.clear();
    // The items whose values have a memo slot (MEMOIZE after them), in order: their slots follow the entry's own.
    uint32_t memoized[MaxItems];
    size_t memoizedCount = 0;
    // A frame of a frames list: a memo reference to a frame dict (as fastFrames(): a dict node; anything else is
    // fastEntry()'s to decode or decline).
    auto frameAt = [&](const uint8_t* q, NodeId& frame) HOT_INLINE -> int {
        if (q[0] != op::BinGet && q[0] != op::LongBinGet)
            return 0;
        const uint64_t index = q[0] == op::BinGet ? q[1] : (loadLE64(q + 1) & 0xFFFFFFFFu);
        if (index >= memoSize || memo[index] >= TagString || m_tree.type(memo[index]) != NodeType::Dict)
            return 0;
        frame = memo[index];
        return q[0] == op::BinGet ? 2 : 5;
    };
    for (size_t i = 0; i < count; ++i) {
        const ShapeKey& k = m_shape[i];
        if (end - p < Room || (loadLE64(p) & k.mask) != k.bytes)
            return false;
        p += k.length;
        FastItem& item = m_items[i];
        item.key = k.key;
        item.keyIsNode = k.keyIsNode;
        item.frames = {};
        // The value, as fastEntry() reads it (fastInt, fastText, fastGet, fastFrames).
        switch (p[0]) {
        case op::BinInt1:
            item.kind = FastItem::Kind::Int;
            item.integer = p[1];
            p += 2;
            break;
        case op::BinInt2:
            item.kind = FastItem::Kind::Int;
            item.integer = int64_t(loadLE64(p + 1) & 0xFFFF);
            p += 3;
            break;
        case op::BinInt:
            item.kind = FastItem::Kind::Int;
            item.integer = int32_t(uint32_t(loadLE64(p + 1)));
            p += 5;
            break;
        case op::Long1: {
            const uint32_t n = p[1];
            if (n > 8)
                return false;
            const unsigned shift = 64 - 8 * n;
            item.kind = FastItem::Kind::Int;
            item.integer = n == 0 ? 0 : static_cast<int64_t>(loadLE64(p + 2) << shift) >> shift;
            p += 2 + n;
            break;
        }
        case op::None:
            item.kind = FastItem::Kind::None;
            p += 1;
            break;
        case op::ShortBinUnicode:
        case op::BinUnicode: {
            const uint32_t header = p[0] == op::ShortBinUnicode ? 2 : 5;
            const uint64_t n = p[0] == op::ShortBinUnicode ? p[1] : (loadLE64(p + 1) & 0xFFFFFFFFu);
            if (uint64_t(end - p) < header + n + Room)
                return false;
            item.kind = FastItem::Kind::Text;
            item.text = std::string_view(reinterpret_cast<const char*>(p + header), n);
            p += header + n;
            break;
        }
        case op::BinGet:
        case op::LongBinGet: {
            const uint64_t index = p[0] == op::BinGet ? p[1] : (loadLE64(p + 1) & 0xFFFFFFFFu);
            if (index >= memoSize)
                return false;
            if (!referencedItem(memo[index], item))
                return false;
            p += p[0] == op::BinGet ? 2 : 5;
            continue; // (no memo slot after a reference: fastEntry() declines one)
        }
        case op::EmptyList: {
            // A frames list (PyTorch makes one per entry): its memo slot, then its frame dicts, met before, in
            // batches (MARK ... APPENDS) or one at a time (APPEND).
            ++p;
            if (p[0] == op::Memoize) {
                memoized[memoizedCount++] = uint32_t(i);
                ++p;
            }
            const size_t first = m_frameBuffer.size();
            while (true) {
                NodeId frame = NoNode;
                if (p[0] == op::Mark) {
                    ++p;
                    while (true) {
                        if (end - p < Room)
                            return false;
                        if (p[0] == op::Appends) {
                            ++p;
                            break;
                        }
                        const int length = frameAt(p, frame);
                        if (length == 0)
                            return false;
                        m_frameBuffer.push_back(frame);
                        p += length;
                    }
                } else if (const int length = frameAt(p, frame); length != 0) {
                    if (end - p < Room || p[length] != op::Append)
                        return false;
                    m_frameBuffer.push_back(frame);
                    p += length + 1;
                } else {
                    break;
                }
                if (end - p < Room)
                    return false;
            }
            item.kind = FastItem::Kind::Frames;
            item.integer = int64_t(first);
            item.id = uint32_t(m_frameBuffer.size() - first);
            continue; // (its MEMOIZE is taken)
        }
        default: return false;
        }
        // An int, None or text may have a memo slot (fastMemoAfter() after its value).
        if (p[0] == op::Memoize) {
            memoized[memoizedCount++] = uint32_t(i);
            ++p;
        }
    }
    if (p[0] != op::SetItems)
        return false;
    // Taken: what fastEntry() would have done with its memo, then the sink.
    matched = true;
    m_pos += uint64_t(p + 1 - begin);
    m_pendingSlots.clear();
    if (!fastMemoPut(m_memoFilled, OpaqueSlot))
        return false;
    for (size_t j = 0; j < memoizedCount; ++j) {
        m_pendingSlots.emplace_back(m_memoFilled, memoized[j]);
        if (!fastMemoPut(m_memoFilled, TagPending | memoized[j]))
            return false;
    }
    return sinkEntry(list);
}

Error Machine::run(NodeId& root)
{
    const uint64_t size = m_data.size();
    m_memo.reserve(size / 40 + 16);
    m_stack.reserve(4096);
    uint64_t nextProgress = 1u << 20;
    // How often the consumer hears what input is behind: often enough that a mapped file's pages go as the entries
    // grow, seldom enough that the madvise calls cost nothing.
    constexpr uint64_t ConsumedStep = uint64_t(8) << 20;
    uint64_t nextConsumed = m_consumed && *m_consumed ? ConsumedStep : UINT64_MAX;
    std::string scratch;

    while (m_pos < size) {
        if (m_progress && m_pos >= nextProgress) {
            nextProgress = m_pos + (1u << 20);
            if (!m_progress(m_pos, size))
                return fail(ErrorCode::Cancelled, "loading was cancelled", m_pos);
        }
        if (m_pos >= nextConsumed) [[unlikely]] {
            nextConsumed = m_pos + ConsumedStep;
            (*m_consumed)(m_pos);
        }
        const uint64_t at = m_pos;
        const uint8_t code = m_data[m_pos++];

        // Where the data ran out (its size), not where the cut opcode began: a cut 50 kB pickle ends inside its
        // first 64 KiB FRAME, whose opcode is at byte 2, and "at byte 2" would send a reader to the wrong place.
        auto truncated = [&] {
            return fail(ErrorCode::Truncated,
                        "the file is truncated: its data ends after " + std::to_string(size)
                            + " bytes, in the middle of the opcode that starts at byte " + std::to_string(at),
                        size);
        };
        auto underflow = [&] {
            return fail(ErrorCode::Corrupt, "the pickle's stack is empty where a value is needed: the file is corrupt",
                        at);
        };
        auto pushNode = [&](NodeId n) HOT_INLINE -> bool {
            if (m_stack.size() >= m_limits.maxStack)
                return false;
            m_stack.push_back(n);
            return true;
        };
        auto tooManyValues = [&] { return fail(ErrorCode::TooDeep, TooManyValues, at); };
        auto stringArg = [&](NodeType type, uint64_t length) HOT_INLINE -> bool {
            if (!have(length))
                return setError(truncated());
            if (length > UINT32_MAX)
                return setError(fail(ErrorCode::TooLarge, "a string longer than 4 GiB", at));
            const NodeId n = m_tree.addInputString(type, m_pos, static_cast<uint32_t>(length));
            m_pos += length;
            if (!pushNode(n))
                return setError(tooManyValues());
            return true;
        };
        auto popMark = [&](size_t& markPos) -> bool {
            if (m_marks.empty())
                return false;
            markPos = m_marks.back();
            m_marks.pop_back();
            return markPos <= m_stack.size();
        };
        auto memoStore = [&](uint64_t index) HOT_INLINE -> bool {
            if (m_stack.empty())
                return setError(underflow());
            // Python's pickler numbers memo slots 0, 1, 2...: an index beyond the file's size cannot come from it.
            if (index >= m_limits.maxMemo || index > size)
                return setError(fail(ErrorCode::TooDeep, "memo index " + std::to_string(index) + " is beyond the reader's limit",
                            at));
            const bool rewrite = index < m_memo.size();
            if (index >= m_memo.size())
                m_memo.resize(index + 1, NoNode);
            if (m_sink && (m_stack.back() >= TagString || m_stack.back() == m_placeholder))
                return decline(); // a node id the tags would shadow, or an entry the sink took
            if (m_memo[index] == NoNode)
                ++m_memoFilled;
            m_memoRewrites += rewrite;
            m_memo[index] = m_stack.back();
            return true;
        };
        auto memoLoad = [&](uint64_t index) HOT_INLINE -> bool {
            if (index >= m_memo.size() || m_memo[index] == NoNode)
                return setError(fail(ErrorCode::Corrupt,
                            "memo reference " + std::to_string(index) + " was never stored: the file is corrupt", at));
            if (m_sink && isTraceList(m_memo[index])) [[unlikely]]
                return decline(); // its entries are the sink's: the tree does not have them
            if (m_sink && m_memo[index] >= TagString) [[unlikely]] {
                // A string the direct path interned, wanted outside it: made a node now (anything else declines).
                if ((m_memo[index] & TagMask) != TagString)
                    return decline();
                const std::string_view text = m_sink->text(model::StringId { m_memo[index] & ~TagMask });
                m_memo[index] = m_tree.addOwnedString(NodeType::String, text);
                ++m_memoRewrites;
                if (m_memo[index] >= TagString)
                    return decline();
            }
            if (!pushNode(m_memo[index]))
                return setError(tooManyValues());
            return true;
        };
        auto pushInt = [&](int64_t v) HOT_INLINE -> bool {
            if (!pushNode(m_tree.addInt(v)))
                return setError(tooManyValues());
            return true;
        };
        // LONG1/LONG4: little-endian two's complement (pickletools.py decode_long). Up to 8 bytes (every address
        // and time stamp) is an int64_t sign-extended from its last byte; more is pushWideLong's.
        auto longBytes = [&](uint64_t n) -> bool {
            if (!have(n))
                return setError(truncated());
            const uint8_t* p = m_data.data() + m_pos;
            m_pos += n;
            if (n - 1 < 8) [[likely]] {
                uint64_t raw = 0;
                // (m_data.size(), not the loop's `size`: a capture more costs every opcode a store, as the closures
                // of the lambdas the compiler keeps out of line are made afresh each turn of the loop)
                if (m_data.size() - (m_pos - n) >= 8) {
                    std::memcpy(&raw, p, 8); // the bytes past the n-th are shifted out below
                } else {
                    for (uint64_t i = 0; i < n; ++i)
                        raw |= uint64_t(p[i]) << (8 * i);
                }
                const unsigned shift = unsigned(64 - 8 * n);
                return pushInt(static_cast<int64_t>(raw << shift) >> shift);
            }
            if (n == 0)
                return pushInt(0);
            return pushWideLong(p, n, at);
        };
        auto tupleFrom = [&](size_t first) -> bool {
            const NodeId t = m_tree.addContainer(NodeType::Tuple);
            if (!place(t, std::span<const NodeId>(m_stack.data() + first, m_stack.size() - first)))
                return false;
            m_stack.resize(first);
            m_stack.push_back(t);
            return true;
        };

        bool ok = true;
        switch (code) {
        case op::Proto: {
            if (!have(1))
                return truncated();
            const uint8_t proto = m_data[m_pos++];
            if (proto > 5)
                return fail(ErrorCode::TooNew,
                            "pickle protocol " + std::to_string(proto) + " is newer than the newest known (5)", at);
            break;
        }
        case op::Frame: {
            if (!have(8))
                return truncated();
            const uint64_t frameSize = readLE<uint64_t>();
            if (!have(frameSize)) {
                // Refused at once, although the frame's first bytes may still parse: a pickle is only complete at
                // its STOP, which lies past the frame's end (Python's unpickler fails later, at the first read past
                // the data: pickle.py, _Unframer.read, "pickle exhausted before end of frame"). The frame's extent
                // says how much of the file is missing.
                const uint64_t frameEnd = m_pos + frameSize < m_pos ? UINT64_MAX : m_pos + frameSize;
                return fail(ErrorCode::Truncated,
                            "the file is truncated: its data ends after " + std::to_string(size)
                                + " bytes, inside a pickle frame (a chunk of the pickle's data) that starts at byte "
                                + std::to_string(m_pos)
                                + " and should end at byte " + std::to_string(frameEnd),
                            size);
            }
            break;
        }
        case op::Stop: {
            if (m_stack.empty())
                return underflow();
            if (!m_marks.empty())
                return fail(ErrorCode::Corrupt, "the pickle stops with an unclosed MARK: the file is corrupt", at);
            root = m_stack.back();
            if (m_sink && !m_traceLists.empty() && !directPathHolds(root))
                return decline(), std::move(m_error);
            return {};
        }
        case op::Mark:
            if (m_marks.size() >= m_limits.maxMarkDepth)
                return fail(ErrorCode::TooDeep,
                            "nested more than " + std::to_string(m_limits.maxMarkDepth) + " levels deep", at);
            m_marks.push_back(m_stack.size());
            break;
        case op::Pop:
            if (m_stack.empty())
                return underflow();
            // Python's POP also discards a MARK that is on top of the stack.
            if (!m_marks.empty() && m_marks.back() == m_stack.size())
                m_marks.pop_back();
            else
                m_stack.pop_back();
            break;
        case op::PopMark: {
            size_t mark;
            if (!popMark(mark))
                return fail(ErrorCode::Corrupt, "POP_MARK without a MARK: the file is corrupt", at);
            m_stack.resize(mark);
            break;
        }
        case op::Dup:
            if (m_stack.empty())
                return underflow();
            if (m_sink && m_stack.back() == m_placeholder)
                return decline(), std::move(m_error);
            if (!pushNode(m_stack.back()))
                return tooManyValues();
            break;
        case op::None:
            if (!pushNode(m_tree.addNone()))
                return tooManyValues();
            break;
        case op::NewTrue:
        case op::NewFalse:
            if (!pushNode(m_tree.addBool(code == op::NewTrue)))
                return tooManyValues();
            break;
        case op::BinInt:
            if (!have(4))
                return truncated();
            ok = pushInt(readLE<int32_t>());
            break;
        case op::BinInt1:
            if (!have(1))
                return truncated();
            ok = pushInt(readLE<uint8_t>());
            break;
        case op::BinInt2:
            if (!have(2))
                return truncated();
            ok = pushInt(readLE<uint16_t>());
            break;
        case op::Long1: {
            if (!have(1))
                return truncated();
            const uint8_t n = readLE<uint8_t>();
            ok = longBytes(n);
            break;
        }
        case op::Long4: {
            if (!have(4))
                return truncated();
            const int32_t n = readLE<int32_t>();
            if (n < 0)
                return fail(ErrorCode::Corrupt, "LONG4 with a negative length: the file is corrupt", at);
            ok = longBytes(static_cast<uint64_t>(n));
            break;
        }
        case op::Int:
        case op::Long: {
            std::string_view line;
            if (!readLine(line))
                return truncated();
            const NodeId node = textInteger(code, line, at);
            if (node == NoNode)
                return fail(ErrorCode::Corrupt, "a malformed integer: the file is corrupt", at);
            if (!pushNode(node))
                return tooManyValues();
            break;
        }
        case op::Float: {
            std::string_view line;
            if (!readLine(line))
                return truncated();
            scratch.assign(line);
            char* end = nullptr;
            const double v = std::strtod(scratch.c_str(), &end);
            if (scratch.empty() || end != scratch.c_str() + scratch.size())
                return fail(ErrorCode::Corrupt, "a malformed float: the file is corrupt", at);
            if (!pushNode(m_tree.addFloat(v)))
                return tooManyValues();
            break;
        }
        case op::BinFloat: {
            if (!have(8))
                return truncated();
            uint64_t bits = 0;
            for (int i = 0; i < 8; ++i)
                bits = (bits << 8) | m_data[m_pos + i]; // big-endian, unlike every other binary argument
            m_pos += 8;
            double v;
            std::memcpy(&v, &bits, sizeof v);
            if (!pushNode(m_tree.addFloat(v)))
                return tooManyValues();
            break;
        }
        case op::ShortBinUnicode:
        case op::ShortBinString:
        case op::ShortBinBytes:
            if (!have(1))
                return truncated();
            ok = stringArg(code == op::ShortBinBytes ? NodeType::Bytes : NodeType::String, readLE<uint8_t>());
            break;
        case op::BinUnicode:
        case op::BinString:
        case op::BinBytes: {
            if (!have(4))
                return truncated();
            const uint64_t n = code == op::BinString ? static_cast<uint64_t>(static_cast<uint32_t>(readLE<int32_t>()))
                                                      : readLE<uint32_t>();
            ok = stringArg(code == op::BinBytes ? NodeType::Bytes : NodeType::String, n);
            break;
        }
        case op::BinUnicode8:
        case op::BinBytes8:
        case op::ByteArray8:
            if (!have(8))
                return truncated();
            ok = stringArg(code == op::BinUnicode8 ? NodeType::String : NodeType::Bytes, readLE<uint64_t>());
            break;
        case op::String:
        case op::Unicode: {
            std::string_view line;
            if (!readLine(line))
                return truncated();
            std::string decoded;
            const bool decodedOk = code == op::String ? decodeEscapedString(line, decoded)
                                               : decodeRawUnicodeEscape(line, decoded);
            if (!decodedOk)
                return fail(ErrorCode::Corrupt, "a malformed text string: the file is corrupt", at);
            if (!pushNode(m_tree.addOwnedString(NodeType::String, decoded)))
                return tooManyValues();
            break;
        }
        case op::EmptyDict:
            if (m_sink && !m_stack.empty()) {
                // An entry of a trace list: the first of an APPENDS batch or one for APPEND (the list on top), or one
                // after another (the list under the batch's MARK). A wrong guess declines (place()).
                const NodeId top = m_stack.back();
                size_t list = traceListIndex(top);
                if (list == m_traceLists.size() && top == m_placeholder && !m_marks.empty() && m_marks.back() > 0
                    && m_marks.back() <= m_stack.size())
                    list = traceListIndex(m_stack[m_marks.back() - 1]);
                if (list < m_traceLists.size()) {
                    ok = fastEntry(m_traceLists[list]);
                    if (ok) {
                        ++m_sunk[list];
                        if (m_placeholder == NoNode)
                            m_placeholder = m_tree.addContainer(NodeType::Dict);
                        if (!pushNode(m_placeholder))
                            return tooManyValues();
                    }
                    break;
                }
            }
            [[fallthrough]];
        case op::EmptyList:
        case op::EmptyTuple:
        case op::EmptySet: {
            if (m_sink && code == op::EmptyList) {
                // A list of device_traces: what lies below it (past the lists of devices before it) is the outer
                // list and the key 'device_traces' (torch/csrc/cuda/memory_snapshot.cpp writes it so; the builder
                // checks that it was the top-level dict's).
                // The run of trace lists on top of the stack starts where the one on top says: nothing below a
                // value changes while it stays on the stack, and a trace list comes back to the stack only as a
                // DUP's copy (a memo reference declines), never in the slot it was pushed to. A copy on top is
                // no shape PyTorch writes: declined rather than walked (the walk made the reader cubic).
                size_t i = m_stack.size();
                if (i > 0 && isTraceList(m_stack[i - 1])) {
                    const size_t top = traceListIndex(m_stack[i - 1]);
                    if (m_pushedAt[top] != i - 1)
                        return decline(), std::move(m_error);
                    i = m_runStart[top];
                }
                if (i >= 2 && m_tree.type(m_stack[i - 1]) == NodeType::List
                    && m_tree.type(m_stack[i - 2]) == NodeType::String
                    && m_tree.string(m_stack[i - 2]) == "device_traces") {
                    const NodeId list = m_tree.addContainer(NodeType::List);
                    m_traceListIndex.emplace(list, uint32_t(m_traceLists.size()));
                    flag(list, TraceListFlag);
                    m_traceLists.push_back(list);
                    m_sunk.push_back(0);
                    m_placed.push_back(0);
                    m_pushedAt.push_back(m_stack.size());
                    m_runStart.push_back(i);
                    if (!flagged(m_stack[i - 1], OuterListFlag)) {
                        m_outerListIndex.emplace(m_stack[i - 1], uint32_t(m_outerLists.size()));
                        flag(m_stack[i - 1], OuterListFlag);
                        m_outerLists.push_back(m_stack[i - 1]);
                    }
                    if (!pushNode(list))
                        return tooManyValues();
                    break;
                }
            }
            const NodeType t = code == op::EmptyDict ? NodeType::Dict
                : code == op::EmptyTuple             ? NodeType::Tuple
                                                     : NodeType::List;
            if (!pushNode(m_tree.addContainer(t)))
                return tooManyValues();
            break;
        }
        case op::Append: {
            if (m_stack.size() < 2)
                return underflow();
            const NodeId list = m_stack[m_stack.size() - 2];
            if (m_tree.type(list) != NodeType::List)
                return fail(ErrorCode::Corrupt, "APPEND to something that is not a list: the file is corrupt", at);
            if (!place(list, std::span<const NodeId>(&m_stack.back(), 1)))
                return std::move(m_error);
            m_stack.pop_back();
            break;
        }
        case op::Appends:
        case op::AddItems:
        case op::SetItems: {
            size_t mark;
            if (!popMark(mark) || mark == 0)
                return fail(ErrorCode::Corrupt, "APPENDS/SETITEMS without a container under the MARK: the file is corrupt",
                            at);
            const NodeId target = m_stack[mark - 1];
            const NodeType want = code == op::SetItems ? NodeType::Dict : NodeType::List;
            if (m_tree.type(target) != want)
                return fail(ErrorCode::Corrupt, code == op::SetItems
                                ? "SETITEMS on something that is not a dict: the file is corrupt"
                                : "APPENDS on something that is not a list: the file is corrupt",
                            at);
            const size_t count = m_stack.size() - mark;
            if (code == op::SetItems && count % 2 != 0)
                return fail(ErrorCode::Corrupt, "SETITEMS with an odd number of values: the file is corrupt", at);
            if (!place(target, std::span<const NodeId>(m_stack.data() + mark, count)))
                return std::move(m_error);
            m_stack.resize(mark);
            break;
        }
        case op::SetItem: {
            if (m_stack.size() < 3)
                return underflow();
            const NodeId dict = m_stack[m_stack.size() - 3];
            if (m_tree.type(dict) != NodeType::Dict)
                return fail(ErrorCode::Corrupt, "SETITEM on something that is not a dict: the file is corrupt", at);
            if (!place(dict, std::span<const NodeId>(m_stack.data() + m_stack.size() - 2, 2)))
                return std::move(m_error);
            m_stack.resize(m_stack.size() - 2);
            break;
        }
        case op::List:
        case op::Dict:
        case op::FrozenSet: {
            size_t mark;
            if (!popMark(mark))
                return fail(ErrorCode::Corrupt, "LIST/DICT without a MARK: the file is corrupt", at);
            const size_t count = m_stack.size() - mark;
            if (code == op::Dict && count % 2 != 0)
                return fail(ErrorCode::Corrupt, "DICT with an odd number of values: the file is corrupt", at);
            const NodeId c = m_tree.addContainer(code == op::Dict ? NodeType::Dict : NodeType::List);
            if (!place(c, std::span<const NodeId>(m_stack.data() + mark, count)))
                return std::move(m_error);
            m_stack.resize(mark);
            m_stack.push_back(c);
            break;
        }
        case op::Tuple: {
            size_t mark;
            if (!popMark(mark))
                return fail(ErrorCode::Corrupt, "TUPLE without a MARK: the file is corrupt", at);
            ok = tupleFrom(mark);
            break;
        }
        case op::Tuple1:
        case op::Tuple2:
        case op::Tuple3: {
            const size_t n = code - op::Tuple1 + 1u;
            if (m_stack.size() < n)
                return underflow();
            ok = tupleFrom(m_stack.size() - n);
            break;
        }
        case op::Put: {
            std::string_view line;
            if (!readLine(line))
                return truncated();
            NodeType kind = NodeType::Int;
            int64_t index = 0;
            uint64_t unused = 0;
            if (!parseTextInt(line, kind, index, unused) || kind != NodeType::Int || index < 0)
                return fail(ErrorCode::Corrupt, "a malformed memo index: the file is corrupt", at);
            ok = memoStore(static_cast<uint64_t>(index));
            break;
        }
        case op::BinPut:
            if (!have(1))
                return truncated();
            ok = memoStore(readLE<uint8_t>());
            break;
        case op::LongBinPut:
            if (!have(4))
                return truncated();
            ok = memoStore(readLE<uint32_t>());
            break;
        case op::Memoize:
            ok = memoStore(m_memoFilled);
            break;
        case op::Get: {
            std::string_view line;
            if (!readLine(line))
                return truncated();
            NodeType kind = NodeType::Int;
            int64_t index = 0;
            uint64_t unused = 0;
            if (!parseTextInt(line, kind, index, unused) || kind != NodeType::Int || index < 0)
                return fail(ErrorCode::Corrupt, "a malformed memo index: the file is corrupt", at);
            ok = memoLoad(static_cast<uint64_t>(index));
            break;
        }
        case op::BinGet:
            if (!have(1))
                return truncated();
            ok = memoLoad(readLE<uint8_t>());
            break;
        case op::LongBinGet:
            if (!have(4))
                return truncated();
            ok = memoLoad(readLE<uint32_t>());
            break;
        default:
            if (const char* name = unsafeOpcodeName(code))
                return fail(ErrorCode::Refused,
                            std::string("not a memory snapshot and possibly unsafe: the pickle uses ") + name
                                + ", which would run code when loaded in Python; refused",
                            at);
            {
                char hex[8];
                std::snprintf(hex, sizeof hex, "0x%02x", code);
                return fail(ErrorCode::Corrupt, std::string("unknown pickle opcode ") + hex + ": the file is corrupt",
                            at);
            }
        }
        if (!ok)
            return std::move(m_error);
    }
    return fail(ErrorCode::Truncated,
                "the file is truncated: its data ends after " + std::to_string(size)
                    + " bytes without the pickle's STOP opcode",
                size);
}

} // namespace

Error parsePickle(std::span<const uint8_t> data, ValueTree& tree, NodeId& root, const PickleLimits& limits,
                  const ProgressFn& progress)
{
    root = NoNode;
    tree.reserveFor(data.size());
    Machine machine(data, tree, limits, progress);
    return machine.run(root);
}

Error parsePickle(std::span<const uint8_t> data, ValueTree& tree, NodeId& root, TraceSink& sink, bool& declined,
                  const PickleLimits& limits, const ProgressFn& progress, const ConsumedFn& consumed)
{
    root = NoNode;
    // The tree holds what is not a trace entry: a small part of a large file.
    tree.reserveFor(std::min<uint64_t>(data.size(), uint64_t(64) << 20));
    Machine machine(data, tree, limits, progress, &sink, &consumed);
    Error e = machine.run(root);
    declined = machine.declined();
    return e;
}

bool looksLikePickle(std::span<const uint8_t> data)
{
    if (data.empty())
        return false;
    if (data[0] == op::Proto)
        return true; // the parser names the protocol when it is too new
    // Protocol 0/1 have no header: accept an opcode that can come first (one that needs nothing on the stack).
    // Refused opcodes are among them, so a hostile protocol-0 file is reported as such, not as "not a pickle".
    static constexpr std::string_view FirstOpcodes = "(}])NIJKLMFGSTUVXBCcPi";
    return FirstOpcodes.find(static_cast<char>(data[0])) != std::string_view::npos;
}

namespace {
    // The names of the opcodes whose argument has a length (Lib/pickletools.py), for PickleExtent::Oversize.
    const char* lengthOpcodeName(uint8_t code)
    {
        switch (code) {
        case op::Long4:
            return "LONG4";
        case op::BinString:
            return "BINSTRING";
        case op::BinUnicode:
            return "BINUNICODE";
        case op::BinBytes:
            return "BINBYTES";
        case op::BinUnicode8:
            return "BINUNICODE8";
        case op::BinBytes8:
            return "BINBYTES8";
        case op::ByteArray8:
            return "BYTEARRAY8";
        case op::Float:
            return "FLOAT";
        case op::Int:
            return "INT";
        case op::Long:
            return "LONG";
        case op::String:
            return "STRING";
        case op::Unicode:
            return "UNICODE";
        case op::Put:
            return "PUT";
        case op::Get:
            return "GET";
        case op::Frame:
            return "FRAME";
        default:
            return "an opcode";
        }
    }
} // namespace

PickleExtent::State PickleExtent::scan(std::span<const uint8_t> data)
{
    auto le = [&](uint64_t at, unsigned width) {
        uint64_t v = 0;
        for (unsigned i = 0; i < width; ++i)
            v |= uint64_t(data[at + i]) << (8 * i);
        return v;
    };
    // Notes that the parse needs the bytes below `end`; whether they are here.
    auto need = [&](uint64_t end) {
        m_needed = std::max(m_needed, end);
        return end <= data.size();
    };
    // Whether a value of `length` bytes at the opcode scanned (a FRAME: only its own length) passes the limits, the
    // long values before it counted; it is added to them once the scan moves past it (a call may stop before its
    // end and the next one see it again).
    uint64_t longHere = 0;
    auto oversized = [&](uint8_t code, uint64_t length, bool frame, bool unended = false) {
        longHere = !frame && length >= LongValue ? length : 0;
        const uint64_t counted = longHere > UINT64_MAX - m_longBytes ? UINT64_MAX : m_longBytes + longHere;
        if (length <= MaxLongBytes && counted <= MaxLongBytes)
            return false;
        m_oversize = { m_pos, lengthOpcodeName(code), length, unended, counted };
        m_state = State::Oversized;
        return true;
    };
    while (m_state == State::More && need(m_pos + 1)) {
        const uint8_t code = data[m_pos];
        const uint64_t at = m_pos + 1; // the argument's first byte
        uint64_t end = at; // past the argument
        unsigned width = 0;
        switch (ArgLayouts[code]) {
        case Arg::Fails:
            m_state = State::Fails;
            return m_state;
        case Arg::Stop:
            m_state = State::Stop;
            return m_state;
        case Arg::None:
            break;
        case Arg::Fixed1:
            end = at + 1;
            break;
        case Arg::Fixed2:
            end = at + 2;
            break;
        case Arg::Fixed4:
            end = at + 4;
            break;
        case Arg::Fixed8:
            end = at + 8;
            break;
        case Arg::Frame: // the Machine checks that the whole frame is there when it meets the FRAME
            if (!need(at + 8))
                return m_state;
            if (oversized(code, le(at, 8), true))
                return m_state;
            need(std::min(le(at, 8), UINT64_MAX - (at + 8)) + at + 8);
            end = at + 8;
            break;
        case Arg::Counted1:
            width = 1;
            break;
        case Arg::Counted4:
            width = 4;
            break;
        case Arg::Counted8:
            width = 8;
            break;
        case Arg::Line: {
            const auto* nl = static_cast<const uint8_t*>(std::memchr(data.data() + at, '\n', data.size() - at));
            if (!nl) {
                // A line long so far already counts, unended: its bytes are decompressed only to its limit.
                if (const uint64_t sofar = data.size() - at; sofar >= LongValue && oversized(code, sofar, false, true))
                    return m_state;
                need(data.size() + 1); // a byte more at least
                return m_state;
            }
            end = uint64_t(nl - data.data()) + 1;
            if (oversized(code, end - at - 1, false))
                return m_state;
            break;
        }
        }
        if (width > 0) {
            if (!need(at + width))
                return m_state;
            const uint64_t length = le(at, width);
            if (code == op::Long4 && length >> 31) { // a negative length: the Machine fails here
                m_state = State::Fails;
                return m_state;
            }
            if (oversized(code, length, false))
                return m_state;
            end = std::min(length, UINT64_MAX - (at + width)) + at + width;
        }
        if (!need(end))
            return m_state;
        m_pos = end;
        m_longBytes += std::exchange(longHere, 0); // (at most MaxLongBytes in all: no overflow)
    }
    return m_state;
}

} // namespace memscope::io
