// The memory timeline without its widget: TimelineRenderer paints data built by buildTimelineData into a QImage, and
// the pixels are checked against the data (an allocation's colour where it is stacked at a state, the cursor line,
// the "building" state without data); the view's background builds: changes made while a build is under way end
// with the newest data, the superseded results are never shown; and the plot's background renders: a paint while one
// is under way does not wait and shows the previous plot moved onto the new range, the job's plot replaces it, a
// superseded job's plot is never shown, hit testing meanwhile answers for the plot shown, finishTimelineBuilds waits
// for the render; the time axis comes with the data. The renderers' thread pool is held busy (PoolBlocker) where a
// render must stay under way. Runs offscreen on the GUI thread.
#include "apptestutil.h"
#include "style/colors.h"
#include "views/timelinedata.h"
#include "views/timelinerenderer.h"
#include "views/timelineview.h"

#include <QFontMetrics>
#include <QImage>
#include <QMouseEvent>
#include <QPainter>
#include <QSignalSpy>
#include <QDir>
#include <QTest>
#include <QThreadPool>

#include <algorithm>

using namespace memscope;
using namespace memscope::app;
using model::ByteCount;
using model::TimelineItem;

namespace {

// A light palette of known colours, so that pixels can be compared with it.
QPalette knownPalette()
{
    QPalette p;
    p.setColor(QPalette::Window, QColor(0xf0, 0xf0, 0xf0));
    p.setColor(QPalette::Base, QColor(0xff, 0xff, 0xff));
    p.setColor(QPalette::Text, QColor(0x10, 0x10, 0x10));
    p.setColor(QPalette::WindowText, QColor(0x20, 0x20, 0x20));
    p.setColor(QPalette::PlaceholderText, QColor(0x80, 0x80, 0x80));
    p.setColor(QPalette::Mid, QColor(0xa0, 0xa0, 0xa0));
    p.setColor(QPalette::Highlight, QColor(0x30, 0x60, 0xd0));
    return p;
}

// Everything a render needs besides the data, for an image of `size`: the whole index axis in view.
struct Scene {
    StateAxis axis;
    TimelineGeometry geometry;
    TimelineFrame frame;

    Scene(const TimelineData& data, bool segments, QSize size)
    {
        const int64_t entries = data.items(segments).entryCount;
        axis = StateAxis::index(entries);
        frame.font = QFont();
        const QFontMetrics fm(frame.font);
        frame.layout = TimelineLayout::compute(size, fm.height(), fm.horizontalAdvance(QStringLiteral("1023.75 MiB")));
        geometry.rect = QRectF(frame.layout.plot);
        geometry.setDomain(axis.domainBegin(), axis.domainEnd(), std::min<double>(8.0, double(entries + 1)));
        frame.axis = &axis;
        frame.geometry = &geometry;
        frame.bounds = QRect(QPoint(0, 0), size);
        frame.titleRight = size.width() - 8;
        frame.palette = knownPalette();
        frame.device = data.device;
        frame.segments = segments;
    }
};

std::shared_ptr<const TimelineData> build(const Session& session)
{
    return buildTimelineData(makeTimelineDataRequest(session, TimelineDataRequest::Items, nullptr, 1));
}

// The same data without annotations and OOM marks, whose translucent bands would tint the plot's pixels.
std::shared_ptr<const TimelineData> withoutMarks(const std::shared_ptr<const TimelineData>& data)
{
    auto plain = std::make_shared<TimelineData>(*data);
    plain->annotations = std::make_shared<const std::vector<AnnotationSpan>>();
    plain->ooms.clear();
    return plain;
}

// A paint as a widget's: prepare without waiting, then paint.
QImage paintNow(TimelineRenderer& renderer, const TimelineFrame& frame)
{
    QImage image(frame.bounds.size(), QImage::Format_ARGB32_Premultiplied);
    image.fill(Qt::transparent);
    QPainter p(&image);
    p.setFont(frame.font);
    p.setPen(frame.palette.color(QPalette::WindowText));
    renderer.paint(p, frame);
    return image;
}

// Moves the geometry's range as a test row says: "pan N" (N columns to the right, content moving left), "zoom F"
// (F × the span around the middle: < 1 zooms in).
void moveRange(TimelineGeometry& g, const QString& how, int columns)
{
    const QStringList words = how.split(QLatin1Char(' '));
    const double amount = words.value(1).toDouble();
    if (words.value(0) == QLatin1String("pan")) {
        const double step = amount * g.span() / columns;
        g.setRange(g.begin + step, g.end + step);
    } else {
        const double middle = (g.begin + g.end) / 2, half = g.span() * amount / 2;
        g.setRange(middle - half, middle + half);
    }
}

// The item stacked at `bytes` at `state` (items bottom first, in index order, as the stack draws them), or none.
TimelineItem itemAt(const model::TimelineItems& items, int64_t state, ByteCount bytes)
{
    ByteCount offset = 0;
    for (TimelineItem k = 0; k < items.count(); ++k) {
        if (!items.liveAt(k, state))
            continue;
        if (bytes >= offset && bytes < offset + items.size[k])
            return k;
        offset += items.size[k];
    }
    return model::NoTimelineItem;
}

void sendMouseMove(QWidget& widget, QPoint pos)
{
    QMouseEvent move(QEvent::MouseMove, QPointF(pos), widget.mapToGlobal(QPointF(pos)), Qt::NoButton, Qt::NoButton,
                     Qt::NoModifier);
    QApplication::sendEvent(&widget, &move);
}

// A stream other than the first one with segments, or -1.
int64_t sideStream(const Session& session)
{
    const auto streams = session.streams();
    return streams.size() > 1 ? streams.back() : -1;
}

} // namespace

class TestTimelineRenderer : public QObject {
    Q_OBJECT

private Q_SLOTS:
    // A loaded Document carries the timeline items of the device shown first, built beside its replay: every item
    // and order the same as a build from the replay, and the timeline takes them instead of building its own.
    void itemsBuiltBesideTheReplay_data()
    {
        QTest::addColumn<QString>("file");
        const QDir dir(QString::fromStdString(test::snapshotPath("")));
        const QStringList files = dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") });
        QVERIFY(files.size() >= 5); // the shared snapshots
        for (const QString& file : files)
            QTest::newRow(qPrintable(file)) << file;
    }
    void itemsBuiltBesideTheReplay()
    {
        QFETCH(QString, file);
        auto session = test::loadSession(file.toStdString());
        QVERIFY(session);
        const Document& doc = session->document();
        const auto devices = session->devices();
        QVERIFY(!devices.empty());
        QCOMPARE(session->device(), devices.front());
        QCOMPARE(doc.firstItems.device, devices.front());
        QVERIFY(doc.firstItems.allocs && doc.firstItems.pieces);
        const model::Replay& replay = session->replay();
        QVERIFY(*doc.firstItems.allocs == model::TimelineItems::fromAllocations(replay));
        QVERIFY(*doc.firstItems.pieces == model::TimelineItems::fromSegments(replay));
        QCOMPARE(doc.firstItems.allocs->count(), replay.allocations().size());
        const auto data = build(*session);
        QCOMPARE(data->allocs.get(), doc.firstItems.allocs.get());
        QCOMPARE(data->pieces.get(), doc.firstItems.pieces.get());
        // Another device builds its own, from its replay.
        for (int device : devices) {
            if (device == devices.front())
                continue;
            session->setDevice(device);
            const auto other = build(*session);
            QVERIFY(other->allocs.get() != doc.firstItems.allocs.get());
            QVERIFY(*other->allocs == model::TimelineItems::fromAllocations(session->replay()));
            QVERIFY(*other->pieces == model::TimelineItems::fromSegments(session->replay()));
        }
    }

    void rendersAnItemAtItsPlace_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("segments");
        QTest::newRow("mlp_train allocations") << "mlp_train.pickle" << false;
        QTest::newRow("mlp_train segments") << "mlp_train.pickle" << true;
        QTest::newRow("multistream allocations") << "multistream.pickle" << false;
        QTest::newRow("transformer_train allocations") << "transformer_train.pickle" << false;
    }

    // Zoomed to a few states (many pixels each), the largest item live at a state is painted in its own colour at
    // its place in the stack: above the items with a smaller index live then.
    void rendersAnItemAtItsPlace()
    {
        QFETCH(QString, file);
        QFETCH(bool, segments);
        auto session = test::loadSession(file.toStdString());
        QVERIFY(session);
        const auto data = withoutMarks(build(*session));
        const model::TimelineItems& items = data->items(segments);
        Scene scene(*data, segments, QSize(1000, 500));
        const int64_t state = items.entryCount / 2;
        scene.geometry.setRange(double(state - 4), double(state + 6));

        // The brute force: the live items at `state`, bottom first, and the largest one not drawn pending.
        TimelineItem largest = model::NoTimelineItem;
        ByteCount largestOffset = 0, offset = 0;
        for (TimelineItem k = 0; k < items.count(); ++k) {
            if (!items.liveAt(k, state))
                continue;
            const bool pending = state > items.pendingFrom[k];
            if (!pending && (largest == model::NoTimelineItem || items.size[k] > items.size[largest])) {
                largest = k;
                largestOffset = offset;
            }
            offset += items.size[k];
        }
        QVERIFY2(largest != model::NoTimelineItem, "something is live in the middle of the trace");

        TimelineRenderer renderer;
        renderer.setData(data);
        const QImage image = renderer.render(scene.frame);
        QCOMPARE(image.size(), QSize(1000, 500));
        // The column at the middle of the state shows it.
        const QRect plot = scene.frame.layout.plot;
        const int x = int(std::floor(scene.geometry.xAt(double(state) + 0.5)));
        QVERIFY(plot.contains(QPoint(x, plot.center().y())));
        QCOMPARE(renderer.columns().state[size_t(x - plot.left())], state);
        QCOMPARE(renderer.columns().total[size_t(x - plot.left())], offset);
        // The y scale fits the largest total in view.
        QVERIFY(scene.geometry.bytesTop >= double(offset));
        const double top = scene.geometry.yAt(double(largestOffset + items.size[largest]));
        const double bottom = scene.geometry.yAt(double(largestOffset));
        QVERIFY2(bottom - top >= 4, "the largest item is a few rows tall");
        // Its rows, away from its edges: its colour, but for the translucent grid lines (one row each).
        const QRgb colour = data->colors(segments)[largest] | 0xff000000u;
        int own = 0, rows = 0;
        for (int y = int(std::ceil(top)) + 1; y < int(std::floor(bottom)) - 1; ++y, ++rows)
            own += image.pixel(x, y) == colour;
        QVERIFY(rows >= 2);
        QVERIFY2(2 * own >= rows, qPrintable(QStringLiteral("%1 of %2 rows in the item's colour").arg(own).arg(rows)));
        // Above the total: the background.
        const double above = scene.geometry.yAt(double(offset)) - 3;
        if (above > plot.top() + 2)
            QCOMPARE(QColor(image.pixel(x, int(above))), knownPalette().color(QPalette::Base));
    }

    void annotationsBandOrTick_data()
    {
        QTest::addColumn<int>("perPlot"); // annotations across the plot's width
        QTest::newRow("a few: translucent bands") << 8;
        QTest::newRow("one every 8 pixels: bands") << 100;
        QTest::newRow("one every 3 pixels: ticks") << 300;
        QTest::newRow("several per pixel: ticks") << 5000;
    }

    // Annotations wider than 4 pixels on average are translucent bands over the plot; narrower ones are ticks along
    // its bottom edge only, so that the plot stays readable: below the label rows and above the ticks its pixels are
    // those of the same data without annotations.
    void annotationsBandOrTick()
    {
        QFETCH(int, perPlot);
        auto session = test::loadSession("mlp_train.pickle");
        QVERIFY(session);
        // The reference: one annotation at the very end (annotations leave room above the plot for their labels).
        auto plainData = std::const_pointer_cast<TimelineData>(withoutMarks(build(*session)));
        const int64_t entries = plainData->allocs->entryCount;
        AnnotationSpan atEnd;
        atEnd.name = QStringLiteral("end");
        atEnd.begin = atEnd.end = entries;
        plainData->annotations = std::make_shared<const std::vector<AnnotationSpan>>(1, atEnd);
        auto marked = std::make_shared<TimelineData>(*plainData);
        auto spans = std::make_shared<std::vector<AnnotationSpan>>();
        for (int k = 0; k < perPlot; ++k) {
            AnnotationSpan span;
            span.name = QStringLiteral("step_%1").arg(k);
            span.begin = entries * k / perPlot;
            span.end = entries * (k + 1) / perPlot;
            spans->push_back(span);
        }
        marked->annotations = spans;

        Scene scene(*plainData, false, QSize(1000, 400));
        TimelineRenderer plainRenderer, markedRenderer;
        plainRenderer.setData(plainData);
        markedRenderer.setData(marked);
        const QImage plain = plainRenderer.render(scene.frame);
        const QImage image = markedRenderer.render(scene.frame);
        const QRect plot = scene.frame.layout.plot;
        const bool ticks = perPlot > plot.width() / 4;
        const int labelsBottom
            = plot.top() + TimelineRenderer::LabelRows * (QFontMetrics(scene.frame.font).height() + 3) + 4;
        const int ticksTop = plot.bottom() + 1 - 5;
        int differing = 0, pixels = 0;
        for (int y = labelsBottom; y < ticksTop; ++y)
            for (int x = plot.left() + 1; x < plot.right() - 3; ++x, ++pixels)
                differing += image.pixel(x, y) != plain.pixel(x, y);
        int tickRow = 0;
        for (int x = plot.left(); x < plot.right() - 3; ++x)
            tickRow += image.pixel(x, plot.bottom() - 1) != plain.pixel(x, plot.bottom() - 1);
        if (ticks) {
            QCOMPARE(differing, 0);
            QVERIFY2(tickRow >= plot.width() / 8, qPrintable(QStringLiteral("%1 tick columns").arg(tickRow)));
        } else {
            QVERIFY2(differing > pixels / 2,
                     qPrintable(QStringLiteral("%1 of %2 pixels tinted").arg(differing).arg(pixels)));
        }
        // Labels along the top either way: the first range's.
        int top = 0;
        for (int y = plot.top(); y < labelsBottom; ++y)
            for (int x = plot.left(); x < plot.left() + 40; ++x)
                top += image.pixel(x, y) != plain.pixel(x, y);
        QVERIFY(top > 0);
    }

    // The cursor is a line over the whole plot in the cursor colour, at its state's marker; moving it moves the line.
    void drawsTheCursorLine()
    {
        auto session = test::loadSession("mlp_train.pickle");
        QVERIFY(session);
        const auto data = withoutMarks(build(*session));
        Scene scene(*data, false, QSize(900, 400));
        TimelineRenderer renderer;
        renderer.setData(data);
        const QRect plot = scene.frame.layout.plot;
        const QColor cursorColour = colors::cursor(knownPalette());
        auto lineAt = [&](int64_t cursor) {
            return int(std::floor(std::round(scene.geometry.xAt(scene.axis.stateMarker(cursor))) + 0.5));
        };
        const int64_t n = data->allocs->entryCount;
        scene.frame.cursor = n / 3;
        const QImage first = renderer.render(scene.frame);
        QCOMPARE(renderer.paintedCursor(), n / 3);
        const int x1 = lineAt(n / 3);
        for (int y : { plot.top() + 1, plot.center().y(), plot.bottom() - 1 })
            QCOMPARE(QColor(first.pixel(x1, y)), cursorColour);
        // The overview has its tick too.
        const QRect ov = scene.frame.layout.overview;
        const int ox = int(std::floor(
            std::round(TimelineRenderer::overviewX(ov, scene.geometry, scene.axis.stateMarker(n / 3))) + 0.5));
        QCOMPARE(QColor(first.pixel(ox, ov.center().y())), cursorColour);
        // Moved: the old column is the plot's again, the new one the cursor's; the plot is not rendered again.
        const int renders = renderer.renderCount();
        scene.frame.cursor = 2 * n / 3;
        const QImage second = renderer.render(scene.frame);
        QCOMPARE(renderer.renderCount(), renders);
        const int x2 = lineAt(2 * n / 3);
        QVERIFY(x2 > x1 + 3);
        QCOMPARE(QColor(second.pixel(x2, plot.center().y())), cursorColour);
        QVERIFY(QColor(second.pixel(x1, plot.center().y())) != cursorColour);
        // The region a partial update repaints covers the line.
        QVERIFY(renderer.cursorRegion(scene.frame, 2 * n / 3).contains(QPoint(x2, plot.center().y())));
    }

    // Without data (its build under way) the renderer paints the frame of the plot, never a blank image.
    void paintsBuildingWithoutData()
    {
        auto session = test::loadSession("mlp_train.pickle");
        QVERIFY(session);
        const auto data = build(*session);
        Scene scene(*data, false, QSize(700, 300));
        TimelineRenderer renderer;
        const QImage image = renderer.render(scene.frame);
        const QRect plot = scene.frame.layout.plot;
        QCOMPARE(QColor(image.pixel(plot.left() + 3, plot.top() + 3)), knownPalette().color(QPalette::Base));
        QCOMPARE(QColor(image.pixel(2, image.height() - 2)), knownPalette().color(QPalette::Window));
        QCOMPARE(renderer.renderCount(), 0);
        // Data of another device is not painted either.
        renderer.setData(data);
        scene.frame.device = data->device + 1;
        renderer.render(scene.frame);
        QCOMPARE(renderer.renderCount(), 0);
    }

    void newestChangeWins_data()
    {
        QTest::addColumn<QString>("changes");
        QTest::addColumn<bool>("shownFirst");
        QTest::addColumn<bool>("filtered");
        QTest::addColumn<int>("mode");
        // Each while the view's first build (or, shownFirst, a build from data shown) and each other is under way.
        QTest::newRow("hide a stream") << "hide" << false << true << int(ColorMode::Allocation);
        QTest::newRow("hide a stream, show it again") << "hide show" << false << false << int(ColorMode::Allocation);
        QTest::newRow("colour by stack, then hide a stream") << "stack hide" << false << true << int(ColorMode::Stack);
        QTest::newRow("hide a stream, then colour by stream")
            << "hide stream" << false << true << int(ColorMode::Stream);
        QTest::newRow("shown: colour by stack, then hide a stream")
            << "stack hide" << true << true << int(ColorMode::Stack);
        QTest::newRow("shown: hide a stream, colour by stream, show it again")
            << "hide stream show" << true << false << int(ColorMode::Stream);
    }

    // Changes made while builds are under way end with data of every change, and the superseded builds' results
    // are never shown: one new data, whichever build finished first.
    void newestChangeWins()
    {
        QFETCH(QString, changes);
        QFETCH(bool, shownFirst);
        QFETCH(bool, filtered);
        QFETCH(int, mode);
        auto session = test::loadSession("multistream.pickle");
        QVERIFY(session);
        const int64_t side = sideStream(*session);
        QVERIFY2(side >= 0, "multistream has a side stream");
        TimelineView view(session.get());
        QVERIFY(view.isBuilding());
        QVERIFY(!view.data());
        if (shownFirst) {
            view.finishBuild();
            QVERIFY(view.data());
        }
        QSignalSpy shown(&view, &TimelineView::dataChanged);
        for (const QString& change : changes.split(QLatin1Char(' '))) {
            if (change == QLatin1String("hide"))
                session->setStreamVisible(side, false);
            else if (change == QLatin1String("show"))
                session->setStreamVisible(side, true);
            else if (change == QLatin1String("stack"))
                session->setColorMode(ColorMode::Stack);
            else if (change == QLatin1String("stream"))
                session->setColorMode(ColorMode::Stream);
        }
        // Through the event loop, as the app gets it.
        QTRY_VERIFY(!view.isBuilding());
        QThreadPool::globalInstance()->waitForDone(); // every superseded build finished, its result delivered
        QCoreApplication::processEvents();
        QCOMPARE(shown.count(), 1);
        const auto data = view.data();
        QVERIFY(data);
        QCOMPARE(data->filtered(), filtered);
        QCOMPARE(int(data->colorMode), mode);
        // The data is what a build from scratch makes of the Session now.
        const auto fresh = build(*session);
        QCOMPARE(data->allocVisible, fresh->allocVisible);
        QCOMPARE(data->pieceVisible, fresh->pieceVisible);
        QCOMPARE(data->allocColors, fresh->allocColors);
        QCOMPARE(data->pieceColors, fresh->pieceColors);
        // And what the colour mode says of each item: item k is allocation k, piece item k segment piece k.
        const auto& allocations = session->replay().allocations();
        const auto& piecesOf = session->replay().segmentPieces();
        QCOMPARE(data->allocColors.size(), allocations.size());
        QCOMPARE(data->pieceColors.size(), piecesOf.size());
        for (size_t k = 0; k < allocations.size() && ColorMode(mode) != ColorMode::Stream; ++k)
            QCOMPARE(data->allocColors[k],
                     (ColorMode(mode) == ColorMode::Allocation ? colors::allocation(allocations[k].address)
                                                               : colors::stack(allocations[k].stack))
                         .rgb());
        for (size_t k = 0; k < piecesOf.size(); ++k)
            QCOMPARE(data->pieceColors[k],
                     (ColorMode(mode) == ColorMode::Allocation
                          ? colors::allocation(piecesOf[k].address)
                          : ColorMode(mode) == ColorMode::Stack
                          ? colors::stack(piecesOf[k].stack)
                          : colors::stream(session->snapshot().streamNumber(piecesOf[k].stream)))
                         .rgb());
        if (filtered) {
            const auto& pieces = session->replay().segmentPieces();
            for (size_t k = 0; k < pieces.size(); ++k)
                QCOMPARE(bool(data->pieceVisible[k]), pieces[k].stream != side);
        }
    }

    void paintDoesNotWaitForTheRender_data()
    {
        QTest::addColumn<QString>("move");
        QTest::addColumn<bool>("uncovered"); // part of the new range is outside the plot shown
        QTest::newRow("pan right by 100 columns") << "pan 100" << true;
        QTest::newRow("pan left by 37 columns") << "pan -37" << true;
        QTest::newRow("zoom in 2x around the middle") << "zoom 0.5" << false;
        QTest::newRow("zoom out 1.5x around the middle") << "zoom 1.5" << true;
    }

    // A paint after the range changed returns with the render asked for and not done (the pool is held busy, so
    // the job cannot have run): the plot shown is the previous one, moved and stretched onto the new range (each
    // pixel the previous plot's column at that coordinate), the background where it has nothing. Once the job ran,
    // its plot replaces it: the picture is the one a synchronous render makes.
    void paintDoesNotWaitForTheRender()
    {
        QFETCH(QString, move);
        QFETCH(bool, uncovered);
        auto session = test::loadSession("transformer_train.pickle");
        QVERIFY(session);
        const auto data = withoutMarks(build(*session));
        Scene scene(*data, false, QSize(1000, 420));
        const double n = double(data->allocs->entryCount);
        scene.geometry.setRange(n / 4, 3 * n / 4);
        TimelineRenderer renderer;
        renderer.setData(data);
        int ready = 0;
        renderer.setPlotReadyCallback([&] { ++ready; });
        const QImage before = renderer.render(scene.frame);
        const auto [oldBegin, oldEnd] = renderer.plotRange();
        const QRect plot = scene.frame.layout.plot;
        const int columns = plot.width();
        const int renders = renderer.renderCount();

        test::PoolBlocker blocker;
        moveRange(scene.geometry, move, columns);
        QVERIFY(scene.geometry.begin != oldBegin || scene.geometry.end != oldEnd);
        const QImage moved = paintNow(renderer, scene.frame);
        QVERIFY(renderer.isPlotPending());
        QCOMPARE(renderer.renderCount(), renders);
        QCOMPARE(renderer.plotRange(), std::make_pair(oldBegin, oldEnd));
        // What a render of the new range shows (another renderer: this one's job stays under way).
        TimelineRenderer fresh;
        fresh.setData(data);
        const QImage expected = fresh.render(scene.frame);

        const QRgb base = knownPalette().color(QPalette::Base).rgb();
        int same = 0, compared = 0, background = 0, outside = 0, dataThere = 0;
        for (int x = plot.left(); x <= plot.right(); ++x) {
            const double column = (scene.geometry.coordAt(x + 0.5) - oldBegin) / (oldEnd - oldBegin) * columns;
            for (int y = plot.top() + 1; y < plot.bottom() - 1; y += 7) {
                if (column >= 1 && column < columns - 1) {
                    // Nearest neighbour: the column there, or (rounding at a stretched column's edge) its neighbour.
                    const int c = int(std::floor(column));
                    const QRgb pixel = moved.pixel(x, y);
                    same += pixel == before.pixel(plot.left() + c, y)
                        || (move.startsWith(QLatin1String("zoom"))
                            && (pixel == before.pixel(plot.left() + c - 1, y)
                                || pixel == before.pixel(plot.left() + c + 1, y)));
                    ++compared;
                }
            }
            // Beyond the plot shown: the background, near the bottom, where a render of the range has data.
            if (column < 0 || column >= columns + 1) {
                for (int y = plot.bottom() - 4; y < plot.bottom() - 1; ++y, ++outside) {
                    background += moved.pixel(x, y) == base;
                    dataThere += expected.pixel(x, y) != base;
                }
            }
        }
        QVERIFY(compared > 1000);
        QVERIFY2(same * 100 >= compared * 99,
                 qPrintable(QStringLiteral("%1 of %2 pixels are the previous plot's, moved").arg(same).arg(compared)));
        if (uncovered) {
            QVERIFY(outside > 0);
            QCOMPARE(background, outside);
            QVERIFY2(dataThere * 2 > outside, "a render of the new range has data where the moved plot has none");
        }
        QCOMPARE(ready, 0);

        // The job runs; its plot is shown, and the picture is the synchronous render's.
        blocker.release();
        QTRY_VERIFY(!renderer.isPlotPending());
        QCOMPARE(ready, 1);
        QCOMPARE(renderer.renderCount(), renders + 1);
        QCOMPARE(renderer.plotRange(), std::make_pair(scene.geometry.begin, scene.geometry.end));
        QVERIFY(renderer.isPlotCurrent(scene.frame));
        QCOMPARE(paintNow(renderer, scene.frame), expected);
    }

    void supersededRenderIsDropped_data()
    {
        QTest::addColumn<QString>("moves"); // each followed by a paint, all while the pool is held busy
        QTest::addColumn<bool>("finishPlot"); // finished by finishPlot() rather than through the event loop
        QTest::addColumn<int>("shown"); // plots shown in the end
        QTest::newRow("pan, pan again") << "pan 50;pan 50" << false << 1;
        QTest::newRow("zoom in, pan") << "zoom 0.5;pan -80" << false << 1;
        QTest::newRow("pan, pan again, finishPlot") << "pan 50;pan 50" << true << 1;
        QTest::newRow("pan, back to the plot shown") << "pan 50;pan -50" << false << 0;
    }

    // Request A, then B before A's job ran: when both jobs ran, B's plot is shown and A's never was (one plot shown,
    // one notification). Back to the range shown, nothing is shown at all.
    void supersededRenderIsDropped()
    {
        QFETCH(QString, moves);
        QFETCH(bool, finishPlot);
        QFETCH(int, shown);
        auto session = test::loadSession("mlp_train.pickle");
        QVERIFY(session);
        const auto data = withoutMarks(build(*session));
        Scene scene(*data, false, QSize(900, 360));
        const double n = double(data->allocs->entryCount);
        scene.geometry.setRange(n / 4, 3 * n / 4);
        TimelineRenderer renderer;
        renderer.setData(data);
        int ready = 0;
        renderer.setPlotReadyCallback([&] { ++ready; });
        renderer.render(scene.frame);
        const auto first = renderer.plotRange();
        const int renders = renderer.renderCount();
        {
            test::PoolBlocker blocker;
            for (const QString& move : moves.split(QLatin1Char(';'))) {
                moveRange(scene.geometry, move, scene.frame.layout.plot.width());
                paintNow(renderer, scene.frame);
            }
            QCOMPARE(renderer.isPlotPending(), shown > 0);
            if (finishPlot) {
                blocker.release();
                renderer.finishPlot();
                QVERIFY(!renderer.isPlotPending());
            }
        } // every job has run to its end
        QCoreApplication::processEvents(); // and its notification, if any, is delivered
        QCoreApplication::processEvents();
        QVERIFY(!renderer.isPlotPending());
        QCOMPARE(renderer.renderCount(), renders + shown);
        QCOMPARE(ready, finishPlot ? 0 : shown);
        const auto last = std::make_pair(scene.geometry.begin, scene.geometry.end);
        QCOMPARE(renderer.plotRange(), shown > 0 ? last : first);
        QVERIFY(renderer.isPlotCurrent(scene.frame));
    }

    // While the plot of a new range renders, the mouse finds what the picture shows: the allocation stacked at the
    // point's bytes (by the shown plot's y scale) at the state of the shown plot's column painted there. Once the
    // range's plot came, the same points find what it shows (its columns and scale: zoomed into a valley, the scale
    // shrinks), which differs at many of them.
    void hitTestingUsesThePlotShown()
    {
        auto session = test::loadSession("transformer_train.pickle");
        QVERIFY(session);
        TimelineView view(session.get());
        view.resize(900, 400);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        view.finishBuild();
        QVERIFY(!view.isRendering());
        const auto data = view.data();
        // The valley: the smallest total away from the ends.
        const auto& totals = view.renderer().columns().total;
        const size_t valley = size_t(
            std::min_element(totals.begin() + ptrdiff_t(totals.size() / 5), totals.end() - ptrdiff_t(totals.size() / 5))
            - totals.begin());
        const int64_t first = view.renderer().columns().state[valley - 12];
        const int64_t last = view.renderer().columns().state[valley + 12];
        const QRect plot = view.plotRect();
        std::vector<QPoint> points;
        for (int gx = 1; gx < 20; ++gx)
            for (int gy = 1; gy < 10; ++gy)
                points.emplace_back(plot.left() + plot.width() * gx / 20, plot.top() + plot.height() * gy / 10);
        // What the plot shown has at a point: its column there (mapped onto the view's range), its scale.
        auto expectedAt = [&](QPoint pos) {
            const auto [begin, end] = view.renderer().plotRange();
            const auto& states = view.renderer().columns().state;
            const double column = (view.geometry().coordAt(pos.x() + 0.5) - begin) / (end - begin) * plot.width();
            if (column < 0 || column >= double(states.size()))
                return model::NoAllocation;
            const double bytes = view.geometry().bytesAt(pos.y() + 0.5); // the scale of the plot shown
            const TimelineItem item = itemAt(*data->allocs, states[size_t(column)], ByteCount(std::floor(bytes)));
            return item == model::NoTimelineItem ? model::NoAllocation : model::AllocationId { item };
        };
        const double shownTop = view.geometry().bytesTop;

        std::vector<model::AllocationId> during, after;
        {
            test::PoolBlocker blocker;
            view.zoomToRange(first, last);
            view.repaint();
            QVERIFY(view.isRendering());
            QCOMPARE(view.geometry().bytesTop, shownTop); // the plot shown keeps its scale until the new one comes
            int hits = 0;
            for (QPoint pos : points) {
                const model::AllocationId expected = expectedAt(pos);
                sendMouseMove(view, pos);
                QCOMPARE(session->hovered(), expected);
                during.push_back(expected);
                hits += expected != model::NoAllocation;
            }
            QVERIFY(view.isRendering()); // all of it before the plot of the range came
            QVERIFY2(hits > 20, "the grid met allocations");
        }
        QTRY_VERIFY(!view.isRendering());
        QCOMPARE(view.renderer().plotRange(), std::make_pair(view.geometry().begin, view.geometry().end));
        view.repaint(); // the new plot's scale
        int changed = 0;
        for (QPoint pos : points) {
            const model::AllocationId expected = expectedAt(pos);
            sendMouseMove(view, pos);
            QCOMPARE(session->hovered(), expected);
            changed += expected != during[after.size()];
            after.push_back(expected);
        }
        QVERIFY2(changed * 4 > int(points.size()),
                 qPrintable(QStringLiteral("%1 of %2 points find another allocation in the range's own plot")
                                .arg(changed)
                                .arg(points.size())));
    }

    void finishTimelineBuildsWaitsForThePlot_data()
    {
        QTest::addColumn<QString>("change");
        QTest::newRow("a pan") << "pan";
        QTest::newRow("a resize") << "resize";
        QTest::newRow("another palette") << "palette";
    }

    // A grab after finishTimelineBuilds shows the plot of the view's range and size, though a paint had asked for it
    // in the background (held there): the same picture as a view that never painted before.
    void finishTimelineBuildsWaitsForThePlot()
    {
        QFETCH(QString, change);
        auto session = test::loadSession("multistream.pickle");
        QVERIFY(session);
        TimelineView view(session.get());
        view.resize(800, 360);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        const int64_t n = session->entryCount();
        view.zoomToRange(n / 5, n / 2);
        finishTimelineBuilds(&view);
        QPalette dark = view.palette();
        dark.setColor(QPalette::Base, QColor(0x1e, 0x1e, 0x1e));
        dark.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
        QImage image;
        {
            test::PoolBlocker blocker;
            if (change == QLatin1String("pan"))
                view.zoomToRange(n / 3, n / 3 + (n / 2 - n / 5));
            else if (change == QLatin1String("resize"))
                view.resize(700, 300);
            else
                view.setPalette(dark);
            view.repaint();
            QVERIFY(view.isRendering());
            finishTimelineBuilds(&view); // runs the queued job here
            QVERIFY(!view.isRendering());
            image = view.grab().toImage();
        }
        TimelineView other(session.get());
        other.resize(view.size());
        if (change == QLatin1String("palette"))
            other.setPalette(dark);
        other.show();
        QVERIFY(QTest::qWaitForWindowExposed(&other));
        other.zoomToRange(view.visibleRange().first, view.visibleRange().second);
        finishTimelineBuilds(&other);
        QCOMPARE(other.geometry().begin, view.geometry().begin);
        QCOMPARE(other.geometry().end, view.geometry().end);
        QCOMPARE(image, other.grab().toImage());
    }

    // The time axis (each state's time, O(entries)) is made by the data's build: while it runs the view keeps the
    // index axis; then the axis is the data's, the same as one made from the Session's times, with the same states
    // in view; builds for other changes keep it (the same object); the index axis needs no build.
    void timeAxisIsBuiltWithTheData()
    {
        auto session = test::loadSession("transformer_train.pickle");
        QVERIFY(session);
        TimelineView view(session.get());
        view.resize(900, 400);
        view.finishBuild();
        QVERIFY(!view.data()->timeAxis);
        QVERIFY(!view.axis().isTime());
        view.zoomToRange(3000, 5999);
        const auto range = view.visibleRange();
        session->setTimeAxis(TimeAxis::Time);
        QVERIFY(view.isBuilding());
        QVERIFY(!view.axis().isTime());
        view.finishBuild();
        QVERIFY(view.axis().isTime());
        QCOMPARE(&view.axis(), view.data()->timeAxis.get());
        const int64_t n = session->entryCount();
        std::vector<int64_t> times;
        for (int64_t s = 0; s <= n; ++s)
            times.push_back(session->timeUsAt(s));
        const StateAxis expected = StateAxis::time(std::move(times));
        QCOMPARE(view.axis().entryCount(), expected.entryCount());
        QCOMPARE(view.axis().domainBegin(), expected.domainBegin());
        QCOMPARE(view.axis().domainEnd(), expected.domainEnd());
        for (int64_t s = 0; s <= n; s += 97)
            QCOMPARE(view.axis().stateBegin(s), expected.stateBegin(s));
        // Several states may share a microsecond: the range may take in a few neighbours.
        QVERIFY(std::abs(view.visibleRange().first - range.first) <= 20);
        QVERIFY(std::abs(view.visibleRange().second - range.second) <= 20);
        const StateAxis* axis = &view.axis();
        session->setColorMode(ColorMode::Stack);
        view.finishBuild();
        QCOMPARE(int(view.data()->colorMode), int(ColorMode::Stack));
        QCOMPARE(&view.axis(), axis);
        session->setTimeAxis(TimeAxis::Index);
        QVERIFY(!view.isBuilding());
        QVERIFY(!view.axis().isTime());
        QVERIFY(std::abs(view.visibleRange().first - range.first) <= 20);
    }

    // finishBuild() shows the newest data at once; the builds' late notifications change nothing after it.
    void finishBuildShowsTheNewestData()
    {
        auto session = test::loadSession("multistream.pickle");
        QVERIFY(session);
        TimelineView view(session.get());
        session->setStreamVisible(sideStream(*session), false);
        QSignalSpy shown(&view, &TimelineView::dataChanged);
        view.finishBuild();
        QVERIFY(!view.isBuilding());
        QCOMPARE(shown.count(), 1);
        QVERIFY(view.data()->filtered());
        const auto data = view.data();
        QThreadPool::globalInstance()->waitForDone();
        QCoreApplication::processEvents();
        QCOMPARE(shown.count(), 1);
        QCOMPARE(view.data(), data);
        // A change that does not change the picture keeps the data's revision: the plot is not rendered again.
        session->setCompilerAnnotationsShown(!session->compilerAnnotationsShown());
        view.finishBuild();
        QCOMPARE(view.data()->revision, data->revision);
    }
};

QTEST_MAIN(TestTimelineRenderer)
#include "tst_timelinerenderer.moc"
