// StackSymbolizer: the stack definitions the publisher sends on topic "S" (wire::StackDefHeader, FrameRecords, a
// string table): each captured return address named once, by the first that knows it: a Python frame the agent
// recorded (pythonstacks.h), a frame the program defined itself (defineFrame), dladdr, else the object file's own
// symbol table (ElfSymbols), demangled; names are cached per address. Frames someone else symbolised (an observed
// allocator's) are encoded as given. Publisher thread only, but for defineFrame before the thread starts.
#pragma once

#include "eventsource.h"
#include "stacks.h"
#include "wire/protocol.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace memscope::agent {

class StackSymbolizer {
public:
    // `address` (any value no code lives at) names this frame instead of what dladdr would say.
    void defineFrame(uintptr_t address, std::string name, std::string file, int line);
    // A frame defineFrame named, or any address named as the "S" definitions name it but for the symbol-table
    // fallback: any thread once the publisher thread runs (the defined frames are fixed by then).
    SymbolFrame name(uintptr_t address) const;

    // The "S" frame's bytes for a captured stack, into `out` (cleared first).
    void encode(const StackTable::Stack& stack, std::vector<char>& out);
    // The same for frames already symbolised (at most wire::MaxStackFrames are kept).
    static void encode(uint32_t stackId, const std::vector<SymbolFrame>& frames, std::vector<char>& out);

private:
    static void encode(uint32_t stackId, const std::vector<wire::FrameRecord>& frames, const std::string& strings,
                       std::vector<char>& out);

    struct DefinedFrame {
        std::string name, file;
        int line = 0;
    };
    std::unordered_map<uintptr_t, DefinedFrame> m_definedFrames;
    std::unordered_map<uintptr_t, std::pair<std::string, std::string>> m_symbols; // address -> (name, file)
    ElfSymbols m_elfSymbols; // names dladdr does not know
};

} // namespace memscope::agent
