// A test helper for test_observer_python.py: the torch extension behind memscope_torch.observe()
// (agent/python/memscope_observer.cpp) without torch, loaded into a real python3 with ctypes. memscope's own
// allocator (host backend) plays PyTorch's; its trace events reach memscope_observe_event as PyTorch's tracker
// hands them over, each allocation with a context holding the Python frames the caller gave (code object and
// instruction offset, as PyTorch's CapturedTraceback holds them); the hooks hand those frames over unnamed
// (memscope_observer_context_python) and count what memscope releases, as the extension does. It never takes the
// interpreter lock itself: memscope's symboliser does, through the Python C API of the process.
#include "agent/allocator.h"
#include "agent/hostbackend.h"
#include "memscope/observe.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

using namespace memscope::agent;

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

using Frames = std::vector<memscope_python_frame>;

struct Host final : TraceObserver {
    HostBackend backend;
    CachingAllocator allocator { backend, AllocatorConfig {} };
    std::mutex mutex; // everything below: the allocating threads and the publisher thread
    uint32_t nextContext = 1;
    std::map<uint32_t, Frames> contexts; // held by the host until memscope releases them
    std::map<uintptr_t, Frames> blockFrames; // live block -> the frames of its allocation
    std::atomic<uint64_t> twice { 0 }, handed { 0 }, released { 0 };

    Host() { allocator.setTraceObserver(this); }

    void onTraceEvent(const TraceEvent& e) override
    {
        memscope_observed_event o {};
        o.action = uint8_t(e.action); // TraceAction's order is observe.h's
        o.device = uint8_t(e.device);
        o.address = e.addr;
        o.size = e.size;
        o.stream = raw(e.stream);
        o.pool_first = e.pool.first;
        o.pool_second = e.pool.second;
        std::lock_guard lock(mutex);
        if (e.action == TraceAction::Alloc && t_frames && !t_frames->empty()) {
            o.context = nextContext++;
            contexts[o.context] = *t_frames;
            blockFrames[e.addr] = *t_frames;
        }
        // PyTorch hands a block's frees the context of its allocation (observe.h's
        // MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT): memscope gives them its stack.
        if ((e.action == TraceAction::FreeRequested || e.action == TraceAction::FreeCompleted)
            && blockFrames.count(e.addr))
            o.flags = MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT;
        if (e.action == TraceAction::FreeCompleted)
            blockFrames.erase(e.addr);
        if (memscope_observe_event(&o) == 0 && o.context)
            contexts.erase(o.context); // memscope will never ask about it
    }

    static int state(void* user, memscope_observer_sink* sink)
    {
        auto* host = static_cast<Host*>(user);
        // MEMSCOPE_FAKE_STUCK_STATE_MS: call number MEMSCOPE_FAKE_STUCK_STATE_CALL (the first is the baseline taken
        // at start, then one per viewer's state) does not return for that long, as a host whose allocator lock is
        // held by a thread of its own.
        static std::atomic<long> calls { 0 };
        const char* stuckMs = std::getenv("MEMSCOPE_FAKE_STUCK_STATE_MS");
        const char* stuckCall = std::getenv("MEMSCOPE_FAKE_STUCK_STATE_CALL");
        if (++calls == (stuckCall ? std::strtol(stuckCall, nullptr, 10) : 2) && stuckMs)
            std::this_thread::sleep_for(std::chrono::milliseconds(std::strtol(stuckMs, nullptr, 10)));
        const std::vector<SegmentInfo> segments = host->allocator.snapshotAll([] {
            memscope_observed_event stamp {};
            stamp.action = MEMSCOPE_OBSERVED_SNAPSHOT;
            memscope_observe_event(&stamp);
        });
        std::lock_guard lock(host->mutex);
        for (const SegmentInfo& s : segments) {
            memscope_observer_segment(sink, s.device, s.address, raw(s.stream), s.pool.first, s.pool.second,
                                      s.isLarge, s.isExpandable);
            for (const BlockInfo& b : s.blocks) {
                auto it = host->blockFrames.find(b.address);
                if (b.active && it != host->blockFrames.end()) {
                    const uint32_t context = host->nextContext++;
                    host->contexts[context] = it->second;
                    host->handed++;
                    memscope_observer_block_python(sink, b.size, b.requestedSize, b.allocated, b.active, context,
                                                   nullptr, 0, it->second.data(), it->second.size());
                } else {
                    memscope_observer_block(sink, b.size, b.requestedSize, b.allocated, b.active, nullptr, 0);
                }
            }
        }
        return 0;
    }

    static void symbolize(void* user, const uint32_t* contexts, size_t count, memscope_observer_sink* sink)
    {
        auto* host = static_cast<Host*>(user);
        // MEMSCOPE_FAKE_STUCK_SYMBOLIZE_MS: the first call does not return for that long (a host hook stuck, e.g.
        // on a lock of its own), without holding anything the job's threads need.
        static std::atomic<long> stuckMs { [] {
            const char* v = std::getenv("MEMSCOPE_FAKE_STUCK_SYMBOLIZE_MS");
            return v ? std::strtol(v, nullptr, 10) : 0L;
        }() };
        if (const long ms = stuckMs.exchange(0); ms > 0)
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        std::lock_guard lock(host->mutex);
        for (size_t i = 0; i < count; ++i) {
            auto it = host->contexts.find(contexts[i]);
            if (it == host->contexts.end()) {
                host->twice++;
                continue;
            }
            host->handed++;
            memscope_observer_context_python(sink, contexts[i], nullptr, 0, it->second.data(), it->second.size(), 0);
        }
    }

    static void release(void* user, const uint32_t* contexts, size_t count)
    {
        auto* host = static_cast<Host*>(user);
        std::lock_guard lock(host->mutex);
        for (size_t i = 0; i < count; ++i) {
            if (host->contexts.erase(contexts[i]) == 0)
                host->twice++;
            else
                host->released++;
        }
    }

    // Generated code's lines stand for a line of model.py, as torch.compile's code cache says.
    static void extra(void*, const char* filename, int64_t line, memscope_observer_extras* out)
    {
        if (std::string_view(filename).ends_with("fx_generated.py"))
            memscope_observer_extra_frame(out, "forward", "model.py", 1000 + line);
    }

    static thread_local const Frames* t_frames;
};

thread_local const Frames* Host::t_frames = nullptr;

Host* g_host = nullptr;

Frames framesOf(const uint64_t* codes, const int32_t* instructions, size_t count)
{
    Frames frames(count);
    for (size_t i = 0; i < count; ++i)
        frames[i] = { reinterpret_cast<const void*>(codes[i]), instructions[i], 0 };
    return frames;
}

} // namespace

FAKE_API int fake_start(const char* endpoint)
{
    if (!g_host)
        g_host = new Host; // never freed: memscope's threads may outlive a stop
    const memscope_observer_hooks hooks { g_host, &Host::state, &Host::symbolize, &Host::release, &Host::extra };
    return memscope_observe_start(endpoint, 1, "", &hooks);
}

FAKE_API void fake_stop() { memscope_observe_stop(); }

// Allocates `size` bytes on `stream` with a context holding these frames (innermost first); the block's address,
// 0 when out of memory.
FAKE_API uint64_t fake_alloc_on(size_t size, uint64_t stream, const uint64_t* codes, const int32_t* instructions,
                                size_t count)
{
    const Frames frames = framesOf(codes, instructions, count);
    Host::t_frames = &frames;
    const MallocResult r = g_host->allocator.malloc(0, size, StreamId { uintptr_t(stream) });
    Host::t_frames = nullptr;
    return r.status == Status::Ok ? raw(r.ptr) : 0;
}

FAKE_API uint64_t fake_alloc(size_t size, const uint64_t* codes, const int32_t* instructions, size_t count)
{
    return fake_alloc_on(size, 0, codes, instructions, count);
}

// torch.cuda.MemPool's and the side streams' shapes, as PyTorch's allocator has them: record_stream, empty_cache,
// a memory fraction.
FAKE_API void fake_record_stream(uint64_t address, uint64_t stream)
{
    g_host->allocator.recordStream(0, DevicePtr { uintptr_t(address) }, StreamId { uintptr_t(stream) });
}
FAKE_API void fake_empty_cache() { g_host->allocator.emptyCache(); }
FAKE_API void fake_set_fraction(double fraction) { g_host->allocator.setMemoryFraction(0, fraction); }

// The allocator's state now, one line per segment and block (the oracle a recording is compared with): "segment
// ADDRESS SIZE STREAM" and "block ADDRESS SIZE STATE REQUESTED" (REQUESTED of active blocks, else -).
FAKE_API size_t fake_describe_state(char* out, size_t capacity)
{
    std::string text;
    for (const SegmentInfo& seg : g_host->allocator.snapshotAll({})) {
        text += "segment " + std::to_string(seg.address) + " " + std::to_string(seg.totalSize) + " "
            + std::to_string(raw(seg.stream)) + "\n";
        for (const BlockInfo& b : seg.blocks)
            text += "block " + std::to_string(b.address) + " " + std::to_string(b.size) + " "
                + (b.allocated ? "active_allocated" : b.active ? "active_pending_free" : "inactive") + " "
                + (b.active ? std::to_string(b.requestedSize) : std::string("-")) + "\n";
    }
    if (out && capacity > 0) {
        const size_t n = std::min(capacity - 1, text.size());
        std::memcpy(out, text.data(), n);
        out[n] = '\0';
    }
    return text.size();
}

// The same from a new native thread (no Python thread state), as the autograd engine's.
FAKE_API uint64_t fake_alloc_on_native_thread(size_t size, const uint64_t* codes, const int32_t* instructions,
                                              size_t count)
{
    uint64_t address = 0;
    std::thread([&] { address = fake_alloc(size, codes, instructions, count); }).join();
    return address;
}

// Starts a native thread that, after `delayMs`, allocates `count` blocks (firstSize, firstSize + step, ...) with
// these frames, `intervalMs` apart; fake_series_join waits for it and gives their addresses. The Python thread
// that starts it may then keep the interpreter lock all along.
std::thread g_series;
std::vector<uint64_t> g_seriesAddresses;

FAKE_API void fake_alloc_series(int delayMs, int count, int intervalMs, size_t firstSize, size_t step,
                                const uint64_t* codes, const int32_t* instructions, size_t frames)
{
    std::vector<uint64_t> c(codes, codes + frames);
    std::vector<int32_t> i(instructions, instructions + frames);
    g_series = std::thread([=] {
        usleep(useconds_t(delayMs) * 1000);
        for (int k = 0; k < count; ++k) {
            g_seriesAddresses.push_back(fake_alloc(firstSize + size_t(k) * step, c.data(), i.data(), c.size()));
            usleep(useconds_t(intervalMs) * 1000);
        }
    });
}

FAKE_API size_t fake_series_join(uint64_t* out, size_t max)
{
    if (g_series.joinable())
        g_series.join();
    const size_t n = std::min(max, g_seriesAddresses.size());
    std::copy(g_seriesAddresses.begin(), g_seriesAddresses.begin() + long(n), out);
    g_seriesAddresses.clear();
    return n;
}

FAKE_API void fake_free(uint64_t address) { g_host->allocator.free(0, DevicePtr { uintptr_t(address) }); }

// Called through ctypes.PyDLL: sleeps while holding the interpreter lock, as a long C call that keeps it does.
FAKE_API void fake_hold_interpreter_lock(int milliseconds) { usleep(useconds_t(milliseconds) * 1000); }

// Contexts memscope was handed and has not released; contexts released twice or never handed.
FAKE_API uint64_t fake_outstanding()
{
    std::lock_guard lock(g_host->mutex);
    return g_host->contexts.size();
}
FAKE_API uint64_t fake_twice() { return g_host->twice.load(); }
FAKE_API uint64_t fake_handed() { return g_host->handed.load(); }
FAKE_API uint64_t fake_released() { return g_host->released.load(); }

// memscope_observe_stats, field by field (ctypes reads the struct with the header's layout otherwise).
FAKE_API int fake_stats(memscope_observe_statistics* out) { return memscope_observe_stats(out); }
