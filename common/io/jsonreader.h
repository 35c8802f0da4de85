// A JSON reader for snapshots saved as JSON (PyTorch's web viewer accepts them): RFC 8259 into a ValueTree, with
// the same limits and error style as the pickle reader. Reentrant; one call per thread.
#pragma once

#include "io/error.h"
#include "io/picklereader.h"
#include "io/valuetree.h"

#include <span>

namespace memscope::io {

// Parses one JSON document. Integers become Int nodes, UInt nodes in [2^63, 2^64), BigInt placeholders beyond
// (valuetree.h); other numbers become Float nodes.
// Nesting is limited to 512 levels. Errors carry code, message and byte offset (no path).
Error parseJson(std::span<const uint8_t> data, ValueTree& tree, NodeId& root, const ProgressFn& progress = {});

} // namespace memscope::io
