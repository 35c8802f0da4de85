// Turns the ValueTree of a pickle or JSON document into a model::Snapshot: checks types, interns strings, frames,
// stacks and key layouts, numbers address versions and streams. Knows the snapshot schema (see
// torch/csrc/cuda/memory_snapshot.cpp and c10/cuda/CUDACachingAllocator.h for where PyTorch defines it); keeps what
// it does not know. Reentrant; one call per thread.
#pragma once

#include "io/error.h"
#include "io/picklereader.h"
#include "io/valuetree.h"
#include "model/snapshot.h"

#include <functional>
#include <string_view>

namespace memscope::io {

// Fills `snapshot` (which must be empty) from `root`. Error code NotSnapshot names the offending object and key.
// Integers a field cannot hold leave that field out (model/snapshot.h says what each field holds) and are counted
// in snapshot.warnings (LoadWarning::Kind::LostInteger), naming the field, where it is and its byte offset.
Error buildSnapshot(const ValueTree& tree, NodeId root, model::Snapshot& snapshot);

// Parses a pickle and builds `snapshot` (which must be empty) from it. With `direct`, the entries of device_traces
// are built straight from the pickle machine (picklereader.h's direct path: no tree nodes for them); where that
// declines, and without `direct`, it is parsePickle() then buildSnapshot(). Either way the same snapshot, the same
// errors and warnings (tst_directpath compares the two on every real snapshot). `consumed` hears which part of the
// input the direct path is done with.
Error buildSnapshotFromPickle(std::span<const uint8_t> data, model::Snapshot& snapshot, bool direct,
                              const ProgressFn& progress = {}, const ConsumedFn& consumed = {});

enum class ValueResult : uint8_t {
    Ok,
    TooLarge, // deeper than 64 levels, or more nodes than the budget
    LostInteger, // the value is, or holds outside any dict, an integer wider than 64 bits (at lostOffset)
};
struct ValueConversion {
    uint64_t budget = 1u << 20; // nodes left to convert (shared subtrees count each time)
    // Called for each dict entry left out because its value is, or holds, an integer wider than 64 bits (a BigInt
    // node, which no Value can hold): the entry's key and that integer's byte offset. May be empty.
    std::function<void(std::string_view key, uint64_t offset)> lostEntry;
    uint64_t lostOffset = 0; // the BigInt's byte offset when the result is LostInteger
};
// Converts a subtree to an owned model::Value (used for allocator settings and unknown keys); ints in [2^63, 2^64)
// become Value::Kind::UInt. Bounded by the conversion's budget and 64 levels.
ValueResult toValue(const ValueTree& tree, NodeId node, model::Value& out, ValueConversion& conversion, int depth = 0);

} // namespace memscope::io
