// Snapshot dumps: the allocator's state written as a torch.cuda.memory._snapshot() pickle (protocol 2), with no
// dependency on common/model (STYLE.md): a minimal pickle writer for the snapshot dict only. Files are written
// beside the target and renamed into place. Not on the hot path: everything here allocates.
//
// Triggers (agentapi.cpp): memscope_dump_snapshot(path); SIGUSR2 (the handler only posts a semaphore, the
// "memscope-dump" thread writes); and, when MEMSCOPE_DUMP_ON contains "oom" / "exit", a failed allocation / the
// process's exit. MEMSCOPE_DUMP_PATH names a file, or a folder (existing, or ending in '/') that gets
// memscope-<pid>-<n>.pickle; default: the current folder.
#pragma once

#include "allocator.h"
#include "eventsource.h"

#include <functional>
#include <string>
#include <vector>

namespace memscope::agent {

struct DumpSettings {
    bool onOom = false;
    bool onExit = false;
    std::string path; // MEMSCOPE_DUMP_PATH ("" = current folder)
};
DumpSettings dumpSettingsFromEnvironment();

// Names a block's stack (BlockInfo::stackId, the id the publisher gave its allocation) for a dump: its frames,
// innermost first; empty when unknown. Any thread.
using StackNamer = std::function<std::vector<SymbolFrame>(uint32_t stackId)>;

// The pickle bytes of a snapshot of `segments` (device_traces empty per device, allocator_settings from config);
// each active block's "frames" are what `namer` (when given) says of its stack, as the published events have it.
std::string encodeSnapshotPickle(const std::vector<SegmentInfo>& segments, int deviceCount,
                                 const AllocatorConfig& config, const StackNamer& namer = {});
// Where a dump goes: `path` itself when it names a file, else <path>/memscope-<pid>-<n>.pickle.
std::string dumpTarget(const std::string& path);
// Snapshots `allocator` and writes it atomically to dumpTarget(path); *written = the file. False + *error on failure.
bool dumpSnapshot(const CachingAllocator& allocator, const std::string& path, std::string* written,
                  std::string* error, const StackNamer& namer = {});
// Installs a SIGUSR2 handler (unless the host has one) and the thread that writes a dump to `path` each time.
void installDumpSignal(const CachingAllocator& allocator, const std::string& path, StackNamer namer = {});

} // namespace memscope::agent
