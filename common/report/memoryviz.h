// Text reports identical, byte for byte, to what PyTorch's torch/cuda/_memory_viz.py prints for a snapshot:
// segsum (the CLI's `stats`), trace, and the folded stack lines of segments, memory and compare (the input its
// flamegraph step would get). Also PyTorch's frame filter and size formatting, which other reports reuse.
// Pure functions of an immutable Snapshot; any thread.
#pragma once

#include "model/snapshot.h"

#include <string>
#include <string_view>

namespace memscope::report {

// _memory_viz._format_size: "1.5MiB", "512.0B", Python's float formatting.
std::string formatSize(double bytes);

// _memory_viz._frame_fmt: "basename:line:name" (or the full filename). The basename is what follows the last '/', as
// PyTorch cuts it: a Windows path stays whole (parity).
std::string formatFrame(const model::Snapshot& snapshot, const model::Frame& frame, bool fullFilename = false);
// The same for memscope's own answers: the basename follows the last '/' or '\' (C:\research\models.py:174:f); a
// native frame without a file is its function alone, parameters cut (torch::autograd::Engine::thread_main).
std::string displayFrame(const model::Snapshot& snapshot, const model::Frame& frame);

// Python's repr() of a str (quote choice and escapes as CPython's unicode_repr).
std::string pythonRepr(std::string_view text);
// Python's repr() of a trace entry dict, keys in file order (what _memory_viz.trace prints for actions it does
// not name).
std::string pythonRepr(const model::Snapshot& snapshot, const model::TraceEntry& entry);

std::string segsum(const model::Snapshot& snapshot);
std::string trace(const model::Snapshot& snapshot);
std::string segmentsFolded(const model::Snapshot& snapshot);
std::string memoryFolded(const model::Snapshot& snapshot);
std::string compareFolded(const model::Snapshot& before, const model::Snapshot& after);

} // namespace memscope::report
