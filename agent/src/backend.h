// The device interface under the caching allocator: what PyTorch's CUDACachingAllocator asks of the CUDA runtime
// and driver (cudaMalloc/cudaFree, events, cudaMemGetInfo, and for expandable segments cuMemAddressReserve,
// cuMemCreate + cuMemMap + cuMemSetAccess, cuMemUnmap + cuMemRelease). Two implementations: HostBackend (no GPU;
// fake streams and events, scriptable for the decision oracle) and CudaBackend (the real thing, loaded at run time).
//
// Threads: the allocator calls a backend while holding the lock of one device; calls for different devices may
// come from different threads at once, so an implementation guards whatever it shares between devices. Nothing here
// is on the allocator's hot path (a cached block is handed out without calling the backend). Nothing throws.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memscope::agent {

// Raw device addresses, stream handles (cudaStream_t; 0 is the legacy default stream) and event handles, kept
// apart by type so that they cannot be mixed up across module boundaries.
enum class DevicePtr : uintptr_t {};
enum class StreamId : uintptr_t {};
enum class EventId : uintptr_t {};

constexpr uintptr_t raw(DevicePtr p) { return static_cast<uintptr_t>(p); }
constexpr uintptr_t raw(StreamId s) { return static_cast<uintptr_t>(s); }
constexpr uintptr_t raw(EventId e) { return static_cast<uintptr_t>(e); }

enum class BackendStatus : uint8_t {
    Ok,
    OutOfMemory, // cudaErrorMemoryAllocation / CUDA_ERROR_OUT_OF_MEMORY: the allocator may free cache and retry
    Error, // anything else: the allocator gives up at once (PyTorch's C10_CUDA_CHECK would throw)
};

struct MemoryInfo {
    size_t freeBytes = 0;
    size_t totalBytes = 0;
};

class Backend {
public:
    virtual ~Backend() = default;

    virtual int deviceCount() const = 0;
    // cudaMemGetInfo for `device`.
    virtual MemoryInfo memoryInfo(int device) = 0;

    // cudaMalloc: `size` bytes on `device` for use on `stream` (the stream only informs scripted backends).
    virtual BackendStatus allocate(int device, size_t size, StreamId stream, DevicePtr* out) = 0;
    // cudaFree of a pointer allocate() returned, with its size.
    virtual void release(int device, DevicePtr ptr, size_t size) = 0;

    // Events (cudaEventCreateWithFlags(DisableTiming), cudaEventRecord, cudaEventQuery, cudaEventSynchronize).
    virtual BackendStatus createEvent(int device, EventId* out) = 0;
    virtual void destroyEvent(int device, EventId event) = 0;
    virtual BackendStatus recordEvent(int device, EventId event, StreamId stream) = 0;
    // True when every piece of work recorded before the event has finished.
    virtual bool queryEvent(int device, EventId event) = 0;
    virtual void synchronizeEvent(int device, EventId event) = 0;
    // cudaStreamSynchronize / cudaDeviceSynchronize, before physical pages are unmapped.
    virtual void synchronizeStream(int device, StreamId stream) = 0;
    virtual void synchronizeDevice(int device) = 0;

    // Expandable segments. Reserve `size` bytes of device address space (no memory behind it).
    virtual BackendStatus reserveAddressSpace(int device, size_t size, size_t alignment, DevicePtr* out) = 0;
    virtual void freeAddressSpace(int device, DevicePtr base, size_t size) = 0;
    // Create `count` physical pages of `pageSize` bytes and map them at [addr, addr + count * pageSize), readable
    // and writable from `device`. All or nothing: on OutOfMemory nothing stays created or mapped.
    virtual BackendStatus mapPages(int device, DevicePtr addr, size_t pageSize, size_t count) = 0;
    // Unmap and release the pages at [addr, addr + count * pageSize), all of which mapPages() mapped.
    virtual void unmapPages(int device, DevicePtr addr, size_t pageSize, size_t count) = 0;
};

} // namespace memscope::agent
