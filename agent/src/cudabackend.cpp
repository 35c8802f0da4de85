// The CUDA driver backend. See cudabackend.h.
#include "cudabackend.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

namespace memscope::agent {

namespace {

    // The driver entry points, resolved by their versioned names (the ones the headers map the plain names to).
    struct Driver {
        CUresult (*init)(unsigned) = nullptr;
        CUresult (*deviceGetCount)(int*) = nullptr;
        CUresult (*deviceGet)(CUdevice*, int) = nullptr;
        CUresult (*deviceTotalMem)(size_t*, CUdevice) = nullptr;
        CUresult (*primaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
        CUresult (*ctxPushCurrent)(CUcontext) = nullptr;
        CUresult (*ctxPopCurrent)(CUcontext*) = nullptr;
        CUresult (*ctxSynchronize)() = nullptr;
        CUresult (*memAlloc)(CUdeviceptr*, size_t) = nullptr;
        CUresult (*memFree)(CUdeviceptr) = nullptr;
        CUresult (*memGetInfo)(size_t*, size_t*) = nullptr;
        CUresult (*eventCreate)(CUevent*, unsigned) = nullptr;
        CUresult (*eventDestroy)(CUevent) = nullptr;
        CUresult (*eventRecord)(CUevent, CUstream) = nullptr;
        CUresult (*eventQuery)(CUevent) = nullptr;
        CUresult (*eventSynchronize)(CUevent) = nullptr;
        CUresult (*streamSynchronize)(CUstream) = nullptr;
        CUresult (*memAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
        CUresult (*memAddressFree)(CUdeviceptr, size_t) = nullptr;
        CUresult (*memCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long)
            = nullptr;
        CUresult (*memRelease)(CUmemGenericAllocationHandle) = nullptr;
        CUresult (*memMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
        CUresult (*memUnmap)(CUdeviceptr, size_t) = nullptr;
        CUresult (*memSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
    };

    template <class F> bool resolve(void* lib, const char* name, F& out)
    {
        out = reinterpret_cast<F>(::dlsym(lib, name));
        return out != nullptr;
    }

    // A failing driver call other than out-of-memory is reported on stderr, once per call site (STYLE.md: the
    // allocator keeps going, warns once).
    CUresult warnIfFailed(CUresult r, const char* what)
    {
        if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && r != CUDA_ERROR_NOT_READY) {
            static std::mutex warnedMutex;
            static std::vector<const char*> warned;
            std::lock_guard lock(warnedMutex);
            if (std::find(warned.begin(), warned.end(), what) == warned.end()) {
                warned.push_back(what);
                std::fprintf(stderr, "memscope: %s failed with CUDA error %d (warned once)\n", what, int(r));
            }
        }
        return r;
    }
#define MEMSCOPE_CU(call) warnIfFailed((call), #call)

    BackendStatus statusOf(CUresult r)
    {
        if (r == CUDA_SUCCESS)
            return BackendStatus::Ok;
        return r == CUDA_ERROR_OUT_OF_MEMORY ? BackendStatus::OutOfMemory : BackendStatus::Error;
    }

    class CudaBackend final : public Backend {
    public:
        CudaBackend(const Driver& driver, std::vector<CUcontext> contexts, std::vector<CUdevice> devices)
            : m_cu(driver)
            , m_contexts(std::move(contexts))
            , m_devices(std::move(devices))
            , m_handles(m_devices.size())
        {
        }
        ~CudaBackend() override = default; // the driver stays loaded: other code in the process may use it

        int deviceCount() const override { return static_cast<int>(m_devices.size()); }

        MemoryInfo memoryInfo(int device) override
        {
            MemoryInfo info;
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.memGetInfo(&info.freeBytes, &info.totalBytes));
            return info;
        }

        BackendStatus allocate(int device, size_t size, StreamId, DevicePtr* out) override
        {
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            CUdeviceptr p = 0;
            const CUresult r = MEMSCOPE_CU(m_cu.memAlloc(&p, size));
            if (r == CUDA_SUCCESS)
                *out = DevicePtr { static_cast<uintptr_t>(p) };
            return statusOf(r);
        }

        void release(int device, DevicePtr ptr, size_t) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.memFree(static_cast<CUdeviceptr>(raw(ptr))));
        }

        BackendStatus createEvent(int device, EventId* out) override
        {
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            CUevent e = nullptr;
            const CUresult r = MEMSCOPE_CU(m_cu.eventCreate(&e, CU_EVENT_DISABLE_TIMING));
            if (r == CUDA_SUCCESS)
                *out = EventId { reinterpret_cast<uintptr_t>(e) };
            return statusOf(r);
        }

        void destroyEvent(int device, EventId event) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.eventDestroy(reinterpret_cast<CUevent>(raw(event))));
        }

        BackendStatus recordEvent(int device, EventId event, StreamId stream) override
        {
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            return statusOf(MEMSCOPE_CU(m_cu.eventRecord(reinterpret_cast<CUevent>(raw(event)), stream_(stream))));
        }

        bool queryEvent(int device, EventId event) override
        {
            Scope s(*this, device);
            // Anything but "not ready" counts as done, so that a broken event cannot pin a block forever.
            return !s.ok || MEMSCOPE_CU(m_cu.eventQuery(reinterpret_cast<CUevent>(raw(event)))) != CUDA_ERROR_NOT_READY;
        }

        void synchronizeEvent(int device, EventId event) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.eventSynchronize(reinterpret_cast<CUevent>(raw(event))));
        }

        void synchronizeStream(int device, StreamId stream) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.streamSynchronize(stream_(stream)));
        }

        void synchronizeDevice(int device) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.ctxSynchronize());
        }

        BackendStatus reserveAddressSpace(int device, size_t size, size_t alignment, DevicePtr* out) override
        {
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            // ExpandableSegment asks for no particular alignment (0): the driver aligns to its granularity, and it
            // refuses alignments that are not powers of two, such as the 20 MiB pages of the large pool.
            (void)alignment;
            CUdeviceptr p = 0;
            const CUresult r = MEMSCOPE_CU(m_cu.memAddressReserve(&p, size, 0, 0, 0));
            if (r == CUDA_SUCCESS)
                *out = DevicePtr { static_cast<uintptr_t>(p) };
            return statusOf(r);
        }

        void freeAddressSpace(int device, DevicePtr base, size_t size) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.memAddressFree(static_cast<CUdeviceptr>(raw(base)), size));
        }

        BackendStatus mapPages(int device, DevicePtr addr, size_t pageSize, size_t count) override
        {
            // ExpandableSegment::map: one physical allocation per page (pinned device memory), released again if
            // any of them fails, then mapped and made accessible from the device.
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            CUmemAllocationProp prop = {};
            prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
            prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            prop.location.id = m_devices[size_t(device)];
            std::vector<CUmemGenericAllocationHandle> created;
            created.reserve(count);
            for (size_t i = 0; i < count; ++i) {
                CUmemGenericAllocationHandle h = 0;
                const CUresult r = MEMSCOPE_CU(m_cu.memCreate(&h, pageSize, &prop, 0));
                if (r != CUDA_SUCCESS) {
                    for (CUmemGenericAllocationHandle c : created)
                        MEMSCOPE_CU(m_cu.memRelease(c));
                    return statusOf(r);
                }
                created.push_back(h);
            }
            const CUdeviceptr base = static_cast<CUdeviceptr>(raw(addr));
            for (size_t i = 0; i < count; ++i) {
                if (MEMSCOPE_CU(m_cu.memMap(base + i * pageSize, pageSize, 0, created[i], 0)) != CUDA_SUCCESS) {
                    for (size_t j = 0; j < i; ++j)
                        MEMSCOPE_CU(m_cu.memUnmap(base + j * pageSize, pageSize));
                    for (CUmemGenericAllocationHandle c : created)
                        MEMSCOPE_CU(m_cu.memRelease(c));
                    return BackendStatus::Error;
                }
            }
            CUmemAccessDesc desc = {};
            desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
            desc.location.id = m_devices[size_t(device)];
            desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
            MEMSCOPE_CU(m_cu.memSetAccess(base, pageSize * count, &desc, 1));
            std::lock_guard lock(m_mutex);
            for (size_t i = 0; i < count; ++i)
                m_handles[size_t(device)][base + i * pageSize] = created[i];
            return BackendStatus::Ok;
        }

        void unmapPages(int device, DevicePtr addr, size_t pageSize, size_t count) override
        {
            // ExpandableSegment::unmapHandles (the caller has synchronised the stream).
            Scope s(*this, device);
            if (!s.ok)
                return;
            const CUdeviceptr base = static_cast<CUdeviceptr>(raw(addr));
            for (size_t i = 0; i < count; ++i) {
                const CUdeviceptr page = base + i * pageSize;
                MEMSCOPE_CU(m_cu.memUnmap(page, pageSize));
                std::lock_guard lock(m_mutex);
                auto& handles = m_handles[size_t(device)];
                auto it = handles.find(page);
                if (it != handles.end()) {
                    MEMSCOPE_CU(m_cu.memRelease(it->second));
                    handles.erase(it);
                }
            }
        }

    private:
        static CUstream stream_(StreamId s) { return reinterpret_cast<CUstream>(raw(s)); }

        // Makes the device's primary context current for the scope of one call (what the runtime API does).
        struct Scope {
            Scope(CudaBackend& b, int device)
                : backend(b)
            {
                if (device < 0 || device >= b.deviceCount())
                    return;
                ok = MEMSCOPE_CU(b.m_cu.ctxPushCurrent(b.m_contexts[size_t(device)])) == CUDA_SUCCESS;
            }
            ~Scope()
            {
                if (ok) {
                    CUcontext popped = nullptr;
                    MEMSCOPE_CU(backend.m_cu.ctxPopCurrent(&popped));
                }
            }
            Scope(const Scope&) = delete;
            Scope& operator=(const Scope&) = delete;
            CudaBackend& backend;
            bool ok = false;
        };

        Driver m_cu;
        std::vector<CUcontext> m_contexts;
        std::vector<CUdevice> m_devices;
        std::mutex m_mutex;
        std::vector<std::map<CUdeviceptr, CUmemGenericAllocationHandle>> m_handles;
    };

} // namespace

std::unique_ptr<Backend> createCudaBackend(std::string* error)
{
    auto fail = [&](const std::string& why) {
        if (error)
            *error = why;
        return std::unique_ptr<Backend>();
    };
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = ::dlerror();
        return fail(std::string("cannot load the CUDA driver (libcuda.so.1): ") + (why ? why : "unknown error"));
    }
    Driver d;
    const bool resolved = resolve(lib, "cuInit", d.init) && resolve(lib, "cuDeviceGetCount", d.deviceGetCount)
        && resolve(lib, "cuDeviceGet", d.deviceGet) && resolve(lib, "cuDeviceTotalMem_v2", d.deviceTotalMem)
        && resolve(lib, "cuDevicePrimaryCtxRetain", d.primaryCtxRetain)
        && resolve(lib, "cuCtxPushCurrent_v2", d.ctxPushCurrent) && resolve(lib, "cuCtxPopCurrent_v2", d.ctxPopCurrent)
        && resolve(lib, "cuCtxSynchronize", d.ctxSynchronize) && resolve(lib, "cuMemAlloc_v2", d.memAlloc)
        && resolve(lib, "cuMemFree_v2", d.memFree) && resolve(lib, "cuMemGetInfo_v2", d.memGetInfo)
        && resolve(lib, "cuEventCreate", d.eventCreate) && resolve(lib, "cuEventDestroy_v2", d.eventDestroy)
        && resolve(lib, "cuEventRecord", d.eventRecord) && resolve(lib, "cuEventQuery", d.eventQuery)
        && resolve(lib, "cuEventSynchronize", d.eventSynchronize)
        && resolve(lib, "cuStreamSynchronize", d.streamSynchronize)
        && resolve(lib, "cuMemAddressReserve", d.memAddressReserve)
        && resolve(lib, "cuMemAddressFree", d.memAddressFree) && resolve(lib, "cuMemCreate", d.memCreate)
        && resolve(lib, "cuMemRelease", d.memRelease) && resolve(lib, "cuMemMap", d.memMap)
        && resolve(lib, "cuMemUnmap", d.memUnmap) && resolve(lib, "cuMemSetAccess", d.memSetAccess);
    if (!resolved)
        return fail("the CUDA driver in libcuda.so.1 lacks an entry point memscope needs (driver too old?)");
    if (d.init(0) != CUDA_SUCCESS)
        return fail("cuInit failed: no usable CUDA driver or device");
    int count = 0;
    if (d.deviceGetCount(&count) != CUDA_SUCCESS || count <= 0)
        return fail("no CUDA device");
    std::vector<CUcontext> contexts;
    std::vector<CUdevice> devices;
    for (int i = 0; i < count; ++i) {
        CUdevice dev = 0;
        CUcontext ctx = nullptr;
        if (d.deviceGet(&dev, i) != CUDA_SUCCESS || d.primaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
            return fail("cannot retain the primary context of CUDA device " + std::to_string(i));
        devices.push_back(dev);
        contexts.push_back(ctx);
    }
    // The dlopen handle stays open for the life of the process, like the driver itself.
    return std::make_unique<CudaBackend>(d, std::move(contexts), std::move(devices));
}

} // namespace memscope::agent
