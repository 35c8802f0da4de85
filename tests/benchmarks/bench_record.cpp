// Benchmark of the part writer of `memscope-cli record --max-memory` (tools/cli/recordcommand.cpp): a
// viewer::Recorder fed a training-like stream of records (one segment, blocks allocated, free-requested and
// free-completed in turn, no stacks, as `memscope-cli demo --no-stacks` publishes), then each stage of writing a part
// on its own: Recorder::takeHistory (the reading thread's share), History::snapshot (building the part) and
// io::saveSnapshot to a fresh file of each format (the writer thread's share; an SQLite part without its indexes, as
// `record` writes it while reading, and the indexes added when the recording ends). Counter records_per_s: trace
// entries per second of the stage (wall clock: the disk's flush included), to compare with the rate a job publishes
// at. Main thread only.
#include "io/snapshotio.h"
#include "io/sqlitewriter.h"
#include "viewer/decoder.h"
#include "viewer/recorder.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

using namespace memscope;

namespace {

constexpr uint64_t Base = 0x7f0000000000;
constexpr uint64_t SegmentBytes = uint64_t(1) << 30;

// `count` records after sequence `first`: a segment at `Base` (when first == 0), then blocks of 512 B to 2 MiB
// allocated in a window of 64 live ones, each freed (requested, then completed) as the window moves on.
std::vector<wire::EventRecord> records(uint64_t count)
{
    std::vector<wire::EventRecord> out;
    out.reserve(count);
    uint64_t sequence = 0;
    auto push = [&](wire::EventType type, uint64_t address, uint64_t size, uint64_t requested) {
        wire::EventRecord e {};
        e.sequence = ++sequence;
        e.timeNs = 1'000'000'000 + sequence * 5000;
        e.address = address;
        e.size = size;
        e.requestedSize = requested;
        e.stream = (sequence % 7 == 0) ? 0x1234 : 0;
        e.type = uint8_t(type);
        out.push_back(e);
    };
    push(wire::EventType::SegmentAlloc, Base, SegmentBytes, 0);
    constexpr uint64_t Window = 64, Slot = uint64_t(2) << 20;
    uint64_t block = 0;
    while (out.size() + 3 <= count) {
        const uint64_t slot = block % Window;
        const uint64_t size = 512 << (block % 12);
        if (block >= Window) {
            const uint64_t oldSize = 512 << ((block - Window) % 12);
            push(wire::EventType::FreeRequested, Base + slot * Slot, oldSize, 0);
            push(wire::EventType::FreeCompleted, Base + slot * Slot, oldSize, 0);
        }
        push(wire::EventType::Alloc, Base + slot * Slot, size, size - 7);
        ++block;
    }
    return out;
}

// A Recorder that has applied `count` records on an empty state.
viewer::Recorder filled(const std::vector<wire::EventRecord>& events)
{
    viewer::Recorder r;
    r.setState(viewer::decodeState(viewer::encodeState(viewer::makeHello(42, 1, "bench", "bench"), 0, {}, {})));
    r.addEvents(events);
    return r;
}

std::string scratch(const char* suffix) { return std::string(MEMSCOPE_BENCH_DATA_DIR) + "/bench_record_part" + suffix; }

void BM_TakeHistory(benchmark::State& state)
{
    const auto events = records(uint64_t(state.range(0)));
    size_t entries = 0;
    for (auto _ : state) {
        state.PauseTiming();
        viewer::Recorder r = filled(events);
        state.ResumeTiming();
        viewer::Recorder::History h = r.takeHistory();
        entries = h.entryCount();
        benchmark::DoNotOptimize(h);
        state.PauseTiming();
        h = {};
        state.ResumeTiming();
    }
    state.counters["records_per_s"]
        = benchmark::Counter(double(entries), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_BuildPart(benchmark::State& state)
{
    const auto events = records(uint64_t(state.range(0)));
    viewer::Recorder r = filled(events);
    const viewer::Recorder::History h = r.takeHistory();
    for (auto _ : state) {
        model::Snapshot s = h.snapshot();
        benchmark::DoNotOptimize(s);
    }
    state.counters["records_per_s"]
        = benchmark::Counter(double(h.entryCount()), benchmark::Counter::kIsIterationInvariantRate);
}

// The part as `record` writes it: io::saveSnapshot (a temporary file, flushed and renamed) in the format the
// output's suffix names.
void writePart(benchmark::State& state, const char* suffix, bool sqliteIndexes = true)
{
    const auto events = records(uint64_t(state.range(0)));
    viewer::Recorder r = filled(events);
    const model::Snapshot s = r.takeHistory().snapshot();
    const std::string path = scratch(suffix);
    for (auto _ : state) {
        io::SaveOptions options;
        options.sqliteIndexes = sqliteIndexes;
        if (io::Error e = io::saveSnapshot(s, path, options)) {
            state.SkipWithError(e.toString().c_str());
            break;
        }
    }
    ::unlink(path.c_str());
    state.counters["records_per_s"]
        = benchmark::Counter(double(s.deviceTraces.at(0).size()), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_WritePartSqlite(benchmark::State& state) { writePart(state, ".sqlite"); }
void BM_WritePartSqliteNoIndexes(benchmark::State& state) { writePart(state, ".sqlite", false); }

// The indexes of an SQLite part written without them (addSqliteIndexes), as `record` adds them at the end.
void BM_IndexPartSqlite(benchmark::State& state)
{
    const auto events = records(uint64_t(state.range(0)));
    viewer::Recorder r = filled(events);
    const model::Snapshot s = r.takeHistory().snapshot();
    const std::string path = scratch(".sqlite");
    io::SaveOptions options;
    options.sqliteIndexes = false;
    for (auto _ : state) {
        state.PauseTiming();
        io::Error e = io::saveSnapshot(s, path, options);
        state.ResumeTiming();
        if (!e)
            e = io::addSqliteIndexes(path);
        if (e) {
            state.SkipWithError(e.toString().c_str());
            break;
        }
    }
    ::unlink(path.c_str());
    state.counters["records_per_s"]
        = benchmark::Counter(double(s.deviceTraces.at(0).size()), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_WritePartPickle(benchmark::State& state) { writePart(state, ".pickle"); }

// 150,000: a part of `record --max-memory 30` (tst_pipeline partsDoNotStallReading); 1,000,000 for the trend.
BENCHMARK(BM_TakeHistory)->Arg(150'000)->Arg(1'000'000)->Iterations(3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BuildPart)->Arg(150'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WritePartSqlite)->Arg(150'000)->Arg(1'000'000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WritePartSqliteNoIndexes)->Arg(150'000)->Arg(1'000'000)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IndexPartSqlite)
    ->Arg(150'000)
    ->Arg(1'000'000)
    ->UseRealTime()
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_WritePartPickle)->Arg(150'000)->Arg(1'000'000)->UseRealTime()->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
