// The forward pass behind a backward allocation. PyTorch writes `forward_frames` on a trace entry made while the
// autograd engine ran a node's backward, when the node kept its forward traceback (anomaly mode,
// torch.autograd.set_detect_anomaly: the traceback is the node's metadata, "traceback_"): a list of strings in
// Python's traceback.format_list form, outermost call first ('  File "model.py", line 12, in forward\n    y = ...\n').
// Such an entry's own stack is the engine thread's (native frames only, or none with stacks="python"), so the
// forward line is what names it for a user.
#pragma once

#include "model/snapshot.h"

#include <optional>
#include <string_view>

namespace memscope::model {

struct TracebackLine {
    std::string_view filename, name;
    LineNumber line = 0;
};

// One traceback.format_list string; nullopt when it is not one.
std::optional<TracebackLine> parseTracebackLine(std::string_view text);

// Parses every entry form's forward_frames (kept among its unknown keys, so files are written back unchanged) into
// a stack of the snapshot's, innermost first, as Snapshot::forwardStacks holds them. Does nothing for a snapshot
// without any.
void attachForwardStacks(Snapshot& snapshot);

} // namespace memscope::model
