// The caching allocator's settings and the parser of their text form, PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax
// (`key:value,key:value`, lists in brackets). Pure functions over plain values: any thread, no allocation after the
// parse, nothing thrown (a bad string comes back as an error naming the key and the reason).
//
// The rules come from c10/core/AllocatorConfig.{h,cpp} (AcceleratorAllocatorConfig::parseArgs and its parse*
// helpers, ConfigTokenizer) and c10/cuda/CUDAAllocatorConfig.cpp (the CUDA-only keys) of PyTorch 2.9+.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace memscope::agent {

// c10/core/CachingDeviceAllocator.h and c10/core/AllocatorConfig.h.
constexpr size_t MinBlockSize = 512; // kMinBlockSize: every size is rounded to a multiple of 512 B
constexpr size_t SmallSize = 1048576; // kSmallSize: the largest request served by the small pool (1 MiB)
constexpr size_t SmallBuffer = 2097152; // kSmallBuffer: small requests are packed into 2 MiB segments
constexpr size_t LargeBuffer = 20971520; // kLargeBuffer: 1-10 MiB requests share 20 MiB segments
constexpr size_t MinLargeAlloc = 10485760; // kMinLargeAlloc: from 10 MiB on, a request gets its own segment
constexpr size_t RoundLarge = 2097152; // kRoundLarge: such segments are rounded up to 2 MiB
constexpr size_t MiB = 1048576;

// AcceleratorAllocatorConfig: roundup_power2_divisions has one entry per power-of-two interval from 1 MiB
// (kRoundUpPowerOfTwoStart) to 64 GiB (kRoundUpPowerOfTwoEnd): 16 intervals.
constexpr size_t RoundUpPowerOfTwoIntervals = 16;

struct AllocatorConfig {
    // max_split_size_mb: blocks of at least this size are never split (SIZE_MAX: no limit, PyTorch's default).
    size_t maxSplitSize = std::numeric_limits<size_t>::max();
    // max_non_split_rounding_mb: how much bigger than the request an oversize cached block may be and still be
    // handed out whole (AcceleratorAllocatorConfig's default is kLargeBuffer).
    size_t maxNonSplitRoundingSize = LargeBuffer;
    // roundup_power2_divisions, per interval [2^(20+i), 2^(21+i)); 0 or 1 = plain 512 B rounding.
    std::array<size_t, RoundUpPowerOfTwoIntervals> roundupPower2Divisions {};
    // garbage_collection_threshold in (0, 1); 0 = off. Only acts when a memory fraction is set (PyTorch).
    double garbageCollectionThreshold = 0.0;
    bool expandableSegments = false;
    // per_process_memory_fraction (CUDA-only key): < 1 caps the bytes the allocator may reserve on a device.
    double perProcessMemoryFraction = 1.0;
    // Accepted for compatibility; they change nothing here.
    bool releaseLockOnMalloc = false;
    bool graphCaptureRecordStreamReuse = false;
    std::string text; // the string the settings were parsed from

    // AcceleratorAllocatorConfig::roundup_power2_divisions(size): the divisions for a request of `size` bytes.
    size_t roundupDivisionsFor(size_t size) const;
};

struct ConfigParse {
    bool ok = true;
    std::string error; // "<key>: <reason>" (or just the reason) when !ok
    AllocatorConfig config;
};

// Parses `text` in PYTORCH_CUDA_ALLOC_CONF syntax. Keys PyTorch knows but that only concern its other backends or
// pinned host memory are accepted and ignored; unknown keys, malformed values and values PyTorch refuses are errors.
ConfigParse parseAllocatorConfig(std::string_view text);

// MEMSCOPE_ALLOC_CONF, else PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF (the order PyTorch 2.9+ reads its own
// two), parsed; `source` receives the variable's name ("" when none is set). Reads the environment: call it once.
ConfigParse allocatorConfigFromEnvironment(std::string* source = nullptr);

// The settings as a snapshot's allocator_settings lists them (torch/csrc/cuda/memory_snapshot.cpp,
// _memory_snapshot_pickled: PYTORCH_CUDA_ALLOC_CONF, max_split_size (-1: none), garbage_collection_threshold,
// expandable_segments, the pinned-memory keys at PyTorch's defaults, release_lock_on_cudamalloc,
// graph_capture_record_stream_reuse, roundup_power2_divisions keyed "1", "2", ... "32768"), in the wire's
// `key=T:value` lines (common/wire/protocol.h, SettingsTopic).
std::string settingsLines(const AllocatorConfig& config);

} // namespace memscope::agent
