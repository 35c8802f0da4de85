// The snapshot schema: every dict key the SnapshotBuilder reads and the writers write, as one enum with its names.
// PyTorch defines these keys in torch/csrc/cuda/memory_snapshot.cpp (and _memory_viz.py for the legacy ones).
// Anything else in a file is kept as an extra. Pure data; any thread.
#pragma once

#include <cstdint>
#include <iterator>
#include <string_view>

namespace memscope::io::schema {

enum class Field : uint8_t {
    Unknown,
    Segments,
    DeviceTraces,
    AllocatorSettings,
    ExternalAnnotations,
    Device,
    Address,
    TotalSize,
    AllocatedSize,
    ActiveSize,
    RequestedSize,
    Stream,
    SegmentType,
    SegmentPoolId,
    IsExpandable,
    Frames,
    Blocks,
    Size,
    State,
    History,
    Action,
    Addr,
    TimeUs,
    CompileContext,
    UserMetadata,
    DeviceFree,
    Name,
    Filename,
    Line,
    RealSize,
    Stage,
    Count
};

constexpr std::string_view FieldNames[] = {
    "",
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
    "device",
    "address",
    "total_size",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_type",
    "segment_pool_id",
    "is_expandable",
    "frames",
    "blocks",
    "size",
    "state",
    "history",
    "action",
    "addr",
    "time_us",
    "compile_context",
    "user_metadata",
    "device_free",
    "name",
    "filename",
    "line",
    "real_size",
    "stage",
};
static_assert(std::size(FieldNames) == size_t(Field::Count));

// The Field named `key`, or Field::Unknown.
Field fieldFor(std::string_view key);

} // namespace memscope::io::schema
