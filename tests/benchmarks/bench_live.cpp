// Benchmark of live attach end to end, offscreen: `memscope-cli demo` (the real allocator and publisher, the binary
// beside this one) publishing at a given rate, a LiveWindow receiving, recording and growing its document, and
// the timeline painting. Per rate (events per second) and duration (seconds of events):
//   latency_p50_ms / latency_p99_ms  from an allocator event (its CLOCK_REALTIME stamp in the agent) to the views
//                                    taking it in (Session::documentGrew), over every event shown
//   paints_per_s                     timeline repaints per second while events arrive
//   max_stall_ms                     the longest the GUI event loop did not turn (a 5 ms timer's worst lateness)
//   behind_max                       the most entries received but not yet shown at a growth
//   lost                             records the agent or the viewer lost
// GUI thread only; QApplication is created in main().
#include "ingest/demojob.h"
#include "views/documentwindow.h"
#include "views/livewindow.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QTimer>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

using namespace memscope;
using namespace memscope::app;

namespace {

int64_t nowUs()
{
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

// Counts paint events of one widget.
class PaintCounter : public QObject {
public:
    int paints = 0;
    bool eventFilter(QObject*, QEvent* e) override
    {
        if (e->type() == QEvent::Paint)
            ++paints;
        return false;
    }
};

void BM_LiveEndToEnd(benchmark::State& state)
{
    const int64_t rate = state.range(0);
    const int64_t seconds = state.range(1);
    std::vector<double> latencies;
    latencies.reserve(size_t(rate * seconds) + 100000); // growing it here would stall the GUI thread it measures
    double paintsPerSecond = 0, maxStallMs = 0;
    size_t behindMax = 0;
    uint64_t lost = 0;
    for (auto _ : state) {
        DemoJob demo;
        QEventLoop wait;
        QObject::connect(&demo, &DemoJob::ready, &wait, &QEventLoop::quit);
        QObject::connect(&demo, &DemoJob::failed, &wait, [&](const QString& m) {
            state.SkipWithError(qPrintable(m));
            wait.quit();
        });
        demo.start({ QStringLiteral("--rate"), QString::number(rate), QStringLiteral("--events"),
                     QString::number(rate * seconds), QStringLiteral("--delay"), QStringLiteral("500") });
        if (demo.endpoint().isEmpty())
            wait.exec();
        if (demo.endpoint().isEmpty())
            return;

        LiveWindow live(demo.endpoint());
        live.resize(1600, 1000);
        live.show();
        PaintCounter counter;
        QElapsedTimer clock;
        clock.start();
        int64_t lastTick = 0;
        QTimer ticker;
        QObject::connect(&ticker, &QTimer::timeout, [&] {
            const int64_t t = clock.elapsed();
            if (lastTick > 0)
                maxStallMs = std::max(maxStallMs, double(t - lastTick - 5));
            lastTick = t;
        });
        ticker.start(5);
        int64_t shown = 0, firstPaint = -1, lastPaint = -1;
        QObject::connect(&live, &LiveWindow::documentChanged, [&](DocumentWindow* doc) {
            doc->view(DocumentWindow::View::Timeline)->installEventFilter(&counter);
        });
        QObject::connect(&live, &LiveWindow::grew, [&] {
            const Session* s = live.documentWindow()->session();
            const auto& entries = s->entries();
            const int64_t now = nowUs();
            for (int64_t i = shown; i < int64_t(entries.size()); ++i)
                latencies.push_back(double(now - entries[size_t(i)].timeUs) / 1000.0);
            shown = int64_t(entries.size());
            behindMax = std::max(behindMax, live.controller()->backlog());
            if (firstPaint < 0)
                firstPaint = clock.elapsed();
            lastPaint = clock.elapsed();
        });
        QEventLoop done;
        QObject::connect(live.controller(), &LiveController::settled, &done, &QEventLoop::quit);
        QTimer::singleShot(60000, &done, &QEventLoop::quit);
        done.exec();
        ticker.stop();
        const LiveUpdate& last = live.controller()->receiver()->latest();
        lost = last.stats.lost + last.stats.agentLost + last.stats.missing;
        if (lastPaint > firstPaint)
            paintsPerSecond = counter.paints * 1000.0 / double(lastPaint - firstPaint);
    }
    if (latencies.empty()) {
        state.SkipWithError("nothing was shown");
        return;
    }
    std::sort(latencies.begin(), latencies.end());
    state.counters["events"] = double(latencies.size());
    state.counters["latency_p50_ms"] = latencies[latencies.size() / 2];
    state.counters["latency_p99_ms"] = latencies[latencies.size() * 99 / 100];
    state.counters["paints_per_s"] = paintsPerSecond;
    state.counters["max_stall_ms"] = maxStallMs;
    state.counters["behind_max"] = double(behindMax);
    state.counters["lost"] = double(lost);
}
BENCHMARK(BM_LiveEndToEnd)
    ->ArgNames({ "rate", "seconds" })
    ->Args({ 20000, 3 })
    ->Args({ 200000, 3 })
    ->Args({ 2000000, 3 })
    ->Args({ 2000000, 10 })
    ->Args({ 1000000, 20 }) // 20 M events at a rate both cores keep up with here
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

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
