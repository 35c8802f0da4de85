// Observer and the C API of memscope/observe.h. See observer.h.
#include "observer.h"

#include "config.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace memscope::agent {

namespace {

    constexpr uint64_t NoStamp = std::numeric_limits<uint64_t>::max();
    constexpr size_t MaxStacks = size_t(1) << 22;
    constexpr unsigned ObservedDrainIntervalMs = 25;

    bool isBlockEvent(uint8_t action)
    {
        return action == MEMSCOPE_OBSERVED_ALLOC || action == MEMSCOPE_OBSERVED_FREE_REQUESTED
            || action == MEMSCOPE_OBSERVED_FREE_COMPLETED;
    }

    static_assert(MEMSCOPE_OBSERVED_ALLOC == int(wire::EventType::Alloc));
    static_assert(MEMSCOPE_OBSERVED_FREE_REQUESTED == int(wire::EventType::FreeRequested));
    static_assert(MEMSCOPE_OBSERVED_FREE_COMPLETED == int(wire::EventType::FreeCompleted));
    static_assert(MEMSCOPE_OBSERVED_SEGMENT_ALLOC == int(wire::EventType::SegmentAlloc));
    static_assert(MEMSCOPE_OBSERVED_SEGMENT_FREE == int(wire::EventType::SegmentFree));
    static_assert(MEMSCOPE_OBSERVED_SEGMENT_MAP == int(wire::EventType::SegmentMap));
    static_assert(MEMSCOPE_OBSERVED_SEGMENT_UNMAP == int(wire::EventType::SegmentUnmap));
    static_assert(MEMSCOPE_OBSERVED_OOM == int(wire::EventType::Oom));

    int64_t steadyNow()
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
            std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

    // memscope_torch.py's own frames (its backward() wrapper) are none of the user's.
    bool isOwnFrame(std::string_view file) { return file.ends_with("memscope_torch.py"); }

} // namespace

// The publisher thread inside a host hook (the watchdog reports one that does not return).
struct Observer::HookScope {
    Observer& o;
    HookScope(Observer& observer, const char* name)
        : o(observer)
    {
        o.m_hookName.store(name);
        o.m_hookSinceNs.store(steadyNow());
    }
    ~HookScope() { o.m_hookSinceNs.store(0); }
};

Observer::Observer(const memscope_observer_hooks& hooks, const AllocatorConfig& config, int deviceCount,
                   PublisherOptions options)
    : m_hooks(hooks)
    , m_deviceCount(std::clamp(deviceCount, 1, 64))
    , m_settings(settingsLines(config))
    , m_layout(config)
    , m_stamps(new std::atomic<uint64_t>[size_t(m_deviceCount)])
    , m_allocStacks(size_t(m_deviceCount))
{
    options.stackDepth = 0; // the observed allocator's stacks are its contexts, not ours
    options.pythonStacks = 0;
    // Contexts are symbolised with the host's interpreter lock (Python frames): every drain takes it from the job's
    // threads. Fewer, larger batches take it less often and symbolise each distinct frame once per batch.
    options.drainIntervalMs = std::max(options.drainIntervalMs, ObservedDrainIntervalMs);
    m_publisher = std::make_unique<Publisher>(*this, std::move(options));
    for (int d = 0; d < m_deviceCount; ++d)
        m_stamps[size_t(d)].store(NoStamp);
    m_symboliser = std::make_unique<PythonSymboliser>(&Observer::extraFrames, this);
}

Observer::~Observer()
{
    stop();
    {
        std::lock_guard lock(m_watchMutex);
        m_watchStop = true;
    }
    m_watchWake.notify_all();
    if (m_watchdog.joinable())
        m_watchdog.join();
    {
        std::lock_guard lock(m_callMutex);
        m_callStop = true;
    }
    m_callWake.notify_all();
    if (m_hookThread.joinable()) {
        if (m_call)
            m_hookThread.detach(); // a hook that never returns: the thread is left to it
        else
            m_hookThread.join();
    }
}

void Observer::hookThread()
{
    std::unique_lock lock(m_callMutex);
    for (;;) {
        m_callWake.wait(lock, [this] { return m_callStop || m_call; });
        if (!m_call)
            return;
        const std::function<void()>* call = m_call;
        lock.unlock();
        (*call)();
        lock.lock();
        m_call = nullptr;
        m_callWake.notify_all();
    }
}

void Observer::runOnHookThread(const std::function<void()>& call, StackSender& sender)
{
    std::unique_lock lock(m_callMutex);
    if (!m_hookThread.joinable())
        m_hookThread = std::thread([this] { hookThread(); });
    m_call = &call;
    m_callWake.notify_all();
    while (!m_callWake.wait_for(lock, std::chrono::milliseconds(100), [this] { return m_call == nullptr; })) {
        lock.unlock();
        sender.keepAlive();
        lock.lock();
    }
}

bool Observer::start(std::string* error)
{
    if (!m_publisher->start(error))
        return false;
    if (!m_watchdog.joinable())
        m_watchdog = std::thread([this] { watch(); });
    return true;
}

void Observer::stop(unsigned maxWaitMs)
{
    const bool finished = m_publisher->stop(maxWaitMs);
    // A publisher thread that outlived the wait may still be inside a hook: wait for it to leave, and let none in.
    if (!finished && m_hookSinceNs.load() != 0)
        std::fprintf(stderr,
                     "memscope: the publisher thread is still inside the host's %s hook at stop; the viewers may "
                     "miss the last events and the goodbye\n",
                     m_hookName.load());
    std::lock_guard lock(m_hookMutex);
    m_stopped = true;
}

void Observer::watch()
{
    int64_t reported = 0; // the hook entry already reported
    std::unique_lock lock(m_watchMutex);
    while (!m_watchWake.wait_for(lock, std::chrono::milliseconds(500), [this] { return m_watchStop; })) {
        const int64_t since = m_hookSinceNs.load();
        if (since == 0 || since == reported)
            continue;
        const int64_t ns = steadyNow() - since;
        if (ns < int64_t(WatchdogSeconds) * 1000000000)
            continue;
        reported = since;
        std::fprintf(stderr,
                     "memscope: the publisher thread has been inside the host's %s hook for %.1f s: nothing is "
                     "published meanwhile (events wait in the ring, dropped once it is full)\n",
                     m_hookName.load(), double(ns) / 1e9);
    }
}

void Observer::extraFrames(void* user, const char* file, int line, std::vector<python::ExtraFrame>& out)
{
    auto* o = static_cast<Observer*>(user);
    if (o->m_hooks.python_extra)
        o->m_hooks.python_extra(o->m_hooks.user, file, line, reinterpret_cast<memscope_observer_extras*>(&out));
}

int Observer::event(const memscope_observed_event& e) noexcept
{
    if (e.device >= m_deviceCount)
        return 0;
    if (e.action == MEMSCOPE_OBSERVED_SNAPSHOT) {
        // Only the states the publisher thread takes are stamped: a snapshot the job takes on its own threads says
        // nothing about ours.
        if (m_stamping.load(std::memory_order_acquire) && m_publisher->onPublisherThread())
            m_stamps[e.device].store(m_publisher->ring(e.device).written(), std::memory_order_release);
        return 0;
    }
    if (e.action > MEMSCOPE_OBSERVED_OOM)
        return 0;
    return m_publisher->pushObserved(e.device,
                                     [&](wire::EventRecord& r) noexcept {
                                         r.type = e.action;
                                         r.device = e.device;
                                         r.address = e.address;
                                         // Block events carry the request; the block's size is derived on the publisher
                                         // thread (complete()).
                                         r.size = isBlockEvent(e.action) ? 0 : e.size;
                                         r.requestedSize = isBlockEvent(e.action) ? e.size : 0;
                                         r.stream = e.stream;
                                         r.poolFirst = int32_t(e.pool_first);
                                         r.poolSecond = int32_t(e.pool_second);
                                         // a context until complete() turns it into a stack id
                                         r.stackId = (e.flags & MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT) && !e.context
                                             ? AllocationStack
                                             : e.context;
                                         std::memset(r.reserved, 0, sizeof r.reserved);
                                     })
        ? 1
        : 0;
}

bool Observer::takeState(const std::vector<EventRing*>& rings, std::vector<SegmentInfo>& state,
                         std::vector<uint64_t>& written)
{
    std::lock_guard lock(m_hookMutex);
    if (m_stopped)
        return false;
    for (int d = 0; d < m_deviceCount; ++d)
        m_stamps[size_t(d)].store(NoStamp);
    memscope_observer_sink sink;
    sink.observer = this;
    sink.state = &state;
    m_raw.clear();
    m_rawNative.clear();
    m_rawPython.clear();
    m_stamping.store(true, std::memory_order_release);
    int rc = 0;
    {
        // On the hook thread, as the symbolize hook: a state hook that takes long (the host's allocator locks) leaves
        // the publisher thread free to send heartbeats, so viewers do not take the job for silent meanwhile.
        const std::function<void()> call = [&] {
            HookScope scope(*this, "state");
            rc = m_hooks.state(m_hooks.user, &sink);
        };
        runOnHookThread(call, *m_publisher);
    }
    m_stamping.store(false, std::memory_order_release);
    if (rc != 0)
        return false;
    if (!m_raw.empty()) {
        std::vector<uint32_t> ids;
        resolveRaw(StateWaitMs, ids);
        for (size_t i = 0; i < m_raw.size(); ++i) {
            const RawStack& r = m_raw[i];
            if (r.segment < state.size() && r.block < state[r.segment].blocks.size())
                state[r.segment].blocks[r.block].stackId = ids[i];
        }
    }
    releaseRaw();
    for (size_t d = 0; d < rings.size(); ++d) {
        const uint64_t stamp = d < size_t(m_deviceCount) ? m_stamps[d].load(std::memory_order_acquire) : NoStamp;
        // A device whose allocator reported no snapshot event (none in use yet): nothing of it can be in flight.
        written[d] = stamp != NoStamp ? stamp : rings[d]->written();
    }
    std::stable_sort(state.begin(), state.end(), [](const SegmentInfo& a, const SegmentInfo& b) {
        return a.device != b.device ? a.device < b.device : a.address < b.address;
    });
    return true;
}

void Observer::complete(wire::EventRecord* records, size_t count, StackSender& sender)
{
    m_contexts.clear();
    for (size_t i = 0; i < count; ++i) {
        m_layout.apply(records[i]);
        if (records[i].stackId != 0 && records[i].stackId != AllocationStack)
            m_contexts.push_back(records[i].stackId);
    }
    m_contextStacks.clear();
    if (!m_contexts.empty()) {
        const int64_t t0 = steadyNow();
        m_contextCount.fetch_add(m_contexts.size(), std::memory_order_relaxed);
        m_raw.clear();
        m_rawNative.clear();
        m_rawPython.clear();
        {
            std::lock_guard lock(m_hookMutex);
            if (!m_stopped) {
                memscope_observer_sink sink;
                sink.observer = this;
                // On the hook thread: the publisher thread waits, sending heartbeats, and the hook's frames reach
                // m_raw through the sink before the wait ends (the hand-over's mutex orders them).
                const std::function<void()> call = [&] {
                    HookScope scope(*this, "symbolize");
                    m_hooks.symbolize(m_hooks.user, m_contexts.data(), m_contexts.size(), &sink);
                };
                runOnHookThread(call, sender);
            }
        }
        if (!m_raw.empty()) {
            std::vector<uint32_t> ids;
            resolveRaw(BatchWaitMs, ids);
            for (size_t i = 0; i < m_raw.size(); ++i)
                m_contextStacks[m_raw[i].context] = ids[i];
        }
        {
            std::lock_guard lock(m_hookMutex);
            if (!m_stopped)
                releaseRaw();
        }
        m_symbolizeNs.fetch_add(uint64_t(steadyNow() - t0), std::memory_order_relaxed);
    }
    for (size_t i = 0; i < count; ++i) {
        wire::EventRecord& r = records[i];
        if (r.stackId == AllocationStack) {
            // A free with its allocation's context: that allocation's stack, as PyTorch's trace shows it.
            auto& live = m_allocStacks[r.device];
            auto it = live.find(r.address);
            r.stackId = it == live.end() ? 0 : it->second;
        } else if (r.stackId != 0) {
            auto it = m_contextStacks.find(r.stackId);
            r.stackId = it == m_contextStacks.end() ? 0 : it->second;
        }
        if (r.type == uint8_t(wire::EventType::Alloc)) {
            if (r.stackId)
                m_allocStacks[r.device][r.address] = r.stackId;
            else
                m_allocStacks[r.device].erase(r.address);
        } else if (r.type == uint8_t(wire::EventType::FreeCompleted)) {
            m_allocStacks[r.device].erase(r.address);
        }
    }
    sendNewStacks(sender);
}

void Observer::addRaw(RawStack raw, const memscope_frame* native, size_t nativeCount,
                      const memscope_python_frame* python, size_t pythonCount)
{
    nativeCount = native ? std::min(nativeCount, size_t(wire::MaxStackFrames)) : 0;
    pythonCount = python ? std::min(pythonCount, size_t(wire::MaxStackFrames)) : 0;
    raw.nativeFirst = uint32_t(m_rawNative.size());
    raw.nativeCount = uint32_t(nativeCount);
    for (size_t i = 0; i < nativeCount; ++i) {
        if (!native[i].name && !native[i].filename)
            m_rawNative.push_back({ "", "", -1 }); // where the next Python frame goes
        else
            m_rawNative.push_back({ native[i].name ? native[i].name : "", native[i].filename ? native[i].filename : "",
                                    native[i].line });
    }
    raw.pythonFirst = uint32_t(m_rawPython.size());
    raw.pythonCount = uint32_t(pythonCount);
    for (size_t i = 0; i < pythonCount; ++i)
        m_rawPython.push_back({ reinterpret_cast<uintptr_t>(python[i].code), python[i].instruction });
    m_raw.push_back(raw);
}

void Observer::resolveRaw(unsigned waitMs, std::vector<uint32_t>& ids)
{
    ids.assign(m_raw.size(), 0);
    m_rawKeys.assign(m_rawPython.size(), 0);
    // Stacks of Python frames alone seen before: one hash of their pairs each, no naming.
    std::vector<bool> done(m_raw.size(), false);
    std::vector<python::RawFrame> unknown;
    for (size_t i = 0; i < m_raw.size(); ++i) {
        const RawStack& r = m_raw[i];
        if (r.nativeCount == 0) {
            m_rawKey.assign(reinterpret_cast<const char*>(m_rawPython.data() + r.pythonFirst),
                            r.pythonCount * sizeof(python::RawFrame));
            m_rawKey += r.engine ? 'E' : 'P';
            if (auto it = m_rawStackIds.find(std::string_view(m_rawKey)); it != m_rawStackIds.end()) {
                ids[i] = it->second;
                done[i] = true;
                m_releaseNow.push_back(r.context);
                continue;
            }
        }
        unknown.insert(unknown.end(), m_rawPython.begin() + r.pythonFirst,
                       m_rawPython.begin() + r.pythonFirst + r.pythonCount);
    }
    if (unknown.empty() && std::find(done.begin(), done.end(), false) == done.end())
        return;
    // Name them: the table's frames at once, the others on the symboliser's thread (a bounded wait).
    std::vector<uintptr_t> unknownKeys(unknown.size());
    uint64_t pass = 0;
    const bool named = m_symboliser->resolve(unknown.data(), unknown.size(), unknownKeys.data(), waitMs, &pass);
    if (!named) {
        size_t late = 0;
        for (uintptr_t k : unknownKeys)
            late += k == 0;
        m_framesLate.fetch_add(late, std::memory_order_relaxed);
        if (!m_lateReported) {
            m_lateReported = true;
            const uint64_t waiting = m_symboliser->lockWaitingNs();
            if (waiting > 0)
                std::fprintf(stderr,
                             "memscope: Python stacks are late: the symboliser has waited %.1f s for the interpreter "
                             "lock (GIL), which a thread of the job holds; events are published without their "
                             "stacks until it gets it\n",
                             double(waiting) / 1e9);
            else
                std::fprintf(stderr,
                             "memscope: Python stacks are late: %zu frames were not named within %u ms; events are "
                             "published without their stacks until they are\n",
                             late, waitMs);
        }
    } else if (m_lateReported) {
        m_lateReported = false;
        std::fprintf(stderr, "memscope: Python stacks are named again (%llu events went out without theirs)\n",
                     static_cast<unsigned long long>(m_withoutStack.load()));
    }
    const uintptr_t engine = python::engineKey();
    size_t at = 0;
    std::vector<uintptr_t> extras(wire::MaxStackFrames);
    for (size_t i = 0; i < m_raw.size(); ++i) {
        if (done[i])
            continue;
        const RawStack& r = m_raw[i];
        const uintptr_t* keys = unknownKeys.data() + at;
        at += r.pythonCount;
        if (std::find(keys, keys + r.pythonCount, uintptr_t(0)) != keys + r.pythonCount) {
            m_withoutStack.fetch_add(1, std::memory_order_relaxed);
            // Not named in time: no stack (a later event of the same place will have it). The symboliser's thread
            // may still read these code objects: the context stays the host's until that pass is over.
            m_releaseAfter.emplace_back(pass, r.context);
            continue;
        }
        m_releaseNow.push_back(r.context);
        std::vector<SymbolFrame> stack;
        stack.reserve(r.nativeCount + r.pythonCount + 1);
        python::Frame f {};
        uint32_t next = 0; // the next Python frame
        auto appendPython = [&](uint32_t k) {
            if (!python::symbolise(keys[k], f) || isOwnFrame(f.file))
                return;
            stack.push_back({ f.name, f.file, f.line });
            const unsigned n = python::extras(keys[k], extras.data(), unsigned(extras.size()));
            for (unsigned e = 0; e < n; ++e) {
                if (python::symbolise(extras[e], f))
                    stack.push_back({ f.name, f.file, f.line });
            }
        };
        for (uint32_t n = 0; n < r.nativeCount; ++n) {
            const SymbolFrame& native = m_rawNative[r.nativeFirst + n];
            if (native.name.empty() && native.filename.empty() && native.line == -1) {
                if (next < r.pythonCount)
                    appendPython(next++);
            } else {
                stack.push_back(native);
            }
        }
        if (r.engine && engine != 0 && python::symbolise(engine, f))
            stack.push_back({ f.name, f.file, f.line });
        while (next < r.pythonCount)
            appendPython(next++);
        ids[i] = intern(std::move(stack));
        if (r.nativeCount == 0) {
            // Every code object named here is held by the table: these bytes keep naming the same frames.
            m_rawKey.assign(reinterpret_cast<const char*>(m_rawPython.data() + r.pythonFirst),
                            r.pythonCount * sizeof(python::RawFrame));
            m_rawKey += r.engine ? 'E' : 'P';
            if (m_rawStackIds.size() < MaxStacks)
                m_rawStackIds.emplace(m_rawKey, ids[i]);
        }
    }
}

void Observer::releaseRaw()
{
    if (!m_releaseAfter.empty()) {
        const uint64_t done = m_symboliser->passesDone();
        auto kept = std::remove_if(m_releaseAfter.begin(), m_releaseAfter.end(), [&](const auto& late) {
            if (late.first > done)
                return false;
            m_releaseNow.push_back(late.second);
            return true;
        });
        m_releaseAfter.erase(kept, m_releaseAfter.end());
    }
    if (!m_releaseNow.empty() && m_hooks.release)
        m_hooks.release(m_hooks.user, m_releaseNow.data(), m_releaseNow.size());
    m_releaseNow.clear();
}

void Observer::discard(const wire::EventRecord* records, size_t count)
{
    m_contexts.clear();
    for (size_t i = 0; i < count; ++i) {
        if (records[i].stackId != 0 && records[i].stackId != AllocationStack)
            m_contexts.push_back(records[i].stackId);
    }
    if (m_contexts.empty() || !m_hooks.release)
        return;
    std::lock_guard lock(m_hookMutex);
    if (!m_stopped)
        m_hooks.release(m_hooks.user, m_contexts.data(), m_contexts.size());
}

void Observer::stateSent(const std::vector<SegmentInfo>& state)
{
    m_layout.reset(state);
    // The stacks of the blocks alive in the state, for the frees to come that carry their allocation's.
    for (const SegmentInfo& seg : state) {
        if (seg.device < 0 || seg.device >= m_deviceCount)
            continue;
        uint64_t address = seg.address;
        for (const BlockInfo& b : seg.blocks) {
            const uint64_t at = b.address ? b.address : address;
            if (b.active && b.stackId)
                m_allocStacks[size_t(seg.device)].emplace(at, b.stackId);
            address = at + b.size;
        }
    }
}

void Observer::resendStacks(StackSender& sender)
{
    sendNewStacks(sender);
    for (size_t i = 0; i < m_stacksSent; ++i)
        sender.sendSymbolizedStack(uint32_t(i + 1), m_stacks[i]);
}

void Observer::sendNewStacks(StackSender& sender)
{
    for (; m_stacksSent < m_stacks.size(); ++m_stacksSent)
        sender.sendSymbolizedStack(uint32_t(m_stacksSent + 1), m_stacks[m_stacksSent]);
    m_stacksSentCount.store(m_stacksSent, std::memory_order_relaxed);
}

uint32_t Observer::intern(const memscope_frame* frames, size_t count)
{
    if (!frames || count == 0)
        return 0;
    count = std::min(count, size_t(wire::MaxStackFrames));
    std::vector<SymbolFrame> stack(count);
    for (size_t i = 0; i < count; ++i) {
        stack[i].name = frames[i].name ? frames[i].name : "";
        stack[i].filename = frames[i].filename ? frames[i].filename : "";
        stack[i].line = frames[i].line;
    }
    return intern(std::move(stack));
}

uint32_t Observer::intern(std::vector<SymbolFrame> stack)
{
    if (stack.empty())
        return 0;
    if (stack.size() > wire::MaxStackFrames)
        stack.resize(wire::MaxStackFrames);
    std::string key;
    for (const SymbolFrame& f : stack) {
        key += f.name;
        key += '\0';
        key += f.filename;
        key += '\0';
        key += std::to_string(f.line);
        key += '\0';
    }
    auto it = m_stackIds.find(key);
    if (it != m_stackIds.end())
        return it->second;
    if (m_stacks.size() >= MaxStacks)
        return 0;
    m_stacks.push_back(std::move(stack));
    const uint32_t id = uint32_t(m_stacks.size());
    m_stackIds.emplace(std::move(key), id);
    return id;
}

void Observer::sinkSegment(memscope_observer_sink& sink, int device, uint64_t address, uint64_t stream, PoolId pool,
                           bool isLarge, bool isExpandable)
{
    if (!sink.state || device < 0 || device >= m_deviceCount)
        return;
    SegmentInfo s;
    s.device = device;
    s.address = address;
    s.stream = StreamId { stream };
    s.pool = pool;
    s.isLarge = isLarge;
    s.isExpandable = isExpandable;
    sink.state->push_back(std::move(s));
    sink.nextBlock = address;
}

void Observer::sinkBlock(memscope_observer_sink& sink, uint64_t size, uint64_t requested, bool allocated, bool active,
                         const memscope_frame* frames, size_t count)
{
    if (!sink.state || sink.state->empty())
        return;
    SegmentInfo& s = sink.state->back();
    BlockInfo b;
    b.address = sink.nextBlock;
    b.size = size;
    b.requestedSize = requested;
    b.allocated = allocated;
    b.active = allocated || active;
    b.stackId = b.active ? intern(frames, count) : 0;
    sink.nextBlock += size;
    s.totalSize += size;
    if (b.allocated)
        s.allocatedSize += size;
    if (b.active) {
        s.activeSize += size;
        s.requestedSize += requested;
    }
    s.blocks.push_back(b);
}

void Observer::sinkContextFrames(memscope_observer_sink& sink, uint32_t context, const memscope_frame* frames,
                                 size_t count)
{
    (void)sink;
    if (context != 0)
        m_contextStacks[context] = intern(frames, count);
}

void Observer::sinkContextPython(memscope_observer_sink& sink, uint32_t context, const memscope_frame* native,
                                 size_t nativeCount, const memscope_python_frame* python, size_t pythonCount,
                                 bool engine)
{
    if (context == 0 || sink.state)
        return;
    RawStack raw;
    raw.context = context;
    raw.engine = engine;
    addRaw(raw, native, nativeCount, python, pythonCount);
}

void Observer::sinkBlockPython(memscope_observer_sink& sink, uint64_t size, uint64_t requested, bool allocated,
                               bool active, uint32_t context, const memscope_frame* native, size_t nativeCount,
                               const memscope_python_frame* python, size_t pythonCount)
{
    if (!sink.state || sink.state->empty())
        return;
    sinkBlock(sink, size, requested, allocated, active, nullptr, 0);
    if (context == 0)
        return;
    RawStack raw;
    raw.context = context;
    raw.isBlock = true;
    raw.segment = sink.state->size() - 1;
    raw.block = sink.state->back().blocks.size() - 1;
    addRaw(raw, native, nativeCount, python, pythonCount);
}

memscope_observe_statistics Observer::statistics() const
{
    memscope_observe_statistics s {};
    s.recorded = m_publisher->recorded();
    s.lost = m_publisher->lost();
    s.contexts = m_contextCount.load();
    s.stacks = m_stacksSentCount.load();
    s.python_frames = python::framesKnown();
    const PythonSymboliser::Stats p = m_symboliser->stats();
    s.lock_takes = p.lockTakes;
    s.lock_wait_ns = p.lockWaitNs;
    s.lock_wait_max_ns = p.lockWaitMaxNs;
    s.lock_held_ns = p.lockHeldNs;
    s.frames_late = m_framesLate.load();
    s.without_stack = m_withoutStack.load();
    s.symbolize_ns = m_symbolizeNs.load();
    return s;
}

} // namespace memscope::agent

// --- the C API ---------------------------------------------------------------------------------------------------

using memscope::agent::Observer;

namespace {

std::mutex g_observeMutex; // start/stop only; never taken by memscope_observe_event
std::atomic<Observer*> g_observer { nullptr }; // old observers are leaked: a tracker may still be inside event()
std::atomic<Observer*> g_lastObserver { nullptr }; // the running one, or the last that ran (its statistics)
std::string g_endpoint;

} // namespace

bool memscope::agent::annotateObserved(int device, bool start, std::string_view name)
{
    Observer* o = g_observer.load(std::memory_order_acquire);
    return o && o->publisher().annotate(device, start, name);
}

namespace {

} // namespace

int memscope_observe_start(const char* endpoint, int device_count, const char* allocator_settings,
                           const memscope_observer_hooks* hooks) noexcept
{
    using namespace memscope::agent;
    try {
        if (!hooks || !hooks->state || !hooks->symbolize) {
            setLastApiError("memscope_observe_start: the state and symbolize hooks are required");
            return -1;
        }
        const ConfigParse config = parseAllocatorConfig(allocator_settings ? allocator_settings : "");
        if (!config.ok) {
            setLastApiError("memscope_observe_start: the allocator settings '"
                            + std::string(allocator_settings ? allocator_settings : "")
                            + "' do not parse: " + config.error);
            return -1;
        }
        if (device_count < 1 || device_count > 64) {
            setLastApiError("memscope_observe_start: device_count must be 1..64, not " + std::to_string(device_count));
            return -1;
        }
        std::lock_guard lock(g_observeMutex);
        if (Observer* old = g_observer.exchange(nullptr)) {
            old->stop();
            g_endpoint.clear();
        }
        PublisherOptions options;
        options.endpoint = endpoint ? endpoint : "";
        auto* observer = new Observer(*hooks, config.config, device_count, options);
        std::string why;
        if (!observer->start(&why)) {
            delete observer;
            setLastApiError(why);
            return -1;
        }
        g_endpoint = observer->publisher().endpoint();
        g_observer.store(observer, std::memory_order_release);
        g_lastObserver.store(observer, std::memory_order_release);
        // MEMSCOPE_WAIT_FOR_VIEWER=S: a job whose first allocation comes right after this (a short script) waits
        // up to S seconds for a viewer started before it to take its state, so that the recording has it all.
        if (const char* wait = std::getenv("MEMSCOPE_WAIT_FOR_VIEWER"); wait && *wait) {
            const double seconds = std::strtod(wait, nullptr);
            const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
            while (observer->publisher().statesReplied() == 0 && std::chrono::steady_clock::now() < until)
                std::this_thread::sleep_for(std::chrono::milliseconds(2));
            if (observer->publisher().statesReplied() == 0)
                std::fprintf(stderr, "memscope: no viewer took the state within %s s (MEMSCOPE_WAIT_FOR_VIEWER); the "
                                     "job goes on\n", wait);
            else // the viewer's subscription travels on its own connection, which may come up a reconnect later
                std::this_thread::sleep_for(std::chrono::milliseconds(300));
        }
        return 0;
    } catch (const std::exception& e) {
        setLastApiError(std::string("memscope_observe_start: ") + e.what());
        return -1;
    }
}

int memscope_observe_event(const memscope_observed_event* event) noexcept
{
    Observer* o = g_observer.load(std::memory_order_acquire);
    return o && event ? o->event(*event) : 0;
}

void memscope_observe_stop(void) noexcept
{
    std::lock_guard lock(g_observeMutex);
    if (Observer* o = g_observer.exchange(nullptr)) {
        o->stop();
        g_endpoint.clear();
    }
}

const char* memscope_observe_endpoint(void) noexcept { return g_endpoint.c_str(); }

uint64_t memscope_observe_lost(void) noexcept
{
    Observer* o = g_observer.load(std::memory_order_acquire);
    return o ? o->publisher().lost() : 0;
}

void memscope_observer_segment(memscope_observer_sink* sink, int device, uint64_t address, uint64_t stream,
                               int64_t pool_first, int64_t pool_second, int is_large, int is_expandable) noexcept
{
    try {
        if (sink && sink->observer)
            sink->observer->sinkSegment(*sink, device, address, stream,
                                        memscope::agent::PoolId { pool_first, pool_second }, is_large != 0,
                                        is_expandable != 0);
    } catch (...) {
    }
}

void memscope_observer_block(memscope_observer_sink* sink, uint64_t size, uint64_t requested_size, int allocated,
                             int active, const memscope_frame* frames, size_t frame_count) noexcept
{
    try {
        if (sink && sink->observer)
            sink->observer->sinkBlock(*sink, size, requested_size, allocated != 0, active != 0, frames, frame_count);
    } catch (...) {
    }
}

int memscope_observe_stats(memscope_observe_statistics* out) noexcept
{
    Observer* o = g_lastObserver.load(std::memory_order_acquire);
    if (!o || !out)
        return -1;
    *out = o->statistics();
    return 0;
}

void memscope_observer_context_python(memscope_observer_sink* sink, uint32_t context, const memscope_frame* native,
                                      size_t native_count, const memscope_python_frame* python, size_t python_count,
                                      int engine) noexcept
{
    try {
        if (sink && sink->observer)
            sink->observer->sinkContextPython(*sink, context, native, native_count, python, python_count,
                                              engine != 0);
    } catch (...) {
    }
}

void memscope_observer_block_python(memscope_observer_sink* sink, uint64_t size, uint64_t requested_size,
                                    int allocated, int active, uint32_t context, const memscope_frame* native,
                                    size_t native_count, const memscope_python_frame* python,
                                    size_t python_count) noexcept
{
    try {
        if (sink && sink->observer)
            sink->observer->sinkBlockPython(*sink, size, requested_size, allocated != 0, active != 0, context,
                                            native, native_count, python, python_count);
    } catch (...) {
    }
}

void memscope_observer_extra_frame(memscope_observer_extras* out, const char* name, const char* filename,
                                   int64_t line) noexcept
{
    try {
        if (out)
            reinterpret_cast<std::vector<memscope::agent::python::ExtraFrame>*>(out)->push_back(
                { name ? name : "", filename ? filename : "", int(line) });
    } catch (...) {
    }
}

void memscope_observer_context_frames(memscope_observer_sink* sink, uint32_t context, const memscope_frame* frames,
                                      size_t frame_count) noexcept
{
    try {
        if (sink && sink->observer)
            sink->observer->sinkContextFrames(*sink, context, frames, frame_count);
    } catch (...) {
    }
}
