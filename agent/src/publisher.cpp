// Publisher: the ZeroMQ side of the agent (see publisher.h): the hot path (onTraceEvent) writes one record into
// the ring; the "memscope-pub" thread, run() here, does every socket call, every allocation and every syscall: it
// drains the rings into batches and sends them, with the stack definitions, notes, settings, heartbeats and the
// Goodbye. Each other concern has its file: the clock (clock.h), the environment (publishenv.h), where and how to
// bind (endpointpolicy.h, curve.h), the sockets (sockets.h), symbolisation (symbolizer.h), LZ4
// (batchcompressor.h), the ZAP handler (curve.h) and the state server (stateserver.h).
#include "publisher.h"

#include "publishenv.h"

#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

namespace memscope::agent {
namespace {

    // At most 72 KiB per message: ZeroMQ bounds what it queues for a viewer in messages (ZMQ_SNDHWM,
    // zmq_setsockopt(3)), so a bounded message size is what turns that count into bytes (viewerQueueMessages).
    constexpr size_t MaxBatchRecords = 1024;
    constexpr size_t MaxBatchBytes = sizeof(wire::BatchHeader) + MaxBatchRecords * sizeof(wire::EventRecord);
    // How long records may wait in the ring to fill a batch: at 100 k records/s and more every batch is full.
    constexpr unsigned BatchFillMs = 10;

    int64_t steadyNs()
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }

    // The messages ZeroMQ may queue for one viewer so that they hold at most `bytes` (every batch is at most
    // MaxBatchBytes; stacks, notes and settings are smaller but for rare large stacks). A viewer that reads slower
    // than the job publishes, or not at all, then loses whole batches beyond its share: PUB drops them for that
    // viewer alone (zmq_socket(3), ZMQ_PUB: "messages ... dropped" at the high water mark), which sees a sequence
    // gap and resynchronises. The job's memory never depends on how fast anyone reads.
    int viewerQueueMessages(size_t bytes) { return int(std::clamp<size_t>(bytes / MaxBatchBytes, 16, 1 << 20)); }

    wire::EventType eventType(TraceAction action) noexcept
    {
        switch (action) {
        case TraceAction::Alloc:
            return wire::EventType::Alloc;
        case TraceAction::FreeRequested:
            return wire::EventType::FreeRequested;
        case TraceAction::FreeCompleted:
            return wire::EventType::FreeCompleted;
        case TraceAction::SegmentAlloc:
            return wire::EventType::SegmentAlloc;
        case TraceAction::SegmentFree:
            return wire::EventType::SegmentFree;
        case TraceAction::SegmentMap:
            return wire::EventType::SegmentMap;
        case TraceAction::SegmentUnmap:
            return wire::EventType::SegmentUnmap;
        case TraceAction::Oom:
        case TraceAction::Count:
            break;
        }
        return wire::EventType::Oom;
    }

    template <typename T> void append(std::vector<char>& out, const T& value)
    {
        const char* p = reinterpret_cast<const char*>(&value);
        out.insert(out.end(), p, p + sizeof(T));
    }

    // memscope's own allocator as a source: its state is taken under every device lock at once, so the rings'
    // positions read there are exact.
    class AllocatorSource final : public EventSource {
    public:
        explicit AllocatorSource(CachingAllocator& allocator)
            : m_allocator(allocator)
        {
        }
        int deviceCount() const override { return m_allocator.deviceCount(); }
        bool takeState(const std::vector<EventRing*>& rings, std::vector<SegmentInfo>& state,
                       std::vector<uint64_t>& written) override
        {
            state = m_allocator.snapshotAll([&] {
                for (size_t d = 0; d < rings.size(); ++d)
                    written[d] = rings[d]->written();
            });
            return true;
        }
        std::string settings() const override { return settingsLines(m_allocator.config()); }

    private:
        CachingAllocator& m_allocator;
    };

} // namespace

Publisher::Publisher(CachingAllocator& allocator, PublisherOptions options)
    : Publisher(*new AllocatorSource(allocator), std::move(options))
{
    m_ownedSource.reset(&m_source);
}

Publisher::Publisher(EventSource& source, PublisherOptions options)
    : m_source(source)
    , m_options(std::move(options))
{
    if (m_options.ringCapacity == 0)
        m_options.ringCapacity = ringRecordsFromEnvironment(DefaultRingRecords, MaxRingRecords);
    if (m_options.viewerBufferBytes == 0)
        m_options.viewerBufferBytes = viewerBufferFromEnvironment(DefaultViewerBufferBytes);
    const int devices = std::max(source.deviceCount(), 1);
    m_channels.reserve(size_t(devices));
    for (int d = 0; d < devices; ++d)
        m_channels.push_back(std::make_unique<Channel>(m_options.ringCapacity));
    const StackSettings stacks = stackSettingsFromEnvironment();
    m_stackDepth = m_options.stackDepth < 0 ? stacks.nativeDepth
                                            : std::min(unsigned(m_options.stackDepth), MaxStackDepth);
    m_pythonStacks = m_options.pythonStacks < 0 ? stacks.python : m_options.pythonStacks > 0;
    m_ownCode = agentCodeSpan();
    if (m_stackDepth > 0 || m_pythonStacks) {
        primeStackCapture(); // the constructing thread (usually the job's main thread) learns its stack bounds now
        // The device in the top 6 bits of an id: each device's table hands out ids without any shared counter.
        for (size_t d = 0; d < m_channels.size(); ++d)
            m_channels[d]->stacks = std::make_unique<StackTable>(
                uint32_t(d) << 26, std::min(m_options.maxStacks, (size_t(1) << 26) - 1), m_options.maxStackFrames);
    }
}

std::vector<SymbolFrame> Publisher::stackFrames(uint32_t stackId) const
{
    std::vector<SymbolFrame> frames;
    const size_t device = stackId >> 26;
    const uint32_t index = stackId & ((uint32_t(1) << 26) - 1);
    if (stackId == 0 || device >= m_channels.size() || !m_channels[device]->stacks || index == 0)
        return frames;
    const StackTable& table = *m_channels[device]->stacks;
    if (index > table.size())
        return frames;
    const StackTable::Stack stack = table.at(index - 1);
    for (unsigned i = 0; i < stack.count; ++i)
        frames.push_back(m_symbolizer.name(stack.frames[i]));
    return frames;
}

uint64_t Publisher::stacksDropped() const
{
    uint64_t n = 0;
    for (const auto& c : m_channels)
        n += c->stacks ? c->stacks->dropped() : 0;
    return n;
}

uint64_t Publisher::lost() const
{
    uint64_t n = 0;
    for (const auto& c : m_channels)
        n += c->ring.lostTotal();
    return n;
}

uint64_t Publisher::recorded() const
{
    uint64_t n = 0;
    for (const auto& c : m_channels)
        n += c->ring.written();
    return n;
}

Publisher::~Publisher()
{
    stop();
    if (m_thread.joinable())
        m_thread.join();
    if (m_sockets.context && !m_threadOwnsSockets) { // never started a thread: the sockets are still ours
        removeOwnSockets();
        m_sockets.close();
    }
}

bool Publisher::start(std::string* error)
{
    auto fail = [&](const std::string& message) {
        if (error)
            *error = message;
        m_sockets.close();
        m_curve = false;
        return false;
    };
    if (m_running.load() || m_sockets.context)
        return fail("the publisher is already started");
    m_endpoint = m_options.endpoint;
    if (m_endpoint.empty()) {
        std::string why;
        m_endpoint = defaultEndpoint(&why);
        if (m_endpoint.empty())
            return fail(why);
    }
    std::string why;
    const std::optional<BindPlan> plan = planEndpoint(
        m_endpoint, fileFromEnvironment(m_options.curveSecretFile, "MEMSCOPE_CURVE_SECRET"),
        fileFromEnvironment(m_options.curveClientsFile, "MEMSCOPE_CURVE_CLIENTS"), insecureTcpFromEnvironment(), &why);
    if (!plan)
        return fail(why);
    m_endpoint = plan->endpoint;
    m_stateEndpoint = plan->stateEndpoint;
    switch (m_options.compression) {
    case Compression::FromEnvironment:
        m_compress = compressionFromEnvironment(m_endpoint);
        break;
    case Compression::None:
        m_compress = false;
        break;
    case Compression::Lz4:
        m_compress = true;
        break;
    }

    // libzmq starts its I/O and reaper threads from here on; with every signal blocked while they are created they
    // (and our thread) inherit a full mask and never take the host's signals.
    const BlockedSignals blocked;
    if (!m_sockets.open(*plan, viewerQueueMessages(m_options.viewerBufferBytes), &why))
        return fail(why);
    m_curve = m_sockets.curve();
    m_zapHandler.setClients(plan->clientKeys);

    std::string pubError, routerError;
    ino_t pubInode = 0, routerInode = 0;
    const bool pubBound = bindPrivate(m_sockets.pub, m_endpoint, &pubError, &pubInode);
    const bool routerBound = pubBound && bindPrivate(m_sockets.router, m_stateEndpoint, &routerError, &routerInode);
    if (pubInode)
        m_ownSockets.push_back({ m_endpoint.substr(6), pubInode });
    if (routerInode)
        m_ownSockets.push_back({ m_stateEndpoint.substr(6), routerInode });
    bool threadStarted = false;
    std::string threadError;
    if (pubBound && routerBound && m_options.startThread) {
        try {
            m_running.store(true, std::memory_order_release);
            m_threadOwnsSockets = true; // the thread owns the sockets and the context from now on
            m_thread = std::thread([this] { run(); }); // inherits the full signal mask
            threadStarted = true;
        } catch (const std::exception& e) {
            m_running.store(false);
            m_threadOwnsSockets = false;
            threadError = e.what();
        }
    }
    if (!pubBound || !routerBound)
        removeOwnSockets();
    if (!pubBound)
        return fail("cannot bind " + m_endpoint + ": " + pubError);
    if (!routerBound)
        return fail("cannot bind " + m_stateEndpoint + ": " + routerError);
    if (m_options.startThread && !threadStarted)
        return fail("cannot start the publisher thread: " + threadError);
    return true;
}

void Publisher::onTraceEvent(const TraceEvent& event) { onTraceEventWithStack(event); }

namespace {
    // setThreadStack(): the frames this thread's allocator calls carry instead of (or after) a captured stack.
    thread_local Publisher::ThreadStack t_threadStack;
} // namespace

void Publisher::setThreadStack(const uintptr_t* frames, unsigned count, bool afterNative) noexcept
{
    t_threadStack = ThreadStack { frames, frames ? std::min(count, MaxStackDepth) : 0, afterNative };
}

void Publisher::setThreadStack(const ThreadStack& stack) noexcept { t_threadStack = stack; }

Publisher::ThreadStack Publisher::threadStack() noexcept { return t_threadStack; }

void Publisher::defineFrame(uintptr_t address, std::string name, std::string file, int line)
{
    m_symbolizer.defineFrame(address, std::move(name), std::move(file), line);
}

uint32_t Publisher::internStack(Channel& c) noexcept
{
    const ThreadStack& given = t_threadStack;
    if (given.frames && !given.afterNative)
        return c.stacks->intern(given.frames, given.count);
    uintptr_t frames[MaxStackDepth];
    unsigned n = m_stackDepth > 0 ? memscope::agent::captureStack(frames, m_stackDepth) : 0;
    // The agent's own frames (the allocator, this function) say nothing about the caller: innermost, they go.
    unsigned own = 0;
    while (own < n && m_ownCode.contains(frames[own]))
        ++own;
    if (own > 0) {
        std::memmove(frames, frames + own, (n - own) * sizeof(uintptr_t));
        n -= own;
    }
    if (given.frames) {
        const unsigned more = std::min(given.count, MaxStackDepth - n);
        std::copy(given.frames, given.frames + more, frames + n);
        n += more;
    }
    return c.stacks->intern(frames, n);
}

uint32_t Publisher::onTraceEventWithStack(const TraceEvent& event)
{
    if (!m_enabled.load(std::memory_order_relaxed) || event.device < 0 || size_t(event.device) >= m_channels.size())
        return 0;
    Channel& c = *m_channels[size_t(event.device)];
    // One time stamp (and one stack) per allocator call: a malloc's SegmentAlloc and Alloc, a free's FreeRequested
    // and FreeCompleted share them. Call 0 is an event reported by hand (the preload shim): its own stamp.
    const bool sameCall = event.call != 0 && event.call == c.lastCall;
    const uint64_t now = sameCall ? c.lastTime : m_clock.now();
    c.lastTime = now;
    c.lastCall = event.call;
    uint32_t stackId = 0;
    if (m_stackDepth > 0 || m_pythonStacks) {
        // The stack is interned before the record enters the ring, so the publisher, having read the record, sees
        // the stack too (the table's release store precedes the ring's) and sends it first.
        stackId = sameCall ? c.lastStackId : internStack(c);
        c.lastStackId = stackId;
    }
    c.ring.push([&](wire::EventRecord& r) noexcept {
        r.timeNs = now;
        r.address = event.addr;
        r.stream = raw(event.stream);
        r.stackId = stackId;
        r.poolFirst = static_cast<int32_t>(event.pool.first);
        r.poolSecond = static_cast<int32_t>(event.pool.second);
        r.type = static_cast<uint8_t>(eventType(event.action));
        r.device = static_cast<uint8_t>(event.device);
        switch (event.action) {
        case TraceAction::Alloc:
        case TraceAction::FreeRequested:
        case TraceAction::FreeCompleted:
            r.size = event.blockSize;
            r.requestedSize = event.size;
            break;
        default:
            r.size = event.size;
            r.requestedSize = 0;
            break;
        }
    });
    return stackId;
}

bool Publisher::annotate(int device, bool start, std::string_view name)
{
    if (!m_enabled.load(std::memory_order_relaxed) || device < 0 || size_t(device) >= m_channels.size())
        return false;
    PendingNote note { realtimeNs(), uint8_t(device), uint8_t(start ? 0 : 1),
                       std::string(name.substr(0, wire::MaxNoteNameBytes)) };
    std::lock_guard lock(m_notesMutex);
    if (m_pendingNotes.size() >= MaxPendingNotes) {
        m_notesDropped.fetch_add(1, std::memory_order_relaxed);
        return false;
    }
    m_pendingNotes.push_back(std::move(note));
    return true;
}

void Publisher::sendNotes()
{
    {
        std::lock_guard lock(m_notesMutex);
        if (m_pendingNotes.empty())
            return;
        m_sendingNotes.swap(m_pendingNotes);
    }
    // Back to back in frames of up to 64 KiB: a job that annotates every few microseconds costs a few messages.
    std::vector<char> frame;
    auto flush = [&] {
        zmq_send(m_sockets.pub, wire::NotesTopic, 1, ZMQ_SNDMORE);
        zmq_send(m_sockets.pub, frame.data(), frame.size(), 0);
        frame.clear();
    };
    for (const PendingNote& n : m_sendingNotes) {
        wire::NoteHeader header {};
        header.magic = wire::Magic;
        header.version = wire::ProtocolVersion;
        header.stage = n.stage;
        header.device = n.device;
        header.timeNs = n.timeNs;
        header.nameBytes = uint32_t(n.name.size());
        append(frame, header);
        frame.insert(frame.end(), n.name.begin(), n.name.end());
        if (frame.size() >= (size_t(64) << 10))
            flush();
    }
    if (!frame.empty())
        flush();
    m_sendingNotes.clear();
}

void Publisher::sendSettings()
{
    if (m_settingsLines.empty() || m_settingsLines.size() > wire::MaxSettingsBytes)
        return;
    wire::SettingsHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.textBytes = uint32_t(m_settingsLines.size());
    std::vector<char> frame;
    append(frame, header);
    frame.insert(frame.end(), m_settingsLines.begin(), m_settingsLines.end());
    zmq_send(m_sockets.pub, wire::SettingsTopic, 1, ZMQ_SNDMORE);
    zmq_send(m_sockets.pub, frame.data(), frame.size(), 0);
}

void Publisher::keepAlive()
{
    const auto now = std::chrono::steady_clock::now();
    if (now - m_lastKeepAlive < std::chrono::milliseconds(m_options.heartbeatIntervalMs))
        return;
    m_lastKeepAlive = now;
    sendHeartbeat();
}

void Publisher::sendHeartbeat()
{
    wire::EventRecord heartbeat {};
    heartbeat.sequence = ++m_sequence;
    heartbeat.timeNs = realtimeNs();
    heartbeat.type = static_cast<uint8_t>(wire::EventType::Heartbeat);
    sendFrame(&heartbeat, 1);
}

bool Publisher::drain(const uint64_t* upTo, bool fill)
{
    bool any = false;
    const int64_t now = fill && !upTo ? steadyNs() : 0;
    for (size_t d = 0; d < m_channels.size(); ++d) {
        Channel& c = *m_channels[d];
        EventRing& ring = c.ring;
        const uint64_t limit = upTo ? upTo[d] : UINT64_MAX;
        // At most one ring's worth per call, so that a producer faster than the socket cannot keep this thread
        // from the other devices, the state requests and the stop flag.
        for (size_t round = 0; round <= ring.capacity() / MaxBatchRecords; ++round) {
            const size_t n = std::min(ring.available(limit), MaxBatchRecords);
            if (n == 0) {
                c.partialSince = 0;
                break;
            }
            if (now != 0 && n < MaxBatchRecords) {
                // A batch that is not full waits up to BatchFillMs for more records: a viewer's share is counted in
                // messages (viewerQueueMessages), so full batches under load are what make it hold its bytes.
                if (c.partialSince == 0)
                    c.partialSince = now;
                if (now - c.partialSince < int64_t(BatchFillMs) * 1000000)
                    break;
            }
            c.partialSince = 0;
            sendNewStacks(d); // every stack these records name (interned before they entered the ring), before them
            m_clock.anchor();
            if (!sendBatch(ring, n, limit))
                break; // no memory for a message: the records wait in the ring
            any = true;
        }
    }
    return any;
}

void Publisher::sendNewStacks(size_t device)
{
    Channel& c = *m_channels[device];
    if (!c.stacks)
        return;
    const size_t size = c.stacks->size();
    for (; c.stacksSent < size; ++c.stacksSent)
        sendStack(c.stacks->at(c.stacksSent));
}

void Publisher::resendStacks()
{
    for (const auto& c : m_channels)
        for (size_t i = 0; c->stacks && i < c->stacksSent; ++i)
            sendStack(c->stacks->at(i));
}

void Publisher::sendStack(const StackTable::Stack& stack)
{
    m_symbolizer.encode(stack, m_stackMessage);
    sendStackMessage();
}

void Publisher::sendSymbolizedStack(uint32_t stackId, const std::vector<SymbolFrame>& frames)
{
    StackSymbolizer::encode(stackId, frames, m_stackMessage);
    sendStackMessage();
}

void Publisher::sendStackMessage()
{
    zmq_send(m_sockets.pub, wire::StacksTopic, 1, ZMQ_SNDMORE);
    zmq_send(m_sockets.pub, m_stackMessage.data(), m_stackMessage.size(), 0);
}

bool Publisher::sendBatch(EventRing& ring, size_t count, uint64_t upTo)
{
    // One pass over the records: copied out of the ring, renumbered into the agent's one sequence, time stamps
    // converted. Uncompressed, they are copied straight into the ZeroMQ message that goes out (no other copy of
    // the batch is made on this side); compressed, into m_batch, from which LZ4 writes the message.
    const size_t rawBytes = count * sizeof(wire::EventRecord);
    auto renumber = [this](wire::EventRecord& r) noexcept {
        r.sequence = ++m_sequence;
        r.timeNs = m_clock.realtimeOf(r.timeNs);
    };
    wire::BatchHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.flags = uint16_t(wire::BatchFlags::None);
    header.count = uint32_t(count);
    zmq_msg_t message;
    const bool observed = m_source.observed();
    if (observed) {
        // An observed allocator's records are completed (block sizes, stacks) before they are numbered; the
        // definitions of their stacks go out first, and heartbeats while completing takes long (keepAlive), which
        // take their numbers before the batch's.
        const size_t n = ring.pop(m_batch.data(), count, upTo);
        m_source.complete(m_batch.data(), n, *this);
        header.firstSequence = m_sequence + 1;
        for (size_t i = 0; i < n; ++i)
            renumber(m_batch[i]);
    } else {
        header.firstSequence = m_sequence + 1;
    }
    if (!m_compress) {
        if (zmq_msg_init_size(&message, sizeof header + rawBytes) != 0)
            return false;
        auto* frame = static_cast<char*>(zmq_msg_data(&message));
        std::memcpy(frame, &header, sizeof header);
        if (observed)
            std::memcpy(frame + sizeof header, m_batch.data(), rawBytes);
        else
            ring.pop(reinterpret_cast<wire::EventRecord*>(frame + sizeof header), count, upTo, renumber);
    } else {
        if (!observed)
            ring.pop(m_batch.data(), count, upTo, renumber);
        const bool compressed = m_compressor.compress(m_batch.data(), count);
        const size_t payload = compressed ? m_compressor.size() : rawBytes; // incompressible: sent as it is
        if (zmq_msg_init_size(&message, sizeof header + payload) != 0)
            return false; // out of memory: these records are gone, a viewer sees the gap in the sequence
        header.flags = uint16_t(compressed ? wire::BatchFlags::Compressed : wire::BatchFlags::None);
        auto* frame = static_cast<char*>(zmq_msg_data(&message));
        std::memcpy(frame, &header, sizeof header);
        std::memcpy(frame + sizeof header,
                    compressed ? m_compressor.data() : reinterpret_cast<const char*>(m_batch.data()), payload);
        m_compressor.countSent(payload);
    }
    zmq_send(m_sockets.pub, wire::EventsTopic, 1, ZMQ_SNDMORE);
    if (zmq_msg_send(&message, m_sockets.pub, 0) < 0)
        zmq_msg_close(&message);
    m_lastPublished.store(m_sequence, std::memory_order_release);
    return true;
}

void Publisher::sendFrame(const wire::EventRecord* records, size_t count)
{
    wire::BatchHeader header {};
    header.magic = wire::Magic;
    header.version = wire::ProtocolVersion;
    header.count = uint32_t(count);
    header.firstSequence = records[0].sequence;
    zmq_msg_t message;
    if (zmq_msg_init_size(&message, sizeof header + count * sizeof(wire::EventRecord)) != 0)
        return;
    auto* frame = static_cast<char*>(zmq_msg_data(&message));
    std::memcpy(frame, &header, sizeof header);
    std::memcpy(frame + sizeof header, records, count * sizeof(wire::EventRecord));
    zmq_send(m_sockets.pub, wire::EventsTopic, 1, ZMQ_SNDMORE);
    if (zmq_msg_send(&message, m_sockets.pub, 0) < 0)
        zmq_msg_close(&message);
    m_lastPublished.store(records[count - 1].sequence, std::memory_order_release);
}

void Publisher::answerRequests()
{
    m_stateServer.collect(m_sockets.router);
    if (!m_stateServer.pending() || !m_stateServer.takeToken(steadyNs()))
        return;
    if (!m_stateServer.waiting()) {
        // Only the definitions were asked for: a viewer's state may have come before its subscription took effect
        // (docs/protocol.md, "Late join"). Its subscription is in effect now (it asks only then).
        m_stateServer.stacksResent();
        resendStacks();
        m_source.resendStacks(*this);
        return;
    }
    // The state is the allocator's after the records each ring holds at that moment: publish exactly those,
    // then the state is the one after the last sequence given.
    std::vector<uint64_t> written(m_channels.size());
    std::vector<EventRing*> rings;
    for (const auto& c : m_channels)
        rings.push_back(&c->ring);
    std::vector<SegmentInfo> segments;
    if (!m_source.takeState(rings, segments, written)) {
        m_stateServer.forget(); // they ask again
        return;
    }
    drain(written.data());
    m_source.stateSent(segments);
    // A viewer that joins late missed the definitions of stacks interned before it subscribed (it subscribes
    // before it asks, docs/protocol.md): send them again, ahead of the state and of any later record.
    m_stateServer.stacksResent();
    resendStacks();
    m_source.resendStacks(*this);
    sendSettings();
    m_stateServer.reply(m_sockets.router, uint16_t(m_source.deviceCount()), m_clock.baseNs(), m_sequence, segments);
}

void Publisher::run()
{
    pthread_setname_np(pthread_self(), "memscope-pub");
    m_threadId.store(std::this_thread::get_id());
    if (m_compress || m_source.observed())
        m_batch.assign(MaxBatchRecords, wire::EventRecord {});
    if (m_compress)
        m_compressor.reserve(MaxBatchRecords);
    // A first tick rate over >= 10 ms (refined at every heartbeat check) before any record leaves.
    if (m_clock.usesTsc()) {
        const uint64_t since = realtimeNs() - m_clock.baseNs();
        if (since < 10000000u)
            std::this_thread::sleep_for(std::chrono::nanoseconds(10000000u - since));
        m_clock.calibrate();
    }
    if (m_source.observed())
        takeBaseline();
    m_settingsLines = m_source.settings();
    sendSettings(); // to the viewers already there; a later one gets them with its state
    auto lastCalibration = std::chrono::steady_clock::now();
    auto lastSettings = lastCalibration;
    auto lastSend = std::chrono::steady_clock::now();

    zmq_pollitem_t items[] = { { m_sockets.router, 0, ZMQ_POLLIN, 0 },
                               { m_sockets.pub, 0, ZMQ_POLLIN, 0 },
                               { m_sockets.subscriptions.monitor(), 0, ZMQ_POLLIN, 0 },
                               { m_sockets.routerPeers.monitor(), 0, ZMQ_POLLIN, 0 },
                               { m_sockets.zap, 0, ZMQ_POLLIN, 0 } };
    const int polled = m_sockets.zap ? 5 : 4;
    while (!m_stopRequested.load(std::memory_order_acquire)) {
        if (zmq_poll(items, polled, long(m_options.drainIntervalMs)) > 0) {
            if (polled > 4 && (items[4].revents & ZMQ_POLLIN))
                m_zapHandler.answer(m_sockets.zap);
            if (items[3].revents & ZMQ_POLLIN)
                m_sockets.routerPeers.readMonitor(); // past PeerConnections::MaxPerPeer, a peer's oldest go
            if (items[2].revents & ZMQ_POLLIN)
                m_sockets.subscriptions.readMonitor();
            if (items[1].revents & ZMQ_POLLIN)
                m_sockets.subscriptions.readSubscriptions(m_sockets.pub);
            if (items[0].revents & ZMQ_POLLIN)
                answerRequests();
        }
        if (m_stateServer.pending())
            answerRequests(); // requests held back by the state server's interval
        const auto now = std::chrono::steady_clock::now();
        if (now - lastCalibration >= std::chrono::milliseconds(m_options.heartbeatIntervalMs)) {
            m_clock.calibrate();
            lastCalibration = now;
        }
        sendNotes();
        // The settings again every second: a viewer whose subscription took effect just after they went out with
        // its state (ZeroMQ's slow joiner, docs/protocol.md) has them a second later.
        if (now - lastSettings >= std::chrono::seconds(1)) {
            sendSettings();
            lastSettings = now;
        }
        if (drain()) {
            lastSend = now;
        } else if (now - lastSend >= std::chrono::milliseconds(m_options.heartbeatIntervalMs)) {
            sendHeartbeat();
            lastSend = now;
        }
    }
    if (!m_forked.load()) {
        sendNotes();
        drain(nullptr, false);
        wire::Goodbye goodbye {};
        goodbye.magic = wire::Magic;
        goodbye.version = wire::ProtocolVersion;
        goodbye.lastSequence = m_lastPublished.load();
        goodbye.lost = lost();
        zmq_send(m_sockets.pub, wire::GoodbyeTopic, 1, ZMQ_SNDMORE);
        zmq_send(m_sockets.pub, &goodbye, sizeof goodbye, 0);
        // The PUB drops what does not fit in a viewer's share, the Goodbye included, for a viewer that is behind
        // (stopped, or writing a file) when the job ends. Its state connection is idle, so the same Goodbye sent
        // there reaches it (kept in its socket's buffers after the job is gone): it learns the run's last sequence
        // and counts what it missed (docs/protocol.md, "Goodbye").
        m_stateServer.collect(m_sockets.router);
        m_stateServer.sendGoodbye(m_sockets.router, &goodbye, sizeof goodbye);
    }
    // Whatever stop() still waits for (less a margin to finish) may go to flushing what is queued for a slow
    // viewer; at least LingerMs for the Goodbye.
    const int64_t left = m_stopDeadlineNs.load() - steadyNs();
    const int linger = std::max<int>(LingerMs, int(std::min<int64_t>(left / 1000000 - 50, 60000)));
    zmq_setsockopt(m_sockets.pub, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(m_sockets.router, ZMQ_LINGER, &linger, sizeof linger);
    m_sockets.closeSockets();
    if (!m_forked.load())
        removeOwnSockets(); // a clean exit leaves no socket file to look like a dead job
    m_sockets.close(); // ends the context: waits up to `linger` for the batches and the Goodbye to leave
    {
        std::lock_guard lock(m_doneMutex);
        m_done = true;
    }
    m_doneCv.notify_all();
}

void Publisher::takeBaseline()
{
    // What the observed allocator held before we started is in this first state; the records the rings took
    // meanwhile are in it too and never go out.
    std::vector<uint64_t> written(m_channels.size());
    std::vector<EventRing*> rings;
    for (const auto& c : m_channels)
        rings.push_back(&c->ring);
    std::vector<SegmentInfo> state;
    if (!m_source.takeState(rings, state, written))
        return; // records go out as they are; a viewer's state request retries
    for (size_t d = 0; d < m_channels.size(); ++d) {
        for (;;) {
            const size_t n = m_channels[d]->ring.pop(m_batch.data(), MaxBatchRecords, written[d]);
            if (n == 0)
                break;
            m_source.discard(m_batch.data(), n);
        }
    }
    m_source.stateSent(state);
}

bool Publisher::stop(unsigned maxWaitMs)
{
    if (m_forked.load())
        return true;
    m_enabled.store(false, std::memory_order_relaxed); // nothing more goes into the ring
    if (!m_running.exchange(false))
        return true;
    m_stopDeadlineNs.store(steadyNs() + int64_t(maxWaitMs) * 1000000);
    m_stopRequested.store(true, std::memory_order_release);
    std::unique_lock lock(m_doneMutex);
    const bool done = m_doneCv.wait_for(lock, std::chrono::milliseconds(maxWaitMs), [this] { return m_done; });
    lock.unlock();
    if (done && m_thread.joinable())
        m_thread.join();
    return done;
}

void Publisher::removeOwnSockets()
{
    // Only the very files bound here: a path since taken by another run of the job stays.
    for (const OwnSocket& own : m_ownSockets) {
        struct stat st {};
        if (::lstat(own.path.c_str(), &st) == 0 && st.st_ino == own.inode && st.st_uid == ::geteuid())
            ::unlink(own.path.c_str());
    }
    m_ownSockets.clear();
}

void Publisher::disableAfterFork()
{
    m_forked.store(true);
    m_enabled.store(false);
    m_running.store(false);
}

} // namespace memscope::agent
