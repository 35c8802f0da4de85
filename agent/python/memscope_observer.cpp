// memscope_observer: the torch extension behind memscope_torch.observe(). It attaches a trace tracker to PyTorch's
// own CUDA caching allocator (c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker) and hands every event
// to memscope's observer (libmemscope-agent.so, memscope/observe.h), which publishes it like the agent's own. This
// file only converts PyTorch's structs into memscope's plain ones: the ring, the publisher, the block sizes, the
// state replies and the stacks' interning are memscope's and tested without torch (tests/agent/tst_observer).
//
// Threads: track() runs on whichever thread holds the device's allocator lock (PyTorch calls trackers there); it
// must not allocate, take the GIL or any other lock: it copies the event's context (a shared_ptr: one atomic
// increment) into a slot of a per-device ring of slots and writes one record. state(), symbolize() and release()
// run on memscope's threads one at a time (state and release on its publisher thread, symbolize on its hook
// thread: "publisher thread only" below means that) and never take the GIL: they hand memscope the contexts' frames unnamed
// (code object, instruction) and hold each context until memscope releases it; memscope names the frames on a
// thread of its own (pythonExtra runs there, with the GIL).
// Built by torch.utils.cpp_extension when observe() first runs (memscope_torch.py).
#include <torch/extension.h>

#include <ATen/record_function.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/profiler/unwind/unwind.h>
#include <torch/csrc/utils/cpp_stacktraces.h>

#include "memscope/observe.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingDeviceAllocator::TraceEntry;

// Contexts in flight per device (between the tracker and the publisher thread), by default a quarter of the records
// the agent's ring holds (agent/src/publisher.h, DefaultRingRecords): only allocations carry one, and the publisher
// frees a batch's slots every 25 ms (1.3 M allocations a second before one goes without its stack). A context is
// (device << 24) | (slot + 1). MEMSCOPE_OBSERVER_SLOTS (a power of two, 1,024 to 2^22) sets another count: a
// slot's context is dropped when the slot comes round again, so fewer slots drop contexts sooner after use.
const uint32_t SlotCount = [] {
    const char* v = std::getenv("MEMSCOPE_OBSERVER_SLOTS");
    const unsigned long n = v ? std::strtoul(v, nullptr, 10) : 0;
    return n >= 1024 && n <= (1ul << 22) && (n & (n - 1)) == 0 ? uint32_t(n) : (1u << 15);
}();

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
    std::atomic<uint64_t> full { 0 }; // events sent without their context: the next slot was still busy
    uint64_t freeRequested = 0; // the address of the previous event when it was a free_requested, else 0
    const void* freeRequestedContext = nullptr; // and its context
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
// Measurement only (tools/gpu-proof): while false the tracker returns at once, so one process can alternate steps
// with and without memscope's part of observing (PyTorch's own history stays on). A viewer attached meanwhile misses
// those events.
std::atomic<bool> g_tracking { true };
// Whether frees carry contexts of their own (observe(context="all")). Otherwise PyTorch hands a free the context of
// the block's allocation (CUDACachingAllocator.cpp, free(): record_trace(FREE_REQUESTED, ..., context ? context :
// block->context_when_allocated), and free_block's FREE_COMPLETED inside free() the same): memscope knows that
// stack from the allocation already (MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT), so the tracker copies no context for those, two of the three events of most allocations. A free completed later (a
// block used on other streams: process_events) carries the context of the allocation under way then, which is
// sent: a free_completed goes without its context only when it follows its free_requested with the same one.
bool g_freeContexts = false;
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
    if (!g_tracking.load(std::memory_order_relaxed))
        return;
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
    DeviceSlots& d = *g_devices[e.device];
    // A free_requested, and the free_completed right after it at the same address with the same context (the block
    // was freed at once), carry the allocation's context.
    const bool allocationsContext = e.action == MEMSCOPE_OBSERVED_FREE_REQUESTED
        || (e.action == MEMSCOPE_OBSERVED_FREE_COMPLETED && d.freeRequested == e.address && e.address != 0
            && d.freeRequestedContext == te.context_.get());
    d.freeRequested = e.action == MEMSCOPE_OBSERVED_FREE_REQUESTED ? e.address : 0;
    d.freeRequestedContext = te.context_.get();
    if (te.context_ && allocationsContext && !g_freeContexts)
        e.flags = MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT; // memscope gives it the allocation's stack
    if (te.context_ && e.action != MEMSCOPE_OBSERVED_SNAPSHOT && (g_freeContexts || !allocationsContext)) {
        const uint32_t index = uint32_t(d.next & (SlotCount - 1));
        Slot& s = d.slots[index];
        if (!s.busy.load(std::memory_order_acquire)) { // else the publisher is that far behind: no stack
            // Assigning drops what the slot held before on this thread (lazy release, below).
            s.context = te.context_;
            const int backward = g_backwardCurrent.load(std::memory_order_acquire);
            if (backward >= 0 && e.action == MEMSCOPE_OBSERVED_ALLOC)
                s.backward = g_backwardStacks[backward];
            else if (s.backward)
                s.backward.reset();
            s.busy.store(true, std::memory_order_release);
            slot = &s;
            e.context = (uint32_t(e.device) << 24) | (index + 1);
            ++d.next;
        } else {
            d.full.store(d.full.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); // one writer
        }
    }
    if (!memscope_observe_event(&e) && slot) {
        slot->context.reset(); // not the last reference: the TraceEntry holds one
        slot->backward.reset(); // nor here: the backward() call holds one
        slot->busy.store(false, std::memory_order_release);
    }
}

// PyTorch names a context's frames only through torch::symbolize(), which needs the interpreter lock and, for the
// Python frames, looks up torch._inductor on every call (torch/csrc/profiler/python/combined_traceback.cpp,
// PythonTraceback::appendSymbolized): on a job that has not imported it, that lookup imports it
// (torch/__init__.py's module __getattr__ loads its lazy submodules), which took the publisher thread for the
// whole life of a short job. memscope reads the frames itself and names each distinct Python frame once, on a
// thread of its own (memscope/observe.h, memscope_observer_context_python). The frames are private members of
// CapturedTraceback; an explicit instantiation may name a private member (C++20 [temp.spec.general]/6: the usual
// access checking rules do not apply to names in an explicit instantiation), which hands out a pointer to it.
template <typename Tag, typename Tag::type Member> struct MemberOf {
    friend typename Tag::type member(Tag) { return Member; }
};
struct PythonFramesTag {
    using type = std::vector<torch::CapturedTraceback::PyFrame> torch::CapturedTraceback::*;
    friend type member(PythonFramesTag);
};
struct NativeFramesTag {
    using type = std::vector<void*> torch::CapturedTraceback::*;
    friend type member(NativeFramesTag);
};
template struct MemberOf<PythonFramesTag, &torch::CapturedTraceback::frames_>;
template struct MemberOf<NativeFramesTag, &torch::CapturedTraceback::cpp_frames_>;

const std::vector<torch::CapturedTraceback::PyFrame>& pythonFrames(const torch::CapturedTraceback& tb)
{
    return const_cast<torch::CapturedTraceback&>(tb).*member(PythonFramesTag {});
}
const std::vector<void*>& nativeFrames(const torch::CapturedTraceback& tb)
{
    return const_cast<torch::CapturedTraceback&>(tb).*member(NativeFramesTag {});
}

// Native frames (stacks="all"), named by torch's unwinder once per address (publisher thread only). A frame of
// the interpreter's evaluation loop is preceded by a marker: the Python frame it ran goes there, as PyTorch's
// symbolize() places it (combined_traceback.cpp: before each C++ frame whose name holds "PyEval_EvalFrame").
struct NamedNative {
    std::string name, file;
    int64_t line = 0;
    bool evalFrame = false;
};
std::unordered_map<void*, NamedNative> g_nativeNames;

void appendNative(const std::vector<void*>& addresses, std::vector<memscope_frame>& out)
{
    std::vector<void*> unknown;
    for (void* a : addresses) {
        if (!g_nativeNames.count(a))
            unknown.push_back(a);
    }
    if (!unknown.empty()) {
        std::sort(unknown.begin(), unknown.end());
        unknown.erase(std::unique(unknown.begin(), unknown.end()), unknown.end());
        const std::vector<torch::unwind::Frame> named = torch::unwind::symbolize(unknown, torch::get_symbolize_mode());
        for (size_t i = 0; i < unknown.size(); ++i) {
            NamedNative n;
            if (i < named.size()) {
                n.name = named[i].funcname;
                n.file = named[i].filename;
                n.line = int64_t(named[i].lineno);
                n.evalFrame = n.name.find("PyEval_EvalFrame") != std::string::npos;
            }
            g_nativeNames.emplace(unknown[i], std::move(n));
        }
    }
    for (void* a : addresses) {
        const NamedNative& n = g_nativeNames.at(a);
        if (n.evalFrame)
            out.push_back({ nullptr, nullptr, 0 }); // the next Python frame goes here
        out.push_back({ n.name.c_str(), n.file.c_str(), n.line });
    }
}

// A context's frames as memscope_observer_context_python takes them; false when it has none.
bool rawFrames(const c10::GatheredContext* context, std::vector<memscope_frame>& native,
               std::vector<memscope_python_frame>& python)
{
    native.clear();
    python.clear();
    const auto* tb = dynamic_cast<const torch::CapturedTraceback*>(context);
    if (!tb)
        return false;
    for (const auto& f : pythonFrames(*tb))
        python.push_back({ f.code, int32_t(f.lasti), 0 });
    if (!nativeFrames(*tb).empty())
        appendNative(nativeFrames(*tb), native);
    return !python.empty() || !native.empty();
}

// Contexts of the states' blocks, held until memscope releases them (the state hook, on memscope's hook thread, and
// the release hook, on its publisher thread, never run at once): ids in the range of a device number no allocator
// has (StateDevice).
constexpr uint32_t StateDevice = 0xFF;
std::unordered_map<uint32_t, std::shared_ptr<c10::GatheredContext>> g_stateContexts;
uint32_t g_nextStateContext = 0;

uint32_t holdStateContext(std::shared_ptr<c10::GatheredContext> context)
{
    for (;;) {
        g_nextStateContext = (g_nextStateContext + 1) & 0xFFFFFFu;
        const uint32_t id = (StateDevice << 24) | (g_nextStateContext + 1);
        if (g_stateContexts.emplace(id, context).second)
            return id;
    }
}

int stateHook(void*, memscope_observer_sink* sink)
{
    if (g_stopping.load())
        return -1;
    // snapshot() takes every device's allocator lock in turn and, under each, reports a SNAPSHOT trace event: the
    // tracker passes it on, which stamps this state. No interpreter lock is taken here.
    const cca::SnapshotInfo snapshot = cca::snapshot({ 0, 0 }, /*include_traces=*/false);
    std::vector<memscope_frame> native;
    std::vector<memscope_python_frame> python;
    for (const auto& segment : snapshot.segments) {
        memscope_observer_segment(sink, segment.device, segment.address, reinterpret_cast<uintptr_t>(segment.stream),
                                  int64_t(segment.owner_private_pool_id.first),
                                  int64_t(segment.owner_private_pool_id.second), segment.is_large,
                                  segment.is_expandable);
        for (const auto& block : segment.blocks) {
            const auto& context = block.context_when_allocated;
            if (block.active && context && rawFrames(context.get(), native, python)) {
                memscope_observer_block_python(sink, block.size, block.requested_size, block.allocated, block.active,
                                               holdStateContext(context), native.data(), native.size(),
                                               python.data(), python.size());
            } else {
                memscope_observer_block(sink, block.size, block.requested_size, block.allocated, block.active,
                                        nullptr, 0);
            }
        }
    }
    return 0;
}

// Lazy release: the publisher thread only marks a slot free, and the tracker drops the context the slot held when it
// reuses the slot, on the allocating thread that made it (as without memscope), instead of the publisher thread
// freeing memory the job's thread allocated, which slows that thread where events come fast (docs/history.md).
// The slots keep the last SlotCount contexts alive, about 600 bytes each with 30 Python frames.
// MEMSCOPE_OBSERVER_RELEASE=publisher releases on the publisher thread instead.
const bool g_lazyRelease = [] {
    const char* v = std::getenv("MEMSCOPE_OBSERVER_RELEASE");
    return !(v && std::string(v) == "publisher");
}();

// Drops the contexts' references. No interpreter lock is needed: a CapturedTraceback's last reference hands its
// code objects to PyTorch's own list, freed at the next capture (combined_traceback.cpp, to_free_frames).
void releaseSlots(const uint32_t* contexts, size_t count)
{
    for (size_t i = 0; i < count; ++i) {
        if ((contexts[i] >> 24) == StateDevice) {
            g_stateContexts.erase(contexts[i]);
            continue;
        }
        if (Slot* s = slotOf(contexts[i]); s && s->busy.load(std::memory_order_acquire)) {
            if (!g_lazyRelease) {
                s->context.reset();
                s->backward.reset();
            }
            s->busy.store(false, std::memory_order_release);
        }
    }
}

void symbolizeHook(void*, const uint32_t* contexts, size_t count, memscope_observer_sink* sink)
{
    std::vector<memscope_frame> native;
    std::vector<memscope_python_frame> python;
    std::vector<uint32_t> none; // contexts without frames: the host's to release now
    for (size_t i = 0; i < count; ++i) {
        Slot* s = slotOf(contexts[i]);
        if (!s || !s->busy.load(std::memory_order_acquire))
            continue;
        bool engine = false;
        bool some = rawFrames(s->context.get(), native, python);
        // An event without Python frames that came during a backward() call: the frames of that call.
        if (python.empty() && s->backward) {
            std::vector<memscope_frame> ignored;
            if (rawFrames(s->backward.get(), ignored, python) && !python.empty()) {
                engine = true;
                some = true;
            }
        }
        if (!some) {
            none.push_back(contexts[i]);
            continue;
        }
        // The context stays held (its slot busy) until memscope releases it: its frames are named after this.
        memscope_observer_context_python(sink, contexts[i], native.data(), native.size(), python.data(),
                                         python.size(), engine ? 1 : 0);
    }
    releaseSlots(none.data(), none.size());
}

void releaseHook(void*, const uint32_t* contexts, size_t count) { releaseSlots(contexts, count); }

// The source lines that a line of torch.compile's generated code stands for, as PyTorch's own symbolize() adds
// them (combined_traceback.cpp: PyCodeCache.stack_frames_for_code), asked only where torch._inductor.codecache is
// imported already (asking must not import it). On memscope's symboliser thread, with the interpreter lock.
void pythonExtra(void*, const char* filename, int64_t line, memscope_observer_extras* out)
{
    try {
        PyObject* codecache = PyImport_GetModule(pybind11::str("torch._inductor.codecache").ptr());
        if (!codecache) {
            PyErr_Clear();
            return;
        }
        pybind11::object module = pybind11::reinterpret_steal<pybind11::object>(codecache);
        pybind11::object frames = module.attr("PyCodeCache").attr("stack_frames_for_code")(filename, line);
        if (frames.is_none())
            return;
        for (pybind11::handle f : frames) {
            const std::string name = pybind11::cast<std::string>(f["name"]);
            const std::string file = pybind11::cast<std::string>(f["filename"]);
            memscope_observer_extra_frame(out, name.c_str(), file.c_str(), pybind11::cast<int64_t>(f["line"]));
        }
    } catch (const pybind11::error_already_set&) {
        PyErr_Clear();
    } catch (...) {
    }
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
std::string start(const std::string& endpoint, bool freeContexts)
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
    g_freeContexts = freeContexts;
    const memscope_observer_hooks hooks { nullptr, &stateHook, &symbolizeHook, &releaseHook, &pythonExtra };
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

void setTracking(bool on) { g_tracking.store(on, std::memory_order_relaxed); }

// What observing has cost so far (memscope_observe_statistics), for the job to print or a proof to record.
pybind11::dict stats()
{
    memscope_observe_statistics s {};
    pybind11::dict d;
    if (memscope_observe_stats(&s) != 0)
        return d;
    d["recorded"] = s.recorded;
    d["lost"] = s.lost;
    d["contexts"] = s.contexts;
    d["stacks"] = s.stacks;
    d["python_frames"] = s.python_frames;
    d["lock_takes"] = s.lock_takes;
    d["lock_wait_ms"] = double(s.lock_wait_ns) / 1e6;
    d["lock_wait_max_ms"] = double(s.lock_wait_max_ns) / 1e6;
    d["lock_held_ms"] = double(s.lock_held_ns) / 1e6;
    d["frames_late"] = s.frames_late;
    d["without_stack"] = s.without_stack;
    d["symbolize_ms"] = double(s.symbolize_ns) / 1e6;
    uint64_t full = 0;
    for (const auto& device : g_devices)
        full += device->full.load(std::memory_order_relaxed);
    d["slots_full"] = full; // events sent without a stack because the publisher thread was that far behind
    return d;
}

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
    m.def("start", &start, "observe PyTorch's CUDA caching allocator; returns the endpoint", pybind11::arg("endpoint"),
          pybind11::arg("free_contexts") = false);
    m.def("stop", &stop, "publish what is queued and a goodbye, then stop");
    m.def("lost", &lost, "events dropped because the ring was full");
    m.def("_set_tracking", &setTracking, "measurement only: with False the tracker ignores every event");
    m.def("stats", &stats, "what observing has cost so far: symbolisation, the interpreter lock, stacks");
    m.def("backward_begin", &backwardBegin, "the calling Python stack is the autograd engine's until backward_end");
    m.def("backward_end", &backwardEnd, "ends what backward_begin(token) began");
}
