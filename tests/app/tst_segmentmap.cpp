// The segment map: its pure geometry (rows wrap, one scale everywhere, groups in order, hit testing, fitting, per
// segment figures) on hand-made states, and the view on the real snapshots in ../shared/snapshots (the drawn blocks
// are exactly Replay::stateAt's at any cursor; hover, click, filters, zoom; screenshots of every file in every colour
// mode). Runs offscreen on the GUI thread.
#include "apptestutil.h"
#include "style/colors.h"
#include "views/segmentmapgeometry.h"
#include "views/segmentmapview.h"

#include <QElapsedTimer>
#include <QMouseEvent>
#include <QSignalSpy>
#include <QTest>
#include <QWheelEvent>

#include <map>
#include <set>

using memscope::app::SegmentMapGeometry;
using memscope::app::SegmentMapView;
using memscope::app::Session;
using namespace memscope::model;

namespace {

using Hit = SegmentMapGeometry::Hit;

// A block of a hand-made segment: size, state, requested bytes (active blocks only).
struct BlockSpec {
    ByteCount size;
    BlockState state = BlockState::Inactive;
    ByteCount requested = 0;
};

struct SegmentSpec {
    ByteCount size;
    int64_t stream = 0;
    std::pair<int64_t, int64_t> pool { 0, 0 };
    int32_t device = 0;
    std::vector<BlockSpec> blocks = {}; // empty: one inactive block over the whole segment
};

// A ReplayState with the given segments at increasing addresses (1 MiB apart beyond their sizes).
ReplayState makeState(const std::vector<SegmentSpec>& specs)
{
    ReplayState state;
    DeviceAddr address = DeviceAddr(0x7f0000000000);
    uint32_t allocation = 0;
    for (const SegmentSpec& spec : specs) {
        ReplaySegment seg;
        seg.address = address;
        seg.totalSize = spec.size;
        seg.stream = spec.stream;
        seg.poolId = spec.pool;
        seg.device = spec.device;
        seg.blockBegin = uint32_t(state.blocks.size());
        std::vector<BlockSpec> blocks = spec.blocks;
        if (blocks.empty())
            blocks.push_back({ spec.size });
        DeviceAddr a = address;
        for (const BlockSpec& b : blocks) {
            ReplayBlock block;
            block.address = a;
            block.size = b.size;
            block.state = b.state;
            if (b.state != BlockState::Inactive) {
                block.requestedSize = b.requested;
                block.allocation = AllocationId { allocation++ };
            }
            state.blocks.push_back(block);
            a += b.size;
        }
        seg.blockCount = uint32_t(state.blocks.size()) - seg.blockBegin;
        state.segments.push_back(seg);
        address += spec.size + (ByteCount(1) << 20);
    }
    return state;
}

// Round numbers for hand-computed layouts.
SegmentMapGeometry::Metrics testMetrics()
{
    SegmentMapGeometry::Metrics m;
    m.margin = 10;
    m.headerHeight = 20;
    m.barHeight = 18;
    m.captionHeight = 13;
    m.rowGap = 3;
    m.groupGap = 8;
    m.segmentGap = 2;
    return m;
}

// Σ over rows of the widths of a placement's pieces.
double drawnWidth(const SegmentMapGeometry& g, uint32_t placement)
{
    const auto& p = g.placements()[placement];
    double w = 0;
    for (int64_t r = p.firstRow; r <= p.lastRow; ++r) {
        const auto piece = g.piece(placement, r);
        w += piece.x1 - piece.x0;
    }
    return w;
}

// The widget point in the middle of byte `offset` of a segment's bar.
QPointF pointAt(const SegmentMapGeometry& g, uint32_t segment, double offset)
{
    const int32_t placement = g.placementOf(segment);
    const QPointF p = g.position(uint32_t(placement), offset);
    return { p.x(), p.y() - g.pan() + g.metrics().barHeight / 2 };
}

// The index into `state.segments` of the segment holding `address`, or -1.
int segmentHolding(const ReplayState& state, DeviceAddr address)
{
    for (size_t i = 0; i < state.segments.size(); ++i) {
        const ReplaySegment& s = state.segments[i];
        if (address >= s.address && address < s.address + s.totalSize)
            return int(i);
    }
    return -1;
}

// The largest active block of the state (index into blocks), or -1.
int largestActiveBlock(const ReplayState& state)
{
    int best = -1;
    for (size_t i = 0; i < state.blocks.size(); ++i) {
        const ReplayBlock& b = state.blocks[i];
        if (b.state == BlockState::Inactive || b.allocation == NoAllocation)
            continue;
        if (best < 0 || b.size > state.blocks[size_t(best)].size)
            best = int(i);
    }
    return best;
}

void sendMouseMove(QWidget& w, QPointF pos)
{
    QMouseEvent move(QEvent::MouseMove, pos, w.mapToGlobal(pos), Qt::NoButton, Qt::NoButton, Qt::NoModifier);
    QApplication::sendEvent(&w, &move);
}

void sendWheel(QWidget& w, QPointF pos, int delta)
{
    QWheelEvent wheel(pos, w.mapToGlobal(pos), QPoint(), QPoint(0, delta), Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(&w, &wheel);
}

// Pixels of `image` unlike its top-left pixel (the background), and distinct colours.
std::pair<qint64, size_t> inkAndColours(const QImage& image)
{
    const QRgb bg = image.pixel(0, 0);
    qint64 ink = 0;
    std::set<QRgb> colours;
    for (int y = 0; y < image.height(); ++y) {
        for (int x = 0; x < image.width(); ++x) {
            const QRgb c = image.pixel(x, y);
            if (c != bg)
                ++ink;
            if (colours.size() < 64)
                colours.insert(c);
        }
    }
    return { ink, colours.size() };
}

const char* modeName(SegmentMapView::ColorMode mode)
{
    switch (mode) {
    case SegmentMapView::ColorMode::Allocation:
        return "allocation";
    case SegmentMapView::ColorMode::Stack:
        return "stack";
    case SegmentMapView::ColorMode::Stream:
        return "stream";
    }
    return "?";
}

const std::vector<std::string>& allSnapshots()
{
    static const std::vector<std::string> names = {
        "big_trace.pickle.xz",        "cudagraph.pickle",         "diff_after.pickle",  "diff_before.pickle",
        "expandable_segments.pickle", "mlp_train.pickle",         "multistream.pickle", "oom.pickle",
        "scripted_allocs.pickle",     "transformer_train.pickle", "two_device.pickle",
    };
    return names;
}

} // namespace

class TestSegmentMap : public QObject {
    Q_OBJECT

    // Each file is loaded once; tests reset what they change.
    std::map<std::string, std::unique_ptr<Session>> m_sessions;

    Session* session(const std::string& name)
    {
        auto& s = m_sessions[name];
        if (!s)
            s = memscope::test::loadSession(name);
        if (s) {
            s->setCursor(s->entryCount());
            s->setSelection(NoAllocation);
            s->setHovered(NoAllocation);
            for (int64_t stream : s->streams())
                s->setStreamVisible(stream, true);
            for (const auto& pool : s->pools())
                s->setPoolVisible(pool, true);
        }
        return s.get();
    }

private Q_SLOTS:
    // ---- geometry ------------------------------------------------------------------------------------------------

    void rowsWrap_data()
    {
        QTest::addColumn<QList<qint64>>("sizes"); // bytes, ascending (so display order = address order)
        QTest::addColumn<double>("pxPerByte");
        QTest::addColumn<QList<qint64>>("firstRows");
        QTest::addColumn<QList<qint64>>("lastRows");
        QTest::addColumn<QList<double>>("xs"); // widget x of each segment's byte 0 (margin 10, gap 2)

        // Content width 100 px in every row.
        QTest::newRow("three segments share one row")
            << QList<qint64> { 30, 30, 30 } << 1.0 << QList<qint64> { 0, 0, 0 } << QList<qint64> { 0, 0, 0 }
            << QList<double> { 10, 42, 74 };
        QTest::newRow("a segment that does not fit starts the next row")
            << QList<qint64> { 30, 30, 30, 30 } << 1.0 << QList<qint64> { 0, 0, 0, 1 } << QList<qint64> { 0, 0, 0, 1 }
            << QList<double> { 10, 42, 74, 10 };
        QTest::newRow("half the scale fits twice as many")
            << QList<qint64> { 60, 60, 60, 60 } << 0.5 << QList<qint64> { 0, 0, 0, 1 } << QList<qint64> { 0, 0, 0, 1 }
            << QList<double> { 10, 42, 74, 10 };
        QTest::newRow("a segment exactly one row wide fills it")
            << QList<qint64> { 100, 100 } << 1.0 << QList<qint64> { 0, 1 } << QList<qint64> { 0, 1 }
            << QList<double> { 10, 10 };
        QTest::newRow("a segment wider than a row wraps over three rows")
            << QList<qint64> { 250 } << 1.0 << QList<qint64> { 0 } << QList<qint64> { 2 } << QList<double> { 10 };
        QTest::newRow("a wide segment flows on after a small one")
            << QList<qint64> { 20, 250 } << 1.0 << QList<qint64> { 0, 0 } << QList<qint64> { 0, 2 }
            << QList<double> { 10, 32 };
        QTest::newRow("a wide segment after a nearly full row starts the next row")
            << QList<qint64> { 80, 250 } << 1.0 << QList<qint64> { 0, 1 } << QList<qint64> { 0, 3 }
            << QList<double> { 10, 10 };
        QTest::newRow("a second wide segment follows the first one's tail")
            << QList<qint64> { 150, 150 } << 1.0 << QList<qint64> { 0, 1 } << QList<qint64> { 1, 3 }
            << QList<double> { 10, 62 };
    }

    void rowsWrap()
    {
        QFETCH(QList<qint64>, sizes);
        QFETCH(double, pxPerByte);
        QFETCH(QList<qint64>, firstRows);
        QFETCH(QList<qint64>, lastRows);
        QFETCH(QList<double>, xs);

        std::vector<SegmentSpec> specs;
        for (qint64 s : sizes)
            specs.push_back({ s });
        const ReplayState state = makeState(specs);
        SegmentMapGeometry g;
        g.layout(state, nullptr, {}, testMetrics(), 120, pxPerByte);
        QCOMPARE(g.contentWidth(), 100.0);
        QCOMPARE(g.groups().size(), size_t(1));
        QCOMPARE(g.placements().size(), size_t(sizes.size()));
        for (qsizetype i = 0; i < sizes.size(); ++i) {
            const int32_t p = g.placementOf(uint32_t(i));
            QVERIFY(p >= 0);
            const auto& placement = g.placements()[size_t(p)];
            QCOMPARE(placement.firstRow, firstRows[i]);
            QCOMPARE(placement.lastRow, lastRows[i]);
            QCOMPARE(placement.x, xs[i]);
            // Every piece stays inside the row, and together they draw the whole segment.
            for (int64_t r = placement.firstRow; r <= placement.lastRow; ++r) {
                const auto piece = g.piece(uint32_t(p), r);
                QVERIFY(piece.x0 >= g.contentLeft() - 1e-9);
                QVERIFY(piece.x1 <= g.contentLeft() + g.contentWidth() + 1e-9);
            }
            QCOMPARE(drawnWidth(g, uint32_t(p)), double(sizes[i]) * pxPerByte);
        }
        QCOMPARE(g.groups()[0].rowCount, lastRows.back() + 1);
    }

    void scaleIsOneForTheWholeView()
    {
        // A 2 MiB small-pool segment is a tenth of a 20 MiB one, in every group, at any zoom.
        const ByteCount mib = ByteCount(1) << 20;
        const ReplayState state = makeState({
            { 2 * mib },
            { 20 * mib },
            { 2 * mib, 7 },
            { 20 * mib, 7 },
            { 20 * mib, 0, { 1, 0 } },
            { 200 * mib, 7 },
        });
        for (double zoom : { 1.0, 3.0, 40.0 }) {
            const double fit = SegmentMapGeometry::fitScale(state, nullptr, { 0, 7 }, testMetrics(), 900, 500);
            SegmentMapGeometry g;
            g.layout(state, nullptr, { 0, 7 }, testMetrics(), 900, fit * zoom);
            QCOMPARE(g.groups().size(), size_t(3));
            for (uint32_t i = 0; i < state.segments.size(); ++i) {
                const int32_t p = g.placementOf(i);
                QVERIFY(p >= 0);
                QVERIFY(qFuzzyCompare(drawnWidth(g, uint32_t(p)), double(state.segments[i].totalSize) * g.pxPerByte()));
            }
            QVERIFY(qFuzzyCompare(drawnWidth(g, uint32_t(g.placementOf(0))) * 10,
                                  drawnWidth(g, uint32_t(g.placementOf(1)))));
            QVERIFY(
                qFuzzyCompare(drawnWidth(g, uint32_t(g.placementOf(1))), drawnWidth(g, uint32_t(g.placementOf(4)))));
        }
    }

    void groupsAreOrdered()
    {
        // Groups: device, then pool, then stream in the given order (PyTorch's stream numbers), unknown streams last.
        const ReplayState state = makeState({
            { 100, 5 }, // device 0, pool (0,0), stream 5
            { 100, 0, { 1, 0 } }, // pool (1,0)
            { 100, 0, { 0, 0 }, 1 }, // device 1
            { 100, 7 },
            { 200, 0 },
            { 100, 0 },
            { 100, 9 }, // not in streamOrder
            { 100, 0, { 0, 1 } },
        });
        SegmentMapGeometry g;
        g.layout(state, nullptr, { 0, 7, 5 }, testMetrics(), 500, 1.0);
        struct Key {
            int device;
            std::pair<int64_t, int64_t> pool;
            int64_t stream;
            int segments;
        };
        const std::vector<Key> expected = {
            { 0, { 0, 0 }, 0, 2 }, { 0, { 0, 0 }, 7, 1 }, { 0, { 0, 0 }, 5, 1 }, { 0, { 0, 0 }, 9, 1 },
            { 0, { 0, 1 }, 0, 1 }, { 0, { 1, 0 }, 0, 1 }, { 1, { 0, 0 }, 0, 1 },
        };
        QCOMPARE(g.groups().size(), expected.size());
        double previousBottom = 0;
        for (size_t i = 0; i < expected.size(); ++i) {
            const auto& group = g.groups()[i];
            QCOMPARE(group.device, expected[i].device);
            QCOMPARE(group.pool, expected[i].pool);
            QCOMPARE(group.stream, expected[i].stream);
            QCOMPARE(int(group.placementCount), expected[i].segments);
            QVERIFY(group.top > previousBottom);
            QCOMPARE(group.rowsTop, group.top + testMetrics().headerHeight);
            previousBottom = group.bottom;
            ByteCount reserved = 0;
            for (uint32_t k = group.firstPlacement; k < group.firstPlacement + group.placementCount; ++k) {
                const ReplaySegment& s = state.segments[g.placements()[k].segment];
                QCOMPARE(g.placements()[k].group, uint32_t(i));
                QCOMPARE(s.stream, group.stream);
                reserved += s.totalSize;
            }
            QCOMPARE(group.reserved, reserved);
        }
        // Within a group: by size, then address (MemoryViz.js).
        const auto& first = g.groups()[0];
        QCOMPARE(state.segments[g.placements()[first.firstPlacement].segment].totalSize, ByteCount(100));
        QCOMPARE(state.segments[g.placements()[first.firstPlacement + 1].segment].totalSize, ByteCount(200));
        QCOMPARE(g.contentHeight(), g.groups().back().bottom + testMetrics().margin);
    }

    void filterHidesSegments()
    {
        const ReplayState state = makeState({ { 100, 0 }, { 100, 7 }, { 100, 7 }, { 100, 0, { 1, 0 } } });
        SegmentMapGeometry g;
        g.layout(
            state, [](const ReplaySegment& s) { return s.stream != 7; }, {}, testMetrics(), 500, 1.0);
        QCOMPARE(g.placements().size(), size_t(2));
        QCOMPARE(g.placementOf(1), -1);
        QCOMPARE(g.placementOf(2), -1);
        QCOMPARE(g.drawnBlockCount(), size_t(2));
    }

    void hitTest_data()
    {
        QTest::addColumn<QPointF>("point");
        QTest::addColumn<int>("part");
        QTest::addColumn<int>("segment");
        QTest::addColumn<int>("block");

        // Segment 1 (50 B, free) comes first (smaller segments first) on row 0 at x 10..60; segment 0 (100 B) does
        // not fit after it and fills row 1: [0,40) allocated (30 requested), [40,60) free, [60,100) pending free.
        // Group top 10, header 20: rows at y 30 and 64 (pitch 18 + 13 + 3), bars 18 px high.
        const int bar = int(Hit::Part::Bar), none = int(Hit::Part::None);
        QTest::newRow("first block of the large segment") << QPointF(15, 69) << bar << 0 << 0;
        QTest::newRow("rounding tail belongs to its block") << QPointF(10 + 35, 75) << bar << 0 << 0;
        QTest::newRow("free gap") << QPointF(10 + 45, 75) << bar << 0 << 1;
        QTest::newRow("pending-free block") << QPointF(10 + 90, 75) << bar << 0 << 2;
        QTest::newRow("last pixel of the row") << QPointF(109.5, 64 + 17.9) << bar << 0 << 2;
        QTest::newRow("smaller segment first, on row 0") << QPointF(20, 35) << bar << 1 << 3;
        QTest::newRow("top-left pixel of the first bar") << QPointF(10, 30) << bar << 1 << 3;
        QTest::newRow("right of the small segment") << QPointF(80, 35) << none << -1 << -1;
        QTest::newRow("group header") << QPointF(20, 15) << int(Hit::Part::Header) << -1 << -1;
        QTest::newRow("caption under a segment") << QPointF(20, 64 + 18 + 5) << int(Hit::Part::Caption) << 0 << -1;
        QTest::newRow("gap between rows") << QPointF(20, 30 + 18 + 13 + 1) << none << -1 << -1;
        QTest::newRow("left margin") << QPointF(5, 70) << none << -1 << -1;
        QTest::newRow("right margin") << QPointF(115, 70) << none << -1 << -1;
        QTest::newRow("above the first group") << QPointF(20, 5) << none << -1 << -1;
        QTest::newRow("below everything") << QPointF(20, 500) << none << -1 << -1;
    }

    void hitTest()
    {
        QFETCH(QPointF, point);
        QFETCH(int, part);
        QFETCH(int, segment);
        QFETCH(int, block);

        const ReplayState state = makeState({
            { 100,
              0,
              { 0, 0 },
              0,
              { { 40, BlockState::ActiveAllocated, 30 }, { 20 }, { 40, BlockState::ActivePendingFree, 40 } } },
            { 50 },
        });
        SegmentMapGeometry g;
        g.layout(state, nullptr, {}, testMetrics(), 120, 1.0);
        const Hit hit = g.hitTest(point);
        QCOMPARE(int(hit.part), part);
        QCOMPARE(hit.segment, segment);
        QCOMPARE(hit.block, block);

        // Panning moves everything up by the pan.
        g.setPan(30, 40);
        QCOMPARE(g.pan(), 30.0);
        const Hit panned = g.hitTest(point - QPointF(0, 30));
        QCOMPARE(int(panned.part), part);
        QCOMPARE(panned.block, block);
    }

    void bytePixelRoundTrip_data()
    {
        QTest::addColumn<double>("pxPerByte");
        QTest::addColumn<int>("rangeRows"); // rows that bytes [2500, 77500) of the large segment touch
        QTest::newRow("whole segment in one row") << 0.001 << 1;
        QTest::newRow("segment wraps over many rows") << 0.05 << 8; // 5000 px in rows of 500: px 125..3875
    }

    void bytePixelRoundTrip()
    {
        QFETCH(double, pxPerByte);
        QFETCH(int, rangeRows);
        std::vector<BlockSpec> blocks;
        for (int i = 0; i < 100; ++i)
            blocks.push_back({ 1000, i % 3 ? BlockState::ActiveAllocated : BlockState::Inactive, 900 });
        const ReplayState state = makeState({ { 1000, 0, {}, 0, { { 1000 } } }, { 100000, 0, {}, 0, blocks } });
        SegmentMapGeometry g;
        g.layout(state, nullptr, {}, testMetrics(), 520, pxPerByte);
        for (double offset = 500; offset < 100000; offset += 997) {
            const Hit hit = g.hitTest(pointAt(g, 1, offset));
            QCOMPARE(int(hit.part), int(Hit::Part::Bar));
            QCOMPARE(hit.segment, 1);
            QVERIFY2(std::abs(hit.offset - offset) < 1e-6 / pxPerByte + 1e-6, qPrintable(QString::number(hit.offset)));
            QCOMPARE(hit.block, int(1 + offset / 1000));
        }
        // A bar rectangle per row the range touches, together as wide as the range.
        double width = 0;
        int rects = 0;
        g.forEachBarRect(uint32_t(g.placementOf(1)), 2500, 77500, 1e9, [&](QRectF r) {
            width += r.width();
            ++rects;
        });
        QVERIFY(qFuzzyCompare(width, 75000 * pxPerByte));
        QCOMPARE(rects, rangeRows);
    }

    void fitScale_data()
    {
        QTest::addColumn<QList<qint64>>("sizes");
        QTest::addColumn<double>("height");
        QTest::addColumn<bool>("largestFillsRow"); // else the fit is tight

        QTest::newRow("one segment wraps to fill the height") << QList<qint64> { 340 << 20 } << 500.0 << false;
        QTest::newRow("a few segments") << QList<qint64> { 2 << 20, 20 << 20, 20 << 20 } << 500.0 << false;
        QList<qint64> many;
        for (int i = 0; i < 500; ++i)
            many << (qint64(2 + i % 100) << 20);
        QTest::newRow("many segments") << many << 500.0 << false;
        QTest::newRow("many segments in a short view") << many << 120.0 << false;
        // Three rows of 884 px: filling them would wrap the 1000-byte segments by a sliver (1.24x the scale at
        // which they fill a row), so they fill a row each.
        QTest::newRow("largest just too wide: it fills a row instead")
            << QList<qint64> { 1000, 1000, 400 } << 10 + 20 + 3 * 34 + 10.0 << true;
    }

    void fitScale()
    {
        QFETCH(QList<qint64>, sizes);
        QFETCH(double, height);
        QFETCH(bool, largestFillsRow);
        std::vector<SegmentSpec> specs;
        for (qint64 s : sizes)
            specs.push_back({ s });
        const ReplayState state = makeState(specs);
        const double k = SegmentMapGeometry::fitScale(state, nullptr, {}, testMetrics(), 900, height);
        SegmentMapGeometry g;
        g.layout(state, nullptr, {}, testMetrics(), 900, k);
        QVERIFY2(g.contentHeight() <= height, qPrintable(QString::number(g.contentHeight())));
        const qint64 largest = *std::max_element(sizes.begin(), sizes.end());
        if (largestFillsRow) {
            QVERIFY(qFuzzyCompare(double(largest) * k, g.contentWidth()));
        } else {
            // Tight: 5% more would not fit.
            SegmentMapGeometry larger;
            larger.layout(state, nullptr, {}, testMetrics(), 900, k * 1.05);
            QVERIFY2(larger.contentHeight() > height, qPrintable(QString::number(larger.contentHeight())));
        }
        // Capped where asked.
        QVERIFY(SegmentMapGeometry::fitScale(state, nullptr, {}, testMetrics(), 900, height, k / 3) <= k / 3);
    }

    void segmentFigures()
    {
        const ReplayState state = makeState({ { 100,
                                                0,
                                                {},
                                                0,
                                                { { 10 },
                                                  { 40, BlockState::ActiveAllocated, 30 },
                                                  { 20 },
                                                  { 30, BlockState::ActivePendingFree, 30 } } } });
        SegmentMapGeometry g;
        g.layout(state, nullptr, {}, testMetrics(), 120, 1.0);
        const auto& st = g.stats(0);
        QCOMPARE(st.freeBytes, ByteCount(30));
        QCOMPARE(st.largestGap, ByteCount(20));
        QCOMPARE(st.gapCount, 2u);
        QCOMPARE(st.activeBytes, ByteCount(70));
        QCOMPARE(st.requestedBytes, ByteCount(60));
        QCOMPARE(st.roundingWaste(), ByteCount(10));
        // MemoryViz.js: internal_free / (size - Σ requested) = 10 / 40.
        QCOMPARE(st.internalPercent(100), 25.0);
        QCOMPARE(g.groups()[0].freeBytes, ByteCount(30));
    }

    // ---- the view on real snapshots ------------------------------------------------------------------------------

    void drawsTheReplayState_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<double>("fraction"); // of the trace
        for (const char* file : { "transformer_train.pickle", "multistream.pickle", "expandable_segments.pickle" }) {
            for (double f : { 0.0, 0.1, 0.25, 0.5, 0.77, 1.0 })
                QTest::addRow("%s at %d%%", file, int(f * 100)) << QString::fromLatin1(file) << f;
        }
    }

    void drawsTheReplayState()
    {
        QFETCH(QString, file);
        QFETCH(double, fraction);
        Session* s = session(file.toStdString());
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1000, 600);
        const int64_t cursor = int64_t(double(s->entryCount()) * fraction);
        s->setCursor(cursor);
        const ReplayState expected = s->replay().stateAt(cursor); // independently of the Session's cache
        const SegmentMapGeometry& g = view.geometry();
        const ReplayState& drawn = *g.state();
        QCOMPARE(drawn.index, cursor);
        QCOMPARE(g.placements().size(), expected.segments.size());
        QCOMPARE(g.drawnBlockCount(), expected.blocks.size());
        // Every block of the replayed state is where the map says: hit testing its middle finds it.
        for (const ReplayBlock& b : expected.blocks) {
            const int seg = segmentHolding(drawn, b.address);
            QVERIFY(seg >= 0);
            const double middle = double(b.address - drawn.segments[size_t(seg)].address) + double(b.size) / 2;
            const Hit hit = g.hitTest(pointAt(g, uint32_t(seg), middle));
            QCOMPARE(hit.segment, seg);
            QVERIFY(hit.block >= 0);
            const ReplayBlock& found = drawn.blocks[size_t(hit.block)];
            QCOMPARE(found.address, b.address);
            QCOMPARE(found.size, b.size);
            QCOMPARE(int(found.state), int(b.state));
            QCOMPARE(raw(found.allocation), raw(b.allocation));
        }
    }

    void wrappedBlockLabelledOnce()
    {
        // expandable_scripted's 1.4 GiB segment wraps over many rows at this size, with blocks crossing row ends:
        // each block gets one label at most (before, a block crossing a row end was labelled on both rows).
        Session* s = session(memscope::test::dataPath("corpus/expandable_scripted.pickle"));
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1400, 800);
        view.show();
        QVERIFY(!view.grab().isNull());
        const std::vector<int32_t> labelled = view.labelledBlocks();
        QVERIFY(labelled.size() > 10);
        std::set<int32_t> distinct(labelled.begin(), labelled.end());
        QCOMPARE(distinct.size(), labelled.size());
        // And blocks do cross row ends in this picture: some block's pieces lie on two rows.
        const SegmentMapGeometry& g = view.geometry();
        bool wraps = false;
        for (const auto& p : g.placements())
            wraps = wraps || p.lastRow > p.firstRow;
        QVERIFY2(wraps, "no segment wraps: the test shows nothing");
    }

    void hoverSetsHovered()
    {
        Session* s = session("transformer_train.pickle");
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1000, 600);
        view.show();
        const SegmentMapGeometry& g = view.geometry();
        const ReplayState& state = *g.state();
        const int b = largestActiveBlock(state);
        QVERIFY(b >= 0);
        const ReplayBlock& block = state.blocks[size_t(b)];
        const int seg = segmentHolding(state, block.address);
        const QPointF p
            = pointAt(g, uint32_t(seg), double(block.address - state.segments[size_t(seg)].address + block.size / 2));

        QSignalSpy spy(s, &Session::hoveredChanged);
        sendMouseMove(view, p);
        QCOMPARE(raw(s->hovered()), raw(block.allocation));
        QCOMPARE(spy.size(), 1);
        const QString description = s->describeAllocation(s->hovered());
        const QString stack = s->stackText(block.stack);
        QVERIFY(!stack.trimmed().isEmpty());
        QVERIFY2(description.contains(stack), qPrintable(description));
        // The tooltip names the allocation and its segment's figures.
        const QString tip = view.toolTipAt(p);
        QVERIFY2(tip.contains(s->allocationName(block.allocation)), qPrintable(tip));
        QVERIFY2(tip.contains(QStringLiteral("largest gap")), qPrintable(tip));

        // Over a free gap: no allocation, but the tooltip tells the gap and its segment.
        int gap = -1;
        for (size_t i = 0; i < state.blocks.size(); ++i) {
            if (state.blocks[i].state == BlockState::Inactive
                && (gap < 0 || state.blocks[i].size > state.blocks[size_t(gap)].size))
                gap = int(i);
        }
        QVERIFY(gap >= 0);
        const ReplayBlock& free = state.blocks[size_t(gap)];
        const int freeSeg = segmentHolding(state, free.address);
        const QPointF q = pointAt(g, uint32_t(freeSeg),
                                  double(free.address - state.segments[size_t(freeSeg)].address + free.size / 2));
        sendMouseMove(view, q);
        QCOMPARE(raw(s->hovered()), raw(NoAllocation));
        const QString gapTip = view.toolTipAt(q);
        QVERIFY2(gapTip.contains(QStringLiteral("free gap")), qPrintable(gapTip));
        QVERIFY2(gapTip.contains(QString::number(quint64(state.segments[size_t(freeSeg)].address), 16)),
                 qPrintable(gapTip));
        QVERIFY2(gapTip.contains(QStringLiteral("pool (0, 0)")), qPrintable(gapTip));

        // Leaving clears the hover this view set.
        sendMouseMove(view, p);
        QEvent leave(QEvent::Leave);
        QApplication::sendEvent(&view, &leave);
        QCOMPARE(raw(s->hovered()), raw(NoAllocation));
    }

    void clickSelectsAndOutlines()
    {
        Session* s = session("transformer_train.pickle");
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1000, 600);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const SegmentMapGeometry& g = view.geometry();
        const ReplayState& state = *g.state();
        const int b = largestActiveBlock(state);
        const ReplayBlock& block = state.blocks[size_t(b)];
        const int seg = segmentHolding(state, block.address);
        const double begin = double(block.address - state.segments[size_t(seg)].address);
        const QPointF p = pointAt(g, uint32_t(seg), begin + double(block.size) / 2);

        QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, p.toPoint());
        QCOMPARE(raw(s->selection()), raw(block.allocation));

        // The outline is drawn in the selection colour on the block's first pixel column.
        const QImage image = view.grab().toImage();
        const QPointF start = g.position(uint32_t(g.placementOf(uint32_t(seg))), begin);
        const QColor selection = memscope::app::colors::selection(view.palette());
        QCOMPARE(QColor(image.pixel(int(std::ceil(start.x())), int(p.y()))).rgb(), selection.rgb());

        // Selected from elsewhere: the outline follows.
        s->setSelection(NoAllocation);
        const QImage cleared = view.grab().toImage();
        QVERIFY(QColor(cleared.pixel(int(std::ceil(start.x())), int(p.y()))).rgb() != selection.rgb());

        // A click on a header clears the selection.
        s->setSelection(block.allocation);
        QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, QPoint(20, int(g.groups()[0].top - g.pan() + 5)));
        QCOMPARE(raw(s->selection()), raw(NoAllocation));
    }

    void filtersHideSegments_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("byPool"); // else by stream
        QTest::newRow("multistream, each stream hidden") << QStringLiteral("multistream.pickle") << false;
        QTest::newRow("cudagraph, each stream hidden") << QStringLiteral("cudagraph.pickle") << false;
        QTest::newRow("cudagraph, each pool hidden") << QStringLiteral("cudagraph.pickle") << true;
    }

    void filtersHideSegments()
    {
        QFETCH(QString, file);
        QFETCH(bool, byPool);
        Session* s = session(file.toStdString());
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1000, 600);
        const size_t all = view.geometry().placements().size();
        const ReplayState& state = s->state();
        auto hiddenIs = [&](const ReplaySegment& seg, int64_t stream, std::pair<int64_t, int64_t> pool) {
            return byPool ? seg.poolId == pool : seg.stream == stream;
        };
        const auto streams = s->streams();
        const auto pools = s->pools();
        const size_t n = byPool ? pools.size() : streams.size();
        QVERIFY(n >= 2);
        for (size_t i = 0; i < n; ++i) {
            const int64_t stream = byPool ? 0 : streams[i];
            const auto pool = byPool ? pools[i] : std::pair<int64_t, int64_t> {};
            if (byPool)
                s->setPoolVisible(pool, false);
            else
                s->setStreamVisible(stream, false);
            const SegmentMapGeometry& g = view.geometry();
            size_t hidden = 0, hiddenBlocks = 0;
            for (const ReplaySegment& seg : state.segments) {
                if (hiddenIs(seg, stream, pool)) {
                    ++hidden;
                    hiddenBlocks += seg.blockCount;
                }
            }
            QCOMPARE(g.placements().size(), all - hidden);
            for (const auto& p : g.placements())
                QVERIFY(!hiddenIs(state.segments[p.segment], stream, pool));
            size_t blocks = 0;
            for (const ReplaySegment& seg : state.segments)
                blocks += seg.blockCount;
            QCOMPARE(g.drawnBlockCount(), blocks - hiddenBlocks);
            if (byPool)
                s->setPoolVisible(pool, true);
            else
                s->setStreamVisible(stream, true);
            QCOMPARE(view.geometry().placements().size(), all);
        }
    }

    void wheelZoomsAroundThePointer()
    {
        Session* s = session("transformer_train.pickle");
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1000, 600);
        view.show();
        const double fit = view.geometry().pxPerByte();
        const ReplayState& state = s->state();
        const int b = largestActiveBlock(state);
        const ReplayBlock& block = state.blocks[size_t(b)];
        const int seg = segmentHolding(state, block.address);
        const double offset = double(block.address - state.segments[size_t(seg)].address) + double(block.size) / 3;
        const QPointF p = pointAt(view.geometry(), uint32_t(seg), offset);

        QSignalSpy spy(&view, &SegmentMapView::zoomChanged);
        for (int i = 0; i < 8; ++i)
            sendWheel(view, p, 120);
        QCOMPARE(spy.size(), 8);
        QVERIFY(view.zoom() > 3.9 && view.zoom() < 4.1);
        QVERIFY(qFuzzyCompare(view.geometry().pxPerByte(), fit * view.zoom()));
        // The byte under the pointer is still on the row under the pointer.
        const SegmentMapGeometry& g = view.geometry();
        const QPointF now = g.position(uint32_t(g.placementOf(uint32_t(seg))), offset);
        const Hit hit = g.hitTest(QPointF(now.x(), p.y()));
        QCOMPARE(hit.segment, seg);
        QCOMPARE(hit.block, b);

        // Dragging pans (and selects nothing).
        const double panBefore = view.pan();
        QVERIFY(g.maxPan(view.height()) > 0);
        QTest::mousePress(&view, Qt::LeftButton, Qt::NoModifier, QPoint(300, 400));
        QMouseEvent move(QEvent::MouseMove, QPointF(300, 300), view.mapToGlobal(QPointF(300, 300)), Qt::NoButton,
                         Qt::LeftButton, Qt::NoModifier);
        QApplication::sendEvent(&view, &move);
        QTest::mouseRelease(&view, Qt::LeftButton, Qt::NoModifier, QPoint(300, 300));
        QCOMPARE(view.pan(), std::min(panBefore + 100, g.maxPan(view.height())));
        QCOMPARE(raw(s->selection()), raw(NoAllocation));

        // Zooming out never goes below the fit; a double click resets.
        for (int i = 0; i < 40; ++i)
            sendWheel(view, p, -120);
        QCOMPARE(view.zoom(), 1.0);
        view.setZoom(10);
        QTest::mouseDClick(&view, Qt::LeftButton, Qt::NoModifier, QPoint(10, 10));
        QCOMPARE(view.zoom(), 1.0);
        QCOMPARE(view.pan(), 0.0);
        QCOMPARE(view.geometry().pxPerByte(), fit);
    }

    void zoomIsBounded()
    {
        Session* s = session("scripted_allocs.pickle");
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1000, 600);
        view.setZoom(1e12);
        QCOMPARE(view.zoom(), view.maxZoom());
        // 16 bytes per pixel at most, and the layout stays O(segments) however many rows that makes.
        QVERIFY(qFuzzyCompare(view.geometry().pxPerByte(), 1.0 / 16));
        QCOMPARE(view.geometry().placements().size(), s->state().segments.size());
        QVERIFY(view.geometry().groups()[0].rowCount > 100000);
        QVERIFY(!view.grab().isNull());
        view.setPan(1e12);
        QCOMPARE(view.pan(), view.geometry().maxPan(view.height()));
        QVERIFY(!view.grab().isNull());
    }

    void screenshots_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("mid");
        QTest::addColumn<SegmentMapView::ColorMode>("mode");
        for (const std::string& file : allSnapshots()) {
            for (bool mid : { false, true }) {
                for (auto mode : { SegmentMapView::ColorMode::Allocation, SegmentMapView::ColorMode::Stack,
                                   SegmentMapView::ColorMode::Stream }) {
                    QTest::addRow("%s %s by %s", file.c_str(), mid ? "mid" : "end", modeName(mode))
                        << QString::fromStdString(file) << mid << mode;
                }
            }
        }
    }

    void screenshots()
    {
        QFETCH(QString, file);
        QFETCH(bool, mid);
        QFETCH(SegmentMapView::ColorMode, mode);
        Session* s = session(file.toStdString());
        QVERIFY(s);
        if (mid)
            s->setCursor(s->entryCount() / 2);
        SegmentMapView view(s);
        view.setColorMode(mode);
        QString name = file;
        name.replace(QStringLiteral(".pickle"), QString()).replace(QStringLiteral(".xz"), QString());
        name = QStringLiteral("segmentmap_%1_%2_%3")
                   .arg(name, mid ? QStringLiteral("mid") : QStringLiteral("end"), QLatin1String(modeName(mode)));
        QVERIFY(memscope::test::saveScreenshot(view, name, QSize(1200, 700)));
        const QImage image = view.grab().toImage();
        const auto [ink, colours] = inkAndColours(image);
        // Headers, segments and blocks: a good part of the picture, in several colours.
        QVERIFY2(ink > image.width() * image.height() / 100, qPrintable(QString::number(ink)));
        QVERIFY2(colours >= 4, qPrintable(QString::number(colours)));
        QVERIFY(!view.geometry().placements().empty());
    }

    void darkPalette()
    {
        Session* s = session("multistream.pickle");
        QVERIFY(s);
        SegmentMapView view(s);
        QPalette dark;
        dark.setColor(QPalette::Base, QColor(0x1e, 0x1e, 0x1e));
        dark.setColor(QPalette::Window, QColor(0x2b, 0x2b, 0x2b));
        dark.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
        dark.setColor(QPalette::WindowText, QColor(0xe0, 0xe0, 0xe0));
        dark.setColor(QPalette::Highlight, QColor(0x3d, 0xae, 0xe9));
        view.setPalette(dark);
        s->setSelection(s->state().blocks[size_t(largestActiveBlock(s->state()))].allocation);
        QVERIFY(memscope::test::saveScreenshot(view, QStringLiteral("segmentmap_multistream_dark"), QSize(1000, 500)));
        const QImage image = view.grab().toImage();
        QVERIFY(qGray(image.pixel(2, 2)) < 60);
        // Free space is lighter than the background and darker than the text.
        const QColor free = memscope::app::colors::freeSpace(dark);
        QVERIFY(free.lightness() > dark.color(QPalette::Base).lightness());
        QVERIFY(free.lightness() < dark.color(QPalette::Text).lightness());
    }

    void zoomedScreenshots()
    {
        Session* s = session("transformer_train.pickle");
        QVERIFY(s);
        s->setCursor(s->entryCount() * 3 / 4);
        SegmentMapView view(s);
        view.resize(1200, 700);
        view.setZoom(8);
        QVERIFY(memscope::test::saveScreenshot(view, QStringLiteral("segmentmap_transformer_train_zoom8")));
    }

    void pendingFreeIsHatched()
    {
        // multistream.pickle frees blocks still used by a side stream (record_stream): find a moment with one.
        Session* s = session("multistream.pickle");
        QVERIFY(s);
        int64_t when = -1;
        for (const Allocation& a : s->replay().allocations()) {
            if (a.freeRequestedIndex >= 0 && a.freeRequestedIndex < a.freeCompletedIndex) {
                when = a.freeRequestedIndex + 1;
                break;
            }
        }
        QVERIFY(when > 0);
        s->setCursor(when);
        SegmentMapView view(s);
        QVERIFY(memscope::test::saveScreenshot(view, QStringLiteral("segmentmap_multistream_pending_free")));
        const SegmentMapGeometry& g = view.geometry();
        const ReplayState& state = *g.state();
        int pending = -1;
        for (size_t i = 0; i < state.blocks.size(); ++i) {
            if (state.blocks[i].state == BlockState::ActivePendingFree)
                pending = int(i);
        }
        QVERIFY(pending >= 0);
        const ReplayBlock& b = state.blocks[size_t(pending)];
        const int seg = segmentHolding(state, b.address);
        const double begin = double(b.address - state.segments[size_t(seg)].address);
        // Red with darker hatching: both colours inside the block's body.
        const QImage image = view.grab().toImage();
        const QPointF a = pointAt(g, uint32_t(seg), begin);
        const QPointF e = pointAt(g, uint32_t(seg), begin + double(b.requestedSize));
        QVERIFY(std::abs(a.y() - e.y()) < 1e-9); // one row
        std::set<QRgb> seen;
        for (int x = int(a.x()) + 3; x < int(e.x()) - 3; ++x)
            seen.insert(image.pixel(x, int(a.y())));
        QVERIFY(seen.count(memscope::app::colors::pendingFree().rgb()));
        QVERIFY(seen.count(memscope::app::colors::pendingFree().darker(160).rgb()));
        const QString tip = view.toolTipAt(QPointF((a.x() + e.x()) / 2, a.y()));
        QVERIFY2(tip.contains(QStringLiteral("pending free")), qPrintable(tip));
    }

    // A throwaway measurement for the report, never an assertion: layout and paint of big_trace at 1920x1080.
    void paintTiming()
    {
        Session* s = session("big_trace.pickle.xz");
        QVERIFY(s);
        SegmentMapView view(s);
        view.resize(1920, 1080);
        view.show();
        (void)view.grab(); // warm up (fit on the peak state, fonts)
        QElapsedTimer t;
        const int rounds = 20;
        qint64 layoutNs = 0, paintNs = 0, blitNs = 0;
        for (int i = 0; i < rounds; ++i) {
            s->setCursor(s->entryCount() - i * 997);
            t.start();
            (void)view.geometry();
            layoutNs += t.nsecsElapsed();
            view.setColorMode(i % 2 ? SegmentMapView::ColorMode::Stack : SegmentMapView::ColorMode::Allocation);
            t.start();
            (void)view.grab();
            paintNs += t.nsecsElapsed();
            s->setHovered(s->state().blocks[size_t(i * 7 % s->state().blocks.size())].allocation);
            t.start();
            (void)view.grab();
            blitNs += t.nsecsElapsed();
        }
        qInfo(
            "big_trace 1920x1080: %zu segments, %zu blocks: layout %.2f ms, full paint %.2f ms, hover repaint %.2f ms",
            view.geometry().placements().size(), view.geometry().drawnBlockCount(), layoutNs / 1e6 / rounds,
            paintNs / 1e6 / rounds, blitNs / 1e6 / rounds);
        view.setZoom(50);
        t.start();
        for (int i = 0; i < rounds; ++i) {
            view.setPan(i * 1000.0);
            (void)view.grab();
        }
        qInfo("big_trace 1920x1080 at zoom 50 (%lld rows): pan + paint %.2f ms",
              qlonglong(view.geometry().groups()[0].rowCount), t.nsecsElapsed() / 1e6 / rounds);

        // The live state the README measures for 10 M entries: ~45 k blocks (600 segments of 76 blocks, every other
        // one free), as a snapshot without a trace.
        auto snapshot = std::make_shared<Snapshot>();
        const ByteCount blockSize = ByteCount(256) << 10;
        for (int seg = 0; seg < 600; ++seg) {
            Segment segment;
            segment.address = DeviceAddr(0x7f0000000000) + DeviceAddr(seg) * (ByteCount(64) << 20);
            segment.totalSize = 76 * blockSize;
            segment.blockBegin = uint32_t(snapshot->blocks.size());
            segment.blockCount = 76;
            for (int b = 0; b < 76; ++b) {
                Block block;
                block.address = segment.address + b * blockSize;
                block.size = blockSize;
                block.requestedSize = blockSize - 1000;
                block.state = b % 2 ? BlockState::Inactive : BlockState::ActiveAllocated;
                snapshot->blocks.push_back(block);
            }
            snapshot->segments.push_back(segment);
        }
        snapshot->streams = { 0 };
        Session synthetic(memscope::app::makeDocument(QStringLiteral("synthetic"), snapshot));
        SegmentMapView big(&synthetic);
        big.resize(1920, 1080);
        big.show();
        (void)big.grab();
        t.start();
        for (int i = 0; i < rounds; ++i) {
            big.setColorMode(i % 2 ? SegmentMapView::ColorMode::Stack : SegmentMapView::ColorMode::Allocation);
            (void)big.grab();
        }
        qInfo("synthetic 1920x1080: %zu segments, %zu blocks: full paint %.2f ms", big.geometry().placements().size(),
              big.geometry().drawnBlockCount(), t.nsecsElapsed() / 1e6 / rounds);
    }
};

QTEST_MAIN(TestSegmentMap)
#include "tst_segmentmap.moc"
