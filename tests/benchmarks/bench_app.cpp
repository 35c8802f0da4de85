// Benchmarks of the desktop app, offscreen: opening big_trace to every view painted; moving the cursor and
// repainting every view; a full repaint of the timeline at 1920x1080 at several zoom levels (the plot rendered
// synchronously, as --screenshot renders it); the same on a synthetic 10M-entry trace, with what a zoom's repaint
// costs the GUI thread when the plot renders in the background, and on bench_load's synthetic files (13.4 M and 67 M
// entries, read from disk as the app reads them). Views are rendered into QImages (what a paint does, minus the
// screen). GUI thread only; QApplication is created in main().
#include "ingest/snapshotloader.h"
#include "document/session.h"
#include "synthetic.h"
#include "views/documentwindow.h"
#include "views/eventlistview.h"
#include "views/timelineview.h"

#include <QApplication>
#include <QImage>
#include <QPainter>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>

using namespace memscope;
using memscope::app::DocumentWindow;

namespace {

using namespace memscope::bench;

// A snapshot shared as the app holds it (a Document owns a shared_ptr).
std::shared_ptr<const model::Snapshot> shared(const model::Snapshot& s)
{
    return std::shared_ptr<const model::Snapshot>(&s, [](const model::Snapshot*) {});
}

const std::vector<uint8_t>& bigTraceBytes()
{
    static const std::vector<uint8_t> bytes = [] {
        std::vector<uint8_t> b;
        if (io::Error e = io::readFile(sharedDir() + "/snapshots/big_trace.pickle.xz", b)) {
            std::fprintf(stderr, "%s\n", e.toString().c_str());
            std::exit(1);
        }
        return b;
    }();
    return bytes;
}

// Every view painted, the timeline's data and plot included: their builds and renders in the background are waited
// for (finishTimelineBuilds), so that what is measured is what a user waits for to see them all.
void renderAll(DocumentWindow& window, QImage& canvas)
{
    for (auto v : { DocumentWindow::View::Timeline, DocumentWindow::View::Segments, DocumentWindow::View::Tree,
                    DocumentWindow::View::Events, DocumentWindow::View::Overview }) {
        QWidget* w = window.view(v);
        app::finishTimelineBuilds(w);
        QPainter painter(&canvas);
        w->render(&painter);
    }
}

// From bytes in memory to a window whose every view has painted once: parse, build, replay, views, paint.
void BM_OpenBigTraceToPainted(benchmark::State& state)
{
    QImage canvas(1920, 1080, QImage::Format_ARGB32_Premultiplied);
    for (auto _ : state) {
        io::LoadResult r = io::loadSnapshotFromMemory(bigTraceBytes(), "big_trace.pickle");
        auto doc = app::makeDocument(QStringLiteral("big_trace.pickle"), r.snapshot);
        DocumentWindow window(doc);
        window.resize(1920, 1080);
        window.setAttribute(Qt::WA_DontShowOnScreen);
        window.show();
        QCoreApplication::processEvents();
        renderAll(window, canvas);
        benchmark::DoNotOptimize(canvas.bits());
    }
}
BENCHMARK(BM_OpenBigTraceToPainted)->Unit(benchmark::kMillisecond)->Iterations(3);

void cursorBenchmark(benchmark::State& state, std::shared_ptr<const app::Document> doc)
{
    DocumentWindow window(doc);
    window.resize(1920, 1080);
    window.setAttribute(Qt::WA_DontShowOnScreen);
    window.show();
    QCoreApplication::processEvents();
    QImage canvas(1920, 1080, QImage::Format_ARGB32_Premultiplied);
    renderAll(window, canvas); // caches warm, as after opening
    // The event list's first population (a job on the pool) done before timing, so that its arrival is not counted
    // as part of some cursor move.
    if (auto* events = qobject_cast<app::EventListView*>(window.view(DocumentWindow::View::Events)))
        while (events->model()->isBusy())
            QCoreApplication::processEvents(QEventLoop::WaitForMoreEvents, 50);
    std::mt19937_64 rng(7);
    const int64_t n = window.session()->entryCount();
    for (auto _ : state) {
        window.session()->setCursor(int64_t(rng() % uint64_t(n + 1)));
        QCoreApplication::processEvents();
        renderAll(window, canvas);
        benchmark::DoNotOptimize(canvas.bits());
    }
}

// Moving the cursor anywhere, then repainting every view.
void BM_CursorMoveRepaintAllBigTrace(benchmark::State& state)
{
    static auto doc = [] {
        io::LoadResult r = io::loadSnapshotFromMemory(bigTraceBytes(), "big_trace.pickle");
        return app::makeDocument(QStringLiteral("big_trace.pickle"), r.snapshot);
    }();
    cursorBenchmark(state, doc);
}
BENCHMARK(BM_CursorMoveRepaintAllBigTrace)->Unit(benchmark::kMillisecond);

// A timeline at 1920x1080 over `doc`, its data built, zoomed to a different range of `perMille`/1000 of the trace
// at each zoom(), so that the cached plot is never the one asked for (the whole trace: one state less every other
// time).
struct TimelineZooms {
    app::Session session;
    app::TimelineView view;
    QImage canvas { 1920, 1080, QImage::Format_ARGB32_Premultiplied };
    int64_t n = 0, span = 0;
    std::mt19937_64 rng { 11 };
    bool shorter = false;

    TimelineZooms(std::shared_ptr<const app::Document> doc, int64_t perMille)
        : session(std::move(doc))
        , view(&session)
    {
        view.resize(1920, 1080);
        view.setAttribute(Qt::WA_DontShowOnScreen);
        view.show();
        n = session.entryCount();
        span = std::max<int64_t>(2, n * perMille / 1000);
        app::finishTimelineBuilds(&view); // the data, built in the background
    }
    void zoom()
    {
        const int64_t first = n > span ? int64_t(rng() % uint64_t(n - span)) : 0;
        shorter = !shorter;
        view.zoomToRange(first, first + span - (shorter && n <= span ? 1 : 0));
    }
    void paint()
    {
        QPainter painter(&canvas);
        view.render(&painter);
    }
};

void timelineBenchmark(benchmark::State& state, std::shared_ptr<const app::Document> doc, int64_t perMille)
{
    TimelineZooms t(std::move(doc), perMille);
    t.paint(); // what is made once per document (colours, the overview strip), as after opening
    for (auto _ : state) {
        t.zoom();
        // A paint renders the plot in the background and shows the previous one meanwhile: the synchronous path
        // (what --screenshot and exports take) renders it here, so that the plot's full render is what is measured.
        app::finishTimelineBuilds(&t.view);
        t.paint();
        benchmark::DoNotOptimize(t.canvas.bits());
    }
}

// What the GUI thread pays for a zoom's repaint in the app: the paint asks for the plot in the background and paints
// the previous one moved (the render itself, waited for outside the timing, is what the benchmarks above measure).
void timelineAskBenchmark(benchmark::State& state, std::shared_ptr<const app::Document> doc, int64_t perMille)
{
    TimelineZooms t(std::move(doc), perMille);
    for (auto _ : state) {
        t.zoom();
        t.paint();
        benchmark::DoNotOptimize(t.canvas.bits());
        state.PauseTiming();
        app::finishTimelineBuilds(&t.view); // the plot, so that the next paint moves a plot of the last range
        state.ResumeTiming();
    }
}

// A full repaint of the timeline at 1920x1080: whole trace (1000/1000) down to 1/1000 of it.
void BM_TimelineRepaintBigTrace(benchmark::State& state)
{
    static auto doc = [] {
        io::LoadResult r = io::loadSnapshotFromMemory(bigTraceBytes(), "big_trace.pickle");
        return app::makeDocument(QStringLiteral("big_trace.pickle"), r.snapshot);
    }();
    timelineBenchmark(state, doc, state.range(0));
}
BENCHMARK(BM_TimelineRepaintBigTrace)->Arg(1000)->Arg(100)->Arg(10)->Arg(1)->Unit(benchmark::kMillisecond);

std::shared_ptr<const app::Document> synthetic10M()
{
    static auto doc
        = app::makeDocument(QStringLiteral("synthetic-10M"), shared(synthetic(10'000'000, Survivors::Freed)));
    return doc;
}

void BM_OpenSynthetic10MToPainted(benchmark::State& state)
{
    const auto& snapshot = synthetic(10'000'000, Survivors::Freed);
    QImage canvas(1920, 1080, QImage::Format_ARGB32_Premultiplied);
    for (auto _ : state) {
        auto doc = app::makeDocument(QStringLiteral("synthetic-10M"), shared(snapshot));
        DocumentWindow window(doc);
        window.resize(1920, 1080);
        window.setAttribute(Qt::WA_DontShowOnScreen);
        window.show();
        QCoreApplication::processEvents();
        renderAll(window, canvas);
    }
}
BENCHMARK(BM_OpenSynthetic10MToPainted)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_CursorMoveRepaintAllSynthetic10M(benchmark::State& state) { cursorBenchmark(state, synthetic10M()); }
BENCHMARK(BM_CursorMoveRepaintAllSynthetic10M)->Unit(benchmark::kMillisecond);

void BM_TimelineRepaintSynthetic10M(benchmark::State& state)
{
    timelineBenchmark(state, synthetic10M(), state.range(0));
}
BENCHMARK(BM_TimelineRepaintSynthetic10M)->Arg(1000)->Arg(10)->Unit(benchmark::kMillisecond);

// The GUI thread's part of a zoom's repaint on the same trace (timelineAskBenchmark).
void BM_TimelineZoomPaintSynthetic10M(benchmark::State& state)
{
    timelineAskBenchmark(state, synthetic10M(), state.range(0));
}
BENCHMARK(BM_TimelineZoomPaintSynthetic10M)->Arg(1000)->Arg(10)->Unit(benchmark::kMillisecond);

// The synthetic pickles bench_load writes (build/bench-data/synthetic-<reps>x.pickle: 40 repetitions of big_trace
// are 13.4 M entries and 1.05 GB, 200 are 67 M and 5.2 GB); made by `bench_load --benchmark_filter=LoadFile/<reps>`.
std::string benchFile(int64_t reps)
{
    return std::string(MEMSCOPE_BENCH_DATA_DIR) + "/synthetic-" + std::to_string(reps) + "x.pickle";
}

// The document of one such file, loaded as the app loads it (the loader's own function); one at a time.
std::shared_ptr<const app::Document> fileDocument(int64_t reps, QString& error)
{
    static int64_t cachedReps = -1;
    static std::shared_ptr<const app::Document> cached;
    if (reps != cachedReps) {
        cached.reset();
        app::LoadOutcome outcome = app::loadOutcome(QString::fromStdString(benchFile(reps)));
        error = outcome.error;
        cached = outcome.document;
        cachedReps = cached ? reps : -1;
    }
    return cached;
}

// From a file on disk to a window whose every view has painted once, as `memscope FILE` does it minus the event
// loop's waits: load (read, parse, build, replays), window, paint. Counter longest_unasked_s: the longest time the
// load went without a progress call, that is without looking at the window's Cancel.
void BM_OpenFileToPainted(benchmark::State& state)
{
    QImage canvas(1920, 1080, QImage::Format_ARGB32_Premultiplied);
    for (auto _ : state) {
        using Clock = std::chrono::steady_clock;
        Clock::time_point last = Clock::now();
        double longest = 0;
        app::LoadOutcome outcome = app::loadOutcome(QString::fromStdString(benchFile(state.range(0))), [&](int) {
            const Clock::time_point now = Clock::now();
            longest = std::max(longest, std::chrono::duration<double>(now - last).count());
            last = now;
            return true;
        });
        state.counters["longest_unasked_s"] = longest;
        if (!outcome.ok()) {
            state.SkipWithError(qPrintable(outcome.error + QStringLiteral(" (run bench_load first)")));
            return;
        }
        DocumentWindow window(outcome.document);
        window.resize(1920, 1080);
        window.setAttribute(Qt::WA_DontShowOnScreen);
        window.show();
        QCoreApplication::processEvents();
        renderAll(window, canvas);
        benchmark::DoNotOptimize(canvas.bits());
        state.counters["entries"] = double(outcome.document->snapshot->entryCount());
    }
}
BENCHMARK(BM_OpenFileToPainted)->Arg(40)->Unit(benchmark::kMillisecond)->Iterations(1);

// Moving the cursor anywhere, then repainting every view, on a file's document (Arg: repetitions, as above).
void BM_CursorMoveRepaintAllFile(benchmark::State& state)
{
    QString error;
    const auto doc = fileDocument(state.range(0), error);
    if (!doc) {
        state.SkipWithError(qPrintable(error + QStringLiteral(" (run bench_load first)")));
        return;
    }
    state.counters["entries"] = double(doc->snapshot->entryCount());
    cursorBenchmark(state, doc);
}
BENCHMARK(BM_CursorMoveRepaintAllFile)->Arg(40)->Arg(200)->Unit(benchmark::kMillisecond)->Iterations(100);

// A full repaint of the timeline at 1920x1080 on a file's document: the whole trace, and 1/100 of it.
void BM_TimelineRepaintFile(benchmark::State& state)
{
    QString error;
    const auto doc = fileDocument(state.range(0), error);
    if (!doc) {
        state.SkipWithError(qPrintable(error + QStringLiteral(" (run bench_load first)")));
        return;
    }
    timelineBenchmark(state, doc, state.range(1));
}
BENCHMARK(BM_TimelineRepaintFile)
    ->Args({ 40, 1000 })
    ->Args({ 200, 1000 })
    ->Args({ 200, 10 })
    ->Unit(benchmark::kMillisecond);

} // namespace

int main(int argc, char** argv)
{
    qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
