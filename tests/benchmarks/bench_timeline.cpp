// Benchmarks of the timeline stacking engine (model/timeline.h): picking each column's state (pass 1), rasterising
// every live allocation of every column into a 1920×1080 buffer (pass 2, what the timeline view does on a full
// repaint, without Qt's blit), at the whole trace and zoomed in, on big_trace (329k entries) and a synthetic 1 M-entry
// trace (big_trace repeated) to show the cost follows the entries in view plus columns × live; single-threaded unless
// the name says Threads (then pass 2 is split over that many threads, as the view does). Main thread only.
#include "model/replay.h"
#include "model/timeline.h"
#include "synthetic.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <thread>
#include <vector>

using namespace memscope;

namespace {

using namespace memscope::bench;

constexpr int Width = 1920, Height = 1080;

// Index-axis columns over states [first, last): as app::StateAxis::columnRanges does for the index axis.
void columnRanges(double first, double last, int columns, std::vector<int64_t>& lo, std::vector<int64_t>& hi)
{
    lo.resize(size_t(columns));
    hi.resize(size_t(columns));
    const double step = (last - first) / columns;
    for (int x = 0; x < columns; ++x) {
        lo[size_t(x)] = int64_t(std::floor(first + step * x));
        hi[size_t(x)] = std::max(lo[size_t(x)] + 1, int64_t(std::ceil(first + step * (x + 1))));
    }
}

struct Fixture {
    model::Replay replay;
    model::TimelineItems items;
    std::vector<uint32_t> colors;

    explicit Fixture(const model::Snapshot& snapshot)
        : replay(model::Replay::build(snapshot, 0))
        , items(model::TimelineItems::fromAllocations(replay))
        , colors(items.count())
    {
        for (size_t k = 0; k < colors.size(); ++k)
            colors[k] = 0xff000000u | uint32_t((replay.allocation(model::AllocationId(k)).address * 0x9E3779B97F4A7C15ull) >> 40);
    }
};

const Fixture& bigFixture()
{
    static const Fixture f(bigTrace());
    return f;
}

const Fixture& millionFixture()
{
    static const std::unique_ptr<model::Snapshot> snapshot = repeated(bigTrace(), 3, Survivors::Freed);
    static const Fixture f(*snapshot);
    return f;
}

// One full repaint's engine work: pass 1, the live set at the first column, pass 2.
struct Part {
    model::TimelineStack stack;
    model::TimelineRasterScratch scratch;
};

struct Buffers {
    std::vector<uint32_t> pixels = std::vector<uint32_t>(size_t(Width) * Height);
    model::TimelineColumns columns;
    std::vector<Part> parts;
    std::vector<int64_t> lo, hi;
};

// As the view does: pass 1, then pass 2 split over `threads` column ranges, each from the live set at its start.
void render(const Fixture& f, double first, double last, Buffers& b, int threads)
{
    auto& columns = b.columns;
    columnRanges(first, last, Width, b.lo, b.hi);
    model::sampleColumns(f.items, {}, b.lo, b.hi, columns);
    b.parts.resize(size_t(threads));
    model::TimelineRaster raster;
    raster.pixels = b.pixels.data();
    raster.stride = Width;
    raster.width = Width;
    raster.height = Height;
    raster.bytesPerPixel = std::max(1.0, double(columns.maxTotal) * 1.06 / Height);
    raster.background = 0xffffffff;
    raster.neutral = 0xff808080;
    raster.pending = 0xffd62728;
    auto part = [&](int i) {
        const int x0 = Width * i / threads, x1 = Width * (i + 1) / threads;
        Part& p = b.parts[size_t(i)];
        p.stack.bind(&f.items, {}, f.colors);
        p.stack.setColours(model::tallBytes(raster), raster.neutral, raster.pending);
        const auto live = f.replay.liveAt(columns.state[size_t(x0)]);
        std::vector<model::TimelineItem> ids(live.size());
        for (size_t k = 0; k < live.size(); ++k)
            ids[k] = model::raw(live[k]);
        p.stack.reset(columns.state[size_t(x0)], ids);
        model::rasterize(p.stack, columns, raster, p.scratch, x0, x1);
    };
    std::vector<std::thread> pool;
    for (int i = 1; i < threads; ++i)
        pool.emplace_back(part, i);
    part(0);
    for (auto& t : pool)
        t.join();
}

void renderBenchmark(benchmark::State& state, const Fixture& f, double firstFraction, double lastFraction,
                     int threads = 1)
{
    Buffers b;
    const double n = double(f.replay.entryCount() + 1);
    for (auto _ : state) {
        render(f, firstFraction * n, lastFraction * n, b, threads);
        benchmark::DoNotOptimize(b.pixels.data());
        benchmark::ClobberMemory();
    }
    state.counters["entries_in_view"] = (lastFraction - firstFraction) * n;
    state.counters["live_at_end"] = double(b.parts.back().stack.liveCount());
}

// What the view derives once per device: the stacked items of both modes (the orders included).
void buildBenchmark(benchmark::State& state, const Fixture& f)
{
    for (auto _ : state) {
        auto allocations = model::TimelineItems::fromAllocations(f.replay);
        auto segments = model::TimelineItems::fromSegments(f.replay);
        benchmark::DoNotOptimize(allocations.byEnd.data());
        benchmark::DoNotOptimize(segments.byEnd.data());
    }
    state.counters["items"] = double(f.items.count());
}

void BM_BuildItemsBigTrace(benchmark::State& state) { buildBenchmark(state, bigFixture()); }
BENCHMARK(BM_BuildItemsBigTrace)->Unit(benchmark::kMillisecond);

void BM_BuildItemsSynthetic1M(benchmark::State& state) { buildBenchmark(state, millionFixture()); }
BENCHMARK(BM_BuildItemsSynthetic1M)->Unit(benchmark::kMillisecond);

void BM_SampleColumnsBigTrace(benchmark::State& state)
{
    const Fixture& f = bigFixture();
    model::TimelineColumns columns;
    std::vector<int64_t> lo, hi;
    columnRanges(0, double(f.replay.entryCount() + 1), Width, lo, hi);
    for (auto _ : state) {
        model::sampleColumns(f.items, {}, lo, hi, columns);
        benchmark::DoNotOptimize(columns.maxTotal);
    }
}
BENCHMARK(BM_SampleColumnsBigTrace)->Unit(benchmark::kMillisecond);

void BM_RenderBigTraceWhole(benchmark::State& state) { renderBenchmark(state, bigFixture(), 0, 1); }
BENCHMARK(BM_RenderBigTraceWhole)->Unit(benchmark::kMillisecond);

void BM_RenderBigTraceWholeThreads(benchmark::State& state)
{
    renderBenchmark(state, bigFixture(), 0, 1, int(state.range(0)));
}
BENCHMARK(BM_RenderBigTraceWholeThreads)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_RenderBigTraceZoomed30k(benchmark::State& state)
{
    renderBenchmark(state, bigFixture(), 0.3, 0.3 + 30e3 / 329117);
}
BENCHMARK(BM_RenderBigTraceZoomed30k)->Unit(benchmark::kMillisecond);

void BM_RenderBigTraceZoomed500(benchmark::State& state)
{
    renderBenchmark(state, bigFixture(), 0.5, 0.5 + 500.0 / 329117);
}
BENCHMARK(BM_RenderBigTraceZoomed500)->Unit(benchmark::kMillisecond);

void BM_RenderSynthetic1MWhole(benchmark::State& state) { renderBenchmark(state, millionFixture(), 0, 1); }
BENCHMARK(BM_RenderSynthetic1MWhole)->Unit(benchmark::kMillisecond);

} // namespace
