// How memscope's programs set up glibc's allocator before they read a snapshot of gigabytes.
//
// Opening a 1 GB snapshot fills about 1.5 GB of fresh memory (trace entries, the replay, the views' items), and on a
// virtual machine the first write to each 4 KiB page costs more than the work done on it. Transparent huge pages
// make one fault of a 2 MiB page, and fewer TLB misses for the random probes of the replay's maps. Where the kernel
// hands them out only on request (/sys/kernel/mm/transparent_hugepage/enabled is "madvise", Debian's default),
// glibc's malloc requests them for its mappings and heap when the tunable glibc.malloc.hugetlb is 1 (glibc 2.35,
// manual "Memory Allocation Tunables"). Tunables are read once, from GLIBC_TUNABLES, when the program starts, so a
// program that wants one sets the variable and executes itself again; the copy restores the environment the user
// gave, so that the processes it starts see that environment unchanged.
//
// What it gains is measured in the README (Speed).
//
// A user who sets glibc.malloc.hugetlb in GLIBC_TUNABLES keeps the value given (0 turns this off).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace memscope::model {

// Called first in main(), before any thread starts: restores the user's environment in the copy started by an
// earlier call; otherwise executes the program again (/proc/self/exe, the same argv) with glibc.malloc.hugetlb=1
// where that helps (glibc, transparent huge pages on request, the tunable not set by the user, no sanitizer), and
// returns only where it does not or the exec fails. Then fixes glibc's mmap threshold (see the .cpp). GUI or CLI.
void tuneProcessMemory(char** argv);

// GLIBC_TUNABLES with glibc.malloc.hugetlb=1 added to `current` (the variable's value, or null when unset), or
// nullopt where `current` already names glibc.malloc.hugetlb. Pure.
std::optional<std::string> tunablesWithHugePages(const char* current);

// True where `enabledFile`'s text (as /sys/kernel/mm/transparent_hugepage/enabled: "always [madvise] never") has
// madvise selected. Pure.
bool hugePagesOnRequest(const std::string& enabledFile);

// True where this build's allocator is a sanitizer's (AddressSanitizer, ThreadSanitizer), not glibc's: the tunable
// would do nothing, and tuneProcessMemory starts no copy. Pure.
bool sanitizerAllocator();

// In a copy started by tuneProcessMemory: puts GLIBC_TUNABLES back as the user gave it (or unsets it) and removes
// the markers; true where it did. Elsewhere changes nothing and returns false. Not thread-safe (setenv).
bool restoreUserTunables();

// Bytes this machine can still give (MemAvailable in /proc/meminfo, Linux 3.14+); 0 when unknown.
uint64_t availableMemory();

} // namespace memscope::model
