// Frame decoders and encoders of the wire protocol (decoder.h). Every read is preceded by a length check against
// the frame; counts are checked in 64-bit arithmetic, so no count can overflow a size or cause an allocation.
#include "viewer/decoder.h"

#include <lz4.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace memscope::viewer {

namespace {

    DecodeError fail(DecodeErrorCode code, std::string message, uint64_t offset)
    {
        return DecodeError { code, std::move(message), offset };
    }

    template <class T> T readAt(std::span<const uint8_t> frame, size_t offset)
    {
        T value;
        std::memcpy(&value, frame.data() + offset, sizeof(T));
        return value;
    }

    // The magic and version every header starts with (Hello, BatchHeader, Goodbye, Request), at offset 0 and 4.
    DecodeError checkMagicAndVersion(uint32_t magic, uint16_t version, std::string_view what)
    {
        if (magic != Magic) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "not a memscope %.*s: magic 0x%08x, expected 0x%08x", int(what.size()),
                          what.data(), magic, Magic);
            return fail(DecodeErrorCode::BadMagic, buf, 0);
        }
        if (version > ProtocolVersion)
            return fail(DecodeErrorCode::TooNew,
                        "protocol version " + std::to_string(version) + " is newer than "
                            + std::to_string(ProtocolVersion) + " (update memscope to read this agent)",
                        4);
        if (version == 0)
            return fail(DecodeErrorCode::TooOld, "protocol version 0 is not a valid version", 4);
        return {};
    }

    DecodeError truncated(std::string_view what, size_t need, size_t have)
    {
        return fail(DecodeErrorCode::Truncated,
                    "truncated " + std::string(what) + ": " + std::to_string(have) + " bytes, " + std::to_string(need)
                        + " needed",
                    have);
    }

    bool hasNul(const char* text, size_t size) { return std::memchr(text, 0, size) != nullptr; }

    template <size_t N> void copyText(char (&out)[N], std::string_view text)
    {
        const size_t n = std::min(text.size(), N - 1);
        std::memcpy(out, text.data(), n);
        std::memset(out + n, 0, N - n);
    }

    template <class T> void append(std::vector<uint8_t>& out, const T& value)
    {
        const size_t at = out.size();
        out.resize(at + sizeof(T));
        std::memcpy(out.data() + at, &value, sizeof(T));
    }

    template <class T> void appendAll(std::vector<uint8_t>& out, std::span<const T> values)
    {
        if (values.empty())
            return;
        const size_t at = out.size();
        out.resize(at + values.size_bytes());
        std::memcpy(out.data() + at, values.data(), values.size_bytes());
    }

} // namespace

std::string_view decodeErrorCodeName(DecodeErrorCode code)
{
    switch (code) {
    case DecodeErrorCode::None:
        return "none";
    case DecodeErrorCode::Truncated:
        return "truncated";
    case DecodeErrorCode::BadMagic:
        return "bad magic";
    case DecodeErrorCode::TooNew:
        return "too new";
    case DecodeErrorCode::TooOld:
        return "too old";
    case DecodeErrorCode::Corrupt:
        return "corrupt";
    case DecodeErrorCode::Unsupported:
        return "unsupported";
    case DecodeErrorCode::Count:
        break;
    }
    return "unknown";
}

std::string DecodeError::toString(std::string_view name) const
{
    return std::string(name) + ": " + message + " (at byte " + std::to_string(offset) + ")";
}

DecodedBatch& DecodedBatch::operator=(const DecodedBatch& other)
{
    if (this == &other)
        return *this;
    header = other.header;
    error = other.error;
    decompressed = other.decompressed;
    events = other.decompressed.empty() ? other.events : std::span<const EventRecord>(decompressed);
    return *this;
}

DecodedBatch& DecodedBatch::operator=(DecodedBatch&& other) noexcept
{
    if (this == &other)
        return *this;
    const bool owned = !other.decompressed.empty();
    header = other.header;
    error = std::move(other.error);
    decompressed = std::move(other.decompressed);
    events = owned ? std::span<const EventRecord>(decompressed) : other.events;
    other.events = {};
    return *this;
}

namespace {

    // Every record's type and device; `offsetOf(i)` is where record i's bytes start in the frame (for a compressed
    // batch: where its payload starts, and `what` says the records were decompressed).
    DecodeError checkRecords(std::span<const EventRecord> records, uint64_t recordsAt, bool compressed)
    {
        const char* what = compressed ? "decompressed event record " : "event record ";
        for (size_t i = 0; i < records.size(); ++i) {
            EventRecord r;
            std::memcpy(&r, reinterpret_cast<const uint8_t*>(records.data()) + i * sizeof(EventRecord), sizeof r);
            const uint64_t at = compressed ? recordsAt : recordsAt + uint64_t(i) * sizeof(EventRecord);
            if (r.type >= uint8_t(EventType::Count))
                return fail(DecodeErrorCode::Corrupt,
                            what + std::to_string(i) + " has unknown type " + std::to_string(r.type),
                            compressed ? at : at + offsetof(EventRecord, type));
            if (r.device > MaxDevice)
                return fail(DecodeErrorCode::Corrupt,
                            what + std::to_string(i) + " names device " + std::to_string(r.device) + " (at most "
                                + std::to_string(MaxDevice) + ")",
                            compressed ? at : at + offsetof(EventRecord, device));
        }
        return {};
    }

    std::string hex16(uint16_t value)
    {
        char buf[8];
        std::snprintf(buf, sizeof buf, "%04x", value);
        return buf;
    }

} // namespace

DecodedBatch decodeBatch(std::span<const uint8_t> frame)
{
    DecodedBatch out;
    if (frame.size() < sizeof(BatchHeader)) {
        // Report a wrong magic before a short length when there are enough bytes to tell.
        if (frame.size() >= 6) {
            if (DecodeError e
                = checkMagicAndVersion(readAt<uint32_t>(frame, 0), readAt<uint16_t>(frame, 4), "event batch")) {
                out.error = std::move(e);
                return out;
            }
        }
        out.error = truncated("event batch header", sizeof(BatchHeader), frame.size());
        return out;
    }
    out.header = readAt<BatchHeader>(frame, 0);
    if (DecodeError e = checkMagicAndVersion(out.header.magic, out.header.version, "event batch")) {
        out.error = std::move(e);
        return out;
    }
    const uint64_t payload = frame.size() - sizeof(BatchHeader);
    const uint64_t expected = uint64_t(out.header.count) * sizeof(EventRecord);
    if (out.header.flags == uint16_t(BatchFlags::Compressed)) {
        // The LZ4 block format (lz4's doc/lz4_Block_format.md): every 255 output bytes of a literal run or a match
        // cost at least one input byte, so a block can never decompress to more than 255 times its size. A count
        // beyond that, or beyond the cap, is refused before the buffer is allocated.
        if (out.header.count > MaxCompressedBatchRecords) {
            out.error = fail(DecodeErrorCode::Corrupt,
                             "compressed event batch announces " + std::to_string(out.header.count)
                                 + " records (at most " + std::to_string(MaxCompressedBatchRecords) + ")",
                             offsetof(BatchHeader, count));
            return out;
        }
        if (expected > payload * 255) {
            out.error = fail(DecodeErrorCode::Corrupt,
                             "compressed event batch announces " + std::to_string(out.header.count) + " records ("
                                 + std::to_string(expected) + " bytes) but its " + std::to_string(payload)
                                 + " bytes of LZ4 data cannot hold that many",
                             offsetof(BatchHeader, count));
            return out;
        }
        if (payload > uint64_t(LZ4_compressBound(int(expected)))) {
            out.error = fail(DecodeErrorCode::Corrupt,
                             "compressed event batch carries " + std::to_string(payload)
                                 + " bytes of LZ4 data, more than " + std::to_string(out.header.count) + " records ("
                                 + std::to_string(expected) + " bytes) can compress to",
                             sizeof(BatchHeader));
            return out;
        }
        out.decompressed.resize(out.header.count);
        const int produced = out.header.count == 0 && payload == 0
            ? 0
            : LZ4_decompress_safe(reinterpret_cast<const char*>(frame.data() + sizeof(BatchHeader)),
                                  reinterpret_cast<char*>(out.decompressed.data()), int(payload), int(expected));
        if (produced < 0 || uint64_t(produced) != expected) {
            out.decompressed.clear();
            out.error
                = fail(DecodeErrorCode::Corrupt,
                       produced < 0 ? "compressed event batch: the LZ4 data is corrupt (or decompresses to more than "
                               + std::to_string(out.header.count) + " records, " + std::to_string(expected) + " bytes)"
                                    : "compressed event batch decompresses to " + std::to_string(produced)
                               + " bytes, but announces " + std::to_string(out.header.count) + " records ("
                               + std::to_string(expected) + " bytes)",
                       sizeof(BatchHeader));
            return out;
        }
        if (DecodeError e = checkRecords(out.decompressed, sizeof(BatchHeader), true)) {
            out.decompressed.clear();
            out.error = std::move(e);
            return out;
        }
        out.events = out.decompressed;
        return out;
    }
    if (out.header.flags != uint16_t(BatchFlags::None)) {
        out.error = fail(DecodeErrorCode::Unsupported,
                         "unsupported batch flags 0x" + hex16(out.header.flags)
                             + " (this viewer knows 0x0001, LZ4 compression, only)",
                         offsetof(BatchHeader, flags));
        return out;
    }
    if (expected != payload) {
        const bool shorter = expected > payload;
        out.error = fail(shorter ? DecodeErrorCode::Truncated : DecodeErrorCode::Corrupt,
                         "event batch announces " + std::to_string(out.header.count) + " records ("
                             + std::to_string(expected) + " bytes) but carries " + std::to_string(payload) + " bytes",
                         shorter ? frame.size() : offsetof(BatchHeader, count));
        return out;
    }
    const auto* records = reinterpret_cast<const EventRecord*>(frame.data() + sizeof(BatchHeader));
    if (DecodeError e = checkRecords({ records, out.header.count }, sizeof(BatchHeader), false)) {
        out.error = std::move(e);
        return out;
    }
    out.events = { records, out.header.count };
    return out;
}

DecodedState decodeState(std::span<const uint8_t> frame)
{
    DecodedState out;
    constexpr size_t Fixed = sizeof(Hello) + sizeof(StateHeader);
    if (frame.size() >= 6) {
        if (DecodeError e
            = checkMagicAndVersion(readAt<uint32_t>(frame, 0), readAt<uint16_t>(frame, 4), "state reply")) {
            out.error = std::move(e);
            return out;
        }
    }
    if (frame.size() < Fixed) {
        out.error = truncated("state reply header", Fixed, frame.size());
        return out;
    }
    out.hello = readAt<Hello>(frame, 0);
    out.header = readAt<StateHeader>(frame, sizeof(Hello));
    if (!hasNul(out.hello.host, sizeof out.hello.host)) {
        out.error
            = fail(DecodeErrorCode::Corrupt, "the host name in the hello is not NUL-terminated", offsetof(Hello, host));
        return out;
    }
    if (!hasNul(out.hello.agentVersion, sizeof out.hello.agentVersion)) {
        out.error = fail(DecodeErrorCode::Corrupt, "the agent version in the hello is not NUL-terminated",
                         offsetof(Hello, agentVersion));
        return out;
    }
    const uint64_t payload = frame.size() - Fixed;
    const uint64_t expected = (uint64_t(out.header.segmentCount) + out.header.blockCount) * sizeof(SegmentRecord);
    static_assert(sizeof(SegmentRecord) == sizeof(BlockRecord));
    if (expected != payload) {
        const bool shorter = expected > payload;
        out.error = fail(shorter ? DecodeErrorCode::Truncated : DecodeErrorCode::Corrupt,
                         "state reply announces " + std::to_string(out.header.segmentCount) + " segments and "
                             + std::to_string(out.header.blockCount) + " blocks (" + std::to_string(expected)
                             + " bytes) but carries " + std::to_string(payload) + " bytes",
                         shorter ? frame.size() : sizeof(Hello) + offsetof(StateHeader, segmentCount));
        return out;
    }
    const size_t blocksAt = Fixed + size_t(out.header.segmentCount) * sizeof(SegmentRecord);
    for (uint32_t i = 0; i < out.header.segmentCount; ++i) {
        const size_t at = Fixed + size_t(i) * sizeof(SegmentRecord);
        const auto s = readAt<SegmentRecord>(frame, at);
        if (s.device > MaxDevice) {
            out.error = fail(DecodeErrorCode::Corrupt,
                             "segment record " + std::to_string(i) + " names device " + std::to_string(s.device),
                             at + offsetof(SegmentRecord, device));
            return out;
        }
    }
    for (uint32_t i = 0; i < out.header.blockCount; ++i) {
        const size_t at = blocksAt + size_t(i) * sizeof(BlockRecord);
        const auto b = readAt<BlockRecord>(frame, at);
        if (b.device > MaxDevice) {
            out.error = fail(DecodeErrorCode::Corrupt,
                             "block record " + std::to_string(i) + " names device " + std::to_string(b.device),
                             at + offsetof(BlockRecord, device));
            return out;
        }
        if (b.state > 2) {
            out.error = fail(DecodeErrorCode::Corrupt,
                             "block record " + std::to_string(i) + " has unknown state " + std::to_string(b.state),
                             at + offsetof(BlockRecord, state));
            return out;
        }
    }
    out.segments = { reinterpret_cast<const SegmentRecord*>(frame.data() + Fixed), out.header.segmentCount };
    out.blocks = { reinterpret_cast<const BlockRecord*>(frame.data() + blocksAt), out.header.blockCount };
    return out;
}

DecodedGoodbye decodeGoodbye(std::span<const uint8_t> frame)
{
    DecodedGoodbye out;
    if (frame.size() >= 6) {
        if (DecodeError e = checkMagicAndVersion(readAt<uint32_t>(frame, 0), readAt<uint16_t>(frame, 4), "goodbye")) {
            out.error = std::move(e);
            return out;
        }
    }
    if (frame.size() < sizeof(Goodbye)) {
        out.error = truncated("goodbye", sizeof(Goodbye), frame.size());
        return out;
    }
    if (frame.size() > sizeof(Goodbye)) {
        out.error = fail(DecodeErrorCode::Corrupt,
                         "goodbye has " + std::to_string(frame.size() - sizeof(Goodbye)) + " bytes after its end",
                         sizeof(Goodbye));
        return out;
    }
    out.goodbye = readAt<Goodbye>(frame, 0);
    return out;
}

DecodedRequest decodeRequest(std::span<const uint8_t> frame)
{
    DecodedRequest out;
    if (frame.size() >= 6) {
        if (DecodeError e = checkMagicAndVersion(readAt<uint32_t>(frame, 0), readAt<uint16_t>(frame, 4), "request")) {
            out.error = std::move(e);
            return out;
        }
    }
    if (frame.size() != sizeof(Request)) {
        out.error = frame.size() < sizeof(Request)
            ? truncated("request", sizeof(Request), frame.size())
            : fail(DecodeErrorCode::Corrupt, "request has trailing bytes", sizeof(Request));
        return out;
    }
    out.request = readAt<Request>(frame, 0);
    if (out.request.type == 0 || out.request.type >= uint16_t(RequestType::Count)) {
        out.error = fail(DecodeErrorCode::Corrupt, "unknown request type " + std::to_string(out.request.type),
                         offsetof(Request, type));
        return out;
    }
    return out;
}

DecodedStackDef decodeStackDef(std::span<const uint8_t> frame)
{
    DecodedStackDef out;
    if (frame.size() >= 6) {
        if (DecodeError e
            = checkMagicAndVersion(readAt<uint32_t>(frame, 0), readAt<uint16_t>(frame, 4), "stack definition")) {
            out.error = std::move(e);
            return out;
        }
    }
    if (frame.size() < sizeof(StackDefHeader)) {
        out.error = truncated("stack definition header", sizeof(StackDefHeader), frame.size());
        return out;
    }
    out.header = readAt<StackDefHeader>(frame, 0);
    const StackDefHeader& h = out.header;
    if (h.flags != 0) {
        out.error = fail(DecodeErrorCode::Unsupported, "unsupported stack definition flags " + std::to_string(h.flags),
                         offsetof(StackDefHeader, flags));
        return out;
    }
    if (h.stackId == 0) {
        out.error = fail(DecodeErrorCode::Corrupt, "stack definition for stack id 0 (which means no stack)",
                         offsetof(StackDefHeader, stackId));
        return out;
    }
    if (h.frameCount > MaxStackFrames) {
        out.error = fail(DecodeErrorCode::Corrupt,
                         "stack definition announces " + std::to_string(h.frameCount) + " frames (at most "
                             + std::to_string(MaxStackFrames) + ")",
                         offsetof(StackDefHeader, frameCount));
        return out;
    }
    const uint64_t payload = frame.size() - sizeof(StackDefHeader);
    const uint64_t expected = uint64_t(h.frameCount) * sizeof(FrameRecord) + h.stringBytes;
    if (expected != payload) {
        const bool shorter = expected > payload;
        out.error = fail(shorter ? DecodeErrorCode::Truncated : DecodeErrorCode::Corrupt,
                         "stack definition announces " + std::to_string(h.frameCount) + " frames and "
                             + std::to_string(h.stringBytes) + " string bytes (" + std::to_string(expected)
                             + " bytes) but carries " + std::to_string(payload) + " bytes",
                         shorter ? frame.size() : offsetof(StackDefHeader, frameCount));
        return out;
    }
    const size_t stringsAt = sizeof(StackDefHeader) + size_t(h.frameCount) * sizeof(FrameRecord);
    const auto* strings = reinterpret_cast<const char*>(frame.data() + stringsAt);
    auto stringAt = [&](uint32_t offset, std::string_view& text) {
        if (offset >= h.stringBytes)
            return false;
        const void* nul = std::memchr(strings + offset, 0, h.stringBytes - offset);
        if (!nul)
            return false;
        text = std::string_view(strings + offset, size_t(static_cast<const char*>(nul) - (strings + offset)));
        return true;
    };
    out.frames.resize(h.frameCount); // at most MaxStackFrames
    for (uint32_t i = 0; i < h.frameCount; ++i) {
        const size_t at = sizeof(StackDefHeader) + size_t(i) * sizeof(FrameRecord);
        const auto f = readAt<FrameRecord>(frame, at);
        DecodedFrame& d = out.frames[i];
        d.address = f.address;
        d.line = f.line;
        if (!stringAt(f.nameOffset, d.name) || !stringAt(f.fileOffset, d.file)) {
            out.frames.clear();
            out.error = fail(DecodeErrorCode::Corrupt,
                             "stack frame " + std::to_string(i)
                                 + " names a string outside the string table or without its NUL",
                             at + offsetof(FrameRecord, nameOffset));
            return out;
        }
    }
    return out;
}

std::vector<uint8_t> encodeStackDef(uint32_t stackId, std::span<const DecodedFrame> frames)
{
    std::string strings;
    auto add = [&](std::string_view text) {
        const uint32_t offset = uint32_t(strings.size());
        strings.append(text);
        strings.push_back('\0');
        return offset;
    };
    std::vector<FrameRecord> records;
    for (const DecodedFrame& f : frames)
        records.push_back(FrameRecord { f.address, add(f.name), add(f.file), f.line });
    StackDefHeader h {};
    h.magic = Magic;
    h.version = ProtocolVersion;
    h.stackId = stackId;
    h.frameCount = uint32_t(records.size());
    h.stringBytes = uint32_t(strings.size());
    std::vector<uint8_t> out;
    append(out, h);
    appendAll(out, std::span<const FrameRecord>(records));
    out.insert(out.end(), strings.begin(), strings.end());
    return out;
}

std::vector<uint8_t> encodeBatch(std::span<const EventRecord> events, uint16_t flags)
{
    BatchHeader h {};
    h.magic = Magic;
    h.version = ProtocolVersion;
    h.flags = flags;
    h.count = static_cast<uint32_t>(events.size());
    h.firstSequence = events.empty() ? 0 : events.front().sequence;
    std::vector<uint8_t> out;
    if (flags & uint16_t(BatchFlags::Compressed)) {
        const int bound = LZ4_compressBound(int(events.size_bytes()));
        out.resize(sizeof h + size_t(bound));
        const int packed
            = LZ4_compress_default(reinterpret_cast<const char*>(events.data()),
                                   reinterpret_cast<char*>(out.data() + sizeof h), int(events.size_bytes()), bound);
        out.resize(sizeof h + size_t(packed > 0 ? packed : 0));
        std::memcpy(out.data(), &h, sizeof h);
        return out;
    }
    out.reserve(sizeof h + events.size_bytes());
    append(out, h);
    appendAll(out, events);
    return out;
}

std::vector<uint8_t> encodeState(const Hello& hello, uint64_t lastSequence, std::span<const SegmentRecord> segments,
                                 std::span<const BlockRecord> blocks)
{
    StateHeader h {};
    h.lastSequence = lastSequence;
    h.segmentCount = static_cast<uint32_t>(segments.size());
    h.blockCount = static_cast<uint32_t>(blocks.size());
    std::vector<uint8_t> out;
    append(out, hello);
    append(out, h);
    appendAll(out, segments);
    appendAll(out, blocks);
    return out;
}

std::vector<uint8_t> encodeGoodbye(uint64_t lastSequence, uint64_t lost)
{
    Goodbye g {};
    g.magic = Magic;
    g.version = ProtocolVersion;
    g.lastSequence = lastSequence;
    g.lost = lost;
    std::vector<uint8_t> out;
    append(out, g);
    return out;
}

std::vector<uint8_t> encodeRequest(RequestType type)
{
    Request r {};
    r.magic = Magic;
    r.version = ProtocolVersion;
    r.type = uint16_t(type);
    std::vector<uint8_t> out;
    append(out, r);
    return out;
}

Hello makeHello(uint32_t pid, uint16_t deviceCount, std::string_view host, std::string_view agentVersion)
{
    Hello h {};
    h.magic = Magic;
    h.version = ProtocolVersion;
    h.deviceCount = deviceCount;
    h.pid = pid;
    copyText(h.host, host);
    copyText(h.agentVersion, agentVersion);
    return h;
}

DecodedNotes decodeNotes(std::span<const uint8_t> frame)
{
    DecodedNotes out;
    if (frame.empty()) {
        out.error = truncated("note header", sizeof(NoteHeader), 0);
        return out;
    }
    size_t at = 0;
    while (at < frame.size()) {
        const std::span<const uint8_t> rest = frame.subspan(at);
        auto failAt = [&](DecodeErrorCode code, std::string message, size_t offset) {
            out.notes.clear();
            out.error = fail(code, std::move(message), at + offset);
        };
        if (rest.size() >= 6) {
            if (DecodeError e = checkMagicAndVersion(readAt<uint32_t>(rest, 0), readAt<uint16_t>(rest, 4), "note")) {
                e.offset += at;
                out.notes.clear();
                out.error = std::move(e);
                return out;
            }
        }
        if (rest.size() < sizeof(NoteHeader)) {
            failAt(DecodeErrorCode::Truncated,
                   "note header needs " + std::to_string(sizeof(NoteHeader)) + " bytes, " + std::to_string(rest.size())
                       + " left",
                   rest.size());
            return out;
        }
        DecodedNote note;
        note.header = readAt<NoteHeader>(rest, 0);
        const NoteHeader& h = note.header;
        if (h.stage > 1) {
            failAt(DecodeErrorCode::Corrupt, "note of stage " + std::to_string(h.stage) + " (0 START, 1 END)",
                   offsetof(NoteHeader, stage));
            return out;
        }
        if (h.nameBytes > MaxNoteNameBytes) {
            failAt(DecodeErrorCode::Corrupt,
                   "note announces a name of " + std::to_string(h.nameBytes) + " bytes (at most "
                       + std::to_string(MaxNoteNameBytes) + ")",
                   offsetof(NoteHeader, nameBytes));
            return out;
        }
        if (rest.size() - sizeof(NoteHeader) < h.nameBytes) {
            failAt(DecodeErrorCode::Truncated,
                   "note announces " + std::to_string(h.nameBytes) + " name bytes but "
                       + std::to_string(rest.size() - sizeof(NoteHeader)) + " are left",
                   rest.size());
            return out;
        }
        note.name.assign(reinterpret_cast<const char*>(rest.data() + sizeof(NoteHeader)), h.nameBytes);
        out.notes.push_back(std::move(note));
        at += sizeof(NoteHeader) + h.nameBytes;
    }
    return out;
}

namespace {

    bool isInteger(std::string_view v)
    {
        if (!v.empty() && v.front() == '-')
            v.remove_prefix(1);
        return !v.empty() && v.size() <= 19
            && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
    }

    bool settingValueFits(char type, std::string_view v)
    {
        switch (type) {
        case 's':
            return true;
        case 'i':
            return isInteger(v);
        case 'f': {
            if (v.empty() || v.size() > 64)
                return false;
            const std::string text(v);
            char* end = nullptr;
            std::strtod(text.c_str(), &end);
            return end && *end == '\0';
        }
        case 'b':
            return v == "0" || v == "1";
        case 'd': {
            // name:integer pairs, ',' between them; empty: an empty dict
            while (!v.empty()) {
                const size_t comma = v.find(',');
                const std::string_view pair = v.substr(0, comma);
                const size_t colon = pair.rfind(':');
                if (colon == std::string_view::npos || colon == 0 || !isInteger(pair.substr(colon + 1)))
                    return false;
                v = comma == std::string_view::npos ? std::string_view() : v.substr(comma + 1);
            }
            return true;
        }
        default:
            return false;
        }
    }

} // namespace

DecodedSettings decodeSettings(std::span<const uint8_t> frame)
{
    DecodedSettings out;
    if (frame.size() >= 6) {
        if (DecodeError e = checkMagicAndVersion(readAt<uint32_t>(frame, 0), readAt<uint16_t>(frame, 4), "settings")) {
            out.error = std::move(e);
            return out;
        }
    }
    if (frame.size() < sizeof(SettingsHeader)) {
        out.error = truncated("settings header", sizeof(SettingsHeader), frame.size());
        return out;
    }
    const auto h = readAt<SettingsHeader>(frame, 0);
    if (h.flags != 0) {
        out.error = fail(DecodeErrorCode::Unsupported, "unsupported settings flags " + std::to_string(h.flags),
                         offsetof(SettingsHeader, flags));
        return out;
    }
    if (h.textBytes > MaxSettingsBytes) {
        out.error = fail(DecodeErrorCode::Corrupt,
                         "settings announce " + std::to_string(h.textBytes) + " bytes (at most "
                             + std::to_string(MaxSettingsBytes) + ")",
                         offsetof(SettingsHeader, textBytes));
        return out;
    }
    const uint64_t payload = frame.size() - sizeof(SettingsHeader);
    if (payload != h.textBytes) {
        const bool shorter = h.textBytes > payload;
        out.error = fail(shorter ? DecodeErrorCode::Truncated : DecodeErrorCode::Corrupt,
                         "settings announce " + std::to_string(h.textBytes) + " bytes but carry "
                             + std::to_string(payload),
                         shorter ? frame.size() : offsetof(SettingsHeader, textBytes));
        return out;
    }
    std::string_view text(reinterpret_cast<const char*>(frame.data() + sizeof(SettingsHeader)), h.textBytes);
    size_t at = sizeof(SettingsHeader);
    while (!text.empty()) {
        const size_t newline = text.find('\n');
        const std::string_view line = text.substr(0, newline);
        const size_t equals = line.find('=');
        if (equals == std::string_view::npos || equals == 0 || line.size() < equals + 3 || line[equals + 2] != ':'
            || !settingValueFits(line[equals + 1], line.substr(equals + 3))) {
            out.settings.clear();
            out.error = fail(DecodeErrorCode::Corrupt, "settings line is not key=T:value", at);
            return out;
        }
        out.settings.push_back({ std::string(line.substr(0, equals)), line[equals + 1],
                                 std::string(line.substr(equals + 3)) });
        const size_t step = newline == std::string_view::npos ? text.size() : newline + 1;
        text.remove_prefix(step);
        at += step;
    }
    return out;
}

void appendNote(std::vector<uint8_t>& frame, uint8_t stage, uint8_t device, uint64_t timeNs, std::string_view name)
{
    name = name.substr(0, MaxNoteNameBytes);
    NoteHeader h {};
    h.magic = Magic;
    h.version = ProtocolVersion;
    h.stage = stage;
    h.device = device;
    h.timeNs = timeNs;
    h.nameBytes = uint32_t(name.size());
    append(frame, h);
    frame.insert(frame.end(), name.begin(), name.end());
}

std::vector<uint8_t> encodeSettings(std::string_view text)
{
    SettingsHeader h {};
    h.magic = Magic;
    h.version = ProtocolVersion;
    h.textBytes = uint32_t(text.size());
    std::vector<uint8_t> out;
    append(out, h);
    out.insert(out.end(), text.begin(), text.end());
    return out;
}

} // namespace memscope::viewer
