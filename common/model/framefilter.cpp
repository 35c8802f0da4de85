// PyTorch's frame filter (framefilter.h).
#include "model/framefilter.h"

namespace memscope::model {

bool keepFrame(std::string_view name, std::string_view filename)
{
    // The lists of torch/cuda/_memory_viz.py _frame_filter (the web viewer's MemoryViz.js uses the same).
    static constexpr std::string_view OmitFunctions[] = {
        "unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start", "__libc_start_main",
        "PyEval_",        "PyObject_",                 "PyFunction_",
    };
    static constexpr std::string_view OmitFilenames[] = {
        "core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c", "Objects/call.c",
        "Objects/methodobject.c", "pycore_ceval.h", "ceval.c", "cpython/abstract.h",
    };
    for (std::string_view of : OmitFunctions)
        if (name.find(of) != std::string_view::npos)
            return false;
    for (std::string_view of : OmitFilenames)
        if (filename.find(of) != std::string_view::npos)
            return false;
    return true;
}

} // namespace memscope::model
