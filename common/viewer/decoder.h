// Decoding (and, for tests and tools, encoding) of the wire protocol's message frames (wire/protocol.h): one function
// per frame kind, each taking the frame's bytes and returning either views into them or an error naming the
// reason and the byte offset. Decoders accept any byte sequence without crashing, reading past the end or
// allocating in proportion to a count they were sent; they check every length against the frame before use.
// The viewers' side of the protocol (common/viewer: the agent only encodes, with its own code): memscope-viewer,
// which the ZeroMQ client, the tests and the fuzzers link; namespace viewer, speaking the protocol's records (wire).
// Pure functions, no ZeroMQ; any thread (they share nothing).
#pragma once

#include "wire/protocol.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace memscope::viewer {

// The protocol's records and constants (wire/protocol.h) are what every decoder takes and returns.
using namespace memscope::wire;

// The highest device index a decoder accepts (records carry it in a byte); a larger one means a corrupt record.
// No CUDA host has more devices than this in one process.
constexpr uint8_t MaxDevice = 63;

enum class DecodeErrorCode : uint8_t {
    None,
    Truncated, // the frame ends before what its header announces (or is shorter than a header)
    BadMagic, // not a memscope frame
    TooNew, // a protocol version above ProtocolVersion: this viewer is older than the agent
    TooOld, // version 0: never valid
    Corrupt, // lengths disagree, an enum value out of range, a string without its NUL, an impossible device
    Unsupported, // a flag this version does not implement (compression)
    Count
};

struct DecodeError {
    DecodeErrorCode code = DecodeErrorCode::None;
    std::string message; // the reason, without the input's name
    uint64_t offset = 0; // byte offset in the frame where the problem was found

    explicit operator bool() const { return code != DecodeErrorCode::None; }
    // "NAME: REASON (at byte N)": one line for a user; `name` is the input (an endpoint, a file).
    std::string toString(std::string_view name) const;
};

std::string_view decodeErrorCodeName(DecodeErrorCode code);

// Views into the decoded frame: valid as long as the frame's bytes are. The records are packed (alignment 1), so
// they may be read in place at any address. A compressed batch's records live in `decompressed` instead, which the
// batch owns: `events` then stays valid as long as the batch (moved or copied batches keep theirs valid too).
struct DecodedBatch {
    BatchHeader header {};
    std::span<const EventRecord> events;
    DecodeError error;
    std::vector<EventRecord> decompressed; // the records of a compressed batch; empty otherwise
    bool ok() const { return !error; }
    bool compressed() const { return header.flags == uint16_t(BatchFlags::Compressed); }

    DecodedBatch() = default;
    DecodedBatch(const DecodedBatch& other) { *this = other; }
    DecodedBatch(DecodedBatch&& other) noexcept { *this = std::move(other); }
    DecodedBatch& operator=(const DecodedBatch& other);
    DecodedBatch& operator=(DecodedBatch&& other) noexcept;
};

struct DecodedState {
    Hello hello {};
    StateHeader header {};
    std::span<const SegmentRecord> segments;
    std::span<const BlockRecord> blocks;
    DecodeError error;
    bool ok() const { return !error; }
};

struct DecodedGoodbye {
    Goodbye goodbye {};
    DecodeError error;
    bool ok() const { return !error; }
};

struct DecodedRequest {
    Request request {};
    DecodeError error;
    bool ok() const { return !error; }
};

// One frame of a stack definition; the strings are views into the decoded frame.
struct DecodedFrame {
    uint64_t address = 0;
    std::string_view name; // "??" when the agent could not name it
    std::string_view file;
    int32_t line = 0;
};

struct DecodedStackDef {
    StackDefHeader header {};
    std::vector<DecodedFrame> frames; // innermost first; at most MaxStackFrames
    DecodeError error;
    bool ok() const { return !error; }
};

// The second frame of an EventsTopic message: BatchHeader, then exactly `count` EventRecords, or with
// BatchFlags::Compressed one LZ4 block that decompresses to exactly that. Checks magic, version, flags, the length,
// and every record's type and device. A compressed batch may announce at most MaxCompressedBatchRecords, and no
// more than its LZ4 block can possibly hold (LZ4 expands at most 255-fold), before anything is allocated.
DecodedBatch decodeBatch(std::span<const uint8_t> frame);
// The reply to a State request: Hello, StateHeader, segmentCount SegmentRecords, blockCount BlockRecords, and
// nothing after them. Checks the strings' NULs, devices, and block states.
DecodedState decodeState(std::span<const uint8_t> frame);
// The second frame of a GoodbyeTopic message.
DecodedGoodbye decodeGoodbye(std::span<const uint8_t> frame);
// A viewer's request, as the agent's ROUTER reads it (and as tests' fake agents do).
DecodedRequest decodeRequest(std::span<const uint8_t> frame);
// The second frame of a StacksTopic message: StackDefHeader, frameCount FrameRecords, stringBytes of strings, and
// nothing after them. Checks the id (not 0), the frame count (<= MaxStackFrames), flags, and that every string
// offset lies inside the string table and ends with a NUL there.
DecodedStackDef decodeStackDef(std::span<const uint8_t> frame);

struct DecodedNote {
    NoteHeader header {};
    std::string name;
};
struct DecodedNotes {
    std::vector<DecodedNote> notes;
    DecodeError error;
    bool ok() const { return !error; }
};
// The second frame of a NotesTopic message: notes back to back, each a NoteHeader and exactly nameBytes (at most
// MaxNoteNameBytes) of name, up to the frame's end; a stage other than START (0) or END (1), or a note cut short,
// refuses the whole frame.
DecodedNotes decodeNotes(std::span<const uint8_t> frame);

struct DecodedSettings {
    struct Setting {
        std::string key;
        char type = 's'; // protocol.h, SettingsTopic
        std::string value;
    };
    std::vector<Setting> settings; // in the order sent
    DecodeError error;
    bool ok() const { return !error; }
};
// The second frame of a SettingsTopic message: SettingsHeader and exactly textBytes (at most MaxSettingsBytes) of
// `key=T:value` lines; a line without '=', a type other than s, i, f, b, d, or a value its type does not allow is
// corrupt (the whole frame is refused, so that a viewer never keeps half of the settings).
DecodedSettings decodeSettings(std::span<const uint8_t> frame);

// Encoders: the exact frames the agent sends, for tests, fuzz seeds and fake publishers. Headers' magic, version
// and counts are filled in; other header fields are taken from the arguments.
// With BatchFlags::Compressed in `flags` the records are LZ4-compressed (as the agent does).
std::vector<uint8_t> encodeBatch(std::span<const EventRecord> events, uint16_t flags = 0);
std::vector<uint8_t> encodeState(const Hello& hello, uint64_t lastSequence, std::span<const SegmentRecord> segments,
                                 std::span<const BlockRecord> blocks);
std::vector<uint8_t> encodeGoodbye(uint64_t lastSequence, uint64_t lost);
std::vector<uint8_t> encodeRequest(RequestType type);
// A stack definition; each frame's name and file go into the string table (identical strings once).
std::vector<uint8_t> encodeStackDef(uint32_t stackId, std::span<const DecodedFrame> frames);
// A note (the name cut at MaxNoteNameBytes) and a settings frame (`text` as it is: the caller keeps it within
// MaxSettingsBytes and well formed).
// appendNote adds one note to a NotesTopic frame being built.
void appendNote(std::vector<uint8_t>& frame, uint8_t stage, uint8_t device, uint64_t timeNs, std::string_view name);
std::vector<uint8_t> encodeSettings(std::string_view text);
// A Hello with magic and version set and the given host and agent version (truncated to fit, NUL-terminated).
Hello makeHello(uint32_t pid, uint16_t deviceCount, std::string_view host, std::string_view agentVersion);

} // namespace memscope::viewer
