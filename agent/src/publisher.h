// Publisher: sends the allocator's events to viewers over ZeroMQ, the Clone pattern of the ZeroMQ Guide
// (chapter 5): a PUB socket carries every event in batches (topic "E", then a Goodbye on topic "G" at exit), and a
// ROUTER socket answers a Request{State} with the allocator's current state stamped with a sequence number, so
// that a late viewer applies only newer events (common/wire/protocol.h).
//
// Endpoints (wire/endpoint.h, the rule viewers follow too): ipc:///PATH or tcp://HOST:PORT, nothing else; the PUB
// socket binds `endpoint`, the ROUTER socket binds `endpoint + "-state"` for ipc:// and the next port for
// tcp://HOST:PORT (wire::stateEndpointFor). tcp://:PORT binds 127.0.0.1; a tcp endpoint that
// is not loopback needs CURVE keys (curve.h; both sockets are then CURVE servers, clients checked by a ZAP handler
// the publisher thread serves) and is refused without them. The default endpoint is
// ipc://$XDG_RUNTIME_DIR/memscope-<pid>, else ipc:///tmp/memscope-<uid>/memscope-<pid> (the folder is made
// with mode 0700).
//
// Threads: onTraceEvent() runs on allocator threads under a device lock and only writes into that device's ring
// (ring.h: single producer, no atomic read-modify-write). Everything else (start, stop) may be called from any
// thread but not concurrently with itself. The publisher's own thread, "memscope-pub", starts in start() with every
// signal blocked, owns both sockets and the ZeroMQ context, and drains the rings every ~2 ms, giving each record
// the agent's next sequence number as it goes (so heartbeats and all devices share one sequence; the order of two
// devices' records is the drain order, as nothing in the allocator orders them). After fork() the child publishes
// nothing (pthread_atfork).
//
// The thread and its send loop are publisher.cpp's; each other concern has a file of its own, which this class
// holds a part of: the clock (clock.h), the environment (publishenv.h), where and how to bind (endpointpolicy.h),
// the sockets (sockets.h), symbolisation (symbolizer.h), LZ4 (batchcompressor.h), the ZAP handler (curve.h) and the
// state server (stateserver.h).
#pragma once

#include "allocator.h"
#include "batchcompressor.h"
#include "clock.h"
#include "curve.h"
#include "endpointpolicy.h"
#include "eventsource.h"
#include "ring.h"
#include "sockets.h"
#include "stacks.h"
#include "stateserver.h"
#include "symbolizer.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <sys/types.h>

namespace memscope::agent {

// How batches travel (docs/protocol.md, "Compressed batches").
enum class Compression : uint8_t {
    FromEnvironment, // MEMSCOPE_COMPRESS=lz4|none; unset: LZ4 on tcp:// endpoints, none on any other
    None,
    Lz4,
};

struct PublisherOptions {
    std::string endpoint; // empty: defaultEndpoint() (endpointpolicy.h)
    // Records per device (72 B each); 0: MEMSCOPE_RING_RECORDS, else DefaultRingRecords.
    size_t ringCapacity = 0;
    // Bytes of batches the job may hold for one viewer that does not keep up (or does not read at all); beyond
    // it that viewer loses batches and resynchronises. 0: MEMSCOPE_VIEWER_BUFFER_MB, else DefaultViewerBufferBytes.
    size_t viewerBufferBytes = 0;
    Compression compression = Compression::FromEnvironment;
    // CURVE (docs/protocol.md, "TCP and CURVE"): the agent's secret key file and the authorised clients' public
    // keys; empty: MEMSCOPE_CURVE_SECRET / MEMSCOPE_CURVE_CLIENTS. Required for a tcp endpoint that is not loopback.
    std::string curveSecretFile;
    std::string curveClientsFile;
    unsigned drainIntervalMs = 2;
    unsigned heartbeatIntervalMs = 500;
    bool startThread = true; // false: the ring fills but nobody drains it (tests of overflow)
    // Native frames captured per record (stacks.h): 0 off (the cheapest mode), at most 64; -1: MEMSCOPE_STACKS.
    int stackDepth = -1;
    // Python frames (pythonstacks.h), which the allocator's callers capture and hand over with setThreadStack:
    // 0 no, 1 yes, -1: MEMSCOPE_STACKS ("python" or "all").
    int pythonStacks = -1;
    // Distinct stacks per device, and their frames in all, beyond which records carry stackId 0.
    size_t maxStacks = size_t(1) << 15;
    size_t maxStackFrames = size_t(1) << 19;
};

class Publisher final : public TraceObserver, public StackSender {
public:
    // 2^17 records (9 MiB, calloc'ed: committed as records reach the pages): ~65 ms of a 2 M events/s burst, the
    // time the publisher thread may go unscheduled on a busy machine before the ring overflows.
    static constexpr size_t DefaultRingRecords = size_t(1) << 17;
    static constexpr size_t MaxRingRecords = size_t(1) << 26;
    // ~1.8 s of a 2 M events/s flood (72 B a record), far more at the rates of real training jobs.
    static constexpr size_t DefaultViewerBufferBytes = size_t(256) << 20;

    // Does not start anything; `allocator` must outlive the publisher (the state replies read it).
    Publisher(CachingAllocator& allocator, PublisherOptions options);
    // The same for any source (eventsource.h), which must outlive the publisher.
    Publisher(EventSource& source, PublisherOptions options);
    ~Publisher() override; // stop()s, and waits for the thread however long it takes

    // Binds the sockets and starts the thread. False (and *error says why) when the endpoint cannot be used; the
    // allocator keeps working either way. Register it with allocator.setTraceObserver() yourself.
    bool start(std::string* error = nullptr);
    // Publishes what the ring holds and a Goodbye, then ends the thread; waits at most `maxWaitMs` for that, after
    // which the thread is left to finish (detached) and the caller goes on. Idempotent. True when the thread has
    // finished (or never ran), false when it was left to finish.
    bool stop(unsigned maxWaitMs = 200);
    bool running() const { return m_running.load(std::memory_order_acquire); }

    // TraceObserver: under the device lock. One record into the ring (and, with stacks on, one stack captured
    // and interned); nothing else. Returns the record's stack id.
    void onTraceEvent(const TraceEvent& event) override;
    uint32_t onTraceEventWithStack(const TraceEvent& event) override;

    // An observed allocator's event (observer.h), on the thread holding that allocator's device lock: one record
    // into the ring, time stamped now; `fill` writes everything but sequence, lost and timeNs. False when dropped.
    template <typename Fill> bool pushObserved(int device, Fill&& fill) noexcept
    {
        if (!m_enabled.load(std::memory_order_relaxed) || device < 0 || size_t(device) >= m_channels.size())
            return false;
        const uint64_t now = m_clock.now();
        return m_channels[size_t(device)]->ring.push([&](wire::EventRecord& r) noexcept {
            fill(r);
            r.timeNs = now;
        });
    }
    // The frames of a stack id this publisher handed out (a block's BlockInfo::stackId), named as its "S" definition
    // names them (but for the object files' own symbol tables); empty when unknown. Any thread.
    std::vector<SymbolFrame> stackFrames(uint32_t stackId) const;
    // StackSender: a stack symbolised elsewhere, on topic "S". Publisher thread only.
    void sendSymbolizedStack(uint32_t stackId, const std::vector<SymbolFrame>& frames) override;
    // StackSender: a heartbeat when none went out for the heartbeat interval. Publisher thread only.
    void keepAlive() override;
    // Whether the calling thread is the publisher's (an observer stamps the states it takes there).
    bool onPublisherThread() const { return std::this_thread::get_id() == m_threadId.load(); }

    const std::string& endpoint() const { return m_endpoint; }
    const std::string& stateEndpoint() const { return m_stateEndpoint; }
    // Records dropped (rings full) so far, all devices. Any thread.
    uint64_t lost() const;
    // Records written into the rings so far, all devices (heartbeats not included). Any thread.
    uint64_t recorded() const;
    uint64_t lastPublished() const { return m_lastPublished.load(std::memory_order_acquire); }
    // States taken for viewers so far (one serves every viewer waiting then), and requests turned away because
    // too many peers were waiting. Any thread.
    uint64_t statesTaken() const { return m_stateServer.statesTaken(); }
    uint64_t statesReplied() const { return m_stateServer.statesReplied(); }
    uint64_t stateRequestsDropped() const { return m_stateServer.requestsDropped(); }
    // Subscriptions allowed and refused on the events socket, and peer connections cut for a refused one
    // (subscriptions.h). Any thread.
    uint64_t subscriptionsApplied() const { return m_sockets.subscriptions.applied(); }
    uint64_t subscriptionsRefused() const { return m_sockets.subscriptions.refused(); }
    uint64_t subscribersDisconnected() const { return m_sockets.subscriptions.disconnected(); }
    // Connections closed because one peer held more than PeerConnections::MaxPerPeer on a socket (state requests
    // and events together). Any thread.
    uint64_t peerConnectionsClosed() const
    {
        return m_sockets.routerPeers.closedPastCap() + m_sockets.subscriptions.connections().closedPastCap();
    }
    unsigned stackDepth() const { return m_stackDepth; }
    bool pythonStacks() const { return m_pythonStacks; }
    bool compressing() const { return m_compress; } // after start()
    bool curve() const { return m_curve; } // after start(): both sockets are CURVE servers
    // CURVE handshakes the ZAP handler accepted / refused so far. Any thread.
    uint64_t curveAccepted() const { return m_zapHandler.accepted(); }
    uint64_t curveRefused() const { return m_zapHandler.refused(); }
    // Compressing: record bytes taken from the rings and bytes of LZ4 payload sent, so far. Publisher thread
    // writes; read them after stop().
    uint64_t rawBytes() const { return m_compressor.rawBytes(); }
    uint64_t sentBytes() const { return m_compressor.sentBytes(); }
    // Stacks not interned (tables full) so far, all devices. Any thread.
    uint64_t stacksDropped() const;
    // Device `device`'s ring (tests).
    EventRing& ring(int device = 0) { return m_channels[size_t(device)]->ring; }

    // Frames a program knows better than a native stack walk (a demo, an interpreter that tracks its own stack):
    // `address` names the frame (any value no code lives at, e.g. below 4096), sent on topic "S" with this name,
    // file and line instead of dladdr's. Before start() only (the publisher thread reads them afterwards).
    void defineFrame(uintptr_t address, std::string name, std::string file, int line);
    // The calling thread's next allocator calls carry these frames (innermost first, at most 64; `frames` must stay
    // valid until changed) instead of a captured native stack, or after it when `afterNative` (Python frames under
    // MEMSCOPE_STACKS=all); null: capture again. Needs stacks on. No allocation, no lock: thread-local pointers.
    struct ThreadStack {
        const uintptr_t* frames = nullptr;
        unsigned count = 0;
        bool afterNative = false;
    };
    static void setThreadStack(const uintptr_t* frames, unsigned count, bool afterNative = false) noexcept;
    static ThreadStack threadStack() noexcept; // what the calling thread set last
    static void setThreadStack(const ThreadStack& stack) noexcept;

    // A named scope of the job entered (`start`) or left on `device` (PyTorch's record_function; topic "A",
    // docs/protocol.md), stamped now. Any thread, but not the allocator's hot path: a short lock and a copy of the
    // name; the publisher thread sends it. Beyond MaxPendingNotes waiting, dropped and counted. False when dropped.
    bool annotate(int device, bool start, std::string_view name);
    static constexpr size_t MaxPendingNotes = 4096;
    uint64_t notesDropped() const { return m_notesDropped.load(std::memory_order_relaxed); }

    // After fork(), in the child: nothing more is recorded or sent, and stop() returns at once.
    void disableAfterFork();

private:
    void run(); // the thread
    // Publisher thread: takes `count` records (none above `upTo`) from `ring`, numbers them and sends them as one
    // batch (compressed when m_compress). False when there was no memory for the message.
    bool sendBatch(EventRing& ring, size_t count, uint64_t upTo);
    void sendFrame(const wire::EventRecord* records, size_t count); // publisher thread: a batch as it is
    // Publisher thread: drains every ring (ring d only up to upTo[d] when given) into batches; true if any. With
    // `fill` (and no upTo), a ring holding less than a full batch keeps it for up to BatchFillMs (publisher.cpp).
    bool drain(const uint64_t* upTo = nullptr, bool fill = true);
    void answerRequests(); // publisher thread: the state server's requests, answered with a state taken now
    void sendHeartbeat();
    void removeOwnSockets(); // the ipc socket files this publisher bound, if still the same files
    void sendSettings(); // publisher thread: the source's settings on topic "C", if it has any
    void sendNotes(); // publisher thread: the notes annotate() queued, on topic "A"
    // Publisher thread: symbolises and sends (topic "S") the stacks channel `device` interned since the last call.
    void sendNewStacks(size_t device);
    void resendStacks(); // publisher thread: every stack sent so far, again (a state request: a viewer joined)
    void sendStack(const StackTable::Stack& stack); // publisher thread: symbolises and sends one definition

    void takeBaseline(); // publisher thread, observed sources: the first state, and the records it holds dropped
    void sendStackMessage(); // publisher thread: m_stackMessage on topic "S"

    std::unique_ptr<EventSource> m_ownedSource; // memscope's allocator, adapted
    EventSource& m_source;
    PublisherOptions m_options;
    std::atomic<std::thread::id> m_threadId {};
    StateServer m_stateServer; // publisher thread (its counters: any thread)
    // One per device, each on its own cache lines: the producer-side fields are written under that device's lock.
    struct alignas(64) Channel {
        explicit Channel(size_t capacity)
            : ring(capacity)
        {
        }
        EventRing ring;
        uint64_t lastTime = 0; // the last record's time stamp and stack, and its allocator call: the next
        uint64_t lastCall = 0; // record of the same call reuses both
        uint32_t lastStackId = 0;
        std::unique_ptr<StackTable> stacks; // when stacks are on
        size_t stacksSent = 0; // publisher thread: entries of `stacks` already sent
        int64_t partialSince = 0; // publisher thread: steady ns since the ring held a batch that is not full
    };
    std::vector<std::unique_ptr<Channel>> m_channels;
    // Allocator thread, under the device lock: the caller's stack, interned in c's table (kept out of line: the
    // frame buffer would otherwise make every record's call set up half a KiB of stack).
    [[gnu::noinline]] uint32_t internStack(Channel& c) noexcept;
    std::vector<wire::EventRecord> m_batch; // publisher thread: a batch to compress, or to complete (observed)
    BatchCompressor m_compressor; // publisher thread
    bool m_compress = false; // LZ4 batches (options.compression, resolved in start())
    uint64_t m_sequence = 0; // publisher thread: the last sequence given
    std::string m_endpoint;
    std::string m_stateEndpoint;
    std::atomic<bool> m_enabled { true }; // false after fork in the child
    std::atomic<bool> m_running { false };
    std::atomic<bool> m_stopRequested { false };
    std::atomic<int64_t> m_stopDeadlineNs { 0 }; // steady_clock: when stop() stops waiting for the thread
    std::atomic<uint64_t> m_lastPublished { 0 };
    std::chrono::steady_clock::time_point m_lastKeepAlive {}; // publisher thread only
    std::atomic<bool> m_forked { false };
    struct PendingNote {
        uint64_t timeNs;
        uint8_t device;
        uint8_t stage; // 0 START, 1 END
        std::string name;
    };
    std::mutex m_notesMutex; // annotate() and sendNotes() only
    std::vector<PendingNote> m_pendingNotes; // under m_notesMutex
    std::vector<PendingNote> m_sendingNotes; // publisher thread
    std::atomic<uint64_t> m_notesDropped { 0 };
    std::string m_settingsLines; // publisher thread: the source's, read when the thread starts
    struct OwnSocket {
        std::string path;
        ino_t inode;
    };
    std::vector<OwnSocket> m_ownSockets; // ipc socket files bound by start()
    std::mutex m_doneMutex;
    std::condition_variable m_doneCv;
    bool m_done = false;
    std::thread m_thread;
    bool m_threadOwnsSockets = false;
    PublisherSockets m_sockets; // start()'s, then the publisher thread's
    bool m_curve = false;
    ZapHandler m_zapHandler; // publisher thread (its counters: any thread)
    EventClock m_clock; // now(): any thread; the rest: publisher thread
    unsigned m_stackDepth = 0;
    bool m_pythonStacks = false;
    CodeSpan m_ownCode; // the agent's own frames, left out of native stacks
    StackSymbolizer m_symbolizer; // defineFrame(): before start(); then the publisher thread's
    std::vector<char> m_stackMessage; // publisher thread: the "S" frame being built
};

} // namespace memscope::agent
