// Observer: the EventSource of an allocator memscope does not run (memscope/observe.h): PyTorch's own caching
// allocator, whose trace tracker (a torch extension) hands every event to event(). Records go through the same
// ring, publisher thread and wire protocol as memscope's allocator's; on the publisher thread the observer completes
// them before they are sent: the block sizes PyTorch's events do not carry (BlockLayout, rebased on every state),
// and the stacks of their contexts (equal frame lists share one stack id). The host hands a context's frames over
// named, or its Python frames unnamed (code object, instruction): those are named by a PythonSymboliser, once per
// distinct frame, and a stack of unnamed frames seen before costs one hash of its pairs.
//
// Threads: event() runs on whichever thread holds the observed allocator's device lock and only writes a record
// into the publisher's ring (or a stamp); everything else runs on the publisher thread, except start() and stop()
// (any thread, not concurrently with each other). The host's hooks are called one at a time, never after stop()
// returned: release on the publisher thread, state and symbolize on a hook thread of its own while the publisher
// thread waits for them and keeps sending heartbeats (so that viewers do not take a slow hook for a hung job), and
// python_extra on the symboliser's thread, with the interpreter lock. A watchdog thread reports on stderr a hook
// that has not returned for WatchdogSeconds: meanwhile no event is published (they wait in the rings).
#pragma once

#include "blocklayout.h"
#include "eventsource.h"
#include "memscope/observe.h"
#include "publisher.h"
#include "pythonsymboliser.h"

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace memscope::agent {

class Observer final : public EventSource {
public:
    Observer(const memscope_observer_hooks& hooks, const AllocatorConfig& config, int deviceCount,
             PublisherOptions options);
    ~Observer() override;

    // Binds the endpoint and starts the publisher thread; false (and *error says why) when it cannot.
    bool start(std::string* error);
    // Stops publishing (a Goodbye, at most `maxWaitMs` of waiting) and returns once no hook runs or will run.
    void stop(unsigned maxWaitMs = 200);

    // The observed allocator's thread, under its device lock: 1 if recorded, 0 if not (see observe.h).
    int event(const memscope_observed_event& event) noexcept;

    Publisher& publisher() { return *m_publisher; }

    // EventSource (publisher thread)
    int deviceCount() const override { return m_deviceCount; }
    bool takeState(const std::vector<EventRing*>& rings, std::vector<SegmentInfo>& state,
                   std::vector<uint64_t>& written) override;
    bool observed() const override { return true; }
    void complete(wire::EventRecord* records, size_t count, StackSender& sender) override;
    void discard(const wire::EventRecord* records, size_t count) override;
    void stateSent(const std::vector<SegmentInfo>& state) override;
    void resendStacks(StackSender& sender) override;
    std::string settings() const override { return m_settings; }

    // The sink functions of observe.h (publisher thread, inside a hook).
    void sinkSegment(memscope_observer_sink& sink, int device, uint64_t address, uint64_t stream, PoolId pool,
                     bool isLarge, bool isExpandable);
    void sinkBlock(memscope_observer_sink& sink, uint64_t size, uint64_t requested, bool allocated, bool active,
                   const memscope_frame* frames, size_t count);
    void sinkContextFrames(memscope_observer_sink& sink, uint32_t context, const memscope_frame* frames, size_t count);
    void sinkContextPython(memscope_observer_sink& sink, uint32_t context, const memscope_frame* native,
                           size_t nativeCount, const memscope_python_frame* python, size_t pythonCount, bool engine);
    void sinkBlockPython(memscope_observer_sink& sink, uint64_t size, uint64_t requested, bool allocated, bool active,
                         uint32_t context, const memscope_frame* native, size_t nativeCount,
                         const memscope_python_frame* python, size_t pythonCount);

    memscope_observe_statistics statistics() const;

    // How long the publisher thread may wait for Python frames to be named: a batch, a state.
    static constexpr unsigned BatchWaitMs = 200;
    static constexpr unsigned StateWaitMs = 1000;
    static constexpr unsigned WatchdogSeconds = 3;

    // Block records that did not fit the layout since the last state (publisher thread).
    uint64_t layoutMisses() const { return m_layout.misses(); }
    size_t stackCount() const { return m_stacks.size(); }

private:
    // A context's (or a state block's) frames as the host gave them, until they are named (publisher thread).
    struct RawStack {
        uint32_t context = 0; // the host's, to release once named
        bool isBlock = false;
        size_t segment = 0, block = 0; // a state block's place in the state
        uint32_t nativeFirst = 0, nativeCount = 0; // in m_rawNative
        uint32_t pythonFirst = 0, pythonCount = 0; // in m_rawPython
        bool engine = false;
    };
    uint32_t intern(const memscope_frame* frames, size_t count);
    uint32_t intern(std::vector<SymbolFrame> stack);
    // Names every raw stack collected since the last call (waiting at most `waitMs`) and interns it: the stack id
    // of m_raw[i] in ids[i], 0 where some frame was not named in time.
    void resolveRaw(unsigned waitMs, std::vector<uint32_t>& ids);
    void addRaw(RawStack raw, const memscope_frame* native, size_t nativeCount, const memscope_python_frame* python,
                size_t pythonCount);
    // Hands the host back the raw stacks' contexts whose frames are named (or will never be); m_hookMutex held.
    void releaseRaw();
    void sendNewStacks(StackSender& sender);
    void watch();
    static void extraFrames(void* user, const char* file, int line, std::vector<python::ExtraFrame>& out);

    struct HookScope; // marks the publisher thread as inside a hook, for the watchdog
    // Runs `call` on the hook thread and returns when it returned, calling sender.keepAlive() every 100 ms meanwhile.
    void runOnHookThread(const std::function<void()>& call, StackSender& sender);
    void hookThread();

    const memscope_observer_hooks m_hooks;
    const int m_deviceCount;
    const std::string m_settings; // settingsLines of the observed allocator's settings
    std::unique_ptr<Publisher> m_publisher;
    BlockLayout m_layout;
    // Stamps: while the publisher thread takes a state, each device's MEMSCOPE_OBSERVED_SNAPSHOT event (reported
    // on that thread, under the device's lock) records its ring's position.
    std::atomic<bool> m_stamping { false };
    std::unique_ptr<std::atomic<uint64_t>[]> m_stamps;
    // Stacks, interned by their frames: id = index + 1.
    std::unordered_map<std::string, uint32_t> m_stackIds;
    std::vector<std::vector<SymbolFrame>> m_stacks;
    size_t m_stacksSent = 0;
    std::atomic<size_t> m_stacksSentCount { 0 };
    std::vector<uint32_t> m_contexts; // publisher thread: a batch's contexts
    std::unordered_map<uint32_t, uint32_t> m_contextStacks; // publisher thread: context -> stack id, one batch
    // A record's stackId that stands for its block's allocation's stack (MEMSCOPE_OBSERVED_ALLOCATION_CONTEXT):
    // never a context (those are below 64 << 24 for events).
    static constexpr uint32_t AllocationStack = 0xFFFFFFFFu;
    // Publisher thread: the stack id of each live block's allocation, per device (address -> stack id).
    std::vector<std::unordered_map<uint64_t, uint32_t>> m_allocStacks;
    // Unnamed frames (publisher thread): a batch's or a state's raw stacks, and stacks of Python frames alone by
    // their (code, instruction) bytes. A key stays valid: the symboliser's table holds every code object it named.
    std::vector<RawStack> m_raw;
    std::vector<SymbolFrame> m_rawNative;
    std::vector<python::RawFrame> m_rawPython;
    std::vector<uintptr_t> m_rawKeys;
    struct StringHash {
        using is_transparent = void;
        size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
    };
    std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> m_rawStackIds;
    std::string m_rawKey;
    std::vector<uint32_t> m_releaseNow; // contexts named: to release
    std::vector<std::pair<uint64_t, uint32_t>> m_releaseAfter; // (symboliser pass, context): frames named late
    std::unique_ptr<PythonSymboliser> m_symboliser;
    bool m_lateReported = false; // publisher thread: a "stacks are late" line was printed for the current stretch
    // Statistics (publisher thread writes, any thread reads).
    std::atomic<uint64_t> m_contextCount { 0 }, m_withoutStack { 0 }, m_symbolizeNs { 0 };
    std::atomic<uint64_t> m_framesLate { 0 };
    // The watchdog.
    std::atomic<int64_t> m_hookSinceNs { 0 }; // steady ns the publisher thread entered a hook; 0: not in one
    std::atomic<const char*> m_hookName { "" };
    std::mutex m_watchMutex;
    std::condition_variable m_watchWake;
    bool m_watchStop = false; // under m_watchMutex
    std::thread m_watchdog;
    std::mutex m_hookMutex; // held around every hook call; stop() takes it to know none runs
    bool m_stopped = false; // under m_hookMutex
    // The hook thread: one call at a time, handed over under m_callMutex.
    std::mutex m_callMutex;
    std::condition_variable m_callWake;
    const std::function<void()>* m_call = nullptr; // the call to run; null once it returned
    bool m_callStop = false;
    std::thread m_hookThread;
};

// memscope_annotate for the observer, if one publishes: true when it took the note (observer.cpp).
bool annotateObserved(int device, bool start, std::string_view name);

// Sets what memscope_last_error() says on this thread (agentapi.cpp).
void setLastApiError(std::string message);

} // namespace memscope::agent

// The sink handed to the hooks: where the observer puts what the host reports.
struct memscope_observer_sink {
    memscope::agent::Observer* observer = nullptr;
    std::vector<memscope::agent::SegmentInfo>* state = nullptr; // hooks.state
    uint64_t nextBlock = 0; // hooks.state: the address of the next block of the current segment
};
