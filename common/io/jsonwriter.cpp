// encodeJson(): a model::Snapshot as one JSON document (RFC 8259), the same dict PyTorch's pickle holds, so
// PyTorch's web viewer (which also takes JSON) and any JSON tool can read it. The text is what Python's
// `json.dumps(snapshot, separators=(',', ':'), ensure_ascii=False)` prints for the unpickled dict, with three
// deliberate differences: NaN and infinities become null (Python prints NaN/Infinity, which RFC 8259 forbids),
// ill-formed UTF-8 becomes U+FFFD, and encoded lone surrogates become \udXXX escapes. Tuples become lists, as in
// Python. Reentrant: one call per thread, shares nothing.
#include "io/jsontext.h"
#include "io/keyplan.h"
#include "io/schema.h"
#include "io/snapshotio.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::io {

using namespace memscope::model;

namespace {

using schema::Field;
using schema::FieldNames;
using schema::fieldFor;


using Kind = ObjectKind;
using Item = KeyPlanItem;

// Length of the well-formed UTF-8 sequence at p, or 0; encoded surrogates (ED A0..BF ..) count as well formed here
// and are escaped by the caller.
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

// Bytes that end a run of text copied as is: controls, '"', '\\' and every non-ASCII byte (checked separately).
constexpr std::array<bool, 256> makeSpecial()
{
    std::array<bool, 256> t {};
    for (int c = 0; c < 0x20; ++c)
        t[c] = true;
    t['"'] = true;
    t['\\'] = true;
    for (int c = 0x80; c < 0x100; ++c)
        t[c] = true;
    return t;
}
constexpr std::array<bool, 256> Special = makeSpecial();

class JsonEncoder {
public:
    explicit JsonEncoder(const Snapshot& snapshot)
        : m_s(snapshot)
        , m_stackText(snapshot.stackCount())
        , m_stackDone(snapshot.stackCount(), false)
        , m_keyPlans(snapshot)
    {
    }

    std::string encode()
    {
        m_out.reserve(1 << 20);
        writeTop();
        return std::move(m_out);
    }

private:
    // --- Scalars --------------------------------------------------------------------------------------------------

    void text(std::string_view t) { appendJsonString(m_out, t); }
    void string(StringId id) { appendJsonString(m_out, m_s.str(id)); }
    void key(std::string_view k)
    {
        appendJsonString(m_out, k);
        m_out += ':';
    }
    void integer(int64_t v)
    {
        char buf[24];
        const auto r = std::to_chars(buf, buf + sizeof buf, v);
        m_out.append(buf, r.ptr);
    }
    void unsignedInteger(uint64_t v)
    {
        char buf[24];
        const auto r = std::to_chars(buf, buf + sizeof buf, v);
        m_out.append(buf, r.ptr);
    }
    void line(LineNumber l)
    {
        char buf[24];
        m_out.append(buf, l.toChars(buf, buf + sizeof buf));
    }
    void boolean(bool v) { m_out += v ? "true" : "false"; }
    // Python's float repr (PyOS_double_to_string, mode 'r'): the shortest round-trip digits, in positional notation
    // when the decimal exponent is in [-4, 16), with ".0" on integral values; otherwise d.ddde+XX, which is exactly
    // what std::to_chars writes in scientific form.
    void real(double v)
    {
        if (!std::isfinite(v)) {
            m_out += "null"; // RFC 8259 has no NaN or Infinity
            return;
        }
        char buf[40];
        const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
        const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
        const size_t e = sci.find('e');
        int exponent = 0;
        std::from_chars(sci.data() + e + (sci[e + 1] == '+' ? 2 : 1), sci.data() + sci.size(), exponent);
        if (exponent < -4 || exponent >= 16) {
            m_out += sci;
            return;
        }
        std::string_view mantissa = sci.substr(0, e);
        if (!mantissa.empty() && mantissa[0] == '-') {
            m_out += '-';
            mantissa.remove_prefix(1);
        }
        char digits[24];
        size_t n = 0;
        for (char c : mantissa) {
            if (c != '.')
                digits[n++] = c;
        }
        if (exponent < 0) {
            m_out += "0.";
            m_out.append(static_cast<size_t>(-exponent - 1), '0');
            m_out.append(digits, n);
            return;
        }
        const size_t intDigits = static_cast<size_t>(exponent) + 1;
        if (n <= intDigits) {
            m_out.append(digits, n);
            m_out.append(intDigits - n, '0');
            m_out += ".0";
        } else {
            m_out.append(digits, intDigits);
            m_out += '.';
            m_out.append(digits + intDigits, n - intDigits);
        }
    }

    // --- Containers -----------------------------------------------------------------------------------------------

    template <typename F>
    void list(size_t n, F&& item)
    {
        m_out += '[';
        for (size_t i = 0; i < n; ++i) {
            if (i)
                m_out += ',';
            item(i);
        }
        m_out += ']';
    }

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

    template <typename F>
    void dict(std::span<const Item> items, const Extras* extras, F&& value)
    {
        m_out += '{';
        size_t cursor = 0;
        for (size_t i = 0; i < items.size(); ++i) {
            if (i)
                m_out += ',';
            const Item& it = items[i];
            if (it.field != Field::Unknown) {
                key(it.key != EmptyString ? m_s.str(it.key) : FieldNames[size_t(it.field)]);
                value(it.field);
                continue;
            }
            const std::pair<std::string, Value>* extra = nullptr;
            if (it.keyFromExtras) {
                extra = &(*extras)[cursor++];
                key(extra->first);
            } else {
                extra = findExtra(extras, cursor, m_s.str(it.key));
                key(m_s.str(it.key));
            }
            if (extra)
                writeValue(extra->second);
            else
                m_out += "null";
        }
        m_out += '}';
    }

    // The recorded layout, or PyTorch's key order (torch/csrc/cuda/Module.cpp, _memory_snapshot) plus unknown keys.
    std::span<const Item> plan(Kind kind, LayoutId layout, std::initializer_list<Field> defaults, const Extras* extras)
    {
        return m_keyPlans.plan(kind, layout, defaults, extras);
    }
    const Extras* extrasAt(uint32_t index) const
    {
        return index < m_s.extras.size() ? &m_s.extras[index] : nullptr;
    }

    void writeValue(const Value& v)
    {
        switch (v.kind) {
        case Value::Kind::None: m_out += "null"; return;
        case Value::Kind::Bool: boolean(v.boolean); return;
        case Value::Kind::Int: integer(v.integer); return;
        case Value::Kind::UInt: unsignedInteger(v.unsignedInteger); return;
        case Value::Kind::Float: real(v.real); return;
        case Value::Kind::String: text(v.text); return;
        case Value::Kind::List:
        case Value::Kind::Tuple: list(v.items.size(), [&](size_t i) { writeValue(v.items[i]); }); return;
        case Value::Kind::Dict:
            m_out += '{';
            for (size_t i = 0; i < v.entries.size(); ++i) {
                if (i)
                    m_out += ',';
                key(v.entries[i].first);
                writeValue(v.entries[i].second);
            }
            m_out += '}';
            return;
        }
        m_out += "null";
    }

    // --- Snapshot -------------------------------------------------------------------------------------------------

    // JSON cannot share objects, so each stack is spelled out every time; its text is made once per StackId.
    void stack(StackId id)
    {
        const uint32_t k = raw(id);
        if (!m_stackDone[k]) {
            std::string saved;
            std::swap(saved, m_out);
            const FrameId* frames = m_s.stackBegin(id);
            list(m_s.stackSize(id), [&](size_t i) {
                const Frame& f = m_s.frame(frames[i]);
                m_out += "{\"name\":";
                string(f.name);
                m_out += ",\"filename\":";
                string(f.filename);
                m_out += ",\"line\":";
                line(f.line);
                m_out += '}';
            });
            std::swap(saved, m_out);
            m_stackText[k] = std::move(saved);
            m_stackDone[k] = true;
        }
        m_out += m_stackText[k];
    }

    void block(const Block& b)
    {
        const Extras* extras = extrasAt(b.extraIndex);
        std::initializer_list<Field> modern = { Field::Address, Field::Size, Field::RequestedSize, Field::State,
                                                Field::Frames };
        std::initializer_list<Field> withHistory = { Field::Address, Field::Size, Field::RequestedSize, Field::State,
                                                     Field::Frames, Field::History };
        dict(plan(Kind::Block, b.layout, b.hasHistory ? withHistory : modern, extras), extras, [&](Field f) {
            switch (f) {
            case Field::Address: integer(b.address); break;
            case Field::Size: integer(b.size); break;
            case Field::RequestedSize: integer(b.requestedSize); break;
            case Field::State:
                if (b.stateName != EmptyString)
                    string(b.stateName);
                else
                    text(blockStateName(b.state));
                break;
            case Field::Frames: stack(b.stack); break;
            case Field::History:
                list(b.historyCount, [&](size_t i) {
                    const HistoryItem& h = m_s.history[b.historyBegin + i];
                    m_out += "{\"addr\":";
                    integer(h.addr);
                    m_out += ",\"real_size\":";
                    integer(h.realSize);
                    if (h.hasFrames) {
                        m_out += ",\"frames\":";
                        stack(h.stack);
                    }
                    m_out += '}';
                });
                break;
            default: m_out += "null"; break;
            }
        });
    }
    void segment(const Segment& seg)
    {
        const Extras* extras = extrasAt(seg.extraIndex);
        const auto items = plan(Kind::Segment, seg.layout,
                                { Field::Device, Field::Address, Field::TotalSize, Field::AllocatedSize,
                                  Field::ActiveSize, Field::RequestedSize, Field::Stream, Field::SegmentType,
                                  Field::SegmentPoolId, Field::IsExpandable, Field::Frames, Field::Blocks },
                                extras);
        dict(items, extras, [&](Field f) {
            switch (f) {
            case Field::Device: integer(seg.device); break;
            case Field::Address: integer(seg.address); break;
            case Field::TotalSize: integer(seg.totalSize); break;
            case Field::AllocatedSize: integer(seg.allocatedSize); break;
            case Field::ActiveSize: integer(seg.activeSize); break;
            case Field::RequestedSize: integer(seg.requestedSize); break;
            case Field::Stream: integer(seg.stream); break;
            case Field::SegmentType: string(seg.segmentType); break;
            case Field::SegmentPoolId: // a tuple in Python; JSON has only lists
                m_out += '[';
                integer(seg.poolId.first);
                m_out += ',';
                integer(seg.poolId.second);
                m_out += ']';
                break;
            case Field::IsExpandable: boolean(seg.isExpandable); break;
            case Field::Frames: stack(seg.stack); break;
            case Field::Blocks: list(seg.blockCount, [&](size_t i) { block(m_s.blocks[seg.blockBegin + i]); }); break;
            default: m_out += "null"; break;
            }
        });
    }
    void entry(const TraceEntry& e)
    {
        const EntryForm& form = m_s.form(e);
        const Extras* extras = extrasAt(form.extraIndex);
        const bool frames = e.hasFrames || e.stack != EmptyStack;
        const Field addr = e.action == model::Action::Oom ? Field::DeviceFree : Field::Addr;
        std::initializer_list<Field> withFrames = { Field::Action, addr, Field::Size, Field::Stream, Field::TimeUs,
                                                    Field::CompileContext, Field::UserMetadata, Field::Frames };
        std::initializer_list<Field> without = { Field::Action, addr, Field::Size, Field::Stream, Field::TimeUs,
                                                 Field::CompileContext, Field::UserMetadata };
        dict(plan(Kind::Entry, form.layout, frames ? withFrames : without, extras), extras, [&](Field f) {
            switch (f) {
            case Field::Action:
                if (form.actionName != EmptyString)
                    string(form.actionName);
                else
                    text(actionName(e.action));
                break;
            case Field::Addr:
            case Field::DeviceFree: integer(e.addr); break;
            case Field::Size: integer(e.size); break;
            case Field::Stream: integer(form.stream); break;
            case Field::TimeUs: integer(e.timeUs); break;
            case Field::CompileContext: string(form.compileContext); break;
            case Field::UserMetadata: string(form.userMetadata); break;
            case Field::Frames: stack(e.stack); break;
            default: m_out += "null"; break;
            }
        });
    }
    void annotation(const Annotation& a)
    {
        m_out += "{\"stage\":";
        if (a.stageName != EmptyString)
            string(a.stageName);
        else
            text(a.stage == Annotation::Stage::Start ? "START" : a.stage == Annotation::Stage::End ? "END" : "");
        m_out += ",\"name\":";
        string(a.name);
        m_out += ",\"device\":";
        integer(a.device);
        m_out += ",\"time_us\":";
        integer(a.timeUs);
        m_out += '}';
    }
    void segments()
    {
        list(m_s.segments.size(), [&](size_t i) { segment(m_s.segments[i]); });
    }
    void writeTop()
    {
        if (m_s.legacyTopLevelList) {
            segments();
            return;
        }
        const Extras* extras = m_s.topLevelExtras.empty() ? nullptr : &m_s.topLevelExtras;
        std::initializer_list<Field> withSettings = { Field::Segments, Field::DeviceTraces, Field::AllocatorSettings,
                                                      Field::ExternalAnnotations };
        std::initializer_list<Field> without = { Field::Segments, Field::DeviceTraces, Field::ExternalAnnotations };
        dict(plan(Kind::Top, m_s.topLevelLayout, m_s.allocatorSettings ? withSettings : without, extras), extras,
             [&](Field f) {
                 switch (f) {
                 case Field::Segments: segments(); break;
                 case Field::DeviceTraces:
                     list(m_s.deviceTraces.size(), [&](size_t d) {
                         const auto& trace = m_s.deviceTraces[d];
                         list(trace.size(), [&](size_t i) { entry(trace[i]); });
                     });
                     break;
                 case Field::AllocatorSettings:
                     if (m_s.allocatorSettings)
                         writeValue(*m_s.allocatorSettings);
                     else
                         m_out += "null";
                     break;
                 case Field::ExternalAnnotations:
                     list(m_s.annotations.size(), [&](size_t i) { annotation(m_s.annotations[i]); });
                     break;
                 default: m_out += "null"; break;
                 }
             });
    }

    const Snapshot& m_s;
    std::string m_out;
    std::vector<std::string> m_stackText;
    std::vector<bool> m_stackDone;
    KeyPlans m_keyPlans;
};

} // namespace

// Python's json module escapes '"', '\\', \b \f \n \r \t by name and other controls as \u00XX (lower-case hex,
// Lib/json/encoder.py ESCAPE_DCT); with ensure_ascii=False everything else is copied.
void appendJsonString(std::string& out, std::string_view text)
{
    static constexpr char Hex[] = "0123456789abcdef";
    out += '"';
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const auto* end = p + text.size();
    const auto* run = p;
    auto flush = [&](const unsigned char* upTo) {
        out.append(reinterpret_cast<const char*>(run), static_cast<size_t>(upTo - run));
    };
    while (p < end) {
        const unsigned char c = *p;
        if (!Special[c]) {
            ++p;
            continue;
        }
        if (c >= 0x80) {
            const size_t n = utf8Length(p, end);
            if (n == 3 && c == 0xED && p[1] >= 0xA0) {
                // A lone surrogate (from Python's surrogatepass/surrogateescape): not UTF-8, so escape it.
                flush(p);
                const unsigned cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
                const char esc[6] = { '\\', 'u', Hex[(cp >> 12) & 15], Hex[(cp >> 8) & 15], Hex[(cp >> 4) & 15],
                                      Hex[cp & 15] };
                out.append(esc, 6);
                p += 3;
                run = p;
            } else if (n != 0) {
                p += n;
            } else {
                flush(p);
                out += "\xEF\xBF\xBD"; // U+FFFD for an ill-formed byte
                ++p;
                run = p;
            }
            continue;
        }
        flush(p);
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default: {
            const char esc[6] = { '\\', 'u', '0', '0', Hex[c >> 4], Hex[c & 15] };
            out.append(esc, 6);
        }
        }
        ++p;
        run = p;
    }
    flush(p);
    out += '"';
}

std::string encodeJson(const Snapshot& snapshot)
{
    JsonEncoder encoder(snapshot);
    return encoder.encode();
}

} // namespace memscope::io
