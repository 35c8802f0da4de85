// The C API of memscope/agent.h over one process-wide CachingAllocator. Set up once, on first use, from the
// environment; never torn down (like PyTorch's allocator, it must outlive every tensor freed at exit). Every
// entry point catches everything: nothing crosses the C ABI but return values.
//
// Publishing: libmemscope-agent.so publishes its events (publisher.h) from the allocator's first use on, unless
// MEMSCOPE_PUBLISH=0; MEMSCOPE_ENDPOINT names the endpoint (default: defaultEndpoint(), endpointpolicy.h) and
// MEMSCOPE_RING_RECORDS the ring's size. The static core (tests, tools) publishes only after memscope_publish_start.
#include "memscope/agent.h"

#include "allocator.h"
#include "config.h"
#include "dump.h"
#include "hostbackend.h"
#include "observer.h"
#include "publisher.h"
#include "pythonstacks.h"
#include "cudabackend.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>

#include <pthread.h>

// Defined (returning true) only by libmemscope-agent.so (sharedpublish.cpp): whether publishing is on by default.
extern "C" [[gnu::weak, gnu::visibility("hidden")]] bool memscopeAgentPublishesByDefault();

namespace memscope::agent {
namespace {

    struct Agent {
        std::unique_ptr<Backend> backend;
        std::unique_ptr<CachingAllocator> allocator;
        const char* backendName = "none";
        std::string error; // why there is no allocator
        DumpSettings dump; // MEMSCOPE_DUMP_ON / MEMSCOPE_DUMP_PATH (dump.h)
        std::mutex publishMutex; // start/stop only; never taken by malloc/free
        // The current publisher. Old ones are leaked on purpose: an allocator thread may still be inside their
        // onTraceEvent, and at exit a stopped thread may still be flushing.
        std::atomic<Publisher*> publisher { nullptr };
    };

    thread_local std::string t_lastError;

    void setError(std::string message) { t_lastError = std::move(message); }

    Agent& agent();

    void stopPublishingAtExit()
    {
        // Bounded: the host never waits more than 200 ms for the Goodbye to leave.
        if (Publisher* p = agent().publisher.load())
            p->stop(200);
    }

    void disablePublishingInChild()
    {
        // pthread_atfork child handler: the publisher thread did not survive the fork, and two processes must
        // not publish as one; the child allocates on, silently.
        if (Publisher* p = agent().publisher.load())
            p->disableAfterFork();
    }

    // A dump's blocks carry the stacks the publisher gave their allocations (dump.h, StackNamer).
    std::vector<SymbolFrame> publishedStack(uint32_t stackId)
    {
        Publisher* p = agent().publisher.load(std::memory_order_acquire);
        return p ? p->stackFrames(stackId) : std::vector<SymbolFrame> {};
    }

    void dumpAtExit()
    {
        Agent& a = agent();
        std::string written, why;
        if (a.allocator && !dumpSnapshot(*a.allocator, a.dump.path, &written, &why, publishedStack))
            std::fprintf(stderr, "memscope: snapshot dump at exit failed: %s\n", why.c_str());
    }

    // Starts a publisher on `endpoint` (empty: the default) for `a`. The caller holds a.publishMutex.
    bool startPublishing(Agent& a, const std::string& endpoint, std::string* error)
    {
        if (!a.allocator) {
            *error = a.error;
            return false;
        }
        PublisherOptions options; // ring size and compression from the environment (publisher.h)
        options.endpoint = endpoint;
        if (Publisher* old = a.publisher.load())
            old->stop(200);
        auto* p = new Publisher(*a.allocator, options);
        if (!p->start(error)) {
            delete p;
            return false;
        }
        static std::once_flag registered;
        std::call_once(registered, [] {
            std::atexit(stopPublishingAtExit);
            pthread_atfork(nullptr, nullptr, disablePublishingInChild);
        });
        a.publisher.store(p);
        a.allocator->setTraceObserver(p);
        return true;
    }

    Agent* createAgent()
    {
        auto* agent = new Agent; // leaked on purpose: frees may arrive during process exit
        std::string source;
        ConfigParse config = allocatorConfigFromEnvironment(&source);
        if (!config.ok) {
            agent->error = "memscope: bad allocator settings: " + config.error;
            std::fprintf(stderr, "%s\n", agent->error.c_str());
            return agent;
        }
        const char* wanted = std::getenv("MEMSCOPE_AGENT_BACKEND");
        const std::string choice = wanted ? wanted : "";
        std::string cudaError;
        if (choice.empty() || choice == "cuda") {
            agent->backend = createCudaBackend(&cudaError);
            if (agent->backend) {
                agent->backendName = "cuda";
            } else if (choice == "cuda") {
                agent->error = "memscope: MEMSCOPE_AGENT_BACKEND=cuda but " + cudaError;
                std::fprintf(stderr, "%s\n", agent->error.c_str());
                return agent;
            }
        } else if (choice != "host") {
            agent->error = "memscope: MEMSCOPE_AGENT_BACKEND must be cuda or host, not '" + choice + "'";
            std::fprintf(stderr, "%s\n", agent->error.c_str());
            return agent;
        }
        if (!agent->backend) {
            if (choice.empty())
                std::fprintf(stderr, "memscope: %s; using the host backend (no GPU memory)\n", cudaError.c_str());
            agent->backend = std::make_unique<HostBackend>();
            agent->backendName = "host";
        }
        agent->allocator = std::make_unique<CachingAllocator>(*agent->backend, config.config);
        const char* publish = std::getenv("MEMSCOPE_PUBLISH");
        const bool byDefault = memscopeAgentPublishesByDefault && memscopeAgentPublishesByDefault();
        agent->dump = dumpSettingsFromEnvironment();
        const char* dumpOn = std::getenv("MEMSCOPE_DUMP_ON");
        if (byDefault || (dumpOn && std::strstr(dumpOn, "signal")))
            installDumpSignal(*agent->allocator, agent->dump.path, publishedStack); // SIGUSR2, unless the host has it
        if (agent->dump.onExit)
            std::atexit(dumpAtExit);
        if (byDefault && !(publish && std::strcmp(publish, "0") == 0)) {
            // Telemetry failing never stops the allocator: warn once and allocate on.
            const char* endpoint = std::getenv("MEMSCOPE_ENDPOINT");
            std::string why;
            std::lock_guard lock(agent->publishMutex);
            if (!startPublishing(*agent, endpoint ? endpoint : "", &why))
                std::fprintf(stderr, "memscope: not publishing events: %s\n", why.c_str());
        }
        return agent;
    }

    Agent& agent()
    {
        static Agent* instance = createAgent();
        return *instance;
    }

    CachingAllocator* allocatorOrError()
    {
        Agent& a = agent();
        if (!a.allocator)
            setError(a.error);
        return a.allocator.get();
    }

    void warnOnce(std::atomic<bool>& flag, const char* message)
    {
        if (!flag.exchange(true))
            std::fprintf(stderr, "memscope: %s (warned once)\n", message);
    }

    std::atomic<bool> g_warnedBadFree { false };

    enum class OutOfMemoryKind : uint8_t { None, OutOfMemory, Other };

    // What memscope_malloc_raising throws when the device is out of memory: a std::bad_alloc (it is an allocation
    // failure) whose what() is PyTorch's own "CUDA out of memory. Tried to allocate ..." text.
    class OutOfMemory final : public std::bad_alloc {
    public:
        explicit OutOfMemory(std::string message)
            : m_message(std::move(message))
        {
        }
        const char* what() const noexcept override { return m_message.c_str(); }

    private:
        std::string m_message;
    };

    // memscope_malloc's work. A block, or nullptr with *failure saying why (empty for size 0, which is no failure:
    // NativeCachingAllocator::allocate hands out no block for 0 bytes). On out of memory the allocator has published
    // the Oom event already (under its lock); here the dump is written (MEMSCOPE_DUMP_ON=oom) and one line goes to
    // stderr, so that the job's log says what happened even when the caller (torch's CUDAPluggableAllocator) does
    // not look at the NULL.
    void* allocateOrDescribe(size_t size, int device, void* stream, std::string* failure,
                             OutOfMemoryKind* kind = nullptr)
    {
        if (size == 0)
            return nullptr;
        CachingAllocator* a = allocatorOrError();
        if (!a) {
            *failure = t_lastError;
            if (kind)
                *kind = OutOfMemoryKind::Other;
            return nullptr;
        }
        const MallocResult r = a->malloc(device, size, StreamId { reinterpret_cast<uintptr_t>(stream) });
        if (r.status == Status::Ok)
            return reinterpret_cast<void*>(raw(r.ptr));
        if (r.status != Status::OutOfMemory) {
            *failure = "memscope_malloc(" + std::to_string(size) + ", device " + std::to_string(device)
                + "): " + std::string(statusName(r.status));
            if (kind)
                *kind = OutOfMemoryKind::Other;
            return nullptr;
        }
        *failure = describeOutOfMemory(device, r);
        if (kind)
            *kind = OutOfMemoryKind::OutOfMemory;
        const DumpSettings& dump = agent().dump;
        std::string written, why, dumped;
        if (dump.onOom) {
            if (dumpSnapshot(*a, dump.path, &written, &why, publishedStack))
                dumped = "; snapshot written to " + written;
            else
                dumped = "; the snapshot dump failed: " + why;
        }
        std::fprintf(stderr,
                     "memscope: CUDA out of memory on device %d: %zu bytes requested (a %s segment needed), %zu bytes "
                     "(%s) free of %s%s\n",
                     device, r.requestedBytes, formatSize(r.allocationSize).c_str(), r.deviceFree,
                     formatSize(r.deviceFree).c_str(), formatSize(r.deviceTotal).c_str(), dumped.c_str());
        return nullptr;
    }

    // The Python frames of one allocator call (MEMSCOPE_STACKS=python or all, in a process hosting CPython):
    // captured before the allocator takes its lock (pythonstacks.h says why) and given to the publisher as this
    // thread's stack for the call's events; an autograd engine thread gets the stack of the backward() under way.
    class PythonStackScope {
    public:
        PythonStackScope()
        {
            Publisher* p = agent().publisher.load(std::memory_order_acquire);
            if (!p || !p->pythonStacks())
                return;
            unsigned n = python::capture(m_frames, MaxStackDepth);
            if (n == 0)
                n = python::backwardStack(m_frames, MaxStackDepth);
            if (n == 0)
                return;
            m_previous = Publisher::threadStack();
            Publisher::setThreadStack(m_frames, n, /*afterNative=*/p->stackDepth() > 0);
            m_set = true;
        }
        ~PythonStackScope()
        {
            if (m_set)
                Publisher::setThreadStack(m_previous);
        }
        PythonStackScope(const PythonStackScope&) = delete;
        PythonStackScope& operator=(const PythonStackScope&) = delete;

    private:
        uintptr_t m_frames[MaxStackDepth];
        Publisher::ThreadStack m_previous;
        bool m_set = false;
    };

} // namespace

void setLastApiError(std::string message) { setError(std::move(message)); }

} // namespace memscope::agent

using namespace memscope::agent;

extern "C" {

void* memscope_malloc(size_t size, int device, void* stream) noexcept
{
    try {
        const PythonStackScope stack;
        std::string failure;
        if (void* p = allocateOrDescribe(size, device, stream, &failure); p || failure.empty())
            return p;
        setError(failure);
    } catch (const std::exception& e) {
        setError(std::string("memscope_malloc: ") + e.what());
    } catch (...) {
        setError("memscope_malloc: unknown error");
    }
    return nullptr;
}

void* memscope_malloc_raising(size_t size, int device, void* stream)
{
    std::string failure;
    OutOfMemoryKind kind = OutOfMemoryKind::None;
    try {
        const PythonStackScope stack;
        if (void* p = allocateOrDescribe(size, device, stream, &failure, &kind); p || failure.empty())
            return p;
    } catch (const std::exception& e) {
        failure = std::string("memscope_malloc_raising: ") + e.what();
    } catch (...) {
        failure = "memscope_malloc_raising: unknown error";
    }
    setError(failure);
    // Thrown outside every try block above: torch's bindings turn it into a Python RuntimeError with this text.
    if (kind == OutOfMemoryKind::OutOfMemory)
        throw OutOfMemory(failure);
    throw std::runtime_error(failure);
}

void memscope_free(void* ptr, size_t, int device, void*) noexcept
{
    try {
        if (!ptr)
            return;
        CachingAllocator* a = allocatorOrError();
        if (!a)
            return;
        const PythonStackScope stack;
        const Status s = a->free(device, DevicePtr { reinterpret_cast<uintptr_t>(ptr) });
        if (s != Status::Ok) {
            setError("memscope_free: " + std::string(statusName(s)));
            warnOnce(g_warnedBadFree, "memscope_free was given a pointer it did not hand out");
        }
    } catch (...) {
        setError("memscope_free: unknown error");
    }
}

void memscope_empty_cache(void) noexcept
{
    try {
        if (CachingAllocator* a = allocatorOrError())
            a->emptyCache();
    } catch (...) {
        setError("memscope_empty_cache: unknown error");
    }
}

int memscope_record_stream(void* ptr, void* stream) noexcept
{
    try {
        CachingAllocator* a = allocatorOrError();
        if (!a)
            return -1;
        // torch's record_stream hook passes no device: the block is looked up on each device.
        for (int d = 0; d < a->deviceCount(); ++d) {
            if (a->recordStream(d, DevicePtr { reinterpret_cast<uintptr_t>(ptr) },
                                StreamId { reinterpret_cast<uintptr_t>(stream) })
                == Status::Ok)
                return 0;
        }
        setError("memscope_record_stream: invalid device pointer");
    } catch (...) {
        setError("memscope_record_stream: unknown error");
    }
    return -1;
}

int memscope_set_memory_fraction(double fraction, int device) noexcept
{
    try {
        CachingAllocator* a = allocatorOrError();
        if (!a)
            return -1;
        const Status s = a->setMemoryFraction(device, fraction);
        if (s == Status::Ok)
            return 0;
        setError("memscope_set_memory_fraction: " + std::string(statusName(s)));
    } catch (...) {
        setError("memscope_set_memory_fraction: unknown error");
    }
    return -1;
}

int memscope_get_device_stats(int device, memscope_device_stats* out) noexcept
{
    try {
        CachingAllocator* a = allocatorOrError();
        if (!a)
            return -1;
        if (!out || device < 0 || device >= a->deviceCount()) {
            setError("memscope_get_device_stats: invalid device or NULL output");
            return -1;
        }
        const DeviceStats s = a->stats(device);
        constexpr size_t All = size_t(StatType::Aggregate);
        *out = memscope_device_stats {};
        out->allocated_bytes_current = s.allocatedBytes[All].current;
        out->allocated_bytes_peak = s.allocatedBytes[All].peak;
        out->reserved_bytes_current = s.reservedBytes[All].current;
        out->reserved_bytes_peak = s.reservedBytes[All].peak;
        out->active_bytes_current = s.activeBytes[All].current;
        out->active_bytes_peak = s.activeBytes[All].peak;
        out->requested_bytes_current = s.requestedBytes[All].current;
        out->requested_bytes_peak = s.requestedBytes[All].peak;
        out->allocation_count = s.allocation[All].current;
        out->segment_count = s.segment[All].current;
        out->num_alloc_retries = s.numAllocRetries;
        out->num_ooms = s.numOoms;
        out->num_device_alloc = s.numDeviceAlloc;
        out->num_device_free = s.numDeviceFree;
        return 0;
    } catch (...) {
        setError("memscope_get_device_stats: unknown error");
    }
    return -1;
}

const char* memscope_last_error(void) noexcept { return t_lastError.c_str(); }

const char* memscope_backend_name(void) noexcept
{
    try {
        return agent().backendName;
    } catch (...) {
        return "none";
    }
}

int memscope_publish_start(const char* endpoint) noexcept
{
    try {
        Agent& a = agent();
        std::lock_guard lock(a.publishMutex);
        std::string why;
        if (startPublishing(a, endpoint ? endpoint : "", &why))
            return 0;
        setError("memscope_publish_start: " + why);
    } catch (const std::exception& e) {
        setError(std::string("memscope_publish_start: ") + e.what());
    } catch (...) {
        setError("memscope_publish_start: unknown error");
    }
    return -1;
}

void memscope_publish_stop(void) noexcept
{
    try {
        Agent& a = agent();
        std::lock_guard lock(a.publishMutex);
        if (Publisher* p = a.publisher.load())
            p->stop(200);
    } catch (...) {
        setError("memscope_publish_stop: unknown error");
    }
}

uint64_t memscope_publish_lost(void) noexcept
{
    try {
        if (Publisher* p = agent().publisher.load())
            return p->lost();
    } catch (...) {
    }
    return 0;
}

const char* memscope_publish_endpoint(void) noexcept
{
    try {
        if (Publisher* p = agent().publisher.load())
            return p->endpoint().c_str();
    } catch (...) {
    }
    return "";
}

int memscope_annotate(const char* name, int start, int device) noexcept
{
    try {
        if (!name) {
            setError("memscope_annotate: no name");
            return -1;
        }
        if (annotateObserved(device, start != 0, name))
            return 0;
        if (Publisher* p = agent().publisher.load(); p && p->annotate(device, start != 0, name))
            return 0;
        setError("memscope_annotate: nothing publishes, or too many notes wait to be sent");
    } catch (...) {
        setError("memscope_annotate: unknown error");
    }
    return -1;
}

int memscope_python_backward_begin(void) noexcept { return python::backwardBegin(); }

void memscope_python_backward_end(int token) noexcept { python::backwardEnd(token); }

int memscope_dump_snapshot(const char* path) noexcept
{
    try {
        CachingAllocator* a = allocatorOrError();
        if (!a)
            return -1;
        std::string written, why;
        if (dumpSnapshot(*a, path && *path ? std::string(path) : agent().dump.path, &written, &why, publishedStack))
            return 0;
        setError("memscope_dump_snapshot: " + why);
    } catch (const std::exception& e) {
        setError(std::string("memscope_dump_snapshot: ") + e.what());
    } catch (...) {
        setError("memscope_dump_snapshot: unknown error");
    }
    return -1;
}

} // extern "C"
