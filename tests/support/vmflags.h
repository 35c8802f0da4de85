// The kernel's flags of the mapping that holds an address (/proc/self/smaps, proc(5)), for tests that check the
// advice a mapping was given: " hg " for MADV_HUGEPAGE, " nh " for MADV_NOHUGEPAGE. Header-only; for tests under
// tests/ (their include path has this folder).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace memscope::test {

// The VmFlags line of the mapping holding `p`, empty when not found (no /proc, or no such mapping).
inline std::string vmFlagsOf(const void* p)
{
    FILE* f = std::fopen("/proc/self/smaps", "r");
    if (!f)
        return {};
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    char line[512];
    bool inside = false;
    std::string flags;
    while (std::fgets(line, sizeof line, f)) {
        unsigned long lo = 0, hi = 0;
        if (std::sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && std::strchr(line, '-') < std::strchr(line, ' ')) {
            inside = at >= lo && at < hi;
            continue;
        }
        if (inside && std::strncmp(line, "VmFlags:", 8) == 0) {
            flags = line + 8;
            break;
        }
    }
    std::fclose(f);
    return flags;
}

// Whether the mapping holding `p` was advised to use transparent huge pages.
inline bool advisedHugePages(const void* p) { return (" " + vmFlagsOf(p)).find(" hg ") != std::string::npos; }

} // namespace memscope::test
