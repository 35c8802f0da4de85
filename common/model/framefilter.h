// Which frames of a stack a user reads. Two rules:
// - PyTorch's frame filter (keepFrame): the interpreter and dispatch glue frames both of its viewers hide. Used
//   wherever stacks are matched or shown as PyTorch shows them (call trees, diffs, PyTorch-identical reports).
// - The site (isInternalFrame, siteIndex): the frame that names the user's code, or a model library's, for an
//   allocation: the innermost frame that is not the allocator, c10, ATen, the dispatcher, autograd or any other
//   native frame, not the interpreter's own code, not PyTorch's own Python, and not memscope's. What every answer
//   leads with (insights, the events' top frame), so that a stack recorded with C++ frames (PyTorch's default,
//   stacks="all") names the same line as one recorded with Python frames alone.
// Pure; any thread.
#pragma once

#include "model/snapshot.h"

#include <string_view>

namespace memscope::model {

// False for a frame torch/cuda/_memory_viz.py's _frame_filter drops (its function or file name lists).
bool keepFrame(std::string_view name, std::string_view filename);

// A native frame: what PyTorch's unwinder names (C and C++ sources and headers, shared objects, "??" where it found no
// file), as against a Python frame (a .py file, or a pseudo-file such as "<string>").
bool isNativeFrame(std::string_view filename);

// True for a frame that is not the user's code nor a model library's (see above). Windows paths count as POSIX
// ones (backslashes are separators).
bool isInternalFrame(std::string_view name, std::string_view filename);

// The index (innermost first) of a stack's site: its innermost frame that is not internal. Where every frame is
// (a native stack: the autograd engine's threads record no Python frames), the autograd node that ran
// (torch::autograd::generated::MeanBackward0::apply), else the innermost operator called (at::_ops::div::call),
// else the innermost frame PyTorch's filter keeps, else the innermost. -1 for an empty stack.
int siteIndex(const Snapshot& snapshot, StackId stack);

// What allocated at the site: the innermost Python frame below it that is not memscope's (torch.nn.functional's
// dropout, a module's forward), -1 when the site is the innermost Python frame itself or there is none.
int whatIndex(const Snapshot& snapshot, StackId stack, int site);

} // namespace memscope::model
