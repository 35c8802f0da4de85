// The wire protocol between the agent (in the user's job) and viewers (the app, `memscope-cli record`): packed
// little-endian records with static_asserted sizes, append-only enums, a version in every header. Header-only, no
// dependencies: the agent and common/ both compile it (the only code the two sides share). docs/protocol.md
// describes the conversation (ZeroMQ PUB for events, ROUTER for state requests: the Clone pattern of the ZeroMQ
// Guide, chapter 5). Plain data; any thread.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace memscope::wire {

// Records travel in host byte order, which must be little-endian (every platform CUDA runs on).
static_assert(std::endian::native == std::endian::little);

constexpr uint32_t Magic = 0x5053434d; // "MCSP" little-endian: memscope protocol
constexpr uint16_t ProtocolVersion = 1;

// ZeroMQ topics: the first frame of every PUB message.
constexpr char EventsTopic[] = "E"; // second frame: BatchHeader + EventRecord[count]
constexpr char GoodbyeTopic[] = "G"; // second frame: Goodbye; the job is exiting, nothing follows
// Second frame: StackDefHeader + FrameRecord[frameCount] + stringBytes of NUL-terminated strings. Sent once per
// stack, before the first event record whose stackId names it (same PUB socket, so ZeroMQ keeps that order). A
// version-1 viewer that does not subscribe to "S" never sees it; records then just carry ids it ignores.
constexpr char StacksTopic[] = "S";
// Second frame: one or more notes back to back, each a NoteHeader + nameBytes of UTF-8 (no NUL): a named scope of
// the job entered or left (PyTorch's record_function, which its snapshots keep as external_annotations), in the order
// they happened. Sent as the job annotates; timed like events, not part of the state. Viewers that do not subscribe
// never see them.
constexpr char NotesTopic[] = "A";
// Second frame: SettingsHeader + textBytes of UTF-8: the allocator's settings, one `key=T:value` line each, where T
// types the value for the snapshot's allocator_settings dict (s string, i integer, f real, b 0/1, d a dict of
// `name:integer` pairs separated by ','), in the order the snapshot lists them. Sent once the publisher starts and
// again after each state reply, so a viewer that joins late has them too.
constexpr char SettingsTopic[] = "C";

// Append-only: never renumber, add before Count.
enum class EventType : uint8_t {
    Alloc, // a block handed out: address, size (block bytes), requestedSize, stream, pool
    FreeRequested, // the user freed it (record_stream may delay the completion)
    FreeCompleted, // the block went back to its pool
    SegmentAlloc, // cudaMalloc: address, size
    SegmentFree, // cudaFree
    SegmentMap, // expandable segments: pages mapped at [address, address + size)
    SegmentUnmap,
    Oom, // allocation failed: size = requested bytes, address = free device bytes
    Heartbeat, // periodic, no allocator change: tells a viewer the job is alive and the sequence so far
    Count
};

// One allocator event: the fixed-size record the agent's hot path writes into its ring and the publisher sends.
#pragma pack(push, 1)
struct EventRecord {
    uint64_t sequence; // per agent, +1 per record written to the ring (a gap means records were lost)
    uint64_t timeNs; // CLOCK_REALTIME nanoseconds
    uint64_t address;
    uint64_t size;
    uint64_t requestedSize;
    uint64_t stream; // the raw cudaStream_t
    uint32_t stackId; // 0: no stack captured
    uint32_t lost; // records dropped (ring full) just before this one
    int32_t poolFirst; // segment pool id, (0, 0) = the default pool
    int32_t poolSecond;
    uint8_t type; // EventType
    uint8_t device;
    uint8_t reserved[6];
};
#pragma pack(pop)
static_assert(sizeof(EventRecord) == 72);

// Compressed: the BatchHeader is unchanged (count = records), and what follows it is one LZ4 block (the LZ4 block
// format, not the frame format: lz4's doc/lz4_Block_format.md) that decompresses to exactly count * 72 bytes of
// EventRecords. Version-1 viewers that predate it reject it with "unsupported batch flags" (docs/protocol.md).
enum class BatchFlags : uint16_t { None = 0, Compressed = 1 };
// The most records a compressed batch may announce (72 MiB decompressed); the agent sends at most 4096.
constexpr uint32_t MaxCompressedBatchRecords = uint32_t(1) << 20;

#pragma pack(push, 1)
struct BatchHeader {
    uint32_t magic; // Magic
    uint16_t version; // ProtocolVersion
    uint16_t flags; // BatchFlags
    uint32_t count; // EventRecords that follow
    uint32_t reserved;
    uint64_t firstSequence; // sequence of the first record (the rest follow without gaps inside a batch)
};
#pragma pack(pop)
static_assert(sizeof(BatchHeader) == 24);

// Who the agent is: the first part of every state reply.
#pragma pack(push, 1)
struct Hello {
    uint32_t magic;
    uint16_t version;
    uint16_t deviceCount;
    uint32_t pid;
    uint32_t reserved;
    uint64_t clockBaseNs; // CLOCK_REALTIME when the agent started
    char host[64]; // NUL-terminated
    char agentVersion[40]; // NUL-terminated
};
#pragma pack(pop)
static_assert(sizeof(Hello) == 128);

// A viewer's request on the ROUTER socket (one frame after the identity envelope). State: the state reply below.
// Stacks: every stack definition so far published again on topic "S", no reply (a viewer whose subscription may
// have taken effect after those sent with its state, docs/protocol.md "Late join"); rate-limited with the states.
// Goodbye: no reply now; when the job ends, its Goodbye goes to this connection too, after the one on topic "G", so
// that a viewer whose share of the PUB overflowed (stopped, or busy) still learns the run's last sequence
// (docs/protocol.md, "Goodbye").
enum class RequestType : uint16_t { State = 1, Stacks = 2, Goodbye = 3, Count };
#pragma pack(push, 1)
struct Request {
    uint32_t magic;
    uint16_t version;
    uint16_t type; // RequestType
};
#pragma pack(pop)
static_assert(sizeof(Request) == 8);

// The reply to RequestType::State: Hello, StateHeader, then segmentCount SegmentRecords and blockCount
// BlockRecords, all in one frame. The state is the allocator's after record `lastSequence`: a viewer applies only
// events with a larger sequence.
#pragma pack(push, 1)
struct StateHeader {
    uint64_t lastSequence;
    uint32_t segmentCount;
    uint32_t blockCount;
};
struct SegmentRecord {
    uint64_t address;
    uint64_t size;
    uint64_t stream;
    int32_t poolFirst;
    int32_t poolSecond;
    uint8_t device;
    uint8_t isExpandable;
    uint8_t isSmall; // small pool (2 MiB segments)
    uint8_t reserved[5];
};
struct BlockRecord {
    uint64_t address;
    uint64_t size;
    uint64_t requestedSize;
    uint64_t stream;
    uint32_t stackId;
    uint8_t device;
    uint8_t state; // 0 inactive, 1 active_allocated, 2 active_pending_free (PyTorch's block states)
    uint8_t reserved[2];
};
struct Goodbye {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    uint64_t lastSequence; // the last record published
    uint64_t lost; // records dropped over the whole run
};
#pragma pack(pop)
static_assert(sizeof(StateHeader) == 16);
static_assert(sizeof(SegmentRecord) == 40);
static_assert(sizeof(BlockRecord) == 40);
static_assert(sizeof(Goodbye) == 24);

// A native call stack the agent captured (MEMSCOPE_STACKS=N), symbolised by its publisher thread. stackId is
// unique per agent run (the agent puts the device in its top 6 bits) and never 0; frames are innermost first.
#pragma pack(push, 1)
struct StackDefHeader {
    uint32_t magic; // Magic
    uint16_t version; // ProtocolVersion
    uint16_t flags; // 0
    uint32_t stackId;
    uint32_t frameCount; // FrameRecords that follow (at most MaxStackFrames)
    uint32_t stringBytes; // bytes of the string table after the frames
    uint32_t reserved;
};
struct FrameRecord {
    uint64_t address; // the return address (the instruction after the call)
    uint32_t nameOffset; // into the string table: the demangled function name, "??" when unknown
    uint32_t fileOffset; // the file (the shared object's path when there is no line information), "??" if unknown
    int32_t line; // 0 when unknown
};
#pragma pack(pop)
static_assert(sizeof(StackDefHeader) == 24);
static_assert(sizeof(FrameRecord) == 20);
constexpr uint32_t MaxStackFrames = 64;

#pragma pack(push, 1)
struct NoteHeader {
    uint32_t magic; // Magic
    uint16_t version; // ProtocolVersion
    uint8_t stage; // 0 START, 1 END
    uint8_t device;
    uint64_t timeNs; // CLOCK_REALTIME nanoseconds
    uint32_t nameBytes; // at most MaxNoteNameBytes
    uint32_t reserved;
};
struct SettingsHeader {
    uint32_t magic; // Magic
    uint16_t version; // ProtocolVersion
    uint16_t flags; // 0
    uint32_t textBytes; // at most MaxSettingsBytes
    uint32_t reserved;
};
#pragma pack(pop)
static_assert(sizeof(NoteHeader) == 24);
static_assert(sizeof(SettingsHeader) == 16);
constexpr uint32_t MaxNoteNameBytes = 4096; // longer names are cut by the agent
constexpr uint32_t MaxSettingsBytes = 16384;

} // namespace memscope::wire
