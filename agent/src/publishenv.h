// The publisher's settings a job gives through its environment (docs/protocol.md, "Agent settings"): each read
// once, when a publisher is made or started, checked, and a bad value named on stderr with the default used
// instead (the job runs on either way). MEMSCOPE_STACKS is stacks.h's, MEMSCOPE_CLOCK clock.h's. Any thread; they
// allocate, so never on the allocator's hot path.
#pragma once

#include <cstddef>
#include <string>

namespace memscope::agent {

// MEMSCOPE_RING_RECORDS: records per device's ring, from 2 to `most`; unset or bad: `fallback`.
size_t ringRecordsFromEnvironment(size_t fallback, size_t most);
// MEMSCOPE_VIEWER_BUFFER_MB: bytes of batches the job may hold for one viewer, 1 to 65536 MiB; unset or bad:
// `fallback`.
size_t viewerBufferFromEnvironment(size_t fallback);
// MEMSCOPE_COMPRESS=lz4|none; unset or bad: LZ4 on tcp:// endpoints only (the bytes cross a network there; on ipc
// the copy is cheaper than the compression).
bool compressionFromEnvironment(const std::string& endpoint);
// MEMSCOPE_INSECURE_TCP=1: the user accepts a loopback tcp endpoint without CURVE keys (every local user can
// connect to it); any other value is named on stderr and counts as unset.
bool insecureTcpFromEnvironment();
// `given` when not empty, else the variable `name` (MEMSCOPE_CURVE_SECRET, MEMSCOPE_CURVE_CLIENTS), else "".
std::string fileFromEnvironment(const std::string& given, const char* name);

} // namespace memscope::agent
