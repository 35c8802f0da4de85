// A pickle reader for memory snapshots: a bounds-checked pickle virtual machine that understands the data opcodes
// of protocols 0-5 and nothing that executes code. It fills a ValueTree; the SnapshotBuilder turns that into a
// model::Snapshot. Reentrant; one call per thread.
//
// Opcode semantics follow CPython's Lib/pickletools.py (the documented opcode table) and Modules/_pickle.c.
#pragma once

#include "io/error.h"
#include "io/valuetree.h"

#include <cstdint>
#include <functional>
#include <span>

namespace memscope::io {

struct PickleLimits {
    uint32_t maxMarkDepth = 4096; // open MARKs at once
    uint64_t maxStack = 1u << 26; // values on the VM stack
    uint64_t maxMemo = 1u << 28; // memo slots
};

using ProgressFn = std::function<bool(uint64_t done, uint64_t total)>;

// Parses `data` as one pickle. On success sets `root` and returns an Error with code None; otherwise the Error
// has code, message and offset (its path is left empty for the caller to fill in).
Error parsePickle(std::span<const uint8_t> data, ValueTree& tree, NodeId& root, const PickleLimits& limits = {},
                  const ProgressFn& progress = {});

// True when the bytes look like a pickle (PROTO opcode, or a protocol-0/1 opening opcode).
bool looksLikePickle(std::span<const uint8_t> data);

} // namespace memscope::io
