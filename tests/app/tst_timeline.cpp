// The memory timeline: its pure geometry (mapping, zoom, pan, clamping, ticks, labels, layout), the stacking engine
// (model/timeline.h) against an independent brute force on real snapshots, the rasteriser on a hand-made case, and
// the widget end to end (hover, click, scrub, wheel, brush, filters, screenshots of every shared snapshot in both
// modes, and the render time of big_trace at 1920×1080, printed, never asserted). Runs offscreen on the GUI thread.
#include "apptestutil.h"
#include "model/timeline.h"
#include "views/timelinegeometry.h"
#include "views/timelineview.h"

#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QMouseEvent>
#include <QSet>
#include <QSignalSpy>
#include <QTest>
#include <QThread>
#include <QToolButton>
#include <QWheelEvent>

#include <algorithm>
#include <map>
#include <random>

using namespace memscope;
using memscope::app::Session;
using memscope::app::StateAxis;
using memscope::app::TimelineGeometry;
using memscope::app::TimelineView;
using model::ByteCount;
using model::TimelineItem;

Q_DECLARE_METATYPE(std::vector<double>)
Q_DECLARE_METATYPE(std::vector<int64_t>)
Q_DECLARE_METATYPE(std::vector<int>)

namespace {

// Documents are loaded once per file (big_trace takes a moment); each test gets its own Session.
std::shared_ptr<const app::Document> document(const QString& name)
{
    static std::map<QString, std::shared_ptr<const app::Document>> cache;
    auto& doc = cache[name];
    if (!doc) {
        auto session = test::loadSession(name.toStdString());
        if (session)
            doc = session->documentPtr();
    }
    return doc;
}

std::unique_ptr<Session> openSession(const QString& name)
{
    auto doc = document(name);
    return doc ? std::make_unique<Session>(doc) : nullptr;
}

enum class Mode { Allocations, Segments };

// The brute force: what is stacked at `state`, bottom first, as (item, offset), straight from the Replay's
// allocations or segment pieces: an item is live iff begin < state <= end; offset = Σ sizes of live visible items
// with a smaller index.
struct Stacked {
    TimelineItem item;
    ByteCount offset;
    bool operator==(const Stacked&) const = default;
};

std::vector<Stacked> bruteForce(const model::Replay& replay, Mode mode, const std::vector<uint8_t>& visible,
                                int64_t state)
{
    std::vector<Stacked> out;
    ByteCount offset = 0;
    auto consider = [&](size_t k, int64_t begin, int64_t end, ByteCount size) {
        if (begin < state && state <= end && (visible.empty() || visible[k])) {
            out.push_back({ TimelineItem(k), offset });
            offset += size;
        }
    };
    if (mode == Mode::Allocations) {
        const auto& allocs = replay.allocations();
        for (size_t k = 0; k < allocs.size(); ++k)
            consider(k, allocs[k].allocIndex, allocs[k].freeCompletedIndex, allocs[k].size);
    } else {
        const auto& pieces = replay.segmentPieces();
        for (size_t k = 0; k < pieces.size(); ++k)
            consider(k, pieces[k].beginIndex, pieces[k].endIndex, pieces[k].size);
    }
    return out;
}

ByteCount bruteTotal(const model::Replay& replay, Mode mode, const std::vector<uint8_t>& visible, int64_t state)
{
    ByteCount total = 0;
    if (mode == Mode::Allocations) {
        const auto& allocs = replay.allocations();
        for (size_t k = 0; k < allocs.size(); ++k)
            if (allocs[k].allocIndex < state && state <= allocs[k].freeCompletedIndex
                && (visible.empty() || visible[k]))
                total += allocs[k].size;
    } else {
        const auto& pieces = replay.segmentPieces();
        for (size_t k = 0; k < pieces.size(); ++k)
            if (pieces[k].beginIndex < state && state <= pieces[k].endIndex && (visible.empty() || visible[k]))
                total += pieces[k].size;
    }
    return total;
}

std::vector<Stacked> fromStack(const model::TimelineStack& stack)
{
    std::vector<Stacked> out;
    ByteCount offset = 0;
    for (size_t i = 0; i < stack.slots().size(); ++i) {
        if (stack.slots()[i].size == 0)
            continue;
        out.push_back({ stack.slotItems()[i], offset });
        offset += stack.slots()[i].size;
    }
    return out;
}

// Visibility with every allocation of `hiddenStream` (its alloc entry's stream) hidden; empty if none is given.
std::vector<uint8_t> hideStream(const Session& session, Mode mode, int64_t hiddenStream, bool hide)
{
    std::vector<uint8_t> out;
    if (!hide)
        return out;
    const auto& replay = session.replay();
    if (mode == Mode::Allocations) {
        for (const model::Allocation& a : replay.allocations())
            out.push_back(a.allocIndex >= 0
                                  && session.snapshot().stream(session.entries()[size_t(a.allocIndex)]) == hiddenStream
                              ? 0
                              : 1);
    } else {
        for (const model::SegmentPiece& p : replay.segmentPieces())
            out.push_back(p.stream == hiddenStream ? 0 : 1);
    }
    return out;
}

// Visibility with every allocation in a segment of `pool` hidden (the pool of the piece holding it when it begins,
// found by a linear scan of the pieces).
std::vector<uint8_t> hidePool(const Session& session, std::pair<int64_t, int64_t> pool)
{
    std::vector<uint8_t> out;
    const auto& pieces = session.replay().segmentPieces();
    for (const model::Allocation& a : session.replay().allocations()) {
        const int64_t s = int64_t(a.allocIndex) + 1;
        std::pair<int64_t, int64_t> found { 0, 0 };
        for (const model::SegmentPiece& p : pieces)
            if (p.beginIndex < s && s <= p.endIndex && p.address <= a.address && a.address < p.address + p.size)
                found = p.poolId;
        out.push_back(found == pool ? 0 : 1);
    }
    return out;
}

int64_t firstSideStream(const Session& session)
{
    for (int64_t s : session.streams())
        if (s != 0)
            return s;
    return 0;
}

// Sampled states: spread evenly, plus both ends, sorted.
std::vector<int64_t> sampleStates(int64_t entryCount, int count)
{
    std::vector<int64_t> out { 0, entryCount };
    std::mt19937_64 rng(11);
    std::uniform_int_distribution<int64_t> pick(0, entryCount);
    for (int i = 0; i < count; ++i)
        out.push_back(pick(rng));
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

void sendMouse(QWidget& w, QEvent::Type type, QPoint pos, Qt::MouseButton button, Qt::MouseButtons buttons,
               Qt::KeyboardModifiers modifiers = Qt::NoModifier)
{
    QMouseEvent event(type, QPointF(pos), w.mapToGlobal(QPointF(pos)), button, buttons, modifiers);
    QApplication::sendEvent(&w, &event);
}

void sendWheel(QWidget& w, QPoint pos, QPoint angle)
{
    QWheelEvent event(QPointF(pos), w.mapToGlobal(QPointF(pos)), QPoint(), angle, Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(&w, &event);
}

// Distinct colours in a rectangle of an image.
int colourCount(const QImage& image, QRect r)
{
    QSet<QRgb> seen;
    r = r.intersected(image.rect());
    for (int y = r.top(); y <= r.bottom(); y += 2)
        for (int x = r.left(); x <= r.right(); x += 2)
            seen.insert(image.pixel(x, y));
    return int(seen.size());
}

} // namespace

class TestTimeline : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // ---- geometry -----------------------------------------------------------------------------------------------

    void geometryMapsBothWays_data()
    {
        QTest::addColumn<QRectF>("rect");
        QTest::addColumn<double>("begin");
        QTest::addColumn<double>("end");
        QTest::addColumn<double>("coord");
        QTest::addColumn<double>("x");

        QTest::newRow("left edge is begin") << QRectF(100, 0, 800, 300) << 0.0 << 1000.0 << 0.0 << 100.0;
        QTest::newRow("right edge is end") << QRectF(100, 0, 800, 300) << 0.0 << 1000.0 << 1000.0 << 900.0;
        QTest::newRow("middle") << QRectF(100, 0, 800, 300) << 0.0 << 1000.0 << 500.0 << 500.0;
        QTest::newRow("zoomed range") << QRectF(0, 0, 1000, 10) << 250.0 << 350.0 << 300.0 << 500.0;
        QTest::newRow("time coordinates (µs)")
            << QRectF(10, 0, 200, 10) << 1.7e15 << 1.7e15 + 2e6 << 1.7e15 + 1e6 << 110.0;
        QTest::newRow("left of the view") << QRectF(0, 0, 100, 10) << 50.0 << 150.0 << 0.0 << -50.0;
    }

    void geometryMapsBothWays()
    {
        QFETCH(QRectF, rect);
        QFETCH(double, begin);
        QFETCH(double, end);
        QFETCH(double, coord);
        QFETCH(double, x);
        TimelineGeometry g;
        g.rect = rect;
        g.domainBegin = std::min(begin, coord) - 1e9;
        g.domainEnd = end + 1e9;
        g.begin = begin;
        g.end = end;
        QVERIFY(std::abs(g.xAt(coord) - x) < 1e-6);
        QVERIFY(std::abs(g.coordAt(x) - coord) < std::max(1e-6, std::abs(coord) * 1e-12));
    }

    void geometryMapsBytes_data()
    {
        QTest::addColumn<double>("bytesTop");
        QTest::addColumn<double>("bytes");
        QTest::addColumn<double>("y");

        // rect: top 20, height 200 (bottom() of a QRectF is top + height).
        QTest::newRow("zero at the bottom") << 1000.0 << 0.0 << 220.0;
        QTest::newRow("top at the top") << 1000.0 << 1000.0 << 20.0;
        QTest::newRow("a quarter up") << 4.0 * (1 << 30) << 1.0 * (1 << 30) << 170.0;
    }

    void geometryMapsBytes()
    {
        QFETCH(double, bytesTop);
        QFETCH(double, bytes);
        QFETCH(double, y);
        TimelineGeometry g;
        g.rect = QRectF(0, 20, 100, 200);
        g.bytesTop = bytesTop;
        QCOMPARE(g.yAt(bytes), y);
        QCOMPARE(g.bytesAt(y), bytes);
    }

    void zoomKeepsAnchorAndClamps_data()
    {
        QTest::addColumn<double>("begin");
        QTest::addColumn<double>("end");
        QTest::addColumn<double>("anchor");
        QTest::addColumn<double>("factor");
        QTest::addColumn<double>("expectBegin");
        QTest::addColumn<double>("expectEnd");

        // Domain [0, 1000), minimum span 10.
        QTest::newRow("zoom in around the middle") << 0.0 << 1000.0 << 500.0 << 0.5 << 250.0 << 750.0;
        QTest::newRow("zoom in around the left edge") << 0.0 << 1000.0 << 0.0 << 0.1 << 0.0 << 100.0;
        QTest::newRow("zoom in off-centre keeps the anchor's fraction")
            << 0.0 << 1000.0 << 200.0 << 0.5 << 100.0 << 600.0;
        QTest::newRow("zoom out is clamped to the domain") << 400.0 << 600.0 << 500.0 << 100.0 << 0.0 << 1000.0;
        QTest::newRow("zoom out near the end slides inside") << 800.0 << 1000.0 << 900.0 << 2.0 << 600.0 << 1000.0;
        QTest::newRow("zoom in stops at the minimum span") << 490.0 << 510.0 << 500.0 << 0.01 << 495.0 << 505.0;
    }

    void zoomKeepsAnchorAndClamps()
    {
        QFETCH(double, begin);
        QFETCH(double, end);
        QFETCH(double, anchor);
        QFETCH(double, factor);
        QFETCH(double, expectBegin);
        QFETCH(double, expectEnd);
        TimelineGeometry g;
        g.rect = QRectF(0, 0, 500, 100);
        g.setDomain(0, 1000, 10);
        g.begin = begin;
        g.end = end;
        g.zoomAround(anchor, factor);
        QCOMPARE(g.begin, expectBegin);
        QCOMPARE(g.end, expectEnd);
    }

    void panAndSetRangeClamp_data()
    {
        QTest::addColumn<double>("begin");
        QTest::addColumn<double>("end");
        QTest::addColumn<double>("panPixels"); // NaN: call setRange(begin, end) instead
        QTest::addColumn<double>("expectBegin");
        QTest::addColumn<double>("expectEnd");

        // Domain [0, 1000), minimum span 10, 500 pixels wide.
        QTest::newRow("pan right by 50 px of a 100-wide view") << 100.0 << 200.0 << 50.0 << 110.0 << 210.0;
        QTest::newRow("pan left stops at the start") << 10.0 << 110.0 << -500.0 << 0.0 << 100.0;
        QTest::newRow("pan right stops at the end") << 900.0 << 1000.0 << 100.0 << 900.0 << 1000.0;
        QTest::newRow("setRange inside") << 300.0 << 400.0 << qQNaN() << 300.0 << 400.0;
        QTest::newRow("setRange reversed") << 400.0 << 300.0 << qQNaN() << 300.0 << 400.0;
        QTest::newRow("setRange beyond the domain slides in") << 950.0 << 1100.0 << qQNaN() << 850.0 << 1000.0;
        QTest::newRow("setRange wider than the domain") << -50.0 << 5000.0 << qQNaN() << 0.0 << 1000.0;
        QTest::newRow("setRange narrower than the minimum widens") << 500.0 << 502.0 << qQNaN() << 496.0 << 506.0;
    }

    void panAndSetRangeClamp()
    {
        QFETCH(double, begin);
        QFETCH(double, end);
        QFETCH(double, panPixels);
        QFETCH(double, expectBegin);
        QFETCH(double, expectEnd);
        TimelineGeometry g;
        g.rect = QRectF(0, 0, 500, 100);
        g.setDomain(0, 1000, 10);
        if (qIsNaN(panPixels)) {
            g.setRange(begin, end);
        } else {
            g.begin = begin;
            g.end = end;
            g.panPixels(panPixels);
        }
        QCOMPARE(g.begin, expectBegin);
        QCOMPARE(g.end, expectEnd);
    }

    void niceSteps_data()
    {
        QTest::addColumn<double>("raw");
        QTest::addColumn<double>("step");
        QTest::newRow("exactly one") << 1.0 << 1.0;
        QTest::newRow("1.1 rounds up to 2") << 1.1 << 2.0;
        QTest::newRow("3 rounds up to 5") << 3.0 << 5.0;
        QTest::newRow("7 rounds up to 10") << 7.0 << 10.0;
        QTest::newRow("thousands") << 2345.0 << 5000.0;
        QTest::newRow("fractions") << 0.03 << 0.05;
        QTest::newRow("non-positive falls back to 1") << 0.0 << 1.0;
    }

    void niceSteps()
    {
        QFETCH(double, raw);
        QFETCH(double, step);
        QCOMPARE(app::ticks::niceStep(raw), step);
    }

    void linearTicks_data()
    {
        QTest::addColumn<double>("first");
        QTest::addColumn<double>("last");
        QTest::addColumn<int>("maxCount");
        QTest::addColumn<std::vector<double>>("expected");
        QTest::addColumn<double>("origin");
        QTest::newRow("0..100 in at most 5")
            << 0.0 << 100.0 << 5 << std::vector<double> { 0, 20, 40, 60, 80, 100 } << 0.0;
        QTest::newRow("off-grid range takes the finer step that fits")
            << 13.0 << 97.0 << 4 << std::vector<double> { 20, 40, 60, 80 } << 0.0;
        QTest::newRow("the finer step would give too many")
            << 0.0 << 100.0 << 4 << std::vector<double> { 0, 50, 100 } << 0.0;
        QTest::newRow("large indices") << 0.0 << 329117.0 << 6
                                       << std::vector<double> { 0, 5e4, 1e5, 1.5e5, 2e5, 2.5e5, 3e5 } << 0.0;
        // Epoch microseconds: ticks on round durations since the trace began, not since 1970.
        QTest::newRow("time since an origin")
            << 1.7e15 + 3e5 << 1.7e15 + 2.1e6 << 4
            << std::vector<double> { 1.7e15 + 5e5, 1.7e15 + 1e6, 1.7e15 + 1.5e6, 1.7e15 + 2e6 } << 1.7e15;
        QTest::newRow("empty range") << 5.0 << 5.0 << 4 << std::vector<double> {} << 0.0;
    }

    void linearTicks()
    {
        QFETCH(double, first);
        QFETCH(double, last);
        QFETCH(int, maxCount);
        QFETCH(std::vector<double>, expected);
        QFETCH(double, origin);
        QCOMPARE(app::ticks::linear(first, last, maxCount, origin), expected);
    }

    void byteTicks_data()
    {
        QTest::addColumn<double>("top");
        QTest::addColumn<int>("maxCount");
        QTest::addColumn<std::vector<int64_t>>("expected");
        const int64_t MiB = 1 << 20, GiB = int64_t(1) << 30;
        QTest::newRow("1.2 GiB in at most 5 steps: 256 MiB")
            << 1.2 * double(GiB) << 5 << std::vector<int64_t> { 0, 256 * MiB, 512 * MiB, 768 * MiB, GiB };
        QTest::newRow("exactly 4 GiB in 4 steps")
            << 4.0 * double(GiB) << 4 << std::vector<int64_t> { 0, GiB, 2 * GiB, 3 * GiB, 4 * GiB };
        QTest::newRow("tiny") << 3000.0 << 3 << std::vector<int64_t> { 0, 1024, 2048 };
        QTest::newRow("zero") << 0.0 << 5 << std::vector<int64_t> { 0 };
    }

    void byteTicks()
    {
        QFETCH(double, top);
        QFETCH(int, maxCount);
        QFETCH(std::vector<int64_t>, expected);
        QCOMPARE(app::ticks::bytes(top, maxCount), expected);
    }

    void stateTicks_data()
    {
        QTest::addColumn<double>("first");
        QTest::addColumn<double>("last");
        QTest::addColumn<int>("maxCount");
        QTest::addColumn<qint64>("entryCount");
        QTest::addColumn<QList<double>>("expected");
        QTest::newRow("no trace: its one state") << 0.0 << 1.0 << 6 << qint64(0) << QList<double> { 0 };
        QTest::newRow("three entries, wide") << 0.0 << 4.0 << 10 << qint64(3) << QList<double> { 0, 1, 2, 3 };
        QTest::newRow("deep zoom: whole states only") << 10.2 << 11.9 << 8 << qint64(100) << QList<double> { 11 };
        QTest::newRow("a long trace") << 0.0 << 1000.0 << 5 << qint64(1000)
                                      << QList<double> { 0, 200, 400, 600, 800, 1000 };
    }

    void stateTicks()
    {
        QFETCH(double, first);
        QFETCH(double, last);
        QFETCH(int, maxCount);
        QFETCH(qint64, entryCount);
        QFETCH(QList<double>, expected);
        const std::vector<double> got = app::ticks::states(first, last, maxCount, entryCount);
        QCOMPARE(QList<double>(got.begin(), got.end()), expected);
    }

    void tickLabels_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<double>("value");
        QTest::addColumn<double>("step");
        QTest::addColumn<QString>("label");
        const double MiB = 1 << 20, GiB = double(int64_t(1) << 30);
        QTest::newRow("zero bytes") << "bytes" << 0.0 << 0.0 << "0";
        QTest::newRow("768 MiB") << "bytes" << 768 * MiB << 0.0 << "768 MiB";
        QTest::newRow("1.25 GiB") << "bytes" << 1.25 * GiB << 0.0 << "1.25 GiB";
        QTest::newRow("512 B") << "bytes" << 512.0 << 0.0 << "512 B";
        QTest::newRow("small index") << "index" << 9500.0 << 0.0 << "9500";
        QTest::newRow("index in thousands") << "index" << 120000.0 << 0.0 << "120k";
        QTest::newRow("index in millions") << "index" << 1500000.0 << 0.0 << "1.5M";
        QTest::newRow("time origin") << "time" << 0.0 << 1000.0 << "0";
        QTest::newRow("time in ms") << "time" << 250000.0 << 50000.0 << "250 ms";
        QTest::newRow("time in s, quarter steps") << "time" << 1.25e6 << 0.25e6 << "1.25 s";
        QTest::newRow("time in µs") << "time" << 40.0 << 20.0 << "40 µs";
        QTest::newRow("time in minutes") << "time" << 150e6 << 60e6 << "2 min 30 s";
    }

    void tickLabels()
    {
        QFETCH(QString, kind);
        QFETCH(double, value);
        QFETCH(double, step);
        QFETCH(QString, label);
        if (kind == QLatin1String("bytes"))
            QCOMPARE(app::ticks::bytesLabel(int64_t(value)), label);
        else if (kind == QLatin1String("index"))
            QCOMPARE(app::ticks::indexLabel(value), label);
        else
            QCOMPARE(app::ticks::timeLabel(value + 1.7e15, 1.7e15, step), label);
    }

    void stateAxisMapsStates_data()
    {
        QTest::addColumn<bool>("time");
        QTest::addColumn<double>("coord");
        QTest::addColumn<int64_t>("stateAt");
        QTest::addColumn<int64_t>("statesBefore");
        // Index axis over 10 entries (states 0..10); time axis with state times 100, 100, 105, 120, 120, 130.
        QTest::newRow("index: inside state 3") << false << 3.4 << int64_t(3) << int64_t(4);
        QTest::newRow("index: at the start of state 3") << false << 3.0 << int64_t(3) << int64_t(3);
        QTest::newRow("index: before the domain") << false << -5.0 << int64_t(0) << int64_t(0);
        QTest::newRow("index: past the end") << false << 99.0 << int64_t(10) << int64_t(11);
        QTest::newRow("time: equal times, the last one is in effect") << true << 100.0 << int64_t(1) << int64_t(0);
        QTest::newRow("time: between 105 and 120") << true << 110.0 << int64_t(2) << int64_t(3);
        QTest::newRow("time: at 120") << true << 120.0 << int64_t(4) << int64_t(3);
        QTest::newRow("time: after the last") << true << 200.0 << int64_t(5) << int64_t(6);
        QTest::newRow("time: before the first") << true << 50.0 << int64_t(0) << int64_t(0);
    }

    void stateAxisMapsStates()
    {
        QFETCH(bool, time);
        QFETCH(double, coord);
        QFETCH(int64_t, stateAt);
        QFETCH(int64_t, statesBefore);
        const StateAxis axis = time ? StateAxis::time({ 100, 100, 105, 120, 120, 130 }) : StateAxis::index(10);
        QCOMPARE(axis.stateAt(coord), stateAt);
        QCOMPARE(axis.statesBefore(coord), statesBefore);
    }

    void columnRangesCoverEveryState_data()
    {
        QTest::addColumn<bool>("time");
        QTest::addColumn<double>("beginFraction");
        QTest::addColumn<double>("endFraction");
        QTest::addColumn<int>("columns");
        QTest::newRow("index, whole, fewer columns than states") << false << 0.0 << 1.0 << 37;
        QTest::newRow("index, whole, more columns than states") << false << 0.0 << 1.0 << 1500;
        QTest::newRow("index, zoomed into the middle") << false << 0.41 << 0.43 << 300;
        QTest::newRow("time, whole") << true << 0.0 << 1.0 << 64;
        QTest::newRow("time, zoomed, more columns than states") << true << 0.2 << 0.25 << 900;
    }

    void columnRangesCoverEveryState()
    {
        QFETCH(bool, time);
        QFETCH(double, beginFraction);
        QFETCH(double, endFraction);
        QFETCH(int, columns);
        // 1000 entries at bursty times (runs of equal times, gaps).
        std::vector<int64_t> times;
        int64_t t = 5000;
        std::mt19937 rng(3);
        for (int i = 0; i <= 1000; ++i) {
            times.push_back(t);
            t += (rng() % 4 == 0) ? int64_t(rng() % 300) : 0;
        }
        const StateAxis axis = time ? StateAxis::time(times) : StateAxis::index(1000);
        const double span = axis.domainEnd() - axis.domainBegin();
        const double begin = axis.domainBegin() + beginFraction * span, end = axis.domainBegin() + endFraction * span;
        std::vector<int64_t> lo, hi;
        axis.columnRanges(begin, end, columns, lo, hi);
        QCOMPARE(int(lo.size()), columns);
        QCOMPARE(lo.front(), axis.stateAt(begin));
        for (int x = 0; x < columns; ++x) {
            QVERIFY2(lo[size_t(x)] < hi[size_t(x)], qPrintable(QStringLiteral("column %1 is empty").arg(x)));
            if (x > 0) {
                QVERIFY(lo[size_t(x)] >= lo[size_t(x) - 1]);
                QVERIFY(hi[size_t(x)] >= hi[size_t(x) - 1]);
                // Contiguous: no state skipped, at most one shared with the left neighbour.
                QVERIFY(lo[size_t(x)] <= hi[size_t(x) - 1]);
                QVERIFY(lo[size_t(x)] >= hi[size_t(x) - 1] - 1);
            }
        }
        if (endFraction >= 1.0)
            QCOMPARE(hi.back(), int64_t(1001)); // the final state is shown
    }

    void layoutDoesNotOverlap_data()
    {
        QTest::addColumn<QSize>("size");
        QTest::newRow("default") << QSize(900, 400);
        QTest::newRow("full HD") << QSize(1920, 1080);
        QTest::newRow("tiny") << QSize(320, 200);
    }

    void layoutDoesNotOverlap()
    {
        QFETCH(QSize, size);
        const auto l = app::TimelineLayout::compute(size, 16, 70);
        const QRect all(QPoint(0, 0), size);
        for (const QRect& r : { l.header, l.plot, l.xAxis, l.overview, l.yAxis })
            QVERIFY(all.contains(r));
        QVERIFY(!l.header.intersects(l.plot));
        QVERIFY(!l.plot.intersects(l.xAxis));
        QVERIFY(!l.xAxis.intersects(l.overview));
        QVERIFY(!l.yAxis.intersects(l.plot));
        QCOMPARE(l.plot.left(), l.overview.left()); // the overview lines up with the plot
        QCOMPARE(l.plot.width(), l.overview.width());
        QVERIFY(l.plot.height() > size.height() / 3);
    }

    void labelsDoNotOverlap_data()
    {
        QTest::addColumn<std::vector<double>>("x");
        QTest::addColumn<std::vector<double>>("width");
        QTest::addColumn<int>("rows");
        QTest::addColumn<std::vector<int>>("expected");
        QTest::newRow("far apart: one row") << std::vector<double> { 0, 100, 200 } << std::vector<double> { 50, 50, 50 }
                                            << 2 << std::vector<int> { 0, 0, 0 };
        QTest::newRow("nested: second row") << std::vector<double> { 0, 10, 100 } << std::vector<double> { 50, 50, 50 }
                                            << 2 << std::vector<int> { 0, 1, 0 };
        QTest::newRow("crowded: left out") << std::vector<double> { 0, 5, 10 } << std::vector<double> { 50, 50, 50 }
                                           << 2 << std::vector<int> { 0, 1, -1 };
        QTest::newRow("gap respected") << std::vector<double> { 0, 52 } << std::vector<double> { 50, 50 } << 1
                                       << std::vector<int> { 0, -1 };
    }

    void labelsDoNotOverlap()
    {
        QFETCH(std::vector<double>, x);
        QFETCH(std::vector<double>, width);
        QFETCH(int, rows);
        QFETCH(std::vector<int>, expected);
        QCOMPARE(app::placeLabels(x, width, rows, 4), expected);
    }

    // ---- the stacking engine ------------------------------------------------------------------------------------

    void stackMatchesBruteForce_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("mode");
        QTest::addColumn<bool>("hideSideStream");
        QTest::addColumn<int>("samples");
        const int A = int(Mode::Allocations), S = int(Mode::Segments);
        QTest::newRow("multistream allocations") << "multistream.pickle" << A << false << 200;
        QTest::newRow("multistream allocations, a side stream hidden") << "multistream.pickle" << A << true << 200;
        QTest::newRow("multistream segments") << "multistream.pickle" << S << false << 200;
        QTest::newRow("multistream segments, a side stream hidden") << "multistream.pickle" << S << true << 200;
        QTest::newRow("transformer_train allocations") << "transformer_train.pickle" << A << false << 120;
        QTest::newRow("transformer_train segments") << "transformer_train.pickle" << S << false << 120;
        QTest::newRow("expandable_segments segments") << "expandable_segments.pickle" << S << false << 120;
        QTest::newRow("big_trace allocations") << "big_trace.pickle.xz" << A << false << 40;
        QTest::newRow("big_trace segments") << "big_trace.pickle.xz" << S << false << 40;
    }

    void stackMatchesBruteForce()
    {
        QFETCH(QString, file);
        QFETCH(int, mode);
        QFETCH(bool, hideSideStream);
        QFETCH(int, samples);
        auto session = openSession(file);
        QVERIFY(session);
        const model::Replay& replay = session->replay();
        const Mode m = Mode(mode);
        const int64_t side = firstSideStream(*session);
        if (hideSideStream)
            QVERIFY2(side != 0, "the snapshot has a side stream");
        const auto visible = hideStream(*session, m, side, hideSideStream);
        const auto items = m == Mode::Allocations ? model::TimelineItems::fromAllocations(replay)
                                                  : model::TimelineItems::fromSegments(replay);
        QVERIFY(std::is_sorted(items.begin.begin(), items.begin.end()));

        // Forward, incrementally (with compactions on the way), and by a fresh reset at each state.
        model::TimelineStack forward, fresh;
        forward.bind(&items, visible);
        fresh.bind(&items, visible);
        forward.reset(0);
        const auto states = sampleStates(replay.entryCount(), samples);
        for (int64_t s : states) {
            const auto expected = bruteForce(replay, m, visible, s);
            forward.advanceTo(s);
            QCOMPARE(forward.state(), s);
            QVERIFY2(fromStack(forward) == expected,
                     qPrintable(QStringLiteral("forward stack differs at state %1").arg(s)));
            fresh.reset(s);
            QVERIFY2(fromStack(fresh) == expected,
                     qPrintable(QStringLiteral("reset stack differs at state %1").arg(s)));
            QCOMPARE(forward.liveCount(), expected.size());
            const ByteCount total = expected.empty() ? 0 : expected.back().offset + items.size[expected.back().item];
            QCOMPARE(forward.total(), total);
            if (visible.empty()) {
                // The stack's height is the replay's own series, computed by other code.
                const auto& series = replay.series();
                QCOMPARE(total, m == Mode::Allocations ? series.active[size_t(s)] : series.reserved[size_t(s)]);
            }
            // Hit testing and offsets agree with the brute force.
            for (size_t i = 0; i < expected.size(); i += std::max<size_t>(1, expected.size() / 7)) {
                QCOMPARE(forward.offsetOf(expected[i].item), expected[i].offset);
                ByteCount offset = -1;
                QCOMPARE(forward.itemAt(expected[i].offset + items.size[expected[i].item] / 2, &offset),
                         expected[i].item);
                QCOMPARE(offset, expected[i].offset);
            }
            QCOMPARE(forward.itemAt(total), model::NoTimelineItem);
        }
        if (m == Mode::Allocations && !hideSideStream) {
            // A reset from the replay's live list (as the view does) gives the same stack.
            const int64_t s = states[states.size() / 2];
            const auto live = replay.liveAt(s);
            std::vector<TimelineItem> ids;
            for (auto a : live)
                ids.push_back(model::raw(a));
            fresh.reset(s, ids);
            QVERIFY(fromStack(fresh) == bruteForce(replay, m, visible, s));
        }
    }

    void columnsShowTheirLargestState_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("mode");
        QTest::addColumn<bool>("hideSideStream");
        QTest::addColumn<double>("beginFraction");
        QTest::addColumn<double>("endFraction");
        QTest::addColumn<int>("columns");
        const int A = int(Mode::Allocations), S = int(Mode::Segments);
        QTest::newRow("multistream, whole trace") << "multistream.pickle" << A << false << 0.0 << 1.0 << 97;
        QTest::newRow("multistream, hidden stream") << "multistream.pickle" << A << true << 0.0 << 1.0 << 97;
        QTest::newRow("multistream, zoomed past one state per column")
            << "multistream.pickle" << A << false << 0.3 << 0.35 << 400;
        QTest::newRow("transformer_train, whole trace")
            << "transformer_train.pickle" << A << false << 0.0 << 1.0 << 640;
        QTest::newRow("transformer_train segments") << "transformer_train.pickle" << S << false << 0.0 << 1.0 << 333;
        QTest::newRow("big_trace, whole trace at 1920 columns")
            << "big_trace.pickle.xz" << A << false << 0.0 << 1.0 << 1920;
        QTest::newRow("big_trace, a zoomed window") << "big_trace.pickle.xz" << A << false << 0.6 << 0.61 << 800;
    }

    void columnsShowTheirLargestState()
    {
        QFETCH(QString, file);
        QFETCH(int, mode);
        QFETCH(bool, hideSideStream);
        QFETCH(double, beginFraction);
        QFETCH(double, endFraction);
        QFETCH(int, columns);
        auto session = openSession(file);
        QVERIFY(session);
        const model::Replay& replay = session->replay();
        const Mode m = Mode(mode);
        const auto visible = hideStream(*session, m, firstSideStream(*session), hideSideStream);
        const auto items = m == Mode::Allocations ? model::TimelineItems::fromAllocations(replay)
                                                  : model::TimelineItems::fromSegments(replay);
        const StateAxis axis = StateAxis::index(replay.entryCount());
        const double span = axis.domainEnd() - axis.domainBegin();
        std::vector<int64_t> lo, hi;
        axis.columnRanges(beginFraction * span, endFraction * span, columns, lo, hi);
        model::TimelineColumns out;
        model::sampleColumns(items, visible, lo, hi, out);
        QCOMPARE(int(out.state.size()), columns);
        // Totals per state, by brute force where it is cheap, else from the replay's series.
        std::vector<ByteCount> totals(size_t(replay.entryCount()) + 1);
        if (visible.empty()) {
            const auto& series = replay.series();
            const auto& values = m == Mode::Allocations ? series.active : series.reserved;
            totals.assign(values.begin(), values.end());
        } else {
            for (int64_t s = 0; s <= replay.entryCount(); ++s)
                totals[size_t(s)] = bruteTotal(replay, m, visible, s);
        }
        ByteCount maxTotal = 0;
        for (int x = 0; x < columns; ++x) {
            const int64_t s = out.state[size_t(x)];
            QVERIFY(s >= lo[size_t(x)] && s < hi[size_t(x)]);
            QCOMPARE(out.total[size_t(x)], totals[size_t(s)]);
            const ByteCount best = *std::max_element(totals.begin() + lo[size_t(x)], totals.begin() + hi[size_t(x)]);
            QCOMPARE(out.total[size_t(x)], best);
            maxTotal = std::max(maxTotal, best);
        }
        QCOMPARE(out.maxTotal, maxTotal);
    }

    // Without filters the sampling reads the items' sizes as they are, unless an item is never live (its end not
    // after its begin: inconsistent input), which must add nothing: then, and with filters, it keeps values of its
    // own. Both ways, fresh and resumed after the items grew, every column's total is the brute force's.
    void neverLiveItemsAddNothing()
    {
        // A from before the trace, B and C, then (in the second half) D never live and E.
        auto make = [](int64_t entryCount, std::vector<model::TraceIndex> begin, std::vector<model::TraceIndex> end,
                       std::vector<ByteCount> size) {
            model::TimelineItems items;
            items.entryCount = entryCount;
            for (size_t k = 0; k < begin.size(); ++k) {
                items.begin.push_back(begin[k]);
                items.end.push_back(end[k]);
                items.size.push_back(size[k]);
                items.pendingFrom.push_back(INT32_MAX);
            }
            items.finish();
            return items;
        };
        const auto first = make(3, { -1, 0, 1 }, { 3, 2, 3 }, { 100, 10, 20 });
        const auto grown = make(6, { -1, 0, 1, 3, 4 }, { 6, 2, 4, 3, 6 }, { 100, 10, 20, 1000, 5 });
        auto bruteTotal = [](const model::TimelineItems& items, std::span<const uint8_t> visible, int64_t s) {
            ByteCount total = 0;
            for (size_t k = 0; k < items.count(); ++k)
                if ((visible.empty() || visible[k]) && items.begin[k] < s && s <= items.end[k])
                    total += items.size[k];
            return total;
        };
        auto columnsOf = [](int64_t entryCount, std::vector<int64_t>& lo, std::vector<int64_t>& hi) {
            lo.clear();
            hi.clear();
            for (int64_t s = 0; s <= entryCount; ++s) {
                lo.push_back(s);
                hi.push_back(s + 1);
            }
        };
        auto check = [&](const model::TimelineItems& items, std::span<const uint8_t> visible,
                         const model::TimelineColumns& out) {
            QCOMPARE(out.total.size(), size_t(items.entryCount + 1));
            for (int64_t s = 0; s <= items.entryCount; ++s) {
                QCOMPARE(out.state[size_t(s)], s);
                QCOMPARE(out.total[size_t(s)], bruteTotal(items, visible, s));
            }
        };
        std::vector<int64_t> lo, hi;
        // Fresh, no filters: the never-live item needs values of the sampling's own.
        columnsOf(grown.entryCount, lo, hi);
        model::TimelineColumns fresh;
        model::sampleColumns(grown, {}, lo, hi, fresh);
        check(grown, {}, fresh);
        QCOMPARE(fresh.scratch.size(), grown.count());
        // Every item live at some point, no filters: the sizes as they are, nothing of its own.
        columnsOf(first.entryCount, lo, hi);
        model::TimelineColumns resumed;
        model::sampleColumns(first, {}, lo, hi, resumed);
        check(first, {}, resumed);
        QCOMPARE(resumed.scratch.size(), size_t(0));
        // Grown by a never-live item: resumed after the last column, the values are made for every item.
        const size_t firstColumn = lo.size();
        columnsOf(grown.entryCount, lo, hi);
        model::sampleColumns(grown, {}, lo, hi, resumed, firstColumn);
        check(grown, {}, resumed);
        QCOMPARE(resumed.scratch.size(), grown.count());
        // Grown again by an item live at the end: the never-live one still adds nothing.
        const auto more = make(7, { -1, 0, 1, 3, 4, 6 }, { 7, 2, 4, 3, 7, 7 }, { 100, 10, 20, 1000, 5, 7 });
        const size_t grownColumns = lo.size();
        columnsOf(more.entryCount, lo, hi);
        model::sampleColumns(more, {}, lo, hi, resumed, grownColumns);
        check(more, {}, resumed);
        columnsOf(grown.entryCount, lo, hi);
        // A filter, then none again: the values go, the totals stay right.
        const std::vector<uint8_t> hideC { 1, 1, 0, 1, 1 };
        model::sampleColumns(grown, hideC, lo, hi, fresh);
        check(grown, hideC, fresh);
        model::sampleColumns(make(6, { -1, 0, 1, 4 }, { 6, 2, 4, 6 }, { 100, 10, 20, 5 }), {}, lo, hi, fresh);
        QCOMPARE(fresh.scratch.size(), size_t(0));
        QCOMPARE(fresh.total[4], ByteCount(120));
        QCOMPARE(fresh.total[5], ByteCount(105));
    }

    void itemOffsetsMatchBruteForce_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("mode");
        QTest::newRow("multistream allocations") << "multistream.pickle" << int(Mode::Allocations);
        QTest::newRow("transformer_train allocations") << "transformer_train.pickle" << int(Mode::Allocations);
        QTest::newRow("transformer_train segments") << "transformer_train.pickle" << int(Mode::Segments);
        QTest::newRow("big_trace allocations") << "big_trace.pickle.xz" << int(Mode::Allocations);
    }

    void itemOffsetsMatchBruteForce()
    {
        QFETCH(QString, file);
        QFETCH(int, mode);
        auto session = openSession(file);
        QVERIFY(session);
        const model::Replay& replay = session->replay();
        const Mode m = Mode(mode);
        const auto items = m == Mode::Allocations ? model::TimelineItems::fromAllocations(replay)
                                                  : model::TimelineItems::fromSegments(replay);
        const auto states = sampleStates(replay.entryCount(), 60);
        // Brute-force stacks at every sampled state, then check a spread of items against them.
        std::vector<std::vector<Stacked>> stacks;
        for (int64_t s : states)
            stacks.push_back(bruteForce(replay, m, {}, s));
        std::mt19937 rng(5);
        std::vector<ByteCount> offsets;
        for (int trial = 0; trial < 25; ++trial) {
            const TimelineItem item = TimelineItem(rng() % items.count());
            model::itemOffsets(items, {}, item, states, offsets);
            for (size_t i = 0; i < states.size(); ++i) {
                const auto it = std::find_if(stacks[i].begin(), stacks[i].end(),
                                             [&](const Stacked& st) { return st.item == item; });
                QCOMPARE(offsets[i], it == stacks[i].end() ? ByteCount(-1) : it->offset);
            }
        }
    }

    void allocationsFindTheirSegment_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("multistream") << "multistream.pickle";
        QTest::newRow("expandable_segments") << "expandable_segments.pickle";
        QTest::newRow("cudagraph (private pool)") << "cudagraph.pickle";
        QTest::newRow("transformer_train") << "transformer_train.pickle";
    }

    void allocationsFindTheirSegment()
    {
        QFETCH(QString, file);
        auto session = openSession(file);
        QVERIFY(session);
        const model::Replay& replay = session->replay();
        const auto holder = model::pieceOfAllocations(replay);
        const auto& pieces = replay.segmentPieces();
        const auto& allocs = replay.allocations();
        QCOMPARE(holder.size(), allocs.size());
        for (size_t a = 0; a < allocs.size(); a += std::max<size_t>(1, allocs.size() / 500)) {
            const int64_t s = int64_t(allocs[a].allocIndex) + 1;
            TimelineItem expected = model::NoTimelineItem;
            for (size_t p = 0; p < pieces.size(); ++p)
                if (pieces[p].beginIndex < s && s <= pieces[p].endIndex && pieces[p].address <= allocs[a].address
                    && allocs[a].address < pieces[p].address + pieces[p].size)
                    expected = TimelineItem(p);
            QCOMPARE(holder[a], expected);
            QVERIFY(expected != model::NoTimelineItem); // complete traces: every block lies in a segment
        }
    }

    void rasterizesRunsBandsAndPending()
    {
        // Four states; bytesPerPixel 10, 30 rows. A 100 B from before the trace; B 50 B for states 1..2; C and D
        // 8 B each (thinner than a row) and E 48 B (pending from state 3) from state 2 on.
        model::TimelineItems items;
        items.entryCount = 4;
        items.begin = { -1, 0, 1, 1, 1 };
        items.end = { 4, 2, 4, 4, 4 };
        items.size = { 100, 50, 8, 8, 48 };
        items.pendingFrom = { INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, 2 };
        items.finish();
        const std::vector<uint32_t> colours { 0xffaa0000, 0xff00bb00, 0xff0000cc, 0xff0000dd, 0xffeeee00 };
        model::TimelineColumns columns;
        columns.state = { 0, 1, 1, 2, 3, 4 }; // column 2 repeats column 1's state: a copy
        const int height = 30;
        QImage image(int(columns.state.size()), height, QImage::Format_RGB32);
        image.fill(0xff123456);
        model::TimelineRaster raster;
        raster.pixels = reinterpret_cast<uint32_t*>(image.bits());
        raster.stride = image.bytesPerLine() / 4;
        raster.width = image.width();
        raster.height = height;
        raster.bytesPerPixel = 10;
        raster.background = 0xffffffff;
        raster.neutral = 0xff808080;
        raster.pending = 0xffff0000;
        model::TimelineStack stack;
        stack.bind(&items, {}, colours);
        stack.reset(0);
        model::TimelineRasterScratch scratch;
        model::rasterize(stack, columns, raster, scratch);

        // Expected runs from the bottom: {first row, colour}, up to the top.
        const QRgb A = colours[0], B = colours[1], E = colours[4], N = raster.neutral, P = raster.pending,
                   W = raster.background;
        const std::vector<std::vector<std::pair<int, QRgb>>> expected {
            { { 0, A }, { 10, W } }, // state 0: A alone
            { { 0, A }, { 10, B }, { 15, W } }, // state 1: B on A (rows 10..14)
            { { 0, A }, { 10, B }, { 15, W } }, // the copy
            // state 2: C + D = 16 B band over [150, 166) -> rows 15..16; E over [166, 214) -> rows 17..20
            { { 0, A }, { 10, B }, { 15, N }, { 17, E }, { 21, W } },
            // state 3: B gone, everything slides down; E pending (state 3 > pendingFrom 2)
            { { 0, A }, { 10, N }, { 12, P }, { 16, W } },
            { { 0, A }, { 10, N }, { 12, P }, { 16, W } },
        };
        for (int x = 0; x < image.width(); ++x) {
            const auto& runs = expected[size_t(x)];
            for (size_t i = 0; i < runs.size(); ++i) {
                const int end = i + 1 < runs.size() ? runs[i + 1].first : height;
                for (int r = runs[i].first; r < end; ++r)
                    QVERIFY2(image.pixel(x, height - 1 - r) == runs[i].second,
                             qPrintable(QStringLiteral("column %1 row %2: %3")
                                            .arg(x)
                                            .arg(r)
                                            .arg(image.pixel(x, height - 1 - r), 0, 16)));
            }
        }
    }

    void rowsRoundToNearest_data()
    {
        QTest::addColumn<double>("bytesPerPixel");
        QTest::addColumn<qint64>("offset");
        QTest::addColumn<int>("row");
        QTest::newRow("zero") << 10.0 << qint64(0) << 0;
        QTest::newRow("just under half a row") << 10.0 << qint64(4) << 0;
        QTest::newRow("half a row rounds up") << 10.0 << qint64(5) << 1;
        QTest::newRow("1.4 rows") << 10.0 << qint64(14) << 1;
        QTest::newRow("clamped to the height") << 10.0 << qint64(100000) << 30;
        QTest::newRow("GiB scale") << double(int64_t(1) << 26) << qint64(int64_t(5) << 30) << 30; // clamped: 80 rows
        QTest::newRow("GiB scale, inside") << double(int64_t(1) << 30) << qint64((int64_t(25) << 30) / 2) << 13;
        QTest::newRow("less than a byte per row") << 0.5 << qint64(7) << 14;
    }

    void rowsRoundToNearest()
    {
        QFETCH(double, bytesPerPixel);
        QFETCH(qint64, offset);
        QFETCH(int, row);
        QCOMPARE(model::TimelineRows(bytesPerPixel, 30).row(offset), row);
    }

    void rasterMatchesBruteForce_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("mode");
        QTest::addColumn<bool>("hideSideStream");
        QTest::addColumn<double>("beginFraction");
        QTest::addColumn<double>("endFraction");
        QTest::addColumn<int>("parts");
        const int A = int(Mode::Allocations), S = int(Mode::Segments);
        QTest::newRow("multistream allocations (pending frees)")
            << "multistream.pickle" << A << false << 0.0 << 1.0 << 1;
        QTest::newRow("multistream allocations, a side stream hidden")
            << "multistream.pickle" << A << true << 0.0 << 1.0 << 2;
        QTest::newRow("multistream segments") << "multistream.pickle" << S << false << 0.0 << 1.0 << 1;
        QTest::newRow("expandable_segments segments") << "expandable_segments.pickle" << S << false << 0.0 << 1.0 << 2;
        QTest::newRow("transformer_train, 3 threads' parts")
            << "transformer_train.pickle" << A << false << 0.0 << 1.0 << 3;
        QTest::newRow("transformer_train zoomed: columns share states")
            << "transformer_train.pickle" << A << false << 0.5 << 0.51 << 2;
        QTest::newRow("big_trace, runs of thin items and compactions")
            << "big_trace.pickle.xz" << A << false << 0.0 << 1.0 << 2;
    }

    void rasterMatchesBruteForce()
    {
        QFETCH(QString, file);
        QFETCH(int, mode);
        QFETCH(bool, hideSideStream);
        QFETCH(double, beginFraction);
        QFETCH(double, endFraction);
        QFETCH(int, parts);
        auto session = openSession(file);
        QVERIFY(session);
        const model::Replay& replay = session->replay();
        const Mode m = Mode(mode);
        const auto visible = hideStream(*session, m, firstSideStream(*session), hideSideStream);
        const auto items = m == Mode::Allocations ? model::TimelineItems::fromAllocations(replay)
                                                  : model::TimelineItems::fromSegments(replay);
        std::vector<uint32_t> colours(items.count());
        for (size_t k = 0; k < colours.size(); ++k)
            colours[k] = 0xff000000u | ((uint32_t(k) * 2654435761u) >> 8); // distinct per item
        const int width = 240, height = 150;
        const StateAxis axis = StateAxis::index(replay.entryCount());
        const double span = axis.domainEnd() - axis.domainBegin();
        std::vector<int64_t> lo, hi;
        axis.columnRanges(beginFraction * span, endFraction * span, width, lo, hi);
        model::TimelineColumns columns;
        model::sampleColumns(items, visible, lo, hi, columns);
        QImage image(width, height, QImage::Format_RGB32);
        image.fill(0xff123456);
        model::TimelineRaster raster;
        raster.pixels = reinterpret_cast<uint32_t*>(image.bits());
        raster.stride = image.bytesPerLine() / 4;
        raster.width = width;
        raster.height = height;
        raster.bytesPerPixel = std::max(1.0, double(columns.maxTotal) * 1.06 / height);
        raster.background = 0xffffffff;
        raster.neutral = 0xff808080;
        raster.pending = 0xffff0000;
        for (int p = 0; p < parts; ++p) {
            const int x0 = width * p / parts, x1 = width * (p + 1) / parts;
            model::TimelineStack stack;
            stack.bind(&items, visible, colours);
            if (p % 2 == 0)
                stack.setColours(model::tallBytes(raster), raster.neutral, raster.pending);
            stack.reset(columns.state[size_t(x0)]); // odd parts: rasterize sets the colours and re-stacks
            model::TimelineRasterScratch scratch;
            model::rasterize(stack, columns, raster, scratch, x0, x1);
        }
        // The brute force: every live visible item's rows, in its colour, neutral if thin, red while pending.
        const model::TimelineRows rows(raster.bytesPerPixel, height);
        const ByteCount tall = model::tallBytes(raster);
        int thin = 0, pending = 0;
        for (int x = 0; x < width; ++x) {
            const int64_t s = columns.state[size_t(x)];
            std::vector<QRgb> expected(size_t(height), raster.background);
            for (const Stacked& st : bruteForce(replay, m, visible, s)) {
                const ByteCount size = items.size[st.item];
                QRgb colour = colours[st.item];
                if (size < tall) {
                    colour = raster.neutral;
                    ++thin;
                } else if (m == Mode::Allocations) {
                    const auto& a = replay.allocations()[st.item];
                    // MemoryViz.js elides a free_requested directly followed by its free_completed.
                    if (a.freeRequestedIndex + 1 < a.freeCompletedIndex && s > a.freeRequestedIndex) {
                        colour = raster.pending;
                        ++pending;
                    }
                }
                for (int r = rows.row(st.offset); r < rows.row(st.offset + size); ++r)
                    expected[size_t(r)] = colour;
            }
            for (int r = 0; r < height; ++r)
                if (image.pixel(x, height - 1 - r) != expected[size_t(r)])
                    QFAIL(qPrintable(QStringLiteral("column %1 (state %2) row %3: %4, expected %5")
                                         .arg(x)
                                         .arg(s)
                                         .arg(r)
                                         .arg(image.pixel(x, height - 1 - r), 0, 16)
                                         .arg(expected[size_t(r)], 0, 16)));
        }
        if (file.startsWith(QLatin1String("big_trace")))
            QVERIFY(thin > 1000); // the case exercises runs
        Q_UNUSED(pending); // no shared snapshot keeps a block pending past the next entry: see the synthetic case
    }

    // ---- the widget ---------------------------------------------------------------------------------------------

    void hoverFindsTheBruteForceAllocation_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("hide"); // "stream": the first side stream; "pool": the private pool (1, 0)
        QTest::addColumn<bool>("zoomed");
        QTest::newRow("multistream") << "multistream.pickle"
                                     << "" << false;
        QTest::newRow("multistream, a side stream hidden") << "multistream.pickle"
                                                           << "stream" << false;
        QTest::newRow("cudagraph") << "cudagraph.pickle"
                                   << "" << false;
        QTest::newRow("cudagraph, the graph's private pool hidden") << "cudagraph.pickle"
                                                                    << "pool" << false;
        QTest::newRow("transformer_train") << "transformer_train.pickle"
                                           << "" << false;
        QTest::newRow("transformer_train zoomed in") << "transformer_train.pickle"
                                                     << "" << true;
        QTest::newRow("big_trace") << "big_trace.pickle.xz"
                                   << "" << false;
    }

    void hoverFindsTheBruteForceAllocation()
    {
        QFETCH(QString, file);
        QFETCH(QString, hide);
        QFETCH(bool, zoomed);
        auto session = openSession(file);
        QVERIFY(session);
        const int64_t side = firstSideStream(*session);
        std::vector<uint8_t> visible;
        if (hide == QLatin1String("stream")) {
            session->setStreamVisible(side, false);
            visible = hideStream(*session, Mode::Allocations, side, true);
        } else if (hide == QLatin1String("pool")) {
            const std::pair<int64_t, int64_t> pool { 1, 0 };
            const auto pools = session->pools();
            QVERIFY2(std::find(pools.begin(), pools.end(), pool) != pools.end(), "cudagraph has the private pool");
            session->setPoolVisible(pool, false);
            visible = hidePool(*session, pool);
            QVERIFY(std::count(visible.begin(), visible.end(), 0) > 0);
        }
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        if (zoomed)
            view.zoomToRange(session->entryCount() / 2, session->entryCount() / 2 + 300);
        const QRect plot = view.plotRect();
        int hits = 0;
        for (int gx = 1; gx < 24; ++gx) {
            for (int gy = 1; gy < 16; ++gy) {
                const QPoint pos(plot.left() + plot.width() * gx / 24, plot.top() + plot.height() * gy / 16);
                const int64_t state = view.stateAtX(pos.x());
                QVERIFY(state >= 0);
                const ByteCount bytes = ByteCount(std::floor(view.geometry().bytesAt(pos.y() + 0.5)));
                model::AllocationId expected = model::NoAllocation;
                for (const Stacked& st : bruteForce(session->replay(), Mode::Allocations, visible, state))
                    if (st.offset <= bytes && bytes < st.offset + session->replay().allocations()[st.item].size)
                        expected = model::AllocationId { st.item };
                QCOMPARE(view.allocationAt(pos), expected);
                // And through the mouse, into the Session. (A synthetic move: QTest::mouseMove sends nothing when
                // the pointer already is at that screen position.)
                sendMouse(view, QEvent::MouseMove, pos, Qt::NoButton, Qt::NoButton);
                QCOMPARE(session->hovered(), expected);
                hits += expected != model::NoAllocation;
            }
        }
        QVERIFY2(hits > 20, "the grid met allocations");
    }

    void clickSelectsAndEmptyClickClears()
    {
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const QRect plot = view.plotRect();
        // The bottom of the middle column holds an allocation (the weights live throughout).
        const QPoint onAllocation(plot.center().x(), plot.bottom() - 2);
        const model::AllocationId expected = view.allocationAt(onAllocation);
        QVERIFY(expected != model::NoAllocation);
        QTest::mouseClick(&view, Qt::LeftButton, {}, onAllocation);
        QCOMPARE(session->selection(), expected);
        // The click also put the cursor there.
        QCOMPARE(session->cursor(), int64_t(std::floor(view.geometry().coordAt(onAllocation.x() + 0.5))));
        // Above the stack (the headroom at the top of the plot) there is nothing: the pin is cleared.
        const QPoint empty(plot.center().x(), plot.top() + 2);
        QCOMPARE(view.allocationAt(empty), model::NoAllocation);
        QTest::mouseClick(&view, Qt::LeftButton, {}, empty);
        QCOMPARE(session->selection(), model::NoAllocation);
    }

    void dragScrubsTheCursor_data()
    {
        QTest::addColumn<bool>("onAxis");
        QTest::newRow("on the plot") << false;
        QTest::newRow("on the x axis strip") << true;
    }

    void dragScrubsTheCursor()
    {
        QFETCH(bool, onAxis);
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const QRect strip = onAxis ? view.axisRect() : view.plotRect();
        const int y = strip.center().y();
        const auto stateAt = [&](int x) { return int64_t(std::floor(view.geometry().coordAt(x + 0.5))); };
        const QPoint start(strip.left() + 50, y);
        sendMouse(view, QEvent::MouseButtonPress, start, Qt::LeftButton, Qt::LeftButton);
        QCOMPARE(session->cursor(), stateAt(start.x()));
        QList<int64_t> seen;
        for (int x = start.x() + 20; x < strip.right() - 50; x += 97) {
            sendMouse(view, QEvent::MouseMove, QPoint(x, y), Qt::NoButton, Qt::LeftButton);
            QCOMPARE(session->cursor(), stateAt(x)); // continuously, while dragging
            seen << session->cursor();
        }
        sendMouse(view, QEvent::MouseButtonRelease, QPoint(strip.right() - 60, y), Qt::LeftButton, Qt::NoButton);
        QVERIFY(seen.size() > 4);
        QVERIFY(std::is_sorted(seen.begin(), seen.end()));
        QCOMPARE(session->selection(), model::NoAllocation); // a drag selects nothing
        // The view did not pan or zoom.
        QCOMPARE(view.visibleRange(), std::make_pair(int64_t(0), session->entryCount()));
    }

    void wheelZoomsAroundTheMouse_data()
    {
        QTest::addColumn<double>("fraction"); // of the plot's width
        QTest::addColumn<int>("notches");
        QTest::newRow("in, at the middle") << 0.5 << 3;
        QTest::newRow("in, near the left") << 0.1 << 2;
        QTest::newRow("in, near the right") << 0.9 << 5;
    }

    void wheelZoomsAroundTheMouse()
    {
        QFETCH(double, fraction);
        QFETCH(int, notches);
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QSignalSpy spy(&view, &TimelineView::visibleRangeChanged);
        const QRect plot = view.plotRect();
        const QPoint pos(plot.left() + int(plot.width() * fraction), plot.center().y());
        const double anchor = view.geometry().coordAt(pos.x());
        const auto before = view.visibleRange();
        sendWheel(view, pos, QPoint(0, 120 * notches));
        const auto after = view.visibleRange();
        QVERIFY(after.first >= before.first && after.second <= before.second);
        QVERIFY(after.second - after.first < (before.second - before.first) * 0.8);
        QVERIFY(std::abs(view.geometry().coordAt(pos.x()) - anchor) < 1e-6 * session->entryCount());
        QVERIFY(!spy.isEmpty());
        QCOMPARE(spy.last().at(0).value<int64_t>(), after.first);
        // Zooming back out all the way shows everything again; double-click too.
        sendWheel(view, pos, QPoint(0, -120 * 50));
        QCOMPARE(view.visibleRange(), before);
        sendWheel(view, pos, QPoint(0, 120 * notches));
        QTest::mouseDClick(&view, Qt::LeftButton, {}, pos);
        QCOMPARE(view.visibleRange(), before);
    }

    void panAndBrushMoveTheRange()
    {
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.zoomToRange(2000, 3999);
        QCOMPARE(view.visibleRange(), std::make_pair(int64_t(2000), int64_t(3999)));
        const int64_t cursor = session->cursor();
        // Right-drag on the plot pans: dragging to the left shows later states; the cursor stays.
        const QRect plot = view.plotRect();
        sendMouse(view, QEvent::MouseButtonPress, plot.center(), Qt::RightButton, Qt::RightButton);
        sendMouse(view, QEvent::MouseMove, plot.center() - QPoint(plot.width() / 4, 0), Qt::NoButton, Qt::RightButton);
        sendMouse(view, QEvent::MouseButtonRelease, plot.center() - QPoint(plot.width() / 4, 0), Qt::RightButton,
                  Qt::NoButton);
        QVERIFY(std::abs(view.visibleRange().first - 2500) <= 2);
        QCOMPARE(session->cursor(), cursor);
        // Dragging the overview's brush by a tenth of its width moves the range by a tenth of the trace.
        const QRect ov = view.overviewRect();
        const auto range = view.visibleRange();
        const double b0 = ov.left() + double(range.first) / (session->entryCount() + 1) * ov.width();
        const double b1 = ov.left() + double(range.second + 1) / (session->entryCount() + 1) * ov.width();
        const QPoint grab(int((b0 + b1) / 2), ov.center().y());
        sendMouse(view, QEvent::MouseButtonPress, grab, Qt::LeftButton, Qt::LeftButton);
        sendMouse(view, QEvent::MouseMove, grab + QPoint(ov.width() / 10, 0), Qt::NoButton, Qt::LeftButton);
        sendMouse(view, QEvent::MouseButtonRelease, grab + QPoint(ov.width() / 10, 0), Qt::LeftButton, Qt::NoButton);
        const double tenth = (session->entryCount() + 1) / 10.0;
        QVERIFY2(std::abs(view.visibleRange().first - (range.first + tenth)) < tenth * 0.05,
                 qPrintable(QStringLiteral("%1").arg(view.visibleRange().first)));
        QCOMPARE(view.visibleRange().second - view.visibleRange().first, range.second - range.first);
        // Dragging a new range on the overview shows it.
        const QPoint from(ov.left() + ov.width() / 5, ov.center().y()),
            to(ov.left() + ov.width() * 2 / 5, ov.center().y());
        sendMouse(view, QEvent::MouseButtonPress, from, Qt::LeftButton, Qt::LeftButton);
        sendMouse(view, QEvent::MouseMove, to, Qt::NoButton, Qt::LeftButton);
        sendMouse(view, QEvent::MouseButtonRelease, to, Qt::LeftButton, Qt::NoButton);
        QVERIFY(std::abs(view.visibleRange().first - (session->entryCount() + 1) / 5) < tenth * 0.05);
        QVERIFY(std::abs(view.visibleRange().second - (session->entryCount() + 1) * 2 / 5) < tenth * 0.05);
        view.resetZoom();
        QCOMPARE(view.visibleRange(), std::make_pair(int64_t(0), session->entryCount()));
    }

    void zoomToRangeRoundTrips_data()
    {
        QTest::addColumn<bool>("time");
        QTest::addColumn<int64_t>("first");
        QTest::addColumn<int64_t>("last");
        QTest::newRow("index axis, a window") << false << int64_t(1000) << int64_t(1999);
        QTest::newRow("index axis, to the end") << false << int64_t(9000) << int64_t(11137);
        QTest::newRow("time axis, a window") << true << int64_t(3000) << int64_t(5999);
    }

    void zoomToRangeRoundTrips()
    {
        QFETCH(bool, time);
        QFETCH(int64_t, first);
        QFETCH(int64_t, last);
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        session->setTimeAxis(time ? app::TimeAxis::Time : app::TimeAxis::Index);
        view.finishBuild(); // the time axis is made with the data, in the background
        QCOMPARE(view.axis().isTime(), time);
        view.zoomToRange(first, last);
        const auto range = view.visibleRange();
        // Time mode: several states may share a microsecond, so the range may take in a few neighbours.
        QVERIFY2(range.first <= first && range.first >= first - (time ? 20 : 0),
                 qPrintable(QString::number(range.first)));
        QVERIFY2(range.second >= last && range.second <= last + (time ? 20 : 0),
                 qPrintable(QString::number(range.second)));
        // Switching the axis keeps the same states in view.
        session->setTimeAxis(time ? app::TimeAxis::Index : app::TimeAxis::Time);
        view.finishBuild();
        QCOMPARE(view.axis().isTime(), !time);
        QVERIFY(std::abs(view.visibleRange().first - range.first) <= 20);
        QVERIFY(std::abs(view.visibleRange().second - range.second) <= 20);
    }

    void keysMoveTheCursorAndZoom()
    {
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        session->setCursor(5000);
        QTest::keyClick(&view, Qt::Key_Right);
        QCOMPARE(session->cursor(), int64_t(5001));
        QTest::keyClick(&view, Qt::Key_Left);
        QTest::keyClick(&view, Qt::Key_Left);
        QCOMPARE(session->cursor(), int64_t(4999));
        QTest::keyClick(&view, Qt::Key_Right, Qt::ShiftModifier); // a tenth of the view
        QCOMPARE(session->cursor(), int64_t(4999 + session->entryCount() / 10));
        const int64_t cursor = session->cursor();
        QTest::keyClick(&view, Qt::Key_Plus); // zoom in around the cursor: it stays in view, near the middle
        const auto range = view.visibleRange();
        QVERIFY(range.second - range.first < session->entryCount() * 0.6);
        QVERIFY(range.first < cursor && cursor < range.second);
        QTest::keyClick(&view, Qt::Key_0);
        QCOMPARE(view.visibleRange(), std::make_pair(int64_t(0), session->entryCount()));
    }

    void zoomedViewFollowsTheCursor_data()
    {
        QTest::addColumn<QString>("time"); // "index" or "time" axis
        QTest::newRow("entry axis") << QStringLiteral("index");
        QTest::newRow("time axis") << QStringLiteral("time");
    }

    // A cursor moved out of a zoomed view (a landmark, Home/End, the overview) brings the view along: it pans to put
    // the cursor in its middle and keeps its width; a cursor moved inside it moves nothing.
    void zoomedViewFollowsTheCursor()
    {
        QFETCH(QString, time);
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        session->setTimeAxis(time == QLatin1String("time") ? app::TimeAxis::Time : app::TimeAxis::Index);
        TimelineView view(session.get());
        view.finishBuild();
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const int64_t n = session->entryCount();
        session->setCursor(2000);
        view.zoomToRange(1500, 2500);
        const auto zoomed = view.visibleRange();
        QVERIFY(zoomed.first <= 2000 && 2000 <= zoomed.second);
        session->setCursor(2100); // inside: the view stays
        QCOMPARE(view.visibleRange(), zoomed);
        for (int64_t target : { int64_t(9796), n, int64_t(0), int64_t(6000) }) {
            session->setCursor(target);
            const auto r = view.visibleRange();
            // (On the time axis state 0 has no width: a view from the start begins with state 1.)
            QVERIFY2(r.first <= std::max<int64_t>(target, 1) && target <= r.second,
                     qPrintable(QStringLiteral("%1 not in %2..%3").arg(target).arg(r.first).arg(r.second)));
            if (time == QLatin1String("index")) { // states are evenly wide: the width in states is kept
                QVERIFY(std::abs((r.second - r.first) - (zoomed.second - zoomed.first)) <= 2);
                QVERIFY(r.second - r.first < n / 2);
            } else {
                QVERIFY(r.second - r.first < n); // still zoomed (the width in time is kept)
            }
        }
    }

    void filtersAndSegmentsRerender()
    {
        auto session = openSession(QStringLiteral("multistream.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.finishBuild(); // the plot is rendered in the background too
        view.grab();
        const int renders = view.renderCount();
        // Overlays do not re-render the plot (nor ask for a render).
        session->setCursor(session->entryCount() / 3);
        session->setSelection(model::AllocationId { 0 });
        session->setHovered(model::AllocationId { 1 });
        view.grab();
        QVERIFY(!view.isRendering());
        QCOMPARE(view.renderCount(), renders);
        // A filter does.
        session->setStreamVisible(firstSideStream(*session), false);
        view.finishBuild();
        view.grab();
        QCOMPARE(view.renderCount(), renders + 1);
        // The toggle switches to segments (and re-renders).
        auto* toggle = view.findChild<QToolButton*>(QStringLiteral("timelineSegmentsToggle"));
        QVERIFY(toggle);
        QSignalSpy spy(&view, &TimelineView::showSegmentsChanged);
        toggle->click();
        QVERIFY(view.showSegments());
        QCOMPARE(spy.count(), 1);
        view.finishBuild();
        view.grab();
        QCOMPARE(view.renderCount(), renders + 2);
        // In segments mode a hover finds the segment piece, and the allocation at that address.
        const QPoint pos(view.plotRect().center().x(), view.plotRect().bottom() - 2);
        const int64_t piece = view.segmentPieceAt(pos);
        QVERIFY(piece >= 0);
        const auto& p = session->replay().segmentPieces()[size_t(piece)];
        const model::AllocationId a = view.allocationAt(pos);
        if (a != model::NoAllocation) {
            const auto& alloc = session->replay().allocation(a);
            QVERIFY(alloc.address >= p.address && alloc.address < p.address + p.size);
        }
    }

    void screenshots_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("segments");
        const QDir dir(QString::fromStdString(test::sharedDir() + "/snapshots"));
        const QStringList files
            = dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
        QVERIFY(files.contains(QStringLiteral("big_trace.pickle.xz")));
        for (const QString& f : files) {
            QTest::newRow(qPrintable(f + QLatin1String(" allocations"))) << f << false;
            QTest::newRow(qPrintable(f + QLatin1String(" segments"))) << f << true;
        }
    }

    void screenshots()
    {
        QFETCH(QString, file);
        QFETCH(bool, segments);
        auto session = openSession(file);
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.setShowSegments(segments);
        // Something to see beyond the plot: the cursor in the middle, the largest allocation selected.
        session->setCursor(session->entryCount() / 2);
        const auto& allocs = session->replay().allocations();
        if (!allocs.empty()) {
            const auto largest = std::max_element(allocs.begin(), allocs.end(),
                                                  [](const auto& a, const auto& b) { return a.size < b.size; });
            session->setSelection(model::AllocationId { uint32_t(largest - allocs.begin()) });
        }
        QString name = QLatin1String("timeline-") + file.section(QLatin1Char('.'), 0, 0)
            + (segments ? QLatin1String("-segments") : QLatin1String("-allocations"));
        QVERIFY(test::saveScreenshot(view, name));
        const QImage image = view.grab().toImage();
        QVERIFY(!image.isNull());
        // Not blank: the plot has several colours (allocations, background, grid), the whole widget many.
        QVERIFY2(colourCount(image, view.plotRect()) >= 3, qPrintable(name));
        QVERIFY(colourCount(image, image.rect()) >= 8);
        if (session->devices().size() > 1) {
            session->setDevice(session->devices().back());
            QVERIFY(test::saveScreenshot(view, name + QLatin1String("-device") + QString::number(session->device())));
            QVERIFY(colourCount(view.grab().toImage(), view.plotRect()) >= 3);
        }
        // Dark palette: the plot follows it.
        QPalette dark;
        dark.setColor(QPalette::Window, QColor(0x2b, 0x2b, 0x2b));
        dark.setColor(QPalette::Base, QColor(0x1e, 0x1e, 0x1e));
        dark.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
        dark.setColor(QPalette::WindowText, QColor(0xe0, 0xe0, 0xe0));
        dark.setColor(QPalette::PlaceholderText, QColor(0xa0, 0xa0, 0xa0));
        dark.setColor(QPalette::Mid, QColor(0x50, 0x50, 0x50));
        dark.setColor(QPalette::Button, QColor(0x35, 0x35, 0x35));
        dark.setColor(QPalette::ButtonText, QColor(0xe0, 0xe0, 0xe0));
        view.setPalette(dark);
        if (file == QLatin1String("transformer_train.pickle") || file == QLatin1String("oom.pickle"))
            QVERIFY(test::saveScreenshot(view, name + QLatin1String("-dark")));
        view.finishBuild(); // the plot of the new palette, rendered in the background
        const QImage darkImage = view.grab().toImage();
        QCOMPARE(QColor(darkImage.pixel(view.plotRect().left() + 2, view.plotRect().top() + 2)).lightness() < 80, true);
    }

    void screenshotsOfInteractions()
    {
        // Zoomed in deep (wider than a pixel per state), with the time axis and a hovered allocation.
        auto session = openSession(QStringLiteral("transformer_train.pickle"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(1200, 700);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.zoomToRange(5000, 5400);
        session->setCursor(5200);
        const QPoint pos(view.plotRect().center().x(), view.plotRect().bottom() - view.plotRect().height() / 3);
        sendMouse(view, QEvent::MouseMove, pos, Qt::NoButton, Qt::NoButton);
        QVERIFY(session->hovered() != model::NoAllocation);
        QVERIFY(test::saveScreenshot(view, QStringLiteral("timeline-transformer_train-zoomed-hover")));
        session->setTimeAxis(app::TimeAxis::Time);
        view.resetZoom();
        QVERIFY(test::saveScreenshot(view, QStringLiteral("timeline-transformer_train-time")));
        auto big = openSession(QStringLiteral("big_trace.pickle.xz"));
        TimelineView bigView(big.get());
        bigView.finishBuild(); // the data is built in the background
        bigView.zoomToRange(200000, 200600);
        QVERIFY(test::saveScreenshot(bigView, QStringLiteral("timeline-big_trace-zoomed")));
    }

    void renderTimeOfBigTrace()
    {
        auto session = openSession(QStringLiteral("big_trace.pickle.xz"));
        QVERIFY(session);
        TimelineView view(session.get());
        view.finishBuild(); // the data is built in the background
        view.resize(1920, 1080);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QCoreApplication::processEvents();
        // Full renders: every run invalidates the plot cache with a tiny range change, then renders synchronously
        // (finishBuild) and paints. And the paint that a range change costs the GUI thread in the app, which asks
        // for the plot in the background and paints the previous one moved.
        std::vector<double> render, paint, asking;
        for (int i = 0; i < 9; ++i) {
            view.zoomToRange(0, session->entryCount() - (i % 2));
            QElapsedTimer t;
            t.start();
            view.finishBuild();
            view.repaint();
            paint.push_back(double(t.nsecsElapsed()) / 1e6);
            render.push_back(view.lastRenderMs());
            view.zoomToRange(0, session->entryCount() - 1 + (i % 2));
            t.restart();
            view.repaint();
            asking.push_back(double(t.nsecsElapsed()) / 1e6);
            view.finishBuild();
        }
        // Cursor moves: the posted partial update (two strips), as the event loop delivers it.
        std::vector<double> cursor;
        const int renders = view.renderCount();
        for (int i = 0; i < 9; ++i) {
            session->setCursor(session->entryCount() * (i + 1) / 11);
            QElapsedTimer t;
            t.start();
            QCoreApplication::processEvents();
            cursor.push_back(double(t.nsecsElapsed()) / 1e6);
        }
        QCOMPARE(view.renderCount(), renders);
        // A deep zoom (many columns per state) and a middle one.
        view.zoomToRange(150000, 150500);
        view.finishBuild();
        const double deep = view.lastRenderMs();
        view.zoomToRange(100000, 130000);
        view.finishBuild();
        const double middle = view.lastRenderMs();
        auto median = [](std::vector<double> v) {
            std::sort(v.begin(), v.end());
            return v[v.size() / 2];
        };
        qInfo("big_trace at 1920x1080 (plot %dx%d px, %d threads): plot render median %.2f ms (min %.2f), whole "
              "repaint with it %.2f ms, a repaint that asks for it in the background %.2f ms, cursor move %.2f ms; "
              "zoomed to 500 states %.2f ms, to 30k states %.2f ms",
              view.plotRect().width(), view.plotRect().height(), std::min(QThread::idealThreadCount(), 4),
              median(render), *std::min_element(render.begin(), render.end()), median(paint), median(asking),
              median(cursor), deep, middle);
    }
};

QTEST_MAIN(TestTimeline)
#include "tst_timeline.moc"
