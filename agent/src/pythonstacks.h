// Python call stacks for the agent in a process that hosts a CPython interpreter (memscope_torch.use(), a program
// embedding Python): MEMSCOPE_STACKS=python or all. The agent does not link against libpython; it finds the
// interpreter's C API in the process (dlsym) and does nothing where there is none.
//
// When the allocator is called (agentapi.cpp), before it takes any lock, capture() walks the calling thread's
// frame chain and turns each frame into a key: an index into a table of (code object, instruction offset) pairs
// with their function, file and line, filled the first time a pair is seen. The publisher thread reads that table
// to send a frame's definition (publisher.cpp) and never needs the interpreter's lock. Code objects in the table are
// kept alive (one reference each), so an address in it is never reused for another function.
//
// Locking, as PyTorch's own Python capture does it (torch/csrc/profiler/python/combined_traceback.cpp,
// PythonTraceback::gather): a thread that has a Python thread state but does not hold the GIL (torch's ops release
// it) takes it for the walk; the walk happens outside every allocator lock, so the lock order is always GIL, then
// allocator. A thread Python does not know (no thread state) is never given one. The walk may run Python code (a
// frame object made for the walk can start a garbage collection, which can free tensors): a capture nested in a
// capture on the same thread captures nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace memscope::agent::python {

// Keys of Python frames have the top bit set: native return addresses (user space) never do.
constexpr uintptr_t FrameKeyBit = uintptr_t(1) << 63;
constexpr bool isFrameKey(uintptr_t key) { return (key & FrameKeyBit) != 0; }

// Whether the interpreter's C API was found in this process (the first call looks, later calls remember) and the
// interpreter is running.
bool available() noexcept;

// The calling thread's Python frames, innermost first, as keys (at most `max`); 0 without an interpreter, on a
// thread Python does not know, while the interpreter is finalising, or nested in another capture on this thread.
unsigned capture(uintptr_t* out, unsigned max) noexcept;

// Around torch.autograd.backward, from Python with the GIL held (memscope_torch.py, through ctypes.PyDLL): the
// autograd engine's threads run no Python code of their own, so while a backward() is under way their allocations
// get the stack of its caller under an "<autograd engine>" frame (backwardStack). begin returns a token for end;
// -1 without an interpreter.
int backwardBegin() noexcept;
void backwardEnd(int token) noexcept;
// The current backward() caller's stack under the engine's frame, innermost first; 0 when none is under way.
unsigned backwardStack(uintptr_t* out, unsigned max) noexcept;

struct Frame {
    const char* name; // co_name
    const char* file; // co_filename
    int line; // PyCode_Addr2Line of the instruction; 0 unknown
};
// What a key names (any thread; the strings stay valid for the process's life); false for a key capture() did not
// hand out.
bool symbolise(uintptr_t key, Frame& out) noexcept;

// --- Frames another capture holds (an observed allocator's contexts: PyTorch's CapturedTraceback) ---------------
//
// The holder keeps each code object alive while it holds the frame; the table keeps its own reference from the
// moment it adds one, so a code address in the table always names the same function.
struct RawFrame {
    uintptr_t code; // a PyCodeObject*
    int32_t instruction; // its instruction offset in bytes, as PyFrame_GetLasti gives it
};

// The keys of `frames` the table knows, without the interpreter lock (any thread): keys[i] = 0 where it does not.
// Returns how many it knows.
unsigned lookup(const RawFrame* frames, unsigned count, uintptr_t* keys) noexcept;

// Frames that stand for generated code's lines: the source lines it came from (torch.compile's code cache knows
// them). Called with the interpreter lock held, once per frame added; appends to `out`, innermost first.
struct ExtraFrame {
    std::string name, file;
    int line = 0;
};
using ExtraFrames = void (*)(void* user, const char* file, int line, std::vector<ExtraFrame>& out);

// With the interpreter lock held (the calling thread must hold it): the key of `frame`, added to the table if new,
// with the frames `extra` gives for it (may be null). Returns 0 when the table is full.
uintptr_t add(const RawFrame& frame, ExtraFrames extra, void* user) noexcept;

// The frames added after the frame of `key` by an ExtraFrames (their keys, innermost first; at most `max`).
unsigned extras(uintptr_t key, uintptr_t* out, unsigned max) noexcept;

// The synthetic frame put above a backward() caller's stack ("backward" in "<autograd engine>"); 0 without an
// interpreter.
uintptr_t engineKey() noexcept;

// The interpreter lock for a thread Python does not know (a symboliser's): takes it, making the thread state on
// first use, unless the interpreter is gone or finalising. Returns false then (and nothing is held). May block
// as long as another thread holds the lock.
bool acquireLock(int& state) noexcept;
void releaseLock(int state) noexcept;

// Frames in the table and the frames that did not fit (their key names "<memscope: Python frame table full>").
uint64_t framesKnown() noexcept;
uint64_t framesDropped() noexcept;

} // namespace memscope::agent::python
