// Native call stacks for the publisher (MEMSCOPE_STACKS=N): a bounded frame-pointer walk that captures return
// addresses on the allocator's hot path, and a StackTable per device that interns them, so each distinct stack gets
// one id and crosses the wire once. Capture and intern run under the device lock (the ring's producer); the one
// consumer, the publisher thread, reads the table's entries in order to symbolise and send the new ones
// (publisher.cpp). Nothing here allocates or makes a system call after construction, except the first capture on
// a thread other than the one that made the table (pthread_getattr_np, once per thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace memscope::agent {

constexpr unsigned MaxStackDepth = 64; // wire::MaxStackFrames

// What MEMSCOPE_STACKS asks for: unset, empty, "0" or anything else: nothing (the cheapest mode); N: N native
// frames, at most 64; "python": the Python frames of a process that hosts CPython (pythonstacks.h); "all": native
// frames (64) followed by the Python ones.
struct StackSettings {
    unsigned nativeDepth = 0;
    bool python = false;
};
StackSettings stackSettingsFromEnvironment();
StackSettings parseStackSettings(const char* text);

// The span [begin, end) of the code of the shared object holding the agent (libmemscope-agent.so), whose frames a
// stack leaves out; empty when the agent is linked into the executable (its frames are the program's too).
struct CodeSpan {
    uintptr_t begin = 0, end = 0;
    bool contains(uintptr_t address) const { return address >= begin && address < end; }
};
CodeSpan agentCodeSpan();

// Learns the calling thread's stack bounds now (may allocate on the main thread); later captures on it do not.
void primeStackCapture() noexcept;

// Writes up to `maxDepth` return addresses into `out`, innermost first, starting with the caller's call site, and
// returns how many. Follows the frame-pointer chain; stops at a frame pointer outside the thread's stack, not
// above the previous one, or misaligned, so code built without frame pointers ends the stack early instead of
// faulting. Never allocates (after primeStackCapture on this thread), never blocks.
unsigned captureStack(uintptr_t* out, unsigned maxDepth) noexcept;

class StackTable {
public:
    // Ids are idBase + 1, idBase + 2, ... (idBase carries the device in its top bits). `maxStacks` distinct stacks
    // of at most `maxFrames` frames in all; beyond that intern() answers 0 and counts a drop. Allocates now.
    StackTable(uint32_t idBase, size_t maxStacks, size_t maxFrames);
    StackTable(const StackTable&) = delete;
    StackTable& operator=(const StackTable&) = delete;

    // Producer (one thread at a time: the device lock): the id of this stack, interning it if new; 0 for an empty
    // stack or a full table. No allocation, no lock: a new entry is published with one release store.
    uint32_t intern(const uintptr_t* frames, unsigned count) noexcept;

    // Consumer: entries [0, size()) are complete and immutable.
    size_t size() const noexcept { return m_size.load(std::memory_order_acquire); }
    struct Stack {
        uint32_t id;
        const uintptr_t* frames;
        unsigned count;
    };
    Stack at(size_t index) const noexcept
    {
        const Entry& e = m_entries[index];
        return { m_idBase + uint32_t(index) + 1, m_frames.get() + e.offset, e.count };
    }
    uint64_t dropped() const noexcept { return m_dropped.load(std::memory_order_relaxed); }

private:
    struct Slot {
        uint64_t hash = 0;
        uint32_t entry = 0; // index + 1; 0: empty
    };
    struct Entry {
        uint32_t offset = 0;
        uint32_t count = 0;
    };
    uint32_t m_idBase;
    size_t m_maxStacks;
    size_t m_maxFrames;
    size_t m_slotMask;
    std::unique_ptr<Slot[]> m_slots; // open addressing, producer only
    std::unique_ptr<Entry[]> m_entries;
    std::unique_ptr<uintptr_t[]> m_frames;
    size_t m_framesUsed = 0; // producer only
    std::atomic<size_t> m_size { 0 };
    std::atomic<uint64_t> m_dropped { 0 };
};

// Publisher thread only: function names from an object file's own symbol table (.symtab, else .dynsym), for the
// addresses dladdr cannot name (hidden or static functions, an executable linked without -rdynamic). Each file is
// mapped read-only once, on first use, and stays mapped; only its function symbols' addresses are copied.
class ElfSymbols {
public:
    ElfSymbols() = default;
    ElfSymbols(const ElfSymbols&) = delete;
    ElfSymbols& operator=(const ElfSymbols&) = delete;
    ~ElfSymbols();
    // The (mangled) name of the function containing `address` in the file `path` loaded at `base` (dladdr's
    // dli_fbase); empty when unknown.
    std::string find(const char* path, uintptr_t base, uintptr_t address);

private:
    struct Function {
        uint64_t begin, end;
        uint32_t name; // offset in the string table
    };
    struct Object {
        const char* strings = nullptr; // inside the mapping
        size_t stringBytes = 0;
        bool absolute = false; // ET_EXEC: symbol values are addresses
        std::vector<Function> functions; // sorted by begin
        void* map = nullptr;
        size_t mapSize = 0;
    };
    static void load(const char* path, Object& object);
    std::unordered_map<std::string, Object> m_objects;
};

} // namespace memscope::agent
