// StackSymbolizer (symbolizer.h): dladdr, the ELF symbol tables and the C++ ABI's demangler.
#include "symbolizer.h"

#include "pythonstacks.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace memscope::agent {
namespace {

    template <typename T> void append(std::vector<char>& out, const T& value)
    {
        const char* p = reinterpret_cast<const char*>(&value);
        out.insert(out.end(), p, p + sizeof(T));
    }

} // namespace

void StackSymbolizer::defineFrame(uintptr_t address, std::string name, std::string file, int line)
{
    m_definedFrames[address] = DefinedFrame { std::move(name), std::move(file), line };
}

SymbolFrame StackSymbolizer::name(uintptr_t address) const
{
    if (python::Frame f; python::symbolise(address, f))
        return { f.name, f.file, f.line };
    if (auto defined = m_definedFrames.find(address); defined != m_definedFrames.end())
        return { defined->second.name, defined->second.file, defined->second.line };
    SymbolFrame frame { "??", "??", 0 };
    Dl_info info {};
    if (dladdr(reinterpret_cast<void*>(address - 1), &info) != 0) {
        if (info.dli_fname && *info.dli_fname)
            frame.filename = info.dli_fname;
        if (info.dli_sname && *info.dli_sname) {
            int status = 0;
            char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
            frame.name = status == 0 && demangled ? std::string(demangled) : std::string(info.dli_sname);
            std::free(demangled);
        }
    }
    return frame;
}

void StackSymbolizer::encode(const StackTable::Stack& stack, std::vector<char>& out)
{
    std::vector<wire::FrameRecord> frames(stack.count);
    std::string strings;
    auto addString = [&](const std::string& text) {
        const size_t at = strings.find(text + '\0');
        if (at != std::string::npos && (at == 0 || strings[at - 1] == '\0'))
            return uint32_t(at);
        const uint32_t offset = uint32_t(strings.size());
        strings += text;
        strings += '\0';
        return offset;
    };
    for (unsigned i = 0; i < stack.count; ++i) {
        const uintptr_t address = stack.frames[i];
        if (python::Frame f; python::symbolise(address, f)) {
            frames[i].address = address;
            frames[i].nameOffset = addString(f.name);
            frames[i].fileOffset = addString(f.file);
            frames[i].line = f.line;
            continue;
        }
        if (auto defined = m_definedFrames.find(address); defined != m_definedFrames.end()) {
            frames[i].address = address;
            frames[i].nameOffset = addString(defined->second.name);
            frames[i].fileOffset = addString(defined->second.file);
            frames[i].line = defined->second.line;
            continue;
        }
        auto it = m_symbols.find(address);
        if (it == m_symbols.end()) {
            std::string name = "??", file = "??";
            Dl_info info {};
            // address - 1: the call instruction, not the one after it (which may belong to the next function).
            if (dladdr(reinterpret_cast<void*>(address - 1), &info) != 0) {
                if (info.dli_fname && *info.dli_fname)
                    file = info.dli_fname;
                std::string mangled = info.dli_sname && *info.dli_sname
                    ? std::string(info.dli_sname)
                    : m_elfSymbols.find(info.dli_fname, reinterpret_cast<uintptr_t>(info.dli_fbase), address - 1);
                if (!mangled.empty()) {
                    int status = 0;
                    char* demangled = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
                    name = status == 0 && demangled ? std::string(demangled) : mangled;
                    std::free(demangled);
                }
            }
            it = m_symbols.emplace(address, std::make_pair(std::move(name), std::move(file))).first;
        }
        frames[i].address = address;
        frames[i].nameOffset = addString(it->second.first);
        frames[i].fileOffset = addString(it->second.second);
        frames[i].line = 0; // dladdr knows no lines
    }
    encode(stack.id, frames, strings, out);
}

void StackSymbolizer::encode(uint32_t stackId, const std::vector<SymbolFrame>& symbolFrames, std::vector<char>& out)
{
    std::vector<wire::FrameRecord> frames(std::min(symbolFrames.size(), size_t(wire::MaxStackFrames)));
    std::string strings;
    std::unordered_map<std::string, uint32_t> offsets;
    auto addString = [&](const std::string& text) {
        auto [it, added] = offsets.emplace(text, uint32_t(strings.size()));
        if (added) {
            strings += text;
            strings += '\0';
        }
        return it->second;
    };
    for (size_t i = 0; i < frames.size(); ++i) {
        frames[i].address = 0;
        frames[i].nameOffset = addString(symbolFrames[i].name);
        frames[i].fileOffset = addString(symbolFrames[i].filename);
        frames[i].line = int32_t(std::clamp<int64_t>(symbolFrames[i].line, INT32_MIN, INT32_MAX));
    }
    encode(stackId, frames, strings, out);
}

void StackSymbolizer::encode(uint32_t stackId, const std::vector<wire::FrameRecord>& frames, const std::string& strings,
                             std::vector<char>& out)
{
    wire::StackDefHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.stackId = stackId;
    header.frameCount = uint32_t(frames.size());
    header.stringBytes = uint32_t(strings.size());
    out.clear();
    append(out, header);
    for (const wire::FrameRecord& f : frames)
        append(out, f);
    out.insert(out.end(), strings.begin(), strings.end());
}

} // namespace memscope::agent
