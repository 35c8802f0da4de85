// Python frame capture without linking against libpython (pythonstacks.h). Only functions of CPython's C API are
// called, found with dlsym in the running process: no structure layout of any Python version is assumed. Needs
// Python 3.9 or newer (PyFrame_GetBack, PyFrame_GetCode); PyFrame_GetLasti (3.11) gives each instruction its own
// key, older versions key a frame by its line.
#include "pythonstacks.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include <dlfcn.h>

namespace memscope::agent::python {
namespace {

    struct PyObject; // opaque: only pointers cross

    struct Api {
        int (*isInitialized)() = nullptr;
        int (*isFinalizing)() = nullptr; // Py_IsFinalizing (3.13), else _Py_IsFinalizing (3.7 to 3.12); optional
        int (*gilCheck)() = nullptr;
        void* (*threadState)() = nullptr; // PyGILState_GetThisThreadState
        int (*gilEnsure)() = nullptr; // PyGILState_STATE is an int-sized enum
        void (*gilRelease)(int) = nullptr;
        PyObject* (*currentFrame)() = nullptr; // PyEval_GetFrame: borrowed
        PyObject* (*frameBack)(PyObject*) = nullptr; // new reference
        PyObject* (*frameCode)(PyObject*) = nullptr; // new reference
        int (*frameLasti)(PyObject*) = nullptr; // 3.11+; optional
        int (*frameLine)(PyObject*) = nullptr; // PyFrame_GetLineNumber
        int (*addrToLine)(PyObject*, int) = nullptr; // PyCode_Addr2Line
        void (*incRef)(PyObject*) = nullptr;
        void (*decRef)(PyObject*) = nullptr;
        PyObject* (*getAttr)(PyObject*, const char*) = nullptr;
        const char* (*utf8)(PyObject*) = nullptr;
        void (*errFetch)(PyObject**, PyObject**, PyObject**) = nullptr;
        void (*errRestore)(PyObject*, PyObject*, PyObject*) = nullptr;
    };

    template <typename F>
    bool find(F& f, const char* name)
    {
        f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
        return f != nullptr;
    }

    bool resolve(Api& a)
    {
        bool ok = find(a.isInitialized, "Py_IsInitialized") && find(a.gilCheck, "PyGILState_Check")
            && find(a.threadState, "PyGILState_GetThisThreadState") && find(a.gilEnsure, "PyGILState_Ensure")
            && find(a.gilRelease, "PyGILState_Release") && find(a.currentFrame, "PyEval_GetFrame")
            && find(a.frameBack, "PyFrame_GetBack") && find(a.frameCode, "PyFrame_GetCode")
            && find(a.frameLine, "PyFrame_GetLineNumber") && find(a.addrToLine, "PyCode_Addr2Line")
            && find(a.incRef, "Py_IncRef") && find(a.decRef, "Py_DecRef")
            && find(a.getAttr, "PyObject_GetAttrString") && find(a.utf8, "PyUnicode_AsUTF8")
            && find(a.errFetch, "PyErr_Fetch") && find(a.errRestore, "PyErr_Restore");
        if (!ok)
            return false;
        find(a.frameLasti, "PyFrame_GetLasti");
        if (!find(a.isFinalizing, "Py_IsFinalizing"))
            find(a.isFinalizing, "_Py_IsFinalizing");
        return true;
    }

    // The table of frames: open addressing from (code, instruction) to an entry, entries appended and published
    // with one release store (the publisher reads them without a lock), strings in a bump arena. Writers take the
    // spin lock for lookups and inserts only, never across a call into Python.
    constexpr uint32_t MaxFrames = uint32_t(1) << 16;
    constexpr uint32_t MaxCodes = uint32_t(1) << 14;
    constexpr size_t ArenaBytes = size_t(4) << 20;
    constexpr size_t MaxStringBytes = 1024; // longer names and paths are cut (a generated function's name can be huge)

    struct FrameEntry {
        uint32_t code; // index into codes
        int32_t line;
        uint32_t extraFirst; // the frames an ExtraFrames gave for it: entries extraFirst .. extraFirst+extraCount-1
        uint32_t extraCount;
    };
    struct CodeEntry {
        uint32_t name, file; // offsets into the arena
    };
    struct FrameSlot {
        uintptr_t code = 0;
        int32_t instruction = 0;
        uint32_t entry = 0; // index + 1; 0: empty
    };
    struct CodeSlot {
        uintptr_t code = 0;
        uint32_t entry = 0;
    };

    struct Table {
        std::unique_ptr<FrameSlot[]> frameSlots { new FrameSlot[2 * MaxFrames] };
        std::unique_ptr<CodeSlot[]> codeSlots { new CodeSlot[2 * MaxCodes] };
        std::unique_ptr<FrameEntry[]> frames { new FrameEntry[MaxFrames] };
        std::unique_ptr<CodeEntry[]> codes { new CodeEntry[MaxCodes] };
        std::unique_ptr<char[]> arena { static_cast<char*>(std::calloc(ArenaBytes, 1)) };
        std::atomic<uint32_t> frameCount { 0 };
        uint32_t codeCount = 0;
        size_t arenaUsed = 0;
        std::atomic_flag lock = ATOMIC_FLAG_INIT;
        std::atomic<uint64_t> dropped { 0 };
        uintptr_t engineKey = 0, fullKey = 0;
        std::unordered_map<std::string, uint32_t> syntheticCodes; // "name\0file" of extra frames -> code index

        void acquire() noexcept
        {
            while (lock.test_and_set(std::memory_order_acquire)) {
            }
        }
        void release() noexcept { lock.clear(std::memory_order_release); }

        // Under the lock. An arena offset; 0 ("??") when the arena is full.
        uint32_t addString(const char* text) noexcept
        {
            const size_t n = std::min(std::strlen(text), MaxStringBytes);
            if (arenaUsed + n + 1 > ArenaBytes)
                return 0;
            const auto at = uint32_t(arenaUsed);
            std::memcpy(arena.get() + at, text, n);
            arena[at + n] = '\0';
            arenaUsed += n + 1;
            return at;
        }
        // Under the lock: the entry of a code object, or UINT32_MAX.
        uint32_t findCode(uintptr_t code) const noexcept
        {
            for (size_t i = (code >> 4) * 0x9e3779b97f4a7c15ull >> 40;; ++i) {
                const CodeSlot& s = codeSlots[i & (2 * MaxCodes - 1)];
                if (s.entry == 0)
                    return UINT32_MAX;
                if (s.code == code)
                    return s.entry - 1;
            }
        }
        // Under the lock; false when full.
        bool addCode(uintptr_t code, const char* name, const char* file, uint32_t& index) noexcept
        {
            if (codeCount >= MaxCodes)
                return false;
            index = codeCount++;
            codes[index] = CodeEntry { addString(name), addString(file) };
            for (size_t i = (code >> 4) * 0x9e3779b97f4a7c15ull >> 40;; ++i) {
                CodeSlot& s = codeSlots[i & (2 * MaxCodes - 1)];
                if (s.entry == 0) {
                    s = CodeSlot { code, index + 1 };
                    return true;
                }
            }
        }
        static size_t frameHash(uintptr_t code, int32_t instruction) noexcept
        {
            return size_t(((code >> 4) ^ (uint64_t(uint32_t(instruction)) << 40)) * 0xff51afd7ed558ccdull >> 32);
        }
        // Under the lock: the key of a known frame, 0 when unknown.
        uintptr_t findFrame(uintptr_t code, int32_t instruction) const noexcept
        {
            for (size_t i = frameHash(code, instruction);; ++i) {
                const FrameSlot& s = frameSlots[i & (2 * MaxFrames - 1)];
                if (s.entry == 0)
                    return 0;
                if (s.code == code && s.instruction == instruction)
                    return FrameKeyBit | (s.entry - 1);
            }
        }
        // Under the lock: appends a frame (slot-less when code is 0: the synthetic frames). Its key, or fullKey.
        uintptr_t addFrame(uintptr_t code, int32_t instruction, uint32_t codeIndex, int line, uint32_t extraFirst = 0,
                           uint32_t extraCount = 0) noexcept
        {
            const uint32_t index = frameCount.load(std::memory_order_relaxed);
            if (index >= MaxFrames) {
                dropped.fetch_add(1, std::memory_order_relaxed);
                return fullKey;
            }
            frames[index] = FrameEntry { codeIndex, line, extraFirst, extraCount };
            frameCount.store(index + 1, std::memory_order_release);
            if (code != 0) {
                for (size_t i = frameHash(code, instruction);; ++i) {
                    FrameSlot& s = frameSlots[i & (2 * MaxFrames - 1)];
                    if (s.entry == 0) {
                        s = FrameSlot { code, instruction, index + 1 };
                        break;
                    }
                }
            }
            return FrameKeyBit | index;
        }
        uintptr_t addSynthetic(const char* name, const char* file) noexcept
        {
            uint32_t code = 0;
            addCode(0, name, file, code); // code 0 is never looked up: its slot only takes a place
            return addFrame(0, 0, code, 0);
        }
    };

    Api g_api;
    Table* g_table = nullptr; // made once, never freed (frames are read until the process ends)
    std::once_flag g_resolved;
    bool g_available = false;
    thread_local bool t_capturing = false;

    bool ready() noexcept
    {
        std::call_once(g_resolved, [] {
            try {
                if (!resolve(g_api))
                    return;
                auto* table = new Table;
                if (!table->arena)
                    return;
                table->arena[0] = '?';
                table->arena[1] = '?';
                table->arenaUsed = 3; // offset 0: "??"
                table->engineKey = table->addSynthetic("backward", "<autograd engine>");
                table->fullKey = table->addSynthetic("<memscope: Python frame table full>", "??");
                g_table = table;
                g_available = true;
            } catch (...) {
            }
        });
        return g_available;
    }

    bool running() noexcept
    {
        return g_api.isInitialized() && !(g_api.isFinalizing && g_api.isFinalizing());
    }

    // With the GIL: a C string of attribute `name` of `object` copied into `buffer`, "??" when it has none.
    void attributeText(PyObject* object, const char* name, char* buffer, size_t size) noexcept
    {
        std::strcpy(buffer, "??");
        PyObject* value = g_api.getAttr(object, name);
        if (!value)
            return;
        if (const char* text = g_api.utf8(value)) {
            std::strncpy(buffer, text, size - 1);
            buffer[size - 1] = '\0';
        }
        g_api.decRef(value);
    }

    // Under the lock: the code entry of a synthetic frame named (name, file), added if new; false when full.
    bool syntheticCode(Table& t, const std::string& name, const std::string& file, uint32_t& index) noexcept
    {
        try {
            std::string key = name;
            key += '\0';
            key += file;
            if (auto it = t.syntheticCodes.find(key); it != t.syntheticCodes.end()) {
                index = it->second;
                return true;
            }
            if (!t.addCode(0, name.c_str(), file.c_str(), index))
                return false;
            t.syntheticCodes.emplace(std::move(key), index);
            return true;
        } catch (...) {
            return false;
        }
    }

    // With the GIL: the key of a frame executing `instruction` of `code` (an instruction offset, or a line when the
    // interpreter has no PyFrame_GetLasti), adding it to the table the first time, with the frames `extra` gives
    // for it.
    uintptr_t keyOf(PyObject* code, int32_t instruction, bool isLine, ExtraFrames extra = nullptr,
                    void* user = nullptr) noexcept
    {
        Table& t = *g_table;
        const auto codeKey = reinterpret_cast<uintptr_t>(code);
        t.acquire();
        if (const uintptr_t key = t.findFrame(codeKey, instruction)) {
            t.release();
            return key;
        }
        uint32_t codeIndex = t.findCode(codeKey);
        t.release();
        if (codeIndex == UINT32_MAX) {
            // Read outside the lock: these calls run Python's allocator. A pending exception is kept aside.
            char name[MaxStringBytes + 1], file[MaxStringBytes + 1];
            PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
            g_api.errFetch(&type, &value, &traceback);
            attributeText(code, "co_name", name, sizeof name);
            attributeText(code, "co_filename", file, sizeof file);
            g_api.errRestore(type, value, traceback);
            t.acquire();
            codeIndex = t.findCode(codeKey);
            if (codeIndex == UINT32_MAX) {
                if (!t.addCode(codeKey, name, file, codeIndex)) {
                    t.release();
                    t.dropped.fetch_add(1, std::memory_order_relaxed);
                    return t.fullKey;
                }
                g_api.incRef(code); // kept for the process's life: its address names this function only
            }
            t.release();
        }
        const int line = isLine ? instruction : std::max(g_api.addrToLine(code, instruction), 0);
        std::vector<ExtraFrame> more;
        if (extra) {
            try {
                extra(user, t.arena.get() + t.codes[codeIndex].file, line, more);
            } catch (...) {
                more.clear();
            }
        }
        t.acquire();
        uintptr_t key = t.findFrame(codeKey, instruction);
        if (!key) {
            // The extra frames go in first, so that a reader who finds this frame finds them too.
            uint32_t first = 0, count = 0;
            for (const ExtraFrame& e : more) {
                uint32_t extraCode = 0;
                if (!syntheticCode(t, e.name, e.file, extraCode))
                    break;
                const uintptr_t extraKey = t.addFrame(0, 0, extraCode, e.line);
                if (extraKey == t.fullKey)
                    break;
                if (count++ == 0)
                    first = uint32_t(extraKey & ~FrameKeyBit);
            }
            key = t.addFrame(codeKey, instruction, codeIndex, line, first, count);
        }
        t.release();
        return key;
    }

    // The backward() stacks under way: a ring, so that an engine thread copies a stack no Python thread is
    // writing (a slot is reused only BackwardSlots backward() calls later).
    constexpr int BackwardSlots = 64;
    constexpr unsigned BackwardDepth = 64;
    struct BackwardStack {
        uintptr_t frames[BackwardDepth];
        unsigned count = 0;
    };
    BackwardStack g_backward[BackwardSlots];
    std::atomic<int> g_backwardCurrent { -1 };
    int g_backwardNext = 0; // with the GIL

} // namespace

bool available() noexcept { return ready() && running(); }

unsigned capture(uintptr_t* out, unsigned max) noexcept
{
    if (max == 0 || t_capturing || !ready() || !running())
        return 0;
    const bool held = g_api.gilCheck() != 0;
    if (!held && !g_api.threadState())
        return 0; // a thread Python does not know: no thread state is made for it
    t_capturing = true;
    const int gil = held ? 0 : g_api.gilEnsure();
    unsigned n = 0;
    PyObject* frame = g_api.currentFrame();
    if (frame)
        g_api.incRef(frame);
    while (frame && n < max) {
        if (PyObject* code = g_api.frameCode(frame)) {
            const bool byLine = !g_api.frameLasti;
            const int32_t instruction = byLine ? g_api.frameLine(frame) : g_api.frameLasti(frame);
            out[n++] = keyOf(code, instruction, byLine);
            g_api.decRef(code);
        }
        PyObject* back = g_api.frameBack(frame);
        g_api.decRef(frame);
        frame = back;
    }
    if (frame)
        g_api.decRef(frame);
    if (!held)
        g_api.gilRelease(gil);
    t_capturing = false;
    return n;
}

int backwardBegin() noexcept
{
    if (!ready())
        return -1;
    const int index = g_backwardNext;
    g_backwardNext = (g_backwardNext + 1) % BackwardSlots;
    BackwardStack& s = g_backward[index];
    s.count = capture(s.frames, BackwardDepth);
    // memscope_torch.py's backward() wrapper, which calls this, is no frame of the user's.
    constexpr std::string_view Wrapper = "memscope_torch.py";
    unsigned skip = 0;
    for (Frame f; skip < s.count && symbolise(s.frames[skip], f) && std::string_view(f.file).ends_with(Wrapper);)
        ++skip;
    std::copy(s.frames + skip, s.frames + s.count, s.frames);
    s.count -= skip;
    g_backwardCurrent.store(index, std::memory_order_release);
    return index;
}

void backwardEnd(int token) noexcept
{
    int expected = token;
    g_backwardCurrent.compare_exchange_strong(expected, -1, std::memory_order_acq_rel);
}

unsigned backwardStack(uintptr_t* out, unsigned max) noexcept
{
    const int index = g_backwardCurrent.load(std::memory_order_acquire);
    if (index < 0 || max == 0 || !g_table)
        return 0;
    const BackwardStack& s = g_backward[index];
    out[0] = g_table->engineKey;
    const unsigned n = std::min(s.count, max - 1);
    std::copy(s.frames, s.frames + n, out + 1);
    return n + 1;
}

bool symbolise(uintptr_t key, Frame& out) noexcept
{
    if (!isFrameKey(key) || !g_table)
        return false;
    const Table& t = *g_table;
    const uintptr_t index = key & ~FrameKeyBit;
    if (index >= t.frameCount.load(std::memory_order_acquire))
        return false;
    const FrameEntry& f = t.frames[index];
    const CodeEntry& c = t.codes[f.code];
    out = Frame { t.arena.get() + c.name, t.arena.get() + c.file, f.line };
    return true;
}

unsigned lookup(const RawFrame* frames, unsigned count, uintptr_t* keys) noexcept
{
    if (!ready()) {
        std::fill(keys, keys + count, uintptr_t(0));
        return 0;
    }
    Table& t = *g_table;
    unsigned known = 0;
    t.acquire();
    for (unsigned i = 0; i < count; ++i) {
        keys[i] = t.findFrame(frames[i].code, frames[i].instruction);
        known += keys[i] != 0;
    }
    t.release();
    return known;
}

uintptr_t add(const RawFrame& frame, ExtraFrames extra, void* user) noexcept
{
    if (!ready() || frame.code == 0)
        return 0;
    const uintptr_t key = keyOf(reinterpret_cast<PyObject*>(frame.code), frame.instruction,
                                /*isLine=*/false, extra, user);
    return key == g_table->fullKey ? 0 : key;
}

unsigned extras(uintptr_t key, uintptr_t* out, unsigned max) noexcept
{
    if (!isFrameKey(key) || !g_table)
        return 0;
    const Table& t = *g_table;
    const uintptr_t index = key & ~FrameKeyBit;
    if (index >= t.frameCount.load(std::memory_order_acquire))
        return 0;
    const FrameEntry& f = t.frames[index];
    const unsigned n = std::min<unsigned>(f.extraCount, max);
    for (unsigned i = 0; i < n; ++i)
        out[i] = FrameKeyBit | (f.extraFirst + i);
    return n;
}

uintptr_t engineKey() noexcept { return ready() ? g_table->engineKey : 0; }

bool acquireLock(int& state) noexcept
{
    if (!ready() || !running())
        return false;
    state = g_api.gilEnsure();
    return true;
}

void releaseLock(int state) noexcept { g_api.gilRelease(state); }

uint64_t framesKnown() noexcept { return g_table ? g_table->frameCount.load(std::memory_order_relaxed) : 0; }
uint64_t framesDropped() noexcept { return g_table ? g_table->dropped.load(std::memory_order_relaxed) : 0; }

} // namespace memscope::agent::python
