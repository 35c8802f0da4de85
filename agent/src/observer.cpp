// Observer and the C API of memscope/observe.h. See observer.h.
#include "observer.h"

#include "config.h"

#include <algorithm>
#include <cstdio>
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

} // namespace

Observer::Observer(const memscope_observer_hooks& hooks, const AllocatorConfig& config, int deviceCount,
                   PublisherOptions options)
    : m_hooks(hooks)
    , m_deviceCount(std::clamp(deviceCount, 1, 64))
    , m_settings(settingsLines(config))
    , m_layout(config)
    , m_stamps(new std::atomic<uint64_t>[size_t(m_deviceCount)])
{
    options.stackDepth = 0; // the observed allocator's stacks are its contexts, not ours
    options.pythonStacks = 0;
    // Contexts are symbolised with the host's interpreter lock (Python frames): every drain takes it from the job's
    // threads. Fewer, larger batches take it less often and symbolise each distinct frame once per batch.
    options.drainIntervalMs = std::max(options.drainIntervalMs, ObservedDrainIntervalMs);
    m_publisher = std::make_unique<Publisher>(*this, std::move(options));
    for (int d = 0; d < m_deviceCount; ++d)
        m_stamps[size_t(d)].store(NoStamp);
}

Observer::~Observer() { stop(); }

bool Observer::start(std::string* error) { return m_publisher->start(error); }

void Observer::stop(unsigned maxWaitMs)
{
    m_publisher->stop(maxWaitMs);
    // A publisher thread that outlived the wait may still be inside a hook: wait for it to leave, and let none in.
    std::lock_guard lock(m_hookMutex);
    m_stopped = true;
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
                                         r.stackId = e.context; // a context until complete() turns it into a stack id
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
    m_stamping.store(true, std::memory_order_release);
    const int rc = m_hooks.state(m_hooks.user, &sink);
    m_stamping.store(false, std::memory_order_release);
    if (rc != 0)
        return false;
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
        if (records[i].stackId != 0)
            m_contexts.push_back(records[i].stackId);
    }
    m_contextStacks.clear();
    if (!m_contexts.empty()) {
        std::lock_guard lock(m_hookMutex);
        if (!m_stopped) {
            memscope_observer_sink sink;
            sink.observer = this;
            m_hooks.symbolize(m_hooks.user, m_contexts.data(), m_contexts.size(), &sink);
        }
    }
    for (size_t i = 0; i < count; ++i) {
        if (records[i].stackId == 0)
            continue;
        auto it = m_contextStacks.find(records[i].stackId);
        records[i].stackId = it == m_contextStacks.end() ? 0 : it->second;
    }
    sendNewStacks(sender);
}

void Observer::discard(const wire::EventRecord* records, size_t count)
{
    m_contexts.clear();
    for (size_t i = 0; i < count; ++i) {
        if (records[i].stackId != 0)
            m_contexts.push_back(records[i].stackId);
    }
    if (m_contexts.empty() || !m_hooks.release)
        return;
    std::lock_guard lock(m_hookMutex);
    if (!m_stopped)
        m_hooks.release(m_hooks.user, m_contexts.data(), m_contexts.size());
}

void Observer::stateSent(const std::vector<SegmentInfo>& state) { m_layout.reset(state); }

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
}

uint32_t Observer::intern(const memscope_frame* frames, size_t count)
{
    if (!frames || count == 0)
        return 0;
    count = std::min(count, size_t(wire::MaxStackFrames));
    std::string key;
    for (size_t i = 0; i < count; ++i) {
        key += frames[i].name ? frames[i].name : "";
        key += '\0';
        key += frames[i].filename ? frames[i].filename : "";
        key += '\0';
        key += std::to_string(frames[i].line);
        key += '\0';
    }
    auto it = m_stackIds.find(key);
    if (it != m_stackIds.end())
        return it->second;
    if (m_stacks.size() >= MaxStacks)
        return 0;
    std::vector<SymbolFrame> stack(count);
    for (size_t i = 0; i < count; ++i) {
        stack[i].name = frames[i].name ? frames[i].name : "";
        stack[i].filename = frames[i].filename ? frames[i].filename : "";
        stack[i].line = frames[i].line;
    }
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

} // namespace memscope::agent

// --- the C API ---------------------------------------------------------------------------------------------------

using memscope::agent::Observer;

namespace {

std::mutex g_observeMutex; // start/stop only; never taken by memscope_observe_event
std::atomic<Observer*> g_observer { nullptr }; // old observers are leaked: a tracker may still be inside event()
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

void memscope_observer_context_frames(memscope_observer_sink* sink, uint32_t context, const memscope_frame* frames,
                                      size_t frame_count) noexcept
{
    try {
        if (sink && sink->observer)
            sink->observer->sinkContextFrames(*sink, context, frames, frame_count);
    } catch (...) {
    }
}
