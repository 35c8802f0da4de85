// Which frames of a stack a user reads (framefilter.h).
#include "model/framefilter.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

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

namespace {

    bool endsWith(std::string_view s, std::string_view tail)
    {
        return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
    }

    // A native frame: what PyTorch's unwinder names (its C and C++ sources, headers, shared objects, "??" where it
    // found no file). Python frames name a .py file, or a pseudo-file in angle brackets ("<string>", "<stdin>").
    bool isNative(std::string_view file)
    {
        if (file.empty() || file == "??")
            return true;
        static constexpr std::array<std::string_view, 10> Sources
            = { ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".cu", ".cuh", ".inl" };
        if (std::any_of(Sources.begin(), Sources.end(), [&](std::string_view e) { return endsWith(file, e); }))
            return true;
        return file.find(".so") != std::string_view::npos && !endsWith(file, ".py");
    }

} // namespace

bool isNativeFrame(std::string_view filename) { return isNative(filename); }

bool isInternalFrame(std::string_view name, std::string_view filename)
{
    if (isNative(filename))
        return true;
    // memscope's own: its backward() wrapper and the engine frame it puts above a backward() caller's stack.
    if (endsWith(filename, "memscope_torch.py") || filename == "<autograd engine>")
        return true;
    if (filename.starts_with("<frozen")) // the interpreter's frozen modules (importlib, runpy)
        return true;
    // Paths compared in lower case with '/' separators (Windows: C:\...\Lib\site-packages\torch\...).
    std::string path(filename);
    for (char& c : path)
        c = c == '\\' ? '/' : char(std::tolower(static_cast<unsigned char>(c)));
    // PyTorch's own Python (torch/nn/modules/module.py's call plumbing, torch/nn/functional.py, autograd, the
    // optimizers' kernels, torch.compile's machinery) and torch.compile's generated code.
    if (path.find("/torch/") != std::string::npos || path.starts_with("torch/")
        || path.find("/torchinductor_") != std::string::npos)
        return true;
    const bool library = path.find("site-packages/") != std::string::npos
        || path.find("dist-packages/") != std::string::npos;
    if (!library) {
        // The interpreter's standard library: .../lib/python3.11/runpy.py, ...\Python311\Lib\threading.py.
        if (path.find("/lib/python") != std::string::npos)
            return true;
        const size_t lib = path.find("/lib/");
        if (lib != std::string::npos && lib > 0) {
            const size_t start = path.rfind('/', lib - 1);
            const std::string_view parent
                = std::string_view(path).substr(start == std::string::npos ? 0 : start + 1, lib - start - 1);
            if (parent.starts_with("python") && path.find('/', lib + 5) == std::string::npos)
                return true;
        }
    }
    (void)name;
    return false;
}

int siteIndex(const Snapshot& s, StackId stack)
{
    const uint32_t n = s.stackSize(stack);
    if (n == 0)
        return -1;
    const FrameId* frames = s.stackBegin(stack);
    for (uint32_t i = 0; i < n; ++i) {
        const Frame& f = s.frame(frames[i]);
        if (!isInternalFrame(s.str(f.name), s.str(f.filename)))
            return int(i);
    }
    // A native stack. The autograd node (its generated name says which op's backward), outermost first as the
    // engine calls it; then the innermost operator.
    for (uint32_t i = n; i-- > 0;) {
        const std::string_view name = s.str(s.frame(frames[i]).name);
        if (name.find("autograd::generated::") != std::string_view::npos
            && name.find("Backward") != std::string_view::npos && name.find("::apply(") != std::string_view::npos)
            return int(i);
    }
    for (uint32_t i = 0; i < n; ++i) {
        const std::string_view name = s.str(s.frame(frames[i]).name);
        if (name.starts_with("at::_ops::") && name.find("::call(") != std::string_view::npos)
            return int(i);
    }
    for (uint32_t i = 0; i < n; ++i) {
        const Frame& f = s.frame(frames[i]);
        if (keepFrame(s.str(f.name), s.str(f.filename)))
            return int(i);
    }
    return 0;
}

int whatIndex(const Snapshot& s, StackId stack, int site)
{
    const FrameId* frames = s.stackBegin(stack);
    for (int i = 0; i < site; ++i) {
        const Frame& f = s.frame(frames[i]);
        const std::string_view file = s.str(f.filename);
        if (!isNative(file) && file != "<autograd engine>" && !endsWith(file, "memscope_torch.py")
            && keepFrame(s.str(f.name), file))
            return i;
    }
    return -1;
}

} // namespace memscope::model
