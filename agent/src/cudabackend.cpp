// The CUDA driver backend. See cudabackend.h.
#include "cudabackend.h"

#include "cudadriver.h"
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
        cu::Result (*init)(unsigned) = nullptr;
        cu::Result (*deviceGetCount)(int*) = nullptr;
        cu::Result (*deviceGet)(cu::Device*, int) = nullptr;
        cu::Result (*deviceTotalMem)(size_t*, cu::Device) = nullptr;
        cu::Result (*primaryCtxRetain)(cu::Context*, cu::Device) = nullptr;
        cu::Result (*ctxPushCurrent)(cu::Context) = nullptr;
        cu::Result (*ctxPopCurrent)(cu::Context*) = nullptr;
        cu::Result (*ctxSynchronize)() = nullptr;
        cu::Result (*memAlloc)(cu::DeviceAddress*, size_t) = nullptr;
        cu::Result (*memFree)(cu::DeviceAddress) = nullptr;
        cu::Result (*memGetInfo)(size_t*, size_t*) = nullptr;
        cu::Result (*eventCreate)(cu::Event*, unsigned) = nullptr;
        cu::Result (*eventDestroy)(cu::Event) = nullptr;
        cu::Result (*eventRecord)(cu::Event, cu::Stream) = nullptr;
        cu::Result (*eventQuery)(cu::Event) = nullptr;
        cu::Result (*eventSynchronize)(cu::Event) = nullptr;
        cu::Result (*streamSynchronize)(cu::Stream) = nullptr;
        cu::Result (*memAddressReserve)(cu::DeviceAddress*, size_t, size_t, cu::DeviceAddress, unsigned long long) = nullptr;
        cu::Result (*memAddressFree)(cu::DeviceAddress, size_t) = nullptr;
        cu::Result (*memCreate)(cu::MemHandle*, size_t, const cu::MemAllocationProp*, unsigned long long)
            = nullptr;
        cu::Result (*memRelease)(cu::MemHandle) = nullptr;
        cu::Result (*memMap)(cu::DeviceAddress, size_t, size_t, cu::MemHandle, unsigned long long) = nullptr;
        cu::Result (*memUnmap)(cu::DeviceAddress, size_t) = nullptr;
        cu::Result (*memSetAccess)(cu::DeviceAddress, size_t, const cu::MemAccessDesc*, size_t) = nullptr;
    };

    template <class F> bool resolve(void* lib, const char* name, F& out)
    {
        out = reinterpret_cast<F>(::dlsym(lib, name));
        return out != nullptr;
    }

    // A failing driver call other than out-of-memory is reported on stderr, once per call site (STYLE.md: the
    // allocator keeps going, warns once).
    cu::Result warnIfFailed(cu::Result r, const char* what)
    {
        if (r != cu::Success && r != cu::ErrorOutOfMemory && r != cu::ErrorNotReady) {
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

    BackendStatus statusOf(cu::Result r)
    {
        if (r == cu::Success)
            return BackendStatus::Ok;
        return r == cu::ErrorOutOfMemory ? BackendStatus::OutOfMemory : BackendStatus::Error;
    }

    class CudaBackend final : public Backend {
    public:
        CudaBackend(const Driver& driver, std::vector<cu::Context> contexts, std::vector<cu::Device> devices)
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
            cu::DeviceAddress p = 0;
            const cu::Result r = MEMSCOPE_CU(m_cu.memAlloc(&p, size));
            if (r == cu::Success)
                *out = DevicePtr { static_cast<uintptr_t>(p) };
            return statusOf(r);
        }

        void release(int device, DevicePtr ptr, size_t) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.memFree(static_cast<cu::DeviceAddress>(raw(ptr))));
        }

        BackendStatus createEvent(int device, EventId* out) override
        {
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            cu::Event e = nullptr;
            const cu::Result r = MEMSCOPE_CU(m_cu.eventCreate(&e, cu::EventDisableTiming));
            if (r == cu::Success)
                *out = EventId { reinterpret_cast<uintptr_t>(e) };
            return statusOf(r);
        }

        void destroyEvent(int device, EventId event) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.eventDestroy(reinterpret_cast<cu::Event>(raw(event))));
        }

        BackendStatus recordEvent(int device, EventId event, StreamId stream) override
        {
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            return statusOf(MEMSCOPE_CU(m_cu.eventRecord(reinterpret_cast<cu::Event>(raw(event)), stream_(stream))));
        }

        bool queryEvent(int device, EventId event) override
        {
            Scope s(*this, device);
            // Anything but "not ready" counts as done, so that a broken event cannot pin a block forever.
            return !s.ok || MEMSCOPE_CU(m_cu.eventQuery(reinterpret_cast<cu::Event>(raw(event)))) != cu::ErrorNotReady;
        }

        void synchronizeEvent(int device, EventId event) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.eventSynchronize(reinterpret_cast<cu::Event>(raw(event))));
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
            cu::DeviceAddress p = 0;
            const cu::Result r = MEMSCOPE_CU(m_cu.memAddressReserve(&p, size, 0, 0, 0));
            if (r == cu::Success)
                *out = DevicePtr { static_cast<uintptr_t>(p) };
            return statusOf(r);
        }

        void freeAddressSpace(int device, DevicePtr base, size_t size) override
        {
            Scope s(*this, device);
            if (s.ok)
                MEMSCOPE_CU(m_cu.memAddressFree(static_cast<cu::DeviceAddress>(raw(base)), size));
        }

        BackendStatus mapPages(int device, DevicePtr addr, size_t pageSize, size_t count) override
        {
            // ExpandableSegment::map: one physical allocation per page (pinned device memory), released again if
            // any of them fails, then mapped and made accessible from the device.
            Scope s(*this, device);
            if (!s.ok)
                return BackendStatus::Error;
            cu::MemAllocationProp prop = {};
            prop.type = cu::MemAllocationTypePinned;
            prop.location.type = cu::MemLocationTypeDevice;
            prop.location.id = m_devices[size_t(device)];
            std::vector<cu::MemHandle> created;
            created.reserve(count);
            for (size_t i = 0; i < count; ++i) {
                cu::MemHandle h = 0;
                const cu::Result r = MEMSCOPE_CU(m_cu.memCreate(&h, pageSize, &prop, 0));
                if (r != cu::Success) {
                    for (cu::MemHandle c : created)
                        MEMSCOPE_CU(m_cu.memRelease(c));
                    return statusOf(r);
                }
                created.push_back(h);
            }
            const cu::DeviceAddress base = static_cast<cu::DeviceAddress>(raw(addr));
            for (size_t i = 0; i < count; ++i) {
                if (MEMSCOPE_CU(m_cu.memMap(base + i * pageSize, pageSize, 0, created[i], 0)) != cu::Success) {
                    for (size_t j = 0; j < i; ++j)
                        MEMSCOPE_CU(m_cu.memUnmap(base + j * pageSize, pageSize));
                    for (cu::MemHandle c : created)
                        MEMSCOPE_CU(m_cu.memRelease(c));
                    return BackendStatus::Error;
                }
            }
            cu::MemAccessDesc desc = {};
            desc.location.type = cu::MemLocationTypeDevice;
            desc.location.id = m_devices[size_t(device)];
            desc.flags = cu::MemAccessFlagsProtReadWrite;
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
            const cu::DeviceAddress base = static_cast<cu::DeviceAddress>(raw(addr));
            for (size_t i = 0; i < count; ++i) {
                const cu::DeviceAddress page = base + i * pageSize;
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
        static cu::Stream stream_(StreamId s) { return reinterpret_cast<cu::Stream>(raw(s)); }

        // Makes the device's primary context current for the scope of one call (what the runtime API does).
        struct Scope {
            Scope(CudaBackend& b, int device)
                : backend(b)
            {
                if (device < 0 || device >= b.deviceCount())
                    return;
                ok = MEMSCOPE_CU(b.m_cu.ctxPushCurrent(b.m_contexts[size_t(device)])) == cu::Success;
            }
            ~Scope()
            {
                if (ok) {
                    cu::Context popped = nullptr;
                    MEMSCOPE_CU(backend.m_cu.ctxPopCurrent(&popped));
                }
            }
            Scope(const Scope&) = delete;
            Scope& operator=(const Scope&) = delete;
            CudaBackend& backend;
            bool ok = false;
        };

        Driver m_cu;
        std::vector<cu::Context> m_contexts;
        std::vector<cu::Device> m_devices;
        std::mutex m_mutex;
        std::vector<std::map<cu::DeviceAddress, cu::MemHandle>> m_handles;
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
    if (d.init(0) != cu::Success)
        return fail("cuInit failed: no usable CUDA driver or device");
    int count = 0;
    if (d.deviceGetCount(&count) != cu::Success || count <= 0)
        return fail("no CUDA device");
    std::vector<cu::Context> contexts;
    std::vector<cu::Device> devices;
    for (int i = 0; i < count; ++i) {
        cu::Device dev = 0;
        cu::Context ctx = nullptr;
        if (d.deviceGet(&dev, i) != cu::Success || d.primaryCtxRetain(&ctx, dev) != cu::Success)
            return fail("cannot retain the primary context of CUDA device " + std::to_string(i));
        devices.push_back(dev);
        contexts.push_back(ctx);
    }
    // The dlopen handle stays open for the life of the process, like the driver itself.
    return std::make_unique<CudaBackend>(d, std::move(contexts), std::move(devices));
}

} // namespace memscope::agent
