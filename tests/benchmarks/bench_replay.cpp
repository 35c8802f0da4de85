// Benchmarks of model::Replay: building (backward pass, series, checkpoints) and querying the state at random
// indices, on big_trace (329k entries, decompressed by loadSnapshot) and on synthetic traces of ~1M and ~10M
// entries made by repeating big_trace at shifted addresses and times, to show that the cost grows linearly.
// Counters: entries, checkpoints, checkpoint memory, whole-replay memory, live blocks per query. Main thread only.
#include "io/snapshotio.h"
#include "model/replay.h"
#include "model/replayextender.h"
#include "synthetic.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>

using namespace memscope;

namespace {

using namespace memscope::bench;

void setCounters(benchmark::State& state, const model::Replay& replay)
{
    state.counters["entries"] = double(replay.entryCount());
    state.counters["checkpoints"] = double(replay.checkpointCount());
    state.counters["checkpoint_bytes"] = double(replay.checkpointBytes());
    state.counters["replay_bytes"] = double(replay.memoryBytes());
    state.counters["allocations"] = double(replay.allocations().size());
    if (replay.warnings() != 0)
        state.SkipWithError("the replay found inconsistencies");
}

void buildBenchmark(benchmark::State& state, const model::Snapshot& snapshot)
{
    model::Replay replay;
    for (auto _ : state) {
        replay = model::Replay::build(snapshot, 0);
        benchmark::DoNotOptimize(replay);
        benchmark::ClobberMemory();
    }
    setCounters(state, replay);
    state.counters["entries_per_s"]
        = benchmark::Counter(double(replay.entryCount()), benchmark::Counter::kIsIterationInvariantRate);
}

void stateAtBenchmark(benchmark::State& state, const model::Snapshot& snapshot)
{
    const model::Replay replay = model::Replay::build(snapshot, 0);
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<int64_t> pick(0, replay.entryCount());
    model::ReplayState out;
    size_t blocks = 0;
    for (auto _ : state) {
        replay.stateAt(pick(rng), out);
        blocks += out.allocations.size();
        benchmark::DoNotOptimize(out.blocks.data());
    }
    setCounters(state, replay);
    state.counters["live_blocks"] = benchmark::Counter(double(blocks), benchmark::Counter::kAvgIterations);
}

void liveAtBenchmark(benchmark::State& state, const model::Snapshot& snapshot)
{
    const model::Replay replay = model::Replay::build(snapshot, 0);
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<int64_t> pick(0, replay.entryCount());
    std::vector<model::AllocationId> out, scratch;
    size_t blocks = 0;
    for (auto _ : state) {
        replay.liveAt(pick(rng), out, scratch);
        blocks += out.size();
        benchmark::DoNotOptimize(out.data());
    }
    state.counters["live_blocks"] = benchmark::Counter(double(blocks), benchmark::Counter::kAvgIterations);
}

void BM_BuildBigTrace(benchmark::State& state) { buildBenchmark(state, bigTrace()); }
BENCHMARK(BM_BuildBigTrace)->Unit(benchmark::kMillisecond);

void BM_StateAtBigTrace(benchmark::State& state) { stateAtBenchmark(state, bigTrace()); }
BENCHMARK(BM_StateAtBigTrace)->Unit(benchmark::kMicrosecond);

void BM_LiveAtBigTrace(benchmark::State& state) { liveAtBenchmark(state, bigTrace()); }
BENCHMARK(BM_LiveAtBigTrace)->Unit(benchmark::kMicrosecond);

// Arg: target entries. "Bounded": each repetition frees what it left (a long job: the trace grows, the live state
// does not); "Growing": survivors accumulate (the live state grows with the trace, so queries cost more too).
void BM_BuildSyntheticBounded(benchmark::State& state)
{
    buildBenchmark(state, synthetic(state.range(0), Survivors::Freed));
}
BENCHMARK(BM_BuildSyntheticBounded)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_StateAtSyntheticBounded(benchmark::State& state)
{
    stateAtBenchmark(state, synthetic(state.range(0), Survivors::Freed));
}
BENCHMARK(BM_StateAtSyntheticBounded)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMicrosecond);

void BM_BuildSyntheticGrowing(benchmark::State& state)
{
    buildBenchmark(state, synthetic(state.range(0), Survivors::Kept));
}
BENCHMARK(BM_BuildSyntheticGrowing)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->Iterations(3);

void BM_StateAtSyntheticGrowing(benchmark::State& state)
{
    stateAtBenchmark(state, synthetic(state.range(0), Survivors::Kept));
}
BENCHMARK(BM_StateAtSyntheticGrowing)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMicrosecond);

} // namespace

namespace {

// Growing a replay forwards as a live view does (model::ReplayExtender): the whole trace appended in chunks of
// 60,000 entries, about 30 ms of a job publishing 2 M events per second. Reported per chunk: the cost of one
// refresh, which follows the chunk and the live state, not the trace so far (compare 1 M with 10 M entries).
void extendBenchmark(benchmark::State& state, const model::Snapshot& snapshot)
{
    const model::Replay ref = model::Replay::build(snapshot, 0);
    const model::Snapshot initial = model::snapshotOfState(ref.stateAt(0), 0);
    const auto& trace = snapshot.deviceTraces[0];
    const std::span<const model::TraceEntry> entries(trace.data() + ref.firstEntry(), size_t(ref.entryCount()));
    constexpr size_t Chunk = 60000;
    double lastChunkSeconds = 0;
    size_t chunks = 0;
    for (auto _ : state) {
        model::Replay grown;
        model::ReplayExtender extender;
        extender.start(grown, initial, 0);
        chunks = 0;
        for (size_t at = 0; at < entries.size(); at += Chunk) {
            const auto t0 = std::chrono::steady_clock::now();
            extender.append(grown, snapshot.entryForms, entries.subspan(at, std::min(Chunk, entries.size() - at)));
            lastChunkSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ++chunks;
        }
        if (grown.warnings() != 0)
            state.SkipWithError("the extended replay found inconsistencies");
        benchmark::DoNotOptimize(grown);
    }
    state.counters["entries"] = double(entries.size());
    state.counters["chunks"] = double(chunks);
    state.counters["last_chunk_ms"] = lastChunkSeconds * 1e3;
    state.counters["entries_per_s"] = benchmark::Counter(double(entries.size()), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_ExtendBigTrace(benchmark::State& state) { extendBenchmark(state, bigTrace()); }
BENCHMARK(BM_ExtendBigTrace)->Unit(benchmark::kMillisecond);

void BM_ExtendSyntheticBounded(benchmark::State& state)
{
    extendBenchmark(state, synthetic(state.range(0), Survivors::Freed));
}
BENCHMARK(BM_ExtendSyntheticBounded)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->Iterations(2);

} // namespace
