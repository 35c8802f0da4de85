// OverviewView: the min/max reduction keeps every bucket's true extremes (a pure function, checked against brute
// force), the chart's series keep each series' peak at 1-2 points per pixel, pressing and dragging on the chart
// moves the Session cursor (index and time axes), the cursor line follows the cursor, the wheel zooms and a double
// click resets, device switches redraw, the largest free block's line comes with the replay's labels, and the chart
// renders (light and dark) for every shared snapshot. Runs offscreen on the GUI thread.
#include "apptestutil.h"
#include "views/overviewview.h"

#include <QChart>
#include <QChartView>
#include <QDir>
#include <QImage>
#include <QLineSeries>
#include <QSignalSpy>
#include <QTest>
#include <QValueAxis>

#include <QElapsedTimer>

#include <map>
#include <random>

// For the throwaway timings only (MEMSCOPE_TIMINGS=1): traces of millions of entries made from big_trace.
#define MEMSCOPE_DEFAULT_SHARED_DIR "../shared"
#include "../benchmarks/synthetic.h"

using namespace memscope;
using namespace Qt::StringLiterals;
using namespace memscope::app;
using overview::SeriesPoint;

namespace {

std::shared_ptr<const Document> document(const std::string& file)
{
    static std::map<std::string, std::shared_ptr<const Document>> cache;
    auto& slot = cache[file];
    if (!slot) {
        auto session = test::loadSession(file);
        if (session)
            slot = session->documentPtr();
        if (slot && slot->labelling) // the charts here show the largest free block too
            slot->labelling->wait();
    }
    return slot;
}

std::unique_ptr<Session> session(const std::string& file)
{
    auto doc = document(file);
    return doc ? std::make_unique<Session>(doc) : nullptr;
}

QStringList snapshotFiles()
{
    QDir dir(QString::fromStdString(test::sharedDir() + "/snapshots"));
    return dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
}

int distinctColours(const QImage& image)
{
    std::set<QRgb> colours;
    for (int y = 0; y < image.height(); y += 2)
        for (int x = 0; x < image.width(); x += 2)
            colours.insert(image.pixel(x, y));
    return int(colours.size());
}

// The viewport point at fraction `frac` of the plot area's width, halfway down.
QPoint plotPoint(const OverviewView& view, double frac)
{
    const QRectF plot = view.chart()->plotArea();
    const QPointF chartPos(plot.left() + frac * plot.width(), plot.center().y());
    return view.chartView()->mapFromScene(view.chart()->mapToScene(chartPos));
}

double seriesMaxY(const QLineSeries* s)
{
    double m = -1;
    for (const QPointF& p : s->points())
        m = std::max(m, p.y());
    return m;
}

// Shown, laid out and reduced for its width.
bool showAndSettle(OverviewView& view, QSize size = QSize(1000, 400))
{
    view.resize(size);
    view.show();
    if (!QTest::qWaitForWindowExposed(&view))
        return false;
    QTest::qWait(50); // the refresh that follows the first layout runs from the event loop
    return view.chart()->plotArea().width() > 100;
}

} // namespace

class TestOverview : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void downsample_data()
    {
        QTest::addColumn<std::vector<int64_t>>("values");
        QTest::addColumn<int>("buckets");
        std::vector<int64_t> spike(10'000, 5);
        spike[4321] = 1'000'000; // one sample: must survive 100 buckets of 100 samples
        spike[9999] = -7; // the last sample is a minimum
        std::vector<int64_t> ramp(1000);
        for (size_t i = 0; i < ramp.size(); ++i)
            ramp[i] = int64_t(i) * 3;
        std::vector<int64_t> noise(12'345);
        std::mt19937_64 rng(42);
        for (auto& v : noise)
            v = int64_t(rng() % 1'000'000'000);
        QTest::newRow("one spike in 10k samples, 100 buckets") << spike << 100;
        QTest::newRow("constant") << std::vector<int64_t>(500, 9) << 37;
        QTest::newRow("ascending ramp") << ramp << 64;
        QTest::newRow("random noise, uneven buckets") << noise << 997;
        QTest::newRow("more buckets than samples") << std::vector<int64_t> { 3, 1, 4, 1, 5 } << 20;
        QTest::newRow("one sample") << std::vector<int64_t> { 42 } << 1;
        QTest::newRow("one bucket") << noise << 1;
    }

    void downsample()
    {
        QFETCH(std::vector<int64_t>, values);
        QFETCH(int, buckets);
        const auto bounds = overview::uniformBoundaries(0, int64_t(values.size()), buckets);
        QCOMPARE(bounds.size(), size_t(buckets) + 1);
        QCOMPARE(bounds.front(), 0);
        QCOMPARE(bounds.back(), int64_t(values.size()));
        const auto points = overview::downsampleMinMax(values, bounds);
        QVERIFY(points.size() <= size_t(2 * buckets));
        QVERIFY(std::is_sorted(points.begin(), points.end(),
                               [](const SeriesPoint& a, const SeriesPoint& b) { return a.index < b.index; }));
        for (const SeriesPoint& p : points)
            QCOMPARE(p.value, values[size_t(p.index)]); // points are real samples
        // Every bucket's true maximum and minimum (brute force) are among the points of that bucket.
        for (size_t k = 0; k + 1 < bounds.size(); ++k) {
            if (bounds[k] == bounds[k + 1])
                continue;
            const auto begin = values.begin() + bounds[k], end = values.begin() + bounds[k + 1];
            const int64_t max = *std::max_element(begin, end), min = *std::min_element(begin, end);
            bool hasMax = false, hasMin = false;
            for (const SeriesPoint& p : points) {
                if (p.index < bounds[k] || p.index >= bounds[k + 1])
                    continue;
                hasMax |= p.value == max;
                hasMin |= p.value == min;
            }
            QVERIFY2(hasMax && hasMin, qPrintable(QStringLiteral("bucket %1").arg(k)));
        }
        // The block index gives exactly the same points, for any bucketing.
        const auto blocks = overview::MinMaxBlocks::build(values);
        QCOMPARE(overview::downsampleMinMax(values, bounds, &blocks), points);
        const auto odd = overview::uniformBoundaries(3, int64_t(values.size()) - 1, std::max(1, buckets / 3));
        QCOMPARE(overview::downsampleMinMax(values, odd, &blocks), overview::downsampleMinMax(values, odd));
        const int64_t globalMax = *std::max_element(values.begin(), values.end());
        QVERIFY(std::any_of(points.begin(), points.end(), [&](const SeriesPoint& p) { return p.value == globalMax; }));
        // The same values packed (a replay's series): the blocks come from the packed blocks' own minimum and
        // maximum, and are the same, whole, also when built from a shorter series and extended as it grew.
        model::PackedSeries packed;
        auto sameBlocks = [](const overview::MinMaxBlocks& a, const overview::MinMaxBlocks& b) {
            return a.samples == b.samples && a.minIndex == b.minIndex && a.maxIndex == b.maxIndex
                && a.minValue == b.minValue && a.maxValue == b.maxValue;
        };
        overview::MinMaxBlocks grown;
        for (size_t i = 0; i < values.size(); ++i) {
            packed.push_back(values[i]);
            if (i % 97 == 0)
                grown.extend(packed);
        }
        grown.extend(packed);
        const auto fromPacked = overview::MinMaxBlocks::build(packed);
        QVERIFY(sameBlocks(fromPacked, blocks));
        QVERIFY(sameBlocks(grown, blocks));
        QCOMPARE(overview::downsampleMinMax(packed, packed.size(), bounds, &fromPacked), points);
    }

    void downsampleEdgeCases()
    {
        const std::vector<int64_t> v { 1, 2, 3 };
        QVERIFY(overview::downsampleMinMax(v, std::vector<int64_t> { 0 }).empty()); // no bucket
        QVERIFY(overview::downsampleMinMax({}, std::vector<int64_t> { 0, 5 }).empty()); // no samples
        // Boundaries beyond the samples are clamped.
        const auto p = overview::downsampleMinMax(v, std::vector<int64_t> { -4, 100 });
        QCOMPARE(p, (std::vector<SeriesPoint> { { 0, 1 }, { 2, 3 } }));
        // A sub-range.
        QCOMPARE(overview::uniformBoundaries(10, 20, 3), (std::vector<int64_t> { 10, 13, 16, 20 }));
    }

    void seriesKeepPeaks_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("transformer_train") << u"transformer_train.pickle"_s;
        QTest::newRow("big_trace") << u"big_trace.pickle.xz"_s;
        QTest::newRow("oom") << u"oom.pickle"_s;
    }

    void seriesKeepPeaks()
    {
        QFETCH(QString, file);
        auto s = session(file.toStdString());
        QVERIFY(s);
        OverviewView view(s.get());
        QVERIFY(showAndSettle(view));
        const int width = int(view.chart()->plotArea().width());
        const auto& series = s->replay().series();
        const std::vector<const model::PackedSeries*> values { &series.allocated, &series.active, &series.reserved,
                                                               s->replay().largestFree() };
        const auto charts = view.series();
        for (size_t k = 0; k < charts.size(); ++k) {
            const double trueMax
                = double(*std::max_element(values[k]->begin(), values[k]->end())) / view.bytesPerUnit();
            QCOMPARE(seriesMaxY(charts[k]), trueMax);
            // About 2 points per pixel column (+2 for the samples just past the edges).
            QVERIFY2(charts[k]->count() <= 2 * (width + 1) + 2, qPrintable(QString::number(charts[k]->count())));
            QVERIFY(charts[k]->count() >= 2);
        }
        // The y axis shows the peak reserved bytes.
        const auto* y = qobject_cast<QValueAxis*>(view.chart()->axes(Qt::Vertical).front());
        QVERIFY(y->max() >= double(s->replay().peakReserved().bytes) / view.bytesPerUnit());
    }

    void clickMovesCursor_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<double>("frac");
        QTest::addColumn<bool>("timeAxis");
        for (double f : { 0.0, 0.25, 0.5, 0.9, 1.0 }) {
            QTest::addRow("transformer, index axis, at %.2f", f) << u"transformer_train.pickle"_s << f << false;
            QTest::addRow("big_trace, index axis, at %.2f", f) << u"big_trace.pickle.xz"_s << f << false;
            QTest::addRow("transformer, time axis, at %.2f", f) << u"transformer_train.pickle"_s << f << true;
        }
    }

    void clickMovesCursor()
    {
        QFETCH(QString, file);
        QFETCH(double, frac);
        QFETCH(bool, timeAxis);
        auto s = session(file.toStdString());
        QVERIFY(s);
        if (timeAxis)
            s->setTimeAxis(TimeAxis::Time);
        OverviewView view(s.get());
        QVERIFY(showAndSettle(view));
        s->setCursor(frac < 0.5 ? s->entryCount() : 0); // somewhere else first
        const QPoint pos = plotPoint(view, frac);
        QTest::mouseClick(view.chartView()->viewport(), Qt::LeftButton, {}, pos);
        const int64_t n = s->entryCount();
        QCOMPARE(s->cursor(), view.stateIndexAt(pos));
        if (!timeAxis) {
            // Within one pixel column of the clicked fraction.
            const double perPixel = double(n) / view.chart()->plotArea().width();
            QVERIFY2(std::abs(double(s->cursor()) - frac * double(n)) <= perPixel + 1,
                     qPrintable(QStringLiteral("%1 vs %2").arg(s->cursor()).arg(frac * double(n))));
        } else {
            // The state whose time is at the clicked fraction of the time span.
            const int64_t t0 = s->timeUsAt(0), t1 = s->timeUsAt(n);
            const double perPixelUs = double(t1 - t0) / view.chart()->plotArea().width();
            QVERIFY(std::abs(double(s->timeUsAt(s->cursor()) - t0) - frac * double(t1 - t0)) <= perPixelUs + 1
                    || s->cursor() == s->indexAtTimeUs(t0 + int64_t(frac * double(t1 - t0))));
        }
        // The cursor line is drawn where the cursor is.
        QVERIFY(std::abs(view.viewportXOf(s->cursor()) - pos.x()) <= 2.0 || timeAxis);
    }

    void dragScrubs()
    {
        auto s = session("transformer_train.pickle");
        QVERIFY(s);
        OverviewView view(s.get());
        QVERIFY(showAndSettle(view));
        QWidget* vp = view.chartView()->viewport();
        QSignalSpy spy(s.get(), &Session::cursorChanged);
        QTest::mousePress(vp, Qt::LeftButton, {}, plotPoint(view, 0.2));
        const int64_t atPress = s->cursor();
        for (double f = 0.25; f <= 0.61; f += 0.05) {
            QMouseEvent move(QEvent::MouseMove, plotPoint(view, f), vp->mapToGlobal(plotPoint(view, f)), Qt::NoButton,
                             Qt::LeftButton, Qt::NoModifier);
            QCoreApplication::sendEvent(vp, &move);
        }
        QTest::mouseRelease(vp, Qt::LeftButton, {}, plotPoint(view, 0.6));
        QVERIFY(spy.size() >= 5); // the cursor followed the drag
        QVERIFY(s->cursor() > atPress);
        QCOMPARE(s->cursor(), view.stateIndexAt(plotPoint(view, 0.6)));
    }

    void zoom()
    {
        auto s = session("big_trace.pickle.xz");
        QVERIFY(s);
        OverviewView view(s.get());
        QVERIFY(showAndSettle(view));
        const int64_t n = s->entryCount();
        QCOMPARE(view.visibleStates(), std::make_pair(int64_t(0), n));
        view.zoomToStates(1000, 5000);
        QCOMPARE(view.visibleStates(), std::make_pair(int64_t(1000), int64_t(5000)));
        // The series were reduced again for the range, and keep the range's true peak.
        const auto& reserved = s->replay().series().reserved;
        const double rangeMax
            = double(*std::max_element(reserved.begin() + 1000, reserved.begin() + 5001)) / view.bytesPerUnit();
        double shownMax = 0;
        for (const QPointF& p : view.series()[2]->points())
            if (p.x() >= 1000 && p.x() <= 5000)
                shownMax = std::max(shownMax, p.y());
        QCOMPARE(shownMax, rangeMax);
        // Wheel zooms in around the mouse; a double click shows everything again.
        const auto before = view.visibleStates();
        QWheelEvent wheel(plotPoint(view, 0.5), view.chartView()->viewport()->mapToGlobal(plotPoint(view, 0.5)),
                          QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
        QCoreApplication::sendEvent(view.chartView()->viewport(), &wheel);
        const auto after = view.visibleStates();
        QVERIFY(after.second - after.first < before.second - before.first);
        QVERIFY(after.first >= before.first && after.second <= before.second);
        QTest::mouseDClick(view.chartView()->viewport(), Qt::LeftButton, {}, plotPoint(view, 0.5));
        QCOMPARE(view.visibleStates(), std::make_pair(int64_t(0), n));
    }

    void cursorLineFollowsCursor()
    {
        auto s = session("transformer_train.pickle");
        QVERIFY(s);
        OverviewView view(s.get());
        QVERIFY(showAndSettle(view));
        const QPoint left = plotPoint(view, 0), right = plotPoint(view, 1);
        s->setCursor(0);
        QVERIFY(std::abs(view.viewportXOf(0) - left.x()) <= 1.0);
        s->setCursor(s->entryCount());
        QVERIFY(std::abs(view.viewportXOf(s->entryCount()) - right.x()) <= 1.0);
        // Clicking where the line is keeps the cursor there.
        s->setCursor(4000);
        const QPoint at(int(std::lround(view.viewportXOf(4000))), left.y());
        QVERIFY(std::abs(view.stateIndexAt(at) - 4000)
                <= s->entryCount() / int64_t(view.chart()->plotArea().width()) + 1);
    }

    void deviceSwitch()
    {
        auto s = session("two_device.pickle");
        QVERIFY(s);
        OverviewView view(s.get());
        QVERIFY(showAndSettle(view));
        QVERIFY(view.chart()->title().contains(QLatin1String("GPU 0")));
        s->setDevice(1);
        QTest::qWait(20);
        QVERIFY(view.chart()->title().contains(QLatin1String("GPU 1")));
        const auto& reserved = s->replay().series().reserved;
        QCOMPARE(seriesMaxY(view.series()[2]),
                 double(*std::max_element(reserved.begin(), reserved.end())) / view.bytesPerUnit());
        QCOMPARE(view.visibleStates().second, s->entryCount());
    }

    // A file's replays are labelled after its window shows (document/replaylabelling.h): until then the chart
    // has no largest-free line and says so; then the Session says they are there and the line comes, with the
    // range shown kept: the same points as a chart made after the labels.
    void largestFreeComesWithTheLabels()
    {
        auto loaded = io::loadSnapshot(test::sharedDir() + "/snapshots/transformer_train.pickle");
        QVERIFY(loaded.ok());
        auto doc = std::make_shared<Document>();
        doc->path = QStringLiteral("transformer_train.pickle");
        doc->snapshot = loaded.snapshot;
        model::ReplayOptions options;
        options.deferLabels = true;
        for (int d = 0; d < std::max(1, doc->snapshot->deviceCount()); ++d)
            doc->replays.push_back(model::Replay::build(*doc->snapshot, d, options));
        doc->labelling
            = std::make_unique<ReplayLabelling>(doc->replays, *doc->snapshot, ReplayLabelling::Start::Later);
        Session s(doc);
        QVERIFY(!s.replay().labelled());
        QSignalSpy labelled(&s, &Session::labelled);
        OverviewView view(&s);
        QVERIFY(showAndSettle(view));
        auto charts = view.series();
        QCOMPARE(charts.size(), size_t(4));
        QCOMPARE(charts[3]->count(), 0);
        QCOMPARE(charts[3]->name(), QStringLiteral("largest free block (working it out)"));
        for (size_t k = 0; k < 3; ++k)
            QVERIFY(charts[k]->count() >= 2);
        view.zoomToStates(1000, 6000);
        const auto range = view.visibleStates();

        s.waitForLabels();
        QTest::qWait(50); // the legend's new name lays the chart out again: the refresh that follows
        QCOMPARE(labelled.count(), 1);
        QVERIFY(s.replay().labelled());
        QCOMPARE(view.visibleStates(), range);
        QCOMPARE(charts[3]->name(), QStringLiteral("largest free block"));
        QVERIFY(charts[3]->count() >= 2);
        OverviewView fresh(&s);
        QVERIFY(showAndSettle(fresh));
        fresh.zoomToStates(1000, 6000);
        QTest::qWait(50); // its refresh after the zoom's layout
        for (size_t k = 0; k < 4; ++k)
            QCOMPARE(fresh.series()[k]->points(), charts[k]->points());
        s.waitForLabels(); // once only
        QCOMPARE(labelled.count(), 1);
    }

    void screenshots_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("dark");
        QTest::addColumn<bool>("timeAxis");
        QTest::addColumn<int>("device");
        for (const QString& f : snapshotFiles())
            QTest::newRow(qPrintable(f)) << f << false << false << 0;
        QTest::newRow("transformer_train.pickle, dark palette") << u"transformer_train.pickle"_s << true << false << 0;
        QTest::newRow("two_device.pickle, dark palette") << u"two_device.pickle"_s << true << false << 0;
        QTest::newRow("two_device.pickle, device 1") << u"two_device.pickle"_s << false << false << 1;
        QTest::newRow("transformer_train.pickle, time axis") << u"transformer_train.pickle"_s << false << true << 0;
        QTest::newRow("big_trace.pickle.xz, time axis") << u"big_trace.pickle.xz"_s << false << true << 0;
    }

    void screenshots()
    {
        QFETCH(QString, file);
        QFETCH(bool, dark);
        QFETCH(bool, timeAxis);
        QFETCH(int, device);
        auto s = session(file.toStdString());
        QVERIFY(s);
        s->setDevice(device);
        if (timeAxis)
            s->setTimeAxis(TimeAxis::Time);
        OverviewView view(s.get());
        if (dark) {
            QPalette p;
            p.setColor(QPalette::Window, QColor(0x2b, 0x2b, 0x2b));
            p.setColor(QPalette::WindowText, QColor(0xe0, 0xe0, 0xe0));
            p.setColor(QPalette::Base, QColor(0x1e, 0x1e, 0x1e));
            p.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
            p.setColor(QPalette::Mid, QColor(0x50, 0x50, 0x50));
            view.setPalette(p);
        }
        QVERIFY(showAndSettle(view, QSize(1000, 400)));
        s->setCursor(s->entryCount() * 2 / 3);
        if (dark) // the chart takes the window colour
            QCOMPARE(view.chart()->backgroundBrush().color(), QColor(0x2b, 0x2b, 0x2b));
        const QString name = QStringLiteral("overview_")
            + QString(file).remove(QStringLiteral(".pickle")).remove(QStringLiteral(".xz"))
            + (dark ? QStringLiteral("_dark") : QString()) + (timeAxis ? QStringLiteral("_time") : QString())
            + (device ? QStringLiteral("_device%1").arg(device) : QString());
        QVERIFY(test::saveScreenshot(view, name, QSize(1000, 400)));
        const QImage image = view.grab().toImage();
        QVERIFY2(distinctColours(image) > 8, qPrintable(name));
        for (QLineSeries* series : view.series())
            QVERIFY(series->count() >= 2);
    }

    // Throwaway measurements for the report (MEMSCOPE_TIMINGS=1); never asserts on time.
    void timings()
    {
        if (qEnvironmentVariableIsEmpty("MEMSCOPE_TIMINGS"))
            QSKIP("set MEMSCOPE_TIMINGS=1 to print timings");
        auto measure = [](const char* what, std::shared_ptr<const Document> doc) {
            Session s(doc);
            OverviewView view(&s);
            QVERIFY(showAndSettle(view, QSize(1200, 400)));
            constexpr int Runs = 20;
            QElapsedTimer t;
            t.start();
            for (int i = 0; i < Runs; ++i)
                view.showAll(); // reduce all four series over the whole trace, replace the points
            qInfo("%s (%lld states): full-range refresh %.1f ms; %d points per series", what,
                  qlonglong(s.entryCount() + 1), double(t.nsecsElapsed()) / 1e6 / Runs, int(view.series()[0]->count()));
            t.restart();
            for (int i = 0; i < Runs; ++i)
                view.chartView()->viewport()->repaint();
            qInfo("%s: chart repaint %.1f ms", what, double(t.nsecsElapsed()) / 1e6 / Runs);
            t.restart();
            for (int i = 0; i < Runs; ++i)
                s.setCursor(s.entryCount() * i / Runs);
            qInfo("%s: cursor move (line update) %.3f ms", what, double(t.nsecsElapsed()) / 1e6 / Runs);
        };
        measure("big_trace", document("big_trace.pickle.xz"));
        auto big = bench::repeated(bench::bigTrace(), 30, bench::Survivors::Freed);
        measure("synthetic 10M",
                makeDocument(QStringLiteral("synthetic"), std::shared_ptr<const model::Snapshot>(std::move(big))));
    }
};

QTEST_MAIN(TestOverview)
#include "tst_overview.moc"
