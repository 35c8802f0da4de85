// `memscope-cli allocator-replay SNAPSHOT`: the decision oracle of memscope's caching allocator. Replays each
// device's complete trace through agent::CachingAllocator (host backend, scripted to hand out the addresses the
// trace shows for new segments) and checks that every event the allocator reports - every allocation's address,
// every free, every segment it reserves, releases, maps or unmaps - is the one PyTorch recorded, in PyTorch's order,
// and that the final state equals the snapshot's segments and blocks.
//
// Single-threaded; reads the file, writes nothing.
#pragma once

#include <string>
#include <vector>

namespace memscope {

namespace model {
    struct Snapshot;
}

struct AllocatorReplayOutput {
    int exitCode = 0; // 0: every allocation matched and the final state is identical; 1: not, or unreadable; 2: usage
    std::string out; // one line per device, then "matched A/B allocations, final state identical: yes|no"
    std::string err; // why the input could not be read, or the usage
};

// What a snapshot does not record about how it was made.
struct AllocatorReplayOptions {
    // torch.cuda.set_per_process_memory_fraction's cap in bytes (PyTorch's allowed_memory_maximum: the fraction
    // times the device's total memory); 0: none. Garbage collection (garbage_collection_threshold) and the
    // allocator's own out-of-memory decisions depend on it, and no snapshot keeps it.
    size_t memoryLimit = 0;
    // The device's total memory (torch.cuda.get_device_properties().total_memory); 0: estimated from the trace.
    // Expandable segments reserve address space for 9/8 of it each (c10/cuda/CUDACachingAllocator.cpp,
    // ExpandableSegment), so it decides whether the trace's next segment address is free to reserve.
    size_t deviceMemory = 0;
};

// `args`: the command's arguments after "allocator-replay" (one snapshot file, [--memory-limit BYTES],
// [--device-memory BYTES]).
AllocatorReplayOutput allocatorReplay(const std::vector<std::string>& args);
// The same for a loaded snapshot; `name` is how messages call it.
AllocatorReplayOutput allocatorReplaySnapshot(const model::Snapshot& snapshot, const std::string& name,
                                              const AllocatorReplayOptions& options = {});

// allocatorReplay() writing to stdout/stderr; returns the exit code. For tools/cli/main.cpp.
int runAllocatorReplay(const std::vector<std::string>& args);

} // namespace memscope
