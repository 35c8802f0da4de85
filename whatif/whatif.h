// `memscope-cli whatif SNAPSHOT --set KEY:VALUE ...`: what the job would have reserved, and which of its requests
// would have failed, under other allocator settings.
//
// The job's calls are recovered by the exact replay of allocator-replay (allocatorreplay.h: recoverJob), so only a
// trace that memscope's allocator replays exactly gets an answer; they are then made again, in the same order, to a
// fresh agent::CachingAllocator under the new settings, on a host backend whose segment addresses are made up.
// The requests stay the job's: a request that failed in the original is made and, if it succeeds now, freed at once
// (the job never held it); one that fails now but succeeded then is skipped with its free. A job that reacted to
// an OOM (a retry loop, a smaller batch) would have asked differently: the OOMs are listed so that the answer can be
// read with that in mind.
//
// Single-threaded; reads the file, writes nothing.
#pragma once

#include "allocatorreplay.h"

#include <optional>
#include <string>
#include <vector>

namespace memscope {

struct WhatIfOptions {
    AllocatorReplayOptions original; // how the file was made (its cap, the device's memory)
    // PYTORCH_CUDA_ALLOC_CONF settings applied over the file's own, in order ("expandable_segments:True").
    std::vector<std::string> sets;
    std::optional<size_t> cap; // the what-if's memory cap in bytes; unset: the original's (0 there: none)
    bool curves = false; // keep each run's reserved and allocated bytes after every call (MemoryOutcome::curve)
};

struct WhatIfDevice {
    int device = 0;
    MemoryOutcome original; // PyTorch's, as the file shows it
    MemoryOutcome baseline; // the replay under the file's own settings on made-up addresses: the error bar
    MemoryOutcome replayed; // the replay under the new settings
    size_t requests = 0; // the job's Malloc calls
    // The first request whose OOM the replay changes (one that would not happen, or a new one); `requests` when
    // none. Up to it the job's recorded requests are what either run makes; after it they are those of a job that
    // met (or did not meet) that OOM and went on as it did, which the other run may not repeat.
    size_t firstChangedOom = 0;
};

struct WhatIfResult {
    bool ok = false;
    std::string error; // when !ok: why there is no answer (names the input)
    std::string originalSettings; // the file's PYTORCH_CUDA_ALLOC_CONF
    std::string newSettings; // what the replay ran under, in the same syntax
    size_t originalCap = 0;
    bool originalCapInferred = false;
    size_t cap = 0; // the replay's
    std::vector<WhatIfDevice> devices;
};

WhatIfResult whatIf(const model::Snapshot& snapshot, const WhatIfOptions& options);
// The same from calls recovered already (recoverJob(snapshot, options.original)): a viewer recovers them once and
// asks for several settings.
WhatIfResult whatIf(const RecoveredJob& job, const WhatIfOptions& options);

// A segment of the replayed allocator and its blocks (free ones too), in address order.
struct WhatIfBlock {
    uintptr_t address = 0;
    size_t size = 0;
    bool allocated = false; // else free (or freed and waiting for a stream's use: active)
    bool active = false;
};
struct WhatIfSegment {
    uintptr_t address = 0; // made up, as the replay's addresses are
    size_t size = 0;
    bool large = true;
    bool expandable = false;
    std::vector<WhatIfBlock> blocks;
};
// The replayed allocator's segments on `device` after the job's last call that ended at or before trace entry
// `entry`, under the settings of `options`; empty with `error` set when the calls cannot be replayed.
std::vector<WhatIfSegment> whatIfStateAt(const RecoveredJob& job, const WhatIfOptions& options, int device, size_t entry,
                                         std::string* error = nullptr);

// The text and JSON forms (docs/whatif.md). `name`: how the text calls the file.
std::string whatIfText(const WhatIfResult& result, const std::string& name);
std::string whatIfJson(const std::vector<WhatIfResult>& results, const std::string& file);

struct WhatIfOutput {
    int exitCode = 0; // 0: answered; 1: no answer (unreadable, or not replayed exactly); 2: usage
    std::string out, err;
};
// `args`: after "whatif": FILE --set K:V ... [--sweep K:V1,V2,...] [--memory-limit B] [--device-memory B]
// [--cap B] [--format text|json].
WhatIfOutput whatIfCommand(const std::vector<std::string>& args);
int runWhatIf(const std::vector<std::string>& args);

} // namespace memscope
