// The JSON reader: an iterative RFC 8259 parser into a ValueTree. See jsonreader.h.
//
// Grammar and rules: RFC 8259 (sections 2-7: structural characters, insignificant whitespace, literals, numbers,
// strings and their escapes, \uXXXX surrogate pairs). Choices the RFC leaves to a parser (section 9), written down:
// nesting is limited to 512 levels (an explicit stack, no recursion); integers in [-2^63, 2^64) are kept exactly
// (PyTorch writes C int64_t and uint64_t values, e.g. size_t(-1) frame lines), wider ones become a BigInt placeholder
// that records where it was, so the builder can leave that one field out; other numbers become doubles; a leading
// UTF-8 byte order mark is skipped (section 8.1 allows it); string bytes are not checked for UTF-8 (the writers
// replace what is ill formed); a lone surrogate escape is kept as its 3-byte generalised UTF-8 form, the bytes
// Python's "surrogatepass" pickles use for the same string; duplicate keys are all kept (ValueTree::find returns the
// last, as Python's json does). Strings without escapes point into the input; keys are shared between objects so
// the SnapshotBuilder resolves each distinct key once.
#include "io/jsonreader.h"

#include "io/textcodec.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace memscope::io {

namespace {

constexpr size_t MaxDepth = 512;
constexpr uint64_t ProgressStep = 1u << 20;

// Bytes that end a run of plain string content: '"', '\\' and the controls RFC 8259 section 7 forbids unescaped.
constexpr std::array<bool, 256> makeStringSpecial()
{
    std::array<bool, 256> t {};
    for (int c = 0; c < 0x20; ++c)
        t[c] = true;
    t['"'] = true;
    t['\\'] = true;
    return t;
}
constexpr std::array<bool, 256> StringSpecial = makeStringSpecial();

// The first byte in [p, end) that ends a run of plain string content. Strings (file names, function names) are most
// of a snapshot's bytes, so on x86-64 this looks at 16 bytes at a time (SSE2 is part of the x86-64 baseline).
const uint8_t* scanString(const uint8_t* p, const uint8_t* end)
{
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i control = _mm_set1_epi8(0x1F);
    while (end - p >= 16) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        // c <= 0x1F (unsigned) exactly when max(c, 0x1F) == 0x1F.
        const __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                             _mm_cmpeq_epi8(_mm_max_epu8(v, control), control));
        const int mask = _mm_movemask_epi8(special);
        if (mask != 0)
            return p + __builtin_ctz(static_cast<unsigned>(mask));
        p += 16;
    }
#endif
    while (p < end && !StringSpecial[*p])
        ++p;
    return p;
}

std::string describe(uint8_t c)
{
    char buf[16];
    if (c >= 0x21 && c < 0x7F)
        std::snprintf(buf, sizeof buf, "'%c'", c);
    else
        std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
    return buf;
}

class Parser {
public:
    Parser(std::span<const uint8_t> data, ValueTree& tree, const ProgressFn& progress)
        : m_begin(data.data())
        , m_p(data.data())
        , m_end(data.data() + data.size())
        , m_tree(tree)
        , m_progress(progress)
    {
    }

    Error run(NodeId& root);

private:
    struct Open {
        NodeType type;
        size_t first; // index in m_values of the container's first child
    };
    // A small direct-mapped cache of object keys without escapes: the same key text is one shared node.
    struct KeySlot {
        uint64_t offset = 0;
        uint32_t length = UINT32_MAX;
        NodeId node = NoNode;
    };
    static constexpr size_t KeyCacheSize = 1024;
    static constexpr uint32_t MaxCachedKey = 64;

    uint64_t offset(const uint8_t* p) const { return static_cast<uint64_t>(p - m_begin); }
    bool atEnd() const { return m_p >= m_end; }
    void skipWhitespace()
    {
        while (m_p < m_end && (*m_p == ' ' || *m_p == '\n' || *m_p == '\r' || *m_p == '\t'))
            ++m_p;
    }
    Error fail(ErrorCode code, std::string message, const uint8_t* at) const
    {
        Error e;
        e.code = code;
        e.message = std::move(message);
        e.offset = offset(at);
        e.hasOffset = true;
        return e;
    }
    Error truncated(const char* where) const
    {
        return fail(ErrorCode::Truncated, std::string("the file ends ") + where + ": it is truncated", m_end);
    }
    Error corrupt(const std::string& what, const uint8_t* at) const
    {
        return fail(ErrorCode::Corrupt, what + ": the file is corrupt", at);
    }

    Error key();
    Error string(NodeId& node, bool isKey);
    Error number(NodeId& node);
    Error literal(NodeId& node);
    Error scalar(NodeId& node);
    NodeId close();

    const uint8_t* m_begin;
    const uint8_t* m_p;
    const uint8_t* m_end;
    ValueTree& m_tree;
    const ProgressFn& m_progress;
    std::vector<NodeId> m_values;
    std::vector<Open> m_open;
    std::string m_scratch;
    std::vector<KeySlot> m_keyCache;
};

NodeId Parser::close()
{
    const Open open = m_open.back();
    m_open.pop_back();
    const NodeId node = m_tree.addContainer(open.type);
    m_tree.append(node, std::span<const NodeId>(m_values.data() + open.first, m_values.size() - open.first));
    m_values.resize(open.first);
    return node;
}

// An object's key, then the ':' and the whitespace before its value.
Error Parser::key()
{
    if (atEnd())
        return truncated("where an object key should be");
    if (*m_p != '"')
        return corrupt("expected a string key in an object, found " + describe(*m_p), m_p);
    NodeId k = NoNode;
    if (Error e = string(k, true))
        return e;
    m_values.push_back(k);
    skipWhitespace();
    if (atEnd())
        return truncated("after an object key");
    if (*m_p != ':')
        return corrupt("expected ':' after an object key, found " + describe(*m_p), m_p);
    ++m_p;
    skipWhitespace();
    return {};
}

// RFC 8259 section 7. m_p is at the opening quote.
Error Parser::string(NodeId& node, bool isKey)
{
    const uint8_t* open = m_p;
    const uint8_t* start = ++m_p;
    m_p = scanString(m_p, m_end);
    if (atEnd())
        return truncated("in the middle of a string");
    if (*m_p == '"') {
        const uint64_t length = static_cast<uint64_t>(m_p - start);
        if (length > UINT32_MAX)
            return fail(ErrorCode::TooLarge, "a string longer than 4 GiB", open);
        ++m_p;
        if (!isKey || length > MaxCachedKey) {
            node = m_tree.addInputString(NodeType::String, offset(start), static_cast<uint32_t>(length));
            return {};
        }
        uint64_t h = 0xcbf29ce484222325ull;
        for (const uint8_t* q = start; q < start + length; ++q)
            h = (h ^ *q) * 0x100000001b3ull;
        if (m_keyCache.empty())
            m_keyCache.resize(KeyCacheSize);
        KeySlot& slot = m_keyCache[h & (KeyCacheSize - 1)];
        if (slot.length == length && std::memcmp(m_begin + slot.offset, start, length) == 0) {
            node = slot.node;
            return {};
        }
        node = m_tree.addInputString(NodeType::String, offset(start), static_cast<uint32_t>(length));
        slot = KeySlot { offset(start), static_cast<uint32_t>(length), node };
        return {};
    }

    // Escapes (or a stray control character): decode into the scratch buffer.
    m_scratch.assign(reinterpret_cast<const char*>(start), static_cast<size_t>(m_p - start));
    while (true) {
        if (atEnd())
            return truncated("in the middle of a string");
        const uint8_t c = *m_p;
        if (c == '"') {
            ++m_p;
            break;
        }
        if (c < 0x20)
            return corrupt("a control character (" + describe(c) + ") inside a string must be escaped", m_p);
        if (c != '\\') {
            const uint8_t* run = m_p;
            m_p = scanString(m_p, m_end);
            m_scratch.append(reinterpret_cast<const char*>(run), static_cast<size_t>(m_p - run));
            continue;
        }
        const uint8_t* escape = m_p;
        if (++m_p >= m_end)
            return truncated("in the middle of an escape");
        switch (*m_p++) {
        case '"': m_scratch += '"'; break;
        case '\\': m_scratch += '\\'; break;
        case '/': m_scratch += '/'; break;
        case 'b': m_scratch += '\b'; break;
        case 'f': m_scratch += '\f'; break;
        case 'n': m_scratch += '\n'; break;
        case 'r': m_scratch += '\r'; break;
        case 't': m_scratch += '\t'; break;
        case 'u': {
            auto hex4 = [&](const uint8_t* p, uint32_t& out) -> int { // 1 ok, 0 truncated, -1 bad
                if (m_end - p < 4) {
                    for (const uint8_t* q = p; q < m_end; ++q) {
                        if (hexValue(*q) < 0)
                            return -1;
                    }
                    return 0;
                }
                out = 0;
                for (int i = 0; i < 4; ++i) {
                    const int v = hexValue(p[i]);
                    if (v < 0)
                        return -1;
                    out = out * 16 + static_cast<uint32_t>(v);
                }
                return 1;
            };
            uint32_t cp = 0;
            const int r = hex4(m_p, cp);
            if (r == 0)
                return truncated("in the middle of a \\u escape");
            if (r < 0)
                return corrupt("a \\u escape needs four hex digits", escape);
            m_p += 4;
            // A high surrogate followed by an escaped low surrogate is one code point (RFC 8259 section 7).
            if (cp >= 0xD800 && cp <= 0xDBFF && m_end - m_p >= 6 && m_p[0] == '\\' && m_p[1] == 'u') {
                uint32_t low = 0;
                if (hex4(m_p + 2, low) == 1 && low >= 0xDC00 && low <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    m_p += 6;
                }
            }
            appendUtf8(m_scratch, cp);
            break;
        }
        default: return corrupt("an unknown escape \\" + std::string(1, static_cast<char>(m_p[-1])), escape);
        }
    }
    if (m_scratch.size() > UINT32_MAX)
        return fail(ErrorCode::TooLarge, "a string longer than 4 GiB", open);
    node = m_tree.addOwnedString(NodeType::String, m_scratch);
    return {};
}

// RFC 8259 section 6: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
Error Parser::number(NodeId& node)
{
    const uint8_t* start = m_p;
    const bool negative = *m_p == '-';
    if (negative)
        ++m_p;
    if (atEnd())
        return truncated("in the middle of a number");
    auto isDigit = [](uint8_t c) { return c >= '0' && c <= '9'; };
    if (!isDigit(*m_p))
        return corrupt("expected a digit in a number, found " + describe(*m_p), m_p);
    uint64_t magnitude = 0;
    bool overflow = false;
    const uint8_t* intStart = m_p;
    if (*m_p == '0') {
        ++m_p;
        if (m_p < m_end && isDigit(*m_p))
            return corrupt("a number with a leading zero", start);
    } else {
        while (m_p < m_end && isDigit(*m_p)) {
            const uint64_t d = *m_p - '0';
            if (magnitude > (UINT64_MAX - d) / 10)
                overflow = true;
            else
                magnitude = magnitude * 10 + d;
            ++m_p;
        }
    }
    const size_t intDigits = static_cast<size_t>(m_p - intStart);
    bool isFloat = false;
    int64_t exponent = 0;
    if (m_p < m_end && *m_p == '.') {
        isFloat = true;
        if (++m_p >= m_end)
            return truncated("in the middle of a number");
        if (!isDigit(*m_p))
            return corrupt("expected a digit after the decimal point, found " + describe(*m_p), m_p);
        while (m_p < m_end && isDigit(*m_p))
            ++m_p;
    }
    if (m_p < m_end && (*m_p == 'e' || *m_p == 'E')) {
        isFloat = true;
        if (++m_p >= m_end)
            return truncated("in the middle of a number");
        bool negativeExponent = false;
        if (*m_p == '+' || *m_p == '-') {
            negativeExponent = *m_p == '-';
            if (++m_p >= m_end)
                return truncated("in the middle of a number");
        }
        if (!isDigit(*m_p))
            return corrupt("expected a digit in an exponent, found " + describe(*m_p), m_p);
        while (m_p < m_end && isDigit(*m_p)) {
            if (exponent < 100000)
                exponent = exponent * 10 + (*m_p - '0');
            ++m_p;
        }
        if (negativeExponent)
            exponent = -exponent;
    }
    if (!isFloat) {
        // [-2^63, 2^64) is kept exactly (Int or UInt); beyond it the value is a BigInt placeholder (valuetree.h).
        if (overflow || (negative && magnitude > uint64_t(1) << 63))
            node = m_tree.addBigInt(offset(start));
        else if (negative)
            node = m_tree.addInt(static_cast<int64_t>(0 - magnitude));
        else
            node = m_tree.addUnsigned(magnitude);
        return {};
    }
    double value = 0;
    const auto r = std::from_chars(reinterpret_cast<const char*>(start), reinterpret_cast<const char*>(m_p), value);
    if (r.ec == std::errc::result_out_of_range) {
        // Beyond a double: overflow gives an infinity and underflow a zero, as strtod (and Python's float()) do.
        // Which one: the decimal exponent of the first significant digit.
        int64_t firstDigitExponent = INT64_MIN;
        int64_t position = static_cast<int64_t>(intDigits) - 1;
        for (const uint8_t* q = intStart; q < m_p && *q != 'e' && *q != 'E'; ++q) {
            if (*q == '.')
                continue;
            if (*q != '0') {
                firstDigitExponent = position + exponent;
                break;
            }
            --position;
        }
        value = firstDigitExponent >= 0 && firstDigitExponent != INT64_MIN ? std::numeric_limits<double>::infinity()
                                                                            : 0.0;
        if (negative)
            value = -value;
    } else if (r.ec != std::errc {} || r.ptr != reinterpret_cast<const char*>(m_p)) {
        return corrupt("a malformed number", start);
    }
    node = m_tree.addFloat(value);
    return {};
}

Error Parser::literal(NodeId& node)
{
    static constexpr std::string_view Words[] = { "true", "false", "null" };
    for (std::string_view word : Words) {
        if (*m_p != static_cast<uint8_t>(word[0]))
            continue;
        const size_t available = static_cast<size_t>(m_end - m_p);
        const size_t n = std::min(available, word.size());
        if (std::memcmp(m_p, word.data(), n) != 0)
            break;
        if (n < word.size())
            return truncated("in the middle of a literal");
        m_p += word.size();
        node = word[0] == 'n' ? m_tree.addNone() : m_tree.addBool(word[0] == 't');
        return {};
    }
    return corrupt("unexpected " + describe(*m_p) + " where a value should start", m_p);
}

Error Parser::scalar(NodeId& node)
{
    const uint8_t c = *m_p;
    if (c == '"')
        return string(node, false);
    if (c == '-' || (c >= '0' && c <= '9'))
        return number(node);
    if (c == 't' || c == 'f' || c == 'n')
        return literal(node);
    return corrupt("unexpected " + describe(c) + " where a value should start", m_p);
}

Error Parser::run(NodeId& root)
{
    // RFC 8259 section 8.1: a parser may ignore a UTF-8 byte order mark.
    if (m_end - m_p >= 3 && m_p[0] == 0xEF && m_p[1] == 0xBB && m_p[2] == 0xBF)
        m_p += 3;
    skipWhitespace();
    if (atEnd())
        return truncated("before any JSON value");
    uint64_t nextProgress = ProgressStep;
    const uint64_t total = offset(m_end);

    while (true) {
        // A value starts here: a scalar, or a container that opens (and maybe closes at once).
        if (atEnd())
            return truncated("where a value should be");
        if (m_progress && offset(m_p) >= nextProgress) {
            nextProgress = offset(m_p) + ProgressStep;
            if (!m_progress(offset(m_p), total))
                return fail(ErrorCode::Cancelled, "loading was cancelled", m_p);
        }
        NodeId value = NoNode;
        const uint8_t c = *m_p;
        if (c == '{' || c == '[') {
            if (m_open.size() >= MaxDepth)
                return fail(ErrorCode::TooDeep, "nested more than " + std::to_string(MaxDepth) + " levels deep", m_p);
            m_open.push_back(Open { c == '{' ? NodeType::Dict : NodeType::List, m_values.size() });
            ++m_p;
            skipWhitespace();
            if (atEnd())
                return truncated(c == '{' ? "inside an object" : "inside an array");
            if (*m_p == (c == '{' ? '}' : ']')) {
                ++m_p;
                value = close();
            } else if (c == '{') {
                if (Error e = key())
                    return e;
                continue;
            } else {
                continue;
            }
        } else if (Error e = scalar(value)) {
            return e;
        }

        // A value is complete: hand it to its container, closing containers as their ends arrive.
        while (true) {
            if (m_open.empty()) {
                root = value;
                skipWhitespace();
                if (!atEnd())
                    return corrupt("unexpected " + describe(*m_p) + " after the end of the JSON document", m_p);
                return {};
            }
            m_values.push_back(value);
            skipWhitespace();
            const bool inObject = m_open.back().type == NodeType::Dict;
            if (atEnd())
                return truncated(inObject ? "inside an object" : "inside an array");
            if (*m_p == ',') {
                ++m_p;
                skipWhitespace();
                if (inObject) {
                    if (Error e = key())
                        return e;
                }
                break;
            }
            if (*m_p == (inObject ? '}' : ']')) {
                ++m_p;
                value = close();
                continue;
            }
            return corrupt(std::string(inObject ? "expected ',' or '}'" : "expected ',' or ']'") + ", found "
                               + describe(*m_p),
                           m_p);
        }
    }
}

} // namespace

Error parseJson(std::span<const uint8_t> data, ValueTree& tree, NodeId& root, const ProgressFn& progress)
{
    root = NoNode;
    Parser parser(data, tree, progress);
    return parser.run(root);
}

} // namespace memscope::io
