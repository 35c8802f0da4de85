// Benchmarks of loading: what `memscope-cli stats` pays before it prints. Bytes in memory -> pickle machine ->
// snapshot builder -> replay with checkpoints, on big_trace (28 MB, 329k entries) and on synthetic pickles of ~1M
// and ~10M entries (big_trace repeated, written by our own pickle writer), to show the cost grows linearly.
// Counters: input MB/s and entries/s. Peak memory is measured outside (see the README: /usr/bin/time -v).
//
// The file benchmarks (LoadFile/4 ~ 110 MB, LoadFile/40 ~ 1.1 GB and 13.4 M entries, LoadFile/200 ~ 5.2 GB and
// 67 M entries: big_trace repeated, each repetition freed before the next) write their pickle once into the build
// tree (build/bench-data/, never the checkout) and load it from there as `memscope-cli` does (mapped); the same
// files serve the README's `/usr/bin/time -v memscope-cli stats` and `pickle.load` comparisons, and the app's.
#include "io/snapshotio.h"
#include "model/replay.h"
#include "report/memoryviz.h"
#include "synthetic.h"

#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

using namespace memscope;

namespace {

using namespace memscope::bench;

const std::vector<uint8_t>& bigTraceBytes()
{
    static const std::vector<uint8_t> bytes = [] {
        std::vector<uint8_t> b;
        const std::string path = sharedDir() + "/snapshots/big_trace.pickle.xz";
        if (io::Error e = io::readFile(path, b)) {
            std::fprintf(stderr, "%s\n", e.toString().c_str());
            std::exit(1);
        }
        return b;
    }();
    return bytes;
}

const std::string& syntheticPickle(int64_t entries)
{
    static std::map<int64_t, std::string> cache;
    std::string& slot = cache[entries];
    if (slot.empty())
        slot = io::encodePickle(synthetic(entries, Survivors::Freed));
    return slot;
}

// build/bench-data/synthetic-<reps>x.pickle: big_trace's device 0 repeated `reps` times (Survivors::Freed), written
// by our pickle writer the first time it is asked for (a few seconds and, for 40 repetitions, about 2 GB of memory
// while it is made), then kept for later runs.
std::string syntheticFile(int64_t reps)
{
    const std::string dir = MEMSCOPE_BENCH_DATA_DIR;
    const std::string path = dir + "/synthetic-" + std::to_string(reps) + "x.pickle";
    std::error_code ec;
    if (std::filesystem::is_regular_file(path, ec))
        return path;
    std::filesystem::create_directories(dir, ec);
    std::unique_ptr<model::Snapshot> s = repeated(bigTrace(), size_t(reps), Survivors::Freed);
    if (io::Error e = io::saveSnapshot(*s, path, io::Format::Pickle)) {
        std::fprintf(stderr, "%s\n", e.toString().c_str());
        std::exit(1);
    }
    std::fprintf(stderr, "wrote %s (%zu entries)\n", path.c_str(), s->entryCount());
    return path;
}

void loadBenchmark(benchmark::State& state, std::span<const uint8_t> bytes, bool withReplay)
{
    size_t entries = 0;
    for (auto _ : state) {
        io::LoadResult r = io::loadSnapshotFromMemory(bytes, "bench");
        if (!r.ok()) {
            state.SkipWithError(r.error.toString().c_str());
            return;
        }
        entries = r.snapshot->entryCount();
        if (withReplay) {
            auto replays = model::Replay::buildAll(*r.snapshot);
            benchmark::DoNotOptimize(replays);
        }
        benchmark::DoNotOptimize(r);
    }
    state.SetBytesProcessed(int64_t(bytes.size()) * state.iterations());
    state.counters["entries"] = double(entries);
    state.counters["entries/s"] = benchmark::Counter(double(entries), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LoadBigTrace(benchmark::State& state) { loadBenchmark(state, bigTraceBytes(), false); }
BENCHMARK(BM_LoadBigTrace)->Unit(benchmark::kMillisecond);

// What `memscope-cli stats` does before formatting: load, then replay every device with checkpoints.
void BM_LoadAndReplayBigTrace(benchmark::State& state) { loadBenchmark(state, bigTraceBytes(), true); }
BENCHMARK(BM_LoadAndReplayBigTrace)->Unit(benchmark::kMillisecond);

void BM_StatsReportBigTrace(benchmark::State& state)
{
    const io::LoadResult r = io::loadSnapshotFromMemory(bigTraceBytes(), "bench");
    for (auto _ : state) {
        std::string text = report::segsum(*r.snapshot);
        benchmark::DoNotOptimize(text);
    }
}
BENCHMARK(BM_StatsReportBigTrace)->Unit(benchmark::kMillisecond);

void BM_LoadAndReplaySynthetic(benchmark::State& state)
{
    const std::string& pickle = syntheticPickle(state.range(0));
    loadBenchmark(state, { reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size() }, true);
}
BENCHMARK(BM_LoadAndReplaySynthetic)->Arg(1'000'000)->Arg(10'000'000)->Unit(benchmark::kMillisecond)->Iterations(2);

// Load alone (read, parse, build, the consistency check every load runs) of ~100 MB: 1.2 M entries.
void BM_LoadSynthetic(benchmark::State& state)
{
    const std::string& pickle = syntheticPickle(state.range(0));
    loadBenchmark(state, { reinterpret_cast<const uint8_t*>(pickle.data()), pickle.size() }, false);
}
BENCHMARK(BM_LoadSynthetic)->Arg(1'200'000)->Unit(benchmark::kMillisecond);

// What `memscope-cli stats` pays before it formats: load a file from disk (mapped) with every check. Arg: repetitions
// of big_trace (4: ~110 MB, 1.3 M entries; 40: ~1.1 GB, 13.4 M entries; 200: ~5.2 GB, 67 M entries, about 10 GB
// of memory while it is written and 5 GB of disk: run it by name, --benchmark_filter=LoadFile/200).
void BM_LoadFile(benchmark::State& state)
{
    const std::string path = syntheticFile(state.range(0));
    size_t entries = 0;
    uint64_t bytes = 0;
    for (auto _ : state) {
        io::LoadResult r = io::loadSnapshot(path);
        if (!r.ok()) {
            state.SkipWithError(r.error.toString().c_str());
            return;
        }
        entries = r.snapshot->entryCount();
        benchmark::DoNotOptimize(r);
    }
    std::error_code ec;
    bytes = std::filesystem::file_size(path, ec);
    state.SetBytesProcessed(int64_t(bytes) * state.iterations());
    state.counters["entries"] = double(entries);
    state.counters["entries/s"] = benchmark::Counter(double(entries), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_LoadFile)->Arg(4)->Arg(40)->Arg(200)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_EncodePickleBigTrace(benchmark::State& state)
{
    const io::LoadResult r = io::loadSnapshotFromMemory(bigTraceBytes(), "bench");
    for (auto _ : state) {
        std::string out = io::encodePickle(*r.snapshot);
        benchmark::DoNotOptimize(out);
    }
}
BENCHMARK(BM_EncodePickleBigTrace)->Unit(benchmark::kMillisecond);

} // namespace
