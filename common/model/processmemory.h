// How memscope's programs set up glibc's allocator before they read a snapshot of gigabytes.
//
// Opening a 1 GB snapshot fills about 1.5 GB of fresh memory (trace entries, the replay, the views' items), and on a
// virtual machine the first write to each 4 KiB page costs more than the work done on it. Transparent huge pages
// make one fault of a 2 MiB page, and fewer TLB misses for the random probes of the replay's maps, except where their
// blocks go back to a host while free (hugePagesPay() below). Where the kernel hands them out only on request
// (/sys/kernel/mm/transparent_hugepage/enabled is "madvise", Debian's default), glibc's malloc requests them for its
// mappings and heap when the tunable glibc.malloc.hugetlb is 1 (glibc 2.35, manual "Memory Allocation Tunables").
// Tunables are read once, from GLIBC_TUNABLES, when the program starts, so a program that wants one sets the variable
// and executes itself again; the copy restores the environment the user gave, so that the processes it starts see
// that environment unchanged.
//
// What it gains is measured in docs/speed.md.
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

// True where `features` (a virtio device's `features` file in sysfs: '0' or '1' per feature bit, bit 0 first) has
// VIRTIO_BALLOON_F_REPORTING, bit 5 (Linux include/uapi/linux/virtio_balloon.h): a balloon that hands the guest's free
// memory back to the host. Pure.
bool balloonReportsFreePages(const std::string& features);

// True where the virtio balloon driver has a device bound that reports free memory to the host
// (/sys/bus/virtio/drivers/virtio_balloon/virtio*/features).
bool freePagesReportedToHost();

// Whether this process asks for transparent huge pages: its large arrays (GrowingArray::setHugePages), the pages it
// warms (WarmPages), the reader's windows and glibc's malloc (tuneProcessMemory). Yes where the kernel gives them on
// request and does not hand free memory back to a host.
//
// A guest whose balloon reports free pages gives the host every free block of 2 MiB and more (Linux
// mm/page_reporting.c: page_reporting_order, pageblock_order by default) a couple of seconds after it is freed, and a
// huge page is such a block: each one a fresh process faults in is backed by the host anew, while most 4 KiB pages
// come from smaller free blocks that stayed with the guest. On such a machine (this project's development machine,
// six idle seconds before each run): writing 1 GB took 2.0-2.3 s in huge pages, 0.4-0.8 s in 4 KiB pages; opening
// the 1 GB synthetic file (every view painted) 3.8-4.8 s with them, 2.8-3.1 s without (docs/speed.md).
// MEMSCOPE_HUGE_PAGES=1 asks for them anyway (where the kernel gives them on request), =0 never. Decided once, on
// the first call; any thread.
bool hugePagesPay();

// True where this build's allocator is a sanitizer's (AddressSanitizer, ThreadSanitizer), not glibc's: the tunable
// would do nothing, and tuneProcessMemory starts no copy. Pure.
bool sanitizerAllocator();

// In a copy started by tuneProcessMemory: puts GLIBC_TUNABLES back as the user gave it (or unsets it) and removes
// the markers; true where it did. Elsewhere changes nothing and returns false. Not thread-safe (setenv).
bool restoreUserTunables();

// Bytes this machine can still give (MemAvailable in /proc/meminfo, Linux 3.14+); 0 when unknown.
uint64_t availableMemory();

} // namespace memscope::model
