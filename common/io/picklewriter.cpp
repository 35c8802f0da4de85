// encodePickle(): a model::Snapshot as a protocol-4 pickle, byte for byte what CPython's C pickler
// (Modules/_pickle.c, which `pickle.dump(obj, f, protocol=4)` uses) writes for the object graph our file describes.
// That graph shares what PyTorch's own files share, and more: every distinct string is one object (one memo slot),
// every distinct frame dict (FrameId) and frame list (StackId) is one object, so repeated stacks cost a BINGET.
// Python reads the result as a dict equal to the one the snapshot was loaded from; `pickle.dumps(pickle.loads(x),
// protocol=4) == x` holds for our output x (tests/common/tst_writers.cpp checks both).
//
// The rules copied from CPython, each where it is implemented below: PROTO outside any frame; FRAME opcodes of at
// least 64 KiB, committed at the start of the first save() after the frame reached 64 KiB, dropped when shorter than
// 4 bytes, and strings of 64 KiB or more written outside frames; MEMOIZE after every container and string;
// BINGET/LONG_BINGET for memo hits; SETITEMS/APPENDS batches of 1000 with a single item written by SETITEM/APPEND;
// BININT1/BININT2/BININT/LONG1 by value; TUPLE2 for 2-tuples. Reentrant: one call per thread, shares nothing.
#include "io/keyplan.h"
#include "io/schema.h"
#include "io/snapshotio.h"
#include "model/processmemory.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

namespace memscope::io {

using namespace memscope::model;

namespace {

// Opcodes (CPython Lib/pickletools.py, the opcode table).
namespace op {
    constexpr uint8_t Mark = '(';
    constexpr uint8_t Stop = '.';
    constexpr uint8_t BinInt = 'J';
    constexpr uint8_t BinInt1 = 'K';
    constexpr uint8_t BinInt2 = 'M';
    constexpr uint8_t None = 'N';
    constexpr uint8_t BinUnicode = 'X';
    constexpr uint8_t Append = 'a';
    constexpr uint8_t EmptyDict = '}';
    constexpr uint8_t Appends = 'e';
    constexpr uint8_t BinGet = 'h';
    constexpr uint8_t LongBinGet = 'j';
    constexpr uint8_t EmptyList = ']';
    constexpr uint8_t SetItem = 's';
    constexpr uint8_t Tuple = 't';
    constexpr uint8_t EmptyTuple = ')';
    constexpr uint8_t SetItems = 'u';
    constexpr uint8_t BinFloat = 'G';
    constexpr uint8_t Proto = 0x80;
    constexpr uint8_t Tuple1 = 0x85;
    constexpr uint8_t NewTrue = 0x88;
    constexpr uint8_t NewFalse = 0x89;
    constexpr uint8_t Long1 = 0x8a;
    constexpr uint8_t ShortBinUnicode = 0x8c;
    constexpr uint8_t BinUnicode8 = 0x8d;
    constexpr uint8_t Memoize = 0x94;
    constexpr uint8_t Frame = 0x95;
} // namespace op

// Modules/_pickle.c: FRAME_SIZE_TARGET, FRAME_SIZE_MIN, FRAME_HEADER_SIZE, BATCHSIZE.
constexpr size_t FrameSizeTarget = 64 * 1024;
constexpr size_t FrameSizeMin = 4;
constexpr size_t FrameHeaderSize = 9;
constexpr size_t BatchSize = 1000;
constexpr size_t NoFrame = SIZE_MAX;
constexpr uint32_t NoMemo = UINT32_MAX;

using schema::Field;
using schema::FieldNames;
using schema::fieldFor;


using Kind = ObjectKind;
using Item = KeyPlanItem;

// Length of the well-formed UTF-8 sequence at p, or 0. Encoded surrogates (ED A0..BF ..) pass: CPython writes and
// reads pickle strings with the "surrogatepass" handler (Modules/_pickle.c write_unicode_binary, load_binunicode),
// so a str holding a lone surrogate (e.g. a surrogateescape'd file name) arrives that way and must go back that way.
size_t utf8Length(const unsigned char* p, const unsigned char* end)
{
    const unsigned c = p[0];
    if (c < 0x80)
        return 1;
    auto cont = [&](size_t i, unsigned lo = 0x80, unsigned hi = 0xBF) {
        return p + i < end && p[i] >= lo && p[i] <= hi;
    };
    if (c >= 0xC2 && c <= 0xDF)
        return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF)
        return cont(1, c == 0xE0 ? 0xA0 : 0x80) && cont(2) ? 3 : 0;
    if (c >= 0xF0 && c <= 0xF4)
        return cont(1, c == 0xF0 ? 0x90 : 0x80, c == 0xF4 ? 0x8F : 0xBF) && cont(2) && cont(3) ? 4 : 0;
    return 0;
}

// `text` with every ill-formed byte replaced by U+FFFD, or `text` itself (no copy) when it is well formed: Python
// cannot load a BINUNICODE that is not UTF-8, and model strings may come from bytes or a lenient JSON reader.
std::string_view wellFormed(std::string_view text, std::string& scratch)
{
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* end = p + text.size();
    const auto* q = p;
    while (q < end && *q < 0x80)
        ++q;
    bool clean = true;
    for (const auto* r = q; r < end;) {
        const size_t n = utf8Length(r, end);
        if (n == 0) {
            clean = false;
            break;
        }
        r += n;
    }
    if (clean)
        return text;
    scratch.assign(text.data(), static_cast<size_t>(q - p));
    while (q < end) {
        const size_t n = utf8Length(q, end);
        if (n == 0) {
            scratch += "\xEF\xBF\xBD";
            ++q;
        } else {
            scratch.append(reinterpret_cast<const char*>(q), n);
            q += n;
        }
    }
    return scratch;
}

class PickleEncoder {
public:
    explicit PickleEncoder(const Snapshot& snapshot)
        : m_s(snapshot)
        , m_stringMemo(snapshot.strings.size(), NoMemo)
        , m_frameMemo(snapshot.frames.size(), NoMemo)
        , m_stackMemo(snapshot.stackCount(), NoMemo)
        , m_keyPlans(snapshot)
    {
        reserve(std::max<size_t>(1 << 16, snapshot.entryCount() * 80 + snapshot.blocks.size() * 48));
    }

    std::string encode()
    {
        // Modules/_pickle.c dump(): PROTO is written before framing starts; STOP is inside the last frame.
        put(op::Proto);
        put(4);
        m_framing = true;
        saveTop();
        put(op::Stop);
        commitFrame();
        m_out.resize(m_len); // shrinking keeps the buffer: no copy
        return std::move(m_out);
    }

private:
    // --- Output and framing -------------------------------------------------------------------------------------

    // The output is written in place into the string that is returned (m_out.size() is the capacity, m_len the
    // bytes written). A big snapshot's output is tens of MB, and first-touch page faults of fresh memory cost more
    // than the encoding itself: the buffer asks for transparent huge pages before it is touched.
    void reserve(size_t capacity)
    {
        if (capacity <= m_out.size())
            return;
        std::string grown;
        grown.reserve(capacity);
        adviseHugePages(grown.data(), grown.capacity());
        grown.resize(capacity);
        std::memcpy(grown.data(), m_out.data(), m_len);
        m_out.swap(grown);
        m_buf = m_out.data();
        m_capacity = m_out.size();
    }
    static void adviseHugePages([[maybe_unused]] char* data, [[maybe_unused]] size_t size)
    {
#ifdef MADV_HUGEPAGE
        constexpr uintptr_t HugePage = uintptr_t(2) << 20;
        if (size < 2 * HugePage || !model::hugePagesPay())
            return;
        const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + HugePage - 1) & ~(HugePage - 1);
        const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + size) & ~(HugePage - 1);
        if (end > begin)
            ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE); // advice only: failure is harmless
#endif
    }
    [[gnu::noinline]] void grow(size_t n) { reserve(std::max(m_capacity * 2, m_len + n)); }
    // _Pickler_Write: the first write after a commit opens a new frame by reserving its header.
    [[gnu::noinline]] void openFrame()
    {
        if (m_len + FrameHeaderSize > m_capacity)
            grow(FrameHeaderSize);
        m_frameStart = m_len;
        m_len += FrameHeaderSize;
    }
    // Room for n bytes at the end of the output (written by the caller, who then advances m_len).
    char* room(size_t n)
    {
        if (m_frameStart == NoFrame && m_framing)
            openFrame();
        if (m_len + n > m_capacity)
            grow(n);
        return m_buf + m_len;
    }
    void put(uint8_t c)
    {
        *room(1) = static_cast<char>(c);
        ++m_len;
    }
    void put(const void* data, size_t n)
    {
        std::memcpy(room(n), data, n);
        m_len += n;
    }
    // _Pickler_CommitFrame: fill in the header, or drop it when the frame is shorter than FRAME_SIZE_MIN.
    void commitFrame()
    {
        if (m_frameStart == NoFrame)
            return;
        const size_t length = m_len - m_frameStart - FrameHeaderSize;
        char* header = m_buf + m_frameStart;
        if (length >= FrameSizeMin) {
            header[0] = static_cast<char>(op::Frame);
            const uint64_t size64 = length;
            std::memcpy(header + 1, &size64, sizeof size64);
        } else {
            std::memmove(header, header + FrameHeaderSize, length);
            m_len -= FrameHeaderSize;
        }
        m_frameStart = NoFrame;
    }
    // Modules/_pickle.c save() begins with _Pickler_OpcodeBoundary(): a frame is closed only between two objects,
    // at the first save() after it reached FRAME_SIZE_TARGET (so frames end slightly past 64 KiB).
    void boundary()
    {
        if (m_frameStart != NoFrame && m_len - m_frameStart - FrameHeaderSize >= FrameSizeTarget)
            commitFrame();
    }

    // --- Memo -----------------------------------------------------------------------------------------------------

    uint32_t memoize()
    {
        put(op::Memoize);
        return m_memoCount++;
    }
    // memo_get: BINGET below 256, LONG_BINGET above.
    void memoGet(uint32_t index)
    {
        static_assert(std::endian::native == std::endian::little, "pickle arguments are little-endian");
        char* p = room(5);
        if (index < 256) {
            p[0] = static_cast<char>(op::BinGet);
            p[1] = static_cast<char>(index);
            m_len += 2;
        } else {
            p[0] = static_cast<char>(op::LongBinGet);
            std::memcpy(p + 1, &index, 4);
            m_len += 5;
        }
    }

    // --- Scalars --------------------------------------------------------------------------------------------------

    void saveNone()
    {
        boundary();
        put(op::None);
    }
    void saveBool(bool v)
    {
        boundary();
        put(v ? op::NewTrue : op::NewFalse);
    }
    // save_long: BININT1/BININT2 for small non-negative values, BININT for 32-bit signed values, else LONG1 with the
    // fewest little-endian two's-complement bytes (CPython Lib/pickle.py encode_long states the same rule).
    void saveInt(int64_t v)
    {
        boundary();
        char* p = room(10);
        if (v >= 0 && v <= 0xFF) {
            p[0] = static_cast<char>(op::BinInt1);
            p[1] = static_cast<char>(v);
            m_len += 2;
        } else if (v >= 0 && v <= 0xFFFF) {
            p[0] = static_cast<char>(op::BinInt2);
            const uint16_t u = static_cast<uint16_t>(v);
            std::memcpy(p + 1, &u, 2);
            m_len += 3;
        } else if (v >= INT32_MIN && v <= INT32_MAX) {
            p[0] = static_cast<char>(op::BinInt);
            const int32_t i = static_cast<int32_t>(v);
            std::memcpy(p + 1, &i, 4);
            m_len += 5;
        } else {
            uint8_t n = 5; // beyond 32 bits: at least 5 bytes
            while (n < 8) {
                const int64_t limit = int64_t(1) << (8 * n - 1);
                if (v >= -limit && v < limit)
                    break;
                ++n;
            }
            p[0] = static_cast<char>(op::Long1);
            p[1] = static_cast<char>(n);
            const uint64_t u = static_cast<uint64_t>(v);
            std::memcpy(p + 2, &u, 8); // all 8 bytes (room for them was made); only n count
            m_len += size_t(2) + n;
        }
    }
    // An unsigned value: at or above 2^63 (a C uint64_t such as size_t(-1)) Python's encode_long needs 9 bytes, the
    // 9th 0x00 to keep the sign positive; below it, as saveInt.
    void saveUnsigned(uint64_t v)
    {
        if (v >> 63 == 0) {
            saveInt(static_cast<int64_t>(v));
            return;
        }
        boundary();
        char* p = room(11);
        p[0] = static_cast<char>(op::Long1);
        p[1] = 9;
        std::memcpy(p + 2, &v, 8);
        p[10] = 0;
        m_len += 11;
    }
    void saveLine(LineNumber line)
    {
        if (line.isAboveInt64())
            saveUnsigned(line.unsignedBits());
        else
            saveInt(line.bits());
    }
    // save_float: BINFLOAT, an IEEE 754 double in big-endian order.
    void saveFloat(double v)
    {
        boundary();
        char* p = room(9);
        p[0] = static_cast<char>(op::BinFloat);
        const uint64_t bits = __builtin_bswap64(std::bit_cast<uint64_t>(v)); // std::byteswap is C++23
        std::memcpy(p + 1, &bits, 8);
        m_len += 9;
    }

    // --- Strings --------------------------------------------------------------------------------------------------

    // write_unicode_binary + _Pickler_write_bytes: SHORT_BINUNICODE up to 255 bytes, BINUNICODE up to 4 GiB, then
    // BINUNICODE8; a payload of FRAME_SIZE_TARGET or more closes the frame and is written outside any frame.
    void writeUnicode(std::string_view raw)
    {
        const std::string_view text = wellFormed(raw, m_scratch);
        const size_t n = text.size();
        uint8_t header[9];
        size_t headerSize;
        if (n <= 0xFF) {
            header[0] = op::ShortBinUnicode;
            header[1] = static_cast<uint8_t>(n);
            headerSize = 2;
        } else if (n <= 0xFFFFFFFFu) {
            header[0] = op::BinUnicode;
            const uint32_t n32 = static_cast<uint32_t>(n);
            std::memcpy(header + 1, &n32, 4);
            headerSize = 5;
        } else {
            header[0] = op::BinUnicode8;
            const uint64_t n64 = n;
            std::memcpy(header + 1, &n64, 8);
            headerSize = 9;
        }
        const bool bypass = n >= FrameSizeTarget;
        if (bypass) {
            commitFrame();
            m_framing = false;
        }
        put(header, headerSize);
        put(text.data(), n);
        if (bypass)
            m_framing = true;
    }
    // Every distinct text is one string object, whatever it came from (a StringId, an owned value, a literal key).
    // This is required, not only compact: CPython's unpickler hands out one shared object for '' and for
    // one-character strings, so `pickle.dumps(pickle.loads(x))` would reference them through the memo anyway.
    void saveString(StringId id)
    {
        boundary();
        uint32_t& memo = m_stringMemo[raw(id)];
        if (memo == NoMemo)
            memo = saveNewText(m_s.str(id));
        else
            memoGet(memo);
    }
    void saveText(std::string_view text)
    {
        boundary();
        saveNewText(text);
    }
    // The memo slot of `text`: a BINGET when it was written before, else the string and a MEMOIZE.
    uint32_t saveNewText(std::string_view text)
    {
        const auto [it, added] = m_textMemo.try_emplace(text, m_memoCount);
        if (!added) {
            memoGet(it->second);
            return it->second;
        }
        writeUnicode(text);
        return memoize();
    }
    void saveKey(Field f) { saveText(FieldNames[size_t(f)]); }

    // --- Containers -----------------------------------------------------------------------------------------------

    // batch_list_exact: one item -> APPEND; otherwise MARK ... APPENDS per 1000 items.
    template <typename F>
    void listItems(size_t n, F&& item)
    {
        if (n == 0)
            return;
        if (n == 1) {
            item(size_t(0));
            put(op::Append);
            return;
        }
        size_t i = 0;
        do {
            put(op::Mark);
            const size_t end = std::min(n, i + BatchSize);
            for (; i < end; ++i)
                item(i);
            put(op::Appends);
        } while (i < n);
    }
    // batch_dict_exact: one item -> SETITEM; otherwise MARK ... SETITEMS per 1000 items. Its loop runs again after a
    // full batch, so a dict of exactly k*1000 items ends with an empty MARK SETITEMS: reproduced.
    template <typename F>
    void dictItems(size_t n, F&& item)
    {
        if (n == 0)
            return;
        if (n == 1) {
            item(size_t(0));
            put(op::SetItem);
            return;
        }
        size_t i = 0;
        while (true) {
            put(op::Mark);
            size_t inBatch = 0;
            while (i < n) {
                item(i++);
                if (++inBatch == BatchSize)
                    break;
            }
            put(op::SetItems);
            if (inBatch != BatchSize)
                break;
        }
    }
    template <typename F>
    void saveList(size_t n, F&& item)
    {
        boundary();
        put(op::EmptyList);
        memoize();
        listItems(n, item);
    }

    // An unknown key's value: the next extras entry when its name matches (they are kept in file order), else the
    // first entry of that name.
    const std::pair<std::string, Value>* findExtra(const Extras* extras, size_t& cursor, std::string_view name) const
    {
        if (!extras)
            return nullptr;
        if (cursor < extras->size() && (*extras)[cursor].first == name)
            return &(*extras)[cursor++];
        for (const auto& entry : *extras) {
            if (entry.first == name)
                return &entry;
        }
        return nullptr;
    }

    // A dict of `items`: known fields through `value(field)`, unknown keys from `extras`.
    template <typename F>
    void saveDict(std::span<const Item> items, const Extras* extras, F&& value)
    {
        boundary();
        put(op::EmptyDict);
        memoize();
        size_t cursor = 0;
        dictItems(items.size(), [&](size_t i) {
            const Item& it = items[i];
            if (it.field != Field::Unknown) {
                if (it.key != EmptyString)
                    saveString(it.key);
                else
                    saveKey(it.field);
                value(it.field);
                return;
            }
            const std::pair<std::string, Value>* extra = nullptr;
            if (it.keyFromExtras) {
                extra = &(*extras)[cursor++];
                saveText(extra->first);
            } else {
                extra = findExtra(extras, cursor, m_s.str(it.key));
                saveString(it.key);
            }
            if (extra)
                saveValue(extra->second);
            else
                saveNone();
        });
    }

    // The items of an object: its recorded layout, or (layout 0: none recorded, e.g. a snapshot made in code)
    // PyTorch's key order (torch/csrc/cuda/Module.cpp, _memory_snapshot: segmentInfoToDict, the block and trace
    // entry dicts, the result dict) followed by the unknown keys.
    std::span<const Item> plan(Kind kind, LayoutId layout, std::initializer_list<Field> defaults, const Extras* extras)
    {
        return m_keyPlans.plan(kind, layout, defaults, extras);
    }
    const Extras* extrasAt(uint32_t index) const
    {
        return index < m_s.extras.size() ? &m_s.extras[index] : nullptr;
    }

    // --- Generic values (allocator settings, unknown keys) --------------------------------------------------------

    void saveValue(const Value& v)
    {
        switch (v.kind) {
        case Value::Kind::None: saveNone(); return;
        case Value::Kind::Bool: saveBool(v.boolean); return;
        case Value::Kind::Int: saveInt(v.integer); return;
        case Value::Kind::UInt: saveUnsigned(v.unsignedInteger); return;
        case Value::Kind::Float: saveFloat(v.real); return;
        case Value::Kind::String: saveText(v.text); return;
        case Value::Kind::List:
            saveList(v.items.size(), [&](size_t i) { saveValue(v.items[i]); });
            return;
        case Value::Kind::Tuple: {
            // save_tuple: () is EMPTY_TUPLE (not memoized); up to 3 items TUPLE1..3, more MARK ... TUPLE; then MEMOIZE.
            boundary();
            const size_t n = v.items.size();
            if (n == 0) {
                put(op::EmptyTuple);
                return;
            }
            if (n > 3)
                put(op::Mark);
            for (const Value& item : v.items)
                saveValue(item);
            put(n > 3 ? op::Tuple : static_cast<uint8_t>(op::Tuple1 + n - 1));
            memoize();
            return;
        }
        case Value::Kind::Dict: {
            boundary();
            put(op::EmptyDict);
            memoize();
            dictItems(v.entries.size(), [&](size_t i) {
                saveText(v.entries[i].first);
                saveValue(v.entries[i].second);
            });
            return;
        }
        }
        saveNone();
    }

    // --- Frames and stacks: one shared object per FrameId / StackId -----------------------------------------------

    void saveFrame(FrameId id)
    {
        boundary();
        uint32_t& memo = m_frameMemo[raw(id)];
        if (memo != NoMemo) {
            memoGet(memo);
            return;
        }
        put(op::EmptyDict);
        memo = memoize();
        const Frame& f = m_s.frame(id);
        put(op::Mark);
        saveKey(Field::Name);
        saveString(f.name);
        saveKey(Field::Filename);
        saveString(f.filename);
        saveKey(Field::Line);
        saveLine(f.line);
        put(op::SetItems);
    }
    void saveStack(StackId id)
    {
        boundary();
        uint32_t& memo = m_stackMemo[raw(id)];
        if (memo != NoMemo) {
            memoGet(memo);
            return;
        }
        put(op::EmptyList);
        memo = memoize();
        const FrameId* frames = m_s.stackBegin(id);
        listItems(m_s.stackSize(id), [&](size_t i) { saveFrame(frames[i]); });
    }

    // --- The snapshot ---------------------------------------------------------------------------------------------

    void saveBlock(const Block& b)
    {
        const Extras* extras = extrasAt(b.extraIndex);
        std::initializer_list<Field> modern = { Field::Address, Field::Size, Field::RequestedSize, Field::State,
                                                Field::Frames };
        std::initializer_list<Field> withHistory = { Field::Address, Field::Size, Field::RequestedSize, Field::State,
                                                     Field::Frames, Field::History };
        saveDict(plan(Kind::Block, b.layout, b.hasHistory ? withHistory : modern, extras), extras, [&](Field f) {
            switch (f) {
            case Field::Address: saveInt(b.address); break;
            case Field::Size: saveInt(b.size); break;
            case Field::RequestedSize: saveInt(b.requestedSize); break;
            case Field::State:
                if (b.stateName != EmptyString)
                    saveString(b.stateName);
                else
                    saveText(blockStateName(b.state));
                break;
            case Field::Frames: saveStack(b.stack); break;
            case Field::History: saveHistory(b); break;
            default: saveNone(); break;
            }
        });
    }
    // Legacy history items (PyTorch before 2.1, Module.cpp then): {addr, real_size, frames}; no layout recorded.
    void saveHistory(const Block& b)
    {
        saveList(b.historyCount, [&](size_t i) {
            const HistoryItem& h = m_s.history[b.historyBegin + i];
            boundary();
            put(op::EmptyDict);
            memoize();
            dictItems(h.hasFrames ? 3 : 2, [&](size_t k) {
                switch (k) {
                case 0:
                    saveKey(Field::Addr);
                    saveInt(h.addr);
                    break;
                case 1:
                    saveKey(Field::RealSize);
                    saveInt(h.realSize);
                    break;
                default:
                    saveKey(Field::Frames);
                    saveStack(h.stack);
                }
            });
        });
    }
    void saveSegment(const Segment& seg)
    {
        const Extras* extras = extrasAt(seg.extraIndex);
        const auto items = plan(Kind::Segment, seg.layout,
                                { Field::Device, Field::Address, Field::TotalSize, Field::AllocatedSize,
                                  Field::ActiveSize, Field::RequestedSize, Field::Stream, Field::SegmentType,
                                  Field::SegmentPoolId, Field::IsExpandable, Field::Frames, Field::Blocks },
                                extras);
        saveDict(items, extras, [&](Field f) {
            switch (f) {
            case Field::Device: saveInt(seg.device); break;
            case Field::Address: saveInt(seg.address); break;
            case Field::TotalSize: saveInt(seg.totalSize); break;
            case Field::AllocatedSize: saveInt(seg.allocatedSize); break;
            case Field::ActiveSize: saveInt(seg.activeSize); break;
            case Field::RequestedSize: saveInt(seg.requestedSize); break;
            case Field::Stream: saveInt(seg.stream); break;
            case Field::SegmentType: saveString(seg.segmentType); break;
            case Field::SegmentPoolId:
                // A 2-tuple in PyTorch's files (MempoolId_t); a list would compare unequal in Python.
                boundary();
                saveInt(seg.poolId.first);
                saveInt(seg.poolId.second);
                put(static_cast<uint8_t>(op::Tuple1 + 1));
                memoize();
                break;
            case Field::IsExpandable: saveBool(seg.isExpandable); break;
            case Field::Frames: saveStack(seg.stack); break;
            case Field::Blocks:
                saveList(seg.blockCount, [&](size_t i) { saveBlock(m_s.blocks[seg.blockBegin + i]); });
                break;
            default: saveNone(); break;
            }
        });
    }
    void saveEntry(const TraceEntry& e)
    {
        const EntryForm& form = m_s.form(e);
        const Extras* extras = extrasAt(form.extraIndex);
        const bool frames = e.hasFrames || e.stack != EmptyStack;
        const Field addr = e.action == model::Action::Oom ? Field::DeviceFree : Field::Addr;
        std::initializer_list<Field> withFrames = { Field::Action, addr, Field::Size, Field::Stream, Field::TimeUs,
                                                    Field::CompileContext, Field::UserMetadata, Field::Frames };
        std::initializer_list<Field> without = { Field::Action, addr, Field::Size, Field::Stream, Field::TimeUs,
                                                 Field::CompileContext, Field::UserMetadata };
        saveDict(plan(Kind::Entry, form.layout, frames ? withFrames : without, extras), extras, [&](Field f) {
            switch (f) {
            case Field::Action:
                if (form.actionName != EmptyString)
                    saveString(form.actionName);
                else
                    saveText(actionName(e.action));
                break;
            case Field::Addr:
            case Field::DeviceFree: saveInt(e.addr); break; // the model keeps oom's device_free in addr
            case Field::Size: saveInt(e.size); break;
            case Field::Stream: saveInt(form.stream); break;
            case Field::TimeUs: saveInt(e.timeUs); break;
            case Field::CompileContext: saveString(form.compileContext); break;
            case Field::UserMetadata: saveString(form.userMetadata); break;
            case Field::Frames: saveStack(e.stack); break;
            default: saveNone(); break;
            }
        });
    }
    // Annotations have no recorded layout: PyTorch writes the record_function metadata (stage, name), then device
    // and time_us (Module.cpp, external_annotations).
    void saveAnnotation(const Annotation& a)
    {
        boundary();
        put(op::EmptyDict);
        memoize();
        put(op::Mark);
        saveKey(Field::Stage);
        if (a.stageName != EmptyString)
            saveString(a.stageName);
        else
            saveText(a.stage == Annotation::Stage::Start ? "START" : a.stage == Annotation::Stage::End ? "END" : "");
        saveKey(Field::Name);
        saveString(a.name);
        saveKey(Field::Device);
        saveInt(a.device);
        saveKey(Field::TimeUs);
        saveInt(a.timeUs);
        put(op::SetItems);
    }
    void saveSegments()
    {
        saveList(m_s.segments.size(), [&](size_t i) { saveSegment(m_s.segments[i]); });
    }
    void saveTop()
    {
        // Very old files are a bare list of segments (torch/cuda/_memory_viz.py _read accepts both).
        if (m_s.legacyTopLevelList) {
            saveSegments();
            return;
        }
        const Extras* extras = m_s.topLevelExtras.empty() ? nullptr : &m_s.topLevelExtras;
        std::initializer_list<Field> withSettings = { Field::Segments, Field::DeviceTraces, Field::AllocatorSettings,
                                                      Field::ExternalAnnotations };
        std::initializer_list<Field> without = { Field::Segments, Field::DeviceTraces, Field::ExternalAnnotations };
        saveDict(plan(Kind::Top, m_s.topLevelLayout, m_s.allocatorSettings ? withSettings : without, extras), extras,
                 [&](Field f) {
                     switch (f) {
                     case Field::Segments: saveSegments(); break;
                     case Field::DeviceTraces:
                         saveList(m_s.deviceTraces.size(), [&](size_t d) {
                             const auto& trace = m_s.deviceTraces[d];
                             saveList(trace.size(), [&](size_t i) { saveEntry(trace[i]); });
                         });
                         break;
                     case Field::AllocatorSettings:
                         if (m_s.allocatorSettings)
                             saveValue(*m_s.allocatorSettings);
                         else
                             saveNone();
                         break;
                     case Field::ExternalAnnotations:
                         saveList(m_s.annotations.size(), [&](size_t i) { saveAnnotation(m_s.annotations[i]); });
                         break;
                     default: saveNone(); break;
                     }
                 });
    }

    const Snapshot& m_s;
    std::string m_out;
    char* m_buf = nullptr; // m_out.data()
    size_t m_capacity = 0; // m_out.size()
    size_t m_len = 0;
    size_t m_frameStart = NoFrame;
    bool m_framing = false;
    uint32_t m_memoCount = 0;
    std::vector<uint32_t> m_stringMemo;
    std::vector<uint32_t> m_frameMemo;
    std::vector<uint32_t> m_stackMemo;
    std::unordered_map<std::string_view, uint32_t> m_textMemo;
    KeyPlans m_keyPlans;
    std::string m_scratch;
};

} // namespace

std::string encodePickle(const Snapshot& snapshot)
{
    PickleEncoder encoder(snapshot);
    return encoder.encode();
}

} // namespace memscope::io
