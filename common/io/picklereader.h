// A pickle reader for memory snapshots: a bounds-checked pickle virtual machine that understands the data opcodes
// of protocols 0-5 and nothing that executes code. It fills a ValueTree; the SnapshotBuilder turns that into a
// model::Snapshot. Reentrant; one call per thread.
//
// With a TraceSink, the entries of `device_traces` (the bulk of a large snapshot: 13 M entries in a 1 GB file) are
// decoded straight from the opcodes into the sink, without tree nodes for them: a trace entry then costs the model
// its TraceEntry and the memo a few slots, instead of about 20 nodes, their children and their memo slots. The
// direct path takes only what a snapshot written by PyTorch's pickler (or ours) holds; for anything else (an unknown
// key, an integer beyond int64, a text opcode, a memo reference to an entry, ...) it declines, and the caller parses
// the same bytes again the general way, so that every error and warning is the general path's.
//
// Opcode semantics follow CPython's Lib/pickletools.py (the documented opcode table) and Modules/_pickle.c.
#pragma once

#include "io/error.h"
#include "io/valuetree.h"

#include "model/snapshot.h"

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

namespace memscope::io {

struct PickleLimits {
    uint32_t maxMarkDepth = 4096; // open MARKs at once
    uint64_t maxStack = 1u << 26; // values on the VM stack
    uint64_t maxMemo = 1u << 28; // memo slots
};

using ProgressFn = std::function<bool(uint64_t done, uint64_t total)>;
// Called now and then with the offset below which the direct path no longer needs the input (the caller may drop
// those pages of a mapped file: tree nodes that point into them fault them back in).
using ConsumedFn = std::function<void(uint64_t offset)>;

// One key and value of a trace entry's dict, as the direct path decoded it.
struct FastItem {
    enum class Kind : uint8_t {
        Int, // `integer`: an int the opcode itself held (BININT*, LONG1 of at most 8 bytes)
        Text, // `text`: a string in the input, not yet interned (the sink interns it and makes it String)
        String, // `id`: a StringId of the sink's table
        None,
        Node, // `id`: a tree node (a memo reference, a frames list, a bool)
        Frames, // `frames`: the frame dicts of a list first met here (the sink resolves it and makes it Stack)
        Stack, // `id`: a StackId of the sink's tables
    };
    uint32_t key = 0; // a String node, or (keyIsNode false) a StringId of the sink's table
    bool keyIsNode = true;
    Kind kind = Kind::None;
    int64_t integer = 0;
    std::string_view text;
    uint32_t id = 0;
    std::span<const NodeId> frames;
};

// Where the direct path puts trace entries (io/snapshotbuilder.cpp implements it). Called on the parsing thread.
class TraceSink {
public:
    virtual ~TraceSink() = default;
    // One entry of the trace list `list` (a tree node with no children of its own), its items in file order. Text
    // items come back as String items. False declines the whole direct path.
    virtual bool entry(NodeId list, std::span<FastItem> items) = 0;
    // The text of a StringId the sink gave (a memo reference to it from outside the direct path).
    virtual std::string_view text(model::StringId id) const = 0;
};

// Parses `data` as one pickle. On success sets `root` and returns an Error with code None; otherwise the Error
// has code, message and offset (its path is left empty for the caller to fill in).
Error parsePickle(std::span<const uint8_t> data, ValueTree& tree, NodeId& root, const PickleLimits& limits = {},
                  const ProgressFn& progress = {});
// The same with the direct path for trace entries (see the top of this file). `declined` is set when the direct path
// gave up: then nothing of the tree or the sink is to be used, and parsePickle() must parse the data again.
Error parsePickle(std::span<const uint8_t> data, ValueTree& tree, NodeId& root, TraceSink& sink, bool& declined,
                  const PickleLimits& limits = {}, const ProgressFn& progress = {}, const ConsumedFn& consumed = {});

// True when the bytes look like a pickle (PROTO opcode, or a protocol-0/1 opening opcode).
bool looksLikePickle(std::span<const uint8_t> data);

// Where a pickle's bytes end, found from its opcodes' argument lengths alone (Lib/pickletools.py), as the bytes
// arrive: an .xz file is decompressed only as far as the parse will read (io/snapshotio.cpp), so that whatever follows
// the STOP (bytes Python's pickle.load leaves unread too) costs neither memory nor time. Linear in the bytes scanned,
// each byte once. One stream per scanner; a plain value, no thread of its own.
class PickleExtent {
public:
    enum class State : uint8_t {
        More, // the pickle goes on past the bytes given
        Stop, // a STOP: the parse reads nothing past needed()
        Fails, // an opcode the parse fails at (unknown, or one that runs code): it reads nothing past needed()
        Oversized, // a value or FRAME longer than memory snapshots hold (below): oversize() says which
    };
    // Strings, bytes and integers of LongValue bytes or more are no part of a memory snapshot (the longest string
    // of the real ones is a C++ frame name under 2 KiB, and CPython writes values of 64 KiB or more outside FRAMEs,
    // so its frames are about 64 KiB: Modules/_pickle.c, FRAME_SIZE_TARGET): a pickle may hold at most MaxLongBytes
    // of them in all, and no FRAME longer than that. Past it the scan stops with Oversized at the opcode's length,
    // before the bytes it announces (an .xz file is refused then, its value never decompressed).
    static constexpr uint64_t LongValue = uint64_t(64) << 10;
    static constexpr uint64_t MaxLongBytes = uint64_t(16) << 20;
    struct Oversize {
        uint64_t offset = 0; // the opcode's
        const char* opcode = ""; // its name (Lib/pickletools.py)
        uint64_t length = 0; // of its value or FRAME; for a text line without its end yet, the bytes so far
        bool lineUnended = false; // a text line longer than MaxLongBytes so far, its '\n' not met
        uint64_t longBytes = 0; // of every long value up to and including this one
    };
    // Scans the stream's first data.size() bytes (the bytes of the last call, and more) from where it left off.
    State scan(std::span<const uint8_t> data);
    State state() const { return m_state; }
    // The bytes the parse needs to have before it can go on (More) or to end as it will (Stop, Fails): past the
    // opcode scanned last and its argument, and past the end of the FRAME around it (the parse checks a whole frame
    // is there when it meets the FRAME). Grows with each call.
    uint64_t needed() const { return m_needed; }
    // What made the scan stop with Oversized.
    const Oversize& oversize() const { return m_oversize; }

private:
    uint64_t m_longBytes = 0; // of the long values scanned so far (saturating)
    Oversize m_oversize;
    uint64_t m_pos = 0; // the next opcode's offset
    uint64_t m_needed = 0;
    State m_state = State::More;
};

} // namespace memscope::io
