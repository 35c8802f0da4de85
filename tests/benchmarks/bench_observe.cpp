// What observing PyTorch's allocator (memscope_torch.observe(), memscope/observe.h) costs the allocating thread per
// event: the tracker's path of agent/python/memscope_observer.cpp without torch. BM_observeEvent hands
// memscope_observe_event one record (no context: observe(stacks=None)); BM_observeEventWithContext first copies the
// event's context (a shared_ptr, as PyTorch's TraceEntry holds it) into a per-device slot ring, as the extension's
// track() does with stacks on (observe()), and memscope releases the slot on its publisher thread. The context
// itself is gathered by PyTorch before the tracker runs (its own history's cost) and is made once here. The
// counter `lost` says how many records the ring dropped (a loop that does nothing but report outruns the publisher
// thread, which a real job does not).
#include "memscope/observe.h"

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

struct Context {
    std::vector<int> frames = std::vector<int>(32); // stands for PyTorch's CapturedTraceback
};

// The extension's slots (memscope_observer.cpp): a context copied in by the tracker, released by the publisher.
constexpr uint32_t SlotCount = 1u << 17;
struct Slot {
    std::shared_ptr<Context> context;
    std::atomic<bool> busy { false };
};
std::unique_ptr<Slot[]> g_slots;
uint64_t g_next = 0;

int noState(void*, memscope_observer_sink*) { return 0; }
void noSymbolize(void*, const uint32_t* contexts, size_t count, memscope_observer_sink*)
{
    for (size_t i = 0; i < count; ++i) { // nothing to name: the contexts go back at once
        Slot& s = g_slots[(contexts[i] & 0xFFFFFFu) - 1];
        s.context.reset();
        s.busy.store(false, std::memory_order_release);
    }
}
void release(void* user, const uint32_t* contexts, size_t count) { noSymbolize(user, contexts, count, nullptr); }

std::string endpoint()
{
    char dir[] = "/tmp/memscope-bench-XXXXXX";
    return mkdtemp(dir) ? "ipc://" + std::string(dir) + "/observe" : std::string();
}

void observe(benchmark::State& state, bool withContext)
{
    g_slots.reset(new Slot[SlotCount]);
    const memscope_observer_hooks hooks { nullptr, &noState, &noSymbolize, &release, nullptr };
    if (memscope_observe_start(endpoint().c_str(), 1, "", &hooks) != 0) {
        state.SkipWithError(memscope_last_error());
        return;
    }
    const auto context = std::make_shared<Context>();
    memscope_observed_event e {};
    e.size = 1 << 20;
    uint64_t address = 0x7f0000000000;
    for (auto _ : state) {
        e.action = (address & 1) ? MEMSCOPE_OBSERVED_FREE_REQUESTED : MEMSCOPE_OBSERVED_ALLOC;
        e.address = address & ~uint64_t(1);
        e.context = 0;
        Slot* slot = nullptr;
        if (withContext && e.action == MEMSCOPE_OBSERVED_ALLOC) {
            const uint32_t index = uint32_t(g_next % SlotCount);
            Slot& s = g_slots[index];
            if (!s.busy.load(std::memory_order_acquire)) {
                s.context = context;
                s.busy.store(true, std::memory_order_release);
                slot = &s;
                e.context = index + 1;
                ++g_next;
            }
        }
        if (!memscope_observe_event(&e) && slot) {
            slot->context.reset();
            slot->busy.store(false, std::memory_order_release);
        }
        ++address;
    }
    state.counters["lost"] = double(memscope_observe_lost());
    memscope_observe_stop();
    state.SetItemsProcessed(state.iterations());
}

void BM_observeEvent(benchmark::State& state) { observe(state, false); }
void BM_observeEventWithContext(benchmark::State& state) { observe(state, true); }

} // namespace

BENCHMARK(BM_observeEvent)->MinTime(0.5);
BENCHMARK(BM_observeEventWithContext)->MinTime(0.5);

BENCHMARK_MAIN();
