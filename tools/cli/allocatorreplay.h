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

// `args`: the command's arguments after "allocator-replay" (exactly one snapshot file).
AllocatorReplayOutput allocatorReplay(const std::vector<std::string>& args);
// The same for a loaded snapshot; `name` is how messages call it.
AllocatorReplayOutput allocatorReplaySnapshot(const model::Snapshot& snapshot, const std::string& name);

// allocatorReplay() writing to stdout/stderr; returns the exit code. For tools/cli/main.cpp.
int runAllocatorReplay(const std::vector<std::string>& args);

} // namespace memscope
