// Benchmarks of model::computeDiff (common/model/diff.h): two big_trace-sized end states (the same object, two
// separately loaded copies whose stacks must match by content, and a copy at shifted addresses so that no segment
// matches), two cursors in one trace with the replay already built (big_trace, and synthetic ~1M / ~10M entry
// traces whose live state stays bounded or grows), and the reports. Targets: end states within 50 ms, two cursors
// in a 10M-entry trace within 100 ms once the replay's checkpoints exist. Main thread only.
#include "io/snapshotio.h"
#include "model/diff.h"
#include "report/diffreport.h"
#include "model/replay.h"
#include "synthetic.h"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

using namespace memscope;

namespace {

using namespace memscope::bench;

// A non-owning shared_ptr for the snapshots synthetic.h keeps alive for the whole process.
std::shared_ptr<const model::Snapshot> borrowed(const model::Snapshot& s)
{
    return std::shared_ptr<const model::Snapshot>(std::shared_ptr<const void> {}, &s);
}

// A second, separately loaded big_trace: another snapshot object, so frames and stacks match by content only.
std::shared_ptr<const model::Snapshot> bigTraceCopy()
{
    static const std::shared_ptr<const model::Snapshot> copy = [] {
        const std::string path = sharedDir() + "/snapshots/big_trace.pickle.xz";
        io::LoadResult result = io::loadSnapshot(path);
        if (!result.ok()) {
            std::fprintf(stderr, "%s: %s\n", path.c_str(), result.error.message.c_str());
            std::exit(1);
        }
        return result.snapshot;
    }();
    return copy;
}

// big_trace's device-0 state repeated twice at shifted addresses: same stacks, no common segment.
std::shared_ptr<const model::Snapshot> bigTraceShifted()
{
    static const std::shared_ptr<const model::Snapshot> shifted = repeated(bigTrace(), 2, Survivors::Freed);
    return shifted;
}

model::DiffSide side(std::shared_ptr<const model::Snapshot> s, int64_t index = model::EndOfTrace,
                     const model::Replay* replay = nullptr)
{
    model::DiffSide d;
    d.snapshot = std::move(s);
    d.index = index;
    d.replay = replay;
    return d;
}

void setCounters(benchmark::State& state, const model::DiffResult& r)
{
    if (!r.ok()) {
        state.SkipWithError(r.error.c_str());
        return;
    }
    state.counters["stack_rows"] = double(r.byStack.size());
    state.counters["sized_rows"] = double(r.byStackAndSize.size());
    state.counters["live_a"] = double(r.totals.front().a.allocations);
    state.counters["live_b"] = double(r.totals.front().b.allocations);
    state.counters["segments"] = double(r.segmentList.size());
}

void endsBenchmark(benchmark::State& state, const std::shared_ptr<const model::Snapshot>& a,
                   const std::shared_ptr<const model::Snapshot>& b)
{
    model::DiffResult r;
    for (auto _ : state) {
        r = model::computeDiff(side(a), side(b));
        benchmark::DoNotOptimize(r.byStack.data());
    }
    setCounters(state, r);
}

void BM_DiffBigTraceEndsSameObject(benchmark::State& state)
{
    const auto a = borrowed(bigTrace());
    endsBenchmark(state, a, a);
}
BENCHMARK(BM_DiffBigTraceEndsSameObject)->Unit(benchmark::kMillisecond);

void BM_DiffBigTraceEndsTwoFiles(benchmark::State& state)
{
    endsBenchmark(state, borrowed(bigTrace()), bigTraceCopy());
}
BENCHMARK(BM_DiffBigTraceEndsTwoFiles)->Unit(benchmark::kMillisecond);

void BM_DiffBigTraceEndsShifted(benchmark::State& state)
{
    endsBenchmark(state, borrowed(bigTrace()), bigTraceShifted());
}
BENCHMARK(BM_DiffBigTraceEndsShifted)->Unit(benchmark::kMillisecond);

// Two random cursors of one trace per iteration, the replay built beforehand (as the app has it).
void cursorsBenchmark(benchmark::State& state, const model::Snapshot& snapshot)
{
    const auto s = borrowed(snapshot);
    const model::Replay replay = model::Replay::build(snapshot, 0);
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int64_t> pick(0, replay.entryCount());
    model::DiffResult r;
    int64_t live = 0;
    for (auto _ : state) {
        r = model::computeDiff(side(s, pick(rng), &replay), side(s, pick(rng), &replay));
        live += r.totals.front().a.allocations + r.totals.front().b.allocations;
        benchmark::DoNotOptimize(r.byStack.data());
    }
    setCounters(state, r);
    state.counters["entries"] = double(replay.entryCount());
    state.counters["live_both"] = benchmark::Counter(double(live), benchmark::Counter::kAvgIterations);
}

void BM_DiffBigTraceCursors(benchmark::State& state) { cursorsBenchmark(state, bigTrace()); }
BENCHMARK(BM_DiffBigTraceCursors)->Unit(benchmark::kMillisecond);

// Arg: target entries. Bounded: the live state stays big_trace's; Growing: survivors accumulate (~45k live blocks
// at 10M entries).
void BM_DiffSyntheticCursorsBounded(benchmark::State& state)
{
    cursorsBenchmark(state, synthetic(state.range(0), Survivors::Freed));
}
BENCHMARK(BM_DiffSyntheticCursorsBounded)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond);

void BM_DiffSyntheticCursorsGrowing(benchmark::State& state)
{
    cursorsBenchmark(state, synthetic(state.range(0), Survivors::Kept));
}
BENCHMARK(BM_DiffSyntheticCursorsGrowing)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond);

// The reports of the cross-file end-state diff (the CLI's work after loading).
void BM_DiffReportsBigTrace(benchmark::State& state)
{
    const model::DiffResult r = model::computeDiff(side(borrowed(bigTrace())), side(bigTraceShifted()));
    size_t bytes = 0;
    for (auto _ : state) {
        std::string text = report::diffText(r, { model::DiffGrouping::Stack, 10 });
        std::string json = report::diffJson(r);
        std::string folded = report::diffFolded(r);
        bytes = text.size() + json.size() + folded.size();
        benchmark::DoNotOptimize(bytes);
    }
    setCounters(state, r);
    state.counters["output_bytes"] = double(bytes);
}
BENCHMARK(BM_DiffReportsBigTrace)->Unit(benchmark::kMillisecond);

} // namespace
