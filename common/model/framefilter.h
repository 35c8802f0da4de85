// PyTorch's frame filter: the interpreter and dispatch glue frames both of its viewers hide from stacks. Used
// wherever stacks are matched or shown with the filter on (call trees, diffs, PyTorch-identical reports, the app).
#pragma once

#include <string_view>

namespace memscope::model {

// False for a frame torch/cuda/_memory_viz.py's _frame_filter drops (its function or file name lists). Pure; any
// thread.
bool keepFrame(std::string_view name, std::string_view filename);

} // namespace memscope::model
