// libFuzzer target for the wire decoders and the Recorder: any bytes as an event batch, a state reply, notes,
// settings, a goodbye, a request and a stack definition, and as the LZ4 block of a compressed batch (plus the
// encoder's own compressed batches, which must round-trip); whatever decodes is fed to a Recorder and made into a
// snapshot. Must never crash, hang or grow without bound, and every failure must explain itself. Built only with
// -DMEMSCOPE_FUZZ=ON (clang).
#include "viewer/decoder.h"
#include "viewer/recorder.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace memscope::wire;
using namespace memscope::viewer;

namespace {

// A decoded batch that claims to be compressed owns exactly its announced records, and a failure explains itself.
void checkCompressed(const DecodedBatch& batch, size_t frameSize)
{
    if (batch.error && (batch.error.message.empty() || batch.error.offset > frameSize))
        __builtin_trap();
    if (!batch.ok() || !batch.compressed())
        return;
    if (batch.header.count > MaxCompressedBatchRecords || batch.events.size() != batch.header.count
        || batch.decompressed.size() != batch.header.count
        || (batch.header.count != 0 && batch.events.data() != batch.decompressed.data()))
        __builtin_trap();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::span<const uint8_t> bytes(data, size);
    const DecodedBatch batch = decodeBatch(bytes);
    const DecodedState state = decodeState(bytes);
    const DecodedGoodbye bye = decodeGoodbye(bytes);
    const DecodedRequest request = decodeRequest(bytes);
    const DecodedStackDef stack = decodeStackDef(bytes);
    const DecodedNotes notes = decodeNotes(bytes);
    const DecodedSettings settings = decodeSettings(bytes);
    for (const DecodeError* e :
         { &batch.error, &state.error, &bye.error, &request.error, &stack.error, &notes.error, &settings.error })
        if (*e && (e->message.empty() || e->offset > size))
            __builtin_trap(); // every failure explains itself, at an offset inside the input
    if (batch.ok() && !batch.compressed() && batch.events.size() * sizeof(EventRecord) + sizeof(BatchHeader) != size)
        __builtin_trap();
    checkCompressed(batch, size);

    // Compressed batches: the input's bytes after two as an LZ4 block under a header announcing as many records as
    // those two say (so that the decompressor meets arbitrary blocks and counts, not only the ones with a valid
    // header), and the input's whole records compressed by the encoder, which must decode to exactly those bytes.
    if (size >= 2) {
        BatchHeader h {};
        h.magic = Magic;
        h.version = ProtocolVersion;
        h.flags = uint16_t(BatchFlags::Compressed);
        h.count = uint32_t(data[0]) | uint32_t(data[1]) << 8;
        std::vector<uint8_t> frame(sizeof h + size - 2);
        std::memcpy(frame.data(), &h, sizeof h);
        std::memcpy(frame.data() + sizeof h, data + 2, size - 2);
        const DecodedBatch packed = decodeBatch(frame);
        checkCompressed(packed, frame.size());
        const DecodedBatch copy = packed; // the copy owns its records too
        if (copy.events.size() != packed.events.size()
            || (packed.compressed() && packed.ok() && packed.header.count != 0
                && copy.events.data() == packed.events.data()))
            __builtin_trap();
    }
    {
        std::vector<EventRecord> records(size / sizeof(EventRecord));
        if (!records.empty())
            std::memcpy(records.data(), data, records.size() * sizeof(EventRecord));
        const std::vector<uint8_t> frame = encodeBatch(records, uint16_t(BatchFlags::Compressed));
        const DecodedBatch round = decodeBatch(frame);
        checkCompressed(round, frame.size());
        if (round.ok()
            && (round.events.size() != records.size()
                || (!records.empty()
                    && std::memcmp(round.events.data(), records.data(), records.size() * sizeof(EventRecord)) != 0)))
            __builtin_trap();
        if (!round.ok() && round.error.code != DecodeErrorCode::Corrupt)
            __builtin_trap(); // only a record's type or device can make the encoder's own output fail
    }
    // A stack's strings are views inside the input, and never more frames than the protocol allows.
    if (stack.ok()) {
        if (stack.frames.size() > MaxStackFrames || stack.frames.size() != stack.header.frameCount)
            __builtin_trap();
        for (const DecodedFrame& f : stack.frames)
            for (std::string_view text : { f.name, f.file })
                if (reinterpret_cast<const uint8_t*>(text.data()) < data
                    || reinterpret_cast<const uint8_t*>(text.data()) + text.size() >= data + size)
                    __builtin_trap();
    }

    // The Recorder over what decoded: the state (if any, else an empty one), the bytes' events, then the state's
    // own bytes read as events after it, so that arbitrary segments, blocks and events meet.
    // Notes and settings are all or nothing, and what decoded is what the Recorder keeps.
    if (!notes.ok() && !notes.notes.empty())
        __builtin_trap();
    if (!settings.ok() && !settings.settings.empty())
        __builtin_trap();
    Recorder rec;
    rec.addStackDef(stack);
    for (const DecodedNote& n : notes.notes)
        rec.addNote(n);
    if (settings.ok())
        rec.setSettings(settings);
    if (state.ok()) {
        rec.setState(state);
        rec.addEvents(batch.events);
        const size_t tail = size - sizeof(Hello) - sizeof(StateHeader);
        const auto* events = reinterpret_cast<const EventRecord*>(data + sizeof(Hello) + sizeof(StateHeader));
        rec.addEvents({ events, tail / sizeof(EventRecord) });
    } else {
        DecodedState empty;
        rec.setState(empty);
        rec.addEvents(batch.events);
        rec.addEvents({ reinterpret_cast<const EventRecord*>(data), size / sizeof(EventRecord) });
    }
    if (bye.ok()) {
        rec.setGoodbye(bye.goodbye);
        rec.addMissing(bye.goodbye.lastSequence & 0xff, bye.goodbye.lastSequence);
    }
    const memscope::model::Snapshot s = rec.snapshot();
    // Blocks tile their segments exactly.
    for (const auto& seg : s.segments) {
        uint64_t cursor = uint64_t(seg.address);
        for (uint32_t i = 0; i < seg.blockCount; ++i) {
            const auto& b = s.blocks[seg.blockBegin + i];
            if (uint64_t(b.address) != cursor || b.size == 0)
                __builtin_trap();
            cursor += uint64_t(b.size);
        }
        if (cursor != uint64_t(seg.address) + uint64_t(seg.totalSize))
            __builtin_trap();
    }
    return 0;
}
