// EventListModel and EventListView: the model passes QAbstractItemModelTester and has one row per trace entry;
// address names follow PyTorch's viewer (golden values printed by Python from the pickles, and an independent
// re-implementation of MemoryViz.js annotate_snapshot over every row); every filter gives exactly the entries a
// brute-force filter gives; stale filter jobs are dropped; the view and the Session cursor follow each other; the
// view renders for every shared snapshot. Runs offscreen on the GUI thread; filter jobs on the thread pool.
#include "apptestutil.h"
#include "itemmodels/eventlistmodel.h"
#include "report/memoryviz.h"
#include "views/eventlistview.h"

#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QHeaderView>
#include <QImage>
#include <QLineEdit>
#include <QMenu>
#include <QPushButton>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTableView>
#include <QTest>
#include <QWheelEvent>

#include <map>
#include <random>

// For the throwaway timings only (MEMSCOPE_TIMINGS=1): traces of millions of entries made from big_trace.
#define MEMSCOPE_DEFAULT_SHARED_DIR "../shared"
#include "../benchmarks/synthetic.h"

using namespace memscope;
using namespace Qt::StringLiterals;
using namespace memscope::app;
using model::Action;

namespace {

constexpr int JobTimeoutMs = 120'000;

// Documents are loaded once per file; each test gets a fresh Session on one.
std::shared_ptr<const Document> document(const std::string& file)
{
    static std::map<std::string, std::shared_ptr<const Document>> cache;
    auto& slot = cache[file];
    if (!slot) {
        auto session = test::loadSession(file);
        if (session)
            slot = session->documentPtr();
    }
    return slot;
}

std::unique_ptr<Session> session(const std::string& file)
{
    auto doc = document(file);
    return doc ? std::make_unique<Session>(doc) : nullptr;
}

// Waits until the model shows the Session's device with its latest filter.
bool waitReady(EventListModel& model)
{
    if (!model.isBusy())
        return true;
    QSignalSpy spy(&model, &EventListModel::rowsReady);
    while (model.isBusy())
        if (!spy.wait(JobTimeoutMs))
            return false;
    return true;
}

// Shows `view` at `size`, exposed, with its model's first population done.
bool showReady(EventListView& view, QSize size)
{
    view.resize(size);
    view.show();
    return QTest::qWaitForWindowExposed(&view) && waitReady(*view.model());
}

bool applyFilter(EventListModel& model, const EventFilter& filter)
{
    QSignalSpy spy(&model, &EventListModel::rowsReady);
    model.setFilter(filter);
    while (model.isBusy())
        if (!spy.wait(JobTimeoutMs))
            return false;
    return true;
}

std::vector<int64_t> modelEntries(const EventListModel& model)
{
    std::vector<int64_t> out;
    for (int r = 0; r < model.rowCount(); ++r)
        out.push_back(model.entryOfRow(r));
    return out;
}

// The filter rules written out plainly, one entry and one frame at a time.
std::vector<int64_t> bruteForce(const model::Snapshot& s, int device, const EventFilter& f)
{
    std::string needle = f.frameText;
    auto lower = [](std::string t) {
        for (char& c : t)
            c = char(std::tolower(static_cast<unsigned char>(c)));
        return t;
    };
    if (!f.caseSensitive)
        needle = lower(needle);
    std::vector<int64_t> out;
    const auto& trace = s.deviceTraces[size_t(device)];
    for (size_t i = 0; i < trace.size(); ++i) {
        const model::TraceEntry& e = trace[i];
        if (!(f.actions & (1u << unsigned(e.action))))
            continue;
        if (e.size < f.minSize || e.size > f.maxSize)
            continue;
        if (f.stream && s.stream(e) != *f.stream)
            continue;
        if (std::find(f.hiddenStreams.begin(), f.hiddenStreams.end(), s.stream(e)) != f.hiddenStreams.end())
            continue;
        if (!needle.empty()) {
            bool found = false;
            for (const model::FrameId* fr = s.stackBegin(e.stack); fr != s.stackEnd(e.stack) && !found; ++fr) {
                const model::Frame& frame = s.frame(*fr);
                std::string text = std::string(s.str(frame.filename)) + ":" + frame.line.toString() + ":"
                    + std::string(s.str(frame.name));
                if (!f.caseSensitive)
                    text = lower(text);
                found = text.find(needle) != std::string::npos;
            }
            if (!found)
                continue;
        }
        out.push_back(int64_t(i));
    }
    return out;
}

// MemoryViz.js annotate_snapshot, re-implemented independently: per-address counters shared by all devices,
// free_completed advances the block counter, segment_free / segment_unmap the segment counter.
std::vector<QString> viewerNames(const model::Snapshot& s, int device)
{
    std::map<int64_t, int> blockVersion, segmentVersion;
    std::vector<QString> names;
    for (int d = 0; d <= device; ++d) {
        for (const model::TraceEntry& e : s.deviceTraces[size_t(d)]) {
            const auto action = model::actionName(e.action);
            QString name;
            auto hex = QString::number(quint64(e.addr), 16);
            if (action == "alloc" || action == "free_requested") {
                name = QStringLiteral("b%1_%2").arg(hex).arg(blockVersion[e.addr]);
            } else if (action == "free_completed") {
                name = QStringLiteral("b%1_%2").arg(hex).arg(blockVersion[e.addr]++);
            } else if (action == "segment_alloc" || action == "segment_map") {
                name = QStringLiteral("s%1_%2").arg(hex).arg(segmentVersion[e.addr]);
            } else if (action == "segment_free" || action == "segment_unmap") {
                name = QStringLiteral("s%1_%2").arg(hex).arg(segmentVersion[e.addr]++);
            } else if (action == "oom") {
                name = QStringLiteral("OOM");
            }
            if (d == device)
                names.push_back(name);
        }
    }
    return names;
}

QStringList snapshotFiles()
{
    QDir dir(QString::fromStdString(test::sharedDir() + "/snapshots"));
    return dir.entryList({ QStringLiteral("*.pickle"), QStringLiteral("*.pickle.xz") }, QDir::Files, QDir::Name);
}

// A grab is "not blank" when it has some variety of colours (text, header, selection), not one flat fill.
int distinctColours(const QImage& image)
{
    std::set<QRgb> colours;
    for (int y = 0; y < image.height(); y += 3)
        for (int x = 0; x < image.width(); x += 3)
            colours.insert(image.pixel(x, y));
    return int(colours.size());
}

uint32_t bits(std::initializer_list<Action> actions)
{
    uint32_t out = 0;
    for (Action a : actions)
        out |= EventFilter::bit(a);
    return out;
}

} // namespace

Q_DECLARE_METATYPE(EventFilter)

class TestEventList : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void modelTester_data()
    {
        QTest::addColumn<QString>("file");
        for (const QString& f : snapshotFiles())
            QTest::newRow(qPrintable(f)) << f;
    }

    void modelTester()
    {
        QFETCH(QString, file);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListModel model(s.get());
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QVERIFY(waitReady(model));
        // One row per trace entry of the device shown.
        QCOMPARE(model.rowCount(), int(s->entries().size()));
        QCOMPARE(model.totalEntries(), int64_t(s->entries().size()));
        QCOMPARE(model.columnCount(), int(EventListModel::ColumnCount));

        EventFilter allocs;
        allocs.actions = EventFilter::bit(Action::Alloc);
        QVERIFY(applyFilter(model, allocs));
        QCOMPARE(modelEntries(model), bruteForce(s->snapshot(), s->device(), allocs));

        // Every device in turn (two_device has two traces): rows drop at once, then come back for the new device.
        for (int d : s->devices()) {
            s->setDevice(d);
            QVERIFY(waitReady(model));
            QCOMPARE(model.device(), d);
            QCOMPARE(modelEntries(model), bruteForce(s->snapshot(), d, model.filter()));
        }
        QVERIFY(applyFilter(model, EventFilter {}));
        QCOMPARE(model.rowCount(), int(s->entries().size()));
    }

    void addressNames_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("entry");
        QTest::addColumn<QString>("name");
        // Golden values: PyTorch's rules (MemoryViz.js annotate_snapshot + formatAddr) applied by Python to the raw
        // pickle, e.g. python3 -c "import pickle; t = pickle.load(open('multistream.pickle','rb'))['device_traces'][0]
        // ..." counting free_completed (blocks) and segment_free/segment_unmap (segments) per address.
        QTest::newRow("multistream first segment_alloc") << u"multistream.pickle"_s << 0 << u"s7ff2e8600000_0"_s;
        QTest::newRow("multistream first alloc") << u"multistream.pickle"_s << 1 << u"b7ff2e8600000_0"_s;
        QTest::newRow("multistream reused address, 2nd use") << u"multistream.pickle"_s << 23 << u"b7ff2dc000000_1"_s;
        QTest::newRow("multistream free_requested shares alloc's version")
            << u"multistream.pickle"_s << 25 << u"b7ff2dc000000_1"_s;
        QTest::newRow("multistream free_completed shares alloc's version")
            << u"multistream.pickle"_s << 26 << u"b7ff2dc000000_1"_s;
        QTest::newRow("multistream 15th use of one address") << u"multistream.pickle"_s << 170 << u"b7ff2dc000000_14"_s;
        QTest::newRow("multistream last entry") << u"multistream.pickle"_s << 179 << u"b7ff2d7441600_0"_s;
        QTest::newRow("expandable segment_map after an unmap")
            << u"expandable_segments.pickle"_s << 136 << u"s302000000_1"_s;
        QTest::newRow("expandable first segment_map") << u"expandable_segments.pickle"_s << 0 << u"s302000000_0"_s;
        QTest::newRow("expandable block reused") << u"expandable_segments.pickle"_s << 49 << u"b302000000_1"_s;
        QTest::newRow("oom entry") << u"oom.pickle"_s << 50 << u"OOM"_s;
    }

    void addressNames()
    {
        QFETCH(QString, file);
        QFETCH(int, entry);
        QFETCH(QString, name);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListModel model(s.get());
        QVERIFY(waitReady(model));
        const int row = model.rowOfEntry(entry);
        QCOMPARE(row, entry);
        QCOMPARE(model.index(row, EventListModel::AddressColumn).data().toString(), name);
    }

    void addressNamesFollowViewerRules_data() { modelTester_data(); }

    void addressNamesFollowViewerRules()
    {
        QFETCH(QString, file);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListModel model(s.get());
        for (int d : s->devices()) {
            s->setDevice(d);
            QVERIFY(waitReady(model));
            const auto expected = viewerNames(s->snapshot(), d);
            QCOMPARE(size_t(model.rowCount()), expected.size());
            for (int r = 0; r < model.rowCount(); ++r) {
                const QString got = model.index(r, EventListModel::AddressColumn).data().toString();
                if (got != expected[size_t(r)])
                    QFAIL(qPrintable(QStringLiteral("device %1 entry %2: %3, PyTorch's viewer says %4")
                                         .arg(d)
                                         .arg(r)
                                         .arg(got, expected[size_t(r)])));
            }
        }
    }

    void versionsOfTruncatedTrace()
    {
        // A trace that starts mid-run (max_entries ring): the first event at A frees a block allocated before the
        // trace. PyTorch counts free_completed, so A's next alloc is version 1, although it is A's first alloc in
        // the trace. Device 1 continues device 0's counters (one version_space per file). The file as written
        // carries no versions: the loader numbers the entries (model::TraceNumbering), and the rows show that.
        model::Snapshot s;
        auto entry = [](Action a, int64_t addr) {
            model::TraceEntry e;
            e.action = a;
            e.addr = addr;
            e.size = a == Action::SegmentAlloc || a == Action::SegmentFree ? 2 << 20 : 512;
            return e;
        };
        constexpr int64_t A = 0x7000, B = 0x9000, S = 0x100000;
        s.deviceTraces.push_back({
            entry(Action::FreeRequested, A), // 0: b7000_0
            entry(Action::FreeCompleted, A), // 1: b7000_0, counter -> 1
            entry(Action::Alloc, A), // 2: b7000_1
            entry(Action::FreeCompleted, A), // 3: b7000_1, counter -> 2
            entry(Action::SegmentFree, S), // 4: s100000_0, counter -> 1
            entry(Action::SegmentAlloc, S), // 5: s100000_1
            entry(Action::Alloc, B), // 6: b9000_0
            entry(Action::Alloc, B), // 7: b9000_0 (inconsistent: no free between)
            entry(Action::Snapshot, 0), // 8: ""
        });
        s.deviceTraces.push_back({ entry(Action::Alloc, A), entry(Action::Oom, 0) });
        const std::string bytes = io::encodePickle(s);
        io::LoadResult loaded = io::loadSnapshotFromMemory(
            std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "truncated.pickle");
        QVERIFY2(loaded.ok(), loaded.error.toString().c_str());
        auto session = std::make_unique<Session>(makeDocument(QStringLiteral("truncated.pickle"), loaded.snapshot));
        EventListModel model(session.get());
        const QStringList expected0 { u"b7000_0"_s,   u"b7000_0"_s, u"b7000_1"_s, u"b7000_1"_s, u"s100000_0"_s,
                                      u"s100000_1"_s, u"b9000_0"_s, u"b9000_0"_s, QString() };
        const QStringList expected1 { u"b7000_2"_s, u"OOM"_s };
        for (int d : { 0, 1 }) {
            session->setDevice(d);
            QVERIFY(waitReady(model));
            const QStringList& expected = d == 0 ? expected0 : expected1;
            QCOMPARE(model.rowCount(), int(expected.size()));
            for (int r = 0; r < model.rowCount(); ++r)
                QCOMPARE(model.index(r, EventListModel::AddressColumn).data().toString(), expected[r]);
        }
    }

    void columns_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("entry");
        QTest::addColumn<QString>("time");
        QTest::addColumn<QString>("action");
        QTest::addColumn<qlonglong>("size");
        QTest::addColumn<qlonglong>("rawStream");
        QTest::addColumn<QString>("frame");
        // From Python over the pickle: time_us relative to the first entry, action, size, stream, frames[0].
        QTest::newRow("multistream side-stream alloc")
            << u"multistream.pickle"_s << 23 << u"0.077"_s << u"alloc"_s << 1060864LL << 1059547344LL
            << u"gen_snapshots.py:85:multistream"_s;
        QTest::newRow("multistream free_completed")
            << u"multistream.pickle"_s << 170 << u"0.079"_s << u"free_completed"_s << 1167360LL << 1059547344LL
            << u"gen_snapshots.py:90:multistream"_s;
        QTest::newRow("multistream default stream") << u"multistream.pickle"_s << 179 << u"0.079"_s << u"alloc"_s
                                                    << 1048576LL << 0LL << u"gen_snapshots.py:92:multistream"_s;
        QTest::newRow("oom entry") << u"oom.pickle"_s << 50 << u"0.002"_s << u"oom"_s << 67108864LL << 0LL
                                   << u"gen_snapshots.py:72:oom"_s;
        QTest::newRow("expandable segment_map")
            << u"expandable_segments.pickle"_s << 136 << u"0.002"_s << u"segment_map"_s << 20971520LL << 0LL
            << u"gen_snapshots.py:60:expandable"_s;
    }

    void columns()
    {
        QFETCH(QString, file);
        QFETCH(int, entry);
        QFETCH(QString, time);
        QFETCH(QString, action);
        QFETCH(qlonglong, size);
        QFETCH(qlonglong, rawStream);
        QFETCH(QString, frame);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListModel model(s.get());
        QVERIFY(waitReady(model));
        auto cell = [&](int column, int role = Qt::DisplayRole) { return model.index(entry, column).data(role); };
        QCOMPARE(cell(EventListModel::IndexColumn).toString(), QString::number(entry));
        QCOMPARE(cell(EventListModel::TimeColumn).toString(), time);
        QCOMPARE(cell(EventListModel::ActionColumn).toString(), action);
        QCOMPARE(cell(EventListModel::SizeColumn).toString(), Session::formatBytes(size));
        QCOMPARE(cell(EventListModel::SizeColumn, EventListModel::SizeRole).toLongLong(), size);
        QCOMPARE(cell(EventListModel::StreamColumn, EventListModel::RawStreamRole).toLongLong(), rawStream);
        QCOMPARE(cell(EventListModel::StreamColumn).toString(), QString::number(s->snapshot().streamNumber(rawStream)));
        QCOMPARE(cell(EventListModel::FrameColumn).toString(), frame);
        QCOMPARE(cell(0, EventListModel::EntryIndexRole).toLongLong(), qlonglong(entry));
        QCOMPARE(cell(0, EventListModel::StateIndexRole).toLongLong(), qlonglong(entry + 1));
        QCOMPARE(cell(0, EventListModel::AllocationRole).toUInt(), model::raw(s->replay().allocationOfEntry(entry)));
        QVERIFY(
            cell(EventListModel::FrameColumn, Qt::ToolTipRole).toString().contains(frame.section(QLatin1Char(':'), 2)));
    }

    // The user metadata column: each entry's user_metadata (a real H200 trace with two phases), shown only where
    // the file has some.
    void userMetadataColumn()
    {
        auto s = session(test::dataPath("corpus/compile_fx_metadata.pickle"));
        QVERIFY(s);
        EventListModel model(s.get());
        QVERIFY(waitReady(model));
        const auto& entries = s->entries();
        int withText = 0;
        for (size_t i = 0; i < entries.size(); ++i) {
            const std::string_view text = s->snapshot().str(s->snapshot().form(entries[i]).userMetadata);
            const QModelIndex cell = model.index(int(i), EventListModel::MetadataColumn);
            QCOMPARE(cell.data().toString(), QString::fromUtf8(text.data(), qsizetype(text.size())));
            if (!text.empty()) {
                ++withText;
                QVERIFY(cell.data(Qt::ToolTipRole).toString().contains(QLatin1String("user metadata: ")));
            }
        }
        QCOMPARE(withText, 899); // as the corpus README counts them
        EventListView view(s.get());
        QVERIFY(!view.table()->isColumnHidden(EventListModel::MetadataColumn));
        auto plain = session("transformer_train.pickle");
        EventListView plainView(plain.get());
        QVERIFY(plainView.table()->isColumnHidden(EventListModel::MetadataColumn));
    }

    void filters_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<EventFilter>("filter");
        QTest::addColumn<bool>("expectSome");
        auto f = [](uint32_t actions = EventFilter::AllActions, int64_t min = 0,
                    int64_t max = std::numeric_limits<int64_t>::max(), std::optional<int64_t> stream = {},
                    std::string text = {}, bool cs = false) {
            EventFilter out;
            out.actions = actions;
            out.minSize = min;
            out.maxSize = max;
            out.stream = stream;
            out.frameText = std::move(text);
            out.caseSensitive = cs;
            return out;
        };
        const auto all = EventFilter::AllActions;
        QTest::newRow("multistream: alloc only") << u"multistream.pickle"_s << f(bits({ Action::Alloc })) << true;
        QTest::newRow("multistream: frees")
            << u"multistream.pickle"_s << f(bits({ Action::FreeRequested, Action::FreeCompleted })) << true;
        QTest::newRow("multistream: no action") << u"multistream.pickle"_s << f(0) << false;
        QTest::newRow("multistream: side stream 1059547344")
            << u"multistream.pickle"_s << f(all, 0, INT64_MAX, 1059547344) << true;
        QTest::newRow("multistream: default stream") << u"multistream.pickle"_s << f(all, 0, INT64_MAX, 0) << true;
        QTest::newRow("multistream: size 1 MiB .. 1.05 MiB inclusive")
            << u"multistream.pickle"_s << f(all, 1048576, 1101824) << true;
        QTest::newRow("multistream: size exactly 1060864")
            << u"multistream.pickle"_s << f(all, 1060864, 1060864) << true;
        QTest::newRow("multistream: frame text file:line")
            << u"multistream.pickle"_s << f(all, 0, INT64_MAX, {}, "gen_snapshots.py:90") << true;
        QTest::newRow("multistream: frame text absent")
            << u"multistream.pickle"_s << f(all, 0, INT64_MAX, {}, "no_such_function") << false;
        QTest::newRow("transformer: segment_alloc")
            << u"transformer_train.pickle"_s << f(bits({ Action::SegmentAlloc })) << true;
        QTest::newRow("transformer: text, any case")
            << u"transformer_train.pickle"_s << f(all, 0, INT64_MAX, {}, "LINEAR") << true;
        QTest::newRow("transformer: text, exact case")
            << u"transformer_train.pickle"_s << f(all, 0, INT64_MAX, {}, "LINEAR", true) << false;
        QTest::newRow("transformer: alloc >= 1 MiB in a frame named forward")
            << u"transformer_train.pickle"_s << f(bits({ Action::Alloc }), 1 << 20, INT64_MAX, {}, ":forward") << true;
        QTest::newRow("mlp (C++ frames): text in a C++ frame")
            << u"mlp_train.pickle"_s << f(all, 0, INT64_MAX, {}, "c10::") << true;
        QTest::newRow("oom: oom only") << u"oom.pickle"_s << f(bits({ Action::Oom })) << true;
        QTest::newRow("expandable: map and unmap")
            << u"expandable_segments.pickle"_s << f(bits({ Action::SegmentMap, Action::SegmentUnmap })) << true;
        QTest::newRow("big_trace: alloc >= 64 KiB")
            << u"big_trace.pickle.xz"_s << f(bits({ Action::Alloc }), 65536) << true;
        QTest::newRow("big_trace: size <= 512 B") << u"big_trace.pickle.xz"_s << f(all, 0, 512) << true;
        QTest::newRow("big_trace: frame text") << u"big_trace.pickle.xz"_s << f(all, 0, INT64_MAX, {}, ".py:") << true;
    }

    void filters()
    {
        QFETCH(QString, file);
        QFETCH(EventFilter, filter);
        QFETCH(bool, expectSome);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListModel model(s.get());
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QVERIFY(waitReady(model));
        QVERIFY(applyFilter(model, filter));
        const auto expected = bruteForce(s->snapshot(), s->device(), filter);
        QCOMPARE(modelEntries(model), expected);
        QCOMPARE(!expected.empty(), expectSome);
        // The pure function agrees too, and every row maps back to itself.
        std::vector<int64_t> pure;
        for (uint32_t e : filterEntries(s->snapshot(), s->device(), filter))
            pure.push_back(e);
        QCOMPARE(pure, expected);
        for (int r = 0; r < model.rowCount(); r += std::max(1, model.rowCount() / 97))
            QCOMPARE(model.rowOfEntry(model.entryOfRow(r)), r);
    }

    void sessionHiddenStreamsFilter()
    {
        auto s = session("multistream.pickle");
        QVERIFY(s);
        EventListModel model(s.get());
        QVERIFY(waitReady(model));
        QSignalSpy spy(&model, &EventListModel::rowsReady);
        s->setStreamVisible(1059547344, false);
        QVERIFY(model.isBusy());
        QVERIFY(waitReady(model));
        EventFilter hidden;
        hidden.hiddenStreams = { 1059547344 };
        QCOMPARE(modelEntries(model), bruteForce(s->snapshot(), 0, hidden));
        QVERIFY(model.rowCount() < int(s->entries().size()));
        s->setStreamVisible(1059547344, true);
        QVERIFY(waitReady(model));
        QCOMPARE(model.rowCount(), int(s->entries().size()));
    }

    void staleJobsAreDropped()
    {
        auto s = session("big_trace.pickle.xz");
        QVERIFY(s);
        EventListModel model(s.get());
        QVERIFY(waitReady(model));
        QSignalSpy spy(&model, &EventListModel::rowsReady);
        EventFilter first, second, third;
        first.frameText = ".py";
        second.actions = EventFilter::bit(Action::FreeCompleted);
        third.actions = EventFilter::bit(Action::Alloc);
        third.minSize = 4096;
        model.setFilter(first);
        model.setFilter(second);
        model.setFilter(third);
        QVERIFY(spy.wait(JobTimeoutMs));
        QTest::qWait(200); // the earlier jobs have long finished: none of them may show up
        QCOMPARE(spy.size(), 1);
        QCOMPARE(modelEntries(model), bruteForce(s->snapshot(), 0, third));
    }

    void parseByteSize_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<qlonglong>("bytes"); // -1: rejected
        QTest::newRow("plain bytes") << u"4096"_s << 4096LL;
        QTest::newRow("bytes with unit") << u"512 B"_s << 512LL;
        QTest::newRow("KiB") << u"64KiB"_s << 65536LL;
        QTest::newRow("k") << u"64k"_s << 65536LL;
        QTest::newRow("fractional MiB") << u"1.5 MiB"_s << 1572864LL;
        QTest::newRow("M") << u"2M"_s << 2097152LL;
        QTest::newRow("GB means GiB") << u"3 GB"_s << 3221225472LL;
        QTest::newRow("lower case gib") << u"1 gib"_s << 1073741824LL;
        QTest::newRow("surrounding spaces") << u"  7  "_s << 7LL;
        QTest::newRow("empty") << u""_s << -1LL;
        QTest::newRow("negative") << u"-5"_s << -1LL;
        QTest::newRow("unknown unit") << u"5 parsecs"_s << -1LL;
        QTest::newRow("unit only") << u"MiB"_s << -1LL;
        QTest::newRow("absurdly large") << u"99999999 TiB"_s << -1LL;
    }

    void parseByteSize()
    {
        QFETCH(QString, text);
        QFETCH(qlonglong, bytes);
        const auto got = app::parseByteSize(text);
        QCOMPARE(got ? qlonglong(*got) : -1LL, bytes);
    }

    // --- the view ---------------------------------------------------------------------------------------------

    void selectingRowMovesCursor_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<int>("entry");
        QTest::newRow("multistream first entry") << u"multistream.pickle"_s << 0;
        QTest::newRow("multistream alloc on a side stream") << u"multistream.pickle"_s << 23;
        QTest::newRow("multistream last entry") << u"multistream.pickle"_s << 179;
        QTest::newRow("transformer middle") << u"transformer_train.pickle"_s << 5000;
        QTest::newRow("big_trace deep") << u"big_trace.pickle.xz"_s << 300000;
    }

    void selectingRowMovesCursor()
    {
        QFETCH(QString, file);
        QFETCH(int, entry);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListView view(s.get());
        QVERIFY(showReady(view, QSize(1000, 600)));
        QSignalSpy cursorSpy(s.get(), &Session::cursorChanged);
        QTableView* table = view.table();
        view.scrollToRow(entry);
        const QRect rect = view.visualRect(entry, EventListModel::ActionColumn);
        QVERIFY(table->viewport()->rect().contains(rect));
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, rect.center());
        QCOMPARE(s->cursor(), int64_t(entry + 1));
        QCOMPARE(s->selection(), s->replay().allocationOfEntry(entry));
        QCOMPARE(cursorSpy.size(), entry + 1 == s->entryCount() ? 0 : 1); // the final state was the start
        QCOMPARE(view.selectedRow(), entry);
        QCOMPARE(view.currentRow(), entry);
        // The table holds a screenful of rows, not the trace (the point of the window).
        QVERIFY(table->model()->rowCount() <= view.height());
        QCOMPARE(table->selectionModel()->selectedRows().size(), 1);
        QCOMPARE(table->selectionModel()->selectedRows().front().data(EventListModel::EntryIndexRole).toLongLong(),
                 qlonglong(entry));
    }

    void keyboardMovesCursor()
    {
        auto s = session("transformer_train.pickle");
        QVERIFY(s);
        EventListView view(s.get());
        QVERIFY(showReady(view, QSize(1000, 600)));
        s->setCursor(101); // selects entry 100
        view.table()->setFocus();
        QTest::keyClick(view.table(), Qt::Key_Down);
        QCOMPARE(s->cursor(), int64_t(102));
        QTest::keyClick(view.table(), Qt::Key_Down);
        QCOMPARE(s->cursor(), int64_t(103));
        QTest::keyClick(view.table(), Qt::Key_Up);
        QTest::keyClick(view.table(), Qt::Key_Up);
        QTest::keyClick(view.table(), Qt::Key_Up);
        QCOMPARE(s->cursor(), int64_t(100));
        QCOMPARE(view.currentRow(), 99);
        // A page, the ends, and past them: the window follows, the cursor with it.
        const int page = view.scrollBar()->pageStep();
        QVERIFY(page > 1);
        QTest::keyClick(view.table(), Qt::Key_PageDown);
        QCOMPARE(s->cursor(), int64_t(100 + page));
        QTest::keyClick(view.table(), Qt::Key_End);
        QCOMPARE(s->cursor(), s->entryCount());
        QCOMPARE(view.currentRow(), int(s->entryCount()) - 1);
        QVERIFY(view.table()->viewport()->rect().contains(view.visualRect(view.currentRow())));
        QTest::keyClick(view.table(), Qt::Key_Down); // at the end already
        QCOMPARE(s->cursor(), s->entryCount());
        QTest::keyClick(view.table(), Qt::Key_Home);
        QCOMPARE(s->cursor(), int64_t(1));
        QCOMPARE(view.scrollBar()->value(), 0);
        QTest::keyClick(view.table(), Qt::Key_Up); // at the start already
        QCOMPARE(s->cursor(), int64_t(1));
        QCOMPARE(view.currentRow(), 0);
    }

    // The wheel moves the window over the whole trace; the rows shown are the model's rows from the scroll bar on.
    void wheelScrollsTheWindow()
    {
        auto s = session("big_trace.pickle.xz");
        QVERIFY(s);
        EventListView view(s.get());
        QVERIFY(showReady(view, QSize(1000, 600)));
        QScrollBar* bar = view.scrollBar();
        QCOMPARE(bar->maximum(), view.model()->rowCount() - bar->pageStep());
        bar->setValue(200000);
        const QAbstractItemModel* shown = view.table()->model();
        QCOMPARE(shown->index(0, 0).data(EventListModel::EntryIndexRole).toLongLong(), 200000LL);
        QWheelEvent down(QPointF(50, 50), view.table()->viewport()->mapToGlobal(QPointF(50, 50)), QPoint(),
                         QPoint(0, -120), Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
        QCoreApplication::sendEvent(view.table()->viewport(), &down);
        QVERIFY(bar->value() > 200000);
        QCOMPARE(shown->index(0, 0).data(EventListModel::EntryIndexRole).toLongLong(), qlonglong(bar->value()));
        for (int r = 0; r < shown->rowCount(); ++r)
            QCOMPARE(shown->index(r, EventListModel::AddressColumn).data().toString(),
                     view.model()->index(bar->value() + r, EventListModel::AddressColumn).data().toString());
        bar->setValue(bar->maximum()); // the last row is in view
        QVERIFY(view.table()->viewport()->rect().intersects(view.visualRect(view.model()->rowCount() - 1)));
    }

    void cursorSelectsRow_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<qlonglong>("cursor");
        QTest::addColumn<int>("row"); // -1: nothing selected
        QTest::newRow("multistream after entry 0") << u"multistream.pickle"_s << 1LL << 0;
        QTest::newRow("multistream before everything") << u"multistream.pickle"_s << 0LL << -1;
        QTest::newRow("multistream final state") << u"multistream.pickle"_s << 180LL << 179;
        QTest::newRow("transformer middle") << u"transformer_train.pickle"_s << 6000LL << 5999;
        QTest::newRow("big_trace near the end") << u"big_trace.pickle.xz"_s << 329000LL << 328999;
        QTest::newRow("big_trace near the start") << u"big_trace.pickle.xz"_s << 10LL << 9;
    }

    void cursorSelectsRow()
    {
        QFETCH(QString, file);
        QFETCH(qlonglong, cursor);
        QFETCH(int, row);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListView view(s.get());
        QVERIFY(showReady(view, QSize(1000, 600)));
        QSignalSpy cursorSpy(s.get(), &Session::cursorChanged);
        QSignalSpy selectionSpy(s.get(), &Session::selectionChanged);
        s->setCursor(cursor == 0 ? 1 : 0); // start somewhere else
        s->setCursor(cursor);
        QCOMPARE(s->cursor(), int64_t(cursor)); // not moved back by the view (no feedback)
        QCOMPARE(cursorSpy.size(), 2);
        QCOMPARE(selectionSpy.size(), 0); // following the cursor never selects an allocation
        const auto rows = view.table()->selectionModel()->selectedRows();
        if (row < 0) {
            QVERIFY(rows.isEmpty());
            QCOMPARE(view.selectedRow(), -1);
            return;
        }
        QCOMPARE(rows.size(), 1);
        QCOMPARE(view.selectedRow(), row);
        QCOMPARE(rows.front().data(EventListModel::EntryIndexRole).toLongLong(), view.model()->entryOfRow(row));
        // Scrolled into view.
        QVERIFY(view.table()->viewport()->rect().contains(view.visualRect(row)));
    }

    void cursorOnFilteredOutEntry()
    {
        auto s = session("multistream.pickle");
        QVERIFY(s);
        EventListView view(s.get());
        view.resize(1000, 600);
        view.show();
        QVERIFY(waitReady(*view.model()));
        EventFilter allocs;
        allocs.actions = EventFilter::bit(Action::Alloc);
        QVERIFY(applyFilter(*view.model(), allocs));
        s->setCursor(27); // after entry 26, a free_completed: filtered out
        QCOMPARE(s->entries()[26].action, Action::FreeCompleted);
        QVERIFY(view.table()->selectionModel()->selectedRows().isEmpty());
        QCOMPARE(view.selectedRow(), -1);
        int64_t lastAlloc = 26;
        while (s->entries()[size_t(lastAlloc)].action != Action::Alloc)
            --lastAlloc;
        const int near = view.model()->rowAtOrBefore(26);
        QCOMPARE(view.model()->entryOfRow(near), lastAlloc); // the last alloc before it is current, unselected
        QCOMPARE(view.currentRow(), near);
        QCOMPARE(view.table()->currentIndex().data(EventListModel::EntryIndexRole).toLongLong(), qlonglong(lastAlloc));
        QCOMPARE(s->cursor(), int64_t(27));
        s->setCursor(lastAlloc + 1); // after that alloc: shown and selected
        QCOMPARE(view.table()->selectionModel()->selectedRows().size(), 1);
        QCOMPARE(view.selectedRow(), near);
        QCOMPARE(s->cursor(), lastAlloc + 1);
    }

    void filterBar()
    {
        auto s = session("transformer_train.pickle");
        QVERIFY(s);
        EventListView view(s.get());
        QVERIFY(showReady(view, QSize(1200, 600)));
        auto* search = view.findChild<QLineEdit*>(QStringLiteral("searchEdit"));
        auto* minSize = view.findChild<QLineEdit*>(QStringLiteral("minSizeEdit"));
        auto* streams = view.findChild<QComboBox*>(QStringLiteral("streamCombo"));
        auto* actions = view.findChild<QPushButton*>(QStringLiteral("actionButton"));
        QVERIFY(search && minSize && streams && actions);

        // Typing waits for the debounce, then one job.
        QSignalSpy ready(view.model(), &EventListModel::rowsReady);
        QTest::keyClicks(search, QStringLiteral("linear"));
        QCOMPARE(ready.size(), 0);
        QVERIFY(ready.wait(JobTimeoutMs));
        QCOMPARE(view.model()->filter().frameText, std::string("linear"));
        QCOMPARE(modelEntries(*view.model()), bruteForce(s->snapshot(), 0, view.model()->filter()));

        QTest::keyClicks(minSize, QStringLiteral("1 MiB"));
        QVERIFY(ready.wait(JobTimeoutMs));
        QVERIFY(waitReady(*view.model()));
        QCOMPARE(view.model()->filter().minSize, model::ByteCount(1 << 20));
        QCOMPARE(modelEntries(*view.model()), bruteForce(s->snapshot(), 0, view.model()->filter()));

        // Unchecking an action in the menu filters at once.
        QAction* alloc = nullptr;
        for (QAction* a : actions->menu()->actions())
            if (a->text() == QLatin1String("alloc"))
                alloc = a;
        QVERIFY(alloc);
        alloc->setChecked(false);
        QVERIFY(waitReady(*view.model()));
        QVERIFY(!(view.model()->filter().actions & EventFilter::bit(Action::Alloc)));
        QCOMPARE(modelEntries(*view.model()), bruteForce(s->snapshot(), 0, view.model()->filter()));

        // Streams: transformer_train has one stream; picking it keeps everything that passed.
        QCOMPARE(streams->count(), 2);
        const int before = view.model()->rowCount();
        streams->setCurrentIndex(1);
        QVERIFY(waitReady(*view.model()));
        QCOMPARE(view.model()->filter().stream, std::optional<int64_t>(s->snapshot().streams.front()));
        QCOMPARE(view.model()->rowCount(), before);
        QVERIFY(test::saveScreenshot(view, QStringLiteral("eventlist_filtered_transformer_train"), QSize(1200, 600)));
    }

    void hoverSetsSessionHover()
    {
        auto s = session("multistream.pickle");
        QVERIFY(s);
        EventListView view(s.get());
        QVERIFY(showReady(view, QSize(1000, 600)));
        QTableView* table = view.table();
        view.scrollToRow(0); // the view starts at the cursor: the final state, at the bottom
        // Two moves: a move to where the (synthetic) mouse already is delivers nothing.
        QTest::mouseMove(table->viewport(), view.visualRect(3).center());
        QTest::mouseMove(table->viewport(), view.visualRect(1, EventListModel::AddressColumn).center()); // an alloc
        QTRY_COMPARE(s->hovered(), s->replay().allocationOfEntry(1));
        QVERIFY(s->hovered() != model::NoAllocation);
    }

    void screenshots_data() { modelTester_data(); }

    void screenshots()
    {
        QFETCH(QString, file);
        auto s = session(file.toStdString());
        QVERIFY(s);
        EventListView view(s.get());
        QVERIFY(showReady(view, QSize(1200, 700)));
        s->setCursor(s->entryCount() / 2); // a selected row in the middle
        const QString name = QStringLiteral("eventlist_")
            + QString(file).remove(QStringLiteral(".pickle")).remove(QStringLiteral(".xz"));
        QVERIFY(test::saveScreenshot(view, name, QSize(1200, 700)));
        const QImage image = view.grab().toImage();
        QVERIFY2(distinctColours(image) > 8, qPrintable(name));
    }

    // Throwaway measurements for the report (MEMSCOPE_TIMINGS=1); never asserts on time.
    void timings()
    {
        if (qEnvironmentVariableIsEmpty("MEMSCOPE_TIMINGS"))
            QSKIP("set MEMSCOPE_TIMINGS=1 to print timings");
        auto measure = [](const char* what, std::shared_ptr<const Document> doc) {
            Session s(doc);
            QElapsedTimer t;
            t.start();
            EventListView view(&s);
            QVERIFY(showReady(view, QSize(1200, 700)));
            qInfo("%s: %lld entries; first population (versions + identity rows) incl. show: %lld ms", what,
                  qlonglong(view.model()->rowCount()), qlonglong(t.elapsed()));
            EventListModel& model = *view.model();
            std::mt19937 rng(1);
            std::uniform_int_distribution<int> pick(0, model.rowCount() - 1);
            constexpr int Rows = 100'000;
            t.restart();
            qsizetype chars = 0;
            for (int i = 0; i < Rows; ++i) {
                const int r = pick(rng);
                for (int c = 0; c < EventListModel::ColumnCount; ++c)
                    chars += model.data(model.index(r, c)).toString().size();
            }
            qInfo("%s: data(DisplayRole) of all 7 columns: %.2f us per row (%lld chars)", what,
                  double(t.nsecsElapsed()) / 1e3 / Rows, qlonglong(chars));
            QScrollBar* bar = view.scrollBar();
            constexpr int Pages = 200;
            t.restart();
            for (int i = 0; i < Pages; ++i) {
                bar->setValue(int(int64_t(bar->maximum()) * i / Pages));
                view.table()->viewport()->repaint();
            }
            qInfo("%s: scroll + repaint of a 1200x700 table: %.2f ms per page", what,
                  double(t.nsecsElapsed()) / 1e6 / Pages);
            for (const auto& [label, text] :
                 { std::pair { "frame text '.py:'", ".py:" }, std::pair { "frame text absent", "zzzz_nothing" } }) {
                EventFilter f;
                f.frameText = text;
                t.restart();
                const size_t matches = filterEntries(s.snapshot(), s.device(), f).size();
                const qint64 pure = t.elapsed();
                t.restart();
                QVERIFY(applyFilter(model, f));
                qInfo("%s: filter (%s): %lld ms in the job, %lld ms from setFilter to rows shown -> %zu rows", what,
                      label, qlonglong(pure), qlonglong(t.elapsed()), matches);
            }
            EventFilter sizes;
            sizes.actions = EventFilter::bit(Action::Alloc);
            sizes.minSize = 4096;
            t.restart();
            const size_t matches = filterEntries(s.snapshot(), s.device(), sizes).size();
            const qint64 pure = t.elapsed();
            t.restart();
            QVERIFY(applyFilter(model, sizes));
            qInfo("%s: filter (alloc >= 4 KiB): %lld ms in the job, %lld ms from setFilter to rows shown -> %zu rows",
                  what, qlonglong(pure), qlonglong(t.elapsed()), matches);
            t.restart();
            s.setCursor(s.entryCount() / 3);
            qInfo("%s: cursor -> select + scroll: %.3f ms", what, double(t.nsecsElapsed()) / 1e6);
        };
        measure("big_trace", document("big_trace.pickle.xz"));
        // ~10 M entries: big_trace repeated (tests/benchmarks/synthetic.h).
        QElapsedTimer t;
        t.start();
        auto big = bench::repeated(bench::bigTrace(), 30, bench::Survivors::Freed);
        big->streams = bench::bigTrace().streams;
        auto doc = makeDocument(QStringLiteral("synthetic"), std::shared_ptr<const model::Snapshot>(std::move(big)));
        qInfo("synthetic: built + replayed in %lld ms", qlonglong(t.elapsed()));
        measure("synthetic 10M", doc);
    }
};

QTEST_MAIN(TestEventList)
#include "tst_eventlist.moc"
