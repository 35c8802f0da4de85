// libFuzzer target for the wire decoders and the Recorder: any bytes as an event batch, a state reply, a
// goodbye, a request and a stack definition; whatever decodes is fed to a Recorder and made into a snapshot. Must
// never crash, hang or grow without bound, and every failure must explain itself. Built only with -DMEMSCOPE_FUZZ=ON
// (clang).
#include "wire/decoder.h"
#include "wire/recorder.h"

#include <cstddef>
#include <cstdint>

using namespace memscope::wire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::span<const uint8_t> bytes(data, size);
    const DecodedBatch batch = decodeBatch(bytes);
    const DecodedState state = decodeState(bytes);
    const DecodedGoodbye bye = decodeGoodbye(bytes);
    const DecodedRequest request = decodeRequest(bytes);
    const DecodedStackDef stack = decodeStackDef(bytes);
    for (const DecodeError* e : { &batch.error, &state.error, &bye.error, &request.error, &stack.error })
        if (*e && (e->message.empty() || e->offset > size))
            __builtin_trap(); // every failure explains itself, at an offset inside the input
    if (batch.ok() && batch.events.size() * sizeof(EventRecord) + sizeof(BatchHeader) != size)
        __builtin_trap();
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

    // The Recorder over what decoded: the state (if any), then the bytes' events, or the state's own bytes read
    // as events after it, so that arbitrary segments, blocks and events meet.
    Recorder rec;
    rec.addStackDef(stack);
    rec.addEvents(batch.events);
    if (state.ok()) {
        rec.setState(state);
        const size_t tail = size - sizeof(Hello) - sizeof(StateHeader);
        const auto* events = reinterpret_cast<const EventRecord*>(data + sizeof(Hello) + sizeof(StateHeader));
        rec.addEvents({ events, tail / sizeof(EventRecord) });
    } else {
        DecodedState empty;
        rec.setState(empty);
        rec.addEvents({ reinterpret_cast<const EventRecord*>(data), size / sizeof(EventRecord) });
    }
    if (bye.ok())
        rec.setGoodbye(bye.goodbye);
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
