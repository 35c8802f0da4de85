// Observer: the EventSource of an allocator memscope does not run (memscope/observe.h): PyTorch's own caching
// allocator, whose trace tracker (a torch extension) hands every event to event(). Records go through the same
// ring, publisher thread and wire protocol as memscope's allocator's; on the publisher thread the observer completes
// them before they are sent: the block sizes PyTorch's events do not carry (BlockLayout, rebased on every state),
// and the stacks of their contexts (the host symbolises them in batches; equal frame lists share one stack id).
//
// Threads: event() runs on whichever thread holds the observed allocator's device lock and only writes a record
// into the publisher's ring (or a stamp); everything else runs on the publisher thread, except start() and stop()
// (any thread, not concurrently with each other). The host's hooks are called on the publisher thread only, one at
// a time, never after stop() returned.
#pragma once

#include "blocklayout.h"
#include "eventsource.h"
#include "memscope/observe.h"
#include "publisher.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
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

    // Block records that did not fit the layout since the last state (publisher thread).
    uint64_t layoutMisses() const { return m_layout.misses(); }
    size_t stackCount() const { return m_stacks.size(); }

private:
    uint32_t intern(const memscope_frame* frames, size_t count);
    void sendNewStacks(StackSender& sender);

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
    std::vector<uint32_t> m_contexts; // publisher thread: a batch's contexts
    std::unordered_map<uint32_t, uint32_t> m_contextStacks; // publisher thread: context -> stack id, one batch
    std::mutex m_hookMutex; // held around every hook call; stop() takes it to know none runs
    bool m_stopped = false; // under m_hookMutex
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
