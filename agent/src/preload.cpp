// libmemscope-preload.so: LD_PRELOAD it into any CUDA program (one linked against the shared libcudart /
// libcuda; a statically linked cudart calls its own copies and is not seen) to publish every cudaMalloc /
// cudaFree / cudaMallocAsync / cudaFreeAsync / cuMemAlloc_v2 / cuMemFree_v2 as a SegmentAlloc / SegmentFree event
// over the agent's ring and publisher (publisher.h; endpoint from MEMSCOPE_ENDPOINT, MEMSCOPE_PUBLISH=0 turns it
// off).
//
// Each wrapper calls the next definition (dlsym(RTLD_NEXT)) and returns its result unchanged; only successful calls
// are published. A thread-local guard keeps calls made from inside a wrapper (a cudart that goes through cuMemAlloc,
// the publisher's own set-up) from being published twice. Set-up is lazy, on the first call. The hot path takes one
// mutex (the ring's single-producer lock), writes one ring record and one slot of a preallocated pointer -> size
// table (cudaFree does not say the size); it never allocates. A full table publishes frees with size 0.
//
// The publisher's state replies (ROUTER) describe an allocator that is not used here, so they are empty: a viewer
// sees the segments from the events it receives after connecting.
#include "hostbackend.h"
#include "publisher.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <dlfcn.h>
#include <pthread.h>

#define MEMSCOPE_PRELOAD_EXPORT extern "C" __attribute__((visibility("default")))

// The interposed entry points, with ABI-identical types (cudaError_t / CUresult are ints, CUdeviceptr is an
// unsigned long long, cudaStream_t a pointer): no CUDA header needed.
MEMSCOPE_PRELOAD_EXPORT int cudaMalloc(void** devPtr, size_t size);
MEMSCOPE_PRELOAD_EXPORT int cudaFree(void* devPtr);
MEMSCOPE_PRELOAD_EXPORT int cudaMallocAsync(void** devPtr, size_t size, void* stream);
MEMSCOPE_PRELOAD_EXPORT int cudaFreeAsync(void* devPtr, void* stream);
MEMSCOPE_PRELOAD_EXPORT int cuMemAlloc_v2(unsigned long long* dptr, size_t bytesize);
MEMSCOPE_PRELOAD_EXPORT int cuMemFree_v2(unsigned long long dptr);

namespace memscope::agent {
namespace {

    using CudaMallocFn = int (*)(void**, size_t);
    using CudaFreeFn = int (*)(void*);
    using CudaMallocAsyncFn = int (*)(void**, size_t, void*);
    using CudaFreeAsyncFn = int (*)(void*, void*);
    using CuMemAllocFn = int (*)(unsigned long long*, size_t);
    using CuMemFreeFn = int (*)(unsigned long long);
    using GetDeviceFn = int (*)(int*);

    constexpr int MaxDevices = 8;
    constexpr int NotFoundError = 999; // cudaErrorUnknown; CUDA_ERROR_UNKNOWN is 999 too

    __attribute__((tls_model("initial-exec"))) thread_local bool t_inside = false;

    struct Guard {
        bool entered;
        Guard()
            : entered(!t_inside)
        {
            t_inside = true;
        }
        ~Guard()
        {
            if (entered)
                t_inside = false;
        }
    };

    template <typename Fn> Fn next(const char* name) { return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name)); }

    // Open addressing, linear probing, tombstones; preallocated once.
    class SizeTable {
    public:
        static constexpr size_t Capacity = size_t(1) << 16;
        struct Slot {
            uintptr_t key; // 0 empty, 1 tombstone
            size_t size;
        };
        SizeTable()
            : m_slots(static_cast<Slot*>(std::calloc(Capacity, sizeof(Slot))))
        {
        }
        bool ok() const { return m_slots != nullptr; }
        void insert(uintptr_t key, size_t size) noexcept
        {
            if (key <= 1)
                return;
            size_t i = hash(key);
            for (size_t n = 0; n < Capacity; ++n, i = (i + 1) & (Capacity - 1)) {
                if (m_slots[i].key <= 1 || m_slots[i].key == key) {
                    m_slots[i] = { key, size };
                    return;
                }
            }
        }
        size_t take(uintptr_t key) noexcept
        {
            if (key <= 1)
                return 0;
            size_t i = hash(key);
            for (size_t n = 0; n < Capacity; ++n, i = (i + 1) & (Capacity - 1)) {
                if (m_slots[i].key == key) {
                    m_slots[i].key = 1;
                    return m_slots[i].size;
                }
                if (m_slots[i].key == 0)
                    return 0;
            }
            return 0;
        }

    private:
        static size_t hash(uintptr_t key) { return size_t((key >> 9) * 0x9E3779B97F4A7C15ull >> 48) & (Capacity - 1); }
        Slot* m_slots;
    };

    struct Tracker {
        std::unique_ptr<HostBackend> backend;
        std::unique_ptr<CachingAllocator> allocator;
        Publisher* publisher = nullptr;
        SizeTable sizes;
        std::mutex lock;
        GetDeviceFn cudaGetDevice = nullptr;
        GetDeviceFn cuCtxGetDevice = nullptr;
    };

    void stopAtExit();
    void disableInChild();

    Tracker* createTracker()
    {
        const char* publish = std::getenv("MEMSCOPE_PUBLISH");
        if (publish && std::strcmp(publish, "0") == 0)
            return nullptr;
        try {
            auto* t = new Tracker; // leaked on purpose: frees arrive during exit
            if (!t->sizes.ok())
                return nullptr;
            HostBackend::Options options;
            options.deviceCount = MaxDevices;
            options.scripted = true; // never maps anything: it only gives the publisher its device count
            t->backend = std::make_unique<HostBackend>(options);
            t->allocator = std::make_unique<CachingAllocator>(*t->backend, AllocatorConfig {});
            PublisherOptions po;
            if (const char* endpoint = std::getenv("MEMSCOPE_ENDPOINT"))
                po.endpoint = endpoint;
            auto* p = new Publisher(*t->allocator, po);
            std::string why;
            if (!p->start(&why)) {
                std::fprintf(stderr, "memscope-preload: not publishing events: %s\n", why.c_str());
                delete p;
                return nullptr;
            }
            t->publisher = p;
            t->cudaGetDevice = reinterpret_cast<GetDeviceFn>(dlsym(RTLD_DEFAULT, "cudaGetDevice"));
            t->cuCtxGetDevice = reinterpret_cast<GetDeviceFn>(dlsym(RTLD_DEFAULT, "cuCtxGetDevice"));
            std::atexit(stopAtExit);
            pthread_atfork(nullptr, nullptr, disableInChild);
            return t;
        } catch (...) {
            std::fprintf(stderr, "memscope-preload: set-up failed; not publishing events\n");
            return nullptr;
        }
    }

    Tracker* tracker()
    {
        static Tracker* instance = createTracker(); // under the guard: nothing it calls is published
        return instance;
    }

    void stopAtExit()
    {
        if (Tracker* t = tracker())
            t->publisher->stop(200);
    }

    void disableInChild()
    {
        if (Tracker* t = tracker())
            t->publisher->disableAfterFork();
    }

    int currentDevice(Tracker& t, bool driver)
    {
        int device = 0;
        GetDeviceFn fn = driver ? t.cuCtxGetDevice : t.cudaGetDevice;
        if (fn && fn(&device) != 0)
            device = 0;
        return device >= 0 && device < MaxDevices ? device : 0;
    }

    void record(TraceAction action, uintptr_t addr, size_t size, void* stream, bool driver) noexcept
    {
        try {
            Tracker* t = tracker();
            if (!t)
                return;
            TraceEvent e;
            e.action = action;
            e.device = currentDevice(*t, driver);
            e.addr = addr;
            e.stream = StreamId { reinterpret_cast<uintptr_t>(stream) };
            std::lock_guard lock(t->lock);
            if (action == TraceAction::SegmentAlloc) {
                t->sizes.insert(addr, size);
                e.size = size;
            } else {
                e.size = t->sizes.take(addr);
            }
            t->publisher->onTraceEvent(e);
        } catch (...) {
        }
    }

} // namespace
} // namespace memscope::agent

using namespace memscope::agent;

MEMSCOPE_PRELOAD_EXPORT int cudaMalloc(void** devPtr, size_t size)
{
    static const auto real = next<CudaMallocFn>("cudaMalloc");
    if (!real)
        return NotFoundError;
    Guard guard;
    const int rc = real(devPtr, size);
    if (guard.entered && rc == 0 && devPtr && *devPtr)
        record(TraceAction::SegmentAlloc, reinterpret_cast<uintptr_t>(*devPtr), size, nullptr, false);
    return rc;
}

MEMSCOPE_PRELOAD_EXPORT int cudaFree(void* devPtr)
{
    static const auto real = next<CudaFreeFn>("cudaFree");
    if (!real)
        return NotFoundError;
    Guard guard;
    const int rc = real(devPtr);
    if (guard.entered && rc == 0 && devPtr)
        record(TraceAction::SegmentFree, reinterpret_cast<uintptr_t>(devPtr), 0, nullptr, false);
    return rc;
}

MEMSCOPE_PRELOAD_EXPORT int cudaMallocAsync(void** devPtr, size_t size, void* stream)
{
    static const auto real = next<CudaMallocAsyncFn>("cudaMallocAsync");
    if (!real)
        return NotFoundError;
    Guard guard;
    const int rc = real(devPtr, size, stream);
    if (guard.entered && rc == 0 && devPtr && *devPtr)
        record(TraceAction::SegmentAlloc, reinterpret_cast<uintptr_t>(*devPtr), size, stream, false);
    return rc;
}

MEMSCOPE_PRELOAD_EXPORT int cudaFreeAsync(void* devPtr, void* stream)
{
    static const auto real = next<CudaFreeAsyncFn>("cudaFreeAsync");
    if (!real)
        return NotFoundError;
    Guard guard;
    const int rc = real(devPtr, stream);
    if (guard.entered && rc == 0 && devPtr)
        record(TraceAction::SegmentFree, reinterpret_cast<uintptr_t>(devPtr), 0, stream, false);
    return rc;
}

MEMSCOPE_PRELOAD_EXPORT int cuMemAlloc_v2(unsigned long long* dptr, size_t bytesize)
{
    static const auto real = next<CuMemAllocFn>("cuMemAlloc_v2");
    if (!real)
        return NotFoundError;
    Guard guard;
    const int rc = real(dptr, bytesize);
    if (guard.entered && rc == 0 && dptr && *dptr)
        record(TraceAction::SegmentAlloc, uintptr_t(*dptr), bytesize, nullptr, true);
    return rc;
}

MEMSCOPE_PRELOAD_EXPORT int cuMemFree_v2(unsigned long long dptr)
{
    static const auto real = next<CuMemFreeFn>("cuMemFree_v2");
    if (!real)
        return NotFoundError;
    Guard guard;
    const int rc = real(dptr);
    if (guard.entered && rc == 0 && dptr)
        record(TraceAction::SegmentFree, uintptr_t(dptr), 0, nullptr, true);
    return rc;
}
