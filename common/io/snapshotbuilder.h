// Turns the ValueTree of a pickle or JSON document into a model::Snapshot: checks types, interns strings, frames,
// stacks and key layouts, numbers address versions and streams. Knows the snapshot schema (see
// torch/csrc/cuda/memory_snapshot.cpp and c10/cuda/CUDACachingAllocator.h for where PyTorch defines it); keeps what
// it does not know. Reentrant; one call per thread.
#pragma once

#include "io/error.h"
#include "io/valuetree.h"
#include "model/snapshot.h"

namespace memscope::io {

// Fills `snapshot` (which must be empty) from `root`. Error code NotSnapshot names the offending object and key.
Error buildSnapshot(const ValueTree& tree, NodeId root, model::Snapshot& snapshot);

// Converts a subtree to an owned model::Value (used for allocator settings and unknown keys). Bounded: fails when
// the subtree is deeper than 64 levels or has more than `budget` nodes (shared subtrees count each time).
bool toValue(const ValueTree& tree, NodeId node, model::Value& out, uint64_t& budget, int depth = 0);

} // namespace memscope::io
