// Tests of LiveDocument (app/document/livedocument.h) and of the views taking in a live document's growth: a real
// snapshot's trace fed in chunks, as a live job's events arrive, must give the same replay as the whole file; the
// cursor follows the end until moved; the event list appends rows instead of resetting; the timeline keeps its
// zoom, and extends its data in place, even while a plot job holds it, or takes the growth in once a reader is done;
// growth waits for a reader holding the document; a delta's notes wait for the entries queued before it. Offscreen,
// GUI thread (filter jobs on the thread pool).
#include "apptestutil.h"
#include "itemmodels/eventlistmodel.h"
#include "model/replayextender.h"
#include "document/livedocument.h"
#include "views/documentwindow.h"
#include "views/eventlistview.h"
#include "views/timelineview.h"

#include <QAbstractItemModelTester>
#include <QDir>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>

#include <functional>
#include <future>
#include <shared_mutex>
#include <thread>

using namespace memscope;
using namespace memscope::app;

namespace {

std::shared_ptr<const model::Snapshot> load(const std::string& name)
{
    io::LoadResult r = io::loadSnapshot(test::snapshotPath(name));
    if (!r.ok())
        qWarning("%s", r.error.toString().c_str());
    return r.snapshot;
}

// A live source replaying a file: its state at `joinAt` (stacks dropped: they belong to the file's tables) and
// then its entries as the Recorder's entries (LiveDocument::Entry) with the file's stacks defined under agent ids
// (file id + 1).
struct FileSource {
    std::shared_ptr<const model::Snapshot> file;
    model::Replay ref;
    int device = 0;
    int64_t joinAt = 0;
    int64_t next = 0; // next entry (replay index) to send

    // (Its stacks name the file's tables: the live document has none of them and leaves them empty.)
    model::Snapshot initial() const { return model::snapshotOfState(ref.stateAt(joinAt), device); }

    void defineStacks(LiveDocument& live) const
    {
        for (uint32_t k = 1; k < file->stackCount(); ++k) {
            std::vector<LiveDocument::StackFrame> frames;
            for (const model::FrameId* f = file->stackBegin(model::StackId { k }); f != file->stackEnd(model::StackId { k }); ++f) {
                const model::Frame& fr = file->frame(*f);
                frames.push_back({ std::string(file->str(fr.name)), std::string(file->str(fr.filename)), int32_t(fr.line.bits()) });
            }
            live.defineStack(k + 1, std::move(frames));
        }
    }

    std::vector<LiveDocument::Entry> take(int64_t count)
    {
        std::vector<LiveDocument::Entry> out;
        const auto& trace = file->deviceTraces[size_t(device)];
        for (; count > 0 && next < ref.entryCount(); --count, ++next) {
            const model::TraceEntry& e = trace[size_t(ref.firstEntry() + next)];
            LiveDocument::Entry l {};
            l.action = e.action;
            l.device = uint8_t(device);
            l.addr = uint64_t(e.addr);
            l.size = uint64_t(e.size);
            l.stream = uint64_t(file->stream(e));
            l.timeUs = uint64_t(e.timeUs);
            l.stack = model::raw(e.stack) == 0 ? 0 : model::raw(e.stack) + 1;
            if (e.action == model::Action::Alloc && ref.allocationOfEntry(next) != model::NoAllocation)
                l.blockSize = uint64_t(ref.allocation(ref.allocationOfEntry(next)).size);
            for (const model::SegmentPiece& p : ref.segmentPieces())
                if (p.beginIndex == next && p.address >= e.addr && p.address < e.addr + e.size) {
                    l.poolFirst = int32_t(p.poolId.first);
                    l.poolSecond = int32_t(p.poolId.second);
                }
            out.push_back(l);
        }
        return out;
    }
};

// A job on another thread: holds the read lock `lock` returns from construction until release() (or its end).
class Reader {
public:
    explicit Reader(std::function<std::shared_lock<std::shared_mutex>()> lock)
    {
        std::promise<void> locked;
        m_thread = std::thread([lock = std::move(lock), &locked, done = m_done.get_future()] {
            const auto held = lock();
            locked.set_value();
            done.wait();
        });
        locked.get_future().wait();
    }
    ~Reader() { release(); }
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;
    void release()
    {
        if (!m_thread.joinable())
            return;
        m_done.set_value();
        m_thread.join();
    }

private:
    std::promise<void> m_done;
    std::thread m_thread;
};

// Every member of a timeline's items, compared with what a build from scratch makes.
void compareItems(const model::TimelineItems& a, const model::TimelineItems& b)
{
    QCOMPARE(a.entryCount, b.entryCount);
    QCOMPARE(a.count(), b.count());
    QVERIFY(a.begin == b.begin);
    QVERIFY(a.end == b.end);
    QVERIFY(a.size == b.size);
    QVERIFY(a.pendingFrom == b.pendingFrom);
    QVERIFY(a.byEnd == b.byEnd);
    QVERIFY(a.endByEnd == b.endByEnd);
    QCOMPARE(a.byPending, b.byPending);
    QCOMPARE(a.pendingByPending, b.pendingByPending);
}

// The view's data against a build from scratch of the same session: items, colours, filters, OOMs, annotations.
void compareWithFreshData(const TimelineView& view, const Session& session)
{
    const auto data = view.data();
    const auto fresh = buildTimelineData(makeTimelineDataRequest(session, TimelineDataRequest::Items, nullptr, 1));
    compareItems(*data->allocs, *fresh->allocs);
    compareItems(*data->pieces, *fresh->pieces);
    QVERIFY(data->allocColors == fresh->allocColors);
    QVERIFY(data->pieceColors == fresh->pieceColors);
    QVERIFY(data->allocVisible == fresh->allocVisible);
    QVERIFY(data->pieceVisible == fresh->pieceVisible);
    QCOMPARE(data->ooms, fresh->ooms);
    QCOMPARE(data->annotations->size(), fresh->annotations->size());
}

} // namespace

class TestLiveDocument : public QObject {
    Q_OBJECT
private Q_SLOTS:
    void growsLikeTheFile_data();
    void growsLikeTheFile();
    void viewsFollowGrowth();
    void timelineRendersOnlyNewColumns_data();
    void timelineRendersOnlyNewColumns();
    void growthWaitsForReaders();
    void timelineGrowsInPlaceUnderARender();
    void timelineGrowthWaitsForReaders();
    void timelineGrowsUnderFiltersAndColours_data();
    void timelineGrowsUnderFiltersAndColours();
    void notesWaitForEarlierEntries();
};

void TestLiveDocument::growsLikeTheFile_data()
{
    QTest::addColumn<QString>("file");
    QTest::addColumn<double>("joinAt");
    QTest::newRow("mlp_train from the start") << "mlp_train.pickle" << 0.0;
    QTest::newRow("transformer_train joined mid-run") << "transformer_train.pickle" << 0.5;
    QTest::newRow("expandable_segments joined mid-run") << "expandable_segments.pickle" << 0.3;
    QTest::newRow("multistream from the start") << "multistream.pickle" << 0.0;
}

void TestLiveDocument::growsLikeTheFile()
{
    QFETCH(QString, file);
    QFETCH(double, joinAt);
    FileSource src;
    src.file = load(file.toStdString());
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    src.joinAt = src.next = int64_t(double(src.ref.entryCount()) * joinAt);

    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    src.defineStacks(live);
    Session session(live.document());
    QCOMPARE(session.entryCount(), 0);
    QSignalSpy grown(&session, &Session::grown);
    int chunks = 0;
    while (src.next < src.ref.entryCount()) {
        live.append(src.take(97));
        const size_t before = live.queued();
        QCOMPARE(live.flush(), before);
        session.documentGrew();
        ++chunks;
        QCOMPARE(session.entryCount(), src.next - src.joinAt);
        QVERIFY(session.isFollowing());
        QCOMPARE(session.cursor(), session.entryCount());
    }
    QCOMPARE(grown.count(), chunks);
    const model::Replay& r = session.replay();
    QCOMPARE(r.warnings(), 0u);
    const int64_t n = r.entryCount();
    QCOMPARE(n, src.ref.entryCount() - src.joinAt);
    for (int64_t i = 0; i <= n; ++i) {
        QCOMPARE(r.series().active[size_t(i)], src.ref.series().active[size_t(src.joinAt + i)]);
        QCOMPARE(r.series().reserved[size_t(i)], src.ref.series().reserved[size_t(src.joinAt + i)]);
        QCOMPARE((*r.largestFree())[size_t(i)], (*src.ref.largestFree())[size_t(src.joinAt + i)]);
    }
    // The trace holds the same entries, with the same stacks (by content) and address versions counted from the
    // join.
    const auto& trace = session.entries();
    QCOMPARE(int64_t(trace.size()), n);
    const auto& fileTrace = src.file->deviceTraces[0];
    for (int64_t i = 0; i < n; ++i) {
        const model::TraceEntry& a = trace[size_t(i)];
        const model::TraceEntry& b = fileTrace[size_t(src.ref.firstEntry() + src.joinAt + i)];
        QCOMPARE(a.action, b.action);
        QCOMPARE(a.addr, b.addr);
        QCOMPARE(session.snapshot().stackSize(a.stack), src.file->stackSize(b.stack));
        if (src.file->stackSize(b.stack) > 0) {
            const auto& fa = session.snapshot().frame(*session.snapshot().stackBegin(a.stack));
            const auto& fb = src.file->frame(*src.file->stackBegin(b.stack));
            QCOMPARE(session.snapshot().str(fa.name), src.file->str(fb.name));
        }
        if (src.joinAt == 0)
            QCOMPARE(a.version, b.version); // from the start, versions count as the file's do
    }
}

void TestLiveDocument::viewsFollowGrowth()
{
    FileSource src;
    src.file = load("transformer_train.pickle");
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    src.defineStacks(live);
    live.append(src.take(2000));
    live.flush();

    DocumentWindow window(live.document());
    window.resize(1400, 900);
    window.show();
    Session* session = window.session();
    session->documentGrew();
    QCOMPARE(session->entryCount(), 2000);
    auto* events = qobject_cast<EventListView*>(window.view(DocumentWindow::View::Events));
    QVERIFY(events);
    EventListModel* model = events->model();
    QAbstractItemModelTester tester(model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    // The table's window onto the model's rows (views/eventlistview.h), as it follows the growth.
    QAbstractItemModelTester windowTester(events->table()->model(),
                                          QAbstractItemModelTester::FailureReportingMode::QtTest);
    QTRY_COMPARE(model->rowCount(), 2000);
    // The timeline renders its plot in a job that reads the document (its read lock held), and a flush meanwhile
    // leaves the entries queued (the LiveController tries again): the flushes below come after it.
    finishTimelineBuilds(&window);
    QSignalSpy resets(model, &QAbstractItemModel::modelReset);
    QSignalSpy inserts(model, &QAbstractItemModel::rowsInserted);

    // Following: the cursor moves with the end; the event list appends.
    live.append(src.take(1500));
    live.flush();
    session->documentGrew();
    QCOMPARE(session->cursor(), 3500);
    QCOMPARE(model->rowCount(), 3500);
    QCOMPARE(resets.count(), 0);
    QCOMPARE(inserts.count(), 1);

    // The user moves the cursor back and zooms: both stay while data arrives.
    session->setCursor(1000);
    auto* timeline = qobject_cast<TimelineView*>(window.view(DocumentWindow::View::Timeline));
    QVERIFY(timeline);
    timeline->zoomToRange(500, 1500);
    const auto zoomed = timeline->visibleRange();
    live.append(src.take(1500));
    live.flush();
    session->documentGrew();
    QVERIFY(!session->isFollowing());
    QCOMPARE(session->cursor(), 1000);
    QCOMPARE(timeline->visibleRange(), zoomed);
    QCOMPARE(model->rowCount(), 5000);
    // The event table's scroll bar spans the grown rows; the cursor's row (entry 999) stays selected and in view.
    QCOMPARE(events->scrollBar()->maximum(), 5000 - events->scrollBar()->pageStep());
    QCOMPARE(events->selectedRow(), 999);
    QVERIFY(events->table()->viewport()->rect().contains(events->visualRect(999)));
    QVERIFY(events->table()->model()->rowCount() < 100);
    // One key returns to live.
    session->setCursor(session->entryCount());
    QVERIFY(session->isFollowing());
    live.append(src.take(100));
    live.flush();
    session->documentGrew();
    QCOMPARE(session->cursor(), 5100);

    // A filtered list appends only the matching new entries.
    EventFilter filter;
    filter.actions = EventFilter::bit(model::Action::Alloc);
    model->setFilter(filter);
    QTRY_VERIFY(!model->isBusy());
    finishTimelineBuilds(&window);
    const int allocRows = model->rowCount();
    QVERIFY(allocRows > 0 && allocRows < 5100);
    std::vector<LiveDocument::Entry> more = src.take(900);
    const int newAllocs = int(std::count_if(
        more.begin(), more.end(), [](const LiveDocument::Entry& e) { return e.action == model::Action::Alloc; }));
    live.append(std::move(more));
    live.flush();
    session->documentGrew();
    QCOMPARE(model->rowCount(), allocRows + newAllocs);
    for (int row = allocRows; row < model->rowCount(); ++row)
        QCOMPARE(session->entries()[size_t(model->entryOfRow(row))].action, model::Action::Alloc);
    QVERIFY(test::saveScreenshot(window, QStringLiteral("live-document-grown"), QSize(1400, 900)));
}

void TestLiveDocument::timelineRendersOnlyNewColumns_data()
{
    QTest::addColumn<bool>("timeAxis");
    QTest::newRow("index axis") << false;
    QTest::newRow("time axis") << true;
}

// A live timeline renders only the columns new entries changed (its domain runs ahead of the data, so the old
// columns keep their states): after every growth the picture equals a render of everything from scratch.
void TestLiveDocument::timelineRendersOnlyNewColumns()
{
    QFETCH(bool, timeAxis);
    FileSource src;
    src.file = load("transformer_train.pickle");
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    src.joinAt = src.ref.entryCount() / 3;
    src.next = src.joinAt;
    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    src.defineStacks(live);
    live.append(src.take(300));
    live.flush();

    Session session(live.document());
    session.setTimeAxis(timeAxis ? TimeAxis::Time : TimeAxis::Index);
    TimelineView view(&session);
    view.resize(900, 420);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    session.documentGrew();
    view.finishBuild(); // the data and the first plot, built and rendered in the background
    view.grab();
    int partial = 0;
    for (int round = 0; round < 12; ++round) {
        const StateAxis* axis = &view.axis();
        live.append(src.take(150));
        live.flush();
        session.documentGrew();
        // The time axis grew in place (O(new entries)), the data's as the view's.
        QCOMPARE(view.axis().isTime(), timeAxis);
        if (timeAxis) {
            QCOMPARE(&view.axis(), axis);
            QCOMPARE(view.data()->timeAxis.get(), axis);
        }
        QCOMPARE(view.axis().entryCount(), session.entryCount());
        const int before = view.renderCount();
        QImage grown = view.grab().toImage();
        if (view.isRendering()) {
            // The domain grew (a new range): rendered in the background, the previous plot moved meanwhile.
            view.finishBuild();
            grown = view.grab().toImage();
            QCOMPARE(view.lastRenderFirstColumn(), 0);
        } else {
            // The same range: the paint itself rendered the columns the new entries changed.
            partial += view.lastRenderFirstColumn() > 0;
        }
        QCOMPARE(view.renderCount(), before + 1);
        // Everything again: another size and back change the plot's key (and keep its scale).
        view.resize(700, 420);
        view.finishBuild();
        view.grab();
        view.resize(900, 420);
        view.finishBuild();
        const QImage fresh = view.grab().toImage();
        QCOMPARE(view.lastRenderFirstColumn(), 0);
        if (grown != fresh) {
            grown.save(QDir::temp().filePath(QStringLiteral("memscope-grown.png")));
            fresh.save(QDir::temp().filePath(QStringLiteral("memscope-fresh.png")));
            QFAIL(qPrintable(QStringLiteral("round %1: the grown picture differs from a full render (saved in %2)")
                                 .arg(round)
                                 .arg(QDir::tempPath())));
        }
    }
    QVERIFY(partial > 0); // some growth did render fewer columns than all

    // The domain runs ahead of the data while the document grows, and is the data's once it stops.
    QVERIFY(session.isGrowing());
    QVERIFY(view.geometry().isReset());
    const double ahead = view.geometry().domainEnd;
    session.setGrowing(false);
    QVERIFY(view.geometry().isReset());
    QVERIFY(view.geometry().domainEnd < ahead);
    if (!timeAxis)
        QCOMPARE(view.geometry().domainEnd, double(session.entryCount() + 1)); // state n spans [n, n + 1)
    const double dataEnd = view.geometry().domainEnd;
    session.setGrowing(true); // a reconnected job
    QVERIFY(view.geometry().domainEnd > dataEnd);
}

void TestLiveDocument::growthWaitsForReaders()
{
    FileSource src;
    src.file = load("mlp_train.pickle");
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    live.append(src.take(100));
    {
        // A job on another thread holds the document: flush applies nothing and keeps everything queued.
        std::shared_ptr<const Document> doc = live.document();
        auto lock = doc->readLock();
        size_t appliedMeanwhile = 1;
        std::thread other([&] { appliedMeanwhile = live.flush(); });
        other.join();
        QCOMPARE(appliedMeanwhile, size_t(0));
        QCOMPARE(live.queued(), size_t(100));
        QCOMPARE(doc->replays[0].entryCount(), 0);
    }
    QCOMPARE(live.flush(), size_t(100));
    QCOMPARE(live.document()->replays[0].entryCount(), 100);
    QCOMPARE(live.queued(), size_t(0));
}

// A growth while a plot job holds the timeline's data (a render of a new size asked for and queued: issue 15, where
// each growth during a render copied every item on the GUI thread) extends the data in place: the same data, the
// same items, each member what a build from scratch makes; the plot that comes, with the growth taken in, is a
// render of everything from scratch.
void TestLiveDocument::timelineGrowsInPlaceUnderARender()
{
    FileSource src;
    src.file = load("transformer_train.pickle");
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    src.joinAt = src.ref.entryCount() / 4;
    src.next = src.joinAt;
    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    src.defineStacks(live);
    live.append(src.take(3000));
    live.flush();

    Session session(live.document());
    TimelineView view(&session);
    view.resize(900, 420);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    session.documentGrew();
    view.finishBuild();
    view.grab();
    for (int round = 0; round < 4; ++round) {
        const int width = round % 2 ? 900 : 880;
        int64_t asked = 0;
        QImage grown;
        {
            test::PoolBlocker blocker;
            view.resize(width, 420);
            view.grab(); // asks for the new size's plot: its job waits for a thread, holding the data
            QVERIFY(view.isRendering());
            const TimelineData* data = view.data().get();
            const model::TimelineItems* allocs = view.data()->allocs.get();
            const model::TimelineItems* pieces = view.data()->pieces.get();
            asked = allocs->entryCount;
            // (The job reads nothing before a thread takes it: the flush is not held off.)
            live.append(src.take(120)); // a few per cent: the live domain keeps its range
            QCOMPARE(live.flush(), size_t(120));
            session.documentGrew();
            QCOMPARE(view.data().get(), data);
            QCOMPARE(view.data()->allocs.get(), allocs);
            QCOMPARE(view.data()->pieces.get(), pieces);
            QCOMPARE(view.data()->allocs->entryCount, session.entryCount());
            compareWithFreshData(view, session);
            blocker.release();
            view.finishBuild(); // the job's plot, of the entries it was asked for, and the columns the rest changed
            QVERIFY(!view.isRendering());
            grown = view.grab().toImage();
            QVERIFY(view.lastRenderFirstColumn() > 0); // the growth rendered the columns it changed, not all
        }
        QVERIFY(asked < session.entryCount());
        // Everything again: another size and back render the whole plot (and keep its scale).
        view.resize(700, 420);
        view.finishBuild();
        view.grab();
        view.resize(width, 420);
        view.finishBuild();
        const QImage fresh = view.grab().toImage();
        if (grown != fresh) {
            grown.save(QDir::temp().filePath(QStringLiteral("memscope-grown.png")));
            fresh.save(QDir::temp().filePath(QStringLiteral("memscope-fresh.png")));
            QFAIL(qPrintable(QStringLiteral("round %1: the grown picture differs from a full render (saved in %2)")
                                 .arg(round)
                                 .arg(QDir::tempPath())));
        }
    }
}

// Jobs reading when the views hear of a growth (they took their read locks after the flush let go of the document's):
// one that reads only the document (a call tree's) does not hold the timeline's growth off; one that reads the
// timeline's data (a render) does, and the timeline neither waits for it nor copies the data: it takes the growth in
// once the reader is done.
void TestLiveDocument::timelineGrowthWaitsForReaders()
{
    FileSource src;
    src.file = load("transformer_train.pickle");
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    src.defineStacks(live);
    live.append(src.take(2000));
    live.flush();
    Session session(live.document());
    TimelineView view(&session);
    view.resize(900, 420);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    session.documentGrew();
    view.finishBuild();
    view.grab();
    const TimelineData* data = view.data().get();

    live.append(src.take(500));
    QCOMPARE(live.flush(), size_t(500));
    {
        Reader reader([document = live.document()] { return document->readLock(); });
        session.documentGrew();
        QCOMPARE(view.data().get(), data);
        QCOMPARE(view.data()->allocs->entryCount, 2500);
        QCOMPARE(view.axis().entryCount(), 2500);
    }

    live.append(src.take(500));
    QCOMPARE(live.flush(), size_t(500));
    Reader reader([shown = view.data()] { return shown->readLock(); });
    session.documentGrew();
    QCOMPARE(view.data().get(), data);
    QCOMPARE(view.data()->allocs->entryCount, 2500); // put off
    QCOMPARE(view.axis().entryCount(), 2500);
    reader.release();
    QTRY_COMPARE(view.data()->allocs->entryCount, 3000);
    QCOMPARE(view.data().get(), data);
    QCOMPARE(view.axis().entryCount(), 3000);
    compareWithFreshData(view, session);
}

void TestLiveDocument::timelineGrowsUnderFiltersAndColours_data()
{
    QTest::addColumn<int>("colorMode");
    QTest::addColumn<bool>("hideStream");
    QTest::newRow("stream colours") << int(ColorMode::Stream) << false;
    QTest::newRow("a stream hidden") << int(ColorMode::Allocation) << true;
    QTest::newRow("stream colours, a stream hidden") << int(ColorMode::Stream) << true;
}

// With the stream colours (which need the segment piece holding each allocation) or a stream hidden, a growth adds
// the new items' colours and flags and keeps the others: the data equals a build from scratch, and the picture of the
// states before is the same (the revision stays), so that a paint renders only the columns the new entries changed.
void TestLiveDocument::timelineGrowsUnderFiltersAndColours()
{
    QFETCH(int, colorMode);
    QFETCH(bool, hideStream);
    FileSource src;
    src.file = load("multistream.pickle");
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    src.joinAt = src.ref.entryCount() / 4;
    src.next = src.joinAt;
    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    src.defineStacks(live);
    live.append(src.take(src.ref.entryCount() / 4));
    live.flush();
    Session session(live.document());
    session.setColorMode(ColorMode(colorMode));
    if (hideStream) {
        const std::vector<int64_t> streams = session.streams();
        QVERIFY(streams.size() > 1);
        session.setStreamVisible(streams.back(), false);
    }
    TimelineView view(&session);
    view.resize(900, 420);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    view.finishBuild();
    view.grab();
    QCOMPARE(view.data()->filtered(), hideStream);
    const TimelineData* data = view.data().get();
    int partial = 0;
    for (int round = 0; round < 8 && src.next < src.ref.entryCount(); ++round) {
        const uint64_t revision = view.data()->revision;
        live.append(src.take(40));
        live.flush();
        session.documentGrew();
        QCOMPARE(view.data().get(), data);
        QCOMPARE(view.data()->revision, revision);
        QCOMPARE(view.data()->allocs->entryCount, session.entryCount());
        compareWithFreshData(view, session);
        if (QTest::currentTestFailed())
            return;
        view.grab();
        if (view.isRendering())
            view.finishBuild(); // the live domain grew a step: everything again
        else
            partial += view.lastRenderFirstColumn() > 0;
    }
    QVERIFY(partial > 0);
}

// A delta's notes take effect once the entries queued before it are applied, with its own entries: a flood's
// backlog does not put its notes (whose times lie past the trace's end) into the document ahead of its entries.
void TestLiveDocument::notesWaitForEarlierEntries()
{
    FileSource src;
    src.file = load("mlp_train.pickle");
    QVERIFY(src.file);
    src.ref = model::Replay::build(*src.file, 0);
    LiveDocument live(QStringLiteral("test://live"), src.initial(), 1);
    live.append(src.take(100));
    auto delta = std::make_shared<LiveDocument::Delta>();
    delta->entries = src.take(100);
    const uint64_t at = delta->entries.front().timeUs;
    delta->notes.push_back({ model::Annotation::Stage::Start, 0, at, "step_1" });
    delta->notes.push_back({ model::Annotation::Stage::End, 0, delta->entries.back().timeUs, "step_1" });
    live.append(std::shared_ptr<const LiveDocument::Delta>(std::move(delta)));
    live.annotate(0, model::Annotation::Stage::Start, "mine", int64_t(at));
    const model::Snapshot& s = *live.document()->snapshot;

    QCOMPARE(live.flush(60), size_t(60));
    QCOMPARE(s.annotations.size(), size_t(0)); // 40 entries queued before the delta wait
    QCOMPARE(live.flush(40), size_t(40));
    QCOMPARE(s.annotations.size(), size_t(2)); // its notes, before its entries
    QCOMPARE(live.flush(50), size_t(50));
    QCOMPARE(s.annotations.size(), size_t(2));
    QVERIFY(live.hasPending());
    QCOMPARE(live.flush(), size_t(50));
    QCOMPARE(s.annotations.size(), size_t(3)); // annotate()'s, after the entries queued before it
    QVERIFY(!live.hasPending());
    QVERIFY(s.str(s.annotations[0].name) == "step_1");
    QVERIFY(s.str(s.annotations[2].name) == "mine");
}

QTEST_MAIN(TestLiveDocument)
#include "tst_livedocument.moc"
