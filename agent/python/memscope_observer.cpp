// memscope_observer: the torch extension behind memscope_torch.observe(). It attaches a trace tracker to PyTorch's
// own CUDA caching allocator (c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker) and hands every event
// to memscope's observer (libmemscope-agent.so, memscope/observe.h), which publishes it like the agent's own. This
// file only converts PyTorch's structs into memscope's plain ones: the ring, the publisher, the block sizes, the
// state replies and the stacks' interning are memscope's and tested without torch (tests/agent/tst_observer).
//
// Threads: track() runs on whichever thread holds the device's allocator lock (PyTorch calls trackers there); it
// must not allocate, take the GIL or any other lock: it copies the event's context (a shared_ptr: one atomic
// increment) into a slot of a per-device ring of slots and writes one record. state(), symbolize() and release()
// run on memscope's publisher thread: they take PyTorch's allocator locks (snapshot()) without the GIL, and the GIL
// only afterwards, to symbolise Python frames and drop contexts (a context's last reference frees Python frames).
// Built by torch.utils.cpp_extension when observe() first runs (memscope_torch.py).
#include <torch/extension.h>

#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include "memscope/observe.h"

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingDeviceAllocator::TraceEntry;

// Contexts in flight per device (between the tracker and the publisher thread): as many as the agent's ring holds
// records by default (agent/src/publisher.h, DefaultRingRecords). A context is (device << 24) | (slot + 1).
constexpr uint32_t SlotCount = 1u << 17;

struct Slot {
    std::shared_ptr<c10::GatheredContext> context;
    // The Python stack of the backward() call under way when the event came: allocations of the autograd engine's
    // threads have no Python frames of their own (CapturedTraceback gathers none on a thread without Python), so
    // they are attributed to the line that called backward().
    std::shared_ptr<c10::GatheredContext> backward;
    std::atomic<bool> busy { false }; // set by the tracker, cleared by the publisher thread
};

struct DeviceSlots {
    std::unique_ptr<Slot[]> slots { new Slot[SlotCount] };
    uint64_t next = 0; // under the device's allocator lock
};

std::vector<std::unique_ptr<DeviceSlots>> g_devices;

// backward() calls under way (backwardBegin/backwardEnd, from Python with the GIL): a ring of their stacks and the
// index of the current one, so that the tracker copies a stack no Python thread is writing (a slot is reused only
// 64 backward() calls later).
constexpr int BackwardStacks = 64;
std::shared_ptr<c10::GatheredContext> g_backwardStacks[BackwardStacks];
std::atomic<int> g_backwardCurrent { -1 };
int g_backwardNext = 0;
std::atomic<bool> g_stopping { false };
bool g_trackerAttached = false;

Slot* slotOf(uint32_t context)
{
    const uint32_t device = context >> 24;
    const uint32_t index = (context & 0xFFFFFFu) - 1;
    if (device >= g_devices.size() || index >= SlotCount)
        return nullptr;
    return &g_devices[device]->slots[index];
}

bool actionOf(TraceEntry::Action action, uint8_t& out)
{
    switch (action) {
    case TraceEntry::ALLOC: out = MEMSCOPE_OBSERVED_ALLOC; return true;
    case TraceEntry::FREE_REQUESTED: out = MEMSCOPE_OBSERVED_FREE_REQUESTED; return true;
    case TraceEntry::FREE_COMPLETED: out = MEMSCOPE_OBSERVED_FREE_COMPLETED; return true;
    case TraceEntry::SEGMENT_ALLOC: out = MEMSCOPE_OBSERVED_SEGMENT_ALLOC; return true;
    case TraceEntry::SEGMENT_FREE: out = MEMSCOPE_OBSERVED_SEGMENT_FREE; return true;
    case TraceEntry::SEGMENT_MAP: out = MEMSCOPE_OBSERVED_SEGMENT_MAP; return true;
    case TraceEntry::SEGMENT_UNMAP: out = MEMSCOPE_OBSERVED_SEGMENT_UNMAP; return true;
    case TraceEntry::SNAPSHOT: out = MEMSCOPE_OBSERVED_SNAPSHOT; return true;
    case TraceEntry::OOM: out = MEMSCOPE_OBSERVED_OOM; return true;
    default: return false;
    }
}

void track(const TraceEntry& te)
{
    memscope_observed_event e {};
    if (!actionOf(te.action_, e.action) || te.device_ < 0 || size_t(te.device_) >= g_devices.size())
        return;
    e.device = uint8_t(te.device_);
    e.address = te.addr_;
    e.size = te.size_;
    e.stream = reinterpret_cast<uintptr_t>(te.stream_);
    e.pool_first = int64_t(te.mempool_.first);
    e.pool_second = int64_t(te.mempool_.second);
    Slot* slot = nullptr;
    if (te.context_ && e.action != MEMSCOPE_OBSERVED_SNAPSHOT) {
        DeviceSlots& d = *g_devices[e.device];
        const uint32_t index = uint32_t(d.next % SlotCount);
        Slot& s = d.slots[index];
        if (!s.busy.load(std::memory_order_acquire)) { // else the publisher is that far behind: no stack
            s.context = te.context_;
            const int backward = g_backwardCurrent.load(std::memory_order_acquire);
            if (backward >= 0 && e.action == MEMSCOPE_OBSERVED_ALLOC)
                s.backward = g_backwardStacks[backward];
            s.busy.store(true, std::memory_order_release);
            slot = &s;
            e.context = (uint32_t(e.device) << 24) | (index + 1);
            ++d.next;
        }
    }
    if (!memscope_observe_event(&e) && slot) {
        slot->context.reset(); // not the last reference: the TraceEntry holds one
        slot->backward.reset(); // nor here: the backward() call holds one
        slot->busy.store(false, std::memory_order_release);
    }
}

// Symbolises `contexts` with the GIL held; frames[i] for each (empty where a context has no traceback).
std::vector<std::vector<torch::unwind::Frame>> symbolise(const std::vector<c10::GatheredContext*>& contexts)
{
    std::vector<std::vector<torch::unwind::Frame>> out(contexts.size());
    std::vector<torch::CapturedTraceback*> tracebacks;
    std::vector<size_t> where;
    for (size_t i = 0; i < contexts.size(); ++i) {
        if (auto* tb = dynamic_cast<torch::CapturedTraceback*>(contexts[i])) {
            tracebacks.push_back(tb);
            where.push_back(i);
        }
    }
    if (tracebacks.empty())
        return out;
    const torch::SymbolizedTracebacks st = torch::symbolize(tracebacks);
    for (size_t k = 0; k < where.size() && k < st.tracebacks.size(); ++k)
        for (uint64_t index : st.tracebacks[k])
            out[where[k]].push_back(st.all_frames[index]);
    return out;
}

// memscope's frames as the sink takes them; memscope_torch.py's own (the backward() wrapper) are left out.
std::vector<memscope_frame> framesFor(const std::vector<torch::unwind::Frame>& frames)
{
    std::vector<memscope_frame> out;
    out.reserve(frames.size() + 1);
    for (const torch::unwind::Frame& f : frames) {
        if (f.filename.size() >= 17 && f.filename.compare(f.filename.size() - 17, 17, "memscope_torch.py") == 0)
            continue;
        out.push_back({ f.funcname.c_str(), f.filename.c_str(), int64_t(f.lineno) });
    }
    return out;
}

// The frame put above a backward() call's stack on allocations of the autograd engine.
const torch::unwind::Frame& backwardFrame()
{
    static const torch::unwind::Frame frame = [] {
        torch::unwind::Frame f;
        f.filename = "<autograd engine>";
        f.funcname = "backward";
        f.lineno = 0;
        return f;
    }();
    return frame;
}

int stateHook(void*, memscope_observer_sink* sink)
{
    if (g_stopping.load())
        return -1;
    // snapshot() takes every device's allocator lock in turn and, under each, reports a SNAPSHOT trace event: the
    // tracker passes it on, which stamps this state. No GIL here: a thread holding the GIL may wait for those locks.
    const cca::SnapshotInfo snapshot = cca::snapshot({ 0, 0 }, /*include_traces=*/false);
    std::vector<c10::GatheredContext*> contexts;
    for (const auto& segment : snapshot.segments)
        for (const auto& block : segment.blocks)
            contexts.push_back(block.active ? block.context_when_allocated.get() : nullptr);
    std::vector<std::vector<torch::unwind::Frame>> frames;
    {
        pybind11::gil_scoped_acquire gil;
        if (g_stopping.load())
            return -1;
        frames = symbolise(contexts);
    }
    size_t k = 0;
    for (const auto& segment : snapshot.segments) {
        memscope_observer_segment(sink, segment.device, segment.address, reinterpret_cast<uintptr_t>(segment.stream),
                                  int64_t(segment.owner_private_pool_id.first),
                                  int64_t(segment.owner_private_pool_id.second), segment.is_large,
                                  segment.is_expandable);
        for (const auto& block : segment.blocks) {
            const std::vector<memscope_frame> f = framesFor(frames[k++]);
            memscope_observer_block(sink, block.size, block.requested_size, block.allocated, block.active, f.data(),
                                    f.size());
        }
    }
    return 0;
}

// Drops the contexts' references; the caller holds the GIL (a last reference frees Python frames).
void releaseSlots(const uint32_t* contexts, size_t count)
{
    for (size_t i = 0; i < count; ++i) {
        if (Slot* s = slotOf(contexts[i]); s && s->busy.load(std::memory_order_acquire)) {
            s->context.reset();
            s->backward.reset();
            s->busy.store(false, std::memory_order_release);
        }
    }
}

void symbolizeHook(void*, const uint32_t* contexts, size_t count, memscope_observer_sink* sink)
{
    if (g_stopping.load())
        return; // the interpreter may be finalising: leave the contexts be
    pybind11::gil_scoped_acquire gil;
    std::vector<c10::GatheredContext*> gathered(count), backward(count);
    for (size_t i = 0; i < count; ++i) {
        Slot* s = slotOf(contexts[i]);
        const bool busy = s && s->busy.load(std::memory_order_acquire);
        gathered[i] = busy ? s->context.get() : nullptr;
        backward[i] = busy ? s->backward.get() : nullptr;
    }
    auto frames = symbolise(gathered);
    // Events without Python frames that came during a backward() call: the frames of that call.
    for (size_t i = 0; i < count; ++i) {
        if (!frames[i].empty())
            backward[i] = nullptr;
    }
    const auto backwardFrames = symbolise(backward);
    for (size_t i = 0; i < count; ++i) {
        if (frames[i].empty() && !backwardFrames[i].empty()) {
            frames[i].push_back(backwardFrame());
            frames[i].insert(frames[i].end(), backwardFrames[i].begin(), backwardFrames[i].end());
        }
        if (frames[i].empty())
            continue;
        const std::vector<memscope_frame> f = framesFor(frames[i]);
        memscope_observer_context_frames(sink, contexts[i], f.data(), f.size());
    }
    releaseSlots(contexts, count);
}

void releaseHook(void*, const uint32_t* contexts, size_t count)
{
    if (g_stopping.load())
        return;
    pybind11::gil_scoped_acquire gil;
    releaseSlots(contexts, count);
}

// record_function scopes, as PyTorch's own memory history records them (a RecordFunction callback on USER_SCOPE:
// torch/csrc/cuda/Module.cpp, _initRecordAnnotations), published as notes (topic "A"). Any thread; no GIL.
at::CallbackHandle g_annotations = 0;

void annotate(const at::RecordFunction& fn, int start)
{
    if (g_stopping.load(std::memory_order_relaxed))
        return;
    memscope_annotate(fn.name(), start, int(c10::cuda::current_device()));
}

// Starts observing every device of this process; returns the endpoint. Call after CUDA is initialised.
std::string start(const std::string& endpoint)
{
    const int devices = int(c10::cuda::device_count());
    if (devices < 1)
        throw std::runtime_error("no CUDA device");
    // The settings PyTorch's allocator parsed: memscope derives block sizes with the same rules.
    const std::string settings = cca::snapshot({ 0, 0 }, false).config_metadata.last_allocator_settings;
    if (!g_trackerAttached) {
        while (g_devices.size() < size_t(devices))
            g_devices.push_back(std::make_unique<DeviceSlots>());
        cca::attachAllocatorTraceTracker(&track); // there is no detach: it stays, and does nothing once stopped
        g_trackerAttached = true;
    }
    g_stopping.store(false);
    const memscope_observer_hooks hooks { nullptr, &stateHook, &symbolizeHook, &releaseHook };
    int rc = 0;
    {
        pybind11::gil_scoped_release nogil; // the publisher thread's first state takes the GIL
        rc = memscope_observe_start(endpoint.empty() ? nullptr : endpoint.c_str(), devices, settings.c_str(), &hooks);
    }
    if (rc != 0)
        throw std::runtime_error(memscope_last_error());
    if (g_annotations == 0)
        g_annotations = at::addGlobalCallback(
            at::RecordFunctionCallback(
                [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
                    annotate(fn, 1);
                    return nullptr;
                },
                [](const at::RecordFunction& fn, at::ObserverContext*) { annotate(fn, 0); })
                .scopes({ at::RecordScope::USER_SCOPE }));
    return memscope_observe_endpoint();
}

void stop()
{
    g_stopping.store(true);
    if (g_annotations != 0) {
        at::removeCallback(g_annotations);
        g_annotations = 0;
    }
    pybind11::gil_scoped_release nogil; // a hook may be waiting for the GIL: let it finish
    memscope_observe_stop();
}

uint64_t lost() { return memscope_observe_lost(); }

// Python, with the GIL, around torch.autograd.backward (memscope_torch.py): the caller's Python stack becomes the
// stack of the autograd engine's allocations until backwardEnd(token).
int backwardBegin()
{
    const int index = g_backwardNext;
    g_backwardNext = (g_backwardNext + 1) % BackwardStacks;
    g_backwardStacks[index] = torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, /*cpp=*/false);
    g_backwardCurrent.store(index, std::memory_order_release);
    return index;
}

void backwardEnd(int token)
{
    int expected = token;
    g_backwardCurrent.compare_exchange_strong(expected, -1, std::memory_order_acq_rel);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.def("start", &start, "observe PyTorch's CUDA caching allocator; returns the endpoint");
    m.def("stop", &stop, "publish what is queued and a goodbye, then stop");
    m.def("lost", &lost, "events dropped because the ring was full");
    m.def("backward_begin", &backwardBegin, "the calling Python stack is the autograd engine's until backward_end");
    m.def("backward_end", &backwardEnd, "ends what backward_begin(token) began");
}
